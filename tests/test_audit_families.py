"""The other kernel family on graphs the lab did not build (``lab.hybrid``), checked against real kernels.

Models: a CNN with the ops of real ones (strided and depthwise Conv, HardSwish, a residual Add, a Sigmoid gate,
AveragePool, Resize, Concat, GlobalAveragePool, Gemm) quantized QDQ and QOperator; a CNN whose pools have 24
channels (QDQ: a float AveragePool ORT blocks by 8 channels on AVX2 and leaves unblocked on AVX-512, and a
QLinearGlobalAveragePool; QOperator: QLinearAveragePool and QLinearGlobalAveragePool); a transformer block on int64
token ids (Gather, LayerNormalization, 3-D and 4-D MatMul, two-head attention with Reshape, Transpose and Softmax,
ReduceMean); and onnx's zoo SqueezeNet with seeded weights (``lab.zoo``), pre-processed as ORT's docs advise. None
of them is covered by ``lab.kernels``' own table.

* fast: on this machine's family the hybrid gives ORT's own output, and where ``lab.kernels`` covers a model the
  hybrid equals it on both families; the audit computes the other family on every model and reports the families'
  difference.
* slow: real AVX2 kernels without VNNI (``qemu-x86_64-static -cpu Haswell``, tests/kernel_families.py) against the
  hybrid's saturating family, bit for bit, in one process. Skipped without qemu, except in CI.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import kernel_families as kf
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static
from onnxruntime.quantization.shape_inference import quant_pre_process

from lab import audit, camera, graph, hybrid, kernels, zoo
from lab.kernels import SATURATING
from lab.readers import ArrayReader

TOKENS, VOCAB, WIDTH, CLASSES = 8, 50, 32, 10


class Reader(CalibrationDataReader):
    """Any array in batches, its dtype kept (int64 token ids stay int64)."""

    def __init__(self, x: np.ndarray, name: str, batch: int = 8):
        self.x, self.name, self.i, self.batch = x, name, 0, batch

    def get_next(self):
        if self.i >= len(self.x):
            return None
        self.i += self.batch
        return {self.name: self.x[self.i - self.batch:self.i]}


def _init(rng, name, shape, scale=None):
    fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else shape[0]
    value = rng.normal(0, scale if scale is not None else np.sqrt(2.0 / fan_in), shape).astype(np.float32)
    return numpy_helper.from_array(value, name)


def cnn_ops(seed: int = 3) -> onnx.ModelProto:
    """[N, 3, 16, 16] -> 10 classes, with the ops of real CNNs."""
    rng = np.random.default_rng(seed)
    inits = [_init(rng, "w1", (16, 3, 3, 3)), _init(rng, "b1", (16,), 0.1), _init(rng, "wd", (16, 1, 3, 3)),
             _init(rng, "wg", (16, 16, 1, 1)), _init(rng, "w2", (32, 32, 3, 3)), _init(rng, "fc", (10, 32)),
             _init(rng, "fcb", (10,), 0.1),
             numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "up")]
    n = helper.make_node
    nodes = [n("Conv", ["x", "w1", "b1"], ["c1"], strides=[2, 2], pads=[1, 1, 1, 1]),      # strided: 8x8
             n("HardSwish", ["c1"], ["h1"]),
             n("Conv", ["h1", "wd"], ["d1"], group=16, pads=[1, 1, 1, 1]),                  # depthwise
             n("Add", ["d1", "h1"], ["r1"]),                                                 # residual
             n("Conv", ["r1", "wg"], ["g0"]), n("Sigmoid", ["g0"], ["g1"]), n("Mul", ["r1", "g1"], ["m1"]),  # gate
             n("AveragePool", ["m1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),         # 4x4
             n("Resize", ["p1", "", "up"], ["u1"], mode="nearest"),                          # 8x8
             n("Concat", ["u1", "m1"], ["k1"], axis=1),                                       # 32 channels
             n("Conv", ["k1", "w2"], ["c2"], pads=[1, 1, 1, 1]), n("Relu", ["c2"], ["a2"]),
             n("GlobalAveragePool", ["a2"], ["gp"]), n("Flatten", ["gp"], ["f"]),
             n("Gemm", ["f", "fc", "fcb"], ["logits"], transB=1), n("Softmax", ["logits"], ["y"])]
    g = helper.make_graph(nodes, "cnn_ops", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 16, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 10])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def pools_cnn(seed: int = 5) -> onnx.ModelProto:
    """[N, 3, 16, 16] -> 10 classes through 24-channel pools. As in ShuffleNet's shortcut, the first AveragePool's
    input also feeds a strided grouped Conv (a float Conv ORT does not block), so in QDQ ORT keeps that pool in float
    between DequantizeLinear and QuantizeLinear: 8 divides 24 and 16 does not, so ORT blocks it on AVX2 and not on
    AVX-512 (``lab.hybrid``). The second AveragePool (counting its padding) and the GlobalAveragePool fuse into
    QLinear pools."""
    rng = np.random.default_rng(seed)
    inits = [_init(rng, "w1", (24, 3, 3, 3)), _init(rng, "b1", (24,), 0.1), _init(rng, "ws", (24, 6, 3, 3)),
             _init(rng, "w2", (24, 48, 3, 3)), _init(rng, "fc", (10, 24)), _init(rng, "fcb", (10,), 0.1)]
    n = helper.make_node
    nodes = [n("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]), n("Relu", ["c1"], ["a1"]),
             n("AveragePool", ["a1"], ["p1"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),   # 8x8
             n("Conv", ["a1", "ws"], ["s1"], strides=[2, 2], pads=[1, 1, 1, 1], group=4),
             n("Concat", ["p1", "s1"], ["k1"], axis=1),                                                    # 48
             n("Conv", ["k1", "w2"], ["c2"], pads=[1, 1, 1, 1]), n("Relu", ["c2"], ["a2"]),
             n("AveragePool", ["a2"], ["p2"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], count_include_pad=1),
             n("GlobalAveragePool", ["p2"], ["gp"]), n("Flatten", ["gp"], ["f"]),
             n("Gemm", ["f", "fc", "fcb"], ["logits"], transB=1), n("Softmax", ["logits"], ["y"])]
    g = helper.make_graph(nodes, "pools_cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 16, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 10])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def transformer_ops(seed: int = 4) -> onnx.ModelProto:
    """int64 token ids [N, 8] -> 10 classes: embedding, LayerNorm, two-head attention, a 3-D MLP, mean over tokens."""
    rng = np.random.default_rng(seed)
    d = WIDTH
    inits = [_init(rng, "emb", (VOCAB, d), 1.0), _init(rng, "wq", (d, d)), _init(rng, "wk", (d, d)),
             _init(rng, "wv", (d, d)), _init(rng, "wo", (d, d)), _init(rng, "w1", (d, 2 * d)),
             _init(rng, "w2", (2 * d, d)), _init(rng, "head", (d, CLASSES)),
             numpy_helper.from_array(np.ones(d, np.float32), "gamma"),
             numpy_helper.from_array(np.zeros(d, np.float32), "beta"),
             numpy_helper.from_array(np.array([0, 0, 2, d // 2], np.int64), "split_heads"),
             numpy_helper.from_array(np.array([0, 0, d], np.int64), "join_heads"),
             numpy_helper.from_array(np.array(1 / np.sqrt(d // 2), np.float32), "temperature")]
    n = helper.make_node
    heads = []
    for name in ("q", "k", "v"):
        heads += [n("MatMul", ["ln1", f"w{name}"], [f"{name}0"]),
                  n("Reshape", [f"{name}0", "split_heads"], [f"{name}1"]),
                  n("Transpose", [f"{name}1"], [f"{name}2"], perm=[0, 2, 3, 1] if name == "k" else [0, 2, 1, 3])]
    nodes = [n("Gather", ["emb", "ids"], ["e"]),
             n("LayerNormalization", ["e", "gamma", "beta"], ["ln1"], axis=-1), *heads,
             n("MatMul", ["q2", "k2"], ["s0"]), n("Mul", ["s0", "temperature"], ["s1"]),
             n("Softmax", ["s1"], ["s2"], axis=-1), n("MatMul", ["s2", "v2"], ["o0"]),
             n("Transpose", ["o0"], ["o1"], perm=[0, 2, 1, 3]), n("Reshape", ["o1", "join_heads"], ["o2"]),
             n("MatMul", ["o2", "wo"], ["o3"]), n("Add", ["o3", "e"], ["r1"]),
             n("LayerNormalization", ["r1", "gamma", "beta"], ["ln2"], axis=-1),
             n("MatMul", ["ln2", "w1"], ["f1"]), n("Relu", ["f1"], ["f2"]), n("MatMul", ["f2", "w2"], ["f3"]),
             n("Add", ["f3", "r1"], ["r2"]), n("ReduceMean", ["r2"], ["pooled"], axes=[1], keepdims=0),
             n("MatMul", ["pooled", "head"], ["logits"]), n("Softmax", ["logits"], ["y"])]
    g = helper.make_graph(nodes, "transformer_ops",
                          [helper.make_tensor_value_info("ids", TensorProto.INT64, ["N", TOKENS])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", CLASSES])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def images(n: int, seed: int, size: int = 16) -> np.ndarray:
    return zoo.images(n, seed, size)


def token_ids(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, VOCAB, (n, TOKENS)).astype(np.int64)


def _quantize(fp32: Path, out: Path, x: np.ndarray, fmt: str, name: str) -> Path:
    quantize_static(str(fp32), str(out), Reader(x, name), quant_format=getattr(QuantFormat, fmt), per_channel=True,
                    activation_type=QuantType.QUInt8 if fmt == "QOperator" else QuantType.QInt8)
    return out


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, dict]:
    """name -> {fp32, int8, data (.npy), x}: each FP32 model, its quantized form and a batch of its inputs."""
    folder = tmp_path_factory.mktemp("families")
    built = {}
    for name, model, make in (("cnn", cnn_ops(), images), ("pools", pools_cnn(), images),
                              ("transformer", transformer_ops(), token_ids)):
        fp32 = folder / f"{name}-fp32.onnx"
        onnx.save(model, fp32)
        formats = ("QDQ",) if name == "transformer" else ("QDQ", "QOperator")
        for fmt in formats:
            key = f"{name}_{fmt.lower()}"
            x = make(48, 7)
            np.save(folder / f"{key}.npy", x)
            built[key] = {"fp32": fp32, "int8": _quantize(fp32, folder / f"{key}.onnx", make(32, 1), fmt,
                                                          model.graph.input[0].name),
                          "data": folder / f"{key}.npy", "x": x}
    fp32 = folder / "squeezenet-fp32.onnx"
    onnx.save(zoo.light_model("squeezenet", zoo.images(4, 1)), fp32)
    quant_pre_process(str(fp32), str(folder / "squeezenet-pre.onnx"))
    x = zoo.images(2, 9)
    np.save(folder / "squeezenet_qdq.npy", x)
    built["squeezenet_qdq"] = {"fp32": fp32, "int8": _quantize(folder / "squeezenet-pre.onnx",
                                                                folder / "squeezenet_qdq.onnx", zoo.images(8, 3),
                                                                "QDQ", "data_0"),
                               "data": folder / "squeezenet_qdq.npy", "x": x}
    return built


def other(path: Path, x: np.ndarray, family: str = SATURATING) -> np.ndarray:
    m = graph.load(path)
    return hybrid.HybridRun(m, family, m.graph.input[0].name).run(x)


# --- fast -----------------------------------------------------------------------------------------------------

def test_the_kernels_table_covers_none_of_these_models(models):
    for name, built in models.items():
        assert kernels.uncovered(graph.load(built["int8"])), name


def test_on_this_machines_family_the_hybrid_is_onnx_runtime(models):
    """The stages and the emulated kernels together give ORT's own output on this machine, bit for bit."""
    for name, built in models.items():
        m = graph.load(built["int8"])
        here = graph.session(m).run(None, {m.graph.input[0].name: built["x"]})[0]
        np.testing.assert_array_equal(here, other(built["int8"], built["x"], kernels.machine_family()), err_msg=name)


