"""Lesson 08, the quantization toolbox: every setting of ONNX Runtime's converter, measured on the digit reader.

Each function converts the workspace's ``source.onnx`` with one setting changed and measures
the result against FP32 on the evaluation set (``lab.measure``): max abs error of the probabilities,
accuracy, and file size, as CPUs of the target kernel family compute them (``lab.kernels``: this
machine's, or the one ``$LAB_KERNEL_FAMILY`` names). Per-channel weights change the most between the
families; ``family_table`` computes the same files as each family. The calibration methods are in ``lab.calibrators``. The requirement of the
lesson's exercise is named here, so the grader checks the same numbers the lesson states.
"""
from __future__ import annotations

import itertools
import tempfile
from pathlib import Path

import numpy as np

from lab import graph, kernels
from lab.calibrators import BATCH_SIZE
from lab.measure import Evaluation, evaluation, family, input_interval, measure
from lab.quantize import QuantRecord, quantize, quantize_dynamic_model, versions
from lab.readers import ArrayReader

# ---- the exercise's requirement (the grader imports these) -------------------------------------
MAX_ACCURACY_LOSS = 0.005
"""At most 0.5 points of accuracy below FP32 on the same images (0.005 as a fraction)."""
MAX_SIZE_RATIO = 0.355
"""The smallest file: at most 35.5 % of the FP32 file's bytes. The smallest static model that keeps the
accuracy measures 35.0 % (pre-processed, QOperator); the next smaller-is-better step, QOperator without
pre-processing, is 36.1 %."""
REQUIREMENT = ("a static INT8 model (a fixed input ruler) that loses at most 0.5 points of accuracy "
               "against FP32, with the smallest file")
SCHEMA = "toolbox/1"

# ---- settings ------------------------------------------------------------------------------------
BASELINE = {"quant_format": "QDQ", "per_channel": False, "activation_type": "QInt8", "weight_type": "QInt8",
            "reduce_range": False, "activation_symmetric": False, "preprocess": False}

SETTING_ROWS = {
    "baseline (QDQ, per-tensor, asymmetric QInt8)": {},
    "per-channel weights": {"per_channel": True},
    "symmetric activations": {"activation_symmetric": True},
    "QUInt8 activations": {"activation_type": "QUInt8"},
    "reduce_range (7-bit weights)": {"reduce_range": True},
    "QUInt8 weights (asymmetric)": {"activation_type": "QUInt8", "weight_type": "QUInt8"},
    "pre-processed (quant_pre_process)": {"preprocess": True},
    "QOperator format": {"quant_format": "QOperator"},
}


def settings_name(settings: dict) -> str:
    """A short file-name-safe name for a settings dict (differences from the baseline only)."""
    diff = {k: v for k, v in settings.items() if BASELINE.get(k) != v}
    if not diff:
        return "baseline"
    return "-".join(k if v is True else f"{k}={v}" for k, v in sorted(diff.items())).replace("_", "")


def preprocessed(source: str | Path, output: str | Path) -> Path:
    """``quant_pre_process`` of ``source`` into ``output``: ONNX shape inference and graph optimization.

    Symbolic shape inference is skipped: this graph's only symbolic dimension is the batch,
    which ONNX's own shape inference handles (the symbolic pass also needs sympy).
    """
    from onnxruntime.quantization import quant_pre_process

    quant_pre_process(str(source), str(output), skip_symbolic_shape=True)
    return Path(output)


def build(source: str | Path, output: str | Path, calibration: np.ndarray, settings: dict,
          batch_size: int = BATCH_SIZE, scratch_dir: str | Path | None = None) -> QuantRecord:
    """Static quantization with a settings dict (keys of ``BASELINE``; missing keys take the baseline).

    With ``preprocess``, the pre-processed copy of ``source`` is written into ``scratch_dir``
    (default: next to ``output``) and converted from there.
    """
    unknown = set(settings) - set(BASELINE)
    if unknown:
        raise ValueError(f"unknown settings {sorted(unknown)}; expected keys among {sorted(BASELINE)}")
    s = {**BASELINE, **settings}
    output = Path(output)
    src = Path(source)
    if s["preprocess"]:
        scratch = Path(scratch_dir) if scratch_dir is not None else output.parent
        scratch.mkdir(parents=True, exist_ok=True)
        src = preprocessed(source, scratch / (output.stem + ".preprocessed.onnx"))
    extra = {"ActivationSymmetric": True} if s["activation_symmetric"] else None
    record = quantize(src, output, calibration, batch_size=batch_size, quant_format=s["quant_format"],
                      per_channel=s["per_channel"], activation_type=s["activation_type"],
                      weight_type=s["weight_type"], reduce_range=s["reduce_range"], extra_options=extra)
    record.settings["preprocess"] = bool(s["preprocess"])
    return record


