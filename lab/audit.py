"""The lessons' diagnostics for any FP32 / INT8 pair of ONNX models and data: what ``python -m lab audit`` prints.

Everything is read from the two graphs and measured on the given data, nothing assumed about the models:

- every **ruler** (scale, zero point, the interval it covers): the input's and each activation's, from the INT8
  graph's QuantizeLinear nodes and its QLinear* ops' output quantization (QDQ or QOperator);
- on the data, each ruler against the FP32 values of its tensor: the fraction **clipped**, the grid steps
  **used**, and a clipping / squashing diagnosis (``lab.compare.diagnose``);
- the **error by input size** (``lab.compare.error_by_magnitude``): growing with size is clipping, even is
  squashing;
- **where INT8 first parts from FP32**: per-tensor SQNR with ORT's ``qdq_loss_debug`` (QDQ models only);
- accuracy (with labels) or agreement with FP32, and the max abs error, under **both kernel families**: this
  machine's kernels, the other family emulated (``lab.kernels``), or a line naming the ops it does not cover;
- the **recipe** (every metadata entry the model carries).
"""
from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper
from onnxruntime.quantization import CalibrationDataReader
from onnxruntime.quantization import qdq_loss_debug as qd

from lab import compare, graph, kernels, tables
from lab.data import file_sha256
from lab.errors import LabError
from lab.ruler import InputRuler

SCHEMA = "audit/1"
BATCH = 256
PARTING_DB = 20.0   # SQNR against FP32 below this: the error is over 10 % of the signal
_DTYPES = {onnx.TensorProto.INT8: "int8", onnx.TensorProto.UINT8: "uint8"}
# QLinear* op -> (its output scale input, its output zero point input): the ruler of the tensor it writes
OUTPUT_RULERS = {"QLinearConv": (6, 7), "QLinearMatMul": (6, 7), "QGemm": (7, 8), "QLinearAdd": (6, 7),
                 "QLinearMul": (6, 7), "QLinearSoftmax": (3, 4), "QLinearGlobalAveragePool": (3, 4),
                 "QLinearAveragePool": (3, 4), "QLinearLeakyRelu": (3, 4), "QLinearSigmoid": (3, 4),
                 "QLinearConcat": (0, 1)}
SUFFIXES = ("_QuantizeLinear_Input", "_quantized")   # ORT's names for a float tensor's quantized neighbours


class AuditError(LabError):
    """A model or a data file the audit cannot take; the message names the file and what was expected."""


# --- reading the inputs ------------------------------------------------------------------------------------------

def load_model(path: str | Path, role: str) -> onnx.ModelProto:
    """The ONNX model at ``path``, or an ``AuditError`` naming the file and what is wrong."""
    path = Path(path)
    if not path.is_file():
        raise AuditError(f"{path}: no such file; expected the {role} ONNX model")
    try:
        model = onnx.load(str(path))
    except Exception as exc:  # noqa: BLE001 - onnx raises DecodeError, ValueError, ...: all mean "not a model"
        raise AuditError(f"{path}: not an ONNX model ({type(exc).__name__}); expected the {role} model") from None
    inputs = [i for i in model.graph.input if i.name not in {t.name for t in model.graph.initializer}]
    if len(inputs) != 1:
        raise AuditError(f"{path}: the {role} model has {len(inputs)} inputs {[i.name for i in inputs]}; "
                         "the audit feeds one input")
    return model


def input_spec(model: onnx.ModelProto) -> tuple[str, list]:
    """The graph input's name and dims (an int, or None where the size is free)."""
    vi = next(i for i in model.graph.input if i.name not in {t.name for t in model.graph.initializer})
    dims = [d.dim_value if d.HasField("dim_value") else None for d in vi.type.tensor_type.shape.dim]
    return vi.name, dims


def _arrays(path: Path, what: str) -> dict[str, np.ndarray]:
    if not path.is_file():
        raise AuditError(f"{path}: no such file; expected {what} as .npy or .npz")
    try:
        if path.suffix == ".npy":
            return {"": np.load(path, allow_pickle=False)}
        with np.load(path, allow_pickle=False) as f:
            return {k: f[k] for k in f.files}
    except (OSError, ValueError) as exc:
        raise AuditError(f"{path}: not a numpy .npy or .npz file ({exc}); expected {what}") from None


