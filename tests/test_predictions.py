"""Predictions: saved and validated in the workspace, judged by the grader against the lesson's truth.

The grader recomputes that truth from the fixtures, never from the student's models: a model calibrated on the
wrong set is charged once, in its own lesson, and a right prediction keeps its point. The reference hand-in
predicts right and gets full marks on both kernel families; each wrong prediction loses its points, and its
feedback says what was predicted, what was measured and why.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from grader import core, reference
from grader.context import Context
from grader.lessons import predictions as check
from grader.submission import open_submission
from lab import data, kernels, predictions
from lab.lessons import lesson04_more_batches as lesson04
from lab.lessons import lesson05_qdq_vs_qoperator as lesson05
from lab.tools.submit import submit


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    return reference.build(tmp_path_factory.mktemp("reference") / "workspace", growth_counts=(1, 4, 16))


def _graded(work: Path, tmp: Path, family: str | None = None) -> dict:
    """The predictions part of a grade, as ``family``'s CPUs compute it: check name -> (points, message)."""
    zip_path = submit("reference", work, tmp)
    ctx = Context(open_submission(zip_path, tmp / "opened"))
    with kernels.computing_as(family):
        return {c.name: (c.points, c.message) for c in check.run(ctx)}


@pytest.mark.parametrize("family", kernels.FAMILIES)
def test_the_reference_predictions_earn_full_marks_on_every_kernel_family(work, tmp_path, family):
    got = _graded(work, tmp_path, family)
    assert set(got) == set(check.NAMES)
    assert all(points == 1.0 for points, _ in got.values()), got
    assert all(message.startswith("prediction right") for _, message in got.values())


def test_the_predictions_part_counts_in_the_full_grade(work, tmp_path):
    result = core.grade(submit("reference", work, tmp_path))
    part = [c for c in result.checks if c.part == "predictions"]
    assert [c.name for c in part] == list(check.NAMES) and all(c.passed for c in part), [c.message for c in part]


WRONG = {
    "clip_or_squash": ({"clips": "wide", "squashes": "narrow"}, ["you said wide clips", "narrow is clipping",
                                                                 "reach past its end"]),
    "input_rulers": ({"narrow": {"scale": 0.25, "zero_point": 0}, "right": {"scale": 1 / 255, "zero_point": -128},
                      "wide": {"scale": 16 / 255, "zero_point": -128}},
                     ["narrow: you said scale 0.25 / zero point 0", "scale = (max - min) / 255"]),
    "more_batches": ({"narrow_reaches_right": True, "largest_narrow_range": 0.25},
                     ["you said more narrow batches do reach", "MinMax keeps the largest value"]),
    "formats": ({"smaller": "QDQ", "same_input_ruler": False},
                ["you said QDQ is smaller", "they are the same", "one calibration cache"]),
    "saturating_settings": ({"candidate"}, ["prediction wrong", "qoperator_u8"]),
    "failing_scenarios": (set(), ["you said none need(s) work; measured: flash", "a flash pushes strokes"]),
    "attractive_photographs": ({"larger_error": "camera", "wider_ruler": "attractive"},
                               ["you said camera, measured attractive", "you said attractive, measured camera",
                                "the camera's frames clip against it"]),
}


@pytest.mark.parametrize("question", list(WRONG))
def test_a_wrong_prediction_loses_its_points_and_says_why(work, tmp_path, question):
    answer, words = WRONG[question]
    copy = shutil.copytree(work, tmp_path / "workspace")
    (copy / predictions.FILE).unlink()  # the first answer counts: this one must be the first
    for q in check.QUESTIONS.values():
        predictions.record(copy, q, answer if q.name == question else predictions.load(work)[q.name])
    got = _graded(copy, tmp_path)
    points, message = got[question]
    assert points < 1.0 and message.startswith("prediction wrong"), message
    for w in words:
        assert w in message, (w, message)
    assert all(p == 1.0 for q, (p, _) in got.items() if q != question), got


def test_a_wrong_model_does_not_cost_a_right_prediction(work, tmp_path):
    """Lesson 03's loop with the variable copied: right.onnx calibrated on the wide set, narrow.onnx on the right
    set. range_seen charges both models; the predictions ask about the lesson's sets, so they keep every point."""
    from lab import convert, data, graph

    copy = shutil.copytree(work, tmp_path / "workspace")
    for model, kind in (("right", "wide"), ("narrow", "right")):
        convert.quantize(copy / "source.onnx", copy / f"{model}.onnx", data.calibration_set(kind), batch_size=36)
    assert graph.input_ruler(copy / "right.onnx").range_seen > 15, "right.onnx now holds the wide set's ruler"
    result = core.grade(submit("reference", copy, tmp_path))
    range_seen = next(c for c in result.checks if (c.part, c.name) == ("calibration", "range_seen"))
    assert range_seen.points == range_seen.max_points - 2, range_seen.message
    part = {c.name: c for c in result.checks if c.part == "predictions"}
    assert set(part) == set(check.NAMES)
    assert all(c.passed and c.message.startswith("prediction right") for c in part.values()), \
        {n: c.message for n, c in part.items()}
    message = part["input_rulers"].message
    assert "the lesson's set gives" in message and "not on your files" in message


