"""Lesson 04: more batches of the narrow set against a few of the right data, recomputed from the models handed in."""
from __future__ import annotations

from collections.abc import Collection
from collections.abc import Set as AbstractSet
from pathlib import PurePosixPath

import numpy as np

from grader.context import (
    SCALE_REL,
    SOFTMAX_STEP,
    WHY_OUTPUT,
    Context,
    Missing,
    check,
    close,
    common_claims,
    evaluation,
    fp32_outputs,
    integer,
    near_boundary,
    number,
    provenance,
    short,
    value,
)
from grader.group import Group
from grader.lessons.lesson03_narrow_right_wide import forbidden_settings
from grader.results import Evidence
from lab import compare, contract, data, graph, ruler, variant
from lab.data import EPSILON, data_sha256
from lab.lessons import lesson04_more_batches

SERIES = tuple(e for e in contract.families() if "04" in e.lessons)  # growth/narrow-NNN.onnx, growth/right-NNN.onnx


# The lesson's longest stream (512 batches of 8): streams up to this many samples are kept once per worker
STREAM_KEPT = lesson04_more_batches.MAX_BATCHES * lesson04_more_batches.BATCH_SIZE


@variant.lru_cache(maxsize=32)  # each student's variant has its own
def _kept_stream(n_batches: int, batch_size: int, seed: int) -> np.ndarray:
    stream = lesson04_more_batches.narrow_batches(n_batches, batch_size, seed=seed)
    stream.flags.writeable = False  # shared by every hand-in the worker grades
    return stream


@variant.lru_cache(maxsize=32)  # each student's variant has its own
def _kept_sha256(n_batches: int, batch_size: int, seed: int) -> str:
    return data_sha256(_kept_stream(n_batches, batch_size, seed))


def narrow_batches(n_batches: int, batch_size: int, seed: int) -> np.ndarray:
    """Lesson 04's ``narrow_batches``, computed once per worker for each size and seed up to the lesson's own.

    A stream depends only on the calibration split and these three numbers, and a hand-in's checks ask for
    about 30 prefixes of its one stream (every model's ruler, the picks' hashes, the rows): the same ten or
    eleven streams for every hand-in of the class. A kept stream is read-only: a check that wrote into it would
    raise, never change the next hand-in's stream.
    """
    if n_batches * batch_size > STREAM_KEPT:
        return lesson04_more_batches.narrow_batches(n_batches, batch_size, seed=seed)
    return _kept_stream(n_batches, batch_size, seed)


def stream_sha256(n_batches: int, batch_size: int, seed: int) -> str:
    """``data_sha256(narrow_batches(n_batches, batch_size, seed))``, once per worker for a kept stream (a hand-in's
    checks hash about 20 prefixes of its stream, up to 1 ms each)."""
    if n_batches * batch_size > STREAM_KEPT:
        return data_sha256(narrow_batches(n_batches, batch_size, seed))
    return _kept_sha256(n_batches, batch_size, seed)


def _kind_and_count(name: str) -> tuple[str, ...]:
    """``("narrow", "016")`` from ``growth/narrow-016.onnx`` (or ``("narrow", "NNN")`` from the contract's name)."""
    return tuple(PurePosixPath(name).stem.rsplit("-", 1))


def series_file(kind: str, n: int) -> str:
    """The contract's name of the model of ``n`` batches of ``kind``: ``growth/narrow-016.onnx``."""
    return next(e.path for e in SERIES if _kind_and_count(e.path)[0] == kind).replace("NNN", f"{n:03d}")


def series_models(files) -> list[tuple[str, int]]:
    """(set, batch count) of each model of lesson 04's series handed in, as the contract's families name them."""
    return sorted((_kind_and_count(rel)[0], int(_kind_and_count(rel)[1]))
                  for rel in files for family in SERIES if family.matches(rel))


def _series(doc: dict) -> list[dict]:
    """growth.json's rows (the schema's one shape: a list of row objects)."""
    return doc["rows"]


def _stream_spec(doc: dict) -> tuple[int, int, int] | None:
    """(max batches, batch size, seed) of the narrow stream growth.json names, within what the grader rebuilds;
    None if it names none."""
    spec = value(doc, "narrow_stream") or {}
    try:
        n, bs, seed = (int(spec[k]) for k in ("max_batches", "batch_size", "seed"))
    except (KeyError, TypeError, ValueError):
        return None
    return (n, bs, seed) if 0 < n <= 4096 and 0 < bs <= 1024 else None


