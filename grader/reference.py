"""The reference hand-in: lessons 00-07 done right, built by the functions the notebooks call.

Instructors and tests use it to prove the grader gives full marks to a correct run, and the bad-submission corpus
is generated from it. Nothing of the solution is copied here: the student's modules (``calibration_reader.py``,
``metrics.py``) are read from the instructor notebooks' ``%%writefile`` cells (their solution markers kept: they
are comments), each conversion is the lesson's own call with the lesson's constants, and each report is assembled
by the lesson module's function that the notebook's report cell calls. ``build(work_dir)`` takes a few seconds.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from lab import compare, convert, data, graph, kernels, predictions, ruler, workspace
from lab.lessons import lesson03_narrow_right_wide as lesson03
from lab.lessons import lesson04_more_batches as lesson04
from lab.lessons import lesson05_qdq_vs_qoperator as lesson05
from lab.lessons.lesson06_accept_or_reject import acceptance
from lab.lessons.lesson07_calibrate_the_deployed_representation import recipe, scenario_checks

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
# the notebook whose %%writefile cell writes each student module
STUDENT_MODULES = {"READER_SOURCE": ("02_the_calibration_reader.ipynb", "calibration_reader.py"),
                   "METRICS_SOURCE": ("06_accept_or_reject.ipynb", "metrics.py")}

# lesson 04's series as the reference builds it (tests/test_predictions.py and test_honest_mistakes.py read these);
# the lesson modules define every constant, these only name them
SETTINGS = lesson03.SETTINGS
GROWTH_BATCH = lesson04.BATCH_SIZE
GROWTH_COUNTS = tuple(lesson04.doubling_counts(lesson04.MAX_BATCHES))
RIGHT_COUNTS = lesson04.RIGHT_BATCHES
SEED = 0  # every lesson's default SEED (its parameters cell)


def solution_module(notebook: str, name: str, notebooks: Path = NOTEBOOKS) -> str:
    """The module an instructor notebook writes with ``%%writefile {WORK_DIR}/<name>``: that cell, magic line out."""
    path = Path(notebooks) / notebook
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: the reference hand-in reads the student modules from the "
                                "instructor notebooks, so build it from a checkout of the lab")
    for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
        first, _, body = "".join(cell["source"]).partition("\n")
        if cell["cell_type"] == "code" and first.startswith("%%writefile") and first.endswith(f"/{name}"):
            return body.rstrip("\n") + "\n"
    raise LookupError(f"{path.name} has no code cell starting '%%writefile {{WORK_DIR}}/{name}'; expected the "
                      f"exercise cell that writes {name}")


def __getattr__(name: str) -> str:
    """``READER_SOURCE`` and ``METRICS_SOURCE``, read from the notebooks on first use (the grader imports this
    module for the constants above, where no notebooks may be installed). A test may assign either to change what
    ``build`` writes."""
    if name in STUDENT_MODULES:
        globals()[name] = solution_module(*STUDENT_MODULES[name])
        return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _dump(path: Path, obj: dict) -> None:
    path.write_text(json.dumps(obj, indent=2, allow_nan=False) + "\n", encoding="utf-8")


def _hidden_layer(model: Path, x: np.ndarray) -> dict:
    """What ``results.json`` reports about a model's ruler on the first hidden activation (lesson 03's call)."""
    return lesson03.hidden_layer(model, data.fixture_path("fp32.onnx"), x)


def _results(work: Path, reader_cls, evaluation: data.Split, reference: np.ndarray) -> dict:
    """Lesson 03: one conversion per calibration set (the exercise), the dynamic model, then the lesson's report."""
    source = work / "source.onnx"
    records = {kind: convert.quantize(source, work / f"{kind}.onnx",
                                      reader_cls(data.calibration_set(kind), batch_size=data.BATCH_SIZE),
                                      **lesson03.SETTINGS)
               for kind in data.KINDS}
    convert.quantize_dynamic_model(source, work / "dynamic.onnx")
    return lesson03.results_report(work, records, evaluation, reference, data.BATCH_SIZE)


def _growth(work: Path, reader_cls, evaluation: data.Split, reference: np.ndarray, counts) -> dict:
    """Lesson 04: the narrow series and the right one (the exercise's two ``grow`` calls), then the report."""
    source, size = work / "source.onnx", lesson04.BATCH_SIZE
    stream = data.narrow_batches(max(counts), size, SEED)
    common = dict(make_reader=lambda pixels: reader_cls(pixels, batch_size=size), batch_size=size,
                  x=evaluation.pixels, labels=evaluation.labels, reference=reference, **lesson04.SETTINGS)
    rows = lesson04.grow(source, work / lesson04.FOLDER, counts, stream=stream, kind="narrow", **common)
    rows += lesson04.grow(source, work / lesson04.FOLDER, lesson04.RIGHT_BATCHES,
                          stream=data.calibration_set("right"), kind="right", **common)
    return lesson04.growth_report(source, rows, stream, evaluation, max_batches=max(counts), seed=SEED)


