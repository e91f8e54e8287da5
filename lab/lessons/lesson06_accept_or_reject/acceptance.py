"""Accept or reject a quantized model: summaries, probability checks, evidence, and the decision.

These are the lab's reference functions for what lesson 06 does not ask the student to write. Lesson 06
uses them beside the student's own ``metrics.summarize`` (whose reference lives in the grader, not here).
"""
from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from lab import alt_text, compare, convert, data, graph, palette, ruler, schemas, tables
from lab.data import EPSILON, N_CLASSES, file_sha256
from lab.errors import LabError
from lab.workspace import atomic_write_text

# The candidate, the model you would ship: lesson 03's settings (QDQ, signed 8-bit activations and weights) with one
# weight scale per output channel, so each output's weights get a ruler of their own instead of the widest column's
CANDIDATE_SETTINGS: convert.QuantizeSettings = {"quant_format": "QDQ", "activation_type": "QInt8",
                                                "weight_type": "QInt8", "per_channel": True}
FLOOR = 0.95  # the FP32 model must reach this accuracy before any candidate is judged against it
LIMIT = 0.01  # the largest accuracy loss we accept: one percentage point, absolute
FLOAT_SUM_TOLERANCE = 1e-4  # an FP32 Softmax sums to 1 within float32 rounding over 10 terms
REGRESSION_SCHEMA = "regression/1"


# --- summaries ---------------------------------------------------------------------------------
# ``summarize(predictions, labels)`` is lesson 06's exercise: the student writes it in ``metrics.py``.
# Its reference is instructor-side (``grader.lessons.lesson06_accept_or_reject.summarize``), so the kit holds no answer.

def top_confusions(confusion: Sequence[Sequence[int]], k: int = 5) -> list[tuple[int, int, int]]:
    """The ``k`` largest off-diagonal cells as (actual, predicted, count), largest first."""
    c = np.array(confusion, dtype=np.int64)
    np.fill_diagonal(c, 0)
    cells = [(int(a), int(p), int(c[a, p])) for a, p in zip(*np.nonzero(c))]
    return sorted(cells, key=lambda t: (-t[2], t[0], t[1]))[:k]


# --- probability checks ------------------------------------------------------------------------

def probability_tolerance(output_scale: float | None, classes: int = N_CLASSES) -> float:
    """How far a row of probabilities may sum from 1.

    A quantized Softmax output sits on a grid of ``output_scale`` steps (1/255 for QDQ INT8).
    ORT's kernel writes ``round(p x floor(1 / scale))``: 254 steps for p = 1 at scale 1/255 (1/255 is
    not exact in float32), 256 at 1/256. The exact row adds up to those 254 (or 256) steps; each of the
    ``classes`` codes is rounded by less than half a step, and the codes are integers, so the row lands
    within 4 steps of 254: 250/255 .. 258/255, at most ``classes x scale / 2`` (10 / 510 = 0.0196) from 1.
    A float output (``output_scale`` None) only carries float32 rounding: 1e-4.
    """
    if output_scale is None:
        return FLOAT_SUM_TOLERANCE
    return classes * float(output_scale) / 2


@dataclass(frozen=True)
class ProbabilityCheck:
    """Negative values, non-finite values, and rows whose sum is farther from 1 than the tolerance."""

    rows: int
    negative: int
    nonfinite: int
    far_rows: int
    min_sum: float
    max_sum: float
    tolerance: float

    @property
    def ok(self) -> bool:
        return self.rows > 0 and not (self.negative or self.nonfinite or self.far_rows)

    @property
    def problems(self) -> list[str]:
        out = []
        if self.rows == 0:
            out.append("no rows to check")
        if self.nonfinite:
            out.append(f"{self.nonfinite} value(s) are NaN or infinite")
        if self.negative:
            out.append(f"{self.negative} value(s) are negative; a probability is at least 0")
        if self.far_rows:
            out.append(f"{self.far_rows} row(s) sum farther than {self.tolerance:.4f} from 1 "
                       f"(sums seen {self.min_sum:.4f} .. {self.max_sum:.4f})")
        return out

    def to_dict(self) -> dict:
        return {**asdict(self), "ok": self.ok, "problems": self.problems}

    def __str__(self) -> str:
        verdict = "ok" if self.ok else "; ".join(self.problems)
        return (f"{self.rows} rows, sums {self.min_sum:.4f} .. {self.max_sum:.4f} "
                f"(tolerance {self.tolerance:.4f}): {verdict}")


