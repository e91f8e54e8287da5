"""lab.kernels computes Conv models as each INT8 kernel family does: checked against ORT's real kernels.

The models: the CNN fixture (Conv + BatchNormalization as exported, a depthwise Conv and a residual Add, MaxPool,
GlobalAveragePool, Gemm, Softmax) converted in QDQ and QOperator form (QLinearConv, QLinearAdd,
QLinearGlobalAveragePool, QGemm), per-tensor and per-channel
(Conv weights on axis 0), with and without reduce_range, before and after ORT's pre-processing (which folds the
BatchNormalization into the Conv); and PyTorch-exported Conv2d models from onnx's own test data (strides, pads,
dilations, groups, depthwise, no bias), upgraded to opset 17 first (their opset has no ``axis`` on
DequantizeLinear), which the lab did not write.

* fast: on this machine's family the emulation equals this machine's ORT bit for bit; the field notes' probe
  (a QDQ Conv, 16 input channels, 3x3, weights 127, input 1.0, output scale 256) gives 18,176 exact and 9,216
  saturating; ``int_conv`` matches a brute-force loop that pairs the raw products along K as the kernels do;
  ops and attributes the emulation does not cover are refused by name.
* slow: the real saturating kernels (``qemu-x86_64-static -cpu Haswell``) equal the emulation bit for bit; the
  real ARM kernels (aarch64 under qemu) are within one output step of the exact emulation.
"""
from __future__ import annotations

import platform
import shutil
from pathlib import Path

import kernel_families as kf
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper, version_converter
from onnxruntime.quantization import QuantFormat, QuantType, quantize_static
from onnxruntime.quantization.shape_inference import quant_pre_process

from lab import camera, data, graph, hybrid, kernels
from lab.kernels import EXACT, SATURATING, ConvShape, EmulationError
from lab.readers import ArrayReader

RUN_ANY_MODELS = kf.TESTS_DIR / "run_any_models.py"
TORCH_MODELS = Path(onnx.__file__).parent / "backend" / "test" / "data" / "pytorch-converted"

# kind -> (pre-processed?, quantize_static settings)
QDQ, QOP, U8 = QuantFormat.QDQ, QuantFormat.QOperator, QuantType.QUInt8
CNN_KINDS = {
    "qdq_tensor": (False, dict(quant_format=QDQ)),
    "qdq_channel": (False, dict(quant_format=QDQ, per_channel=True)),
    "qdq_channel_rr": (False, dict(quant_format=QDQ, per_channel=True, reduce_range=True)),
    "qdq_u8_channel": (False, dict(quant_format=QDQ, per_channel=True, activation_type=U8)),
    "qop_s8_channel": (False, dict(quant_format=QOP, per_channel=True)),
    "qop_u8_channel": (False, dict(quant_format=QOP, per_channel=True, activation_type=U8)),
    "qop_u8_tensor": (False, dict(quant_format=QOP, activation_type=U8)),
    "qop_u8_channel_rr": (False, dict(quant_format=QOP, per_channel=True, activation_type=U8, reduce_range=True)),
    # pre-processing folds each BatchNormalization into its Conv; QOperator then runs QLinearGlobalAveragePool
    "pre_qdq_channel": (True, dict(quant_format=QDQ, per_channel=True)),
    "pre_qop_u8_channel": (True, dict(quant_format=QOP, per_channel=True, activation_type=U8)),
    # QUInt8 QDQ: the residual block's shared input needs no s8 -> u8 move, so ORT fuses its depthwise Conv into
    # QLinearConv and its Add into QLinearAdd; with QInt8 (every other QDQ kind) both stay float ops on x86
    "pre_qdq_u8_channel": (True, dict(quant_format=QDQ, per_channel=True, activation_type=U8)),
}
TORCH_KINDS = {k: CNN_KINDS[k][1] for k in ("qdq_tensor", "qdq_channel", "qop_u8_channel")}


def quantize(source: Path, out: Path, name: str, calibration: np.ndarray, size: int, options: dict) -> Path:
    quantize_static(str(source), str(out), ArrayReader(calibration, size, name), **options)
    return out


@pytest.fixture(scope="module")
def cnn_models(tmp_path_factory) -> dict[str, Path]:
    """Every kind in CNN_KINDS, converted from a copy of the CNN fixture (ORT writes next to its input)."""
    folder = tmp_path_factory.mktemp("cnn")
    source, pre = folder / "source.onnx", folder / "pre.onnx"
    shutil.copy(camera.model_path(), source)
    quant_pre_process(str(source), str(pre), skip_symbolic_shape=True)
    calibration = camera.load_split("calibration").image
    return {kind: quantize(pre if preprocessed else source, folder / f"cnn-{kind}.onnx", camera.INPUT_NAME,
                           calibration, 36, options)
            for kind, (preprocessed, options) in CNN_KINDS.items()}


