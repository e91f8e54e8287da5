"""Lesson 04 (batch growth) and lesson 05 (QDQ vs QOperator), recomputed from the models handed in."""
from __future__ import annotations

import re

import numpy as np

from grader.context import (SOFTMAX_STEP, WHY_OUTPUT, WHY_SCALE, Context, Missing, check, close, common_claims,
                            evaluation, fp32_outputs, number, provenance, value)
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


def _int(x) -> int | None:
    return x if isinstance(x, int) and not isinstance(x, bool) else None


def _record_problems(doc: dict, rows: list[dict], stream) -> list[str]:
    """growth.json's own record: the stream's hash, and one batch size everywhere, samples = batches x batch size."""
    from lab.data import data_sha256

    problems = []
    spec = value(doc, "narrow_stream") or {}
    if stream is None:
        problems.append("growth.json narrow_stream: max_batches, batch_size and seed do not name a stream "
                        "lab.data.narrow_batches can rebuild")
    elif value(spec, "sha256") != data_sha256(stream):
        problems.append(f"growth.json narrow_stream/sha256 is not the hash of the stream its max_batches "
                        f"({value(spec, 'max_batches')}), batch_size ({value(spec, 'batch_size')}) and seed "
                        f"({value(spec, 'seed')}) give")
    bs = _int(value(spec, "batch_size"))
    if _int(value(doc, "settings.batch_size")) != bs:
        problems.append(f"growth.json settings/batch_size is {value(doc, 'settings.batch_size')}, narrow_stream/"
                        f"batch_size {value(spec, 'batch_size')}: one lesson run has one batch size")
    for i, r in enumerate(rows):
        n, rbs, samples = (_int(value(r, k)) for k in ("batches", "batch_size", "samples"))
        if rbs != bs or n is None or samples != n * rbs:
            problems.append(f"growth.json rows/{i} ({value(r, 'kind')} x {value(r, 'batches')}): batch_size "
                            f"{value(r, 'batch_size')} and samples {value(r, 'samples')}; the run's batch size is "
                            f"{bs}, and samples = batches x batch_size")
            break
    return problems


def _model_problem(ctx: Context, rel: str, kind: str, n: int, bs: int | None, seed, rep: dict,
                   shas: dict) -> str:
    """Does ``rel`` hold the model its name says: the ruler of the first n batches of its stream, and its reported hash?

    A model swapped for another of the hand-in keeps a valid graph, but its ruler belongs to another batch count.
    """
    from lab import data, graph, ruler

    if bs is None or bs < 1 or n * bs > 1 << 16:
        return ""  # the record itself is wrong: charged once, as a record problem
    if kind == "narrow":
        try:
            pixels = data.narrow_batches(n * bs, 1, seed=int(seed))  # prefix-stable: the first n x bs samples
        except (TypeError, ValueError):
            return ""
        named = f"the first {n} batch(es) of {bs} of the narrow stream"
    else:
        pixels = data.calibration_set("right")[:n * bs]
        named = f"the first {n} batch(es) of {bs} of the right set"
    got = graph.input_ruler(ctx.model(rel))
    scale, zp = ruler.scale_zero_point(float(pixels.min()), float(pixels.max()), got.dtype)
    problems = []
    if abs(got.scale - float(scale)) > 1e-6 * float(scale) or got.zero_point != zp:
        problems.append(f"its input ruler (scale {got.scale:.6g}, zero point {got.zero_point}) is not what {named} "
                        f"give (scale {float(scale):.6g}, zero point {zp})")
    mine = ctx.sub.files.get(rel)
    if rep and value(rep, "model_sha256") != mine:
        problems.append("its SHA-256 is not the model_sha256 growth.json reports for it")
    twin = next((other for other, sha in sorted(shas.items()) if other != rel and sha == mine), None)
    if problems and twin:  # the copy is named where it is wrong, never where it is the original
        problems.append(f"its bytes are those of {twin}")
    return f"{rel}: " + "; ".join(problems) if problems else ""


def _row_pixels(kind: str, n: int, bs, seed):
    from lab import data

    if not isinstance(bs, int) or bs < 1 or n * bs > 1 << 16:
        return None
    if kind == "narrow":
        try:
            return data.narrow_batches(n * bs, 1, seed=int(seed))  # prefix-stable: the first n x bs samples
        except (TypeError, ValueError):
            return None
    return data.calibration_set("right")[:n * bs]


