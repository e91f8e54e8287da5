"""Compare quantized models of one network: how far each is from FP32, and how far apart two of them are.

Lesson 05 uses these on a QDQ and a QOperator model built from the same calibration ranges;
lessons 03 and 04 use ``scorecard`` for the max abs error and accuracy of every model.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from lab import compare, graph
from lab.data import file_sha256


def scorecard(model, x: np.ndarray, labels: np.ndarray, reference: np.ndarray) -> dict:
    """Max abs error against the FP32 ``reference`` outputs on ``x``, and accuracy on ``labels``."""
    out = compare.predict(model, x)
    return {"max_abs_error": compare.max_abs_error(reference, out),
            "accuracy": float(np.mean(out.argmax(axis=1) == np.asarray(labels)))}


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


def grid_steps(values: np.ndarray, scale: float) -> np.ndarray:
    """Which step of a grid of width ``scale`` (counted from 0) each dequantized value sits on."""
    return np.rint(np.asarray(values, np.float64) / float(scale)).astype(np.int64)


def step_agreement(a: np.ndarray, scale_a: float, b: np.ndarray, scale_b: float) -> dict:
    """Split the elementwise differences of two quantized outputs by where they come from.

    Each output sits on its own grid (step ``scale_a`` and ``scale_b``). Fractions of elements:
    ``same_value`` (identical), ``same_step_other_grid`` (same step number, different only because
    the steps differ in size), ``one_step_apart`` and ``more_steps_apart`` (the arithmetic before the
    output rounded differently). The four add up to 1.
    """
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if a.shape != b.shape:
        raise ValueError(f"outputs differ in shape: {a.shape} vs {b.shape}")
    apart = np.abs(grid_steps(a, scale_a) - grid_steps(b, scale_b))
    same = a == b
    n = max(a.size, 1)
    return {"same_value": float(np.sum(same) / n),
            "same_step_other_grid": float(np.sum((apart == 0) & ~same) / n),
            "one_step_apart": float(np.sum((apart == 1) & ~same) / n),
            "more_steps_apart": float(np.sum((apart > 1) & ~same) / n)}


def describe(model: str | Path, x: np.ndarray, labels: np.ndarray, reference: np.ndarray) -> dict:
    """One quantized model in numbers: file, rulers, graph, kernels that ran, error and accuracy."""
    model = Path(model)
    ruler = graph.input_ruler(model)
    return {"file": model.name, "size_bytes": model.stat().st_size, "sha256": file_sha256(model),
            "quant_format": graph.quant_format(model),
            "input_scale": ruler.scale, "input_zero_point": ruler.zero_point, "range_seen": ruler.range_seen,
            "output_scale": graph.output_scale(model),
            "op_counts": graph.op_counts(model), "nodes": sum(graph.op_counts(model).values()),
            "kernels_run": graph.kernels_run(model, x),
            **scorecard(model, x, labels, reference)}


def compare_formats(qdq: str | Path, qoperator: str | Path, x: np.ndarray, labels: np.ndarray,
                    reference: np.ndarray) -> dict:
    """Both formats described, whether their input rulers match, and how their outputs differ."""
    a, b = compare.predict(qdq, x), compare.predict(qoperator, x)
    formats = {"QDQ": describe(qdq, x, labels, reference), "QOperator": describe(qoperator, x, labels, reference)}
    q, o = formats["QDQ"], formats["QOperator"]
    return {"formats": formats,
            "same_input_ruler": (q["input_scale"], q["input_zero_point"]) == (o["input_scale"], o["input_zero_point"]),
            "difference": output_difference(a, b),
            "steps": step_agreement(a, q["output_scale"], b, o["output_scale"])}


def _one_over(scale: float | None) -> str:
    return "-" if not scale else f"1/{1 / scale:.0f}"


def format_table(report: dict) -> str:
    """The two formats side by side: rulers, output grid, graph size, error and accuracy."""
    q, o = report["formats"]["QDQ"], report["formats"]["QOperator"]
    rows = [("input scale", f"{q['input_scale']:.8f}", f"{o['input_scale']:.8f}"),
            ("input zero point", q["input_zero_point"], o["input_zero_point"]),
            ("range seen (scale x 255)", f"{q['range_seen']:.4f}", f"{o['range_seen']:.4f}"),
            ("Softmax output scale", _one_over(q["output_scale"]), _one_over(o["output_scale"])),
            ("nodes in the graph", q["nodes"], o["nodes"]),
            ("file size (bytes)", q["size_bytes"], o["size_bytes"]),
            ("max abs error vs FP32", f"{q['max_abs_error']:.3f}", f"{o['max_abs_error']:.3f}"),
            ("accuracy", f"{q['accuracy']:.3f}", f"{o['accuracy']:.3f}")]
    lines = [f"{'':<26}{'QDQ':>12}{'QOperator':>12}"]
    lines += [f"{name:<26}{str(a):>12}{str(b):>12}" for name, a, b in rows]
    return "\n".join(lines)


def format_difference(report: dict) -> str:
    """How the two formats' outputs differ, in plain lines."""
    d, s = report["difference"], report["steps"]
    return "\n".join([
        f"elements compared        : {d['elements']}",
        f"max abs difference       : {d['max_abs_difference']:.4f}",
        f"elements that differ     : {d['fraction_elements_differ']:.1%}",
        f"predictions that differ  : {d['predictions_differ']}",
        f"  identical              : {s['same_value']:.1%}",
        f"  same step, other grid  : {s['same_step_other_grid']:.1%}",
        f"  one step apart         : {s['one_step_apart']:.1%}",
        f"  more than one step     : {s['more_steps_apart']:.1%}",
    ])
