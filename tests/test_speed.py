"""lab.lessons.lesson08_the_quantization_toolbox.speed: honest timings, the synthetic MLP, and the crossover."""
from __future__ import annotations

import numpy as np
import onnx
import pytest

from lab import graph, speed


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
    assert "vs FP32" in speed.format_timings(rows)
    with pytest.raises(ValueError, match="baseline"):
        speed.speedups(rows, baseline="nope")


def _points(speedups):
    return [speed.WidthPoint(w, 8, s, 1.0) for w, s in zip((64, 128, 256, 512), speedups)]


@pytest.mark.parametrize("speedups, expected", [
    ((0.5, 0.9, 1.5, 3.0), 256),
    ((0.5, 1.5, 0.9, 3.0), 512),  # a lucky narrow point does not count: INT8 must stay faster
    ((1.2, 1.3, 1.5, 3.0), 64),
    ((0.5, 0.6, 0.7, 1.05), None),  # 5 % faster is inside the noise margin
])
def test_crossover_is_the_width_from_which_int8_stays_faster(speedups, expected):
    assert speed.crossover(_points(speedups)) == expected


def test_width_sweep_measures_each_width(tmp_path):
    points = speed.width_sweep((16, 32), batch=4, warmup=1, repeats=3)
    assert [p.width for p in points] == [16, 32]
    assert all(p.fp32_ms > 0 and p.int8_ms > 0 for p in points)
    assert points[0].to_dict()["speedup"] == pytest.approx(points[0].fp32_ms / points[0].int8_ms)
    assert "speed-up" in speed.format_sweep(points)
