"""``python -m grader regrade DIR --out OUT [--never-lower]``: grade a graded class again and say what moved.

After a fix to a check, a rubric or a secret change, every hand-in is graded again (not ``--resume``: the grader
version and the hand-in can be the same while the rubric is not). Before it, ``OUT/results/`` and
``OUT/gradebook.csv`` are copied to ``OUT/regrades/N/before/``; after it, ``OUT/regrades/N/`` holds
``changes.json`` (every student: old and new status and score, the grade published, each check that changed),
``changes.md`` (the class: who went up, who went down, why) and ``changes/ID.md`` for each student whose grade or
checks moved. The gradebook gets two columns: ``previous_score`` (the grade before this regrade) and ``published``
(the grade to hand the LMS: the new score, or with ``--never-lower`` the new score unless the grade published
before was a larger share of its points possible, then that share of the new points possible: a repricing from 68
to 66 points keeps 68 / 68 as 66 / 66, never 68 / 66; ``grader export`` reads it). The gradebook's download
columns and the instructor's adjustments (``grader.adjustments``) are kept as the batch wrote them.
"""
from __future__ import annotations

import json
import math
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path

from grader.batch import EXTRA_COLUMNS, BatchOptions, batch, options_of, read_gradebook, write_gradebook
from grader.lms_downloads import DUPLICATE, UNMATCHED
from grader.private import write_private
from grader.results import _part_title
from grader.rubric import title

GRADED = ("graded", "timeout", "invalid")  # statuses whose score is a grade (pending and error are not)
UNCLAIMED = (UNMATCHED, DUPLICATE)  # rows of files credited to no one: nothing to compare


@dataclass
class CheckChange:
    part: str
    name: str
    title: str
    before: float | None  # points; None: the check did not exist (or the hand-in was not graded)
    after: float | None
    max_before: float | None
    max_after: float | None
    why: str


@dataclass
class StudentChange:
    student: str
    status_before: str
    status_after: str
    score_before: float | None
    score_after: float | None
    published_before: float | None
    published: float | None
    held: bool = False  # --never-lower kept the published grade's share above the new score
    max_before: float | None = None  # the points possible the grade published before was out of
    max_after: float | None = None
    checks: list[CheckChange] = field(default_factory=list)

    @property
    def max_changed(self) -> bool:
        return None not in (self.max_before, self.max_after) and self.max_before != self.max_after

    @property
    def moved(self) -> bool:
        return self.score_before != self.score_after or self.status_before != self.status_after or bool(self.checks)


def _number(v) -> float | None:
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def _results(folder: Path) -> dict[str, dict]:
    out = {}
    for path in sorted(folder.glob("*.json")):
        try:
            out[path.stem] = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue  # an unreadable result: the student shows as not graded before
    return out


def _published(row: dict | None) -> float | None:
    """The grade a gradebook row published: its ``published`` column if a regrade wrote one, else its score."""
    if row is None or row.get("status") not in GRADED:
        return None
    if row.get("published") not in (None, ""):
        return _number(row["published"])
    return 0.0 if row["status"] == "invalid" else _number(row.get("score"))


def check_changes(before: dict | None, after: dict | None) -> list[CheckChange]:
    """Each check whose points or price differ between two results, with why (the rubric or the grader)."""
    old = {(c["part"], c["name"]): c for c in (before or {}).get("checks", [])}
    new = {(c["part"], c["name"]): c for c in (after or {}).get("checks", [])}
    changes = []
    for key in list(new) + [k for k in old if k not in new]:
        o, n = old.get(key), new.get(key)
        pts = (None if o is None else o["points"], None if n is None else n["points"])
        top = (None if o is None else o["max_points"], None if n is None else n["max_points"])
        if pts[0] == pts[1] and top[0] == top[1]:
            continue
        changes.append(CheckChange(key[0], key[1], title(*key), pts[0], pts[1], top[0], top[1], _why(o, n)))
    return changes


