"""python -m lab audit on the CNN, on the MLP and on a model the lab did not build; and what it refuses.

Real conversions and real runs: the CNN fixture quantized QDQ per-channel and QOperator after ORT's
pre-processing, the MLP's committed bad-calibration model, and onnx's PyTorch-exported test_Conv2d_padding
model upgraded to opset 17 and quantized here.
"""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper, version_converter
from onnxruntime.quantization import QuantFormat, QuantType, quantize_static
from onnxruntime.quantization.shape_inference import quant_pre_process

from lab import audit, camera, data, graph, kernels
from lab.readers import ArrayReader
from lab.tools import audit as audit_tool

TORCH_CONV = Path(onnx.__file__).parent / "backend" / "test" / "data" / "pytorch-converted" / "test_Conv2d_padding"


@pytest.fixture(scope="module")
def cnn(tmp_path_factory) -> dict[str, Path]:
    """The CNN fixture, its QDQ per-channel model, its pre-processed QOperator model, and its evaluation data."""
    folder = tmp_path_factory.mktemp("cnn")
    source, pre = folder / "source.onnx", folder / "pre.onnx"
    shutil.copy(camera.model_path(), source)
    quant_pre_process(str(source), str(pre), skip_symbolic_shape=True)
    calibration = camera.load_split("calibration").image
    quantize_static(str(source), str(folder / "qdq.onnx"), ArrayReader(calibration, 36, camera.INPUT_NAME),
                    quant_format=QuantFormat.QDQ, per_channel=True)
    quantize_static(str(pre), str(folder / "qop.onnx"), ArrayReader(calibration, 36, camera.INPUT_NAME),
                    quant_format=QuantFormat.QOperator, per_channel=True, activation_type=QuantType.QUInt8)
    evaluation = camera.load_split("evaluation")
    np.savez(folder / "evaluation.npz", image=evaluation.image, labels=evaluation.labels)
    return {"fp32": source, "qdq": folder / "qdq.onnx", "qop": folder / "qop.onnx",
            "data": folder / "evaluation.npz"}


@pytest.fixture(scope="module")
def cnn_doc(cnn) -> dict:
    return audit.audit(cnn["fp32"], cnn["qdq"], cnn["data"], cnn["data"])