def _rows_and_verdict(ctx: Context, doc: dict, models: list, reported: dict, run_bs, seed,
                      picks: list[int] = ()) -> list[str]:
    """Every row of growth.json, its verdict, right_data and settings/per_channel, recomputed from the growth/
    models and the stream with the lab calls lesson 04 makes (graph.input_ruler, growth.calibration_range,
    data_sha256, compare.max_abs_error, growth.verdict): one message per wrong field, reported vs recomputed.
    The picked narrow counts' hash, count, range and error are judged (and charged) by their own points."""
    from lab import compare, graph
    from lab.lessons import lesson04_more_batches as growth
    from lab.data import data_sha256

    from grader.lessons.lesson06_accept_or_reject import near_boundary
    from lab.lessons.lesson07_calibrate_the_deployed_representation.recipe import _per_channel

    labels = evaluation()[1]
    problems, mine = [], []
    for kind, n in models:
        rel = f"growth/{kind}-{n:03d}.onnx"
        rep = reported.get((kind, n), {})
        r = graph.input_ruler(ctx.model(rel))
        probs = ctx.outputs(rel)
        row = {"kind": kind, "batches": n, "scale": r.scale, "zero_point": int(r.zero_point),
               "range_seen": r.range_seen, "max_abs_error": compare.max_abs_error(fp32_outputs(), probs),
               "accuracy": float((probs.argmax(1) == labels).mean())}
        pixels = _row_pixels(kind, n, _int(value(rep, "batch_size")) or run_bs, seed)
        if pixels is not None:
            row.update(calibration_sha256=data_sha256(pixels), calibration_range=growth.calibration_range(pixels))
        mine.append(row)
        slack = len(near_boundary(probs)) / len(probs) + 1e-9
        tol = {"scale": 1e-6 * r.scale, "range_seen": r.scale / 2, "max_abs_error": SOFTMAX_STEP, "accuracy": slack,
               "calibration_range": 1e-6}
        for key, want in row.items():
            if key in ("kind", "batches") or key not in rep or (
                    kind == "narrow" and n in picks and key in ("calibration_sha256", "range_seen", "max_abs_error")):
                continue
            got = rep[key]
            ok = close(got, want, tol[key]) if key in tol else (got == want and type(got) is type(want))
            if not ok:
                problems.append(f"growth.json rows ({kind} x {n}) {key} is {_short(got)}, recomputed from {rel} "
                                f"{_short(want)}")
    reported_verdict = value(doc, "verdict")
    if isinstance(reported_verdict, dict) and any(r["kind"] == "narrow" for r in mine) \
            and any(r["kind"] == "right" for r in mine):
        want_v = growth.verdict(mine)
        for key, want in want_v.items():
            if key not in reported_verdict:
                continue
            got = reported_verdict[key]
            if isinstance(want, float):
                ok = close(got, want, SOFTMAX_STEP if "error" in key else 1 / len(labels) * 4)
            else:
                ok = got == want and type(got) is type(want)
            if not ok:
                problems.append(f"growth.json verdict/{key} is {_short(got)}, lab.lessons.lesson04_more_batches.verdict on the recomputed "
                                f"rows gives {_short(want)}")
    rights = sorted(n for k, n in models if k == "right")
    if value(doc, "right_data.batches") not in (None, rights):
        problems.append(f"growth.json right_data/batches is {value(doc, 'right_data.batches')}; the hand-in's "
                        f"growth/right-NNN.onnx models have {rights}")
    pc_rep = value(doc, "settings.per_channel")
    if models and pc_rep is not None:
        rel = f"growth/{models[0][0]}-{models[0][1]:03d}.onnx"
        if pc_rep is not _per_channel(ctx.sub.path(rel)):
            problems.append(f"growth.json settings/per_channel is {pc_rep}, but {rel} has "
                            f"{'per-tensor' if pc_rep else 'per-channel'} weights")
    return common_claims(doc, "growth.json") + problems


def _short(v) -> str:
    if isinstance(v, float):
        return f"{v:.6g}"
    if isinstance(v, str) and len(v) == 64:
        return v[:12] + "..."
    return repr(v)


