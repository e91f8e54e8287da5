"""lab.lessons.lesson08_the_quantization_toolbox.calibrators.entropy_threshold picks exactly the thresholds ORT's
Entropy calibrator picks.

The reference is ORT's own ``HistogramCollector.get_entropy_threshold`` (its method does not use
``self``): the same ``(low, high)`` floats, bin for bin, on the histograms lesson 08 builds from the
FP32 fixture and on random distributions (hypothesis, derandomized, bounded examples).
"""
from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from onnxruntime.quantization import CalibrationMethod
from onnxruntime.quantization.calibrate import HistogramCollector, create_calibrator, save_tensors_data

from lab import data
from lab.lessons.lesson08_the_quantization_toolbox import calibrators
from lab.readers import ArrayReader
from lab.workspace import make_workspace


def ort_threshold(histogram, num_quantized_bins):
    return HistogramCollector.get_entropy_threshold(None, histogram, num_quantized_bins)


def assert_same_threshold(histogram, num_quantized_bins):
    expected = ort_threshold(histogram, num_quantized_bins)
    got = calibrators.entropy_threshold(histogram, num_quantized_bins)
    assert len(got) == 2
    for e, g in zip(expected, got):
        assert np.asarray(g).dtype == np.asarray(e).dtype
        assert np.asarray(g).tobytes() == np.asarray(e).tobytes(), (expected, got)  # bit for bit
    return got


# --- lesson 08's tensors ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def source(tmp_path_factory):
    return make_workspace(tmp_path_factory.mktemp("calibrators")) / "source.onnx"


def lesson_set(kind: str) -> np.ndarray:
    if kind == "hot pixels":  # outlier_table's calibration images
        return data.preprocess(calibrators.hot_pixel_raw(data.load_split("calibration").raw, 5, seed=0))
    return data.calibration_set(kind)


def histograms(source: Path, calibration: np.ndarray, num_bins: int) -> dict:
    """The collector's histograms, built as lesson 08's ``calibrate`` builds them (ORT's calibrator)."""
    with tempfile.TemporaryDirectory() as tmp, calibrators.quiet():
        calibrator = create_calibrator(source, augmented_model_path=str(Path(tmp) / "augmented.onnx"),
                                       calibrate_method=CalibrationMethod.Entropy, extra_options={"num_bins": num_bins})
        calibrator.collect_data(ArrayReader(calibration, data.BATCH_SIZE))
        return calibrator.collector.histogram_dict


def test_lesson_tensors_at_512_bins(source):
    hists = histograms(source, lesson_set("right"), 512)
    assert len(hists) >= 10
    for histogram in hists.values():
        assert_same_threshold(histogram, 128)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["right", "narrow", "hot pixels"])
def test_lesson_tensors_at_2048_bins(source, kind):
    """The histograms lesson 08's tables search (ENTROPY_BINS = 2048); ORT's loop takes about a second per tensor."""
    for histogram in histograms(source, lesson_set(kind), 2048).values():
        assert_same_threshold(histogram, 128)


def test_calibrate_uses_the_vectorised_search_and_gets_orts_ranges(source, monkeypatch):
    right = lesson_set("right")[:144]
    options = {"num_bins": 512}
    with tempfile.TemporaryDirectory() as tmp, calibrators.quiet():
        calibrator = create_calibrator(source, augmented_model_path=str(Path(tmp) / "augmented.onnx"),
                                       calibrate_method=CalibrationMethod.Entropy, extra_options=options)
        calibrator.collect_data(ArrayReader(right, data.BATCH_SIZE))
        expected = calibrator.compute_data()

    def ort_loop(*_):
        raise AssertionError("calibrate ran ORT's Python search")

    monkeypatch.setattr(HistogramCollector, "get_entropy_threshold", ort_loop)
    got = calibrators._calibrate(source, right, "Entropy", options, data.BATCH_SIZE).tensors
    assert got.calibration_method == expected.calibration_method
    assert set(got.data) == set(expected.data)
    for name, td in expected.data.items():
        for e, g in zip(td.range_value, got.data[name].range_value):
            assert np.asarray(g).tobytes() == np.asarray(e).tobytes(), name
        for attr in ("hist", "bins"):  # what else ORT's compute_entropy records: the histogram and its edges
            assert np.array_equal(getattr(got.data[name], attr), getattr(td, attr)), (name, attr)


@pytest.mark.parametrize("method, options", [("Entropy", {"num_bins": 512}), ("Percentile", {}), ("MinMax", {})])
def test_cache_text_is_what_save_tensors_data_writes(source, tmp_path, method, options):
    cal = calibrators._calibrate(source, lesson_set("right")[:72], method, options, data.BATCH_SIZE)
    save_tensors_data(cal.tensors, tmp_path / "ort.json")
    assert cal.cache_text().encode() == (tmp_path / "ort.json").read_bytes()
    assert cal.cache_text() is cal.cache_text()  # serialized once


