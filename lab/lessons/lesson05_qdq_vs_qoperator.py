"""Lesson 05, QDQ vs QOperator: both formats from one calibration, each against FP32 and against each other.

``quantize_both_formats`` converts once per format from the same calibration ranges (the exercise calls it); the
rest compares the two models (how far each is from FP32, how far apart they are, in output-grid steps), checks the
exercise, assembles the lesson's report (``formats.json``), draws ``difference_histogram``, and asks and judges
the lesson's prediction (``PREDICTION``: which file is smaller, whether the rulers agree).

The module of ``notebooks/05_qdq_vs_qoperator.ipynb``.
"""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import cast

import numpy as np

from lab import compare, convert, data, graph, palette, predictions, tables
from lab.data import BATCH_SIZE, Split, file_sha256
from lab.exercise import SETTINGS, ExerciseCheckFailed
from lab.lessons.lesson03_narrow_right_wide import graph_settings_problem, settings_problem
from lab.report import header

# the settings lesson 03 used, except the format: both formats come from one calibration, so they differ only there
# (cast: a comprehension keeps no key's type; what it holds is SETTINGS' keys, each one of quantize's settings)
FORMAT_SETTINGS = cast(convert.QuantizeSettings, {k: v for k, v in SETTINGS.items() if k != "quant_format"})
CALIBRATION_SET = "right"  # one calibration of the deployed distribution, shared by both formats
STEM = "model"  # quantize_both_formats writes model.qdq.onnx, model.qoperator.onnx, model.calibration.json
FOLDER = "formats"  # the workspace folder they go in


class BothFormats(dict):
    """Format name -> the ``QuantRecord`` of its conversion, and ``warnings``: what ONNX Runtime's converter logged
    as a warning for each format (format -> messages), shown by the lesson instead of silenced."""

    warnings: dict[str, list[str]]



def quantize_both_formats(source: str | Path, out_dir: str | Path, calibration, *,
                          stem: str = "model", **settings) -> BothFormats:
    """QDQ and QOperator models from the same calibration ranges.

    Calibration runs once, for the QDQ model, and writes ``<stem>.calibration.json``;
    the QOperator conversion loads those ranges from the cache and never sees the data.
    ORT's warnings for each conversion are kept in the result's ``warnings``. ``quant_format`` and
    ``calibration_cache_path`` are this function's to set: passing one raises ``TypeError`` naming it.
    """
    own = [name for name in ("quant_format", "calibration_cache_path") if name in settings]
    if own:
        raise TypeError(f"quantize_both_formats sets {' and '.join(own)} itself (QDQ first, then QOperator from the "
                        f"same calibration cache): remove {', '.join(f'{n}={settings[n]!r}' for n in own)} from the "
                        "call and pass only the settings both formats share")
    out_dir = Path(out_dir)
    cache = out_dir / f"{stem}.calibration.json"
    cache.unlink(missing_ok=True)
    warned = {}
    with convert.ort_warnings() as warned["QDQ"]:
        qdq = convert.quantize(source, out_dir / f"{stem}.qdq.onnx", calibration, quant_format="QDQ",
                               calibration_cache_path=cache, **settings)
    with convert.ort_warnings() as warned["QOperator"]:
        qop = convert.quantize(source, out_dir / f"{stem}.qoperator.onnx", None, quant_format="QOperator",
                               calibration_cache_path=cache, **settings)
    qop.calibration_sha256, qop.calibration_samples = qdq.calibration_sha256, qdq.calibration_samples
    qop.calibration_batches = qdq.calibration_batches
    qop.settings["calibration_cache"] = qdq.settings["calibration_cache"] = cache.name
    both = BothFormats(QDQ=qdq, QOperator=qop)
    both.warnings = warned
    return both


