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
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from onnxruntime.quantization import CalibrationMethod
from onnxruntime.quantization.calibrate import TensorsData, create_calibrator, save_tensors_data

from lab import data
from lab.data import file_sha256
from lab.measure import Evaluation, input_interval, measure
from lab.quantize import QuantRecord, quantize
from lab.readers import ArrayReader

logging.getLogger().setLevel(logging.ERROR)

METHODS = ("MinMax", "Entropy", "Percentile", "Distribution")
ENTROPY_DEFAULTS = {"num_bins": 128, "num_quantized_bins": 128}  # create_calibrator's defaults in ORT 1.32
HOT_PIXEL_RAW = 200  # a stuck sensor element reports a large raw value instead of 0..16
BATCH_SIZE = 36


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


@dataclass
class Calibration:
    """What ``create_calibrator`` / ``collect_data`` / ``compute_data`` produced."""

    method: str
    options: dict
    tensors: TensorsData
    bins: dict[str, int]
    seconds: float

    @property
    def ranges(self) -> dict[str, tuple[float, float]]:
        """Tensor name -> (low, high) chosen by the method."""
        return {name: (float(np.asarray(td.range_value[0]).reshape(-1)[0]),
                       float(np.asarray(td.range_value[1]).reshape(-1)[0]))
                for name, td in self.tensors.data.items()}

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
    share one 2048-bin Entropy search instead of repeating it.
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
    cache.unlink(missing_ok=True)
    save_tensors_data(cal.tensors, cache)
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
    import matplotlib.pyplot as plt

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
    import ipywidgets as widgets
    import matplotlib.pyplot as plt

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
