"""What ONNX Runtime does to a QDQ graph when it loads it, before any kernel runs, that the emulation must do too.

``weight_bias_quantization`` is ORT's ``WeightBiasQuantization`` transformer (onnxruntime/core/optimizer/
qdq_transformer/weight_bias_quantization.cc), folded as its ``ConstantFolding`` folds it: a Conv, ConvTranspose or
Gemm that reads a DequantizeLinear output (one scale) but keeps a float weight or bias initializer (a node the
converter was told to leave in float, ``nodes_to_exclude``) and whose output reaches a QuantizeLinear with no branch
(``PASSED_THROUGH``) gets them quantized; the QDQ fusion may then run it as an integer kernel. The weight: int8 per
tensor from its min and max (0 included), asymmetric, as ``GetQuantizationParameter<int8_t>`` computes (despite the
transformer's comment "symmetric"); the bias: int32 at the input's scale times the weight's, rounded half to even.
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

REWRITTEN = ("Conv", "ConvTranspose", "Gemm")


def int8_parameters(w: np.ndarray) -> tuple[np.float32, np.int8]:
    """ORT's ``GetQuantizationParameter<int8_t>``: scale (max - min) / 255 over the range widened to hold 0, and the
    zero point -128 - min / scale, clamped to int8 and rounded half to even (all in float32)."""
    lo = np.float32(min(float(np.min(w)), 0.0)) if w.size else np.float32(0)
    hi = np.float32(max(float(np.max(w)), 0.0)) if w.size else np.float32(0)
    scale = np.float32(1.0) if hi == lo else np.float32((hi - lo) / np.float32(255))
    initial = np.float32(np.float32(-128) - lo / scale)
    return scale, np.int8(np.rint(np.clip(initial, np.float32(-128), np.float32(127))))


def weight_bias_quantization(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` as ORT's session holds it after ``WeightBiasQuantization`` and constant folding (a copy; the model
    itself when nothing applies)."""
    inits = {i.name: i for i in model.graph.initializer}
    producer = {o: n for n in model.graph.node for o in n.output}
    plans = {id(n): p for n in model.graph.node if (p := _plan(n, inits, producer, model)) is not None}
    if not plans:
        return model
    out = onnx.ModelProto()
    out.CopyFrom(model)
    arrays = {name: numpy_helper.to_array(t) for name, t in inits.items()}
    nodes: list[onnx.NodeProto] = []
    added: list[onnx.TensorProto] = []
    for node, original in zip(out.graph.node, model.graph.node):
        plan = plans.get(id(original))
        if plan is not None:
            nodes += _quantize_inputs(node, plan, arrays, added)
        nodes.append(node)
    del out.graph.node[:]
    out.graph.node.extend(nodes)
    out.graph.initializer.extend(added)
    return out


def requantized(model: onnx.ModelProto) -> list[str]:
    """The names of the nodes whose float weights ``weight_bias_quantization`` quantizes: excluded from quantization
    in the file, int8 weights in the session all the same (whether it then runs as an integer kernel is the QDQ
    fusion's type rules: read the session's optimized graph)."""
    inits = {i.name: i for i in model.graph.initializer}
    producer = {o: n for n in model.graph.node for o in n.output}
    return [n.name for n in model.graph.node
            if (plan := _plan(n, inits, producer, model)) is not None and plan["weight_scale"] is None]


def _dq(producer: dict, name: str):
    n = producer.get(name)
    return n if n is not None and n.op_type == "DequantizeLinear" else None


PASSED_THROUGH = ("Relu", "Clip", "MaxPool", "Reshape", "Transpose", "Squeeze", "Unsqueeze", "Slice")
"""Ops a QuantizeLinear reaches a Conv's output across by the time ``WeightBiasQuantization`` runs: ORT's QDQ
propagation moves a QuantizeLinear up through data-movement ops (these; not Flatten), and its
``IsNoBranchPathToQuantizeLinear`` then allows any chain of Relu or Clip. Checked against ORT's own optimized graphs
(``tests/test_conv_emulation.py``)."""


