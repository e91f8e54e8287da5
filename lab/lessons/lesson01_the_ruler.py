"""The range explorer: what a calibration range does to real values, as numbers, a figure and a widget.

``explore`` and ``draw`` are pure; ``range_explorer`` is a thin ipywidgets wrapper over them,
so the static figure (papermill, nbval) and the live widget (JupyterLab) show the same thing.
The lesson's prediction (``PREDICTION``: which set clips, which squashes) and its judge live here too.

The module of ``notebooks/01_the_ruler.ipynb``.
"""
from __future__ import annotations

import json
from collections.abc import Mapping
from html import escape
from pathlib import Path

import numpy as np

from lab import data, palette, predictions
from lab.graph import tensor_values
from lab.ruler import dequantize, qrange, quantize, representable_range, ruler_stats

# the same colours and line styles as lessons 03-05's figures (lab.palette), so narrow, right and wide look alike
PRESET_COLORS = {k: palette.COLORS[k] for k in ("narrow", "right", "wide")}
OTHER_COLOR = palette.CYCLE[3]  # a range the student dragged to
CLIP_COLOR = palette.ALERT


def explore(values: np.ndarray, rmin: float, rmax: float, dtype: str = "int8") -> dict:
    """What the calibration range [rmin, rmax] does to ``values``.

    ``lab.ruler.ruler_stats`` (scale, zero point, clipped fraction, steps used, max and mean
    round-trip error, the scale/2 bound) plus the interval the grid covers (``low``, ``high``)
    and a one-line ``text``.
    """
    stats = ruler_stats(values, rmin, rmax, dtype)
    stats["low"], stats["high"] = representable_range(stats["scale"], stats["zero_point"], dtype)
    count = int(np.asarray(values).size)  # clipped: beyond the grid's ends by more than half a step (ruler_stats)
    stats["count"], stats["clipped_count"] = count, int(round(stats["clipped_fraction"] * count))
    stats["text"] = stats_text(stats)
    return stats


def clipped_text(clipped: int, count: int) -> str:
    """``clipped 0.0078% (1 of 12,800 values)``: a single clipped value never reads as 0 %."""
    share = clipped / count if count else 0.0
    pct = "0%" if not clipped else f"{share:.1%}" if share >= 0.001 else f"{100 * share:.2g}%"
    return f"clipped {pct} ({clipped:,} of {count:,} values)" if clipped else f"clipped 0% (none of {count:,} values)"


def stats_text(stats: dict) -> str:
    """``clipped 12.3% (1,574 of 12,800 values) · steps used 64/255 · max error 0.0123 · mean error 0.0012``."""
    if max(stats["rmax"], 0.0) - min(stats["rmin"], 0.0) <= 0:
        return ("empty range: the ruler has no width, so ONNX Runtime falls back to scale 1 "
                "and every value rounds to a whole number · widen the range")
    return (f"{clipped_text(stats['clipped_count'], stats['count'])} · "
            f"steps used {stats['steps_used']}/{stats['steps']} · "
            f"max error {stats['max_abs_error']:.4g} · mean error {stats['mean_abs_error']:.2g}")


def layer_values(model: str | Path, pixels: np.ndarray, tensor: str = "relu1.out") -> np.ndarray:
    """The values of one tensor inside the FP32 model for a batch of pixels; ``"pixels"`` gives the input itself."""
    x = np.asarray(pixels, np.float32)
    return x if tensor == data.INPUT_NAME else tensor_values(model, x, [tensor])[tensor]


def calibration_ranges(model: str | Path, tensor: str = "relu1.out",
                       kinds: tuple[str, ...] = data.KINDS) -> dict[str, tuple[float, float]]:
    """The range a MinMax calibrator records for ``tensor`` with each calibration set.

    The lowest and highest value over the whole set, widened to include 0 as ONNX Runtime does.
    """
    ranges = {}
    for kind in kinds:
        v = layer_values(model, data.calibration_set(kind), tensor)
        ranges[kind] = (min(float(v.min()), 0.0), max(float(v.max()), 0.0))
    return ranges


