"""The range explorer: its numbers move with the range, the figure shows the ranges, the widget follows the slider."""
import io

import pytest
from onnx import numpy_helper

from lab import data, explorer, graph, quantize, workspace
from lab.errors import ModelContractError


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
    assert text.startswith("clipped 39.1% · steps used 255/255 · max error ")


def test_hidden_layer_presets_match_the_scales_onnx_runtime_writes(tmp_path):
    work = workspace.make_workspace(tmp_path)
    ranges = explorer.calibration_ranges(work / "source.onnx", "relu1.out", kinds=("right",))
    quantize.quantize(work / "source.onnx", work / "right.onnx", data.calibration_set("right"), batch_size=36)
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
    assert "clipped 39.1%" in titles[0] and "clipped 0.0%" in titles[1]
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
    assert "clipped 0.0%" in before
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
    assert slider.max == pytest.approx(2 * values.max())
    buttons.value = "wide"
    assert slider.value == ranges["wide"] and slider.max > ranges["wide"][1]
    buttons.value = "narrow"
    assert slider.value == ranges["narrow"] and slider.max == pytest.approx(2 * values.max())