def _reaches_quantize(model: onnx.ModelProto, name: str) -> bool:
    """``name`` feeds one node, a QuantizeLinear, or one of ``PASSED_THROUGH`` that does the same (no branch)."""
    readers = [n for n in model.graph.node if name in n.input]
    if len(readers) != 1 or name in {o.name for o in model.graph.output}:
        return False
    if readers[0].op_type == "QuantizeLinear":
        return True
    return readers[0].op_type in PASSED_THROUGH and _reaches_quantize(model, readers[0].output[0])


def _plan(node, inits: dict, producer: dict, model: onnx.ModelProto) -> dict | None:
    """What the transformer quantizes in ``node`` (weight, bias or both), or None where it leaves the node alone."""
    if node.op_type not in REWRITTEN or len(node.input) < 2 or not _reaches_quantize(model, node.output[0]):
        return None
    dq0 = _dq(producer, node.input[0])
    if dq0 is None or dq0.input[1] not in inits or int(np.prod(inits[dq0.input[1]].dims, dtype=np.int64)) != 1:
        return None
    dq1 = _dq(producer, node.input[1])
    if dq1 is None and (node.input[1] not in inits or inits[node.input[1]].data_type != onnx.TensorProto.FLOAT):
        return None
    bias = node.input[2] if len(node.input) > 2 and node.input[2] else None
    if bias is not None and (bias not in inits or len(inits[bias].dims) != 1):
        return None
    if dq1 is not None and bias is None:
        return None
    if dq1 is not None and (dq1.input[1] not in inits or int(np.prod(inits[dq1.input[1]].dims, dtype=np.int64)) != 1):
        axis = next((a.i for a in dq1.attribute if a.name == "axis"), 1)
        trans_b = next((a.i for a in node.attribute if a.name == "transB"), 0)
        expected = (1 if trans_b == 0 else 0) if node.op_type == "Gemm" else 0
        if dq1.input[1] not in inits or list(inits[dq1.input[1]].dims) != list(inits[bias].dims) or \
                any(a.name == "block_size" for a in dq1.attribute) or axis != expected:
            return None
    return {"input_scale": dq0.input[1], "weight_scale": dq1.input[1] if dq1 is not None else None, "bias": bias}


def _quantize_inputs(node, plan: dict, arrays: dict, added: list) -> list:
    """The DequantizeLinear nodes (and their initializers, into ``added``) that now feed ``node``'s weight and bias."""
    new = []
    base = node.name or node.output[0]
    if plan["weight_scale"] is None:
        w = arrays[node.input[1]].astype(np.float32)
        scale, zp = int8_parameters(w)
        q = np.clip(np.rint(w / scale) + np.float32(zp), -128, 127).astype(np.int8)
        names = [f"{base}_weight_q", f"{base}_weight_scale", f"{base}_weight_zp"]
        added += [numpy_helper.from_array(q, names[0]),
                  numpy_helper.from_array(np.asarray(scale, np.float32), names[1]),
                  numpy_helper.from_array(np.asarray(zp, np.int8), names[2])]
        new.append(helper.make_node("DequantizeLinear", names, [f"{base}_weight_dq"], name=f"{base}_weight_dq"))
        node.input[1] = f"{base}_weight_dq"
        w_scale = np.asarray(scale, np.float32)
    else:
        w_scale = np.asarray(arrays[plan["weight_scale"]], np.float32)
    if plan["bias"] is not None:
        b_scale = (np.asarray(arrays[plan["input_scale"]], np.float32).reshape(()) * w_scale).astype(np.float32)
        b = np.rint(arrays[plan["bias"]].astype(np.float32) / b_scale).astype(np.int32)
        names = [f"{base}_bias_int32", f"{base}_bias_scale"]
        added += [numpy_helper.from_array(b, names[0]), numpy_helper.from_array(b_scale, names[1])]
        axis = [helper.make_attribute("axis", 0)] if b_scale.ndim == 1 and b_scale.size > 1 else []
        dq = helper.make_node("DequantizeLinear", names, [f"{base}_bias_dq"], name=f"{base}_bias_dq")
        dq.attribute.extend(axis)
        new.append(dq)
        node.input[2] = f"{base}_bias_dq"
    return new
