"""Lesson 05: QDQ vs QOperator from one calibration, recomputed from the two models and the cache handed in."""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from onnx import numpy_helper

from grader.context import (
    SCALE_REL,
    SOFTMAX_STEP,
    WHY_OUTPUT,
    WHY_SCALE,
    Context,
    check,
    close,
    common_claims,
    evaluation,
    fp32_outputs,
    near_boundary,
    number,
    provenance,
    short,
    value,
)
from grader.group import Group
from grader.lessons.lesson02_the_calibration_reader import reader_batches_charged
from grader.lessons.lesson03_narrow_right_wide import forbidden_settings
from grader.mistakes import READER_SIZES
from grader.results import Evidence
from lab import compare, contract, data, graph, ruler
from lab.lessons import lesson05_qdq_vs_qoperator

# The three files lesson 05 writes, named by its own constants (the workspace folder and the stem it converts to)
QDQ, QOPERATOR, CACHE = (f"{lesson05_qdq_vs_qoperator.FOLDER}/{lesson05_qdq_vs_qoperator.STEM}.{suffix}"
                         for suffix in ("qdq.onnx", "qoperator.onnx", "calibration.json"))


def _cache_range(ctx: Context, doc: dict) -> tuple[tuple[float, float] | None, str]:
    """The 'pixels' range in lesson 05's calibration cache, or None and what is wrong with the file.

    The cache is what made the two formats share one calibration (ORT skips calibration when it exists),
    so it must be handed in, be the file formats.json names, and hold a finite range per tensor.
    """
    named = value(doc, "calibration.cache")
    if named != CACHE:
        return None, f"formats.json calibration/cache is {named!r}; lesson 05's cache is {CACHE}"
    if not ctx.has(CACHE):
        return None, (f"{CACHE} is not in the submission: lesson {contract.lesson_of(CACHE)} writes it, and both "
                      "formats are built from it")
    if value(doc, "calibration.cache_sha256") != data.file_sha256(ctx.sub.path(CACHE)):
        return None, f"formats.json calibration/cache_sha256 is not the hash of {CACHE} (changed after the lesson?)"
    cache = ctx.doc(CACHE)  # the strict loader refused NaN, -1e999 and duplicate keys at intake
    tensors = value(cache, "data")
    if not isinstance(tensors, dict) or not tensors:
        return None, (f"{CACHE} field 'data' holds no ranges (expected one per tensor, 'pixels' among them); "
                      "re-run lesson 05, which writes it with its quantize_both_formats")
    for name, entry in tensors.items():
        low, high = (number(v[0]) if isinstance(v, list) and len(v) == 1 else None
                     for v in (value(entry, f"{end}.data") for end in ("lowest", "highest")))
        if low is None or high is None or low > high:
            return None, (f"{CACHE} field 'data/{name}' is not a range: expected lowest/data and highest/data, "
                          "one finite number each, lowest <= highest")
    if "pixels" not in tensors:
        return None, f"{CACHE} field 'data' has no range for 'pixels', the model's input"
    entry = tensors["pixels"]
    return (float(entry["lowest"]["data"][0]), float(entry["highest"]["data"][0])), ""


