"""A reference workspace built with ``lab`` calls exactly as docs/workspace.md describes.

Instructors and tests use it to prove the grader gives full marks to a correct run, and
the bad-submission corpus is generated from it. ``build(work_dir)`` writes every file the
lessons 00-06 write; it takes a few seconds.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

READER_SOURCE = '''"""My calibration reader: serve the pixels in batches, then None."""
import numpy as np
from onnxruntime.quantization import CalibrationDataReader


class DigitReader(CalibrationDataReader):
    def __init__(self, pixels, batch_size=32, input_name="pixels"):
        ### BEGIN SOLUTION
        self.pixels = np.asarray(pixels, dtype=np.float32).reshape(-1, 64)
        self.batch_size = int(batch_size)
        self.input_name = input_name
        self.position = 0
        ### END SOLUTION

    def get_next(self):
        ### BEGIN SOLUTION
        if self.position >= len(self.pixels):
            return None
        batch = self.pixels[self.position:self.position + self.batch_size]
        self.position += self.batch_size
        return {self.input_name: batch}
        ### END SOLUTION

    def rewind(self):
        ### BEGIN SOLUTION
        self.position = 0
        ### END SOLUTION
'''

METRICS_SOURCE = '''"""summarize(predictions, labels): count, correct, accuracy and the confusion matrix."""


def summarize(predictions, labels):
    ### BEGIN SOLUTION
    predictions, labels = [int(p) for p in predictions], [int(t) for t in labels]
    if len(predictions) != len(labels):
        raise ValueError(f"{len(predictions)} predictions but {len(labels)} labels")
    if not labels:
        raise ValueError("no samples: cannot summarize an empty list")
    for v in predictions + labels:
        if not 0 <= v <= 9:
            raise ValueError(f"class {v} is outside 0-9")
    confusion = [[0] * 10 for _ in range(10)]
    for p, t in zip(predictions, labels):
        confusion[t][p] += 1  # rows actual, columns predicted
    correct = sum(confusion[i][i] for i in range(10))
    return {"count": len(labels), "correct": correct, "accuracy": correct / len(labels),
            "confusion": confusion}
    ### END SOLUTION
'''

GROWTH_COUNTS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
RIGHT_COUNTS = (1, 2)
GROWTH_BATCH = 8
BATCH = 36
SETTINGS = {"quant_format": "QDQ", "activation_type": "QInt8", "weight_type": "QInt8", "per_channel": False,
            "calibrate_method": "MinMax"}


def _dump(path: Path, obj: dict) -> None:
    path.write_text(json.dumps(obj, indent=2, allow_nan=False) + "\n", encoding="utf-8")


def _round_trip(x, scale, zp):
    from lab import ruler

    return ruler.round_trip(x, scale, zp)


def _hidden_layer(model: Path, x: np.ndarray) -> dict:
    """The ruler of the first hidden activation (``relu1.out``) against the FP32 values it meets."""
    import onnx
    from onnx import numpy_helper

    from lab import data, graph, ruler

    inits = {i.name: numpy_helper.to_array(i) for i in onnx.load(str(model)).graph.initializer}
    scale, zp = float(inits["relu1.out_scale"]), int(inits["relu1.out_zero_point"])
    values = graph.tensor_values(data.fixture_path("fp32.onnx"), x, ["relu1.out"])["relu1.out"]
    end = (127 - zp) * scale
    rt = ruler.round_trip(values, scale, zp)
    return {"tensor": "relu1.out", "scale": scale, "zero_point": zp, "ruler_end": end,
            "value_max": float(values.max()), "clipped_fraction": float((values > end + scale / 2).mean()),
            "mean_round_trip_error": float(np.abs(rt - values).mean())}


def _results(work: Path, reader_cls, x, labels, reference) -> dict:
    from lab import compare, data, graph
    from lab import convert
    from lab.data import data_sha256, file_sha256

    source = work / "source.onnx"
    sets = {}
    for kind in ("narrow", "right", "wide"):
        model = work / f"{kind}.onnx"
        calib = data.calibration_set(kind)
        record = convert.quantize(source, model, reader_cls(calib, batch_size=BATCH))
        r = graph.input_ruler(model)
        out = compare.predict(model, x)
        diag = compare.diagnose(r, x)
        sets[kind] = {"model": model.name, "model_sha256": file_sha256(model),
                      "calibration_samples": record.calibration_samples,
                      "calibration_batches": record.calibration_batches,
                      "calibration_sha256": record.calibration_sha256,
                      "calibration_range": float(calib.max() - min(float(calib.min()), 0.0)),
                      "scale": r.scale, "zero_point": r.zero_point, "range_seen": r.range_seen,
                      "interval": list(r.interval), "max_abs_error": compare.max_abs_error(reference, out),
                      "accuracy": float((out.argmax(1) == labels).mean()), "diagnosis": diag.kind,
                      "clipped_fraction": diag.clipped_fraction, "grid_used_fraction": diag.grid_used_fraction,
                      "pixel_round_trip_max_error": float(np.abs(
                          _round_trip(x, r.scale, r.zero_point) - x).max()),
                      "hidden_layer": _hidden_layer(model, x)}
    convert.quantize_dynamic_model(source, work / "dynamic.onnx")
    dyn = compare.predict(work / "dynamic.onnx", x)
    bad = compare.predict(data.fixture_path("bad-calibration.onnx"), x)
    return {"schema": "results/1", "lesson": "03_narrow_right_wide", "source_sha256": file_sha256(source),
            "versions": convert.versions(), "settings": dict(SETTINGS, batch_size=BATCH),
            "evaluation": {"name": "evaluation", "count": int(len(x)), "sha256": data_sha256(x)},
            "fp32": {"accuracy": float((reference.argmax(1) == labels).mean())}, "sets": sets,
            "dynamic": {"model": "dynamic.onnx", "model_sha256": file_sha256(work / "dynamic.onnx"),
                        "max_abs_error": compare.max_abs_error(reference, dyn),
                        "accuracy": float((dyn.argmax(1) == labels).mean())},
            "bad_calibration": {"model": "fixtures/bad-calibration.onnx",
                                "max_abs_error": compare.max_abs_error(reference, bad),
                                "accuracy": float((bad.argmax(1) == labels).mean())}}


def _growth(work: Path, reader_cls, x, labels, reference, counts) -> dict:
    from lab import data
    from lab.lessons import lesson04_more_batches as growth
    from lab import convert
    from lab.data import data_sha256, file_sha256

    source = work / "source.onnx"
    stream = data.narrow_batches(max(counts), GROWTH_BATCH, seed=0)
    common = dict(make_reader=lambda p: reader_cls(p, batch_size=GROWTH_BATCH), batch_size=GROWTH_BATCH,
                  x=x, labels=labels, reference=reference)
    rows = growth.grow(source, work / "growth", counts, stream=stream, kind="narrow", **common)
    rows += growth.grow(source, work / "growth", RIGHT_COUNTS, stream=data.calibration_set("right"), kind="right",
                        **common)
    return {"schema": "growth/1", "lesson": "04_more_batches", "source_sha256": file_sha256(source),
            "versions": convert.versions(), "settings": dict(SETTINGS, batch_size=GROWTH_BATCH),
            "evaluation": {"name": "evaluation", "count": int(len(x)), "sha256": data_sha256(x)},
            "folder": "growth",
            "narrow_stream": {"max_batches": max(counts), "batch_size": GROWTH_BATCH, "seed": 0,
                              "sha256": data_sha256(stream)},
            "right_data": {"batches": list(RIGHT_COUNTS)}, "rows": rows, "verdict": growth.verdict(rows)}


def _formats(work: Path, reader_cls, x, labels, reference) -> dict:
    from lab import data
    from lab.lessons import lesson05_qdq_vs_qoperator as formats
    from lab import convert
    from lab.data import data_sha256, file_sha256

    source = work / "source.onnx"
    out = work / "formats"
    out.mkdir(exist_ok=True)
    calib = data.calibration_set("right")
    records = convert.quantize_both_formats(source, out, reader_cls(calib, batch_size=BATCH))
    report = formats.compare_formats(out / "model.qdq.onnx", out / "model.qoperator.onnx", x, labels, reference)
    cache = out / "model.calibration.json"
    return {"schema": "formats/1", "lesson": "05_qdq_vs_qoperator", "source_sha256": file_sha256(source),
            "versions": convert.versions(), "settings": dict(SETTINGS, quant_format="QDQ and QOperator",
                                                              batch_size=BATCH),
            "evaluation": {"name": "evaluation", "count": int(len(x)), "sha256": data_sha256(x)},
            "calibration": {"set": "right", "cache": "formats/model.calibration.json",
                            "cache_sha256": file_sha256(cache), "samples": records["QDQ"].calibration_samples,
                            "batches": records["QDQ"].calibration_batches,
                            "sha256": records["QDQ"].calibration_sha256},
            **report}


def _regression(work: Path, reader_cls, x, labels) -> dict:
    from lab import compare, data, graph
    from lab.lessons.lesson06_accept_or_reject import acceptance
    from lab import convert
    from lab.data import data_sha256

    convert.quantize(work / "source.onnx", work / "candidate.onnx", reader_cls(data.calibration_set("right"),
                                                                                 batch_size=BATCH), per_channel=True)
    from lab import workspace

    metrics = workspace.load_module(work, "metrics")
    entries = {}
    for name, model in (("fp32", work / "source.onnx"), ("candidate", work / "candidate.onnx"),
                        ("bad", data.fixture_path("bad-calibration.onnx"))):
        probs = compare.predict(model, x)
        summary = metrics.summarize(probs.argmax(1).tolist(), labels.tolist())
        tol = acceptance.probability_tolerance(graph.output_scale(model))
        entries[name] = acceptance.model_entry(model, summary, acceptance.check_probabilities(probs, tol),
                                               acceptance.evidence(model, x, labels))
    return acceptance.regression(entries, data_sha256(x))


NOT_COVERED = ("digits shifted in the frame and low-contrast scenes; dim and noisy scenes are not sampled; "
               "any camera other than the deployed one")


def _release(work: Path, reader_cls) -> None:
    """Lesson 07: calibrate on daylight + flash, check every scenario, write release/ with its recipe."""
    from lab import data, kernels
    from lab import convert
    from lab.lessons.lesson07_calibrate_the_deployed_representation import recipe
    from lab.lessons.lesson07_calibrate_the_deployed_representation import scenario_checks

    source, drafts = work / "source.onnx", work / "drafts"
    drafts.mkdir(exist_ok=True)
    evaluation = data.load_split("evaluation")
    selection = recipe.select([("daylight", None), ("flash", slice(0, None, 6))])
    draft = drafts / "release-candidate.onnx"
    record = convert.quantize(source, draft, reader_cls(selection.pixels, batch_size=BATCH), per_channel=True,
                               quant_format="QOperator", activation_type="QInt8")
    by_family = scenario_checks.compare_families(source, draft, evaluation.pixels, evaluation.labels,
                                                 kernels.FAMILIES, seed=0)
    here = by_family[kernels.target_family()]
    doc = recipe.recipe("digits-int8-r1", source, selection, record.settings, BATCH, evaluation, here, draft,
                        NOT_COVERED, by_family=by_family)
    recipe.write_release(work / "release", draft, doc, evaluation, here)


def _predictions(work: Path) -> None:
    """The predictions a student who reasoned right writes: the input rulers worked out from each set's range."""
    from lab import data, predictions, ruler

    rulers = {}
    for kind in ("narrow", "right", "wide"):
        calib = data.calibration_set(kind)
        scale, zp = ruler.scale_zero_point(min(float(calib.min()), 0.0), float(calib.max()), "int8")
        rulers[kind] = {"scale": float(scale), "zero_point": int(zp)}
    for question, answer in {"clip_or_squash": {"clips": "narrow", "squashes": "wide"}, "input_rulers": rulers,
                             "more_batches": {"narrow_reaches_right": False, "largest_narrow_range": 0.25},
                             "formats": {"smaller": "QOperator", "same_input_ruler": True},
                             "entry_tensor": "pixels"}.items():
        predictions.record(work, question, answer)


def build(work_dir: str | Path, growth_counts=GROWTH_COUNTS) -> Path:
    """Write a complete, correct workspace for lessons 00-07 (07 once the lab has it) into ``work_dir`` and return its path."""
    from lab import compare, data, workspace

    work = workspace.make_workspace(work_dir)
    (work / "calibration_reader.py").write_text(READER_SOURCE)
    (work / "metrics.py").write_text(METRICS_SOURCE)
    reader_cls = workspace.load_module(work, "calibration_reader").DigitReader
    evaluation = data.load_split("evaluation")
    x, labels = evaluation.pixels, evaluation.labels
    reference = compare.predict(work / "source.onnx", x)
    _dump(work / "results.json", _results(work, reader_cls, x, labels, reference))
    _dump(work / "growth.json", _growth(work, reader_cls, x, labels, reference, growth_counts))
    _dump(work / "formats.json", _formats(work, reader_cls, x, labels, reference))
    _dump(work / "regression.json", _regression(work, reader_cls, x, labels))
    _predictions(work)
    from grader.lessons import lesson07_calibrate_the_deployed_representation as release

    if release.active():
        _release(work, reader_cls)
    return work
