"""Lesson 04 (batch growth) and lesson 05 (QDQ vs QOperator), recomputed from the models handed in."""
from __future__ import annotations

import re

import numpy as np

from grader.context import (SOFTMAX_STEP, WHY_OUTPUT, WHY_SCALE, Context, Missing, check, fp32_outputs, number,
                            provenance, value)
from grader.results import Evidence

GROWTH_FILE = re.compile(r"^growth/(narrow|right)-(\d{3})\.onnx$")


def _series(doc: dict) -> list[dict]:
    for key in ("series", "rows", "points", "growth"):
        rows = doc.get(key)
        if isinstance(rows, list):
            return [r for r in rows if isinstance(r, dict)]
        if isinstance(rows, dict):  # {"narrow": [...], "right": [...]}
            return [dict(r, kind=k) for k, v in rows.items() if isinstance(v, list) for r in v if isinstance(r, dict)]
    return []


def _narrow_stream(doc: dict):
    """The narrow stream growth.json names (max batches, batch size, seed), rebuilt; None if it names none."""
    from lab import data

    spec = value(doc, "narrow_stream") or {}
    try:
        n, bs, seed = (int(spec[k]) for k in ("max_batches", "batch_size", "seed"))
        if not (0 < n <= 4096 and 0 < bs <= 1024):
            return None
        return data.narrow_batches(n, bs, seed=seed)
    except (KeyError, TypeError, ValueError):
        return None