EXCLUDED = ("conv1", "dwconv", "conv2", "fc")   # one at a time, from the pre-processed QDQ QInt8 form


@pytest.fixture(scope="module")
def excluded_models(tmp_path_factory) -> dict[str, Path]:
    """The pre-processed per-tensor QDQ CNN with one node left out of quantization (``nodes_to_exclude``): float
    weights in the file, which ORT's session quantizes at load where the node sits between quantized tensors."""
    folder = tmp_path_factory.mktemp("excluded")
    source, pre = folder / "source.onnx", folder / "pre.onnx"
    shutil.copy(camera.model_path(), source)
    quant_pre_process(str(source), str(pre), skip_symbolic_shape=True)
    calibration = camera.load_split("calibration").image
    return {f"without-{n}": quantize(pre, folder / f"without-{n}.onnx", camera.INPUT_NAME, calibration, 36,
                                     dict(quant_format=QDQ, nodes_to_exclude=[n])) for n in EXCLUDED}


def test_an_excluded_node_runs_as_the_session_runs_it(excluded_models, cnn_inputs):
    """ORT quantizes an excluded Conv or Gemm between quantized tensors at load (``lab.load_time``); one that reads the
    float input stays float. The emulation follows, bit for bit with this machine's session."""
    from lab import load_time
    for name, model in excluded_models.items():
        np.testing.assert_array_equal(emulate(model, cnn_inputs, kernels.machine_family()), native(model, cnn_inputs),
                                      err_msg=name)
        requantized = load_time.requantized(onnx.load(str(model)))
        assert requantized == ([] if name == "without-conv1" else [name.removeprefix("without-")]), (name, requantized)


def conv_then(op: str) -> onnx.ModelProto:
    """Q -> DQ -> Conv (float weight and bias) -> ``op`` -> Q -> DQ: a node the converter left in float."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(np.float32(0.02), "s"), numpy_helper.from_array(np.uint8(128), "z"),
             numpy_helper.from_array(np.float32(0.05), "s2"), numpy_helper.from_array(np.zeros(4, np.float32), "B"),
             numpy_helper.from_array(rng.standard_normal((4, 2, 3, 3)).astype(np.float32), "W")]
    extra = {"Reshape": {"shape": [1, 4, 64]}, "Slice": {"starts": [0], "ends": [2], "axes": [1]},
             "Squeeze": {"axes_s": [0]}, "Unsqueeze": {"axes_u": [0]}}.get(op, {})
    inits += [numpy_helper.from_array(np.array(v, np.int64), k) for k, v in extra.items()]
    attrs = {"MaxPool": {"kernel_shape": [2, 2], "strides": [2, 2]}, "Transpose": {"perm": [0, 2, 3, 1]}}.get(op, {})
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"]),
             helper.make_node("Conv", ["xd", "W", "B"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node(op, ["c", *extra], ["p"], **attrs),
             helper.make_node("QuantizeLinear", ["p", "s2", "z"], ["yq"]),
             helper.make_node("DequantizeLinear", ["yq", "s2", "z"], ["y"])]
    graph_ = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 8, 8])],
                               [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph_, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("op", ["Relu", "Clip", "MaxPool", "Reshape", "Transpose", "Squeeze", "Unsqueeze", "Slice",
                                "Flatten", "Sigmoid"])
def test_the_ops_a_weight_is_quantized_across_are_the_sessions(op, tmp_path):
    """``lab.load_time`` quantizes a float Conv's weight exactly where ORT's session does: its optimized graph has
    the Conv fused into QLinearConv or reading a DequantizeLinear weight."""
    from lab import load_time
    model = conv_then(op)
    options = ort.SessionOptions()
    options.optimized_model_filepath, options.log_severity_level = str(tmp_path / "optimized.onnx"), 3
    ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    optimized = onnx.load(str(tmp_path / "optimized.onnx"))
    producer = {o: n.op_type for n in optimized.graph.node for o in n.output}
    session = any(n.op_type == "QLinearConv" or (n.op_type in ("Conv", "FusedConv") and
                                                  producer.get(n.input[1]) == "DequantizeLinear")
                  for n in optimized.graph.node)
    assert (load_time.requantized(model) == ["conv"]) == session, (op, [n.op_type for n in optimized.graph.node])


@pytest.fixture(scope="module")
def cnn_inputs() -> np.ndarray:
    return camera.load_split("evaluation").image


def torch_model(folder: Path) -> tuple[onnx.ModelProto, np.ndarray]:
    """One of onnx's PyTorch-exported Conv2d models, upgraded to opset 17 with a free batch size, and its input."""
    model = version_converter.convert_version(onnx.load(folder / "model.onnx"), 17)
    for value in (model.graph.input[0], model.graph.output[0]):
        value.type.tensor_type.shape.dim[0].dim_param = "N"
    x = numpy_helper.to_array(onnx.load_tensor(folder / "test_data_set_0" / "input_0.pb"))
    return model, x


