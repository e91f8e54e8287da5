"""python -m lab audit on the CNN, on the MLP and on a model the lab did not build; and what it refuses.

Real conversions and real runs: the CNN fixture quantized QDQ per-channel and QOperator after ORT's
pre-processing, the MLP's committed bad-calibration model, and onnx's PyTorch-exported test_Conv2d_padding
model upgraded to opset 17 and quantized here.
"""
from __future__ import annotations

import json
import os
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

from lab import audit, camera, compare, data, graph, hybrid, kernels, op_time, reconvert, sensitivity, weight_rulers
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
    assert list(rulers)[0] == camera.INPUT_NAME and len(rulers) == 14
    model = graph.load(cnn["qdq"])
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    for tensor in ("image", "conv1.out", "dwconv.out", "residual.out", "conv2.out", "fc.out"):
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
    assert {r["tensor"] for r in rows if r["relu_in_ruler"]} == {"relu1.out", "relu_dw.out", "relu2.out"}


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
    for part in ("rulers (14, read from the INT8 graph)", "error by input size", "where INT8 parts from FP32",
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


# --- validation before measuring: one line that names it, never a traceback --------------------------------------

def mlp_copy(folder: Path, name: str, change) -> Path:
    """The FP32 MLP fixture with ``change(model)`` applied, saved as ``name``."""
    m = onnx.load(str(data.fixture_path("fp32.onnx")))
    change(m)
    onnx.save(m, folder / name)
    return folder / name


def _set_initializer(m: onnx.ModelProto, name: str, value: np.ndarray) -> None:
    tensor = next(i for i in m.graph.initializer if i.name == name)
    tensor.CopyFrom(numpy_helper.from_array(value.astype(np.float32), name))


def _weight(m: onnx.ModelProto, name: str) -> np.ndarray:
    return numpy_helper.to_array(next(i for i in m.graph.initializer if i.name == name))


def test_each_bad_pair_or_data_is_refused_in_one_line(mlp, tmp_path):
    other_input = mlp_copy(tmp_path, "other-input.onnx",
                           lambda m: setattr(m.graph.input[0].type.tensor_type.shape.dim[1], "dim_value", 63))
    other_shape = mlp_copy(tmp_path, "other-shape.onnx", lambda m: _set_initializer(
        m, "fc2.weight", np.zeros((64, 16))))
    nan = tmp_path / "nan.npy"
    pixels = np.load(mlp["data"])
    pixels[3, 5] = np.nan
    np.save(nan, pixels)
    external = tmp_path / "external"
    external.mkdir()
    model = onnx.load(str(data.fixture_path("fp32.onnx")))
    onnx.save(model, external / "fp32.onnx", save_as_external_data=True, all_tensors_to_one_file=True,
              location="fp32.weights", size_threshold=0)
    (external / "fp32.weights").unlink()
    cases = [((str(mlp["fp32"]), str(mlp["fp32"]), "--data", str(mlp["data"])),
              r"fp32\.onnx: no quantized node .* this is a float model; expected the INT8 model"),
             ((str(mlp["int8"]), str(mlp["int8"]), "--data", str(mlp["data"])),
              r"bad-calibration\.onnx: it has quantized nodes \(QDQ\); expected the FP32 model first"),
             ((str(other_input), str(mlp["int8"]), "--data", str(mlp["data"])),
              r"its input 'pixels' is float32 \[N, 64\], the FP32 model's float32 \[N, 63\]"),
             ((str(other_shape), str(mlp["int8"]), "--data", str(mlp["data"])),
              r"weights of another shape than the FP32 model's of the same name: fc2\.weight \[64, 32\] "
              r"\(FP32 \[64, 16\]\)"),
             ((str(mlp["fp32"]), str(mlp["int8"]), "--data", str(nan)),
              r"nan\.npy: the array holds 1 NaN or infinite values \(the first in sample 3\)"),
             ((str(external / "fp32.onnx"), str(mlp["int8"]), "--data", str(mlp["data"])),
              r"fp32\.onnx: its weights are stored outside the file, in fp32\.weights, which is not in")]
    for args, message in cases:
        done = run_audit(*args)
        assert done.returncode == 2, (args, done.stderr)
        assert re.search(message, done.stderr), (message, done.stderr)
        assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_onnx_s_own_words_come_through(mlp, tmp_path):
    broken = tmp_path / "broken.onnx"
    broken.write_bytes(data.fixture_path("fp32.onnx").read_bytes()[:200])
    done = run_audit(str(mlp["fp32"]), str(broken), "--data", str(mlp["data"]))
    assert done.returncode == 2 and re.search(r"broken\.onnx: not an ONNX model \(onnx: .+\)", done.stderr)


def test_weights_that_are_not_the_fp32_models_are_a_loud_warning(mlp, tmp_path):
    other = mlp_copy(tmp_path, "retrained.onnx", lambda m: _set_initializer(
        m, "fc2.weight", _weight(m, "fc2.weight") * 1.5))
    done = run_audit(str(other), str(mlp["int8"]), "--data", str(mlp["data"]))
    assert done.returncode == 0, done.stderr
    assert re.search(r"WARNING: 1 of \d+ quantized weights differ from the FP32 model's beyond rounding: fc2\.weight",
                     done.stdout)
    same = audit.audit(mlp["fp32"], mlp["int8"], mlp["data"])
    assert same["warnings"] == []     # the pair as quantized: no warning


def test_a_fixed_batch_model_runs_one_sample_at_a_time_and_few_samples_are_warned(mlp, tmp_path):
    def fix(m):
        for value in (m.graph.input[0], m.graph.output[0]):
            value.type.tensor_type.shape.dim[0].dim_value = 1
    fp32 = mlp_copy(tmp_path, "fp32-b1.onnx", fix)
    int8 = onnx.load(str(mlp["int8"]))
    fix(int8)
    onnx.save(int8, tmp_path / "int8-b1.onnx")
    doc = audit.audit(fp32, tmp_path / "int8-b1.onnx", mlp["data"], mlp["labels"], options=audit.Options(
        max_samples=20))
    assert doc["data"]["batch"] == 1 and doc["data"]["samples"] == 20
    assert any("fixed batch of 1" in w for w in doc["warnings"])
    assert any(w.startswith("only 20 samples") for w in doc["warnings"])
    free = audit.audit(mlp["fp32"], mlp["int8"], mlp["data"], mlp["labels"], options=audit.Options(max_samples=20))
    assert doc["families"] == free["families"] and doc["rulers"] == free["rulers"]


def test_float_data_for_integer_token_ids_is_refused(tmp_path):
    ids = helper.make_tensor_value_info("ids", onnx.TensorProto.INT64, ["N", 4])
    out = helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["N", 4, 3])
    emb = numpy_helper.from_array(np.arange(30, dtype=np.float32).reshape(10, 3), "emb")
    g = helper.make_graph([helper.make_node("Gather", ["emb", "ids"], ["y"])], "g", [ids], [out], [emb])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    np.save(tmp_path / "ids.npy", np.full((5, 4), 1.5))
    with pytest.raises(audit.AuditError, match=r"ids\.npy: the array is float64; the model's input 'ids' is int64 "
                                               r"\(token ids, indices\): expected integers"):
        audit.load_data(tmp_path / "ids.npy", model)
    np.save(tmp_path / "ids32.npy", np.ones((5, 4), np.int32))
    assert audit.load_data(tmp_path / "ids32.npy", model).dtype == np.int32   # cast to int64 batch by batch


