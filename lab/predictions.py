"""Predict, then measure: judgements a student writes down before the lab measures them.

Every prediction goes into one workspace file, ``predictions.json`` (schema ``predictions/1``): question ->
the lesson that asks it and the answer. ``record`` saves one answer as soon as the student writes it; the
lesson's module that asks it holds its judge (``judge_<question>``, through ``verdict`` here), which sets it
against what was measured and says what was predicted, what was measured and why. The notebook judges against its own measurement; the grader against the lesson's truth, which it recomputes from
the fixtures (never from the student's models: a wrong model is charged once, in its own lesson). The answers
are judgements (which set clips, which file is smaller, where the error enters) or numbers worked out by hand
from a set's range, never this CPU's numbers, so one answer is right on every INT8 kernel family.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from lab import contract, schemas, workspace
from lab.data import KINDS
from lab.errors import LabError

FILE = contract.path_of_schema("predictions")
SCHEMA = "predictions/1"
FORMATS = ("QDQ", "QOperator")


@dataclass(frozen=True)
class Question:
    lesson: str
    asks: str
    example: str


QUESTIONS = {
    "clip_or_squash": Question("01", "which calibration set will clip the deployed values, and which will squash them",
                               '{"clips": "<narrow, right or wide>", "squashes": "<narrow, right or wide>"}'),
    "input_rulers": Question("03", "the input scale and zero point each calibration set will produce",
                             '{"narrow": {"scale": <a number>, "zero_point": <an integer>}, "right": {...}, "wide": {...}}'),
    "more_batches": Question("04", "whether any number of narrow batches reaches the right data's error, and the "
                                   "range the largest narrow calibration will see",
                             '{"narrow_reaches_right": <True or False>, "largest_narrow_range": <a number>}'),
    "formats": Question("05", "which format's file will be smaller, and whether the two input rulers will be the same",
                        '{"smaller": <"QDQ" or "QOperator">, "same_input_ruler": <True or False>}'),
    "entry_tensor": Question("07", "the tensor where the flash error enters", "a tensor name from `order`, as a string"),
}


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

def _fail(question: str, field: str, expected: str, got) -> PredictionError:
    q = QUESTIONS[question]
    return PredictionError(f"prediction {question!r} (lesson {q.lesson}), {field}: expected {expected}, got {got!r}. "
                           f"The question: {q.asks}; an answer looks like {q.example}")


def _choice(question: str, field: str, got, options) -> str:
    if got not in options:
        raise _fail(question, field, "one of " + ", ".join(map(repr, options)), got)
    return got


def _flag(question: str, field: str, got) -> bool:
    if not isinstance(got, bool):
        raise _fail(question, field, "True or False", got)
    return got


def _positive(question: str, field: str, got) -> float:
    if isinstance(got, bool) or not isinstance(got, (int, float)) or not 0 < float(got) < 1e6:
        raise _fail(question, field, "a positive number", got)
    return float(got)


def normalise(question: str, answer):
    """The answer as ``predictions.json`` stores it; raises ``PredictionError`` naming the field that is wrong."""
    if question not in QUESTIONS:
        raise PredictionError(f"no prediction called {question!r}; the lab asks {', '.join(QUESTIONS)}")
    if answer is None or answer is Ellipsis:
        raise _fail(question, "the answer", "your prediction", answer)
    if question == "clip_or_squash":
        if not isinstance(answer, Mapping):
            raise _fail(question, "the answer", 'a dict with "clips" and "squashes"', answer)
        return {k: _choice(question, k, answer.get(k), KINDS) for k in ("clips", "squashes")}
    if question == "input_rulers":
        if not isinstance(answer, Mapping):
            raise _fail(question, "the answer", "a dict with narrow, right and wide", answer)
        out = {}
        for kind in KINDS:
            ruler = answer.get(kind)
            if not isinstance(ruler, Mapping):
                raise _fail(question, kind, '{"scale": ..., "zero_point": ...}', ruler)
            zp = ruler.get("zero_point")
            if isinstance(zp, bool) or not isinstance(zp, int) or not -128 <= zp <= 127:
                raise _fail(question, f"{kind}.zero_point", "an integer from -128 to 127 (INT8)", zp)
            out[kind] = {"scale": _positive(question, f"{kind}.scale", ruler.get("scale")), "zero_point": zp}
        return out
    if question == "more_batches":
        if not isinstance(answer, Mapping):
            raise _fail(question, "the answer", 'a dict with "narrow_reaches_right" and "largest_narrow_range"', answer)
        return {"narrow_reaches_right": _flag(question, "narrow_reaches_right", answer.get("narrow_reaches_right")),
                "largest_narrow_range": _positive(question, "largest_narrow_range",
                                                  answer.get("largest_narrow_range"))}
    if question == "formats":
        if not isinstance(answer, Mapping):
            raise _fail(question, "the answer", 'a dict with "smaller" and "same_input_ruler"', answer)
        return {"smaller": _choice(question, "smaller", answer.get("smaller"), FORMATS),
                "same_input_ruler": _flag(question, "same_input_ruler", answer.get("same_input_ruler"))}
    if not isinstance(answer, str) or not answer:
        raise _fail(question, "the answer", "a tensor name from the graph order, as a string", answer)
    return answer


# ----- the file ------------------------------------------------------------------------------------------

def load(work: str | Path) -> dict:
    """The predictions saved in ``work`` so far: question -> answer (empty if none)."""
    path = Path(work) / FILE
    if not path.exists():
        return {}
    doc = schemas.read("predictions", path)
    return {q: entry["answer"] for q, entry in doc["predictions"].items()}


def record(work: str | Path, question: str, answer) -> str:
    """Save one prediction into ``work/predictions.json`` (the others stay) and say what was saved."""
    answer = normalise(question, answer)
    saved = load(work)
    saved[question] = answer
    doc = {"schema": SCHEMA,
           "predictions": {q: {"lesson": QUESTIONS[q].lesson, "answer": a}
                           for q, a in sorted(saved.items(), key=lambda qa: QUESTIONS[qa[0]].lesson)}}
    schemas.validate("predictions", doc, FILE)
    workspace.atomic_write_text(Path(work) / FILE, json.dumps(doc, indent=2) + "\n")
    return f"prediction saved in {FILE}: {question} = {json.dumps(answer)}"


# ----- judging: the answer against a measurement (each lesson's judge_<question> calls this) -------------

def verdict(question: str, parts: list[tuple[bool, str]], why: str) -> Verdict:
    """The share of ``parts`` (right?, what was said against what was measured) that was right; ``why`` is told
    only when a part was wrong."""
    score = sum(ok for ok, _ in parts) / len(parts)
    lines = "; ".join(text for _, text in parts)
    if score >= 1:
        return Verdict(question, 1.0, f"prediction right: {lines}")
    return Verdict(question, score, f"prediction wrong: {lines}. Why: {why}")
