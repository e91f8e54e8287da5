"""Read a model's graph: the input ruler, op types, weight dtypes, and the kernels that ran."""
from __future__ import annotations

import json
import os
import tempfile
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper

from lab.data import INPUT_NAME, N_CLASSES, N_FEATURES, OUTPUT_NAME
from lab.errors import ModelContractError, NotQuantizedError
from lab.ruler import InputRuler

_DTYPES = {onnx.TensorProto.INT8: "int8", onnx.TensorProto.UINT8: "uint8"}


def load(model) -> onnx.ModelProto:
    """An ``onnx.ModelProto`` from a path or a model."""
    return model if isinstance(model, onnx.ModelProto) else onnx.load(str(model))


def _name(model) -> str:
    return "the model" if isinstance(model, onnx.ModelProto) else Path(model).name


def input_ruler(model, input_name: str = INPUT_NAME) -> InputRuler:
    """Scale and zero point quantizing ``input_name``, in a QDQ or a QOperator graph."""
    m = load(model)
    inits = {i.name: i for i in m.graph.initializer}
    for node in m.graph.node:
        if node.op_type == "QuantizeLinear" and node.input and node.input[0] == input_name:
            if len(node.input) < 3 or node.input[1] not in inits or node.input[2] not in inits:
                raise NotQuantizedError(f"{_name(model)}: QuantizeLinear '{node.name}' on '{input_name}' "
                                        "has no constant scale and zero point")
            scale = numpy_helper.to_array(inits[node.input[1]])
            zp_init = inits[node.input[2]]
            zp = numpy_helper.to_array(zp_init)
            if scale.size != 1 or zp.size != 1:
                raise NotQuantizedError(f"{_name(model)}: the input is quantized per channel "
                                        f"({scale.size} scales); expected one scale for '{input_name}'")
            dtype = _DTYPES.get(zp_init.data_type)
            if dtype is None:
                raise NotQuantizedError(f"{_name(model)}: '{input_name}' is quantized to "
                                        f"{onnx.TensorProto.DataType.Name(zp_init.data_type)}; "
                                        "these lessons read INT8 or UINT8 rulers")
            return InputRuler(float(scale.reshape(())), int(zp.reshape(())), dtype, node.name)
    inputs = [i.name for i in m.graph.input]
    if input_name not in inputs:
        raise ModelContractError(f"{_name(model)}: no graph input named '{input_name}' (inputs: {inputs})")
    raise NotQuantizedError(f"not quantized: {_name(model)} has no QuantizeLinear consuming '{input_name}'")


def op_counts(model) -> dict[str, int]:
    """How many nodes of each op type the graph holds."""
    return dict(sorted(Counter(n.op_type for n in load(model).graph.node).items()))


def initializer_dtypes(model) -> dict[str, str]:
    """Initializer name -> element type (e.g. ``fc1.weight_quantized`` -> ``INT8``)."""
    return {i.name: onnx.TensorProto.DataType.Name(i.data_type) for i in load(model).graph.initializer}


def weight_dtypes(model) -> dict[str, int]:
    """Count of initializers of each element type with more than one element: what the weights are stored as."""
    counts = Counter(onnx.TensorProto.DataType.Name(i.data_type) for i in load(model).graph.initializer
                     if int(np.prod(i.dims)) > 1)
    return dict(sorted(counts.items()))


# The weight-scale input of each quantized operator that carries its own weights (ONNX and com.microsoft):
# QLinearMatMul and QGemm (inputs A, a_scale, a_zp, B, b_scale, ...), QLinearConv (x, x_scale, x_zp, w, w_scale, ...).
WEIGHT_SCALE_INPUT = {"QLinearMatMul": 4, "QGemm": 4, "QLinearConv": 4}


def per_channel(model) -> bool:
    """Does the model carry per-channel weight scales (more than one scale per weight), in QDQ or QOperator?

    QDQ: a DequantizeLinear of a constant (an initializer) with more than one scale. QOperator: the weight-scale
    input of a fused operator (``WEIGHT_SCALE_INPUT``: QLinearMatMul, QGemm after pre-processing, QLinearConv).
    """
    m = load(model)
    inits = {i.name: i for i in m.graph.initializer}
    for node in m.graph.node:
        if node.op_type == "DequantizeLinear" and node.input[0] in inits:
            index = 1
        elif node.op_type in WEIGHT_SCALE_INPUT:
            index = WEIGHT_SCALE_INPUT[node.op_type]
        else:
            continue
        scale = inits.get(node.input[index]) if len(node.input) > index else None
        if scale is not None and numpy_helper.to_array(scale).size > 1:
            return True
    return False


