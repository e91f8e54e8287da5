"""The course's roster: one CSV the instructor owns, mapping each student id to the LMS's identifiers.

Columns (a header row, UTF-8, any order; Excel's byte-order mark is fine):

- ``student``: the student id the grade goes to (the lab's ``STUDENT_ID``), on every row, once each;
- ``name``: the student's name as the LMS shows it ("Last, First" as Canvas sorts it, or "First Last");
- Canvas: ``canvas_id`` (Canvas's numeric user ID), ``sis_user_id``, ``sis_login_id``, ``section``;
- Moodle: ``idnumber`` (the profile's ID number), ``email``, ``moodle_id`` (Moodle's numeric user id, as its
  bulk download names a student's files);
- Blackboard: ``username`` (as its bulk download names a student's files; ``sis_login_id`` is tried too).

``grader batch --roster`` needs only ``student`` and whatever the download names carry; ``grader export`` needs, for
Canvas, one of ``canvas_id``, ``sis_user_id``, ``sis_login_id`` on each row, and for Moodle one of ``idnumber``,
``email``.
"""
from __future__ import annotations

import csv
import io
import re
from pathlib import Path
from types import MappingProxyType

ROSTER_COLUMNS = ("student", "name", "canvas_id", "sis_user_id", "sis_login_id", "section", "idnumber", "email",
                  "moodle_id", "username")
NEEDS = MappingProxyType({"canvas": ("canvas_id", "sis_user_id", "sis_login_id"), "moodle": ("idnumber", "email")})


class RosterError(ValueError):
    """A roster the grader cannot use; the message names the file, the row and the field."""


def read_roster(path: str | Path, formats: tuple[str, ...] = ()) -> dict[str, dict]:
    """student -> its roster row; ``formats``: the LMSs whose identifiers each row must carry (``NEEDS``).

    Raises ``RosterError`` naming the file, the row and the field."""
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


def letters(text: str) -> str:
    """Lower-case letters and digits only: how Canvas writes a name into its download names (``okaforchidi``)."""
    return re.sub(r"[\W_]+", "", text.casefold())


def name_keys(name: str) -> set[str]:
    """Every spelling of a roster name an LMS download may carry: "Okafor, Chidi" is ``okaforchidi`` (Canvas:
    last name first) and ``chidiokafor`` (Moodle: "Chidi Okafor")."""
    if "," in name:
        last, first = (part.strip() for part in name.split(",", 1))
        return {k for k in (letters(last + first), letters(first + last)) if k}
    return {letters(name)} - {""}
