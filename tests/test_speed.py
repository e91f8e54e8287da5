"""lab.speed: honest timings (rounds, their median and range, time / FP32's and whether it is beyond the noise), the
synthetic MLP, and the crossover."""
from __future__ import annotations

import numpy as np
import onnx
import pytest

from lab import evidence, graph, speed


def test_synthetic_mlp_is_a_valid_fp32_mlp_with_the_asked_shape():
    model = speed.synthetic_mlp(48, depth=3, seed=1)
    onnx.checker.check_model(model)
    assert graph.op_counts(model) == {"Add": 3, "MatMul": 3, "Relu": 2}
    dims = {i.name: list(i.dims) for i in model.graph.initializer}
    assert dims["fc1.weight"] == [48, 48] and dims["fc2.weight"] == [48, 48] and dims["fc3.weight"] == [48, 10]
    x = np.random.default_rng(0).random((5, 48), dtype=np.float32)
    y = graph.session(model).run(None, {speed.SYNTHETIC_INPUT: x})[0]
    assert y.shape == (5, 10) and np.all(np.isfinite(y))


def test_synthetic_mlp_is_seeded():
    a, b, c = (speed.synthetic_mlp(16, seed=s) for s in (3, 3, 4))
    assert a.SerializeToString() == b.SerializeToString()
    assert a.SerializeToString() != c.SerializeToString()


def test_synthetic_mlp_rejects_empty_sizes():
    with pytest.raises(ValueError, match="width"):
        speed.synthetic_mlp(0)


def test_quantize_synthetic_gives_int8_weights_and_close_outputs(tmp_path):
    fp32 = speed.synthetic_mlp(64, seed=0)
    int8 = speed.quantize_synthetic(fp32, tmp_path)
    assert graph.quant_format(int8) == "QDQ"
    assert graph.weight_dtypes(int8).get("INT8", 0) >= 3
    x = np.random.default_rng(5).random((32, 64), dtype=np.float32)
    y32 = graph.session(fp32).run(None, {"x": x})[0]
    y8 = graph.session(str(int8)).run(None, {"x": x})[0]
    assert np.abs(y8 - y32).max() < 0.1 * np.abs(y32).max()


def test_time_model_counts_its_runs_and_reports_a_median(tmp_path):
    model = speed.synthetic_mlp(32, seed=0)
    x = np.zeros((8, 32), np.float32)
    t = speed.time_model(model, x, name="m", warmup=2, repeats=7)
    assert (t.model, t.batch, t.threads, t.warmup, t.repeats) == ("m", 8, 1, 2, 7)
    assert 0 < t.median_ms <= t.p90_ms
    assert t.throughput == pytest.approx(8 / (t.median_ms / 1e3))
    with pytest.raises(ValueError, match="repeats"):
        speed.time_model(model, x, repeats=0)


def test_benchmark_times_every_model_at_every_batch_and_ratios_against_the_baseline():
    models = {"FP32": speed.synthetic_mlp(16, seed=0), "other": speed.synthetic_mlp(32, n_in=16, seed=0)}
    x = np.random.default_rng(0).random((3, 16), dtype=np.float32)
    rows = speed.benchmark(models, x, (1, 5), warmup=1, repeats=3)
    assert [(r.model, r.batch) for r in rows] == [("FP32", 1), ("other", 1), ("FP32", 5), ("other", 5)]
    ratio = speed.speedups(rows)
    assert ratio[("FP32", 1)] == 1.0 and ratio[("FP32", 5)] == 1.0
    assert ratio[("other", 5)] == pytest.approx(rows[2].median_ms / rows[3].median_ms)
    assert "time / FP32's" in speed.format_timings(rows) and "vs FP32" not in speed.format_timings(rows)
    with pytest.raises(ValueError, match="baseline"):
        speed.speedups(rows, baseline="nope")


def _points(speedups):
    return [speed.WidthPoint(w, 8, s, 1.0) for w, s in zip((64, 128, 256, 512), speedups)]


@pytest.mark.parametrize("speedups, expected", [
    ((0.5, 0.9, 1.5, 3.0), 256),
    ((0.5, 1.5, 0.9, 3.0), 512),  # a lucky narrow point does not count: INT8 must stay faster
    ((1.2, 1.3, 1.5, 3.0), 64),
    ((0.5, 0.6, 0.7, 1.05), None),  # 5 % faster in one round is inside the noise margin
])
def test_crossover_of_single_rounds_is_the_width_from_which_int8_stays_faster_by_the_margin(speedups, expected):
    assert speed.crossover(_points(speedups)) == expected


def _ranged(ranges):
    """Points of five rounds with the given (low, high) of INT8's time / FP32's, the median between them."""
    return [speed.WidthPoint(w, 8, 1.0, (lo + hi) / 2, lo, hi, 5) for w, (lo, hi) in zip((64, 128, 256, 512), ranges)]


@pytest.mark.parametrize("ranges, expected", [
    (((1.1, 1.2), (0.5, 0.6), (0.4, 0.45), (0.3, 0.32)), 128),
    (((1.1, 1.2), (0.9, 1.02), (0.4, 0.45), (0.3, 0.32)), 256),  # a range that holds 1 is within noise
    (((1.1, 1.2), (0.95, 0.97), (0.4, 0.45), (0.3, 0.32)), 128),  # 4 % faster in every round: beyond the noise
    (((0.5, 0.6), (0.4, 0.5), (0.9, 1.1), (0.3, 0.32)), 512),
])
def test_crossover_of_rounds_needs_the_whole_range_under_one(ranges, expected):
    assert speed.crossover(_ranged(ranges)) == expected


