"""lab.lessons.lesson06_accept_or_reject.families: one INT8 model on both kernel families. Real conversions of the
digit reader; every assertion holds whichever family this machine runs (both families are computed explicitly)."""
from __future__ import annotations

import numpy as np
import pytest

from lab import data, kernels
from lab.data import file_sha256
from lab.lessons.lesson06_accept_or_reject import families
from lab.readers import ArrayReader
from lab.workspace import make_workspace

BASE = {"quant_format": "QDQ", "activation_type": "QInt8", "weight_type": "QInt8", "per_channel": True,
        "reduce_range": False, "calibrate_method": "MinMax", "nodes_to_exclude": [], "extra_options": {},
        "batch_size": 36}


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return make_workspace(tmp_path_factory.mktemp("families"))


@pytest.fixture(scope="module")
def variants(work):
    return families.convert_variants(work / "source.onnx", work / "drafts" / "cpu",
                                     data.load_split("calibration").pixels, BASE)


@pytest.fixture(scope="module")
def evaluation():
    return data.load_split("evaluation")


@pytest.fixture(scope="module")
def cures(work, variants, evaluation):
    return {r["name"]: r for r in families.cures_table(work / "source.onnx", variants, evaluation.pixels,
                                                         evaluation.labels)}


def test_a_pair_of_full_products_saturates_only_on_the_saturating_family():
    assert families.pair_sum((255, 255), (127, 127), kernels.EXACT) == 64_770
    assert families.pair_sum((255, 255), (127, 127), kernels.SATURATING) == kernels.INT16_MAX
    assert families.pair_sum((255, 255), (-127, -127), kernels.SATURATING) == kernels.INT16_MIN
    assert families.pair_sum((255, 255), (64, 64), kernels.SATURATING) == 32_640  # reduce_range's largest pair fits
    # pairs saturate one at a time: two pairs that each fit add up past int16 exactly
    assert families.pair_sum((255, 255, 255, 255), (64, 64, 64, 64), kernels.SATURATING) == 65_280
    rows = families.pair_saturation_example()
    assert [r["fits"] for r in rows] == [r["exact"] <= kernels.INT16_MAX for r in rows]
    assert "saturates: the kernel keeps 32,767" in families.format_pairs(rows)


def test_risky_pairs_need_the_same_sign_and_a_sum_of_129():
    w = np.array([[127, 127, 64, 127, 0], [2, -127, 64, 1, 127]], np.int8)  # one pair (rows 0, 1) per column
    assert families.risky_pairs(w).tolist() == [[True, False, False, False, False]]
    odd = np.array([[127], [127], [127]], np.int8)  # K = 3: the last row pairs with a zero
    assert families.risky_pairs(odd).tolist() == [[True], [False]]


def test_per_channel_weights_reach_127_in_every_column_and_reduce_range_stops_at_64(variants):
    candidate = families.saturation_risk(variants["candidate"])
    per_tensor = families.saturation_risk(variants["per_tensor"])
    reduced = families.saturation_risk(variants["reduce_range"])
    assert [r["weights"] for r in candidate] == ["fc1.weight_quantized", "fc2.weight_quantized", "fc3.weight_quantized"]
    assert all(r["full_columns"] == r["columns"] for r in candidate)
    assert all(r["full_columns"] < r["columns"] for r in per_tensor)
    assert sum(r["risky_pairs"] for r in per_tensor) < sum(r["risky_pairs"] for r in candidate)
    assert max(r["max_abs_weight"] for r in reduced) <= 64
    assert sum(r["risky_pairs"] for r in reduced) == 0


def test_a_reader_factory_gives_the_same_bytes_as_the_array(work, variants, tmp_path):
    pixels = data.load_split("calibration").pixels
    only = {"candidate": families.VARIANTS["candidate"], "per_tensor": families.VARIANTS["per_tensor"]}
    again = families.convert_variants(work / "source.onnx", tmp_path, lambda: ArrayReader(pixels, 36), BASE, only)
    assert set(again) == set(only)
    for name in only:  # a used-up reader would have calibrated the second model on nothing
        assert file_sha256(again[name]) == file_sha256(variants[name]), name


def test_the_cures_agree_across_families_and_the_candidate_does_not(cures):
    assert cures["reduce_range"]["kernel"] == "U8S8" and cures["qoperator_s8"]["kernel"] == "S8S8"
    for name in ("reduce_range", "qoperator_s8"):
        assert cures[name]["changed"] == 0 and cures[name]["output_difference"] == 0.0, name
        assert cures[name]["exact_accuracy"] == cures[name]["saturating_accuracy"], name
    for name in ("candidate", "qoperator_u8"):
        assert cures[name]["changed"] > 0, name
        assert cures[name]["saturating_error"] > cures[name]["exact_error"], name
    # the QOperator pair share weights; only the activations' type (and so the kernel) differs
    assert cures["qoperator_s8"]["risky_pairs"] == cures["qoperator_u8"]["risky_pairs"] > 0
    table = families.format_cures(list(cures.values()))
    assert table.splitlines()[0].split()[:2] == ["setting", "GEMM"] and len(table.splitlines()) == 2 + len(cures)


def test_side_by_side_counts_the_same_changes_as_the_list(work, variants, evaluation, cures):
    rows = families.side_by_side(work / "source.onnx", variants["candidate"], evaluation.pixels, evaluation.labels)
    assert [r["family"] for r in rows] == list(kernels.FAMILIES)
    assert [r["computed_on"] for r in rows].count("this machine") == 1
    assert rows[0]["changed"] == 0
    changed = families.changed_predictions(variants["candidate"], evaluation.pixels, evaluation.labels)
    assert rows[1]["changed"] == len(changed) == cures["candidate"]["changed"]
    assert all(c[kernels.EXACT] != c[kernels.SATURATING] for c in changed)
    assert rows[1]["accuracy"] == cures["candidate"]["saturating_accuracy"]
    assert "predictions unlike exact" in families.format_side_by_side(rows)


def test_check_prediction_says_which_settings_were_wrong_and_refuses_unknown_names(cures):
    rows = list(cures.values())
    measured = {r["name"] for r in rows if r["changed"]}
    matched, report = families.check_prediction(measured, rows)
    assert matched and "NO " not in report
    matched, report = families.check_prediction(measured | {"reduce_range"}, rows)
    assert not matched
    wrong = [line for line in report.splitlines() if line.startswith("NO ")]
    assert len(wrong) == 1 and "reduce_range" in wrong[0] and "no pair can saturate" in wrong[0]
    with pytest.raises(ValueError, match="not settings here"):
        families.check_prediction({"per_channel"}, rows)
    with pytest.raises(ValueError, match="set of setting names"):
        families.check_prediction("candidate", rows)
