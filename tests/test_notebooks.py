"""The lessons themselves: conventions, a papermill run of each with small parameters, and nbval.

The papermill run goes lesson by lesson into one shared workspace (later lessons read what earlier
ones wrote). nbval runs on copies whose parameters cell points WORK_DIR into ``tmp_path``, so a test
run never writes into the repository.
"""
from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import nbformat
import pytest

from instructor import workbook
from lab import kernels
from lab.tools import run

REPO = Path(__file__).resolve().parents[1]
TESTS = Path(__file__).resolve().parent
LESSONS = run.discover()
NAMES = [nb.name for nb in LESSONS]
NBVAL_TIMEOUT_S = 3000
FIGURE_WITH_ALT = re.compile(r'<figure[^>]*><img src="data:image/png;base64,[^"]+" alt="[^"]*\d[^"]{20,}"')
FIGURE = re.compile(r'<figure class="lab-figure".*?</figure>', re.S)
# a figure's data (lab.figure_data): at least one row as a table, and the CSV to download
FIGURE_DATA = re.compile(r"<summary>The figure's data \([1-9]\d* rows.*?<a download=\"[^\"]+\.csv\" "
                         r'href="data:text/csv;charset=utf-8,[^"]+".*?<tbody><tr>', re.S)


def figures_without_data(nb: nbformat.NotebookNode) -> list[str]:
    """The captions of the figures in ``nb``'s outputs that carry no data table with its CSV."""
    shown = [f for c in code_cells(nb) for o in c.outputs
             for f in FIGURE.findall(o.get("data", {}).get("text/html", ""))]
    return [re.sub(r"<.*", "", f.split("<figcaption>", 1)[-1])[:80] for f in shown if not FIGURE_DATA.search(f)]


def read(name: str) -> nbformat.NotebookNode:
    return nbformat.read(run.NOTEBOOKS / name, as_version=4)


def code_cells(nb: nbformat.NotebookNode) -> list[nbformat.NotebookNode]:
    return [c for c in nb.cells if c.cell_type == "code"]


# --- conventions (no kernel) -------------------------------------------------------------------

@pytest.mark.parametrize("name", NAMES)
def test_lesson_follows_the_notebook_conventions(name):
    nb = read(name)
    assert nb.nbformat == 4
    assert nb.metadata.get("kernelspec", {}).get("name") == "calibration-lab", f"{name}: kernelspec name"
    assert nb.metadata["kernelspec"].get("display_name") == "Calibration Lab", f"{name}: kernelspec display_name"
    assert nb.cells[0].cell_type == "markdown" and "You will be able to" in nb.cells[0].source, \
        f"{name}: the first cell should say what the student will be able to do"
    last_md = [c for c in nb.cells if c.cell_type == "markdown"][-1]
    assert "what really matters in practice" in last_md.source.lower(), \
        f"{name}: the last markdown cell should be 'What really matters in practice'"
    first_code = code_cells(nb)[0].source
    assert re.search(r"^\s*(import lab\b|from lab\b)", first_code, re.M), f"{name}: the first code cell imports lab"


@pytest.mark.parametrize("name", NAMES)
def test_parameters_cell_holds_literals_only(name):
    nb = read(name)
    cell = run.parameters_cell(nb)
    assert cell is not None, f"{name}: no code cell tagged 'parameters'"
    for node in ast.parse(cell.source).body:
        assert isinstance(node, (ast.Assign, ast.AnnAssign)), \
            f"{name}: parameters cell line {node.lineno} is not an assignment"
        ast.literal_eval(node.value)  # raises ValueError on anything but a literal
    declared = run.declared_parameters(nb)
    assert {"WORK_DIR", "SEED", "INTERACTIVE"} <= declared.keys(), f"{name}: declares {sorted(declared)}"
    assert declared["WORK_DIR"] == "../workspace", f"{name}: WORK_DIR default should be '../workspace'"


def test_a_lesson_parameter_defaults_to_its_lesson_constant():
    """A run-size parameter is a literal (papermill sets it) whose default is the lesson module's constant, which
    the grader's reference hand-in builds with: the two must not drift."""
    from lab.lessons import lesson04_more_batches

    declared = run.declared_parameters(read("04_more_batches.ipynb"))
    assert declared["MAX_BATCHES"] == lesson04_more_batches.MAX_BATCHES
    for name in NAMES:
        declared = run.declared_parameters(read(name))
        assert not {"BATCH_SIZE", "RIGHT_BATCHES", "RELEASE_ID", "TARGET_FAMILIES"} & declared.keys(), \
            f"{name}: a lesson constant is a parameter again; read it from the lesson module"