def test_where_lab_kernels_covers_a_model_the_hybrid_equals_it(tmp_path):
    """The lab's CNN quantized QDQ per-channel: both families, bit for bit, ORT stages or not."""
    shutil.copy(camera.model_path(), tmp_path / "cnn.onnx")
    calibration = camera.load_split("calibration").image
    quantize_static(str(tmp_path / "cnn.onnx"), str(tmp_path / "q.onnx"), ArrayReader(calibration, 36, "image"),
                    quant_format=QuantFormat.QDQ, per_channel=True)
    x = camera.load_split("evaluation").image[:100]
    for family in kernels.FAMILIES:
        np.testing.assert_array_equal(other(tmp_path / "q.onnx", x, family),
                                      kernels.emulate(tmp_path / "q.onnx", x, family, "image"))


def test_the_audit_computes_the_other_family_on_every_model_and_their_difference(models):
    for name, built in models.items():
        doc = audit.audit(built["fp32"], built["int8"], built["data"])
        assert all(f["computed_on"] for f in doc["families"]), (name, doc["families"])
        d = doc["family_difference"]
        assert d and d["values"] == built["x"].shape[0] * (10 if "squeezenet" not in name else 1000)
        here = next(f for f in doc["families"] if f["computed_on"] == "this machine's kernels")
        emulated = other(built["int8"], built["x"])
        fp32 = graph.session(graph.load(built["fp32"])).run(None, {graph.load(built["fp32"]).graph.input[0].name:
                                                                   built["x"]})[0]
        saturating = next(f for f in doc["families"] if f["family"] == SATURATING)
        assert saturating["max_abs_error"] == pytest.approx(float(np.abs(fp32 - emulated).max()), abs=1e-6), name
        assert here["max_abs_error"] >= 0
        # a float layout the emulation cannot settle makes the other family's numbers approximate, and says so
        unsettled = hybrid.HybridRun(graph.load(built["int8"]), SATURATING, "x").approximate
        emulated_row = next(f for f in doc["families"] if f["computed_on"] == "emulation")
        assert ("caveat" in emulated_row) == bool(unsettled) == ("caveat" in d), (name, unsettled)
    assert doc["data"]["dtype"] == "float32"
    token = audit.audit(models["transformer_qdq"]["fp32"], models["transformer_qdq"]["int8"],
                        models["transformer_qdq"]["data"])
    assert token["data"]["dtype"] == "int64"   # token ids stay int64


