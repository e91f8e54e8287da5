"""``python -m grader export OUT --roster ROSTER.csv``: the gradebook as Canvas and as Moodle import it.

The roster (``grader.roster``) maps the grader's student ids (the gradebook's ``student``) to the LMS's identifiers.

Canvas's file is its gradebook export's layout, which its import reads: ``Student, ID, SIS User ID, SIS Login ID,
Section``, one column named after the assignment, and a ``Points Possible`` row. Moodle's has ``ID number``, ``Email
address``, one column named after the grade item and one with each student's feedback; its CSV import maps them (Map
from "ID number" to useridnumber, or "Email address" to useremail; the grade column to the grade item, the feedback
column to that item's feedback). Sources in grader/README.md.

Exported: a graded or timed-out hand-in's score (a regrade's ``published`` grade when there is one); a refused one
(``invalid``) scores 0, as its feedback says; the instructor's adjustment is added (``grader.adjustments``), within 0
and the points possible. A student with no grade (no hand-in, ``pending``, ``error``, or a file credited to no one)
has no row at all: a row left out changes nothing in either LMS, where a blank cell would (Moodle's importer reads
an empty cell of an existing item as "no grade" and clears it; Canvas counts a blank as a change). Each is named.

``canvas-feedback.zip`` holds each student's feedback named as Canvas's download named their hand-in
(``okaforchidi_88101_4412345_feedback.txt``), for its "Upload Submission Comments": Canvas reads the first two
numbers of the name as the user and the attachment it comments on. Students whose hand-in did not come from a
Canvas download (no ``handed_in`` column: a batch without ``--roster``) are named; their feedback goes by hand.
"""
from __future__ import annotations

import csv
import io
import os
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from grader import adjustments
from grader.course import like_folder
from grader.lms_downloads import NAMINGS
from grader.private import private_dir, write_private
from grader.roster import NEEDS, ROSTER_COLUMNS, RosterError, read_roster  # noqa: F401 - the export's public names

FORMATS = tuple(NEEDS)
CANVAS_HEADER = ("Student", "ID", "SIS User ID", "SIS Login ID", "Section")
MOODLE_HEADER = ("ID number", "Email address")
EXPORTED = {"graded", "timeout", "invalid"}  # statuses whose score is a grade; pending and error are not yet
CANVAS_FEEDBACK = "canvas-feedback.zip"


@dataclass
class Export:
    """What ``export`` wrote and whom it could not match."""

    files: dict[str, Path]
    no_handin: list[str] = field(default_factory=list)     # in the roster, no gradebook row
    not_in_roster: list[str] = field(default_factory=list)  # a gradebook row, no roster row
    no_grade: list[tuple[str, str]] = field(default_factory=list)  # (student, status): pending, error, duplicate
    feedback_by_hand: list[str] = field(default_factory=list)  # graded, but no Canvas download name to upload under

    def summary(self) -> str:
        lines = [f"{fmt}: {path}" for fmt, path in self.files.items()]
        if self.no_handin:
            lines.append(f"{len(self.no_handin)} roster student(s) with no hand-in (left out: their grade in the "
                         "LMS is unchanged): " + ", ".join(self.no_handin))
        if self.not_in_roster:
            lines.append(f"{len(self.not_in_roster)} hand-in(s) with no roster row (not exported): "
                         + ", ".join(self.not_in_roster))
        if self.no_grade:
            lines.append(f"{len(self.no_grade)} hand-in(s) with no grade yet (left out: their grade in the LMS is "
                         "unchanged): " + ", ".join(f"{s} ({st})" for s, st in self.no_grade))
        if self.feedback_by_hand:
            where = f"is not in {CANVAS_FEEDBACK}" if "canvas feedback" in self.files else \
                f"has no {CANVAS_FEEDBACK}: it would be empty"
            lines.append(f"{len(self.feedback_by_hand)} student(s) whose hand-in has no Canvas download name (their "
                         f"feedback {where}; upload it by hand): " + ", ".join(self.feedback_by_hand))
        return "\n".join(lines)


def read_gradebook(out: Path) -> dict[str, dict]:
    with open(out / "gradebook.csv", newline="", encoding="utf-8") as f:
        return {r["student"]: r for r in csv.DictReader(f)}


def grade_of(row: dict | None, adjustment: adjustments.Adjustment | None = None) -> str:
    """The grade an LMS gets for a gradebook row: its ``published`` grade after a regrade, else its score (0 for a
    refused hand-in), less the course's late penalty, plus the instructor's adjustment, within 0 and the points
    possible; blank for no grade yet."""
    if row is None or row.get("status") not in EXPORTED:
        return ""
    if row.get("published") not in (None, ""):  # a regrade's grade to publish (``--never-lower`` kept it)
        base = float(row["published"])
    else:
        base = 0.0 if row["status"] == "invalid" else float(row["score"])
    base -= float(row.get("late_penalty") or 0)  # the course's late policy (grader.course)
    possible = float(row["max"]) if row.get("max") not in (None, "") else None
    return f"{round(adjustments.applied(base, adjustment, possible), 4):g}"


