"""Item analysis for the class report: what each hand-in answered and wrote, and what the class did with it.

``handin_record(path)`` runs in the grading worker, after a hand-in passed intake (its zip is then known to be
well formed, its files listed with their hashes): the first answer to each prediction (``predictions.json``) and
the fingerprint of each student module (``grader.similar``). The batch keeps it in the result as ``handin``.
``analyse(results)`` turns a class's results into every check's pass rate, each prediction's answers with the
grader's verdict on each (an answer the grader gave the check's full points is the truth it computed), every
lesson's score distribution and the similar-code groups. Nothing here changes a score.

The learning signals (pass rates, lesson scores, the most-lost checks of ``grader.report``) count a hand-in's check
only where it says something about learning (``counts``): never a hand-in made for another variant than its own
(another student's files, a copy, or the reference data: ``grader.variants``), and a check only for the hand-ins that
attempted its lesson (handed in a file the lesson writes, ``lab.contract``; a prediction: answered it). Those set
apart are listed (``set_apart``) with the reason, for the instructor to look at.
"""
from __future__ import annotations

import json
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

from grader import similar
from grader.results import safe_value
from grader.rubric import HIDDEN, part_title, rubric, title
from lab import contract

PREDICTIONS = "predictions.json"
READ_LIMIT = 1 << 20  # a module or predictions.json larger than this is left out of the record
OTHER_ANSWERS = 8     # a prediction's most common answers shown one by one; the rest are one row
PREDICTIONS_PART = "predictions"
# The lesson of each hidden check (its group's, grader/lessons/; tests/test_item_analysis.py holds them equal); a
# visible check's lesson is its part's, the number its title starts with ("06 acceptance")
HIDDEN_LESSONS = MappingProxyType({"heldout": "06", "secret_summarize": "06", "choice_heldout": "09"})


def _member(names: list[str], rel: str) -> str | None:
    """The zip entry for ``rel``: itself, or inside the one folder a hand-zipped workspace sits in."""
    if rel in names:
        return rel
    nested = [n for n in names if n.endswith("/" + rel) and n.count("/") == 1]
    return nested[0] if len(nested) == 1 else None


def _read_files(path: Path, rels: tuple[str, ...]) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    if path.is_dir():
        for rel in rels:
            f = path / rel
            if f.is_file() and not f.is_symlink() and f.stat().st_size <= READ_LIMIT:
                out[rel] = f.read_bytes()
        return out
    with zipfile.ZipFile(path) as zf:
        infos = {i.filename: i for i in zf.infolist()}
        for rel in rels:
            name = _member(list(infos), rel)
            if name is not None and infos[name].file_size <= READ_LIMIT:
                out[rel] = zf.read(name)
    return out


def handin_record(path: str | Path) -> dict | None:
    """The first answer to each prediction and each student module's fingerprint; None if it cannot be read.
    Never raises: the record is for the report, and a grade is never lost to it."""
    try:
        return _record(Path(path))
    except Exception:  # noqa: BLE001 - a hand-in past intake that still cannot be read here gets no record
        return None


def _names(path: Path) -> list[str]:
    """The hand-in's file names, relative to its workspace (a hand-zipped workspace's one folder taken off)."""
    if path.is_dir():
        return [p.relative_to(path).as_posix() for p in path.rglob("*") if p.is_file()]
    with zipfile.ZipFile(path) as zf:
        names = [i.filename for i in zf.infolist() if not i.is_dir()]
    return [n if contract.lesson_of(n) or "/" not in n else n.split("/", 1)[1] for n in names]


def lessons_of(names: list[str]) -> list[str]:
    """The lessons that wrote at least one of these files (``lab.contract``), in order."""
    return sorted({lesson for n in names if (lesson := contract.lesson_of(n))})