def load_data(path: str | Path, model: onnx.ModelProto) -> np.ndarray:
    """The model's input batch from ``path``: a .npy, or the .npz array named after the input (or its only
    array), float32 with the input's rank and fixed sizes."""
    path = Path(path)
    name, dims = input_spec(model)
    shape = "[" + ", ".join("N" if d is None else str(d) for d in dims) + "]"
    arrays = _arrays(path, f"the model's input '{name}' {shape}")
    key = "" if "" in arrays else name if name in arrays else next(iter(arrays)) if len(arrays) == 1 else None
    if key is None:
        raise AuditError(f"{path}: no array named '{name}' (the model's input) among {sorted(arrays)}")
    x = arrays[key]
    if not np.issubdtype(x.dtype, np.number) or x.ndim != len(dims) or any(
            d is not None and d != s for d, s in zip(dims, x.shape)) or len(x) == 0:
        raise AuditError(f"{path}: {'array ' + repr(key) if key else 'the array'} is {x.dtype} "
                         f"{list(x.shape)}; expected the model's input '{name}': numbers shaped {shape}")
    return np.ascontiguousarray(x, np.float32)


def load_labels(path: str | Path, n: int) -> np.ndarray:
    """Integer class labels, one per sample: a .npy, or the .npz array ``labels`` (or its only array)."""
    path = Path(path)
    arrays = _arrays(path, f"{n} integer labels")
    key = "" if "" in arrays else "labels" if "labels" in arrays else next(iter(arrays)) if len(arrays) == 1 else None
    y = arrays.get(key) if key is not None else None
    if y is None or y.shape != (n,) or not np.issubdtype(y.dtype, np.integer):
        got = f"{y.dtype} {list(y.shape)}" if y is not None else f"arrays {sorted(arrays)}"
        raise AuditError(f"{path}: {got}; expected 'labels': {n} integers, one per sample of the data")
    return y.astype(np.int64)


# --- the rulers in the graph -------------------------------------------------------------------------------------

def float_name(name: str) -> str:
    """The float tensor a quantized one stands for (``conv1.out_quantized`` -> ``conv1.out``)."""
    for suffix in SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def read_rulers(model: onnx.ModelProto) -> dict[str, InputRuler]:
    """Float tensor -> the ruler laid on it, in graph order: each QuantizeLinear of an activation (not a weight)
    and each QLinear* op's output quantization; per-tensor 8-bit rulers only."""
    inits = {i.name: i for i in model.graph.initializer}
    rulers: dict[str, InputRuler] = {}
    for node in model.graph.node:
        if node.op_type == "QuantizeLinear" and node.input[0] not in inits and len(node.input) > 2:
            where = (node.input[0], node.input[1], node.input[2])
        elif node.op_type in OUTPUT_RULERS and len(node.input) > max(OUTPUT_RULERS[node.op_type]):
            at_scale, at_zero = OUTPUT_RULERS[node.op_type]
            where = (node.output[0], node.input[at_scale], node.input[at_zero])
        else:
            continue
        tensor, scale, zero = where
        if scale in inits and zero in inits and inits[zero].data_type in _DTYPES:
            s, z = numpy_helper.to_array(inits[scale]), numpy_helper.to_array(inits[zero])
            if s.size == 1 and z.size == 1:
                rulers.setdefault(float_name(tensor), InputRuler(float(s.reshape(())), int(z.reshape(())),
                                                                 _DTYPES[inits[zero].data_type], node.name))
    return rulers


# --- running the models ------------------------------------------------------------------------------------------

def batches(n: int, size: int = BATCH) -> list[slice]:
    return [slice(i, min(n, i + size)) for i in range(0, n, size)]


