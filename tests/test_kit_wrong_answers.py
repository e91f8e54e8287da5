"""The released kit's lessons 01-07 with a typical wrong answer filled in: each gets a message that names the mistake.

The kit is built from the committed files (``instructor.kit``) and its notebooks run with papermill on the kit's
own ``lab``, as a student runs them. Every other exercise stub of the lesson gets the instructor's solution; the
one under test gets the wrong answer; the run stops after the cell that checks it. A wrong prediction does not
stop the lesson: its message says what was predicted, what was measured and why.
"""
from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
import pytest

from instructor import kit as kit_builder
from lab.tools import run

REPO = Path(__file__).resolve().parents[1]
BEGIN, END = kit_builder.BEGIN_SOLUTION, kit_builder.END_SOLUTION
HIDDEN = re.compile(re.escape(kit_builder.BEGIN_HIDDEN) + r".*?" + re.escape(kit_builder.END_HIDDEN) + r"\n?", re.S)

BROKEN_INIT_READER = '''import numpy as np
from onnxruntime.quantization import CalibrationDataReader


class DigitReader(CalibrationDataReader):
    def __init__(self, pixels, batch_size=32, input_name="pixels"):
        self.pixels = np.asarray(pixels, dtype=np.float32).reshape(-1, 64)
        self.batch_size, self.input_name = batch_size, input_name      # forgot self.position = 0

    def get_next(self):
        if self.position >= len(self.pixels):
            return None
        self.position += self.batch_size
        return {self.input_name: self.pixels[self.position - self.batch_size:self.position]}

    def rewind(self):
        self.position = 0
'''


@dataclass(frozen=True)
class Wrong:
    """One wrong answer: the lesson, the cell it goes into (its solution replaced by ``answer(solution)``), the
    cell after which the run stops, and the words the student must see."""

    lesson: str
    cell: str
    answer: Callable[[str], str]
    stop_after: str
    words: tuple[str, ...]
    fails: bool = True
    parameters: dict = field(default_factory=dict)
    reader: str | None = None


