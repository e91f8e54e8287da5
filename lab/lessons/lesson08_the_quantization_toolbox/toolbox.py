"""Lesson 08, the quantization toolbox: every setting of ONNX Runtime's converter, measured on the digit reader.

Each function converts the workspace's ``source.onnx`` with one setting changed (QUInt8 weights bring QUInt8
activations: ``quantize_static`` refuses them with QInt8 activations) and measures
the result against FP32 on the evaluation set (``lab.measure``): max abs error of the probabilities,
accuracy, and file size, as CPUs of the target kernel family compute them (``lab.kernels``: this
machine's, or the one ``$LAB_KERNEL_FAMILY`` names). Per-channel weights change the most between the
families; ``family_table`` computes the same files as each family. The calibration methods are in
``lab.lessons.lesson08_the_quantization_toolbox.calibrators``, the exercise in ``outliers``. Lesson 09 builds its
candidates with ``build``, ``measured`` and ``per_family``.
"""
from __future__ import annotations

import hashlib
import json
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import cast

import numpy as np
from onnx import numpy_helper
from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, StaticQuantConfig, quant_pre_process
from onnxruntime.quantization import qdq_loss_debug as dbg
from onnxruntime.quantization import quantize as ort_quantize

from lab import compare, graph, kernels, palette
from lab.convert import QuantRecord, quantize, quantize_dynamic_model
from lab.data import BATCH_SIZE, EPSILON, data_sha256, file_sha256
from lab.lessons.lesson08_the_quantization_toolbox import calibrators
from lab.measure import Evaluation, family, input_interval, measure
from lab.readers import ArrayReader
from lab.schemas import validate

# ---- the accuracy limit of lessons 08 and 09's requirements ------------------------------------
MAX_ACCURACY_LOSS = 0.005
"""At most 0.5 points of accuracy below FP32 on the same images (0.005 as a fraction), on EVERY kernel family."""
TABLES_SCHEMA = "toolbox-tables/2"  # the exploration tables: written to the workspace, not handed in

# ---- settings ------------------------------------------------------------------------------------
BASELINE = {"quant_format": "QDQ", "per_channel": False, "activation_type": "QInt8", "weight_type": "QInt8",
            "reduce_range": False, "activation_symmetric": False, "preprocess": False}

