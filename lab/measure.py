"""Measuring a converted model against FP32 on the same images, and printing the rows as a table.

Lesson 08 measures every conversion with ``measure``: max abs error of the probabilities against
FP32, accuracy, and file size, on the images of one ``Evaluation``, as CPUs of one kernel family
compute them (``lab.kernels.target_family()``, this machine's unless told otherwise). ``format_rows``
prints its tables.

Pre-processed models hold ``Gemm`` (QDQ) or ``QGemm`` (QOperator) nodes, which ``lab.kernels.emulate``
does not cover. ``lowered`` rewrites them into the integer ops it does cover, following ORT's QGemm
kernel (int32 bias preloaded into the accumulator, one float multiplier per column, requantized),
so the other family's numbers can be computed for them too.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from lab import compare, data, graph, kernels


@dataclass(frozen=True)
class Evaluation:
    """The images every model is measured on, and the FP32 model's answers on them."""

    split: str
    pixels: np.ndarray
    labels: np.ndarray
    reference: np.ndarray

    @property
    def fp32_accuracy(self) -> float:
        return float((self.reference.argmax(1) == self.labels).mean())


def evaluation(source: str | Path, split: str = "evaluation") -> Evaluation:
    """Load ``split`` through the deployed preprocessing and run the FP32 ``source`` on it."""
    s = data.load_split(split)
    return Evaluation(split, s.pixels, s.labels, compare.predict(source, s.pixels))


def family() -> str:
    """The kernel family ``measure`` computes for: ``lab.kernels.target_family()``."""
    return kernels.target_family()


def family_line(family_: str | None = None) -> str:
    """One line for people: which family the numbers are for, and whether it is emulated here."""
    f = family_ or family()
    how = f"emulated in numpy; this CPU computes as {kernels.machine_family()}" if kernels.emulated(f) \
        else "this CPU's own kernels"
    return f"INT8 numbers computed as the {f} kernel family ({how})"


def predict(model: str | Path, x: np.ndarray) -> np.ndarray:
    """``compare.predict`` for the target family; models with Gemm or QGemm are lowered first when emulated."""
    if kernels.emulated() and needs_lowering(model):
        return compare.predict(lowered(model), x)
    return compare.predict(model, x)


def measure(model: str | Path, ev: Evaluation) -> dict:
    """Max abs error against FP32, accuracy, and the file's bytes, as the target kernel family computes them."""
    out = predict(model, ev.pixels)
    return {"max_abs_error": round(compare.max_abs_error(ev.reference, out), 4),
            "accuracy": round(float((out.argmax(1) == ev.labels).mean()), 4),
            "bytes": Path(model).stat().st_size}


def input_interval(model: str | Path) -> list[float] | None:
    """The real interval the input ruler covers, or None for a model without one (dynamic)."""
    try:
        lo, hi = graph.input_ruler(model).interval
    except Exception:  # noqa: BLE001 - dynamic models have no static input ruler
        return None
    return [round(lo, 4), round(hi, 4)]


# ---- Gemm and QGemm, lowered for the emulation ----------------------------------------------------
_LOWERED_OPS = ("Gemm", "QGemm")


def needs_lowering(model) -> bool:
    """True when the model holds a Gemm or a QGemm (a pre-processed model)."""
    return any(n.op_type in _LOWERED_OPS for n in graph.load(model).graph.node)


