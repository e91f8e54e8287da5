"""Lesson 08: ORT deletes the Relus on its flags, and every comparison says whether it is beyond the noise."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from lab import data, measure
from lab.lessons.lesson08_the_quantization_toolbox import calibrators, toolbox


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("relus")
    source = Path(shutil.copy(data.fixture_path("fp32.onnx"), tmp))
    ev = measure.evaluation(source)
    rows = calibrators.relu_rows(source, tmp, ev, data.calibration_set("right"))
    return tmp, source, ev, {r["model"]: r for r in rows}


def test_symmetric_ranges_delete_the_relus_and_keeping_them_restores_the_digits(setup):
    _, _, ev, rows = setup
    assert [rows[m]["relus"] for m in calibrators.RELU_ROWS] == [0, 0, 2, 0, 2]  # deleted unless kept
    identity = rows["FP32, Relus replaced by Identity"]
    for deleted in ("Distribution", "MinMax, symmetric ranges"):  # a graph without Relus: FP32's Identity numbers
        assert abs(rows[deleted]["accuracy"] - identity["accuracy"]) <= 2 / len(ev.labels)
        assert rows[deleted]["max_abs_error"] > 0.5
    for kept in ("Distribution, Relus kept", "MinMax, symmetric, Relus kept"):
        assert rows[kept]["accuracy"] >= rows["MinMax"]["accuracy"] - 2 / len(ev.labels)
        assert rows[kept]["max_abs_error"] < 0.3


def test_a_model_against_itself_is_within_noise_and_distribution_is_beyond_it(setup):
    tmp, _, ev, _ = setup
    relus = tmp / "relus"
    same = measure.against(relus / "minmax.onnx", relus / "minmax.onnx", ev)
    assert same == "accuracy: no image changed: within noise; max abs err +0.000 [0.000, 0.000]: within noise"
    worse = measure.against(relus / "minmax.onnx", relus / "distribution.onnx", ev)
    assert "max abs err +" in worse and worse.endswith("beyond noise"), worse


def test_the_session_option_makes_the_saturating_family_exact(setup):
    tmp, source, ev, _ = setup
    pc = tmp / "pc.onnx"
    toolbox.build(source, pc, data.calibration_set("right"), {**toolbox.BASELINE, "per_channel": True}, data.BATCH_SIZE)
    rows = {(r["name"], r["family"]): r for r in toolbox.x64_rows(pc, ev)}
    option = "session.x64quantprecision = 1"
    assert rows[(option, "saturating")]["max_abs_error"] == rows[("default session", "exact")]["max_abs_error"]
    assert rows[("default session", "saturating")]["max_abs_error"] > 2 * rows[(option, "saturating")]["max_abs_error"]
