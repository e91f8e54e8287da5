"""``python -m grader collect``: every student's workspace packed from their home, as ``lab submit`` packs it.

The homes come from a path pattern whose one ``*`` stands for the user (``/home/*/calibration-lab/workspace``,
``/home/jupyter-*/workspace``), matched on disk or filled in from a hub's user list. Each user is mapped to a roster
id (``grader.roster``: ``student``, ``username`` or ``sis_login_id``; without a roster the user name is the id), and
the workspace is packed by ``lab.handin.submit`` into ``OUT/<id>.zip`` (0600) for ``grader batch OUT``. Nothing is
credited silently: a workspace lesson 00 recorded for another id than its home's is ``flagged`` and not packed; a
home the instructor may not read is ``unreadable``, with what to ask the admin; a home without a workspace, or a
roster student without a home, is ``missing``. Each is a row of ``OUT/collection.csv`` and ``collection.md``.
"""
from __future__ import annotations

import getpass
import glob
import json
import os
import re
import tempfile
from dataclasses import astuple, dataclass, fields
from pathlib import Path

from grader.export import csv_text
from grader.private import MODE, private_dir, write_private
from lab import contract, handin, workspace
from lab.errors import LabError

COLLECTED, MISSING, UNREADABLE, FLAGGED = "collected", "missing", "unreadable", "flagged"
STATUSES = (COLLECTED, MISSING, UNREADABLE, FLAGGED)
REPORT = "collection"  # OUT/collection.csv and OUT/collection.md
SCREEN_ROWS = 15  # rows not collected that the printed summary lists; the report lists every one


class CollectError(ValueError):
    """A pattern, user list or output folder ``collect`` cannot use; the message says what was expected."""


@dataclass(frozen=True)
class Home:
    """One user's home as the pattern finds it: the user name and where their workspace should be."""

    user: str
    work: Path


@dataclass(frozen=True)
class Row:
    """One line of the collection report."""

    user: str
    student: str
    status: str
    workspace: str
    note: str


def _split(pattern: str) -> tuple[Path, str, Path]:
    """(the folder holding the homes, the user's part with its one ``*``, the workspace's path inside a home)."""
    parts = Path(pattern).expanduser().parts
    starred = [k for k, p in enumerate(parts) if "*" in p]
    if len(starred) != 1 or parts[starred[0]].count("*") != 1 or any(c in pattern for c in "?["):
        raise CollectError(f"{pattern!r}: expected one '*' standing for the user, as in "
                           "'/home/*/calibration-lab/workspace' (no other wildcard)")
    k = starred[0]
    return Path(*parts[:k]) if k else Path("."), parts[k], Path(*parts[k + 1:]) if k + 1 < len(parts) else Path()


def homes(pattern: str, users: list[str] | None = None) -> list[Home]:
    """Each user's home and workspace: the pattern's ``*`` filled with each of ``users``, else every folder it
    matches on disk, by user name."""
    base, part, inside = _split(pattern)
    if users is None:
        user_of = re.compile(re.escape(part).replace(r"\*", "(.+)"))
        found = [(m.group(1), base / p.name) for p in sorted(base.glob(glob.escape(part.split("*")[0]) + "*"))
                 if (m := user_of.fullmatch(p.name)) and p.is_dir()]
    else:
        found = [(u, base / part.replace("*", u)) for u in users]
    return [Home(user, home / inside) for user, home in found]