@pytest.fixture(scope="module")
def torch_models(tmp_path_factory) -> dict[str, tuple[Path, np.ndarray]]:
    """name -> (quantized model, input batch): each test_Conv2d* model in each of TORCH_KINDS, calibrated on
    seeded normal inputs of its shape."""
    folder = tmp_path_factory.mktemp("torch")
    rng = np.random.default_rng(20261202)
    built = {}
    for test in sorted(TORCH_MODELS.glob("test_Conv2d*")):
        model, x = torch_model(test)
        source = folder / f"{test.name}-fp32.onnx"
        onnx.save(model, source)
        name = model.graph.input[0].name
        calibration = rng.normal(0, 1, (32, *x.shape[1:])).astype(np.float32)
        inputs = rng.normal(0, 1, (16, *x.shape[1:])).astype(np.float32)
        for kind, options in TORCH_KINDS.items():
            out = quantize(source, folder / f"{test.name}-{kind}.onnx", name, calibration, 8, options)
            built[out.stem] = (out, inputs)
    return built


def input_name(model) -> str:
    return graph.load(model).graph.input[0].name


def native(model, x) -> np.ndarray:
    return graph.session(model).run(None, {input_name(model): x})[0]


def emulate(model, x, family) -> np.ndarray:
    return kernels.emulate(model, x, family, input_name(model))


def output_step(model) -> float:
    """One step of the model's output grid (the CNN's Softmax grid; a Conv model's output ruler)."""
    m = graph.load(model)
    scale = graph.output_scale(model, m.graph.output[0].name)
    return scale if scale is not None else 1 / 255


# --- fast: this machine's family, bit for bit --------------------------------------------------------------------

def test_the_cnn_kinds_cover_the_integer_ops(cnn_models):
    ops = {kind: graph.op_counts(path) for kind, path in cnn_models.items()}
    assert ops["qop_u8_channel"]["QLinearConv"] == 3 and ops["qop_u8_channel"]["BatchNormalization"] == 3
    assert ops["qop_u8_channel"]["QLinearAdd"] == 1                     # the residual Add
    assert ops["qdq_channel"]["Conv"] == 3 and ops["qdq_channel"]["BatchNormalization"] == 3
    assert "BatchNormalization" not in ops["pre_qdq_channel"]          # folded by ORT's pre-processing
    assert ops["pre_qop_u8_channel"]["QLinearGlobalAveragePool"] == 1
    weights = graph.load(cnn_models["qdq_channel"])
    inits = {i.name: i for i in weights.graph.initializer}
    axes = {n.input[0]: next((a.i for a in n.attribute if a.name == "axis"), 1) for n in weights.graph.node
            if n.op_type == "DequantizeLinear" and n.input[0].startswith("conv")}
    assert axes["conv2.weight_quantized"] == 0                          # per-channel Conv weights: axis 0
    assert list(inits["conv2.weight_scale"].dims) == [64]


@pytest.mark.parametrize("kind", CNN_KINDS)
def test_cnn_emulation_equals_this_machine(cnn_models, cnn_inputs, kind):
    model = cnn_models[kind]
    np.testing.assert_array_equal(emulate(model, cnn_inputs, kernels.machine_family()), native(model, cnn_inputs))


def test_torch_conv_emulation_equals_this_machine(torch_models):
    assert len(torch_models) == 11 * len(TORCH_KINDS)
    for name, (model, x) in torch_models.items():
        np.testing.assert_array_equal(emulate(model, x, kernels.machine_family()), native(model, x), err_msg=name)


# --- fast: facts of the arithmetic, the same on every host -------------------------------------------------------

