"""Lesson 03: narrow / right / wide (and dynamic), every number recomputed from the models handed in."""
from __future__ import annotations

from grader.context import (SOFTMAX_STEP, WHY_OUTPUT, WHY_SCALE, Context, Missing, charged_under, check, entry,
                            evaluation, fp32_outputs, number, provenance, value)
from grader.models import ModelRefused
from grader.results import Evidence
from grader.checks.acceptance import near_boundary

PART = "calibration"
KINDS = ("narrow", "right", "wide")
EXPECTED_DIAGNOSIS = {"narrow": "clipping", "wide": "squashing"}
SCALE_REL = 1e-6
RANGE_REL = 1e-5


def _g(x) -> str:
    return f"{x:.6g}" if isinstance(x, float) else str(x)


def _ruler(ctx: Context, kind: str):
    from lab import graph

    return graph.input_ruler(ctx.model(f"{kind}.onnx"))


def run(ctx: Context) -> list:
    from lab import compare, data, graph, ruler

    results_doc = ctx.doc("results.json") if ctx.has("results.json") else {}
    x, _ = evaluation()
    per = {name: [] for name in ("quantized", "ruler_reported", "range_seen", "max_abs_error")}
    found = {}
    other_data: set[str] = set()  # models calibrated on other data than their named set: charged under range_seen
    for kind in KINDS:
        rel = f"{kind}.onnx"
        rep = entry(results_doc, kind, "models", "results", "rows", "sets") or {}
        try:
            model = ctx.model(rel)
        except (Missing, ModelRefused) as e:
            why = f"{rel} is missing" if isinstance(e, Missing) else str(e)
            for name in per:
                per[name].append((False, f"{kind}: {why}", []))
            continue
        fmt = graph.quant_format(model)
        try:
            r = graph.input_ruler(model)
        except Exception as e:  # noqa: BLE001 - the message is the feedback
            per["quantized"].append((False, f"{kind}: {e}; quantize it with quantize_static (QDQ)", []))
            for name in ("ruler_reported", "range_seen", "max_abs_error"):
                per[name].append((False, f"{kind}: not quantized", []))
            continue
        found[kind] = r
        same_file = value(rep, "model_sha256") == ctx.sub.files.get(rel)  # results.json describes this file
        per["quantized"].append((fmt == "QDQ" and same_file, f"{kind}: {fmt} model with a {r.dtype} ruler on 'pixels'"
                                 + ("" if same_file else f"; results.json's model_sha256 is not the hash of {rel}"),
                                 []))
        # reported ruler
        s_rep, z_rep = number(value(rep, "scale", "input_scale")), value(rep, "zero_point", "input_zero_point")
        ok = s_rep is not None and abs(s_rep - r.scale) <= SCALE_REL * r.scale and z_rep == r.zero_point
        per["ruler_reported"].append((ok, f"{kind}: reported scale {_g(s_rep)} / zero point {z_rep}, graph has "
                                          f"{r.scale:.9g} / {r.zero_point}",
                                      [Evidence(f"{kind} input scale", s_rep, r.scale, SCALE_REL * r.scale, WHY_SCALE),
                                       Evidence(f"{kind} zero point", z_rep, r.zero_point, 0, "an integer: exact")]))
        # the range the named calibration set implies
        calib = data.calibration_set(kind)
        exp_scale, exp_zp = ruler.scale_zero_point(float(calib.min()), float(calib.max()), r.dtype)
        ok = abs(r.scale - float(exp_scale)) <= RANGE_REL * float(exp_scale) and r.zero_point == exp_zp
        if not ok:
            other_data.add(kind)
        range_rep = number(value(rep, "range_seen"))
        ev = []  # the model's own scale is not a number the student reported: the message names it
        if range_rep is not None:
            ev.append(Evidence(f"{kind} range seen (scale x {r.steps})", range_rep, r.range_seen,
                               r.scale / 2, "scale/2: half a grid step"))
            ok = ok and abs(range_rep - r.range_seen) <= r.scale / 2
        # the calibration set reported (hash and count) is the one the lesson names
        prov_ok, prov_msg, prov_ev = provenance(kind, f"lab.data.calibration_set('{kind}')", calib,
                                                value(rep, "calibration_sha256"), value(rep, "calibration_samples"))
        ev += prov_ev
        msg = (f"{kind}: the ruler spans {r.range_seen:.4g}; the {kind} set implies {float(exp_scale) * r.steps:.4g}"
               + ("" if ok else f" -- calibrate with lab.data.calibration_set('{kind}')"))
        if not prov_ok:
            msg = prov_msg if ok else f"{msg}; {prov_msg}"
        per["range_seen"].append((ok and prov_ok, msg, ev))
        # max abs error on the evaluation set
        err = compare.max_abs_error(fp32_outputs(), ctx.outputs(rel))
        err_rep = number(value(rep, "max_abs_error", "error"))
        ok = err_rep is not None and abs(err_rep - err) <= SOFTMAX_STEP
        # the accuracy beside it: near-boundary policy (a sample within the grid of a tie may flip on another CPU)
        probs = ctx.outputs(rel)
        acc = float((probs.argmax(1) == evaluation()[1]).mean())
        acc_rep, slack = number(value(rep, "accuracy")), len(near_boundary(probs)) / len(x)
        acc_ok = acc_rep is None or abs(acc_rep - acc) <= slack + 1e-9  # lessons that report no accuracy: nothing
        per["max_abs_error"].append((ok and acc_ok, f"{kind}: max abs error {err:.4f} on the {len(x)} evaluation "
                                     f"images (reported {_g(err_rep)})"
                                     + ("" if acc_ok else f", accuracy {acc:.4f} (reported {_g(acc_rep)})"),
                                     [Evidence(f"{kind} max abs error", err_rep, err, SOFTMAX_STEP, WHY_OUTPUT),
                                      Evidence(f"{kind} accuracy", acc_rep, acc, slack + 1e-9,
                                               "near-boundary policy: samples whose top-2 margin is within the grid "
                                               "may flip on another CPU")]))
    out = []
    hints = {"quantized": "each of narrow.onnx, right.onnx, wide.onnx must be a QDQ model from quantize_static",
             "ruler_reported": "report the scale and zero point read back with lab.graph.input_ruler(model)",
             "range_seen": "each model must be calibrated on its own named set",
             "max_abs_error": "recompute with lab.compare.max_abs_error(fp32_out, int8_out) on the evaluation set, "
                              "and the accuracy on the same images"}
    for name, rows in per.items():
        good = sum(ok for ok, _, _ in rows)
        msg = "; ".join(m for ok, m, _ in rows if not ok or good == len(rows))
        if good < len(rows):
            msg = f"{len(rows) - good} of {len(rows)} wrong: {msg}. Expected: {hints[name]}"
        out.append(check(PART, name, good / len(KINDS), msg, [e for _, _, evs in rows for e in evs]))
    out.append(_diagnosis(ctx, results_doc, found, other_data))
    out.append(_dynamic(ctx, results_doc))
    return out


