"""What every check shares: the ``Context`` (the hand-in and the grade it runs in, ``ctx.grading``), the rubric
(``grader.rubric``), the grader's own predictions, tolerances.

Predictions are computed here, in the grader's process, with one intra-op thread, from the
models the student handed in (after ``grader.models.load_checked``). Nothing reported is used
as an input to a recomputation.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import numpy as np

from grader.mistakes import Mistake
from grader.models import load_checked
from grader.results import Check, Evidence
from grader.rubric import HIDDEN, charged_under, committed_points, points, rubric  # noqa: F401 - what every check reads
from grader.sandbox.policy import Limits
from grader.state import GradingRun, current_course, current_run
from grader.submission import Submission
from lab import compare, data, variant
from lab.errors import LabError
from lab.schemas import loads

# Tolerances, and the reason each one is what it is. Feedback quotes the reason.
SOFTMAX_STEP = 1 / 255
WHY_OUTPUT = ("one step of the Softmax output grid (1/255): the same model can land one grid step "
              "apart on another CPU's kernels")
SCALE_REL = 1e-6  # relative: float32 rounding of a scale (WHY_SCALE)
WHY_SCALE = "float32 rounding of the scale: a reported scale must be the graph's scale, printed in full"
WHY_EXACT = "an integer count: it must match exactly"
# Cross-CPU policy: an INT8 prediction may differ from the student's report only on a sample whose top-2
# margin is within the output grid: another CPU's kernels can move each of the top-2 probabilities by one
# grid step there and flip the argmax. Those samples are named in the feedback.
MARGIN = 2 * SOFTMAX_STEP
# A ruler recomputed from a calibration set's min and max: ORT's calibrator and numpy reduce the set in another
# order, and the scale passes through float32 on the way into the graph (lessons 02 and 03 judge it so)
RANGE_REL = 1e-5
# Hand-in models of another model than the digit MLP: lesson 10's CNN (input 'image' [N, 1, 16, 16]). Intake skips
# the MLP's input/output check for them; the lesson's grader module checks them itself
OTHER_MODELS = frozenset({"camera-release.onnx"})


@variant.per_variant
def evaluation() -> tuple[np.ndarray, np.ndarray]:
    """The evaluation split's pixels and labels, read-only: every hand-in the worker grades shares them."""
    split = data.load_split("evaluation")
    pixels, labels = split.pixels, split.labels.copy()
    pixels.flags.writeable = labels.flags.writeable = False
    return pixels, labels


@variant.per_variant
def fp32_outputs() -> np.ndarray:
    """The FP32 fixture's outputs on the evaluation split, read-only: every hand-in the worker grades shares them."""
    out = compare.predict(data.fixture_path("fp32.onnx"), evaluation()[0])
    out.flags.writeable = False
    return out


@dataclass
class Context:
    """One submission being graded: the hand-in (``model``, ``outputs``, ``doc``) and the grade it runs in
    (``grading``: the course, the limits, the sandbox, the cache, the variant and the family)."""

    sub: Submission
    grading: GradingRun = field(default_factory=current_run)  # a grade's; outside one, the thread's own defaults
    notes: list[str] = field(default_factory=list)
    timed_out: bool = False
    grader_faults: list[str] = field(default_factory=list)  # the grader's own failures: the result is an error
    touched: list[str] = field(default_factory=list)  # the hand-in's files used by the group being checked, in order
    _charged: set[Mistake] = field(default_factory=set)  # charged by one check, named by later ones (``charge``)
    # what the running group declares it charges and reads (``grader.core`` sets it); None: not checked
    _declared: tuple[frozenset[Mistake], frozenset[Mistake]] | None = None
    _models: dict = field(default_factory=dict)
    _outputs: dict = field(default_factory=dict)
    _docs: dict = field(default_factory=dict)

    def has(self, rel: str) -> bool:
        return self.sub.has(rel)

    @property
    def limits(self) -> Limits:
        """Each student-code run's limits (``ctx.grading.limits``)."""
        return self.grading.limits

    def declare(self, charges: frozenset[Mistake], reads: frozenset[Mistake]) -> None:
        """The running group's declared mistakes: ``charge`` and ``charged`` refuse any other."""
        self._declared = (charges, reads)

    def charge(self, mistake: Mistake) -> None:
        """``mistake`` is charged by the running check: later groups name it without charging it again."""
        if self._declared is not None and mistake not in self._declared[0]:
            raise UndeclaredMistake(f"a check charges {mistake.key!r}, which its group does not declare it charges")
        self._charged.add(mistake)

    def charged(self, mistake: Mistake) -> bool:
        """Did an earlier group charge ``mistake``?"""
        if self._declared is not None and mistake not in self._declared[1]:
            raise UndeclaredMistake(f"a check reads {mistake.key!r}, which its group does not declare it reads")
        return mistake in self._charged

    def check_models(self) -> None:
        """Intake: every ONNX file of the submission passes the model checks (``ModelRefused``) before any is run."""
        for rel in sorted(self.sub.files):
            if rel.endswith(".onnx"):
                self._models[rel] = load_checked(self.sub.path(rel), rel, check_io=rel not in OTHER_MODELS)

    def model(self, rel: str):
        """The checked ``onnx.ModelProto`` of a submitted file (raises ``ModelRefused`` or ``Missing``)."""
        self.touched.append(rel)
        if rel not in self._models:
            if not self.has(rel):
                raise Missing(rel)
            self._models[rel] = load_checked(self.sub.path(rel), rel, check_io=rel not in OTHER_MODELS)
        return self._models[rel]

    def outputs(self, rel: str, x: np.ndarray | None = None, key: str = "evaluation") -> np.ndarray:
        """The model's probabilities on the evaluation set (or ``x``), computed here, cached."""
        cache_key = (rel, key)
        if cache_key not in self._outputs:
            model = self.model(rel)
            try:
                self._outputs[cache_key] = compare.predict(model, evaluation()[0] if x is None else x)
            except Exception as e:
                if is_runtime_error(e):
                    raise StudentFileError(rel, f"ONNX Runtime could not run it: {runtime_problem(e)}") from None
                raise
        self.touched.append(rel)
        return self._outputs[cache_key]

    def doc(self, name: str) -> dict:
        """A reported JSON document (already validated at intake)."""
        self.touched.append(name)
        if name not in self._docs:
            if not self.has(name):
                raise Missing(name)
            self._docs[name] = loads(self.sub.path(name).read_text(encoding="utf-8"))
        return self._docs[name]