# --- slow: real saturating kernels -----------------------------------------------------------------------------

RUNNER = '''"""python runner.py OUT.npz IN.npz MODEL.onnx...: each model's first output on its own input."""
import sys
import numpy as np
import onnxruntime as ort

out, inputs, *models = sys.argv[1:]
got = {}
so = ort.SessionOptions()
so.intra_op_num_threads = so.inter_op_num_threads = 1
so.log_severity_level = 3
with np.load(inputs) as feed:
    for path in models:
        stem = path.rsplit("/", 1)[-1][:-len(".onnx")]
        session = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
        got[stem] = session.run(None, {session.get_inputs()[0].name: feed[stem]})[0]
np.savez(out, **got)
'''


@pytest.fixture(scope="module")
def haswell(models, tmp_path_factory) -> dict[str, np.ndarray]:
    prefix = kf.family_prefix(kf.require_haswell)
    folder = tmp_path_factory.mktemp("haswell-audit")
    (folder / "runner.py").write_text(RUNNER)
    np.savez(folder / "in.npz", **{name: built["x"] for name, built in models.items()})
    kf.run(prefix, folder / "runner.py", folder / "out.npz", folder / "in.npz",
           *(built["int8"] for built in models.values()), timeout=1800)
    with np.load(folder / "out.npz") as saved:
        return {key: saved[key] for key in saved.files}