def probe_conv() -> onnx.ModelProto:
    """The field notes' QDQ Conv: 16 input channels of 1.0 (u8 255 at 1/255), a 3x3 kernel of weights 127 at
    scale 1, output scale 256, no padding on a 3x3 input: one output of 144 x 127 = 18,288 -> 18,176 exact;
    72 pairs saturating at 32,767 / 255 -> 9,216."""
    init = [numpy_helper.from_array(np.array(1 / 255, np.float32), "x_scale"),
            numpy_helper.from_array(np.array(0, np.uint8), "x_zero"),
            numpy_helper.from_array(np.full((1, 16, 3, 3), 127, np.int8), "w_q"),
            numpy_helper.from_array(np.array(1.0, np.float32), "w_scale"),
            numpy_helper.from_array(np.array(0, np.int8), "w_zero"),
            numpy_helper.from_array(np.array(256.0, np.float32), "y_scale"),
            numpy_helper.from_array(np.array(0, np.uint8), "y_zero")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "x_scale", "x_zero"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "x_scale", "x_zero"], ["xd"]),
             helper.make_node("DequantizeLinear", ["w_q", "w_scale", "w_zero"], ["wd"]),
             helper.make_node("Conv", ["xd", "wd"], ["c"], kernel_shape=[3, 3]),
             helper.make_node("QuantizeLinear", ["c", "y_scale", "y_zero"], ["yq"]),
             helper.make_node("DequantizeLinear", ["yq", "y_scale", "y_zero"], ["y"])]
    g = helper.make_graph(nodes, "conv_probe", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 3, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, 1, 1])], init)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_the_conv_probe_tells_the_families_apart():
    model, x = probe_conv(), np.ones((1, 16, 3, 3), np.float32)
    assert kernels.emulate(model, x, EXACT, "x").item() == 18176.0
    assert kernels.emulate(model, x, SATURATING, "x").item() == 9216.0
    real = graph.session(model).run(None, {"x": x})[0].item()
    assert real == {EXACT: 18176.0, SATURATING: 9216.0}[kernels.machine_family()]


def test_reduced_range_weights_never_saturate(cnn_models, cnn_inputs):
    """|w| <= 64 (reduce_range): 255 x 64 x 2 = 32,640 fits in an int16, so both families compute the same."""
    for kind in ("qdq_channel_rr", "qop_u8_channel_rr"):
        model = cnn_models[kind]
        np.testing.assert_array_equal(emulate(model, cnn_inputs, SATURATING), emulate(model, cnn_inputs, EXACT))


def test_a_family_free_model_is_computed_alike_by_both_families(cnn_models, cnn_inputs, torch_models):
    """``kernels.family_free`` (which lets ``lab.compare.predict`` skip the emulation) is never wrong: each model it
    frees computes alike on both families; the reduce_range and S8S8 QOperator forms are freed, full-range QDQ
    is not."""
    models = {**{k: (p, cnn_inputs) for k, p in cnn_models.items()}, **torch_models}
    freed = {name for name, (model, _) in models.items() if kernels.family_free(model)}
    for name in freed:
        model, x = models[name]
        np.testing.assert_array_equal(emulate(model, x, SATURATING), emulate(model, x, EXACT), err_msg=name)
    assert {"qdq_channel_rr", "qop_u8_channel_rr", "qop_s8_channel"} <= freed
    # a session with x64 precision has no kernel for int8 activations: the emulation refuses it, so it is not freed
    assert not kernels.family_free(cnn_models["qop_s8_channel"], x64_precision=True)
    assert not freed & {"qdq_tensor", "qdq_channel", "pre_qdq_channel", "qop_u8_tensor"}
    assert not kernels.family_free(probe_conv())


def test_full_range_weights_saturate_on_the_cnn(cnn_models, cnn_inputs):
    model = cnn_models["qdq_channel"]
    assert (emulate(model, cnn_inputs, SATURATING) != emulate(model, cnn_inputs, EXACT)).any()