def _why(o: dict | None, n: dict | None) -> str:
    if o is None:
        return "a new check (it was not graded before)" + (f": {n['message']}" if n and n["message"] else "")
    if n is None:
        return "the check is no longer graded"
    if o["max_points"] != n["max_points"]:
        moved = (f"the rubric prices it at {n['max_points']:g} (was {o['max_points']:g})")
        share = o["max_points"] and n["max_points"] and o["points"] / o["max_points"] == n["points"] / n["max_points"]
        return moved + ("; the same share earned" if share else f"; the grader now says: {n['message']}")
    return f"the grader now says: {n['message']} (before: {o['message']})"


def kept_share(published_before: float, max_before: float | None, max_after: float | None) -> float:
    """The grade published before as the same share of the new points possible (unchanged when either is unknown),
    rounded up to the hundredth (never a smaller share) and never above the points possible."""
    if not max_before or not max_after:
        return published_before
    return min(max_after, math.ceil(published_before / max_before * max_after * 100 - 1e-9) / 100)


def compare(before: dict[str, dict], before_book: dict[str, dict], after: dict[str, dict],
            students: list[str], never_lower: bool) -> list[StudentChange]:
    """One entry per student of the regrade, in order. ``--never-lower`` compares shares of the points possible."""
    out = []
    for s in students:
        b, a = before.get(s), after.get(s)
        status_after = (a or {}).get("status", "error")
        score_after = _number((a or {}).get("score")) if status_after in GRADED else None
        max_after = _number((a or {}).get("max_score"))
        max_before = _number((before_book.get(s) or {}).get("max")) or _number((b or {}).get("max_score"))
        published_before = _published(before_book.get(s))
        published, held = score_after, False
        if never_lower and published_before is not None:
            keep = kept_share(published_before, max_before, max_after)
            if score_after is None or score_after < keep:
                published, held = keep, True
        out.append(StudentChange(s, (b or {}).get("status", (before_book.get(s) or {}).get("status", "none")),
                                 status_after, _number((b or {}).get("score")), score_after, published_before,
                                 published, held, max_before=max_before, max_after=max_after,
                                 checks=check_changes(b, a)))
    return out


def _fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:g}"


def _cell(v: float | None) -> str:
    return "" if v is None else f"{v:g}"


def _held(c: StudentChange) -> str:
    if not c.held:
        return ""
    if c.max_changed:
        return (f" (kept at the share of the points possible published before, {_fmt(c.published_before)} / "
                f"{_fmt(c.max_before)}, now out of {_fmt(c.max_after)}: never lower)")
    return f" (kept at the grade published before, {_fmt(c.published_before)}: never lower)"


def student_markdown(c: StudentChange) -> str:
    lines = [f"# Regrade: {c.student}", "",
             f"Score {_fmt(c.score_before)} / {_fmt(c.max_before)} -> {_fmt(c.score_after)} / {_fmt(c.max_after)} "
             f"({c.status_before} -> {c.status_after}); published {_fmt(c.published)}" + _held(c), ""]
    if c.checks:
        lines += ["| check | points before | points after | why |", "|---|---|---|---|"]
        for k in c.checks:
            why = k.why.replace("|", "\\|").replace("\n", " ")
            lines.append(f"| {_part_title(k.part)}: {k.title} | {_fmt(k.before)} / {_fmt(k.max_before)} | "
                         f"{_fmt(k.after)} / {_fmt(k.max_after)} | {why} |")
    return "\n".join(lines) + "\n"


