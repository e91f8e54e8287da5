"""The lessons' diagnostics for any FP32 / INT8 pair of ONNX models and data: what ``python -m lab audit`` prints.

Everything is read from the two graphs and measured on the given data, nothing assumed about the models:

- first, **validation**: a pair or data the audit cannot measure is refused in one line that names it (a float model
  given as the INT8 one, different inputs, weights that are not the FP32 model's, a model ORT cannot load, empty or
  non-finite data, an .npz without the array the input or ``labels`` names, labels outside the output's classes,
  missing external data, onnx's own message for a file it cannot read); a doubt is a warning printed first (weights
  that differ beyond rounding, too few samples, a fixed batch, quantized types it does not read: int4, 16-bit);
- every **ruler** (scale, zero point, the interval it covers): the input's and each activation's, from the INT8
  graph's QuantizeLinear nodes and its QLinear* ops' output quantization (QDQ or QOperator; a dynamic model stores
  none: it quantizes activations at run time), and each weight's (``lab.weight_rulers``); 8-bit only;
- on the data, each ruler against the FP32 values of its tensor: the fraction **clipped**, the grid steps
  **used**, and a clipping / squashing diagnosis (``lab.compare.diagnose_summary``);
- the **error by input size** (``lab.compare.error_by_magnitude``): growing with size is clipping, even is
  squashing;
- **where INT8 first parts from FP32**: per-tensor SQNR, matched as ORT's ``qdq_loss_debug`` matches them (QDQ);
- accuracy (with labels) or agreement with FP32, and the max abs error, under **both kernel families**: this
  machine's kernels and the other family (``lab.hybrid``: ORT for the ops the family does not change, ``lab.kernels``
  for the integer GEMM and Conv kernels), **the difference between the two families** itself, and whether ORT's
  ``session.x64quantprecision`` closes it (claimed only where the samples it runs on differ without it);
- the **latency on this CPU** (``lab.op_time``): one batch's median wall time on the FP32 and the INT8 model in ORT
  with the audit's session settings, their ratio, and the INT8 model's kernel time split by ORT's profiler into
  integer kernels, QuantizeLinear / DequantizeLinear and float ops;
- **which node to exclude** (``lab.sensitivity``: each GEMM or Conv of a QDQ model left in float in turn, or each
  QLinearConv, QLinearMatMul or QGemm of a QOperator model run as its FP32 node between its rulers, ranked by the
  output's SQNR on the first samples), with the suggestion's measured effect, and on request (``reconvert``) the
  suggestion re-converted for real (``lab.reconvert``);
- the **recipe** (every metadata entry the model carries).

Memory is bounded: the data is read batch by batch (a ``.npy`` is memory-mapped) and every statistic accumulates
per batch (``Stream``), so no tensor of the whole data set is ever held; ``Options`` sets the batch and a cap on the
samples.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper, numpy_helper
from onnxruntime.quantization import qdq_loss_debug as qd

from lab import compare, graph, hybrid, kernels, op_time, reconvert, sensitivity, tables, weight_rulers
from lab.data import file_sha256
from lab.errors import LabError
from lab.ruler import InputRuler

SCHEMA = "audit/5"  # 5: the weights of dynamic models, unread types, the Softmax ruler ORT fixes, x64_fix.without
BATCH = 4            # small: a batch's intermediate tensors of both models are what the audit holds at once
MIN_SAMPLES = 100    # below this, an agreement or an accuracy moves by 1 % or more per sample: warned
PARTING_DB = 20.0    # SQNR against FP32 below this: the error is over 10 % of the signal
X64_SAMPLES = 8     # the x64 check runs both families with the option on this many samples at most
RANK_SAMPLES = 16   # the node ranking runs every candidate model on the first samples only (0: no ranking)
WEIGHT_OFF = 0.01    # a weight more than half a step from its FP32 value, in more than this fraction: not the same
_DTYPES = {onnx.TensorProto.INT8: "int8", onnx.TensorProto.UINT8: "uint8"}
# QLinear* op -> (its output scale input, its output zero point input): the ruler of the tensor it writes
OUTPUT_RULERS = {"QLinearConv": (6, 7), "QLinearMatMul": (6, 7), "QGemm": (7, 8), "QLinearAdd": (6, 7),
                 "QLinearMul": (6, 7), "QLinearSoftmax": (3, 4), "QLinearGlobalAveragePool": (3, 4),
                 "QLinearAveragePool": (3, 4), "QLinearLeakyRelu": (3, 4), "QLinearSigmoid": (3, 4),
                 "QLinearConcat": (0, 1)}
SUFFIXES = ("_QuantizeLinear_Input", "_quantized")   # ORT's names for a float tensor's quantized neighbours
OUT_OF_MEMORY = ("bad_alloc", "Failed to allocate", "out of memory")   # how ORT words an allocation that failed


class AuditError(LabError):
    """A model or a data file the audit cannot take; the message names the file and what was expected."""


@dataclass(frozen=True)
class Options:
    """How much the audit reads at once and in all: ``batch`` samples per run, at most ``max_samples``; the ranking's
    samples, whether its suggestion is re-converted for real (``reconvert``: two ``quantize_static`` runs), and the
    rounds the latency is timed in (``latency_runs``, 0: not timed)."""

    batch: int = BATCH
    max_samples: int | None = None
    rank_samples: int = RANK_SAMPLES
    reconvert: bool = False
    latency_runs: int = op_time.RUNS


# --- reading the inputs ------------------------------------------------------------------------------------------

def missing_external_data(model: onnx.ModelProto, folder: Path) -> list[str]:
    """The files the model's external tensors name that are not in ``folder``."""
    files = []
    for tensor in model.graph.initializer:
        if tensor.data_location == onnx.TensorProto.EXTERNAL:
            where = {e.key: e.value for e in tensor.external_data}.get("location", "")
            if not (folder / where).is_file() and where not in files:
                files.append(where)
    return files


def load_model(path: str | Path, role: str) -> onnx.ModelProto:
    """The ONNX model at ``path``, or an ``AuditError`` naming the file and what is wrong (onnx's own words)."""
    path = Path(path)
    if not path.is_file():
        raise AuditError(f"{path}: no such file; expected the {role} ONNX model")
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as exc:  # noqa: BLE001 - onnx raises DecodeError, ValueError, ...: all mean "not a model"
        said = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
        raise AuditError(f"{path}: not an ONNX model (onnx: {said}); expected the {role} model") from None
    missing = missing_external_data(model, path.parent)
    if missing:
        raise AuditError(f"{path}: its weights are stored outside the file, in {', '.join(missing)}, which is not in "
                         f"{path.parent}; put the external data file next to the {role} model")
    onnx.load_external_data_for_model(model, str(path.parent))
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


def input_dtype(model: onnx.ModelProto) -> np.dtype:
    """The numpy type of the graph input (float32 where the graph does not say)."""
    vi = next(i for i in model.graph.input if i.name == input_spec(model)[0])
    elem = vi.type.tensor_type.elem_type
    return np.dtype(helper.tensor_dtype_to_np_dtype(elem)) if elem else np.dtype(np.float32)


class NpyFile:
    """A C-ordered ``.npy`` read a slice of samples at a time from the file (not memory-mapped: mapped pages count in
    the process's memory once read, so a pass over the data set would grow it)."""

    def __init__(self, path: Path, rows: int | None = None):
        with open(path, "rb") as f:
            version = np.lib.format.read_magic(f)
            read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
            shape, fortran, dtype = read(f)
            self.offset = f.tell()
        if fortran or dtype.hasobject or not shape:
            raise ValueError("a Fortran-ordered, object or 0-d array")
        self.path, self.dtype, self.shape = path, dtype, (min(shape[0], rows or shape[0]), *shape[1:])
        self.ndim = len(self.shape)

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, s: slice) -> np.ndarray:
        start, stop, _ = s.indices(len(self))
        row = int(np.prod(self.shape[1:], dtype=np.int64))
        data = np.fromfile(self.path, self.dtype, count=(stop - start) * row,
                           offset=self.offset + start * row * self.dtype.itemsize)
        return data.reshape(stop - start, *self.shape[1:])

    def head(self, rows: int | None) -> NpyFile:
        return NpyFile(self.path, rows)


NPY_MAGIC, ZIP_MAGIC = b"\x93NUMPY", b"PK\x03\x04"   # how a .npy and a .npz (a zip file) begin


def _arrays(path: Path, what: str) -> dict:
    """The arrays in a .npy (key '') or a .npz, told apart by their first bytes, not by the file's suffix."""
    if not path.is_file():
        raise AuditError(f"{path}: no such file; expected {what} as .npy or .npz")
    with open(path, "rb") as f:
        start = f.read(len(NPY_MAGIC))
    if not start.startswith((NPY_MAGIC, ZIP_MAGIC)):
        raise AuditError(f"{path}: not a numpy .npy or .npz file (it begins with neither numpy's header nor a zip "
                         f"file's); expected {what}, saved with numpy.save or numpy.savez")
    try:
        if start.startswith(NPY_MAGIC):
            return {"": NpyFile(path)}   # read batch by batch, never whole
        with np.load(path, allow_pickle=False) as f:
            return {k: f[k] for k in f.files}
    except (OSError, ValueError) as exc:
        raise AuditError(f"{path}: a numpy file the audit cannot read ({exc}); expected {what}") from None


def _named(path: Path, arrays: dict, name: str, what: str) -> str:
    """The key of the array to read: a .npy's, or the .npz array ``name``; else an ``AuditError`` naming the arrays
    found."""
    if "" in arrays or name in arrays:
        return "" if "" in arrays else name
    raise AuditError(f"{path}: no array named '{name}' ({what}); the file holds {sorted(arrays)}: save the array "
                     f"under the key '{name}', or as a .npy")