@pytest.mark.parametrize("name", NAMES)
def test_committed_without_outputs_except_nbval_references(name):
    for index, cell in enumerate(code_cells(read(name))):
        checked = cell.source.lstrip().startswith("# NBVAL_CHECK_OUTPUT")
        if cell.outputs and not checked:
            pytest.fail(f"{name}: code cell {index} has outputs; commit lessons without outputs")
        if cell.outputs and cell.execution_count is None:
            pytest.fail(f"{name}: code cell {index} keeps nbval reference outputs but execution_count is null, "
                        "which nbval rejects ('Unrun reference cell has outputs')")


# --- papermill: every lesson, in order, one workspace ---------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_lesson_runs_headless_with_small_parameters(lesson_suite, name):
    result = lesson_suite.runs[name]
    assert result.ok, f"{name} failed under papermill: {result.error} (executed copy: {result.output})"
    executed = nbformat.read(result.output, as_version=4)
    errors = [o for c in code_cells(executed) for o in c.outputs if o.output_type == "error"]
    assert not errors
    cells = code_cells(executed)
    as_text = [i for i, c in enumerate(cells) for o in c.outputs
               if o.get("data", {}).get("text/plain", "").startswith("<Figure size")]
    assert not as_text, f"{name}: code cells {as_text} show a figure as text instead of a picture"
    bare = [i for i, c in enumerate(cells) for o in c.outputs if "image/png" in o.get("data", {})]
    assert not bare, f"{name}: code cells {bare} show a picture without alt text (not through lab.plots.shown)"
    drawn = [i for i, c in enumerate(cells)
             if any(line.startswith(("lab.plots.shown(", "display(lab.plots.shown("))
                    for line in c.source.splitlines())]
    blank = [i for i in drawn if not any(FIGURE_WITH_ALT.search(o.get("data", {}).get("text/html", ""))
                                         for o in cells[i].outputs)]
    assert not blank, f"{name}: code cells {blank} call lab.plots.shown but show no picture with alt text"
    bare_figures = figures_without_data(executed)
    assert not bare_figures, f"{name}: figures without their data (a table and a CSV): {bare_figures}"
    assert not any(c.outputs for c in code_cells(read(name))
                   if not c.source.lstrip().startswith("# NBVAL_CHECK_OUTPUT")), "the source was written over"


@pytest.mark.slow
def test_the_headless_workspace_is_graded_in_full(lesson_suite, tmp_path):
    """What `make lab` does after the lessons: hand the workspace in and grade it."""
    if not all(r.ok for r in lesson_suite.runs.values()) or not NAMES:
        pytest.skip("a lesson failed (reported above), so the workspace is incomplete")
    result = workbook.grade_workspace(lesson_suite.work_dir, tmp_path)
    lost = [f"{c.part}: {c.name}: {c.message}" for c in result.checks if c.points < c.max_points]
    assert result.status == "graded", f"the solutions' workspace was not graded: {result.reason}"
    assert result.max_score > 0 and not lost, f"the solutions lose points: {lost}"


# --- nbval over copies of the lessons ----------------------------------------------------------

def point_parameters(nb: nbformat.NotebookNode, values: dict[str, object]) -> nbformat.NotebookNode:
    """Rewrite the assignments in the parameters cell for the names in ``values`` the notebook declares."""
    cell = run.parameters_cell(nb)
    lines = cell.source.splitlines()
    for i, line in enumerate(lines):
        match = re.match(r"^(\w+)\s*(?::[^=]+)?=", line)
        if match and match.group(1) in values:
            lines[i] = f"{match.group(1)} = {values[match.group(1)]!r}"
    cell.source = "\n".join(lines)
    return nb


def nbval_copy(notebooks: list[Path], dest: Path, values: dict[str, object]) -> Path:
    """Copies of ``notebooks`` in ``dest`` with their parameters rewritten, plus this folder's conftest."""
    dest.mkdir(parents=True)
    for path in notebooks:
        nbformat.write(point_parameters(nbformat.read(path, as_version=4), values), dest / path.name)
    for path in run.NOTEBOOKS.iterdir():  # anything else the lessons read relative to their folder
        if path.suffix != ".ipynb" and not path.name.startswith("."):
            (shutil.copytree if path.is_dir() else shutil.copyfile)(path, dest / path.name)
    shutil.copyfile(TESTS / "conftest.py", dest / "conftest.py")
    return dest


