"""The reference hand-in: lessons 00-07 and 10 done right, built from the instructor notebooks' own solutions.

Instructors and tests use it to prove the grader gives full marks to a correct run, and the bad-submission corpus
is generated from it. It copies nothing of the solutions: every answer is read from the instructor notebooks, so
editing a notebook's solution changes the reference. The student modules (``calibration_reader.py``, ``metrics.py``,
``camera_reader.py``) are the notebooks' ``%%writefile`` cells; every other exercise is its ``### BEGIN SOLUTION``
block, run with the names the notebook gives them: lesson 03's three conversions, lesson 04's two ``grow`` calls,
lesson 05's conversion to both formats, lesson 07's calibration selection, lesson 10's release recipe, and the
predictions (each recorded under the question its cell's ``lab.predictions.record`` call names: its lesson module's
``PREDICTION``). The cells around the blocks (the candidate of lesson 06, the release of lesson 07, each lesson's
report) call lesson functions with lesson constants, and so does this module. ``build(work_dir)`` takes a few
seconds.

Left out: lessons 08 and 09 (``outliers.json``, ``outliers.onnx``, ``toolbox.json`` and ``choice.onnx``). Lesson
09's hand-in carries this CPU's timings (``speed.benchmark`` of its 32 candidates, ``speed.width_sweep``) of models
its earlier cells build, and lesson 08's exercise follows tables its earlier cells build: the two notebooks take
several times this build in the workbook run, so the grader's lesson 08 and 09 checks are proven by that run
(``python -m instructor workbook``), and tests/test_grader.py counts their points as the ones this hand-in cannot
earn.

Also left out: what lessons run but never hand in (lesson 07's entry-tensor exercise, lesson 06's kernel-family
prediction).
"""
from __future__ import annotations

import ast
import importlib
import json
import sys
import textwrap
from pathlib import Path

import numpy as np

import lab
from lab import camera, compare, convert, data, exercise, graph, kernels, predictions, workspace
from lab.lessons import lesson03_narrow_right_wide as lesson03
from lab.lessons import lesson04_more_batches as lesson04
from lab.lessons import lesson05_qdq_vs_qoperator as lesson05
from lab.lessons.lesson06_accept_or_reject import acceptance
from lab.lessons.lesson07_calibrate_the_deployed_representation import recipe, scenario_checks
from lab.lessons.lesson10_your_own_model import release as lesson10

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
# the notebook whose %%writefile cell writes each student module
STUDENT_MODULES = {"READER_SOURCE": ("02_the_calibration_reader.ipynb", "calibration_reader.py"),
                   "METRICS_SOURCE": ("06_accept_or_reject.ipynb", "metrics.py"),
                   "CAMERA_READER_SOURCE": ("10_your_own_model.ipynb", "camera_reader.py")}

# lesson 04's series as the reference builds it (tests/test_predictions.py and test_honest_mistakes.py read these);
# the lesson modules define every constant, these only name them
SETTINGS = exercise.SETTINGS
GROWTH_BATCH = lesson04.BATCH_SIZE
GROWTH_COUNTS = tuple(lesson04.doubling_counts(lesson04.MAX_BATCHES))
RIGHT_COUNTS = lesson04.RIGHT_BATCHES
SEED = 0  # every lesson's default SEED (its parameters cell)


SOLUTION_BEGIN, SOLUTION_END = "### BEGIN SOLUTION", "### END SOLUTION"  # the kit builder's markers


def _code_cells(notebook: str, notebooks: Path = NOTEBOOKS) -> list[str]:
    path = Path(notebooks) / notebook
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: the reference hand-in reads every answer from the instructor "
                                "notebooks, so build it from a checkout of the lab")
    return ["".join(c["source"]) for c in json.loads(path.read_text(encoding="utf-8"))["cells"]
            if c["cell_type"] == "code"]


def solution_module(notebook: str, name: str, notebooks: Path = NOTEBOOKS) -> str:
    """The module an instructor notebook writes with ``%%writefile {WORK}/<name>``: that cell, magic line out."""
    for source in _code_cells(notebook, notebooks):
        first, _, body = source.partition("\n")
        if first.startswith("%%writefile") and first.strip('"').endswith(f"/{name}"):
            return body.rstrip("\n") + "\n"
    raise LookupError(f"{notebook} has no code cell starting '%%writefile \"{{WORK}}/{name}\"'; expected the "
                      f"exercise cell that writes {name}")


def _solution_of(source: str) -> str:
    """The solution block of one cell, dedented; empty when the cell has none."""
    lines = source.splitlines()
    marks = [i for i, line in enumerate(lines) if line.strip() in (SOLUTION_BEGIN, SOLUTION_END)]
    if not marks:
        return ""
    return textwrap.dedent("\n".join(lines[marks[0] + 1:marks[-1]])) + "\n"


