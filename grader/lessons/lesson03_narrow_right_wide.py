"""Lesson 03: narrow / right / wide (and dynamic), every number recomputed from the models handed in."""
from __future__ import annotations

from collections.abc import Set as AbstractSet
from functools import lru_cache
from types import MappingProxyType

import numpy as np

from grader.context import (
    RANGE_REL,
    SCALE_REL,
    SOFTMAX_STEP,
    WHY_OUTPUT,
    WHY_SCALE,
    Context,
    Missing,
    charged_under,
    check,
    close,
    common_claims,
    evaluation,
    fp32_outputs,
    near_boundary,
    number,
    provenance,
    value,
)
from grader.group import Group
from grader.lessons.lesson02_the_calibration_reader import reader_batches_charged
from grader.mistakes import READER_SIZES
from grader.models import ModelRefused
from grader.results import Evidence
from lab import compare, contract, data, graph, ruler
from lab.data import EPSILON, KINDS
from lab.exercise import SETTINGS
from lab.lessons.lesson03_narrow_right_wide import HIDDEN, SETTING_WORDS

PART = "calibration"
EXPECTED_DIAGNOSIS = {"narrow": "clipping", "wide": "squashing"}
FRACTION_TOL = 1e-6  # clipped / used fractions: lab.compare.diagnose on the same ruler and pixels, exact but rounding


def _g(x) -> str:
    return f"{x:.6g}" if isinstance(x, float) else str(x)


def _ruler(ctx: Context, kind: str):
    return graph.input_ruler(ctx.model(f"{kind}.onnx"))


HINTS = MappingProxyType({"quantized": "each of narrow.onnx, right.onnx, wide.onnx must be a QDQ model from "
                      "quantize_static, with lesson 03's settings (lab.lessons.lesson03_narrow_right_wide.SETTINGS)",
         "ruler_reported": "report the scale and zero point read back with lab.graph.input_ruler(model)",
         "range_seen": "each model must be calibrated on its own named set",
         "max_abs_error": "the numbers lesson 03 writes for each model, from the model itself: "
                          "lab.compare.max_abs_error(fp32_out, int8_out) on the evaluation set, and the accuracy on "
                          "the same images"})


def _load(ctx: Context) -> tuple[dict, dict]:
    """Each set's model read: ``rulers`` (kind -> input ruler) and ``refused`` (kind -> (row message, the
    message the rows after ``quantized`` give)) for a model missing, refused or without an input ruler."""
    rulers, refused = {}, {}
    for kind in KINDS:
        rel = f"{kind}.onnx"
        try:
            model = ctx.model(rel)
        except (Missing, ModelRefused) as e:
            why = f"{kind}: {rel} is missing" if isinstance(e, Missing) else f"{kind}: {e}"
            refused[kind] = (why, why)
            continue
        try:
            rulers[kind] = graph.input_ruler(model)
        except Exception as e:  # noqa: BLE001 - the message is the feedback
            refused[kind] = (f"{kind}: {e}; quantize it with quantize_static (QDQ)", f"{kind}: not quantized")
    return rulers, refused


def _rows(rulers: dict, refused: dict, first: bool, judge) -> list:
    """One (ok, message, evidence) per set, in lesson order: ``judge(kind, ruler)`` for a model read, the refusal
    (``first``: the quantized row's words) for the others."""
    return [judge(kind, rulers[kind]) if kind in rulers else (False, refused[kind][0 if first else 1], [])
            for kind in KINDS]


def _row_check(name: str, rows: list):
    """The check of one rubric row: a third of its points per set judged right, the wrong ones named."""
    good = sum(ok for ok, _, _ in rows)
    msg = "; ".join(m for ok, m, _ in rows if not ok or good == len(rows))
    if good < len(rows):
        msg = f"{len(rows) - good} of {len(rows)} wrong: {msg}. Expected: {HINTS[name]}"
    return check(PART, name, good / len(KINDS), msg, [e for _, _, evs in rows for e in evs])


