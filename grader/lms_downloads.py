"""Whose hand-in each file of an LMS bulk download is: download names mapped to roster ids.

An LMS names each student's files after the student, never after the lab's id, and the file's own name (the part
the student chose) is the student's to write. So the grade goes to the roster row the LMS's part of the name
matches (its user id first, else the name it spells), never to the file name the student gave:

- Canvas: ``okaforchidi_88101_4412345_s2400101.zip`` (name as last+first letters, ``LATE_`` when late, user id,
  attachment id, the student's file name);
- Moodle: ``Beatriz Silva_54333_assignsubmission_file_s2400112.zip`` (full name, user id), or one folder per
  student, ``Beatriz Silva_54333_assignsubmission_file_``, holding the zip or the unpacked hand-in;
- Blackboard: ``Calibration Lab_bsilva_attempt_2026-12-04-17-03-11_s2400112.zip`` (assignment, user name, time);
- any other: ``--names REGEX``, whose named groups are roster columns (``(?P<sis_user_id>\\d+)``, ``student``,
  ``name``); a plain roster id (``s2400101.zip``, named by the instructor) is that student's.

A name that matches no roster row, or one that two rows match, is ``unmatched``; two files for one student are
``duplicate``: a gradebook row each, with the files and the reason, and no grade (nothing is credited to anyone).
"""
from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from grader.results import safe_text
from grader.roster import ROSTER_COLUMNS, name_keys
from grader.submission import handed_in_path

NAME = "name"  # a group compared with every spelling of the roster's name (``grader.roster.name_keys``)
UNMATCHED, DUPLICATE = "unmatched", "duplicate"  # gradebook statuses of files credited to no one


@dataclass(frozen=True)
class Naming:
    """One LMS's bulk-download names: the pattern, and which of its groups name the student, most certain first."""

    lms: str
    pattern: re.Pattern
    ids: tuple[tuple[str, tuple[str, ...]], ...]  # (group, the roster columns it may equal; (NAME,): the name)


NAMINGS = (
    Naming("Canvas", re.compile(r"(?P<name>[^\W_]+)_(?:(?P<late>LATE)_)?(?P<canvas_id>\d+)_(?P<attachment_id>\d+)"
                                r"_(?P<file>.*)"), (("canvas_id", ("canvas_id",)), ("name", (NAME,)))),
    Naming("Moodle", re.compile(r"(?P<name>.+?)_(?P<moodle_id>\d+)_assignsubmission_[a-z]+_(?P<file>.*)"),
           (("moodle_id", ("moodle_id",)), ("name", (NAME,)))),
    Naming("Blackboard", re.compile(r"(?P<assignment>.+)_(?P<username>[^_]+)_attempt_(?P<time>\d{4}(?:-\d\d){5})"
                                    r"(?:_(?P<file>.*))?"), (("username", ("username", "sis_login_id")),)),
)


@dataclass(frozen=True)
class HandIn:
    """A file credited to a roster student: what to grade, whose, and what the LMS said about it."""

    path: Path  # what to grade (a Moodle folder's zip or the folder)
    student: str
    file: str  # the download's own name, as the gradebook's ``handed_in`` shows it
    lms: str
    late: bool = False
    handed_in_at: datetime | None = None  # the LMS's time: a Blackboard name's, else the downloaded file's mtime


def handed_in_at(path: Path, fields: dict) -> datetime | None:
    """When the LMS says the file was handed in: the time in a Blackboard download name (no offset: the course's
    zone), else the download's modification time (unzipping an LMS download keeps it); never the student's zip."""
    if fields.get("time"):
        return datetime.strptime(fields["time"], "%Y-%m-%d-%H-%M-%S")
    try:
        return dt.datetime.fromtimestamp(path.stat().st_mtime, tz=dt.UTC)
    except OSError:
        return None


@dataclass(frozen=True)
class Unclaimed:
    """Files credited to no one: a gradebook row of their own, with the reason and no grade."""

    key: str  # the gradebook's ``student``: the roster id of a duplicate, the file's name for an unmatched one
    status: str  # UNMATCHED or DUPLICATE
    files: tuple[str, ...]
    reason: str


@dataclass
class Collected:
    hand_ins: list[HandIn] = field(default_factory=list)
    unclaimed: list[Unclaimed] = field(default_factory=list)


