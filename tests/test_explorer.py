"""The range explorer: its numbers move with the range, the figure shows the ranges, the widget follows the slider."""
import io
import re

import numpy as np
import pytest
from onnx import numpy_helper

from lab import convert, data, graph, variant, workspace
from lab.errors import ModelContractError
from lab.lessons import lesson01_the_ruler as explorer


@pytest.fixture(scope="module")
def pixels():
    return data.load_split("evaluation").pixels


@pytest.fixture(scope="module")
def presets():
    return explorer.calibration_ranges(data.fixture_path("fp32.onnx"), "pixels")


def test_presets_on_the_input_are_the_calibration_sets_ranges(presets):
    assert presets["right"] == (0.0, 1.0)
    assert presets["narrow"] == (0.0, pytest.approx(data.NARROW_GAIN))
    assert presets["wide"] == (0.0, float(data.RAW_MAX))


def test_right_range_clips_nothing_and_narrow_clips_bright_strokes(pixels, presets):
    right = explorer.explore(pixels, *presets["right"])
    narrow = explorer.explore(pixels, *presets["narrow"])
    assert right["clipped_fraction"] == 0.0
    assert right["max_abs_error"] <= right["bound"] + 1e-7
    bright = float((pixels > data.NARROW_GAIN + narrow["scale"] / 2).mean())
    assert narrow["clipped_fraction"] == pytest.approx(bright)
    assert narrow["clipped_fraction"] > 0.1
    assert narrow["max_abs_error"] > 0.5


def test_wide_range_uses_few_steps(pixels, presets):
    wide = explorer.explore(pixels, *presets["wide"])
    right = explorer.explore(pixels, *presets["right"])
    assert wide["steps_used"] <= 255 / 15
    assert right["steps_used"] == 255
    assert wide["scale"] == pytest.approx(16 * right["scale"], rel=1e-6)


def test_numbers_change_as_the_range_moves(pixels):
    stats = [explorer.explore(pixels, 0.0, hi) for hi in (0.2, 0.5, 1.0, 4.0)]
    clipped = [s["clipped_fraction"] for s in stats]
    assert clipped == sorted(clipped, reverse=True) and clipped[0] > clipped[2] == 0.0
    assert len({s["text"] for s in stats}) == 4
    steps = [s["steps_used"] for s in stats]
    assert steps[-1] < steps[-2]


def test_stats_text_has_the_documented_form(pixels):
    text = explorer.explore(pixels, 0.0, 0.25)["text"]
    assert re.match(r"clipped 39\.1% \([\d,]+ of 25,600 values\) · steps used 255/255 · max error ", text), text


def test_hidden_layer_presets_match_the_scales_onnx_runtime_writes(tmp_path):
    work = workspace.make_workspace(tmp_path)
    ranges = explorer.calibration_ranges(work / "source.onnx", "relu1.out", kinds=("right",))
    convert.quantize(work / "source.onnx", work / "right.onnx", data.calibration_set("right"), batch_size=36)
    m = graph.load(work / "right.onnx")
    scale = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}["relu1.out_scale"]
    lo, hi = ranges["right"]
    assert float(scale) == pytest.approx((hi - lo) / 255, rel=1e-6)


def test_layer_values_names_a_missing_tensor(pixels):
    with pytest.raises(ModelContractError, match="fp32.onnx: no tensor named 'relu9'"):
        explorer.layer_values(data.fixture_path("fp32.onnx"), pixels, "relu9")


def test_draw_one_panel_per_range_with_the_numbers_in_the_titles(pixels, presets):
    fig = explorer.draw(pixels, presets, title="pixels")
    axes = fig.get_axes()
    assert len(axes) == 3
    titles = [ax.get_title(loc="left") for ax in axes]
    for (name, _), title in zip(presets.items(), titles):
        assert title.startswith(name)
    assert "clipped 39.1%" in titles[0] and "clipped 0% (none of" in titles[1]
    assert "steps used 16/255" in titles[2]
    # the narrow panel shades the clipped region, the right one does not
    assert len(axes[0].patches) > len(axes[1].patches)
    png = io.BytesIO()
    fig.savefig(png, format="png")
    assert png.getvalue().startswith(b"\x89PNG")


def test_widget_has_stable_classes_and_follows_the_slider(pixels, presets):
    box = explorer.range_explorer(pixels, presets)
    assert "cl-range-explorer" in box._dom_classes
    buttons, slider, stats, _ = box.children
    assert "cl-range-slider" in slider._dom_classes and "cl-range-stats" in stats._dom_classes
    before = stats.value
    assert "clipped 0% (none of" in before
    slider.value = (0.0, 0.25)
    assert stats.value != before and "clipped 39.1%" in stats.value
    assert buttons.value is None
    buttons.value = "wide"
    assert slider.value == presets["wide"] and "steps used 16/255" in stats.value
    assert slider.max >= presets["wide"][1]


def test_slider_track_fits_the_data_and_stretches_only_for_a_far_preset():
    values = explorer.layer_values(data.fixture_path("fp32.onnx"), data.load_split("evaluation").pixels)
    ranges = explorer.calibration_ranges(data.fixture_path("fp32.onnx"))
    buttons, slider, _, _ = explorer.range_explorer(values, ranges).children
    assert slider.max == pytest.approx(explorer.TRACK_TIMES_MAX * values.max())
    buttons.value = "wide"
    assert slider.value == ranges["wide"] and slider.max > ranges["wide"][1]
    buttons.value = "narrow"
    assert slider.value == ranges["narrow"] and slider.max == pytest.approx(explorer.TRACK_TIMES_MAX * values.max())


