"""Which node to exclude from quantization: each quantized GEMM or Conv left in float, one at a time, measured on the
output (the question practitioners ask ORT: which ``nodes_to_exclude``?).

For a QDQ model, ``excluded(int8, fp32, node)`` is the model with that node's inputs taken before their
QuantizeLinear (activations) and from the FP32 model (weights, bias): the node run wholly in float, every other ruler
kept (its own output ruler too). That is an estimate, not a re-conversion: ``quantize_static(...,
nodes_to_exclude=[node])`` keeps an input quantized that another node reads, and ORT 1.32 then fuses a float-weight
Conv between DequantizeLinear and QuantizeLinear into a QLinearConv whose weights it quantizes itself when the session
loads (seen in ORT's optimized graph), so a real exclusion can gain less, or lose; it can also gain more, where it
drops the node's output ruler (measured by ``lab.reconvert`` on a test MLP: 39.9 dB re-converted, 35.7 estimated).
For a QOperator model, ``excluded_qoperator(int8, fp32, node)`` replaces the QLinearConv, QLinearMatMul or QGemm
that ORT's converter made of FP32 node ``node`` (and named ``<node>_quant``) by DequantizeLinear of its quantized
inputs, the FP32 node itself (its op type and attributes; its weight and bias from the FP32 initializers of the names
the quantized ones carry, ``<W>_quantized``, else the INT8 model's own dequantized, as after a pre-processing that
folded a BatchNormalization), and a QuantizeLinear on its output ruler (none where a QGemm writes float): the node
runs in float between its rulers, and every ruler is kept. Its input ruler stays, as a real exclusion keeps it where
a quantized op writes that input. The rows name the FP32 node, the name ``nodes_to_exclude`` takes.

``ranking`` runs each such model on a few samples on this machine's kernels and orders the nodes by the output's SQNR
against FP32: the first is the candidate to re-convert (``lab.reconvert``) and audit.
"""
from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import onnx
from onnx import numpy_helper

OPS = ("Conv", "MatMul", "Gemm")
QUANT = "_quant"   # ORT's QOperator converter names the node it makes of FP32 node n ``n_quant``
# QOperator op -> (the FP32 op, its two quantized inputs as (value, scale, zero point) positions, the bias position,
# the output ruler's (scale, zero point) positions)
QOPERATOR = {"QLinearConv": ("Conv", ((0, 1, 2), (3, 4, 5)), 8, (6, 7)),
             "QLinearMatMul": ("MatMul", ((0, 1, 2), (3, 4, 5)), None, (6, 7)),
             "QGemm": ("Gemm", ((0, 1, 2), (3, 4, 5)), 6, (7, 8))}
KEEP_FLOAT = {"session.disable_quant_qdq": "1"}
"""The session config a QOperator estimate runs with: ORT's QDQ transformers off, so the float node between
DequantizeLinear and QuantizeLinear stays float (ORT 1.32's WeightBiasQuantization otherwise quantizes a Conv's or
Gemm's float weight per tensor at load and fuses it back into a QLinearConv or QGemm: ``lab.load_time``). A QOperator
model's own QLinear nodes are already fused: its output is the same with it (measured on the CNN, QOperator)."""
ESTIMATE = {"QDQ": "run wholly in float",      # what the estimate does to the node, in the report's words
            "QOperator": "run in float between its input's and output's rulers"}
NO_ROWS = {False: "no named GEMM or Conv node reads quantized inputs (nodes_to_exclude takes node names: name the "
                  "nodes to rank them)",
           True: "no QLinearConv, QLinearMatMul or QGemm is named after an FP32 node of its op ('<node>_quant', as "
                 "ORT's converter names them): nodes_to_exclude takes the FP32 node's name"}


def candidates(int8: onnx.ModelProto) -> list[str]:
    """The names of the GEMM and Conv nodes whose inputs come through DequantizeLinear (the quantized ones)."""
    producer = {o: n for n in int8.graph.node for o in n.output}
    return [n.name for n in int8.graph.node if n.op_type in OPS and n.name and any(
        producer.get(i) is not None and producer[i].op_type == "DequantizeLinear" for i in n.input if i)]


