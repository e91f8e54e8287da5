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
import onnx
from onnx import numpy_helper
from onnxruntime.quantization import CalibrationMethod
from onnxruntime.quantization.calibrate import (
    CalibraterBase,
    CalibrationCacheEncoder,
    HistogramCollector,
    TensorsData,
    create_calibrator,
)
from onnxruntime.quantization.calibrate import entropy as ort_entropy
from onnxruntime.quantization.quant_utils import smooth_distribution

from lab import data, graph, palette
from lab.convert import QuantRecord, quantize
from lab.data import BATCH_SIZE, file_sha256
from lab.measure import Evaluation, input_interval, measure
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
# entropy_threshold scores every candidate at once from the histogram's cumulative sums, then lets ORT's
# own arithmetic decide between the few that could win; it returns the same threshold.
SMOOTH_EPS = 0.0001
"""``smooth_distribution``'s default ``eps``, which ``get_entropy_threshold`` uses."""
SCREEN_TOLERANCE = 3e-5
"""How far a float64 KL divergence may be from ORT's float32 one, relative to ``1 + sum |terms|``.

ORT's float32 pipeline (smoothing, normalising by pairwise sums, ``log``, a pairwise sum of the terms)
errs by well under ``(60 + 60 * sum |terms|)`` float32 units in the last place (2**-24 each), about
``4e-6 * (1 + sum |terms|)``; the tolerance is 8x that, so no candidate that could win is dropped.
The screen bounds ``sum |terms|`` from above by the entropy of p plus the cross-entropy of p and q
(each term is ``pk log pk - pk log qk``, both parts of one sign), which only widens the margin."""
TAYLOR_TERMS = 6
"""Powers of eps1 kept in the expansion of each smoothed count's ``(h - eps1) log(h - eps1)``."""
CHUNK_CELLS = 1 << 15
"""Candidates x quantized bins per vectorised pass: 256 candidates of 128 quantized bins, 256 KB per float64
array, so a pass's temporaries stay in the CPU's cache; the whole 961 x 128 at once (8 MB per array) took twice
as long at 2048 bins."""