def csv_text(rows: list[list[str]]) -> str:
    """Rows as CSV text, one line each."""
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows(rows)
    return buf.getvalue()


def canvas_csv(roster: dict[str, dict], grades: dict[str, str], assignment: str, possible: str) -> str:
    """Canvas's gradebook layout: identifiers, the assignment's column, and a Points Possible row."""
    rows = [[*CANVAS_HEADER, assignment], ["Points Possible", "", "", "", "", possible]]
    for student, r in roster.items():
        if grades.get(student):
            rows.append([r.get("name", ""), r.get("canvas_id", ""), r.get("sis_user_id", ""),
                         r.get("sis_login_id", ""), r.get("section", ""), grades[student]])
    return csv_text(rows)


def moodle_csv(roster: dict[str, dict], grades: dict[str, str], item: str, feedback: dict[str, str]) -> str:
    """Moodle's CSV import: the user identifiers it maps from, the grade item's column and its feedback."""
    rows = [[*MOODLE_HEADER, item, f"{item} (feedback)"]]
    for student, r in roster.items():
        if grades.get(student):
            rows.append([r.get("idnumber", ""), r.get("email", ""), grades[student], feedback.get(student, "")])
    return csv_text(rows)


def canvas_upload_name(handed_in: str) -> str | None:
    """``okaforchidi_88101_4412345_feedback.txt`` for a hand-in Canvas's download named ``okaforchidi_88101_4412345_
    s2400101.zip``; None for a name Canvas did not give."""
    stem = handed_in[:-4] if handed_in.endswith(".zip") else handed_in
    m = NAMINGS[0].pattern.fullmatch(stem)
    if m is None:
        return None
    late = "LATE_" if m["late"] else ""
    return f"{m['name']}_{late}{m['canvas_id']}_{m['attachment_id']}_feedback.txt"


def canvas_feedback_zip(path: Path, book: dict[str, dict], grades: dict[str, str], out: Path) -> list[str]:
    """Each exported student's feedback, named for Canvas's bulk upload; the students it could not name. No file
    (and none left from an earlier export) when it could name no one: an empty zip uploads nothing."""
    named, by_hand = {}, []
    for student in grades:
        name = canvas_upload_name(book[student].get("handed_in", ""))
        feedback = out / "feedback" / f"{student}.md"
        if name is None or not feedback.is_file():
            by_hand.append(student)
        else:
            named[name] = feedback.read_text(encoding="utf-8")
    path.unlink(missing_ok=True)
    if not named:
        return by_hand
    tmp = path.with_name(path.name + ".part")
    private_dir(path.parent)
    # private (0600), as every file the grader writes: it holds each student's feedback
    with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as raw, \
            zipfile.ZipFile(raw, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, text in named.items():
            zf.writestr(name, text)
    tmp.replace(path)
    return by_hand


def export(out: str | Path, roster_path: str | Path, formats: tuple[str, ...] = FORMATS,
           assignment: str = "Calibration Lab", dest: str | Path | None = None) -> Export:
    """Write ``dest/canvas.csv`` (and ``canvas-feedback.zip``) and/or ``dest/moodle.csv`` (default ``OUT/lms/``)
    from ``OUT/gradebook.csv``, its feedback and the instructor's adjustments."""
    out = Path(out)
    bad = [f for f in formats if f not in FORMATS]
    if bad:
        raise ValueError(f"unknown LMS format(s) {bad}; expected among {FORMATS}")
    roster = read_roster(roster_path, formats)
    book = read_gradebook(out)
    own = adjustments.read(out)
    grades = {s: g for s in roster if (g := grade_of(book.get(s), own.get(s)))}
    dest = Path(dest) if dest is not None else out / "lms"
    possible = next((f"{float(r['max']):g}" for r in book.values() if r.get("max") not in (None, "")), "")
    feedback = {s: _feedback_text(out, s) for s in grades}
    writers = {"canvas": lambda: canvas_csv(roster, grades, assignment, possible),
               "moodle": lambda: moodle_csv(roster, grades, assignment, feedback)}
    files, by_hand = {}, []
    for fmt in formats:
        files[fmt] = dest / f"{fmt}.csv"
        write_private(files[fmt], writers[fmt]())
    if "canvas" in formats:
        by_hand = canvas_feedback_zip(dest / CANVAS_FEEDBACK, book, grades, out)
        if (dest / CANVAS_FEEDBACK).is_file():
            files["canvas feedback"] = dest / CANVAS_FEEDBACK
    like_folder(out, list(files.values()))  # a TA group that reads the grades reads these too
    return Export(files, no_handin=[s for s in roster if s not in book],
                  not_in_roster=[s for s in book if s not in roster],
                  no_grade=[(s, book[s]["status"]) for s in roster if s in book and s not in grades],
                  feedback_by_hand=by_hand)


def _feedback_text(out: Path, student: str) -> str:
    path = out / "feedback" / f"{student}.md"
    return path.read_text(encoding="utf-8") if path.is_file() else ""