def _diagnosis(ctx: Context, doc: dict, rulers: dict, other_data: set[str] = frozenset()):
    """narrow clips and wide squashes, as reported and as the models show; a model calibrated on other data
    than its set is charged under range_seen, and its diagnosis is not judged (it shows that data, not the set)."""
    from lab import compare

    x, _ = evaluation()
    ok_count, msgs, ev = 0, [], []
    for kind, expected in EXPECTED_DIAGNOSIS.items():
        rep = value(entry(doc, kind, "models", "results", "rows", "sets") or {}, "diagnosis", "diagnosis.kind")
        got = compare.diagnose(rulers[kind], x).kind if kind in rulers else None
        if kind in other_data:
            ok_count += 1
            msgs.append(f"{kind}: not judged, {kind}.onnx was calibrated on other data than the {kind} set "
                        f"({charged_under(PART, 'range_seen')})")
            continue
        ev.append(Evidence(f"{kind} diagnosis", rep, got, None, "compare.diagnose on the evaluation set"))
        if rep == expected and got == expected:
            ok_count += 1
            msgs.append(f"{kind}: {expected}, as reported")
        else:
            msgs.append(f"{kind}: reported {rep!r}, the model shows {got!r}; expected {expected!r} "
                        f"(look at the error split by input size in lesson 03)")
    return check(PART, "diagnosis", ok_count / 2, "; ".join(msgs), ev)


def _dynamic(ctx: Context, doc: dict):
    from lab import compare, graph

    try:
        model = ctx.model("dynamic.onnx")
    except Missing:
        return check(PART, "dynamic", 0, "dynamic.onnx is missing; lesson 03 writes it with quantize_dynamic")
    fmt = graph.quant_format(model)
    err = compare.max_abs_error(fp32_outputs(), ctx.outputs("dynamic.onnx"))
    rec = value(doc, "dynamic") or {}
    rep = number(value(rec, "max_abs_error", "error"))
    ok = fmt == "dynamic" and rep is not None and abs(rep - err) <= SOFTMAX_STEP
    same_file = value(rec, "model_sha256") in (None, ctx.sub.files.get("dynamic.onnx"))
    msg = (f"dynamic.onnx is a {fmt} model; max abs error {err:.4f} (reported {_g(rep)})"
           + ("" if same_file else "; results.json's dynamic/model_sha256 is not the hash of dynamic.onnx")
           + ("" if ok and same_file else ". Expected a quantize_dynamic model and its error in results.json under "
              "'dynamic'"))
    ok = ok and same_file
    return check(PART, "dynamic", 1.0 if ok else 0.0, msg,
                 [Evidence("dynamic max abs error", rep, err, SOFTMAX_STEP, WHY_OUTPUT)])
