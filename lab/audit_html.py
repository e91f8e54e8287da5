"""The audit as one self-contained HTML page: ``python -m lab audit ... --html PATH``.

The same sections as the text report (``lab.audit.report_sections``): the five-line summary first, every table a
real HTML table with column and row headers (``lab.tables``), and two figures a practitioner would rather look at,
each an inline PNG with alt text written from its data (``lab.plots.shown``, ``lab.alt_text``) in the lab's
palette: the SQNR against FP32 along the graph (QDQ models) and the steps each weight's channels use. Written as
any file is, so its mode follows the umask.
"""
from __future__ import annotations

from html import escape
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from lab import alt_text, audit, palette, plots, tables

STYLE = ("body{font-family:system-ui,sans-serif;max-width:72em;margin:1em auto;padding:0 1em;color:#111}"
         "table.lab-table{border-collapse:collapse;margin:0.5em 0 1em}"
         "table.lab-table th,table.lab-table td{border:1px solid #bbb;padding:0.2em 0.5em}"
         "thead th{background:#eee}ul.summary li{margin:0.2em 0}")


def sqnr_figure(rows: list[dict], threshold: float) -> Figure | None:
    """Each tensor's SQNR against FP32 (dB) in graph order, the parting threshold marked; None without rows."""
    points = [(k, r["tensor"], r["vs_fp32_db"]) for k, r in enumerate(rows)
              if r["vs_fp32_db"] is not None and np.isfinite(r["vs_fp32_db"])]
    if not points:
        return None
    x, names, y = (np.array([p[i] for p in points]) for i in range(3))
    fig = Figure(figsize=(8.6, 4.0))
    ax = fig.subplots()
    ax.plot(x, y, **palette.style("QDQ"), ms=4, lw=1.3, label="SQNR against FP32")
    ax.axhline(threshold, color=palette.ALERT, ls=":", lw=1.2,
               label=f"{threshold:g} dB: the error is 10% of the signal")
    low = int(np.argmin(y))
    side = "right" if x[low] > 0.6 * x.max() else "left" if x[low] < 0.4 * x.max() else "center"
    ax.annotate(str(names[low]), (x[low], y[low]), xytext=(0, -14), textcoords="offset points", ha=side,
                fontsize=9, color=palette.NEUTRAL)   # inside the axes wherever the lowest point falls
    ax.set_ylim(min(0.0, float(y.min()) - 5), float(y.max()) + 5)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("tensor, in graph order (position)")
    ax.set_ylabel("SQNR against FP32 (dB)")
    ax.set_title("Where INT8 parts from FP32: SQNR along the graph", fontsize=11, y=1.0)
    ax.grid(alpha=0.3)
    ax.legend(loc="upper right", fontsize=8, frameon=False)
    below = [str(n) for n, v in zip(names, y) if v < threshold]
    said = (f"SQNR against FP32 of {len(y)} tensors in graph order, from {y[0]:.1f} dB at {names[0]} to "
            f"{y[-1]:.1f} dB at {names[-1]}; the lowest {y[low]:.1f} dB at {names[low]} (position {x[low]}). "
            + (f"{len(below)} below {threshold:g} dB: {', '.join(below[:5])}" + (" and more." if len(below) > 5
                                                                                 else ".")
               if below else f"Every tensor stays above {threshold:g} dB."))
    return alt_text.attach(plots.fixed_margins(fig, left=0.8, right=0.2, bottom=0.6, top=0.4), said)


def weight_figure(rows: list[dict]) -> Figure | None:
    """Grid steps each weight's median and worst channel use, in graph order; None without weights."""
    if not rows:
        return None
    ordered = sorted(rows, key=lambda r: r["position"])
    x = np.arange(len(ordered))
    median = np.array([r["steps_median"] for r in ordered])
    worst = np.array([r["steps_worst"] for r in ordered])
    steps = max(r["steps"] for r in ordered)
    fig = Figure(figsize=(8.6, 4.3))
    ax = fig.subplots()
    ax.plot(x, median, **palette.style("median", 0), ms=4, lw=1.2, label="median channel")
    ax.plot(x, worst, **palette.style("worst", 1), ms=4, lw=1.2, label="worst channel")
    ax.axhline(steps, color=palette.NEUTRAL, ls=":", lw=1.0, label=f"the grid's {steps} steps")
    for k, r in enumerate(ordered):
        if r["paid"]:
            ax.annotate(f"{r['weight']}: outlier {r['outlier_ratio']:.1f}x", (k, r["steps_median"]),
                        xytext=(0, -14), textcoords="offset points", fontsize=8, color=palette.ALERT,
                        ha="right" if k > 0.6 * x.max() else "left" if k < 0.4 * x.max() else "center")
    ax.set_ylim(0, steps * 1.12)
    ax.set_xlim(-0.5, len(ordered) - 0.5)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))
    ax.set_xlabel("quantized weight, in graph order (position)")
    ax.set_ylabel("grid steps used by a channel")
    ax.set_title("Weight rulers: steps each weight's channels use", fontsize=11, y=1.0)
    ax.grid(alpha=0.3)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.16), fontsize=8, frameon=False, ncol=3)
    w = int(np.argmin(worst))
    paid = [r["weight"] for r in ordered if r["paid"]]
    kinds = sorted({"per-channel" if r["per_channel"] else "per-tensor" for r in ordered})
    said = (f"Grid steps used by the channels of {len(ordered)} {' and '.join(kinds)} weights, of {steps}: the median "
            f"channel uses from {median.min()} to {median.max()}; the worst channel of any weight uses {worst[w]}, "
            f"in {ordered[w]['weight']}. "
            + (f"{len(paid)} weight(s) stretch one per-tensor scale for an outlier channel: {', '.join(paid[:5])}."
               if paid else "No per-tensor scale pays for an outlier channel."))
    return alt_text.attach(plots.fixed_margins(fig, left=0.8, right=0.2, bottom=0.9, top=0.4), said)


def _item(item) -> str:
    if isinstance(item, tables.Table):
        return item._repr_html_()
    return f"<p>{escape(str(item).strip())}</p>"


def html(doc: dict) -> str:
    """The audit as an HTML page: summary, figures, then every section of the text report."""
    sections = audit.report_sections(doc)
    title, summary = sections[0][0], doc["summary"]["lines"]
    figures = [f for f in (sqnr_figure(doc["parting"]["rows"], doc["parting"].get("threshold_db", audit.PARTING_DB)),
                           weight_figure(doc["weight_rulers"])) if f is not None]
    body = [f"<h1>{escape(title)}</h1>", "<h2>Summary</h2>",
            '<ul class="summary">' + "".join(f"<li>{escape(line)}</li>" for line in summary) + "</ul>"]
    if figures:
        body += ["<h2>Figures</h2>", *(plots.shown(f).html() for f in figures)]
    for section in sections[1:]:
        body.append(f"<section><h2>{escape(section[0].rstrip(':'))}</h2>"
                    + "".join(_item(i) for i in section[1:]) + "</section>")
    return ('<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f"<title>{escape(title)}</title><style>{STYLE}</style></head><body>\n"
            + "\n".join(body) + "\n</body></html>\n")


def write(doc: dict, path: str | Path) -> Path:
    """``html(doc)`` written to ``path`` (its mode from the umask, as any new file)."""
    path = Path(path)
    path.write_text(html(doc), encoding="utf-8")
    return path
