"""``python -m grader export OUT --roster ROSTER.csv``: the gradebook as Canvas and as Moodle import it.

The roster maps the grader's student ids (each hand-in's file name, the gradebook's ``student``) to the LMS's
identifiers. Its columns (a header row, UTF-8, any order; Excel's byte-order mark is fine):

- ``student``: required on every row, once each;
- Canvas: ``name`` (the LMS's "Last, First"), ``canvas_id`` (Canvas's numeric user ID), ``sis_user_id``,
  ``sis_login_id``, ``section``; a row needs at least one of ``canvas_id``, ``sis_user_id``, ``sis_login_id``;
- Moodle: ``idnumber`` (the profile's ID number) or ``email`` (the email address); a row needs one of them.

Canvas's file is its gradebook export's layout, which its import reads: ``Student, ID, SIS User ID, SIS Login ID,
Section``, one column named after the assignment, and a ``Points Possible`` row. Moodle's has ``ID number``, ``Email
address`` and one column named after the grade item; its CSV import maps them (Map from "ID number" to
useridnumber, or "Email address" to useremail; the grade column to the grade item). Sources in grader/README.md.

Exported: a graded or timed-out hand-in's score; a refused one (``invalid``) scores 0, as its feedback says. A
``pending`` or ``error`` row has no grade yet and is left blank (both LMSs leave a blank cell alone) and named.
A roster student with no hand-in is blank and named; a hand-in with no roster row is not exported and named.
"""
from __future__ import annotations

import csv
import io
from dataclasses import dataclass, field
from pathlib import Path

from lab.workspace import atomic_write_text

ROSTER_COLUMNS = ("student", "name", "canvas_id", "sis_user_id", "sis_login_id", "section", "idnumber", "email")
NEEDS = {"canvas": ("canvas_id", "sis_user_id", "sis_login_id"), "moodle": ("idnumber", "email")}
FORMATS = tuple(NEEDS)
CANVAS_HEADER = ("Student", "ID", "SIS User ID", "SIS Login ID", "Section")
MOODLE_HEADER = ("ID number", "Email address")
EXPORTED = {"graded", "timeout", "invalid"}  # statuses whose score is a grade; pending and error are not yet


class RosterError(ValueError):
    """A roster the export cannot use; the message names the file, the row and the field."""


@dataclass
class Export:
    """What ``export`` wrote and whom it could not match."""

    files: dict[str, Path]
    no_handin: list[str] = field(default_factory=list)     # in the roster, no gradebook row
    not_in_roster: list[str] = field(default_factory=list)  # a gradebook row, no roster row
    no_grade: list[tuple[str, str]] = field(default_factory=list)  # (student, status): pending or error

    def summary(self) -> str:
        lines = [f"{fmt}: {path}" for fmt, path in self.files.items()]
        if self.no_handin:
            lines.append(f"{len(self.no_handin)} roster student(s) with no hand-in (left blank): "
                         + ", ".join(self.no_handin))
        if self.not_in_roster:
            lines.append(f"{len(self.not_in_roster)} hand-in(s) with no roster row (not exported): "
                         + ", ".join(self.not_in_roster))
        if self.no_grade:
            lines.append(f"{len(self.no_grade)} hand-in(s) with no grade yet (left blank): "
                         + ", ".join(f"{s} ({st})" for s, st in self.no_grade))
        return "\n".join(lines)


