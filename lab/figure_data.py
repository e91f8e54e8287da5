"""Every figure's data as a table, read from what it draws: the numbers behind the picture, for a screen reader (a
table it can walk cell by cell), a spreadsheet (the CSV) or a printout.

``table(fig)`` reads each panel's named lines and points, its bars (each with its category), a histogram's bins
(from its outline), and a small image's values (a confusion matrix; a larger one is a picture, not data); a figure
function may give its own rows instead with ``attach`` (lesson 00's digit grid: each digit's label and what the
model read). ``lab.plots.shown`` puts the table under the figure's caption, the CSV as a download link beside it.
Pure: nothing here draws.
"""
from __future__ import annotations

import csv
import io
import re
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape
from urllib.parse import quote

import numpy as np

from lab import alt_text, tables

ATTRIBUTE = "lab_data"  # where ``attach`` keeps a figure function's own rows on the Figure: (headings, rows)
COLUMNS = ("series", "panel", "x", "to", "y", "value")  # a row's fields, in this order, the empty ones left out
MAX_IMAGE_VALUES = 400   # an image with more values than this is a picture (a digit grid), not a table of data
SHOWN_ROWS = 60          # rows in the table under a figure; the CSV holds every one


@dataclass(frozen=True)
class Table:
    """A figure's data: headings and rows of text, the first column naming each row's series."""

    name: str
    headings: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]

    def csv(self) -> str:
        out = io.StringIO()
        csv.writer(out, lineterminator="\n").writerows([self.headings, *self.rows])
        return out.getvalue()

    def html(self) -> str:
        """A ``<details>`` under the caption: the data as a table (the first ``SHOWN_ROWS`` rows) and the CSV."""
        shown = self.rows[:SHOWN_ROWS]
        right = [h not in ("series", "panel") for h in self.headings]
        more = f", the first {len(shown)} shown here" if len(self.rows) > len(shown) else ""
        link = (f'<a download="{escape(self.name)}.csv" href="data:text/csv;charset=utf-8,{quote(self.csv())}">'
                f"{escape(self.name)}.csv</a>")
        return (f"<details><summary>The figure's data ({len(self.rows)} rows{more})</summary><p>Download: {link}"
                f"</p>{tables.html_table(self.headings, shown, right)}</details>")


def attach(fig, headings: Sequence[str], rows: Sequence[Sequence]):
    """Give ``fig`` its own data table (the rows a figure function knows better than its artists); returns ``fig``."""
    setattr(fig, ATTRIBUTE, (tuple(headings), [tuple(r) for r in rows]))
    return fig


def _lines(ax) -> list[dict]:
    return [{"series": line.get_label(), "x": x, "y": y} for line in ax.lines if alt_text.named(line.get_label())
            for x, y in zip(line.get_xdata(orig=True), line.get_ydata(orig=True))]


def _points(ax) -> list[dict]:
    return [{"series": c.get_label(), "x": x, "y": y} for c in ax.collections if alt_text.named(c.get_label())
            and hasattr(c, "get_offsets") for x, y in np.asarray(c.get_offsets())]


def _bars(ax) -> list[dict]:
    from matplotlib.container import BarContainer  # deferred: only a figure being read needs matplotlib

    rows = []
    for c in ax.containers:
        if isinstance(c, BarContainer) and c.patches:
            centres = np.array([b.get_x() + b.get_width() / 2 for b in c.patches])
            label = str(c.get_label() or "")
            label = label if alt_text.named(label) else "bars"
            rows += [{"series": label, "x": x, "y": b.get_height()}
                     for x, b in zip(alt_text.tick_names(ax, centres), c.patches)]
    return rows


def _histograms(ax) -> list[dict]:
    """Each step outline's bins, from its horizontal edges: (from, to, height)."""
    from matplotlib.patches import Polygon  # deferred: as in _bars

    rows = []
    for k, patch in enumerate(p for p in ax.patches if isinstance(p, Polygon) and p.get_transform() == ax.transData):
        xy = np.asarray(patch.get_xy(), dtype=np.float64)
        label = str(patch.get_label() or "")
        label = label if alt_text.named(label) else f"histogram {k + 1}"
        rows += [{"series": label, "x": a[0], "to": b[0], "y": a[1]} for a, b in zip(xy[:-1], xy[1:])
                 if a[1] == b[1] and b[0] > a[0] and a[1] > 0]
    return rows


def _images(ax) -> list[dict]:
    rows = []
    for image in ax.images:
        a = np.asarray(image.get_array(), dtype=np.float64)
        if a.ndim == 2 and a.size <= MAX_IMAGE_VALUES:
            rows += [{"series": "image", "x": j, "y": i, "value": a[i, j]} for i in range(a.shape[0])
                     for j in range(a.shape[1])]
    return rows


READERS = (_lines, _points, _bars, _histograms, _images)  # what a panel draws, in reading order


def _text(value) -> str:
    return value if isinstance(value, str) else alt_text.number(value)


def file_name(caption: str) -> str:
    """The CSV's name from the figure's caption: lower-case words joined by '-'."""
    return re.sub(r"[^a-z0-9]+", "-", caption.lower()).strip("-")[:60].rstrip("-") or "figure"


def table(fig, name: str) -> Table:
    """``fig``'s data, named ``name``: the rows its function attached, else every panel's, read by ``READERS``."""
    own = getattr(fig, ATTRIBUTE, None)
    if own is not None:
        return Table(name, own[0], tuple(tuple(_text(v) for v in r) for r in own[1]))
    axes = alt_text.drawn_axes(fig)
    found = []
    for k, ax in enumerate(axes, 1):
        title = next((t for loc in ("center", "left", "right") if (t := ax.get_title(loc=loc).strip())),
                     f"panel {k}").replace("\n", " ")
        found += [dict(r, panel=title) for read in READERS for r in read(ax)]
    columns = [c for c in COLUMNS if any(c in r for r in found) and (c != "panel" or len(axes) > 1)]
    return Table(name, tuple(_heading(c, axes) for c in columns),
                 tuple(tuple(_text(r.get(c, "")) for c in columns) for r in found))


def _heading(column: str, axes: list) -> str:
    """``x`` and ``y`` named by their axis label when every panel has the same one (``x: predicted``)."""
    if column not in ("x", "y"):
        return column
    labels = {(ax.get_xlabel() if column == "x" else ax.get_ylabel()).replace("\n", " ").strip() for ax in axes}
    return f"{column}: {labels.pop()}" if len(labels) == 1 and "" not in labels else column
