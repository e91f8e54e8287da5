"""``python -m lab release --out DIR``: the student copies of the lessons, and the student kit.

nbgrader-style: each transformation is one function ``(notebook, name) -> notebook`` and the
release is the list ``PIPELINE`` applied in order. Solutions become ``raise NotImplementedError(...)``
(inside ``%%writefile`` cells too, so the written module carries the stub), hidden tests go,
outputs and instructor metadata go. The same sources always give byte-identical files.

The kit gets its own ``Makefile`` (``setup``, ``jupyter``, ``lab`` that runs the lessons without
grading, ``submit STUDENT=ID``, ``clean``), a ``README.md`` made of the project's pitch and its
"For students" section, and ``requirements.txt`` without the test stack: it has no tests/ or grader/.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import nbformat

from lab.errors import LabError

REPO = Path(__file__).resolve().parent.parent
NOTEBOOKS = REPO / "notebooks"
BEGIN_SOLUTION, END_SOLUTION = "### BEGIN SOLUTION", "### END SOLUTION"
BEGIN_HIDDEN, END_HIDDEN = "### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS"
CODE_STUB = 'raise NotImplementedError("exercise: replace this line with your code")'
MARKDOWN_STUB = "YOUR ANSWER HERE"
NBVAL_MARK = "# NBVAL_CHECK_OUTPUT"
# The student kit: what students get besides the released notebooks (never grader/, tests/, benchmarks/).
# Its Makefile, README.md and requirements.txt are written for students (see below), not copied.
KIT = ("lab", "fixtures", "docs", "pyproject.toml")
IGNORED = ("__pycache__", "*.pyc", ".ipynb_checkpoints", "*.egg-info", ".DS_Store")
CELL_METADATA_KEPT = ("tags", "editable", "deletable", "jupyter")
NOTEBOOK_METADATA_KEPT = ("kernelspec", "language_info")
MARKER_FILE = ".calibration-lab-release"

Transform = Callable[[nbformat.NotebookNode, str], nbformat.NotebookNode]

# The kit has no tests/, grader/ or benchmarks/, so its Makefile has only what a student runs.
STUDENT_MAKEFILE = """\
# Calibration Lab, student kit. Start with `make jupyter`; hand in with `make submit STUDENT=YOUR_ID`.
PYTHON  ?= python3
VENV    := .venv
PY      := $(VENV)/bin/python
STAMP   := $(VENV)/.installed
KERNEL  := calibration-lab
PORT    ?= 8888
STUDENT ?=

.PHONY: help setup jupyter lab submit student-id clean

help:
\t@echo "make setup                   .venv with the pinned stack and the Calibration Lab kernel (once; jupyter, lab and submit do it too)"
\t@echo "make jupyter                 JupyterLab on the lessons; open the link with the token it prints"
\t@echo "make lab                     run every lesson top to bottom, headless, into build/ (your workspace/ is not touched)"
\t@echo "make submit STUDENT=YOUR_ID  pack workspace/ into YOUR_ID.zip: the file you hand in"
\t@echo "make clean                   delete build/ (never workspace/ or your notebooks)"

setup: $(STAMP)

$(STAMP): requirements.txt pyproject.toml
\ttest -x $(PY) || $(PYTHON) -m venv $(VENV)
\t$(PY) -m pip install --quiet --upgrade pip
\t$(PY) -m pip install --quiet -r requirements.txt
\t$(PY) -m ipykernel install --sys-prefix --name $(KERNEL) --display-name "Calibration Lab" >/dev/null
\ttouch $(STAMP)

jupyter: setup
\t$(VENV)/bin/jupyter lab --ip=127.0.0.1 --port=$(PORT) --no-browser $(if $(filter 0,$(shell id -u)),--allow-root) \\
\t  --ServerApp.root_dir=notebooks --MultiKernelManager.default_kernel_name=$(KERNEL)

lab: setup
\t$(PY) -m lab run --no-grade

submit: student-id setup
\t$(PY) -m lab submit --student "$(STUDENT)"

student-id:
\t@test -n "$(STUDENT)" || { echo "usage: make submit STUDENT=YOUR_ID"; exit 2; }

clean:
\trm -rf build
"""

STUDENT_COMMANDS = """\
## In this kit

On a machine with Python 3.11 and `make`:

| command | what it does |
|---|---|
| `make jupyter` | sets up `.venv` on first use (a few minutes), then opens JupyterLab on `notebooks/`; open the link with the token it prints |
| `make lab` | runs every lesson top to bottom without you, into `build/`: it stops at the first exercise you have not done yet and names it. Your `workspace/` is not touched |
| `make submit STUDENT=YOUR_ID` | packs `workspace/` into `YOUR_ID.zip`, the file you hand in (the same as `.venv/bin/python -m lab submit --student YOUR_ID`) |
| `make setup` | only the `.venv` (pinned onnx, onnxruntime and numpy: they decide the bytes of every model) and the **Calibration Lab** kernel |
| `make clean` | deletes `build/`; never `workspace/` or your notebooks |

