"""Lesson 08: outliers.onnx, calibrated through stuck pixels, measured here against the lab's requirement.

The requirement comes from ``lab.lessons.lesson08_the_quantization_toolbox.outliers`` (not from the student's
outliers.json). The input ruler is read from the graph, the error and accuracy are recomputed on both kernel families
(the other by emulation), and the reported method and options are run again through ONNX Runtime's calibrator on the
stuck-pixel set, so the model is what they give.
"""
from __future__ import annotations

from grader.context import SOFTMAX_STEP, Context, check, close, number, value
from grader.group import Group
from lab import data, graph, measure
from lab.convert import calibrated_ranges
from lab.data import EPSILON, data_sha256
from lab.lessons.lesson08_the_quantization_toolbox import outliers

PART = "outliers"
NEEDS = ("outliers.json", "outliers.onnx")
FLIPS = 2  # images near a decision boundary that may flip on another CPU (accuracy); see lesson 09's grader
PRINTED = 1e-4  # the rounding of a printed ratio


def run(ctx: Context) -> list:
    doc = ctx.doc("outliers.json")
    ctx.model("outliers.onnx")  # checked at intake; the measurements below read the same file
    path, source = ctx.sub.path("outliers.onnx"), data.fixture_path("fp32.onnx")
    ev = measure.evaluation(source, "evaluation")
    mine = outliers.check(path, ev)
    return [_meets(mine), _reported(ctx, doc, mine, path, source, ev)]


def _meets(mine: dict):
    """outliers_meets: each part of the requirement, recomputed here (``outliers.unmet``: the ruler's top, each
    family's error and accuracy loss); the fraction of the parts met."""
    parts = 1 + 2 * len(mine["by_family"])
    missed = mine["unmet"]
    measured = ", ".join(f"{f}: max abs err {v['max_abs_error']:.3f}, loss {v['accuracy_loss']:.4f}"
                         for f, v in mine["by_family"].items())
    return check(PART, "outliers_meets", (parts - len(missed)) / parts,
                 f"outliers.onnx measured here meets the requirement: input ruler {mine['input_range']}, {measured}"
                 if not missed else
                 "outliers.onnx measured here misses the requirement on " + "; ".join(missed)
                 + f". The requirement: {outliers.REQUIREMENT}")


def _reported(ctx: Context, doc: dict, mine: dict, path, source, ev: measure.Evaluation):
    """outliers_reported: outliers.json describes outliers.onnx and how it was calibrated (recomputed)."""
    cal, n = value(doc, "calibration") or {}, len(ev.labels)
    stuck = outliers.stuck_set(cal.get("stuck_pixels", outliers.N_HOT), seed=cal.get("seed", 0))
    rep_range = value(doc, "input_range")
    checks = {"sha256": doc.get("sha256") == ctx.sub.files.get("outliers.onnx"),
              "calibration (the stuck-pixel set: hash and sample count)":
                  cal.get("stuck_pixels", 0) >= 1 and cal.get("sha256") == data_sha256(stuck)
                  and cal.get("samples") == len(stuck),
              "input_range": isinstance(rep_range, list) and mine["input_range"] is not None
                  and all(close(a, b, PRINTED) for a, b in zip(rep_range, mine["input_range"])),
              "by_family": _same_families(value(doc, "by_family"), mine["by_family"], n),
              "method and options (ORT's calibrator on the stuck-pixel set gives the model's input ruler)":
                  _calibrates_to(source, stuck, doc, path),
              "requirement (lab.lessons.lesson08_the_quantization_toolbox.outliers')":
                  value(doc, "requirement") == outliers.requirement(),
              "evaluation": (value(doc, "evaluation.split") == "evaluation" and value(doc, "evaluation.samples") == n
                             and close(value(doc, "evaluation.fp32_accuracy"), ev.fp32_accuracy, PRINTED)
                             and value(doc, "evaluation.kernel_family") == measure.family())}
    wrong = [k for k, ok in checks.items() if not ok]
    return check(PART, "outliers_reported", (len(checks) - len(wrong)) / len(checks),
                 "outliers.json describes outliers.onnx" if not wrong else
                 f"outliers.json does not match outliers.onnx in: {', '.join(wrong)}")


def _same_families(rep, mine: dict, n: int) -> bool:
    """Each family's reported error, accuracy and loss against the recomputed ones (FLIPS images; a grid step)."""
    tol = FLIPS / n + PRINTED
    return isinstance(rep, dict) and all(
        isinstance(rep.get(f), dict) and close(rep[f].get("max_abs_error"), v["max_abs_error"], SOFTMAX_STEP)
        and close(rep[f].get("accuracy"), v["accuracy"], tol) and close(rep[f].get("accuracy_loss"),
                                                                       v["accuracy_loss"], tol)
        for f, v in mine.items())


def _calibrates_to(source, stuck, doc: dict, path) -> bool:
    """ORT's calibrator, run with the reported method, options and batch size on the stuck-pixel set: the input range
    it gives must be the top of the model's input ruler, within one grid step."""
    method, options = doc.get("method"), doc.get("options") or {}
    batch = value(doc, "calibration.batch_size")
    if method is None or not isinstance(batch, int):
        return False
    extra = {outliers.CALIBRATOR_KEYS[k]: v for k, v in options.items()}
    with outliers.calibrators.quiet():
        _, top = calibrated_ranges(source, stuck, method, batch, extra)["pixels"]
    ruler = graph.input_ruler(path)
    model_top = number(ruler.interval[1])
    return model_top is not None and abs(model_top - max(top, 0.0)) <= ruler.scale + EPSILON


GROUPS = (Group("08", PART, ("outliers_meets", "outliers_reported"), run, needs=NEEDS),)
