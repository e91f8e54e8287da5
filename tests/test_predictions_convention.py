"""The prediction convention: the first answer counts, later ones are kept beside it, the grader grades the first.

Every prediction cell binds ``PREDICTION``, states the answer's shape on its first line and records the answer
before any measurement prints; the lesson's judge judges the kept (first) answer. Re-running a whole lesson, as a
student does, keeps the first answer: checked with a real papermill run of lesson 01.
"""
from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest

from grader import reference
from grader.context import Context
from grader.lessons import predictions as check
from grader.submission import open_submission
from lab import predictions
from lab.lessons import lesson01_the_ruler as lesson01
from lab.lessons import lesson03_narrow_right_wide as lesson03
from lab.tools import run
from lab.tools.submit import submit

RIGHT = {"clips": "narrow", "squashes": "wide"}
WRONG = {"clips": "wide", "squashes": "narrow"}


def _doc(work: Path) -> dict:
    return json.loads((work / predictions.FILE).read_text())


def _graded(work: Path, tmp: Path) -> dict:
    """The predictions part of a grade of ``work``: check name -> (points, message)."""
    ctx = Context(open_submission(submit("reference", work, tmp), tmp / "opened"))
    return {c.name: (c.points, c.message) for c in check.run(ctx)}


def test_the_first_answer_stays_and_a_later_one_is_recorded_beside_it(tmp_path):
    first = predictions.record(tmp_path, lesson01.PREDICTION, WRONG)
    assert first == f"prediction saved in predictions.json: clip_or_squash = {json.dumps(WRONG)}"
    again = predictions.record(tmp_path, lesson01.PREDICTION, RIGHT)
    assert "your first answer stays" in again and json.dumps(WRONG) in again and json.dumps(RIGHT) in again
    assert "written before the measurement" in again, "the message says why the first stays"
    predictions.record(tmp_path, lesson01.PREDICTION, {"clips": "narrow", "squashes": "right"})
    predictions.record(tmp_path, lesson01.PREDICTION, RIGHT)  # an answer already recorded is not repeated
    entry = _doc(tmp_path)["predictions"]["clip_or_squash"]
    assert _doc(tmp_path)["schema"] == "predictions/2"
    assert entry == {"lesson": "01", "answer": WRONG, "later": [RIGHT, {"clips": "narrow", "squashes": "right"}]}
    assert predictions.load(tmp_path) == {"clip_or_squash": WRONG}
    assert predictions.kept(tmp_path, lesson01.PREDICTION) == WRONG


def test_the_same_answer_again_changes_nothing(tmp_path):
    predictions.record(tmp_path, lesson01.PREDICTION, RIGHT)
    before = (tmp_path / predictions.FILE).read_bytes()
    message = predictions.record(tmp_path, lesson01.PREDICTION, dict(reversed(list(RIGHT.items()))))
    assert "already saved" in message and "nothing changed" in message
    assert (tmp_path / predictions.FILE).read_bytes() == before


def test_an_answer_in_the_wrong_form_is_refused_before_anything_is_saved(tmp_path):
    with pytest.raises(predictions.PredictionError,
                       match=r"'clip_or_squash' \(lesson 01\), clips: expected one of 'narrow', 'right', 'wide', "
                             r"got 'narrow ones'.*an answer looks like \{\"clips\""):
        predictions.record(tmp_path, lesson01.PREDICTION, {"clips": "narrow ones", "squashes": "wide"})
    assert not (tmp_path / predictions.FILE).exists(), "a refused first answer leaves no file"
    predictions.record(tmp_path, lesson01.PREDICTION, WRONG)
    before = (tmp_path / predictions.FILE).read_bytes()
    with pytest.raises(predictions.PredictionError, match="expected a dict with"):
        predictions.record(tmp_path, lesson01.PREDICTION, "narrow")
    assert (tmp_path / predictions.FILE).read_bytes() == before, "a refused later answer leaves the file as it was"


def test_kept_names_the_cell_to_run_when_nothing_is_recorded(tmp_path):
    with pytest.raises(predictions.PredictionError, match=r"no prediction 'clip_or_squash' \(lesson 01\) yet"):
        predictions.kept(tmp_path, lesson01.PREDICTION)