def check_probabilities(probabilities: np.ndarray, tolerance: float) -> ProbabilityCheck:
    """Check an [N, 10] output: no negatives, nothing non-finite, every row sums to 1 within ``tolerance``."""
    p = np.asarray(probabilities, dtype=np.float64)
    if p.ndim != 2 or p.shape[1] != N_CLASSES:
        raise ValueError(f"probabilities have shape {list(p.shape)}; expected [N, {N_CLASSES}]")
    finite = np.isfinite(p)
    sums = np.where(finite, p, 0.0).sum(axis=1)
    rows_ok = finite.all(axis=1)
    far = rows_ok & (np.abs(sums - 1.0) > tolerance + EPSILON)
    ok_sums = sums[rows_ok]
    return ProbabilityCheck(rows=int(len(p)), negative=int((np.where(finite, p, 0.0) < 0).sum()),
                            nonfinite=int((~finite).sum()), far_rows=int(far.sum()),
                            min_sum=float(ok_sums.min()) if ok_sums.size else float("nan"),
                            max_sum=float(ok_sums.max()) if ok_sums.size else float("nan"),
                            tolerance=float(tolerance))


# --- four kinds of evidence --------------------------------------------------------------------

def evidence(model: str | Path, x: np.ndarray, labels: np.ndarray) -> dict:
    """Four kinds of evidence, kept apart.

    ``size_bytes`` is about storage, ``weight_dtypes`` about representation, ``kernels`` (from an
    ORT profile of one run) about the execution path, ``accuracy`` about quality on this data only.
    """
    predictions = compare.predict(model, x).argmax(axis=1)
    return {"size_bytes": Path(model).stat().st_size,
            "weight_dtypes": graph.weight_dtypes(model),
            "kernels": graph.kernels_run(model, x[:8]),
            "accuracy": float((predictions == np.asarray(labels)).mean())}


def format_evidence(rows: Mapping[str, Mapping]) -> str:
    """The evidence of several models as a fixed-width table."""
    def fmt(d: Mapping[str, int]) -> str:
        return ", ".join(f"{k} {v}" for k, v in d.items())

    lines = [f"{'model':<10} {'size':>9}  {'accuracy':>8}  weight dtypes", "-" * 60]
    for name, e in rows.items():
        lines.append(f"{name:<10} {e['size_bytes'] / 1024:>7.1f}KB  {e['accuracy']:>8.4f}  {fmt(e['weight_dtypes'])}")
    lines.append("")
    lines.append("kernels that ran (ORT profile, one batch):")
    for name, e in rows.items():
        lines.append(f"  {name:<10} {fmt(e['kernels'])}")
    return "\n".join(lines)


# --- the decision ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Decision:
    """Accept or reject one model against the FP32 reference, with the numbers and the reason."""

    accept: bool
    loss: float
    reason: str

    def to_dict(self) -> dict:
        return asdict(self)

    def __str__(self) -> str:
        return f"{'ACCEPT' if self.accept else 'REJECT'}: {self.reason}"


def decide(fp32_accuracy: float, accuracy: float, *, probabilities_ok: bool = True,
           floor: float = FLOOR, limit: float = LIMIT, epsilon: float = EPSILON) -> Decision:
    """Decide from the numbers, in order.

    1. The FP32 reference must reach ``floor``; otherwise nothing can be judged against it.
    2. The model's probabilities must pass their checks.
    3. The loss ``fp32_accuracy - accuracy`` must be at most ``limit`` (absolute). A loss equal
       to the limit is accepted: the limit is the largest loss agreed to; ``epsilon`` absorbs
       float rounding, so FP32 0.96 against 0.95 (a loss of 0.010000000000000009) is accepted.
    """
    loss = float(fp32_accuracy) - float(accuracy)
    if fp32_accuracy + epsilon < floor:
        return Decision(False, loss, f"the FP32 reference reaches only {fp32_accuracy:.4f} < {floor:.2f}; "
                                     "fix the reference before judging any candidate")
    if not probabilities_ok:
        return Decision(False, loss, "its outputs fail the probability checks")
    if loss <= limit + epsilon:
        return Decision(True, loss, f"accuracy {accuracy:.4f} vs FP32 {fp32_accuracy:.4f}: "
                                    f"loss {loss:+.4f} is within the limit {limit:.2f}")
    return Decision(False, loss, f"accuracy {accuracy:.4f} vs FP32 {fp32_accuracy:.4f}: "
                                 f"loss {loss:+.4f} exceeds the limit {limit:.2f}")