def test_kernel_family_difference_on_the_cnn(cnn_models, cnn_inputs):
    """Each CNN form under both families against FP32 (printed with -s): per-channel full-range weights saturate,
    reduce_range never does."""
    fp32 = native(camera.model_path(), cnn_inputs)
    labels = camera.load_split("evaluation").labels
    rows = {}
    for kind, model in cnn_models.items():
        outs = {f: emulate(model, cnn_inputs, f) for f in (EXACT, SATURATING)}
        rows[kind] = {f: (float(np.mean(o.argmax(axis=1) == labels)), float(np.abs(o - fp32).max()))
                      for f, o in outs.items()}
    print(f"\nFP32 accuracy {np.mean(fp32.argmax(axis=1) == labels):.4f} on {len(labels)} evaluation frames")
    print(f"{'form':<20}{'exact acc':>10}{'sat. acc':>10}{'exact max err':>15}{'sat. max err':>14}")
    for kind, r in rows.items():
        print(f"{kind:<20}{r[EXACT][0]:>10.4f}{r[SATURATING][0]:>10.4f}{r[EXACT][1]:>15.4f}{r[SATURATING][1]:>14.4f}")
    assert rows["qdq_channel_rr"][EXACT] == rows["qdq_channel_rr"][SATURATING]
    assert rows["qdq_channel"][SATURATING][1] > rows["qdq_channel"][EXACT][1]


def brute_int_conv(x, x_zero, w, w_zero, shape: ConvShape, saturate: bool) -> np.ndarray:
    """Python ints, one output at a time: the raw products of a window in K order (kernel row, kernel column,
    the group's input channel) pair up (2j, 2j+1) into a saturating int16; padding reads the zero point."""
    n, c, h, wd = x.shape
    m, cg, kh, kw = w.shape
    oh, ow = shape.output_size(h, wd)
    t, left = shape.pads[0], shape.pads[1]
    zx, zw = int(x_zero), int(w_zero)
    out = np.zeros((n, m, oh, ow), np.int64)
    for b in range(n):
        for o in range(m):
            g = o // (m // shape.group)
            for i in range(oh):
                for j in range(ow):
                    xs, ws = [], []
                    for ki in range(kh):
                        for kj in range(kw):
                            for ci in range(cg):
                                r = i * shape.strides[0] + ki * shape.dilations[0] - t
                                s = j * shape.strides[1] + kj * shape.dilations[1] - left
                                inside = 0 <= r < h and 0 <= s < wd
                                xs.append(int(x[b, g * cg + ci, r, s]) if inside else zx)
                                ws.append(int(w[o, ci, ki, kj]))
                    products = [a * v for a, v in zip(xs, ws)]
                    if saturate and not (cg == 1 and m == shape.group):
                        raw = sum(min(max(sum(products[p:p + 2]), -32768), 32767) for p in range(0, len(xs), 2))
                    else:
                        raw = sum(products)
                    out[b, o, i, j] = raw - zx * sum(ws) - zw * sum(xs) + len(xs) * zx * zw
    return out


@st.composite
def conv_operands(draw):
    group = draw(st.sampled_from([1, 1, 2, 3]))
    cg, mg = draw(st.integers(1, 3)), draw(st.integers(1, 2))
    kh, kw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    shape = ConvShape((kh, kw), (draw(st.integers(1, 2)), draw(st.integers(1, 2))),
                      (draw(st.integers(1, 2)), draw(st.integers(1, 2))),
                      tuple(draw(st.integers(0, 2)) for _ in range(4)), group)
    h, w = draw(st.integers(3, 6)), draw(st.integers(3, 6))
    if min(shape.output_size(h, w)) < 1:
        h, w, shape = 6, 6, ConvShape((kh, kw), group=group)
    u8 = st.one_of(st.integers(0, 255), st.sampled_from([0, 254, 255]))
    s8 = st.one_of(st.integers(-128, 127), st.sampled_from([-128, 126, 127]))
    x = np.array(draw(st.lists(u8, min_size=2 * group * cg * h * w, max_size=2 * group * cg * h * w)),
                 np.uint8).reshape(2, group * cg, h, w)
    wt = np.array(draw(st.lists(s8, min_size=group * mg * cg * kh * kw, max_size=group * mg * cg * kh * kw)),
                  np.int8).reshape(group * mg, cg, kh, kw)
    return x, np.uint8(draw(st.integers(0, 255))), wt, np.int8(draw(st.integers(-3, 3))), shape


@settings(max_examples=60, deadline=None)
@given(conv_operands(), st.booleans())
def test_int_conv_matches_a_brute_force_loop(operands, saturate):
    x, zx, w, zw, shape = operands
    np.testing.assert_array_equal(kernels.int_conv(x, zx, w, zw, shape, saturate),
                                  brute_int_conv(x, zx, w, zw, shape, saturate))


