"""The ranking's suggestion tried for real: the FP32 model quantized again with ORT's ``quantize_static``, once as the
INT8 model was made and once with ``nodes_to_exclude=[node]``, both measured on the same samples.

``lab.sensitivity`` runs a node in float: an estimate. A real exclusion can gain less (ORT keeps an input
another node reads quantized, and may fuse a float-weight Conv back into an integer kernel) or more (it drops the
node's output ruler), so ``measure`` re-converts. The recipe is read back from the INT8 graph as far as it tells
(``read_recipe``: QDQ or QOperator, per-channel, activation and weight types, reduced range, symmetric rulers, kept
Relus, nodes already left in float); what it cannot tell is said (``UNKNOWN``). Calibration uses the audit's own
data, the first ``CALIBRATION`` samples, and the measure the next ``EVALUATION`` (the same samples when there are too
few): data drawn with the evaluation data, so optimistic beside the practitioner's own calibration set. The
exclusion's effect is the re-conversion with it against the re-conversion without it, calibrated alike, so it is the
exclusion's alone; the ranking's estimate and the INT8 model as given are measured on the same samples beside them.
"""
from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper
from onnxruntime.quantization import QuantFormat, QuantType, quantize_static

from lab import convert, evidence, sensitivity
from lab.readers import ArrayReader

CALIBRATION = 64    # samples the re-conversions calibrate on
EVALUATION = 256    # samples after those that measure them
_TYPES: dict[int, str] = {onnx.TensorProto.INT8: "QInt8", onnx.TensorProto.UINT8: "QUInt8",
                          onnx.TensorProto.INT16: "QInt16", onnx.TensorProto.UINT16: "QUInt16",
                          onnx.TensorProto.INT4: "QInt4", onnx.TensorProto.UINT4: "QUInt4"}
UNKNOWN = ("the calibration method and its options (MinMax assumed, ORT's default)",
           "the calibration data (the audit's own used)",
           "any pre-processing (the FP32 file taken as given)",
           "op_types_to_quantize (ORT's default; nodes left in float are excluded by name)")


@dataclass(frozen=True)
class Recipe:
    """``quantize_static``'s settings as read from an INT8 model, by name (``"QDQ"``, ``"QInt8"``)."""

    quant_format: str
    per_channel: bool
    activation_type: str
    weight_type: str
    reduce_range: bool
    extra_options: dict = field(default_factory=dict)
    nodes_to_exclude: tuple = ()

    def settings(self, exclude: tuple = ()) -> dict:
        return {"quant_format": self.quant_format, "per_channel": self.per_channel,
                "activation_type": self.activation_type, "weight_type": self.weight_type,
                "reduce_range": self.reduce_range, "extra_options": dict(self.extra_options),
                "nodes_to_exclude": [*self.nodes_to_exclude, *exclude]}

    def words(self) -> str:
        keep = [k for k, v in self.extra_options.items() if v]
        return (f"{self.quant_format}, {'per-channel' if self.per_channel else 'per-tensor'}, activations "
                f"{self.activation_type}, weights {self.weight_type}" + (", reduce_range" if self.reduce_range else "")
                + (f", {', '.join(keep)}" if keep else "")
                + (f", {len(self.nodes_to_exclude)} node(s) already excluded" if self.nodes_to_exclude else ""))


def _weight_dqs(int8: onnx.ModelProto) -> list[onnx.NodeProto]:
    """The DequantizeLinear nodes of a GEMM's or Conv's weight (its input 1, an initializer)."""
    inits = {i.name for i in int8.graph.initializer}
    weights = {n.input[1] for n in int8.graph.node if n.op_type in sensitivity.OPS and len(n.input) > 1}
    return [n for n in int8.graph.node if n.op_type == "DequantizeLinear" and n.input[0] in inits
            and n.output[0] in weights]


def _weights(int8: onnx.ModelProto) -> list[tuple[str, str]]:
    """Each quantized weight of a GEMM or Conv as (its initializer, its zero point's): read from its
    DequantizeLinear (QDQ) or from the QLinearConv, QLinearMatMul or QGemm input that is an initializer
    (QOperator)."""
    if not sensitivity.is_qoperator(int8):
        return [(n.input[0], n.input[2] if len(n.input) > 2 else "") for n in _weight_dqs(int8)]
    inits = {i.name for i in int8.graph.initializer}
    return [(n.input[v], n.input[z]) for n in int8.graph.node if n.op_type in sensitivity.QOPERATOR
            for v, _, z in sensitivity.QOPERATOR[n.op_type][1] if n.input[v] in inits]