def test_the_grader_grades_the_first_answer(tmp_path):
    """Wrong first, right later: the point is lost and the feedback quotes the first answer."""
    work = tmp_path / "workspace"
    predictions.record(work, lesson01.PREDICTION, WRONG)
    predictions.record(work, lesson01.PREDICTION, RIGHT)
    rulers = {k: {"scale": r.scale, "zero_point": r.zero_point} for k, r in check.lesson_rulers().items()}
    predictions.record(work, lesson03.PREDICTION, rulers)
    predictions.record(work, lesson03.PREDICTION, {k: {"scale": 1.0, "zero_point": 0} for k in rulers})
    got = _graded(work, tmp_path)
    points, message = got["clip_or_squash"]
    assert points < 1 and message.startswith("prediction wrong: you said wide clips"), message
    points, message = got["input_rulers"]
    assert points == 1 and message.startswith("prediction right"), message


def test_a_predictions_1_file_is_still_read_and_graded(tmp_path):
    work = tmp_path / "workspace"
    work.mkdir()
    (work / predictions.FILE).write_text(json.dumps(
        {"schema": "predictions/1", "predictions": {"clip_or_squash": {"lesson": "01", "answer": RIGHT}}}))
    assert predictions.kept(work, lesson01.PREDICTION) == RIGHT
    assert _graded(work, tmp_path)["clip_or_squash"][0] == 1
    predictions.record(work, lesson01.PREDICTION, WRONG)
    assert _doc(work)["schema"] == "predictions/2" and predictions.kept(work, lesson01.PREDICTION) == RIGHT


# ----- the cells: every lesson that asks a prediction follows the convention -------------------------------

ASKED = reference.predictions_asked()


def _code_cells(notebook: str) -> list[str]:
    nb = nbformat.read(reference.NOTEBOOKS / notebook, as_version=4)
    return [c.source for c in nb.cells if c.cell_type == "code"]


@pytest.mark.parametrize("name", sorted(ASKED))
def test_every_prediction_cell_follows_the_convention(name):
    question, notebook, variable = ASKED[name]
    cells = _code_cells(notebook)
    cell = next(s for s in cells if "predictions.record(" in s)
    assert variable == "PREDICTION", f"{notebook}: the prediction cell records {variable!r}, not PREDICTION"
    assert cell.splitlines()[0].startswith("# PREDICTION: "), \
        f"{notebook}: the prediction cell's first line must state the answer's shape, not {cell.splitlines()[0]!r}"
    lines = cell.splitlines()
    before = lines[:next(i for i, line in enumerate(lines) if "predictions.record(" in line)]
    assert not any("print(" in line or "display(" in line for line in before), \
        f"{notebook}: the prediction cell prints before it records the answer"
    judged = [s for s in cells if f"judge_{name}(" in s]
    assert judged and all("predictions.kept(" in s for s in judged), \
        f"{notebook}: the judge must judge the kept answer (lab.predictions.kept), the one the grader grades"
    assert cells.index(cell) < cells.index(judged[0])


def test_every_question_the_grader_grades_has_a_prediction_cell():
    assert set(ASKED) == set(check.NAMES)


# ----- a whole lesson re-run, as a student re-runs it ------------------------------------------------------

def test_rerunning_lesson_01_keeps_the_first_answer(tmp_path):
    """A workspace whose first answer was wrong; lesson 01 then runs whole (its solution answers right), twice."""
    work = tmp_path / "workspace"
    predictions.record(work, lesson01.PREDICTION, WRONG)
    notebook = reference.NOTEBOOKS / "01_the_ruler.ipynb"
    texts = []
    for n in range(2):
        got = run.run_lesson(notebook, tmp_path / f"out{n}", {"WORK_DIR": str(work), "INTERACTIVE": False})
        assert got.error is None, got.error
        texts.append("\n".join(o.get("text", "") for c in nbformat.read(got.output, as_version=4).cells
                               for o in c.get("outputs", [])))
    for text in texts:
        assert "your first answer stays" in text and "prediction wrong: you said wide clips" in text, text[-3000:]
    assert _doc(work)["predictions"]["clip_or_squash"] == {"lesson": "01", "answer": WRONG, "later": [RIGHT]}