class UndeclaredMistake(Exception):
    """A check charged or read a mistake its group does not declare: the grader's own error."""


class StudentFileError(LabError):
    """A file of the hand-in cannot be used as the lesson meant it (a model ONNX Runtime will not run, ...)."""

    def __init__(self, rel: str, problem: str):
        super().__init__(f"{rel}: {problem}")
        self.rel, self.problem = rel, problem


# ONNX Runtime's errors that a model itself causes: bad shapes or types, a graph it cannot build or run
_RUNTIME_ERRORS = frozenset({"Fail", "InvalidArgument", "InvalidGraph", "InvalidProtobuf", "NotImplemented",
                             "RuntimeException"})


def is_runtime_error(e: BaseException) -> bool:
    """Is ``e`` one of ONNX Runtime's errors about the model it was given?"""
    return (type(e).__module__.startswith("onnxruntime.") and type(e).__name__ in _RUNTIME_ERRORS)


def runtime_problem(e: BaseException) -> str:
    """ONNX Runtime's message, first line, without its status code prefix and C++ source locations."""
    lines = str(e).strip().splitlines() or [type(e).__name__]
    text = lines[0]
    m = re.match(r"\[ONNXRuntimeError\] : \d+ : (\w+) : (.*)", text)
    if m:
        text = f"{m.group(1)}: {m.group(2)}"
    text = re.sub(r"\S*onnxruntime_src/\S+( \S+?\([^()]*\))?\s*", "", text)
    return text[:400] + (" ..." if len(text) > 400 else "")


class Missing(Exception):
    """A file the check needs is not in the submission."""

    def __init__(self, rel: str):
        super().__init__(rel)
        self.rel = rel


def check(part: str, name: str, fraction: float, message: str, evidence: list[Evidence] | None = None,
          hidden: bool = False, assessed: bool = True) -> Check:
    """A ``Check`` worth ``fraction`` of its rubric points, rounded down to whole or half points.

    Feedback says "2.5 / 3", never "2.6667 / 3": a check whose parts are worth a third of a point each
    loses half a point for the first broken part.
    """
    full = points(part, name, current_course().prices)  # the course's price, else rubric.toml's
    earned = math.floor(full * max(0.0, min(1.0, fraction)) * 2 + 1e-9) / 2  # whole or half points, rounded down
    return Check(part, name, earned, full, message, evidence or [], hidden, assessed)


def share_left(part: str, name: str, cost: float) -> float:
    """The fraction of a check left after ``cost``, a sum of per-rule costs written in rubric.toml's own price of the
    check: a course that reprices the check keeps each rule's share (a broken rule of 4 is a quarter at any price)."""
    return max(0.0, 1.0 - cost / committed_points(part, name))


# ----- reading reported values, whatever shape the lesson's document took -----

def entry(doc, key: str, *containers: str) -> dict | None:
    """The record for ``key`` (e.g. ``"right"``): ``doc[c][key]``, or the row of ``doc[c]`` whose kind/name is
    ``key``."""
    for c in containers or ("models",):
        node = doc.get(c) if isinstance(doc, dict) else None
        if isinstance(node, dict) and isinstance(node.get(key), dict):
            return node[key]
        if isinstance(node, list):
            for row in node:
                if isinstance(row, dict) and key in (row.get("kind"), row.get("name"), row.get("set"),
                                                     row.get("model"), row.get("format")):
                    return row
    if isinstance(doc, dict) and isinstance(doc.get(key), dict):
        return doc[key]
    return None