def _assigned(block: str) -> set[str]:
    """Names a block binds: assignments (``x[k] = ...`` binds into ``x``), loops and definitions."""
    names = set()
    for node in ast.walk(ast.parse(block)):
        targets = (node.targets if isinstance(node, ast.Assign) else
                   [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign, ast.For)) else [])
        for target in targets:
            while isinstance(target, (ast.Subscript, ast.Attribute)):
                target = target.value
            names |= {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}
        if isinstance(node, ast.FunctionDef):
            names.add(node.name)
    return names


def solution(notebook: str, name: str, notebooks: Path = NOTEBOOKS) -> str:
    """The one solution block of ``notebook`` that binds ``name`` (the student's exercise, as the instructor wrote
    it)."""
    cells = [c for c in _code_cells(notebook, notebooks) if not c.startswith("%%")]  # a %%writefile is a module
    blocks = [b for b in map(_solution_of, cells) if b and name in _assigned(b)]
    if len(blocks) != 1:
        raise LookupError(f"{notebook}: {len(blocks)} solution blocks bind {name!r}; expected exactly one "
                          f"({SOLUTION_BEGIN} ... {SOLUTION_END} in the exercise cell that sets it)")
    return blocks[0]


def run_solution(notebook: str, name: str, **names):
    """Run the solution block that binds ``name`` with ``names`` as the notebook's variables; return ``name``."""
    namespace = {"lab": lab, **names}
    exec(compile(solution(notebook, name), f"<{notebook}: the solution that sets {name}>", "exec"), namespace)
    return namespace[name]


def _python_cells(notebook: str, notebooks: Path = NOTEBOOKS, with_solution: bool = False) -> list[ast.Module]:
    """The notebook's Python code cells, parsed (a ``%%writefile`` cell left out, a ``%matplotlib`` line dropped);
    only those with a solution block if asked."""
    return [ast.parse("\n".join(line for line in source.splitlines() if not line.lstrip().startswith(("%", "!"))))
            for source in _code_cells(notebook, notebooks)
            if not source.startswith("%%") and (_solution_of(source) or not with_solution)]


def _imported(notebook: str, notebooks: Path = NOTEBOOKS) -> dict[str, str]:
    """name -> the module path a notebook's ``import`` and ``from ... import`` statements bind it to."""
    bound: dict[str, str] = {}
    for tree in _python_cells(notebook, notebooks):
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                bound |= {a.asname or a.name: f"{node.module}.{a.name}" for a in node.names}
            elif isinstance(node, ast.Import):
                bound |= {a.asname: a.name for a in node.names if a.asname}
    return bound


def predictions_asked(notebooks: Path = NOTEBOOKS) -> dict[str, tuple[predictions.Question, str, str]]:
    """question name -> (the lesson's ``Question``, notebook, variable), from each cell that calls
    ``lab.predictions.record(WORK, <module>.PREDICTION, VAR)`` after a solution block."""
    asked = {}
    for path in sorted(Path(notebooks).glob("[0-9][0-9]_*.ipynb")):
        for tree in _python_cells(path.name, notebooks, with_solution=True):
            for node in ast.walk(tree):
                if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "record"
                        and ast.unparse(node.func.value).endswith("predictions") and len(node.args) == 3
                        and isinstance(node.args[1], ast.Attribute) and isinstance(node.args[1].value, ast.Name)
                        and isinstance(node.args[2], ast.Name)):
                    module = importlib.import_module(_imported(path.name, notebooks)[node.args[1].value.id])
                    question = getattr(module, node.args[1].attr)
                    asked[question.name] = (question, path.name, node.args[2].id)
    return asked


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


def _results(work: Path, reader, evaluation: data.Split, reference: np.ndarray) -> dict:
    """Lesson 03: notebook 03's three conversions (its solution), the dynamic model, then the lesson's report."""
    source = work / "source.onnx"
    records = run_solution("03_narrow_right_wide.ipynb", "records", records={}, KINDS=data.KINDS,
                           calibration_reader=reader, BATCH_SIZE=data.BATCH_SIZE, SOURCE=source, WORK=work)
    convert.quantize_dynamic_model(source, work / "dynamic.onnx")
    return lesson03.results_report(work, records, evaluation, reference, data.BATCH_SIZE)


def _growth(work: Path, reader, evaluation: data.Split, reference: np.ndarray, counts) -> dict:
    """Lesson 04: notebook 04's two ``grow`` calls (its solution) over ``counts``, then the report."""
    source, size = work / "source.onnx", lesson04.BATCH_SIZE
    stream = lesson04.narrow_batches(max(counts), size, SEED)
    rows = run_solution("04_more_batches.ipynb", "rows", lesson=lesson04, calibration_reader=reader,
                        BATCH_SIZE=size, SOURCE=source, GROWTH=work / lesson04.FOLDER, counts=list(counts),
                        stream=stream, right=data.calibration_set("right"), RIGHT_BATCHES=lesson04.RIGHT_BATCHES,
                        x=evaluation.pixels, labels=evaluation.labels, reference=reference,
                        show=lambda row: None, SETTINGS=lesson04.SETTINGS)
    return lesson04.growth_report(source, rows, stream, evaluation, max_batches=max(counts), seed=SEED)