def _grid(stats: dict, dtype: str) -> np.ndarray:
    qmin, qmax = qrange(dtype)
    return (np.arange(qmin, qmax + 1) - stats["zero_point"]) * np.float32(stats["scale"])


def draw(values: np.ndarray, ranges: dict[str, tuple[float, float]], dtype: str = "int8",
         title: str = "", value_label: str = "value", bins: int = 80):
    """One panel per named range: the values' histogram, the grid, what gets clipped, and the round trip.

    Grey bars: the real values. Coloured outline: the same values after quantize/dequantize
    (clipping piles them up at the edge; squashing leaves a few spikes). Ticks along the bottom:
    the grid steps (a solid band means fine steps). Red band: values the ruler cannot reach.
    Returns a ``matplotlib.figure.Figure`` (not shown by pyplot; display it or save it).
    Drawn cheaply (``lab.plots``): each histogram one filled outline, plain decade labels, fixed margins.
    """
    # deferred: matplotlib takes 1.2 s to import (python -X importtime); only draw() needs it
    from matplotlib.figure import Figure
    from matplotlib.transforms import blended_transform_factory

    from lab.plots import fixed_margins, plain_log_scale  # deferred: lab.plots imports matplotlib, as above

    x = np.asarray(values, np.float32).ravel()
    lo_x, hi_x = min(float(x.min()), 0.0), float(x.max())
    pad = 0.04 * (hi_x - lo_x or 1.0)
    xlim = (lo_x - pad, hi_x + pad)
    edges = np.linspace(xlim[0], xlim[1], bins + 1)
    fig = Figure(figsize=(9, 2.3 * len(ranges) + 0.6))
    axes = fig.subplots(len(ranges), 1, sharex=True, squeeze=False)[:, 0]
    for ax, (name, (rmin, rmax)) in zip(axes, ranges.items()):
        s = explore(x, rmin, rmax, dtype)
        color = PRESET_COLORS.get(name, OTHER_COLOR)
        dash = palette.LINESTYLES.get(name, "-.")
        back = dequantize(quantize(x, s["scale"], s["zero_point"], dtype), s["scale"], s["zero_point"])
        ax.hist(x, bins=edges, histtype="stepfilled", facecolor="0.88", edgecolor=palette.NEUTRAL, linewidth=0.8,
                label="real values")
        ax.hist(back, bins=edges, histtype="step", linewidth=1.6, color=color, linestyle=dash,
                label="after the round trip")
        plain_log_scale(ax)
        above, below = s["high"] + s["scale"] / 2, s["low"] - s["scale"] / 2
        if (x > above).any():
            ax.axvspan(above, xlim[1], color=CLIP_COLOR, alpha=0.12, label=f"clipped: above {s['high']:.3g}")
        if (x < below).any():
            ax.axvspan(xlim[0], below, color=CLIP_COLOR, alpha=0.12, label=f"clipped: below {s['low']:.3g}")
        grid = _grid(s, dtype)
        grid = grid[(grid >= xlim[0]) & (grid <= xlim[1])]
        # one line broken by NaNs, not 256 separate lines: each line is transformed on its own in every draw
        marks = np.column_stack([grid, grid, np.full_like(grid, np.nan)]).ravel()
        ax.plot(marks, np.tile([0.0, 0.07, np.nan], grid.size), color=color, linewidth=0.8,
                transform=blended_transform_factory(ax.transData, ax.transAxes))
        beyond = f" (the ruler runs on to {s['high']:.3g})" if s["high"] > xlim[1] else ""
        ax.set_title(f"{name}: range [{rmin:.3g}, {rmax:.3g}], scale {s['scale']:.3g}{beyond}\n"
                     f"{s['text']}", fontsize=10, loc="left", y=1.0)
        ax.set_ylabel("count (log)")
        ax.legend(loc="upper right", fontsize=8, framealpha=0.9)
    axes[-1].set_xlim(xlim)
    axes[-1].set_xlabel(f"{value_label}   (ticks along the bottom: the grid's steps)")
    if title:
        fig.suptitle(title, fontsize=12)
    return fixed_margins(fig, left=0.75, right=0.15, bottom=0.5, top=0.5 + 0.3 * bool(title), hgap=0.55)