# --- streaming: the same numbers whatever the batch --------------------------------------------------------------

def test_statistics_do_not_depend_on_the_batch_and_match_ort_s_sqnr(cnn, cnn_doc):
    small = audit.audit(cnn["fp32"], cnn["qdq"], cnn["data"], cnn["data"], options=audit.Options(batch=7))
    whole = audit.audit(cnn["fp32"], cnn["qdq"], cnn["data"], cnn["data"], options=audit.Options(batch=400))
    for doc in (small, cnn_doc):
        assert doc["rulers"] == whole["rulers"] and doc["error_by_size"] == whole["error_by_size"]
        assert doc["families"] == whole["families"] and doc["family_difference"] == whole["family_difference"]
        for a, b in zip(doc["parting"]["rows"], whole["parting"]["rows"]):
            assert a["tensor"] == b["tensor"] and a["vs_fp32_db"] == pytest.approx(b["vs_fp32_db"], rel=1e-9)
    # ORT's own qdq_loss_debug on the whole data set, all tensors held: the same SQNR
    from onnxruntime.quantization import qdq_loss_debug as qd  # deferred: only this check uses ORT's tool

    x = np.load(cnn["data"])["image"]
    acts = []
    for path in (cnn["fp32"], cnn["qdq"]):
        augmented = path.with_name(path.stem + "-augmented.onnx")
        qd.modify_model_output_intermediate_tensors(str(path), str(augmented))
        acts.append(qd.collect_activations(str(augmented), ArrayReader(x, 400, camera.INPUT_NAME)))
    errors = qd.compute_activation_error(qd.create_activation_matching(acts[1], acts[0]))
    for row in whole["parting"]["rows"]:
        assert row["vs_fp32_db"] == pytest.approx(errors[row["tensor"]]["xmodel_err"], abs=1e-3), row["tensor"]
        assert row["own_db"] == pytest.approx(errors[row["tensor"]]["qdq_err"], abs=1e-3), row["tensor"]


def test_max_samples_caps_the_data_and_its_labels(cnn):
    doc = audit.audit(cnn["fp32"], cnn["qdq"], cnn["data"], cnn["data"], options=audit.Options(max_samples=50))
    assert doc["data"]["samples"] == 50 and doc["data"]["shape"][0] == 50
    assert sum(r["count"] for r in doc["error_by_size"]) == 50


def test_the_families_difference_is_reported(cnn, cnn_doc):
    d = cnn_doc["family_difference"]
    x = np.load(cnn["data"])["image"]
    outs = [kernels.emulate(cnn["qdq"], x, f, camera.INPUT_NAME) for f in kernels.FAMILIES]
    assert d["values"] == outs[0].size and d["values_differ"] == int(np.count_nonzero(outs[0] != outs[1]))
    assert d["max_difference"] == pytest.approx(float(np.abs(outs[0] - outs[1]).max()))
    assert d["top1_changes"] == int(np.sum(outs[0].argmax(1) != outs[1].argmax(1)))
    assert audit.difference_line(d).startswith(f"the families differ on {d['values_differ']:,} of")


def test_out_of_memory_is_said_with_what_to_do(cnn, tmp_path):
    """A batch too big for the memory the process may have (an address-space limit, as a container's would be): one
    line naming the batch and a smaller one, no traceback and no silent kill."""
    import resource  # deferred: Unix only, and only this test limits a child's memory

    np.save(tmp_path / "many.npy", np.random.default_rng(0).random((60000, 1, 16, 16), np.float32))
    limit = 1500 * 2**20

    def cap():
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    done = subprocess.run([sys.executable, "-m", "lab", "audit", str(cnn["fp32"]), str(cnn["qdq"]), "--data",
                           str(tmp_path / "many.npy"), "--batch", "60000"], capture_output=True, text=True,
                          timeout=300, preexec_fn=cap)
    assert done.returncode == 2, done.stderr[-500:]
    assert re.fullmatch(r"python -m lab audit: out of memory at 0 samples, running a batch of 60000: the audit holds "
                        r"one batch's tensors at a time, so try --batch 15000\n", done.stderr), done.stderr[-500:]


# --- which node to exclude ----------------------------------------------------------------------------------------

def _break_fc2(m: onnx.ModelProto) -> None:
    """One outlier weight in fc2, on a hidden unit that never fires (so FP32 barely moves): per-tensor weights then
    squash the rest of fc2 to a few steps."""
    w1, b1, w2 = (_weight(m, n).copy() for n in ("fc1.weight", "fc1.bias", "fc2.weight"))
    w1[:, 0], b1[0] = 0.0, -1.0                  # hidden unit 0 never fires
    w2[0, 0] = 400 * float(np.abs(w2).max())     # and carries the outlier
    for name, value in (("fc1.weight", w1), ("fc1.bias", b1), ("fc2.weight", w2)):
        _set_initializer(m, name, value)


def broken_mlp(folder: Path, quant_format: QuantFormat):
    """The digit reader with fc2 broken (``_break_fc2``), its evaluation split (pixels saved as ``pixels.npy``), and
    ``quantized(name, exclude)``: it quantized per tensor in ``quant_format``, calibrated on the calibration split."""
    fp32 = mlp_copy(folder, "fp32.onnx", _break_fc2)
    calibration, evaluation = data.load_split("calibration").pixels, data.load_split("evaluation")
    np.save(folder / "pixels.npy", evaluation.pixels)

    def quantized(name: str, exclude=()) -> Path:
        quantize_static(str(fp32), str(folder / name), ArrayReader(calibration, 36, "pixels"),
                        quant_format=quant_format, per_channel=False, nodes_to_exclude=list(exclude))
        return folder / name

    return fp32, evaluation, quantized


