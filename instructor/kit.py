"""``python -m instructor kit --out DIR``: the student kit, the lessons with their solutions stubbed out.

nbgrader-style: each transformation is one function ``(notebook, name) -> notebook`` and a student's copy of a
lesson is the list ``PIPELINE`` applied in order. Solutions become ``raise NotImplementedError(...)`` (inside
``%%writefile`` cells too, so the written module carries the stub), hidden tests go, outputs and instructor
metadata go. The same sources always give byte-identical files.

The kit gets its own ``Makefile`` (``setup``, ``jupyter`` on the kit folder, ``lab`` that runs the lessons without
grading, ``submit STUDENT=ID``, ``clean``), a ``notebooks/Makefile`` that runs those from ``notebooks/`` (where a
JupyterLab terminal may start), a ``README.md`` made of a student pitch, the kit's commands, the systems it supports
and the commands without make (these three files are ``instructor/kit_files/``), the project's
"For students" section, and ``requirements.txt`` without the test stack: it has no tests/ or grader/. Markdown
paragraphs between ``<!-- instructor-only -->`` lines stay out, and the builder refuses a kit whose Markdown
still names an instructor tool (``INSTRUCTOR_WORDS``).

The kit is built from committed files only (``git archive`` of HEAD, or ``--rev``): an uncommitted edit
never reaches students, and the command names the uncommitted changes it left out. It holds no
instructor tool (this module, ``fixtures/build.py``, which would rebuild the held-out split) and no
held-out data: ``fixtures/heldout.npz`` stays out, the kit's ``fixtures/manifest.json`` lists only the
files the kit holds (so lesson 00's fixture check passes in the kit), and a last check refuses a kit in
which any .npz row matches a held-out row by content hash.
"""
from __future__ import annotations

import argparse
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable
from pathlib import Path

import nbformat
import numpy as np

from fixtures import HELDOUT_FILES
from lab.data import preprocess, row_hashes
from lab.errors import LabError
from lab.workspace import umask

REPO = Path(__file__).resolve().parent.parent
BEGIN_SOLUTION, END_SOLUTION = "### BEGIN SOLUTION", "### END SOLUTION"
BEGIN_HIDDEN, END_HIDDEN = "### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS"
CODE_STUB = 'raise NotImplementedError("exercise: replace this line with your code")'
MARKDOWN_STUB = "YOUR ANSWER HERE"
NBVAL_MARK = "# NBVAL_CHECK_OUTPUT"
# The student kit: what students get besides their copies of the lessons (never grader/, tests/, benchmarks/).
# Its Makefile, README.md and requirements.txt are written for students (see below), not copied.
KIT = ("lab", "fixtures", "docs", "pyproject.toml")
# What the kit is built from: the committed versions of these paths (see ``export_committed``).
SOURCES = KIT + ("notebooks", "README.md", "requirements.txt")
# Instructor tools inside KIT: the fixture builders (they would rebuild the held-out splits from their seed). The kit
# builder itself and the run-then-grade command live in ``instructor/``, outside KIT.
INSTRUCTOR_TOOLS = ("fixtures/build.py", "fixtures/build_cnn.py")
# The data of the grader's hidden checks. Never in the kit, nor in its manifest.
HELDOUT = tuple(f"fixtures/{name}" for name in HELDOUT_FILES)
LEFT_OUT = INSTRUCTOR_TOOLS + HELDOUT
# Arrays of a split that identify its images (labels are digits 0-9: every split shares them).
IDENTIFYING_KEYS = ("raw", "index")
IGNORED = ("__pycache__", "*.pyc", ".ipynb_checkpoints", "*.egg-info", ".DS_Store")
CELL_METADATA_KEPT = ("tags", "editable", "deletable", "jupyter")
NOTEBOOK_METADATA_KEPT = ("kernelspec", "language_info")
MARKER_FILE = ".calibration-lab-kit"  # marks a folder this builder wrote, so the next build may replace it

Transform = Callable[[nbformat.NotebookNode, str], nbformat.NotebookNode]