# --- the figure --------------------------------------------------------------------------------

def confusion_figure(confusions: Mapping[str, Sequence[Sequence[int]]]):
    """One confusion matrix per model, side by side: rows the actual digit, columns the predicted one.

    Margins fixed in inches (``lab.plots.fixed_margins``) in place of a layout pass: cheaper to draw."""
    import matplotlib.pyplot as plt  # deferred: 1.8 s to import (python -X importtime); only figures need it

    from lab.plots import fixed_margins  # deferred: lab.plots imports matplotlib, as above

    n = len(confusions)
    fig, axes = plt.subplots(1, n, figsize=(4.2 * n, 4.4), squeeze=False)
    for ax, (name, conf) in zip(axes[0], confusions.items()):
        c = np.array(conf)
        ax.imshow(c, cmap="Blues", vmin=0, vmax=max(1, c.max()))
        acc = np.trace(c) / max(1, c.sum())
        ax.set_title(f"{name}: accuracy {acc:.3f}", y=1.0)
        ax.set_xlabel("predicted digit")
        ax.set_ylabel("actual digit")
        ax.set_xticks(range(N_CLASSES))
        ax.set_yticks(range(N_CLASSES))
        for a in range(N_CLASSES):
            for p in range(N_CLASSES):
                if c[a, p]:
                    # clip_on: a count inside its cell is left out when the figure's tight bounding box is measured
                    ax.text(p, a, str(c[a, p]), ha="center", va="center", fontsize=7, clip_on=True,
                            color="white" if c[a, p] > c.max() / 2 else ("black" if a == p else palette.ALERT))
    fig.suptitle("Confusion matrices on the evaluation set (off-diagonal in red: misreads)")
    alt_text.attach(fig, confusion_summary(confusions), alone=True)
    return fixed_margins(fig, left=0.6, right=0.15, bottom=0.55, top=0.65, wgap=0.7)


def confusion_summary(confusions: Mapping[str, Sequence[Sequence[int]]], most: int = 10) -> str:
    """The confusion matrices in words: per model its accuracy, each digit read right, and its largest misreads."""
    out = []
    for name, conf in confusions.items():
        c = np.array(conf)
        right = ", ".join(f"{d}: {c[d, d]} of {c[d].sum()}" for d in range(len(c)))
        wrong = top_confusions(c.tolist(), most)
        misreads = "; ".join(f"actual {a} read as {p} {n} times" for a, p, n in wrong) or "none"
        out.append(f"{name}: accuracy {np.trace(c) / max(1, c.sum()):.3f}, {np.trace(c)} of {c.sum()} digits read "
                   f"right. Read right per actual digit: {right}. Largest misreads: {misreads}.")
    return "Rows are the actual digit, columns the predicted one. " + " ".join(out)


# --- regression.json ---------------------------------------------------------------------------

def model_entry(file: str | Path, summary: Mapping, probabilities: ProbabilityCheck,
                evidence_row: Mapping) -> dict:
    """One model's record in ``regression.json``."""
    return {"file": Path(file).name, "sha256": file_sha256(file),
            "count": int(summary["count"]), "correct": int(summary["correct"]),
            "accuracy": float(summary["accuracy"]), "confusion": [list(map(int, r)) for r in summary["confusion"]],
            "probabilities": {"min_sum": probabilities.min_sum, "max_sum": probabilities.max_sum,
                              "tolerance": probabilities.tolerance, "ok": probabilities.ok},
            "evidence": {"size_bytes": int(evidence_row["size_bytes"]),
                         "weight_dtypes": dict(evidence_row["weight_dtypes"]),
                         "kernels": dict(evidence_row["kernels"])}}