def read_users(path: str | Path) -> list[str]:
    """A hub's user names: one a line (``#`` comments), or JupyterHub's ``GET /hub/api/users`` JSON."""
    text = Path(path).read_text(encoding="utf-8-sig")
    if text.lstrip().startswith("["):
        try:
            return [str(u["name"]) for u in json.loads(text)]
        except (ValueError, KeyError, TypeError) as e:
            why = f"{path}: a JSON user list should be JupyterHub's: objects with a 'name' ({e})"
            raise CollectError(why) from None
    return [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def student_of(user: str, roster: dict[str, dict] | None) -> tuple[str | None, str]:
    """(the roster id of ``user``, why none): the row whose ``student``, ``username`` or ``sis_login_id`` is the
    user's name; without a roster, the name itself."""
    if roster is None:
        return user, ""
    ids = sorted({s for s, row in roster.items() if user in (s, row.get("username"), row.get("sis_login_id"))})
    if len(ids) == 1:
        return ids[0], ""
    return None, (f"user {user!r} is on no roster row (student, username or sis_login_id)" if not ids else
                  f"user {user!r} matches {len(ids)} roster rows ({', '.join(ids)})")


def _denied(home: Home, where: str) -> str:
    return (f"permission denied on {where}: ask the admin to let {getpass.getuser()} read the workspace (e.g. "
            f"`setfacl -m u:{getpass.getuser()}:x` on each folder above it and `setfacl -R -m "
            f"u:{getpass.getuser()}:rX {home.work}`), or to run `python -m grader collect` for you")


def _handed_in_under(rel: str) -> bool:
    """Does a file ``lab submit`` takes live under the workspace folder ``rel``?"""
    return any(p.startswith(rel + "/") for p in contract.files("required") + contract.files("optional"))


def unreadable(home: Home) -> str | None:
    """What of ``home``'s workspace the instructor cannot read (a folder above it, a folder or a file ``lab submit``
    takes), as the report's note; None: every part is readable."""
    try:
        os.stat(home.work)
    except PermissionError:
        return _denied(home, str(home.work))
    except OSError:
        return None  # no workspace: missing, not unreadable
    denied: list[str] = []

    def folder(err: OSError) -> None:  # os.walk's onerror: a folder it could not list
        rel = Path(str(err.filename)).relative_to(home.work).as_posix()
        if isinstance(err, PermissionError) and (rel == "." or _handed_in_under(rel)):
            denied.append(str(err.filename))

    for root, _, names in os.walk(home.work, onerror=folder):
        for path in (Path(root, name) for name in names):
            rel = path.relative_to(home.work).as_posix()
            if contract.handed_in(rel) or rel == workspace.VARIANT_FILE:
                try:
                    with open(path, "rb"):
                        pass
                except PermissionError:
                    denied.append(str(path))
    return _denied(home, denied[0]) if denied else None


def collect_one(home: Home, student: str, out: Path) -> Row:
    """Pack ``home``'s workspace as ``student``'s into ``out/<student>.zip`` (0600), or say why not."""
    def row(status: str, note: str) -> Row:
        return Row(home.user, student, status, str(home.work), note)

    denied = unreadable(home)
    if denied:
        return row(UNREADABLE, denied)
    if not home.work.is_dir():
        return row(MISSING, "no workspace in this home (the lessons were never run here)")
    try:
        recorded = workspace.recorded_student(home.work)
    except LabError as e:
        return row(FLAGGED, f"not packed: {e}")
    if recorded is not None and recorded != student and student == home.user:  # no roster row mapped the user
        return row(FLAGGED, f"not packed: lesson 00 recorded student {recorded} in {workspace.VARIANT_FILE}, not the "
                            f"user name {home.user}: give --roster, with a row mapping username {home.user} to the "
                            f"student id (or collect with user names as ids only where students used them)")
    if recorded is not None and recorded != student:
        return row(FLAGGED, f"not packed: lesson 00 recorded student {recorded} in {workspace.VARIANT_FILE}, "
                            f"but this home is {student}'s: the files are {recorded}'s variant. Look before "
                            f"crediting it (`python -m lab submit --student ID --work-dir {home.work}`)")
    with tempfile.TemporaryDirectory(dir=out, prefix=".collect-") as private:  # 0700: no one reads a zip half made
        try:
            made = handin.submit(student, home.work, private)
        except handin.SubmitError as e:
            return row(FLAGGED, f"not packed: lab submit refuses it: {e}")
        except PermissionError as e:
            return row(UNREADABLE, _denied(home, e.filename or str(home.work)))
        os.chmod(made, MODE)
        os.replace(made, out / made.name)
    warned = [line for line, warning in handin.report_lines(handin.read_manifest(out / made.name), home.work)
              if warning]
    return row(COLLECTED, " ".join([f"{made.name}"] + warned))


def collect(pattern: str, out: str | Path, users: list[str] | None = None,
            roster: dict[str, dict] | None = None) -> list[Row]:
    """Every home's workspace packed into ``out`` (a new or zip-free folder), one ``Row`` each, then the roster's
    students with no home as missing; writes ``out/collection.csv`` and ``collection.md``."""
    out = Path(out)
    private_dir(out)
    if any(out.glob("*.zip")):
        raise CollectError(f"{out} already holds hand-ins; collect into a new folder (a zip left from an earlier "
                           "collection would be graded as this one's)")
    rows, seen = [], set()
    for home in homes(pattern, users):
        student, why = student_of(home.user, roster)
        if student is None:
            rows.append(Row(home.user, "", FLAGGED, str(home.work), f"not packed: {why}"))
            continue
        if student in seen:
            rows.append(Row(home.user, student, FLAGGED, str(home.work), f"not packed: a second home for {student}"))
            continue
        seen.add(student)
        rows.append(collect_one(home, student, out))
    rows += [Row("", s, MISSING, "", "on the roster, no home found for them") for s in (roster or {}) if s not in seen]
    write_report(out, rows)
    return rows


def write_report(out: Path, rows: list[Row]) -> None:
    """``out/collection.csv`` and ``out/collection.md``, 0600."""
    header = [f.name for f in fields(Row)]
    write_private(out / f"{REPORT}.csv", csv_text([header] + [list(astuple(r)) for r in rows]))
    table = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    table += ["| " + " | ".join(str(v).replace("|", "\\|") for v in astuple(r)) + " |" for r in rows]
    write_private(out / f"{REPORT}.md", f"# Collection\n\n{counts(rows)}\n\n" + "\n".join(table) + "\n")


def counts(rows: list[Row]) -> str:
    return f"{len(rows)} home(s) or roster student(s): " + ", ".join(f"{sum(r.status == s for r in rows)} {s}"
                                                                     for s in STATUSES)


def summary(rows: list[Row], most: int = SCREEN_ROWS) -> str:
    """One screen: the counts, then the rows not collected with their reasons (at most ``most``)."""
    apart = [r for r in rows if r.status != COLLECTED]
    lines = [counts(rows)] + [f"  {r.status}: {r.user or '-'} ({r.student or 'no roster id'}): {r.note}"
                              for r in apart[:most]]
    if len(apart) > most:
        lines.append(f"  ... and {len(apart) - most} more: {REPORT}.md")
    return "\n".join(lines)