def listing(folder: Path) -> set[str]:
    """Every file under ``folder`` except caches and checkpoints."""
    return {p.relative_to(folder).as_posix() for p in folder.rglob("*")
            if p.is_file() and not {"__pycache__", ".ipynb_checkpoints"} & set(p.relative_to(folder).parts)}


def test_point_parameters_rewrites_only_declared_names():
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        'WORK_DIR = "../workspace"  # where\nSEED = 0\nINTERACTIVE: bool = True', metadata={"tags": ["parameters"]})])
    point_parameters(nb, {"WORK_DIR": "/x/ws", "INTERACTIVE": False, "MAX_BATCHES": 4})
    assert run.declared_parameters(nb) == {"WORK_DIR": "/x/ws", "SEED": 0, "INTERACTIVE": False}


# nbval runs every lesson once per kernel family, in one pytest process over copies of the lessons
# (later lessons read what earlier ones wrote); one test per lesson and family reads that run's
# outcome for its cells, so `-k 06` selects lesson 06's two nbval tests and runs lessons 00-06 only.
FAMILIES = ("this machine's", "the other")
OUTCOME = re.compile(r"^(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS) \S*?([^/\s]+\.ipynb)::(.*)$", re.M)


@dataclass(frozen=True)
class NbvalRun:
    """One nbval run over copies of ``notebooks`` as ``family`` computes."""

    family: str
    env_family: str | None  # LAB_KERNEL_FAMILY for the run; None: this machine's
    notebooks: tuple[str, ...]
    folder: Path  # tmp folder: notebooks/ (the copies), workspace/, nbval.log
    returncode: int
    stdout: str
    stderr: str
    before: frozenset
    after: frozenset

    def outcomes(self, name: str) -> list[tuple[str, str]]:
        """(outcome, cell) for each of ``name``'s cells nbval collected."""
        return [(m.group(1), m.group(3)) for m in OUTCOME.finditer(self.stdout) if m.group(2) == name]

    def failures(self, name: str) -> str:
        """nbval's failure reports for ``name``'s cells (up to 8,000 characters)."""
        text = self.stdout.split("= FAILURES =", 1)[-1] if "= FAILURES =" in self.stdout else ""
        blocks = re.split(r"\n(?=_{3,} )", text)
        return "\n".join(b for b in blocks if name in b.split("\n", 1)[0])[:8000]


def other_family() -> str:
    return next(f for f in kernels.FAMILIES if f != kernels.machine_family())


def run_nbval(family: str, notebooks: list[Path], tmp_path: Path) -> NbvalRun:
    """nbval over copies of ``notebooks`` whose parameters cell points WORK_DIR into ``tmp_path``."""
    env_family = other_family() if family == "the other" else None
    env = dict(os.environ, **({kernels.ENV_VAR: env_family} if env_family else {}))
    if env_family is None:
        env.pop(kernels.ENV_VAR, None)
    copies = nbval_copy(notebooks, tmp_path / "notebooks", {"WORK_DIR": str(tmp_path / "workspace"),
                                                            "INTERACTIVE": False})
    cmd = [sys.executable, "-m", "pytest", "--nbval-lax", "--nbval-current-env",
           "--nbval-sanitize-with", str(TESTS / "nbval_sanitize.cfg"), "--nbval-cell-timeout", "900",
           "-p", "no:cacheprovider", "-p", "no:xdist", "-o", "addopts=", "--rootdir", str(tmp_path), "-q", "-rA",
           str(copies)]
    before = listing(copies)
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=NBVAL_TIMEOUT_S)
    (tmp_path / "nbval.log").write_text(proc.stdout + proc.stderr)
    return NbvalRun(family, env_family, tuple(nb.name for nb in notebooks), tmp_path, proc.returncode, proc.stdout,
                    proc.stderr, frozenset(before), frozenset(listing(copies)))


