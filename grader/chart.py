"""The class report's figure as SVG text: bar charts drawn by hand, with no plotting library.

The report needs bars, ticks and labels, which the browser draws. matplotlib cost a batch about 0.5 s of CPU to
import while its workers graded and 0.5 s to draw the three panels after the last result, about 5 % of a class
of 100 on two cores. Every text is escaped here; callers pass plain strings. Every bar is also a row of the figure's
data table (``data_table``, under the figure): no number is shown only by a tooltip.
"""
from __future__ import annotations

import html
import math

WIDTH, HEIGHT = 1500, 460
FONT = 'font-family="system-ui,sans-serif"'


def nice_ticks(top: float, most: int = 6) -> list[float]:
    """Tick values 0, s, 2s, ... up to the first at or above ``top``: s is 1, 2, 2.5 or 5 times a power of ten,
    the smallest that needs at most ``most`` steps."""
    top = top if top > 0 else 1.0
    power = 10 ** math.floor(math.log10(top / most))
    step = next(m * power for m in (1, 2, 2.5, 5, 10) if top / (m * power) <= most)
    return [round(i * step, 10) for i in range(math.ceil(top / step - 1e-9) + 1)]


def histogram(values: list[float], top: float, bins: int = 20) -> list[int]:
    """Counts of ``values`` in ``bins`` equal bins over [0, top]; the last bin holds ``top`` itself, values outside
    the range go to the nearest end bin, and a value that is not a finite number is left out."""
    counts = [0] * bins
    for v in values:
        if math.isfinite(v):
            counts[min(max(int(v / top * bins), 0), bins - 1) if top > 0 else 0] += 1
    return counts


def _text(x: float, y: float, text: str, size: int = 12, anchor: str = "middle", extra: str = "") -> str:
    return (f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}" {FONT}{extra}>'
            f"{html.escape(str(text))}</text>")


class Panel:
    """One chart in the figure: a plot area at fractions (left, bottom, width, height) of the figure (``size``
    pixels, the report's first figure by default), an x scale [0, x_top] and a y scale [0, y_top], drawn into
    ``parts``."""

    def __init__(self, rect: tuple[float, float, float, float], x_top: float, y_top: float,
                 size: tuple[float, float] = (WIDTH, HEIGHT)):
        left, bottom, width, height = rect
        self.x0, self.y0 = left * size[0], (1 - bottom) * size[1]
        self.w, self.h = width * size[0], height * size[1]
        self.x_top, self.y_top = x_top or 1.0, y_top or 1.0
        self.parts: list[str] = []
        self.title = ""
        self.rows: list[tuple[str, str, int]] = []  # every bar as (label, the range it covers, count)

    def x(self, v: float) -> float:
        return self.x0 + v / self.x_top * self.w

    def y(self, v: float) -> float:
        return self.y0 - v / self.y_top * self.h

    def bar(self, x0: float, x1: float, y0: float, y1: float, color: str, label: str, count: int,
            span: str = "") -> None:
        """A data rectangle; ``label``, ``span`` (a histogram bin's range) and ``count`` are kept as its tooltip, its
        data attributes and a row of the figure's data table."""
        self.rows.append((label, span, count))
        self.parts.append(f'<rect class="bar" data-label="{html.escape(label)}" data-count="{count}" '
                          f'x="{min(x0, x1):.1f}" y="{min(y0, y1):.1f}" width="{abs(x1 - x0):.1f}" '
                          f'height="{abs(y1 - y0):.1f}" fill="{color}"><title>{html.escape(label)}: {count}</title>'
                          "</rect>")

    def axes(self, title: str, xlabel: str, ylabel: str, x_ticks: list[float], y_ticks: list[float] | None) -> None:
        """The frame, the x ticks (and y ticks, unless None) with their numbers, the title and the axis labels."""
        p = self.parts
        self.title = title
        p.append(f'<rect x="{self.x0:.1f}" y="{self.y0 - self.h:.1f}" width="{self.w:.1f}" height="{self.h:.1f}" '
                 'fill="none" stroke="#333"/>')
        for v in x_ticks:
            p.append(f'<line x1="{self.x(v):.1f}" x2="{self.x(v):.1f}" y1="{self.y0:.1f}" y2="{self.y0 + 4:.1f}" '
                     'stroke="#333"/>')
            p.append(_text(self.x(v), self.y0 + 17, f"{v:g}", 11))
        for v in y_ticks or []:
            p.append(f'<line x1="{self.x0 - 4:.1f}" x2="{self.x0:.1f}" y1="{self.y(v):.1f}" y2="{self.y(v):.1f}" '
                     'stroke="#333"/>')
            p.append(_text(self.x0 - 7, self.y(v) + 4, f"{v:g}", 11, "end"))
        p.append(_text(self.x0 + self.w / 2, self.y0 - self.h - 10, title, 14, extra=' font-weight="600"'))
        p.append(_text(self.x0 + self.w / 2, self.y0 + 36, xlabel))
        if ylabel:
            cx, cy = self.x0 - 38, self.y0 - self.h / 2
            p.append(_text(cx, cy, ylabel, extra=f' transform="rotate(-90 {cx:.1f} {cy:.1f})"'))