# --- random distributions --------------------------------------------------------------------------

def as_histogram(hist: np.ndarray, rng: np.random.Generator) -> tuple:
    """A collector-shaped tuple (hist, edges, min, max, threshold) around ``hist``'s symmetric edges."""
    threshold = np.float32(rng.uniform(0.01, 50))
    edges = np.linspace(-threshold, threshold, hist.size + 1, dtype=np.float32)
    lo, hi = sorted(rng.uniform(-1.2, 1.2, 2) * threshold)
    return hist.astype(np.int64), edges, np.float32(lo), np.float32(hi), threshold


@st.composite
def count_histograms(draw):
    """Counts with the shapes that stress the search: sparse, spiky, flat, all-zero, heavy."""
    num_bins = draw(st.integers(2, 320))
    num_quantized_bins = draw(st.sampled_from([1, 2, 3, 4, 5, 7, 8, 16, 31, 64, 128]))
    assume(num_bins // 2 >= num_quantized_bins // 2)  # otherwise ORT has no candidate (and raises)
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    shape = draw(st.sampled_from(["uniform", "sparse", "spikes", "flat", "zero", "heavy"]))
    if shape == "uniform":
        hist = rng.integers(0, 6, num_bins)
    elif shape == "sparse":
        hist = (rng.random(num_bins) < rng.uniform(0.01, 0.5)) * rng.integers(1, 10_000, num_bins)
    elif shape == "spikes":
        hist = np.zeros(num_bins, dtype=np.int64)
        hist[rng.integers(0, num_bins, rng.integers(1, 5))] = rng.integers(1, 100, 1)
    elif shape == "flat":
        hist = np.full(num_bins, rng.integers(1, 4))
    elif shape == "zero":
        hist = np.zeros(num_bins, dtype=np.int64)
    else:
        hist = np.bincount(np.minimum(rng.geometric(rng.uniform(0.02, 0.5), 5_000) - 1, num_bins - 1),
                           minlength=num_bins)[::draw(st.sampled_from([1, -1]))]
    return as_histogram(np.asarray(hist), rng), num_quantized_bins


@settings(max_examples=150, derandomize=True, database=None, deadline=None)
@given(count_histograms())
def test_random_counts(case):
    histogram, num_quantized_bins = case
    assert_same_threshold(histogram, num_quantized_bins)


@st.composite
def collected_histograms(draw):
    """Histograms built by ORT's own collector from random float32 batches (growing and merging bins)."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    num_bins = draw(st.sampled_from([64, 128, 200, 256, 300]))
    num_quantized_bins = draw(st.sampled_from([16, 32, 64, 128]))
    kind = draw(st.sampled_from(["normal", "laplace", "relu", "lognormal", "outliers"]))
    collector = HistogramCollector("entropy", False, num_bins, num_quantized_bins, None, None)
    for batch in range(draw(st.integers(1, 4))):
        scale = rng.uniform(0.1, 3) * (1 + batch / 2)  # later batches may widen the histogram
        if kind == "normal":
            values = rng.normal(rng.uniform(-1, 1), scale, 2_000)
        elif kind == "laplace":
            values = rng.laplace(0, scale, 2_000)
        elif kind == "relu":
            values = np.maximum(rng.normal(0, scale, 2_000), 0)
        elif kind == "lognormal":
            values = rng.lognormal(0, scale / 4, 2_000)
        else:
            values = rng.normal(0, 1, 2_000)
            values[rng.integers(0, values.size, 3)] = rng.uniform(20, 200, 3)
        with calibrators.quiet():
            collector.collect({"t": values.astype(np.float32)})
    histogram = collector.histogram_dict["t"]
    assume(histogram[0].size <= 1_000)  # a far wider later batch can grow it a hundredfold; ORT's loop is slow there
    assume(histogram[0].size // 2 >= num_quantized_bins // 2)  # otherwise ORT has no candidate (and raises)
    return histogram, num_quantized_bins


@settings(max_examples=60, derandomize=True, database=None, deadline=None)
@given(collected_histograms())
def test_random_collected_distributions(case):
    histogram, num_quantized_bins = case
    assert_same_threshold(histogram, num_quantized_bins)


def test_windows_are_orts_loop():
    starts, ends = calibrators.entropy_windows(2048, 128)
    assert starts.size == calibrators.entropy_candidates(2048, 128) == 961
    assert (starts[0], ends[0]) == (960, 1089) and (starts[-1], ends[-1]) == (0, 2048)