def read_roster(path: str | Path, formats: tuple[str, ...] = FORMATS) -> dict[str, dict]:
    """student -> its roster row; raises ``RosterError`` naming the file, the row and the field."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise RosterError(f"{path}: no such roster file") from None
    except UnicodeDecodeError as e:
        raise RosterError(f"{path}: not UTF-8 text (byte {e.start}); save the roster as CSV UTF-8") from None
    reader = csv.DictReader(io.StringIO(text))
    header = [h.strip() for h in (reader.fieldnames or [])]
    if "student" not in header:
        raise RosterError(f"{path}: row 1 (the header) has no 'student' column; expected columns among "
                          f"{', '.join(ROSTER_COLUMNS)}")
    unknown = [h for h in header if h not in ROSTER_COLUMNS]
    if unknown:
        raise RosterError(f"{path}: row 1 (the header): unknown column(s) {', '.join(map(repr, unknown))}; "
                          f"expected columns among {', '.join(ROSTER_COLUMNS)}")
    reader.fieldnames = header
    roster: dict[str, dict] = {}
    for n, raw in enumerate(reader, start=2):
        if None in raw:
            raise RosterError(f"{path}: row {n}: more fields than the header's {len(header)}")
        row = {k: (v or "").strip() for k, v in raw.items()}
        if not any(row.values()):
            continue  # a blank line
        student = row["student"]
        if not student:
            raise RosterError(f"{path}: row {n}, field 'student': empty; expected the hand-in's student id")
        if student in roster:
            raise RosterError(f"{path}: row {n}, field 'student': {student!r} is already on row "
                              f"{roster[student]['_row']}; one row per student")
        for fmt in formats:
            if not any(row.get(k) for k in NEEDS[fmt]):
                raise RosterError(f"{path}: row {n} ({student}): {fmt} needs one of the fields "
                                  f"{', '.join(NEEDS[fmt])}; all are empty or missing")
        roster[student] = {**row, "_row": n}
    return roster


def read_gradebook(out: Path) -> dict[str, dict]:
    with open(out / "gradebook.csv", newline="", encoding="utf-8") as f:
        return {r["student"]: r for r in csv.DictReader(f)}


def grade_of(row: dict | None) -> str:
    """The grade an LMS gets for a gradebook row: its ``published`` grade after a regrade, else its score; 0 for a
    refused hand-in; blank for no grade yet."""
    if row is None or row.get("status") not in EXPORTED:
        return ""
    if row.get("published") not in (None, ""):  # a regrade's grade to publish (``--never-lower`` kept it)
        return f"{float(row['published']):g}"
    if row["status"] == "invalid":
        return "0"
    return f"{float(row['score']):g}"


def _csv(rows: list[list[str]]) -> str:
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows(rows)
    return buf.getvalue()


def canvas_csv(roster: dict[str, dict], book: dict[str, dict], assignment: str, possible: str) -> str:
    """Canvas's gradebook layout: identifiers, the assignment's column, and a Points Possible row."""
    rows = [[*CANVAS_HEADER, assignment], ["Points Possible", "", "", "", "", possible]]
    for student, r in roster.items():
        rows.append([r.get("name", ""), r.get("canvas_id", ""), r.get("sis_user_id", ""), r.get("sis_login_id", ""),
                     r.get("section", ""), grade_of(book.get(student))])
    return _csv(rows)


def moodle_csv(roster: dict[str, dict], book: dict[str, dict], item: str) -> str:
    """Moodle's CSV import: the user identifiers it maps from, and the grade item's column."""
    rows = [[*MOODLE_HEADER, item]]
    for student, r in roster.items():
        rows.append([r.get("idnumber", ""), r.get("email", ""), grade_of(book.get(student))])
    return _csv(rows)


def export(out: str | Path, roster_path: str | Path, formats: tuple[str, ...] = FORMATS,
           assignment: str = "Calibration Lab", dest: str | Path | None = None) -> Export:
    """Write ``dest/canvas.csv`` and/or ``dest/moodle.csv`` (default ``OUT/lms/``) from ``OUT/gradebook.csv``."""
    out = Path(out)
    bad = [f for f in formats if f not in FORMATS]
    if bad:
        raise ValueError(f"unknown LMS format(s) {bad}; expected among {FORMATS}")
    roster = read_roster(roster_path, formats)
    book = read_gradebook(out)
    dest = Path(dest) if dest is not None else out / "lms"
    possible = next((f"{float(r['max']):g}" for r in book.values() if r.get("max") not in (None, "")), "")
    writers = {"canvas": lambda: canvas_csv(roster, book, assignment, possible),
               "moodle": lambda: moodle_csv(roster, book, assignment)}
    files = {}
    for fmt in formats:
        files[fmt] = dest / f"{fmt}.csv"
        atomic_write_text(files[fmt], writers[fmt]())
    return Export(files, no_handin=[s for s in roster if s not in book],
                  not_in_roster=[s for s in book if s not in roster],
                  no_grade=[(s, book[s]["status"]) for s in roster if s in book and not grade_of(book[s])])