def one_node_model(node: onnx.NodeProto, in_shape: list[int], out_shape: list[int], inits=()) -> onnx.ModelProto:
    g = helper.make_graph([node], "one", [helper.make_tensor_value_info("x", TensorProto.FLOAT, in_shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)], list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_what_the_emulation_does_not_cover_is_refused_by_name():
    w = numpy_helper.from_array(np.ones((1, 1, 3), np.float32), "w")
    conv1d = one_node_model(helper.make_node("Conv", ["x", "w"], ["y"], name="the_1d_conv"), [1, 1, 5], [1, 1, 3],
                            [w])
    with pytest.raises(EmulationError, match=r"Conv 'the_1d_conv' with a 1-D kernel"):
        kernels.emulate(conv1d, np.ones((1, 1, 5), np.float32), EXACT, "x")
    same = one_node_model(helper.make_node("MaxPool", ["x"], ["y"], name="same_pool", kernel_shape=[2, 2],
                                           auto_pad="SAME_UPPER"), [1, 1, 4, 4], [1, 1, 4, 4])
    with pytest.raises(EmulationError, match=r"MaxPool 'same_pool' .* auto_pad SAME_UPPER"):
        kernels.emulate(same, np.ones((1, 1, 4, 4), np.float32), EXACT, "x")
    transpose = one_node_model(helper.make_node("ConvTranspose", ["x", "w4"], ["y"], name="up"), [1, 1, 2, 2],
                               [1, 1, 4, 4], [numpy_helper.from_array(np.ones((1, 1, 3, 3), np.float32), "w4")])
    assert kernels.uncovered(transpose) == ["ConvTranspose"]
    with pytest.raises(EmulationError, match=r"op ConvTranspose \('up'\) is not covered"):
        kernels.emulate(transpose, np.ones((1, 1, 2, 2), np.float32), SATURATING, "x")


def fused_counts(model) -> dict[str, int]:
    """Op counts of the graph this machine's ORT session runs (its optimized graph)."""
    counts: dict[str, int] = {}
    for n in hybrid.optimized(graph.load(model)).graph.node:
        counts[n.op_type] = counts.get(n.op_type, 0) + 1
    return counts


def test_what_ort_fuses_in_the_residual_block(cnn_models):
    """QInt8 QDQ on x86: the block's input (pool1) is read by the depthwise Conv and the Add, so its
    QuantizeLinear has two DequantizeLinear copies (EnsureUniqueDQForNodeUnit) and QDQS8ToU8Transformer, which
    moves only a pair with one edge, leaves it int8; the selectors want one type in and out, so the depthwise Conv
    and the Add run as float ops between DequantizeLinear and QuantizeLinear. QUInt8 QDQ and QOperator fuse both."""
    s8, u8, qop = (fused_counts(cnn_models[k]) for k in ("pre_qdq_channel", "pre_qdq_u8_channel", "pre_qop_u8_channel"))
    if platform.machine().lower() in ("x86_64", "amd64"):
        assert (s8["QLinearConv"], s8["Conv"], s8["Add"], s8.get("QLinearAdd", 0)) == (2, 1, 1, 0)
    assert (u8["QLinearConv"], u8.get("Conv", 0), u8.get("Add", 0), u8["QLinearAdd"]) == (3, 0, 0, 1)
    assert (qop["QLinearConv"], qop["QLinearAdd"]) == (3, 1)


def depthwise_probe(channels: int) -> onnx.ModelProto:
    """A QDQ depthwise Conv (``channels`` groups of one channel, 3x3, no padding on a 3x3 input): inputs 1.0 (u8
    255 at 1/255), weights 127 at scale 1, output scale 8: 9 x 127 = 1,143, on the grid 1,144, in every channel if
    the products add in int32; pairs saturating at 32,767 would give less. 16 channels take MLAS's symmetric
    depthwise kernel (``MlasConvSymDepthwiseKernelAvx2``: ``vpmovzxbd`` / ``vpmovsxbd`` to int32, then
    ``vpmaddwd``), 12 channels (not a multiple of 16) the generic ``MlasConvDepthwiseKernelAvx2`` (16-bit products
    widened to int32)."""
    init = [numpy_helper.from_array(np.array(1 / 255, np.float32), "x_scale"),
            numpy_helper.from_array(np.array(0, np.uint8), "x_zero"),
            numpy_helper.from_array(np.full((channels, 1, 3, 3), 127, np.int8), "w_q"),
            numpy_helper.from_array(np.array(1.0, np.float32), "w_scale"),
            numpy_helper.from_array(np.array(0, np.int8), "w_zero"),
            numpy_helper.from_array(np.array(8.0, np.float32), "y_scale"),
            numpy_helper.from_array(np.array(0, np.uint8), "y_zero")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "x_scale", "x_zero"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "x_scale", "x_zero"], ["xd"]),
             helper.make_node("DequantizeLinear", ["w_q", "w_scale", "w_zero"], ["wd"]),
             helper.make_node("Conv", ["xd", "wd"], ["c"], kernel_shape=[3, 3], group=channels),
             helper.make_node("QuantizeLinear", ["c", "y_scale", "y_zero"], ["yq"]),
             helper.make_node("DequantizeLinear", ["yq", "y_scale", "y_zero"], ["y"])]
    g = helper.make_graph(nodes, "depthwise_probe",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, channels, 3, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, channels, 1, 1])], init)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("channels", [16, 12])