SETTING_ROWS: dict[str, dict[str, object]] = {
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


_PREPROCESSED: dict[str, bytes] = {}
_BUILT: dict[tuple, tuple[bytes, QuantRecord]] = {}
_MEASURED: dict[tuple, dict] = {}


def preprocessed(source: str | Path, output: str | Path) -> Path:
    """``quant_pre_process`` of ``source`` into ``output``: ONNX shape inference and graph optimization.

    Symbolic shape inference is skipped: this graph's only symbolic dimension is the batch,
    which ONNX's own shape inference handles (the symbolic pass also needs sympy). The pass is
    deterministic, so it runs once per source (by its bytes) and later calls write the same bytes.
    """
    output, key = Path(output), file_sha256(source)
    if key in _PREPROCESSED:
        output.write_bytes(_PREPROCESSED[key])
    else:
        quant_pre_process(str(source), str(output), skip_symbolic_shape=True)
        _PREPROCESSED[key] = output.read_bytes()
    return output


def build(source: str | Path, output: str | Path, calibration: np.ndarray, settings: dict,
          batch_size: int = BATCH_SIZE, scratch_dir: str | Path | None = None) -> QuantRecord:
    """Static quantization with a settings dict (keys of ``BASELINE``; missing keys take the baseline).

    With ``preprocess``, the pre-processed copy of ``source`` is written into ``scratch_dir``
    (default: next to ``output``) and converted from there.

    Calibration does not depend on the settings: MinMax ranges come from the model and the data only.
    So ORT's MinMax calibrator runs once per model and data (``calibrators.calibrate``) and every
    setting converts from those ranges through ``quantize_static``'s calibration cache: the same bytes
    as calibrating inside each conversion (a test checks every setting). A conversion repeated with
    the same model, data and settings writes the bytes it wrote the first time.
    """
    unknown = set(settings) - set(BASELINE)
    if unknown:
        raise ValueError(f"unknown settings {sorted(unknown)}; expected keys among {sorted(BASELINE)}")
    s = {**BASELINE, **settings}
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    src = Path(source)
    if s["preprocess"]:
        scratch = Path(scratch_dir) if scratch_dir is not None else output.parent
        scratch.mkdir(parents=True, exist_ok=True)
        src = preprocessed(source, scratch / (output.stem + ".preprocessed.onnx"))
    key = (file_sha256(src), data_sha256(calibration), json.dumps(s, sort_keys=True), int(batch_size))
    if key in _BUILT:
        content, record = _BUILT[key]
        output.write_bytes(content)
        return replace(record, source=str(src), output=str(output), settings=dict(record.settings))
    extra = {"ActivationSymmetric": True} if s["activation_symmetric"] else None
    ranges = calibrators.calibrate(src, calibration, "MinMax", {}, batch_size)
    with tempfile.TemporaryDirectory(prefix="lab-build-") as tmp:
        cache = Path(tmp) / "minmax.calibration.json"
        cache.write_text(ranges.cache_text())
        record = quantize(src, output, None, quant_format=s["quant_format"], per_channel=s["per_channel"],
                          activation_type=s["activation_type"], weight_type=s["weight_type"],
                          reduce_range=s["reduce_range"], extra_options=extra, calibration_cache_path=cache)
    record.settings.update(batch_size=int(batch_size), preprocess=bool(s["preprocess"]))
    record.calibration_sha256 = data_sha256(calibration)
    record.calibration_samples = int(len(calibration))
    record.calibration_batches = -(-len(calibration) // int(batch_size))
    _BUILT[key] = (output.read_bytes(), replace(record, settings=dict(record.settings)))
    return record


def measured(model: str | Path, ev: Evaluation) -> dict:
    """``lab.measure.measure``, once per model bytes, evaluation images and kernel family in a run.

    The tables convert some settings more than once (the settings, family and candidates tables share
    rows); the same bytes give the same outputs on the same images and family, so they are measured once.
    """
    key = (file_sha256(model), ev.split, data_sha256(ev.pixels), data_sha256(ev.reference),
           hashlib.sha256(np.ascontiguousarray(ev.labels).tobytes()).hexdigest(), family())
    if key not in _MEASURED:
        _MEASURED[key] = measure(model, ev)
    return dict(_MEASURED[key])


def settings_table(source: str | Path, out_dir: str | Path, ev: Evaluation, calibration: np.ndarray,
                   batch_size: int = BATCH_SIZE) -> list[dict]:
    """One knob at a time from the baseline, plus dynamic quantization. Writes ``settings/*.onnx``.

    Each row also counts the Relu nodes ORT left in the graph (``relus``: it deletes them on its flags, see
    ``calibrators.relu_rows``) and names its ``file`` under ``out_dir``."""
    out = Path(out_dir) / "settings"
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for name, change in SETTING_ROWS.items():
        settings = {**BASELINE, **change}
        model = out / f"{settings_name(settings)}.onnx"
        build(source, model, calibration, settings, batch_size)
        rows.append({"name": name, "settings": settings, "static": True, "input_range": input_interval(model),
                     **measured(model, ev), "relus": graph.op_counts(model).get("Relu", 0),
                     "file": calibrators.relative(model, out_dir)})
    for per_channel in (False, True):
        model = out / f"dynamic{'-perchannel' if per_channel else ''}.onnx"
        quantize_dynamic_model(source, model, per_channel=per_channel)
        rows.append({"name": "dynamic" + (", per-channel" if per_channel else ""),
                     "settings": {"mode": "dynamic", "per_channel": per_channel}, "static": False,
                     "input_range": None, **measured(model, ev), "relus": graph.op_counts(model).get("Relu", 0),
                     "file": calibrators.relative(model, out_dir)})
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
                             **measured(model, ev)})
    return rows