def user_naming(regex: str) -> Naming:
    """``--names REGEX`` as a naming: its named groups among the roster's columns; raises ValueError saying why."""
    try:
        pattern = re.compile(regex)
    except re.error as e:
        raise ValueError(f"--names {regex!r}: not a regular expression ({e})") from None
    groups = [g for g in ROSTER_COLUMNS if g in pattern.groupindex]
    if not groups:
        raise ValueError(f"--names {regex!r}: no named group names a roster column; expected one of "
                         f"{', '.join(f'(?P<{c}>...)' for c in ROSTER_COLUMNS)}")
    return Naming("--names", pattern, tuple((g, (NAME,) if g == NAME else (g,)) for g in groups))


def _rows_matching(roster: dict[str, dict], columns: tuple[str, ...], value: str) -> list[str]:
    if columns == (NAME,):
        keys = name_keys(value)
        return [s for s, r in roster.items() if keys & name_keys(r.get(NAME, ""))]
    return [s for s, r in roster.items() if any((s if c == "student" else r.get(c, "")) == value for c in columns)]


def identify(stem: str, roster: dict[str, dict], namings: tuple[Naming, ...] = NAMINGS) -> tuple[str | None, str, bool,
                                                                                                  str]:
    """(student or None, which LMS named it, late, why none) for a download's name without ``.zip``."""
    student, lms, late, why, _ = identify_fields(stem, roster, namings)
    return student, lms, late, why


def identify_fields(stem: str, roster: dict[str, dict],
                    namings: tuple[Naming, ...] = NAMINGS) -> tuple[str | None, str, bool, str, dict]:
    """``identify``, plus the name's fields (its time, for one)."""
    for naming in namings:
        m = naming.pattern.fullmatch(stem)
        if m is None:
            continue
        fields = m.groupdict()
        tried = []
        for group, columns in naming.ids:
            value = fields.get(group) or ""
            if not value:
                continue
            hits = _rows_matching(roster, columns, value)
            if len(hits) == 1:
                return hits[0], naming.lms, bool(fields.get("late")), "", fields
            if hits:
                return None, naming.lms, False, (f"a {naming.lms} download name whose {group} {value!r} matches "
                                                 f"{len(hits)} roster rows ({', '.join(hits)}); add the "
                                                 f"{'/'.join(c for c in columns if c != NAME) or 'LMS user id'} "
                                                 "column to the roster"), fields
            tried.append(f"{group} {value!r}")
        return None, naming.lms, False, (f"a {naming.lms} download name whose {' or '.join(tried)} matches no roster "
                                         "row; add the student to the roster"), fields
    if stem in roster:
        return stem, "file name", False, "", {}
    return None, "", False, ("names no roster student: not a Canvas, Moodle or Blackboard download name, nor a roster "
                             "id; rename it to the student's id or give --names REGEX"), {}


def collect(paths: list[Path], roster: dict[str, dict], names: str | None = None) -> Collected:
    """Each downloaded file (a zip or a folder) credited to its roster student, or set apart with the reason."""
    namings = (user_naming(names), *NAMINGS) if names else NAMINGS
    found: dict[str, list[HandIn]] = {}
    out = Collected()
    for p in paths:
        stem = p.stem if p.suffix == ".zip" else p.name
        student, lms, late, why, fields = identify_fields(stem, roster, namings)
        if student is None:
            key = safe_text(stem, 200)
            taken = {u.key for u in out.unclaimed} | set(roster)
            while key in taken:
                key += "'"
            out.unclaimed.append(Unclaimed(key, UNMATCHED, (p.name,), why))
            continue
        found.setdefault(student, []).append(HandIn(handed_in_path(p), student, p.name, lms, late,
                                                    handed_in_at(p, fields)))
    for student, hand_ins in found.items():
        if len(hand_ins) == 1:
            out.hand_ins.append(hand_ins[0])
        else:
            files = tuple(h.file for h in hand_ins)
            out.unclaimed.append(Unclaimed(student, DUPLICATE, files, f"{len(files)} files for {student}: "
                                           f"{', '.join(files)}; none graded: keep the one to grade and grade again"))
    out.hand_ins.sort(key=lambda h: h.student)
    return out