def _hidden_rulers(ctx: Context, rels: dict, dtype: str) -> str:
    """Each MatMul output's ruler in both models against the cache's range for it; '' when all agree.

    Both formats quantize the MatMul outputs from the same cached range (the Adds and the Softmax differ by
    design: QOperator fuses Add+Relu, and forces its own Softmax grid). A format calibrated apart shows here.
    """
    tensors = value(ctx.doc(CACHE), "data")
    matmuls = [n.output[0] for n in graph.load(data.fixture_path("fp32.onnx")).graph.node if n.op_type == "MatMul"]
    for rel in rels.values():
        inits = {i.name: i for i in ctx.model(rel).graph.initializer}
        for t in matmuls:
            if t not in tensors or f"{t}_scale" not in inits or f"{t}_zero_point" not in inits:
                continue
            lo, hi = float(tensors[t]["lowest"]["data"][0]), float(tensors[t]["highest"]["data"][0])
            want, want_zp = ruler.scale_zero_point(lo, hi, dtype)
            got = float(numpy_helper.to_array(inits[f"{t}_scale"]).reshape(-1)[0])
            got_zp = int(numpy_helper.to_array(inits[f"{t}_zero_point"]).reshape(-1)[0])
            if abs(got - float(want)) > SCALE_REL * float(want) or got_zp != want_zp:
                return (f"{rel}'s ruler for '{t}' (scale {got:.6g}, zero point {got_zp}) is not the one {CACHE} "
                        f"gives ({float(want):.6g}, {want_zp}): that format was calibrated apart from the cache, "
                        "so the two formats do not share one calibration")
    return ""


def _formats_reported(ctx: Context, doc: dict, rels: dict, formats: dict) -> list[str]:
    """Each format's reported file, hash, size and format, and the settings' per_channel, against the files."""
    wrong = []
    for name, rel in rels.items():
        rep = value(value(doc, "formats") or {}, name) or {}
        path = ctx.sub.path(rel)
        for field, want in (("file", rel.split("/")[-1]), ("sha256", ctx.sub.files[rel]),
                            ("size_bytes", path.stat().st_size), ("quant_format", formats[name])):
            got = value(rep, field)
            if got != want or isinstance(got, bool):
                shown, has = (f"{got}"[:20], str(want)[:20]) if field == "sha256" else (got, want)
                wrong.append(f"formats/{name}/{field} is {shown!r}, {rel} has {has!r}")
    reported_pc = value(doc, "settings.per_channel")
    graph_pc = {name: graph.per_channel(ctx.sub.path(rel)) for name, rel in rels.items()}
    for name, pc in graph_pc.items():
        if reported_pc is not pc:
            wrong.append(f"settings/per_channel is {reported_pc}, but {rels[name]} has "
                         f"{'per-channel' if pc else 'per-tensor'} weights")
            break
    return wrong


def _settings(ctx: Context, doc: dict, rels: dict) -> list[str]:
    """Each setting lesson 05 fixes (lesson 03's but the format) that a model's graph or formats.json's settings
    break, named once for both models, with what to convert with."""
    forbidden: dict[str, str] = {}
    for rel in rels.values():
        for key, msg in forbidden_settings(ctx.sub.path(rel), graph.input_ruler(ctx.model(rel)), doc, "05",
                                           lesson05_qdq_vs_qoperator.FORMAT_SETTINGS):
            forbidden.setdefault(key, msg)
    return list(forbidden.values())


BAND_FRACTION_REL = 0.1  # relative: elements one grid step from a band's edge may move on another CPU


def _leaf_problems(rep, want, where: str, tol) -> list[str]:
    """Each leaf of ``want`` that ``rep`` reports otherwise: strings, booleans and integers exactly, floats within
    ``tol(field)``; a leaf ``rep`` lacks is not judged (the schema says which are required)."""
    if isinstance(want, dict):
        if not isinstance(rep, dict):
            return [] if rep is None else [f"{where} is {short(rep)}, expected an object"]
        return [m for k, w in want.items() if k in rep for m in _leaf_problems(rep[k], w, f"{where}/{k}", tol)]
    if isinstance(want, float):
        return [] if close(rep, want, tol(where, want)) else [f"{where} is {short(rep)}, recomputed {short(want)}"]
    if rep == want and type(rep) is type(want):
        return []
    return [f"{where} is {short(rep)}, recomputed {short(want)}"]


