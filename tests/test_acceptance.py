"""Lesson 06 reference functions: summarize (instructor-side, in the grader), probability checks, the decision,
regression.json."""
from __future__ import annotations

import json
import re
import shutil

import numpy as np
import onnx
import pytest

from grader.lessons.lesson06_accept_or_reject import summarize
from lab import compare, data, graph, schemas
from lab.convert import quantize
from lab.errors import ModelContractError
from lab.lessons.lesson06_accept_or_reject import acceptance

ANSWERS = [1, 2, 1, 0, 9]
PREDICTIONS = [2, 2, 1, 0, 8]


def test_the_kit_has_no_summarize():
    """It is lesson 06's exercise; its reference is the grader's, which the kit leaves out."""
    assert not hasattr(acceptance, "summarize")


def test_summarize_on_the_short_lists():
    s = summarize(PREDICTIONS, ANSWERS)
    assert (s["count"], s["correct"], s["accuracy"]) == (5, 3, 0.6)
    c = np.array(s["confusion"])
    assert c.shape == (10, 10) and c.sum() == 5
    assert c[1, 2] == 1 and c[9, 8] == 1  # rows actual, columns predicted
    assert c[2, 2] == 1 and c[1, 1] == 1 and c[0, 0] == 1


def test_a_transposed_matrix_fails_although_trace_and_accuracy_agree():
    s = summarize(PREDICTIONS, ANSWERS)
    transposed = np.array(s["confusion"]).T
    assert np.trace(transposed) == s["correct"]
    assert transposed[1, 2] != s["confusion"][1][2]  # the check the lesson's test makes


@pytest.mark.parametrize("predictions, labels, words", [
    ([1, 2], [1], "2 items but labels has 1"),
    ([], [], "empty"),
    ([1, 2], [1, 10], "labels[1] is 10"),
    ([-1], [3], "predictions[0] is -1"),
    ([1.5], [1], "whole digits"),
    (["a"], [1], "digits 0-9"),
])
def test_summarize_refuses_bad_input_with_a_clear_message(predictions, labels, words):
    with pytest.raises(ValueError, match=re.escape(words)):
        summarize(predictions, labels)


def test_top_confusions_are_off_diagonal_and_largest_first():
    s = summarize([8, 8, 5, 3, 3], [3, 3, 9, 3, 3])
    assert acceptance.top_confusions(s["confusion"]) == [(3, 8, 2), (9, 5, 1)]


def test_probability_tolerance_comes_from_the_grid():
    assert acceptance.probability_tolerance(1 / 255) == pytest.approx(10 / 510)
    assert acceptance.probability_tolerance(None) == acceptance.FLOAT_SUM_TOLERANCE


def test_probability_check_rejects_negative_nonfinite_and_far_rows():
    tol = acceptance.probability_tolerance(1 / 255)
    good = np.full((3, 10), 0.1)
    assert acceptance.check_probabilities(good, tol).ok
    broken = np.array([[1.2, -0.2] + [0.0] * 8, [np.nan] + [0.1] * 9, [0.05] * 10, [0.1] * 10])
    check = acceptance.check_probabilities(broken, tol)
    assert (check.negative, check.nonfinite, check.far_rows) == (1, 1, 1) and not check.ok
    just_inside = np.full((1, 10), 0.1)
    just_inside[0, 0] += tol * 0.99
    assert acceptance.check_probabilities(just_inside, tol).ok
    just_inside[0, 0] += tol * 0.02
    assert not acceptance.check_probabilities(just_inside, tol).ok


def test_real_int8_outputs_stay_within_the_grid_tolerance():
    model = data.fixture_path("bad-calibration.onnx")
    p = compare.predict(model, data.load_split("evaluation").pixels)
    check = acceptance.check_probabilities(p, acceptance.probability_tolerance(graph.output_scale(model)))
    assert check.ok and check.min_sum < 1.0  # rounding on the 1/255 grid shows, but within 10 half-steps


def test_row_sums_land_on_250_to_258_steps_of_the_1_255_grid():
    """The kernel's 254-step multiplier and ten roundings: sums are k/255 with k in 250..258 (lesson 06's bound)."""
    model = data.fixture_path("bad-calibration.onnx")
    x = np.random.default_rng(0).random((4000, data.N_FEATURES), dtype=np.float32) * 1.5
    steps = compare.predict(model, x).astype(np.float64).sum(axis=1) * 255
    assert np.allclose(steps, np.round(steps), atol=1e-3)
    assert set(np.round(steps).astype(int)) <= set(range(250, 259)) and len(set(np.round(steps).astype(int))) > 3
    assert np.abs(steps / 255 - 1).max() <= acceptance.probability_tolerance(graph.output_scale(model)) + 1e-9


