"""What lessons 03-05 now claim, measured on both INT8 kernel families, and the exercise checks that refuse what
their prose forbids (real conversions, no mocks).

- Lesson 03: dynamic quantization's error at batch 1 (each image alone, as a camera sends them) is above its error on
  the 400 evaluation images as one batch, and still below the right static model's; the static model's outputs do
  not depend on the batch, dynamic's do; dynamic rounds fewer activations.
- Lesson 04: ORT's ``CalibMovingAverage`` keeps a shorter narrow range than the default, both below a quarter of full
  scale; the exercise check names a nested ``rows``, a series grown from the other set's data and a column that
  cannot say why.
- Lesson 05: the two formats' max abs errors differ by less than one output step; ORT warns about S8S8 QOperator on
  the QOperator conversion only; the check refuses QUInt8 activations and per-channel weights, naming the setting.
"""
from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from lab import compare, convert, data, kernels
from lab.lessons import lesson03_narrow_right_wide as lesson03
from lab.lessons import lesson04_more_batches as lesson04
from lab.lessons import lesson05_qdq_vs_qoperator as lesson05
from lab.readers import ArrayReader


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    """source.onnx, right.onnx (lesson 03's settings) and dynamic.onnx in a scratch workspace."""
    work = tmp_path_factory.mktemp("claims")
    shutil.copyfile(data.fixture_path("fp32.onnx"), work / "source.onnx")
    convert.quantize(work / "source.onnx", work / "right.onnx", data.calibration_set("right"),
                     batch_size=data.BATCH_SIZE, **lesson03.SETTINGS)
    convert.quantize_dynamic_model(work / "source.onnx", work / "dynamic.onnx")
    return work


@pytest.fixture(scope="module")
def evaluation():
    ev = data.load_split("evaluation")
    return ev, compare.predict(data.fixture_path("fp32.onnx"), ev.pixels)


@pytest.mark.parametrize("family", kernels.FAMILIES)
def test_dynamic_at_batch_1_is_worse_than_on_one_batch_and_still_below_right_static(work, evaluation, family):
    ev, reference = evaluation
    with kernels.computing_as(family):
        right, dyn = (lesson03.batch_dependence(work / f"{m}.onnx", ev.pixels, reference, ev.labels)
                      for m in ("right", "dynamic"))
    assert right["largest_change"] == 0.0, "a static model's answer must not depend on its batch"
    assert dyn["largest_change"] > 0.0
    assert dyn["batch_1"]["max_abs_error"] > dyn["one_batch"]["max_abs_error"]
    assert dyn["batch_1"]["max_abs_error"] < right["batch_1"]["max_abs_error"]
    assert lesson03.rounded_activations(work / "dynamic.onnx") < lesson03.rounded_activations(work / "right.onnx")


def test_one_image_at_a_time_matches_predict_image_by_image(work, evaluation):
    ev, _ = evaluation
    x = ev.pixels[:5]
    alone = lesson03.one_image_at_a_time(work / "dynamic.onnx", x)
    np.testing.assert_array_equal(alone, np.concatenate([compare.predict(work / "dynamic.onnx", x[i:i + 1])
                                                         for i in range(len(x))]))


def test_lesson_03_check_names_a_setting_the_prose_fixes(tmp_path):
    shutil.copyfile(data.fixture_path("fp32.onnx"), tmp_path / "source.onnx")
    for changed, words in (({"per_channel": True}, "per_channel=True; lesson 03 asks per_channel=False "
                                                   "(one ruler per tensor)"),
                           ({"activation_type": "QUInt8"}, "activation_type='QUInt8'; lesson 03 asks "
                                                           "activation_type='QInt8'")):
        records = {kind: convert.quantize(tmp_path / "source.onnx", tmp_path / f"{kind}.onnx",
                                          ArrayReader(data.calibration_set(kind), data.BATCH_SIZE),
                                          **{**lesson03.SETTINGS, **changed}) for kind in data.KINDS}
        with pytest.raises(lesson03.ExerciseCheckFailed, match=words.replace("(", r"\(").replace(")", r"\)")):
            lesson03.check_three_conversions(tmp_path, records)
    assert lesson03.settings_problem("m.onnx", {**lesson03.SETTINGS, "calibrate_method": "CalibrationMethod.MinMax"}) \
        == "", "an ORT enum recorded by its name is the same setting"


def test_lesson_03_check_refuses_models_converted_from_arrays(tmp_path):
    """Three right models made from lab.data.calibration_set arrays bypass the student's DigitReader: named."""
    shutil.copyfile(data.fixture_path("fp32.onnx"), tmp_path / "source.onnx")
    records = {kind: convert.quantize(tmp_path / "source.onnx", tmp_path / f"{kind}.onnx", data.calibration_set(kind),
                                      batch_size=data.BATCH_SIZE, **lesson03.SETTINGS) for kind in data.KINDS}
    with pytest.raises(lesson03.ExerciseCheckFailed, match="converted from an array.*pass your DigitReader"):
        lesson03.check_three_conversions(tmp_path, records)


def test_moving_average_keeps_a_shorter_narrow_range(work):
    stream = lesson04.narrow_batches(64, lesson04.BATCH_SIZE, seed=0)
    kept = {m: lesson04.range_kept(work / "source.onnx", ArrayReader(stream, lesson04.BATCH_SIZE), m)
            for m in (False, True)}
    assert kept[True] < kept[False] <= data.NARROW_GAIN + 1e-6
    assert kept[False] == pytest.approx(float(stream.max()), rel=1e-5)


