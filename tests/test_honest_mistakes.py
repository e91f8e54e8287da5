"""Honest mistakes: the reference hand-in with one mistake a student really makes, as the lesson would write it.

Each case states the points it must lose (check -> points, against the reference's own result) and words its
feedback must contain. Nothing else may be charged: one mistake, one charge.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import pytest

from bad_submissions import corpus
from grader import core, reference, sandbox
from lab.submit import submit

READER = corpus.READER_HEAD + corpus.GOOD_NEXT


@dataclass(frozen=True)
class Mistake:
    name: str
    make: Callable[[corpus.Files], bytes]
    lost: dict = field(default_factory=dict)  # "part.check" -> points lost
    words: tuple[str, ...] = ()


def reader(src: str):
    return corpus.with_file("calibration_reader.py", src)


def _right_on_evaluation(files: corpus.Files) -> bytes:
    """Lesson 03's 'right' model calibrated on the evaluation split, and results.json written from that run."""
    import tempfile

    from lab import compare, data, graph, quantize
    from lab.data import file_sha256

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "source.onnx").write_bytes(data.fixture_path("fp32.onnx").read_bytes())
        (work / "calibration_reader.py").write_text(reference.READER_SOURCE)
        from lab import workspace

        cls = workspace.load_module(work, "calibration_reader").DigitReader
        x = data.load_split("evaluation").pixels
        record = quantize.quantize(work / "source.onnx", work / "right.onnx", cls(x, batch_size=36))
        r = graph.input_ruler(work / "right.onnx")
        doc = json.loads(files["results.json"])
        ref = compare.predict(data.fixture_path("fp32.onnx"), x)
        doc["sets"]["right"].update(
            model_sha256=file_sha256(work / "right.onnx"), calibration_samples=record.calibration_samples,
            calibration_batches=record.calibration_batches, calibration_sha256=record.calibration_sha256,
            scale=r.scale, zero_point=r.zero_point, range_seen=r.range_seen,
            max_abs_error=compare.max_abs_error(ref, compare.predict(work / "right.onnx", x)))
        model = (work / "right.onnx").read_bytes()
    return corpus.pack({**files, "right.onnx": model, "results.json": json.dumps(doc, indent=2).encode()})


def _flip_loss(files: corpus.Files) -> bytes:
    doc = json.loads(files[corpus_release("scenarios")])
    for row in doc["results"]:
        if row.get("loss"):
            row["loss"] = -row["loss"]
            break
    else:
        doc["results"][0]["loss"] = 0.5
    return corpus.pack({**files, corpus_release("scenarios"): json.dumps(doc, indent=2).encode()})


def corpus_release(kind: str) -> str:
    return f"release/{kind}.json"


MISTAKES = [
    Mistake("reader_drops_last_partial_batch",
            reader(READER.replace("if self.position >= len(self.pixels):",
                                  "if self.position + self.batch_size > len(self.pixels):")),
            {"reader.contract": 1}, ("the last, partial batch must be served too", "batch_size=100")),
    Mistake("reader_ignores_input_name",
            reader(READER.replace("return {self.input_name: batch}", "return {'pixels': batch}")),
            {"reader.contract": 1}, ("input_name='x'", "the model's input is named 'x'")),
    Mistake("reader_keeps_float64",
            reader(READER.replace("np.asarray(pixels, dtype=np.float32)", "np.asarray(pixels)")),
            {"reader.contract": 1}, ("given float64 pixels", "dtype is float64")),
    Mistake("reader_restarts_after_none",
            reader(READER.replace("            return None", "            self.position = 0\n            return None")),
            {"reader.contract": 1}, ("must keep returning None",)),
    Mistake("reader_one_image_per_call",
            reader(READER.replace("self.position + self.batch_size]", "self.position + 1]")
                   .replace("self.position += self.batch_size", "self.position += 1")),
            {"reader.contract": 1}, ("serve batch_size images per call",)),
    Mistake("reader_without_rewind",
            reader(READER.replace("    def rewind(self):\n        self.position = 0\n", "")),
            {"reader.contract": 1}, ("no rewind() method",)),
    Mistake("reader_never_ends_charged_once", reader(corpus.READER_HEAD + corpus.NEVER_ENDS),
            {"reader.contract": 1}, ("never returned None", "not charged here: charged once, under 02 the calibration reader")),
    Mistake("right_calibrated_on_evaluation", _right_on_evaluation,
            {"calibration.range_seen": 1}, ("a hash of the evaluation split",)),
    Mistake("regression_json_missing", corpus.without("regression.json"),
            {"acceptance.summaries": 3, "acceptance.probabilities": 1, "acceptance.decisions": 2},
            ("regression.json is not in the submission",)),
    Mistake("summarize_transposed", corpus.with_file("metrics.py", corpus.METRICS_TRANSPOSED),
            {"acceptance.summarize_code": 1.5}, ("confusion is transposed",)),
    Mistake("scenario_loss_sign_flipped", _flip_loss, {"release.scenarios": 0.5}, ("is not FP32 accuracy minus INT8 accuracy",)),
]


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    if not sandbox.bwrap_available():
        pytest.skip("student code runs only under bubblewrap")
    work = reference.build(tmp_path_factory.mktemp("reference") / "workspace")
    good_zip = submit("reference", work, tmp_path_factory.mktemp("handed-in"))
    files = corpus.read_zip(good_zip)
    folder = tmp_path_factory.mktemp("mistakes")
    good = core.grade(good_zip)
    out = {}
    for m in MISTAKES:
        if m.name.startswith("scenario") and "release/scenarios.json" not in files:
            continue
        path = folder / f"{m.name}.zip"
        path.write_bytes(m.make(dict(files)))
        out[m.name] = core.grade(path)
    return good, out


def _points(result) -> dict:
    return {f"{c.part}.{c.name}": c.points for c in result.checks}


@pytest.mark.parametrize("mistake", MISTAKES, ids=[m.name for m in MISTAKES])
def test_each_honest_mistake_loses_its_points_once_and_says_why(graded, mistake):
    good, results = graded
    if mistake.name not in results:
        pytest.skip("lesson 07 is not in this lab")
    result = results[mistake.name]
    assert result.status == "graded", result.reason
    before, after = _points(good), _points(result)
    lost = {k: round(before[k] - after.get(k, 0), 4) for k in before if round(before[k] - after.get(k, 0), 4)}
    assert lost == mistake.lost, (lost, [c.message for c in result.checks if not c.passed])
    text = result.to_markdown() + "\n".join(c.message for c in result.checks) + "\n".join(result.notes)
    for words in mistake.words:
        assert words in text, (words, text[-3000:])


def test_reference_scores_whole_or_half_points_only(graded):
    good, results = graded
    for r in [good, *results.values()]:
        assert all(c.points * 2 == int(c.points * 2) for c in r.checks)
        assert "1.33" not in r.to_markdown() and "0.67" not in r.to_markdown()


def test_feedback_names_checks_by_what_they_ask(graded):
    _, results = graded
    md = results["summarize_transposed"].to_markdown()
    assert "summarize() counts right, with actual digits as rows" in md and "`summarize_code`" not in md


def test_expected_sizes():
    from grader.checks.reader import expected_sizes

    assert expected_sizes(360, 100) == [100, 100, 100, 60] and expected_sizes(10, 3) == [3, 3, 3, 1]
    assert expected_sizes(360, 36) == [36] * 10 and np.sum(expected_sizes(7, 8)) == 7