def fp32_tensors(model: onnx.ModelProto, x: np.ndarray, names: Iterable[str],
                 progress: Callable = iter) -> dict[str, np.ndarray]:
    """The FP32 model's output and the float tensors ``names`` (those it has) on ``x``, run in batches."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    produced = {o for n in m.graph.node for o in n.output} | {i.name for i in m.graph.input}
    outputs = [m.graph.output[0].name]
    for name in names:
        if name in produced and name not in outputs:
            outputs.append(name)
            if name not in {o.name for o in m.graph.output} and name != input_spec(m)[0]:
                m.graph.output.append(onnx.helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None))
    session = graph.session(m)
    input_name = input_spec(m)[0]
    runnable = [o for o in outputs if o != input_name]
    parts: dict[str, list] = {o: [] for o in outputs}
    for s in progress(batches(len(x))):
        for name, value in zip(runnable, session.run(runnable, {input_name: x[s]})):
            parts[name].append(value)
        if input_name in parts:
            parts[input_name].append(x[s])
    return {k: np.concatenate(v) for k, v in parts.items()}


def int8_outputs(path: Path, x: np.ndarray, family: str, input_name: str, progress: Callable = iter) -> np.ndarray:
    """The INT8 model's first output on ``x`` as CPUs of ``family`` compute it (here or emulated), in batches."""
    return np.concatenate([compare.predict(path, x[s], input_name, family=family) for s in progress(batches(len(x)))])


# --- the measurements --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class RulerRow:
    """One ruler read from the graph, and what it does to its tensor's FP32 values on the data."""

    tensor: str
    node: str
    scale: float
    zero_point: int
    dtype: str
    low: float
    high: float
    measured: bool
    clipped_fraction: float | None = None
    steps_used: int | None = None
    steps: int | None = None
    diagnosis: str | None = None
    reason: str | None = None
    measured_on: str | None = None   # the FP32 tensor it was measured on (a removed Relu's output, or itself)


def measured_tensors(fp32: onnx.ModelProto, rulers: dict[str, InputRuler]) -> dict[str, str]:
    """Ruler's tensor -> the FP32 tensor to measure it on: itself, or the output of the Relu that is its only
    consumer when the ruler starts at 0 (the converter removed that Relu: the ruler's clipping does its work)."""
    consumers: dict[str, list] = {}
    for node in fp32.graph.node:
        for i in node.input:
            consumers.setdefault(i, []).append(node)
    chosen = {}
    for tensor, ruler in rulers.items():
        after = consumers.get(tensor, [])
        relu = len(after) == 1 and after[0].op_type == "Relu" and ruler.interval[0] == 0.0
        chosen[tensor] = after[0].output[0] if relu else tensor
    return chosen


def ruler_rows(rulers: dict[str, InputRuler], values: dict[str, np.ndarray],
               measured_on: dict[str, str]) -> list[RulerRow]:
    """Each ruler with lab.compare.diagnose's verdict on the FP32 values it meets (``measured_on`` names them)."""
    rows = []
    for tensor, ruler in rulers.items():
        low, high = ruler.interval
        unmeasured = RulerRow(tensor=tensor, node=ruler.node, scale=ruler.scale, zero_point=ruler.zero_point,
                              dtype=ruler.dtype, low=low, high=high, measured=False)
        source = measured_on.get(tensor, tensor)
        if source not in values:
            rows.append(replace(unmeasured, reason="the FP32 model has no tensor of this name"))
            continue
        d = compare.diagnose(ruler, values[source])
        rows.append(replace(unmeasured, measured=True, clipped_fraction=d.clipped_fraction,
                            steps_used=int(round(d.grid_used_fraction * ruler.steps)), steps=ruler.steps,
                            diagnosis=d.kind, reason=d.reason, measured_on=source))
    return rows


def per_sample(a: np.ndarray) -> np.ndarray:
    return np.asarray(a, np.float64).reshape(len(a), -1)


def scores(fp32_out: np.ndarray, out: np.ndarray, labels: np.ndarray | None) -> dict:
    """Max abs error against FP32, agreement of the top class with FP32's and accuracy (when labelled)."""
    doc = {"max_abs_error": compare.max_abs_error(fp32_out, out)}
    if out.ndim == 2 and out.shape[1] > 1:
        doc["agreement"] = float(np.mean(out.argmax(axis=1) == fp32_out.argmax(axis=1)))
        if labels is not None:
            doc["accuracy"] = float(np.mean(out.argmax(axis=1) == labels))
    return doc