def excluded(int8: onnx.ModelProto, fp32: onnx.ModelProto, name: str) -> onnx.ModelProto:
    """``int8`` with node ``name``'s inputs in float: an activation read before its QuantizeLinear, a weight or bias
    from the FP32 initializer of the same name (dequantized where the FP32 model has none)."""
    m = onnx.ModelProto()
    m.CopyFrom(int8)
    producer = {o: n for n in m.graph.node for o in n.output}
    inits = {i.name: i for i in m.graph.initializer}
    floats = {i.name: i for i in fp32.graph.initializer}
    node = next(n for n in m.graph.node if n.name == name)
    for k, tensor in enumerate(node.input):
        dq = producer.get(tensor)
        if dq is None or dq.op_type != "DequantizeLinear":
            continue
        source = dq.input[0]
        if source in inits:
            base = source[: -len("_quantized")] if source.endswith("_quantized") else source
            new = f"{base}_excluded_float"
            if base in floats:
                value = numpy_helper.to_array(floats[base]).astype(np.float32)
            else:
                from lab.kernels import dequantize_linear  # deferred: only a weight the FP32 model lacks needs it
                scale = numpy_helper.to_array(inits[dq.input[1]])
                zero = numpy_helper.to_array(inits[dq.input[2]]) if len(dq.input) > 2 and dq.input[2] else None
                axis = next((a.i for a in dq.attribute if a.name == "axis"), 1)
                value = dequantize_linear(numpy_helper.to_array(inits[source]), scale, zero, axis)
            m.graph.initializer.append(numpy_helper.from_array(value, new))
            node.input[k] = new
        elif producer.get(source) is not None and producer[source].op_type == "QuantizeLinear":
            q = producer[source]
            node.input[k] = q.input[0]
            if len(q.input) > 2 and q.input[2] in inits and _starts_at_zero(numpy_helper.to_array(inits[q.input[2]])):
                # the converter removed a Relu here and let this ruler clip at 0: the float input keeps that Relu
                relu = onnx.helper.make_node("Relu", [q.input[0]], [f"{q.input[0]}_excluded_relu"])
                m.graph.node.insert(list(m.graph.node).index(node), relu)
                node.input[k] = relu.output[0]
    return m


def _starts_at_zero(zero_point: np.ndarray) -> bool:
    """A ruler whose zero point is its type's lowest value covers [0, ...]."""
    return zero_point.size == 1 and int(zero_point.reshape(())) == int(np.iinfo(zero_point.dtype).min)


def is_qoperator(int8: onnx.ModelProto) -> bool:
    """Does the model hold a QLinearConv, QLinearMatMul or QGemm (ORT's QOperator format)?"""
    return any(n.op_type in QOPERATOR for n in int8.graph.node)


def qoperator_nodes(int8: onnx.ModelProto, fp32: onnx.ModelProto) -> dict[str, onnx.NodeProto]:
    """FP32 node name -> the QOperator node ORT's converter made of it (named ``<name>_quant``, of the FP32 op's
    QLinear form), in the INT8 graph's order."""
    ops = {n.name: n.op_type for n in fp32.graph.node if n.name}
    return {n.name[: -len(QUANT)]: n for n in int8.graph.node if n.op_type in QOPERATOR and n.name.endswith(QUANT)
            and ops.get(n.name[: -len(QUANT)]) == QOPERATOR[n.op_type][0]}


def nodes(int8: onnx.ModelProto, fp32: onnx.ModelProto) -> list[str]:
    """The nodes the ranking leaves in float in turn, by the name ``nodes_to_exclude`` takes."""
    return list(qoperator_nodes(int8, fp32)) if is_qoperator(int8) else candidates(int8)


def in_float(int8: onnx.ModelProto, fp32: onnx.ModelProto, name: str) -> onnx.ModelProto:
    """``int8`` with node ``name`` (the FP32 node's name) in float: ``excluded_qoperator`` or ``excluded``."""
    return excluded_qoperator(int8, fp32, name) if is_qoperator(int8) else excluded(int8, fp32, name)