def test_the_graders_lesson_04_series_is_the_one_the_lesson_builds(tmp_path):
    """The grader calibrates each count of lesson 04's series in one batch; MinMax keeps the min and max over all
    batches, so each model is byte for byte the one lesson 04 builds with its batches of 8."""
    from grader import reference
    from lab import convert, data, graph

    source = shutil.copy(data.fixture_path("fp32.onnx"), tmp_path)
    stream = lesson04.narrow_batches(max(reference.GROWTH_COUNTS), reference.GROWTH_BATCH, seed=0)
    models = check._growth_models()
    for kind, n, pixels in (("narrow", 2, stream), ("right", 1, data.calibration_set("right"))):
        out = tmp_path / f"{kind}-{n}.onnx"
        convert.quantize(source, out, pixels[:n * reference.GROWTH_BATCH], batch_size=reference.GROWTH_BATCH,
                          **reference.SETTINGS)
        assert graph.load(out).SerializeToString() == models[(kind, n)].SerializeToString(), (kind, n)


def test_a_missing_prediction_names_the_lesson_that_asks_it(work, tmp_path):
    copy = shutil.copytree(work, tmp_path / "workspace")
    doc = json.loads((copy / predictions.FILE).read_text())
    del doc["predictions"]["formats"]
    (copy / predictions.FILE).write_text(json.dumps(doc))
    points, message = _graded(copy, tmp_path)["formats"]
    assert points == 0 and "no prediction for formats: lesson 05 asks" in message


def test_record_keeps_the_other_predictions_and_refuses_a_malformed_answer(tmp_path):
    predictions.record(tmp_path, lesson05.PREDICTION, {"smaller": "QDQ", "same_input_ruler": True})
    predictions.record(tmp_path, check.QUESTIONS["failing_scenarios"], {"flash"})
    assert predictions.load(tmp_path) == {"formats": {"smaller": "QDQ", "same_input_ruler": True},
                                          "failing_scenarios": ["flash"]}
    with pytest.raises(predictions.PredictionError, match=r"'formats' \(lesson 05\), smaller: expected one of"):
        predictions.record(tmp_path, lesson05.PREDICTION, {"smaller": "qoperator", "same_input_ruler": True})
    with pytest.raises(predictions.PredictionError, match=r"narrow.zero_point: expected an integer"):
        check.QUESTIONS["input_rulers"].normalise({k: {"scale": 0.1, "zero_point": 0.5} for k in data.KINDS})
    with pytest.raises(predictions.PredictionError, match="expected True or False"):
        lesson04.PREDICTION.normalise({"narrow_reaches_right": "no", "largest_narrow_range": 0.25})
    assert predictions.load(tmp_path)["formats"]["smaller"] == "QDQ", "a refused answer leaves the file as it was"


def test_the_judge_uses_only_what_was_measured():
    """A verdict depends on the measurement handed to it, not on a number this lab's CPU produced."""
    sizes = {"QDQ": 100, "QOperator": 200}
    assert lesson05.judge_formats({"smaller": "QDQ", "same_input_ruler": False}, sizes, False).ok
    verdict = lesson05.judge_formats({"smaller": "QOperator", "same_input_ruler": False}, sizes, False)
    assert verdict.score == 0.5 and "QDQ 100 bytes, QOperator 200 bytes" in verdict.message


def test_the_reference_answers_are_the_notebooks_solutions(tmp_path):
    """Each prediction the reference hand-in records is the solution block of the cell that records it, so an edited
    solution changes the reference; a name two solution blocks bind is refused, naming the notebook."""
    asked = reference.predictions_asked()
    assert {name: (q, nb[:2]) for name, (q, nb, _) in asked.items()} == {
        name: (q, q.lesson) for name, q in check.QUESTIONS.items()}
    assert reference.run_solution(*asked["clip_or_squash"][1:]) == {"clips": "narrow", "squashes": "wide"}
    name = asked["clip_or_squash"][1]
    text = (reference.NOTEBOOKS / name).read_text(encoding="utf-8")
    edited = text.replace('PREDICTION = {\\"clips\\": \\"narrow\\"', 'PREDICTION = {\\"clips\\": \\"wide\\"')
    assert edited != text
    (tmp_path / name).write_text(edited, encoding="utf-8")
    assert 'PREDICTION = {"clips": "wide"' in reference.solution(name, "PREDICTION", notebooks=tmp_path)
    doubled = json.loads(text)
    doubled["cells"].append(next(c for c in doubled["cells"] if "PREDICTION = " in "".join(c["source"])))
    (tmp_path / name).write_text(json.dumps(doubled), encoding="utf-8")
    with pytest.raises(LookupError, match=f"{name}: 2 solution blocks bind 'PREDICTION'"):
        reference.solution(name, "PREDICTION", notebooks=tmp_path)


def test_range_over_256_is_refused_as_lesson_01_warns():
    """Counting the 256 marks instead of the 255 steps between them is 0.39 % off: the prediction is wrong."""
    from lab import ruler
    from lab.lessons import lesson03_narrow_right_wide as l03

    tops = (("narrow", 0.25), ("right", 1.0), ("wide", 16.0))
    rulers = {k: ruler.ruler_for(0.0, hi, "int8") for k, hi in tops}
    said = {k: {"scale": r.scale, "zero_point": r.zero_point} for k, r in rulers.items()}
    assert l03.judge_input_rulers(said, rulers).score == 1
    by_256 = {k: {"scale": hi / 256, "zero_point": -128} for k, hi in tops}
    assert l03.judge_input_rulers(by_256, rulers).score == 0
    three_digits = {k: {"scale": float(f"{r.scale:.3g}"), "zero_point": r.zero_point} for k, r in rulers.items()}
    assert l03.judge_input_rulers(three_digits, rulers).score == 1