def family_rows(path: Path, model: onnx.ModelProto, x: np.ndarray, fp32_out: np.ndarray,
                labels: np.ndarray | None, progress: Callable = iter) -> list[dict]:
    """Each kernel family's scores: on this machine's kernels, emulated, or a line naming what is not covered."""
    rows, missing = [], kernels.uncovered(model)
    for family in kernels.FAMILIES:
        row = {"family": family, "description": kernels.DESCRIPTIONS[family]}
        if kernels.emulated(family) and graph.quant_format(model) != "float" and missing:
            rows.append({**row, "computed_on": None,
                         "note": f"not computed: the emulation does not cover {', '.join(missing)}; run the audit "
                                 f"on a CPU of this family"})
            continue
        out = int8_outputs(path, x, family, input_spec(model)[0], progress)
        rows.append({**row, "computed_on": "emulation" if kernels.emulated(family) else "this machine's kernels",
                     **scores(fp32_out, out, labels)})
    return rows


def error_by_size(x: np.ndarray, fp32_out: np.ndarray, out: np.ndarray) -> list[dict]:
    """Per-sample max abs error grouped by each sample's largest |input|, as a fraction of the data's largest."""
    size = np.abs(per_sample(x)).max(axis=1)
    size = size / size.max() if size.max() > 0 else size
    return compare.error_by_magnitude(size, compare.sample_errors(per_sample(fp32_out), per_sample(out)))


class _Reader(CalibrationDataReader):
    """The data in batches, rewindable: qdq_loss_debug runs the FP32 and the INT8 model on the same batches."""

    def __init__(self, name: str, x: np.ndarray):
        self.name, self.x, self.i = name, x, 0

    def get_next(self):
        if self.i >= len(self.x):
            return None
        self.i += BATCH
        return {self.name: self.x[self.i - BATCH:self.i]}

    def rewind(self):
        self.i = 0


def _debug_activations(fp32_path: Path, int8_path: Path, reader: _Reader) -> tuple[dict, dict]:
    """Every float tensor of both models on the same batches (qdq_loss_debug), shapes inferred first: the tool
    types each tensor it adds as an output from the graph's value_info (entries onnx could not type are dropped:
    ONNX Runtime refuses a model that holds one)."""
    with tempfile.TemporaryDirectory(prefix="lab-audit-") as tmp:
        acts = []
        for path, name in ((fp32_path, "float"), (int8_path, "int8")):
            inferred, augmented = Path(tmp) / f"{name}-inferred.onnx", Path(tmp) / f"{name}.onnx"
            m = onnx.load(str(path))
            m.ir_version = max(m.ir_version, 4)   # below IR 4, shape inference cannot see initializers' types
            m = onnx.shape_inference.infer_shapes(m)
            known = [v for v in m.graph.value_info if v.type.tensor_type.elem_type]   # ORT refuses type 0
            del m.graph.value_info[:]
            m.graph.value_info.extend(known)
            onnx.save(m, str(inferred))
            qd.modify_model_output_intermediate_tensors(str(inferred), str(augmented))
            reader.rewind()
            acts.append(qd.collect_activations(str(augmented), reader))
    return acts[0], acts[1]