# The kit's own files, written for students (the kit has no tests/, grader/ or benchmarks/): its Makefile, the
# notebooks/ Makefile (a JupyterLab terminal may start in notebooks/, and hand-in must work there too) and its
# README, into which the project README's "For students" section goes at FOR_STUDENTS.
KIT_FILES = Path(__file__).resolve().with_name("kit_files")
STUDENT_MAKEFILE = (KIT_FILES / "Makefile").read_text(encoding="utf-8")
NOTEBOOKS_MAKEFILE = (KIT_FILES / "notebooks" / "Makefile").read_text(encoding="utf-8")
STUDENT_README = (KIT_FILES / "README.md").read_text(encoding="utf-8")
FOR_STUDENTS = "<!-- The project README's \"For students\" section follows here. -->\n"
# The kit README's opening: the pitch, for students (the project README's opening also speaks to instructors).
STUDENT_INTRO = STUDENT_README.split("\n## ", 1)[0] + "\n"

# Paragraphs of the project's Markdown files that only instructors need sit between these lines; the kit drops them.
INSTRUCTOR_BEGIN, INSTRUCTOR_END = "<!-- instructor-only -->", "<!-- end instructor-only -->"
# Words that name instructor tools, or files the kit does not have: none may survive in the kit's Markdown.
INSTRUCTOR_WORDS = ("batch-grade", "make fixtures", "make test", "make kit", "make bench", "fixtures.build",
                    "test_fixtures", "tests/", "python -m grader", "gradebook", "GRADER_SECRET", "For instructors",
                    "For maintainers", "instructor-only")


class KitError(LabError):
    """The kit cannot be built as it is (for example, a lesson with unbalanced solution markers)."""


def _regions(source: str, begin: str, end: str, where: str) -> list[tuple[int, int]]:
    """(begin line, end line) index pairs of every ``begin``..``end`` region; unbalanced markers raise."""
    regions, start = [], None
    for i, line in enumerate(source.splitlines()):
        if begin in line:
            if start is not None:
                raise KitError(f"{where}: '{begin}' on line {i + 1} comes before the '{end}' "
                                   f"of the one on line {start + 1}; regions cannot nest")
            start = i
        elif end in line:
            if start is None:
                raise KitError(f"{where}: '{end}' on line {i + 1} has no '{begin}' before it")
            regions.append((start, i))
            start = None
    if start is not None:
        raise KitError(f"{where}: '{begin}' on line {start + 1} has no '{end}' after it")
    return regions


def _where(name: str, index: int) -> str:
    return f"{name}, cell {index}"


def replace_solutions(nb: nbformat.NotebookNode, name: str) -> nbformat.NotebookNode:
    """Each ``### BEGIN SOLUTION``..``### END SOLUTION`` region becomes one stub line, at the marker's indentation."""
    for index, cell in enumerate(nb.cells):
        lines = cell.source.splitlines()
        regions = _regions(cell.source, BEGIN_SOLUTION, END_SOLUTION, _where(name, index))
        for start, stop in reversed(regions):
            indent = lines[start][:len(lines[start]) - len(lines[start].lstrip())]
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
    """Keep only the metadata a student's JupyterLab needs (kernelspec, tags, ...); drop nbgrader, papermill,
    widgets."""
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
                raise KitError(f"{_where(name, index)}: '{marker}' is still there in the student's copy")
    return nb


PIPELINE: list[Transform] = [
    replace_solutions,
    remove_hidden_tests,
    clear_outputs,
    drop_instructor_metadata,
    strip_test_markers,
    check_no_markers,
]


def student_notebook(nb: nbformat.NotebookNode, name: str,
                     pipeline: list[Transform] = PIPELINE) -> nbformat.NotebookNode:
    """Apply every transformation of ``pipeline`` to ``nb`` in order (``name`` is used in error messages)."""
    for transform in pipeline:
        nb = transform(nb, name)
    return nb


