"""Which node to exclude from quantization: each quantized GEMM or Conv left in float, one at a time, measured on the
output (the question practitioners ask ORT: which ``nodes_to_exclude``?).

For a QDQ model, ``excluded(int8, fp32, node)`` is the model with that node's inputs taken before their
QuantizeLinear (activations) and from the FP32 model (weights, bias): the node run wholly in float, every other ruler
kept (its own output ruler too). That is an estimate, not a re-conversion: ``quantize_static(...,
nodes_to_exclude=[node])`` keeps an input quantized that another node reads, and ORT 1.32 then fuses a float-weight
Conv between DequantizeLinear and QuantizeLinear into a QLinearConv whose weights it quantizes itself when the session
loads (seen in ORT's optimized graph), so a real exclusion can gain less, or lose; it can also gain more, where it
drops the node's output ruler (measured by ``lab.reconvert`` on a test MLP: 39.9 dB re-converted, 35.7 estimated).
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
            run: Callable[[onnx.ModelProto, np.ndarray], np.ndarray]) -> dict:
    """Every candidate node excluded in turn and run (``run(model, x)``: this machine's kernels), ranked by the
    output's SQNR against ``reference`` (FP32 on ``x``); the model as it is for comparison."""
    baseline = scores(reference, run(int8, x))
    rows = [{"node": name, **scores(reference, run(excluded(int8, fp32, name), x))} for name in candidates(int8)]
    rows.sort(key=lambda r: -r["sqnr_db"])
    note = None if rows else ("no named GEMM or Conv node reads quantized inputs (nodes_to_exclude takes node names: "
                              "name the nodes to rank them)")
    return {"samples": len(x), "as_is": baseline, "rows": rows, "note": note}