@pytest.fixture(scope="module")
def series(work, evaluation):
    """Lesson 04's two series, small: narrow 1, 2, 4 batches of the stream, right 1 batch of the right set."""
    ev, reference = evaluation
    stream = lesson04.narrow_batches(4, lesson04.BATCH_SIZE, seed=0)
    right = data.calibration_set("right")
    common = dict(batch_size=lesson04.BATCH_SIZE, x=ev.pixels, labels=ev.labels, reference=reference,
                  **lesson04.SETTINGS)
    make = lambda p: ArrayReader(p, lesson04.BATCH_SIZE)  # noqa: E731 - a student's make_reader
    folder = work / "growth"
    narrow = lesson04.grow(work / "source.onnx", folder, [1, 2, 4], make, stream, kind="narrow", **common)
    right_rows = lesson04.grow(work / "source.onnx", folder, [1], make, right, kind="right", **common)
    wrong_right = lesson04.grow(work / "source.onnx", work / "wrong", [1], make, stream, kind="right", **common)
    return dict(narrow=narrow, right=right_rows, wrong_right=wrong_right, stream=stream, right_pixels=right,
                folder=folder)


def _check(s, rows, read="range_seen", folder=None):
    return lesson04.check_series(rows, [1, 2, 4], [1, 2], folder or s["folder"], stream=s["stream"],
                                 right=s["right_pixels"], read=read)


def test_lesson_04_check_accepts_the_decision_the_lesson_asks(series):
    assert "read range_seen" in _check(series, series["narrow"] + series["right"])


@pytest.mark.parametrize("mistake, words", [
    ("nested", "rows = [narrow_rows, right_rows] nests the two series"),
    ("right_from_stream", "right x 1 was calibrated on `stream` (lesson.narrow_batches), not on `right`"),
    ("reads_accuracy", "READ is 'accuracy': accuracy wanders"),
    ("reads_a_name", "READ is 'error'; expected one of the table's columns"),
    ("narrow_short", "the narrow series has batch counts [1, 2]"),
])
def test_lesson_04_check_names_the_wrong_choice(series, tmp_path, mistake, words):
    s = series
    rows, read, folder = s["narrow"] + s["right"], "range_seen", s["folder"]
    if mistake == "nested":
        rows = [s["narrow"], s["right"]]
    elif mistake == "right_from_stream":
        rows, folder = s["narrow"] + s["wrong_right"], tmp_path
        for r in rows:
            (tmp_path / r["model"]).write_bytes(b"")
    elif mistake == "reads_accuracy":
        read = "accuracy"
    elif mistake == "reads_a_name":
        read = "error"
    elif mistake == "narrow_short":
        rows = s["narrow"][:2] + s["right"]
    with pytest.raises(lesson04.GrowthCheckFailed) as e:
        _check(s, rows, read, folder)
    assert words in str(e.value)


def test_growth_report_takes_the_right_batch_counts_from_the_rows(series, work, evaluation):
    ev, _ = evaluation
    doc = lesson04.growth_report(work / "source.onnx", series["narrow"] + series["right"], series["stream"], ev,
                                 max_batches=4, seed=0)
    assert doc["right_data"]["batches"] == [1]


@pytest.fixture(scope="module")
def formats(work):
    out = work / "formats"
    out.mkdir()
    records = lesson05.quantize_both_formats(work / "source.onnx", out,
                                             ArrayReader(data.calibration_set("right"), data.BATCH_SIZE),
                                             **lesson05.FORMAT_SETTINGS)
    return out, records


def test_ort_warns_about_s8s8_qoperator_on_that_conversion_only(formats):
    _, records = formats
    s8s8 = "Please use QuantFormat.QDQ for activation type QInt8 and weight type QInt8"
    assert any(s8s8 in m for m in records.warnings["QOperator"])
    assert not any(s8s8 in m for m in records.warnings["QDQ"])


@pytest.mark.parametrize("family", kernels.FAMILIES)
def test_the_formats_errors_differ_by_less_than_one_output_step(formats, evaluation, family):
    out, _ = formats
    ev, reference = evaluation
    with kernels.computing_as(family):
        report = lesson05.compare_formats(out / "model.qdq.onnx", out / "model.qoperator.onnx", ev.pixels,
                                          ev.labels, reference)
    q, o = report["formats"]["QDQ"], report["formats"]["QOperator"]
    assert abs(q["max_abs_error"] - o["max_abs_error"]) < q["output_scale"]
    assert q["accuracy"] == o["accuracy"] and report["same_input_ruler"]


@pytest.mark.parametrize("changed, words", [
    ({"activation_type": "QUInt8"}, "activation_type='QUInt8'; lesson 05 asks activation_type='QInt8'"),
    ({"per_channel": True}, "per_channel=True; lesson 05 asks per_channel=False"),
])
def test_lesson_05_check_names_a_setting_the_prose_fixes(work, tmp_path, changed, words):
    records = lesson05.quantize_both_formats(work / "source.onnx", tmp_path,
                                             ArrayReader(data.calibration_set("right"), data.BATCH_SIZE),
                                             **{**lesson05.FORMAT_SETTINGS, **changed})
    with pytest.raises(lesson03.ExerciseCheckFailed) as e:
        lesson05.check_both_formats(tmp_path / "model.qdq.onnx", tmp_path / "model.qoperator.onnx",
                                    tmp_path / "model.calibration.json", records)
    assert words in str(e.value)