def test_the_suggested_node_excluded_for_real_repairs_a_model_one_layer_breaks(tmp_path):
    """The digit reader with fc2 broken (``_break_fc2``). The ranking names fc2's MatMul; quantizing again with it
    in ``nodes_to_exclude`` measurably repairs the output on the evaluation set."""
    fp32, evaluation, quantized = broken_mlp(tmp_path, QuantFormat.QDQ)

    broken = quantized("broken.onnx")
    doc = audit.audit(fp32, broken, tmp_path / "pixels.npy", options=audit.Options(rank_samples=64))
    best = doc["exclude"]["rows"][0]
    assert best["node"] == "fc2_MatMul" and best["sqnr_db"] > doc["exclude"]["as_is"]["sqnr_db"] + 3
    repaired = quantized("repaired.onnx", [best["node"]])
    reference = compare.predict(fp32, evaluation.pixels)
    before, after = (compare.predict(m, evaluation.pixels) for m in (broken, repaired))
    agreement = [float(np.mean(out.argmax(1) == reference.argmax(1))) for out in (before, after)]
    errors = [compare.max_abs_error(reference, out) for out in (before, after)]
    print(f"excluding {best['node']}: agreement {agreement[0]:.4f} -> {agreement[1]:.4f}, "
          f"max abs error {errors[0]:.4f} -> {errors[1]:.4f}")
    assert agreement[1] > agreement[0] + 0.05 and errors[1] < errors[0]
    assert "candidate: nodes_to_exclude=['fc2_MatMul']" in audit.format_report(doc)


def test_reconvert_reads_the_recipe_and_measures_the_exclusion_for_real(tmp_path):
    """``--reconvert`` on the broken digit reader: the recipe read back from the graph (QDQ, per-tensor, QInt8,
    Relus removed), two real re-conversions calibrated on the data's first samples and measured on the next: the
    exclusion repairs the output (SQNR up by more than 3 dB, top-1 against FP32 fixed beyond noise), beside the
    float-run bound; the report says it calibrated on the audit's data."""
    fp32 = mlp_copy(tmp_path, "fp32.onnx", _break_fc2)
    np.save(tmp_path / "pixels.npy", data.load_split("evaluation").pixels)
    quantize_static(str(fp32), str(tmp_path / "broken.onnx"),
                    ArrayReader(data.load_split("calibration").pixels, 36, "pixels"),
                    quant_format=QuantFormat.QDQ, per_channel=False)
    doc = audit.audit(fp32, tmp_path / "broken.onnx", tmp_path / "pixels.npy",
                      options=audit.Options(rank_samples=64, reconvert=True))
    r = doc["exclude"]["reconverted"]
    assert r["node"] == doc["exclude"]["rows"][0]["node"] == "fc2_MatMul"
    assert {k: r["recipe"][k] for k in ("quant_format", "per_channel", "activation_type", "weight_type",
                                         "reduce_range", "nodes_to_exclude")} == {
        "quant_format": "QDQ", "per_channel": False, "activation_type": "QInt8", "weight_type": "QInt8",
        "reduce_range": False, "nodes_to_exclude": ["fc2_MatMul"]}
    assert r["recipe"]["extra_options"] == {"ActivationSymmetric": False, "WeightSymmetric": True,
                                            "QDQKeepRemovableActivations": False}
    assert r["held_out"] and r["calibration_samples"] == reconvert.CALIBRATION
    assert r["evaluation_samples"] == min(reconvert.EVALUATION, len(data.load_split("evaluation").pixels) - 64)
    print({k: (round(r[k]["sqnr_db"], 1), r[k].get("agreement")) for k in ("as_is", "bound", "without", "with")},
          r["paired"]["words"])
    assert r["with"]["sqnr_db"] > r["without"]["sqnr_db"] + 3
    assert r["with"]["agreement"] > r["without"]["agreement"] and r["paired"]["beyond_noise"]
    assert r["bound"]["sqnr_db"] >= r["as_is"]["sqnr_db"]
    text = audit.format_report(doc)
    assert "calibrating on data drawn with the evaluation data is optimistic" in text
    assert "re-converted, nodes_to_exclude=['fc2_MatMul']" in text and "measured effect of the exclusion: +" in text
    assert "re-converted with it +" in doc["summary"]["lines"][4]


def test_reconvert_reads_a_per_channel_cnn_with_its_own_input_name(cnn):
    """The CNN (input 'image', per-channel QDQ): the recipe says per-channel, and both re-conversions run."""
    doc = audit.audit(cnn["fp32"], cnn["qdq"], cnn["data"],
                      options=audit.Options(max_samples=40, rank_samples=8, reconvert=True))
    r = doc["exclude"]["reconverted"]
    assert "note" not in r, r
    assert r["recipe"]["per_channel"] and r["recipe"]["quant_format"] == "QDQ"
    assert (r["calibration_samples"], r["evaluation_samples"]) == (20, 20)
    assert {"as_is", "bound", "without", "with"} <= set(r)


def test_the_qoperator_ranking_names_the_fp32_node_whose_real_exclusion_repairs_the_model(tmp_path):
    """The digit reader with fc2 broken (``_break_fc2``), quantized QOperator: the ranking replaces each
    QLinearMatMul by its FP32 MatMul between its rulers and names fc2's FP32 node first; quantizing again with it in
    ``nodes_to_exclude`` measurably raises the output's SQNR on the evaluation set; ``--reconvert`` reads the
    recipe as QOperator and measures the same."""
    fp32, evaluation, quantized = broken_mlp(tmp_path, QuantFormat.QOperator)

    broken = quantized("broken.onnx")
    doc = audit.audit(fp32, broken, tmp_path / "pixels.npy",
                      options=audit.Options(rank_samples=64, reconvert=True))
    e = doc["exclude"]
    assert e["format"] == "QOperator" and e["rows"][0]["node"] == "fc2_MatMul"
    assert e["rows"][0]["sqnr_db"] > e["as_is"]["sqnr_db"] + 3
    repaired = quantized("repaired.onnx", [e["rows"][0]["node"]])
    reference = compare.predict(fp32, evaluation.pixels)
    before, after = (sensitivity.output_sqnr(reference, compare.predict(m, evaluation.pixels))
                     for m in (broken, repaired))
    print(f"excluding fc2_MatMul for real: output SQNR {before:.1f} -> {after:.1f} dB")
    assert after > before + 10
    r = e["reconverted"]
    assert r["recipe"]["quant_format"] == "QOperator" and r["recipe"]["nodes_to_exclude"] == ["fc2_MatMul"]
    assert r["with"]["sqnr_db"] > r["without"]["sqnr_db"] + 10
    assert "exclude: try nodes_to_exclude=['fc2_MatMul']: run in float between" in doc["summary"]["lines"][4]