def regression(models: Mapping[str, Mapping], evaluation_sha256: str,
               floor: float = FLOOR, limit: float = LIMIT) -> dict:
    """Assemble ``regression.json`` (schema regression/1) from the three model entries.

    ``models`` has ``fp32``, ``candidate`` and ``bad``, each from ``model_entry``. Both decisions
    are computed here from the accuracies and the probability checks, never passed in.
    """
    missing = {"fp32", "candidate", "bad"} - set(models)
    if missing:
        raise ValueError(f"regression needs models fp32, candidate and bad; missing {sorted(missing)}")
    fp32 = models["fp32"]["accuracy"]
    cand = decide(fp32, models["candidate"]["accuracy"], probabilities_ok=models["candidate"]["probabilities"]["ok"],
                  floor=floor, limit=limit)
    bad = decide(fp32, models["bad"]["accuracy"], probabilities_ok=models["bad"]["probabilities"]["ok"],
                 floor=floor, limit=limit)
    doc = {"schema": REGRESSION_SCHEMA,
           "evaluation": {"split": "evaluation", "count": int(models["fp32"]["count"]), "sha256": evaluation_sha256},
           "floor": floor, "limit": limit, "epsilon": EPSILON,
           "models": {k: dict(models[k]) for k in ("fp32", "candidate", "bad")},
           "loss": cand.loss, "bad_loss": bad.loss,
           "accept_candidate": cand.accept, "reject_bad": not bad.accept,
           "reasons": {"candidate": str(cand), "bad": str(bad)}}
    schemas.validate("regression", doc)
    return doc


def write_regression(path: str | Path, doc: Mapping) -> Path:
    """Validate and write ``regression.json`` atomically."""
    schemas.validate("regression", doc, Path(path).name)
    return atomic_write_text(path, json.dumps(doc, indent=2) + "\n")


# --- the visible check of lesson 06's exercise ---------------------------------------------------

class SummarizeCheckError(LabError):
    """The student's ``summarize`` breaks one of the exercise's rules; the message names the rule."""


SUMMARIZE_EXAMPLE = ([2, 2, 1, 0, 8], [1, 2, 1, 0, 9])  # predictions, then labels: 1 read as 2, 9 read as 8
# (arguments, what is wrong with them, the value the ValueError message must name or None)
SUMMARIZE_REFUSALS: tuple[tuple[tuple[list[int], list[int]], str, str | None], ...] = (
    (([1, 2], [1]), "mismatched lengths", None),
    (([], []), "empty input", None),
    (([1, 2], [1, 10]), "a label outside 0-9", "10"),
    (([-1], [3]), "a prediction outside 0-9", "-1"))


def _call(summarize, args) -> str:
    return f"summarize({', '.join(map(repr, args))})"


