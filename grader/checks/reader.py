"""Lesson 02: drive the student's DigitReader in the sandbox, then prove right.onnx came from it."""
from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np

from grader import sandbox
from grader.checks import own_code
from grader.context import Context, Missing, check
from grader.results import Evidence

PART = "reader"
BATCH = 36


def calibrator_range(batches: np.ndarray, batch_size: int = BATCH) -> tuple[float, float]:
    """The range ORT's own MinMax calibrator computes for ``pixels`` from these batches.

    ORT writes ``<model>-inferred.onnx`` beside the model it is given (FIELD-NOTES), so the
    calibrator gets a private copy of the fixture: the fixtures are never written, and two
    grading workers never race on the same file.
    """
    import shutil

    from onnxruntime.quantization.calibrate import CalibrationMethod, create_calibrator

    from lab import data
    from lab.readers import ArrayReader

    with tempfile.TemporaryDirectory(prefix="grader-calib-") as tmp:
        source = Path(tmp) / "fp32.onnx"
        shutil.copyfile(data.fixture_path("fp32.onnx"), source)
        calibrator = create_calibrator(source,
                                       augmented_model_path=str(Path(tmp) / "augmented.onnx"),
                                       calibrate_method=CalibrationMethod.MinMax)
        calibrator.collect_data(ArrayReader(batches, batch_size))
        lo, hi = calibrator.compute_data().data[data.INPUT_NAME].range_value
    return float(np.asarray(lo).reshape(-1)[0]), float(np.asarray(hi).reshape(-1)[0])


def run(ctx: Context) -> list:
    from lab import data

    if not ctx.has("calibration_reader.py"):
        raise Missing("calibration_reader.py")
    refused = own_code.refusal_for(ctx.sub.path("calibration_reader.py"), "calibration_reader.py")
    if refused:  # it would pass on the lab's ArrayReader, not the student's code: nothing of it is run
        return [check(PART, "contract", 0, refused), check(PART, "range_from_reader", 0, refused)]
    pixels = data.calibration_set("right")
    child = sandbox.run(ctx.sub.root, {"task": "reader", "module": "calibration_reader", "class": "DigitReader",
                                       "input": "input.npz", "batch_size": BATCH, "max_batches": 1000},
                        inputs={"input.npz": {"pixels": pixels}}, limits=ctx.limits)
    if child.status != "ok" or not child.data.get("ok"):
        if child.status == "timeout":
            ctx.timed_out = True
        why = child.message or child.data.get("error", "")
        hint = {"timeout": "Does get_next() return None once every sample has been served?",
                "memory": "Does the reader copy or grow its data on every call?"}.get(child.status, "")
        msg = f"the calibration reader could not be run: {why}. {hint}".strip()
        not_run = ("not checked: the reader was not run, because student code runs only inside an isolation "
                   "layer and the grading machine has none" if child.status == "refused" else
                   "not checked: the reader did not run")
        return [check(PART, "contract", 0, msg), check(PART, "range_from_reader", 0, not_run)]
    report, fresh = child.data["report"], child.data["fresh"]
    first = child.arrays.get("first", np.zeros((0, 64), np.float32))
    again = child.arrays.get("fresh", np.zeros((0, 64), np.float32))
    problems = list(report.get("problems", []))
    if any("MemoryError" in p for p in problems):
        problems.insert(0, f"the reader ran out of memory (limit {ctx.limits.memory >> 20} MiB)")
    rules = {
        "ends with None and does not raise": report.get("ending", "").startswith("returned None"),
        "each item is a dict with 'pixels'": report.get("input_names") == ["pixels"],
        "float32 arrays of shape [batch, 64]": report.get("dtypes") == ["float32"]
        and not any("shape" in p for p in problems),
        f"serves all {len(pixels)} samples, unchanged": report.get("samples") == len(pixels)
        and first.shape == pixels.shape and np.array_equal(first, pixels),
        "a fresh reader and rewind() give the data again": fresh.get("samples") == len(pixels)
        and np.array_equal(again, first) and "restart" not in " ".join(problems)
        and report.get("rewind", "").startswith(f"gives {report.get('batches')} batches"),
    }
    if not child.data.get("subclass"):
        problems.append("DigitReader does not subclass onnxruntime.quantization.CalibrationDataReader")
    unchecked = not report.get("rewind") and not report.get("ending", "").startswith("returned None")
    if unchecked:  # rewind cannot be tried when the first pass never ended: neither passed nor broken
        rules.pop("a fresh reader and rewind() give the data again")
    broken = [rule for rule, ok in rules.items() if not ok]
    passed = len(rules) - len(broken)
    if broken or problems:
        msg = (f"the reader breaks {len(broken)} of {len(rules)} rules: "
               + "; ".join(f"'{rule}'" for rule in broken)
               + (" (rewind() not checked: the first pass did not end with None)" if unchecked else "")
               + (". What it did: " + "; ".join(problems[:4]) if problems else "")
               + ". Run lab.check_reader(DigitReader(pixels)) in lesson 02 to see each rule")
    else:
        msg = f"the reader keeps the contract ({report['batches']} batches, {report['samples']} samples, then None)"
    fraction = passed / len(rules) if child.data.get("subclass") else min(0.8, passed / len(rules))
    results = [check(PART, "contract", fraction, msg,
                     [Evidence("samples served", None, report.get("samples"), len(pixels), "the calibration set size")])]
    results.append(_range_check(ctx, first, pixels))
    return results


def _range_check(ctx: Context, first: np.ndarray, pixels: np.ndarray):
    from lab import graph, ruler

    if first.shape != pixels.shape:
        return check(PART, "range_from_reader", 0, "not checked: the reader did not serve the calibration set")
    if not np.isfinite(first).all():
        return check(PART, "range_from_reader", 0, "not checked: calibration_reader.py served NaN or infinite "
                                                   "pixels, and a calibration range needs finite ones")
    try:
        model = ctx.model("right.onnx")
    except Missing:
        return check(PART, "range_from_reader", 0, "right.onnx is missing; lesson 03 writes it with this reader")
    lo, hi = calibrator_range(first)
    scale, zp = ruler.scale_zero_point(lo, hi, "int8")
    got = graph.input_ruler(model)
    rel = abs(got.scale - float(scale)) / float(scale)
    ok = rel <= 1e-6 and got.zero_point == zp
    ev = [Evidence("input scale (right.onnx vs ORT calibrator on your reader)", got.scale, float(scale), 1e-6 * float(scale),
                   "relative 1e-6: float32 rounding of the same range"),
          Evidence("input zero point", got.zero_point, zp, 0, "an integer: exact")]
    msg = (f"ORT's calibrator on your reader's batches gives range [{lo:.4g}, {hi:.4g}], the ruler inside right.onnx"
           if ok else
           f"right.onnx's input ruler (scale {got.scale:.6g}, zero point {got.zero_point}) does not come from your "
           f"reader's data (calibrator range [{lo:.4g}, {hi:.4g}] gives scale {float(scale):.6g}, zero point {zp}). "
           "Re-run lesson 03 with DigitReader(lab.data.calibration_set('right'), batch_size=36)")
    return check(PART, "range_from_reader", 1.0 if ok else 0.0, msg, ev)