def test_every_node_the_qoperator_ranking_names_is_in_the_fp32_graph(cnn):
    """The pre-processed CNN, QOperator (its BatchNormalizations folded, so its weights are not the FP32 file's):
    every QLinearConv and the QGemm ranked under its FP32 node's name, each estimate run in float
    (``sensitivity.KEEP_FLOAT``: ORT would otherwise quantize the float weight per tensor again at load and lose
    several dB), so none falls far below the model as it is."""
    doc = audit.audit(cnn["fp32"], cnn["qop"], cnn["data"],
                      options=audit.Options(max_samples=32, rank_samples=16))
    fp32_nodes = {n.name for n in onnx.load(str(cnn["fp32"])).graph.node}
    rows = doc["exclude"]["rows"]
    assert {r["node"] for r in rows} == {"conv1", "dwconv", "conv2", "fc"} and {r["node"] for r in rows} <= fp32_nodes
    assert all(r["sqnr_db"] > doc["exclude"]["as_is"]["sqnr_db"] - 1 for r in rows), rows


def _gemm_pair(folder: Path, names: str = "") -> tuple[onnx.ModelProto, onnx.ModelProto, np.ndarray]:
    """A Gemm with transB, beta 0.5 and a bias, and its QOperator model (``names``: a suffix the FP32 weight and
    bias take afterwards, so the estimate must dequantize the QGemm's own)."""
    rng = np.random.default_rng(11)
    w, b = rng.normal(0, 0.3, (6, 5)).astype(np.float32), rng.normal(0, 1, 6).astype(np.float32)
    g = helper.make_graph([helper.make_node("Gemm", ["x", "w", "b"], ["y"], name="gemm", transB=1, beta=0.5)], "g",
                          [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["N", 5])],
                          [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["N", 6])],
                          [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), folder / "gemm.onnx")
    x = rng.normal(0, 1, (64, 5)).astype(np.float32)
    quantize_static(str(folder / "gemm.onnx"), str(folder / "gemm-qop.onnx"), ArrayReader(x, 16, "x"),
                    quant_format=QuantFormat.QOperator, per_channel=True)
    fp32, int8 = onnx.load(str(folder / "gemm.onnx")), onnx.load(str(folder / "gemm-qop.onnx"))
    for t in fp32.graph.initializer:
        t.name += names
    fp32.graph.node[0].input[1:] = [i + names for i in fp32.graph.node[0].input[1:]]
    return fp32, int8, x


@pytest.mark.parametrize("names", ["", "_renamed"])
def test_a_qgemm_estimate_keeps_beta_trans_b_and_a_float_output(tmp_path, names):
    """A QGemm with its output ruler, and the same QGemm writing float (no y_scale): in the estimate the FP32 Gemm
    (transB, beta 0.5) runs on the dequantized input and lands within the rulers' rounding of FP32, with the FP32
    weights or, under other names, the QGemm's own dequantized. The QGemm itself is far off (measured -2.2 dB): ORT
    1.32's converter quantizes the bias at the input's scale times the weight's times beta and drops beta, so the
    QGemm adds the bias times 1 / beta; the ranking would name this node."""
    fp32, int8, x = _gemm_pair(tmp_path, names)

    def run(model: onnx.ModelProto) -> np.ndarray:
        return hybrid.lean_session(model, entries=sensitivity.KEEP_FLOAT).run(None, {"x": x})[0]

    float_out = onnx.ModelProto()
    float_out.CopyFrom(int8)
    q = next(n for n in float_out.graph.node if n.op_type == "QGemm")
    del q.input[7:]
    q.output[0] = "y"
    float_out.graph.node.remove(next(n for n in float_out.graph.node if n.op_type == "DequantizeLinear"))
    reference = run(fp32)
    for model, ruler in ((int8, True), (float_out, False)):
        estimate = sensitivity.excluded_qoperator(model, fp32, "gemm")
        assert not any(n.op_type == "QGemm" for n in estimate.graph.node)
        assert any(n.op_type == "QuantizeLinear" and n.name == "gemm_excluded_quantize"
                   for n in estimate.graph.node) == ruler
        sqnr = [sensitivity.output_sqnr(reference, run(m)) for m in (model, estimate)]
        print(names or "FP32 names", "ruler" if ruler else "float output", [round(v, 1) for v in sqnr])
        assert sqnr[1] > 30 and sqnr[0] < 10


def test_the_x64_option_is_measured_against_the_families_difference(cnn_doc):
    """ORT's deploy-time fix on the per-channel CNN: with the option on both families no pair saturates, so the
    families agree bit for bit; without it they differ (lesson 10's finding)."""
    fix = cnn_doc["x64_fix"]
    assert fix["samples"] == audit.X64_SAMPLES
    assert fix["with"]["differ"] == 0 and cnn_doc["family_difference"]["values_differ"] > 0
    assert f"= 1 on both (first {audit.X64_SAMPLES} samples) they differ on 0 of" in audit.format_report(cnn_doc)


# --- latency on this CPU -------------------------------------------------------------------------------------------

def test_the_latency_split_covers_the_int8_models_kernel_time(cnn_doc):
    """The QDQ CNN, timed on this CPU: both medians and their ratio (no speed asserted), the INT8 model's kernel time
    split into kinds that sum to 100 %, integer kernels among them; the FP32 model's session runs no integer kernel
    and no QuantizeLinear or DequantizeLinear."""
    t = cnn_doc["latency"]
    assert t["batch"] == audit.BATCH and t["batches"] == op_time.BATCHES and t["runs"] == op_time.RUNS
    assert t["threads"] == {"intra_op": 1, "inter_op": 1}
    assert t["int8"]["rounds"] == t["fp32"]["rounds"] == op_time.BATCHES * op_time.RUNS
    assert t["int8"]["median_ms"] > 0 and t["ratio"] == pytest.approx(t["int8"]["median_ms"] / t["fp32"]["median_ms"])
    int8, fp32 = t["split"]["int8"], t["split"]["fp32"]
    assert sum(int8["shares_percent"].values()) == pytest.approx(100, abs=1e-6)
    assert int8["shares_percent"]["integer"] > 0 and "QLinearConv" in int8["ops"]
    assert fp32["shares_percent"]["float"] == pytest.approx(100) and fp32["shares_percent"]["integer"] == 0
    assert not [op for op in fp32["ops"] if op_time.kind(op) in ("integer", "quantize")]
    assert len(int8["top_ops"]) == op_time.TOP
    text = audit.format_report(cnn_doc)
    assert "latency on this CPU (ONNX Runtime, the audit's sessions: 1 intra-op thread(s), 1 inter-op):" in text
    assert "QuantizeLinear / DequantizeLinear" in text and "INT8's time / FP32's " in text


