"""Text alternatives for the lessons' figures, written from the data each figure draws (WCAG 2.1 1.1.1).

``describe(fig)`` reads what a matplotlib Figure holds: its titles, each panel's axis labels and scales, every
named line, set of points and group of bars with the numbers that matter (its extremes and where they fall, or
every value when there are few), images with their value range, and the words drawn on the panel. A figure function
may put its own summary first with ``attach`` (lesson 00's digit grid does: the digits and what the model read are
its content). ``lab.plots.shown`` turns the result into the ``alt`` text and caption of the picture.

Pure: nothing here draws; each describer takes an artist and returns a sentence, and ``DESCRIBERS`` maps the kind of
artist to its describer (rules as data).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

ATTRIBUTE = "lab_description"  # where ``attach`` keeps a figure function's own summary on the Figure: (text, alone)
ALL_VALUES = 8                 # a series with at most this many points is read out in full
MAX_TEXTS = 60                 # words drawn on one panel read out, at most


@dataclass(frozen=True)
class Description:
    """What a figure shows, in words: ``caption`` is one line (the title), ``alt`` the data in sentences."""

    caption: str
    alt: str

    def text(self) -> str:
        """Both, for a terminal and for a notebook's ``text/plain``."""
        return f"Figure: {self.caption}\n{self.alt}"


def attach(fig, summary: str, alone: bool = False):
    """Put ``summary`` (sentences a figure function writes from its data) first in ``fig``'s description, or in its
    place when ``alone`` (the summary already says all the panels hold); returns ``fig``."""
    setattr(fig, ATTRIBUTE, (summary, alone))
    return fig


def number(value) -> str:
    """A value as a reader needs it: three significant digits, or the category's name."""
    if isinstance(value, (str, np.str_)):
        return str(value)
    v = float(value)
    if not np.isfinite(v):
        return "none"
    return f"{int(v)}" if v.is_integer() and abs(v) < 1e6 else f"{v:.3g}"