def lessons_needed(items) -> list[Path]:
    """Every lesson up to the last one a selected nbval test names (lessons read what earlier ones
    wrote); all of them when a test about the whole run is selected."""
    names = set()
    for item in items:
        if item.originalname == "test_nbval_passes_on_the_lesson":
            names.add(item.callspec.params["name"])
        elif item.originalname in WHOLE_RUN_TESTS:
            return LESSONS
    last = max((NAMES.index(n) for n in names), default=len(NAMES) - 1)
    return LESSONS[:last + 1]


_NBVAL_RUNS: dict[str, NbvalRun] = {}


@pytest.fixture(scope="session")
def nbval_runs(request, tmp_path_factory):
    """``get(family)``: that family's nbval run, made once per session (per xdist worker: conftest puts
    every nbval test of one family in one xdist group, so each family runs once)."""
    def get(family: str) -> NbvalRun:
        if family not in _NBVAL_RUNS:
            tmp = tmp_path_factory.mktemp("nbval-other" if family == "the other" else "nbval-this")
            _NBVAL_RUNS[family] = run_nbval(family, lessons_needed(request.session.items), tmp)
        return _NBVAL_RUNS[family]
    return get


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("family", FAMILIES)
def test_nbval_passes_on_the_lesson(nbval_runs, family, name):
    """On this machine's INT8 kernels, and as the other kernel family computes (``LAB_KERNEL_FAMILY``):
    every assertion and every compared output of the lesson must hold on both families."""
    result = nbval_runs(family)
    outcomes = result.outcomes(name)
    tail = "\n".join(result.stdout.splitlines()[-40:])
    assert outcomes, (f"nbval collected no cells of {name} (exit {result.returncode}); full log "
                      f"{result.folder / 'nbval.log'}\n{tail}\n{result.stderr[-2000:]}")
    bad = [f"{cell}: {outcome}" for outcome, cell in outcomes if outcome in ("FAILED", "ERROR")]
    assert not bad, (f"nbval failed on {name} ({family}): {bad}; full log {result.folder / 'nbval.log'}\n"
                     f"{result.failures(name)}")
    assert any(outcome == "PASSED" for outcome, _ in outcomes), f"no cell of {name} passed: {outcomes}"


@pytest.mark.slow
@pytest.mark.parametrize("family", FAMILIES)
def test_nbval_run_writes_only_into_work_dir(nbval_runs, family):
    result = nbval_runs(family)
    assert result.returncode == 0, (f"nbval failed (exit {result.returncode}); full log "
                                    f"{result.folder / 'nbval.log'}\n" + "\n".join(result.stdout.splitlines()[-40:]))
    passed = re.search(r"(\d+) passed", result.stdout)
    assert passed and int(passed.group(1)) > 0, "nbval collected no cells"
    assert result.after == result.before, f"lessons wrote next to the notebooks: {sorted(result.after - result.before)}"
    assert (result.folder / "workspace" / "source.onnx").exists(), "the lessons did not write into WORK_DIR"


@pytest.mark.slow
def test_the_other_familys_nbval_workspace_is_graded_in_full_here(nbval_runs, tmp_path):
    """The workspace the lessons made as the other family computes grades in full on this machine."""
    result = nbval_runs("the other")
    assert result.returncode == 0, f"nbval failed (exit {result.returncode}); see {result.folder / 'nbval.log'}"
    with kernels.computing_as(result.env_family):
        graded = workbook.grade_workspace(result.folder / "workspace", tmp_path / "graded")
    lost = [f"{c.part}: {c.name}: {c.message}" for c in graded.checks if c.points < c.max_points]
    assert graded.status == "graded" and not lost, lost


WHOLE_RUN_TESTS = {"test_nbval_run_writes_only_into_work_dir",
                   "test_the_other_familys_nbval_workspace_is_graded_in_full_here"}


def test_papermill_sees_every_parameter_of_every_lesson():
    """A parameters-cell comment papermill cannot parse hides its parameter (lesson 00's STUDENT_ID was missing from
    --help-notebook and -p STUDENT_ID was 'unknown'): every assignment of every parameters cell is one it sees."""
    import papermill

    for nb in LESSONS:
        cell = next(c for c in nbformat.read(nb, as_version=4).cells if "parameters" in c.metadata.get("tags", []))
        assigned = [ln.split("=", 1)[0].strip() for ln in cell.source.splitlines() if re.match(r"^[A-Z_]+ *=", ln)]
        assert set(assigned) <= set(papermill.inspect_notebook(str(nb))), nb.name