def x64_rows(model: str | Path, ev: Evaluation) -> list[dict]:
    """``model`` in a default session and in one with ORT's ``session.x64quantprecision`` = "1", as each kernel
    family computes it: max abs error against FP32 and accuracy."""
    rows = []
    for f in kernels.FAMILIES:
        for x64 in (False, True):
            out = compare.predict(model, ev.pixels, family=f, x64_precision=x64)
            rows.append({"name": "session.x64quantprecision = 1" if x64 else "default session", "family": f,
                         "max_abs_error": round(compare.max_abs_error(ev.reference, out), 4),
                         "accuracy": round(float((out.argmax(1) == ev.labels).mean()), 4)})
    return rows


def x64_same_as_exact(model: str | Path, ev: Evaluation) -> bool:
    """Whether ``model`` in a ``session.x64quantprecision`` = "1" session computes, as the saturating family, exactly
    the outputs the exact family computes in a default session."""
    return bool(np.array_equal(compare.predict(model, ev.pixels, family=kernels.EXACT),
                               compare.predict(model, ev.pixels, family=kernels.SATURATING, x64_precision=True)))


def node_weights(model: str | Path) -> dict[str, str]:
    """Node name -> the weight it reads (an initializer whose name ends in ``weight``), for the nodes that read one."""
    g = graph.load(model).graph
    inits = {i.name for i in g.initializer}
    return {n.name: w for n in g.node for w in n.input if w in inits and w.endswith("weight")}


def max_abs_weight(model: str | Path) -> int:
    """The largest |w| among a QDQ or QOperator model's 8-bit weights (``*weight_quantized`` initializers).

    ORT's reduced INT8 range (``quant_utils.ONNX_INT_TYPE_REDUCED_RANGE``, what ``reduce_range`` uses) is -64..64,
    so a ``reduce_range`` model reaches 64; a full-range one 127.
    """
    weights = [numpy_helper.to_array(i).astype(np.int64) for i in graph.load(model).graph.initializer
               if i.name.endswith("weight_quantized")]
    return int(max(np.abs(w).max() for w in weights))


def per_family(model: str | Path, ev: Evaluation, families: tuple[str, ...] = kernels.FAMILIES) -> dict:
    """``by_family`` (family -> max abs error, accuracy, accuracy loss) and the worst family's loss and error."""
    by = {}
    for f in families:
        with kernels.computing_as(f):
            m = measured(model, ev)
        by[f] = {"max_abs_error": m["max_abs_error"], "accuracy": m["accuracy"],
                 "accuracy_loss": round(ev.fp32_accuracy - m["accuracy"], 4)}
    return {"by_family": by, "accuracy_loss": max(v["accuracy_loss"] for v in by.values()),
            "worst_max_abs_error": max(v["max_abs_error"] for v in by.values())}


# ---- selective quantization ----------------------------------------------------------------------
def sensitivity(source: str | Path, qdq_model: str | Path, calibration: np.ndarray,
                batch_size: int = BATCH_SIZE) -> dict:
    """Per-tensor SQNR (dB) with ORT's ``qdq_loss_debug``, and the node where the SQNR drops most.

    ``qdq_sqnr``: the tensor before against after its own QuantizeLinear/DequantizeLinear pair;
    ``xmodel_sqnr``: the QDQ model's tensor against the FP32 model's, all errors so far added up.
    A node's drop is the ``xmodel_sqnr`` of its nearest measured input minus that of its output;
    the most sensitive node has the largest drop. Also the weights' SQNR.
    """
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
    return {"name": f"baseline, {node} left in FP32", "excluded": [node], **measured(model, ev),
            "float_weights": graph.weight_dtypes(model).get("FLOAT", 0), "file": calibrators.relative(model, out_dir)}


# ---- more of the guide: the config object, op types, MinimumRealRange, how many samples ---------
def _config(calibration: np.ndarray, batch_size: int = BATCH_SIZE, **options):
    """``StaticQuantConfig`` with the baseline's settings (QDQ, QInt8, per-tensor, MinMax), plus ``options``."""
    return StaticQuantConfig(ArrayReader(calibration, batch_size), calibrate_method=CalibrationMethod.MinMax,
                             quant_format=QuantFormat.QDQ, activation_type=QuantType.QInt8,
                             weight_type=QuantType.QInt8, per_channel=False, reduce_range=False, **options)