def excluded_qoperator(int8: onnx.ModelProto, fp32: onnx.ModelProto, name: str) -> onnx.ModelProto:
    """``int8`` with the QOperator node made of FP32 node ``name`` replaced by DequantizeLinear of its inputs, the FP32
    node (its op type and attributes) and a QuantizeLinear on its output ruler: every ruler kept."""
    m = onnx.ModelProto()
    m.CopyFrom(int8)
    q = next(n for n in m.graph.node if n.name == f"{name}{QUANT}")
    f = next(n for n in fp32.graph.node if n.name == name)
    added: list[onnx.NodeProto] = []
    inputs = [_float_input(m, fp32, q, f, k, added) if tensor else "" for k, tensor in enumerate(f.input)]
    float_node = onnx.helper.make_node(f.op_type, inputs, [f"{q.output[0]}_excluded_float"], f"{name}_excluded",
                                       domain=f.domain)
    float_node.attribute.extend(f.attribute)
    added.append(float_node)
    at_scale, at_zero = QOPERATOR[q.op_type][3]
    if len(q.input) > at_scale and q.input[at_scale]:
        added.append(onnx.helper.make_node("QuantizeLinear", [float_node.output[0], *q.input[at_scale:at_zero + 1]],
                                           [q.output[0]], f"{name}_excluded_quantize"))
    else:
        float_node.output[0] = q.output[0]   # a QGemm without an output ruler writes float
    graph_nodes = list(m.graph.node)
    at = graph_nodes.index(q)
    del m.graph.node[:]
    m.graph.node.extend(graph_nodes[:at] + added + graph_nodes[at + 1:])
    return m


def _float_input(m: onnx.ModelProto, fp32: onnx.ModelProto, q: onnx.NodeProto, f: onnx.NodeProto, k: int,
                 added: list) -> str:
    """The float tensor FP32 node ``f``'s input ``k`` reads in the estimate: the FP32 initializer of that name where
    ``q`` reads ``<name>_quantized`` of its shape, else ``q``'s own input dequantized (an initializer in numpy, an
    activation by a DequantizeLinear appended to ``added``)."""
    wanted = f.input[k]
    _, pairs, bias_at, _ = QOPERATOR[q.op_type]
    at = pairs[k] if k < 2 else (bias_at,) if bias_at is not None and len(q.input) > bias_at else ()
    value = q.input[at[0]] if at else ""
    inits = {i.name: i for i in m.graph.initializer}
    floats = {i.name: i for i in fp32.graph.initializer}
    same = not value or (value == f"{wanted}_quantized" and value in inits and
                         list(floats[wanted].dims) == list(inits[value].dims)) if wanted in floats else False
    if same:
        return _add_initializer(m, numpy_helper.to_array(floats[wanted]).astype(np.float32), f"{wanted}_excluded_float")
    if value in inits:
        beta = next((a.f for a in f.attribute if a.name == "beta"), 1.0) or 1.0
        return _add_initializer(m, _dequantized(inits, q, k, value, beta), f"{value}_excluded_dequantized")
    if not value:
        return wanted   # read by the FP32 node only, and no initializer: the same tensor (a graph input)
    out = f"{value}_excluded_dequantized"
    if out not in {o for n in added for o in n.output}:
        added.append(onnx.helper.make_node("DequantizeLinear", [value, *(q.input[i] for i in at[1:] if q.input[i])],
                                           [out], f"{value}_excluded_dequantize"))
    return out


def _add_initializer(m: onnx.ModelProto, value: np.ndarray, name: str) -> str:
    if name not in {i.name for i in m.graph.initializer}:
        m.graph.initializer.append(numpy_helper.from_array(value.astype(np.float32), name))
    return name