def test_a_depthwise_conv_never_saturates(channels):
    model, x = depthwise_probe(channels), np.ones((1, channels, 3, 3), np.float32)
    assert fused_counts(model).get("QLinearConv") == 1
    for family in (EXACT, SATURATING):
        np.testing.assert_array_equal(kernels.emulate(model, x, family, "x"), np.full((1, channels, 1, 1), 1144.0))
    np.testing.assert_array_equal(graph.session(model).run(None, {"x": x})[0], np.full((1, channels, 1, 1), 1144.0))


def qlinear_add_model(sa, za, sb, zb, sc, zc, dtype) -> onnx.ModelProto:
    t = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    init = [numpy_helper.from_array(np.array(v, np.float32), n) for v, n in ((sa, "sa"), (sb, "sb"), (sc, "sc"))]
    init += [numpy_helper.from_array(np.array(v, dtype), n) for v, n in ((za, "za"), (zb, "zb"), (zc, "zc"))]
    node = helper.make_node("QLinearAdd", ["a", "sa", "za", "b", "sb", "zb", "sc", "zc"], ["c"], domain="com.microsoft")
    g = helper.make_graph([node], "qladd", [helper.make_tensor_value_info("a", t, [None]),
                                            helper.make_tensor_value_info("b", t, [None])],
                          [helper.make_tensor_value_info("c", t, [None])], init)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)],
                             ir_version=8)


def qlinear_add_cases(n: int = 120, seed: int = 20261205):
    """Random QLinearAdd models (u8 and s8, scales 1e-3..1, zero points anywhere) and their inputs."""
    rng = np.random.default_rng(seed)
    for k in range(n):
        dtype = np.uint8 if k % 2 == 0 else np.int8
        lo, hi = int(np.iinfo(dtype).min), int(np.iinfo(dtype).max)
        scales = [np.float32(10 ** rng.uniform(-3, 0)) for _ in range(3)]
        zeros = [int(rng.integers(lo, hi + 1)) for _ in range(3)]
        a, b = (rng.integers(lo, hi + 1, 515).astype(dtype) for _ in range(2))
        yield qlinear_add_model(scales[0], zeros[0], scales[1], zeros[1], scales[2], zeros[2], dtype), a, b


def test_qlinear_add_is_what_mlas_computes():
    """MLAS's QLinearAdd (``qladd_avx2.cpp``, the kernel of both x86 families): the emulation bit for bit."""
    for k, (model, a, b) in enumerate(qlinear_add_cases()):
        ins = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
        got = kernels.qlinear_add(a, ins["sa"], ins["za"], b, ins["sb"], ins["zb"], ins["sc"], ins["zc"])
        real = graph.session(model).run(None, {"a": a, "b": b})[0]
        np.testing.assert_array_equal(got, real, err_msg=f"case {k}")


def test_both_fixtures_are_covered(cnn_models):
    assert kernels.uncovered(data.fixture_path("fp32.onnx")) == []
    assert all(kernels.uncovered(path) == [] for path in cnn_models.values())


# --- slow: the real kernels of both families ---------------------------------------------------------------------

def run_all(prefix: list[str], models: dict[str, tuple[Path, np.ndarray]], folder: Path) -> dict[str, np.ndarray]:
    """Every model in ONE process under ``prefix`` (qemu's start-up costs seconds): name -> output."""
    inputs, out = folder / "in.npz", folder / "out.npz"
    np.savez(inputs, **{path.stem: x for path, x in models.values()})
    kf.run(prefix, RUN_ANY_MODELS, out, inputs, *(path for path, _ in models.values()), timeout=1800)
    with np.load(out) as saved:
        return {name: saved[path.stem] for name, (path, _) in models.items()}


