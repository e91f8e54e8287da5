"""Predictions (lessons 01, 03, 04, 05, 07): each judged against the lesson's truth, recomputed here from the fixtures.

A prediction asks about the lesson's setup (the sets it names, the fixture model), so neither what the student
reported nor the student's models decide it: a model calibrated on the wrong set is charged once, in its lesson
(03's range_seen), and a prediction that was right keeps its point. The input rulers and the clip/squash diagnosis
follow from each named set's min and max (``lab.ruler``, pure numpy). The growth errors, the two formats' sizes
and the flash SQNR trace need conversions of the FP32 fixture with the lesson's settings: each is done once per
grader worker and cached (the errors per kernel family, as the hand-in's family computes them), in a temporary
folder, so fixtures/ is never written. ``lab.predictions`` judges with the same words the notebook used.
"""
from __future__ import annotations

import shutil
import tempfile
from functools import lru_cache
from pathlib import Path

from grader.context import Context, check, evaluation, fp32_outputs
from grader.group import Group

PART = "predictions"
NAMES = ("clip_or_squash", "input_rulers", "more_batches", "formats", "entry_tensor")
NEEDS = ("predictions.json",)
KINDS = ("narrow", "right", "wide")
WHERE = " (measured on the lesson's sets and the fixture, not on your files)"  # what every verdict was judged on


# ----- the lesson's truth: pure, from the named sets ------------------------------------------------------

@lru_cache(maxsize=1)
def lesson_rulers() -> dict:
    """Lesson 03: the input ruler MinMax lays on each named set (its min and max, widened to include 0)."""
    from lab import data, ruler

    sets = {kind: data.calibration_set(kind) for kind in KINDS}
    return {kind: ruler.ruler_for(float(x.min()), float(x.max())) for kind, x in sets.items()}


# ----- the lesson's truth: conversions of the fixture, once per worker ------------------------------------

def _source(tmp: str) -> Path:
    """A copy of the FP32 fixture: ORT writes <model>-inferred.onnx beside the model it is given, and fixtures/
    is shared by every batch worker (two raced on that file) and may be read-only."""
    from lab import data

    return Path(shutil.copy(data.fixture_path("fp32.onnx"), tmp))


@lru_cache(maxsize=1)
def _growth_models() -> dict:
    """Lesson 04's series as the lesson runs it (its stream, counts and settings): (kind, batches) -> model.

    Each calibration is served as one batch: MinMax keeps the lowest and highest value over all batches, so
    the models are the lesson's (same bytes as its batches of 8), in half the time."""
    from lab import data, graph
    from lab.lessons import lesson04_more_batches as growth
    from lab import convert
    from grader import reference

    stream = data.narrow_batches(max(reference.GROWTH_COUNTS), reference.GROWTH_BATCH, seed=0)
    series = [("narrow", n, stream) for n in growth.doubling_counts(max(reference.GROWTH_COUNTS))]
    series += [("right", n, data.calibration_set("right")) for n in reference.RIGHT_COUNTS]
    models = {}
    with tempfile.TemporaryDirectory(prefix="grader-lesson04-") as tmp:
        source = _source(tmp)
        for kind, n, pixels in series:
            path = Path(tmp) / growth.model_name(kind, n)
            served = pixels[:n * reference.GROWTH_BATCH]
            convert.quantize(source, path, served, batch_size=len(served), **reference.SETTINGS)
            models[(kind, n)] = graph.load(path)
    return models


@lru_cache(maxsize=4)
def lesson_growth(family: str) -> tuple[dict, dict, float]:
    """Lesson 04 as CPUs of ``family`` compute it: narrow and right max abs errors per batch count, and the
    range the largest narrow calibration sees."""
    from lab import compare, graph

    models = _growth_models()
    errors = {"narrow": {}, "right": {}}
    for (kind, n), model in models.items():
        errors[kind][n] = compare.max_abs_error(fp32_outputs(), compare.predict(model, evaluation()[0],
                                                                                family=family))
    largest = graph.input_ruler(models[("narrow", max(errors["narrow"]))]).range_seen
    return errors["narrow"], errors["right"], largest