"""


class ReleaseError(LabError):
    """A lesson cannot be released as it is (for example, unbalanced solution markers)."""


def _regions(source: str, begin: str, end: str, where: str) -> list[tuple[int, int]]:
    """(begin line, end line) index pairs of every ``begin``..``end`` region; unbalanced markers raise."""
    regions, start = [], None
    for i, line in enumerate(source.splitlines()):
        if begin in line:
            if start is not None:
                raise ReleaseError(f"{where}: '{begin}' on line {i + 1} comes before the '{end}' "
                                   f"of the one on line {start + 1}; regions cannot nest")
            start = i
        elif end in line:
            if start is None:
                raise ReleaseError(f"{where}: '{end}' on line {i + 1} has no '{begin}' before it")
            regions.append((start, i))
            start = None
    if start is not None:
        raise ReleaseError(f"{where}: '{begin}' on line {start + 1} has no '{end}' after it")
    return regions


def _where(name: str, index: int) -> str:
    return f"{name}, cell {index}"


def replace_solutions(nb: nbformat.NotebookNode, name: str) -> nbformat.NotebookNode:
    """Each ``### BEGIN SOLUTION``..``### END SOLUTION`` region becomes one stub line, at the marker's indentation."""
    for index, cell in enumerate(nb.cells):
        lines = cell.source.splitlines()
        regions = _regions(cell.source, BEGIN_SOLUTION, END_SOLUTION, _where(name, index))
        for start, stop in reversed(regions):
            indent = re.match(r"\s*", lines[start]).group(0)
            stub = CODE_STUB if cell.cell_type == "code" else MARKDOWN_STUB
            lines[start:stop + 1] = [indent + stub]
        cell.source = "\n".join(lines)
    return nb


def remove_hidden_tests(nb: nbformat.NotebookNode, name: str) -> nbformat.NotebookNode:
    """Delete ``### BEGIN HIDDEN TESTS``..``### END HIDDEN TESTS`` regions; a cell left empty goes too."""
    kept = []
    for index, cell in enumerate(nb.cells):
        regions = _regions(cell.source, BEGIN_HIDDEN, END_HIDDEN, _where(name, index))
        if not regions:
            kept.append(cell)
            continue
        lines = cell.source.splitlines()
        for start, stop in reversed(regions):
            del lines[start:stop + 1]
        cell.source = "\n".join(lines).strip("\n")
        if cell.source.strip():
            kept.append(cell)
    nb.cells = kept
    return nb


def clear_outputs(nb: nbformat.NotebookNode, name: str) -> nbformat.NotebookNode:
    """No outputs and no execution counts: students run every cell themselves."""
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
    return nb


def drop_instructor_metadata(nb: nbformat.NotebookNode, name: str) -> nbformat.NotebookNode:
    """Keep only the metadata a student's JupyterLab needs (kernelspec, tags, ...); drop nbgrader, papermill, widgets."""
    nb.metadata = nbformat.from_dict({k: nb.metadata[k] for k in NOTEBOOK_METADATA_KEPT if k in nb.metadata})
    for cell in nb.cells:
        cell.metadata = nbformat.from_dict({k: cell.metadata[k] for k in CELL_METADATA_KEPT if k in cell.metadata})
    return nb


def strip_test_markers(nb: nbformat.NotebookNode, name: str) -> nbformat.NotebookNode:
    """Drop the ``# NBVAL_CHECK_OUTPUT`` lines: they are for the lessons' own tests, not for students."""
    for cell in nb.cells:
        if cell.cell_type == "code" and NBVAL_MARK in cell.source:
            cell.source = "\n".join(line for line in cell.source.splitlines() if line.strip() != NBVAL_MARK)
    return nb


def check_no_markers(nb: nbformat.NotebookNode, name: str) -> nbformat.NotebookNode:
    """Safety net: refuse to write a notebook in which any marker survived."""
    for index, cell in enumerate(nb.cells):
        for marker in (BEGIN_SOLUTION, END_SOLUTION, BEGIN_HIDDEN, END_HIDDEN):
            if marker in cell.source:
                raise ReleaseError(f"{_where(name, index)}: '{marker}' is still there after the release")
    return nb


PIPELINE: list[Transform] = [
    replace_solutions,
    remove_hidden_tests,
    clear_outputs,
    drop_instructor_metadata,
    strip_test_markers,
    check_no_markers,
]


