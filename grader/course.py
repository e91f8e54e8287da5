"""The course's own settings, in one file the instructor owns: ``--config course.toml``.

```toml
[points]                         # prices: a check's points (any check of rubric.toml); the rest keep rubric.toml's
reader.contract = 2              # a check's per-rule costs keep their share of it (grader.context.share_left)
predictions.clip_or_squash = 1

[predictions]
graded = "completion"            # "correctness" (the default): the lesson's truth; "completion": any answer counts

[late]
due = 2026-12-04T23:59:00Z       # a TOML date-time with its offset
per_day = 0.10                   # share of the points possible lost per day, or part of a day, late
extensions = "extensions.csv"    # student,due (ISO 8601 with offset), beside this file

[files]
group = "ta-staff"               # the grades folder readable by this group (0640 files, 0750 folders); else 0600
```

Nothing here changes the project: the rubric's checks, the lab and the kit are the same for every course. The
gradebook records the file's SHA-256 (with its extensions file's) in the ``course`` column, so a grade says which
settings made it. When a hand-in was handed in comes from the LMS, never from the student's zip: a Blackboard
download name's time, else the downloaded file's modification time (``grader.lms_downloads``).
"""
from __future__ import annotations

import contextlib
import csv
import grp
import hashlib
import io
import math
import os
import sys
import tomllib
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

from grader.rubric import rubric

MODES = ("correctness", "completion")


class CourseError(ValueError):
    """A course file the grader cannot use; the message names the file, the field and what was expected."""


@dataclass(frozen=True)
class Late:
    """The late policy: a due date, a share of the points possible per day late, per-student extensions."""

    due: datetime | None = None
    per_day: float = 0.0
    extensions: tuple[tuple[str, datetime], ...] = ()

    def days_late(self, student: str, handed_in: datetime | None) -> int:
        """Whole days late, a started day counting as one; 0 without a due date or a time. A time without an offset
        (a Blackboard download name's) is read in the due date's."""
        due = dict(self.extensions).get(student, self.due)
        if due is None or handed_in is None:
            return 0
        if handed_in.tzinfo is None:
            handed_in = handed_in.replace(tzinfo=due.tzinfo)
        if handed_in <= due:
            return 0
        return math.ceil((handed_in - due) / timedelta(days=1))

    def penalty(self, days: int, possible: float) -> float:
        """Points lost for ``days`` late, never more than the points possible."""
        return round(min(possible, days * self.per_day * possible), 2)


@dataclass(frozen=True)
class Course:
    prices: tuple[tuple[str, str, float], ...] = ()
    predictions: str = "correctness"
    late: Late = field(default_factory=Late)
    group: str = ""  # a group that may read the grades folder (the course's TAs); empty: the grader's user only
    sha256: str = ""  # of the course file (and its extensions file); empty: no course file

    def share(self, out: Path) -> None:
        """Let ``group`` read everything under ``out`` (files 0640, folders 0750); nothing without a group."""
        if not self.group:
            return
        gid = grp.getgrnam(self.group).gr_gid
        try:
            for path in [out, *out.rglob("*")]:
                if not path.is_symlink():
                    os.chown(path, -1, gid)
                    os.chmod(path, 0o750 if path.is_dir() else 0o640)
        except OSError as e:  # the grades are written; say why the group cannot read them
            print(f"grader: {out} not shared with group {self.group!r} ({e}); you must belong to the group, or run "
                  f"`chgrp -R {self.group} {out}` as someone who does", file=sys.stderr)


def like_folder(out: Path, paths: list[Path]) -> None:
    """Files written into a grades folder after its batch (``export``, ``adjust``) get the folder's group access: 0640
    and its group when a course's TA group reads it (``Course.share``), else they stay the user's only."""
    folder = out.stat()
    if folder.st_mode & 0o777 != 0o750:  # Course.share's mark; a folder made 0755 by a umask is no invitation
        return
    for path in paths:
        for p in (path, *([q for q in path.parents if out in q.parents])):
            with contextlib.suppress(OSError):  # as in Course.share: the file is written either way
                os.chown(p, -1, folder.st_gid)
                os.chmod(p, 0o750 if p.is_dir() else 0o640)