def _finite(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    ys = np.asarray(y, dtype=np.float64)
    keep = np.isfinite(ys)
    return np.asarray(x, dtype=object)[keep], ys[keep]


def series(name: str, x: Sequence | np.ndarray, y: Sequence | np.ndarray) -> str:
    """A named series: every (x, y) when there are few, else its count, x span and extremes with where they fall."""
    xs, ys = _finite(np.asarray(x, dtype=object), np.asarray(y, dtype=object).astype(np.float64))
    if not len(ys):
        return f"{name}: no values"
    if len(ys) <= ALL_VALUES:
        return f"{name}: " + ", ".join(f"{number(a)} → {number(b)}" for a, b in zip(xs, ys))
    lo, hi = int(np.argmin(ys)), int(np.argmax(ys))
    return (f"{name}: {len(ys)} points, x from {number(xs[0])} to {number(xs[-1])}; lowest {number(ys[lo])} at "
            f"{number(xs[lo])}, highest {number(ys[hi])} at {number(xs[hi])}")


def named(label: str) -> bool:
    return bool(label) and not label.startswith("_")


def _line(ax, line) -> str | None:
    """A named line; a reference line (axhline, axvline) as the value it marks."""
    x, y = np.asarray(line.get_xdata(orig=True), dtype=object), np.asarray(line.get_ydata(orig=True), dtype=object)
    label = line.get_label()
    if len(x) == 2 and line.get_transform() != ax.transData:
        if x[0] == x[1]:
            return f"vertical line at x = {number(x[0])}" + (f" ({label})" if named(label) else "")
        if y[0] == y[1]:
            return f"horizontal line at y = {number(y[0])}" + (f" ({label})" if named(label) else "")
    return series(f"line '{label}'", x, y) if named(label) else None


def _points(ax, collection) -> str | None:
    label = collection.get_label()
    xy = np.asarray(collection.get_offsets())
    if not named(label) or not len(xy):
        return None
    order = np.argsort(xy[:, 0], kind="stable")
    return series(f"points '{label}'", xy[order, 0], xy[order, 1])


def _is_number(text: str) -> bool:
    try:
        float(text.replace("\u2212", "-"))
    except ValueError:
        return False
    return True


def tick_names(ax, positions: np.ndarray) -> list:
    """The x tick label nearest each position when the ticks name categories, else the positions themselves."""
    ticks = [(t.get_position()[0], t.get_text()) for t in ax.get_xticklabels() if t.get_text()]
    if not ticks or any(_is_number(text) for _, text in ticks):
        return list(positions)
    where = np.array([p for p, _ in ticks])
    return [ticks[int(np.argmin(np.abs(where - p)))][1] for p in positions]


def _bars(ax, container) -> str | None:
    bars = list(container.patches)
    if not bars:
        return None
    centres = np.array([b.get_x() + b.get_width() / 2 for b in bars])
    heights = np.array([b.get_height() for b in bars])
    label = container.get_label()
    name = f"bars '{label}'" if named(label) else "bars"
    return series(name, tick_names(ax, centres) if len(bars) <= ALL_VALUES else centres, heights)


def _errorbars(ax, container) -> str | None:
    line = container.lines[0]
    if line is None:
        return None
    label = container.get_label()
    return series(f"line '{label}'" if named(label) else "line", line.get_xdata(orig=True),
                  line.get_ydata(orig=True))


def _image(ax, image) -> str:
    a = np.asarray(image.get_array(), dtype=np.float64)
    shape = " x ".join(str(n) for n in a.shape[:2])
    return f"an image of {shape} values from {number(np.nanmin(a))} to {number(np.nanmax(a))}"


def _patch(ax, patch) -> str | None:
    """A histogram's outline as its span and peak; a shaded band (axvspan) as the x range it covers."""
    from matplotlib.patches import Polygon, Rectangle  # deferred: as in _kinds

    label = patch.get_label()
    if not named(label):
        return None
    if isinstance(patch, Polygon) and patch.get_transform() == ax.transData:
        xy = np.asarray(patch.get_xy(), dtype=np.float64)
        filled = xy[xy[:, 1] > 0]
        if not len(filled):
            return f"histogram '{label}': empty"
        peak = int(np.argmax(filled[:, 1]))
        return (f"histogram '{label}': values from {number(filled[:, 0].min())} to {number(filled[:, 0].max())}, "
                f"the tallest bin {number(filled[peak, 1])} at {number(filled[peak, 0])}")
    if isinstance(patch, (Polygon, Rectangle)):
        x = np.asarray(patch.get_xy() if isinstance(patch, Polygon) else
                       [(patch.get_x(), 0), (patch.get_x() + patch.get_width(), 0)], dtype=np.float64)[:, 0]
        return f"shaded band '{label}' from x = {number(x.min())} to {number(x.max())}"
    return f"shaded area '{label}'"


def _kinds() -> list[tuple[type, Callable, str]]:
    """(artist class, describer, where the axes keeps that kind): the rules, in reading order."""
    from matplotlib.collections import PathCollection  # deferred: only a figure being described needs matplotlib
    from matplotlib.container import BarContainer, ErrorbarContainer  # deferred: as above
    from matplotlib.image import AxesImage  # deferred: as above
    from matplotlib.lines import Line2D  # deferred: as above
    from matplotlib.patches import Patch  # deferred: as above

    return [(AxesImage, _image, "images"), (BarContainer, _bars, "containers"),
            (ErrorbarContainer, _errorbars, "containers"), (Line2D, _line, "lines"),
            (PathCollection, _points, "collections"), (Patch, _patch, "patches")]


def _scale(ax, which: str) -> str:
    label = (ax.get_xlabel if which == "x" else ax.get_ylabel)().strip()
    log = " (log scale)" if (ax.get_xscale if which == "x" else ax.get_yscale)() == "log" and "log" not in label \
        else ""
    return f"{which} axis: {label}{log}" if label else ""


def panel(ax) -> str:
    """One panel in sentences: title, axes, every artist a rule describes, then the words drawn on it."""
    covered = {id(a) for c in ax.containers for a in (list(getattr(c, "patches", ())) + list(getattr(c, "lines", ())))
               if a is not None}
    covered |= {id(line) for c in ax.containers for part in getattr(c, "lines", ()) if isinstance(part, tuple)
                for line in part}
    parts = [ax.get_title().replace("\n", " ").strip() or ax.get_title(loc="left").replace("\n", " ").strip()]
    parts += [_scale(ax, "x"), _scale(ax, "y")]
    for kind, describe_one, where in _kinds():
        for artist in getattr(ax, where):
            if isinstance(artist, kind) and id(artist) not in covered:
                parts.append(describe_one(ax, artist) or "")
    texts = [t.get_text().replace("\n", " ").strip() for t in ax.texts if t.get_visible()]
    texts = [t for t in texts if t]
    if texts:
        more = f" and {len(texts) - MAX_TEXTS} more" if len(texts) > MAX_TEXTS else ""
        parts.append("labels on it: " + "; ".join(texts[:MAX_TEXTS]) + more)
    return ". ".join(p for p in parts if p) + "."


def drawn_axes(fig) -> list:
    return [ax for ax in fig.get_axes() if ax.get_visible() and (ax.axison or ax.images or ax.texts)]


def _suptitles(fig) -> list[str]:
    found = [fig._suptitle] + [s._suptitle for s in getattr(fig, "subfigs", ())]  # noqa: SLF001 (no public getter)
    return [t.get_text().replace("\n", " ").strip() for t in found if t is not None and t.get_text().strip()]


def describe(fig) -> Description:
    """``fig`` in words: a caption (its title) and alt text from its data, the figure function's summary first."""
    axes = drawn_axes(fig)
    titles = _suptitles(fig)
    first = next((ax.get_title() or ax.get_title(loc="left") for ax in axes
                  if ax.get_title() or ax.get_title(loc="left")), "")
    caption = titles[0] if titles else first.split("\n")[0].strip() or "a figure"
    count = f"{len(axes)} panels. " if len(axes) > 1 else ""
    own, alone = getattr(fig, ATTRIBUTE, ("", False))
    body = "" if alone else count + " ".join(f"Panel {i}: {panel(ax)}" if len(axes) > 1 else panel(ax)
                                             for i, ax in enumerate(axes, 1))
    return Description(caption, " ".join(p for p in (own, body) if p).strip())
