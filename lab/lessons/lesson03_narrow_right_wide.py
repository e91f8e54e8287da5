"""Lesson 03, narrow / right / wide: three conversions of one model, one per calibration set, side by side.

The notebook converts (the student's exercise), then reads each model's rulers back from its graph; this module
holds the check of that exercise and the report the lesson writes (``results.json``), which the grader's reference
hand-in builds with the same call, and the lesson's prediction (``PREDICTION``: each set's input ruler, worked out
by hand) with its judge.

The module of ``notebooks/03_narrow_right_wide.ipynb``.
"""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np

from lab import compare, convert, data, graph, kernels, predictions, ruler, tables
from lab.data import BATCH_SIZE, KINDS, data_sha256, file_sha256
from lab.exercise import SETTINGS, ExerciseCheckFailed
from lab.report import header

HIDDEN = "relu1.out"  # the first hidden activation: continuous values, so a coarse ruler shows in its error
BAD_CALIBRATION = "bad-calibration.onnx"  # the fixture calibrated on all-zero images


# what each setting means in the lessons' prose, for a message that names a setting the exercise changed
SETTING_WORDS = {"quant_format": "the format whose graph says where values are rounded",
                 "activation_type": "signed 8-bit activations, zero point -128 on the pixels",
                 "weight_type": "signed 8-bit weights",
                 "per_channel": "one ruler per tensor",
                 "calibrate_method": "the lowest and highest value the data holds",
                 "reduce_range": "the full 8-bit grid", "nodes_to_exclude": "every node quantized",
                 "extra_options": "ORT's defaults"}
# lab.convert.quantize's other recorded settings, left at their defaults by every conversion of lessons 03-05
OTHER_DEFAULTS = {"reduce_range": False, "nodes_to_exclude": [], "extra_options": {}}


def settings_problem(model: str, used: Mapping, wanted: Mapping = SETTINGS, lesson: str = "03",
                     only: str = "the calibration data") -> str:
    """The first setting of a conversion's record (``used``) that is not the one the lesson's prose fixes
    (``wanted``, and ORT's defaults for the rest), as a message naming it; '' when every setting is as asked."""
    for key, want in {**wanted, **OTHER_DEFAULTS}.items():
        got = used.get(key, OTHER_DEFAULTS.get(key))
        if isinstance(got, str):
            got = got.rsplit(".", 1)[-1]  # an ORT enum recorded by name: CalibrationMethod.MinMax -> MinMax
        if got != want:
            return (f"{model} was converted with {key}={got!r}; lesson {lesson} asks {key}={want!r} "
                    f"({SETTING_WORDS[key]}), so that {only} is the only thing that differs: "
                    f"pass {key}={want!r}")
    return ""


def graph_settings_problem(path: Path, lesson: str = "03", per_channel: bool = False, dtype: str = "int8") -> str:
    """What the graph itself shows of the two settings the prose fixes and a record may not reveal (a model written
    by another call): weight scales per tensor, and the input ruler's type; '' when both are as asked."""
    if graph.per_channel(path) != per_channel:
        return (f"{path.name} has per-channel weight scales; lesson {lesson} asks per_channel=False "
                f"({SETTING_WORDS['per_channel']})")
    r = graph.input_ruler(path)
    if r.dtype != dtype:
        return (f"{path.name}'s input ruler is {r.dtype} (zero point {r.zero_point}); lesson {lesson} asks "
                f"activation_type='QInt8' ({SETTING_WORDS['activation_type']})")
    return ""


