"""``python -m lab submit --student ID``: pack the workspace into ``ID.zip`` for the grader.

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

import argparse
import json
import platform
import re
import sys
import zipfile
from datetime import UTC, datetime
from pathlib import Path

from lab import __version__, contract, schemas, variant, workspace
from lab.contract import MAX_FILE_BYTES
from lab.convert import versions
from lab.data import file_sha256
from lab.errors import LabError
from lab.kernels import target_family

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


def manifest(student: str, files: dict[str, Path], made_for: variant.Variant | None = None) -> dict:
    """``submission.json``; ``made_for``: the (student id, draw) whose variant of the data the workspace holds (None:
    the instructor's reference variant, and no ``variant`` field)."""
    made = {"variant": made_for[0], "variant_draw": made_for[1]} if made_for else {}
    return {"schema": "submission/1", "student": student, **made,
            "submitted_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "lab_version": __version__, "versions": versions(), "platform": platform.platform(),
            "kernel_family": target_family(),
            "missing": [rel for rel in contract.files("optional") if rel not in files],
            "files": {rel: file_sha256(p) for rel, p in sorted(files.items())}}


def default_workspace(cwd: Path | None = None, kit: Path | None = None) -> Path:
    """``workspace/`` in the current folder, or else the kit's own (so it works from ``notebooks/`` too)."""
    here = (cwd or Path.cwd()) / "workspace"
    theirs = (kit or Path(__file__).resolve().parents[2]) / "workspace"
    return here if here.is_dir() or not theirs.is_dir() else theirs


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
    """Write ``out_dir/<student>.zip`` from the workspace and return its path."""
    if not STUDENT_ID.fullmatch(student or ""):
        raise SubmitError(f"student id {student!r}: use letters, digits, '_', '.' or '-' (at most 64), "
                          "starting with a letter or digit")
    work = Path(work_dir).expanduser().resolve()
    made_for = recorded_variant(work, student)
    files = collect(work)
    doc = schemas.validate("submission", manifest(student, files, made_for), "submission.json")
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab submit", description=__doc__.splitlines()[0])
    parser.add_argument("--student", required=True, help="your student id")
    parser.add_argument("--work-dir", default=None,
                        help="the workspace the lessons wrote (default: workspace/ here, or the kit's workspace/)")
    parser.add_argument("--out", default=".", help="folder for ID.zip (default: the current folder)")
    args = parser.parse_args(argv)
    work = Path(args.work_dir) if args.work_dir else default_workspace()
    try:
        path = submit(args.student, work, args.out)
    except SubmitError as e:
        print(f"submit: {e}", file=sys.stderr)
        return 2
    with zipfile.ZipFile(path) as zf:
        doc = json.loads(zf.read("submission.json"))
    n = len(doc["files"])
    print(f"wrote {path} ({n} file{'' if n == 1 else 's'} from {work.resolve()}); hand in this zip as it is")
    if "variant" not in doc and variant.key(args.student) is not None:
        print(REFERENCE_WARNING.format(student=args.student), file=sys.stderr)
    missing = contract.missing_by_lesson(doc["files"])
    if missing:
        print("not in the workspace yet, so the grader will score the checks that need them 0 "
              "(run the lesson, then hand in again):")
        for lesson, rels in missing.items():
            print(f"  lesson {lesson}: {', '.join(rels)}")
    stubs = unfinished({rel: work.resolve() / rel for rel in doc["files"]})
    if stubs:
        print(f"warning: {', '.join(stubs)} still hold{'s' if len(stubs) == 1 else ''} `raise NotImplementedError`: "
              "finish the exercise, re-run the cell that writes the file (and the lessons after it), "
              "then hand in again")
    return 0