def _narrow_stream(doc: dict):
    """The narrow stream growth.json names (max batches, batch size, seed), rebuilt; None if it names none."""
    spec = _stream_spec(doc)
    try:
        return None if spec is None else narrow_batches(*spec)
    except ValueError:  # a seed numpy refuses (negative): no stream the lesson can have drawn
        return None


PREDICTION_SAMPLES = 1 << 16  # the longest stream a prediction's truth is rebuilt from (16 times the lesson's)


def recorded_stream(doc: dict) -> tuple[int, int, int] | None:
    """The run's narrow stream as growth.json records it, (MAX_BATCHES, batch size, SEED), for the lesson's
    prediction: only when the record hashes that very stream (its ``sha256``) and it is one the lesson can have drawn
    (a seed >= 0, at most ``PREDICTION_SAMPLES`` samples); None otherwise (the lesson's defaults then)."""
    spec = _stream_spec(doc)
    if spec is None or spec[2] < 0 or spec[0] * spec[1] > PREDICTION_SAMPLES:
        return None
    return spec if value(doc, "narrow_stream.sha256") == stream_sha256(*spec) else None


def _record_problems(doc: dict, rows: list[dict], stream) -> list[str]:
    """growth.json's own record: the stream's hash, and one batch size everywhere, samples = batches x batch size."""
    problems = []
    spec = value(doc, "narrow_stream") or {}
    if stream is None:
        problems.append("growth.json narrow_stream: max_batches, batch_size and seed do not name a stream "
                        "lab.lessons.lesson04_more_batches.narrow_batches can rebuild")
    elif value(spec, "sha256") != data_sha256(stream):
        problems.append(f"growth.json narrow_stream/sha256 is not the hash of the stream its max_batches "
                        f"({value(spec, 'max_batches')}), batch_size ({value(spec, 'batch_size')}) and seed "
                        f"({value(spec, 'seed')}) give")
    bs = integer(value(spec, "batch_size"))
    if integer(value(doc, "settings.batch_size")) != bs:
        problems.append(f"growth.json settings/batch_size is {value(doc, 'settings.batch_size')}, narrow_stream/"
                        f"batch_size {value(spec, 'batch_size')}: one lesson run has one batch size")
    for i, r in enumerate(rows):
        n, rbs, samples = (integer(value(r, k)) for k in ("batches", "batch_size", "samples"))
        if rbs != bs or n is None or rbs is None or samples != n * rbs:
            problems.append(f"growth.json rows/{i} ({value(r, 'kind')} x {value(r, 'batches')}): batch_size "
                            f"{value(r, 'batch_size')} and samples {value(r, 'samples')}; the run's batch size is "
                            f"{bs}, and samples = batches x batch_size")
            break
    return problems


def _model_problem(ctx: Context, rel: str, kind: str, n: int, bs: int | None, seed, rep: dict,
                   shas: dict) -> tuple[str, bool]:
    """Does ``rel`` hold the model its name says: the ruler of the first n batches of its stream, and its reported hash?

    A model swapped for another of the hand-in keeps a valid graph, but its ruler belongs to another batch count.
    Returns (what is wrong or '', whether the model was calibrated on the other kind's data: a right series grown
    from the narrow stream, a mistake of the grow call, named with what to change).
    """
    if bs is None or bs < 1 or n * bs > 1 << 16:
        return "", False  # the record itself is wrong: charged once, as a record problem
    sources = {other: _row_pixels(other, n, bs, seed) for other in OTHER_KIND}
    if sources[kind] is None:
        return "", False
    got = graph.input_ruler(ctx.model(rel))
    scale, zp = _ruler_of(sources[kind], got.dtype)
    problems = []
    if abs(got.scale - float(scale)) > SCALE_REL * float(scale) or got.zero_point != zp:
        other = OTHER_KIND[kind]
        o_scale, o_zp = _ruler_of(sources[other], got.dtype) if sources[other] is not None else (0.0, None)
        if abs(got.scale - o_scale) <= SCALE_REL * o_scale and got.zero_point == o_zp:
            return (f"{rel} was calibrated on {_named(other, n, bs)}, not the {KIND_DATA[kind]}: its input ruler "
                    f"(scale {got.scale:.6g}) is that data's. {ADVICE[kind]}"), True
        problems.append(f"its input ruler (scale {got.scale:.6g}, zero point {got.zero_point}) is not what "
                        f"{_named(kind, n, bs)} give (scale {float(scale):.6g}, zero point {zp})")
    mine = ctx.sub.files.get(rel)
    if rep and value(rep, "model_sha256") != mine:
        problems.append("its SHA-256 is not the model_sha256 growth.json reports for it")
    twin = next((other for other, sha in sorted(shas.items()) if other != rel and sha == mine), None)
    if problems and twin:  # the copy is named where it is wrong, never where it is the original
        problems.append(f"its bytes are those of {twin}")
    return (f"{rel}: " + "; ".join(problems) if problems else ""), False