def run_growth(ctx: Context) -> list:
    from lab import compare, data, graph

    doc = ctx.doc("growth.json")
    rows = _series(doc)
    reported = {}
    for r in rows:
        n = _int(value(r, "batches", "n_batches", "batch_count"))
        if n is not None:
            reported[(str(value(r, "kind", "set", "name")), n)] = r
    models = sorted((m.group(1), int(m.group(2))) for rel in ctx.sub.files if (m := GROWTH_FILE.fullmatch(rel)))
    narrow = sorted(n for k, n in models if k == "narrow")
    if not narrow:
        raise Missing("growth/narrow-NNN.onnx")
    picks = sorted({narrow[0], narrow[len(narrow) // 2], narrow[-1]})
    ok_count, msgs, ev = 0, [], []
    stream = _narrow_stream(doc)
    run_bs = _int(value(doc, "narrow_stream.batch_size"))
    seed = value(doc, "narrow_stream.seed")
    shas = {f"growth/{k}-{n:03d}.onnx": ctx.sub.files[f"growth/{k}-{n:03d}.onnx"] for k, n in models}
    # every model of the series holds the ruler its batch count implies (cheap: no inference)
    wrong_model = {}
    for kind, n in models:
        rel = f"growth/{kind}-{n:03d}.onnx"
        rep = reported.get((kind, n), {})
        bs = _int(value(rep, "batch_size")) or run_bs
        problem = _model_problem(ctx, rel, kind, n, bs, seed, rep, shas)
        if problem:
            wrong_model[(kind, n)] = problem
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
            bs = _int(value(rep, "batch_size")) or run_bs or 0
            prov_ok, prov, prov_ev = provenance(f"narrow x{n}", f"the first {n} batches of the narrow stream",
                                                data.narrow_batches(n * bs, 1, seed=int(seed)) if bs else stream[:0],
                                                value(rep, "calibration_sha256"),
                                                value(rep, "samples", "calibration_samples"))
            ev += prov_ev
            good = good and prov_ok
        model_problem = wrong_model.pop(("narrow", n), "")
        good = good and not model_problem
        ok_count += good
        msgs.append(f"{n} batches: range {r.range_seen:.4g}, error {err:.4f}" +
                    ("" if good or prov or model_problem else f" (reported {rep_range}, {rep_err}: not what {rel} gives)")
                    + (f" ({prov})" if prov else "") + (f" ({model_problem})" if model_problem else ""))
    # one more point for what the picks do not show: a swapped model elsewhere in the series, a wrong record
    rest = (list(wrong_model.values()) + _record_problems(doc, rows, stream)
            + _rows_and_verdict(ctx, doc, models, reported, run_bs, seed, picks))
    if rest:
        msgs.append("the rest of the series: " + "; ".join(rest[:4]) + (" ..." if len(rest) > 4 else "")
                    + ". Re-run lesson 04 from the top, so growth.json and every growth/ model come from one run")
    out = [check("growth", "series", max(0, ok_count - bool(rest)) / len(picks),
                 "recomputed first, middle and last narrow counts, and every model's ruler from its batch count: "
                 + "; ".join(msgs), ev)]
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


CACHE = "formats/model.calibration.json"


def _cache_range(ctx: Context, doc: dict) -> tuple[tuple[float, float] | None, str]:
    """The 'pixels' range in lesson 05's calibration cache, or None and what is wrong with the file.

    The cache is what made the two formats share one calibration (ORT skips calibration when it exists),
    so it must be handed in, be the file formats.json names, and hold a finite range per tensor.
    """
    from lab import data

    named = value(doc, "calibration.cache")
    if named != CACHE:
        return None, f"formats.json calibration/cache is {named!r}; lesson 05's cache is {CACHE}"
    if not ctx.has(CACHE):
        return None, f"{CACHE} is not in the submission: lesson 05 writes it, and both formats are built from it"
    if value(doc, "calibration.cache_sha256") != data.file_sha256(ctx.sub.path(CACHE)):
        return None, f"formats.json calibration/cache_sha256 is not the hash of {CACHE} (changed after the lesson?)"
    cache = ctx.doc(CACHE)  # the strict loader refused NaN, -1e999 and duplicate keys at intake
    tensors = value(cache, "data")
    if not isinstance(tensors, dict) or not tensors:
        return None, (f"{CACHE} field 'data' holds no ranges (expected one per tensor, 'pixels' among them); "
                      "re-run lesson 05, which writes it with lab.convert.quantize_both_formats")
    for name, entry in tensors.items():
        lo, hi = (value(entry, f"{end}.data") for end in ("lowest", "highest"))
        ok = all(isinstance(v, list) and len(v) == 1 and number(v[0]) is not None for v in (lo, hi))
        if not ok or number(lo[0]) > number(hi[0]):
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
    from onnx import numpy_helper

    from lab import data, graph, ruler

    tensors = value(ctx.doc(CACHE), "data")
    matmuls = [n.output[0] for n in graph.load(data.fixture_path("fp32.onnx")).graph.node if n.op_type == "MatMul"]
    for name, rel in rels.items():
        inits = {i.name: i for i in ctx.model(rel).graph.initializer}
        for t in matmuls:
            if t not in tensors or f"{t}_scale" not in inits or f"{t}_zero_point" not in inits:
                continue
            lo, hi = float(tensors[t]["lowest"]["data"][0]), float(tensors[t]["highest"]["data"][0])
            want, want_zp = ruler.scale_zero_point(lo, hi, dtype)
            got = float(numpy_helper.to_array(inits[f"{t}_scale"]).reshape(-1)[0])
            got_zp = int(numpy_helper.to_array(inits[f"{t}_zero_point"]).reshape(-1)[0])
            if abs(got - float(want)) > 1e-6 * float(want) or got_zp != want_zp:
                return (f"{rel}'s ruler for '{t}' (scale {got:.6g}, zero point {got_zp}) is not the one {CACHE} "
                        f"gives ({float(want):.6g}, {want_zp}): that format was calibrated apart from the cache, "
                        "so the two formats do not share one calibration")
    return ""


def _formats_reported(ctx: Context, doc: dict, rels: dict, formats: dict) -> list[str]:
    """Each format's reported file, hash, size and format, and the settings' per_channel, against the files."""
    from lab import data
    from lab.lessons.lesson07_calibrate_the_deployed_representation.recipe import _per_channel

    wrong = []
    for name, rel in rels.items():
        rep = value(value(doc, "formats") or {}, name) or {}
        path = ctx.sub.path(rel)
        for field, want in (("file", rel.split("/")[-1]), ("sha256", ctx.sub.files[rel]),
                            ("size_bytes", path.stat().st_size), ("quant_format", formats[name])):
            got = value(rep, field)
            if got != want or isinstance(got, bool):
                shown, has = (f"{got}"[:20], want[:20]) if field == "sha256" else (got, want)
                wrong.append(f"formats/{name}/{field} is {shown!r}, {rel} has {has!r}")
    reported_pc = value(doc, "settings.per_channel")
    graph_pc = {name: _per_channel(ctx.sub.path(rel)) for name, rel in rels.items()}
    for name, pc in graph_pc.items():
        if reported_pc is not pc:
            wrong.append(f"settings/per_channel is {reported_pc}, but {rels[name]} has "
                         f"{'per-channel' if pc else 'per-tensor'} weights")
            break
    return wrong


FRACTION_TOL = 0.1  # relative: elements one grid step from a band's edge may move on another CPU


def _leaf_problems(rep, want, where: str, tol) -> list[str]:
    """Each leaf of ``want`` that ``rep`` reports otherwise: strings, booleans and integers exactly, floats within
    ``tol(field)``; a leaf ``rep`` lacks is not judged (the schema says which are required)."""
    if isinstance(want, dict):
        if not isinstance(rep, dict):
            return [] if rep is None else [f"{where} is {_short(rep)}, expected an object"]
        return [m for k, w in want.items() if k in rep for m in _leaf_problems(rep[k], w, f"{where}/{k}", tol)]
    if isinstance(want, float):
        return [] if close(rep, want, tol(where, want)) else [f"{where} is {_short(rep)}, recomputed {_short(want)}"]
    if rep == want and type(rep) is type(want):
        return []
    return [f"{where} is {_short(rep)}, recomputed {_short(want)}"]


def _formats_recomputed(ctx: Context, doc: dict, qdq_rel: str, qop_rel: str) -> tuple[list[str], list[str]]:
    """formats.json's description of each model, and of how their outputs differ, recomputed with lesson 05's
    calls (lab.lessons.lesson05_qdq_vs_qoperator.describe, output_difference, difference_bands): (model fields wrong, difference fields
    wrong). The count of predictions that differ is judged by its own near-boundary policy in elementwise."""
    from lab.lessons import lesson05_qdq_vs_qoperator as formats

    x, labels = evaluation()
    model = {}
    for name, rel in (("QDQ", qdq_rel), ("QOperator", qop_rel)):
        d = formats.describe(ctx.sub.path(rel), x, labels, fp32_outputs())
        for k in ("file", "size_bytes", "sha256", "quant_format", "max_abs_error", "accuracy"):
            d.pop(k)  # judged in two_formats and same_order
        # which kernels ONNX Runtime picked is the profile of the student's CPU (fusions differ between x86 and
        # ARM builds), not a result the grader's CPU can recompute: left alone, as in lesson 06's evidence
        d.pop("kernels_run")
        model[name] = d
    a, b = ctx.outputs(qdq_rel), ctx.outputs(qop_rel)
    diff = formats.output_difference(a, b)
    wrong_diff = []
    sample = value(doc, "difference.sample_with_max_difference")
    per_sample = np.abs(a.astype(np.float64) - b).max(axis=1)
    if isinstance(sample, int) and not isinstance(sample, bool) and 0 <= sample < len(per_sample):
        if per_sample[sample] < per_sample.max() - 2 * SOFTMAX_STEP:  # a near-tie may pick another sample
            wrong_diff.append(f"difference/sample_with_max_difference is {sample}; its largest difference is "
                              f"{per_sample[sample]:.4f}, sample {int(per_sample.argmax())}'s {per_sample.max():.4f}")
    elif sample is not None:
        wrong_diff.append(f"difference/sample_with_max_difference is {_short(sample)}, not a sample of the "
                          f"{len(per_sample)} evaluation images")
    for k in ("predictions_differ", "max_abs_difference", "sample_with_max_difference"):
        diff.pop(k)  # judged in elementwise, or above
    bands = formats.difference_bands(a, b, max(model["QDQ"]["output_scale"] or 0, model["QOperator"]["output_scale"]
                                               or 0))

    def tol(where: str, want: float) -> float:
        if "scale" in where or "grid_bound" in where:
            return 1e-6 * abs(want)
        if where.startswith(("difference/fraction", "bands/")):
            return FRACTION_TOL * abs(want) + 2 / 4000  # a tenth of the fraction, and two of the 4,000 elements
        if where == "difference/mean_abs_difference":
            return FRACTION_TOL * abs(want) + 1e-5
        return SOFTMAX_STEP  # probabilities and errors: one output grid step
    wrong_model = []
    for name in model:
        wrong_model += _leaf_problems(value(doc, f"formats.{name}"), model[name], f"formats/{name}", tol)
    wrong_diff += _leaf_problems(value(doc, "difference"), diff, "difference", tol)
    wrong_diff += _leaf_problems(value(doc, "bands"), bands, "bands", tol)
    return common_claims(doc, "formats.json") + wrong_model, wrong_diff


def same_ruler(a, b) -> bool:
    return (a.scale, a.zero_point) == (b.scale, b.zero_point)


def run_formats(ctx: Context) -> list:
    from lab import compare, data, graph, ruler

    doc = ctx.doc("formats.json")
    qdq_rel, qop_rel = "formats/model.qdq.onnx", "formats/model.qoperator.onnx"
    fq, fo = graph.quant_format(ctx.model(qdq_rel)), graph.quant_format(ctx.model(qop_rel))
    wrong = _formats_reported(ctx, doc, {"QDQ": qdq_rel, "QOperator": qop_rel}, {"QDQ": fq, "QOperator": fo})
    wrong_model, wrong_diff = _formats_recomputed(ctx, doc, qdq_rel, qop_rel)
    wrong += wrong_model
    kinds_ok = (fq, fo) == ("QDQ", "QOperator")
    out = [check("formats", "two_formats", float(kinds_ok and not wrong),
                 f"model.qdq.onnx is {fq}, model.qoperator.onnx is {fo}"
                 + ("" if kinds_ok else "; expected QDQ and QOperator (quant_format=...)")
                 + ("" if not wrong else "; formats.json does not describe the files: " + "; ".join(wrong[:4])
                    + ". Write formats.json from the models and the settings the conversion used"))]
    rq, ro = graph.input_ruler(ctx.model(qdq_rel)), graph.input_ruler(ctx.model(qop_rel))
    rep_q = value(value(doc, "formats") or doc, "QDQ", "qdq") or {}
    rep_o = value(value(doc, "formats") or doc, "QOperator", "qoperator") or {}
    same = rq.scale == ro.scale and rq.zero_point == ro.zero_point
    rep_s = number(value(rep_q, "scale", "input_scale"))
    rep_ok = rep_s is not None and abs(rep_s - rq.scale) <= 1e-6 * rq.scale
    cal = value(doc, "calibration") or {}
    prov_ok, prov, prov_ev = provenance("formats", "lab.data.calibration_set('right')", data.calibration_set("right"),
                                        value(cal, "sha256"), value(cal, "samples"))
    extra = []
    if "same_input_ruler" in doc and doc["same_input_ruler"] is not same_ruler(rq, ro):
        extra.append(f"same_input_ruler is {doc['same_input_ruler']}, but the two models' input rulers are "
                     + ("the same" if same_ruler(rq, ro) else "not the same"))
    size, n_right = value(doc, "settings.batch_size"), len(data.calibration_set("right"))
    if "batches" in cal and _int(size) and size > 0 and cal["batches"] != -(-n_right // size):
        extra.append(f"calibration/batches is {_short(cal['batches'])}; {n_right} images in batches of "
                     f"settings/batch_size {size} are {-(-n_right // size)}")
    if extra:
        prov_ok, prov = False, "; ".join(([prov] if prov else []) + extra)
    # the cache both conversions read: its 'pixels' range gives the input ruler found in both models
    cache, cache_problem = _cache_range(ctx, doc)
    if cache is not None:
        scale, zp = ruler.scale_zero_point(cache[0], cache[1], rq.dtype)
        for name, r in (("QDQ", rq), ("QOperator", ro)):
            if abs(r.scale - float(scale)) > 1e-6 * float(scale) or r.zero_point != zp:
                cache_problem = (f"the 'pixels' range in {CACHE} [{cache[0]:.6g}, {cache[1]:.6g}] gives scale "
                                 f"{float(scale):.9g} and zero point {zp}, but model.{name.lower()}.onnx has "
                                 f"{r.scale:.9g} / {r.zero_point}: it was not built from that cache")
                break
        else:
            cache_problem = _hidden_rulers(ctx, {"QDQ": qdq_rel, "QOperator": qop_rel}, rq.dtype)
    out.append(check("formats", "same_scales", float(same and rep_ok and prov_ok and not cache_problem),
                     f"input scales {rq.scale:.9g} (QDQ) and {ro.scale:.9g} (QOperator)"
                     + ("" if same else "; expected identical: build both from one calibration cache")
                     + ("" if rep_ok else f"; reported {rep_s}") + (f"; {prov}" if prov else "")
                     + (f"; {cache_problem}" if cache_problem else f"; both rulers come from {CACHE}"),
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
    out.append(_elementwise(ctx, doc, qdq_rel, qop_rel, wrong_diff))
    return out


def _elementwise(ctx: Context, doc: dict, qdq_rel: str, qop_rel: str, wrong: list[str] = ()):
    """The largest elementwise difference and the count of predictions that differ, recomputed; ``wrong``: the
    rest of formats.json's difference and bands, recomputed (one message each)."""
    from grader.lessons.lesson06_accept_or_reject import near_boundary

    a, b = ctx.outputs(qdq_rel), ctx.outputs(qop_rel)
    diff = float(np.max(np.abs(a.astype(np.float64) - b)))
    rep_d = number(value(doc, "difference.max_abs_difference", "max_elementwise_difference"))
    ok = diff > 0 and rep_d is not None and rep_d > 0 and abs(rep_d - diff) <= 2 * SOFTMAX_STEP
    differ = int(np.sum(a.argmax(1) != b.argmax(1)))
    near = len(set(near_boundary(a).tolist()) | set(near_boundary(b).tolist()))
    rep_p = value(doc, "difference.predictions_differ")
    p_ok = isinstance(rep_p, int) and not isinstance(rep_p, bool) and abs(rep_p - differ) <= near
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