def config_form(source: str | Path, output: str | Path, calibration: np.ndarray, same_as: str | Path,
                batch_size: int = BATCH_SIZE) -> dict:
    """``quantize(model, output, StaticQuantConfig(...))``, the guide's config-object form, with the baseline's
    settings; compared byte for byte with ``same_as`` (the baseline that ``quantize_static`` wrote)."""
    Path(output).parent.mkdir(parents=True, exist_ok=True)
    ort_quantize(str(source), str(output), _config(calibration, batch_size))
    return {"file": Path(output).name, "bytes": Path(output).stat().st_size,
            "same_bytes": file_sha256(output) == file_sha256(same_as), "compared_with": Path(same_as).name}


def op_types_rows(source: str | Path, out_dir: str | Path, ev: Evaluation, calibration: np.ndarray,
                  baseline_model: str | Path, op_types: tuple[str, ...] = ("MatMul",),
                  families: tuple[str, ...] = kernels.FAMILIES) -> list[dict]:
    """The baseline against a conversion that quantizes only ``op_types`` (``op_types_to_quantize``),
    on each kernel family: bytes, max abs error, accuracy, and which op types are left in float."""
    out = Path(out_dir) / "guide"
    out.mkdir(parents=True, exist_ok=True)
    model = out / f"only-{'-'.join(op_types)}.onnx"
    ort_quantize(str(source), str(model), _config(calibration, op_types_to_quantize=list(op_types)))
    rows = []
    for name, path in (("all op types (baseline)", Path(baseline_model)), (f"only {', '.join(op_types)}", model)):
        counts = graph.op_counts(path)
        quantized = set(counts) - {"QuantizeLinear", "DequantizeLinear"}
        for f in families:
            with kernels.computing_as(f):
                rows.append({"name": name, "family": f, "quantize_dequantize": counts.get("QuantizeLinear", 0)
                             + counts.get("DequantizeLinear", 0), "ops": sorted(quantized), **measured(path, ev),
                             "file": calibrators.relative(path, out_dir)})
    return rows


def zero_calibration_rows(source: str | Path, out_dir: str | Path, ev: Evaluation, minimum_real_range: float = 1.0,
                          fixture: str | Path | None = None, samples: int = 360,
                          families: tuple[str, ...] = kernels.FAMILIES) -> list[dict]:
    """Lesson 06's bad model rebuilt (per-channel QDQ from one all-zero batch), without and with the
    ``MinimumRealRange`` extra option: the input ruler and the accuracy on each family.

    Without it, an empty range (0 .. 0) makes ORT's ``compute_scale_zp`` fall back to scale 1.0;
    with it, ``rmax`` becomes at least ``rmin + MinimumRealRange`` before the scale is computed.
    """
    out = Path(out_dir) / "guide"
    out.mkdir(parents=True, exist_ok=True)
    zeros = np.zeros((samples, 64), np.float32)
    rows = []
    for option in (None, minimum_real_range):
        model = out / ("all-zero.onnx" if option is None else f"all-zero-minrange={option:g}.onnx")
        quantize(source, model, zeros, batch_size=samples, per_channel=True,
                 extra_options=None if option is None else {"MinimumRealRange": option})
        r = graph.input_ruler(model)
        same = fixture is not None and file_sha256(model) == file_sha256(fixture)
        for f in families:
            with kernels.computing_as(f):
                rows.append({"MinimumRealRange": option, "family": f, "input_scale": r.scale,
                             "input_zero_point": r.zero_point, "input_range": input_interval(model),
                             "same_as_fixture": same, **measured(model, ev),
                             "file": calibrators.relative(model, out_dir)})
    return rows


SAMPLE_COUNTS = (1, 2, 5, 10, 30, 100, 360)


