"""The figures lessons share, and their colours. Pure: each takes arrays or rows and returns a matplotlib Figure.

Every figure a lesson shows goes through ``shown``: an HTML ``<figure>`` whose picture carries alt text written from
the figure's data and a caption (``lab.alt_text``), then the data itself as a table and a CSV (``lab.figure_data``),
in colours safe for colour-vision deficiency, each with a marker or line style too (``lab.palette``).

Lessons 01 and 03 draw the round-trip error by value here, and lesson 00 its grid of digits; a figure one lesson
alone draws lives in that lesson's module (lesson 04's ``growth_figure``, lesson 05's ``difference_histogram``),
with the colours and the two layout helpers from here.

Figures are drawn cheaply. The lessons show each one with ``shown``: drawn once, at its own size (the inline
backend's ``bbox_inches="tight"`` measures a figure in a first draw, then draws it again), so every figure must fit
its canvas, which the tests check. A layout engine would lay a figure out in every draw, and a log axis with minor
ticks and math-text labels ("$10^{2}$") is slow to measure. ``fixed_margins`` places the axes by margins in inches
instead, and ``plain_log_scale`` labels a log axis's decades as plain numbers without minor ticks. Titles are set with
``y=1.0``, their usual place: without it matplotlib measures every axis's tick labels again, three times per
axes in each draw, to see whether the title must move up (it must only for ticks on top).
"""
from __future__ import annotations

import base64
import io
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from html import escape

import numpy as np
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import NullLocator, StrMethodFormatter

from lab import alt_text, figure_data, palette
from lab.ruler import round_trip

COLORS = palette.COLORS   # safe for colour-vision deficiency; each name has a marker and line style too
MARKERS = palette.MARKERS
FLOOR = 1e-5  # errors below this are drawn at this height on a log axis


def fixed_margins(fig, left: float, right: float, bottom: float, top: float,
                  wgap: float = 0.0, hgap: float = 0.0):
    """Place the grids of axes in ``fig`` (a Figure or a SubFigure) by margins and gaps in inches; returns ``fig``.

    In place of a layout engine, which lays the figure out again in every draw: the margins must leave
    room for the tick labels, axis labels, titles and legends drawn outside the axes (the caller knows
    them). ``wgap`` and ``hgap`` are the gaps between columns and between rows of each grid. Each grid
    gets its own parameters, because a SubFigure shares its parent's ``subplots_adjust`` settings.
    """
    width, height = fig.bbox.width / fig.dpi, fig.bbox.height / fig.dpi
    placed = [ax for ax in fig.axes if ax.get_subplotspec() is not None]
    for grid in dict.fromkeys(ax.get_subplotspec().get_gridspec() for ax in placed):
        rows, cols = grid.get_geometry()
        axes_width = (width - left - right - (cols - 1) * wgap) / cols
        axes_height = (height - bottom - top - (rows - 1) * hgap) / rows
        grid.update(left=left / width, right=1 - right / width, bottom=bottom / height, top=1 - top / height,
                    wspace=wgap / axes_width, hspace=hgap / axes_height)
    for ax in placed:
        ax.set_position(ax.get_subplotspec().get_position(fig))
        ax.set_in_layout(True)  # set_position takes an axes out of the tight bounding box; it belongs in it
    return fig


@dataclass(frozen=True)
class Shown:
    """A figure as a notebook shows it: the PNG inside an HTML ``<figure>`` whose ``<img>`` carries alt text written
    from the figure's data and whose ``<figcaption>`` holds its title and the same words, for readers who do not
    see the picture (WCAG 2.1 1.1.1), then the numbers it draws as a table and a CSV (``table``). JupyterLab and
    nbconvert's HTML export both render the HTML; a terminal and ``text/plain`` get the words."""

    data: bytes  # the PNG
    description: alt_text.Description
    width: int   # pixels
    height: int
    table: figure_data.Table

    def html(self) -> str:
        d = self.description
        src = "data:image/png;base64," + base64.b64encode(self.data).decode("ascii")
        return (f'<figure class="lab-figure" style="margin: 0 0 0.5em 0">'
                f'<img src="{src}" alt="{escape(d.alt)}" width="{self.width}" height="{self.height}" '
                f'style="max-width: 100%; height: auto">'
                f"<figcaption>{escape(d.caption)}<details><summary>The figure in words</summary>"
                f"<p>{escape(d.alt)}</p></details>{self.table.html()}</figcaption></figure>")

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict:
        return {"text/html": self.html(), "text/plain": self.description.text()}

    def __repr__(self) -> str:
        return self.description.text()