def dumps(nb: nbformat.NotebookNode) -> str:
    """The fixed serialization: sorted keys, one-space indent, UTF-8 text, trailing newline."""
    return json.dumps(nb, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def student_notebook_text(path: Path) -> str:
    """The text of the student's copy of one notebook file."""
    nb = nbformat.read(path, as_version=4)
    return dumps(student_notebook(nb, f"notebooks/{path.name}"))


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
        raise KitError(f"README.md has no '{heading}' section; the student README is built from it") from None
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith(level)), len(lines))
    return "\n".join(lines[start:end]).strip() + "\n"


def strip_instructor(text: str, where: str = "README.md") -> str:
    """``text`` without the regions between ``INSTRUCTOR_BEGIN`` and ``INSTRUCTOR_END`` lines (markers included)."""
    lines = text.splitlines()
    regions = _regions(text, INSTRUCTOR_BEGIN, INSTRUCTOR_END, where)
    for start, stop in reversed(regions):
        del lines[start:stop + 1]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip() + "\n"


def student_readme(readme: str) -> str:
    """The kit's README (``kit_files/README.md``: the pitch, the kit's commands, the systems, the commands without
    make) with the project README's 'For students' section at ``FOR_STUDENTS`` (its instructor-only paragraphs left
    out)."""
    if STUDENT_README.count(FOR_STUDENTS) != 1:
        raise KitError(f"{KIT_FILES / 'README.md'} must hold the line {FOR_STUDENTS.strip()!r} once: "
                       "the 'For students' section goes there")
    return STUDENT_README.replace(FOR_STUDENTS, strip_instructor(_section(readme, "## For students")))


def student_requirements(requirements: str) -> str:
    """The project's pins without the test-only block (students run no test suite)."""
    out, skipping = [], False
    for line in requirements.splitlines():
        if line.startswith("#"):
            skipping = line.strip().lower() == "# tests"
        if not skipping:
            out.append(line)
    return "\n".join(out) + "\n"


PINS_HEADER = ("# The lessons' pins, shipped with the lab: lab.environment checks them where it finds no\n"
               "# requirements.txt. requirements.txt without its test stack and the project itself, written by\n"
               "# instructor.kit.lab_pins; tests/test_environment.py keeps the two equal.\n")


def lab_pins(requirements: str) -> str:
    """``lab/pins.txt``: the student's pins (``student_requirements``) without the project's own line."""
    lines = [ln for ln in student_requirements(requirements).splitlines()
             if not ln.startswith("-") and ln.strip().lower() != "# this project (lab, grader, fixtures)"]
    return PINS_HEADER + "\n".join(lines) + "\n"


# --- committed files only ----------------------------------------------------------------------

def _git(repo: Path, *args: str) -> bytes:
    try:
        proc = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, check=False)
    except FileNotFoundError:
        raise KitError("the kit is built from committed files, and git is not installed") from None
    if proc.returncode != 0:
        err = proc.stderr.decode("utf-8", "replace").strip().splitlines()
        raise KitError(f"git {' '.join(args[:2])} failed in {repo}: {err[-1] if err else proc.returncode}")
    return proc.stdout


def commit_of(repo: Path = REPO, rev: str = "HEAD") -> str:
    """The full commit id ``rev`` names; refuses a folder that is not a git checkout."""
    try:
        return _git(repo, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}").decode().strip()
    except KitError:
        raise KitError(f"the kit is built from committed files only, and {repo} has no commit {rev!r} "
                           "(is it a git checkout with at least one commit?)") from None


def uncommitted(repo: Path = REPO, paths: tuple[str, ...] = SOURCES) -> list[str]:
    """Files under ``paths`` whose working copy differs from HEAD (modified, added, deleted or untracked)."""
    out = _git(repo, "status", "--porcelain", "-z", "--untracked-files=all", "--", *paths).decode("utf-8", "replace")
    names, entries = [], out.split("\0")
    i = 0
    while i < len(entries):
        entry = entries[i]
        if len(entry) > 3:
            names.append(entry[3:])
            if entry[0] in "RC":  # a rename or copy carries its source path in the next entry
                i += 1
        i += 1
    return sorted(set(names))


