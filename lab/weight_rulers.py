"""The weights' rulers, read from an INT8 graph: what a per-tensor or per-channel weight scale does to each channel.

A weight's ruler is its scale (one, or one per output channel) and zero point, found where the graph dequantizes an
initializer (QDQ: a ``DequantizeLinear`` of an initializer), where a fused op reads it (QOperator: the weight input
of ``QLinearConv``, ``QLinearMatMul``, ``QGemm``) or where a dynamic model's integer op reads it (``MatMulInteger``,
``ConvInteger``, ``Gather``: the scale is the initializer ORT names ``<weight>_scale``). Per weight, ``rows``
measures:

- the **scale spread**: the largest channel scale over the smallest (1 for a per-tensor weight);
- the share of weights **at the grid's ends** (the type's limits, and -127 on ORT's symmetric int8 grid: where the
  saturating family's int16 pairs overflow) and the share **clipped** (FP32 values beyond the grid, when the FP32
  model holds the weight);
- the grid **steps used** per channel (its largest quantized value minus its smallest), median and worst channel;
- the **outlier**: the largest channel max|w| over the channels' median. Above ``OUTLIER`` a per-tensor ruler is
  stretched for that one channel and every other channel pays in steps (``paid``); a per-channel ruler gives it its
  own scale.

Pure numpy on the graphs' initializers: nothing runs.
"""
from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import numpy_helper

from lab.ruler import QRANGES

OUTLIER = 4.0   # a channel whose max|w| is above this many times the channels' median is an outlier
TOP = 10        # rows the report shows
# fused QOperator op -> (weight input, its scale, its zero point)
FUSED = {"QLinearConv": (3, 4, 5), "QLinearMatMul": (3, 4, 5), "QGemm": (3, 4, 5)}
# a dynamic model's integer op -> its weight input (scale and zero point under ORT's names, ``ort_names``)
DYNAMIC = {"MatMulInteger": 1, "ConvInteger": 1, "Gather": 0}
_DTYPES = {onnx.TensorProto.INT8: "int8", onnx.TensorProto.UINT8: "uint8"}


def _attr(node: onnx.NodeProto, name: str, default: int) -> int:
    return next((a.i for a in node.attribute if a.name == name), default)


def channel_axis(op: str, node: onnx.NodeProto, ndim: int) -> int:
    """The output-channel axis of a weight read by ``op``: a convolution's first (ConvTranspose's second), a
    matrix's columns (MatMul's last axis, Gemm's by its transB), as ORT's per-channel quantization chooses it."""
    if op in ("Conv", "QLinearConv", "ConvInteger"):
        return 0
    if op == "ConvTranspose":
        return 1
    if op in ("Gemm", "QGemm"):
        return 0 if _attr(node, "transB", 0) else 1
    return ndim - 1


def found(model: onnx.ModelProto) -> list[dict]:
    """Each quantized weight of the graph, in graph order: its name, the op that reads it, the quantized values,
    scale and zero point, and the per-channel axis (from the DequantizeLinear, or the op's output channels)."""
    inits = {i.name: i for i in model.graph.initializer}
    consumers: dict[str, list] = {}
    for node in model.graph.node:
        for k, name in enumerate(node.input):
            consumers.setdefault(name, []).append((node, k))
    out, seen = [], set()
    for node in model.graph.node:
        if node.op_type == "DequantizeLinear":
            reader = next((n for n, k in consumers.get(node.output[0], []) if k == 1), None)
            w, s, z = (node.input[k] if len(node.input) > k else "" for k in (0, 1, 2))
        elif node.op_type in FUSED:
            reader = node
            w, s, z = (node.input[k] if len(node.input) > k else "" for k in FUSED[node.op_type])
        elif node.op_type in DYNAMIC and len(node.input) > DYNAMIC[node.op_type]:
            reader, w = node, node.input[DYNAMIC[node.op_type]]
            s, z = ort_names(w)
        else:
            continue
        if w not in inits or s not in inits or w in seen or inits[w].data_type not in _DTYPES \
                or len(inits[w].dims) < 2:
            continue
        seen.add(w)
        q = numpy_helper.to_array(inits[w])
        scale = numpy_helper.to_array(inits[s]).astype(np.float32).reshape(-1)
        zero = numpy_helper.to_array(inits[z]).astype(np.int64).reshape(-1) if z in inits else np.zeros(1, np.int64)
        op = reader.op_type if reader is not None else node.op_type
        axis = channel_axis(op, reader if reader is not None else node, q.ndim)
        if node.op_type == "DequantizeLinear" and scale.size > 1:
            axis = _attr(node, "axis", 1) % q.ndim
        if scale.size > 1 and q.shape[axis] != scale.size:
            axis = next((a for a in range(q.ndim) if q.shape[a] == scale.size), axis)
        out.append({"weight": w[: -len("_quantized")] if w.endswith("_quantized") else w, "initializer": w,
                    "node": (reader.name if reader is not None else node.name) or op, "op": op,
                    "q": q, "scale": scale, "zero_point": zero, "axis": axis, "dtype": _DTYPES[inits[w].data_type]})
    return out