def _quantized(ctx: Context, doc: dict, rulers: dict, refused: dict):
    """Row ``quantized``: a QDQ model of this file (the hash results.json reports) with lesson 03's settings; a
    setting broken is charged on the first model that breaks it only."""
    charged: set[str] = set()

    def judge(kind, r):
        rel = f"{kind}.onnx"
        fmt = graph.quant_format(ctx.model(rel))
        same_file = doc["sets"][kind]["model_sha256"] == ctx.sub.files.get(rel)
        pc_rep, pc = doc["settings"]["per_channel"], graph.per_channel(ctx.sub.path(rel))
        pc_ok = pc_rep is pc or "per_channel" in charged  # one setting: charged once
        if not pc_ok:
            charged.add("per_channel")
        settings = [(k, m) for k, m in forbidden_settings(ctx.sub.path(rel), r, doc) if k not in charged]
        charged.update(k for k, _ in settings)
        return (fmt == "QDQ" and same_file and pc_ok and not settings,
                f"{kind}: {fmt} model with a {r.dtype} ruler on 'pixels'"
                + ("" if same_file else f"; results.json's model_sha256 is not the hash of {rel}")
                + ("" if pc_ok else f"; settings/per_channel is {pc_rep}, but {rel} has "
                                    f"{'per-channel' if pc else 'per-tensor'} weights")
                + "".join(f"; {m}" for _, m in settings), [])
    return _row_check("quantized", _rows(rulers, refused, True, judge))


def _ruler_reported(ctx: Context, doc: dict, rulers: dict, refused: dict):
    """Row ``ruler_reported``: the input ruler's scale and zero point as the graph holds them, and the other
    numbers results.json reports about the model's rulers (``_ruler_numbers``)."""
    def judge(kind, r):
        rep = doc["sets"][kind]
        s_rep, z_rep = float(rep["scale"]), rep["zero_point"]
        ok = abs(s_rep - r.scale) <= SCALE_REL * r.scale and z_rep == r.zero_point
        wrong = _ruler_numbers(ctx, f"{kind}.onnx", kind, rep, r)  # interval, round trip, hidden layer
        return (ok and not wrong, f"{kind}: reported scale {_g(s_rep)} / zero point {z_rep}, "
                f"graph has {r.scale:.9g} / {r.zero_point}" + "".join(f"; {m}" for m, _ in wrong),
                [Evidence(f"{kind} input scale", s_rep, r.scale, SCALE_REL * r.scale, WHY_SCALE),
                 Evidence(f"{kind} zero point", z_rep, r.zero_point, 0, "an integer: exact")] + [e for _, e in wrong])
    return _row_check("ruler_reported", _rows(rulers, refused, False, judge))