@pytest.mark.parametrize("fp32, candidate, accept", [
    (0.96, 0.95, True),     # on the boundary: a loss equal to the limit is accepted
    (0.96, 0.9499, False),
    (0.975, 0.975, True),
    (0.975, 0.99, True),    # a gain is no loss
    (0.94, 0.94, False),    # the FP32 reference misses its floor
])
def test_decision_boundary(fp32, candidate, accept):
    assert acceptance.decide(fp32, candidate).accept is accept


def test_decision_from_counts_on_the_boundary():
    assert acceptance.decide(384 / 400, 380 / 400).accept  # 0.96 vs 0.95 from counts
    assert not acceptance.decide(384 / 400, 379 / 400).accept


def test_probability_failure_rejects_even_a_perfect_accuracy():
    d = acceptance.decide(0.975, 0.975, probabilities_ok=False)
    assert not d.accept and "probability" in d.reason


@pytest.fixture(scope="module")
def three_models(tmp_path_factory):
    work = tmp_path_factory.mktemp("acceptance")
    source = work / "source.onnx"
    shutil.copyfile(data.fixture_path("fp32.onnx"), source)
    quantize(source, work / "candidate.onnx", data.load_split("calibration").pixels, per_channel=True, batch_size=36)
    return work, {"fp32": source, "candidate": work / "candidate.onnx",
                  "bad": data.fixture_path("bad-calibration.onnx")}


def _entries(models):
    ev = data.load_split("evaluation")
    out = {}
    for name, path in models.items():
        p = compare.predict(path, ev.pixels)
        out[name] = acceptance.model_entry(
            path, summarize(p.argmax(1), ev.labels),
            acceptance.check_probabilities(p, acceptance.probability_tolerance(graph.output_scale(path))),
            acceptance.evidence(path, ev.pixels, ev.labels))
    return out, data.data_sha256(ev.pixels)


def test_regression_accepts_the_candidate_and_rejects_the_bad_model(three_models, tmp_path):
    _, models = three_models
    entries, sha = _entries(models)
    doc = acceptance.regression(entries, sha)
    assert doc["accept_candidate"] and doc["reject_bad"]
    # at the limit is accepted (decide's rule): on the saturating family the candidate loses exactly 4 of 400 images,
    # 0.010000000000000009 in floats
    assert doc["loss"] <= acceptance.LIMIT + acceptance.EPSILON and doc["bad_loss"] > 0.3
    bad, cand = doc["models"]["bad"]["evidence"], doc["models"]["candidate"]["evidence"]
    assert abs(bad["size_bytes"] - cand["size_bytes"]) < 0.05 * cand["size_bytes"]  # size cannot tell them apart
    assert bad["weight_dtypes"] == cand["weight_dtypes"] and bad["kernels"] == cand["kernels"]
    path = acceptance.write_regression(tmp_path / "regression.json", doc)
    assert schemas.read("regression", path)["reject_bad"] is True


def test_a_good_model_in_place_of_the_bad_one_flips_the_decision(three_models):
    _, models = three_models
    swapped = dict(models, bad=models["candidate"])
    doc = acceptance.regression(*_entries(swapped))
    assert doc["reject_bad"] is False and doc["reasons"]["bad"].startswith("ACCEPT")


def test_regression_json_off_schema_names_the_field(three_models, tmp_path):
    _, models = three_models
    doc = acceptance.regression(*_entries(models))
    doc["models"]["candidate"]["confusion"] = doc["models"]["candidate"]["confusion"][:9]
    (tmp_path / "regression.json").write_text(json.dumps(doc))
    with pytest.raises(schemas.SchemaError, match="models/candidate/confusion"):
        schemas.read("regression", tmp_path / "regression.json")


def test_models_with_the_wrong_io_are_refused_with_what_was_expected(tmp_path):
    m = onnx.load(str(data.fixture_path("fp32.onnx")))
    m.graph.input[0].name = "image"
    with pytest.raises(ModelContractError, match="expected an input named 'pixels'"):
        graph.check_io(m)
    m = onnx.load(str(data.fixture_path("fp32.onnx")))
    m.graph.output[0].type.tensor_type.shape.dim[1].dim_value = 5
    with pytest.raises(ModelContractError, match=r"expected \[N, 10\]"):
        graph.check_io(m)