def shown(fig) -> Shown:
    """``fig`` drawn once into a PNG at its own size, with its description (``lab.alt_text.describe``), shown by
    ``display`` or as a cell's last value; closed so that pyplot does not show it a second time.

    The inline backend shows a figure with ``bbox_inches="tight"``: it draws the whole figure to measure it,
    measures every artist again, then draws it a second time for the picture, about half of a figure's time in
    the kernel. The lessons' figures place their axes by margins in inches (``fixed_margins``): nothing to crop.
    """
    import matplotlib.pyplot as plt  # deferred: 1.8 s to import (python -X importtime); only shown figures need it

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", facecolor=fig.get_facecolor(), edgecolor=fig.get_edgecolor())
    description = alt_text.describe(fig)
    data = figure_data.table(fig, figure_data.file_name(description.caption))
    plt.close(fig)
    png = buffer.getvalue()
    return Shown(png, description, int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big"), data)


def plain_log_scale(ax, which: str = "y", base: float = 10) -> None:
    """A log scale on ``ax``'s ``which`` axis ("x" or "y"), decades labelled as plain numbers, no minor ticks.

    Matplotlib's default labels ("$10^{2}$", set in math text) and its eight minor ticks per decade
    took most of a log figure's drawing time.
    """
    (ax.set_yscale if which == "y" else ax.set_xscale)("log", base=base)
    axis = ax.yaxis if which == "y" else ax.xaxis
    axis.set_minor_locator(NullLocator())
    axis.set_major_formatter(StrMethodFormatter("{x:g}"))


def binned_round_trip_error(values: np.ndarray, ruler, bins: int = 40) -> tuple[np.ndarray, np.ndarray]:
    """Mean round-trip error of ``values`` on ``ruler`` (anything with scale, zero_point, dtype), by value.

    Returns (bin centres, mean absolute error) over ``bins`` equal bins from 0 to the largest value;
    empty bins are left out, so a handful of distinct values gives a handful of points.
    """
    v = np.asarray(values, np.float32).ravel()
    err = np.abs(round_trip(v, ruler.scale, ruler.zero_point, ruler.dtype).astype(np.float64) - v)
    lo, hi = float(min(v.min(), 0.0)), float(v.max())
    edges = np.linspace(lo, hi + (hi - lo) * 1e-6 + 1e-12, bins + 1)
    which = np.clip(np.digitize(v, edges) - 1, 0, bins - 1)
    counts = np.bincount(which, minlength=bins)
    sums = np.bincount(which, weights=err, minlength=bins)
    sums_v = np.bincount(which, weights=v.astype(np.float64), minlength=bins)
    keep = counts > 0
    return sums_v[keep] / counts[keep], sums[keep] / counts[keep]


HOLLOW = {"wide"}  # drawn open, so a ruler with the same errors underneath still shows


def _error_ticks(ax, top: float) -> None:
    """Decimal ticks on a log error axis, with the floor labelled ``exact`` (an error of 0)."""
    ticks = [FLOOR] + [10.0 ** k for k in range(-4, 2) if 10.0 ** k <= top]
    ax.set_yticks(ticks, ["exact"] + [f"{t:g}" for t in ticks[1:]])
    ax.minorticks_off()


def round_trip_figure(panels: Sequence[Mapping]) -> Figure:
    """One panel per tensor: mean round-trip error against value, one line per ruler, on one log axis.

    Each panel is a mapping with ``title``, ``xlabel``, ``values`` (the FP32 values the tensor takes),
    ``rulers`` (name -> ruler with scale, zero_point, dtype and interval) and optionally ``note``
    (a few lines of text drawn in the panel's top-right corner). A dotted line marks where each ruler ends
    if the values go past it; a dashed line at scale/4 marks the mean error of values spread evenly
    between its marks. Clipping: error near 0 up to the ruler's end, then growing with the value.
    Squashing: error around its (large) scale/4 at every value. Values that already sit on the
    marks (pixels k/16) stay far below scale/4. The panels share the error axis, so a ruler's
    error can be compared from one tensor to the next. Margins are fixed in inches (``fixed_margins``).
    """
    fig = Figure(figsize=(max(5.8 * len(panels), 8.6), 5.2))  # one panel still has room for the title and legends
    axes = fig.subplots(1, len(panels), squeeze=False, sharey=True)[0]
    highest = FLOOR
    for ax, panel in zip(axes, panels):
        top = float(np.max(panel["values"]))
        for i, (name, ruler) in enumerate(panel["rulers"].items()):
            # solid curves told apart by colour and marker: dashed and dotted mean scale/4 and a ruler's end here
            look = {**palette.style(name, i), "linestyle": "-"}
            color = look["color"]
            centres, err = binned_round_trip_error(panel["values"], ruler)
            highest = max(highest, float(err.max()))
            ax.plot(centres, np.maximum(err, FLOOR), **look, ms=4.5, lw=1.4,
                    mfc="none" if name in HOLLOW else color, mew=1.3,
                    zorder=3, label=f"{name}, scale {ruler.scale:.3g}")
            end = ruler.interval[1]
            ax.hlines(ruler.scale / 4, 0, min(end, top), color=color, ls="--", lw=1.0, alpha=0.8, zorder=2)
            if end < top:
                ax.axvline(end, color=color, ls=":", lw=1.2)
                ax.text(end, 0.97, f"{name} ruler ends ", rotation=90, fontsize=9, color=color,
                        ha="right", va="top", transform=ax.get_xaxis_transform())
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=3, fontsize=8, frameon=False,
                  handletextpad=0.4, columnspacing=1.0)  # this panel's rulers, under its axis label
        if panel.get("note"):
            ax.text(0.98, 0.97, panel["note"], transform=ax.transAxes, fontsize=9, va="top", ha="right",
                    multialignment="left", bbox=dict(boxstyle="round", facecolor="white", edgecolor="0.8", alpha=0.9))
        ax.set_yscale("log")
        ax.set_title(panel["title"], fontsize=11, y=1.0)
        ax.set_xlabel(panel["xlabel"])
        ax.grid(alpha=0.3)
    axes[0].set_ylim(FLOOR / 2, highest * 80)  # headroom above the data for the notes
    _error_ticks(axes[0], highest * 80)
    axes[0].set_ylabel("mean round-trip error |x̂ − x|  (log)")
    # each panel names its own rulers and scales (the hidden layer's differ from the pixels'); the figure's legend
    # says what the two kinds of line mean in every panel
    handles = [Line2D([], [], color="0.3", ls="--", lw=1.0), Line2D([], [], color="0.3", ls=":", lw=1.2)]
    labels = ["scale/4 of each ruler: its mean error when values fall anywhere between marks",
              "where a ruler ends, in a panel whose values go past it"]
    fig.legend(handles, labels, loc="lower center", ncol=1, fontsize=9, frameon=False)
    fig.suptitle("Round-trip error by value: clipping grows past the ruler's end, squashing is coarse everywhere")
    return fixed_margins(fig, left=0.95, right=0.15, bottom=1.4, top=0.6, wgap=0.2)