def _calibration_extra(ctx: Context, doc: dict, kind: str, calib) -> list[str]:
    """What results.json says wrong of the set's range (lab.ruler.calibration_range, lesson 03's call) and of the
    batches the reader serves it in (a reader lesson 02 already charged for its batches: a note, not a charge)."""
    rep, extra = doc["sets"][kind], []
    want_range = ruler.calibration_range(calib)
    if not close(rep["calibration_range"], want_range, RANGE_REL * want_range):
        extra.append(f"sets/{kind}/calibration_range is {_g(rep['calibration_range'])}, "
                     f"lab.ruler.calibration_range gives {want_range:.6g}")
    bypassed = [k for k in KINDS if (doc["sets"].get(k) or {}).get("served_by") == "an array"]
    if bypassed and kind == bypassed[0]:  # one mistake, charged once: on the first model it shows in
        extra.append(f"sets/{'/'.join(bypassed)}/served_by is 'an array': converted from lab.data's arrays through "
                     "the lab's own reader, not your DigitReader (pass calibration_reader.DigitReader over the set "
                     "to lab.convert.quantize, as the exercise asks)")
    size, want_b = doc["settings"]["batch_size"], -(-len(calib) // doc["settings"]["batch_size"])
    if rep["calibration_batches"] != want_b and reader_batches_charged(ctx):
        ctx.notes.append(f"lesson 03: sets/{kind}/calibration_batches is {rep['calibration_batches']} where "
                         f"batches of {size} give {want_b}, {reader_batches_charged(ctx)}")
    elif rep["calibration_batches"] != want_b:
        extra.append(f"sets/{kind}/calibration_batches is {rep['calibration_batches']}; {len(calib)} "
                     f"images in batches of settings/batch_size {size} are {want_b}")
    return extra


def _range_seen(ctx: Context, doc: dict, rulers: dict, refused: dict):
    """Row ``range_seen``: each model's ruler is the one its named calibration set implies, and the set reported
    (hash, count, range, batches) is that set. Also the kinds calibrated on other data (charged here only)."""
    other_data: set[str] = set()

    def judge(kind, r):
        rep = doc["sets"][kind]
        calib = data.calibration_set(kind)
        exp_scale, exp_zp = ruler.scale_zero_point(float(calib.min()), float(calib.max()), r.dtype)
        ok = abs(r.scale - float(exp_scale)) <= RANGE_REL * float(exp_scale) and r.zero_point == exp_zp
        if not ok:
            other_data.add(kind)
        # the model's own scale is not a number the student reported: the message names it
        ev = [Evidence(f"{kind} range seen (scale x {r.steps})", float(rep["range_seen"]), r.range_seen,
                       r.scale / 2, "scale/2: half a grid step")]
        ok = ok and abs(float(rep["range_seen"]) - r.range_seen) <= r.scale / 2
        prov_ok, prov_msg, prov_ev = provenance(kind, f"lab.data.calibration_set('{kind}')", calib,
                                                rep["calibration_sha256"], rep["calibration_samples"])
        ev += prov_ev
        extra = _calibration_extra(ctx, doc, kind, calib)
        if extra:
            prov_ok, prov_msg = False, "; ".join(([prov_msg] if prov_msg else []) + extra)
        msg = (f"{kind}: the ruler spans {r.range_seen:.4g}; the {kind} set implies {float(exp_scale) * r.steps:.4g}"
               + ("" if ok else f" -- calibrate with lab.data.calibration_set('{kind}')"))
        if not prov_ok:
            msg = prov_msg if ok else f"{msg}; {prov_msg}"
        return ok and prov_ok, msg, ev
    return _row_check("range_seen", _rows(rulers, refused, False, judge)), other_data


def _max_abs_error(ctx: Context, doc: dict, rulers: dict, refused: dict):
    """Row ``max_abs_error``: each model's error against FP32 on the evaluation set, and the accuracy beside it
    (near-boundary policy); the report's common fields and the fixture it measures for contrast, when wrong, cost
    the first model's point that was right."""
    x, labels = evaluation()

    def judge(kind, r):
        rel, rep = f"{kind}.onnx", doc["sets"][kind]
        probs = ctx.outputs(rel)
        err, err_rep = compare.max_abs_error(fp32_outputs(), probs), float(rep["max_abs_error"])
        ok = abs(err_rep - err) <= SOFTMAX_STEP
        # a sample within the grid of a tie may flip on another CPU
        acc, acc_rep, slack = float((probs.argmax(1) == labels).mean()), float(rep["accuracy"]), \
            len(near_boundary(probs)) / len(x)
        acc_ok = abs(acc_rep - acc) <= slack + EPSILON
        wrong = ([] if ok else [f"max_abs_error is {_g(err_rep)}, recomputed {err:.4f}"]) + \
            ([] if acc_ok else [f"accuracy is {_g(acc_rep)}, recomputed {acc:.4f}"])
        said = (f"results.json's sets.{kind}: " + ", ".join(wrong) + f" on the {len(x)} evaluation images") if wrong \
            else f"{kind}: max abs error {err:.4f} on the {len(x)} evaluation images (reported {_g(err_rep)})"
        return (ok and acc_ok, said,
                [Evidence(f"{kind} max abs error", err_rep, err, SOFTMAX_STEP, WHY_OUTPUT),
                 Evidence(f"{kind} accuracy", acc_rep, acc, slack + EPSILON,
                          "near-boundary policy: samples whose top-2 margin is within the grid may flip on another "
                          "CPU")])
    rows = _rows(rulers, refused, False, judge)
    wrong = common_claims(doc, "results.json") + _bad_calibration(doc)  # one wrong field costs one model's point
    first_ok = next((i for i, (ok, _, _) in enumerate(rows) if ok), None)
    if wrong and first_ok is not None:
        ok, msg, ev = rows[first_ok]
        rows[first_ok] = (False, f"{msg}; " + "; ".join(wrong), ev)
    return _row_check("max_abs_error", rows)


def run(ctx: Context) -> list:
    """Lesson 03's six rubric rows, each from its own function, on the models read once."""
    doc = ctx.doc("results.json")
    rulers, refused = _load(ctx)
    range_seen, other_data = _range_seen(ctx, doc, rulers, refused)
    return [_quantized(ctx, doc, rulers, refused), _ruler_reported(ctx, doc, rulers, refused), range_seen,
            _max_abs_error(ctx, doc, rulers, refused), _diagnosis(ctx, doc, rulers, other_data), _dynamic(ctx, doc)]


def forbidden_settings(path, r, doc: dict, lesson: str = "03", wanted=SETTINGS) -> list[tuple[str, str]]:
    """(setting, message) for each setting the lesson's prose fixes (``wanted``: lesson 03's SETTINGS) that the
    model's graph or the report's ``settings`` breaks: per-channel weight scales, an input ruler or weights that
    are not int8, another format or calibration method reported. One entry per setting: it is charged once."""
    found = {}
    if graph.per_channel(path):
        found["per_channel"] = f"{path.name} has per-channel weight scales"
    if r.dtype != "int8":
        found["activation_type"] = f"{path.name}'s input ruler is {r.dtype} (zero point {r.zero_point})"
    if any(t == "UINT8" for name, t in graph.initializer_dtypes(path).items() if name.endswith("weight_quantized")):
        found["weight_type"] = f"{path.name} stores its weights as uint8"
    for key, want in wanted.items():
        rep = value(doc, f"settings.{key}")
        if key not in found and rep is not None and rep != want:
            found[key] = f"settings/{key} is {rep!r}"
    return [(k, f"{m}: lesson {lesson} asks {k}={wanted[k]!r} ({SETTING_WORDS[k]}); convert with {k}={wanted[k]!r}")
            for k, m in found.items()]


@lru_cache(maxsize=1)
def _hidden_values():
    """relu1.out of the FP32 fixture on the evaluation set: the values lesson 03's hidden rulers meet."""
    return graph.tensor_values(data.fixture_path("fp32.onnx"), evaluation()[0], [HIDDEN])[HIDDEN]


def _ruler_numbers(ctx: Context, rel: str, kind: str, rep: dict, r) -> list[tuple[str, Evidence]]:
    """The numbers results.json reports about a model's rulers, each recomputed with the lab calls lesson 03
    makes (graph.input_ruler, ruler.round_trip, graph.tensor_values, ruler.ruler_stats): (message, evidence)
    for each that is wrong, naming the field, reported vs recomputed."""
    x = evaluation()[0]
    want = {"interval/0": (r.interval[0], SCALE_REL * r.range_seen, WHY_SCALE),
            "interval/1": (r.interval[1], SCALE_REL * r.range_seen, WHY_SCALE),
            "pixel_round_trip_max_error": (float(np.abs(ruler.round_trip(x, r.scale, r.zero_point) - x).max()),
                                           1e-6, "float32 rounding of one round trip")}
    iv, hidden_rep = rep["interval"], rep["hidden_layer"]
    got = {"interval/0": iv[0], "interval/1": iv[1], "pixel_round_trip_max_error": rep["pixel_round_trip_max_error"]}
    h = graph.input_ruler(ctx.model(rel), HIDDEN)
    values = _hidden_values()
    stats = ruler.ruler_stats(values, *h.interval)
    for name, (w, tol, why) in {
            "scale": (h.scale, SCALE_REL * h.scale, WHY_SCALE),
            "zero_point": (int(h.zero_point), 0, "an integer: exact"),
            "ruler_end": (h.interval[1], SCALE_REL * h.range_seen, WHY_SCALE),
            "value_max": (float(values.max()), 1e-4 * float(values.max()), "FP32 arithmetic of another CPU"),
            "clipped_fraction": (stats["clipped_fraction"], 1e-3, "a value within float rounding of the "
                                                                  "ruler's end may fall either side"),
            "mean_round_trip_error": (stats["mean_abs_error"], 1e-3 * h.scale, "float32 rounding")}.items():
        want[f"hidden_layer/{name}"] = (w, tol, why)
        got[f"hidden_layer/{name}"] = hidden_rep[name]
    want["hidden_layer/tensor"] = (HIDDEN, 0, "the tensor lesson 03 reads")
    got["hidden_layer/tensor"] = hidden_rep["tensor"]
    wrong = []
    for field_, (w, tol, why) in want.items():
        rep_v = got[field_]
        exact = isinstance(w, str) or field_.endswith("zero_point")
        ok = (rep_v == w and type(rep_v) is type(w)) if exact else close(rep_v, w, tol)
        if not ok:
            wrong.append((f"sets/{kind}/{field_} is {_g(rep_v)}, recomputed from {rel} {_g(w)}",
                          Evidence(f"{kind} {field_}", number(rep_v) if not isinstance(w, str) else rep_v, w, tol,
                                   why)))
    return wrong


def _bad_calibration(doc: dict) -> list[str]:
    """results.json's numbers for the all-zero fixture (bad-calibration.onnx), recomputed on the evaluation set."""
    rep = doc["bad_calibration"]
    probs = compare.predict(data.fixture_path("bad-calibration.onnx"), evaluation()[0])
    err = compare.max_abs_error(fp32_outputs(), probs)
    acc = float((probs.argmax(1) == evaluation()[1]).mean())
    slack = len(near_boundary(probs)) / len(probs) + EPSILON
    wrong = []
    if not close(rep["max_abs_error"], err, SOFTMAX_STEP):
        wrong.append(f"bad_calibration/max_abs_error is {_g(rep['max_abs_error'])}, recomputed {err:.4f}")
    if not close(rep["accuracy"], acc, slack):
        wrong.append(f"bad_calibration/accuracy is {_g(rep['accuracy'])}, recomputed {acc:.4f}")
    return wrong


def _fractions(doc: dict, kind: str, r) -> list[tuple[str, Evidence]]:
    """results.json's clipped_fraction and grid_used_fraction against lab.compare.diagnose on the model's ruler
    (lesson 03's call): (message, evidence) for each that is wrong."""
    d = compare.diagnose(r, evaluation()[0])
    rep = doc["sets"][kind]
    wrong = []
    for name in ("clipped_fraction", "grid_used_fraction"):
        want = getattr(d, name)
        if not close(rep[name], want, FRACTION_TOL):
            wrong.append((f"sets/{kind}/{name} is {_g(rep[name])}, lab.compare.diagnose gives {want:.6g}",
                          Evidence(f"{kind} {name}", number(rep[name]), want, FRACTION_TOL,
                                   "lab.compare.diagnose on the same ruler and pixels")))
    return wrong


def _diagnosis(ctx: Context, doc: dict, rulers: dict, other_data: AbstractSet[str] = frozenset()):
    """narrow clips and wide squashes, as reported and as the models show, with the clipped and used fractions
    behind each diagnosis; a model calibrated on other data than its set is charged under range_seen, and its
    diagnosis is not judged (it shows that data, not the set). right's fractions wrong cost half a point."""
    x, _ = evaluation()
    ok_count, msgs, ev = 0.0, [], []
    for kind, expected in EXPECTED_DIAGNOSIS.items():
        rep = doc["sets"][kind]["diagnosis"]
        got = compare.diagnose(rulers[kind], x).kind if kind in rulers else None
        if kind in other_data:
            ok_count += 1
            msgs.append(f"{kind}: not judged, {kind}.onnx was calibrated on other data than the {kind} set "
                        f"({charged_under(PART, 'range_seen')})")
            continue
        ev.append(Evidence(f"{kind} diagnosis", rep, got, None, "compare.diagnose on the evaluation set"))
        wrong = _fractions(doc, kind, rulers[kind]) if kind in rulers else []
        ev += [e for _, e in wrong]
        if rep == expected and got == expected and not wrong:
            ok_count += 1
            msgs.append(f"{kind}: {expected}, as reported")
        elif rep == expected and got == expected:
            msgs.append(f"{kind}: {expected}, but " + "; ".join(m for m, _ in wrong))
        else:
            msgs.append(f"{kind}: reported {rep!r}, the model shows {got!r}; expected {expected!r} "
                        f"(look at the error split by input size in lesson 03)")
    if "right" in rulers and "right" not in other_data:
        wrong = _fractions(doc, "right", rulers["right"])
        if wrong:
            ok_count -= 0.5
            ev += [e for _, e in wrong]
            msgs.append("right: " + "; ".join(m for m, _ in wrong))
    return check(PART, "diagnosis", max(0.0, ok_count) / 2, "; ".join(msgs), ev)


def _dynamic(ctx: Context, doc: dict):
    try:
        model = ctx.model("dynamic.onnx")
    except Missing:
        return check(PART, "dynamic", 0,
                     f"dynamic.onnx is missing; lesson {contract.lesson_of('dynamic.onnx')} writes it with "
                     "quantize_dynamic")
    fmt = graph.quant_format(model)
    err = compare.max_abs_error(fp32_outputs(), ctx.outputs("dynamic.onnx"))
    rec = doc["dynamic"]
    rep = float(rec["max_abs_error"])
    ok = fmt == "dynamic" and abs(rep - err) <= SOFTMAX_STEP
    same_file = rec["model_sha256"] == ctx.sub.files.get("dynamic.onnx")
    msg = (f"dynamic.onnx is a {fmt} model; max abs error {err:.4f} (reported {_g(rep)})"
           + ("" if same_file else "; results.json's dynamic/model_sha256 is not the hash of dynamic.onnx")
           + ("" if ok and same_file else ". Expected a quantize_dynamic model and its error in results.json under "
              "'dynamic'"))
    ok = ok and same_file
    return check(PART, "dynamic", 1.0 if ok else 0.0, msg,
                 [Evidence("dynamic max abs error", rep, err, SOFTMAX_STEP, WHY_OUTPUT)])


GROUPS = (Group("03", PART, ("quantized", "ruler_reported", "range_seen", "max_abs_error", "diagnosis", "dynamic"), run,
                needs=("results.json",), reads=(READER_SIZES,)),)