# --- the visible check of the exercise ------------------------------------------------------------

def _no_digit_check(predictions, labels):
    """A typical first try: lengths and empty input checked, the 0-9 rule forgotten."""
    predictions, labels = list(predictions), list(labels)
    if len(predictions) != len(labels):
        raise ValueError("lengths differ")
    if not labels:
        raise ValueError("empty")
    confusion = [[0] * 10 for _ in range(10)]
    for p, a in zip(predictions, labels):
        confusion[a][p] += 1
    correct = sum(confusion[d][d] for d in range(10))
    return {"count": len(labels), "correct": correct, "accuracy": correct / len(labels), "confusion": confusion}


def _variant(**changes):
    def summarize_(predictions, labels):
        s = summarize(predictions, labels)
        if changes.get("transpose"):
            s["confusion"] = [list(r) for r in np.array(s["confusion"]).T]
        if changes.get("percent"):
            s["accuracy"] *= 100
        if changes.get("rounded"):
            s["accuracy"] = round(s["accuracy"], 2)
        if changes.get("array"):
            s["confusion"] = np.array(s["confusion"])
        if changes.get("no_arrays") and isinstance(labels, np.ndarray):
            raise ValueError("The truth value of an array with more than one element is ambiguous")
        return s
    return summarize_


def test_check_summarize_passes_the_reference_and_prints_one_line_per_rule():
    lines = acceptance.check_summarize(summarize)
    assert len(lines) == 1 + len(acceptance.SUMMARIZE_REFUSALS)
    assert "labels[1] is 10" in lines[3]


@pytest.mark.parametrize("student, words", [
    (_no_digit_check, "raised IndexError (list index out of range) instead: a label outside 0-9 must raise "
                      "ValueError naming the bad value 10"),
    (_variant(transpose=True), "transposed"),
    (_variant(percent=True), "not a percentage"),
    (_variant(no_arrays=True), "numpy arrays"),
    (_variant(rounded=True), "expected 2 / 3 = 0.6666666666666666, correct / count unrounded"),
    (_variant(array=True), "confusion is a ndarray; expected a list of 10 lists"),
    (lambda pixels, labels: None, "returned NoneType"),
])
def test_check_summarize_names_the_broken_rule_in_one_line(student, words):
    with pytest.raises(acceptance.SummarizeCheckError) as info:
        acceptance.check_summarize(student)
    assert words in str(info.value) and "\n" not in str(info.value)
    assert len(info.value._render_traceback_()) == 1


def test_check_summarize_leaves_the_exercise_stub_alone():
    def stub(predictions, labels):
        raise NotImplementedError("exercise: replace this line with your code")
    with pytest.raises(NotImplementedError, match="exercise"):
        acceptance.check_summarize(stub)


def test_check_summarize_wants_the_bad_value_named():
    def vague(predictions, labels):
        if any(not 0 <= v <= 9 for v in list(predictions) + list(labels)):
            raise ValueError("bad input")
        return summarize(predictions, labels)
    with pytest.raises(acceptance.SummarizeCheckError, match="names the bad value 10"):
        acceptance.check_summarize(vague)


def test_allclose_rows_count_what_the_guides_check_sees():
    ref = np.full((2, 10), 0.1)
    out = ref.copy()
    out[0, :2] = [0.085, 0.115]
    row, = acceptance.allclose_rows(ref, {"m": out})
    assert not row["allclose"] and row["beyond_atol"] == 2 and row["answers_changed"] == 1
    assert abs(row["max_abs_difference"] - 0.015) < 1e-9
    assert acceptance.allclose_rows(ref, {"same": ref})[0]["allclose"]


def test_trace_finds_where_the_bad_model_parts_from_fp32(tmp_path):
    from lab.workspace import make_workspace

    work = make_workspace(tmp_path / "w")
    ev = data.load_split("evaluation")
    bad = data.fixture_path("bad-calibration.onnx")
    image = acceptance.first_disagreement(compare.predict(work / "source.onnx", ev.pixels),
                                          compare.predict(bad, ev.pixels), ev.labels)
    assert image is not None
    stages = dict(acceptance.trace_disagreement(image, ev, work / "source.onnx", bad))
    assert list(stages) == ["preprocessing", "export (FP32 reference)", "quantization: input ruler",
                            "quantization: the whole model"]
    assert "max difference 0" in stages["preprocessing"] and "is right" in stages["export (FP32 reference)"]
    assert "land on 2" in stages["quantization: input ruler"]
