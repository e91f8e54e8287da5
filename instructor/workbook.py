"""``python -m instructor workbook``: every lesson headlessly (``python -m lab run``, with the same options), then
the workspace handed in (``lab.tools.submit``) and graded (``grader.grade``), each lost point printed.

The one place the lab and the grader meet: ``lab`` never imports ``grader``. ``make lab`` runs this.
"""
from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import grader
from grader.results import GradeResult
from lab.tools import run
from lab.tools.submit import SubmitError, submit

HEADLESS_STUDENT = "headless-run"


def grade_workspace(work_dir: Path, out_dir: Path | None = None) -> GradeResult:
    """Hand the workspace in as ``HEADLESS_STUDENT`` and grade the zip, which goes to ``out_dir`` (default: a
    temporary folder, gone after grading).

    A workspace that cannot be handed in raises ``SubmitError``, which names the missing file.
    """
    with tempfile.TemporaryDirectory(prefix="lab-run-grade-") as tmp:
        return grader.grade(submit(HEADLESS_STUDENT, work_dir, out_dir or tmp))


def grade_lines(result: GradeResult) -> list[str]:
    """``Grade: S / M (status)``, then one line per check that lost points."""
    lines = [f"Grade: {run.format_value(result.score)} / {run.format_value(result.max_score)} ({result.status})"]
    for check in result.checks:
        if check.points < check.max_points:
            lines.append(f"  lost {run.format_value(check.max_points - check.points)}: {check.part}: {check.name}: "
                         f"{check.message}")
    return lines


def print_grade(work_dir: Path, out_dir: Path) -> int:
    """Grade the workspace and print the score; 1 if it could not be graded (a status other than graded).

    A workspace that cannot be handed in yet (``--only`` ran some lessons) is not graded, and that is no error.
    """
    try:
        result = grade_workspace(work_dir, out_dir)
    except SubmitError as e:
        print(f"\nGrade: skipped, the workspace cannot be handed in yet ({e})")
        return 0
    print("\n" + "\n".join(grade_lines(result)))
    if result.status != "graded":
        print(f"Grade: {result.status}: {result.reason}", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m lab run`` with the same options; if every lesson ran, the grade of its workspace."""
    argv = sys.argv[1:] if argv is None else argv
    code = run.main(argv, "python -m instructor workbook",
                    "Run every lesson as python -m lab run does, then grade the workspace it wrote")
    if code != 0:
        return code
    args = run.parse_args(argv)  # the options run.main just accepted: where the workspace and the zip go
    return print_grade(Path(args.work_dir).resolve(), Path(args.out).resolve())


if __name__ == "__main__":
    sys.exit(main())