def _activations(int8: onnx.ModelProto) -> list[str]:
    """The zero points of the activations' rulers: each QuantizeLinear's of a tensor that is not an initializer, and
    (QOperator) each QLinearConv's, QLinearMatMul's and QGemm's output ruler."""
    inits = {i.name for i in int8.graph.initializer}
    zeros = [n.input[2] for n in int8.graph.node if n.op_type == "QuantizeLinear" and n.input[0] not in inits
             and len(n.input) > 2]
    return zeros + [n.input[sensitivity.QOPERATOR[n.op_type][3][1]] for n in int8.graph.node
                    if n.op_type in sensitivity.QOPERATOR and len(n.input) > sensitivity.QOPERATOR[n.op_type][3][1]]


def _left_in_float(int8: onnx.ModelProto, fp32: onnx.ModelProto, quant_format: str) -> tuple:
    """The GEMM and Conv nodes of ``fp32`` that ``int8`` holds in float under the same name and op type."""
    quantized = set(sensitivity.candidates(int8)) if quant_format == "QDQ" else set()
    in_int8 = {n.name: n.op_type for n in int8.graph.node}
    return tuple(n.name for n in fp32.graph.node if n.op_type in sensitivity.OPS and n.name
                 and in_int8.get(n.name) == n.op_type and n.name not in quantized)


def read_recipe(int8: onnx.ModelProto, fp32: onnx.ModelProto, quant_format: str, per_channel: bool) -> Recipe:
    """The settings ``int8`` was made with, as far as its graph tells: the types from its zero points, reduced range
    from its weights' largest |q| (64 for int8), symmetric rulers from zero points all at the middle, kept Relus
    (QDQ), and the GEMM and Conv nodes of ``fp32`` that it left in float (QDQ and QOperator)."""
    inits = {i.name: i for i in int8.graph.initializer}
    weights = _weights(int8)
    acts = [inits[z] for z in _activations(int8) if z in inits]
    zeros = [inits[z] for _, z in weights if z in inits]
    middle = {"QInt8": 0, "QUInt8": 128, "QInt16": 0, "QUInt16": 32768, "QInt4": 0, "QUInt4": 8}
    act_type = _TYPES.get(int(acts[0].data_type), "QInt8") if acts else "QInt8"
    weight_type = _TYPES.get(int(zeros[0].data_type), "QInt8") if zeros else "QInt8"
    qs = [numpy_helper.to_array(inits[v]) for v, _ in weights]
    largest = max((int(np.abs(q.astype(np.int64)).max()) for q in qs if q.size), default=127)
    reduce = weight_type == "QInt8" and largest <= 64
    centred = [int(numpy_helper.to_array(z).reshape(-1)[0]) == middle.get(act_type, 0) for z in acts]
    weight_centred = all((numpy_helper.to_array(z).astype(np.int64) == middle.get(weight_type, 0)).all()
                         for z in zeros)
    extra = {"ActivationSymmetric": len(centred) > 1 and all(centred), "WeightSymmetric": weight_centred}
    if quant_format == "QDQ":   # a QDQ option: the QOperator converter folds every Relu after a quantized op
        relus = [sum(n.op_type in ("Relu", "Clip") for n in m.graph.node) for m in (fp32, int8)]
        extra["QDQKeepRemovableActivations"] = relus[0] > 0 and relus[1] >= relus[0]
    return Recipe(quant_format, per_channel, act_type, weight_type, reduce, extra,
                  _left_in_float(int8, fp32, quant_format))


def quantized(fp32: onnx.ModelProto, recipe: Recipe, x: np.ndarray, exclude: tuple = (),
              cache: Path | None = None) -> onnx.ModelProto:
    """``fp32`` quantized by ``recipe`` (and ``exclude``), calibrated on ``x``, in a folder of its own; ``cache``: ORT's
    calibration cache, written by the first call and read by the next (the same ranges, calibrated once). ORT's
    MinMax calibrator reduces each tensor to its min and max in the graph, so its memory does not grow with ``x``."""
    name = fp32.graph.input[0].name
    with tempfile.TemporaryDirectory(prefix="lab-reconvert-") as folder:
        source, out = Path(folder) / "source.onnx", Path(folder) / "int8.onnx"
        onnx.save_model(fp32, source, save_as_external_data=fp32.ByteSize() > 2**31 - 1)
        settings = recipe.settings(exclude)
        with convert.ort_warnings():   # not convert.quantize: its record hashes the lab's own input only
            quantize_static(str(source), str(out), ArrayReader(x, fixed_batch(fp32) or 8, name, dtype=x.dtype),
                            quant_format=QuantFormat[settings["quant_format"]],
                            activation_type=QuantType[settings["activation_type"]],
                            weight_type=QuantType[settings["weight_type"]], per_channel=settings["per_channel"],
                            reduce_range=settings["reduce_range"], nodes_to_exclude=settings["nodes_to_exclude"],
                            extra_options=settings["extra_options"],
                            calibration_cache_path=str(cache) if cache else None)
        return onnx.load(str(out))


