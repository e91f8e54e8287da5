"""Manual adjustments: points an instructor adds or takes away by hand, with the comment the student reads.

They live in ``OUT/adjustments.csv`` (``student, points, comment``), the instructor's file: no batch, ``--resume``
or regrade writes it, so an adjustment outlives every regrade. The gradebook shows it (``adjustment``,
``adjustment_comment``), each student's feedback ends with it, and ``grader export`` adds it to the grade (kept
within 0 and the points possible). ``python -m grader adjust OUT --student ID --points P --comment TEXT`` records one
(``--points 0`` with no comment removes it).
"""
from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass
from pathlib import Path

from grader.private import write_private

FILE = "adjustments.csv"
HEADER = ("student", "points", "comment")
MARK = "\n\n## Adjusted by your instructor\n\n"  # the feedback's last section; replaced, never repeated


class AdjustmentError(ValueError):
    """An adjustments file or request the grader cannot use; the message names the file, row and field."""


@dataclass(frozen=True)
class Adjustment:
    points: float
    comment: str


def read(out: str | Path) -> dict[str, Adjustment]:
    """student -> adjustment, from ``OUT/adjustments.csv`` (none when the file does not exist)."""
    path = Path(out) / FILE
    if not path.is_file():
        return {}
    found: dict[str, Adjustment] = {}
    rows = csv.DictReader(io.StringIO(path.read_text(encoding="utf-8-sig")))
    if tuple(rows.fieldnames or ()) != HEADER:
        raise AdjustmentError(f"{path}: row 1 (the header) is {rows.fieldnames}; expected {', '.join(HEADER)}")
    for n, row in enumerate(rows, start=2):
        student = (row.get("student") or "").strip()
        try:
            points = float(row.get("points") or "")
            if not math.isfinite(points):
                raise ValueError
        except ValueError:
            raise AdjustmentError(f"{path}: row {n} ({student}), field 'points': {row.get('points')!r}; expected a "
                                  "number of points, such as 2 or -1.5") from None
        found[student] = Adjustment(points, (row.get("comment") or "").strip())
    return found


def record(out: str | Path, student: str, points: float, comment: str) -> dict[str, Adjustment]:
    """Set (or, with 0 points and no comment, remove) one student's adjustment; every adjustment afterwards."""
    if not math.isfinite(points):
        raise AdjustmentError(f"--points {points}: expected a finite number of points")
    if points and not comment.strip():
        raise AdjustmentError("--comment: empty; an adjustment of points needs the reason the student will read")
    adjustments = read(out)
    if points or comment.strip():
        adjustments[student] = Adjustment(points, comment.strip())
    else:
        adjustments.pop(student, None)
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(HEADER)
    for s, a in sorted(adjustments.items()):
        w.writerow([s, f"{a.points:g}", a.comment])
    write_private(Path(out) / FILE, buf.getvalue())
    return adjustments


def columns(adjustment: Adjustment | None) -> dict[str, str]:
    """The gradebook's two adjustment columns for one student (empty without one)."""
    if adjustment is None:
        return {}
    return {"adjustment": f"{adjustment.points:+g}", "adjustment_comment": adjustment.comment}


def in_feedback(markdown: str, adjustment: Adjustment | None, total: str = "") -> str:
    """The feedback with its adjustment section (replacing an earlier one), or without one; ``total``: the grade
    with it, as the LMS gets it ("48.5 / 68"), when known."""
    body = markdown.split(MARK, 1)[0].rstrip("\n") + "\n"
    if adjustment is None:
        return body
    return (body.rstrip("\n") + MARK + f"{adjustment.points:+g} point(s): {adjustment.comment}\n\n"
            + (f"**Your grade with it: {total}.** " if total else "")
            + "This adjustment is added to the grade above, with the total kept between 0 and the points possible, "
            "and kept when your hand-in is graded again.\n")


def applied(grade: float, adjustment: Adjustment | None, possible: float | None) -> float:
    """The grade with its adjustment, kept within 0 and the points possible (when known)."""
    total = grade + (adjustment.points if adjustment else 0.0)
    top = possible if possible else math.inf
    return min(max(total, 0.0), top)