def test_the_profile_file_is_removed_and_the_kinds_are_read_from_the_trace(cnn, tmp_path):
    x = np.load(cnn["data"])["image"]
    feeds = op_time.first_batches(x, camera.INPUT_NAME, 4, np.float32)
    events = op_time.trace(onnx.load(str(cnn["qdq"])), feeds, 1, folder=tmp_path)
    assert list(tmp_path.iterdir()) == []
    kernels_ = op_time.kernel_events(events)
    assert len({e["args"]["node_index"] for e in kernels_}) * len(feeds) == len(kernels_)   # the warm-up left out
    us = op_time.op_times(events)
    assert ("QLinearConv", "integer") in us and ("QuantizeLinear", "quantize") in us
    assert op_time.kind("MaxPool", "uint8") == "8-bit" and op_time.kind("MaxPool", "float") == "float"
    assert op_time.kind("MatMulInteger") == op_time.kind("QGemm") == op_time.kind("DynamicQuantizeLinear") == "integer"


def test_latency_runs_0_skips_the_timing(cnn, capsys):
    assert audit_tool.main([str(cnn["fp32"]), str(cnn["qop"]), "--data", str(cnn["data"]), "--max-samples", "8",
                            "--rank-samples", "0", "--latency-runs", "0"]) == 0
    assert "latency on this CPU:\n  not measured: --latency-runs 0" in capsys.readouterr().out


# --- the summary, the weight rulers, ties, the HTML page -------------------------------------------------------------

def test_the_summary_comes_first_in_five_lines_and_in_the_json(cnn, cnn_doc, capsys):
    s = cnn_doc["summary"]
    assert len(s["lines"]) == 5
    assert s["lines"][0] == "format: QDQ, per-channel weights (int8), activations int8"
    assert [f["family"] for f in s["families"]] == list(kernels.FAMILIES)
    assert all(f"{f['family']} (" in s["lines"][1] and f"accuracy {f['accuracy']:.4f}" in s["lines"][1]
               for f in s["families"])
    d = cnn_doc["family_difference"]
    assert s["lines"][2].startswith(f"family difference: {d['values_differ']:,} of {d['values']:,}")
    best = cnn_doc["exclude"]["rows"][0]["node"]
    assert s["exclude"]["node"] == best and s["lines"][4].startswith(f"exclude: try nodes_to_exclude=['{best}']")
    text = audit.format_report(cnn_doc).splitlines()
    assert text[1:6] == [f"  {line}" for line in s["lines"]]
    assert audit_tool.main([str(cnn["fp32"]), str(cnn["qop"]), "--data", str(cnn["data"]), "--json",
                            "--max-samples", "8", "--rank-samples", "0"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert list(doc)[:2] == ["schema", "summary"]
    assert doc["summary"]["format"] == {"format": "QOperator", "weights": "per-channel", "weight_types": ["int8"],
                                        "activation_types": ["uint8"],
                                        "unread_types": {"weights": [], "activations": []},
                                        "run_time_activations": False}
    assert doc["summary"]["lines"][4] == "exclude: not measured: --rank-samples 0"


def outlier_conv(folder: Path) -> dict[str, Path]:
    """A Conv whose output channel 5 has weights 8 times the others', quantized QDQ per-tensor and per-channel, and
    QOperator per-channel; with its data."""
    rng = np.random.default_rng(3)
    w = rng.normal(0, 0.1, (8, 4, 3, 3)).astype(np.float32)
    w[5] *= 8
    graph_ = helper.make_graph(
        [helper.make_node("Conv", ["x", "w", "b"], ["y"], name="conv", pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["y"], ["r"], name="relu"),
         helper.make_node("GlobalAveragePool", ["r"], ["g"], name="gap"),
         helper.make_node("Flatten", ["g"], ["out"], name="flatten")],
        "outlier", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["N", 4, 8, 8])],
        [helper.make_tensor_value_info("out", onnx.TensorProto.FLOAT, ["N", 8])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.zeros(8, np.float32), "b")])
    model = helper.make_model(graph_, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, folder / "fp32.onnx")
    x = rng.normal(0, 1, (24, 4, 8, 8)).astype(np.float32)
    np.save(folder / "x.npy", x)
    paths = {"fp32": folder / "fp32.onnx", "data": folder / "x.npy"}
    for name, fmt, per_channel in (("tensor", QuantFormat.QDQ, False), ("channel", QuantFormat.QDQ, True),
                                   ("qop", QuantFormat.QOperator, True)):
        quantize_static(str(folder / "fp32.onnx"), str(folder / f"{name}.onnx"), ArrayReader(x, 8, "x"),
                        quant_format=fmt, per_channel=per_channel)
        paths[name] = folder / f"{name}.onnx"
    return paths


def test_weight_rulers_flag_an_outlier_channel_a_per_tensor_scale_pays_for(tmp_path):
    m = outlier_conv(tmp_path)
    fp32 = onnx.load(str(m["fp32"]))
    (tensor,), (channel,), (qop,) = (weight_rulers.rows(onnx.load(str(m[k])), fp32) for k in ("tensor", "channel",
                                                                                                "qop"))
    w = numpy_helper.to_array(fp32.graph.initializer[0])
    ratio = float(np.abs(w).reshape(8, -1).max(1).max() / np.median(np.abs(w).reshape(8, -1).max(1)))
    for row in (tensor, channel, qop):
        assert row["weight"] == "w" and row["op"] in ("Conv", "QLinearConv") and row["channels"] == 8
        assert row["outlier_channel"] == 5 and row["outlier_ratio"] == pytest.approx(ratio, rel=0.02)
        assert row["clipped"] == 0.0
    # per-tensor: one scale stretched for channel 5, the others squashed to about 254 / 8 steps
    assert tensor["paid"] and not tensor["per_channel"] and tensor["scale_spread"] == 1.0
    assert tensor["steps_median"] < 254 / ratio * 1.5 and tensor["steps_worst"] < 50
    assert tensor["at_ends"] < 1 / 8                      # only channel 5 reaches +-127
    # per-channel: channel 5 has its own scale, the others keep their steps
    assert channel["outlier"] and not channel["paid"] and channel["scale_spread"] > 4
    assert channel["steps_median"] > 200
    assert {k: qop[k] for k in ("steps_median", "steps_worst", "at_ends")} == \
        {k: channel[k] for k in ("steps_median", "steps_worst", "at_ends")}   # the same ruler, read from QLinearConv
    doc = audit.audit(m["fp32"], m["tensor"], m["data"], options=audit.Options(rank_samples=0))
    assert doc["summary"]["worst_rulers"][0]["tensor"] == "w"
    assert "w (channel 5's max|w| is" in doc["summary"]["lines"][3]
    tables_ = [audit.weight_table(r).splitlines()[2] for r in ([tensor], [channel])]
    assert "(paid)" in tables_[0] and "(paid)" not in tables_[1]