def release_notebook(nb: nbformat.NotebookNode, name: str,
                     pipeline: list[Transform] = PIPELINE) -> nbformat.NotebookNode:
    """Apply every transformation of ``pipeline`` to ``nb`` in order (``name`` is used in error messages)."""
    for transform in pipeline:
        nb = transform(nb, name)
    return nb


def dumps(nb: nbformat.NotebookNode) -> str:
    """The fixed serialization: sorted keys, one-space indent, UTF-8 text, trailing newline."""
    return json.dumps(nb, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def release_file(path: Path) -> str:
    """The released text of one notebook file."""
    nb = nbformat.read(path, as_version=4)
    return dumps(release_notebook(nb, f"notebooks/{path.name}"))


def _copy_tree(src: Path, dst: Path) -> None:
    if src.is_dir():
        shutil.copytree(src, dst, ignore=shutil.ignore_patterns(*IGNORED))
    else:
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dst)


def _section(text: str, heading: str) -> str:
    """The Markdown section that starts at the line ``heading`` and runs to the next heading of its level."""
    level = heading.split(" ")[0] + " "
    lines = text.splitlines()
    try:
        start = lines.index(heading)
    except ValueError:
        raise ReleaseError(f"README.md has no '{heading}' section; the student README is built from it") from None
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith(level)), len(lines))
    return "\n".join(lines[start:end]).strip() + "\n"


def student_readme(readme: str) -> str:
    """The kit's README: the project's title and pitch, the kit's commands, and the 'For students' section."""
    intro = readme.split("\n## ", 1)[0].strip()
    return intro + "\n\n" + STUDENT_COMMANDS + _section(readme, "## For students")


def student_requirements(requirements: str) -> str:
    """The project's pins without the test-only block (students run no test suite)."""
    out, skipping = [], False
    for line in requirements.splitlines():
        if line.startswith("#"):
            skipping = line.strip().lower() == "# tests"
        if not skipping:
            out.append(line)
    return "\n".join(out) + "\n"


def build(out: Path, repo: Path = REPO, notebooks: Path | None = None) -> list[Path]:
    """Write the student kit and the released notebooks into the empty folder ``out``; return the files written."""
    notebooks = notebooks or repo / "notebooks"
    for item in KIT:
        if (repo / item).exists():
            _copy_tree(repo / item, out / item)
    (out / "Makefile").write_text(STUDENT_MAKEFILE, encoding="utf-8")
    (out / "README.md").write_text(student_readme((repo / "README.md").read_text(encoding="utf-8")), encoding="utf-8")
    (out / "requirements.txt").write_text(
        student_requirements((repo / "requirements.txt").read_text(encoding="utf-8")), encoding="utf-8")
    (out / "notebooks").mkdir(parents=True, exist_ok=True)
    for path in sorted(notebooks.iterdir()):
        if path.name in IGNORED or path.name.startswith("."):
            continue
        if path.suffix == ".ipynb":
            (out / "notebooks" / path.name).write_text(release_file(path), encoding="utf-8")
        else:
            _copy_tree(path, out / "notebooks" / path.name)
    (out / MARKER_FILE).write_text("written by python -m lab release; the whole folder is replaced on the next release\n")
    return sorted(p for p in out.rglob("*") if p.is_file())


def release(out: str | Path, repo: Path = REPO, notebooks: Path | None = None) -> Path:
    """Build the release next to ``out`` and swap it in, so a failed release leaves no half folder.

    ``out`` must be new, empty, or an earlier release (it carries the marker file).
    """
    out = Path(out).resolve()
    if out.exists() and any(out.iterdir()) and not (out / MARKER_FILE).exists():
        raise ReleaseError(f"{out} is not empty and is not an earlier release (no {MARKER_FILE}); "
                           "choose a new folder for --out")
    if out == repo.resolve() or repo.resolve().is_relative_to(out):
        raise ReleaseError(f"--out {out} would replace the sources; choose a folder outside them")
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        build(staging, repo, notebooks)
        if out.exists():
            shutil.rmtree(out)
        os.replace(staging, out)
    finally:
        if staging.exists():
            shutil.rmtree(staging)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab release", description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="folder for the student copies (new, empty, or an earlier release)")
    parser.add_argument("--notebooks", default=str(NOTEBOOKS), help=argparse.SUPPRESS)
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    try:
        out = release(args.out, REPO, Path(args.notebooks).resolve())
    except (ReleaseError, nbformat.ValidationError, json.JSONDecodeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    lessons = sorted((out / "notebooks").glob("*.ipynb"))
    print(f"Released {len(lessons)} notebook(s) and the student kit into {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
