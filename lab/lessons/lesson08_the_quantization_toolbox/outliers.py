"""Lesson 08's exercise: calibrate through stuck pixels, so the clean pixels set the ruler.

The calibration set is the right set with ``N_HOT`` stuck pixels (``stuck_set``, the same images as the lesson's
outlier table). The student picks a calibration method and ``quantize_static``'s calibration options; ``build``
converts, ``check`` measures the result against the requirement on both kernel families, ``refuse_unmet`` stops a
choice that misses it, naming the part, and ``document`` writes ``outliers.json``. The grader imports the same
limits and functions. Part of ``notebooks/08_the_quantization_toolbox.ipynb``.
"""
from __future__ import annotations

from pathlib import Path
from typing import cast

import numpy as np

from lab import data, kernels
from lab.convert import QuantRecord, quantize, versions
from lab.data import BATCH_SIZE, EPSILON, data_sha256, file_sha256
from lab.errors import LabError
from lab.lessons.lesson08_the_quantization_toolbox import calibrators
from lab.lessons.lesson08_the_quantization_toolbox.toolbox import MAX_ACCURACY_LOSS, measured, per_family
from lab.measure import Evaluation, family, input_interval
from lab.prose import CITED, cites, table_numbers
from lab.schemas import validate

SCHEMA = "outliers/1"
N_HOT = 5  # calibration images with one stuck pixel (raw 200, so 12.5 after the deployed preprocessing)
MAX_INPUT_TOP = 1.5
"""The input ruler's top may not pass 1.5: the deployed pixels end at 1.0, the stuck ones at 12.5."""
MIN_INPUT_TOP = 0.9
"""...and must reach 0.9: a ruler that ends lower clips the strokes of every clean image."""
MAX_ERROR = 0.2
"""Max abs error of the probabilities on the clean evaluation images, on each kernel family. A method that cuts the
stuck pixels measured 0.076 on the reference data and up to 0.176 on 40 students' variants (a tail statistic: one
image decides it), so the limit leaves room for every variant; MinMax on the stuck-pixel set measured 0.188, and its
ruler fails the input check, which is what rules it out."""
REQUIREMENT = ("a model calibrated on the stuck-pixel set whose input ruler ends between 0.9 and 1.5, with a max abs "
               "error of at most 0.2 and an accuracy loss of at most 0.005 against FP32 on both kernel families")
# quantize_static's calibration options (extra_options) and the calibrator's names for them (quantize.py's table)
CALIBRATOR_KEYS = {"CalibTensorRangeSymmetric": "symmetric", "CalibMovingAverage": "moving_average",
                   "CalibMovingAverageConstant": "averaging_constant", "CalibPercentile": "percentile"}


MEASURED = ("input_range", "max_abs_error", "accuracy")
"""The outlier table's measured columns: what a justification cites (its options are the question, not evidence)."""


class OutlierChoiceError(LabError, ValueError):
    """``METHOD`` or ``OPTIONS`` is not what the exercise asks for, or the model misses the requirement."""


def stuck_set(n_hot: int = N_HOT, seed: int = 0) -> np.ndarray:
    """The right calibration images with ``n_hot`` stuck pixels, through the deployed preprocessing."""
    return data.preprocess(calibrators.hot_pixel_raw(data.load_split("calibration").raw, n_hot, seed=seed))


def check_input(method, options, justification, table: list[dict] | None = None) -> None:
    """Refuse an answer of the wrong kind before anything is built, naming the field and what was expected; with
    ``table`` (the outlier table's rows), a justification that cites none of its numbers."""
    if method not in calibrators.METHODS:
        raise OutlierChoiceError(f"METHOD is {method!r}; expected one of {list(calibrators.METHODS)}")
    if not isinstance(options, dict):
        raise OutlierChoiceError(f"OPTIONS is a {type(options).__name__}; expected a dict of quantize_static's "
                                 f"calibration options, e.g. {{\"CalibPercentile\": 99.99}} (or {{}})")
    unknown = sorted(set(options) - set(CALIBRATOR_KEYS))
    if unknown:
        raise OutlierChoiceError(f"OPTIONS has {unknown}; expected keys among {sorted(CALIBRATOR_KEYS)}")
    if method == "Distribution" or (method == "MinMax" and options.get("CalibTensorRangeSymmetric") is True):
        what = "METHOD 'Distribution'" if method == "Distribution" else \
            "MinMax with OPTIONS[\"CalibTensorRangeSymmetric\"] = True"
        raise OutlierChoiceError(f"{what}: symmetric calibrated ranges, which the exercise leaves out. ORT deletes "
                                 "the Relus on its flags, not on the range, so the negatives pass through (section "
                                 "1's Relu table), and OPTIONS cannot keep them (QDQKeepRemovableActivations is not "
                                 "a calibration option): choose Percentile or Entropy, or MinMax without it")
    percentile = options.get("CalibPercentile")
    if percentile is not None and (isinstance(percentile, bool) or not isinstance(percentile, (int, float))
                                   or not 1 < percentile <= 100):
        fraction = isinstance(percentile, (int, float)) and not isinstance(percentile, bool) and 0 < percentile <= 1
        raise OutlierChoiceError(
            f"OPTIONS[\"CalibPercentile\"] is {percentile!r}: " + (
                f"a percentage, not a fraction ({percentile * 100:g}, not {percentile!r}; ORT would read "
                f"{percentile!r} as the {percentile!r}th percentile and cut nearly every value)" if fraction else
                "expected a percentage in (1, 100] (ORT takes 0 to 100; 1 and below read as a fraction here)")
            + ". With symmetric ranges (the default) 99.9 cuts the top 0.1 % of |values|; with asymmetric ones, "
              "half of that from each tail")
    if not isinstance(justification, str) or not any(ch.isdigit() for ch in justification):
        raise OutlierChoiceError("JUSTIFICATION must say why, citing numbers from the outlier table")
    measured_ = [{k: r.get(k) for k in MEASURED} for r in table or []]
    if table is not None and not cites(justification, table_numbers(measured_)):
        raise OutlierChoiceError("JUSTIFICATION cites no number of your outlier table (" + (", ".join(
            CITED.findall(justification)) or "no decimal") + "): quote its input rulers, errors or accuracies as "
            "your run printed them")


