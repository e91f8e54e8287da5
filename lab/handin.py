"""Hand in: pack the workspace into ``<student>.zip`` for the grader, from a notebook cell (``lab.hand_in()``) or the
command line (``python -m lab submit``, ``lab.tools.submit``).

The zip holds ``submission.json`` (schema ``submission/1``: student id, time, versions, platform,
and the SHA-256 of every file), the student's modules, the models and the reported JSON files.
Only files the lessons write are taken: never the fixtures (``source.onnx`` is a fixture copy),
never anything outside the workspace, never a symbolic link.

It refuses only what the grader could not take: no workspace, a workspace with none of the lessons' files,
an empty file, a symbolic link, a file over the size cap, a student id it cannot use, a workspace lesson 00 made
for another student id (``variant.json``: its data is that student's variant, ``lab.variant``). A lesson whose files
are missing does not stop the hand-in: the command names each such lesson and says that the grader scores
the checks that need those files 0 (the grader says the same in its feedback).

A workspace made with the instructor's reference data (lesson 00 ran with STUDENT_ID empty) handed in under a
student's id is packed, with a warning that the grader will score every check that reads its models and reports 0
and how to fix it (``REFERENCE_WARNING``). Packed, not refused: the zip still earns its code's checks, a refusal an
hour before a deadline would leave the student with no hand-in at all, and the kit's ``make submit`` has no option
to say "anyway"; the grader's score is the same whichever way the zip was made.
"""
from __future__ import annotations

import importlib
import json
import os
import platform
import re
import zipfile
from datetime import UTC, datetime
from pathlib import Path

from lab import contract, schemas, variant, workspace
from lab.contract import MAX_FILE_BYTES
from lab.convert import versions
from lab.data import file_sha256
from lab.errors import LabError
from lab.kernels import target_family
from lab.version import __version__

STUB = "raise NotImplementedError("  # the kit's exercise stub, with or without a message
STUDENT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


REFERENCE_WARNING = ("warning: this workspace was made with the instructor's reference data (lesson 00 ran with "
                     "STUDENT_ID empty), not {student!r}'s own variant: the grader will score every check that reads "
                     "its models and reports 0 (only your code's checks count). To fix it, in lesson 00 of a new "
                     "WORK_DIR set STUDENT_ID = {student!r}, run the lessons again, then hand in again")


class SubmitError(LabError):
    """The workspace cannot be handed in as it is; the message says what to do."""


def collect(work: Path) -> dict[str, Path]:
    """Workspace files to hand in: relative path -> path. Raises ``SubmitError`` when there is nothing to hand in."""
    if not work.is_dir():
        raise SubmitError(f"workspace {work} does not exist; run the lessons first (WORK_DIR in each notebook)")
    files: dict[str, Path] = {}
    for path in sorted(work.rglob("*")):
        rel = path.relative_to(work).as_posix()
        if not contract.handed_in(rel):
            continue
        if path.is_symlink():
            raise SubmitError(f"{rel} is a symbolic link; hand in the file itself (copy it into the workspace)")
        if not path.is_file():
            continue
        if path.stat().st_size > MAX_FILE_BYTES:
            raise SubmitError(f"{rel} is {path.stat().st_size >> 20} MiB; the grader takes files up to "
                              f"{MAX_FILE_BYTES >> 20} MiB")
        files[rel] = path
    if not files:
        raise SubmitError(f"the workspace {work} holds none of the files the lessons write (docs/workspace.md "
                          "lists them); run the lessons, lesson 00 first, then hand in")
    empty = [rel for rel, p in files.items() if p.stat().st_size == 0]
    if empty:
        raise SubmitError(f"{empty[0]} is empty; re-run the lesson cell that writes it")
    return files


def manifest(student: str, files: dict[str, Path], made_for: variant.Variant | None = None,
             family: str | None = None) -> dict:
    """``submission.json``; ``made_for``: the (student id, draw) whose variant of the data the workspace holds (None:
    the instructor's reference variant, and no ``variant`` field); ``family``: the kernel family the workspace
    records (None: the target family, for a workspace made before the lab recorded it)."""
    made = {"variant": made_for[0], "variant_draw": made_for[1]} if made_for else {}
    return {"schema": "submission/1", "student": student, **made,
            "submitted_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "lab_version": __version__, "versions": versions(), "platform": platform.platform(),
            "kernel_family": family or target_family(),
            "missing": [rel for rel in contract.files("optional") if rel not in files],
            "files": {rel: file_sha256(p) for rel, p in sorted(files.items())}}


def unfinished(files: dict[str, Path]) -> list[str]:
    """Modules that still hold an exercise stub: the lesson cell that writes them ran before the exercise was done."""
    return [rel for rel in contract.modules() if rel in files
            and STUB in files[rel].read_text(encoding="utf-8", errors="replace")]


def recorded_variant(work: Path, student: str) -> variant.Variant | None:
    """The id lesson 00 recorded in the workspace (None: none, the reference variant); refused when it is not
    ``student``'s: the grader recomputes every number from the hand-in's own id."""
    try:
        made_for = workspace.recorded_variant(work)
    except LabError as e:
        raise SubmitError(str(e)) from None
    if made_for is not None and made_for[0] != student:
        who = made_for[0]
        raise SubmitError(f"this workspace ({work}) was made for student {who!r} ({workspace.VARIANT_FILE}): its "
                          f"models are that student's variant, and the grader recomputes {student!r}'s. Hand it in "
                          f"as {who!r}, or run the lessons in a new WORK_DIR with STUDENT_ID = {student!r}")
    return made_for