def parting(fp32_path: Path, int8_path: Path, model: onnx.ModelProto, x: np.ndarray) -> dict:
    """Per-tensor SQNR (dB) with ORT's qdq_loss_debug, in graph order, and the first tensor below PARTING_DB."""
    if graph.quant_format(model) != "QDQ":
        return {"rows": [], "note": f"not measured: ORT's qdq_loss_debug reads QDQ models; this one is "
                                    f"{graph.quant_format(model)}"}
    try:
        float_acts, int8_acts = _debug_activations(fp32_path, int8_path, _Reader(input_spec(model)[0], x))
    except Exception as exc:  # noqa: BLE001 - ORT's tool raises what ORT raises; the rest of the audit stands
        return {"rows": [], "note": f"not measured: ORT's qdq_loss_debug failed on this model ({exc})"}
    matching = {k: v for k, v in qd.create_activation_matching(int8_acts, float_acts).items() if "float" in v}
    errors = qd.compute_activation_error(matching)
    order = [o for n in load_model(fp32_path, "FP32").graph.node for o in n.output]
    rows = [{"tensor": t, "own_db": float(errors[t]["qdq_err"]), "vs_fp32_db": float(errors[t]["xmodel_err"])}
            for t in [input_spec(model)[0], *order] if t in errors]
    fp32_ops = {o: n.op_type for n in load_model(fp32_path, "FP32").graph.node for o in n.output}
    int8_ops = {o: n.op_type for n in model.graph.node for o in n.output}
    for r in rows:   # QDQ drops a Relu whose ruler starts at 0: the ruler clips what the Relu would have zeroed
        r["relu_in_ruler"] = fp32_ops.get(r["tensor"]) in ("Relu", "Clip") and int8_ops.get(r["tensor"]) not in (
            "Relu", "Clip")
    first = next((r["tensor"] for r in rows if r["vs_fp32_db"] < PARTING_DB), None)
    return {"rows": rows, "first_below": first, "threshold_db": PARTING_DB,
            "note": "qdq_loss_debug runs an unfused copy (DequantizeLinear, float MatMul or Conv, QuantizeLinear): "
                    "it cannot see the saturating family's int16 pairs"}


def recipe(model: onnx.ModelProto) -> dict[str, str]:
    """Every metadata entry the model carries (a released lab model carries its recipe there)."""
    return {p.key: p.value for p in model.metadata_props}


# --- the whole audit ---------------------------------------------------------------------------------------------

def audit(fp32_path: str | Path, int8_path: str | Path, data_path: str | Path, labels_path: str | Path | None = None,
          progress: Callable = iter) -> dict:
    """The audit of ``int8_path`` against ``fp32_path`` on the data: a JSON-ready document (schema audit/1)."""
    fp32_path, int8_path = Path(fp32_path), Path(int8_path)
    fp32, int8 = load_model(fp32_path, "FP32"), load_model(int8_path, "INT8")
    if input_spec(fp32)[0] != input_spec(int8)[0]:
        raise AuditError(f"{int8_path}: its input is '{input_spec(int8)[0]}', the FP32 model's "
                         f"'{input_spec(fp32)[0]}'; expected the same model before and after quantization")
    x = load_data(data_path, fp32)
    labels = load_labels(labels_path, len(x)) if labels_path else None
    rulers = read_rulers(int8)
    measured_on = measured_tensors(fp32, rulers)
    values = fp32_tensors(fp32, x, set(measured_on.values()), progress)
    fp32_out = values[fp32.graph.output[0].name]
    machine = kernels.machine_family()
    here = int8_outputs(int8_path, x, machine, input_spec(int8)[0], progress)
    return {"schema": SCHEMA,
            "models": {"fp32": {"path": str(fp32_path), "sha256": file_sha256(fp32_path)},
                       "int8": {"path": str(int8_path), "sha256": file_sha256(int8_path),
                                "format": graph.quant_format(int8), "ops": graph.op_counts(int8)}},
            "data": {"path": str(data_path), "samples": len(x), "input": input_spec(int8)[0],
                     "shape": list(x.shape), "labels": str(labels_path) if labels_path else None},
            "machine_family": machine,
            "fp32": {k: v for k, v in scores(fp32_out, fp32_out, labels).items() if k == "accuracy"},
            "rulers": [asdict(r) for r in ruler_rows(rulers, values, measured_on)],
            "error_by_size": error_by_size(x, fp32_out, here),
            "parting": parting(fp32_path, int8_path, int8, x),
            "families": family_rows(int8_path, int8, x, fp32_out, labels, progress),
            "recipe": recipe(int8)}


def jsonable(value):
    """``value`` with every non-finite float (an SQNR of a tensor quantized without error is infinite) as None:
    strict JSON has no Infinity or NaN."""
    if isinstance(value, float):
        return value if np.isfinite(value) else None
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    return value


# --- the text report ---------------------------------------------------------------------------------------------

