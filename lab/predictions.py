"""Predict, then measure: judgements a student writes down before the lab measures them.

Every prediction goes into one workspace file, ``predictions.json`` (schema ``predictions/1``): question ->
the lesson that asks it and the answer. The lesson module that asks a question defines it (``PREDICTION``, a
``Question``: what it asks and the answer's form) and its judge (``judge_<question>``, through ``verdict`` here),
which sets the answer against what was measured and says what was predicted, what was measured and why;
``record`` saves an answer as soon as the student writes it. The notebook judges against its own measurement; the
grader against the lesson's truth, which it recomputes from the fixtures (never from the student's models: a wrong
model is charged once, in its own lesson). The answers are judgements (which set clips, which file is smaller,
where the error enters) or numbers worked out by hand from a set's range, never this CPU's numbers, so one answer
is right on every INT8 kernel family.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping

from lab import contract, schemas, workspace
from lab.errors import LabError

FILE = contract.path_of_schema("predictions")
SCHEMA = "predictions/1"


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
    form: Callable[["Question", object], object]

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
    """The predictions saved in ``work`` so far: question -> answer (empty if none)."""
    return {q: entry["answer"] for q, entry in _entries(work).items()}


def record(work: str | Path, question: Question, answer) -> str:
    """Save one prediction, the answer to a lesson's ``question``, into ``work/predictions.json`` (the others stay)
    and say what was saved."""
    answer = question.normalise(answer)
    saved = {**_entries(work), question.name: {"lesson": question.lesson, "answer": answer}}
    doc = {"schema": SCHEMA, "predictions": dict(sorted(saved.items(), key=lambda qe: qe[1]["lesson"]))}
    schemas.validate("predictions", doc, FILE)
    workspace.atomic_write_text(Path(work) / FILE, json.dumps(doc, indent=2) + "\n")
    return f"prediction saved in {FILE}: {question.name} = {json.dumps(answer)}"


# ----- judging: the answer against a measurement (each lesson's judge_<question> calls this) -------------

def verdict(question: str, parts: list[tuple[bool, str]], why: str) -> Verdict:
    """The share of ``parts`` (right?, what was said against what was measured) that was right; ``why`` is told
    only when a part was wrong."""
    score = sum(ok for ok, _ in parts) / len(parts)
    lines = "; ".join(text for _, text in parts)
    if score >= 1:
        return Verdict(question, 1.0, f"prediction right: {lines}")
    return Verdict(question, score, f"prediction wrong: {lines}. Why: {why}")
