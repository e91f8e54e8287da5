"""The workspace contract, written once: which lesson writes each workspace file, and whether it is handed in.

``lab submit`` packs what this says is handed in, the headless run's summary reads the documents it names,
the grader names the lesson that writes a missing file, and ``docs/workspace.md`` prints the table
(``python -m lab.contract`` writes it). Everything else reads these entries: no list of files elsewhere.

A path is a file inside ``WORK_DIR`` (``results.json``), a family of files (``growth/narrow-NNN.onnx``, with
``pattern`` its regular expression) or a folder (``drafts/``). ``hand_in`` is ``"required"`` (lessons 02-03:
the core of every hand-in, the grader's first checks), ``"optional"`` (a later lesson's; a missing one costs
only the checks that need it) or ``"never"`` (a fixture copy, working models, tables kept for the student).
"""
from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path

HAND_IN = ("required", "optional", "never")
# Any one handed-in file: ``lab submit`` refuses a bigger one and the grader will not unpack one. The lessons' largest
# file is a model of about 100 KB; the cap is there to stop a mistake (a dataset or a checkpoint in the workspace).
MAX_FILE_BYTES = 32 << 20


@dataclass(frozen=True)
class Entry:
    """One workspace file, family of files or folder: who writes it, whether it is handed in, what it is."""

    path: str
    lessons: tuple[str, ...]
    hand_in: str
    description: str
    schema: str | None = None  # the JSON Schema in lab/schemas/ that the document must match
    module: bool = False  # a student's Python module, run by the grader in its sandbox
    pattern: str | None = None  # for a family or a folder: the relative paths it covers
    exercise: str | None = None  # for a module: the class or function the student writes in it
    imports: tuple[str, ...] = ()  # for a module: lab modules it may import (the deployed path it must call, no helper)

    def matches(self, rel: str) -> bool:
        """Is ``rel`` a workspace file this entry covers? A family's placeholder (``growth/narrow-NNN.onnx``) names
        the entry (``entry_for``) but is no file of it: a file of that name is not handed in."""
        return re.fullmatch(self.pattern, rel) is not None if self.pattern else rel == self.path

    @property
    def folder(self) -> str | None:
        """``growth/`` for ``growth/narrow-NNN.onnx``: the unit a student is told is missing for a family."""
        return self.path.split("/", 1)[0] + "/" if self.pattern else None