def check_summarize(summarize) -> list[str]:
    """Run the exercise's rules against a student's ``summarize``; one line per rule kept.

    The first broken rule raises ``SummarizeCheckError`` with one line that names it, instead of the
    traceback the broken rule would otherwise end in (an IndexError from ``confusion[10]``, a bare
    AssertionError). Why each rule: the grader compares the whole matrix with its reference, and a
    summary of bad input that does not raise would put a wrong number in ``regression.json``.
    """
    preds, labels = SUMMARIZE_EXAMPLE
    call = _call(summarize, SUMMARIZE_EXAMPLE)
    try:
        s = summarize(list(preds), list(labels))
    except NotImplementedError:  # the exercise is not done yet: the stub's own message says so
        raise
    except Exception as e:  # noqa: BLE001 - the student's code: name what it raised
        raise SummarizeCheckError(f"{call} raised {type(e).__name__}: {e}") from None
    keys = ("count", "correct", "accuracy", "confusion")
    if not isinstance(s, dict) or any(k not in s for k in keys):
        got = sorted(s) if isinstance(s, dict) else type(s).__name__
        raise SummarizeCheckError(f"{call} returned {got}; expected a dict with keys {list(keys)}")
    if (s["count"], s["correct"]) != (5, 3):
        raise SummarizeCheckError(f"{call}: count {s['count']}, correct {s['correct']}; expected 5 and 3 "
                                  "(three of the five answers are right)")
    if not isinstance(s["accuracy"], (int, float)) or abs(s["accuracy"] - 0.6) > 1e-12:
        raise SummarizeCheckError(f"{call}: accuracy {s['accuracy']!r}; expected 0.6, a ratio between 0 and 1 "
                                  "(correct / count), not a percentage")
    if not isinstance(s["confusion"], list) or not all(isinstance(row, list) for row in s["confusion"]):
        raise SummarizeCheckError(f"{call}: confusion is a {type(s['confusion']).__name__}; expected a list of 10 "
                                  "lists, as the exercise asks (a numpy array's .tolist() gives one)")
    c = np.asarray(s["confusion"])
    if c.shape != (N_CLASSES, N_CLASSES):
        raise SummarizeCheckError(f"{call}: confusion has shape {list(c.shape)}; expected 10 x 10 "
                                  "(one row and one column per digit)")
    if c[2, 1] == 1 and c[8, 9] == 1 and c[1, 2] == 0:
        raise SummarizeCheckError(f"{call}: the confusion matrix is transposed: an actual 1 read as 2 is in "
                                  "confusion[2][1]; rows are the actual digit, so it belongs in confusion[1][2]")
    if c[1, 2] != 1 or c[9, 8] != 1 or c.sum() != 5:
        raise SummarizeCheckError(f"{call}: confusion[1][2] is {c[1, 2]}, confusion[9][8] is {c[9, 8]}, total "
                                  f"{c.sum()}; expected 1, 1 and 5 (row = actual digit, column = predicted)")
    lines = [f"{call}: count 5, correct 3, accuracy 0.6, rows actual and columns predicted: ok"]
    try:
        on_arrays = summarize(np.array(preds), np.array(labels))
    except Exception as e:  # noqa: BLE001 - whatever the student's summarize raises on arrays: name it
        raise SummarizeCheckError(f"summarize on numpy arrays raised {type(e).__name__}: {e}; the models' "
                                  "predictions are numpy arrays (convert them with list() first)") from None
    if not isinstance(on_arrays, dict) or on_arrays.get("correct") != 3:
        raise SummarizeCheckError("summarize on numpy arrays of the same five answers does not count 3 correct; "
                                  "the models' predictions are numpy arrays")
    thirds = ([4, 5, 7], [4, 5, 6])  # two of three right: an accuracy no rounding leaves alone
    got = summarize(*map(list, thirds)).get("accuracy")
    if not isinstance(got, (int, float)) or abs(got - 2 / 3) > 1e-12:
        raise SummarizeCheckError(f"{_call(summarize, thirds)}: accuracy {got!r}; expected 2 / 3 = {2 / 3!r}, "
                                  "correct / count unrounded (round only where you print it)")
    for args, what, named in SUMMARIZE_REFUSALS:
        call = _call(summarize, args)
        try:
            summarize(*args)
        except ValueError as e:
            if named is not None and named not in str(e):
                raise SummarizeCheckError(f"{call} raised ValueError({str(e)!r}): {what} must raise a ValueError "
                                          f"that names the bad value {named}") from None
            lines.append(f"{what:<24} -> ValueError: {e}")
            continue
        except Exception as e:  # noqa: BLE001 - any error but ValueError breaks the rule: name it
            rule = f"{what} must raise ValueError" + (f" naming the bad value {named}" if named else "")
            raise SummarizeCheckError(f"{call} raised {type(e).__name__} ({e}) instead: {rule}") from None
        raise SummarizeCheckError(f"{call} returned without an error: {what} must raise ValueError")
    return lines


# --- the guide's validation, and what to check instead ---------------------------------------------

GUIDE_ATOL = GUIDE_RTOL = 0.01  # ORT's guide: np.allclose(original, quantized, rtol=0.01, atol=0.01)