def submit(student: str, work_dir: str | Path = "workspace", out_dir: str | Path = ".") -> Path:
    """Write ``out_dir/<student>.zip`` from the workspace ``work_dir`` (a path as given: absolute, or relative to
    the current folder; ``hand_in`` resolves a notebook's ``WORK_DIR`` by the lessons' rules) and return its
    path."""
    if not STUDENT_ID.fullmatch(student or ""):
        raise SubmitError(f"student id {student!r}: use letters, digits, '_', '.' or '-' (at most 64), "
                          "starting with a letter or digit")
    work = Path(work_dir).expanduser().resolve()
    made_for = recorded_variant(work, student)
    files = collect(work)
    try:
        family = workspace.recorded_family(work)
    except LabError as e:
        raise SubmitError(str(e)) from None
    doc = schemas.validate("submission", manifest(student, files, made_for, family), "submission.json")
    out = Path(out_dir).expanduser().resolve()
    out.mkdir(parents=True, exist_ok=True)
    target = out / f"{student}.zip"
    if target.resolve().is_relative_to(work):
        raise SubmitError(f"--out {out} is inside the workspace; write the zip somewhere else")
    tmp = target.with_name(f".{target.name}.part")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zf:
        info = zipfile.ZipInfo("submission.json", date_time=datetime.now().timetuple()[:6])
        info.external_attr = 0o100644 << 16
        info.compress_type = zipfile.ZIP_DEFLATED
        zf.writestr(info, json.dumps(doc, indent=2, sort_keys=True) + "\n")
        for rel, path in sorted(files.items()):
            zf.write(path, rel)
    tmp.replace(target)
    return target


def report_lines(doc: dict, work: Path) -> list[tuple[str, bool]]:
    """What a student must know after packing ``doc`` (``submission.json``) from ``work``, as (line, is a warning):
    the reference-data warning, each lesson whose files are missing, and the modules that still hold a stub."""
    lines = []
    if "variant" not in doc and variant.key(doc["student"]) is not None:
        lines.append((REFERENCE_WARNING.format(student=doc["student"]), True))
    missing = contract.missing_by_lesson(doc["files"])
    if missing:
        lines.append(("not in the workspace yet, so the grader will score the checks that need them 0 "
                      "(run the lesson, then hand in again):", False))
        lines += [(f"  lesson {lesson}: {', '.join(rels)}", False) for lesson, rels in missing.items()]
    stubs = unfinished({rel: work.resolve() / rel for rel in doc["files"]})
    if stubs:
        lines.append((f"warning: {', '.join(stubs)} still hold{'s' if len(stubs) == 1 else ''} "
                      "`raise NotImplementedError`: finish the exercise, re-run the cell that writes the file (and "
                      "the lessons after it), then hand in again", False))
    return lines


def read_manifest(zip_path: Path) -> dict:
    with zipfile.ZipFile(zip_path) as zf:
        return json.loads(zf.read("submission.json"))


def hand_in(student: str | None = None, work_dir: str | Path = "../workspace", out_dir: str | Path | None = None):
    """Hand in from a notebook cell: pack the workspace the lessons used (``WORK_DIR``, resolved as the lessons
    resolve it) into ``<student>.zip`` in the student's own folder (the kit's when the workspace is in it, else the
    workspace's parent: on a hub, ``~/calibration-lab`` even for a lesson opened from the shared read-only kit), print
    what is in it and exactly what is missing, and offer it for download. ``student``: the id lesson 00 recorded
    when not given. Runs in the kernel's Python, wherever the notebook server's Python is. Returns the zip's path."""
    work = workspace.resolve_work_dir(work_dir)
    student = student or workspace.recorded_student(work) if work.is_dir() else student
    if not student:
        raise SubmitError("no student id: lesson 00 records it (STUDENT_ID in its parameters cell); or call "
                          "lab.hand_in('your-id')")
    kit = workspace.kit_root()
    out = Path(out_dir).expanduser() if out_dir else (kit if kit and work.is_relative_to(kit) else work.parent)
    path = submit(student, work, out)
    doc = read_manifest(path)
    n = len(doc["files"])
    print(f"wrote {path} ({n} file{'' if n == 1 else 's'} from {work}); hand in this zip as it is")
    for line, _ in report_lines(doc, work):
        print(line)
    if not contract.missing_by_lesson(doc["files"]):
        print("nothing missing: every file the lessons write is in the zip")
    offer_download(path)
    return path


def offer_download(path: Path) -> None:
    """A link to the zip in a notebook (Colab: its browser download), nothing in a terminal."""
    try:
        from IPython import get_ipython  # deferred: only a notebook has a frontend to offer the file in
        from IPython.display import FileLink, display  # deferred: as above
    except ImportError:
        return
    if get_ipython() is None:
        return
    if workspace.in_colab():
        try:
            # deferred: google.colab exists only on Colab (imported by name: no stubs to type-check against elsewhere)
            importlib.import_module("google.colab.files").download(str(path))
            return
        except ImportError:  # a runtime that says it is Colab (COLAB_RELEASE_TAG) without Colab's frontend package
            pass
    try:
        display(FileLink(os.path.relpath(path), result_html_prefix="download: "))
    except ValueError:  # another drive (Windows): no relative link; the printed path says where it is
        pass
