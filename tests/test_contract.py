"""The workspace contract (``lab.contract``): one declaration, and the doc, the schemas and the lessons agree with
it."""
from __future__ import annotations

from pathlib import Path

import pytest

from grader.lessons import predictions as graded_predictions
from lab import contract, predictions, schemas
from lab.tools import run

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "workspace.md"
NOT_WORKSPACE_SCHEMAS = {"submission", "grade"}  # written by lab submit and by the grader, not by a lesson


def test_the_committed_doc_shows_the_contracts_table():
    doc = DOC.read_text(encoding="utf-8")
    assert contract.spliced(doc) == doc, \
        ("docs/workspace.md does not match lab/contract.py; regenerate it: "
         "python -m lab.contract --write docs/workspace.md")


def test_the_table_has_one_row_per_entry_and_the_cli_prints_it(capsys):
    assert contract.main([]) == 0
    printed = capsys.readouterr().out
    assert printed == contract.markdown_table()
    rows = printed.splitlines()[2:]
    assert len(rows) == len(contract.ENTRIES)
    assert "| 01, 03, 04, 05, 06, 07, 10 | `predictions.json` | optional | `predictions` |" in printed


def test_every_entry_is_well_formed_and_covers_only_itself():
    paths = [e.path for e in contract.ENTRIES]
    assert len(paths) == len(set(paths))
    lessons = {nb.name[:2] for nb in run.discover()}
    for e in contract.ENTRIES:
        assert e.hand_in in contract.HAND_IN, e
        assert e.lessons and set(e.lessons) <= lessons, e
        assert list(e.lessons) == sorted(e.lessons), e
        assert contract.entry_for(e.path) is e, f"{e.path} is covered by an earlier entry"  # a family's placeholder too
        assert not (e.module and not e.path.endswith(".py")), e
        assert bool(e.module) == bool(e.exercise), f"{e.path}: a student module, and only one, names its exercise"


def test_a_familys_placeholder_names_its_entry_and_lesson():
    assert contract.entry_for("growth/narrow-NNN.onnx").pattern == r"growth/narrow-\d{3}\.onnx"
    assert contract.lesson_of("growth/narrow-NNN.onnx") == "04"
    assert not contract.handed_in("growth/narrow-NNN.onnx")  # a name, not a file of the series


def test_each_student_module_names_what_the_student_writes_in_it():
    assert contract.exercises() == {"calibration_reader.py": "DigitReader", "metrics.py": "summarize",
                                    "camera_reader.py": "FrameReader"}
    assert contract.allowed_imports() == {"camera_reader.py": ("lab.camera",)}  # the deployed path, no helper
    assert tuple(contract.exercises()) == contract.modules()


def test_schemas_named_exist_and_every_lesson_document_has_its_file():
    named = [e.schema for e in contract.ENTRIES if e.schema]
    assert len(named) == len(set(named))
    assert set(named) == set(schemas.names()) - NOT_WORKSPACE_SCHEMAS
    assert contract.path_of_schema("scenarios") == "release/scenarios.json"
    assert contract.schema_of("growth.json") == "growth" and contract.schema_of("right.onnx") is None
    with pytest.raises(KeyError, match="no workspace file has the schema 'nope'"):
        contract.path_of_schema("nope")


@pytest.mark.parametrize("rel, taken", [
    ("results.json", True), ("calibration_reader.py", True), ("growth/narrow-001.onnx", True),
    ("growth/right-512.onnx", True), ("release/model.onnx", True), ("predictions.json", True),
    ("source.onnx", False), ("toolbox-tables.json", False), ("drafts/daylight.onnx", False),
    ("toolbox/minmax.onnx", False), ("growth/right-all.onnx", False), ("growth/narrow-1.onnx", False),
    ("reader_check.onnx", False), ("notes.ipynb", False), ("release/notes.txt", False), ("../right.onnx", False),
])
def test_handed_in(rel, taken):
    assert contract.handed_in(rel) is taken


def test_the_lesson_that_writes_a_file_or_a_folder():
    assert contract.lesson_of("calibration_reader.py") == "02" and contract.lesson_of("right.onnx") == "03"
    assert contract.lessons_of("predictions.json") == ("01", "03", "04", "05", "06", "07", "10")
    assert contract.lesson_of("predictions.json") == "01"  # the first lesson to run before handing in
    assert contract.lesson_of("growth/right-016.onnx") == "04" and contract.lesson_of("growth/") == "04"
    assert contract.lesson_of("release/") == "07" and contract.lesson_of("drafts/x.onnx") == "06"
    assert contract.lesson_of("notes.ipynb") is None and contract.lessons_of("nowhere/") == ()


def test_lists_for_submit():
    assert contract.files("required") == ("calibration_reader.py", "narrow.onnx", "right.onnx", "wide.onnx",
                                          "dynamic.onnx", "results.json")
    assert "toolbox-tables.json" in contract.files("never") and "metrics.py" in contract.files("optional")
    assert contract.modules() == ("calibration_reader.py", "metrics.py", "camera_reader.py")
    assert [e.folder for e in contract.families()] == ["growth/", "growth/"]
    assert contract.files_of_lesson("05") == ("formats/model.qdq.onnx", "formats/model.qoperator.onnx",
                                              "formats/model.calibration.json", "formats.json", "predictions.json")
    with pytest.raises(ValueError, match="hand_in 'maybe'"):
        contract.files("maybe")


def test_missing_by_lesson_counts_a_family_as_its_folder():
    everything = set(contract.files("required") + contract.files("optional")) | {"growth/narrow-001.onnx"}
    assert contract.missing_by_lesson(everything) == {}
    assert contract.missing_by_lesson(everything - {"growth/narrow-001.onnx"} | {"growth/right-all.onnx"}) \
        == {"04": ["growth/"]}
    assert contract.missing_by_lesson(set())["04"] == ["growth.json", "growth/"]


@pytest.mark.slow
def test_the_headless_run_writes_what_the_contract_says(lesson_suite):
    """Every file the lessons write is covered by an entry, and every handed-in file is written."""
    work = lesson_suite.work_dir
    written = {p.relative_to(work).as_posix() for p in work.rglob("*") if p.is_file()}
    assert all(r.ok for r in lesson_suite.runs.values()), "a lesson failed; its files cannot be checked"
    assert {rel for rel in written if contract.entry_for(rel) is None} == set()
    assert contract.missing_by_lesson(rel for rel in written if contract.handed_in(rel)) == {}


def test_the_lessons_that_ask_a_prediction_are_the_ones_that_write_predictions_json():
    assert predictions.FILE == "predictions.json"
    asked = {q.lesson for q in graded_predictions.QUESTIONS.values()}  # each defined by the lesson that asks it
    assert tuple(sorted(asked)) == contract.lessons_of(predictions.FILE)