def _record(path: Path) -> dict | None:
    try:
        files = _read_files(path, (PREDICTIONS, *similar.MODULES))
        lessons = lessons_of(_names(path))
    except (OSError, zipfile.BadZipFile, ValueError, RuntimeError, NotImplementedError):
        return None
    answers = {}
    try:
        doc = json.loads(files.get(PREDICTIONS, b"{}"))
        for q, entry in (doc.get("predictions") or {}).items():
            if isinstance(entry, dict) and "answer" in entry:
                answers[q] = safe_value(entry["answer"])
    except (ValueError, AttributeError, TypeError):
        answers = {}
    code = {m: (similar.fingerprint(files[m]) if m in files else None) for m in similar.MODULES}
    return {"predictions": answers, "code": code, "lessons": lessons}


def check_lesson(part: str, name: str) -> str | None:
    """The lesson a check grades: a hidden check's (``HIDDEN_LESSONS``), else its part's number; None for a
    prediction (each is attempted by answering it) or a part with no lesson number."""
    if part == HIDDEN:
        return HIDDEN_LESSONS.get(name)
    number = part_title(part).split(" ", 1)[0]
    return number if number.isdigit() else None


def foreign(d: dict) -> bool:
    """Made for another variant than the hand-in's own (the result's instructor-only field, ``grader.variants``)."""
    v = (d.get("instructor") or {}).get("variant") or {}
    return bool(v) and v.get("made_for") != v.get("own")


def attempted(d: dict, part: str, name: str) -> bool:
    """Did the hand-in attempt this check's lesson (hand in a file it writes; a prediction: answer it)? A result
    without the record (written before it existed, or its files unreadable) counts as attempting every lesson."""
    record = d.get("handin")
    if not isinstance(record, dict) or "lessons" not in record:
        return True
    if part == PREDICTIONS_PART:
        return name in (record.get("predictions") or {})
    lesson = check_lesson(part, name)
    return lesson is None or lesson in (record.get("lessons") or [])


def counts(d: dict, part: str, name: str) -> bool:
    """Does this hand-in's check count as a learning signal (``attempted``, and not made for another variant)?"""
    return not foreign(d) and attempted(d, part, name)


@dataclass
class Apart:
    student: str
    why: str


def set_apart(results: dict[str, dict]) -> list[Apart]:
    """The graded hand-ins the learning signals leave out, whole or in part, and why."""
    out = []
    for student, d in sorted(results.items()):
        if foreign(d):
            made_for = ((d.get("instructor") or {}).get("variant") or {}).get("made_for")
            out.append(Apart(student, f"made for another variant than its own ({made_for}): left out of every "
                                      "learning signal"))
            continue
        record = d.get("handin")
        if not isinstance(record, dict) or "lessons" not in record:
            continue
        graded = {lesson for c in d.get("checks", []) if (lesson := check_lesson(c["part"], c["name"]))}
        missing = sorted(graded - set(record.get("lessons") or []))
        if missing:
            out.append(Apart(student, f"partial: no file of lesson(s) {', '.join(missing)} handed in; those "
                                      "lessons' checks are left out of the learning signals"))
    return out


@dataclass
class CheckRate:
    part: str
    name: str
    title: str
    passed: int
    graded: int

    @property
    def rate(self) -> float:
        return self.passed / self.graded if self.graded else 0.0


@dataclass
class Answer:
    text: str        # the answer as JSON, keys sorted
    count: int
    right: int       # how many of those answers the grader gave full points (an answer is right or wrong for all)


@dataclass
class Prediction:
    name: str
    title: str
    answers: list[Answer] = field(default_factory=list)
    wrong_feedback: str = ""  # the grader's message to one wrong answer: what it measured (the truth), in words

    @property
    def total(self) -> int:
        return sum(a.count for a in self.answers)


@dataclass
class Items:
    checks: list[CheckRate]
    predictions: list[Prediction]
    parts: dict[str, tuple[float, list[float]]]  # part -> (its points on offer, each graded hand-in's points)
    similar: list[list[str]]
    apart: list[Apart] = field(default_factory=list)


def _order() -> list[tuple[str, str]]:
    """Every rubric check, in the rubric's order, the hidden ones last."""
    r = rubric()
    parts = [p for p in r if p != HIDDEN] + ([HIDDEN] if HIDDEN in r else [])
    return [(p, n) for p in parts for n, v in r[p].items() if n != "title" and isinstance(v, (int, float))]