def digit_grid_figure(images: np.ndarray, labels: np.ndarray, read: np.ndarray,
                      groups: Sequence[tuple[str, Sequence[int]]], vmax: float, columns: int = 10) -> Figure:
    """Groups of digits, each under its title, ``columns`` to a row; above each digit its true label and what the
    model read ("7 → 1"), red when they differ.

    ``images`` holds the raw 8x8 digits (one per row, 64 values or 8x8), ``labels`` and ``read`` one digit each;
    ``groups`` is (title, indices into images) per group; pixels run from 0 (white) to ``vmax`` (black).
    Each group is one image, a mosaic with gaps, and the labels are text on it: one small axes per digit
    (forty of them, each laid out and drawn twice) took a second to render.
    """
    side, gap, room = 8, 2, 4            # pixels: a digit, the gap between digits, the label's row above one
    width = 10.0                          # inches
    inch = (width - 0.4) / (columns * (side + gap))    # inches per pixel
    title_room, bottom_room = 0.45, 0.1
    rows = [max(1, -(-len(idx) // columns)) for _, idx in groups]
    heights = [n * (side + room) * inch + title_room + bottom_room for n in rows]
    fig = Figure(figsize=(width, sum(heights)))
    top = sum(heights)
    for (title, idx), n, height in zip(groups, rows, heights):
        top -= height
        mosaic = np.zeros((n * (side + room), columns * (side + gap)))
        ax = fig.add_axes((0.2 / width, (top + bottom_room) / sum(heights),
                           1 - 0.4 / width, (height - title_room - bottom_room) / sum(heights)))
        for k, i in enumerate(idx):
            y, x = (k // columns) * (side + room) + room, (k % columns) * (side + gap) + gap // 2
            mosaic[y:y + side, x:x + side] = np.asarray(images[i]).reshape(side, side)
            ax.text(x + side / 2 - 0.5, y - 0.9, f"{labels[i]} → {read[i]}", ha="center", va="bottom", fontsize=10,
                    color="black" if read[i] == labels[i] else palette.ALERT)
        ax.imshow(mosaic, cmap="gray_r", vmin=0, vmax=vmax, interpolation="nearest", aspect="auto")
        ax.axis("off")
        ax.set_title(title, fontsize=11, y=1.0)
    figure_data.attach(fig, ("group", "digit", "true label", "read as"),
                       [(title, k + 1, int(labels[i]), int(read[i]))
                        for title, idx in groups for k, i in enumerate(idx)])
    return alt_text.attach(fig, digit_grid_summary(labels, read, groups), alone=True)


def digit_grid_summary(labels: np.ndarray, read: np.ndarray, groups: Sequence[tuple[str, Sequence[int]]]) -> str:
    """The digit grid in words, group by group: each digit's true label and what the model read, the misreads
    named (the grid's textual equivalent)."""
    out = []
    for title, idx in groups:
        pairs = [(int(labels[i]), int(read[i])) for i in idx]
        wrong = [f"a {a} read as {r}" for a, r in pairs if a != r]
        listed = ", ".join(f"{a} → {r}" for a, r in pairs)
        out.append(f"{title}: {len(pairs)} digits" + (f" (true label → read: {listed})" if pairs else "")
                   + (f"; misread: {', '.join(wrong)}." if wrong else "; every one read right." if pairs else "."))
    return " ".join(out)