def settings_table(source: str | Path, out_dir: str | Path, ev: Evaluation, calibration: np.ndarray,
                   batch_size: int = BATCH_SIZE) -> list[dict]:
    """One knob at a time from the baseline, plus dynamic quantization. Writes ``settings/*.onnx``."""
    out = Path(out_dir) / "settings"
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for name, change in SETTING_ROWS.items():
        settings = {**BASELINE, **change}
        model = out / f"{settings_name(settings)}.onnx"
        build(source, model, calibration, settings, batch_size)
        rows.append({"name": name, "settings": settings, "static": True, "input_range": input_interval(model),
                     **measure(model, ev)})
    for per_channel in (False, True):
        model = out / f"dynamic{'-perchannel' if per_channel else ''}.onnx"
        quantize_dynamic_model(source, model, per_channel=per_channel)
        rows.append({"name": "dynamic" + (", per-channel" if per_channel else ""),
                     "settings": {"mode": "dynamic", "per_channel": per_channel}, "static": False,
                     "input_range": None, **measure(model, ev)})
    return rows


FAMILY_ROWS = {
    "baseline (per-tensor weights)": {},
    "per-channel weights": {"per_channel": True},
    "per-channel + reduce_range": {"per_channel": True, "reduce_range": True},
    "reduce_range (per-tensor weights)": {"reduce_range": True},
}
"""The settings whose numbers depend on the kernel family, and the ones that show why."""


def family_table(source: str | Path, out_dir: str | Path, ev: Evaluation, calibration: np.ndarray,
                 families: tuple[str, ...] = kernels.FAMILIES, batch_size: int = BATCH_SIZE) -> list[dict]:
    """The same files computed as each kernel family: one row per (setting, family), in ``FAMILY_ROWS`` order.

    Each row says whether this machine's own kernels computed it (``emulated`` False) or
    ``lab.kernels``' emulation did. Writes ``settings/*.onnx``.
    """
    out = Path(out_dir) / "settings"
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for name, change in FAMILY_ROWS.items():
        settings = {**BASELINE, **change}
        model = out / f"{settings_name(settings)}.onnx"
        build(source, model, calibration, settings, batch_size)
        for f in families:
            with kernels.computing_as(f):
                rows.append({"name": name, "settings": settings, "family": f, "emulated": kernels.emulated(f),
                             **measure(model, ev)})
    return rows


def describe(settings: dict) -> dict:
    """Table columns for a settings dict: format, weights, activations, reduce_range, pre-processed."""
    s = {**BASELINE, **settings}
    return {"format": s["quant_format"], "weights": "per-channel" if s["per_channel"] else "per-tensor",
            "activations": s["activation_type"] + (" sym" if s["activation_symmetric"] else ""),
            "reduce_range": s["reduce_range"], "preprocessed": s["preprocess"]}


