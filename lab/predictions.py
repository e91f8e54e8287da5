"""Predict, then measure: judgements a student writes down before the lab measures them.

Every prediction goes into one workspace file, ``predictions.json`` (schema ``predictions/1``): question ->
the lesson that asks it and the answer. ``record`` saves one answer as soon as the student writes it;
``judge`` sets it against what was measured and says what was predicted, what was measured and why. The
notebook judges against its own measurement; the grader against the lesson's truth, which it recomputes from
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
# A scale worked out by hand (range / 255) agrees with the converter's float32 to far better than 1 %;
# 1 % still refuses a range read off the wrong set (the three sets' ranges differ 4- and 16-fold).
SCALE_REL = 0.01
# The largest range a narrow calibration can see is a judgement about the data (its brightest gain),
# checked within 2 %: the stream's brightest pixel sits a hair below the gain's limit.
RANGE_REL = 0.02


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


# ----- judging: the answer against a measurement --------------------------------------------------------

def _verdict(question: str, parts: list[tuple[bool, str]], why: str) -> Verdict:
    score = sum(ok for ok, _ in parts) / len(parts)
    lines = "; ".join(text for _, text in parts)
    if score >= 1:
        return Verdict(question, 1.0, f"prediction right: {lines}")
    return Verdict(question, score, f"prediction wrong: {lines}. Why: {why}")


def judge_clip_or_squash(answer, diagnoses: Mapping[str, object]) -> Verdict:
    """``diagnoses``: kind -> ``compare.Diagnosis`` (or its kind as a string) of each set's input ruler."""
    answer = normalise("clip_or_squash", answer)
    kind_of = {k: getattr(d, "kind", d) for k, d in diagnoses.items()}
    parts = []
    for field, wanted in (("clips", "clipping"), ("squashes", "squashing")):
        said = answer[field]
        real = [k for k in KINDS if kind_of.get(k) == wanted]
        parts.append((kind_of.get(said) == wanted,
                      f"you said {said} {field}; measured, {said}'s ruler is {kind_of.get(said)}"
                      + ("" if kind_of.get(said) == wanted else f" and {' and '.join(real) or 'no set'} is {wanted}")))
    reasons = "; ".join(f"{k}: {getattr(d, 'reason', d)}" for k, d in diagnoses.items())
    return _verdict("clip_or_squash", parts,
                    "a ruler clips when the deployed values reach past its end (the set never held them) and squashes "
                    f"when it is far longer than what deployment feeds it. Measured: {reasons}")


def judge_input_rulers(answer, rulers: Mapping[str, object], measured: str = "the graph has") -> Verdict:
    """``rulers``: kind -> the input ruler read back from that set's model (``graph.input_ruler``), or the one its
    range gives (``ruler.ruler_for``); ``measured`` says which, in the message."""
    answer = normalise("input_rulers", answer)
    parts = []
    for kind in KINDS:
        said, r = answer[kind], rulers[kind]
        ok = abs(said["scale"] - r.scale) <= SCALE_REL * r.scale and said["zero_point"] == r.zero_point
        parts.append((ok, f"{kind}: you said scale {said['scale']:.6g} / zero point {said['zero_point']}, "
                          f"{measured} {r.scale:.6g} / {r.zero_point}"))
    return _verdict("input_rulers", parts,
                    "MinMax takes the lowest and highest value the set holds (widened to include 0), and spreads "
                    "them over 255 steps: scale = (max - min) / 255, zero point = round(-128 - min / scale). "
                    "Pixels are never negative, so min is 0 and the zero point is -128; each set's max is its "
                    "brightest pixel after its own preprocessing (scale within 1 %)")


def judge_more_batches(answer, narrow_errors: Mapping[int, float], right_errors: Mapping[int, float],
                       largest_range: float) -> Verdict:
    """Errors are max abs errors against FP32 per batch count; ``largest_range`` is the largest narrow model's
    ruler width (scale x 255)."""
    answer = normalise("more_batches", answer)
    best_narrow = min(narrow_errors, key=narrow_errors.get)
    worst_right = max(right_errors, key=right_errors.get)
    reaches = narrow_errors[best_narrow] <= right_errors[worst_right]
    said = answer["narrow_reaches_right"]
    rng = answer["largest_narrow_range"]
    parts = [(said == reaches,
              f"you said more narrow batches {'do' if said else 'never'} reach the right data's error; measured, "
              f"the best narrow model ({best_narrow} batch{'' if best_narrow == 1 else 'es'}) has {narrow_errors[best_narrow]:.3f} against "
              f"{right_errors[worst_right]:.3f} for {worst_right} right batch(es)"),
             (abs(rng - largest_range) <= RANGE_REL * largest_range,
              f"you said the largest narrow calibration sees a range of {rng:.4g}; its ruler spans {largest_range:.4g}")]
    return _verdict("more_batches", parts,
                    "MinMax keeps the largest value the data holds. Every narrow image is dimmed to at most a quarter "
                    "of full scale, so no number of them ever holds a brighter pixel: the range stops below 0.25 and "
                    "every bright stroke deployment feeds the model is clipped. More samples of the same "
                    "distribution make that answer surer, never different")


def judge_formats(answer, sizes: Mapping[str, int], same_input_ruler: bool) -> Verdict:
    """``sizes``: format -> file bytes; ``same_input_ruler``: both models' input scale and zero point are equal."""
    answer = normalise("formats", answer)
    smaller = min(FORMATS, key=lambda f: sizes[f])
    parts = [(answer["smaller"] == smaller,
              f"you said {answer['smaller']} is smaller; measured, QDQ {sizes['QDQ']:,} bytes, "
              f"QOperator {sizes['QOperator']:,} bytes"),
             (answer["same_input_ruler"] == same_input_ruler,
              f"you said the input rulers are {'the same' if answer['same_input_ruler'] else 'different'}; "
              f"measured, they are {'the same' if same_input_ruler else 'different'}")]
    return _verdict("formats", parts,
                    "both formats store the same INT8 weights, but QOperator writes one QLinearMatMul where QDQ "
                    "writes DequantizeLinear -> MatMul -> QuantizeLinear with their scale and zero-point constants: "
                    "fewer nodes, fewer constants. The rulers come from one calibration cache, and a format only "
                    "decides how the graph computes, not where the ruler ends")


def judge_entry_tensor(answer, entry: object, order: list[str]) -> Verdict:
    """``entry``: the ``debugging.LayerSQNR`` row where the flash run first falls 10 dB below daylight (or None)."""
    answer = normalise("entry_tensor", answer)
    measured = getattr(entry, "tensor", None)
    known = "" if answer in order else f" ({answer!r} is not a tensor of this graph: {', '.join(order)})"
    parts = [(answer == measured, f"you said the error enters at {answer}{known}; measured, it enters at {measured}")]
    return _verdict("entry_tensor", parts,
                    "a flash pushes stroke pixels past 1.0, and a ruler calibrated on daylight ends at 1.0, so the "
                    "very first QuantizeLinear, on the input pixels, clips them; every later tensor inherits that "
                    "damage. Read the SQNR table top down and take the first tensor that falls 10 dB below "
                    "daylight's")