def class_markdown(changes: list[StudentChange], never_lower: bool) -> str:
    moved = [c for c in changes if c.moved]
    up = [c for c in moved if (c.score_after or 0) > (c.score_before or 0)]
    down = [c for c in moved if (c.score_after or 0) < (c.score_before or 0)]
    held = [c for c in changes if c.held]
    lines = ["# Regrade", "", f"{len(changes)} hand-in(s) graded again: {len(moved)} changed, {len(up)} up, "
             f"{len(down)} down" + (f"; never lower: {len(held)} published grade(s) kept" if never_lower else "")
             + ".", ""]
    note = max_change(changes)
    if note:
        lines += [note + (": published grades are kept as the same share of the new points possible"
                          if never_lower else ""), ""]
    if moved:
        lines += ["| student | score before | score after | published | checks changed |", "|---|---|---|---|---|"]
        for c in moved:
            lines.append(f"| {c.student} | {_fmt(c.score_before)} | {_fmt(c.score_after)} | {_fmt(c.published)}"
                         f"{' (held)' if c.held else ''} | {', '.join(k.name for k in c.checks) or '-'} |")
    return "\n".join(lines) + "\n"


def max_change(changes: list[StudentChange]) -> str:
    """A sentence when the points possible changed (empty otherwise)."""
    moved = sorted({(c.max_before, c.max_after) for c in changes if c.max_changed})
    return "; ".join(f"the points possible changed from {_fmt(b)} to {_fmt(a)}" for b, a in moved).capitalize()


def write_gradebook_with_versions(out: Path, students: list[str], changes: list[StudentChange]) -> Path:
    """``gradebook.csv`` as the batch wrote it (its download columns and adjustments), with ``previous_score`` and
    ``published``."""
    book = read_gradebook(out)
    by = {c.student: c for c in changes}
    extras = {}
    for s in students:
        extras[s] = {k: (book.get(s) or {}).get(k, "") for k in EXTRA_COLUMNS}
        if s in by:
            extras[s].update(previous_score=_cell(by[s].score_before), published=_cell(by[s].published))
    return write_gradebook(out, students, {s: book[s] for s in students if s in book}, extras)


def _next_folder(out: Path) -> Path:
    n = 1
    while (out / "regrades" / str(n)).exists():
        n += 1
    return out / "regrades" / str(n)


def regrade(folder: str | Path, out: str | Path, never_lower: bool = False, options: BatchOptions | None = None, *,
            executor=None, **settings) -> tuple[Path, list]:
    """Grade every hand-in in ``folder`` again into ``out`` (a graded folder) with ``batch``'s ``options`` (or
    ``settings`` by name); the change folder and the changes."""
    folder, out = Path(folder), Path(out)
    options = options_of(options, {**settings, "resume": False})
    if not (out / "gradebook.csv").is_file():
        raise FileNotFoundError(f"{out} has no gradebook.csv: regrade needs a graded folder "
                                f"(`python -m grader batch {folder} --out {out}` first)")
    here = _next_folder(out)
    (here / "before").mkdir(parents=True)
    if (out / "results").is_dir():
        shutil.copytree(out / "results", here / "before" / "results")
    shutil.copy2(out / "gradebook.csv", here / "before" / "gradebook.csv")
    before, before_book = _results(here / "before" / "results"), read_gradebook(here / "before")
    try:
        rows = batch(folder, out, options, executor=executor, regrading=True)
    except SystemExit:  # refused before grading anything (a missing --roster, ...): leave no regrade folder behind
        shutil.rmtree(here)
        raise
    students = [r["student"] for r in rows]
    after = _results(out / "results")
    graded = [r["student"] for r in rows if r["status"] not in UNCLAIMED]
    changes = compare(before, before_book, after, graded, never_lower)
    write_gradebook_with_versions(out, students, changes)
    write_private(here / "changes.json", json.dumps({"never_lower": never_lower,
                                                         "students": [asdict(c) for c in changes]}, indent=2))
    write_private(here / "changes.md", class_markdown(changes, never_lower))
    for c in changes:
        if c.moved or c.held:
            write_private(here / "changes" / f"{c.student}.md", student_markdown(c))
    options.course.share(out)  # the course's TA group reads the regrade's files too
    return here, changes