@lru_cache(maxsize=1)
def lesson_formats() -> tuple[dict, bool]:
    """Lesson 05: both formats from one calibration of the 'right' set: file bytes per format, and whether their
    input rulers are the same. Sizes and rulers do not depend on the kernel family."""
    from lab import data, graph
    from lab import convert
    from grader import reference

    with tempfile.TemporaryDirectory(prefix="grader-lesson05-") as tmp:
        settings = {k: v for k, v in reference.SETTINGS.items() if k != "quant_format"}
        records = convert.quantize_both_formats(_source(tmp), tmp, data.calibration_set("right"),
                                                 batch_size=reference.BATCH, **settings)
        paths = {f: Path(r.output) for f, r in records.items()}
        sizes = {f: p.stat().st_size for f, p in paths.items()}
        rulers = [graph.input_ruler(p) for p in paths.values()]
    return sizes, len({(r.scale, r.zero_point) for r in rulers}) == 1


@lru_cache(maxsize=1)
def lesson_entry() -> tuple[object, list[str]]:
    """Lesson 07: where the flash error enters the daylight draft (the row, or None), and the graph order.

    The draft as the lesson builds it: per-channel QDQ, calibrated on all daylight calibration images; the
    trace compares it with FP32 on the evaluation images and on their flash. The debug copies compute with
    exact int32 sums on every CPU, so one trace serves every kernel family."""
    from lab.lessons.lesson07_calibrate_the_deployed_representation import debugging
    from lab import convert
    from lab.lessons.lesson07_calibrate_the_deployed_representation import recipe
    from lab.lessons.lesson07_calibrate_the_deployed_representation import scenarios
    from grader import reference

    x = evaluation()[0]
    with tempfile.TemporaryDirectory(prefix="grader-lesson07-") as tmp:
        source = _source(tmp)
        draft = Path(tmp) / "daylight.onnx"
        daylight_pixels = recipe.select([("daylight", None)]).pixels
        convert.quantize(source, draft, daylight_pixels, batch_size=reference.BATCH, per_channel=True)
        daylight = debugging.layer_sqnr(source, draft, x, tmp)
        flash = debugging.layer_sqnr(source, draft, scenarios.flash(x, 0), tmp)
        order = debugging.tensor_order(source)
    return debugging.entry_point(flash, daylight), order


# ----- the judges ------------------------------------------------------------------------------------------

def _clip_or_squash(answer):
    from lab import compare, predictions

    x = evaluation()[0]
    return predictions.judge_clip_or_squash(answer, {k: compare.diagnose(r, x) for k, r in lesson_rulers().items()})


def _input_rulers(answer):
    from lab import predictions

    return predictions.judge_input_rulers(answer, lesson_rulers(), measured="the lesson's set gives")


def _more_batches(answer):
    from lab import kernels, predictions

    predictions.normalise("more_batches", answer)  # a malformed answer costs no conversion
    return predictions.judge_more_batches(answer, *lesson_growth(kernels.target_family()))


def _formats(answer):
    from lab import predictions

    predictions.normalise("formats", answer)
    return predictions.judge_formats(answer, *lesson_formats())


def _entry_tensor(answer):
    from lab import predictions

    predictions.normalise("entry_tensor", answer)
    return predictions.judge_entry_tensor(answer, *lesson_entry())


JUDGES = {"clip_or_squash": _clip_or_squash, "input_rulers": _input_rulers, "more_batches": _more_batches,
          "formats": _formats, "entry_tensor": _entry_tensor}


def run(ctx: Context) -> list:
    from lab import predictions
    from lab.errors import LabError

    doc = ctx.doc("predictions.json")
    saved = {q: e.get("answer") for q, e in doc.get("predictions", {}).items() if isinstance(e, dict)}
    out = []
    for name in NAMES:
        q = predictions.QUESTIONS[name]
        if name not in saved:
            out.append(check(PART, name, 0, f"predictions.json has no prediction for {name}: lesson {q.lesson} asks "
                                            f"{q.asks}; run its prediction cell, then hand in again"))
            continue
        try:
            verdict = JUDGES[name](saved[name])
        except LabError as e:  # a malformed answer: the message names the field
            out.append(check(PART, name, 0, str(e)))
            continue
        out.append(check(PART, name, verdict.score, verdict.message + WHERE))
    return out


GROUPS = (Group("01", PART, NAMES, run, needs=NEEDS),)