def test_preset_colours_match_the_later_lessons_figures():
    from lab import plots
    assert {k: plots.COLORS[k] for k in data.KINDS} == explorer.PRESET_COLORS


def test_round_trip_error_separates_clipping_from_squashing(pixels):
    """The lesson 03 figure's numbers: clipping grows with the value, squashing is flat near scale/4,
    and pixels on the 1/16 grid stay far below the wide ruler's scale/4."""
    from types import SimpleNamespace

    import numpy as np

    from lab import plots, ruler

    def on(lo, hi):
        scale, zp = ruler.scale_zero_point(lo, hi, "int8")
        return SimpleNamespace(scale=float(scale), zero_point=zp, dtype="int8",
                               interval=ruler.representable_range(scale, zp, "int8"))

    values = np.linspace(0, 4, 40001, dtype=np.float32)       # continuous, like a hidden layer
    centres, err = plots.binned_round_trip_error(values, on(0, 1), bins=40)
    past = centres > 1.2
    assert err[centres < 0.95].max() < 0.0025                  # inside: at most scale/2
    assert np.all(np.diff(err[past]) > 0)                      # past the end: grows with the value
    assert err[-1] == pytest.approx(4 - 1, abs=0.06)            # ... by the distance to the end

    wide = on(0, 64)
    _, err = plots.binned_round_trip_error(values, wide, bins=10)
    assert np.all(err > wide.scale / 8) and np.all(err < wide.scale / 2 + 1e-6)   # everywhere, around scale/4

    levels = np.arange(17, dtype=np.float32) / 16               # deployed pixels
    _, err = plots.binned_round_trip_error(levels, on(0, 16))
    assert err.max() < on(0, 16).scale / 4 / 3                  # pixels sit almost on wide's marks


def test_round_trip_figure_shares_one_error_axis_and_names_every_ruler(pixels, presets):
    from types import SimpleNamespace

    from lab import plots, ruler

    rulers = {}
    for name, (lo, hi) in presets.items():
        scale, zp = ruler.scale_zero_point(lo, hi, "int8")
        rulers[name] = SimpleNamespace(scale=float(scale), zero_point=zp, dtype="int8",
                                       interval=ruler.representable_range(scale, zp, "int8"))
    fig = plots.round_trip_figure([
        {"title": "pixels", "xlabel": "pixel", "values": pixels, "rulers": rulers, "note": "a note"},
        {"title": "scaled", "xlabel": "value", "values": pixels * 3, "rulers": rulers},
    ])
    left, right = fig.axes
    assert left.get_ylim() == right.get_ylim()
    assert [t.get_text() for t in left.get_yticklabels()][0] == "exact"
    for panel in (left, right):  # each panel names its own rulers with their scales
        labels = [t.get_text() for t in panel.get_legend().get_texts()]
        assert [label.split(",")[0] for label in labels] == list(presets) and all(", scale " in la for la in labels)
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "scale/4" in labels[0] and "ruler ends" in labels[1]
    assert any(t.get_text() == "a note" for t in left.texts)
    assert any("narrow ruler ends" in t.get_text() for t in right.texts)
    fig.savefig(io.BytesIO(), format="png")


def test_the_explorer_names_its_handles_exposes_its_presets_and_announces_results(pixels, presets):
    """What ipywidgets does not say itself (WCAG 4.1.2, 4.1.3), done by the script the explorer displays: the
    handles' names, the presets' pressed state, the stats line as a polite live region that names the range."""
    script = explorer.accessibility_script()
    for selector, name in explorer.ACCESSIBLE_NAMES.items():
        assert selector in script and name in script
    assert "aria-pressed" in script and '"aria-live": "polite"' in script and '"role": "status"' in script
    buttons, slider, stats, _ = explorer.range_explorer(pixels, presets).children
    assert slider.description == "calibration range"
    assert stats.value.startswith("<code>right: range [0.000, 1.000], scale 0.003922 · "
                                  "clipped 0% (none of 25,600 values)")
    slider.value = (0.0, 0.25)
    assert stats.value.startswith("<code>your range: range [0.000, 0.250]")


@pytest.mark.parametrize("student", [None, "s2417093", "q7new"])
def test_the_explorer_can_answer_its_own_questions(student):
    """Lesson 01 asks for the smallest upper end that clips nothing, and how wide the right range can get before
    the max error doubles: a single clipped value must not read as 0 %, and the doubling must lie on the track."""
    variant.activate(student)
    try:
        values = explorer.layer_values(data.fixture_path("fp32.onnx"), data.load_split("evaluation").pixels)
        lo, hi = explorer.calibration_ranges(data.fixture_path("fp32.onnx"))["right"]
    finally:
        variant.activate(None)
    top = float(values.max())
    just_below = explorer.explore(values, lo, 0.99 * top)  # the largest value is past the grid's end
    assert just_below["clipped_count"] >= 1 and "clipped 0%" not in just_below["text"], just_below["text"]
    right = explorer.explore(values, lo, hi)["max_abs_error"]
    track = explorer.slider_span(values, (lo, hi))
    doubled = next(k for k in np.linspace(1, track / hi, 200)
                   if explorer.explore(values, lo, hi * k)["max_abs_error"] >= 2 * right)
    assert hi * doubled < track