TRACK_TIMES_MAX = 3  # the explorer's track ends at this multiple of the largest value


def slider_span(values: np.ndarray, rng: tuple[float, float]) -> float:
    """Upper end of the slider's track: three times the largest value, or a little past ``rng`` if it reaches further.

    Three times, so the lesson's question "how wide before the max error doubles?" has its answer (about twice the
    right range) inside the track; a track long enough for the wide preset would squeeze the data into a few pixels,
    so the track rescales only when a preset needs it.
    """
    return float(max(TRACK_TIMES_MAX * float(np.max(values)), 1.02 * rng[1]))


# What ipywidgets cannot say itself (WCAG 2.1 4.1.2, 4.1.3): the slider's handles get names, the preset buttons
# their pressed state, and the stats line becomes a polite live region, so a screen reader hears each new result.
# Applied by a script the explorer displays once, which follows the widget as it renders and changes.
ACCESSIBLE_NAMES = {".cl-range-slider .noUi-handle-lower": "lowest value of the calibration range",
                    ".cl-range-slider .noUi-handle-upper": "highest value of the calibration range"}
LIVE_REGION = {"role": "status", "aria-live": "polite", "aria-atomic": "true"}


def accessibility_script(names: Mapping[str, str] = ACCESSIBLE_NAMES, live: Mapping[str, str] = LIVE_REGION) -> str:
    """JavaScript that names the explorer's slider handles, exposes its presets' pressed state and makes its stats
    line a live region, on every explorer on the page, now and whenever one renders or changes."""
    return f"""(() => {{
  const names = {json.dumps(dict(names))}, live = {json.dumps(dict(live))};
  const apply = () => document.querySelectorAll('.cl-range-explorer').forEach(root => {{
    for (const [sel, name] of Object.entries(names))
      root.querySelectorAll(sel).forEach(h => h.getAttribute('aria-label') === name
                                              || h.setAttribute('aria-label', name));
    root.querySelectorAll('.cl-range-presets button').forEach(b => {{
      const on = String(b.classList.contains('mod-active'));
      if (b.getAttribute('aria-pressed') !== on) b.setAttribute('aria-pressed', on);
    }});
    root.querySelectorAll('.cl-range-stats').forEach(s => {{
      for (const [k, v] of Object.entries(live)) if (s.getAttribute(k) !== v) s.setAttribute(k, v);
    }});
  }});
  if (!window.__clRangeExplorerA11y) {{
    window.__clRangeExplorerA11y = new MutationObserver(apply);
    window.__clRangeExplorerA11y.observe(document.body, {{subtree: true, childList: true, attributes: true,
                                                          attributeFilter: ['class']}});
  }}
  apply();
}})();"""


def announcement(name: str, rmin: float, rmax: float, stats: dict) -> str:
    """What the live region says after a change: which range, then its results."""
    return f"{name}: range [{rmin:.3f}, {rmax:.3f}], scale {stats['scale']:.4g} · {stats['text']}"