def _formats_recomputed(ctx: Context, doc: dict, qdq_rel: str, qop_rel: str) -> tuple[list[str], list[str]]:
    """formats.json's description of each model, and of how their outputs differ, recomputed with lesson 05's
    calls (lab.lessons.lesson05_qdq_vs_qoperator.describe, output_difference, difference_bands): (model fields
    wrong, difference fields wrong). The count of predictions that differ is judged by its own near-boundary
    policy in elementwise."""
    x, labels = evaluation()
    model = {}
    for name, rel in (("QDQ", qdq_rel), ("QOperator", qop_rel)):
        # without kernels_run: which kernels ONNX Runtime picked is the profile of the student's CPU (fusions
        # differ between x86 and ARM builds), not a result the grader's CPU can recompute: left alone, as in
        # lesson 06's evidence
        d = lesson05_qdq_vs_qoperator.describe(ctx.sub.path(rel), x, labels, fp32_outputs(), kernels=False)
        for k in ("file", "size_bytes", "sha256", "quant_format", "max_abs_error", "accuracy"):
            d.pop(k)  # judged in two_formats and same_order
        model[name] = d
    a, b = ctx.outputs(qdq_rel), ctx.outputs(qop_rel)
    diff = lesson05_qdq_vs_qoperator.output_difference(a, b)
    wrong_diff = []
    sample = value(doc, "difference.sample_with_max_difference")
    per_sample = np.abs(a.astype(np.float64) - b).max(axis=1)
    if isinstance(sample, int) and not isinstance(sample, bool) and 0 <= sample < len(per_sample):
        if per_sample[sample] < per_sample.max() - 2 * SOFTMAX_STEP:  # a near-tie may pick another sample
            wrong_diff.append(f"difference/sample_with_max_difference is {sample}; its largest difference is "
                              f"{per_sample[sample]:.4f}, sample {int(per_sample.argmax())}'s {per_sample.max():.4f}")
    elif sample is not None:
        wrong_diff.append(f"difference/sample_with_max_difference is {short(sample)}, not a sample of the "
                          f"{len(per_sample)} evaluation images")
    for k in ("predictions_differ", "max_abs_difference", "sample_with_max_difference"):
        diff.pop(k)  # judged in elementwise, or above
    output_scale = max(model["QDQ"]["output_scale"] or 0, model["QOperator"]["output_scale"] or 0)
    bands = lesson05_qdq_vs_qoperator.difference_bands(a, b, output_scale)

    def tol(where: str, want: float) -> float:
        if "scale" in where or "grid_bound" in where:
            return SCALE_REL * abs(want)
        if where.startswith(("difference/fraction", "bands/")):
            return BAND_FRACTION_REL * abs(want) + 2 / 4000  # a tenth of the fraction, and two of the 4,000 elements
        if where == "difference/mean_abs_difference":
            return BAND_FRACTION_REL * abs(want) + 1e-5
        return SOFTMAX_STEP  # probabilities and errors: one output grid step
    wrong_model = []
    for name in model:
        wrong_model += _leaf_problems(value(doc, f"formats.{name}"), model[name], f"formats/{name}", tol)
    wrong_diff += _leaf_problems(value(doc, "difference"), diff, "difference", tol)
    wrong_diff += _leaf_problems(value(doc, "bands"), bands, "bands", tol)
    return common_claims(doc, "formats.json") + wrong_model, wrong_diff


def same_ruler(a, b) -> bool:
    return (a.scale, a.zero_point) == (b.scale, b.zero_point)


def _two_formats(ctx: Context, doc: dict):
    """Row ``two_formats``: one QDQ and one QOperator model, with lesson 05's settings, as formats.json says. Also
    what formats.json says wrong of the difference and bands (for row ``elementwise``)."""
    fq, fo = graph.quant_format(ctx.model(QDQ)), graph.quant_format(ctx.model(QOPERATOR))
    wrong = _formats_reported(ctx, doc, {"QDQ": QDQ, "QOperator": QOPERATOR}, {"QDQ": fq, "QOperator": fo})
    wrong_model, wrong_diff = _formats_recomputed(ctx, doc, QDQ, QOPERATOR)
    wrong += wrong_model
    kinds_ok = (fq, fo) == ("QDQ", "QOperator")
    settings = _settings(ctx, doc, {"QDQ": QDQ, "QOperator": QOPERATOR})
    return check("formats", "two_formats", float(kinds_ok and not wrong and not settings),
                 f"model.qdq.onnx is {fq}, model.qoperator.onnx is {fo}"
                 + ("" if kinds_ok else "; expected QDQ and QOperator (quant_format=...)")
                 + "".join(f"; {m}" for m in settings)
                 + ("" if not wrong else "; formats.json does not describe the files: " + "; ".join(wrong[:4])
                    + ". Write formats.json from the models and the settings the conversion used")), wrong_diff


