"""Lesson 00's hand-in directions are what a student sees: `make submit STUDENT=ID` from the folder a JupyterLab
terminal starts in (the kit's folder from File > New > Terminal, the file browser's folder, often notebooks/, from
the Launcher) writes the zip into the kit's folder. Checked on a kit built from HEAD, with the kit's own Makefiles.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import nbformat
import pytest

from instructor import kit as kit_builder
from lab import predictions
from lab.lessons import lesson01_the_ruler as lesson01

REPO = Path(__file__).resolve().parents[1]
COMMAND = "make submit STUDENT=YOUR_ID"


def _markdown(notebook: str) -> str:
    nb = nbformat.read(REPO / "notebooks" / notebook, as_version=4)
    return "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")


def test_lesson_00_and_the_readme_give_the_same_command():
    text = _markdown("00_start_here.ipynb")
    assert COMMAND in text and "cd .." not in text, "hand in from the folder the terminal starts in, never above it"
    assert text.count("-m lab submit --student YOUR_ID") == 1, "the plain python form is stated once"
    assert COMMAND in (REPO / "README.md").read_text(encoding="utf-8")


def test_the_kits_jupyterlab_serves_the_kit_folder_and_both_makefiles_submit():
    """What lesson 00 says about the terminal follows from how the kit starts JupyterLab: on the kit's folder."""
    assert "--ServerApp.root_dir=." in kit_builder.STUDENT_MAKEFILE
    assert '-m lab submit --student "$(STUDENT)"' in kit_builder.STUDENT_MAKEFILE
    assert "submit" in kit_builder.NOTEBOOKS_MAKEFILE and "-C .." in kit_builder.NOTEBOOKS_MAKEFILE


@pytest.fixture(scope="module")
def kit(tmp_path_factory) -> Path:
    """A kit with a workspace holding lesson 01's prediction, and a stand-in for its .venv: the kit's lab on this
    interpreter (the stamp keeps make from building a real .venv)."""
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    root = kit_builder.build_kit(tmp_path_factory.mktemp("kit") / "student",
                                 rev=kit_builder.commit_of(kit_builder.REPO, "HEAD"))
    predictions.record(root / "workspace", lesson01.PREDICTION, {"clips": "narrow", "squashes": "wide"})
    (root / ".venv").mkdir()
    (root / ".venv" / ".installed").touch()
    return root


@pytest.mark.parametrize("start", [".", "notebooks"])
def test_make_submit_from_where_a_terminal_starts_writes_the_zip_in_the_kit_folder(kit, start):
    student = f"s-{start.strip('.') or 'root'}"
    env = {**os.environ, "PYTHONPATH": str(kit)}
    done = subprocess.run(["make", "submit", f"STUDENT={student}", f"PY={sys.executable}"], cwd=kit / start,
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    zip_path = kit / f"{student}.zip"
    assert f"wrote {zip_path}" in done.stdout, done.stdout
    with zipfile.ZipFile(zip_path) as zf:
        assert "predictions.json" in zf.namelist()
    assert not (kit / "notebooks" / f"{student}.zip").exists()