def range_explorer(values: np.ndarray, presets: dict[str, tuple[float, float]], dtype: str = "int8",
                   value_label: str = "value", start: str = "right"):
    """A widget: drag the calibration range over the values' histogram; the stats and figure follow.

    Preset buttons set the range to each calibration set's; the track spans three times the largest
    value, and stretches when a preset reaches further (see ``slider_span``). CSS classes for tests and styling:
    ``cl-range-explorer`` (the whole widget), ``cl-range-slider``, ``cl-range-presets``,
    ``cl-range-stats``. Operable by keyboard (Tab to a preset or a handle; Space picks a preset, the arrow keys
    move a handle); ``accessibility_script`` names the handles and announces each result.
    """
    # deferred: ipywidgets and IPython take 0.7 s to import; only the interactive widget needs them
    import ipywidgets as w
    from IPython.display import Javascript, display

    from lab.plots import shown  # deferred: lab.plots imports matplotlib, as draw() does

    x = np.asarray(values, np.float32).ravel()
    lowest = min(float(x.min()), 0.0, *(lo for lo, _ in presets.values()))
    first = presets.get(start, (lowest, float(x.max())))
    span = slider_span(x, first)
    slider = w.FloatRangeSlider(value=first, min=lowest, max=span, step=(span - lowest) / 2000,
                                readout_format=".3f", continuous_update=False,
                                description="calibration range", style={"description_width": "initial"},
                                layout=w.Layout(width="95%"))
    slider.add_class("cl-range-slider")
    buttons = w.ToggleButtons(options=list(presets), value=start if start in presets else None,
                              description="preset", tooltips=[f"set the range to the {k} calibration set's"
                                                              for k in presets])
    buttons.add_class("cl-range-presets")
    stats = w.HTML()
    stats.add_class("cl-range-stats")
    out = w.Output()

    def update(*_):
        rmin, rmax = slider.value
        s = explore(x, rmin, rmax, dtype)
        if buttons.value and not np.allclose(presets[buttons.value], slider.value, atol=slider.step):
            buttons.value = None
        name = buttons.value or "your range"
        with out:
            out.clear_output(wait=True)
            display(shown(draw(x, {name: (rmin, rmax)}, dtype, value_label=value_label)))
        # the stats line changes last: once it shows (and announces) the new numbers, the figure already does
        stats.value = f"<code>{escape(announcement(name, rmin, rmax, s))}</code>"

    def pick(change):
        if change["new"] is None:
            return
        lo, hi = presets[change["new"]]
        span = slider_span(x, (lo, hi))
        if span > slider.max:  # widen the track first, so the value is not clamped
            slider.max, slider.step = span, (span - slider.min) / 2000
            slider.value = (lo, hi)
        else:
            slider.value = (lo, hi)
            slider.max, slider.step = span, (span - slider.min) / 2000

    slider.observe(update, names="value")
    buttons.observe(pick, names="value")
    update()
    box = w.VBox([buttons, slider, stats, out])
    box.add_class("cl-range-explorer")
    display(Javascript(accessibility_script()))
    return box


def _clip_or_squash(q: predictions.Question, answer) -> dict:
    answer = q.mapping(answer, '"clips" and "squashes"')
    return {k: q.choice(k, answer.get(k), data.KINDS) for k in ("clips", "squashes")}


PREDICTION = predictions.Question(
    "clip_or_squash", "01", "which calibration set will clip the deployed values, and which will squash them",
    '{"clips": "<narrow, right or wide>", "squashes": "<narrow, right or wide>"}', _clip_or_squash)


def judge_clip_or_squash(answer, diagnoses: Mapping[str, object]) -> predictions.Verdict:
    """``diagnoses``: kind -> ``compare.Diagnosis`` (or its kind as a string) of each set's input ruler."""
    answer = PREDICTION.normalise(answer)
    kind_of = {k: getattr(d, "kind", d) for k, d in diagnoses.items()}
    parts = []
    for field, wanted in (("clips", "clipping"), ("squashes", "squashing")):
        said = answer[field]
        real = [k for k in data.KINDS if kind_of.get(k) == wanted]
        parts.append((kind_of.get(said) == wanted,
                      f"you said {said} {field}; measured, {said}'s ruler is {kind_of.get(said)}"
                      + ("" if kind_of.get(said) == wanted else f" and {' and '.join(real) or 'no set'} is {wanted}")))
    reasons = "; ".join(f"{k}: {getattr(d, 'reason', d)}" for k, d in diagnoses.items())
    return predictions.verdict("clip_or_squash", parts,
                    "a ruler clips when the deployed values reach past its end (the set never held them) and squashes "
                    f"when it is far longer than what deployment feeds it. Measured: {reasons}")