DEFAULT = Course()  # no course file: rubric.toml's prices, predictions graded for correctness, no late policy


def _number(path: Path, where: str, value, low: float = 0.0, high: float = math.inf) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
        raise CourseError(f"{path}: {where} = {value!r}; expected a number from {low:g} to {high:g}")
    return float(value)


def _prices(path: Path, table) -> tuple[tuple[str, str, float], ...]:
    if not isinstance(table, dict):
        raise CourseError(f"{path}: [points] must be a table of part.check = points")
    parts, out = rubric(), []
    for part, checks in table.items():
        if part not in parts or not isinstance(checks, dict):
            raise CourseError(f"{path}: [points] {part}: no such rubric part; expected one of {', '.join(parts)}")
        for name, value in checks.items():
            if name == "title" or name not in parts[part]:
                raise CourseError(f"{path}: [points] {part}.{name}: no such check in rubric.toml's [{part}]")
            out.append((part, name, _number(path, f"[points] {part}.{name}", value)))
    return tuple(out)


def _when(path: Path, where: str, value) -> datetime:
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            raise CourseError(f"{path}: {where} = {value!r}; expected a date-time such as "
                              "2026-12-04T23:59:00Z") from None
    if not isinstance(value, datetime) or value.tzinfo is None:
        raise CourseError(f"{path}: {where} = {value!r}; expected a date-time with its offset (Z or +01:00)")
    return value


def _extensions(path: Path, csv_path: Path) -> tuple[tuple[str, datetime], ...]:
    try:
        text = csv_path.read_text(encoding="utf-8-sig")
    except OSError as e:
        raise CourseError(f"{path}: [late] extensions: {csv_path} cannot be read ({e.strerror})") from None
    rows = csv.DictReader(io.StringIO(text))
    if not {"student", "due"} <= set(rows.fieldnames or ()):
        raise CourseError(f"{csv_path}: row 1 (the header): expected the columns student, due")
    return tuple((row["student"].strip(), _when(csv_path, f"row {n}, field 'due'", row["due"].strip()))
                 for n, row in enumerate(rows, start=2))


def files_of(path: Path) -> list[Path]:
    """The files a course file names beside it (its extensions CSV), for a bundle that carries it."""
    late = tomllib.loads(path.read_text(encoding="utf-8")).get("late", {})
    return [path.parent / str(late["extensions"])] if "extensions" in late else []


def load(path: str | Path) -> Course:
    """The course file; raises ``CourseError`` naming the file, the field and what was expected."""
    path = Path(path)
    try:
        raw = path.read_bytes()
        doc = tomllib.loads(raw.decode("utf-8"))
    except OSError as e:
        raise CourseError(f"{path}: cannot be read ({e.strerror})") from None
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise CourseError(f"{path}: not a TOML file ({e})") from None
    unknown = set(doc) - {"points", "predictions", "late", "files"}
    if unknown:
        raise CourseError(f"{path}: unknown table(s) {sorted(unknown)}; expected [points], [predictions], [late], "
                          "[files]")
    group = str(doc.get("files", {}).get("group", ""))
    if group:
        try:
            grp.getgrnam(group)
        except KeyError:
            raise CourseError(f"{path}: [files] group = {group!r}: no such group on this machine") from None
    mode = doc.get("predictions", {}).get("graded", "correctness")
    if mode not in MODES:
        raise CourseError(f"{path}: [predictions] graded = {mode!r}; expected one of {', '.join(MODES)}")
    late, digest = doc.get("late", {}), hashlib.sha256(raw)
    extensions: tuple[tuple[str, datetime], ...] = ()
    if "extensions" in late:
        csv_path = path.parent / str(late["extensions"])
        extensions = _extensions(path, csv_path)
        digest.update(csv_path.read_bytes())
    policy = Late(_when(path, "[late] due", late["due"]) if "due" in late else None,
                  _number(path, "[late] per_day", late.get("per_day", 0.0), 0.0, 1.0), extensions)
    return Course(_prices(path, doc.get("points", {})), mode, policy, group, digest.hexdigest())
