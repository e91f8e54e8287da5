"""Predictions (lessons 01, 03, 04, 05, 07): each judged against numbers recomputed here from the student's models.

Never against what the student reported: the truth of each question comes from the models handed in (their
input rulers, their errors on the evaluation set, their file sizes, their per-tensor SQNR), and
``lab.predictions`` judges the answer with the same words the notebook used.
"""
from __future__ import annotations

import shutil
import tempfile

from grader.context import Context, Missing, check, evaluation, fp32_outputs
from grader.checks.growth import GROWTH_FILE

PART = "predictions"
NAMES = ("clip_or_squash", "input_rulers", "more_batches", "formats", "entry_tensor")
NEEDS = ("predictions.json",)


def _rulers(ctx: Context) -> dict:
    from lab import graph

    return {kind: graph.input_ruler(ctx.model(f"{kind}.onnx")) for kind in ("narrow", "right", "wide")}


def _clip_or_squash(ctx: Context, answer):
    from lab import compare, predictions

    x, _ = evaluation()
    return predictions.judge_clip_or_squash(answer, {k: compare.diagnose(r, x) for k, r in _rulers(ctx).items()})


def _input_rulers(ctx: Context, answer):
    from lab import predictions

    return predictions.judge_input_rulers(answer, _rulers(ctx))


def _more_batches(ctx: Context, answer):
    from lab import compare, graph, predictions

    models = sorted((m.group(1), int(m.group(2))) for rel in ctx.sub.files if (m := GROWTH_FILE.fullmatch(rel)))
    errors = {"narrow": {}, "right": {}}
    for kind, n in models:
        errors[kind][n] = compare.max_abs_error(fp32_outputs(), ctx.outputs(f"growth/{kind}-{n:03d}.onnx"))
    for kind, found in errors.items():
        if not found:
            raise Missing(f"growth/{kind}-NNN.onnx")
    largest = graph.input_ruler(ctx.model(f"growth/narrow-{max(errors['narrow']):03d}.onnx")).range_seen
    return predictions.judge_more_batches(answer, errors["narrow"], errors["right"], largest)


def _formats(ctx: Context, answer):
    from lab import graph, predictions

    rels = {"QDQ": "formats/model.qdq.onnx", "QOperator": "formats/model.qoperator.onnx"}
    rulers = {f: graph.input_ruler(ctx.model(rel)) for f, rel in rels.items()}
    sizes = {f: ctx.sub.path(rel).stat().st_size for f, rel in rels.items()}
    same = (rulers["QDQ"].scale, rulers["QDQ"].zero_point) == (rulers["QOperator"].scale, rulers["QOperator"].zero_point)
    return predictions.judge_formats(answer, sizes, same)


def _entry_tensor(ctx: Context, answer):
    """Recomputed on the student's right.onnx: calibrated on the same daylight images as lesson 07's draft, so
    its input ruler ends where the draft's does. The debug copies compute with exact int32 sums on every CPU."""
    from lab import data, debugging, graph, predictions, scenarios

    model = ctx.model("right.onnx")
    if graph.quant_format(model) != "QDQ":
        return predictions.Verdict("entry_tensor", 0.0, "right.onnx is not a QDQ model, so the grader cannot trace "
                                   "where the flash error enters; lesson 03 writes it with quant_format='QDQ'")
    x = evaluation()[0]
    with tempfile.TemporaryDirectory(prefix="grader-sqnr-") as tmp:
        # a copy: ORT writes <model>-inferred.onnx beside the model it debugs, and fixtures/ is shared by every
        # batch worker (two workers raced on that file) and may be read-only
        source = shutil.copy(data.fixture_path("fp32.onnx"), tmp)
        daylight = debugging.layer_sqnr(source, ctx.sub.path("right.onnx"), x, tmp)
        flash = debugging.layer_sqnr(source, ctx.sub.path("right.onnx"), scenarios.flash(x, 0), tmp)
        order = debugging.tensor_order(source)
    return predictions.judge_entry_tensor(answer, debugging.entry_point(flash, daylight), order)


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
            verdict = JUDGES[name](ctx, saved[name])
        except Missing as e:
            out.append(check(PART, name, 0, f"{e.rel} is not in the submission, and the prediction is judged "
                                            f"against it: run the lesson that writes it, then hand in again"))
            continue
        except LabError as e:  # a malformed answer or an unusable model: the message names it
            out.append(check(PART, name, 0, str(e)))
            continue
        out.append(check(PART, name, verdict.score, verdict.message))
    return out