def fixed_batch(model: onnx.ModelProto) -> int | None:
    """The batch size the model's input fixes, or None when its first dimension is free."""
    dims = model.graph.input[0].type.tensor_type.shape.dim
    return int(dims[0].dim_value) if dims and dims[0].dim_value > 0 else None


def measure(fp32: onnx.ModelProto, int8: onnx.ModelProto, node: str, x, recipe: Recipe,
            run: Callable[[onnx.ModelProto, np.ndarray], np.ndarray], dtype,
            run_estimate: Callable[[onnx.ModelProto, np.ndarray], np.ndarray] | None = None) -> dict:
    """The INT8 model, ``node`` in float (``sensitivity.in_float``: the ranking's estimate), and the two
    re-conversions (without and with ``nodes_to_exclude=[node]``), each scored against FP32 on the same samples
    (``sensitivity.scores``); for classifiers, the top-1 changes between the re-conversions with the exact test
    (``evidence``). ``run_estimate`` runs the estimate (``run`` when None), ``run`` the rest."""
    if node not in {n.name for n in fp32.graph.node}:
        return {"note": f"not measured: the FP32 model has no node named '{node}' (quant_pre_process renames the "
                        "nodes it fuses: audit with the pre-processed model as FP32 to re-convert it)"}
    n = len(x)
    calibration = min(CALIBRATION, max(1, n // 2))
    step = fixed_batch(fp32) or 1   # a fixed-batch model calibrates in whole batches
    calibration = max(step, calibration - calibration % step)
    held_out = n > calibration
    xc = np.ascontiguousarray(x[0:calibration], dtype)
    xe = np.ascontiguousarray(x[calibration:calibration + EVALUATION], dtype) if held_out else xc
    try:
        with tempfile.TemporaryDirectory(prefix="lab-calibration-") as folder:
            cache = Path(folder) / "ranges.json"
            models = {"as_is": int8, "bound": sensitivity.in_float(int8, fp32, node),
                      "without": quantized(fp32, recipe, xc, (), cache),
                      "with": quantized(fp32, recipe, xc, (node,), cache)}
    except Exception as exc:  # noqa: BLE001 - quantize_static raises many types for a model it cannot convert
        said = str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__
        return {"note": f"not measured: quantize_static failed: {said}"}
    reference = run(fp32, xe)
    outs = {k: (run_estimate or run if k == "bound" else run)(m, xe) for k, m in models.items()}
    doc: dict = {"node": node, "estimate": sensitivity.ESTIMATE[recipe.quant_format],
                 "recipe": recipe.settings((node,)), "recipe_words": recipe.words(),
                 "unknown": list(UNKNOWN), "calibration_samples": calibration, "evaluation_samples": len(xe),
                 "held_out": held_out, **{k: sensitivity.scores(reference, out) for k, out in outs.items()}}
    if "agreement" in doc["with"]:
        want = reference.reshape(len(xe), -1).argmax(1)
        before, after = (outs[k].reshape(len(xe), -1).argmax(1) == want for k in ("without", "with"))
        doc["paired"] = evidence.from_counts(len(xe), int(np.sum(~before & after)),
                                             int(np.sum(before & ~after))).to_dict()
    return doc


def lines(r: dict) -> list[str]:
    """The re-conversion in the report's words."""
    if "note" in r:
        return [f"  re-converted: {r['note']}"]
    where = (f"calibrated on the data's first {r['calibration_samples']} samples and measured on the next "
             f"{r['evaluation_samples']}" if r["held_out"] else
             f"calibrated and measured on the same {r['evaluation_samples']} samples (too few to hold any out)")
    row = {k: r[k] for k in ("as_is", "bound", "without", "with")}
    gain = r["with"]["sqnr_db"] - r["without"]["sqnr_db"]
    out = [f"  re-converted for real (quantize_static, recipe read from the INT8 model: {r['recipe_words']}),",
           f"  {where};",
           "  calibrating on data drawn with the evaluation data is optimistic; re-convert with your calibration set",
           f"  not read from the model: {'; '.join(r['unknown'])}"]
    labels = {"as_is": "the INT8 model as given",
              "bound": f"'{r['node']}' {r['estimate']} (the ranking's estimate)",
              "without": "re-converted as read", "with": f"re-converted, nodes_to_exclude=['{r['node']}']"}
    for key, label in labels.items():
        s = row[key]
        out.append(f"    {label}: SQNR {s['sqnr_db']:.1f} dB, max abs error {s['max_abs_error']:.4g}"
                   + (f", agreement {s['agreement']:.4f}" if "agreement" in s else ""))
    out.append(f"  measured effect of the exclusion: {gain:+.1f} dB"
               + (f"; top-1 against FP32: {r['paired']['words']}" if "paired" in r else ""))
    return out