def check_three_conversions(work: str | Path, records: dict, kinds=KINDS, batch_size: int = BATCH_SIZE) -> str:
    """Lesson 03's exercise: one QDQ model per calibration set, each with the settings the lesson fixes
    (``SETTINGS``), calibrated on exactly its own set in batches of ``batch_size``."""
    for kind in kinds:
        path = Path(work) / f"{kind}.onnx"
        if kind not in records or not path.exists():
            raise ExerciseCheckFailed(f"no {path.name} (or no records[{kind!r}]): convert once per calibration set, "
                                      "and keep the record each lab.convert.quantize call returns")
        fmt = graph.quant_format(path)
        if fmt != "QDQ":
            raise ExerciseCheckFailed(f"{path.name} is a {fmt} model: use quant_format='QDQ'")
        if "batch_size" in records[kind].settings:  # lab.convert.quantize records it only when given an array
            raise ExerciseCheckFailed(f"{path.name} was converted from an array, served by the lab's own reader: "
                                      "pass your DigitReader (calibration_reader.DigitReader over the set, "
                                      "batch_size=BATCH_SIZE) to lab.convert.quantize, as the exercise asks")
        wrong = (settings_problem(path.name, records[kind].settings) or graph_settings_problem(path))
        if wrong:
            raise ExerciseCheckFailed(wrong)
        if records[kind].calibration_sha256 != data_sha256(data.calibration_set(kind)):
            raise ExerciseCheckFailed(f"{path.name} was not calibrated on exactly lab.data.calibration_set({kind!r}): "
                                      f"its reader served {records[kind].calibration_samples} images that hash "
                                      "differently; give each conversion a fresh DigitReader over its own set")
        n = len(data.calibration_set(kind))
        if records[kind].calibration_batches != -(-n // batch_size):
            raise ExerciseCheckFailed(f"{path.name}: the reader served its {n} images in "
                                      f"{records[kind].calibration_batches} batches; lesson 03 asks "
                                      f"batch_size=BATCH_SIZE ({batch_size}), {-(-n // batch_size)} batches")
    return "three QDQ models, each calibrated on its own set"


def one_image_at_a_time(model: str | Path, x: np.ndarray) -> np.ndarray:
    """The model's outputs with every image run alone (batch 1, as a camera sends them), as ``compare.predict``
    computes them on the target kernel family: one session, one run per image."""
    x = np.asarray(x, np.float32)
    if kernels.emulated() and graph.quant_format(model) != "float":
        return np.concatenate([kernels.emulate(model, x[i:i + 1], kernels.target_family()) for i in range(len(x))])
    run = graph.session(model).run
    return np.concatenate([run(None, {data.INPUT_NAME: x[i:i + 1]})[0] for i in range(len(x))])


def batch_dependence(model: str | Path, x: np.ndarray, reference: np.ndarray, labels: np.ndarray) -> dict:
    """``model`` on ``x`` as one batch against one image at a time: each run's max abs error and accuracy, and the
    largest change in any probability between the two (0 for a model whose rulers are all fixed in the file)."""
    whole, alone = compare.predict(model, x), one_image_at_a_time(model, x)
    return {"one_batch": {"max_abs_error": compare.max_abs_error(reference, whole),
                          "accuracy": float(np.mean(whole.argmax(axis=1) == labels))},
            "batch_1": {"max_abs_error": compare.max_abs_error(reference, alone),
                        "accuracy": float(np.mean(alone.argmax(axis=1) == labels))},
            "largest_change": compare.max_abs_error(whole, alone)}


def rounded_activations(model: str | Path) -> int:
    """How many activations the model rounds to 8 bits at run time: its QuantizeLinear nodes (static QDQ) or
    DynamicQuantizeLinear nodes (dynamic)."""
    ops = graph.op_counts(model)
    return ops.get("QuantizeLinear", 0) + ops.get("DynamicQuantizeLinear", 0)


def hidden_layer(model: str | Path, source: str | Path, x: np.ndarray, tensor: str = HIDDEN) -> dict:
    """The ruler ``model`` lays on ``tensor`` against the FP32 values it meets on ``x``: where it ends, the share
    of values it clips and their mean round-trip error."""
    r = graph.input_ruler(model, tensor)
    values = graph.tensor_values(source, x, [tensor])[tensor]
    stats = ruler.ruler_stats(values, *r.interval)
    return {"tensor": tensor, "scale": r.scale, "zero_point": r.zero_point, "ruler_end": r.interval[1],
            "value_max": float(values.max()), "clipped_fraction": stats["clipped_fraction"],
            "mean_round_trip_error": stats["mean_abs_error"]}


def set_entry(model: Path, record: convert.QuantRecord, calibration: np.ndarray, source: Path, x: np.ndarray,
              labels: np.ndarray, reference: np.ndarray) -> dict:
    """One calibration set's line of ``results.json``: its model, what the reader served, the input ruler read
    back from the graph, the error, the diagnosis and the first hidden layer's ruler."""
    r = graph.input_ruler(model)
    d = compare.diagnose(r, x)
    return {"model": model.name, "model_sha256": file_sha256(model),
            "calibration_samples": record.calibration_samples, "calibration_batches": record.calibration_batches,
            # lab.convert.quantize records a batch_size only when it served an array itself
            "served_by": "an array" if "batch_size" in record.settings else "your reader",
            "calibration_sha256": record.calibration_sha256, "calibration_range": ruler.calibration_range(calibration),
            "scale": r.scale, "zero_point": r.zero_point, "range_seen": r.range_seen, "interval": list(r.interval),
            **compare.scorecard(model, x, labels, reference),
            "diagnosis": d.kind, "clipped_fraction": d.clipped_fraction, "grid_used_fraction": d.grid_used_fraction,
            "pixel_round_trip_max_error": float(np.abs(ruler.round_trip(x, r.scale, r.zero_point) - x).max()),
            "hidden_layer": hidden_layer(model, source, x)}


def results_report(work: str | Path, records: dict, evaluation: data.Split, reference: np.ndarray,
                   batch_size: int = BATCH_SIZE) -> dict:
    """Lesson 03's ``results.json``, from what the lesson produced: ``records`` (one ``lab.convert.quantize``
    record per kind), the models ``<kind>.onnx`` and ``dynamic.onnx`` in ``work``, and the FP32 ``reference``
    outputs on ``evaluation``. The settings are the ones the conversions used, read from their records."""
    work = Path(work)
    source = work / "source.onnx"
    x, labels = evaluation.pixels, evaluation.labels
    used = records["right"].settings
    return {
        **header("results/1", "03_narrow_right_wide", source,
                 {**{k: used[k] for k in SETTINGS}, "batch_size": int(batch_size)}, evaluation),
        "fp32": {"accuracy": float(np.mean(reference.argmax(axis=1) == labels))},
        "sets": {kind: set_entry(work / f"{kind}.onnx", records[kind], data.calibration_set(kind), source, x, labels,
                                 reference) for kind in KINDS},
        "dynamic": {"model": "dynamic.onnx", "model_sha256": file_sha256(work / "dynamic.onnx"),
                    **compare.scorecard(work / "dynamic.onnx", x, labels, reference)},
        "bad_calibration": {"model": f"fixtures/{BAD_CALIBRATION}",
                            **compare.scorecard(data.fixture_path(BAD_CALIBRATION), x, labels, reference)},
    }


SUMMARY_COLUMNS = [("set", "<16"), ("range seen", ">11"), ("calib range", ">12"), ("max abs err", ">12"),
                   ("accuracy", ">9"), ("  diagnosis", "")]


def summary_lines(doc: dict) -> list[str]:
    """The run's summary of ``results.json``: the ruler each calibration set built, and what it did."""
    n = tables.number
    lines = ["  " + tables.header(SUMMARY_COLUMNS, "")]
    for kind, row in doc.get("sets", {}).items():
        lines.append("  " + tables.row([kind, n(row.get("range_seen")), n(row.get("calibration_range")),
                                        n(row.get("max_abs_error")), n(row.get("accuracy")),
                                        f"  {row.get('diagnosis', '-')}"], SUMMARY_COLUMNS, ""))
    for name in ("dynamic", "bad_calibration"):
        row = doc.get(name) or {}
        if row:
            lines.append("  " + tables.row([name.replace("_", " "), "", "", n(row.get("max_abs_error")),
                                            n(row.get("accuracy"))], SUMMARY_COLUMNS, ""))
    return lines


# A scale worked out by hand (range / 255, a range read to three digits) agrees with the converter's float32 within
# 0.2 %; range / 256 (the marks counted, not the steps between them: lesson 01's point) is 0.39 % off and refused, as
# is a range read off the wrong set (the three sets' ranges differ 4- and 16-fold)
PREDICTED_SCALE_REL = 0.002


def _input_rulers(q: predictions.Question, answer) -> dict:
    answer, out = q.mapping(answer, "narrow, right and wide"), {}
    for kind in KINDS:
        said = answer.get(kind)
        if not isinstance(said, Mapping):
            raise q.fail(kind, '{"scale": ..., "zero_point": ...}', said)
        zp = said.get("zero_point")
        if isinstance(zp, bool) or not isinstance(zp, int) or not -128 <= zp <= 127:
            raise q.fail(f"{kind}.zero_point", "an integer from -128 to 127 (INT8)", zp)
        out[kind] = {"scale": q.positive(f"{kind}.scale", said.get("scale")), "zero_point": zp}
    return out


PREDICTION = predictions.Question(
    "input_rulers", "03", "the input scale and zero point each calibration set will produce",
    '{"narrow": {"scale": <a number>, "zero_point": <an integer>}, "right": {...}, "wide": {...}}', _input_rulers)


def judge_input_rulers(answer, rulers: Mapping[str, ruler.InputRuler],
                       measured: str = "the graph has") -> predictions.Verdict:
    """``rulers``: kind -> the input ruler read back from that set's model (``graph.input_ruler``), or the one its
    range gives (``ruler.ruler_for``); ``measured`` says which, in the message."""
    answer = PREDICTION.normalise(answer)
    parts = []
    for kind in KINDS:
        said, r = answer[kind], rulers[kind]
        ok = abs(said["scale"] - r.scale) <= PREDICTED_SCALE_REL * r.scale and said["zero_point"] == r.zero_point
        parts.append((ok, f"{kind}: you said scale {said['scale']:.6g} / zero point {said['zero_point']}, "
                          f"{measured} {r.scale:.6g} / {r.zero_point}"))
    return predictions.verdict("input_rulers", parts,
                    "MinMax takes the lowest and highest value the set holds (widened to include 0), and spreads "
                    "them over 255 steps: scale = (max - min) / 255, zero point = round(-128 - min / scale). "
                    "Pixels are never negative, so min is 0 and the zero point is -128; each set's max is its "
                    "brightest pixel after its own preprocessing (scale within 0.2 %: range / 256 counts the marks, "
                    "not the 255 steps between them)")