def load_data(path: str | Path, model: onnx.ModelProto, max_samples: int | None = None):
    """The model's input from ``path`` (a .npy, or the .npz array named after the input), at most ``max_samples``
    of it: numbers with the input's rank and fixed sizes, at least one sample, all finite, in the input's own type
    (int64 token ids stay int64). A .npy stays on disk (``NpyFile``) until a batch is read."""
    path = Path(path)
    name, dims = input_spec(model)
    dtype = input_dtype(model)
    shape = "[" + ", ".join("N" if d is None else str(d) for d in dims) + "]"
    arrays = _arrays(path, f"the model's input '{name}' {shape}")
    key = _named(path, arrays, name, "the model's input")
    x = arrays[key]
    x = x.head(max_samples) if isinstance(x, NpyFile) else x[:max_samples] if max_samples else x
    what = "array " + repr(key) if key else "the array"
    if not np.issubdtype(x.dtype, np.number) or x.ndim != len(dims) or any(
            d is not None and d != s for d, s in zip(dims[1:], x.shape[1:])):
        raise AuditError(f"{path}: {what} is {x.dtype} {list(x.shape)}; expected the model's input '{name}': "
                         f"numbers shaped {shape}")
    if len(x) == 0:
        raise AuditError(f"{path}: {what} is empty ({x.dtype} {list(x.shape)}: no sample); expected the model's "
                         f"input '{name}', at least one sample shaped {shape}")
    bad = non_finite(x)
    if bad:
        raise AuditError(f"{path}: {what} holds {bad[0]} NaN or infinite values (the first in sample {bad[1]}); "
                         "expected finite inputs")
    if np.issubdtype(dtype, np.integer) and not np.issubdtype(x.dtype, np.integer):
        raise AuditError(f"{path}: {what} is {x.dtype}; the model's input '{name}' is {dtype} (token ids, indices): "
                         "expected integers")
    return x


def non_finite(x, chunk: int = 64) -> tuple[int, int] | None:
    """(how many values are NaN or infinite, the first sample holding one), read ``chunk`` samples at a time; None
    when all are finite."""
    if not np.issubdtype(x.dtype, np.floating):
        return None
    count, first = 0, -1
    for start in range(0, len(x), chunk):
        bad = ~np.isfinite(np.asarray(x[start:start + chunk]))
        if bad.any():
            count += int(bad.sum())
            first = start + int(np.flatnonzero(bad.reshape(len(bad), -1).any(axis=1))[0]) if first < 0 else first
    return (count, first) if count else None


def load_labels(path: str | Path, n: int) -> np.ndarray:
    """Integer class labels, one per sample: a .npy, or the .npz array ``labels``."""
    path = Path(path)
    arrays = _arrays(path, f"{n} integer labels")
    y = arrays[_named(path, arrays, "labels", f"{n} integer class labels, one per sample")]
    y = y[:len(y)] if isinstance(y, NpyFile) else y
    if len(y) > n and y.ndim == 1:
        y = y[:n]   # --max-samples cut the data
    if y.shape != (n,) or not np.issubdtype(y.dtype, np.integer):
        raise AuditError(f"{path}: {y.dtype} {list(y.shape)}; expected 'labels': {n} integers, one per sample of the "
                         "data")
    return np.asarray(y, np.int64)


def check_labels(labels: np.ndarray, count: int, path) -> None:
    """Refuse labels that are not class indices of the model's output (``count`` classes; 0: the output is not one
    vector of classes per sample, and the labels are not read)."""
    if count and labels.size and (labels.min() < 0 or labels.max() >= count):
        raise AuditError(f"{path}: labels from {labels.min()} to {labels.max()}; expected class indices 0 to "
                         f"{count - 1}, one per sample (the model's output has {count} classes)")


# --- is this a pair? -------------------------------------------------------------------------------------------