def test_the_pools_need_no_caveat_and_the_float_pool_is_laid_out_as_avx2_does(models):
    """Both models run QLinearAveragePool and QLinearGlobalAveragePool, the same on both CPUs (ORT stages); the QDQ
    model's float AveragePool is a step of its own for the saturating family (blocked as on AVX2); nothing is
    approximate."""
    for name in ("pools_qdq", "pools_qoperator"):
        run = hybrid.HybridRun(graph.load(models[name]["int8"]), SATURATING, "x")
        assert run.approximate == [], name
        ops = {(n.domain, n.op_type) for n in run.model.graph.node}
        assert {("com.microsoft", "QLinearAveragePool"), ("com.microsoft", "QLinearGlobalAveragePool")} <= ops, name
        floats = [s for s in run.steps if isinstance(s, hybrid.Pool)]
        assert len(floats) == (name == "pools_qdq" and kernels.machine_family() != SATURATING), (name, floats)


@pytest.mark.parametrize(("op", "attrs"), [
    ("AveragePool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ("AveragePool", {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "count_include_pad": 1}),
    ("AveragePool", {"kernel_shape": [2, 2], "strides": [2, 2]}),
    ("GlobalAveragePool", {})])
def test_a_blocked_float_pool_is_computed_as_ort_s_blocked_kernel_computes_it(op, attrs):
    """32 channels: every x86 CPU with AVX2 blocks the pool (NCHWc), so this machine's ORT runs the blocked kernel
    when it optimizes, its generic one when it does not; ``lab.hybrid.blocked_pool`` equals the first bit for bit,
    and the two kernels differ (which is why the layout matters)."""
    node = helper.make_node(op, ["x"], ["y"], **attrs)
    model = helper.make_model(helper.make_graph([node], "pool", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [2, 32, 14, 14])], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]),
        opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    x = np.random.default_rng(0).normal(0, 1, (2, 32, 14, 14)).astype(np.float32)
    blocked = hybrid.lean_session(model).run(None, {"x": x})[0]
    generic = hybrid.lean_session(model, optimize=False).run(None, {"x": x})[0]
    if not any(n.domain == "com.microsoft.nchwc" for n in hybrid.optimized(model).graph.node):
        pytest.skip("this CPU's ORT does not block float pools (no AVX2)")
    np.testing.assert_array_equal(hybrid.blocked_pool(node, x), blocked)
    assert np.any(blocked != generic)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["cnn_qdq", "cnn_qoperator", "pools_qdq", "pools_qoperator", "transformer_qdq",
                                  "squeezenet_qdq"])