def allclose_rows(reference: np.ndarray, outputs: Mapping[str, np.ndarray], atol: float = GUIDE_ATOL,
                  rtol: float = GUIDE_RTOL) -> list[dict]:
    """For each model: does the guide's ``np.allclose(reference, out, rtol, atol)`` pass, the largest difference,
    how many probabilities fall outside ``atol + rtol x |out|``, and how many answers (argmax) differ."""
    ref = np.asarray(reference)
    rows = []
    for name, out in outputs.items():
        out = np.asarray(out, dtype=np.float64)
        diff = np.abs(out - ref)
        rows.append({"model": name, "allclose": bool(np.allclose(ref, out, rtol=rtol, atol=atol)),
                     "max_abs_difference": float(diff.max()),
                     "beyond_atol": int((diff > atol + rtol * np.abs(out)).sum()),
                     "values": int(diff.size), "answers_changed": int((out.argmax(1) != ref.argmax(1)).sum()),
                     "images": int(len(ref))})
    return rows


def format_allclose(rows: Sequence[Mapping], atol: float = GUIDE_ATOL) -> str:
    lines = [f"{'model':<10} {'allclose':>8}  {'max abs diff':>12}  {'values outside':>16}  answers changed"]
    for r in rows:
        lines.append(f"{r['model']:<10} {str(r['allclose']):>8}  {r['max_abs_difference']:>12.4f}  "
                     f"{r['beyond_atol']:>6} of {r['values']:<6}  {r['answers_changed']:>4} of {r['images']}")
    return "\n".join(lines)


# --- tracing one disagreement ------------------------------------------------------------------------

def first_disagreement(reference: np.ndarray, output: np.ndarray, labels: np.ndarray) -> int | None:
    """The first image the reference reads right and ``output`` reads wrong, or None."""
    hits = np.nonzero((reference.argmax(1) == labels) & (output.argmax(1) != labels))[0]
    return int(hits[0]) if hits.size else None


def trace_disagreement(image: int, split, fp32_model: str | Path, model: str | Path) -> list[tuple[str, str]]:
    """Trace one disagreement stage by stage, with the unquantized model kept as the reference.

    1. preprocessing: the pixels the model read against the deployed path applied to the raw image;
    2. export: the unquantized ONNX model (the reference) on those pixels, right or wrong;
    3. quantization, input: the image after the quantized model's input ruler, read by the reference;
    4. quantization, inside: the quantized model itself (hidden rulers, integer kernels).
    The first stage whose answer is wrong is where the disagreement enters. Returns (stage, finding) pairs.
    """
    raw, label, pixels = split.raw[image:image + 1], int(split.labels[image]), split.pixels[image:image + 1]
    deployed = data.preprocess(raw)
    out = []
    gap = float(np.abs(deployed - pixels).max())
    out.append(("preprocessing", f"pixels vs preprocess(raw): max difference {gap:g}: "
                                 + ("the deployed path, not the cause" if gap == 0 else "PREPROCESSING DIFFERS")))

    def read(m, x):
        p = compare.predict(m, x)[0]
        return int(p.argmax()), float(p.max())

    d, p = read(fp32_model, pixels)
    out.append(("export (FP32 reference)", f"reads {d} ({p:.3f}); the label is {label}: "
                + ("the unquantized model is right, so export and weights are not the cause" if d == label
                   else "the reference is wrong too: look at the model or its export, not at INT8")))
    r = graph.input_ruler(model)
    seen = ruler.round_trip(pixels, r.scale, r.zero_point, r.dtype).astype(np.float32)
    levels = len(np.unique(seen))
    d_in, p_in = read(fp32_model, seen)
    out.append(("quantization: input ruler", f"scale {r.scale:.4g}: the image's {len(np.unique(pixels))} pixel "
                f"values land on {levels}; the reference reads the rounded image as {d_in} ({p_in:.3f})"))
    d, p = read(model, pixels)
    where = ("the error enters at the input ruler" if d_in != label else
             "the input ruler keeps the digit, so the error enters inside the model "
             "(the hidden layers' rulers, or on a saturating CPU the integer kernels)")
    out.append(("quantization: the whole model", f"reads {d} ({p:.3f}): " + (where if d != label else "right")))
    return out


def summary_lines(doc: dict) -> list[str]:
    """The run's summary of ``regression.json``: the decision and the numbers it rests on."""
    models = doc.get("models", {})
    lines = ["  " + ", ".join(f"{name} {tables.number(m.get('accuracy'))}" for name, m in models.items())]
    return lines + [f"  {name}: {reason}" for name, reason in doc.get("reasons", {}).items()]