OTHER_KIND = {"narrow": "right", "right": "narrow"}
FROM_DATA = ("calibration_sha256", "calibration_range")  # a row's fields recomputed from its data, not its model
KIND_DATA = {"narrow": "narrow stream", "right": "right set"}
ADVICE = {"right": "Grow the right series from `right` (lab.data.calibration_set('right')), the data deployment "
                   "looks like, and write growth.json again",
          "narrow": "Grow the narrow series from `stream` (lesson.narrow_batches), and write growth.json again"}


def _named(kind: str, n: int, bs: int) -> str:
    return f"the first {n} batch(es) of {bs} of the {KIND_DATA[kind]}"


def _ruler_of(pixels: np.ndarray, dtype: str) -> tuple[float, int]:
    """The input ruler MinMax gives on ``pixels``: (scale, zero point)."""
    scale, zp = ruler.scale_zero_point(float(pixels.min()), float(pixels.max()), dtype)
    return float(scale), int(zp)


def _row_pixels(kind: str, n: int, bs, seed):
    if not isinstance(bs, int) or bs < 1 or n * bs > 1 << 16:
        return None
    if kind == "narrow":
        try:
            return narrow_batches(n * bs, 1, seed=int(seed))  # prefix-stable: the first n x bs samples
        except (TypeError, ValueError):
            return None
    return data.calibration_set("right")[:n * bs]


def _verdict_problems(reported_verdict: dict, mine: list[dict], count: int) -> list[str]:
    """growth.json's verdict against lesson04_more_batches.verdict on the recomputed rows (when the series has
    both kinds): one message per wrong field."""
    if not (any(r["kind"] == "narrow" for r in mine) and any(r["kind"] == "right" for r in mine)):
        return []
    problems = []
    for key, want in lesson04_more_batches.verdict(mine).items():
        if key not in reported_verdict:
            continue
        got = reported_verdict[key]
        if isinstance(want, float):
            ok = close(got, want, SOFTMAX_STEP if "error" in key else 1 / count * 4)
        else:
            ok = got == want and type(got) is type(want)
        if not ok:
            problems.append(f"growth.json verdict/{key} is {short(got)}, "
                            f"lab.lessons.lesson04_more_batches.verdict on the recomputed rows gives {short(want)}")
    return problems


