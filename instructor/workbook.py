"""``python -m instructor workbook``: every lesson headlessly (``python -m lab run``), then hand the workspace in
(``lab.tools.submit``) and grade it (``grader.grade``), printing each lost point.

The one place the lab and the grader meet: ``lab`` never imports ``grader``. ``make lab`` runs this.
"""
from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import grader
from lab.tools import run
from lab.tools.submit import SubmitError, submit

HEADLESS_STUDENT = "headless-run"


def grade_workspace(work_dir: Path, out_dir: Path | None = None):
    """Hand the workspace in and grade it; the submission zip goes to ``out_dir`` (default: a temporary folder).

    A workspace that cannot be handed in raises ``lab.tools.submit.SubmitError``, which names the missing file.
    """
    if out_dir is None:
        with tempfile.TemporaryDirectory(prefix="lab-run-grade-") as tmp:
            return grader.grade(submit(HEADLESS_STUDENT, work_dir, tmp))
    return grader.grade(submit(HEADLESS_STUDENT, work_dir, out_dir))


def print_grade(work_dir: Path, out_dir: Path) -> int:
    """Grade the workspace and print the score; 1 if it could not be graded (status other than graded)."""
    try:
        result = grade_workspace(work_dir, out_dir)
    except SubmitError as e:
        print(f"\nGrade: skipped, the workspace cannot be handed in yet ({e})")
        return 0
    print(f"\nGrade: {run.format_value(result.score)} / {run.format_value(result.max_score)} ({result.status})")
    for check in result.checks:
        if check.points < check.max_points:
            print(f"  lost {run.format_value(check.max_points - check.points)}: {check.part}: {check.name}: "
                  f"{check.message}")
    if result.status != "graded":
        print(f"Grade: {result.status}: {result.reason}", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m lab run`` with the same options, then the grade of its workspace."""
    argv = sys.argv[1:] if argv is None else argv
    code = run.main(argv)
    if code != 0:
        return code
    args = run._parse_args(argv)
    return print_grade(Path(args.work_dir).resolve(), Path(args.out).resolve())