CASES = {
    "01 prediction: wide clips, narrow squashes": Wrong(
        "01_the_ruler", "cell-09b", lambda s: 'PREDICTION = {"clips": "wide", "squashes": "narrow"}', "cell-11a",
        ("prediction wrong: you said wide clips", "narrow is clipping", "reach past its end"), fails=False),
    "03 reader bug in __init__": Wrong(
        "03_narrow_right_wide", "l03-03", lambda s: s, "l03-03",
        ("raised AttributeError", "first call, before serving any batch", "__init__ never set"),
        reader=BROKEN_INIT_READER),
    "03 every model calibrated on the right set": Wrong(
        "03_narrow_right_wide", "l03-07", lambda s: s.replace("calibration_set(kind)", 'calibration_set("right")'),
        "l03-08", ("ExerciseCheckFailed", "narrow.onnx was not calibrated on exactly "
                   "lab.data.calibration_set('narrow')", "fresh DigitReader over its own set")),
    "03 per-channel weights": Wrong(
        "03_narrow_right_wide", "l03-07", lambda s: s.replace("per_channel=False", "per_channel=True"), "l03-08",
        ("ExerciseCheckFailed", "per_channel=True; lesson 03 asks per_channel=False (one ruler per tensor)")),
    "03 prediction: zero point 0": Wrong(
        "03_narrow_right_wide", "l03-05b",
        lambda s: s.replace('"zero_point": round(-128 - low / scale)', '"zero_point": 0'), "l03-10a",
        ("prediction wrong: narrow: you said scale", "zero point 0", "zero point = round(-128 - min / scale)"),
        fails=False),
    "03 one reader reused for three conversions": Wrong(
        "03_narrow_right_wide", "l03-07",
        lambda s: ("reader = calibration_reader.DigitReader(lab.data.calibration_set('right'), batch_size=BATCH_SIZE)\n"
                   "for kind in KINDS:\n"
                   "    records[kind] = lab.convert.quantize(SOURCE, WORK / f'{kind}.onnx', reader)"), "l03-08",
        ("ReaderContractError", "it is used up. That is lesson 02's mistake (b)", "fresh DigitReader")),
    "04 prediction: more narrow batches catch up": Wrong(
        "04_more_batches", "l04-04b",
        lambda s: 'PREDICTION = {"narrow_reaches_right": True, "largest_narrow_range": 1.0}', "l04-14a",
        ("prediction wrong: you said more narrow batches do reach", "you said the largest narrow calibration sees "
         "a range of 1", "MinMax keeps the largest value"), fails=False, parameters={"MAX_BATCHES": 8}),
    "04 only the narrow series": Wrong(
        "04_more_batches", "l04-08", lambda s: s.split("rows += ")[0] + '\nREAD = "range_seen"', "l04-09",
        ("GrowthCheckFailed", "rows hold no right models: call lesson.grow(..., kind='right')",),
        parameters={"MAX_BATCHES": 8}),
    "04 the two series nested": Wrong(
        "04_more_batches", "l04-08",
        lambda s: s.replace("rows = lesson.grow(", "narrow_rows = lesson.grow(")
                   .replace("rows += lesson.grow(", "right_rows = lesson.grow(") + "\nrows = [narrow_rows, right_rows]",
        "l04-09", ("GrowthCheckFailed", "rows = [narrow_rows, right_rows] nests the two series",
                   "rows = narrow_rows + right_rows"), parameters={"MAX_BATCHES": 8}),
    "04 the right series grown from the narrow stream": Wrong(
        "04_more_batches", "l04-08", lambda s: s.replace("make_reader, right,", "make_reader, stream,"), "l04-09",
        ("GrowthCheckFailed", "right x 1 was calibrated on `stream` (lesson.narrow_batches), not on `right`",),
        parameters={"MAX_BATCHES": 8}),
    "04 the narrow series stops short": Wrong(
        "04_more_batches", "l04-08", lambda s: s.replace("GROWTH, counts,", "GROWTH, counts[:3],"), "l04-09",
        ("GrowthCheckFailed", "the narrow series has batch counts [1, 2, 4]", "up to MAX_BATCHES (8)"),
        parameters={"MAX_BATCHES": 8}),
    "04 reads accuracy": Wrong(
        "04_more_batches", "l04-08", lambda s: s.replace('READ = "range_seen"', 'READ = "accuracy"'), "l04-09",
        ("GrowthCheckFailed", "READ is 'accuracy': accuracy wanders"), parameters={"MAX_BATCHES": 8}),
    "05 QUInt8 activations": Wrong(
        "05_qdq_vs_qoperator", "l05-06", lambda s: s.replace('activation_type="QInt8"', 'activation_type="QUInt8"'),
        "l05-07", ("ExerciseCheckFailed", "activation_type='QUInt8'; lesson 05 asks activation_type='QInt8'")),
    "05 calibrated on the narrow set": Wrong(
        "05_qdq_vs_qoperator", "l05-06", lambda s: s.replace('calibration_set("right")', 'calibration_set("narrow")'),
        "l05-07", ("ExerciseCheckFailed", "images that are not lab.data.calibration_set('right')")),
    "05 prediction: QDQ is smaller, rulers differ": Wrong(
        "05_qdq_vs_qoperator", "l05-04b", lambda s: 'PREDICTION = {"smaller": "QDQ", "same_input_ruler": False}',
        "l05-12a", ("prediction wrong: you said QDQ is smaller", "they are the same", "one calibration cache"),
        fails=False),
    "05 prediction in the wrong form": Wrong(
        "05_qdq_vs_qoperator", "l05-04b", lambda s: 'PREDICTION = {"smaller": "qop", "same_input_ruler": True}',
        "l05-04b", ("PredictionError", "smaller: expected one of 'QDQ', 'QOperator', got 'qop'")),
    "07 prediction: dim and noisy fail too": Wrong(
        "07_calibrate_the_deployed_representation", "l07-11b", lambda s: 'PREDICTION = {"dim", "noisy", "flash"}',
        "l07-12", ("prediction wrong: you said dim, flash, noisy need(s) work; measured: flash (dim passes; noisy "
                   "passes)", "stay inside that range"), fails=False),
    "07 wrong ENTRY_TENSOR": Wrong(
        "07_calibrate_the_deployed_representation", "l07-15", lambda s: s + '\nENTRY_TENSOR = "fc3.out"', "l07-17",
        ("EntryCheckFailed", "ENTRY_TENSOR is 'fc3.out', but the first tensor in graph order", "'pixels'")),
    "07 selection from the held-out split": Wrong(
        "07_calibrate_the_deployed_representation", "l07-23",
        lambda s: s.replace('slice(0, None, 2))])', 'slice(0, None, 2))], split="heldout")'), "l07-24",
        ("ReleaseError", "there is no 'heldout' split here", "calibration split only")),
    "07 selection without flash": Wrong(
        "07_calibrate_the_deployed_representation", "l07-23",
        lambda s: 'fixed_selection = recipe.select([("daylight", None)])', "l07-24",
        ("SelectionCheckFailed", "holds only daylight", "add flash images")),
    "07 selection with the flash images only": Wrong(
        "07_calibrate_the_deployed_representation", "l07-23",
        lambda s: 'fixed_selection = recipe.select([("flash", slice(0, None, 2))])', "l07-24",
        ("SelectionCheckFailed", "lacks 300 of the 300 daylight images of the calibration pool", "('daylight', None)")),
}


