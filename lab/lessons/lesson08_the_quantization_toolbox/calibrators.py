"""Lesson 08's calibration methods: ORT's calibrators run directly, their ranges, and how they handle outliers.

``calibrate`` runs ``create_calibrator`` with options ``quantize_static`` does not pass through
(``num_bins`` ...); ``quantize_calibrated`` converts from exactly those ranges. The tables compare
MinMax, Entropy, Percentile and Distribution on the right and narrow calibration sets and on
calibration images with stuck pixels; ``plot_ranges`` draws where each method puts its range.
"""
from __future__ import annotations

import contextlib
import io
import json
import logging
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from onnxruntime.quantization import CalibrationMethod
from onnxruntime.quantization.calibrate import (CalibrationCacheEncoder, HistogramCollector, TensorsData,
                                                create_calibrator)
from onnxruntime.quantization.calibrate import entropy as ort_entropy
from onnxruntime.quantization.quant_utils import smooth_distribution

from lab import data
from lab.data import BATCH_SIZE, file_sha256
from lab.measure import Evaluation, input_interval, measure
from lab.convert import QuantRecord, quantize
from lab.readers import ArrayReader
from lab.workspace import atomic_write_text

logging.getLogger().setLevel(logging.ERROR)

METHODS = ("MinMax", "Entropy", "Percentile", "Distribution")
ENTROPY_DEFAULTS = {"num_bins": 128, "num_quantized_bins": 128}  # create_calibrator's defaults in ORT 1.32
HOT_PIXEL_RAW = 200  # a stuck sensor element reports a large raw value instead of 0..16


def quiet():
    """Swallow the progress lines ORT's histogram calibrators print ("Collecting tensor data ...")."""
    return contextlib.redirect_stdout(io.StringIO())


