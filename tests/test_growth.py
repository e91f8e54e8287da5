"""lab.lessons.lesson04_more_batches: the batch-growing loop of lesson 04, with real ONNX Runtime conversions."""
from __future__ import annotations

import numpy as np
import pytest

from lab import compare, data, ruler
from lab.errors import ReaderContractError
from lab.lessons import lesson04_more_batches as growth
from lab.readers import ArrayReader
from lab.workspace import make_workspace

BATCH = 8


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return make_workspace(tmp_path_factory.mktemp("growth-ws"))


@pytest.fixture(scope="module")
def evaluation(work):
    split = data.load_split("evaluation")
    return split.pixels, split.labels, compare.predict(work / "source.onnx", split.pixels)


@pytest.fixture(scope="module")
def grown(work, evaluation):
    x, labels, reference = evaluation
    stream = growth.narrow_batches(8, BATCH, seed=3)
    seen = []
    rows = growth.grow(work / "source.onnx", work / "growth", [1, 2, 4, 8], lambda p: ArrayReader(p, BATCH), stream,
                       kind="narrow", batch_size=BATCH, x=x, labels=labels, reference=reference, progress=seen.append)
    rows += growth.grow(work / "source.onnx", work / "growth", [1], lambda p: ArrayReader(p, BATCH),
                        data.calibration_set("right"), kind="right", batch_size=BATCH, x=x, labels=labels,
                        reference=reference, progress=seen.append)
    return stream, rows, seen


def test_doubling_counts():
    assert growth.doubling_counts(1) == [1]
    assert growth.doubling_counts(16) == [1, 2, 4, 8, 16]
    assert growth.doubling_counts(512)[-3:] == [128, 256, 512]
    assert growth.doubling_counts(12) == [1, 2, 4, 8, 12]
    with pytest.raises(ValueError, match="at least 1"):
        growth.doubling_counts(0)


def test_model_name_is_zero_padded():
    assert growth.model_name("narrow", 4) == "narrow-004.onnx"
    assert growth.model_name("right", 512) == "right-512.onnx"


def test_calibration_range_always_includes_zero():
    assert ruler.calibration_range(np.array([[0.2, 0.5]], np.float32)) == pytest.approx(0.5)
    assert ruler.calibration_range(np.array([[-1.0, 2.0]], np.float32)) == pytest.approx(3.0)


def test_one_model_per_count_on_nested_prefixes(work, grown):
    stream, rows, seen = grown
    assert [(r["kind"], r["batches"]) for r in rows] == [("narrow", 1), ("narrow", 2), ("narrow", 4),
                                                          ("narrow", 8), ("right", 1)]
    assert seen == rows, "progress is called once per model, with its row"
    for r in rows[:4]:
        assert (work / "growth" / r["model"]).exists()
        assert r["samples"] == r["batches"] * BATCH
        assert r["calibration_sha256"] == data.data_sha256(stream[:r["samples"]])
        assert r["model_sha256"] == data.file_sha256(work / "growth" / r["model"])


def test_range_seen_is_the_calibration_range_and_never_shrinks(grown):
    _, rows, _ = grown
    narrow = [r for r in rows if r["kind"] == "narrow"]
    for r in rows:
        assert r["range_seen"] == pytest.approx(r["calibration_range"], abs=r["scale"])
    ranges = [r["range_seen"] for r in narrow]
    assert ranges == sorted(ranges)
    assert max(ranges) <= data.NARROW_GAIN + 1e-6
    assert rows[-1]["range_seen"] == pytest.approx(1.0, abs=1e-6)


def test_narrow_stays_worse_than_right(grown):
    _, rows, _ = grown
    v = growth.verdict(rows)
    assert v["wrong_stays_worse"] is True
    assert v["wrong_most_batches"] == 8 and v["right_batches"] == [1]
    assert v["wrong_best_max_abs_error"] > 5 * v["right_worst_max_abs_error"]
    assert v["right_worst_accuracy"] > v["wrong_most_batches_accuracy"]


def test_verdict_can_say_no_and_needs_both_kinds():
    rows = [{"kind": "narrow", "batches": 1, "max_abs_error": 0.1, "accuracy": 0.9},
            {"kind": "right", "batches": 1, "max_abs_error": 0.2, "accuracy": 0.9}]
    assert growth.verdict(rows)["wrong_stays_worse"] is False
    with pytest.raises(ValueError, match="both kinds"):
        growth.verdict(rows[:1])


