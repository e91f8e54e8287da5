"""lab.plots' layout helpers and lesson 00's digit grid: what they place where, and what a student reads off them."""
import io

import numpy as np
import pytest
from matplotlib.colors import to_rgba
from matplotlib.figure import Figure
from matplotlib.ticker import NullLocator

from lab import data, palette, plots


def _inches(fig, ax):
    """An axes' box as (left, bottom, right, top) in inches from the figure's lower left corner."""
    w, h = fig.get_size_inches()
    box = ax.get_position()
    return box.x0 * w, box.y0 * h, box.x1 * w, box.y1 * h


@pytest.mark.parametrize("size", [(6, 4), (12, 7)])
def test_fixed_margins_are_the_same_inches_at_every_figure_size(size):
    fig = Figure(figsize=size)
    axes = fig.subplots(2, 3)
    plots.fixed_margins(fig, left=0.7, right=0.2, bottom=0.5, top=0.4, wgap=0.3, hgap=0.6)
    w, h = size
    left, bottom, _, _ = _inches(fig, axes[1, 0])
    _, _, right, top = _inches(fig, axes[0, 2])
    assert (left, bottom) == pytest.approx((0.7, 0.5))
    assert (w - right, h - top) == pytest.approx((0.2, 0.4))
    assert _inches(fig, axes[0, 1])[0] - _inches(fig, axes[0, 0])[2] == pytest.approx(0.3)
    assert _inches(fig, axes[0, 0])[1] - _inches(fig, axes[1, 0])[3] == pytest.approx(0.6)
    assert fig.get_layout_engine() is None


def test_plain_log_scale_labels_decades_as_numbers_without_minor_ticks():
    fig = Figure()
    ax = fig.subplots()
    ax.plot([1, 2, 3], [1, 50, 20000])
    plots.plain_log_scale(ax)
    fig.canvas.draw()
    assert ax.get_yscale() == "log"
    assert isinstance(ax.yaxis.get_minor_locator(), NullLocator)
    shown = [t.get_text() for t in ax.get_yticklabels() if 1 <= t.get_position()[1] <= 20000]
    assert shown == ["1", "10", "100", "1000", "10000"]
    plots.plain_log_scale(ax, "x", base=2)
    assert ax.get_xscale() == "log" and isinstance(ax.xaxis.get_minor_locator(), NullLocator)


def test_digit_grid_shows_each_digit_with_its_label_and_reading_red_when_wrong():
    split = data.load_split("evaluation")
    read = split.labels.copy()
    wrong = [3, 17, 40]
    read[wrong] = (read[wrong] + 1) % 10
    groups = [("some digits", list(range(12))), ("misread", wrong), ("none", [])]
    fig = plots.digit_grid_figure(split.raw, split.labels, read, groups, vmax=data.RAW_MAX)
    assert [ax.get_title() for ax in fig.axes] == ["some digits", "misread", "none"]
    first, misread, _ = fig.axes
    assert [t.get_text() for t in first.texts] == [f"{split.labels[i]} → {read[i]}" for i in range(12)]
    red = to_rgba(palette.ALERT)
    assert [to_rgba(t.get_color()) == red for t in first.texts] == [i in wrong for i in range(12)]
    assert all(to_rgba(t.get_color()) == red for t in misread.texts)
    # every digit is in its group's image, pixel for pixel, ten to a row
    mosaic = first.images[0].get_array()
    tiles = [mosaic[y:y + 8, x:x + 8] for y in (4, 16) for x in range(1, 100, 10)]
    for k in range(12):
        np.testing.assert_array_equal(tiles[k], split.raw[k].reshape(8, 8))
    assert all(not tile.any() for tile in tiles[12:])
    png = io.BytesIO()
    fig.savefig(png, format="png", bbox_inches="tight")
    assert png.getvalue().startswith(b"\x89PNG")


def test_a_shown_figure_is_one_png_at_its_own_size_and_closed():
    """plots.shown draws a figure once into a PNG of the figure's own pixel size (margins fixed in inches, nothing
    to crop) and closes it, so the inline backend does not show it a second time."""
    import matplotlib.pyplot as plt

    from lab import speed

    fig = speed.plot_sweep([speed.WidthPoint(w, 64, 1.0, 1.0 / s) for w, s in ((64, 0.8), (256, 1.3), (1024, 2.4))])
    width, height = (int(round(v)) for v in fig.get_size_inches() * fig.dpi)
    image = plots.shown(fig)
    assert image.data[:8] == b"\x89PNG\r\n\x1a\n"
    assert (int.from_bytes(image.data[16:20], "big"), int.from_bytes(image.data[20:24], "big")) == (width, height)
    assert not plt.fignum_exists(fig.number)