def build(source: str | Path, output: str | Path, calibration: np.ndarray, method: str, options: dict,
          batch_size: int = BATCH_SIZE) -> QuantRecord:
    """``quantize_static`` (the baseline's settings: QDQ, QInt8, per-tensor) with ``method`` and ``options``."""
    with calibrators.quiet():
        return quantize(source, output, calibration, calibrate_method=method, batch_size=batch_size,
                        extra_options=dict(options) or None)


def unmet(input_range: list[float] | None, by_family: dict[str, dict]) -> list[str]:
    """Each part of the requirement the numbers miss, with the number and the limit."""
    out = []
    top = None if input_range is None else input_range[1]
    if top is None or not MIN_INPUT_TOP <= top <= MAX_INPUT_TOP:
        out.append(f"input ruler: it ends at {top}; expected between {MIN_INPUT_TOP} and {MAX_INPUT_TOP}")
    for f, v in by_family.items():
        if v["max_abs_error"] > MAX_ERROR + EPSILON:
            out.append(f"error ({f} family): max abs error {v['max_abs_error']:.3f} is over the limit {MAX_ERROR}")
        if v["accuracy_loss"] > MAX_ACCURACY_LOSS + EPSILON:
            out.append(f"accuracy ({f} family): loss {v['accuracy_loss']:.4f} is over the limit {MAX_ACCURACY_LOSS}")
    return out


def check(model: str | Path, ev: Evaluation) -> dict:
    """The model against the requirement on ``ev`` (the clean evaluation images), on both kernel families."""
    interval = input_interval(model)
    fam = per_family(model, ev)["by_family"]
    return {"input_range": interval, "by_family": fam, **measured(model, ev), "unmet": unmet(interval, fam)}


def refuse_unmet(result: dict) -> None:
    """The exercise's visible check: raise ``OutlierChoiceError`` naming each part ``result`` misses."""
    if result["unmet"]:
        raise OutlierChoiceError("outliers.onnx misses the requirement on " + "; ".join(result["unmet"])
                                 + ". Read the outlier table again: which method and option leave the stuck pixels "
                                   "out?")


def document(*, ev: Evaluation, model: str | Path, calibration: np.ndarray, method: str, options: dict,
             batch_size: int, result: dict, justification: str, n_hot: int = N_HOT, seed: int = 0) -> dict:
    """The ``outliers/1`` document handed in with ``outliers.onnx``."""
    doc = {"schema": SCHEMA, "versions": versions(),
           "evaluation": {"split": ev.split, "samples": int(len(ev.labels)),
                          "fp32_accuracy": round(ev.fp32_accuracy, 4), "kernel_family": family()},
           "requirement": requirement(),
           "calibration": {"set": "right + stuck pixels", "stuck_pixels": n_hot, "seed": seed,
                           "sha256": data_sha256(calibration), "samples": int(len(calibration)),
                           "batch_size": int(batch_size)},
           "method": method, "options": dict(options), "file": Path(model).name, "sha256": file_sha256(model),
           "input_range": result["input_range"], "by_family": result["by_family"], "justification": justification}
    return cast(dict, validate("outliers", doc))


def requirement() -> dict:
    return {"text": REQUIREMENT, "min_input_top": MIN_INPUT_TOP, "max_input_top": MAX_INPUT_TOP,
            "max_abs_error": MAX_ERROR, "max_accuracy_loss": MAX_ACCURACY_LOSS, "families": list(kernels.FAMILIES)}


def summary_lines(doc: dict) -> list[str]:
    """The run's summary of ``outliers.json``: the method and options chosen and what they gave."""
    fam = doc.get("by_family", {})
    return [f"  stuck pixels: {doc.get('calibration', {}).get('stuck_pixels', '-')}, method {doc.get('method', '-')}, "
            f"options {doc.get('options', {})}, input ruler {doc.get('input_range', '-')}",
            "  " + ", ".join(f"{f}: max abs err {v.get('max_abs_error', '-')}, accuracy {v.get('accuracy', '-')}"
                             for f, v in fam.items())]