def candidates(source: str | Path, out_dir: str | Path, ev: Evaluation, calibration: np.ndarray,
               batch_size: int = BATCH_SIZE) -> list[dict]:
    """Every combination of format, per-channel, activation type, reduce_range and pre-processing.

    32 static conversions from the same calibration; each row has its settings, error, accuracy,
    accuracy loss against FP32, bytes, and whether it meets ``REQUIREMENT``. Writes ``candidates/*.onnx``.
    """
    out = Path(out_dir) / "candidates"
    out.mkdir(parents=True, exist_ok=True)
    fp32_bytes = Path(source).stat().st_size
    rows = []
    for fmt, pc, act, rr, pre in itertools.product(("QDQ", "QOperator"), (False, True), ("QInt8", "QUInt8"),
                                                   (False, True), (False, True)):
        settings = {**BASELINE, "quant_format": fmt, "per_channel": pc, "activation_type": act,
                    "reduce_range": rr, "preprocess": pre}
        model = out / f"{settings_name(settings)}.onnx"
        build(source, model, calibration, settings, batch_size)
        row = {"name": settings_name(settings), "settings": settings, **describe(settings), **measure(model, ev)}
        row["accuracy_loss"] = round(ev.fp32_accuracy - row["accuracy"], 4)
        row["size_ratio"] = round(row["bytes"] / fp32_bytes, 4)
        row["meets"] = meets(row["accuracy_loss"], row["size_ratio"], True)
        rows.append(row)
    return rows


def meets(accuracy_loss: float, size_ratio: float, static: bool) -> bool:
    """The exercise's requirement, on numbers measured on the same images as FP32."""
    return not unmet(accuracy_loss, size_ratio, static)


def unmet(accuracy_loss: float, size_ratio: float, static: bool) -> list[str]:
    """Each limit of the requirement the numbers miss, with the number and the limit."""
    out = []
    if not static:
        out.append("no static input ruler (a dynamic model computes its ranges at run time)")
    if accuracy_loss > MAX_ACCURACY_LOSS + 1e-9:
        out.append(f"accuracy loss {accuracy_loss:.4f} is over the limit {MAX_ACCURACY_LOSS}")
    if size_ratio > MAX_SIZE_RATIO:
        out.append(f"size {size_ratio:.1%} of FP32 is over the limit {MAX_SIZE_RATIO:.1%}")
    return out


# ---- selective quantization ----------------------------------------------------------------------
def sensitivity(source: str | Path, qdq_model: str | Path, calibration: np.ndarray,
                batch_size: int = BATCH_SIZE) -> dict:
    """Per-tensor SQNR (dB) with ORT's ``qdq_loss_debug``, and the node where the SQNR drops most.

    ``qdq_sqnr``: the tensor before against after its own QuantizeLinear/DequantizeLinear pair;
    ``xmodel_sqnr``: the QDQ model's tensor against the FP32 model's, all errors so far added up.
    A node's drop is the ``xmodel_sqnr`` of its nearest measured input minus that of its output;
    the most sensitive node has the largest drop. Also the weights' SQNR.
    """
    from onnxruntime.quantization import qdq_loss_debug as dbg

    with tempfile.TemporaryDirectory(prefix="lab-debug-") as tmp:
        dbg.modify_model_output_intermediate_tensors(str(source), f"{tmp}/float.onnx")
        dbg.modify_model_output_intermediate_tensors(str(qdq_model), f"{tmp}/qdq.onnx")
        float_acts = dbg.collect_activations(f"{tmp}/float.onnx", ArrayReader(calibration, batch_size))
        qdq_acts = dbg.collect_activations(f"{tmp}/qdq.onnx", ArrayReader(calibration, batch_size))
    errors = dbg.compute_activation_error(dbg.create_activation_matching(qdq_acts, float_acts))
    weights = dbg.compute_weight_error(dbg.create_weight_matching(str(source), str(qdq_model)))
    fp32 = graph.load(source)
    producer = {o: n for n in fp32.graph.node for o in n.output}
    order = {n.name: i for i, n in enumerate(fp32.graph.node)}

    def upstream(tensor: str) -> str | None:
        node = producer.get(tensor)
        while node is not None:
            src = node.input[0]
            if src in errors:
                return src
            node = producer.get(src)
        return None

    drops = []
    for tensor, e in errors.items():
        node, up = producer.get(tensor), upstream(tensor)
        if node is not None and up is not None:
            drops.append({"node": node.name, "input": up, "output": tensor,
                          "drop_db": round(float(errors[up]["xmodel_err"] - e["xmodel_err"]), 2)})
    drops.sort(key=lambda d: order[d["node"]])
    activations = [{"tensor": t, "qdq_sqnr_db": round(float(e["qdq_err"]), 2),
                    "xmodel_sqnr_db": round(float(e["xmodel_err"]), 2)} for t, e in errors.items()]
    activations.sort(key=lambda a: order.get(producer[a["tensor"]].name, -1) if a["tensor"] in producer else -1)
    return {"activations": activations, "drops": drops,
            "weights": [{"tensor": k, "sqnr_db": round(float(v), 2)} for k, v in sorted(weights.items())
                        if k.endswith("weight")],
            "most_sensitive_node": max(drops, key=lambda d: d["drop_db"])["node"] if drops else None}