def test_real_saturating_kernels_equal_the_hybrid(haswell, models, name):
    """qemu Haswell (AVX2, no VNNI) against the hybrid's saturating family, bit for bit."""
    built = models[name]
    emulated = other(built["int8"], built["x"])
    print(f"{name}: max difference {float(np.abs(haswell[name] - emulated).max()):.3g}, families differ by "
          f"{float(np.abs(other(built['int8'], built['x'], kernels.EXACT) - emulated).max()):.3g}")
    np.testing.assert_array_equal(haswell[name], emulated, err_msg=name)


EXACT_ON_AVX2 = '''"""python exact.py REPO MODEL.onnx X.npy OUT.npz: the hybrid's exact family here, and its caveats."""
import json, sys
sys.path.insert(0, sys.argv[1])
import numpy as np, onnx
from lab import hybrid, kernels
m = onnx.load(sys.argv[2])
run = hybrid.HybridRun(m, kernels.EXACT, m.graph.input[0].name)
np.savez(sys.argv[4], y=run.run(np.load(sys.argv[3])), family=kernels.machine_family(),
         approximate=json.dumps(run.approximate))
'''


@pytest.mark.slow
def test_computed_on_avx2_the_exact_family_s_blocked_pools_are_called_approximate(models, tmp_path):
    """On AVX2 (qemu Haswell) ORT blocks the pools CNN's 24-channel float AveragePool by 8; an exact CPU with AVX-512
    blocks by 16, so it does not: the hybrid's exact family says its numbers are approximate (measured: 8 values one
    step away from this VNNI CPU's)."""
    prefix = kf.family_prefix(kf.require_haswell)
    built = models["pools_qdq"]
    np.save(tmp_path / "x.npy", built["x"])
    (tmp_path / "exact.py").write_text(EXACT_ON_AVX2)
    kf.run(prefix, tmp_path / "exact.py", kf.REPO_ROOT, built["int8"], tmp_path / "x.npy", tmp_path / "out.npz",
           timeout=600)
    with np.load(tmp_path / "out.npz") as got:
        assert str(got["family"]) == SATURATING
        caveats = json.loads(str(got["approximate"]))
        assert caveats == ["a blocked float pool (NCHWc: 8 or 16 channels a block by CPU)"]
        if kernels.machine_family() == kernels.EXACT:
            here = graph.session(graph.load(built["int8"])).run(None, {"x": built["x"]})[0]
            print(f"exact family computed on AVX2: {int(np.count_nonzero(here != got['y']))} values differ from "
                  "this CPU's")