@pytest.fixture(scope="module")
def mlp(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("mlp")
    evaluation = data.load_split("evaluation")
    np.save(folder / "pixels.npy", evaluation.pixels)
    np.save(folder / "labels.npy", evaluation.labels)
    return {"fp32": data.fixture_path("fp32.onnx"), "int8": data.fixture_path("bad-calibration.onnx"),
            "data": folder / "pixels.npy", "labels": folder / "labels.npy"}


def by_tensor(doc: dict) -> dict[str, dict]:
    return {r["tensor"]: r for r in doc["rulers"]}


# --- the CNN -------------------------------------------------------------------------------------------------------

def test_the_cnn_audit_reads_every_ruler_back(cnn, cnn_doc):
    rulers = by_tensor(cnn_doc)
    assert list(rulers)[0] == camera.INPUT_NAME and len(rulers) == 11
    model = graph.load(cnn["qdq"])
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    for tensor in ("image", "conv1.out", "conv2.out", "fc.out"):
        assert rulers[tensor]["scale"] == pytest.approx(float(inits[f"{tensor}_scale"]))
        assert rulers[tensor]["zero_point"] == int(inits[f"{tensor}_zero_point"])
    assert all(r["measured"] and r["diagnosis"] == "fine" for r in rulers.values())   # calibrated as deployed


def test_the_cnn_audit_computes_both_families(cnn, cnn_doc):
    families = {f["family"]: f for f in cnn_doc["families"]}
    x = np.load(cnn["data"])["image"]
    labels = np.load(cnn["data"])["labels"]
    for family, row in families.items():
        out = kernels.emulate(cnn["qdq"], x, family, camera.INPUT_NAME)
        assert row["accuracy"] == pytest.approx(float(np.mean(out.argmax(axis=1) == labels)))
        assert row["computed_on"] == ("this machine's kernels" if family == kernels.machine_family() else "emulation")
    assert families["saturating"]["max_abs_error"] > families["exact"]["max_abs_error"]
    assert cnn_doc["fp32"]["accuracy"] >= 0.95


def test_the_cnn_audit_finds_where_int8_parts_from_fp32(cnn_doc):
    rows = cnn_doc["parting"]["rows"]
    assert [r["tensor"] for r in rows][:2] == ["image", "conv1.out"]
    assert all(np.isfinite(r["vs_fp32_db"]) for r in rows)
    assert {r["tensor"] for r in rows if r["relu_in_ruler"]} == {"relu1.out", "relu2.out"}


def test_a_qoperator_cnn_has_its_rulers_from_the_qlinear_ops(cnn):
    doc = audit.audit(cnn["fp32"], cnn["qop"], cnn["data"])
    rulers = by_tensor(doc)
    assert rulers["bn1.out"]["measured_on"] == "relu1.out"   # the converter removed the Relu: its ruler does it
    assert rulers["bn1.out"]["diagnosis"] == "fine"
    assert rulers["gap.out"]["node"].endswith("GlobalAveragePool") or rulers["gap.out"]["node"]
    assert doc["parting"]["rows"] == [] and "QDQ models" in doc["parting"]["note"]
    assert all("agreement" in f and "accuracy" not in f for f in doc["families"])   # no labels given


def test_the_text_report_and_the_json(cnn, capsys):
    assert audit_tool.main([str(cnn["fp32"]), str(cnn["qdq"]), "--data", str(cnn["data"]),
                            "--labels", str(cnn["data"])]) == 0
    text = capsys.readouterr().out
    for part in ("rulers (11, read from the INT8 graph)", "error by input size", "where INT8 parts from FP32",
                 "kernel families:", "exact (", "saturating (", "recipe (the model's metadata):"):
        assert part in text, part
    assert audit_tool.main([str(cnn["fp32"]), str(cnn["qdq"]), "--data", str(cnn["data"]), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["schema"] == audit.SCHEMA and doc["data"]["samples"] == 400


# --- the MLP: the committed bad calibration ---------------------------------------------------------------------

def test_json_has_no_infinity():
    doc = {"rows": [{"own_db": float("inf"), "vs_fp32_db": 12.5}], "x": [float("nan"), 1.0]}
    assert json.loads(json.dumps(audit.jsonable(doc), allow_nan=False)) == {
        "rows": [{"own_db": None, "vs_fp32_db": 12.5}], "x": [None, 1.0]}


def test_the_mlp_audit_diagnoses_the_bad_calibration(mlp):
    doc = audit.audit(mlp["fp32"], mlp["int8"], mlp["data"], mlp["labels"])
    rulers = by_tensor(doc)
    ruler = graph.input_ruler(mlp["int8"])
    assert (rulers["pixels"]["scale"], rulers["pixels"]["zero_point"]) == (ruler.scale, ruler.zero_point)
    assert rulers["pixels"]["diagnosis"] == "squashing"               # calibrated on zeros: scale 1
    assert rulers["relu1.out"]["diagnosis"] == "clipping"
    assert all(f["accuracy"] < 0.6 for f in doc["families"]) and doc["fp32"]["accuracy"] > 0.95
    assert doc["parting"]["first_below"] == "pixels"


# --- a model the lab did not build --------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def torch_conv(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("torch")
    model = version_converter.convert_version(onnx.load(TORCH_CONV / "model.onnx"), 17)
    for value in (model.graph.input[0], model.graph.output[0]):
        value.type.tensor_type.shape.dim[0].dim_param = "N"
    onnx.save(model, folder / "fp32.onnx")
    rng = np.random.default_rng(7)
    x = rng.normal(0, 1, (64, 3, 6, 6)).astype(np.float32)
    quantize_static(str(folder / "fp32.onnx"), str(folder / "qdq.onnx"), ArrayReader(x[:32], 8, "0"),
                    quant_format=QuantFormat.QDQ, per_channel=True)
    np.save(folder / "x.npy", x)
    return {"fp32": folder / "fp32.onnx", "int8": folder / "qdq.onnx", "data": folder / "x.npy"}


def test_a_pytorch_conv_is_audited_on_both_families(torch_conv):
    doc = audit.audit(torch_conv["fp32"], torch_conv["int8"], torch_conv["data"])
    assert [r["tensor"] for r in doc["rulers"]] == ["0", "3"]
    assert all(f["computed_on"] for f in doc["families"])
    assert "agreement" not in doc["families"][0]                      # a 4-D output: the error only
    assert doc["families"][0]["max_abs_error"] >= 0 and doc["parting"]["rows"]


def test_an_op_the_kernels_emulation_does_not_cover_runs_in_onnx_runtime(mlp, tmp_path):
    """An Identity (not in lab.kernels' table) no longer stops the other family: lab.hybrid runs it in ORT, and the
    answer is the one lab.kernels gives for the model without it."""
    m = onnx.load(str(mlp["int8"]))
    last = m.graph.node[-1]
    last.output[0] = "probabilities_before_identity"
    m.graph.node.append(helper.make_node("Identity", ["probabilities_before_identity"], ["probabilities"],
                                         name="identity"))
    onnx.save(m, tmp_path / "with_identity.onnx")
    assert kernels.uncovered(m) == ["Identity"]
    doc = audit.audit(mlp["fp32"], tmp_path / "with_identity.onnx", mlp["data"])
    plain = audit.audit(mlp["fp32"], mlp["int8"], mlp["data"])
    for with_identity, without in zip(doc["families"], plain["families"]):
        assert with_identity["computed_on"] and with_identity["max_abs_error"] == without["max_abs_error"]


# --- what it refuses, by name -------------------------------------------------------------------------------------

def run_audit(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lab", "audit", *args], capture_output=True, text=True,
                          timeout=120)


def test_bad_models_and_data_are_named_with_what_was_expected(mlp, cnn, tmp_path):
    not_a_model = tmp_path / "notes.onnx"
    not_a_model.write_text("hello")
    wrong = tmp_path / "wrong.npy"
    np.save(wrong, np.zeros((5, 63), np.float32))
    short = tmp_path / "short.npy"
    np.save(short, np.zeros(3, np.int64))
    cases = [((str(tmp_path / "missing.onnx"), str(mlp["int8"]), "--data", str(mlp["data"])),
              r"missing\.onnx: no such file; expected the FP32 ONNX model"),
             ((str(mlp["fp32"]), str(not_a_model), "--data", str(mlp["data"])),
              r"notes\.onnx: not an ONNX model .*expected the INT8 model"),
             ((str(mlp["fp32"]), str(mlp["int8"]), "--data", str(wrong)),
              r"wrong\.npy: the array is float32 \[5, 63\]; expected the model's input 'pixels': numbers shaped "
              r"\[N, 64\]"),
             ((str(mlp["fp32"]), str(mlp["int8"]), "--data", str(mlp["data"]), "--labels", str(short)),
              r"short\.npy: int64 \[3\]; expected 'labels': 400 integers"),
             ((str(mlp["fp32"]), str(cnn["qdq"]), "--data", str(mlp["data"])),
              r"qdq\.onnx: its input is 'image', the FP32 model's 'pixels'")]
    for args, message in cases:
        done = run_audit(*args)
        assert done.returncode == 2, (args, done.stderr)
        assert re.search(message, done.stderr), (message, done.stderr)
        assert "Traceback" not in done.stderr