def value(record, *names, default=None):
    """The first of ``names`` present in ``record`` (``a.b`` reaches into a nested dict)."""
    if not isinstance(record, dict):
        return default
    for name in names:
        node = record
        for part in name.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        if node is not None:
            return node
    return default


def number(x) -> float | None:
    if isinstance(x, bool):
        return None
    return float(x) if isinstance(x, (int, float)) else None


def integer(x) -> int | None:
    """A reported integer (not a bool, not a float), else None."""
    return x if isinstance(x, int) and not isinstance(x, bool) else None


def short(v) -> str:
    """A reported or recomputed value as feedback shows it: floats to 6 digits, a SHA-256 to its first 12."""
    if isinstance(v, float):
        return f"{v:.6g}"
    if isinstance(v, str) and len(v) == 64:
        return v[:12] + "..."
    return repr(v)


def near_boundary(probs: np.ndarray) -> np.ndarray:
    """Indices of samples whose top-2 probabilities are within ``MARGIN`` (the cross-CPU policy above)."""
    top2 = np.sort(probs, axis=1)[:, -2:]
    return np.flatnonzero(top2[:, 1] - top2[:, 0] <= MARGIN)


def close(got, want: float, tol: float) -> bool:
    """A reported number (``number``: not a bool, not a string) within ``tol`` of the recomputed one."""
    got = number(got)
    return got is not None and abs(got - want) <= tol


def provenance(label: str, set_name: str, pixels: np.ndarray, sha256, samples,
               pixels_sha256: str | None = None) -> tuple[bool, str, list[Evidence]]:
    """A reported calibration hash and sample count against the set the lesson names.

    ``(ok, problem, evidence)``; ``problem`` names the set the hash and count belong to when the
    reported ones are another set's (the evaluation split, say) and is empty when both agree.
    ``pixels_sha256``: ``data.data_sha256(pixels)`` when the caller has it already.
    """
    want_sha, want_n = pixels_sha256 or data.data_sha256(pixels), int(len(pixels))
    ok_sha = isinstance(sha256, str) and sha256 == want_sha
    ok_n = isinstance(samples, int) and not isinstance(samples, bool) and samples == want_n
    ev = [Evidence(f"{label} calibration samples", samples, want_n, 0, WHY_EXACT),
          Evidence(f"{label} calibration_sha256", sha256[:16] if isinstance(sha256, str) else sha256, want_sha[:16],
                   None, "the SHA-256 of the float32 pixels served: exact")]
    if ok_sha and ok_n:
        return True, "", ev
    known = _known_set(sha256)
    seen = f"the {known}" if known else "not the named set"
    return False, (f"{label}: reported {samples} calibration samples with a hash of {seen}; {set_name} has "
                   f"{want_n} (calibrate on {set_name}, and report what the reader served)"), ev


def _known_set(sha256) -> str | None:
    """The lab's split or calibration set a hash belongs to (the evaluation split is the usual wrong one)."""
    if not isinstance(sha256, str):
        return None
    for name in ("evaluation", "calibration"):
        try:
            if data.data_sha256(data.load_split(name).pixels) == sha256:
                return f"{name} split"
        except Exception:  # noqa: BLE001 - a split this lab does not have
            continue
    for kind in ("narrow", "right", "wide"):
        if data.data_sha256(data.calibration_set(kind)) == sha256:
            return f"'{kind}' calibration set"
    return None


@variant.per_variant
def _common_truth() -> dict:
    x, _ = evaluation()
    return {"source_sha256": data.file_sha256(data.fixture_path("fp32.onnx")), "evaluation/count": int(len(x)),
            "evaluation/sha256": data.data_sha256(x), "evaluation/name": "evaluation", "evaluation/split": "evaluation"}


def common_claims(doc: dict, rel: str) -> list[str]:
    """What every lesson's report says about its inputs, recomputed: ``source_sha256`` is the FP32 fixture's hash,
    ``evaluation`` names the evaluation split, its count and hash. One message per wrong field (absent: nothing,
    a schema that needs a field requires it)."""
    wrong = []
    for field_, want in _common_truth().items():
        node: object = doc
        for key in field_.split("/"):
            node = node.get(key) if isinstance(node, dict) else None
        if node is not None and (node != want or type(node) is not type(want)):
            shown = f"{want[:12]}..." if isinstance(want, str) and len(want) == 64 else repr(want)
            got = f"{node[:12]}..." if isinstance(node, str) and len(node) == 64 else repr(node)
            wrong.append(f"{rel} {field_} is {got}; recomputed from the lab's fixtures: {shown}")
    return wrong
