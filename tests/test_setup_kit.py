"""The student kit set up for real in a folder whose path has spaces, an apostrophe and non-ASCII letters, as a
student's "Cours d'été" folder would: the kit's own ``make setup`` (a new .venv, pip, the kernel), then its
``make lab`` runs every lesson (each exercise answered with the instructor's solution) and ``make submit`` packs
the workspace, which grades full marks. Set-up shows its progress and leaves one kernel and no egg-info."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

import grader
from instructor import kit as kit_builder
from lab.tools import setup

FOLDER = ("Cours d'été", "Zoë Ñandú kit")
STUDENT = "s-001"

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800),
              pytest.mark.skipif(not shutil.which("make"), reason="make is not installed")]


def answered(kit_nb: Path) -> nbformat.NotebookNode:
    """The kit's lesson with every stubbed cell back to the instructor's code (its hidden tests left out)."""
    source = {c.get("id"): c for c in nbformat.read(kit_builder.REPO / "notebooks" / kit_nb.name, as_version=4).cells}
    nb = nbformat.read(kit_nb, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code" and kit_builder.CODE_STUB in cell.source:
            one = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source[cell.get("id")].source)])
            one = kit_builder.strip_test_markers(kit_builder.remove_hidden_tests(one, kit_nb.name), kit_nb.name)
            cell.source = "\n".join(ln for ln in one.cells[0].source.splitlines()
                                    if ln.strip() not in (kit_builder.BEGIN_SOLUTION, kit_builder.END_SOLUTION))
    return nb


def make(kit: Path, *args: str, timeout: float = 1200) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "PYTHONPATH", "LAB_"))}
    env["PYTHON"] = os.environ.get("LAB_SETUP_PYTHON", sys._base_executable)  # a Python outside any venv
    return subprocess.run(["make", *args], cwd=kit, env=env, capture_output=True, text=True, timeout=timeout)


def test_the_kit_sets_up_runs_every_lesson_and_hands_in_from_a_folder_with_spaces_and_accents(tmp_path):
    kit = kit_builder.build_kit(tmp_path.joinpath(*FOLDER))
    assert " " in str(kit) and "é" in str(kit) and "'" in str(kit)

    done = make(kit, "setup")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = done.stdout
    assert "preflight: Python 3." in out and "has wheels here" in out
    assert [ln.split("]")[0] for ln in out.splitlines() if ln.startswith("setup [")] == \
        [f"setup [{i}/5" for i in range(1, 6)]
    assert "Collecting onnxruntime==" in out or "Requirement already satisfied: onnxruntime==" in out  # pip speaks
    venv = kit / ".venv"
    assert [p.name for p in (venv / "share" / "jupyter" / "kernels").iterdir()] == [setup.KERNEL]
    assert not list(kit.glob("*.egg-info")), "set-up left build leftovers JupyterLab would show"
    assert (venv / "etc" / "jupyter" / "jupyter_server_config.json").exists()
    assert make(kit, "-q", "setup").returncode == 0, "a second make setup would set up again"

    for path in sorted((kit / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        nbformat.write(answered(path), path)
    ran = make(kit, "lab")
    assert ran.returncode == 0, ran.stdout[-4000:] + ran.stderr[-3000:]
    lessons = len(list((kit / "notebooks").glob("[0-9][0-9]_*.ipynb")))
    assert ran.stdout.count(" ... ok (") == lessons, ran.stdout[-3000:]

    # make lab ran into build/workspace; make submit packs workspace/: the student's folder, the same files.
    shutil.copytree(kit / "build" / "workspace", kit / "workspace")
    handed = make(kit, "submit", f"STUDENT={STUDENT}")
    assert handed.returncode == 0, handed.stdout + handed.stderr
    result = grader.grade(kit / f"{STUDENT}.zip")
    assert result.status == "graded" and result.score == result.max_score, [
        (c.name, c.message) for c in result.checks if c.points < c.max_points]