def entropy_windows(num_bins: int, num_quantized_bins: int) -> tuple[np.ndarray, np.ndarray]:
    """The histogram slices ``[start, end)`` that ``get_entropy_threshold`` tries, in its loop's order."""
    zero = num_bins // 2
    i = np.arange(num_quantized_bins // 2, zero + 1)
    return zero - i, np.minimum(zero + i + 1, num_bins)


def _window_pq(hist: np.ndarray, cum: np.ndarray, start: int, end: int, num_quantized_bins: int):
    """ORT's ``p`` and ``q`` for the window ``[start, end)``: integers, exactly as ORT computes them.

    ``p``: the window's counts, with everything left of it added to its first bin and everything right
    of it to its last. ``q``: the window's counts (without those outliers) summed into
    ``num_quantized_bins`` groups of ``length // num_quantized_bins`` bins (the last group also takes the
    remainder); each group's sum divided by the number of its bins where ``p`` is non-zero, truncated,
    and written to every bin of the group; remainder bins get 0. ``cum`` is ``hist``'s cumulative sum from 0.
    """
    sliced = np.asarray(hist[start:end], dtype=np.int64)
    p = sliced.copy()
    p[0] += cum[start]
    p[-1] += cum[-1] - cum[end]
    merged = sliced.size // num_quantized_bins
    covered = merged * num_quantized_bins
    quantized = sliced[:covered].reshape(num_quantized_bins, merged).sum(axis=1)
    quantized[-1] += sliced[covered:].sum()
    norm = (p[:covered] != 0).reshape(num_quantized_bins, merged).sum(axis=1)
    q = np.zeros(p.size, dtype=np.int64)
    q[:covered] = np.repeat(np.where(norm != 0, (quantized / np.where(norm != 0, norm, 1)).astype(np.int64), 0), merged)
    return p, q


def _ort_divergence(hist, cum, start: int, end: int, num_quantized_bins: int, dtype) -> np.ndarray:
    """One candidate's KL divergence, computed by ORT's own ``smooth_distribution`` and ``entropy``."""
    p, q = _window_pq(hist, cum, start, end, num_quantized_bins)
    p, q = smooth_distribution(p), smooth_distribution(q)
    if p is None or q is None:
        return np.array(np.inf, dtype=dtype)
    return np.array(ort_entropy(p, q), dtype=dtype)


def _xlogx(x):
    """``x log x`` with 0 for 0, elementwise, in float64."""
    x = np.asarray(x, dtype=np.float64)
    return x * np.log(np.where(x > 0, x, 1.0))


class _OrtFallback(Exception):
    """A window ``smooth_distribution`` would reject (eps1 >= 1): ORT's own loop decides, and raises if it must."""


def _screen(hist: np.ndarray, cum: np.ndarray, starts: np.ndarray, ends: np.ndarray, num_quantized_bins: int):
    """Every candidate window's KL divergence in float64 and its screening tolerance, from cumulative sums.

    With ``N`` counts in all, ``p`` sums to ``N`` and ``q`` to ``Q``, and smoothing keeps both sums, so
    ``KL = A/N - log N - B/N + log Q`` with ``A = sum ps log ps`` and ``B = sum ps log qs`` (``ps``, ``qs``
    the smoothed counts). ``qs`` is one value per quantized group (``q`` is constant on a group), so ``B``
    needs only each group's sum of ``ps``; ``A`` needs ``(h - eps1) log(h - eps1)`` summed over the
    window's non-zero counts, expanded in powers of the window's ``eps1`` (``eps`` times zeros per
    non-zero: at most 0.21 for 2048 bins) and summed with cumulative sums; the remainder's bound is added
    to the tolerance. Only the two end bins, which carry the outliers, are computed one by one.
    """
    n_all = int(cum[-1])
    eps, log_eps = SMOOTH_EPS, np.log(SMOOTH_EPS)
    h = np.asarray(hist, dtype=np.float64)
    nonzero = h != 0
    safe = np.where(nonzero, h, 1.0)
    zero_pad = np.zeros(1)
    cnz = np.concatenate([[0], np.cumsum(nonzero, dtype=np.int64)])
    c_xlogx = np.concatenate([zero_pad, np.cumsum(_xlogx(h))])
    c_log1 = np.concatenate([zero_pad, np.cumsum(np.where(nonzero, np.log(safe) + 1.0, 0.0))])
    c_pow = [np.concatenate([zero_pad, np.cumsum(np.where(nonzero, safe ** (1 - k), 0.0))])
             for k in range(2, TAYLOR_TERMS + 1)]
    kl, tolerance = np.full(starts.size, np.inf), np.zeros(starts.size)
    rows = max(1, CHUNK_CELLS // max(1, num_quantized_bins))
    for a in range(0, starts.size, rows):
        s, e = starts[a:a + rows], ends[a:a + rows]
        length = e - s
        merged = length // num_quantized_bins
        ok = merged > 0  # windows narrower than num_quantized_bins: q is all zeros, KL inf (ORT's None)
        if not ok.any():
            continue
        s, e, length, merged, at = s[ok], e[ok], length[ok], merged[ok], np.arange(a, a + len(ok))[ok]
        left, right = cum[s], n_all - cum[e]
        one = length == 1
        # the end bins of p carry the outliers; one bin (one == True) carries both
        first = hist[s] + left + np.where(one, right, 0)
        last = np.where(one, 0, hist[e - 1] + right)
        d_first = (first != 0).astype(np.int64) - (hist[s] != 0)
        d_last = np.where(one, 0, (last != 0).astype(np.int64) - (hist[e - 1] != 0))
        nz_p = cnz[e] - cnz[s] + d_first + d_last
        # q: group g covers [s + g*merged, s + (g+1)*merged); the remainder up to e belongs to no group's bins
        bounds = np.multiply.outer(merged, np.arange(num_quantized_bins + 1))
        bounds += s[:, None]
        at_bounds, nz_bounds = cum[bounds], cnz[bounds]
        counts = at_bounds[:, 1:] - at_bounds[:, :-1]  # the window's counts per group, outliers left out
        norm = nz_bounds[:, 1:] - nz_bounds[:, :-1]  # non-zero bins of p per group
        covered_end = bounds[:, -1]
        last_in_cover = ~one & (e == covered_end)
        norm[:, 0] += d_first
        norm[last_in_cover, -1] += d_last[last_in_cover]
        ps = counts.astype(np.float64)  # becomes p summed over each group's bins, outliers included, then smoothed
        ps[:, 0] += left + np.where(one, right, 0)
        ps[last_in_cover, -1] += right[last_in_cover]
        counts[:, -1] += cum[e] - cum[covered_end]  # q's last group takes the remainder
        v = (counts / np.maximum(norm, 1)).astype(np.int64)  # q's value on each bin of the group, truncated
        v[norm == 0] = 0
        live = v > 0
        nz_q = merged * np.count_nonzero(live, axis=1)
        q_total = merged * v.sum(axis=1)
        with np.errstate(divide="ignore", invalid="ignore"):
            eps_p = eps * (length - nz_p) / nz_p
            eps_q = eps * (length - nz_q) / nz_q
        empty = (nz_p == 0) | (nz_q == 0)
        if (eps_p[~empty] >= 1).any() or (eps_q[~empty] >= 1).any():
            raise _OrtFallback
        ep, eq = np.where(empty, 0.0, eps_p), np.where(empty, 0.0, eps_q)
        # B = sum over bins of ps log qs: ps summed per live group (qs = q - eps_q there), the rest sit on qs = eps
        ps -= norm * (ep + eps)[:, None]
        ps += (merged * eps)[:, None]
        ps *= live
        log_q = np.log(v - eq[:, None] + ~live)  # 1 - eq where the group is dead (its ps is 0)
        b = np.einsum("ij,ij->i", ps, log_q) + (n_all - ps.sum(axis=1)) * log_eps
        # A = sum over bins of ps log ps: interior non-zero counts by expansion, the end bins exactly
        i0, i1 = s + 1, np.maximum(e - 1, s + 1)
        n_inner = cnz[i1] - cnz[i0]
        series = c_xlogx[i1] - c_xlogx[i0] - ep * (c_log1[i1] - c_log1[i0])
        for k, c in enumerate(c_pow, start=2):
            series += ep ** k / (k * (k - 1)) * (c[i1] - c[i0])
        k = TAYLOR_TERMS + 1
        remainder = n_inner * ep ** k / (k * (k - 1)) / (1.0 - ep)
        ends_exact = _xlogx(np.where(first != 0, first - ep, 0.0)) + _xlogx(np.where(last != 0, last - ep, 0.0))
        a_sum = series + ends_exact + (length - nz_p) * eps * log_eps
        with np.errstate(divide="ignore", invalid="ignore"):
            log_n, log_q_total = np.log(n_all), np.log(np.where(empty, 1, q_total))
            entropy_p = log_n - a_sum / n_all  # -sum pk log pk
            cross = log_q_total - b / n_all  # -sum pk log qk
            kl[at] = np.where(empty, np.inf, cross - entropy_p)
            tolerance[at] = np.where(empty, 0.0, SCREEN_TOLERANCE * (1.0 + entropy_p + cross) + remainder / n_all)
    return kl, tolerance


def entropy_threshold(histogram: tuple, num_quantized_bins: int) -> tuple:
    """ORT's ``HistogramCollector.get_entropy_threshold(histogram, num_quantized_bins)``, vectorised.

    ``histogram`` is the collector's ``(hist, hist_edges, min, max, threshold)``. Returns the same
    ``(low, high)`` ORT returns, bin for bin and float for float (tests/test_calibrators.py checks it):

    1. every candidate window's KL divergence in float64 at once, from the histogram's cumulative sums
       (``_screen``), each with a tolerance for ORT's float32 arithmetic;
    2. the candidates whose divergence is within that tolerance of the smallest could win in ORT's
       arithmetic; only those few are computed again with ORT's own ``smooth_distribution`` and
       ``entropy`` (``_ort_divergence``), and the first smallest wins, as in ORT's ``argmin``;
    3. the winner's edges, clipped to the values seen, as in ORT.
    """
    hist, hist_edges = np.asarray(histogram[0]), histogram[1]
    dtype = hist_edges.dtype
    starts, ends = entropy_windows(hist.size, num_quantized_bins)
    if starts.size == 0:
        return HistogramCollector.get_entropy_threshold(None, histogram, num_quantized_bins)  # ORT's own error
    cum = np.concatenate([[0], np.cumsum(hist, dtype=np.int64)])
    try:
        kl, tolerance = _screen(hist, cum, starts, ends, num_quantized_bins)
    except _OrtFallback:
        return HistogramCollector.get_entropy_threshold(None, histogram, num_quantized_bins)
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


_CALIBRATORS: dict[tuple, CalibraterBase] = {}


def _calibrator(source: str | Path, method: str, options: dict):
    """ORT's calibrator for this model (by its bytes), method and options, created once and emptied for each use.

    ``create_calibrator`` augments the graph, writes it and starts an inference session on it: about 10 ms,
    as long as the calibration itself here. The augmented model depends only on the model, the method and
    the options, so one calibrator serves every data set (lesson 08 calibrates 19 random subsets in a row);
    before each use it is emptied to what a new one holds: no collected outputs, no MinMax ranges so far
    (``calibrate_tensors_range``), no histograms (``collector``).
    """
    key = (file_sha256(source), method, json.dumps(options, sort_keys=True))
    calibrator = _CALIBRATORS.get(key)
    if calibrator is None:
        with tempfile.TemporaryDirectory(prefix="lab-calib-") as tmp, quiet():
            calibrator = create_calibrator(Path(source), augmented_model_path=str(Path(tmp) / "augmented.onnx"),
                                           calibrate_method=CalibrationMethod[method], extra_options=options)
        _CALIBRATORS[key] = calibrator
    calibrator.clear_collected_data()
    if hasattr(calibrator, "calibrate_tensors_range"):
        calibrator.calibrate_tensors_range = None
    if hasattr(calibrator, "collector"):
        calibrator.collector = None
    return calibrator


def _calibrate(source: str | Path, calibration: np.ndarray, method: str, options: dict,
               batch_size: int) -> Calibration:
    calibrator = _calibrator(source, method, options)
    with quiet():
        calibrator.collect_data(ArrayReader(calibration, batch_size))
        collector = getattr(calibrator, "collector", None)
        bins = {name: int(h[0].size) for name, h in collector.histogram_dict.items()} if collector else {}
        if method == "Entropy" and collector is not None:  # Entropy's calibrator always has one
            # ORT's compute_entropy loop, with its per-tensor search replaced by the vectorised copy
            collector.get_entropy_threshold = entropy_threshold
        start = time.perf_counter()
        tensors = calibrator.compute_data()
        seconds = time.perf_counter() - start
    calibrator.clear_collected_data()
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
def method_row(model: str | Path, ev: Evaluation, calibration: str, method: str, options: dict,
               out_dir: str | Path | None = None) -> dict:
    """One row of a methods table; ``file``: the model's path under ``out_dir`` (default: its folder and name)."""
    return {"calibration": calibration, "method": method, "options": dict(options),
            "input_range": input_interval(model), **measure(model, ev), "file": relative(model, out_dir)}


def relative(model: str | Path, out_dir: str | Path | None = None) -> str:
    """``model``'s path under ``out_dir`` with forward slashes (``methods/right-minmax.onnx``), the ``file`` of a
    table's row: ``out_dir / row["file"]`` is the model again. A model outside ``out_dir`` keeps its absolute path
    (which ``out_dir / ...`` leaves as it is); without ``out_dir``: its folder and name."""
    model = Path(model)
    if out_dir is None:
        return Path(model.parent.name, model.name).as_posix()
    try:
        return model.resolve().relative_to(Path(out_dir).resolve()).as_posix()
    except ValueError:
        return model.resolve().as_posix()


def method_label(row: dict) -> str:
    """A methods-table row's name in the lesson's prose: ``Entropy (defaults)``, ``Entropy (2048 bins)``,
    ``Percentile (99.9 %)``, or the method."""
    options = row["options"]
    if "num_bins" in options:
        return f"{row['method']} ({options['num_bins']} bins)"
    if "percentile" in options:
        return f"{row['method']} ({options['percentile']:g} %)"
    return f"{row['method']} (defaults)" if row["method"] in ("Entropy", "Percentile") else row["method"]


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
            rows.append(method_row(model, ev, kind, method, {}, out_dir))
        model = out / f"{kind}-entropy-{entropy_bins}.onnx"
        quantize_calibrated(source, model, calib, "Entropy", {"num_bins": entropy_bins}, batch_size)
        rows.append(method_row(model, ev, kind, "Entropy", {"num_bins": entropy_bins}, out_dir))
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
        rows.append(method_row(model, ev, label, method, {"percentile": percentile} if extra else {}, out_dir))
    model = out / f"entropy-{entropy_bins}.onnx"
    quantize_calibrated(source, model, calib, "Entropy", {"num_bins": entropy_bins}, batch_size)
    rows.append(method_row(model, ev, label, "Entropy", {"num_bins": entropy_bins}, out_dir))
    return rows


RELU_ROWS = {  # label -> (method, extra_options): who decides whether ORT deletes the Relus
    "MinMax": ("MinMax", {}),
    "Distribution": ("Distribution", {}),
    "Distribution, Relus kept": ("Distribution", {"QDQKeepRemovableActivations": True}),
    "MinMax, symmetric ranges": ("MinMax", {"CalibTensorRangeSymmetric": True}),
    "MinMax, symmetric, Relus kept": ("MinMax", {"CalibTensorRangeSymmetric": True,
                                                 "QDQKeepRemovableActivations": True}),
}


IDENTITY_ROW = "FP32, Relus replaced by Identity"
RELUS_DELETED = ("Distribution", "MinMax, symmetric ranges")
"""The ``RELU_ROWS`` with symmetric ranges whose Relus ORT deleted: compared with ``IDENTITY_ROW``."""
RELUS_KEPT = ("Distribution, Relus kept", "MinMax, symmetric, Relus kept")
"""The same with ``QDQKeepRemovableActivations``: compared with MinMax."""


def without_relus(source: str | Path, output: str | Path) -> Path:
    """The FP32 model with every Relu replaced by Identity: what a graph whose Relus were deleted computes in float."""
    model = graph.load(source)
    for node in model.graph.node:
        if node.op_type == "Relu":
            node.op_type = "Identity"
    onnx.save(model, str(output))
    return Path(output)


def relu_rows(source: str | Path, out_dir: str | Path, ev: Evaluation, calibration: np.ndarray,
              batch_size: int = BATCH_SIZE) -> list[dict]:
    """``RELU_ROWS`` converted from the same images: each model's Relu count, max abs error and accuracy; then FP32
    with its Relus replaced by Identity. ORT's QDQ quantizer deletes a Relu when activations are not flagged
    symmetric and ``QDQKeepRemovableActivations`` is off (``QDQRemovableActivation.quantize``), trusting the next
    QuantizeLinear's range to start at 0; it never checks that the calibrated range does. Writes ``relus/*.onnx``."""
    out = Path(out_dir) / "relus"
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for label, (method, extra) in RELU_ROWS.items():
        model = out / (label.lower().replace(", ", "-").replace(" ", "-") + ".onnx")
        with quiet():
            quantize(source, model, calibration, calibrate_method=method, batch_size=batch_size, extra_options=extra)
        rows.append({"model": label, "relus": graph.op_counts(model).get("Relu", 0), **measure(model, ev),
                     "file": relative(model, out_dir)})
    identity = without_relus(source, out / "fp32-relus-as-identity.onnx")
    rows.append({"model": IDENTITY_ROW, "relus": graph.op_counts(identity).get("Relu", 0), **measure(identity, ev),
                 "file": relative(identity, out_dir)})
    return rows


MOVING_AVERAGE_BATCHES = (10, 36, 120, 360)


def moving_average_rows(source: str | Path, out_dir: str | Path, ev: Evaluation, calibration: np.ndarray,
                        batch_sizes: tuple[int, ...] = MOVING_AVERAGE_BATCHES) -> list[dict]:
    """MinMax with ``CalibMovingAverage`` (``extra_options``, passed to the calibrator as ``moving_average``)
    against plain MinMax, at several batch sizes of the same images.

    ORT's ``MinMaxCalibrater.compute_data`` then takes the mean of the batches' minima and maxima
    (``np.nanmean``) instead of the extremes (``np.nanmin`` / ``np.nanmax``), so the batch size changes the
    ruler; one batch of every image gives MinMax's. Writes ``moving-average/*.onnx``.
    """
    out = Path(out_dir) / "moving-average"
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for moving, size in [(False, BATCH_SIZE)] + [(True, b) for b in batch_sizes]:
        model = out / (f"moving-average-b{size}.onnx" if moving else f"minmax-b{size}.onnx")
        quantize(source, model, calibration, batch_size=size,
                 extra_options={"CalibMovingAverage": True} if moving else None)
        rows.append({"method": "MinMax", "moving_average": moving, "batch_size": size,
                     "batches": -(-len(calibration) // size), "input_range": input_interval(model),
                     **{f"{t}_range": tensor_interval(model, t) for t in ("relu1.out", "fc3.out")},
                     **measure(model, ev), "file": relative(model, out_dir)})
    return rows


def tensor_interval(model: str | Path, tensor: str) -> list[float]:
    """The real interval of ``tensor``'s ruler in a QDQ graph, from its ``<tensor>_scale`` and ``_zero_point``."""
    inits = {i.name: i for i in graph.load(model).graph.initializer}
    scale = float(numpy_helper.to_array(inits[f"{tensor}_scale"]).reshape(()))
    zp_init = inits[f"{tensor}_zero_point"]
    lo, hi = (-128, 127) if zp_init.data_type == onnx.TensorProto.INT8 else (0, 255)
    zp = int(numpy_helper.to_array(zp_init).reshape(()))
    return [round((lo - zp) * scale, 3), round((hi - zp) * scale, 3)]


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
    Drawn cheaply (one filled outline per histogram, decade ticks labelled as plain numbers, margins
    fixed in inches instead of a tight-layout pass): matplotlib's default bars, minor log ticks and
    math-text labels took seconds to lay out twice, once here and once when the notebook saves the figure.
    """
    import matplotlib.pyplot as plt  # deferred: 1.8 s to import (python -X importtime); only figures need it
    from matplotlib.ticker import NullLocator, StrMethodFormatter  # deferred: with pyplot, above

    n = len(tensors)
    cols = 2 if n > 1 else 1
    rows = -(-n // cols)
    if fig is None:
        fig = plt.figure(figsize=(11, 4.3 * rows))
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    styles = ["-", "--", "-.", ":", (0, (5, 1)), (0, (1, 1))]
    for ax, tensor in zip(axes, tensors):
        v = np.asarray(values[tensor]).ravel()
        ax.hist(v, bins=120, facecolor="0.88", edgecolor=palette.NEUTRAL, linewidth=0.8, log=True,
                histtype="stepfilled")
        ax.yaxis.set_minor_locator(NullLocator())
        ax.yaxis.set_major_formatter(StrMethodFormatter("{x:g}"))
        for i, (label, r) in enumerate(ranges.items()):
            if tensor in r:
                lo, hi = r[tensor]
                color = palette.CYCLE[i % len(palette.CYCLE)]
                # earlier methods drawn wider: methods that chose the same end show as nested stripes, none hidden
                lw = 1.6 + 0.9 * (len(ranges) - 1 - i)
                ax.axvline(hi, color=color, ls=styles[i % len(styles)], lw=lw, label=f"{label}: [{lo:.3g}, {hi:.3g}]")
                if lo < 0:
                    ax.axvline(lo, color=color, ls=styles[i % len(styles)], lw=lw)
        ax.set_title(f"{tensor}: values seen in calibration, and each method's range", fontsize=10, y=1.0)
        ax.set_xlabel("value")
        ax.set_ylabel("count (log)")
        # below the panel, never over the lines it names
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2, frameon=False)
    for ax in axes[n:]:
        ax.set_visible(False)
    width, height = fig.get_size_inches()
    fig.subplots_adjust(left=0.75 / width, right=1 - 0.15 / width, bottom=1.5 / height, top=1 - 0.35 / height,
                        wspace=0.2, hspace=0.9)
    return fig


def range_explorer(values: dict[str, np.ndarray], ranges: dict[str, dict[str, tuple[float, float]]]):
    """A dropdown over tensors that redraws ``plot_ranges`` for the one picked (a thin widget)."""
    import ipywidgets as widgets  # deferred: 0.6 s to import; only the interactive widget needs it
    import matplotlib.pyplot as plt  # deferred: 1.8 s to import (python -X importtime); only figures need it
    from IPython.display import display  # deferred: only the interactive widget needs it

    from lab.plots import shown  # deferred: lab.plots imports matplotlib; the grader imports this module

    pick = widgets.Dropdown(options=list(values), value=list(values)[0], description="tensor")
    out = widgets.Output()

    def draw(*_):
        with out:
            out.clear_output(wait=True)
            display(shown(plot_ranges(values, ranges, (pick.value,), fig=plt.figure(figsize=(8, 3.4)))))

    pick.observe(draw, names="value")
    draw()
    return widgets.VBox([pick, out])
