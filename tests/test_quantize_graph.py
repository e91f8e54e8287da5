"""Conversions through lab, read back from the graph, tied to ONNX Runtime's own calibrator."""
import onnx
import pytest

from lab import compare, convert, data, graph, ruler
from lab.errors import ModelContractError, NotQuantizedError
from lab.lessons import lesson03_narrow_right_wide as experiment
from lab.lessons import lesson05_qdq_vs_qoperator as lesson05
from lab.workspace import make_workspace


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return make_workspace(tmp_path_factory.mktemp("ws"))


@pytest.fixture(scope="module")
def right(work):
    record = convert.quantize(work / "source.onnx", work / "right.onnx", data.calibration_set("right"), batch_size=36)
    return work / "right.onnx", record


@pytest.mark.parametrize("kind", ["narrow", "right", "wide"])
def test_range_read_from_graph_equals_ort_calibrator(work, kind):
    x = data.calibration_set(kind)
    model = work / f"calib-{kind}.onnx"
    convert.quantize(work / "source.onnx", model, x, batch_size=36)
    lo, hi = convert.calibrated_ranges(work / "source.onnx", x)["pixels"]
    ruler_read = graph.input_ruler(model)
    scale, zp = ruler.scale_zero_point(lo, hi)
    assert ruler_read.scale == pytest.approx(float(scale), rel=1e-6) and ruler_read.zero_point == zp
    assert ruler_read.range_seen == pytest.approx(max(hi, 0) - min(lo, 0), rel=1e-5)


def test_record_holds_what_decided_the_result(right):
    path, record = right
    d = record.to_dict()
    assert d["calibration_samples"] == 360 and d["calibration_batches"] == 10
    assert d["calibration_sha256"] == data.data_sha256(data.calibration_set("right"))
    assert d["settings"]["quant_format"] == "QDQ" and d["settings"]["batch_size"] == 36
    assert set(d["versions"]) == {"python", "onnx", "onnxruntime", "numpy"}
    assert d["output_sha256"] == data.file_sha256(path)


def test_refuses_to_overwrite_its_source(work):
    with pytest.raises(ValueError, match="overwrite its source"):
        convert.quantize(work / "source.onnx", work / "source.onnx", data.calibration_set("right"))


def test_both_formats_share_the_ruler_and_differ_in_ops(work):
    records = lesson05.quantize_both_formats(work / "source.onnx", work, data.calibration_set("right"), batch_size=36)
    qdq, qop = (records[k].output for k in ("QDQ", "QOperator"))
    a, b = graph.input_ruler(qdq), graph.input_ruler(qop)
    assert (a.scale, a.zero_point, a.dtype) == (b.scale, b.zero_point, b.dtype)
    assert graph.quant_format(qdq) == "QDQ" and graph.quant_format(qop) == "QOperator"
    assert "QLinearMatMul" in graph.op_counts(qop) and "MatMul" in graph.op_counts(qdq)
    assert records["QOperator"].calibration_sha256 == records["QDQ"].calibration_sha256


def test_inspect_weights_kernels_and_output_grid(right):
    path, _ = right
    assert graph.weight_dtypes(path).get("INT8", 0) >= 3
    assert graph.weight_dtypes(data.fixture_path("fp32.onnx")) == {"FLOAT": 6}
    kernels = graph.kernels_run(path, data.calibration_set("right")[:4])
    assert "QLinearMatMul" in kernels
    assert graph.output_scale(path) == pytest.approx(1 / 255)
    assert graph.output_scale(data.fixture_path("fp32.onnx")) is None


def test_not_quantized_and_wrong_input_are_named(work):
    with pytest.raises(NotQuantizedError, match="not quantized: fp32.onnx"):
        graph.input_ruler(data.fixture_path("fp32.onnx"))
    with pytest.raises(ModelContractError, match="no graph input named 'image'"):
        graph.input_ruler(data.fixture_path("fp32.onnx"), input_name="image")
    m = onnx.load(data.fixture_path("fp32.onnx"))
    m.graph.output[0].type.tensor_type.shape.dim[1].dim_value = 11
    with pytest.raises(ModelContractError, match=r"expected \[N, 10\]"):
        graph.check_io(m)


def test_diagnosis_and_error_split(work, right):
    x = data.load_split("evaluation").pixels
    narrow = work / "calib-narrow.onnx"
    if not narrow.exists():
        convert.quantize(work / "source.onnx", narrow, data.calibration_set("narrow"))
    assert compare.diagnose(graph.input_ruler(narrow), x).kind == "clipping"
    assert compare.diagnose(graph.input_ruler(right[0]), x).kind == "fine"
    ref, out = compare.predict(work / "source.onnx", x), compare.predict(narrow, x)
    rows = compare.error_by_magnitude(x.max(axis=1), compare.sample_errors(ref, out))
    assert sum(r["count"] for r in rows) == len(x)
    with pytest.raises(ValueError, match="shapes differ"):
        compare.max_abs_error(ref, out[:3])


def _narrow_right_wide(work_dir) -> dict[str, dict]:
    """Lesson 03's experiment as one row per calibration set: the input ruler read back, the error, the diagnosis."""
    work = make_workspace(work_dir)
    evaluation = data.load_split("evaluation")
    x = evaluation.pixels
    reference = compare.predict(work / "source.onnx", x)
    rows = {}
    for kind in data.KINDS:
        model = work / f"{kind}.onnx"
        convert.quantize(work / "source.onnx", model, data.calibration_set(kind), batch_size=data.BATCH_SIZE,
                         **experiment.SETTINGS)
        r = graph.input_ruler(model)
        rows[kind] = {"range_seen": r.range_seen, "diagnosis": compare.diagnose(r, x).kind,
                      **compare.scorecard(model, x, evaluation.labels, reference)}
    return rows


def test_narrow_right_wide_tells_the_story(tmp_path):
    before = data.verify_fixtures()
    rows = _narrow_right_wide(tmp_path)
    assert rows["narrow"]["diagnosis"] == "clipping"
    assert rows["wide"]["diagnosis"] == "squashing"
    assert rows["right"]["diagnosis"] == "fine"
    assert rows["right"]["max_abs_error"] < rows["wide"]["max_abs_error"] < rows["narrow"]["max_abs_error"]
    assert rows["narrow"]["max_abs_error"] > 3 * rows["right"]["max_abs_error"]
    assert rows["wide"]["range_seen"] == pytest.approx(16 * rows["right"]["range_seen"], rel=1e-5)
    assert data.verify_fixtures() == before and all(before.values())


def test_dynamic_quantization_leaves_activations_to_run_time(work):
    record = convert.quantize_dynamic_model(work / "source.onnx", work / "dynamic.onnx")
    assert graph.quant_format(work / "dynamic.onnx") == "dynamic"
    assert record.settings["mode"] == "dynamic" and record.calibration_sha256 is None