def test_width_sweep_measures_each_width_in_rounds(tmp_path):
    points = speed.width_sweep((16, 32), batch=4, warmup=1, repeats=3, rounds=3)
    assert [p.width for p in points] == [16, 32]
    assert all(p.fp32_ms > 0 and p.int8_ms > 0 and p.rounds == 3 for p in points)
    r = points[0].time_ratio
    assert r.median == pytest.approx(points[0].int8_ms / points[0].fp32_ms) and r.low <= r.median <= r.high
    assert points[0].to_dict()["time_ratio"] == r.to_dict() and "speedup" not in points[0].to_dict()
    table = speed.format_sweep(points)
    assert "INT8 time / FP32's" in table and "speed-up" not in table
    with pytest.raises(ValueError, match="rounds"):
        speed.width_sweep((16,), rounds=0)


# --- rounds: the median decides, the range says whether it is beyond the noise -----------------------------------

def _timing(*samples):
    return evidence.timing(list(samples))


@pytest.mark.parametrize("model, verdict", [
    ((0.80, 0.81, 0.82, 0.81, 0.80), "faster"),
    ((1.20, 1.25, 1.30, 1.22, 1.27), "slower"),
    ((0.97, 1.00, 1.04, 0.99, 1.01), "within noise"),  # the two quartile ranges overlap
    ((0.99, 1.00, 1.03, 1.04, 1.05), "within noise"),  # slower by the medians, but the quartile ranges overlap
    ((1.10, 1.11, 1.12, 1.11, 3.00), "slower"),  # one round slowed by another process does not swamp the range
])
def test_a_time_ratio_is_within_noise_where_the_two_ranges_overlap(model, verdict):
    fp32 = _timing(0.99, 1.0, 1.03, 1.0, 1.01)
    mine = _timing(*model)
    r = speed.TimeRatio.of(mine, fp32)
    assert r.rounds == 5 and r.median == pytest.approx(np.median(model) / 1.0)
    assert (r.low, r.high) == pytest.approx((mine.low / fp32.high, mine.high / fp32.low))  # lab.evidence.ratio
    assert r.against(1.0) == verdict
    assert r.within_noise(1.0) is (verdict == "within noise")
    assert r.to_dict() == {"median": round(r.median, 4), "low": round(r.low, 4), "high": round(r.high, 4),
                           "rounds": 5}
    assert speed.TimeRatio.from_dict(r.to_dict()).text() == r.text()


def test_one_round_is_never_called_within_or_beyond_the_noise():
    one = speed.TimeRatio.one(1.187)
    assert (one.median, one.low, one.high, one.rounds) == (1.187, 1.187, 1.187, 1)
    assert not one.measured and not one.within_noise(1.187) and not one.above(1.0) and not one.below(2.0)
    assert one.against(1.0) == "one round: noise unknown" and one.text() == "1.19 (1 round)"


def test_timed_rounds_time_every_model_in_every_round_and_ratios_carry_the_range():
    models = {"FP32": speed.synthetic_mlp(16, seed=0), "other": speed.synthetic_mlp(32, n_in=16, seed=0)}
    x = np.random.default_rng(0).random((3, 16), dtype=np.float32)
    rows = speed.timed_rounds(models, x, (1, 5), rounds=3, warmup=1, repeats=3)
    assert [(r.model, r.batch, r.ms.rounds) for r in rows] == [("FP32", 1, 3), ("other", 1, 3), ("FP32", 5, 3),
                                                               ("other", 5, 3)]
    assert all(r.ms.low <= r.ms.median <= r.ms.high for r in rows)
    d = rows[3].to_dict()
    assert {"model", "batch", "median_ms", "throughput", "warmup", "repeats", "rounds", "low_ms", "high_ms"} <= set(d)
    ratio = speed.ratios(rows)
    assert ratio[("other", 5)].median == pytest.approx(rows[3].ms.median / rows[2].ms.median)
    assert ratio[("FP32", 1)].within_noise(1.0)  # a model is always within noise of itself
    table = speed.format_series(rows)
    assert "time / FP32's" in table and "quartiles ms" in table and "verdict" in table and "vs FP32" not in table
    assert ratio[("other", 5)].text() in table
    with pytest.raises(ValueError, match="rounds"):
        speed.timed_rounds(models, x, (1,), rounds=0)
    with pytest.raises(ValueError, match="baseline"):
        speed.ratios(rows, baseline="nope")


def test_the_table_says_within_noise_where_the_ranges_overlap():
    ms = {"FP32": (1.0, 1.01, 1.03), "same": (0.99, 1.0, 1.05), "slow": (2.0, 2.1, 2.2)}
    rows = [speed.Series(m, 256, 1, 5, 30, _timing(*v)) for m, v in ms.items()]
    lines = {line.split()[0]: line for line in speed.format_series(rows).splitlines()[2:]}
    assert lines["same"].endswith("within noise") and lines["slow"].endswith("slower")
    assert speed.TimeRatio.of(rows[2].ms, rows[0].ms).text() in lines["slow"]