# ---- calibration through create_calibrator -------------------------------------------------------
def entropy_candidates(num_bins: int, num_quantized_bins: int = 128) -> int:
    """How many thresholds ORT's ``get_entropy_threshold`` tries for a histogram of ``num_bins`` bins.

    Its loop is ``for i in range(num_quantized_bins // 2, num_bins // 2 + 1)``: one candidate per
    step from the narrowest window (``num_quantized_bins`` bins around zero) to the whole histogram.
    """
    return max(0, num_bins // 2 - num_quantized_bins // 2 + 1)


# ---- Entropy's threshold search, vectorised -------------------------------------------------------
# ORT's HistogramCollector.get_entropy_threshold tries every candidate window in a Python loop (Python's
# sum() over numpy slices, one loop step per quantized bin): about a second per tensor at 2048 bins.
# entropy_threshold builds the same p and q for every candidate at once and returns the same threshold.
SMOOTH_EPS = 0.0001
"""``smooth_distribution``'s default ``eps``, which ``get_entropy_threshold`` uses."""
SCREEN_TOLERANCE = 3e-5
"""How far a float64 KL divergence may be from ORT's float32 one, relative to ``1 + sum |terms|``.

ORT's float32 pipeline (smoothing, normalising by pairwise sums, ``log``, a pairwise sum of the terms)
errs by well under ``(60 + 60 * sum |terms|)`` float32 units in the last place (2**-24 each), about
``4e-6 * (1 + sum |terms|)``; the tolerance is 8x that, so no candidate that could win is dropped."""
CHUNK_CELLS = 1 << 21
"""Candidates x bins per vectorised pass (about 16 MB per float64 array)."""


def entropy_windows(num_bins: int, num_quantized_bins: int) -> tuple[np.ndarray, np.ndarray]:
    """The histogram slices ``[start, end)`` that ``get_entropy_threshold`` tries, in its loop's order."""
    zero = num_bins // 2
    i = np.arange(num_quantized_bins // 2, zero + 1)
    return zero - i, np.minimum(zero + i + 1, num_bins)


def _window_pq(hist: np.ndarray, cum: np.ndarray, start: np.ndarray, end: np.ndarray, num_quantized_bins: int):
    """ORT's ``p`` and ``q`` for windows ``[start, end)`` that merge the same number of bins per quantized bin
    (``length // num_quantized_bins``): one row per candidate, zero past each window's length.

    ``p``: the window's counts, with everything left of it added to its first bin and everything right
    of it to its last. ``q``: the window's counts (without those outliers) summed into
    ``num_quantized_bins`` groups of ``merged`` bins (the last group also takes the remainder), each
    spread evenly, floored, over the group's bins where ``p`` is non-zero; remainder bins get 0.
    Integers, exactly as ORT computes them (``cum`` is ``hist``'s cumulative sum from 0).
    """
    n = hist.size
    length = end - start
    merged = int(length[0]) // num_quantized_bins
    assert (length // num_quantized_bins == merged).all(), "one merge width per call"
    width = int(length.max())
    rows = np.arange(start.size)
    valid = np.arange(width)[None, :] < length[:, None]
    padded = np.concatenate([hist, np.zeros(width, dtype=hist.dtype)])
    sliced = np.lib.stride_tricks.sliding_window_view(padded, width)[start] * valid
    p = sliced.copy()
    p[:, 0] += cum[start]
    p[rows, length - 1] += cum[n] - cum[end]
    covered = merged * num_quantized_bins
    q = np.zeros(p.shape, dtype=np.int64)
    if merged:
        groups = (start.size, num_quantized_bins, merged)
        quantized = sliced[:, :covered].reshape(groups).sum(axis=2, dtype=np.int64)
        quantized[:, -1] += sliced[:, covered:].sum(axis=1, dtype=np.int64)
        norm = (p[:, :covered] != 0).reshape(groups).sum(axis=2, dtype=np.int64)
        spread = norm != 0
        per_bin = np.where(spread, (quantized / np.where(spread, norm, 1)).astype(np.int64), 0)
        q[:, :covered] = np.repeat(per_bin, merged, axis=1)
    return p, q, valid, length


def _smoothed(x: np.ndarray, valid: np.ndarray, length: np.ndarray):
    """``smooth_distribution`` per row, in float64: (values, all-zero rows, eps1 per row)."""
    nonzeros = (valid & (x != 0)).sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        eps1 = SMOOTH_EPS * (length - nonzeros) / nonzeros
    smooth = np.where(valid, np.where(x != 0, x - eps1[:, None], SMOOTH_EPS), 0.0)
    return smooth, nonzeros == 0, eps1


def _ort_divergence(hist, cum, start: int, end: int, num_quantized_bins: int, dtype) -> np.ndarray:
    """One candidate's KL divergence, computed by ORT's own ``smooth_distribution`` and ``entropy``."""
    p, q, _, length = _window_pq(hist, cum, np.array([start]), np.array([end]), num_quantized_bins)
    p, q = smooth_distribution(p[0, :length[0]]), smooth_distribution(q[0, :length[0]])
    if p is None or q is None:
        return np.array(np.inf, dtype=dtype)
    return np.array(ort_entropy(p, q), dtype=dtype)


def entropy_threshold(histogram: tuple, num_quantized_bins: int) -> tuple:
    """ORT's ``HistogramCollector.get_entropy_threshold(histogram, num_quantized_bins)``, vectorised.

    ``histogram`` is the collector's ``(hist, hist_edges, min, max, threshold)``. Returns the same
    ``(low, high)`` ORT returns, bin for bin and float for float (tests/test_calibrators.py checks it):

    1. every candidate window's ``p`` and ``q`` at once (``_window_pq``, exact integers), and its KL
       divergence in float64;
    2. the candidates whose float64 divergence is within ``SCREEN_TOLERANCE`` of the smallest could win
       in ORT's float32 arithmetic; only those few are computed again with ORT's own
       ``smooth_distribution`` and ``entropy``, and the first smallest wins, as in ORT's ``argmin``;
    3. the winner's edges, clipped to the values seen, as in ORT.
    """
    hist, hist_edges = np.asarray(histogram[0]), histogram[1]
    dtype = hist_edges.dtype
    starts, ends = entropy_windows(hist.size, num_quantized_bins)
    if starts.size == 0:
        return HistogramCollector.get_entropy_threshold(None, histogram, num_quantized_bins)  # ORT's own error
    cum = np.concatenate([[0], np.cumsum(hist, dtype=np.int64)])
    kl, tolerance = np.full(starts.size, np.inf), np.zeros(starts.size)
    merged = (ends - starts) // num_quantized_bins  # windows narrower than num_quantized_bins: q is 0, KL inf
    for m in np.unique(merged[merged > 0]):
        same = np.flatnonzero(merged == m)
        rows = max(1, CHUNK_CELLS // int((ends[same] - starts[same]).max()))
        for chunk in (same[a:a + rows] for a in range(0, same.size, rows)):
            p, q, valid, length = _window_pq(hist, cum, starts[chunk], ends[chunk], num_quantized_bins)
            ps, p_empty, p_eps1 = _smoothed(p, valid, length)
            qs, q_empty, q_eps1 = _smoothed(q, valid, length)
            if (p_eps1[~p_empty] >= 1).any() or (q_eps1[~q_empty] >= 1).any():
                # smooth_distribution asserts eps1 < 1 (a window with 10,000 zero bins per non-zero one)
                return HistogramCollector.get_entropy_threshold(None, histogram, num_quantized_bins)
            with np.errstate(divide="ignore", invalid="ignore"):
                pk = ps / ps.sum(axis=1, keepdims=True)
                qk = qs / qs.sum(axis=1, keepdims=True)
                terms = np.where(valid, pk * np.log(np.where(valid, pk / qk, 1.0)), 0.0)
            empty = p_empty | q_empty
            kl[chunk] = np.where(empty, np.inf, terms.sum(axis=1))
            tolerance[chunk] = np.where(empty, 0.0, SCREEN_TOLERANCE * (1.0 + np.abs(terms).sum(axis=1)))
    finite = np.isfinite(kl)
    best = 0  # every divergence infinite: ORT's argmin picks the first
    if finite.any():
        ceiling = np.min(kl[finite] + tolerance[finite])
        ceiling += 4 * float(np.spacing(np.abs(np.asarray(ceiling, dtype=dtype))))  # ORT rounds to the edges' dtype
        shortlist = np.flatnonzero(finite & (kl - tolerance <= ceiling))
        exact = [_ort_divergence(hist, cum, int(starts[k]), int(ends[k]), num_quantized_bins, dtype) for k in shortlist]
        best = int(shortlist[int(np.argmin(np.array(exact, dtype=np.float64)))])
    threshold = (hist_edges[starts[best]], hist_edges[ends[best]])
    min_value, max_value = histogram[2], histogram[3]
    if threshold[0] < min_value:
        threshold = (min_value, threshold[1])
    if threshold[1] > max_value:
        threshold = (threshold[0], max_value)
    return threshold


@dataclass
class Calibration:
    """What ``create_calibrator`` / ``collect_data`` / ``compute_data`` produced."""

    method: str
    options: dict
    tensors: TensorsData
    bins: dict[str, int]
    seconds: float
    _cache_text: str | None = field(default=None, repr=False, compare=False)

    @property
    def ranges(self) -> dict[str, tuple[float, float]]:
        """Tensor name -> (low, high) chosen by the method."""
        return {name: (float(np.asarray(td.range_value[0]).reshape(-1)[0]),
                       float(np.asarray(td.range_value[1]).reshape(-1)[0]))
                for name, td in self.tensors.data.items()}

    def cache_text(self) -> str:
        """The calibration cache ``save_tensors_data`` writes for these ranges, byte for byte, serialized once.

        ORT's ``save_tensors_data`` streams the JSON through the pure-Python encoder (``json.dump``), about half
        a second for 2048-bin histograms; ``json.dumps`` with the same encoder class gives the same text.
        """
        if self._cache_text is None:
            payload = self.tensors.to_dict()
            payload["smooth_quant"] = False  # save_tensors_data's default
            self._cache_text = json.dumps(payload, cls=CalibrationCacheEncoder)
        return self._cache_text

    def candidates(self) -> dict[str, int]:
        """Entropy only: thresholds tried per tensor, from the histogram sizes actually built."""
        nq = int(self.options.get("num_quantized_bins", ENTROPY_DEFAULTS["num_quantized_bins"]))
        return {name: entropy_candidates(n, nq) for name, n in self.bins.items()}


_CALIBRATIONS: dict[tuple, Calibration] = {}


def calibrate(source: str | Path, calibration: np.ndarray, method: str = "Entropy",
              options: dict | None = None, batch_size: int = BATCH_SIZE) -> Calibration:
    """Run ORT's calibrator with options ``quantize_static`` does not pass through (``num_bins`` ...).

    The augmented model goes to a temporary folder, never next to ``source``. Calibration is
    deterministic, so a repeat call with the same model bytes, data, method, options and batch size
    returns the first result (and its ``seconds``) instead of searching again: the lesson's tables
    share one 2048-bin Entropy search instead of repeating it. Entropy's threshold search is
    ``entropy_threshold`` (ORT's search, vectorised: the same thresholds); everything else is ORT's.
    """
    options = dict(options or {})
    key = (file_sha256(source), data.data_sha256(np.asarray(calibration)), method,
           json.dumps(options, sort_keys=True), int(batch_size))
    if key not in _CALIBRATIONS:
        _CALIBRATIONS[key] = _calibrate(source, calibration, method, options, batch_size)
    return _CALIBRATIONS[key]


def _calibrate(source: str | Path, calibration: np.ndarray, method: str, options: dict,
               batch_size: int) -> Calibration:
    with tempfile.TemporaryDirectory(prefix="lab-calib-") as tmp, quiet():
        calibrator = create_calibrator(Path(source), augmented_model_path=str(Path(tmp) / "augmented.onnx"),
                                       calibrate_method=CalibrationMethod[method], extra_options=options)
        calibrator.collect_data(ArrayReader(calibration, batch_size))
        collector = getattr(calibrator, "collector", None)
        bins = {name: int(h[0].size) for name, h in collector.histogram_dict.items()} if collector else {}
        if method == "Entropy":
            # ORT's compute_entropy loop, with its per-tensor search replaced by the vectorised copy
            collector.get_entropy_threshold = entropy_threshold
        start = time.perf_counter()
        tensors = calibrator.compute_data()
        seconds = time.perf_counter() - start
    return Calibration(method, options, tensors, bins, round(seconds, 2))


def quantize_calibrated(source: str | Path, output: str | Path, calibration: np.ndarray, method: str,
                        options: dict, batch_size: int = BATCH_SIZE, **settings) -> QuantRecord:
    """Calibrate with ``calibrate(...)`` options, then convert from those ranges.

    The ranges are saved as ``<output stem>.calibration.json`` and handed to ``quantize_static``
    as its calibration cache, so the converter uses exactly these ranges and never recalibrates.
    """
    output = Path(output)
    cal = calibrate(source, calibration, method, options, batch_size)
    cache = output.with_name(output.stem + ".calibration.json")
    atomic_write_text(cache, cal.cache_text())  # what save_tensors_data(cal.tensors, cache) writes
    record = quantize(source, output, None, calibrate_method=method, calibration_cache_path=cache, **settings)
    record.settings["calibrator_options"] = dict(options)
    record.calibration_sha256 = data.data_sha256(calibration)
    record.calibration_samples = int(len(calibration))
    return record


# ---- calibration methods -------------------------------------------------------------------------
def method_row(model: str | Path, ev: Evaluation, calibration: str, method: str, options: dict) -> dict:
    return {"calibration": calibration, "method": method, "options": dict(options),
            "input_range": input_interval(model), **measure(model, ev)}


def methods_table(source: str | Path, out_dir: str | Path, ev: Evaluation, sets: tuple[str, ...] = ("right", "narrow"),
                  entropy_bins: int = 2048, batch_size: int = BATCH_SIZE) -> list[dict]:
    """Each calibration method with ``quantize_static``'s defaults, plus Entropy with ``entropy_bins`` bins.

    Writes ``methods/<set>-<method>.onnx``.
    """
    out = Path(out_dir) / "methods"
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for kind in sets:
        calib = data.calibration_set(kind)
        for method in METHODS:
            model = out / f"{kind}-{method.lower()}.onnx"
            with quiet():
                quantize(source, model, calib, calibrate_method=method, batch_size=batch_size)
            rows.append(method_row(model, ev, kind, method, {}))
        model = out / f"{kind}-entropy-{entropy_bins}.onnx"
        quantize_calibrated(source, model, calib, "Entropy", {"num_bins": entropy_bins}, batch_size)
        rows.append(method_row(model, ev, kind, "Entropy", {"num_bins": entropy_bins}))
    return rows


def hot_pixel_raw(raw: np.ndarray, n_images: int = 5, value: int = HOT_PIXEL_RAW, seed: int = 0) -> np.ndarray:
    """A copy of raw 0..16 images where ``n_images`` of them carry one stuck pixel at ``value``.

    A faulty sensor element reports its saturated 8-bit reading; the deployed preprocessing
    (raw / 16) does not clip, so that pixel arrives as ``value / 16`` (12.5) instead of at most 1.
    """
    raw = np.array(raw, dtype=np.uint8).reshape(len(raw), -1)
    rng = np.random.default_rng(seed)
    images = rng.choice(len(raw), size=n_images, replace=False)
    raw[images, rng.integers(0, raw.shape[1], size=n_images)] = value
    return raw


def outlier_table(source: str | Path, out_dir: str | Path, ev: Evaluation, n_hot: int = 5,
                  percentile: float = 99.9, entropy_bins: int = 2048, seed: int = 0,
                  batch_size: int = BATCH_SIZE) -> list[dict]:
    """The right calibration images with ``n_hot`` stuck pixels: MinMax against Percentile and Entropy.

    Measured on the clean evaluation set, as deployed. Writes ``outliers/*.onnx``.
    """
    out = Path(out_dir) / "outliers"
    out.mkdir(parents=True, exist_ok=True)
    calib = data.preprocess(hot_pixel_raw(data.load_split("calibration").raw, n_hot, seed=seed))
    label = f"right + {n_hot} hot pixels"
    rows = []
    for method, extra in (("MinMax", {}), ("Percentile", {}), ("Percentile", {"CalibPercentile": percentile})):
        model = out / f"{method.lower()}{'-' + str(percentile) if extra else ''}.onnx"
        with quiet():
            quantize(source, model, calib, calibrate_method=method, batch_size=batch_size, extra_options=extra)
        rows.append(method_row(model, ev, label, method, {"percentile": percentile} if extra else {}))
    model = out / f"entropy-{entropy_bins}.onnx"
    quantize_calibrated(source, model, calib, "Entropy", {"num_bins": entropy_bins}, batch_size)
    rows.append(method_row(model, ev, label, "Entropy", {"num_bins": entropy_bins}))
    return rows


def entropy_finding(source: str | Path, calibration: np.ndarray, batch_size: int = BATCH_SIZE) -> dict:
    """What ORT's Entropy defaults do here: thresholds tried per tensor, and whether the ranges equal MinMax's."""
    entropy = calibrate(source, calibration, "Entropy", {}, batch_size)
    minmax = calibrate(source, calibration, "MinMax", {}, batch_size)
    tried = entropy.candidates()
    same = all(np.allclose(entropy.ranges[k], minmax.ranges[k], rtol=0, atol=1e-6) for k in minmax.ranges)
    return {"num_bins": ENTROPY_DEFAULTS["num_bins"], "num_quantized_bins": ENTROPY_DEFAULTS["num_quantized_bins"],
            "histogram_bins": sorted(set(entropy.bins.values())),
            "candidates_per_tensor": sorted(set(tried.values())),
            "formula_candidates": entropy_candidates(**ENTROPY_DEFAULTS),
            "same_ranges_as_minmax": bool(same)}


# ---- the ranges, drawn ---------------------------------------------------------------------------
PLOT_TENSORS = ("pixels", "relu1.out", "relu2.out", "fc3.out")


def plot_ranges(values: dict[str, np.ndarray], ranges: dict[str, dict[str, tuple[float, float]]],
                tensors: tuple[str, ...] = PLOT_TENSORS, fig=None):
    """Histograms of FP32 tensor values (calibration set), with each method's chosen range as lines.

    ``values``: tensor -> values; ``ranges``: method label -> tensor -> (low, high).
    One panel per tensor; counts on a log scale so the rare large values stay visible.
    """
    import matplotlib.pyplot as plt  # deferred: 1.8 s to import (python -X importtime); only figures need it

    n = len(tensors)
    cols = 2 if n > 1 else 1
    rows = -(-n // cols)
    if fig is None:
        fig = plt.figure(figsize=(11, 3.2 * rows))
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    styles = ["-", "--", "-.", ":", (0, (5, 1)), (0, (1, 1))]
    for ax, tensor in zip(axes, tensors):
        v = np.asarray(values[tensor]).ravel()
        ax.hist(v, bins=120, color="lightsteelblue", log=True)
        for i, (label, r) in enumerate(ranges.items()):
            if tensor in r:
                lo, hi = r[tensor]
                color = f"C{i}"
                ax.axvline(hi, color=color, ls=styles[i % len(styles)], lw=1.6, label=f"{label}: [{lo:.3g}, {hi:.3g}]")
                if lo < 0:
                    ax.axvline(lo, color=color, ls=styles[i % len(styles)], lw=1.6)
        ax.set_title(f"{tensor}: values seen in calibration, and each method's range")
        ax.set_xlabel("value")
        ax.set_ylabel("count (log)")
        ax.legend(fontsize=7, loc="upper right")
    for ax in axes[n:]:
        ax.set_visible(False)
    fig.tight_layout()
    return fig


def range_explorer(values: dict[str, np.ndarray], ranges: dict[str, dict[str, tuple[float, float]]]):
    """A dropdown over tensors that redraws ``plot_ranges`` for the one picked (a thin widget)."""
    import ipywidgets as widgets  # deferred: 0.6 s to import; only the interactive widget needs it
    import matplotlib.pyplot as plt  # deferred: 1.8 s to import (python -X importtime); only figures need it

    pick = widgets.Dropdown(options=list(values), value=list(values)[0], description="tensor")
    out = widgets.Output()

    def draw(*_):
        with out:
            out.clear_output(wait=True)
            fig = plot_ranges(values, ranges, (pick.value,), fig=plt.figure(figsize=(8, 3.4)))
            plt.show(fig)

    pick.observe(draw, names="value")
    draw()
    return widgets.VBox([pick, out])