def stacked_histogram(rect, title: str, xlabel: str, top: float, stacks: list[tuple[str, str, list[float]]],
                      bins: int = 20, size: tuple[float, float] = (WIDTH, HEIGHT), legend: bool = True) -> Panel:
    """Counts of each stack's values in ``bins`` bins over [0, top], stacked; a legend names each stack and its
    count. ``stacks``: (label, color, values)."""
    counts = [histogram(values, top, bins) for _, _, values in stacks]
    y_ticks = nice_ticks(max((sum(c[i] for c in counts) for i in range(bins)), default=0))
    panel = Panel(rect, top, y_ticks[-1], size)
    for i in range(bins):
        lo, hi, base = i * top / bins, (i + 1) * top / bins, 0
        for (label, color, _), c in zip(stacks, counts):
            if c[i]:
                panel.bar(panel.x(lo), panel.x(hi), panel.y(base), panel.y(base + c[i]), color, label, c[i],
                          f"{lo:g} to {hi:g}")
                base += c[i]
    x_ticks = [t for t in nice_ticks(top) if t <= top * (1 + 1e-9)] or [0]  # none past the frame's end
    panel.axes(title, xlabel, "submissions", x_ticks, y_ticks)
    x = panel.x0
    # the legend, one row under the axis label: no bar is ever hidden by it
    for label, color, values in stacks if legend else ():
        text = f"{label} ({len(values)})"
        panel.parts.append(f'<rect x="{x:.1f}" y="{panel.y0 + 50:.1f}" width="12" height="12" fill="{color}"/>')
        panel.parts.append(_text(x + 16, panel.y0 + 60, text, 11, "start"))
        x += 30 + 6.5 * len(text)
    return panel


def horizontal_bars(rect, title: str, xlabel: str, rows: list[tuple[str, int]], color: str | list[str], empty: str,
                    size: tuple[float, float] = (WIDTH, HEIGHT), x_top: float | None = None) -> Panel:
    """One bar per (label, count), the first row at the top, each label left of its bar; ``empty`` is written in
    the middle when there is no row. ``color``: one for every bar, or one per row; ``x_top``: the scale's end
    (default: a round number at or above the longest bar)."""
    x_ticks = nice_ticks(max((n for _, n in rows), default=0) if x_top is None else x_top)
    panel = Panel(rect, x_ticks[-1], max(len(rows), 1), size)
    colors = color if isinstance(color, list) else [color] * len(rows)
    for k, (label, n) in enumerate(rows):
        top = panel.y(len(rows) - k - 0.1)
        panel.bar(panel.x(0), panel.x(n), top, top + 0.8 * panel.h / panel.y_top, colors[k], label, n)
        panel.parts.append(_text(panel.x0 - 6, top + 0.4 * panel.h / panel.y_top + 4, label, 11, "end"))
    if not rows:
        panel.parts.append(_text(panel.x0 + panel.w / 2, panel.y0 - panel.h / 2, empty))
    panel.axes(title, xlabel, "", x_ticks, None)
    return panel


def svg(panels: list[Panel], label: str, svg_id: str = "figure", size: tuple[float, float] = (WIDTH, HEIGHT)) -> str:
    """A figure: every panel in one ``<svg>`` of ``size`` pixels that scales to its container's width."""
    body = "\n".join(part for panel in panels for part in panel.parts)
    w, h = size
    return (f'<svg id="{html.escape(svg_id)}" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {w:g} {h:g}" '
            f'width="100%" role="img" aria-label="{html.escape(label)}">\n<rect width="{w:g}" height="{h:g}" '
            f'fill="white"/>\n{body}\n</svg>')


def data_table(panels: list[Panel], svg_id: str) -> str:
    """The figure's data, one row a bar (panel, bar, range, count), as a table under it (``<details>``, id
    ``<svg_id>-data``): what a tooltip shows, for a keyboard, a screen reader and a printout."""
    e = html.escape
    rows = "".join(f"<tr><td>{e(p.title)}</td><td>{e(label)}</td><td>{e(span)}</td><td class='n'>{n}</td></tr>"
                   for p in panels for label, span, n in p.rows)
    count = sum(len(p.rows) for p in panels)
    return (f'<details class="figure-data"><summary>The figure\'s data: {count} bar(s) as a table</summary>'
            f'<table id="{e(svg_id)}-data"><thead><tr><th scope="col">panel</th><th scope="col">bar</th>'
            f'<th scope="col">range</th><th scope="col">count</th></tr></thead><tbody>{rows}</tbody></table></details>')