def _assert_fits_its_canvas(fig):
    """Nothing drawn past the canvas's edges: ``plots.shown`` shows a figure at its own size, uncropped."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    box = fig.get_tightbbox(FigureCanvasAgg(fig).get_renderer())
    width, height = fig.get_size_inches()
    assert (box.x0, box.y0) >= (-0.01, -0.01) and (box.x1, box.y1) <= (width + 0.01, height + 0.01), \
        f"drawn over x {box.x0:.2f}..{box.x1:.2f}, y {box.y0:.2f}..{box.y1:.2f} on a {width} x {height} in canvas"


@pytest.mark.parametrize("panels", [1, 2])
def test_the_round_trip_figure_fits_its_canvas_with_one_panel_or_two(panels):
    from types import SimpleNamespace

    from lab import ruler

    values = np.linspace(0, 1, 17, dtype=np.float32)
    rulers = {}
    for name, hi in (("narrow", 0.25), ("right", 1.0), ("wide", 16.0)):
        scale, zp = ruler.scale_zero_point(0.0, hi, "uint8")
        rulers[name] = SimpleNamespace(scale=float(scale), zero_point=zp, dtype="uint8",
                                       interval=ruler.representable_range(scale, zp, "uint8"))
    panel = {"title": "Input pixels on the two input rulers: a title as long as a lesson's",
             "xlabel": "pixel value (0, 1/16, ..., 1)", "values": values, "rulers": rulers,
             "note": "two lines\nof note"}
    _assert_fits_its_canvas(plots.round_trip_figure([panel] * panels))


def test_the_digit_grid_and_the_speed_sweep_fit_their_canvas():
    from lab import speed

    split = data.load_split("evaluation")
    _assert_fits_its_canvas(plots.digit_grid_figure(split.raw, split.labels, split.labels,
                                                    [("a group title as long as lesson 00's", list(range(30)))],
                                                    vmax=data.RAW_MAX))
    _assert_fits_its_canvas(speed.plot_sweep([speed.WidthPoint(w, 64, 1.0, 1.0 / s)
                                              for w, s in ((64, 0.8), (256, 1.3), (1024, 2.4))]))


def test_a_figures_data_is_read_from_what_it_draws_bins_bars_lines_and_small_images():
    """``lab.figure_data``: a histogram's bins and counts, bars by category, a named line's points, a 3x2 image's
    values; the table and the CSV hold the same rows."""
    import csv

    from lab import figure_data

    fig = Figure()
    ax1, ax2 = fig.subplots(1, 2)
    ax1.hist([0.5, 1.5, 1.6, 2.5], bins=[0, 1, 2, 3], histtype="step", label="pixels")
    ax1.plot([1, 2], [3, 4], label="fit")
    ax1.set_title("left")
    ax2.bar([0, 1], [7, 2], label="count")
    ax2.set_xticks([0, 1], ["narrow", "wide"])
    ax2.imshow(np.arange(6).reshape(3, 2))
    ax2.set_title("right")
    table = figure_data.table(fig, "two panels")
    assert table.headings == ("series", "panel", "x", "to", "y", "value")
    rows = list(table.rows)
    assert [r[2:5] for r in rows if r[0] == "pixels"] == [("0", "1", "1"), ("1", "2", "2"), ("2", "3", "1")]
    assert ("fit", "left", "2", "", "4", "") in rows
    assert [(r[2], r[4]) for r in rows if r[0] == "count"] == [("narrow", "7"), ("wide", "2")]
    assert [r[5] for r in rows if r[0] == "image"] == ["0", "1", "2", "3", "4", "5"]
    assert list(csv.reader(io.StringIO(table.csv()))) == [list(table.headings), *map(list, rows)]
    page = table.html()
    assert 'download="two panels.csv"' in page and "<th scope=\"col\"" in page and "(13 rows)" in page


def test_every_shown_figure_carries_its_data(monkeypatch):
    """The digit grid gives its own rows (each digit's label and reading); a figure with many rows shows the first
    ones in its table and every one in its CSV."""
    from lab import figure_data

    images, labels = np.zeros((3, 64)), np.array([1, 2, 3])
    shown = plots.shown(plots.digit_grid_figure(images, labels, np.array([1, 7, 3]), [("first", [0, 1, 2])], 16))
    assert shown.table.headings == ("group", "digit", "true label", "read as")
    assert shown.table.rows[1] == ("first", "2", "2", "7")
    assert "The figure's data (3 rows)" in shown.html()
    fig = Figure()
    fig.subplots().plot(np.arange(100), np.arange(100) ** 2, label="square")
    many = plots.shown(fig)
    assert len(many.table.rows) == 100 and many.table.csv().count("\n") == 101
    assert f"the first {figure_data.SHOWN_ROWS} shown here" in many.html()