def sample_count_rows(source: str | Path, out_dir: str | Path, ev: Evaluation, calibration: np.ndarray,
                      counts: tuple[int, ...] = SAMPLE_COUNTS, draws: int = 3, seed: int = 0,
                      batch_size: int = BATCH_SIZE) -> list[dict]:
    """Baseline conversions from ``n`` right-set images drawn at random (``draws`` draws per ``n``; one for
    the whole set), measured as the target family. Each row: n, draw, input ruler, max abs error, accuracy, and the
    file under ``out_dir``.

    Each draw is converted by ``build`` (the bytes of ``quantize_static`` calibrating itself), so every draw
    calibrates with the same MinMax calibrator instead of augmenting the graph and starting a session again."""
    out = Path(out_dir) / "guide" / "samples"
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    rows = []
    for n in counts:
        for d in range(1 if n >= len(calibration) else draws):
            subset = (calibration if n >= len(calibration)
                      else calibration[rng.choice(len(calibration), n, replace=False)])
            model = out / f"n{n:03d}-{d}.onnx"
            build(source, model, subset, {}, batch_size)  # one MinMax calibrator serves every draw
            rows.append({"n": int(min(n, len(calibration))), "draw": d, "input_range": input_interval(model),
                         **measured(model, ev), "file": calibrators.relative(model, out_dir)})
    return rows


def sample_count_summary(rows: list[dict], fp32_accuracy: float, max_loss: float = MAX_ACCURACY_LOSS) -> list[dict]:
    """Per ``n``: draws, smallest and largest max abs error and accuracy, and whether every draw loses at
    most ``max_loss`` accuracy."""
    out = []
    for n in sorted({r["n"] for r in rows}):
        rs = [r for r in rows if r["n"] == n]
        errors, accs = [r["max_abs_error"] for r in rs], [r["accuracy"] for r in rs]
        out.append({"n": n, "draws": len(rs), "error_min": min(errors), "error_max": max(errors),
                    "accuracy_min": min(accs), "accuracy_max": max(accs),
                    "all_within": all(fp32_accuracy - a <= max_loss + EPSILON for a in accs)})
    return out


def enough_samples(summary: list[dict]) -> int | None:
    """The smallest n from which every draw of every larger n keeps the accuracy within the loss limit."""
    settled = None
    for row in reversed(summary):
        if not row["all_within"]:
            break
        settled = row["n"]
    return settled


def plot_sample_counts(rows: list[dict], title: str = "Max abs error against the number of calibration images"):
    """Each draw's max abs error against n (log axis, ticked at the counts drawn), the whole set's as a line.

    The counts themselves label the axis: no minor log ticks or math-text powers of ten to lay out.
    """
    import matplotlib.pyplot as plt  # deferred: 1.8 s to import (python -X importtime); only figures need it
    from matplotlib.ticker import NullLocator  # deferred: with pyplot, above

    fig, ax = plt.subplots(figsize=(7, 3.6))
    ax.scatter([r["n"] for r in rows], [r["max_abs_error"] for r in rows], s=18, alpha=0.8,
               color=palette.CYCLE[0], label="one random draw")
    full = max(rows, key=lambda r: r["n"])
    ax.axhline(full["max_abs_error"], color=palette.NEUTRAL, ls="--", lw=1, label=f"all {full['n']} images")
    ax.set_xscale("log")
    counts = sorted({r["n"] for r in rows})
    ax.set_xticks(counts, [str(n) for n in counts])
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xlabel("calibration images (right set, log scale)")
    ax.set_ylabel("max abs error vs FP32")
    ax.set_title(title, y=1.0)
    ax.legend()
    fig.subplots_adjust(left=0.75 / 7, right=1 - 0.15 / 7, bottom=0.55 / 3.6, top=1 - 0.35 / 3.6)
    return fig


def tables(*, ev: Evaluation, methods: list[dict], entropy: dict, outliers: list[dict], moving_average: list[dict],
           settings: list[dict], excluded: dict, sensitivity_: dict) -> dict:
    """The ``toolbox-tables/2`` document: the lesson's exploration tables, kept in the workspace, not handed in.

    The grader cannot check them without rebuilding every model they describe (minutes per student), so
    they live here, for the student to reread.
    """
    doc = {"schema": TABLES_SCHEMA, "evaluation": {"split": ev.split, "samples": int(len(ev.labels)),
                                                   "fp32_accuracy": round(ev.fp32_accuracy, 4),
                                                   "kernel_family": family()},
           "methods": methods, "entropy": entropy, "outliers": outliers, "moving_average": moving_average,
           "settings": settings, "excluded": excluded, "sensitivity": sensitivity_}
    return cast(dict, validate("toolbox-tables", doc))