def _rows_and_verdict(ctx: Context, doc: dict, models: list, reported: dict, run_bs, seed,
                      picks: Collection[int] = (), other_data: AbstractSet = frozenset()) -> list[str]:
    """Every row of growth.json, its verdict, right_data and settings/per_channel, recomputed from the growth/
    models and the stream with the lab calls lesson 04 makes (graph.input_ruler, ruler.calibration_range, data_sha256,
    compare.max_abs_error, lesson04_more_batches.verdict): one message per wrong field, reported vs recomputed.
    The picked narrow counts' hash, count, range and error are judged (and charged) by their own points."""
    labels = evaluation()[1]
    problems, mine = [], []
    for kind, n in models:
        rel = series_file(kind, n)
        rep = reported.get((kind, n), {})
        r = graph.input_ruler(ctx.model(rel))
        probs = ctx.outputs(rel)
        row = {"kind": kind, "batches": n, "scale": r.scale, "zero_point": int(r.zero_point),
               "range_seen": r.range_seen, "max_abs_error": compare.max_abs_error(fp32_outputs(), probs),
               "accuracy": float((probs.argmax(1) == labels).mean())}
        row_bs = integer(value(rep, "batch_size")) or run_bs
        pixels = _row_pixels(kind, n, row_bs, seed)
        if pixels is not None:
            sha = stream_sha256(n * row_bs, 1, int(seed)) if kind == "narrow" else data_sha256(pixels)
            row.update(calibration_sha256=sha, calibration_range=ruler.calibration_range(pixels))
        mine.append(row)
        slack = len(near_boundary(probs)) / len(probs) + EPSILON
        tol = {"scale": SCALE_REL * r.scale, "range_seen": r.scale / 2, "max_abs_error": SOFTMAX_STEP,
               "accuracy": slack, "calibration_range": 1e-6}
        for key, want in row.items():
            if key in ("kind", "batches") or key not in rep or (
                    kind == "narrow" and n in picks and key in ("calibration_sha256", "range_seen", "max_abs_error")
            ) or ((kind, n) in other_data and key in FROM_DATA):  # the row is honest: its model is charged
                continue
            got = rep[key]
            ok = close(got, want, tol[key]) if key in tol else (got == want and type(got) is type(want))
            if not ok:
                source = _named(kind, n, row_bs) if key in FROM_DATA else rel
                problems.append(f"growth.json rows ({kind} x {n}) {key} is {short(got)}, recomputed from {source} "
                                f"{short(want)}")
    problems += _verdict_problems(doc["verdict"], mine, len(labels))
    rights = sorted(n for k, n in models if k == "right")
    if value(doc, "right_data.batches") not in (None, rights):
        problems.append(f"growth.json right_data/batches is {value(doc, 'right_data.batches')}; the hand-in's "
                        f"growth/right-NNN.onnx models have {rights}")
    pc_rep = value(doc, "settings.per_channel")
    if models and pc_rep is not None:
        rel = series_file(*models[0])
        if pc_rep is not graph.per_channel(ctx.sub.path(rel)):
            problems.append(f"growth.json settings/per_channel is {pc_rep}, but {rel} has "
                            f"{'per-tensor' if pc_rep else 'per-channel'} weights")
    return common_claims(doc, "growth.json") + problems


def _pick(ctx: Context, n: int, rep: dict, stream, run_bs, seed, model_problem: str) -> tuple[bool, str, list]:
    """One picked narrow count of the series: its range and error recomputed from its model, its calibration hash
    and count from the narrow stream (when growth.json names one), and its model's ruler: (right, message,
    evidence)."""
    rel = series_file("narrow", n)
    r = graph.input_ruler(ctx.model(rel))
    err = compare.max_abs_error(fp32_outputs(), ctx.outputs(rel))
    rep_range, rep_err = number(value(rep, "range_seen")), number(value(rep, "max_abs_error"))
    ev = [Evidence(f"narrow x{n} range seen", rep_range, r.range_seen, r.scale / 2, "scale/2: half a grid step"),
          Evidence(f"narrow x{n} max abs error", rep_err, err, SOFTMAX_STEP, WHY_OUTPUT)]
    good = (rep_range is not None and abs(rep_range - r.range_seen) <= r.scale / 2
            and rep_err is not None and abs(rep_err - err) <= SOFTMAX_STEP)
    prov = ""
    if stream is not None:  # the row's calibration hash and count: the first n batches of the narrow stream
        bs = integer(value(rep, "batch_size")) or run_bs or 0
        prov_ok, prov, prov_ev = provenance(f"narrow x{n}", f"the first {n} batches of the narrow stream",
                                            narrow_batches(n * bs, 1, seed=int(seed)) if bs else stream[:0],
                                            value(rep, "calibration_sha256"), value(rep, "samples"),
                                            stream_sha256(n * bs, 1, int(seed)) if bs else None)
        ev += prov_ev
        good = good and prov_ok
    good = good and not model_problem
    return good, (f"{n} batches: range {r.range_seen:.4g}, error {err:.4f}" +
                  ("" if good or prov or model_problem else f" (reported {rep_range}, {rep_err}: not what {rel} gives)")
                  + (f" ({prov})" if prov else "") + (f" ({model_problem})" if model_problem else "")), ev