def output_difference(a: np.ndarray, b: np.ndarray) -> dict:
    """How two models' outputs on the same inputs differ, element by element."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if a.shape != b.shape:
        raise ValueError(f"outputs differ in shape: {a.shape} vs {b.shape}")
    d = np.abs(a - b)
    return {"elements": int(d.size),
            "max_abs_difference": float(d.max()) if d.size else 0.0,
            "mean_abs_difference": float(d.mean()) if d.size else 0.0,
            "fraction_elements_differ": float(np.mean(d > 0)) if d.size else 0.0,
            "predictions_differ": int(np.sum(a.argmax(axis=1) != b.argmax(axis=1))),
            "sample_with_max_difference": int(d.max(axis=1).argmax()) if d.size else 0}


def softmax_kernel_steps(scale: float) -> int:
    """How many steps ONNX Runtime's ``QLinearSoftmax`` kernel spreads a probability of 1 over.

    The kernel writes ``round(p x floor(1 / scale)) + zero_point``, with ``1 / scale`` taken in float32.
    For scale 1/256 that is 256. For scale 1/255, stored as float32, ``1 / scale`` is 254.99998, so the
    kernel uses 254 steps: every probability comes out multiplied by 254/255.
    """
    return int(np.floor(np.float32(1.0) / np.float32(scale)))


def difference_bands(a: np.ndarray, b: np.ndarray, step: float) -> dict:
    """Fractions of elements that are identical, within the output grids' reach, or beyond it.

    Two Softmax outputs computed from the *same* probability on grids of about ``step`` (1/255 and
    1/256, with the kernel's multipliers 254 and 256) differ by at most ``2 x step``: one step of
    multiplier and one of rounding. A larger difference means the logits themselves differed.
    """
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if a.shape != b.shape:
        raise ValueError(f"outputs differ in shape: {a.shape} vs {b.shape}")
    d = np.abs(a - b)
    bound = 2 * float(step)
    n = max(d.size, 1)
    return {"grid_bound": bound,
            "identical": float(np.sum(d == 0) / n),
            "within_grid": float(np.sum((d > 0) & (d <= bound * (1 + 1e-6))) / n),
            "beyond_grid": float(np.sum(d > bound * (1 + 1e-6)) / n)}


def describe(model: str | Path, x: np.ndarray, labels: np.ndarray, reference: np.ndarray,
             kernels: bool = True) -> dict:
    """One quantized model in numbers: file, rulers, graph, kernels that ran, error and accuracy.

    ``kernels=False`` leaves out ``kernels_run`` (a profiled run of the model: this CPU's own kernels, which the
    grader does not recompute).
    """
    model = Path(model)
    ruler = graph.input_ruler(model)
    out = compare.predict(model, x)
    out_scale = graph.output_scale(model)
    described = {"file": model.name, "size_bytes": model.stat().st_size, "sha256": file_sha256(model),
                 "quant_format": graph.quant_format(model),
                 "input_scale": ruler.scale, "input_zero_point": ruler.zero_point, "range_seen": ruler.range_seen,
                 "output_scale": out_scale,
                 "softmax_kernel_steps": softmax_kernel_steps(out_scale) if out_scale else None,
                 "top_probability": float(out.max()),
                 "mean_probability_sum": float(out.sum(axis=1).mean()),
                 "op_counts": graph.op_counts(model), "nodes": sum(graph.op_counts(model).values())}
    if kernels:
        described["kernels_run"] = graph.kernels_run(model, x)
    described["max_abs_error"] = compare.max_abs_error(reference, out)
    described["accuracy"] = float(np.mean(out.argmax(axis=1) == np.asarray(labels)))
    return described


def compare_formats(qdq: str | Path, qoperator: str | Path, x: np.ndarray, labels: np.ndarray,
                    reference: np.ndarray) -> dict:
    """Both formats described, whether their input rulers match, and how their outputs differ."""
    a, b = compare.predict(qdq, x), compare.predict(qoperator, x)
    formats = {"QDQ": describe(qdq, x, labels, reference), "QOperator": describe(qoperator, x, labels, reference)}
    q, o = formats["QDQ"], formats["QOperator"]
    return {"formats": formats,
            "same_input_ruler": (q["input_scale"], q["input_zero_point"]) == (o["input_scale"], o["input_zero_point"]),
            "difference": output_difference(a, b),
            "bands": difference_bands(a, b, max(q["output_scale"], o["output_scale"]))}


def _one_over(scale: float | None) -> str:
    return "-" if not scale else f"1/{1 / scale:.0f}"


def format_table(report: dict) -> str:
    """The two formats side by side: rulers, output grid, graph size, error and accuracy."""
    q, o = report["formats"]["QDQ"], report["formats"]["QOperator"]
    rows = [("input scale", f"{q['input_scale']:.8f}", f"{o['input_scale']:.8f}"),
            ("input zero point", q["input_zero_point"], o["input_zero_point"]),
            ("range seen (scale x 255)", f"{q['range_seen']:.4f}", f"{o['range_seen']:.4f}"),
            ("Softmax output scale", _one_over(q["output_scale"]), _one_over(o["output_scale"])),
            ("kernel's steps for p = 1", q["softmax_kernel_steps"], o["softmax_kernel_steps"]),
            ("largest probability out", f"{q['top_probability']:.4f}", f"{o['top_probability']:.4f}"),
            ("mean sum of probabilities", f"{q['mean_probability_sum']:.4f}", f"{o['mean_probability_sum']:.4f}"),
            ("nodes in the graph", q["nodes"], o["nodes"]),
            ("file size (bytes)", q["size_bytes"], o["size_bytes"]),
            ("max abs error vs FP32", f"{q['max_abs_error']:.3f}", f"{o['max_abs_error']:.3f}"),
            ("accuracy", f"{q['accuracy']:.3f}", f"{o['accuracy']:.3f}")]
    lines = [f"{'':<26}{'QDQ':>12}{'QOperator':>12}"]
    lines += [f"{name:<26}{str(a):>12}{str(b):>12}" for name, a, b in rows]
    return "\n".join(lines)


def format_difference(report: dict) -> str:
    """How the two formats' outputs differ, in plain lines."""
    d, b = report["difference"], report["bands"]
    return "\n".join([
        f"elements compared          : {d['elements']} (images x 10 probabilities)",
        f"max abs difference         : {d['max_abs_difference']:.4f}",
        f"elements that differ       : {d['fraction_elements_differ']:.1%}",
        f"predictions that differ    : {d['predictions_differ']}",
        f"  identical                : {b['identical']:.1%}",
        f"  within 2 steps ({b['grid_bound']:.4f})  : {b['within_grid']:.1%}   "
        "no more than the output grids alone can do",
        f"  beyond 2 steps           : {b['beyond_grid']:.1%}   the logits already differed",
    ])


def check_both_formats(qdq: Path, qop: Path, cache: Path, records: dict, batch_size: int = BATCH_SIZE) -> str:
    """Lesson 05's exercise: a QDQ and a QOperator model from one calibration cache of the 'right' set, with the
    settings the lesson fixes (``FORMAT_SETTINGS``), in batches of ``batch_size``."""
    for path in (qdq, qop, cache):
        if not Path(path).exists():
            raise ExerciseCheckFailed(f"{Path(path).name} is missing: quantize_both_formats(SOURCE, FORMATS, reader, "
                                      "stem='model') writes it")
    for path, wanted in ((qdq, "QDQ"), (qop, "QOperator")):
        got = graph.quant_format(path)
        if got != wanted:
            raise ExerciseCheckFailed(f"{Path(path).name} is a {got} model; expected {wanted}: let "
                                      "quantize_both_formats pick the formats")
    for name, path in (("QDQ", qdq), ("QOperator", qop)):
        wrong = (settings_problem(Path(path).name, records[name].settings, FORMAT_SETTINGS, "05", "the format")
                 or graph_settings_problem(Path(path), "05"))
        if wrong:
            raise ExerciseCheckFailed(wrong)
    if records["QDQ"].calibration_sha256 != data.data_sha256(data.calibration_set("right")):
        raise ExerciseCheckFailed(f"the calibration served {records['QDQ'].calibration_samples} images that are not "
                                  "lab.data.calibration_set('right'): calibrate on exactly that set")
    n = len(data.calibration_set("right"))
    if records["QDQ"].calibration_batches != -(-n // batch_size):
        raise ExerciseCheckFailed(f"the reader served its {n} images in {records['QDQ'].calibration_batches} "
                                  f"batches; lesson 05 asks batch_size=BATCH_SIZE ({batch_size}), "
                                  f"{-(-n // batch_size)} batches")
    return f"{Path(qdq).name} and {Path(qop).name}, both from {Path(cache).name}"


def formats_report(source: str | Path, folder: str | Path, records: dict, evaluation: Split, reference: np.ndarray,
                   batch_size: int = BATCH_SIZE, stem: str = STEM) -> dict:
    """Lesson 05's ``formats.json``, from what the lesson produced: the two models and the calibration cache in
    ``folder``, the records ``quantize_both_formats`` returned (the settings are read from them: a setting changed
    in the exercise is reported as it was used), and the FP32 ``reference`` outputs on ``evaluation``."""
    folder = Path(folder)
    qdq, qop, cache = (folder / f"{stem}.{suffix}" for suffix in ("qdq.onnx", "qoperator.onnx", "calibration.json"))
    rec = records["QDQ"]
    return {
        **header("formats/1", "05_qdq_vs_qoperator", source,
                 {"quant_format": "QDQ and QOperator", **{k: rec.settings[k] for k in FORMAT_SETTINGS},
                  "batch_size": int(batch_size)}, evaluation),
        "calibration": {"set": CALIBRATION_SET, "cache": f"{folder.name}/{cache.name}",
                        "cache_sha256": file_sha256(cache), "samples": rec.calibration_samples,
                        "batches": rec.calibration_batches, "sha256": rec.calibration_sha256},
        **compare_formats(qdq, qop, evaluation.pixels, evaluation.labels, reference),
    }


def difference_histogram(a: np.ndarray, b: np.ndarray, step: float, names: tuple[str, str] = ("QDQ", "QOperator")):
    """Histogram of ``b - a`` over every output element, with one and two output-grid steps marked: a matplotlib
    Figure. Drawn cheaply (``lab.plots``): a bar only where a bin has elements, plain decade labels, fixed margins."""
    from matplotlib.figure import Figure  # deferred: 0.6 s to import (python -X importtime); the grader draws nothing

    from lab.plots import fixed_margins, plain_log_scale  # deferred: lab.plots imports matplotlib
    d = (np.asarray(b, np.float64) - np.asarray(a, np.float64)).ravel()
    fig = Figure(figsize=(8, 4))
    ax = fig.subplots()
    reach = max(float(np.abs(d).max()), 3 * step)
    counts, edges = np.histogram(d, bins=np.linspace(-reach, reach, 81))
    filled = counts > 0
    ax.bar(edges[:-1][filled], counts[filled], width=np.diff(edges)[filled], align="edge", color=palette.NEUTRAL,
           edgecolor="white")
    plain_log_scale(ax)
    for s in (-step, step):
        ax.axvline(s, color=palette.ALERT, ls=":", lw=1.2)
    for s in (-2 * step, 2 * step):
        ax.axvline(s, color=palette.ALERT, ls="--", lw=1)
    ax.text(step, 0.97, f"  one output step ({step:.4f})", fontsize=8, color=palette.ALERT, ha="left", va="top",
            transform=ax.get_xaxis_transform())
    ax.text(2 * step, 0.88, "  two steps: the grids alone", fontsize=8, color=palette.ALERT, ha="left", va="top",
            transform=ax.get_xaxis_transform())
    ax.set_title(f"{names[1]} - {names[0]}, every output probability ({d.size} elements)", y=1.0)
    ax.set_xlabel("difference in probability")
    ax.set_ylabel("elements (log scale)")
    ax.grid(alpha=0.3)
    return fixed_margins(fig, left=0.75, right=0.15, bottom=0.55, top=0.35)


SUMMARY_COLUMNS = [("format", "<10"), ("input scale", ">12"), ("output scale", ">13"), ("max abs err", ">12"),
                   ("bytes", ">7"), ("nodes", ">6")]


def summary_lines(doc: dict) -> list[str]:
    """The run's summary of ``formats.json``: one calibration, two formats."""
    n = tables.number
    lines = ["  " + tables.header(SUMMARY_COLUMNS, "")]
    for name, row in doc.get("formats", {}).items():
        lines.append("  " + tables.row([name, n(row.get("input_scale"), ".6f"), n(row.get("output_scale"), ".6f"),
                                        n(row.get("max_abs_error")), row.get("size_bytes", "-"),
                                        row.get("nodes", "-")], SUMMARY_COLUMNS, ""))
    d = doc.get("difference", {})
    lines.append(f"  elementwise: max difference {n(d.get('max_abs_difference'))}, "
                 f"{n(d.get('fraction_elements_differ'), '.1%')} of outputs differ, "
                 f"{d.get('predictions_differ', '-')} predictions differ")
    return lines


FORMATS = ("QDQ", "QOperator")


def _formats(q: predictions.Question, answer) -> dict:
    answer = q.mapping(answer, '"smaller" and "same_input_ruler"')
    return {"smaller": q.choice("smaller", answer.get("smaller"), FORMATS),
            "same_input_ruler": q.flag("same_input_ruler", answer.get("same_input_ruler"))}


PREDICTION = predictions.Question(
    "formats", "05", "which format's file will be smaller, and whether the two input rulers will be the same",
    '{"smaller": <"QDQ" or "QOperator">, "same_input_ruler": <True or False>}', _formats)


def judge_formats(answer, sizes: Mapping[str, int], same_input_ruler: bool) -> predictions.Verdict:
    """``sizes``: format -> file bytes; ``same_input_ruler``: both models' input scale and zero point are equal."""
    answer = PREDICTION.normalise(answer)
    smaller = min(FORMATS, key=lambda f: sizes[f])
    parts = [(answer["smaller"] == smaller,
              f"you said {answer['smaller']} is smaller; measured, QDQ {sizes['QDQ']:,} bytes, "
              f"QOperator {sizes['QOperator']:,} bytes"),
             (answer["same_input_ruler"] == same_input_ruler,
              f"you said the input rulers are {'the same' if answer['same_input_ruler'] else 'different'}; "
              f"measured, they are {'the same' if same_input_ruler else 'different'}")]
    return predictions.verdict("formats", parts,
                    "both formats store the same INT8 weights, but QOperator writes one QLinearMatMul where QDQ "
                    "writes DequantizeLinear -> MatMul -> QuantizeLinear with their scale and zero-point constants: "
                    "fewer nodes, fewer constants. The rulers come from one calibration cache, and a format only "
                    "decides how the graph computes, not where the ruler ends")