ENTRIES: tuple[Entry, ...] = (
    Entry("source.onnx", ("00",), "never",
          "byte copy of `fixtures/fp32.onnx`; every conversion reads this, never the fixture (the converter writes "
          "temporary files next to its input); the grader has the fixture itself"),
    Entry("kernel-family.json", ("00",), "never",
          "the INT8 kernel family the workspace's numbers are computed as, recorded by the first lesson to open it; "
          "later lessons compute as it, and `lab submit` copies it into `submission.json`"),
    Entry("calibration_reader.py", ("02",), "required",
          "the reader: `class DigitReader(CalibrationDataReader)` with `__init__(self, pixels, "
          "batch_size=32, input_name=\"pixels\")`, `get_next()`, `rewind()`", module=True, exercise="DigitReader"),
    Entry("reader_check.onnx", ("02",), "never",
          "a conversion calibrated by the reader, to check it served every calibration image, in order, once"),
    Entry("narrow.onnx", ("03",), "required",
          "QDQ, QInt8 activations and weights, per-tensor, MinMax, calibrated with "
          "`DigitReader(lab.data.calibration_set(\"narrow\"), batch_size=36)`"),
    Entry("right.onnx", ("03",), "required", "the same conversion, calibrated with the `right` set"),
    Entry("wide.onnx", ("03",), "required", "the same conversion, calibrated with the `wide` set"),
    Entry("dynamic.onnx", ("03",), "required", "`quantize_dynamic` of `source.onnx`"),
    Entry("results.json", ("03",), "required", "every number lesson 03 reports", schema="results"),
    Entry("growth/narrow-NNN.onnx", ("04",), "optional",
          "one model per batch count of the narrow set (NNN: the count, zero-padded to 3 digits)",
          pattern=r"growth/narrow-\d{3}\.onnx"),
    Entry("growth/right-NNN.onnx", ("04",), "optional", "one model per batch count of the right set",
          pattern=r"growth/right-\d{3}\.onnx"),
    Entry("growth/right-all.onnx", ("04",), "never",
          "calibrated with all 360 right images: the lesson's comparison, not part of the series (no -NNN)"),
    Entry("growth.json", ("04",), "optional", "range seen and max abs error per batch count", schema="growth"),
    Entry("formats/model.qdq.onnx", ("05",), "optional", "QDQ format, from the calibration cache"),
    Entry("formats/model.qoperator.onnx", ("05",), "optional", "QOperator format, from the same cache"),
    Entry("formats/model.calibration.json", ("05",), "optional",
          "the calibration cache both formats were built from (ONNX Runtime's own layout: no schema of the lab's)"),
    Entry("formats.json", ("05",), "optional", "both formats' scales, errors and element-wise difference",
          schema="formats"),
    Entry("metrics.py", ("06",), "optional", "`summarize(predictions, labels) -> dict`", module=True,
          exercise="summarize"),
    Entry("candidate.onnx", ("06",), "optional",
          "QDQ, QInt8 activations and weights, per-channel, from the 360 calibration images"),
    Entry("regression.json", ("06",), "optional", "the accept/reject decisions and the evidence they rest on",
          schema="regression"),
    Entry("drafts/", ("06", "07"), "never",
          "working models: lesson 06's per-CPU variants, lesson 07's `daylight.onnx`, `daylight+flash.onnx`, "
          "the release's candidates (`candidates/`), the release candidate and debugging copies",
          pattern=r"drafts/.+"),
    Entry("release/model.onnx", ("07",), "optional", "the released model, its recipe in its metadata"),
    Entry("release/recipe.json", ("07",), "optional", "the recipe, versioned with the model", schema="recipe"),
    Entry("release/scenarios.json", ("07",), "optional", "the release against every named operating condition",
          schema="scenarios"),
    Entry("toolbox/", ("08", "09"), "never", "the toolbox's models, one per setting tried", pattern=r"toolbox/.+"),
    Entry("outliers.onnx", ("08",), "optional",
          "QDQ, QInt8, per-tensor, calibrated on the right set with stuck pixels by the method and options chosen"),
    Entry("outliers.json", ("08",), "optional",
          "the method and options chosen for the stuck-pixel set, and what outliers.onnx measures on both families",
          schema="outliers"),
    Entry("toolbox-tables.json", ("08",), "never",
          "the lesson's exploration tables (methods, outliers, batch combining, settings, sensitivity, ...): kept "
          "for the student; they describe models the hand-in does not hold", schema="toolbox-tables"),
    Entry("toolbox.json", ("09",), "optional",
          "the stated requirement, the candidates (both families, this CPU's time) and the choice", schema="toolbox"),
    Entry("choice.onnx", ("09",), "optional", "the model picked for the stated requirement"),
    Entry("camera_reader.py", ("10",), "optional",
          "the camera reader: `class FrameReader(CalibrationDataReader)` with `__init__(self, frames, batch_size=32, "
          "input_name=\"image\")` serving uint8 sensor frames through `lab.camera.preprocess`, `get_next()`, "
          "`rewind()`", module=True, exercise="FrameReader", imports=("lab.camera",)),
    Entry("camera/", ("10",), "never",
          "lesson 10's working models: a copy of the CNN fixture, its pre-processed graph, one conversion per recipe "
          "tried, the audit's data", pattern=r"camera/.+"),
    Entry("camera-release.onnx", ("10",), "optional",
          "the released camera CNN, stamped with its release id and the SHA-256 of camera-release.json"),
    Entry("camera-release.json", ("10",), "optional",
          "the release's recipe, what it was calibrated on, and its daylight numbers and scenario verdicts on both "
          "kernel families", schema="camera-release"),
    Entry("predictions.json", ("01", "03", "04", "05", "06", "07", "10"), "optional",
          "what the student predicted before each measurement (which set clips and which squashes, the input "
          "rulers, what more narrow batches do, the smaller format, which settings change answers on a saturating "
          "CPU, which scenarios the daylight draft fails, what attractive photographs cost); the grader "
          "judges each against the lesson's own sets and the fixture model, not the student's files (a wrong "
          "model costs its lesson's point, not a prediction's)", schema="predictions"),
)


def entry_for(rel: str) -> Entry | None:
    """The entry named ``rel`` (a family's placeholder, ``growth/narrow-NNN.onnx``, names its own) or else the one
    that covers ``rel`` (a path inside the workspace, ``/``-separated); None for neither."""
    return next((e for e in ENTRIES if e.path == rel), None) or next((e for e in ENTRIES if e.matches(rel)), None)


def lessons_of(rel: str) -> tuple[str, ...]:
    """Every lesson that writes ``rel`` (a file, or a family's folder such as ``growth/``); () if none does."""
    entry = entry_for(rel)
    if entry is None and rel.endswith("/"):
        entry = next((e for e in ENTRIES if e.path.startswith(rel)), None)
    return entry.lessons if entry else ()


def lesson_of(rel: str) -> str | None:
    """The first lesson that writes ``rel``: the one to run before handing in; None for a file no lesson writes."""
    return next(iter(lessons_of(rel)), None)


