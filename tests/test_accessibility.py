"""WCAG 2.1 AA by construction: every figure's alt text and caption come from its data, the palette keeps 3:1 on
white and stays apart under simulated colour-vision deficiency with a second encoding, tables are real tables."""
import itertools
import re
from html.parser import HTMLParser
from types import SimpleNamespace

import numpy as np
import pytest

from lab import data, palette, plots, ruler, tables

THREE = ("narrow", "right", "wide")


# --- the palette ---------------------------------------------------------------------------------

@pytest.mark.parametrize("color", sorted({*palette.COLORS.values(), *palette.CYCLE, palette.NEUTRAL, palette.ALERT}))
def test_every_mark_colour_reaches_3_to_1_on_the_background(color):
    assert palette.contrast(color) >= palette.MIN_CONTRAST, f"{color}: {palette.contrast(color):.2f}:1 on white"


def test_the_contrast_ratio_is_wcags():
    assert palette.contrast("#000000") == pytest.approx(21.0)
    assert palette.contrast("#ffffff") == pytest.approx(1.0)
    assert palette.contrast("#767676") == pytest.approx(4.54, abs=0.01)  # the lightest grey that passes 4.5:1


@pytest.mark.parametrize("vision", [None, *palette.SIMULATIONS[:2]])
def test_narrow_right_and_wide_stay_apart_under_protanopia_and_deuteranopia(vision):
    """The old orange and green were 4.6 apart (CIE76) for a protanope; the palette keeps 30 or more."""
    assert palette.distance("#ff7f0e", "#2ca02c", "protanopia") < 6  # the old pair, as the issue measured it
    for a, b in itertools.combinations(THREE, 2):
        d = palette.distance(palette.COLORS[a], palette.COLORS[b], vision)
        assert d >= 30, f"{a} vs {b} as {vision or 'typical vision'} sees them: {d:.1f}"


def test_every_colour_distinction_has_a_second_encoding():
    for key in ("marker", "linestyle"):
        named = [palette.style(n)[key] for n in THREE]
        assert len(set(named)) == 3, f"narrow, right and wide share a {key}: {named}"
        assert palette.style("QDQ")[key] != palette.style("QOperator")[key]
        cycled = [str(palette.style(f"series {i}", i)[key]) for i in range(len(palette.CYCLE))]
        assert len(set(cycled)) == len(cycled), f"unnamed series share a {key}: {cycled}"
    assert len(set(palette.HATCHES)) == len(palette.HATCHES)


# --- figures: alt text and caption from the data -------------------------------------------------

class _Figure(HTMLParser):
    """The ``<img>`` attributes and the ``<figcaption>`` text of a shown figure's HTML."""

    def __init__(self):
        super().__init__()
        self.images, self.caption, self._in = [], "", False

    def handle_starttag(self, tag, attrs):
        if tag == "img":
            self.images.append(dict(attrs))
        self._in = self._in or tag == "figcaption"

    def handle_endtag(self, tag):
        self._in = self._in and tag != "figcaption"

    def handle_data(self, text):
        if self._in:
            self.caption += text


def _rulers():
    out = {}
    for name, hi in (("narrow", 0.25), ("right", 1.0), ("wide", 16.0)):
        scale, zp = ruler.scale_zero_point(0.0, hi, "int8")
        out[name] = SimpleNamespace(scale=float(scale), zero_point=zp, dtype="int8",
                                    interval=ruler.representable_range(scale, zp, "int8"))
    return out


def _round_trip():
    return plots.round_trip_figure([{"title": "Input pixels", "xlabel": "pixel value",
                                     "values": np.linspace(0, 1, 17, dtype=np.float32), "rulers": _rulers()}])


def _ruler_panels():
    from lab.lessons import lesson01_the_ruler as lesson01

    values = np.random.default_rng(0).gamma(2.0, 0.5, 2000).astype(np.float32)
    return lesson01.draw(values, {"narrow": (0.0, 0.5), "right": (0.0, 4.0), "wide": (0.0, 16.0)},
                         title="relu1.out under each ruler")


def _growth():
    from lab.lessons import lesson04_more_batches as lesson04

    rows = [{"kind": k, "batches": n, "range_seen": r, "max_abs_error": e}
            for k, r0, e0 in (("narrow", 0.3, 0.6), ("right", 1.0, 0.05)) for n, r, e in
            ((1, r0, e0), (4, r0 * 1.1, e0 * 0.9), (16, r0 * 1.2, e0 * 0.8))]
    return lesson04.growth_figure(rows)


def _difference():
    from lab.lessons import lesson05_qdq_vs_qoperator as lesson05

    a = np.random.default_rng(1).random((50, 10))
    return lesson05.difference_histogram(a, a + np.round(np.random.default_rng(2).normal(0, 1, a.shape)) / 255,
                                         step=1 / 255)


def _confusion():
    from lab.lessons.lesson06_accept_or_reject import acceptance

    return acceptance.confusion_figure({"candidate": (np.eye(10, dtype=int) * 38 + 1).tolist()})


def _weights():
    from lab.lessons.lesson06_accept_or_reject import families

    return families.weights_figure({"bad calibration": data.fixture_path("bad-calibration.onnx")})


def _sqnr():
    from lab.lessons.lesson07_calibrate_the_deployed_representation import debugging

    def rows(d):
        return [debugging.LayerSQNR(t, 40.0 - d * i, 38.0 - d * i)
                for i, t in enumerate(("pixels", "relu1.out", "probabilities"))]
    return debugging.sqnr_figure({"daylight": rows(2), "flash": rows(9)})