def _formats(work: Path, reader_cls, evaluation: data.Split, reference: np.ndarray) -> dict:
    """Lesson 05: both formats from one calibration (the exercise), then the report."""
    source, folder = work / "source.onnx", work / lesson05.FOLDER
    folder.mkdir(exist_ok=True)
    reader = reader_cls(data.calibration_set(lesson05.CALIBRATION_SET), batch_size=data.BATCH_SIZE)
    records = convert.quantize_both_formats(source, folder, reader, stem=lesson05.STEM, **lesson05.FORMAT_SETTINGS)
    return lesson05.formats_report(source, folder, records, evaluation, reference, data.BATCH_SIZE)


def _regression(work: Path, reader_cls, evaluation: data.Split) -> dict:
    """Lesson 06: the candidate, then each model summarized by the student's ``metrics.summarize`` and judged."""
    x, labels = evaluation.pixels, evaluation.labels
    convert.quantize(work / "source.onnx", work / "candidate.onnx",
                     reader_cls(data.calibration_set("right"), batch_size=data.BATCH_SIZE),
                     **acceptance.CANDIDATE_SETTINGS)
    metrics = workspace.load_module(work, "metrics")
    entries = {}
    for name, model in (("fp32", work / "source.onnx"), ("candidate", work / "candidate.onnx"),
                        ("bad", data.fixture_path("bad-calibration.onnx"))):
        probs = compare.predict(model, x)
        summary = metrics.summarize(probs.argmax(1).tolist(), labels.tolist())
        tol = acceptance.probability_tolerance(graph.output_scale(model))
        entries[name] = acceptance.model_entry(model, summary, acceptance.check_probabilities(probs, tol),
                                               acceptance.evidence(model, x, labels))
    return acceptance.regression(entries, data.data_sha256(x))


def _release(work: Path, reader_cls, evaluation: data.Split) -> None:
    """Lesson 07: calibrate on daylight + flash (the exercise's selection), check every scenario on every kernel
    family, write release/ with its recipe."""
    source, drafts = work / "source.onnx", work / "drafts"
    drafts.mkdir(exist_ok=True)
    selection = recipe.select([("daylight", None), ("flash", slice(0, None, 6))])
    draft = drafts / "release-candidate.onnx"
    record = convert.quantize(source, draft, reader_cls(selection.pixels, batch_size=data.BATCH_SIZE),
                              **recipe.RELEASE_SETTINGS)
    by_family = scenario_checks.compare_families(source, draft, evaluation.pixels, evaluation.labels,
                                                 kernels.FAMILIES, seed=SEED)
    here = by_family[kernels.target_family()]
    doc = recipe.recipe(recipe.RELEASE_ID, source, selection, record.settings, data.BATCH_SIZE, evaluation, here,
                        draft, recipe.NOT_COVERED, by_family=by_family)
    recipe.write_release(work / "release", draft, doc, evaluation, here)


def _predictions(work: Path) -> None:
    """The predictions a student who reasoned right writes: the input rulers worked out from each set's range."""
    rulers = {}
    for kind in data.KINDS:
        calib = data.calibration_set(kind)
        scale, zp = ruler.scale_zero_point(min(float(calib.min()), 0.0), float(calib.max()), "int8")
        rulers[kind] = {"scale": float(scale), "zero_point": int(zp)}
    for question, answer in {"clip_or_squash": {"clips": "narrow", "squashes": "wide"}, "input_rulers": rulers,
                             "more_batches": {"narrow_reaches_right": False, "largest_narrow_range": 0.25},
                             "formats": {"smaller": "QOperator", "same_input_ruler": True},
                             "entry_tensor": "pixels"}.items():
        predictions.record(work, question, answer)


def build(work_dir: str | Path, growth_counts=GROWTH_COUNTS) -> Path:
    """Write a complete, correct workspace for lessons 00-07 into ``work_dir`` and return its path."""
    work = workspace.make_workspace(work_dir)
    this = sys.modules[__name__]  # attribute access goes through __getattr__, so a source a test assigned wins
    (work / "calibration_reader.py").write_text(this.READER_SOURCE)
    (work / "metrics.py").write_text(this.METRICS_SOURCE)
    reader_cls = workspace.student_reader(work)
    evaluation = data.load_split("evaluation")
    reference = compare.predict(work / "source.onnx", evaluation.pixels)
    _dump(work / "results.json", _results(work, reader_cls, evaluation, reference))
    _dump(work / "growth.json", _growth(work, reader_cls, evaluation, reference, growth_counts))
    _dump(work / "formats.json", _formats(work, reader_cls, evaluation, reference))
    _dump(work / "regression.json", _regression(work, reader_cls, evaluation))
    _predictions(work)
    _release(work, reader_cls, evaluation)
    return work
