"""lab.lessons.lesson05_qdq_vs_qoperator: QDQ vs QOperator from one calibration, on real models, and what lesson 05
teaches about them."""
from __future__ import annotations

import numpy as np
import pytest

from lab import compare, data, graph
from lab.lessons import lesson05_qdq_vs_qoperator as formats
from lab.workspace import make_workspace


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    work = make_workspace(tmp_path_factory.mktemp("formats-ws"))
    out = work / "formats"
    out.mkdir()
    formats.quantize_both_formats(work / "source.onnx", out, data.calibration_set("right"), batch_size=36)
    split = data.load_split("evaluation")
    reference = compare.predict(work / "source.onnx", split.pixels)
    report = formats.compare_formats(out / "model.qdq.onnx", out / "model.qoperator.onnx",
                                     split.pixels, split.labels, reference)
    return out, split, reference, report


def test_scorecard_of_the_reference_itself(pair):
    out, split, reference, _ = pair
    card = compare.scorecard(out.parent / "source.onnx", split.pixels, split.labels, reference)
    assert card["max_abs_error"] == 0.0
    assert card["accuracy"] == pytest.approx(np.mean(reference.argmax(1) == split.labels))


def test_output_difference_counts():
    a = np.array([[0.9, 0.1], [0.4, 0.6]])
    b = np.array([[0.9, 0.1], [0.7, 0.3]])
    d = formats.output_difference(a, b)
    assert d["elements"] == 4
    assert d["max_abs_difference"] == pytest.approx(0.3)
    assert d["fraction_elements_differ"] == 0.5
    assert d["predictions_differ"] == 1
    assert d["sample_with_max_difference"] == 1
    with pytest.raises(ValueError, match="shape"):
        formats.output_difference(a, b[:1])


def test_difference_bands_add_up_and_split_at_two_steps():
    step = 1 / 255
    a = np.zeros((1, 4))
    b = np.array([[0.0, step, 2 * step, 3 * step]])
    bands = formats.difference_bands(a, b, step)
    assert bands["grid_bound"] == pytest.approx(2 * step)
    assert (bands["identical"], bands["within_grid"], bands["beyond_grid"]) == (0.25, 0.5, 0.25)
    assert formats.difference_bands(b, b, step)["identical"] == 1.0


def test_softmax_kernel_steps_floor_the_float32_inverse():
    assert formats.softmax_kernel_steps(np.float32(1 / 256)) == 256
    assert formats.softmax_kernel_steps(np.float32(1 / 255)) == 254


def test_same_ruler_same_error_level_different_outputs(pair):
    _, _, _, report = pair
    q, o = report["formats"]["QDQ"], report["formats"]["QOperator"]
    assert report["same_input_ruler"] is True
    assert q["range_seen"] == pytest.approx(1.0, abs=1e-6)
    assert (q["quant_format"], o["quant_format"]) == ("QDQ", "QOperator")
    assert 0.5 < q["max_abs_error"] / o["max_abs_error"] < 2
    assert q["accuracy"] == pytest.approx(o["accuracy"], abs=0.01)
    d = report["difference"]
    assert d["max_abs_difference"] > 0 and 0 < d["fraction_elements_differ"] < 0.5
    b = report["bands"]
    assert b["identical"] + b["within_grid"] + b["beyond_grid"] == pytest.approx(1.0)
    assert b["within_grid"] > b["beyond_grid"]


def test_what_lesson_05_teaches_still_holds_in_this_onnxruntime(pair):
    """The Softmax grids and the kernels that ran, as measured; a new ORT version that changes them fails here."""
    out, split, _, report = pair
    q, o = report["formats"]["QDQ"], report["formats"]["QOperator"]
    assert 1 / q["output_scale"] == pytest.approx(255, abs=1e-3)
    assert o["output_scale"] == 1 / 256
    assert (q["softmax_kernel_steps"], o["softmax_kernel_steps"]) == (254, 256)
    qdq_out = compare.predict(out / "model.qdq.onnx", split.pixels)
    assert qdq_out.max() <= 254 / 255 + 1e-6, "QDQ's QLinearSoftmax multiplies by floor(1/scale) = 254"
    assert q["top_probability"] == pytest.approx(254 / 255, abs=1e-6)
    assert o["top_probability"] == pytest.approx(255 / 256, abs=1e-6)
    assert q["mean_probability_sum"] == pytest.approx(254 / 255, abs=2 / 255)
    assert q["kernels_run"].get("Add") == 3 and "QLinearAdd" not in q["kernels_run"]
    assert o["kernels_run"].get("QLinearAdd") == 3 and "Add" not in o["kernels_run"]
    assert q["kernels_run"].get("QLinearSoftmax") == o["kernels_run"].get("QLinearSoftmax") == 1
    assert o["nodes"] < q["nodes"] and o["size_bytes"] < q["size_bytes"]
    assert q["op_counts"] == graph.op_counts(out / "model.qdq.onnx")


def test_tables_name_both_formats(pair):
    _, _, _, report = pair
    table = formats.format_table(report)
    assert "1/255" in table and "1/256" in table
    assert formats.format_difference(report).count("\n") == 6