@pytest.fixture(scope="module")
def kit(tmp_path_factory) -> Path:
    return kit_builder.build_kit(tmp_path_factory.mktemp("kit") / "student",
                                 rev=kit_builder.commit_of(kit_builder.REPO, "HEAD"))


@pytest.fixture(scope="module")
def workspace(tmp_path_factory, reference_workspace) -> Path:
    """Lessons 00-06 done right (the reference hand-in): what a student has when they reach each lesson."""
    return reference_workspace(tmp_path_factory.mktemp("done") / "workspace", growth_counts=(1, 2))


def _solution(source: str) -> str:
    """A cell's code as the instructor wrote it: markers out, hidden tests out."""
    return "\n".join(line for line in HIDDEN.sub("", source).splitlines() if line.strip() not in (BEGIN, END))


def _solution_region(source: str) -> str:
    lines = source.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == BEGIN)
    stop = next(i for i, line in enumerate(lines) if line.strip() == END)
    return "\n".join(lines[start + 1:stop])


def _with_wrong_answer(kit_nb: Path, case: Wrong) -> nbformat.NotebookNode:
    """The kit's lesson, cut after ``case.stop_after``: stubs filled with the instructor's solutions, one wrong."""
    nb = nbformat.read(kit_nb, as_version=4)
    source = {c.get("id"): c.source for c in nbformat.read(REPO / "notebooks" / kit_nb.name, as_version=4).cells}
    cells = []
    for cell in nb.cells:
        cid = cell.get("id")
        if cid == case.cell and BEGIN in source[cid]:
            region = _solution_region(source[cid])
            full = source[cid]
            start, stop = full.index(BEGIN), full.index(END) + len(END)
            cell.source = _solution(full[:start] + case.answer(region) + full[stop:])
        elif kit_builder.CODE_STUB in cell.source:
            cell.source = _solution(source[cid])
        cells.append(cell)
        if cid == case.stop_after:
            break
    nb.cells = cells
    return nb


def _text(nb_path: Path) -> str:
    """Everything the student sees below the cells: printed lines and the error a cell ended in."""
    out = []
    for cell in nbformat.read(nb_path, as_version=4).cells:
        for o in cell.get("outputs", []):
            if o.output_type == "stream":
                out.append(o.text)
            elif o.output_type == "error":
                out.append(f"{o.ename}: {o.evalue}\n" + "\n".join(o.traceback))
    return re.sub(r"\x1b\[[0-9;]*m", "", "\n".join(out))


def _error(nb_path: Path) -> str:
    """The error a run ended in, as the student sees it under the cell."""
    for cell in nbformat.read(nb_path, as_version=4).cells:
        for o in cell.get("outputs", []):
            if o.output_type == "error":
                return re.sub(r"\x1b\[[0-9;]*m", "", "\n".join(o.traceback))
    return ""


@pytest.mark.parametrize("name", list(CASES))
def test_a_wrong_answer_gets_a_message_that_names_the_mistake(name, kit, workspace, tmp_path, monkeypatch):
    case = CASES[name]
    monkeypatch.setenv("PYTHONPATH", str(kit))  # the kernel imports the kit's lab, as a student's does
    work = shutil.copytree(workspace, tmp_path / "workspace")
    (work / "predictions.json").unlink()  # the first answer counts: the lesson's cell must be the first to answer
    if case.reader:
        (work / "calibration_reader.py").write_text(case.reader)
    lesson = tmp_path / f"{case.lesson}.ipynb"
    nbformat.write(_with_wrong_answer(kit / "notebooks" / f"{case.lesson}.ipynb", case), lesson)
    got = run.run_lesson(lesson, tmp_path / "out", {"WORK_DIR": str(work), "INTERACTIVE": False, **case.parameters},
                         cwd=kit / "notebooks")
    text = _text(Path(got.output))
    assert (got.error is not None) == case.fails, (got.error, text[-2000:])
    for words in case.words:
        assert words in text, (words, text[-3000:])
    if case.fails:
        shown = _error(Path(got.output))
        assert "AssertionError" not in shown and "Traceback" not in shown and "File \"" not in shown, shown
        assert len(shown.splitlines()) <= 12, f"one message, not a traceback wall:\n{shown}"
    if not case.fails:
        saved = json.loads((work / "predictions.json").read_text())
        assert saved["schema"] == "predictions/2"