def _formats(work: Path, reader, evaluation: data.Split, reference: np.ndarray) -> dict:
    """Lesson 05: notebook 05's conversion to both formats from one calibration (its solution), then the report."""
    source, folder = work / "source.onnx", work / lesson05.FOLDER
    folder.mkdir(exist_ok=True)
    records = run_solution("05_qdq_vs_qoperator.ipynb", "records", lesson=lesson05, calibration_reader=reader,
                           BATCH_SIZE=data.BATCH_SIZE, SOURCE=source, FORMATS=folder)
    return lesson05.formats_report(source, folder, records, evaluation, reference, data.BATCH_SIZE)


def _regression(work: Path, reader, evaluation: data.Split) -> dict:
    """Lesson 06: the candidate, then each model summarized by the student's ``metrics.summarize`` and judged."""
    x, labels = evaluation.pixels, evaluation.labels
    convert.quantize(work / "source.onnx", work / "candidate.onnx",
                     reader.DigitReader(data.calibration_set("right"), batch_size=data.BATCH_SIZE),
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


def _release(work: Path, reader, evaluation: data.Split) -> None:
    """Lesson 07: calibrate on notebook 07's selection (its solution), check every scenario on every kernel
    family, write release/ with its recipe."""
    source, drafts = work / "source.onnx", work / "drafts"
    drafts.mkdir(exist_ok=True)
    selection = run_solution("07_calibrate_the_deployed_representation.ipynb", "fixed_selection", recipe=recipe)
    draft = drafts / "release-candidate.onnx"
    record = convert.quantize(source, draft, reader.DigitReader(selection.pixels, batch_size=data.BATCH_SIZE),
                              **recipe.RELEASE_SETTINGS)
    by_family = scenario_checks.compare_families(source, draft, evaluation.pixels, evaluation.labels,
                                                 kernels.FAMILIES, seed=SEED)
    here = by_family[kernels.target_family()]
    doc = recipe.recipe(recipe.RELEASE_ID, source, selection, record.settings, data.BATCH_SIZE, evaluation, here,
                        draft, recipe.NOT_COVERED, by_family=by_family, seed=SEED)
    recipe.write_release(work / "release", draft, doc, evaluation, here)


def _camera(work: Path) -> None:
    """Lesson 10: the camera reader (its %%writefile cell), then notebook 10's RECIPE and JUSTIFICATION (its solution,
    given the tables it cites: section 2's two sets and section 6's two per-channel QDQ forms) released as the
    notebook's last cells release it."""
    (work / "camera_reader.py").write_text(sys.modules[__name__].CAMERA_READER_SOURCE)
    reader = workspace.load_module(work, "camera_reader")
    source, ev = lesson10.workspace_source(work), camera.load_split("evaluation")
    sets = lesson10.sets_measured(source, work / "camera", reader.FrameReader, ev.image, ev.labels, ev.frames, SEED)
    forms = {n: lesson10.build(source, work / "camera", {"calibration": "camera", "pre_process": True,
                                                          **lesson10.FORMS[n]}, reader.FrameReader)[0]
             for n in ("per-channel QDQ", "per-channel QDQ + reduce_range")}
    names = {"sets": sets, "form_rows": lesson10.family_rows(source, forms, ev.image, ev.labels)}
    recipe_ = run_solution("10_your_own_model.ipynb", "RECIPE", **names)
    justification = run_solution("10_your_own_model.ipynb", "JUSTIFICATION", **names)
    lesson10.release_workspace(work, reader.FrameReader, recipe_, justification, seed=SEED)


def _predictions(work: Path) -> None:
    """Every prediction a notebook records after a solution block: that block's answer, under its question."""
    for question, notebook, variable in predictions_asked().values():
        predictions.record(work, question, run_solution(notebook, variable, KINDS=data.KINDS))


def build(work_dir: str | Path, growth_counts=GROWTH_COUNTS, student: str | None = None) -> Path:
    """Write a complete, correct workspace for lessons 00-07 and 10 into ``work_dir`` and return its path
    (lessons 08 and 09 are left out: see the module's docstring). ``student``: lesson 00's ``STUDENT_ID``, whose
    variant of the data it is made with (``lab.variant``; None: the reference variant)."""
    work = workspace.make_workspace(work_dir, student=student)
    this = sys.modules[__name__]  # attribute access goes through __getattr__, so a source a test assigned wins
    (work / "calibration_reader.py").write_text(this.READER_SOURCE)
    (work / "metrics.py").write_text(this.METRICS_SOURCE)
    reader = workspace.load_module(work, "calibration_reader")  # the notebooks' `calibration_reader`
    evaluation = data.load_split("evaluation")
    reference = compare.predict(work / "source.onnx", evaluation.pixels)
    _dump(work / "results.json", _results(work, reader, evaluation, reference))
    _dump(work / "growth.json", _growth(work, reader, evaluation, reference, growth_counts))
    _dump(work / "formats.json", _formats(work, reader, evaluation, reference))
    _dump(work / "regression.json", _regression(work, reader, evaluation))
    _predictions(work)
    _release(work, reader, evaluation)
    _camera(work)
    return work