# --- slow: onnx's zoo graphs, QDQ and QOperator, against real saturating kernels ----------------------------------

ZOO = ("inception_v1", "shufflenet", "resnet50")


@pytest.fixture(scope="module")
def zoo_models(tmp_path_factory) -> dict[str, tuple[Path, np.ndarray]]:
    folder = tmp_path_factory.mktemp("zoo")
    built = {}
    for name in ZOO:
        fp32, pre = folder / f"{name}.onnx", folder / f"{name}-pre.onnx"
        model = zoo.light_model(name, zoo.images(4, 1))
        onnx.save(model, fp32)
        quant_pre_process(str(fp32), str(pre))
        for fmt in ("QDQ", "QOperator"):
            out = _quantize(pre, folder / f"{name}_{fmt}.onnx", zoo.images(4, 3), fmt, model.graph.input[0].name)
            built[out.stem] = (out, zoo.images(1, 9))
    return built


@pytest.fixture(scope="module")
def zoo_haswell(zoo_models, tmp_path_factory) -> dict[str, np.ndarray]:
    prefix = kf.family_prefix(kf.require_haswell)
    folder = tmp_path_factory.mktemp("haswell-zoo")
    (folder / "runner.py").write_text(RUNNER)
    np.savez(folder / "in.npz", **{name: x for name, (_, x) in zoo_models.items()})
    kf.run(prefix, folder / "runner.py", folder / "out.npz", folder / "in.npz",
           *(path for path, _ in zoo_models.values()), timeout=2400)
    with np.load(folder / "out.npz") as saved:
        return {key: saved[key] for key in saved.files}


@pytest.mark.slow
@pytest.mark.parametrize("name", [f"{m}_{f}" for m in ZOO for f in ("QDQ", "QOperator")])
def test_real_saturating_kernels_equal_the_hybrid_on_the_zoo(zoo_haswell, zoo_models, name):
    """Bit for bit (shufflenet's QDQ AveragePools, 24 channels, are blocked on AVX2 and not on AVX-512: the hybrid
    lays them out as AVX2 does); this machine's ORT exactly."""
    path, x = zoo_models[name]
    m = graph.load(path)
    assert graph.session(m).run(None, {m.graph.input[0].name: x})[0].tobytes() == other(
        path, x, kernels.machine_family()).tobytes()
    emulated = other(path, x)
    difference = float(np.abs(zoo_haswell[name] - emulated).max())
    print(f"{name}: max difference {difference:.3g} against qemu Haswell")
    assert difference == 0, name


def test_the_x64_check_and_the_ranking_are_lines_where_they_cannot_run(models):
    """ORT 1.32 fails to load some models with the x64 option ('Attempt to replace the existing tensor', seen on one of
    these): the audit says so in its x64 line; a graph with unnamed nodes cannot be ranked (nodes_to_exclude takes
    names): a line says so."""
    built = models["transformer_qdq"]
    doc = audit.audit(built["fp32"], built["int8"], built["data"])
    fix = doc["x64_fix"]
    assert fix is not None and ("with" in fix or fix["note"].startswith("not measured: "))
    assert audit.x64_line(fix) in audit.format_report(doc)
    assert "which node to exclude: no named GEMM or Conv node" in audit.format_report(doc)   # its nodes are unnamed
