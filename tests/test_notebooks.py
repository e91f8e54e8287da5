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
from pathlib import Path

import nbformat
import pytest

from lab import kernels, run

REPO = Path(__file__).resolve().parents[1]
TESTS = Path(__file__).resolve().parent
LESSONS = run.discover()
NAMES = [nb.name for nb in LESSONS]
NBVAL_TIMEOUT_S = 3000


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
        assert isinstance(node, (ast.Assign, ast.AnnAssign)), f"{name}: parameters cell line {node.lineno} is not an assignment"
        ast.literal_eval(node.value)  # raises ValueError on anything but a literal
    declared = run.declared_parameters(nb)
    assert {"WORK_DIR", "SEED", "INTERACTIVE"} <= declared.keys(), f"{name}: declares {sorted(declared)}"
    assert declared["WORK_DIR"] == "../workspace", f"{name}: WORK_DIR default should be '../workspace'"


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
    assert not any(c.outputs for c in code_cells(read(name))
                   if not c.source.lstrip().startswith("# NBVAL_CHECK_OUTPUT")), "the source was written over"


@pytest.mark.slow
def test_the_headless_workspace_is_graded_in_full(lesson_suite, tmp_path):
    """What `make lab` does after the lessons: hand the workspace in and grade it."""
    if not all(r.ok for r in lesson_suite.runs.values()) or not NAMES:
        pytest.skip("a lesson failed (reported above), so the workspace is incomplete")
    result = run.grade_workspace(lesson_suite.work_dir, tmp_path)
    if result is None:
        pytest.skip("no grader.grade() available")
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


@pytest.mark.slow
@pytest.mark.parametrize("family", ["this machine's", "the other"])
def test_nbval_passes_on_every_lesson(tmp_path, family, monkeypatch):
    """On this machine's INT8 kernels, and as the other kernel family computes (``LAB_KERNEL_FAMILY``):
    every assertion and every compared output of a lesson must hold on both families."""
    if not NAMES:
        pytest.skip("no lessons yet")
    if family == "the other":
        monkeypatch.setenv(kernels.ENV_VAR, next(f for f in kernels.FAMILIES if f != kernels.machine_family()))
    copies = nbval_copy(LESSONS, tmp_path / "notebooks", {"WORK_DIR": str(tmp_path / "workspace"),
                                                          "INTERACTIVE": False})
    cmd = [sys.executable, "-m", "pytest", "--nbval-lax", "--nbval-current-env",
           "--nbval-sanitize-with", str(TESTS / "nbval_sanitize.cfg"), "--nbval-cell-timeout", "900",
           "-p", "no:cacheprovider", "-o", "addopts=", "--rootdir", str(tmp_path), "-q", str(copies)]
    before = listing(copies)
    proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=NBVAL_TIMEOUT_S)
    (tmp_path / "nbval.log").write_text(proc.stdout + proc.stderr)
    tail = "\n".join(proc.stdout.splitlines()[-40:])
    failures = proc.stdout.split("= FAILURES =", 1)[-1][:8000] if "= FAILURES =" in proc.stdout else tail
    assert proc.returncode == 0, (f"nbval failed (exit {proc.returncode}); full log {tmp_path / 'nbval.log'}\n"
                                  f"{failures}\n{tail}\n{proc.stderr[-2000:]}")
    passed = re.search(r"(\d+) passed", proc.stdout)
    assert passed and int(passed.group(1)) > 0, f"nbval collected no cells:\n{tail}"
    assert listing(copies) == before, f"lessons wrote next to the notebooks: {sorted(listing(copies) - before)}"
    assert (tmp_path / "workspace" / "source.onnx").exists(), "the lessons did not write into WORK_DIR"
    if family == "the other":  # and the workspace made as the other family grades in full here
        with kernels.computing_as(os.environ[kernels.ENV_VAR]):
            result = run.grade_workspace(tmp_path / "workspace", tmp_path / "graded")
        lost = [f"{c.part}: {c.name}: {c.message}" for c in result.checks if c.points < c.max_points]
        assert result.status == "graded" and not lost, lost
