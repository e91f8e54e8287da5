"""Compare a quantized model with the FP32 one: errors, error by input size, and a diagnosis."""
from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import onnx
import onnxruntime as ort

from lab import cache, graph, kernels
from lab.data import INPUT_NAME
from lab.graph import quant_format
from lab.ruler import InputRuler


def session(model, threads: int = 1, x64_precision: bool = False):
    """``lab.graph.session`` for ``predict``, through the current ``lab.cache`` (the grader's keeps one per model).

    ``x64_precision``: with ONNX Runtime's config entry ``kernels.X64_PRECISION_KEY`` = "1" (U8U8 kernels on x86;
    see ``lab.kernels``). Such a session is built each time, not cached: the cache's sessions are keyed by model.
    """
    if not x64_precision:
        return cache.through(cache.SESSION, graph.session, model, threads)
    so = ort.SessionOptions()  # as lab.graph.session, plus the entry
    so.intra_op_num_threads, so.inter_op_num_threads, so.log_severity_level = threads, 1, 3
    so.add_session_config_entry(kernels.X64_PRECISION_KEY, "1")
    src = model.SerializeToString() if isinstance(model, onnx.ModelProto) else str(model)
    return ort.InferenceSession(src, so, providers=["CPUExecutionProvider"])


def predict(model, x: np.ndarray, input_name: str = INPUT_NAME, threads: int = 1,
            family: str | None = None, x64_precision: bool = False) -> np.ndarray:
    """Run a model on float32 [N, 64] pixels and return its [N, 10] probabilities.

    A quantized model runs as CPUs of ``family`` compute it (default ``kernels.target_family()``,
    normally this machine's): on this machine's kernels when they are that family, else in
    ``lab.kernels``' emulation. A float model is the same on every family, and so is one whose integer kernels
    cannot saturate (``kernels.family_free``): both run on this machine's kernels. Asked through the current
    ``lab.cache``.

    ``x64_precision``: as a session with ``kernels.X64_PRECISION_KEY`` = "1" computes it (the deploy-time fix for
    the saturating family: constant int8 weights shifted to uint8, U8U8 kernels). This machine's session gets the
    entry; the emulation follows x86's rules. Not cached: ``lab.cache`` keys a prediction by model, family, input
    name and data only.
    """
    family = family or kernels.target_family()   # resolved here: a cache keys the prediction by it
    if x64_precision:
        return _predict(model, x, input_name, threads, family, True)
    return cache.through(cache.PREDICT, _predict, model, x, input_name, threads, family)


def _predict(model, x: np.ndarray, input_name: str, threads: int, family: str,
             x64_precision: bool = False) -> np.ndarray:
    x = np.asarray(x, np.float32)
    if kernels.emulated(family) and quant_format(model) != "float" and not kernels.family_free(model, x64_precision):
        return kernels.emulate(model, x, family, input_name, x64_precision)
    return session(model, threads, x64_precision).run(None, {input_name: x})[0]


def max_abs_error(reference: np.ndarray, output: np.ndarray) -> float:
    """Largest absolute difference between two outputs of the same shape."""
    reference, output = np.asarray(reference), np.asarray(output)
    if reference.shape != output.shape:
        raise ValueError(f"shapes differ: {reference.shape} vs {output.shape}")
    return float(np.max(np.abs(reference.astype(np.float64) - output))) if reference.size else 0.0


def scorecard(model, x: np.ndarray, labels: np.ndarray, reference: np.ndarray) -> dict:
    """Max abs error against the FP32 ``reference`` outputs on ``x``, and accuracy on ``labels``: the two numbers
    lessons 03-05 report for every model."""
    out = predict(model, x)
    return {"max_abs_error": max_abs_error(reference, out),
            "accuracy": float(np.mean(out.argmax(axis=1) == np.asarray(labels)))}


