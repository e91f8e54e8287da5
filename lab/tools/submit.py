"""Pack the workspace into ID.zip for the grader, from the kit's folder or notebooks/.

``lab.handin`` packs it, as ``lab.hand_in()`` does from a notebook cell."""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from lab import workspace
from lab.handin import (
    REFERENCE_WARNING,
    STUB,
    STUDENT_ID,
    SubmitError,
    collect,
    hand_in,
    manifest,
    read_manifest,
    recorded_variant,
    report_lines,
    submit,
    unfinished,
)

__all__ = ["REFERENCE_WARNING", "STUB", "STUDENT_ID", "SubmitError", "collect", "default_workspace", "hand_in", "main",
           "manifest", "read_manifest", "recorded_variant", "report_lines", "submit", "unfinished"]


def default_workspace(cwd: Path | None = None, kit: Path | None = None) -> Path:
    """``LAB_WORK_DIR`` when set; else ``workspace/`` in the current folder, or else the kit's own (so it works from
    ``notebooks/`` too)."""
    if os.environ.get(workspace.ENV_WORK_DIR, "").strip():
        return workspace.resolve_work_dir()
    here = (cwd or Path.cwd()) / "workspace"
    theirs = (kit or Path(__file__).resolve().parents[2]) / "workspace"
    return here if here.is_dir() or not theirs.is_dir() else theirs


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
    doc = read_manifest(path)
    n = len(doc["files"])
    print(f"wrote {path} ({n} file{'' if n == 1 else 's'} from {work.resolve()}); hand in this zip as it is")
    for line, warning in report_lines(doc, work):
        print(line, file=sys.stderr if warning else sys.stdout)
    return 0