def quantized_weights(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    """Float tensor -> its dequantized value, for each ``<W>_quantized`` initializer with its ``<W>_scale`` and
    ``<W>_zero_point`` (ORT's names, in QDQ, QOperator and dynamic models); per-channel on ``weight_axes``'s axis."""
    inits = {i.name: i for i in model.graph.initializer}
    axes = weight_axes(model)
    out = {}
    for name, tensor in inits.items():
        base = name[: -len("_quantized")] if name.endswith("_quantized") else None
        if base is None or f"{base}_scale" not in inits:
            continue
        q = numpy_helper.to_array(tensor)
        scale = numpy_helper.to_array(inits[f"{base}_scale"]).astype(np.float32)
        zero = numpy_helper.to_array(inits[f"{base}_zero_point"]) if f"{base}_zero_point" in inits else np.zeros(
            scale.shape, np.int64)
        out[base] = kernels.dequantize_linear(q, scale, zero, weight_axis(q.shape, scale.size, axes.get(name)))
    return out


def weight_axes(model: onnx.ModelProto) -> dict[str, int]:
    """Quantized weight initializer -> its per-channel axis as the graph records it: its DequantizeLinear's ``axis``
    (QDQ), else the axis ORT quantizes along for the op that reads it (``weight_rulers.channel_axis``: a Conv's
    output channels, a MatMul's columns, a Gemm's rows with transB and its columns without)."""
    axes = {n.input[0]: next((a.i for a in n.attribute if a.name == "axis"), 1)
            for n in model.graph.node if n.op_type == "DequantizeLinear"}
    return {**{w["initializer"]: w["axis"] for w in weight_rulers.found(model)}, **axes}


def weight_axis(shape: tuple, channels: int, axis: int | None) -> int:
    """The per-channel axis of a weight: the one its graph records (``weight_axes``), else the axis whose length
    is the scale's."""
    if axis is not None:
        return axis + len(shape) if axis < 0 else axis
    return next((a for a in range(len(shape)) if shape[a] == channels), 0)


def weight_check(fp32: onnx.ModelProto, int8: onnx.ModelProto) -> dict:
    """The INT8 model's quantized weights against the FP32 initializers of the same name: how many were compared,
    those of another shape (a different model) and those further than half a step from the FP32 values in more
    than ``WEIGHT_OFF`` of their elements (different weights, or a pre-processing that folded a BatchNorm)."""
    floats = {i.name: i for i in fp32.graph.initializer}
    axes = weight_axes(int8)
    inits = {i.name: i for i in int8.graph.initializer}
    shapes, off, compared = [], [], 0
    quantized = quantized_weights(int8)
    for name, value in quantized.items():
        w = weight_rulers.fp32_weight(floats, name)
        if w is None:
            continue
        if w.shape != value.shape:
            shapes.append(f"{name} {list(value.shape)} (FP32 {list(w.shape)})")
            continue
        compared += 1
        scale = numpy_helper.to_array(inits[f"{name}_scale"]).astype(np.float32)
        axis = weight_axis(w.shape, scale.size, axes.get(f"{name}_quantized"))
        half = (scale.reshape([-1 if k == axis else 1 for k in range(w.ndim)]) if scale.size > 1 else scale) / 2
        far = float(np.mean(np.abs(w - value) > half * 1.001 + 1e-12)) if w.size else 0.0
        if far > WEIGHT_OFF:
            off.append(f"{name} ({far:.0%} of its values)")
    return {"compared": compared, "other_shape": shapes, "other_values": off, "quantized": len(quantized)}


def check_pair(fp32_path: Path, fp32: onnx.ModelProto, int8_path: Path, int8: onnx.ModelProto) -> list[str]:
    """Refuse (``AuditError``) a pair the audit cannot measure; return the warnings for one it can."""
    if graph.quant_format(int8) == "float":
        raise AuditError(f"{int8_path}: no quantized node (no QuantizeLinear, DequantizeLinear, QLinear* or *Integer "
                         "op): this is a float model; expected the INT8 model made from the FP32 one")
    if graph.quant_format(fp32) != "float":
        raise AuditError(f"{fp32_path}: it has quantized nodes ({graph.quant_format(fp32)}); expected the FP32 "
                         "model first, then the INT8 one")
    (name8, dims8), (name32, dims32) = input_spec(int8), input_spec(fp32)
    if name8 != name32:
        raise AuditError(f"{int8_path}: its input is '{name8}', the FP32 model's '{name32}'; expected the same "
                         "model before and after quantization")
    if len(dims8) != len(dims32) or any(a and b and a != b for a, b in zip(dims8[1:], dims32[1:])) or \
            input_dtype(int8) != input_dtype(fp32):
        raise AuditError(f"{int8_path}: its input '{name8}' is {input_dtype(int8)} {_shape(dims8)}, the FP32 "
                         f"model's {input_dtype(fp32)} {_shape(dims32)}; expected the same input")
    weights = weight_check(fp32, int8)
    if weights["other_shape"]:
        raise AuditError(f"{int8_path}: weights of another shape than the FP32 model's of the same name: "
                         f"{', '.join(weights['other_shape'][:3])}; expected the model quantized from {fp32_path}")
    warnings = []
    if weights["quantized"] and not weights["compared"]:
        warnings.append(f"none of the INT8 model's {weights['quantized']} quantized weights has an FP32 initializer "
                        "of the same name: the audit cannot tell that it was made from this FP32 model")
    if weights["other_values"]:
        warnings.append(f"{len(weights['other_values'])} of {weights['compared']} quantized weights differ from "
                        f"the FP32 model's beyond rounding: {', '.join(weights['other_values'][:3])}; a pre-"
                        "processing that folds BatchNorm changes weights, otherwise this is not the model quantized "
                        "from this FP32 one")
    return warnings


def _shape(dims: list) -> str:
    return "[" + ", ".join("N" if d is None else str(d) for d in dims) + "]"


def run_batch(model: onnx.ModelProto, requested: int) -> tuple[int, str | None]:
    """The batch the model can take (a fixed first dimension wins), and a warning when it is fixed."""
    fixed = input_spec(model)[1][0] if input_spec(model)[1] else None
    if fixed:
        return fixed, f"the model's input has a fixed batch of {fixed}: the audit runs {fixed} sample(s) at a time"
    return max(1, requested), None


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


# an initializer of these types is no quantized weight (a float one, a bias, shapes, indices)
NOT_QUANTIZED = frozenset(getattr(onnx.TensorProto, t) for t in ("FLOAT", "FLOAT16", "BFLOAT16", "DOUBLE", "INT32",
                                                                 "INT64", "UINT32", "UINT64", "BOOL", "STRING"))


def quant_types(model: onnx.ModelProto) -> dict[str, list[str]]:
    """The quantized types the graph uses, by role: ``weights`` (an initializer of 2 or more dimensions, of none of
    the ``NOT_QUANTIZED`` types, that a DequantizeLinear, a fused QLinear op or a dynamic integer op reads) and
    ``activations`` (a QuantizeLinear's or a QLinear op's output zero point, uint8 where none is given; a
    DynamicQuantizeLinear's, uint8)."""
    inits = {i.name: i for i in model.graph.initializer}
    weights, acts = set(), set()
    for node in model.graph.node:
        at = {"DequantizeLinear": 0, **{op: k[0] for op, k in weight_rulers.FUSED.items()},
              **weight_rulers.DYNAMIC}.get(node.op_type)
        w = inits.get(node.input[at]) if at is not None and len(node.input) > at else None
        if w is not None and len(w.dims) >= 2 and w.data_type not in NOT_QUANTIZED:
            weights.add(w.data_type)
        if node.op_type == "QuantizeLinear" and node.input[0] not in inits:
            zero = inits.get(node.input[2]) if len(node.input) > 2 else None
            acts.add(zero.data_type if zero is not None else onnx.TensorProto.UINT8)
        elif node.op_type in OUTPUT_RULERS and len(node.input) > OUTPUT_RULERS[node.op_type][1]:
            zero = inits.get(node.input[OUTPUT_RULERS[node.op_type][1]])
            acts.add(zero.data_type if zero is not None else onnx.TensorProto.UINT8)
        elif node.op_type == "DynamicQuantizeLinear":
            acts.add(onnx.TensorProto.UINT8)
    return {role: sorted(onnx.TensorProto.DataType.Name(t).lower() for t in types)
            for role, types in (("weights", weights), ("activations", acts))}


def unread_types(types: dict[str, list[str]]) -> dict[str, list[str]]:
    """``quant_types``' types the audit does not read: all but int8 and uint8 (int4, 16-bit, float8 ...)."""
    return {role: [t for t in found if t not in _DTYPES.values()] for role, found in types.items()}


def unread_words(unread: dict[str, list[str]]) -> str:
    """The unread types in words ('' when none): '<types> weights, <types> activations'."""
    return ", ".join(f"{'/'.join(t)} {role}" for role, t in unread.items() if t)


# --- what the audit runs, batch by batch ----------------------------------------------------------------------

def batches(n: int, size: int = BATCH) -> list[slice]:
    return [slice(i, min(n, i + size)) for i in range(0, n, size)]


def with_outputs(model: onnx.ModelProto, names) -> tuple[onnx.ModelProto, list[str]]:
    """A copy of ``model`` that also outputs the tensors ``names`` it makes (or reads as input), first output first;
    and the list of names it returns (the first output, then those)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    made = {o for n in m.graph.node for o in n.output}
    outputs = [m.graph.output[0].name]
    for name in names:
        if name in made and name not in outputs:
            outputs.append(name)
            if name not in {o.name for o in m.graph.output}:
                m.graph.output.append(onnx.ValueInfoProto(name=name))
    return m, outputs


def parting_names(int8: onnx.ModelProto, fp32_names: set[str]) -> dict[str, tuple[str, str]]:
    """FP32 tensor -> (the INT8 model's tensor before its QuantizeLinear, the one after its DequantizeLinear), matched
    by ORT's qdq_loss_debug rules (QDQ models only)."""
    names = {o: o for n in int8.graph.node for o in n.output} | {i.name: i.name for i in int8.graph.input}
    matched = qd.create_activation_matching(names)
    return {t: (v["pre_qdq"], v["post_qdq"]) for t, v in matched.items() if t in fp32_names}


def per_sample(a: np.ndarray) -> np.ndarray:
    """[N, ...] -> [N, values] in float64."""
    return np.asarray(a, np.float64).reshape(len(a), -1)


def classes(out: np.ndarray) -> int:
    """How many classes an output holds per sample (singleton dimensions squeezed: [N, 1000, 1, 1] has 1000), or 0
    when it is not one vector per sample."""
    sizes = [d for d in out.shape[1:] if d != 1]
    return sizes[0] if len(sizes) == 1 and sizes[0] > 1 else 0


def top1(out: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each sample's top class (argmax's first), and whether it shares the top value with another class (a tie:
    quantized outputs have many)."""
    best, ties, _ = top_classes(out)
    return best, ties


def top_classes(out: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each sample's top class (argmax's first), whether it is tied, and the mask [N, classes] of every class that
    shares the top value (singleton dimensions squeezed: [N, 1000, 1, 1] is [N, 1000])."""
    v = per_sample(out)
    top = v == v.max(axis=1, keepdims=True)
    return v.argmax(axis=1), top.sum(axis=1) > 1, top


@dataclass
class Scores:
    """One family's agreement with FP32 (and accuracy), max abs error and per-sample errors, summed over batches."""

    n: int = 0
    max_abs_error: float = 0.0
    agree: int = 0
    correct: int = 0
    ties: int = 0
    agree_in_tie: int = 0      # tied rows where argmax's first is not FP32's class but FP32's class is among the tied
    correct_in_tie: int = 0    # the same against the label
    sample_errors: list = field(default_factory=list)

    def add(self, fp32_out: np.ndarray, out: np.ndarray, labels: np.ndarray | None) -> None:
        a, b = per_sample(fp32_out), per_sample(out)
        err = np.abs(a - b).max(axis=1) if a.size else np.zeros(len(a))
        self.sample_errors.extend(err.tolist())
        self.max_abs_error = max(self.max_abs_error, float(err.max()) if len(err) else 0.0)
        self.n += len(out)
        if classes(out):
            best, ties, top = top_classes(out)
            rows = np.arange(len(best))
            want = top1(fp32_out)[0]
            self.agree += int(np.sum(best == want))
            self.agree_in_tie += int(np.sum(ties & (best != want) & top[rows, want]))
            self.ties += int(ties.sum())
            if labels is not None:
                self.correct += int(np.sum(best == labels))
                inside = (labels >= 0) & (labels < top.shape[1])
                self.correct_in_tie += int(np.sum(inside & ties & (best != labels)
                                                  & top[rows, np.clip(labels, 0, top.shape[1] - 1)]))

    def result(self, classified: bool, labelled: bool) -> dict:
        doc: dict = {"max_abs_error": self.max_abs_error}
        if classified and self.n:
            doc["agreement"] = self.agree / self.n
            doc["top1_ties"] = self.ties
            doc["agreement_ties_to_fp32"] = (self.agree + self.agree_in_tie) / self.n
            if labelled:
                doc["accuracy"] = self.correct / self.n
                doc["accuracy_ties_to_label"] = (self.correct + self.correct_in_tie) / self.n
        return doc


@dataclass
class Difference:
    """The two families' outputs against each other: values that differ, the largest difference, top-1 changes, and
    the values that differ in each of the first ``X64_SAMPLES`` samples (``head``: the x64 check's samples)."""

    values: int = 0
    differ: int = 0
    samples_differ: int = 0
    max_difference: float = 0.0
    top1_changes: int = 0
    samples: int = 0
    head: list = field(default_factory=list)

    def add(self, here: np.ndarray, other: np.ndarray) -> None:
        a, b = per_sample(here), per_sample(other)
        d = np.abs(a - b)
        self.head.extend(np.count_nonzero(d[:max(0, X64_SAMPLES - self.samples)], axis=1).tolist())
        self.values += d.size
        self.differ += int(np.count_nonzero(d))
        self.samples_differ += int(np.count_nonzero(d.max(axis=1))) if d.size else 0
        self.max_difference = max(self.max_difference, float(d.max()) if d.size else 0.0)
        self.samples += len(a)
        if classes(here):
            self.top1_changes += int(np.sum(top1(here)[0] != top1(other)[0]))


@dataclass
class Stream:
    """Every statistic of the audit, accumulated batch by batch: ruler counts and extremes, SQNR sums, both families'
    scores, their difference, and each sample's largest |input| (for the error by input size)."""

    rulers: dict = field(default_factory=dict)      # tensor -> [values, clipped, min, max]
    channels: dict = field(default_factory=dict)    # tensor -> [each channel's min, each channel's max]
    channel_tensors: frozenset = frozenset()        # the rulers read per channel (``feature_maps``)
    sqnr: dict = field(default_factory=dict)        # tensor -> [signal^2, noise vs FP32, pre^2, noise of its QDQ]
    families: dict = field(default_factory=dict)    # family -> Scores
    difference: Difference = field(default_factory=Difference)
    sizes: list = field(default_factory=list)
    classified: bool = False    # the output is one vector of classes per sample
    fp32_correct: int = 0

    def add_rulers(self, rulers: dict[str, InputRuler], measured_on: dict[str, str], values: dict) -> None:
        for tensor, ruler in rulers.items():
            v = values.get(measured_on.get(tensor, tensor))
            if v is None:
                continue
            v = np.asarray(v, np.float32)
            acc = self.rulers.setdefault(tensor, [0, 0, math.inf, -math.inf])
            acc[0] += v.size
            acc[1] += compare.clipped_count(ruler, v)
            acc[2], acc[3] = min(acc[2], float(v.min())), max(acc[3], float(v.max()))
            axis = channel_axis(v.shape) if tensor in self.channel_tensors else None
            if axis is not None:
                rest = tuple(a for a in range(v.ndim) if a != axis)
                lo, hi = v.min(axis=rest), v.max(axis=rest)
                if tensor in self.channels:
                    lo, hi = np.minimum(self.channels[tensor][0], lo), np.maximum(self.channels[tensor][1], hi)
                self.channels[tensor] = [lo, hi]

    def add_sqnr(self, names: dict[str, tuple[str, str]], fp32: dict, int8: dict) -> None:
        for tensor, (pre, post) in names.items():
            if tensor not in fp32 or pre not in int8 or post not in int8:
                continue
            f, p, q = (np.asarray(v, np.float64).ravel() for v in (fp32[tensor], int8[pre], int8[post]))
            acc = self.sqnr.setdefault(tensor, [0.0, 0.0, 0.0, 0.0])
            acc[0] += float(f @ f)
            acc[1] += float((f - q) @ (f - q))
            acc[2] += float(p @ p)
            acc[3] += float((p - q) @ (p - q))


MAX_CHANNELS = 4096   # a tensor with more "channels" than this is not read per channel


RESHAPING = ("Reshape", "Flatten", "Transpose", "Squeeze", "Unsqueeze", "Identity")


def class_scores(fp32: onnx.ModelProto) -> set[str]:
    """The tensors that hold a classifier's scores: the graph's outputs and each Softmax's input and output, with
    the tensors only a reshaping op (``RESHAPING``) puts between them."""
    producer = {o: n for n in fp32.graph.node for o in n.output}
    found = {o.name for o in fp32.graph.output}
    found |= {t for n in fp32.graph.node if n.op_type == "Softmax" for t in (*n.input, *n.output)}
    stack = list(found)
    while stack:
        n = producer.get(stack.pop())
        if n is not None and n.op_type in RESHAPING and n.input[0] not in found:
            found.add(n.input[0])
            stack.append(n.input[0])
    return found


def feature_maps(fp32: onnx.ModelProto, rulers: dict[str, InputRuler], measured_on: dict[str, str]) -> frozenset:
    """The rulers whose channels are features sharing one ruler, read per channel: not a classifier's scores
    (``class_scores``: its classes differ by design)."""
    scores = class_scores(fp32)
    return frozenset(t for t in rulers if measured_on.get(t, t) not in scores and t not in scores)


def channel_axis(shape: tuple) -> int | None:
    """The axis whose entries are channels: 1 of an image's [N, C, H, W], the last of [N, C] or [N, T, D] (a
    transformer's features); None for one channel or too many to read one by one."""
    axis = 1 if len(shape) == 4 else len(shape) - 1 if len(shape) in (2, 3) else None
    return axis if axis is not None and 1 < shape[axis] <= MAX_CHANNELS else None


def channel_steps(ruler: InputRuler, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """The grid steps each channel's values span inside ``ruler`` (from each channel's min and max on the data)."""
    low, high = ruler.interval
    span = np.clip(np.minimum(hi, high) - np.maximum(lo, low), 0, None)
    return np.minimum(np.rint(span / ruler.scale), ruler.steps).astype(int)


def sqnr_db(signal: float, noise: float) -> float:
    """ORT's qdq_loss_debug SQNR from summed squares: 20 log10(max(|x|, eps) / max(|x - y|, eps))."""
    eps = float(np.finfo(float).eps)
    return 20 * math.log10(max(math.sqrt(signal), eps) / max(math.sqrt(noise), eps))


# --- the rulers' rows --------------------------------------------------------------------------------------------

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
    channel_steps_median: int | None = None   # steps the median channel spans (tensors read per channel)
    widest_channel: int | None = None
    widest_channel_steps: int | None = None
    channel_outlier: bool = False   # one channel spans over OUTLIER times the median channel's steps
    fixed: str | None = None   # why calibration cannot change it (``fixed_rulers``), or None


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


def fixed_rulers(model: onnx.ModelProto) -> dict[str, str]:
    """Float tensor -> why its ruler is not calibrated: ORT's converter writes QLinearSoftmax's output at scale 1/256
    (zero point 0, or -128 for int8) whatever the data."""
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    fixed = {}
    for node in model.graph.node:
        scale, zero = (inits.get(node.input[k]) if len(node.input) > k else None for k in (3, 4))
        if node.op_type == "QLinearSoftmax" and scale is not None and zero is not None and scale.size == 1 \
                and float(scale.reshape(())) == 1 / 256 and int(zero.reshape(())) in (0, -128):
            fixed[float_name(node.output[0])] = ("fixed by ORT: its converter sets QLinearSoftmax's output ruler to "
                                                 "1/256 whatever the data; calibration cannot change it")
    return fixed


def ruler_rows(rulers: dict[str, InputRuler], stats: dict, measured_on: dict[str, str],
               channels: dict | None = None, fixed: dict[str, str] | None = None) -> list[RulerRow]:
    """Each ruler with ``compare.diagnose_summary``'s verdict on the FP32 values it met (``stats``: per tensor the
    count, the clipped count, the min and the max, from ``Stream``); ``fixed``: the rulers calibration cannot
    change (``fixed_rulers``)."""
    rows = []
    for tensor, ruler in rulers.items():
        low, high = ruler.interval
        unmeasured = RulerRow(tensor=tensor, node=ruler.node, scale=ruler.scale, zero_point=ruler.zero_point,
                              dtype=ruler.dtype, low=low, high=high, measured=False,
                              fixed=(fixed or {}).get(tensor))
        if tensor not in stats:
            rows.append(replace(unmeasured, reason="the FP32 model has no tensor of this name"))
            continue
        count, clipped, lo, hi = stats[tensor]
        d = compare.diagnose_summary(ruler, clipped / max(count, 1), lo, hi)
        row = replace(unmeasured, measured=True, clipped_fraction=d.clipped_fraction,
                      steps_used=int(round(d.grid_used_fraction * ruler.steps)), steps=ruler.steps,
                      diagnosis=d.kind, reason=d.reason, measured_on=measured_on.get(tensor, tensor))
        rows.append(per_channel_row(row, ruler, (channels or {}).get(tensor)))
    return rows


def per_channel_row(row: RulerRow, ruler: InputRuler, extremes: list | None) -> RulerRow:
    """``row`` with its channels' steps: the median channel's, the widest one's, and whether that one is an
    outlier (over ``weight_rulers.OUTLIER`` times the median's, and at least half the ruler: one channel sets the
    ruler the others share)."""
    if extremes is None:
        return row
    steps = channel_steps(ruler, *extremes)
    median, widest = int(np.median(steps)), int(steps.argmax())
    return replace(row, channel_steps_median=median, widest_channel=widest, widest_channel_steps=int(steps[widest]),
                   channel_outlier=bool(steps[widest] > weight_rulers.OUTLIER * max(median, 1)
                                        and 2 * steps[widest] >= ruler.steps))


def error_by_size(sizes, errors) -> list[dict]:
    """Per-sample max abs error grouped by each sample's largest |input|, as a fraction of the data's largest."""
    size = np.asarray(sizes, float)
    size = size / size.max() if size.size and size.max() > 0 else size
    return compare.error_by_magnitude(size, np.asarray(errors, float))


def parting_doc(stream: Stream, fp32: onnx.ModelProto, int8: onnx.ModelProto, names: dict) -> dict:
    """Per-tensor SQNR (dB) in graph order, and the first tensor below PARTING_DB (QDQ models only)."""
    if graph.quant_format(int8) != "QDQ":
        return {"rows": [], "note": f"not measured: the SQNR table matches QDQ models' tensors (ORT's qdq_loss_debug "
                                    f"rules); this one is {graph.quant_format(int8)}"}
    order = list(dict.fromkeys([input_spec(fp32)[0], *(o for n in fp32.graph.node for o in n.output)]))
    fp32_ops = {o: n.op_type for n in fp32.graph.node for o in n.output}
    int8_ops = {o: n.op_type for n in int8.graph.node for o in n.output}
    rows = [{"tensor": t, "own_db": sqnr_db(stream.sqnr[t][2], stream.sqnr[t][3]),
             "vs_fp32_db": sqnr_db(stream.sqnr[t][0], stream.sqnr[t][1]),
             # QDQ drops a Relu whose ruler starts at 0: the ruler clips what the Relu would have zeroed
             "relu_in_ruler": fp32_ops.get(t) in ("Relu", "Clip") and int8_ops.get(t) not in ("Relu", "Clip")}
            for t in order if t in stream.sqnr]
    first = next((r["tensor"] for r in rows if r["vs_fp32_db"] < PARTING_DB), None)
    return {"rows": rows, "first_below": first, "threshold_db": PARTING_DB,
            "note": "measured on an unfused copy (DequantizeLinear, float MatMul or Conv, QuantizeLinear), as ORT's "
                    "qdq_loss_debug runs it: it cannot see the saturating family's int16 pairs"}


def recipe(model: onnx.ModelProto) -> dict[str, str]:
    """Every metadata entry the model carries (a released lab model carries its recipe there)."""
    return {p.key: p.value for p in model.metadata_props}


# --- the whole audit ---------------------------------------------------------------------------------------------

@dataclass
class Runners:
    """The sessions one audit runs on each batch: the FP32 model with the tensors it measures, the INT8 model on this
    machine's kernels, its other family (or why not), and its unfused copy for the SQNR table (QDQ)."""

    fp32: ort.InferenceSession
    fp32_names: list
    here: ort.InferenceSession
    other: hybrid.HybridRun | None
    other_note: str | None
    debug: ort.InferenceSession | None
    debug_names: list


def runners(fp32: onnx.ModelProto, int8: onnx.ModelProto, measured_on: dict, parting: dict,
            paths: tuple = ("FP32", "INT8")) -> Runners:
    """Every session the audit runs, each model's own first (a model ORT cannot load: an ``AuditError`` naming its
    file, ``paths``) and then the other family's."""
    fp32_model, fp32_names = with_outputs(fp32, [*measured_on.values(), *parting])
    fp32_session, here = _session(fp32_model, "the FP32 model", paths[0]), _session(int8, "the INT8 model", paths[1])
    name = input_spec(int8)[0]
    other_family = next(f for f in kernels.FAMILIES if f != kernels.machine_family())
    try:
        other, note = hybrid.HybridRun(int8, other_family, name), None
    except kernels.EmulationError as exc:
        other, note = None, f"not computed: {exc}"
    debug: ort.InferenceSession | None = None
    debug_names: list[str] = []
    if parting:
        debug_model, debug_names = with_outputs(int8, [n for pair in parting.values() for n in pair])
        debug = _session(debug_model, "the INT8 model's unfused copy", paths[1])
    return Runners(fp32_session, fp32_names, here, other, note, debug, debug_names)


def _session(model: onnx.ModelProto, what: str, path) -> ort.InferenceSession:
    """An ORT session, or an ``AuditError`` naming the file (``path``) with ORT's own first line."""
    try:
        return hybrid.lean_session(model)
    except Exception as exc:  # noqa: BLE001 - ORT raises its own exception types for a model it refuses
        raise AuditError(f"{path}: ONNX Runtime cannot load {what}: {str(exc).splitlines()[0][:300]}") from None


def measure(r: Runners, x, labels, batch: int, rulers: dict, measured_on: dict, parting: dict,
            progress: Callable = iter, dtype=np.float32, channel_tensors: frozenset = frozenset()) -> Stream:
    """One pass over the data, ``batch`` samples at a time in the input's ``dtype``: every statistic accumulated,
    nothing kept per tensor (``channel_tensors``' rulers also per channel)."""
    stream = Stream(channel_tensors=channel_tensors)
    name = r.fp32.get_inputs()[0].name
    here_family = kernels.machine_family()
    done = 0
    for s in progress(batches(len(x), batch)):
        xb = np.ascontiguousarray(x[s], dtype)
        try:
            fp32_values, here, debug, other = batch_outputs(r, xb, name)
        except MemoryError:
            raise AuditError(out_of_memory(done, batch)) from None
        except Exception as exc:  # noqa: BLE001 - ORT words a failed allocation in its own exception types
            if any(w in str(exc) for w in OUT_OF_MEMORY):
                raise AuditError(out_of_memory(done, batch)) from None
            raise AuditError(f"ONNX Runtime failed on samples {s.start}-{s.stop - 1}: "
                             f"{str(exc).splitlines()[0][:300]}") from None
        fp32_out = fp32_values[r.fp32_names[0]]
        yb = labels[s] if labels is not None else None
        stream.add_rulers(rulers, measured_on, fp32_values)
        stream.add_sqnr(parting, fp32_values, debug)
        stream.families.setdefault(here_family, Scores()).add(fp32_out, here, yb)
        stream.classified = bool(classes(here))
        if yb is not None and stream.classified:
            stream.fp32_correct += int(np.sum(top1(fp32_out)[0] == yb))
        stream.sizes.extend(np.abs(per_sample(xb)).max(axis=1).tolist() if xb.size else [0.0] * len(xb))
        if other is not None and r.other is not None:
            stream.families.setdefault(r.other.family, Scores()).add(fp32_out, other, yb)
            stream.difference.add(here, other)
        done += len(xb)
    return stream


def batch_outputs(r: Runners, xb: np.ndarray, name: str) -> tuple[dict, np.ndarray, dict, np.ndarray | None]:
    """One batch through every runner: the FP32 tensors, this machine's INT8 output, the unfused copy's tensors and
    the other family's output (None when it cannot be computed: ``r`` then says why)."""
    fp32_values = dict(zip(r.fp32_names, r.fp32.run(r.fp32_names, {name: xb})))
    fp32_values.setdefault(name, xb)
    here = r.here.run(None, {name: xb})[0]
    debug = dict(zip(r.debug_names, r.debug.run(r.debug_names, {name: xb}))) if r.debug else {}
    debug.setdefault(name, xb)
    other = None
    if r.other is not None:
        try:
            other = r.other.run(xb)
        except kernels.EmulationError as exc:
            r.other, r.other_note = None, f"not computed: {exc}"
    return fp32_values, here, debug, other


def approximated(r: Runners) -> str:
    """Why the other family's numbers are approximate ('' when they are exact as far as is known)."""
    ops = r.other.approximate if r.other is not None else []
    return (f"approximate: ORT's graph here has {'; '.join(ops)}: a CPU of the other family may lay it out "
            "otherwise, and its float sums then differ in the last bit, which a QuantizeLinear can turn into an "
            "output step" if ops else "")


def out_of_memory(done: int, batch: int) -> str:
    return (f"out of memory at {done} samples, running a batch of {batch}: the audit holds one batch's tensors at a "
            f"time, so try --batch {max(1, batch // 4)}" + (f", or --max-samples {done}" if done else ""))


def exclude_doc(fp32: onnx.ModelProto, int8: onnx.ModelProto, x, batch: int, samples: int, dtype,
                again: bool = False) -> dict:
    """``lab.sensitivity``'s ranking on the first ``samples`` samples, on this machine's kernels (QDQ and QOperator
    models); with ``again``, its first node re-converted for real (``lab.reconvert``) as ``reconverted``."""
    fmt = graph.quant_format(int8)
    if not samples or fmt not in ("QDQ", "QOperator"):
        return {"rows": [], "note": "not measured: " + ("--rank-samples 0" if not samples else
                                                        f"the ranking excludes nodes of QDQ and QOperator models; "
                                                        f"this one is {fmt}")}
    xs = np.ascontiguousarray(x[0:min(samples, len(x))], dtype)

    def run(model: onnx.ModelProto, data: np.ndarray, entries: dict | None = None) -> np.ndarray:
        session = hybrid.lean_session(model, entries=entries)
        name = session.get_inputs()[0].name
        return np.concatenate([session.run(None, {name: data[s]})[0] for s in batches(len(data), batch)])

    def estimate(model: onnx.ModelProto, data: np.ndarray) -> np.ndarray:
        return run(model, data, sensitivity.KEEP_FLOAT if fmt == "QOperator" else None)

    reference = run(fp32, xs)
    doc = sensitivity.ranking(int8, fp32, xs, reference, run, estimate)
    if again and doc["rows"]:
        recipe = reconvert.read_recipe(int8, fp32, fmt, graph.per_channel(int8))
        doc["reconverted"] = reconvert.measure(fp32, int8, doc["rows"][0]["node"], x, recipe, run, dtype, estimate)
    return doc


def x64_fix_doc(int8: onnx.ModelProto, x, batch: int, samples: int, dtype, computed: bool,
                without: list | None = None) -> dict | None:
    """Does ORT's deploy-time fix close the families' difference? Both families with ``kernels.X64_PRECISION_KEY`` =
    "1" (U8U8 kernels for weights beyond [-64, 64]) on the first ``samples`` samples, at most ``X64_SAMPLES``
    (``lab.hybrid``: numpy for one family, slow on a large model); ``without``: the values that differ in each of
    those samples without it, the audit's own (``Difference.head``)."""
    if not samples or not computed:
        return None
    xs = np.ascontiguousarray(x[0:min(samples, X64_SAMPLES, len(x))], dtype)
    differ_without = sum((without or [])[:len(xs)])
    try:
        outs = [_hybrid_outputs(int8, f, input_spec(int8)[0], True, xs, batch) for f in kernels.FAMILIES]
    except Exception as exc:  # noqa: BLE001 - ORT refuses the option on S8S8 QOperator models (and fails on others)
        return {"samples": len(xs), "note": "not measured: ORT refused the option on this model (" +
                short_error(exc) + ")"}
    d = Difference()
    d.add(*outs)
    return {"samples": len(xs), "without": {"differ": differ_without, "values": d.values},
            "with": {k: v for k, v in asdict(d).items() if k != "head"}}


def short_error(exc: Exception, limit: int = 160) -> str:
    """ORT's message in one line: its first line, cut at a word with "..." when longer than ``limit``."""
    line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return line if len(line) <= limit else line[:limit].rsplit(" ", 1)[0] + " ..."


def _hybrid_outputs(int8: onnx.ModelProto, family: str, name: str, x64: bool, xs: np.ndarray, batch: int):
    """``lab.hybrid``'s output for ``family`` on ``xs``, in batches; its sessions are freed on return."""
    run = hybrid.HybridRun(int8, family, name, x64_precision=x64)
    return np.concatenate([run.run(xs[s]) for s in batches(len(xs), batch)])


def latency_doc(fp32: onnx.ModelProto, int8: onnx.ModelProto, x, batch: int, runs: int, dtype) -> dict:
    """``lab.op_time.latency`` on the first batches of the data (``batch`` samples each), or why it was not timed."""
    if not runs:
        return {"note": "not measured: --latency-runs 0"}
    feeds = op_time.first_batches(x, input_spec(fp32)[0], batch, dtype)
    return {"batch": batch, **op_time.latency(fp32, int8, feeds, runs)}


def family_rows(stream: Stream, classified: bool, labelled: bool, other_note: str | None,
                approximate: str = "") -> list[dict]:
    """Each kernel family's scores: on this machine's kernels, computed for the other (``approximate``: why its
    numbers are not exact), or a line saying why not."""
    rows = []
    for family in kernels.FAMILIES:
        row = {"family": family, "description": kernels.DESCRIPTIONS[family]}
        if family not in stream.families or (other_note and kernels.emulated(family)):
            rows.append({**row, "computed_on": None, "note": other_note or "not computed"})
            continue
        rows.append({**row, "computed_on": "emulation" if kernels.emulated(family) else "this machine's kernels",
                     **stream.families[family].result(classified, labelled),
                     **({"caveat": approximate} if approximate and kernels.emulated(family) else {})})
    return rows


def difference_doc(stream: Stream, computed: bool, approximate: str = "") -> dict | None:
    """The two families' outputs against each other, or None when the other family was not computed."""
    d = stream.difference
    if not computed or not d.samples:
        return None
    return {"values_differ": d.differ, "values": d.values, "samples_differ": d.samples_differ, "samples": d.samples,
            "max_difference": d.max_difference, "top1_changes": d.top1_changes,
            **({"caveat": approximate} if approximate else {})}


def audit(fp32_path: str | Path, int8_path: str | Path, data_path: str | Path, labels_path: str | Path | None = None,
          progress: Callable = iter, options: Options = Options()) -> dict:
    """The audit of ``int8_path`` against ``fp32_path`` on the data: a JSON-ready document (``SCHEMA``)."""
    fp32_path, int8_path = Path(fp32_path), Path(int8_path)
    fp32, int8 = load_model(fp32_path, "FP32"), load_model(int8_path, "INT8")
    warnings = check_pair(fp32_path, fp32, int8_path, int8)
    x = load_data(data_path, fp32, options.max_samples)
    labels = load_labels(labels_path, len(x)) if labels_path else None
    batch, fixed = run_batch(fp32, options.batch)
    if fixed and len(x) % batch:
        raise AuditError(f"{data_path}: {len(x)} samples; the model's fixed batch of {batch} needs a multiple of it")
    warnings += [fixed] if fixed else []
    if len(x) < MIN_SAMPLES:
        warnings.append(f"only {len(x)} samples: each one moves an agreement or accuracy by {1 / len(x):.1%}; "
                        f"audit at least {MIN_SAMPLES}")
    unread = unread_words(unread_types(quant_types(int8)))
    if unread:
        warnings.append(f"the model quantizes with {unread}: types the audit does not read (8-bit rulers only), so "
                        "their rulers are in neither the ruler tables nor the worst rulers; the scores, the families "
                        "and the ranking cover the whole model")
    rulers = read_rulers(int8)
    measured_on = measured_tensors(fp32, rulers)
    fp32_names = {input_spec(fp32)[0], *(o for n in fp32.graph.node for o in n.output)}
    parting = parting_names(int8, fp32_names) if graph.quant_format(int8) == "QDQ" else {}
    r = runners(fp32, int8, measured_on, parting, (fp32_path, int8_path))
    if labels is not None:
        first = r.fp32.run([r.fp32_names[0]], {input_spec(fp32)[0]: np.ascontiguousarray(x[0:batch],
                                                                                      input_dtype(fp32))})[0]
        check_labels(labels, classes(first), labels_path)
    stream = measure(r, x, labels, batch, rulers, measured_on, parting, progress, input_dtype(fp32),
                     feature_maps(fp32, rulers, measured_on))
    computed, other_note, approximate = r.other is not None, r.other_note, approximated(r)
    del r   # its sessions hold every model's weights: the ranking and the x64 check below build their own
    machine, classified = kernels.machine_family(), stream.classified
    doc = {"schema": SCHEMA,
            "models": {"fp32": {"path": str(fp32_path), "sha256": file_sha256(fp32_path)},
                       "int8": {"path": str(int8_path), "sha256": file_sha256(int8_path),
                                "format": graph.quant_format(int8), "ops": graph.op_counts(int8),
                                "types": quant_types(int8)}},
            "data": {"path": str(data_path), "samples": len(x), "input": input_spec(int8)[0],
                     "shape": list(x.shape), "dtype": str(input_dtype(fp32)), "batch": batch,
                     "labels": str(labels_path) if labels_path else None},
            "warnings": warnings,
            "machine_family": machine,
            "fp32": {"accuracy": stream.fp32_correct / len(x)} if labels is not None and classified else {},
            "rulers": [asdict(row) for row in ruler_rows(rulers, stream.rulers, measured_on, stream.channels,
                                                         fixed_rulers(int8))],
            "weight_rulers": weight_rulers.rows(int8, fp32),
            "error_by_size": error_by_size(stream.sizes, stream.families[machine].sample_errors),
            "parting": parting_doc(stream, fp32, int8, parting),
            "families": family_rows(stream, classified, labels is not None, other_note, approximate),
            "family_difference": difference_doc(stream, computed, approximate),
            "exclude": exclude_doc(fp32, int8, x, batch, options.rank_samples, input_dtype(fp32), options.reconvert),
            "x64_fix": x64_fix_doc(int8, x, batch, options.rank_samples, input_dtype(fp32), computed,
                                   stream.difference.head),
            "latency": latency_doc(fp32, int8, x, batch, options.latency_runs, input_dtype(fp32)),
            "recipe": recipe(int8)}
    return {"schema": SCHEMA, "summary": summary(doc, graph.per_channel(int8)), **doc}


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

def ties_note(doc: dict) -> str | None:
    """The tied top-1 rows of one family's scores, said: argmax takes the first tied class, so an agreement or an
    accuracy is a lower bound; the bound if every tie broke toward FP32 (or the label)."""
    if not doc.get("top1_ties"):
        return None
    bounds = [f"agreement {doc['agreement_ties_to_fp32']:.4f}" if "agreement_ties_to_fp32" in doc else None,
              f"accuracy {doc['accuracy_ties_to_label']:.4f}" if "accuracy_ties_to_label" in doc else None]
    return (f"{doc['top1_ties']} row(s) tie at the INT8 top-1 (argmax takes the first class; ties broken toward FP32 "
            f"or the label: {', '.join(b for b in bounds if b)})")


def _scores_line(doc: dict) -> str:
    parts = [f"accuracy {doc['accuracy']:.4f}" if "accuracy" in doc else None,
             f"agreement with FP32 {doc['agreement']:.4f}" if "agreement" in doc else None,
             f"max abs error {doc['max_abs_error']:.4g}", ties_note(doc)]
    return ", ".join(p for p in parts if p)


# --- the summary: five lines a practitioner reads first ----------------------------------------------------------

def format_fields(doc: dict, per_channel: bool) -> dict:
    """The INT8 model's format: QDQ, QOperator or dynamic, per-channel or per-tensor weights, the activation and
    weight types read, and those the graph uses that the audit does not read (``unread_types``)."""
    weights, types = doc["weight_rulers"], doc["models"]["int8"]["types"]
    unread = unread_types(types)
    return {"format": doc["models"]["int8"]["format"],
            "weights": ("per-channel" if per_channel or any(w["per_channel"] for w in weights) else "per-tensor")
            if weights else "not read" if unread["weights"] else "none found",
            "weight_types": sorted({w["dtype"] for w in weights}),
            "activation_types": sorted({r["dtype"] for r in doc["rulers"]}),
            "unread_types": unread,
            "run_time_activations": doc["models"]["int8"]["format"] == "dynamic"}


def format_line(fmt: dict) -> str:
    """The summary's first line: the format, the weights' and the activations' rulers, and the types not read."""
    unread = fmt["unread_types"]

    def types(read: list, not_read: list) -> str:
        return "/".join(read) + ("; " if read and not_read else "") + (f"{'/'.join(not_read)} not read" if not_read
                                                                       else "")

    weights = (f"{fmt['weights']} weights ({types(fmt['weight_types'], unread['weights'])})"
               if fmt["weights"] in ("per-channel", "per-tensor") else
               f"weights {types([], unread['weights'])}" if unread["weights"] else "no quantized weight found")
    acts = types(fmt["activation_types"], unread["activations"]) or "-"
    if fmt.get("run_time_activations"):
        acts = "quantized at run time (DynamicQuantizeLinear: no ruler stored to read)"
    return f"format: {fmt['format']}, {weights}, activations {acts}"


def worst_rulers(doc: dict, top: int = 3) -> list[dict]:
    """Up to ``top`` rulers that hurt, worst kind first, each tensor once: activations that clip ``CLIPS_MUCH`` or
    more, weights whose per-tensor scale pays for an outlier channel, activations one channel sets, the other clips,
    clipped weights, activations squashed; when none hurts, the fewest steps used."""
    acts = [r for r in doc["rulers"] if r["measured"] and not r.get("fixed")]
    clip = sorted((r for r in acts if r["diagnosis"] == "clipping"), key=lambda r: -r["clipped_fraction"])
    squash = sorted((r for r in acts if r["diagnosis"] == "squashing"), key=lambda r: r["steps_used"])
    outliers = sorted((r for r in acts if r.get("channel_outlier")), key=lambda r: r["channel_steps_median"])
    weights = doc["weight_rulers"]
    clip_words = [{"tensor": r["tensor"], "kind": "activation", "why": f"clipping {r['clipped_fraction']:.2%} of its "
                   "values", "much": r["clipped_fraction"] >= CLIPS_MUCH} for r in clip]
    found = ([c for c in clip_words if c.pop("much")]
             + [{"tensor": w["weight"], "kind": "weight", "why": w["why"]} for w in weights if w["paid"]]
             + [{"tensor": r["tensor"], "kind": "activation", "why": channel_words(r)} for r in outliers]
             + clip_words
             + [{"tensor": w["weight"], "kind": "weight", "why": w["why"]} for w in weights
                if w["clipped"] and not w["paid"]]
             + [{"tensor": r["tensor"], "kind": "activation", "why": f"squashing: {r['steps_used']}/{r['steps']} "
                 "steps used"} for r in squash])
    if found:
        first = [f for i, f in enumerate(found)   # each tensor once, under its worst reason
                 if all(g["tensor"] != f["tensor"] for g in found[:i])]
        return [{**f, "fine": False} for f in first[:top]]
    fewest = ([(r["steps_used"] / r["steps"], {"tensor": r["tensor"], "kind": "activation",
                                                "why": f"{r['steps_used']}/{r['steps']} steps"}) for r in acts]
              + [(w["steps_worst"] / w["steps"], {"tensor": w["weight"], "kind": "weight",
                                                  "why": f"worst channel {w['steps_worst']}/{w['steps']} steps"})
                 for w in weights])
    return [{**f, "fine": True} for _, f in sorted(fewest, key=lambda pair: pair[0])[:top]]


CLIPS_MUCH = 0.01   # an activation clipping this share of its values is named before a channel outlier


def channel_words(r: dict) -> str:
    """An activation ruler one channel sets, in words."""
    return (f"channel {r['widest_channel']} spans {r['widest_channel_steps']}/{r['steps']} steps, the median channel "
            f"{r['channel_steps_median']}: one channel sets the ruler the others share")


def exclude_fields(e: dict) -> dict:
    """The suggested node to exclude with its measured effect, or why it was not measured."""
    if not e["rows"]:
        return {"node": None, "note": e["note"]}
    best, before = e["rows"][0], e["as_is"]
    r = e.get("reconverted")
    measured = {"reconverted_gain_db": r["with"]["sqnr_db"] - r["without"]["sqnr_db"],
                "reconverted_samples": r["evaluation_samples"]} if r and "note" not in r else {}
    return {"node": best["node"], "estimate": e["estimate"], "sqnr_db": best["sqnr_db"],
            "gain_db": best["sqnr_db"] - before["sqnr_db"],
            "max_abs_error": best["max_abs_error"], "max_abs_error_as_is": before["max_abs_error"],
            "samples": e["samples"], **measured}


def _family_short(f: dict) -> str:
    where = {"this machine's kernels": "this CPU", "emulation": "emulated"}.get(f["computed_on"], "not computed")
    if "note" in f:
        return f"{f['family']} ({where}) {f['note']}"
    parts = [f"accuracy {f['accuracy']:.4f}" if "accuracy" in f else None,
             f"agreement {f['agreement']:.4f}" if "agreement" in f else None,
             None if "agreement" in f else f"max abs error {f['max_abs_error']:.4g}",
             f"{f['top1_ties']} tied row(s)" if f.get("top1_ties") else None]
    return f"{f['family']} ({where}) " + ", ".join(p for p in parts if p) + (" (approximate)" if "caveat" in f else "")


def summary_lines(s: dict) -> list[str]:
    """The summary's five lines: format, both families' scores, their difference, the worst rulers, the node to
    exclude."""
    fmt, d, e = s["format"], s["family_difference"], s["exclude"]
    first = format_line(fmt)
    scores = "top-1 vs FP32: " if any("agreement" in f for f in s["families"]) else "output vs FP32: "
    if d is None:
        diff = "family difference: not measured (the other family was not computed)"
    elif not d["values_differ"]:
        diff = f"family difference: none, all {d['values']:,} output values equal"
    else:
        diff = (f"family difference: {d['values_differ']:,} of {d['values']:,} output values differ (max "
                f"{d['max_difference']:.4g})" + (f", {d['top1_changes']} top-1 change(s)" if "top1_changes" in d
                                                  else "") + _fix_words(s.get("x64_fix")))
    unread = unread_words(fmt["unread_types"])
    named = "; ".join(f"{w['tensor']} ({w['why']})" for w in s["worst_rulers"])
    fine = s["worst_rulers"] and all(w.get("fine") for w in s["worst_rulers"])
    fixed = "; ".join(f"{f['tensor']} ({f['why']})" for f in s.get("fixed_rulers", []))
    if not named:
        worst = "worst rulers: none read" + (f": the model's {unread} are types the audit does not read (8-bit "
                                             "rulers only)" if unread else "")
    else:
        partial = unread or fmt.get("run_time_activations") or fixed
        worst = ("worst rulers: " + ("of the rulers ranked, " if fine and partial else "")
                 + ("none clips, squashes or pays for an outlier; fewest steps: " if fine else "") + named
                 + (f"; not read: {unread}" if unread else ""))
    worst += f"; fixed by ORT, not ranked: {fixed}" if fixed else ""
    return [first, scores + "; ".join(_family_short(f) for f in s["families"]), diff, worst, exclude_line(e)]


def exclude_line(e: dict) -> str:
    """The summary's node to exclude: a node stands out when its gain reaches ``SMALL_GAIN_DB``, re-converted for
    real where that was measured (it decides), else estimated."""
    if e["node"] is None:
        return f"exclude: {e['note']}"
    reconverted = "reconverted_gain_db" in e
    gain = e["reconverted_gain_db"] if reconverted else e["gain_db"]
    estimated = (f"{e['estimate']} it gives output SQNR {e['sqnr_db']:.1f} dB ({e['gain_db']:+.1f}), max abs error "
                 f"{e['max_abs_error']:.4g} (now {e['max_abs_error_as_is']:.4g}), on {e['samples']} samples")
    measured = (f"re-converted with it {e['reconverted_gain_db']:+.1f} dB, measured on {e['reconverted_samples']} "
                "samples" if reconverted else "")
    if gain < SMALL_GAIN_DB:
        return ("exclude: no single node stands out: the best " + (
            f"candidate, nodes_to_exclude=['{e['node']}'], {measured}, estimated {e['gain_db']:+.1f} dB on "
            f"{e['samples']} samples" if reconverted else
            f"estimate, nodes_to_exclude=['{e['node']}'], gains {e['gain_db']:+.1f} dB on {e['samples']} samples")
            + " (the loss is spread, or sits in a ruler: read the worst rulers)")
    if reconverted and e["gain_db"] < SMALL_GAIN_DB:
        return (f"exclude: try nodes_to_exclude=['{e['node']}']: {measured}, though its estimate ({e['estimate']}) "
                f"gained only {e['gain_db']:+.1f} dB on {e['samples']} samples")
    return (f"exclude: try nodes_to_exclude=['{e['node']}']: {estimated}; "
            + (measured if reconverted else "re-convert and audit to confirm (--reconvert)"))


SMALL_GAIN_DB = 1.0   # a gain (re-converted where measured, else estimated) below this: no node stands out


def _fix_words(fix: dict | None) -> str:
    """The deploy-time fix, where it was measured on samples that differ without it: '' when not."""
    if not fix or "with" not in fix or not fix["without"]["differ"]:
        return ""
    w = fix["with"]
    left = "closes it" if not w["differ"] else f"leaves {w['differ']:,} of {w['values']:,} differing"
    return (f"; session option {kernels.X64_PRECISION_KEY} = 1 {left} (first {fix['samples']} samples, "
            f"{fix['without']['differ']:,} values differing without it; whoever creates the session sets it)")


def summary(doc: dict, per_channel: bool) -> dict:
    """What a practitioner reads first (``summary_lines``), as fields and as its five lines."""
    s = {"format": format_fields(doc, per_channel),
         "families": [{k: v for k, v in f.items() if k != "description"} for f in doc["families"]],
         "family_difference": doc["family_difference"],
         "x64_fix": doc.get("x64_fix"),
         "worst_rulers": worst_rulers(doc),
         "fixed_rulers": [{"tensor": r["tensor"], "why": f"clipping {r['clipped_fraction']:.2%} of its values"
                           if r["diagnosis"] == "clipping" else f"squashing: {r['steps_used']}/{r['steps']} steps used"}
                          for r in doc["rulers"] if r.get("fixed") and r["diagnosis"] in ("clipping", "squashing")],
         "exclude": exclude_fields(doc["exclude"])}
    return {**s, "lines": summary_lines(s)}


def x64_line(fix: dict) -> str:
    """ORT's session option against the families' difference, in one line."""
    if "note" in fix:
        return f"{kernels.X64_PRECISION_KEY} = 1: {fix['note']}"
    w, before = fix["with"], fix["without"]["differ"]
    return (f"with {kernels.X64_PRECISION_KEY} = 1 on both (first {fix['samples']} samples) they differ on "
            f"{w['differ']:,} of {w['values']:,} values, max difference {w['max_difference']:.4g}; without it on "
            + (f"{before:,} of them" if before else "none of them: these samples cannot show what it fixes"))


def exclude_lines(e: dict, top: int = 5) -> list[str]:
    """The node to exclude first, its measured effect, and the next few."""
    if not e["rows"]:
        return [f"which node to exclude: {e['note']}"]
    best, before = e["rows"][0], e["as_is"]
    each = ("each QLinearConv, QLinearMatMul or QGemm in turn run as its FP32 node between its rulers, named by the "
            "FP32 node;" if e["format"] == "QOperator" else "each GEMM or Conv left in float in turn,")
    lines = [f"which node to exclude ({each} first {e['samples']} samples, this machine's kernels, output SQNR "
             "against FP32):",
             tables.format_rows(e["rows"][:top], [("node", "node", ""), ("sqnr_db", "SQNR dB", ".1f"),
                                                  ("max_abs_error", "max abs error", ".4g")]),
             f"  as it is: {before['sqnr_db']:.1f} dB, max abs error {before['max_abs_error']:.4g}",
             f"  candidate: nodes_to_exclude=['{best['node']}'], {best['sqnr_db']:.1f} dB "
             f"({best['sqnr_db'] - before['sqnr_db']:+.1f}), max abs error {best['max_abs_error']:.4g} with it "
             f"{e['estimate']}: an estimate. A real nodes_to_exclude keeps an input another node reads quantized,",
             "  drops the node's output ruler, and ORT may fuse a float-weight node back into an integer kernel:",
             "  re-convert with it and audit the new model" + ("" if "reconverted" in e else " (--reconvert does)")]
    return lines + (reconvert.lines(e["reconverted"]) if "reconverted" in e else [])


def latency_lines(t: dict) -> list:
    """The latency on this CPU and the INT8 model's time by kind of op, as lines and a table."""
    if "note" in t:
        return ["latency on this CPU:", f"  {t['note']}"]
    i, f, s = t["int8"], t["fp32"], t["split"]["int8"]
    low, high = t["ratio_range"]
    rows = [{"kind": words, "share": s["shares_percent"][k]} for k, words in op_time.KINDS.items()]
    return [f"latency on this CPU (ONNX Runtime, the audit's sessions: {t['threads']['intra_op']} intra-op thread(s), "
            f"{t['threads']['inter_op']} inter-op):",
            f"  one batch of {t['batch']}, median over the first {t['batches']} batch(es) x {t['runs']} rounds after "
            "a warm-up run (quartiles in brackets):",
            f"  FP32 {f['median_ms']:.3g} ms ({f['low_ms']:.3g}-{f['high_ms']:.3g}), INT8 {i['median_ms']:.3g} ms "
            f"({i['low_ms']:.3g}-{i['high_ms']:.3g}); INT8's time / FP32's {t['ratio']:.2f} ({low:.2f}-{high:.2f}): "
            "this CPU, this ORT and this thread count only",
            f"  the INT8 model's kernel time by kind (ORT's profiler, another pass: {s['kernel_ms_per_run']:.3g} ms "
            "per batch with it on):",
            tables.format_rows(rows, [("kind", "kind of op", ""), ("share", "share of the kernel time (%)", ".1f")]),
            "  the most time: " + _top_words(s) + "; the FP32 model's: " + _top_words(t["split"]["fp32"])]


def _top_words(s: dict) -> str:
    return ", ".join(f"{o['op']} ({o['kind']}) {o['share_percent']:.1f} %" for o in s["top_ops"]) or "none recorded"


def difference_line(d: dict | None) -> str:
    """The families against each other, in one line."""
    if d is None:
        return "the families were not compared: the other family was not computed"
    rough = " (approximate: see the other family's line)" if "caveat" in d else ""
    if not d["values_differ"]:
        return f"the families agree on all {d['values']:,} output values{rough}"
    changes = f", {d['top1_changes']} top-1 change(s)" if "top1_changes" in d else ""
    return (f"the families differ on {d['values_differ']:,} of {d['values']:,} output values "
            f"({d['samples_differ']} of {d['samples']} samples), max difference {d['max_difference']:.4g}{changes}"
            + rough)


def _ruler_table(rows: list[dict]) -> str:
    shown = [{**r, "clipped": r["clipped_fraction"], "used": (f"{r['steps_used']}/{r['steps']}"
                                                             if r["measured"] else None),
              "per_channel": (f"{r['channel_steps_median']} / {r['widest_channel_steps']} (ch {r['widest_channel']})"
                              + (" outlier" if r["channel_outlier"] else "")
                              if r.get("channel_steps_median") is not None else None),
              "range": f"[{r['low']:.4g}, {r['high']:.4g}]",
              "on": r["measured_on"] if r["measured_on"] not in (None, r["tensor"]) else None,
              "diagnosis": r["diagnosis"] + " (fixed by ORT)" if r.get("fixed") and r["diagnosis"] else r["diagnosis"]}
             for r in rows]
    columns = [("tensor", "tensor", ""), ("scale", "scale", ".4g"), ("zero_point", "zero point", "d"),
               ("dtype", "type", ""), ("range", "range", ""), ("clipped", "clipped", ".2%"),
               ("used", "steps used", ""), ("per_channel", "channels' steps: median / widest", ""),
               ("diagnosis", "diagnosis", "")]
    if any(r["on"] for r in shown):
        columns.append(("on", "measured after its Relu", ""))
    return tables.format_rows(shown, columns)


def weight_table(rows: list[dict]) -> tables.Table:
    """The weight rulers as a table: scale spread, outlier ratio, share at the grid's ends and clipped, steps used."""
    shown = [{**r, "steps_used": f"{r['steps_median']} / {r['steps_worst']} of {r['steps']}",
              "outlier": f"{r['outlier_ratio']:.1f}x" + (" (paid)" if r["paid"] else "")} for r in rows]
    return tables.format_rows(shown, [("weight", "weight", ""), ("op", "op", ""), ("per_channel", "per-channel", ""),
                                      ("scale_spread", "scale spread", ".3g"), ("outlier", "outlier", ""),
                                      ("at_ends", "at the ends", ".2%"), ("clipped", "clipped", ".2%"),
                                      ("steps_used", "steps used: median / worst channel", "")])


def report_sections(doc: dict, top: int = weight_rulers.TOP) -> list[list]:
    """The report as sections, each a heading line then its lines and tables (``tables.Table``): the text report
    joins them, the HTML report (``lab.audit_html``) renders them."""
    m, d = doc["models"], doc["data"]
    head = [f"audit of {m['int8']['path']} ({m['int8']['format']}) against {m['fp32']['path']}",
            *(f"  {line}" for line in doc["summary"]["lines"]), *(f"  WARNING: {w}" for w in doc["warnings"])]
    setting = ["the data and this machine:",
               f"data: {d['path']}, {d['samples']} samples of '{d['input']}' {d['shape'][1:]}"
               + (f", labels {d['labels']}" if d["labels"] else ", no labels (agreement with FP32 only)"),
               f"this machine: {kernels.describe(doc['machine_family'])}",
               f"FP32: accuracy {doc['fp32']['accuracy']:.4f}" if doc["fp32"] else "FP32: no labels, no accuracy"]
    fmt = doc["summary"]["format"]
    unread = fmt["unread_types"]
    rulers = [f"rulers ({len(doc['rulers'])}, read from the INT8 graph) against the FP32 values on the data:"]
    rulers += [_ruler_table(doc["rulers"])] if doc["rulers"] else [
        "  none: " + ("a dynamic model quantizes each activation at run time (DynamicQuantizeLinear, from each batch's "
                      "range): no ruler is stored in the graph" if fmt["run_time_activations"] else
                      "no static 8-bit ruler in the graph")]
    rulers += [f"  {r['tensor']}: {r['reason']}" + (f"; {r['fixed']}" if r.get("fixed") else "")
               for r in doc["rulers"] if r["diagnosis"] in ("clipping", "squashing")]
    rulers += [f"  not read: the model's {'/'.join(unread['activations'])} activation rulers (8-bit only)"] \
        if unread["activations"] else []
    w = doc["weight_rulers"]
    weights = [f"weight rulers ({len(w)}, worst first" + (f", the first {top}" if len(w) > top else "") + "):"]
    weights += [weight_table(w[:top]), f"  outlier: the largest channel max|w| over the median; '(paid)': above "
                f"{weight_rulers.OUTLIER:g}x on one per-tensor scale, which every other channel pays for in steps"] \
        if w else ["  none: no 8-bit weight initializer read by a quantized op"]
    weights += [f"  not read: the model's {'/'.join(unread['weights'])} weights (8-bit only)"] \
        if unread["weights"] else []
    size = ["error by input size (each sample's largest |input|, as a fraction of the data's largest), "
            f"{doc['machine_family']} kernels:",
            tables.format_rows(doc["error_by_size"], [("low", "from", ".2f"), ("high", "to", ".2f"),
                                                      ("count", "samples", "d"), ("mean_error", "mean error", ".4f"),
                                                      ("max_error", "max error", ".4f")])]
    p = doc["parting"]
    parting = ["where INT8 parts from FP32 (ORT's qdq_loss_debug, SQNR in dB, graph order):"]
    if p["rows"]:
        parting.append(tables.format_rows(p["rows"], [("tensor", "tensor", ""), ("own_db", "own", ".1f"),
                                                      ("vs_fp32_db", "vs FP32", ".1f"),
                                                      ("relu_in_ruler", "Relu in the ruler", "")]))
        parting.append(f"  first below {p['threshold_db']:g} dB: {p['first_below']}" if p["first_below"]
                       else f"  every tensor stays above {p['threshold_db']:g} dB against FP32")
    if any(r["relu_in_ruler"] for r in p["rows"]):
        parting += ["  'own' is low where the ruler stands in for a Relu the converter removed:",
                    "  it compares the tensor before the Relu with the clipped one"]
    parting.append(f"  {p['note']}")
    families = ["kernel families:"]
    for f in doc["families"]:
        where = f" ({f['computed_on']})" if f["computed_on"] else ""
        families.append(f"  {f['family']}{where}: " + (f["note"] if "note" in f else _scores_line(f))
                        + (f"; {f['caveat']}" if "caveat" in f else ""))
    families.append(f"  {difference_line(doc['family_difference'])}")
    families += [f"  {x64_line(doc['x64_fix'])}"] if doc["x64_fix"] else []
    exclude = exclude_lines(doc["exclude"])
    latency = latency_lines(doc["latency"])
    metadata = ["recipe (the model's metadata):"]
    metadata += [f"  {k}: {v if len(v) < 200 else v[:200] + ' ...'}" for k, v in doc["recipe"].items()] or \
        ["  none: the model carries no metadata (ORT's converter writes no recipe)"]
    return [head, setting, rulers, weights, size, parting, families, latency, exclude, metadata]


def format_report(doc: dict) -> str:
    """The audit as text for people: the summary, then models, rulers, weights, error by input size, parting,
    families, latency, the node to exclude, recipe."""
    return "\n\n".join("\n".join(section) for section in report_sections(doc))