def check_rates(results: dict[str, dict]) -> list[CheckRate]:
    """Every check's pass rate among the hand-ins whose checks ran, judged the student's work (not ``assessed``:
    its cause is charged under another check) and count for it (``counts``)."""
    tally: dict[tuple[str, str], list[int]] = {}
    for d in results.values():
        for c in d.get("checks", []):
            if not counts(d, c["part"], c["name"]) or not c.get("assessed", True):
                continue
            k = tally.setdefault((c["part"], c["name"]), [0, 0])
            k[0] += bool(c.get("passed"))
            k[1] += 1
    order = [k for k in _order() if k in tally] + sorted(k for k in tally if k not in _order())
    return [CheckRate(p, n, title(p, n), *tally[(p, n)]) for p, n in order]


def prediction_answers(results: dict[str, dict]) -> list[Prediction]:
    """Each prediction's answers in the class, most common first, with how many the grader judged right."""
    tally: dict[str, dict[str, list[int]]] = {}
    feedback: dict[str, str] = {}
    for d in results.values():
        answers = (d.get("handin") or {}).get("predictions") or {}
        checks = [c for c in d.get("checks", []) if c["part"] == "predictions"]
        verdicts = {c["name"]: bool(c.get("passed")) for c in checks}
        for c in checks:
            if not c.get("passed") and c["name"] in answers:
                feedback.setdefault(c["name"], c.get("message", ""))
        for q, answer in answers.items():
            text = json.dumps(answer, sort_keys=True)
            a = tally.setdefault(q, {}).setdefault(text, [0, 0])
            a[0] += 1
            a[1] += verdicts.get(q, False)
    out = []
    for q in [n for n in rubric().get("predictions", {}) if n in tally] + sorted(set(tally) - set(rubric().get(
            "predictions", {}))):
        ranked = sorted(tally[q].items(), key=lambda kv: (-kv[1][0], kv[0]))
        answers = [Answer(t, n, r) for t, (n, r) in ranked[:OTHER_ANSWERS]]
        rest = ranked[OTHER_ANSWERS:]
        if rest:
            answers.append(Answer(f"{len(rest)} other answer(s)", sum(n for _, (n, _) in rest),
                                  sum(r for _, (_, r) in rest)))
        out.append(Prediction(q, title("predictions", q), answers, feedback.get(q, "")))
    return out


def part_scores(results: dict[str, dict]) -> dict[str, tuple[float, list[float]]]:
    """Rubric part -> (points on offer, each hand-in's points on the part's checks that count for it: not made for
    another variant, of a lesson it attempted; scaled to the points on offer where it attempted only some, so a
    part spanning lessons (predictions, hidden) is not lowered by lessons nobody was asked to hand in)."""
    out: dict[str, tuple[float, list[float]]] = {}
    for p in dict.fromkeys(p for p, _ in _order()):
        top = sum(float(v) for n, v in rubric()[p].items() if n != "title" and isinstance(v, (int, float)))
        got = []
        for d in results.values():
            if p not in (d.get("parts") or {}) or foreign(d):
                continue
            every = [c for c in d.get("checks", []) if c["part"] == p]
            mine = [c for c in every if attempted(d, p, c["name"])]
            possible = sum(float(c.get("max_points") or 0) for c in mine)
            if len(mine) == len(every) and (mine or attempted(d, p, next(n for q, n in _order() if q == p))):
                got.append(float(d["parts"][p]["points"]))
            elif possible > 0:
                got.append(top * sum(float(c.get("points") or 0) for c in mine) / possible)
        if got:
            out[p] = (top, got)
    return out


def analyse(results: dict[str, dict]) -> Items:
    graded = {s: d for s, d in results.items() if d.get("checks")}
    code = {s: (d.get("handin") or {}).get("code") or {} for s, d in graded.items()}
    return Items(check_rates(graded), prediction_answers(graded), part_scores(graded), similar.groups(code),
                 set_apart(graded))