def one_input_qlinear_add(model: onnx.ModelProto, b: np.ndarray) -> onnx.ModelProto:
    """The QLinearAdd case with ``b`` a constant: one input, as run_any_models.py feeds (the kernel's path is the
    same: both operands of full length)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    m.graph.initializer.append(numpy_helper.from_array(b, "b"))
    del m.graph.input[1]
    return m


@pytest.fixture(scope="module")
def probe_models(tmp_path_factory) -> dict[str, tuple[Path, np.ndarray]]:
    """The depthwise probes and a share of the QLinearAdd cases, saved for the real kernels."""
    folder = tmp_path_factory.mktemp("probes")
    built = {}
    for channels in (16, 12):
        path = folder / f"depthwise-{channels}.onnx"
        onnx.save(depthwise_probe(channels), path)
        built[path.stem] = (path, np.ones((1, channels, 3, 3), np.float32))
    for k, (model, a, b) in enumerate(qlinear_add_cases(24)):
        path = folder / f"qladd-{k}.onnx"
        onnx.save(one_input_qlinear_add(model, b), path)
        built[path.stem] = (path, a)
    return built


@pytest.fixture(scope="module")
def every_model(cnn_models, excluded_models, cnn_inputs, torch_models,
                probe_models) -> dict[str, tuple[Path, np.ndarray]]:
    return {**{f"cnn-{k}": (p, cnn_inputs) for k, p in {**cnn_models, **excluded_models}.items()}, **torch_models,
            **probe_models}


@pytest.fixture(scope="module")
def haswell_outputs(every_model, tmp_path_factory):
    return run_all(kf.family_prefix(kf.require_haswell), every_model, tmp_path_factory.mktemp("haswell"))


@pytest.fixture(scope="module")
def aarch64_outputs(every_model, tmp_path_factory):
    prefix = kf.family_prefix(kf.require_aarch64, kf.DEFAULT_AARCH64_CACHE)
    return run_all(prefix, every_model, tmp_path_factory.mktemp("aarch64"))


@pytest.mark.slow
def test_real_saturating_kernels_equal_the_emulation(haswell_outputs, every_model):
    """qemu Haswell (AVX2, no VNNI): the real saturating Conv kernels, bit for bit, on every model."""
    for name, (model, x) in every_model.items():
        np.testing.assert_array_equal(haswell_outputs[name], emulate(model, x, SATURATING), err_msg=name)
    for channels in (16, 12):   # depthwise: exact int32 sums on the saturating family too
        np.testing.assert_array_equal(haswell_outputs[f"depthwise-{channels}"], np.full((1, channels, 1, 1), 1144.0))


@pytest.mark.slow
def test_real_arm_kernels_are_within_one_step_of_the_exact_emulation(aarch64_outputs, every_model):
    """aarch64 (dot product, int32 sums): within one output step of the exact emulation. Where the graph has a
    residual Add between int8 tensors, ARM runs it as QLinearAdd on int8 (its QDQ fusion keeps int8), x86 in float
    between DequantizeLinear and QuantizeLinear: a step there may grow downstream, so those models are bounded by a
    few steps and the same top-1 (the arithmetic the families are about is the Conv's, checked on the others)."""
    for name, (model, x) in every_model.items():
        if name.startswith("qladd-"):   # integer outputs of ARM's own QLinearAdd kernel: not what this test bounds
            continue
        step = output_step(model)
        emulated = emulate(model, x, EXACT)
        diff = float(np.abs(aarch64_outputs[name] - emulated).max())
        print(f"exact (qemu aarch64) {name}: max difference {diff / step:.3g} output steps")
        if int8_residual_add(model):
            assert diff <= 4 * step * (1 + 1e-6), f"{name}: {diff / step:.3g} steps apart"
            np.testing.assert_array_equal(aarch64_outputs[name].argmax(axis=1), emulated.argmax(axis=1), name)
        else:
            assert diff <= step * (1 + 1e-6), f"{name}: {diff / step:.3g} steps apart"


def int8_residual_add(model: Path) -> bool:
    """True when an Add reads two DequantizeLinear outputs of int8 tensors (a QDQ residual Add in QInt8)."""
    m = onnx.load(str(model))
    producer = {o: n for n in m.graph.node for o in n.output}
    zero_points = {i.name: i.data_type for i in m.graph.initializer}
    def int8_dq(name):
        n = producer.get(name)
        return (n is not None and n.op_type == "DequantizeLinear" and len(n.input) > 2
                and zero_points.get(n.input[2]) == onnx.TensorProto.INT8)
    return any(n.op_type == "Add" and all(int8_dq(i) for i in n.input) for n in m.graph.node)