def _scores_line(doc: dict) -> str:
    parts = [f"accuracy {doc['accuracy']:.4f}" if "accuracy" in doc else None,
             f"agreement with FP32 {doc['agreement']:.4f}" if "agreement" in doc else None,
             f"max abs error {doc['max_abs_error']:.4g}"]
    return ", ".join(p for p in parts if p)


def _ruler_table(rows: list[dict]) -> str:
    shown = [{**r, "clipped": r["clipped_fraction"], "used": (f"{r['steps_used']}/{r['steps']}"
                                                             if r["measured"] else None),
              "range": f"[{r['low']:.4g}, {r['high']:.4g}]",
              "on": r["measured_on"] if r["measured_on"] not in (None, r["tensor"]) else None} for r in rows]
    columns = [("tensor", "tensor", ""), ("scale", "scale", ".4g"), ("zero_point", "zero point", "d"),
               ("dtype", "type", ""), ("range", "range", ""), ("clipped", "clipped", ".2%"),
               ("used", "steps used", ""), ("diagnosis", "diagnosis", "")]
    if any(r["on"] for r in shown):
        columns.append(("on", "measured after its Relu", ""))
    return tables.format_rows(shown, columns)


def format_report(doc: dict) -> str:
    """The audit as text for people: models, rulers, error by input size, parting, families, recipe."""
    m, d = doc["models"], doc["data"]
    lines = [f"audit of {m['int8']['path']} ({m['int8']['format']}) against {m['fp32']['path']}",
             f"data: {d['path']}, {d['samples']} samples of '{d['input']}' {d['shape'][1:]}"
             + (f", labels {d['labels']}" if d["labels"] else ", no labels (agreement with FP32 only)"),
             f"this machine: {kernels.describe(doc['machine_family'])}",
             f"FP32: accuracy {doc['fp32']['accuracy']:.4f}" if doc["fp32"] else "FP32: no labels, no accuracy", "",
             f"rulers ({len(doc['rulers'])}, read from the INT8 graph) against the FP32 values on the data:"]
    lines += [_ruler_table(doc["rulers"])] if doc["rulers"] else ["  none: no static 8-bit ruler in the graph"]
    lines += [f"  {r['tensor']}: {r['reason']}" for r in doc["rulers"] if r["diagnosis"] in ("clipping", "squashing")]
    lines += ["", "error by input size (each sample's largest |input|, as a fraction of the data's largest), "
                  f"{doc['machine_family']} kernels:",
              tables.format_rows(doc["error_by_size"], [("low", "from", ".2f"), ("high", "to", ".2f"),
                                                        ("count", "samples", "d"), ("mean_error", "mean error", ".4f"),
                                                        ("max_error", "max error", ".4f")]),
              "", "where INT8 parts from FP32 (ORT's qdq_loss_debug, SQNR in dB, graph order):"]
    p = doc["parting"]
    if p["rows"]:
        lines.append(tables.format_rows(p["rows"], [("tensor", "tensor", ""), ("own_db", "own", ".1f"),
                                                    ("vs_fp32_db", "vs FP32", ".1f"),
                                                    ("relu_in_ruler", "Relu in the ruler", "")]))
        lines.append(f"  first below {p['threshold_db']:g} dB: {p['first_below']}" if p["first_below"]
                     else f"  every tensor stays above {p['threshold_db']:g} dB against FP32")
    if any(r["relu_in_ruler"] for r in p["rows"]):
        lines += ["  'own' is low where the ruler stands in for a Relu the converter removed:",
                  "  it compares the tensor before the Relu with the clipped one"]
    lines.append(f"  {p['note']}")
    lines += ["", "kernel families:"]
    for f in doc["families"]:
        where = f" ({f['computed_on']})" if f["computed_on"] else ""
        lines.append(f"  {f['family']}{where}: " + (f["note"] if "note" in f else _scores_line(f)))
    lines += ["", "recipe (the model's metadata):"]
    lines += [f"  {k}: {v if len(v) < 200 else v[:200] + ' ...'}" for k, v in doc["recipe"].items()] or \
             ["  none: the model carries no metadata (ORT's converter writes no recipe)"]
    return "\n".join(lines)