def quant_format(model) -> str:
    """``QOperator``, ``QDQ``, ``dynamic`` or ``float``, from the op types present."""
    ops = op_counts(model)
    if "DynamicQuantizeLinear" in ops:
        return "dynamic"
    if any(op.startswith("QLinear") or op.endswith("Integer") for op in ops):
        return "QOperator"
    if "QuantizeLinear" in ops and "DequantizeLinear" in ops:
        return "QDQ"
    return "float"


def check_io(model, input_name: str = INPUT_NAME, output_name: str = OUTPUT_NAME) -> None:
    """Raise ``ModelContractError`` unless the model takes float [N, 64] ``pixels`` and gives [N, 10]
    ``probabilities``."""
    m = load(model)

    def dims(vi):
        return [d.dim_value if d.HasField("dim_value") else d.dim_param for d in vi.type.tensor_type.shape.dim]

    ins = {i.name: i for i in m.graph.input}
    outs = {o.name: o for o in m.graph.output}
    if input_name not in ins:
        raise ModelContractError(f"{_name(model)}: expected an input named '{input_name}', found {sorted(ins)}")
    if output_name not in outs:
        raise ModelContractError(f"{_name(model)}: expected an output named '{output_name}', found {sorted(outs)}")
    d_in, d_out = dims(ins[input_name]), dims(outs[output_name])
    if len(d_in) != 2 or d_in[1] != N_FEATURES:
        raise ModelContractError(f"{_name(model)}: input '{input_name}' has shape {d_in}; expected [N, {N_FEATURES}]")
    if len(d_out) != 2 or d_out[1] != N_CLASSES:
        raise ModelContractError(f"{_name(model)}: output '{output_name}' has shape {d_out}; expected [N, {N_CLASSES}]")


def session(model, threads: int = 1, profile_prefix: str | None = None) -> ort.InferenceSession:
    """A CPU session with pinned intra-op threads (1 by default, as the grader uses)."""
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    if profile_prefix:
        so.enable_profiling = True
        so.profile_file_prefix = profile_prefix
    src = model.SerializeToString() if isinstance(model, onnx.ModelProto) else str(model)
    return ort.InferenceSession(src, so, providers=["CPUExecutionProvider"])


def kernels_run(model, x: np.ndarray, input_name: str = INPUT_NAME) -> dict[str, int]:
    """The kernels ONNX Runtime actually executed for one run, from its profile: op type -> count."""
    with tempfile.TemporaryDirectory() as tmp:
        sess = session(model, profile_prefix=os.path.join(tmp, "profile"))
        sess.run(None, {input_name: np.asarray(x, np.float32)})
        events = json.loads(Path(sess.end_profiling()).read_text())
    counts = Counter(e["args"]["op_name"] for e in events
                     if e.get("cat") == "Node" and e.get("name", "").endswith("_kernel_time"))
    return dict(sorted(counts.items()))


def output_scale(model, output_name: str = OUTPUT_NAME) -> float | None:
    """The scale of the quantized tensor that becomes ``output_name`` (the Softmax output grid), if any."""
    m = load(model)
    inits = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
    producer = {o: n for n in m.graph.node for o in n.output}
    node = producer.get(output_name)
    while node is not None:
        if node.op_type == "DequantizeLinear":
            return float(inits[node.input[1]].reshape(()))
        if node.op_type == "QLinearSoftmax":
            return float(inits[node.input[3]].reshape(()))
        node = producer.get(node.input[0]) if node.input else None
    return None


def tensor_values(model, x: np.ndarray, names: list[str], input_name: str = INPUT_NAME) -> dict[str, np.ndarray]:
    """Values of intermediate float tensors ``names`` (e.g. ``relu1.out``) when the model runs on ``x``.

    Adds them as graph outputs to a copy of the model. Meant for FP32 models: in a quantized
    model extra outputs can stop ONNX Runtime fusing nodes, which changes its arithmetic.
    """
    m = onnx.ModelProto()
    m.CopyFrom(load(model))
    have = {o.name for o in m.graph.output}
    known = {o for n in m.graph.node for o in n.output}
    for name in names:
        if name not in known:
            raise ModelContractError(f"{_name(model)}: no tensor named '{name}' (node outputs: {sorted(known)})")
        if name not in have:
            m.graph.output.append(onnx.helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None))
    values = session(m).run(list(names), {input_name: np.asarray(x, np.float32)})
    return dict(zip(names, values))
