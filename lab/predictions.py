"""Predict, then measure: judgements a student writes down before the lab measures them.

Every prediction goes into one workspace file, ``predictions.json`` (schema ``predictions/2``): question ->
the lesson that asks it, the answer, and any later answers. The lesson module that asks a question defines it
(``PREDICTION``, a ``Question``: what it asks and the answer's form) and its judge (``judge_<question>``, through
``verdict`` here), which sets the answer against what was measured and says what was predicted, what was measured
and why. The answers are judgements (which set clips, which file is smaller, where the error enters) or numbers
worked out by hand from a set's range, never this CPU's numbers, so one answer is right on every INT8 kernel family.

The convention every prediction cell follows: the student's variable is ``PREDICTION``; the cell's first line is a
comment stating the answer's shape (``# PREDICTION: one of "narrow", "right", "wide"``); the cell calls
``record(work, <lesson module>.PREDICTION, PREDICTION)`` before anything measured is printed; and the lesson's
judge judges ``kept(work, <lesson module>.PREDICTION)``, the answer that counts.

The FIRST answer a workspace gets for a question is the one that counts, in the notebook and in the grader. A
later, different answer (a re-run after the measurement printed) is recorded beside it, in ``later``, in the order
given, and the message says the first stays: an answer written after the result is not a prediction, and the file
cannot tell the two apart. Re-running the same answer (a whole lesson re-run) changes nothing. An answer in the
wrong form is refused, naming the field and the expected form, before anything is saved. The grader judges the
first answer against the lesson's truth, which it recomputes from the fixtures (never from the student's models: a
wrong model is charged once, in its own lesson).
"""
from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from lab import contract, schemas, workspace
from lab.errors import LabError

FILE = contract.path_of_schema("predictions")
SCHEMA = "predictions/2"  # /2 added "later"; a predictions/1 file reads the same
MAX_LATER = 100  # later answers kept per question (the schema's maxItems): the most recent ones


class PredictionError(LabError):
    """A prediction is not in the form its question asks for; the message names the field."""


@dataclass(frozen=True)
class Verdict:
    """A prediction against a measurement: the share that was right (0..1) and what to tell the student."""

    question: str
    score: float
    message: str

    @property
    def ok(self) -> bool:
        return self.score >= 1.0

    def __str__(self) -> str:
        return self.message


# ----- the answer's form ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Question:
    """One prediction a lesson asks (the lesson's module defines it as ``PREDICTION``): its name in
    ``predictions.json``, the lesson, what it asks, an answer's example, and ``form``, which returns the answer as
    the file stores it or raises ``PredictionError`` through ``fail``."""

    name: str
    lesson: str
    asks: str
    example: str
    form: Callable[[Question, object], object]

    def fail(self, field: str, expected: str, got) -> PredictionError:
        return PredictionError(f"prediction {self.name!r} (lesson {self.lesson}), {field}: expected {expected}, "
                               f"got {got!r}. The question: {self.asks}; an answer looks like {self.example}")

    def normalise(self, answer):
        """The answer as ``predictions.json`` stores it; raises ``PredictionError`` naming the field that is wrong."""
        if answer is None or answer is Ellipsis:
            raise self.fail("the answer", "your prediction", answer)
        return self.form(self, answer)

    def choice(self, field: str, got, options) -> str:
        if got not in options:
            raise self.fail(field, "one of " + ", ".join(map(repr, options)), got)
        return got

    def flag(self, field: str, got) -> bool:
        if not isinstance(got, bool):
            raise self.fail(field, "True or False", got)
        return got

    def positive(self, field: str, got) -> float:
        if isinstance(got, bool) or not isinstance(got, (int, float)) or not 0 < float(got) < 1e6:
            raise self.fail(field, "a positive number", got)
        return float(got)

    def mapping(self, answer, keys: str) -> Mapping:
        if not isinstance(answer, Mapping):
            raise self.fail("the answer", f"a dict with {keys}", answer)
        return answer


# ----- the file ------------------------------------------------------------------------------------------

def _entries(work: str | Path) -> dict:
    path = Path(work) / FILE
    return schemas.read("predictions", path)["predictions"] if path.exists() else {}


def load(work: str | Path) -> dict:
    """The predictions saved in ``work`` so far: question -> its first answer, the one judged (empty if none)."""
    return {q: entry["answer"] for q, entry in _entries(work).items()}


def kept(work: str | Path, question: Question):
    """The answer to ``question`` that counts: the first one recorded in ``work``. Raises ``PredictionError`` if
    the lesson's prediction cell has not recorded one yet."""
    saved = load(work)
    if question.name not in saved:
        raise PredictionError(f"{FILE} has no prediction {question.name!r} (lesson {question.lesson}) yet: run the "
                              f"lesson's prediction cell first, with PREDICTION set to {question.example}")
    return saved[question.name]


def _same(a, b) -> bool:
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def record(work: str | Path, question: Question, answer) -> str:
    """Save the answer to a lesson's ``question`` into ``work/predictions.json`` (the other questions stay) and say
    what was saved. The first answer stays the one judged; a later, different one is kept beside it in ``later``.
    An answer in the wrong form raises ``PredictionError`` before anything is written."""
    answer = question.normalise(answer)
    entries = _entries(work)
    entry = entries.get(question.name)
    shown = json.dumps(answer)
    if entry is None:
        entry, message = {"lesson": question.lesson, "answer": answer}, \
            f"prediction saved in {FILE}: {question.name} = {shown}"
    elif _same(entry["answer"], answer):
        return f"prediction already saved in {FILE}: {question.name} = {shown} (the same answer; nothing changed)"
    else:
        later = list(entry.get("later", []))
        if not any(_same(a, answer) for a in later):
            later.append(answer)
        entry = {**entry, "later": later[-MAX_LATER:]}
        message = (f"prediction {question.name}: your first answer stays, {json.dumps(entry['answer'])}; this one, "
                   f"{shown}, is recorded beside it in {FILE} (\"later\") and is not judged. A prediction counts "
                   "only if it was written before the measurement, and an answer changed after the result printed "
                   "cannot be told from one changed before it, so the lesson and the grader judge the first.")
    saved = {**entries, question.name: entry}
    doc = {"schema": SCHEMA, "predictions": dict(sorted(saved.items(), key=lambda qe: qe[1]["lesson"]))}
    schemas.validate("predictions", doc, FILE)
    workspace.atomic_write_text(Path(work) / FILE, json.dumps(doc, indent=2) + "\n")
    return message


# ----- judging: the answer against a measurement (each lesson's judge_<question> calls this) -------------

NOT_JUDGED = "within noise, not judged"


def verdict(question: str, parts: Sequence[tuple[bool | None, str]], why: str) -> Verdict:
    """The share of ``parts`` (right?, what was said against what was measured) that was not wrong; ``why`` is told
    only when a part was wrong. A part whose truth the run cannot tell from noise (``None``) is shown with its
    evidence and never counted wrong."""
    score = sum(ok is not False for ok, _ in parts) / len(parts)
    lines = "; ".join(text + (f" ({NOT_JUDGED})" if ok is None else "") for ok, text in parts)
    if score >= 1:
        word = "right" if all(ok for ok, _ in parts) else "not wrong"
        return Verdict(question, 1.0, f"prediction {word}: {lines}")
    return Verdict(question, score, f"prediction wrong: {lines}. Why: {why}")