def run_growth(ctx: Context) -> list:
    from lab import compare, graph

    doc = ctx.doc("growth.json")
    rows = _series(doc)
    reported = {(str(value(r, "kind", "set", "name")), int(value(r, "batches", "n_batches", "batch_count", default=-1))): r
                for r in rows}
    models = sorted((m.group(1), int(m.group(2))) for rel in ctx.sub.files if (m := GROWTH_FILE.fullmatch(rel)))
    narrow = sorted(n for k, n in models if k == "narrow")
    if not narrow:
        raise Missing("growth/narrow-NNN.onnx")
    picks = sorted({narrow[0], narrow[len(narrow) // 2], narrow[-1]})
    ok_count, msgs, ev = 0, [], []
    stream = _narrow_stream(doc)
    for n in picks:
        rel = f"growth/narrow-{n:03d}.onnx"
        r = graph.input_ruler(ctx.model(rel))
        err = compare.max_abs_error(fp32_outputs(), ctx.outputs(rel))
        rep = reported.get(("narrow", n), {})
        rep_range, rep_err = number(value(rep, "range_seen")), number(value(rep, "max_abs_error", "error"))
        ev += [Evidence(f"narrow x{n} range seen", rep_range, r.range_seen, r.scale / 2, "scale/2: half a grid step"),
               Evidence(f"narrow x{n} max abs error", rep_err, err, SOFTMAX_STEP, WHY_OUTPUT)]
        good = (rep_range is not None and abs(rep_range - r.range_seen) <= r.scale / 2
                and rep_err is not None and abs(rep_err - err) <= SOFTMAX_STEP)
        prov = ""
        if stream is not None:  # the row's calibration hash and count: the first n batches of the narrow stream
            bs = int(value(rep, "batch_size", default=0) or value(doc, "narrow_stream.batch_size", default=0) or 0)
            prov_ok, prov, prov_ev = provenance(f"narrow x{n}", f"the first {n} batches of the narrow stream",
                                                stream[:n * bs], value(rep, "calibration_sha256"),
                                                value(rep, "samples", "calibration_samples"))
            ev += prov_ev
            good = good and prov_ok
        ok_count += good
        msgs.append(f"{n} batches: range {r.range_seen:.4g}, error {err:.4f}" +
                    ("" if good or prov else f" (reported {rep_range}, {rep_err}: not what {rel} gives)")
                    + (f" ({prov})" if prov else ""))
    out = [check("growth", "series", ok_count / len(picks),
                 "recomputed first, middle and last narrow counts: " + "; ".join(msgs), ev)]
    rights = sorted(n for k, n in models if k == "right")
    if rights:
        last = compare.max_abs_error(fp32_outputs(), ctx.outputs(f"growth/narrow-{narrow[-1]:03d}.onnx"))
        right = compare.max_abs_error(fp32_outputs(), ctx.outputs(f"growth/right-{rights[0]:03d}.onnx"))
        ok = last > right
        out.append(check("growth", "lesson_point", float(ok),
                         f"{narrow[-1]} narrow batches: error {last:.4f}; {rights[0]} right batch(es): {right:.4f}"
                         + ("" if ok else ". Expected the right data to win: are the right-NNN models calibrated "
                            "on lab.data.calibration_set('right')?")))
    else:
        out.append(check("growth", "lesson_point", 0, "no growth/right-NNN.onnx: lesson 04 compares with "
                                                      "one or two batches of the right data"))
    return out


def run_formats(ctx: Context) -> list:
    from lab import compare, graph

    doc = ctx.doc("formats.json")
    qdq_rel, qop_rel = "formats/model.qdq.onnx", "formats/model.qoperator.onnx"
    fq, fo = graph.quant_format(ctx.model(qdq_rel)), graph.quant_format(ctx.model(qop_rel))
    out = [check("formats", "two_formats", float(fq == "QDQ" and fo == "QOperator"),
                 f"model.qdq.onnx is {fq}, model.qoperator.onnx is {fo}"
                 + ("" if (fq, fo) == ("QDQ", "QOperator") else "; expected QDQ and QOperator (quant_format=...)"))]
    rq, ro = graph.input_ruler(ctx.model(qdq_rel)), graph.input_ruler(ctx.model(qop_rel))
    rep_q = value(value(doc, "formats") or doc, "QDQ", "qdq") or {}
    rep_o = value(value(doc, "formats") or doc, "QOperator", "qoperator") or {}
    same = rq.scale == ro.scale and rq.zero_point == ro.zero_point
    rep_s = number(value(rep_q, "scale", "input_scale"))
    rep_ok = rep_s is not None and abs(rep_s - rq.scale) <= 1e-6 * rq.scale
    from lab import data

    cal = value(doc, "calibration") or {}
    prov_ok, prov, prov_ev = provenance("formats", "lab.data.calibration_set('right')", data.calibration_set("right"),
                                        value(cal, "sha256"), value(cal, "samples"))
    out.append(check("formats", "same_scales", float(same and rep_ok and prov_ok),
                     f"input scales {rq.scale:.9g} (QDQ) and {ro.scale:.9g} (QOperator)"
                     + ("" if same else "; expected identical: build both from one calibration cache")
                     + ("" if rep_ok else f"; reported {rep_s}") + (f"; {prov}" if prov else ""),
                     [Evidence("QDQ input scale", rep_s, rq.scale, 1e-6 * rq.scale, WHY_SCALE)] + prov_ev))
    eq = compare.max_abs_error(fp32_outputs(), ctx.outputs(qdq_rel))
    eo = compare.max_abs_error(fp32_outputs(), ctx.outputs(qop_rel))
    ratio = max(eq, eo) / max(min(eq, eo), 1e-12)
    rq_err, ro_err = number(value(rep_q, "max_abs_error")), number(value(rep_o, "max_abs_error"))
    errs_ok = all(r is not None and abs(r - v) <= SOFTMAX_STEP for r, v in ((rq_err, eq), (ro_err, eo)))
    out.append(check("formats", "same_order", float(ratio <= 3 and errs_ok),
                     f"max abs error QDQ {eq:.4f}, QOperator {eo:.4f} (ratio {ratio:.2f}, same order if at most 3)",
                     [Evidence("QDQ max abs error", rq_err, eq, SOFTMAX_STEP, WHY_OUTPUT),
                      Evidence("QOperator max abs error", ro_err, eo, SOFTMAX_STEP, WHY_OUTPUT)]))
    diff = float(np.max(np.abs(ctx.outputs(qdq_rel).astype(np.float64) - ctx.outputs(qop_rel))))
    rep_d = number(value(doc, "difference.max_abs_difference", "max_elementwise_difference"))
    ok = diff > 0 and rep_d is not None and rep_d > 0 and abs(rep_d - diff) <= 2 * SOFTMAX_STEP
    out.append(check("formats", "elementwise", float(ok),
                     f"largest elementwise difference between the formats: {diff:.4f} (reported {rep_d})",
                     [Evidence("max elementwise difference", rep_d, diff, 2 * SOFTMAX_STEP,
                               "two output grid steps: each format may land one step apart on another CPU")]))
    return out
