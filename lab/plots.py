"""Figures for lessons 03-05. Pure: each takes arrays or rows and returns a matplotlib Figure."""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from lab.ruler import round_trip

COLORS = {"narrow": "tab:orange", "right": "tab:green", "wide": "tab:blue",
          "QDQ": "tab:purple", "QOperator": "tab:brown"}
FLOOR = 1e-5  # errors below this are drawn at this height on a log axis


def _color(name: str, i: int) -> str:
    return COLORS.get(name, f"C{i}")


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


MARKERS = {"narrow": "o", "right": "s", "wide": "^"}
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
    error can be compared from one tensor to the next.
    """
    fig = Figure(figsize=(5.8 * len(panels), 4.9), layout="constrained")
    axes = fig.subplots(1, len(panels), squeeze=False, sharey=True)[0]
    highest = FLOOR
    for ax, panel in zip(axes, panels):
        top = float(np.max(panel["values"]))
        for i, (name, ruler) in enumerate(panel["rulers"].items()):
            color = _color(name, i)
            centres, err = binned_round_trip_error(panel["values"], ruler)
            highest = max(highest, float(err.max()))
            ax.plot(centres, np.maximum(err, FLOOR), marker=MARKERS.get(name, "o"), ms=4.5, lw=1.4,
                    mfc="none" if name in HOLLOW else color, mew=1.3,
                    color=color, zorder=3, label=f"{name} ruler (scale {ruler.scale:.3g})")
            end = ruler.interval[1]
            ax.hlines(ruler.scale / 4, 0, min(end, top), color=color, ls="--", lw=1.0, alpha=0.8, zorder=2)
            if end < top:
                ax.axvline(end, color=color, ls=":", lw=1.2)
                ax.text(end, 0.97, f"{name} ruler ends ", rotation=90, fontsize=9, color=color,
                        ha="right", va="top", transform=ax.get_xaxis_transform())
        if panel.get("note"):
            ax.text(0.98, 0.97, panel["note"], transform=ax.transAxes, fontsize=9, va="top", ha="right", multialignment="left",
                    bbox=dict(boxstyle="round", facecolor="white", edgecolor="0.8", alpha=0.9))
        ax.set_yscale("log")
        ax.set_title(panel["title"], fontsize=11)
        ax.set_xlabel(panel["xlabel"])
        ax.grid(alpha=0.3)
    axes[0].set_ylim(FLOOR / 2, highest * 80)  # headroom above the data for the notes
    _error_ticks(axes[0], highest * 80)
    axes[0].set_ylabel("mean round-trip error |x̂ − x|  (log)")
    handles, labels = axes[0].get_legend_handles_labels()
    handles.append(Line2D([], [], color="0.3", ls="--", lw=1.0))
    labels.append("scale/4 of each ruler: its mean error when values fall anywhere between marks")
    fig.legend(handles, labels, loc="outside lower center", ncol=2, fontsize=9, frameon=False)
    fig.suptitle("Round-trip error by value: clipping grows past the ruler's end, squashing is coarse everywhere")
    return fig


def growth_figure(rows: Sequence[Mapping], deployed_range: float = 1.0) -> Figure:
    """Range seen and max abs error against the number of calibration batches (log2 axis), one line per set."""
    fig = Figure(figsize=(11, 4.2), layout="constrained")
    ax_range, ax_err = fig.subplots(1, 2)
    kinds = list(dict.fromkeys(r["kind"] for r in rows))
    for i, kind in enumerate(kinds):
        mine = sorted((r for r in rows if r["kind"] == kind), key=lambda r: r["batches"])
        n = [r["batches"] for r in mine]
        style = dict(marker="o", ms=5, lw=1.5, color=_color(kind, i), label=f"{kind} data")
        ax_range.plot(n, [r["range_seen"] for r in mine], **style)
        ax_err.plot(n, [r["max_abs_error"] for r in mine], **style)
    ax_range.axhline(deployed_range, color="grey", ls="--", lw=1)
    ax_range.annotate("deployed pixels span this", (1, deployed_range), xytext=(0, -12),
                      textcoords="offset points", fontsize=8, color="grey")
    ax_range.set_ylim(0, deployed_range * 1.15)
    ax_range.set_title("Input range seen (scale x 255)")
    ax_range.set_ylabel("range seen")
    ax_err.set_title("Max abs error on the evaluation set")
    ax_err.set_ylabel("max |INT8 - FP32| probability")
    ax_err.set_ylim(0, 1.05)
    ticks = sorted({r["batches"] for r in rows})
    for ax in (ax_range, ax_err):
        ax.set_xscale("log", base=2)
        ax.set_xticks(ticks, [str(t) for t in ticks])
        ax.minorticks_off()
        ax.set_xlabel("calibration batches")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=9)
    fig.suptitle("More batches of the wrong data do not widen the ruler")
    return fig


def difference_histogram(a: np.ndarray, b: np.ndarray, step: float, names: tuple[str, str] = ("QDQ", "QOperator")) -> Figure:
    """Histogram of ``b - a`` over every output element, with one and two output-grid steps marked."""
    d = (np.asarray(b, np.float64) - np.asarray(a, np.float64)).ravel()
    fig = Figure(figsize=(8, 4), layout="constrained")
    ax = fig.subplots()
    reach = max(float(np.abs(d).max()), 3 * step)
    ax.hist(d, bins=np.linspace(-reach, reach, 81), color="tab:gray", edgecolor="white")
    ax.set_yscale("log")
    for s in (-step, step):
        ax.axvline(s, color="tab:red", ls=":", lw=1.2)
    for s in (-2 * step, 2 * step):
        ax.axvline(s, color="tab:red", ls="--", lw=1)
    ax.text(step, 0.97, f"  one output step ({step:.4f})", fontsize=8, color="tab:red", ha="left", va="top",
            transform=ax.get_xaxis_transform())
    ax.text(2 * step, 0.88, "  two steps: the grids alone", fontsize=8, color="tab:red", ha="left", va="top",
            transform=ax.get_xaxis_transform())
    ax.set_title(f"{names[1]} - {names[0]}, every output probability ({d.size} elements)")
    ax.set_xlabel("difference in probability")
    ax.set_ylabel("elements (log scale)")
    ax.grid(alpha=0.3)
    return fig