def handed_in(rel: str) -> bool:
    """Does ``lab submit`` take ``rel``? Only files the lessons write for the grader, never anything else."""
    entry = entry_for(rel)
    return entry is not None and entry.hand_in != "never" and entry.matches(rel)


def schema_of(rel: str) -> str | None:
    """The JSON Schema name ``rel`` must match (``"results"`` for ``results.json``), or None."""
    entry = entry_for(rel)
    return entry.schema if entry else None


def path_of_schema(schema: str) -> str:
    """The workspace file whose document matches ``schema`` (``"scenarios"`` -> ``release/scenarios.json``)."""
    for e in ENTRIES:
        if e.schema == schema:
            return e.path
    raise KeyError(f"no workspace file has the schema {schema!r}; have {sorted(e.schema for e in ENTRIES if e.schema)}")


def files(hand_in: str) -> tuple[str, ...]:
    """The single files (no families, no folders) with this ``hand_in`` (``"required"``, ...), in lesson order."""
    if hand_in not in HAND_IN:
        raise ValueError(f"hand_in {hand_in!r}: expected one of {HAND_IN}")
    return tuple(e.path for e in ENTRIES if e.hand_in == hand_in and not e.pattern)


def families() -> tuple[Entry, ...]:
    """The handed-in families of files (``growth/narrow-NNN.onnx``, ...)."""
    return tuple(e for e in ENTRIES if e.pattern and e.hand_in != "never")


def modules() -> tuple[str, ...]:
    """The student's Python modules: the grader runs them, so ``lab submit`` warns when one is still a stub."""
    return tuple(e.path for e in ENTRIES if e.module)


def exercises() -> dict[str, str]:
    """Each student module and the class or function the student writes in it (``{"metrics.py": "summarize"}``)."""
    return {e.path: e.exercise for e in ENTRIES if e.module and e.exercise is not None}


def allowed_imports() -> dict[str, tuple[str, ...]]:
    """Each student module and the lab modules it may import (``{"camera_reader.py": ("lab.camera",)}``)."""
    return {e.path: e.imports for e in ENTRIES if e.module and e.imports}


def files_of_lesson(lesson: str) -> tuple[str, ...]:
    """Paths (files, families, folders) lesson ``lesson`` (``"05"``) writes that are handed in."""
    return tuple(e.path for e in ENTRIES if lesson in e.lessons and e.hand_in != "never")


def missing_by_lesson(present) -> dict[str, list[str]]:
    """``{lesson: [paths]}`` of the handed-in files not in ``present``; a family counts as its folder (``growth/``)."""
    present = set(present)
    missing = [rel for rel in files("required") + files("optional") if rel not in present]
    folders = dict.fromkeys(e.folder for e in families() if e.folder is not None)
    missing += [f for f in folders if not any(e.matches(r) for e in families() if e.folder == f for r in present)]
    by_lesson: dict[str, list[str]] = {}
    for rel in missing:
        by_lesson.setdefault(lesson_of(rel) or "?", []).append(rel)
    return dict(sorted(by_lesson.items()))


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def markdown_table() -> str:
    """The table ``docs/workspace.md`` shows, one row per entry, in lesson order."""
    rows = ["| lesson | file | handed in | schema | what it is |", "|---|---|---|---|---|"]
    for e in ENTRIES:
        schema = f"`{e.schema}`" if e.schema else ""
        kind = "the student's module: " if e.module else ""
        rows.append(f"| {', '.join(e.lessons)} | `{e.path}` | {e.hand_in} | {schema} | {_cell(kind + e.description)} |")
    return "\n".join(rows) + "\n"


BEGIN = "<!-- BEGIN the contract's table: python -m lab.contract --write docs/workspace.md -->\n"
END = "<!-- END the contract's table -->\n"


def spliced(doc: str) -> str:
    """``doc`` with the text between ``BEGIN`` and ``END`` replaced by ``markdown_table()``."""
    start, stop = doc.find(BEGIN), doc.find(END)
    if start < 0 or stop < start:
        raise ValueError(f"the document has no table markers: expected the lines {BEGIN.strip()} and {END.strip()}")
    return doc[:start + len(BEGIN)] + "\n" + markdown_table() + "\n" + doc[stop:]  # blank lines: a table of its own


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.contract",
                                     description="print the workspace contract as a Markdown table")
    parser.add_argument("--write", metavar="DOC", help="replace the table between the markers in DOC instead")
    args = parser.parse_args(argv)
    if args.write:
        path = Path(args.write)
        path.write_text(spliced(path.read_text(encoding="utf-8")), encoding="utf-8")
    else:
        sys.stdout.write(markdown_table())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