def test_an_activation_one_channel_sets_is_flagged_with_its_channels_steps(tmp_path):
    """Channel 5's output is 8 times the others': its per-tensor activation ruler reads "255/255 fine" as a whole,
    but the median channel spans a few steps; the audit names the channel and the steps each spans."""
    m = outlier_conv(tmp_path)
    doc = audit.audit(m["fp32"], m["channel"], m["data"], options=audit.Options(rank_samples=0, latency_runs=0))
    rows = {r["tensor"]: r for r in doc["rulers"] if r["channel_steps_median"] is not None}
    flagged = [r for r in rows.values() if r["channel_outlier"]]
    assert flagged and all(r["widest_channel"] == 5 for r in flagged), rows
    for r in flagged:
        assert r["widest_channel_steps"] > 4 * r["channel_steps_median"] and r["widest_channel_steps"] <= r["steps"]
    assert doc["summary"]["worst_rulers"][0]["tensor"] in {r["tensor"] for r in flagged}
    assert "channel 5 spans" in doc["summary"]["lines"][3]
    assert "channels' steps: median / widest" in audit.format_report(doc)


def test_top1_ties_are_counted_and_a_singleton_output_is_squeezed(tmp_path):
    """A MatMul whose classes 0 and 1 differ by 1e-4 of their weights, output [N, 3, 1, 1]: FP32 always picks class
    1, the INT8 weights are equal so every row ties and argmax takes class 0. Agreement 0 is said as ties."""
    rng = np.random.default_rng(5)
    col = rng.uniform(0.5, 1.0, (6, 1)).astype(np.float32)
    w = np.concatenate([col, col * (1 + 1e-4), -col], axis=1)
    graph_ = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["m"], name="mm"),
         helper.make_node("Reshape", ["m", "shape"], ["out"], name="reshape")],
        "ties", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["N", 6])],
        [helper.make_tensor_value_info("out", onnx.TensorProto.FLOAT, ["N", 3, 1, 1])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.array([-1, 3, 1, 1], np.int64), "shape")])
    onnx.save(helper.make_model(graph_, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "fp32.onnx")
    x = rng.uniform(0, 1, (20, 6)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    quantize_static(str(tmp_path / "fp32.onnx"), str(tmp_path / "int8.onnx"), ArrayReader(x, 5, "x"),
                    quant_format=QuantFormat.QDQ)
    out = compare.predict(tmp_path / "int8.onnx", x, "x")
    assert out.shape == (20, 3, 1, 1) and np.all(out[:, 0] == out[:, 1])        # tied for real
    doc = audit.audit(tmp_path / "fp32.onnx", tmp_path / "int8.onnx", tmp_path / "x.npy",
                      options=audit.Options(rank_samples=0))
    here = next(f for f in doc["families"] if f["computed_on"] == "this machine's kernels")
    assert here["agreement"] == 0.0 and here["top1_ties"] == 20 and here["agreement_ties_to_fp32"] == 1.0
    assert "20 row(s) tie at the INT8 top-1 (argmax takes the first class; ties broken toward FP32 or the label: " \
           "agreement 1.0000)" in audit.format_report(doc)
    assert "20 tied row(s)" in doc["summary"]["lines"][1]


def test_the_html_report_has_the_summary_real_tables_and_described_figures(tmp_path):
    m = outlier_conv(tmp_path)
    page = tmp_path / "audit.html"
    assert audit_tool.main([str(m["fp32"]), str(m["tensor"]), "--data", str(m["data"]), "--html", str(page),
                            "--rank-samples", "4"]) == 0
    text = page.read_text(encoding="utf-8")
    mask = os.umask(0)
    os.umask(mask)
    assert page.stat().st_mode & 0o777 == 0o666 & ~mask
    assert "<h2>Summary</h2>" in text and "format: QDQ, per-tensor weights (int8), activations" in text
    assert "exclude: try nodes_to_exclude=[&#x27;conv&#x27;]" in text
    assert re.search(r'<th scope="col"[^>]*>steps used: median / worst channel</th>', text)
    assert '<th scope="row" style="text-align: left">w</th>' in text
    images = re.findall(r"<img [^>]*>", text)
    assert len(images) == 2
    for img in images:
        assert re.search(r'src="data:image/png;base64,[A-Za-z0-9+/=]{100,}"', img)
        alt = re.search(r'alt="([^"]*)"', img)
        assert alt and alt.group(1).strip(), img[:200]
    assert "stretch one per-tensor scale for an outlier channel: w" in text
    assert "<h2>latency on this CPU (ONNX Runtime" in text and "share of the kernel time (%)</th>" in text
    assert "http://" not in text and "https://" not in text          # self-contained


@pytest.mark.parametrize("option, value", [("--max-samples", "-5"), ("--max-samples", "0"), ("--batch", "0"),
                                           ("--rank-samples", "-1"), ("--latency-runs", "-1")])
def test_a_count_out_of_range_is_one_line_not_a_traceback(option, value, capsys):
    from lab.tools import audit as tool

    with pytest.raises(SystemExit) as info:
        tool.parser().parse_args(["a.onnx", "b.onnx", "--data", "x.npy", option, value])
    assert info.value.code == 2 and f"argument {option}: invalid integer of at least" in capsys.readouterr().err


# --- a practitioner's models: what the audit must read, and say, right --------------------------------------------

def square_gemm(folder: Path, quant_format: QuantFormat, softmax: bool = False, **options) -> dict[str, Path]:
    """A Gemm with transB = 1 and a square 8 x 8 weight whose rows (ORT's channels for transB) differ 20-fold in
    size, with a Softmax after it (``softmax``: logits wide enough that it often gives nearly 1), and its model
    quantized per channel in ``quant_format`` (``options``: more of ``quantize_static``'s)."""
    rng = np.random.default_rng(13)
    w = (rng.normal(0, 1, (8, 8)) * np.linspace(0.1, 2.0, 8)[:, None] * (4 if softmax else 1)).astype(np.float32)
    nodes = [helper.make_node("Gemm", ["x", "w", "b"], ["logits" if softmax else "y"], name="gemm", transB=1)]
    nodes += [helper.make_node("Softmax", ["logits"], ["y"], name="softmax", axis=1)] if softmax else []
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["N", 8])],
                          [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["N", 8])],
                          [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.zeros(8, np.float32), "b")])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), folder / "fp32.onnx")
    x = rng.normal(0, 1, (32, 8)).astype(np.float32)
    np.save(folder / "x.npy", x)
    quantize_static(str(folder / "fp32.onnx"), str(folder / "int8.onnx"), ArrayReader(x, 8, "x"),
                    quant_format=quant_format, per_channel=options.pop("per_channel", True), **options)
    return {"fp32": folder / "fp32.onnx", "int8": folder / "int8.onnx", "data": folder / "x.npy"}