def lowered(model) -> onnx.ModelProto:
    """The model with each QGemm, and each QDQ ``DequantizeLinear -> Gemm -> QuantizeLinear``, rewritten as
    ``MatMulInteger -> Add(int32 bias) -> Cast -> Mul(multiplier) -> QuantizeLinear(scale 1)``.

    That is what ORT's QGemm kernel computes (ORT fuses the QDQ Gemm into a QGemm): the int32 bias
    preloaded into the accumulator, the integer GEMM, then ``float32(acc) x (alpha x a_scale x b_scale
    / y_scale)`` rounded half to even plus the zero point. In the QDQ form, s8 activations are shifted
    to u8 first, as ORT does on x86, so the saturating family sees the same u8 x s8 products its U8S8
    kernel adds in pairs. A Gemm that does not match (float bias, transposed A, beta != 1) is left
    alone, and ``lab.kernels.emulate`` refuses it rather than guessing.
    """
    m = onnx.ModelProto()
    m.CopyFrom(graph.load(model))
    g = m.graph
    values = {i.name: numpy_helper.to_array(i) for i in g.initializer}
    producer = {o: n for n in g.node for o in n.output}
    consumers: dict[str, list] = {}
    for n in g.node:
        for i in n.input:
            consumers.setdefault(i, []).append(n)
    new_inits: list[onnx.TensorProto] = []
    replaced: dict[int, list[onnx.NodeProto]] = {}  # index of the node to replace -> nodes in its place
    dropped: set[int] = set()
    index = {id(n): i for i, n in enumerate(g.node)}

    def attr(node, name, default):
        for a in node.attribute:
            if a.name == name:
                return helper.get_attribute_value(a)
        return default

    def const(name: str, value) -> str:
        new_inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def dq_const(name: str):
        """(q, scale, zero point) of a DequantizeLinear of an initializer, or None."""
        node = producer.get(name)
        if node is None or node.op_type != "DequantizeLinear" or node.input[0] not in values:
            return None
        zp = values[node.input[2]] if len(node.input) > 2 and node.input[2] else None
        return values[node.input[0]], values[node.input[1]], zp

    def chain(tag, a, za_name, b, zb, bias, multiplier, y_zp_name, output):
        b_name = const(f"{tag}.lowered.b", b)
        zb_name = const(f"{tag}.lowered.b_zero_point", zb)
        nodes = [helper.make_node("MatMulInteger", [a, b_name, za_name, zb_name], [f"{tag}.lowered.acc"])]
        acc = f"{tag}.lowered.acc"
        if bias is not None:
            nodes.append(helper.make_node("Add", [acc, const(f"{tag}.lowered.bias", bias.astype(np.int32))],
                                          [f"{tag}.lowered.acc_bias"]))
            acc = f"{tag}.lowered.acc_bias"
        nodes += [helper.make_node("Cast", [acc], [f"{tag}.lowered.accf"], to=TensorProto.FLOAT),
                  helper.make_node("Mul", [f"{tag}.lowered.accf", const(f"{tag}.lowered.multiplier", multiplier)],
                                   [f"{tag}.lowered.scaled"]),
                  helper.make_node("QuantizeLinear", [f"{tag}.lowered.scaled", const(f"{tag}.lowered.one",
                                                                                     np.float32(1.0)), y_zp_name],
                                   [output])]
        return nodes

    def multiplier(alpha, a_scale, b_scale, y_scale):
        return ((np.float32(alpha) * np.float32(a_scale) * np.asarray(b_scale, np.float32).reshape(-1))
                / np.float32(y_scale)).astype(np.float32)

    for node in g.node:
        tag = (node.name or node.output[0]).replace("/", "_")
        if node.op_type == "QGemm" and len(node.input) >= 9 and node.input[7] and attr(node, "transA", 0) == 0:
            a, sa, za, b, sb, zb, c, sy, zy = node.input[:9]
            if not all(k in values for k in (sa, za, b, sb, zb, sy)) or (c and c not in values):
                continue
            bq = values[b].T if attr(node, "transB", 0) else values[b]
            replaced[index[id(node)]] = chain(tag, a, za, bq, values[zb], values[c] if c else None,
                                              multiplier(attr(node, "alpha", 1.0), values[sa], values[sb],
                                                         values[sy]), zy, node.output[0])
        elif node.op_type == "Gemm" and len(node.input) == 3 and attr(node, "transA", 0) == 0 \
                and attr(node, "beta", 1.0) == 1.0 and len(consumers.get(node.output[0], [])) == 1:
            q = consumers[node.output[0]][0]
            a_dq = producer.get(node.input[0])
            w, bias = dq_const(node.input[1]), dq_const(node.input[2])
            if q.op_type != "QuantizeLinear" or a_dq is None or a_dq.op_type != "DequantizeLinear" \
                    or w is None or bias is None or bias[0].dtype != np.int32 or q.input[1] not in values:
                continue
            a_name, sa, za = a_dq.input[0], values[a_dq.input[1]], values[a_dq.input[2]]
            shift: list[onnx.NodeProto] = []
            if za.dtype == np.int8:  # ORT moves s8 activations to u8 on x86 before its U8S8 GEMM
                shift = [helper.make_node("Cast", [a_name], [f"{tag}.lowered.a32"], to=TensorProto.INT32),
                         helper.make_node("Add", [f"{tag}.lowered.a32", const(f"{tag}.lowered.128",
                                                                              np.int32(128))],
                                          [f"{tag}.lowered.a_shifted"]),
                         helper.make_node("Cast", [f"{tag}.lowered.a_shifted"], [f"{tag}.lowered.a_u8"],
                                          to=TensorProto.UINT8)]
                a_name, za = f"{tag}.lowered.a_u8", np.uint8(int(za) + 128)
            wq, ws, wz = w
            if attr(node, "transB", 0):
                wq = wq.T
            za_name = const(f"{tag}.lowered.a_zero_point", np.asarray(za).reshape(()))
            y_zp = q.input[2] if len(q.input) > 2 else const(f"{tag}.lowered.y_zero_point", np.uint8(0))
            replaced[index[id(node)]] = shift + chain(
                tag, a_name, za_name, wq, wz if wz is not None else np.zeros((), np.int8), bias[0],
                multiplier(attr(node, "alpha", 1.0), sa, ws, values[q.input[1]]), y_zp, q.output[0])
            dropped.add(index[id(q)])
    nodes = []
    for i, n in enumerate(g.node):
        if i in dropped:
            continue
        nodes.extend(replaced.get(i, [n]))
    del g.node[:]
    g.node.extend(nodes)
    g.initializer.extend(new_inits)
    return m


# ---- tables --------------------------------------------------------------------------------------
def _cell(value, spec: str) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(f"{x:.3g}" for x in value) + "]"
    if isinstance(value, dict):
        return ", ".join(f"{k}={v}" for k, v in value.items()) or "defaults"
    return format(value, spec)


def format_rows(rows: list[dict], columns: list[tuple[str, str, str]]) -> str:
    """A fixed-width text table. ``columns``: (key, heading, format spec such as '.4f'); text left, numbers right."""
    cells = [[_cell(r.get(key), spec) for key, _, spec in columns] for r in rows]
    widths = [max([len(h)] + [len(c[i]) for c in cells]) for i, (_, h, _) in enumerate(columns)]
    left = [i == 0 or not spec for i, (_, _, spec) in enumerate(columns)]

    def line(values):
        return "  ".join(v.ljust(w) if lf else v.rjust(w) for v, w, lf in zip(values, widths, left)).rstrip()

    head = line([h for _, h, _ in columns])
    return "\n".join([head, "-" * len(head)] + [line(c) for c in cells])