def sample_errors(reference: np.ndarray, output: np.ndarray) -> np.ndarray:
    """Per-sample max absolute error over the 10 probabilities."""
    return np.max(np.abs(np.asarray(reference, np.float64) - output), axis=1)


def error_by_magnitude(magnitude: np.ndarray, errors: np.ndarray, edges=(0, 0.25, 0.5, 0.75, 1.0001)) -> list[dict]:
    """Group per-item errors by a magnitude (e.g. each image's brightest pixel) into bins.

    Clipping shows as error that grows with magnitude (only big inputs cross the range);
    squashing shows as error present at every magnitude (every value sits on a coarse grid).
    """
    magnitude, errors = np.asarray(magnitude, float).ravel(), np.asarray(errors, float).ravel()
    if magnitude.shape != errors.shape:
        raise ValueError(f"magnitude and errors differ in length: {magnitude.size} vs {errors.size}")
    rows = []
    for lo, hi in zip(edges[:-1], edges[1:]):
        sel = (magnitude >= lo) & (magnitude < hi)
        rows.append({"low": float(lo), "high": float(min(hi, edges[-1])), "count": int(sel.sum()),
                     "mean_error": float(errors[sel].mean()) if sel.any() else 0.0,
                     "max_error": float(errors[sel].max()) if sel.any() else 0.0})
    return rows


@dataclass(frozen=True)
class Diagnosis:
    """Clipping, squashing or fine, with the numbers behind it."""

    kind: str
    clipped_fraction: float
    grid_used_fraction: float
    range_seen: float
    deployed_range: float
    reason: str

    def to_dict(self) -> dict:
        return asdict(self)

    def __str__(self) -> str:
        return f"{self.kind}: {self.reason}"


CLIP_LIMIT = 0.001  # more than 0.1 % of deployed values outside the ruler is clipping
SQUASH_LIMIT = 0.5  # deployed data using under half of the grid's steps is squashing


def diagnose(ruler: InputRuler, deployed: np.ndarray) -> Diagnosis:
    """Judge an input ruler against the values it will meet in deployment.

    clipping: more than 0.1 % of deployed values fall outside the ruler (they saturate);
    squashing: the deployed values span under half the grid's steps (resolution wasted);
    fine: neither.
    """
    x = np.asarray(deployed, np.float32).ravel()
    return diagnose_summary(ruler, clipped_count(ruler, x) / x.size, float(x.min()), float(x.max()))


def clipped_count(ruler: InputRuler, values: np.ndarray) -> int:
    """How many of ``values`` fall outside the ruler's interval by more than half a step (they saturate)."""
    lo, hi = ruler.interval
    half = ruler.scale / 2
    x = np.asarray(values, np.float32)
    return int(np.count_nonzero((x < lo - half) | (x > hi + half)))


def diagnose_summary(ruler: InputRuler, clipped: float, low: float, high: float) -> Diagnosis:
    """``diagnose`` from a summary of the deployed values: the fraction clipped, their min and max (what a streaming
    pass over batches keeps)."""
    lo, hi = ruler.interval
    deployed_range = float(high - min(low, 0.0))
    used = min(1.0, deployed_range / ruler.range_seen) if ruler.range_seen else 0.0
    if clipped > CLIP_LIMIT:
        kind = "clipping"
        reason = (f"{clipped:.1%} of deployed values fall outside the ruler [{lo:.3g}, {hi:.3g}]; "
                  f"the deployed data spans {deployed_range:.3g}")
    elif used < SQUASH_LIMIT:
        kind = "squashing"
        reason = (f"the ruler spans {ruler.range_seen:.3g} but deployed data spans {deployed_range:.3g}: "
                  f"only {used:.1%} of the {ruler.steps} steps are used")
    else:
        kind = "fine"
        reason = (f"no clipping ({clipped:.2%} outside) and {used:.0%} of the {ruler.steps} steps in use")
    return Diagnosis(kind, clipped, used, ruler.range_seen, deployed_range, reason)