@pytest.mark.parametrize("quant_format", [QuantFormat.QOperator, QuantFormat.QDQ])
def test_a_square_gemm_weight_with_trans_b_is_checked_along_ort_s_axis(tmp_path, quant_format):
    """ORT quantizes a Gemm's weight per channel along axis 0 with transB = 1: a square weight's scales, applied
    along its columns, would put most values "beyond rounding" and warn that this is not the FP32 model's."""
    m = square_gemm(tmp_path, quant_format)
    fp32, int8 = onnx.load(str(m["fp32"])), onnx.load(str(m["int8"]))
    assert audit.weight_axes(int8)["w_quantized"] == 0
    check = audit.weight_check(fp32, int8)
    assert check["compared"] == 1 and check["other_values"] == [], check
    assert audit.check_pair(m["fp32"], fp32, m["int8"], int8) == []


def test_the_x64_fix_is_claimed_only_on_samples_that_differ_without_it(tmp_path):
    """A MatMul whose weights quantize near 127: large inputs overflow the saturating family's int16 pairs, small
    ones do not. The first 8 samples (the x64 check's) are small: both families agree on them with and without
    ``session.x64quantprecision``, so the summary does not say that the option closes the difference the other
    samples show."""
    rng = np.random.default_rng(1)
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "g",
                          [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["N", 16])],
                          [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["N", 4])],
                          [numpy_helper.from_array(rng.uniform(0.9, 1.0, (16, 4)).astype(np.float32), "w")])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "fp32.onnx")
    x = np.concatenate([rng.uniform(0, 0.05, (8, 16)), rng.uniform(0.8, 1, (24, 16))]).astype(np.float32)
    x[0], x[8] = 0, 1
    np.save(tmp_path / "x.npy", x)
    quantize_static(str(tmp_path / "fp32.onnx"), str(tmp_path / "int8.onnx"), ArrayReader(x, 8, "x"),
                    quant_format=QuantFormat.QDQ, activation_type=QuantType.QUInt8)
    doc = audit.audit(tmp_path / "fp32.onnx", tmp_path / "int8.onnx", tmp_path / "x.npy",
                      options=audit.Options(latency_runs=0))
    assert doc["family_difference"]["values_differ"] > 0 and doc["family_difference"]["samples_differ"] == 24
    fix = doc["x64_fix"]
    assert fix["samples"] == 8 and fix["without"]["differ"] == 0 and fix["with"]["differ"] == 0
    assert "closes it" not in doc["summary"]["lines"][2] and kernels.X64_PRECISION_KEY not in doc["summary"]["lines"][2]
    assert "without it on none of them: these samples cannot show what it fixes" in audit.x64_line(fix)


def test_a_dynamic_model_s_weights_are_read(tmp_path):
    """quantize_dynamic on an embedding (Gather), a Relu and a Gemm with transB (a DynamicQuantizeLinear and a
    MatMulInteger on 'W_Transposed'): both int8 weights are read with their scales and compared with the FP32 ones
    (the Gemm's transposed), and the summary says the activations are quantized at run time, not 'none found'."""
    from onnxruntime.quantization import quantize_dynamic  # deferred: only this test makes a dynamic model

    rng = np.random.default_rng(4)
    g = helper.make_graph([helper.make_node("Gather", ["E", "ids"], ["emb"], name="gather"),
                           helper.make_node("Relu", ["emb"], ["r"], name="relu"),
                           helper.make_node("Gemm", ["r", "W", "B"], ["y"], name="fc", transB=1)], "g",
                          [helper.make_tensor_value_info("ids", onnx.TensorProto.INT64, ["N"])],
                          [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["N", 3])],
                          [numpy_helper.from_array(rng.normal(0, 1, (50, 8)).astype(np.float32), "E"),
                           numpy_helper.from_array(rng.normal(0, 1, (3, 8)).astype(np.float32), "W"),
                           numpy_helper.from_array(np.zeros(3, np.float32), "B")])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "fp32.onnx")
    np.save(tmp_path / "ids.npy", rng.integers(0, 50, 40))
    quantize_dynamic(str(tmp_path / "fp32.onnx"), str(tmp_path / "dyn.onnx"), weight_type=QuantType.QInt8)
    doc = audit.audit(tmp_path / "fp32.onnx", tmp_path / "dyn.onnx", tmp_path / "ids.npy",
                      options=audit.Options(rank_samples=0, latency_runs=0))
    rows = {w["weight"]: w for w in doc["weight_rulers"]}
    assert {w: r["op"] for w, r in rows.items()} == {"E": "Gather", "W_Transposed": "MatMulInteger"}
    assert all(r["clipped"] == 0.0 for r in rows.values())     # compared with the FP32 weights
    assert not any("quantized weights" in w for w in doc["warnings"]), doc["warnings"]
    assert doc["summary"]["lines"][0] == ("format: dynamic, per-tensor weights (int8/uint8), activations quantized at "
                                          "run time (DynamicQuantizeLinear: no ruler stored to read)")
    assert "none read" not in doc["summary"]["lines"][3]
    assert "no ruler is stored in the graph" in audit.format_report(doc)


def test_a_model_onnx_runtime_cannot_load_is_one_line_naming_the_file(mlp, tmp_path):
    unknown = onnx.load(str(mlp["int8"]))
    next(n for n in unknown.graph.node if n.op_type == "Softmax").op_type = "SoftMaxx"
    onnx.save(unknown, tmp_path / "unknown-op.onnx")
    dangling = onnx.load(str(mlp["int8"]))
    next(n for n in dangling.graph.node if n.op_type == "Add").input[1] = "nonexistent_tensor"
    onnx.save(dangling, tmp_path / "dangling.onnx")
    for name, reason in (("unknown-op.onnx", "SoftMaxx"), ("dangling.onnx", "nonexistent_tensor")):
        done = run_audit(str(mlp["fp32"]), str(tmp_path / name), "--data", str(mlp["data"]))
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-800:]
        assert re.fullmatch(rf"python -m lab audit: \S*{re.escape(name)}: ONNX Runtime cannot load the INT8 model: "
                            rf".*{reason}.*\n", done.stderr), done.stderr