def _dequantized(inits: dict, q: onnx.NodeProto, k: int, value: str, beta: float = 1.0) -> np.ndarray:
    """A QOperator node's quantized weight (``k`` 0 or 1) or int32 bias (``k`` 2) in float; the bias at the scale
    ORT's converter gave it, the input's scale times the weight's times the Gemm's ``beta`` (``quantize_bias_static``),
    which its QGemm then reads without the beta: ORT 1.32 runs a Gemm of beta b with its bias times 1 / b, and the
    estimate, with the FP32 Gemm's beta, with the bias."""
    from lab.kernels import dequantize_linear  # deferred: only weights the FP32 model lacks need it

    def array(i: int) -> np.ndarray | None:
        return numpy_helper.to_array(inits[q.input[i]]) if len(q.input) > i and q.input[i] in inits else None

    quantized = numpy_helper.to_array(inits[value])
    if k == 2:
        scale = (np.asarray(array(1), np.float64) * np.asarray(array(4), np.float64) * beta).reshape(-1)
        return (quantized.astype(np.float64) * (scale if scale.size > 1 else scale[0])).astype(np.float32)
    scale = np.asarray(array(3 * k + 1), np.float32)
    return dequantize_linear(quantized, scale.reshape(-1) if scale.size > 1 else scale, array(3 * k + 2),
                             _channel_axis(quantized.shape, scale.size, q))


def _channel_axis(shape: tuple, channels: int, q: onnx.NodeProto) -> int:
    """A per-channel weight's axis: a convolution's output channels; a matrix's columns (rows under transB)."""
    trans_b = next((a.i for a in q.attribute if a.name == "transB"), 0)
    preferred = 0 if channels <= 1 or q.op_type == "QLinearConv" or trans_b else len(shape) - 1
    if not shape or shape[preferred] == channels or channels <= 1:
        return preferred
    return next((i for i, d in enumerate(shape) if d == channels), preferred)


def output_sqnr(reference: np.ndarray, out: np.ndarray) -> float:
    """20 log10(|reference| / |reference - out|) in dB (infinite when equal)."""
    signal = float(np.linalg.norm(np.asarray(reference, np.float64)))
    noise = float(np.linalg.norm(np.asarray(reference, np.float64) - out))
    return math.inf if noise == 0 else 20 * math.log10(max(signal, 1e-30) / noise)


def scores(reference: np.ndarray, out: np.ndarray) -> dict:
    """The output against FP32: SQNR, max abs error and, for one vector of classes per sample, top-1 agreement."""
    doc = {"sqnr_db": output_sqnr(reference, out),
           "max_abs_error": float(np.abs(np.asarray(reference, np.float64) - out).max()) if out.size else 0.0}
    a, b = reference.reshape(len(reference), -1), out.reshape(len(out), -1)
    if a.shape[1] > 1:
        doc["agreement"] = float(np.mean(a.argmax(axis=1) == b.argmax(axis=1)))
    return doc


def ranking(int8: onnx.ModelProto, fp32: onnx.ModelProto, x: np.ndarray, reference: np.ndarray,
            run: Callable[[onnx.ModelProto, np.ndarray], np.ndarray],
            run_estimate: Callable[[onnx.ModelProto, np.ndarray], np.ndarray] | None = None) -> dict:
    """Every candidate node (``nodes``) in float in turn (``in_float``) and run (``run_estimate(model, x)``, else
    ``run``: this machine's kernels; a QOperator estimate with ``KEEP_FLOAT``), ranked by the output's SQNR against
    ``reference`` (FP32 on ``x``); the model as it is (``run``) for comparison."""
    baseline = scores(reference, run(int8, x))
    estimate = run_estimate or run
    rows = [{"node": name, **scores(reference, estimate(in_float(int8, fp32, name), x))}
            for name in nodes(int8, fp32)]
    rows.sort(key=lambda r: -r["sqnr_db"])
    qoperator = is_qoperator(int8)
    return {"samples": len(x), "format": "QOperator" if qoperator else "QDQ", "as_is": baseline, "rows": rows,
            "estimate": ESTIMATE["QOperator" if qoperator else "QDQ"], "note": None if rows else NO_ROWS[qoperator]}