def _scenarios():
    from lab.lessons.lesson07_calibrate_the_deployed_representation import scenario_checks as sc

    def result(name, acc):
        return sc.ScenarioResult(name, name, 100, acc, acc - 0.01, 0.01, 1, 0, 0, 0.05, "pass", "", 0.02)
    rows = [result("daylight", 0.97), result("flash", 0.9)]
    return sc.scenario_figure({"daylight only": rows, "daylight + flash": rows})


def _ranges():
    from lab.lessons.lesson08_the_quantization_toolbox import calibrators

    v = np.random.default_rng(3).gamma(2.0, 0.5, 3000)
    return calibrators.plot_ranges({"pixels": v}, {"MinMax": {"pixels": (0.0, float(v.max()))},
                                                   "Percentile": {"pixels": (0.0, 3.0)}}, tensors=("pixels",))


def _samples():
    from lab.lessons.lesson08_the_quantization_toolbox import toolbox

    return toolbox.plot_sample_counts([{"n": n, "max_abs_error": 0.3 / n ** 0.5 + 0.01 * d}
                                       for n in (8, 32, 128) for d in range(3)])


def _sweep():
    from lab import speed

    return speed.plot_sweep([speed.WidthPoint(w, 64, 1.0, 1.0 / s) for w, s in ((64, 0.8), (256, 1.3), (1024, 2.4))])


FIGURES = {"round trip (01, 03, 06)": _round_trip, "ruler panels (01)": _ruler_panels, "growth (04)": _growth,
           "difference (05)": _difference, "confusion (06)": _confusion, "weights (06)": _weights,
           "sqnr (07)": _sqnr, "scenarios (07)": _scenarios, "ranges (08)": _ranges, "sample counts (08)": _samples,
           "sweep (09)": _sweep}


@pytest.mark.parametrize("name", FIGURES)
def test_every_figure_is_shown_with_alt_text_and_a_caption_from_its_data(name):
    shown = plots.shown(FIGURES[name]())
    page = _Figure()
    page.feed(shown._repr_mimebundle_()["text/html"])
    assert len(page.images) == 1 and page.images[0]["src"].startswith("data:image/png;base64,")
    alt = page.images[0].get("alt", "")
    assert len(alt) > 40 and re.search(r"\d", alt), f"{name}: alt text without numbers: {alt!r}"
    assert "No description" not in alt
    assert shown.description.caption and shown.description.caption in page.caption
    assert shown._repr_mimebundle_()["text/plain"].startswith("Figure: ")


def test_alt_text_reads_the_numbers_a_figure_draws():
    alt = plots.shown(_sweep()).description.alt
    assert "64 → 1.25" in alt and "1024 → 0.417" in alt, alt           # every point of a short series
    assert "horizontal line at y = 1" in alt and "crossover: width 256" in alt
    alt = plots.shown(_confusion()).description.alt
    assert "0: 39 of 48" in alt and "actual 0 read as 1 1 times" in alt and "accuracy 0.812" in alt, alt
    alt = plots.shown(_ruler_panels()).description.alt
    assert re.search(r"histogram 'real values': values from [\d.]+ to [\d.]+, the tallest bin \d+", alt), alt
    assert "shaded band 'clipped: above 0.5' from x = 0.50" in alt, alt
    alt = plots.shown(_round_trip()).description.alt
    assert "narrow ruler" in alt and "highest" in alt and "x axis: pixel value" in alt, alt


def test_the_digit_grid_has_a_textual_equivalent_digit_by_digit():
    split = data.load_split("evaluation")
    read = split.labels.copy()
    read[[3, 17]] = (read[[3, 17]] + 1) % 10
    groups = [("twelve digits", list(range(12))), ("misread", [3, 17]), ("none", [])]
    alt = plots.shown(plots.digit_grid_figure(split.raw, split.labels, read, groups, vmax=data.RAW_MAX)) \
        .description.alt
    listed = ", ".join(f"{split.labels[i]} → {read[i]}" for i in range(12))
    assert f"twelve digits: 12 digits (true label → read: {listed})" in alt, alt
    for i in (3, 17):
        assert f"a {split.labels[i]} read as {read[i]}" in alt
    assert "none: 0 digits." in alt


# --- tables ----------------------------------------------------------------------------------------

def test_a_table_is_text_in_a_terminal_and_a_table_with_headers_in_a_notebook():
    table = tables.format_rows([{"set": "narrow", "err": 0.5, "ok": False}, {"set": "right", "err": 0.05}],
                               [("set", "set", ""), ("err", "max abs err", ".3f"), ("ok", "ok <b>", "")])
    assert str(table).splitlines()[0].split() == ["set", "max", "abs", "err", "ok", "<b>"]
    assert str(table).splitlines()[2].split() == ["narrow", "0.500", "no"]
    html = table._repr_html_()
    assert html.count('<th scope="col"') == 3 and "ok &lt;b&gt;" in html
    assert re.search(r'<th scope="row"[^>]*>narrow</th>\s*<td[^>]*>0.500</td>\s*<td[^>]*>no</td>', html), html
    assert "<td" in html and 'style="text-align: right"' in html
    bundle = table._repr_mimebundle_()
    assert bundle["text/plain"] == str(table)
    # what a notebook stores as plain text (nbval, a terminal, a screen reader on the text form): the table, unquoted
    from IPython.core.interactiveshell import InteractiveShell
    shown, _ = InteractiveShell.instance().display_formatter.format(table)
    assert shown["text/plain"] == str(table) and shown["text/html"] == html