def test_labels_outside_the_output_s_classes_are_refused(mlp, tmp_path):
    np.save(tmp_path / "shifted.npy", np.load(mlp["labels"]) + 5)
    with pytest.raises(audit.AuditError, match=r"shifted\.npy: labels from 5 to 14; expected class indices 0 to 9, "
                                               r"one per sample \(the model's output has 10 classes\)"):
        audit.audit(mlp["fp32"], mlp["int8"], mlp["data"], tmp_path / "shifted.npy",
                    options=audit.Options(rank_samples=0, latency_runs=0))


def test_empty_misnamed_and_non_numpy_data_are_refused_as_the_help_says(mlp, tmp_path):
    model = onnx.load(str(mlp["fp32"]))
    pixels = np.load(mlp["data"])
    np.save(tmp_path / "empty.npy", np.zeros((0, 64), np.float32))
    np.savez(tmp_path / "misnamed.npz", input=pixels)
    np.savez(tmp_path / "labels-misnamed.npz", y=np.load(mlp["labels"]))
    (tmp_path / "notes.txt").write_text("0.1, 0.2, 0.3\n")
    with pytest.raises(audit.AuditError, match=r"empty\.npy: the array is empty \(float32 \[0, 64\]: no sample\)"):
        audit.load_data(tmp_path / "empty.npy", model)
    with pytest.raises(audit.AuditError, match=r"misnamed\.npz: no array named 'pixels' \(the model's input\); the "
                                               r"file holds \['input'\]"):
        audit.load_data(tmp_path / "misnamed.npz", model)
    with pytest.raises(audit.AuditError, match=r"labels-misnamed\.npz: no array named 'labels' .*the file holds "
                                               r"\['y'\]"):
        audit.load_labels(tmp_path / "labels-misnamed.npz", 400)
    with pytest.raises(audit.AuditError, match=r"notes\.txt: not a numpy \.npy or \.npz file") as info:
        audit.load_data(tmp_path / "notes.txt", model)
    assert "pickle" not in str(info.value)


@pytest.mark.parametrize("options, unread", [({"weight_type": QuantType.QInt4}, "int4 weights"),
                                             ({"activation_type": QuantType.QUInt16}, "uint16 activations")])
def test_types_the_audit_does_not_read_are_named(tmp_path, options, unread):
    """int4 weights or 16-bit activations: named as not read, in the first line, the worst rulers and a warning,
    never 'none found' or an unqualified 'none clips'."""
    m = square_gemm(tmp_path, QuantFormat.QDQ, per_channel=False, **options)
    doc = audit.audit(m["fp32"], m["int8"], m["data"], options=audit.Options(rank_samples=0, latency_runs=0))
    lines = doc["summary"]["lines"]
    assert "not read" in lines[0] and "none found" not in lines[0], lines[0]
    assert f"not read: {unread}" in lines[3] or f"the model's {unread}" in lines[3], lines[3]
    assert not lines[3].startswith("worst rulers: none clips"), lines[3]
    assert any(w.startswith(f"the model quantizes with {unread}: types the audit does not read")
               for w in doc["warnings"]), doc["warnings"]


def test_the_summary_follows_the_re_conversion_where_it_was_measured(cnn_doc):
    """A node whose estimate gains +0.1 dB but whose real re-conversion gains +2.5 dB stands out (above the 1 dB
    the README names); one estimated at +3.1 dB that re-converts to +0.1 dB does not."""
    e = {"node": "fc0", "estimate": "run wholly in float", "sqnr_db": 30.0, "gain_db": 0.1, "max_abs_error": 0.01,
         "max_abs_error_as_is": 0.02, "samples": 16, "reconverted_gain_db": 2.5, "reconverted_samples": 256}
    line = audit.summary_lines({**cnn_doc["summary"], "exclude": e})[4]
    assert line.startswith("exclude: try nodes_to_exclude=['fc0']: re-converted with it +2.5 dB"), line
    line = audit.summary_lines({**cnn_doc["summary"], "exclude": {**e, "gain_db": 3.1, "reconverted_gain_db": 0.1}})[4]
    assert line.startswith("exclude: no single node stands out"), line


def test_ort_s_fixed_softmax_ruler_is_marked_and_not_ranked(tmp_path):
    """QOperator: ORT writes QLinearSoftmax's output at 1/256 whatever the data, so the values near 1 clip; the ruler
    is marked fixed by ORT, left out of the worst rulers, and said apart in the summary."""
    m = square_gemm(tmp_path, QuantFormat.QOperator, softmax=True)
    doc = audit.audit(m["fp32"], m["int8"], m["data"], options=audit.Options(rank_samples=0, latency_runs=0))
    y = by_tensor(doc)["y"]
    assert y["scale"] == 1 / 256 and y["diagnosis"] == "clipping" and y["fixed"].startswith("fixed by ORT")
    assert "y" not in {w["tensor"] for w in doc["summary"]["worst_rulers"]}
    assert "fixed by ORT, not ranked: y (clipping" in doc["summary"]["lines"][3]
    assert "clipping (fixed by ORT)" in audit.format_report(doc)


def test_fewest_steps_lists_the_fewest_first():
    acts = [{"tensor": t, "measured": True, "diagnosis": "fine", "steps_used": 255, "steps": 255,
             "clipped_fraction": 0.0} for t in ("a", "b")]
    weights = [{"weight": "w", "steps_worst": 126, "steps": 255, "paid": False, "clipped": 0.0}]
    worst = audit.worst_rulers({"rulers": acts, "weight_rulers": weights})
    assert [w["tensor"] for w in worst] == ["w", "a", "b"] and all(w["fine"] for w in worst)


def test_html_to_a_missing_folder_is_refused_before_the_audit_runs(tmp_path, monkeypatch, capsys):
    def never(*args, **kwargs):
        raise AssertionError("the audit ran")

    monkeypatch.setattr(audit, "audit", never)
    page = tmp_path / "missing" / "audit.html"
    assert audit_tool.main(["a.onnx", "b.onnx", "--data", "x.npy", "--html", str(page)]) == 2
    assert f"{page}: cannot write the HTML report (no folder {page.parent})" in capsys.readouterr().err