def export_committed(repo: Path, commit: str, dest: Path) -> Path:
    """Write the committed versions of ``SOURCES`` at ``commit`` into ``dest`` (``git archive``)."""
    present = set(_git(repo, "ls-tree", "--name-only", "-z", commit).decode().split("\0"))
    paths = [p for p in SOURCES if p in present]
    archive = _git(repo, "archive", "--format=tar", commit, "--", *paths)
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(dest, filter="data")
    return dest


# --- no held-out data, no instructor tool ---------------------------------------------------------

def _skip(rel: str) -> bool:
    return rel in LEFT_OUT


def kit_manifest(manifest: dict[str, str]) -> dict[str, str]:
    """The fixture manifest without the files the kit leaves out."""
    return {name: digest for name, digest in manifest.items() if not _skip(f"fixtures/{name}")}


def kit_fixtures_readme(text: str) -> str:
    """The fixtures README without the rows of files the kit leaves out, and a line saying so."""
    names = [Path(rel).name for rel in LEFT_OUT if rel.startswith("fixtures/")]
    text = strip_instructor(text, "fixtures/README.md")
    lines = [ln for ln in text.splitlines() if not any(f"`{n}`" in ln for n in names)]
    return "\n".join(lines).rstrip() + ("\n\nThe held-out split of the grader's hidden checks and the script "
                                        "that builds the fixtures stay with the instructor; they are not in this "
                                        "kit.\n")


def heldout_hashes(source: Path) -> set[str]:
    """Content hashes of every held-out row, as raw pixels, deployed pixels and digit-set index."""
    hashes: set[str] = set()
    for rel in HELDOUT:
        if (source / rel).exists():
            with np.load(source / rel) as f:
                for key in IDENTIFYING_KEYS:
                    if key in f.files:
                        hashes |= row_hashes(f[key])
                if "raw" in f.files:
                    hashes |= row_hashes(preprocess(f["raw"]))
    return hashes


def heldout_rows_in(kit: Path, hashes: set[str]) -> dict[str, int]:
    """``{file:array: rows}`` for every array of every .npz in ``kit`` that holds a held-out row."""
    found = {}
    for path in sorted(kit.rglob("*.npz")):
        with np.load(path, allow_pickle=False) as f:
            for key in f.files:
                arr = f[key]
                if arr.ndim and len(arr) and key != "labels":
                    shared = len(row_hashes(arr) & hashes)
                    if shared:
                        found[f"{path.relative_to(kit).as_posix()}:{key}"] = shared
    return found


def instructor_words_in(kit: Path) -> dict[str, list[str]]:
    """``{file: [words]}`` for every Markdown file of ``kit`` that names an instructor tool or a file the kit lacks."""
    found = {}
    for path in sorted(kit.rglob("*.md")):
        text = path.read_text(encoding="utf-8")
        words = [w for w in INSTRUCTOR_WORDS if w in text]
        if words:
            found[path.relative_to(kit).as_posix()] = words
    return found


def check_kit(out: Path, source: Path) -> None:
    """Safety net: refuse a kit that holds an instructor tool, the grader, the tests, instructor words in its
    Markdown, or a held-out row."""
    present = [rel for rel in LEFT_OUT + ("grader", "tests") if (out / rel).exists()]
    if present:
        raise KitError(f"the kit would hold {', '.join(present)}; these stay with the instructor")
    words = instructor_words_in(out)
    if words:
        raise KitError("the kit's Markdown speaks to instructors: " + "; ".join(
            f"{rel} says {', '.join(map(repr, w))}" for rel, w in words.items())
            + f" (put such paragraphs between '{INSTRUCTOR_BEGIN}' and '{INSTRUCTOR_END}' lines)")
    leaked = heldout_rows_in(out, heldout_hashes(source))
    if leaked:
        raise KitError("the kit would hold held-out rows: "
                           + ", ".join(f"{k} ({n} rows)" for k, n in leaked.items()))


