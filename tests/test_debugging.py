"""Per-tensor SQNR with ORT's qdq_loss_debug: where a QDQ model parts from FP32."""
from __future__ import annotations

import shutil

import pytest

from lab import data
from lab.convert import quantize
from lab.lessons.lesson07_calibrate_the_deployed_representation import debugging, scenarios
from lab.readers import ArrayReader


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    work = tmp_path_factory.mktemp("debugging")
    source = work / "source.onnx"
    shutil.copyfile(data.fixture_path("fp32.onnx"), source)
    quantize(source, work / "daylight.onnx", data.load_split("calibration").pixels, per_channel=True, batch_size=36)
    return work, source, work / "daylight.onnx"


def test_tensor_order_follows_the_graph():
    order = debugging.tensor_order(data.fixture_path("fp32.onnx"))
    assert order[0] == "pixels" and order[-1] == "probabilities"
    assert order.index("fc1.matmul") < order.index("relu1.out") < order.index("fc2.matmul")


def test_flash_error_enters_at_the_input(models):
    work, source, qdq = models
    x = data.load_split("evaluation").pixels
    daylight = debugging.layer_sqnr(source, qdq, ArrayReader(x, 100), work)
    flash = debugging.layer_sqnr(source, qdq, scenarios.flash(x), work)
    assert [r.tensor for r in daylight] == [r.tensor for r in flash]
    assert daylight[0].tensor == "pixels" and daylight[0].vs_fp32 > 40  # the right ruler: error under 1 %
    assert all(r.vs_fp32 > 30 for r in daylight)
    entry = debugging.entry_point(flash, daylight)
    assert entry is not None and entry.tensor == "pixels" and entry.own < 20
    assert debugging.entry_point(daylight, daylight) is None
    assert not list(work.glob(".debug-*"))  # the augmented models are cleaned up
    assert "pixels" in debugging.format_sqnr({"daylight": daylight, "flash": flash})


def test_a_reader_without_rewind_is_refused(models):
    work, source, qdq = models

    class OneShot:
        def get_next(self):
            return None

    with pytest.raises(TypeError, match="rewind"):
        debugging.layer_sqnr(source, qdq, OneShot(), work)