def test_stream_too_short_is_named(work, evaluation):
    x, labels, reference = evaluation
    with pytest.raises(ValueError, match="need 32 samples; the narrow stream has 16"):
        growth.grow(work / "source.onnx", work / "short", [4], lambda p: ArrayReader(p, BATCH),
                    growth.narrow_batches(2, BATCH), kind="narrow", batch_size=BATCH, x=x, labels=labels,
                    reference=reference)


class FirstBatchOnly(ArrayReader):
    """A broken reader: stops after its first batch."""

    def get_next(self):
        return super().get_next() if self._next == 0 else None


def test_reader_that_drops_samples_is_caught(work, evaluation):
    x, labels, reference = evaluation
    with pytest.raises(ReaderContractError, match="served 8 samples for narrow x 2 batches; expected 16"):
        growth.grow(work / "source.onnx", work / "broken", [2], lambda p: FirstBatchOnly(p, BATCH),
                    growth.narrow_batches(2, BATCH), kind="narrow", batch_size=BATCH, x=x, labels=labels,
                    reference=reference)


def test_format_table_has_one_line_per_row(grown):
    _, rows, _ = grown
    lines = growth.format_table(rows).splitlines()
    assert len(lines) == 2 + len(rows)
    assert lines[-1].split()[:2] == ["right", "1"]


def test_hidden_rulers_show_a_small_right_calibration_ends_sooner_than_the_whole_set(tmp_path):
    """Fewer images hold fewer extremes: one batch's hidden rulers end at or before the 360 images' own."""
    from lab.convert import quantize

    source = make_workspace(tmp_path) / "source.onnx"
    right = data.calibration_set("right")
    quantize(source, tmp_path / "one.onnx", ArrayReader(right[:BATCH], BATCH))
    quantize(source, tmp_path / "all.onnx", ArrayReader(right, BATCH))
    x = data.load_split("evaluation").pixels
    rows = growth.hidden_rulers(source, {"1 batch": tmp_path / "one.onnx", "all 360": tmp_path / "all.onnx"}, x)
    assert [r["tensor"] for r in rows] == list(growth.HIDDEN)
    for r in rows:
        assert r["1 batch"]["ruler"][1] <= r["all 360"]["ruler"][1]
        assert r["1 batch"]["clipped_fraction"] >= r["all 360"]["clipped_fraction"]
    assert any(r["1 batch"]["clipped_fraction"] > 0 for r in rows), "one batch misses some extremes"
    table = growth.format_hidden_rulers(rows)
    assert "relu1.out" in table and "1 batch: ruler" in table and "all 360: ruler" in table


def test_check_series_names_the_missing_series_and_the_folder(tmp_path):
    rows = [{"kind": kind, "batches": n, "model": growth.model_name(kind, n)}
            for kind, counts in (("narrow", (1, 2, 4)), ("right", (1,))) for n in counts]
    for r in rows:
        (tmp_path / r["model"]).write_bytes(b"")
    with pytest.raises(growth.GrowthCheckFailed,
                       match=r"rows hold no right models: call lesson.grow\(..., kind='right'\)"):
        growth.check_series(rows[:3], [1, 2, 4], [1], tmp_path)
    with pytest.raises(growth.GrowthCheckFailed, match=r"the narrow series has batch counts \[1, 2, 4\]: .* up to "
                                                       r"MAX_BATCHES \(8\)"):
        growth.check_series(rows, [1, 2, 4, 8], [1], tmp_path)
    assert growth.check_series(rows, [1, 2, 4], [1], tmp_path).startswith("4 models in " + tmp_path.name + "/")
    (tmp_path / rows[0]["model"]).unlink()
    with pytest.raises(growth.GrowthCheckFailed, match="narrow-001.onnx is not in"):
        growth.check_series(rows, [1, 2, 4], [1], tmp_path)


def test_narrow_stream_is_seeded_prefix_stable_and_narrow():
    short, long = growth.narrow_batches(2, 8, seed=3), growth.narrow_batches(4, 8, seed=3)
    assert short.shape == (16, 64) and long.shape == (32, 64)
    assert long.max() <= data.NARROW_GAIN + 1e-6
    np.testing.assert_array_equal(growth.narrow_batches(2, 8, seed=3), short)
    np.testing.assert_array_equal(long[:16], short)
    assert long.min() >= 0 and (long.max(axis=1) > 0.4 * data.NARROW_GAIN * 0.99).mean() > 0.5