def excluded_row(source: str | Path, out_dir: str | Path, ev: Evaluation, calibration: np.ndarray,
                 node: str, batch_size: int = BATCH_SIZE) -> dict:
    """The baseline conversion with ``node`` left in FP32 (``nodes_to_exclude``)."""
    out = Path(out_dir) / "settings"
    out.mkdir(parents=True, exist_ok=True)
    model = out / f"exclude-{node}.onnx"
    quantize(source, model, calibration, batch_size=batch_size, nodes_to_exclude=[node])
    return {"name": f"baseline, {node} left in FP32", "excluded": [node], **measure(model, ev),
            "float_weights": graph.weight_dtypes(model).get("FLOAT", 0)}


# ---- pre-processing ------------------------------------------------------------------------------
def preprocess_report(source: str | Path, out_dir: str | Path) -> dict:
    """What ``quant_pre_process`` changes in this graph: op counts, shapes recorded, metadata, bytes."""
    out = preprocessed(source, Path(out_dir) / "source.preprocessed.onnx")
    before, after = graph.load(source), graph.load(out)
    return {"ops_before": graph.op_counts(before), "ops_after": graph.op_counts(after),
            "value_info_before": len(before.graph.value_info), "value_info_after": len(after.graph.value_info),
            "metadata_after": {p.key: p.value for p in after.metadata_props},
            "nodes_after": [f"{n.name} ({n.op_type})" for n in after.graph.node],
            "bytes_before": Path(source).stat().st_size, "bytes_after": out.stat().st_size}


# ---- the choice, the document, the check ---------------------------------------------------------
def check_choice(choice: str | Path, source: str | Path, split: str = "evaluation") -> dict:
    """Measure a chosen model against the requirement on ``split``: the numbers the grader looks at.

    The default is the evaluation split, the one students may measure on. The grader's hidden check
    passes ``split="heldout"``: that split stays instructor-side (the kit has no ``heldout.npz``).
    """
    ev = evaluation(source, split)
    m = measure(choice, ev)
    static = input_interval(choice) is not None
    loss = round(ev.fp32_accuracy - m["accuracy"], 4)
    ratio = round(m["bytes"] / Path(source).stat().st_size, 4)
    return {"split": split, "kernel_family": family(), "fp32_accuracy": round(ev.fp32_accuracy, 4), **m,
            "accuracy_loss": loss, "size_ratio": ratio, "static": static, "meets": meets(loss, ratio, static)}


def document(*, ev: Evaluation, methods: list[dict], entropy: dict, outliers: list[dict], settings: list[dict],
             excluded: dict, sensitivity_: dict, preprocess: dict, speed: dict, candidates_: list[dict],
             choice: dict) -> dict:
    """The ``toolbox/1`` document: every table of the lesson and the chosen settings.

    ``evaluation.kernel_family`` names the family every INT8 number in it was computed for; the
    speed section's ``machine_family`` is this CPU's (timings always run on its own kernels).
    """
    from lab.schemas import validate

    speed = {**speed, "machine_family": kernels.machine_family()}
    doc = {"schema": SCHEMA, "versions": versions(),
           "evaluation": {"split": ev.split, "samples": int(len(ev.labels)),
                          "fp32_accuracy": round(ev.fp32_accuracy, 4), "kernel_family": family()},
           "requirement": {"text": REQUIREMENT, "max_accuracy_loss": MAX_ACCURACY_LOSS,
                           "max_size_ratio": MAX_SIZE_RATIO, "static": True},
           "methods": methods, "entropy": entropy, "outliers": outliers, "settings": settings,
           "excluded": excluded, "sensitivity": sensitivity_, "preprocess": preprocess, "speed": speed,
           "candidates": candidates_, "choice": choice}
    return validate("toolbox", doc)