def build(out: Path, repo: Path = REPO, notebooks: Path | None = None) -> list[Path]:
    """Write the student kit, the students' copies of the lessons included, into the empty folder ``out``;
    return the files written.

    ``repo`` is the source tree to build from: ``build_kit`` passes the committed files it exported.
    """
    notebooks = notebooks or repo / "notebooks"
    for item in KIT:
        if (repo / item).exists():
            _copy_tree(repo / item, out / item)
    for rel in LEFT_OUT:
        if (out / rel).exists():
            (out / rel).unlink()
    if (repo / "fixtures" / "manifest.json").exists():
        manifest = json.loads((repo / "fixtures" / "manifest.json").read_text(encoding="utf-8"))
        (out / "fixtures" / "manifest.json").write_text(json.dumps(kit_manifest(manifest), indent=2, sort_keys=True)
                                                        + "\n", encoding="utf-8")
    if (repo / "fixtures" / "README.md").exists():
        (out / "fixtures" / "README.md").write_text(
            kit_fixtures_readme((repo / "fixtures" / "README.md").read_text(encoding="utf-8")), encoding="utf-8")
    (out / "Makefile").write_text(STUDENT_MAKEFILE, encoding="utf-8")
    (out / "README.md").write_text(student_readme((repo / "README.md").read_text(encoding="utf-8")), encoding="utf-8")
    (out / "requirements.txt").write_text(
        student_requirements((repo / "requirements.txt").read_text(encoding="utf-8")), encoding="utf-8")
    (out / "notebooks").mkdir(parents=True, exist_ok=True)
    (out / "notebooks" / "Makefile").write_text(NOTEBOOKS_MAKEFILE, encoding="utf-8")
    for path in sorted(notebooks.iterdir()):
        if path.name in IGNORED or path.name.startswith("."):
            continue
        if path.suffix == ".ipynb":
            (out / "notebooks" / path.name).write_text(student_notebook_text(path), encoding="utf-8")
        else:
            _copy_tree(path, out / "notebooks" / path.name)
    (out / MARKER_FILE).write_text("written by python -m instructor kit; "
                                   "the whole folder is replaced by the next build\n")
    check_kit(out, repo)
    return sorted(p for p in out.rglob("*") if p.is_file())


def build_kit(out: str | Path, repo: Path = REPO, rev: str = "HEAD") -> Path:
    """Build the kit of commit ``rev`` of ``repo`` next to ``out`` and swap it in, so a failed build leaves no
    half folder. Only committed files go in (see ``uncommitted`` for what is left out).

    ``out`` must be new, empty, or an earlier kit (it carries the marker file).
    """
    out = Path(out).resolve()
    if out.exists() and any(out.iterdir()) and not (out / MARKER_FILE).exists():
        raise KitError(f"{out} is not empty and is not an earlier kit (no {MARKER_FILE}); "
                           "choose a new folder for --out")
    if out == repo.resolve() or repo.resolve().is_relative_to(out):
        raise KitError(f"--out {out} would replace the sources; choose a folder outside them")
    commit = commit_of(repo, rev)
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        with tempfile.TemporaryDirectory(prefix="lab-kit-source-") as source:
            build(staging, export_committed(repo, commit, Path(source)))
        os.chmod(staging, 0o777 & ~umask())  # mkdtemp makes it 0700: a shared kit must be readable by students
        if out.exists():
            shutil.rmtree(out)
        os.replace(staging, out)
    finally:
        if staging.exists():
            shutil.rmtree(staging)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m instructor kit", description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="folder for the student kit (new, empty, or an earlier kit)")
    parser.add_argument("--rev", default="HEAD", help="the commit to build the kit from (default HEAD); "
                                                      "uncommitted changes never go in")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    try:
        out = build_kit(args.out, REPO, args.rev)
        commit = commit_of(REPO, args.rev)
        left = uncommitted(REPO) if args.rev == "HEAD" else []
    except (KitError, nbformat.ValidationError, json.JSONDecodeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    lessons = sorted((out / "notebooks").glob("*.ipynb"))
    print(f"Wrote the student kit of commit {commit[:12]}, {len(lessons)} lesson(s), into {out}")
    if left:
        shown = ", ".join(left[:10]) + (f" and {len(left) - 10} more" if len(left) > 10 else "")
        print(f"note: built from committed files only; {len(left)} uncommitted change(s) are not in the kit: {shown}",
              file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