def ort_names(weight: str) -> tuple[str, str]:
    """The scale and zero point ORT's quantizer names for a quantized weight (``W_quantized``: ``W_scale``,
    ``W_zero_point``)."""
    base = weight[: -len("_quantized")] if weight.endswith("_quantized") else weight
    return f"{base}_scale", f"{base}_zero_point"


def fp32_weight(floats: dict, name: str) -> np.ndarray | None:
    """The FP32 value a quantized weight stands for (``floats``: the FP32 model's initializers by name): the
    initializer of its name, or the transpose of ``W`` for ``W_Transposed`` (ORT's dynamic quantizer turns a Gemm
    with transB into a MatMul so)."""
    if name in floats:
        return numpy_helper.to_array(floats[name]).astype(np.float32)
    base = name[: -len("_Transposed")] if name.endswith("_Transposed") else None
    if base in floats and len(floats[base].dims) == 2:
        return numpy_helper.to_array(floats[base]).astype(np.float32).T
    return None


def measure(q: np.ndarray, scale: np.ndarray, zero: np.ndarray, axis: int, dtype: str,
            fp32: np.ndarray | None = None) -> dict:
    """One weight's ruler against its channels (``axis``): scale spread, share at the ends and clipped, steps used
    per channel, the outlier ratio."""
    lo, hi = QRANGES[dtype]
    channels = q.shape[axis]
    qc = np.moveaxis(q, axis, 0).reshape(channels, -1).astype(np.int64)
    s = np.broadcast_to(scale, (channels,)) if scale.size in (1, channels) else np.full(channels, scale[0])
    z = np.broadcast_to(zero, (channels,)) if zero.size in (1, channels) else np.full(channels, zero[0])
    low_end = lo + 1 if dtype == "int8" and not np.any(z) else lo   # ORT's symmetric int8 grid is -127..127
    at_ends = float(np.mean((qc <= low_end) | (qc >= hi)))
    steps = (qc.max(axis=1) - qc.min(axis=1)).astype(np.int64)
    max_w = np.abs(qc - z[:, None]).max(axis=1) * s.astype(np.float64)
    median = float(np.median(max_w))
    ratio = float(max_w.max() / median) if median > 0 else (math.inf if max_w.max() > 0 else 1.0)
    clipped = None
    if fp32 is not None and fp32.shape == q.shape:
        on_grid = np.moveaxis(fp32, axis, 0).reshape(channels, -1) / s[:, None] + z[:, None]
        clipped = float(np.mean((on_grid < lo - 0.5) | (on_grid > hi + 0.5)))
    per_channel = scale.size > 1
    return {"per_channel": per_channel, "channels": channels, "axis": axis,
            "scale_spread": float(s.max() / s.min()) if per_channel and s.min() > 0 else 1.0,
            "at_ends": at_ends, "clipped": clipped, "steps": hi - lo,
            "steps_median": int(np.median(steps)), "steps_worst": int(steps.min()),
            "worst_channel": int(steps.argmin()), "outlier_ratio": ratio,
            "outlier_channel": int(max_w.argmax()), "outlier": ratio > OUTLIER,
            "paid": ratio > OUTLIER and not per_channel}


def why(row: dict) -> str:
    """One weight's ruler in a few words: what its worst number means."""
    used = f"the median channel uses {row['steps_median']}/{row['steps']} steps"
    if row["paid"]:
        times = "non-zero while the median channel's is 0" if math.isinf(row["outlier_ratio"]) else \
            f"{row['outlier_ratio']:.1f}x the median"
        return f"channel {row['outlier_channel']}'s max|w| is {times} on one per-tensor scale: {used}"
    if row["clipped"]:
        return f"{row['clipped']:.2%} of its weights clipped"
    return f"{used}, the worst {row['steps_worst']}, {row['at_ends']:.2%} at the grid's ends"


def rows(int8: onnx.ModelProto, fp32: onnx.ModelProto | None = None) -> list[dict]:
    """Each quantized weight's ruler measured (``measure``; ``position``: its place in graph order), worst first: an
    outlier a per-tensor scale pays for, then clipped weights, then the fewest steps in the worst channel, then the
    most weights at the grid's ends."""
    floats = {i.name: i for i in fp32.graph.initializer} if fp32 is not None else {}
    out = []
    for position, w in enumerate(found(int8)):
        f = fp32_weight(floats, w["weight"])
        out.append({"weight": w["weight"], "node": w["node"], "op": w["op"], "dtype": w["dtype"],
                    "shape": list(w["q"].shape), "position": position,
                    **measure(w["q"], w["scale"], w["zero_point"], w["axis"], w["dtype"], f)})
    for r in out:
        r["why"] = why(r)
    return sorted(out, key=lambda r: (not r["paid"], -(r["clipped"] or 0.0), r["steps_worst"] / r["steps"],
                                      -r["at_ends"]))