def run(ctx: Context) -> list:
    """Lesson 04's two rows: the series (first, middle, last narrow counts; every ruler) and the lesson's point."""
    doc = ctx.doc("growth.json")
    rows = _series(doc)
    reported = {}
    for r in rows:
        reported[(r["kind"], r["batches"])] = r
    models = series_models(ctx.sub.files)
    narrow = sorted(n for k, n in models if k == "narrow")
    if not narrow:
        raise Missing("growth/narrow-NNN.onnx")
    picks = sorted({narrow[0], narrow[len(narrow) // 2], narrow[-1]})
    ok_count, msgs, ev = 0, [], []
    stream = _narrow_stream(doc)
    run_bs = integer(value(doc, "narrow_stream.batch_size"))
    seed = value(doc, "narrow_stream.seed")
    shas = {series_file(k, n): ctx.sub.files[series_file(k, n)] for k, n in models}
    # every model of the series holds the ruler its batch count implies (cheap: no inference)
    wrong_model, other_data = {}, set()
    for kind, n in models:
        rel = series_file(kind, n)
        rep = reported.get((kind, n), {})
        bs = integer(value(rep, "batch_size")) or run_bs
        problem, other = _model_problem(ctx, rel, kind, n, bs, seed, rep, shas)
        if problem:
            wrong_model[(kind, n)] = problem
        if other:
            other_data.add((kind, n))
    for n in picks:
        good, msg, pick_ev = _pick(ctx, n, reported.get(("narrow", n), {}), stream, run_bs, seed,
                                   wrong_model.pop(("narrow", n), ""))
        ok_count += good
        msgs.append(msg)
        ev += pick_ev
    # one more point for what the picks do not show: a swapped model elsewhere in the series, a wrong record
    elsewhere = [wrong_model.pop(k) for k in sorted(other_data) if k in wrong_model]
    settings = _settings(ctx, doc, models)
    rest = (list(wrong_model.values()) + _record_problems(doc, rows, stream)
            + _rows_and_verdict(ctx, doc, models, reported, run_bs, seed, picks, other_data))
    msgs += settings + _rest_messages(elsewhere, rest)
    out = [check("growth", "series", max(0, ok_count - bool(rest or elsewhere or settings)) / len(picks),
                 "recomputed first, middle and last narrow counts, and every model's ruler from its batch count: "
                 + "; ".join(msgs), ev)]
    return out + [_lesson_point(ctx, models, narrow, other_data)]


def _settings(ctx: Context, doc: dict, models: list) -> list[str]:
    """The settings lesson 04 fixes (lesson 03's, ``**SETTINGS``) that the series' first model or growth.json's
    settings break: one message, naming the first such setting and what to pass (charged once for the series)."""
    rel = series_file(*models[0])
    found = forbidden_settings(ctx.sub.path(rel), graph.input_ruler(ctx.model(rel)), doc, "04")
    return [f"{rel}: {found[0][1]}, as every model of the series (grow(..., **SETTINGS))"] if found else []


def _rest_messages(elsewhere: list[str], rest: list[str], shown: int = 4) -> list[str]:
    """What the three recomputed counts do not show, each problem whole: models grown from the other kind's data
    (each says what to change), then a swapped model or a record of another run (re-run the lesson)."""
    out = [m for m in elsewhere[:1]] + ([f"{len(elsewhere) - 1} more model(s) of that series likewise"]
                                       if len(elsewhere) > 1 else [])
    if rest:
        more = f" (and {len(rest) - shown} more)" if len(rest) > shown else ""
        out.append("the rest of the series: " + "; ".join(rest[:shown]) + more
                   + ". Re-run lesson 04 from the top, so growth.json and every growth/ model come from one run")
    return out


def _lesson_point(ctx: Context, models: list, narrow: list[int], other_data: set):
    """The most narrow batches against the fewest right ones; not judged when the right models were grown from
    other data (charged under series: there is no right model to compare with)."""
    rights = sorted(n for k, n in models if k == "right")
    if rights and any(k == "right" for k, _ in other_data):
        return check("growth", "lesson_point", 1.0, "not judged: the right-NNN models were not calibrated on the "
                     "right set, so nothing here compares the right data with the narrow (charged once, above, "
                     "under series)")
    if rights:
        last = compare.max_abs_error(fp32_outputs(), ctx.outputs(series_file("narrow", narrow[-1])))
        right = compare.max_abs_error(fp32_outputs(), ctx.outputs(series_file("right", rights[0])))
        ok = last > right
        return check("growth", "lesson_point", float(ok),
                     f"{narrow[-1]} narrow batches: error {last:.4f}; {rights[0]} right batch(es): {right:.4f}"
                     + ("" if ok else ". Expected the right data to win: are the right-NNN models calibrated "
                        "on lab.data.calibration_set('right')?"))
    return check("growth", "lesson_point", 0, "no growth/right-NNN.onnx: lesson 04 compares with one or two "
                                              "batches of the right data")


GROUPS = (Group("04", "growth", ("series", "lesson_point"), run, needs=("growth.json",)),)