def _calibration_problems(ctx: Context, doc: dict, rq, ro) -> tuple[bool, str, list]:
    """formats.json's calibration set (hash, count, batches) and same_input_ruler against the models:
    (right, message, evidence). A reader lesson 02 already charged for its batches: a note, not a charge."""
    cal = doc["calibration"]
    prov_ok, prov, prov_ev = provenance("formats", "lab.data.calibration_set('right')", data.calibration_set("right"),
                                        cal["sha256"], cal["samples"])
    extra = []
    if doc["same_input_ruler"] is not same_ruler(rq, ro):
        extra.append(f"same_input_ruler is {doc['same_input_ruler']}, but the two models' input rulers are "
                     + ("the same" if same_ruler(rq, ro) else "not the same"))
    size, n_right = doc["settings"]["batch_size"], len(data.calibration_set("right"))
    if cal["batches"] != -(-n_right // size) and reader_batches_charged(ctx):
        ctx.notes.append(f"lesson 05: calibration/batches is {short(cal['batches'])} where batches of {size} give "
                         f"{-(-n_right // size)}, {reader_batches_charged(ctx)}")
    elif cal["batches"] != -(-n_right // size):
        extra.append(f"calibration/batches is {short(cal['batches'])}; {n_right} images in batches of "
                     f"settings/batch_size {size} are {-(-n_right // size)}")
    if extra:
        prov_ok, prov = False, "; ".join(([prov] if prov else []) + extra)
    return prov_ok, prov, prov_ev


def _cache_problem(ctx: Context, doc: dict, rq, ro) -> str:
    """The cache both conversions read: its 'pixels' range gives the input ruler found in both models, and the
    hidden rulers too; '' when it does."""
    cache, cache_problem = _cache_range(ctx, doc)
    if cache is None:
        return cache_problem
    scale, zp = ruler.scale_zero_point(cache[0], cache[1], rq.dtype)
    for name, r in (("QDQ", rq), ("QOperator", ro)):
        if abs(r.scale - float(scale)) > SCALE_REL * float(scale) or r.zero_point != zp:
            return (f"the 'pixels' range in {CACHE} [{cache[0]:.6g}, {cache[1]:.6g}] gives scale "
                    f"{float(scale):.9g} and zero point {zp}, but model.{name.lower()}.onnx has "
                    f"{r.scale:.9g} / {r.zero_point}: it was not built from that cache")
    return _hidden_rulers(ctx, {"QDQ": QDQ, "QOperator": QOPERATOR}, rq.dtype)


def _same_scales(ctx: Context, doc: dict):
    """Row ``same_scales``: both models hold one input ruler, the one the shared calibration cache gives."""
    rq, ro = graph.input_ruler(ctx.model(QDQ)), graph.input_ruler(ctx.model(QOPERATOR))
    same = rq.scale == ro.scale and rq.zero_point == ro.zero_point
    rep_s = float(doc["formats"]["QDQ"]["input_scale"])
    rep_ok = abs(rep_s - rq.scale) <= SCALE_REL * rq.scale
    prov_ok, prov, prov_ev = _calibration_problems(ctx, doc, rq, ro)
    cache_problem = _cache_problem(ctx, doc, rq, ro)
    return check("formats", "same_scales", float(same and rep_ok and prov_ok and not cache_problem),
                 f"input scales {rq.scale:.9g} (QDQ) and {ro.scale:.9g} (QOperator)"
                 + ("" if same else "; expected identical: build both from one calibration cache")
                 + ("" if rep_ok else f"; reported {rep_s}") + (f"; {prov}" if prov else "")
                 + (f"; {cache_problem}" if cache_problem else f"; both rulers come from {CACHE}"),
                 [Evidence("QDQ input scale", rep_s, rq.scale, SCALE_REL * rq.scale, WHY_SCALE)] + prov_ev)


def _same_order(ctx: Context, doc: dict):
    """Row ``same_order``: the two errors against FP32 within a factor of 3, each as reported."""
    eq = compare.max_abs_error(fp32_outputs(), ctx.outputs(QDQ))
    eo = compare.max_abs_error(fp32_outputs(), ctx.outputs(QOPERATOR))
    ratio = max(eq, eo) / max(min(eq, eo), 1e-12)
    rq_err, ro_err = (float(doc["formats"][f]["max_abs_error"]) for f in ("QDQ", "QOperator"))
    errs_ok = all(abs(r - v) <= SOFTMAX_STEP for r, v in ((rq_err, eq), (ro_err, eo)))
    return check("formats", "same_order", float(ratio <= 3 and errs_ok),
                 f"max abs error QDQ {eq:.4f}, QOperator {eo:.4f} (ratio {ratio:.2f}, same order if at most 3)",
                 [Evidence("QDQ max abs error", rq_err, eq, SOFTMAX_STEP, WHY_OUTPUT),
                  Evidence("QOperator max abs error", ro_err, eo, SOFTMAX_STEP, WHY_OUTPUT)])


def run(ctx: Context) -> list:
    """Lesson 05's four rubric rows, each from its own function."""
    doc = ctx.doc("formats.json")
    two_formats, wrong_diff = _two_formats(ctx, doc)
    return [two_formats, _same_scales(ctx, doc), _same_order(ctx, doc),
            _elementwise(ctx, doc, QDQ, QOPERATOR, wrong_diff)]


def _elementwise(ctx: Context, doc: dict, qdq_rel: str, qop_rel: str, wrong: Sequence[str] = ()):
    """The largest elementwise difference and the count of predictions that differ, recomputed; ``wrong``: the
    rest of formats.json's difference and bands, recomputed (one message each)."""
    a, b = ctx.outputs(qdq_rel), ctx.outputs(qop_rel)
    diff = float(np.max(np.abs(a.astype(np.float64) - b)))
    rep_d = float(doc["difference"]["max_abs_difference"])
    ok = diff > 0 and rep_d > 0 and abs(rep_d - diff) <= 2 * SOFTMAX_STEP
    differ = int(np.sum(a.argmax(1) != b.argmax(1)))
    near = len(set(near_boundary(a).tolist()) | set(near_boundary(b).tolist()))
    rep_p = doc["difference"]["predictions_differ"]
    p_ok = abs(rep_p - differ) <= near
    return check("formats", "elementwise", float(ok and p_ok and not wrong),
                 f"largest elementwise difference between the formats: {diff:.4f} (reported {rep_d}); "
                 f"predictions that differ: {differ} (reported {rep_p})"
                 + ("" if p_ok else "; count the samples whose argmax differs between the two formats")
                 + "".join(f"; formats.json {m}" for m in wrong[:4]),
                 [Evidence("max elementwise difference", rep_d, diff, 2 * SOFTMAX_STEP,
                           "two output grid steps: each format may land one step apart on another CPU"),
                  Evidence("predictions that differ", rep_p, differ, near,
                           "near-boundary policy: a sample whose top-2 margin is within the grid may flip on "
                           "another CPU")])


GROUPS = (Group("05", "formats", ("two_formats", "same_scales", "same_order", "elementwise"), run,
                needs=("formats.json", QDQ, QOPERATOR), reads=(READER_SIZES,)),)
