"""lab.evidence: the exact McNemar test, paired bootstrap intervals and timings, against known values."""
from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import binomtest

from lab import evidence


def counts(fixed: int, broken: int, same: int = 10) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Labels and two models' predictions with the given discordant counts (``same`` images both get right)."""
    n = fixed + broken + same
    labels = np.zeros(n, dtype=int)
    a, b = labels.copy(), labels.copy()
    a[:fixed] = 1  # fixed by b: a wrong, b right
    b[fixed:fixed + broken] = 1  # broken by b
    return labels, a, b


@pytest.mark.parametrize(("fixed", "broken", "p"), [(0, 5, 0.0625), (2, 3, 1.0), (0, 0, 1.0)])
def test_mcnemar_p_by_hand(fixed, broken, p):
    result = evidence.paired(*counts(fixed, broken))
    assert (result.fixed, result.broken) == (fixed, broken)
    assert result.p_value == pytest.approx(p)


@pytest.mark.parametrize(("fixed", "broken"), [(1, 9), (7, 20), (15, 15), (0, 12)])
def test_mcnemar_p_is_the_exact_binomial(fixed, broken):
    p = evidence.paired(*counts(fixed, broken)).p_value
    assert p == pytest.approx(binomtest(fixed, fixed + broken, 0.5).pvalue)


def test_paired_counts_on_a_hand_made_example():
    labels = [0, 1, 2, 1, 0, 2]
    a = [0, 1, 0, 0, 1, 2]  # right on images 0, 1, 5
    b = [0, 0, 2, 1, 1, 2]  # right on images 0, 2, 3, 5
    result = evidence.paired(labels, a, b)
    assert (result.n, result.fixed, result.broken) == (6, 2, 1)
    assert result.difference == pytest.approx(1 / 6)
    assert not result.beyond_noise
    d = result.to_dict()
    assert set(d) == {"n", "fixed", "broken", "p_value", "difference", "beyond_noise", "words"}
    assert d["words"] == result.words()


def test_paired_from_probabilities_takes_the_argmax():
    probs_a = np.array([[0.9, 0.1], [0.2, 0.8], [0.6, 0.4]])
    probs_b = np.array([[0.1, 0.9], [0.3, 0.7], [0.4, 0.6]])
    result = evidence.paired_from_probabilities([0, 1, 1], probs_a, probs_b)
    assert (result.fixed, result.broken) == (1, 1)


def test_paired_words():
    assert evidence.paired(*counts(2, 3)).words() == "2 fixed, 3 broken: within noise (p = 1)"
    assert evidence.paired(*counts(0, 12)).words() == "0 fixed, 12 broken: beyond noise (p = 0.00049)"
    assert evidence.paired(*counts(0, 20)).words() == "0 fixed, 20 broken: beyond noise (p < 0.0001)"
    assert evidence.paired(*counts(0, 0)).words() == "no image changed: within noise"
    assert evidence.Paired(n=10, fixed=2, broken=3, p_value=0.65625).words().endswith("(p = 0.66)")


def test_bad_predictions_name_what_was_expected():
    with pytest.raises(ValueError, match="one entry per image.*labels has 3.*b_predicted has 2"):
        evidence.paired([0, 1, 2], [0, 1, 2], [0, 1])
    with pytest.raises(ValueError, match="labels: expected a non-empty 1-D array of class indices"):
        evidence.paired([], [], [])
    with pytest.raises(ValueError, match="a_predicted: expected a non-empty 1-D array"):
        evidence.paired([0, 1], [[0.9, 0.1], [0.2, 0.8]], [0, 1])
    with pytest.raises(ValueError, match=r"a_probs: expected a non-empty 2-D array \(images x classes\)"):
        evidence.paired_from_probabilities([0, 1], [0, 1], [[0.9, 0.1], [0.2, 0.8]])


def test_bootstrap_is_seeded():
    rng = np.random.default_rng(1)
    a, b = rng.random(200), rng.random(200)
    assert evidence.bootstrap_difference(a, b) == evidence.bootstrap_difference(a, b)
    assert evidence.bootstrap_difference(a, b, np.mean) != evidence.bootstrap_difference(a, b, np.mean, seed=1)


def test_bootstrap_chunks_give_the_interval_of_one_draw(monkeypatch):
    a, b = np.random.default_rng(2).random((2, 50))
    whole = evidence.bootstrap_difference(a, b, np.mean, rounds=100)
    monkeypatch.setattr(evidence, "_CHUNK_ELEMENTS", 50 * 7)  # chunks of 7 rounds, the last one of 2
    assert evidence.bootstrap_difference(a, b, np.mean, rounds=100) == whole


def test_an_obvious_shift_is_beyond_noise_with_its_sign():
    a = np.random.default_rng(3).random(300) * 0.01
    up = evidence.bootstrap_difference(a, a + 0.5, np.mean)
    assert up.beyond_noise and up.sign == 1 and up.estimate == pytest.approx(0.5)
    down = evidence.bootstrap_difference(a + 0.5, a)
    assert down.beyond_noise and down.sign == -1 and down.high < 0


def test_identical_values_are_within_noise():
    a = np.random.default_rng(4).random(100)
    interval = evidence.bootstrap_difference(a, a.copy())
    assert (interval.estimate, interval.low, interval.high) == (0.0, 0.0, 0.0)
    assert not interval.beyond_noise and interval.sign == 0
    assert interval.words() == "+0.000 [0.000, 0.000]: within noise"


def test_interval_words_and_dict():
    interval = evidence.Interval(estimate=0.035, low=0.012, high=0.061, level=0.95)
    assert interval.words() == "+0.035 [0.012, 0.061]: beyond noise"
    assert evidence.Interval(-0.01, -0.03, 0.01, 0.95).words(".2f") == "-0.01 [-0.03, 0.01]: within noise"
    assert interval.to_dict() == {"estimate": 0.035, "low": 0.012, "high": 0.061, "level": 0.95, "floor": 0.0,
                                  "beyond_noise": True, "sign": 1, "words": interval.words()}


def test_a_change_of_the_largest_error_under_one_output_step_is_not_beyond_noise():
    """One image is the worst for both models: most resamples repeat the estimate, so the interval excludes 0 for a
    change of half a grid step; the floor keeps it within noise, and a fifth off every image's error is beyond."""
    rng = np.random.default_rng(3)
    reference = np.zeros((400, 10))
    a = np.abs(rng.normal(0, 0.01, (400, 10)))
    a[24, 3] = 0.30                                   # image 24: the worst for both models
    close, far = a * 0.98, a * 0.8                    # every image a little better; every image a fifth better
    close[24, 3] = a[24, 3] - evidence.OUTPUT_STEP / 2
    raw = evidence.bootstrap_difference(evidence.per_image_max_abs_error(reference, a),
                                        evidence.per_image_max_abs_error(reference, close))
    assert raw.beyond_noise                           # without the floor: "beyond noise" for half a step
    small = evidence.max_error_change(reference, a, close)
    assert not small.beyond_noise and small.under_floor and small.sign == 0
    assert "under one output step" in small.words() and small.to_dict()["floor"] == evidence.OUTPUT_STEP
    large = evidence.max_error_change(reference, a, far)
    assert large.beyond_noise and large.sign == -1 and not large.under_floor


def test_bad_bootstrap_input_names_what_was_expected():
    with pytest.raises(ValueError, match="a_values has 3, b_values has 2"):
        evidence.bootstrap_difference([1.0, 2.0, 3.0], [1.0, 2.0])
    with pytest.raises(ValueError, match="a_values: expected a non-empty 1-D array"):
        evidence.bootstrap_difference([], [])
    with pytest.raises(ValueError, match="finite"):
        evidence.bootstrap_difference([1.0, np.nan], [1.0, 2.0])
    with pytest.raises(ValueError, match="0 < level < 1"):
        evidence.bootstrap_difference([1.0], [2.0], level=95)


def test_loss_interval_is_reference_minus_model():
    labels = np.zeros(400, dtype=int)
    reference = labels.copy()  # always right
    model = labels.copy()
    model[:100] = 1  # wrong on a quarter of the images
    loss = evidence.loss_interval(labels, reference, model)
    assert loss.estimate == pytest.approx(0.25) and loss.sign == 1
    gain = evidence.loss_interval(labels, model, reference)
    assert gain.estimate == pytest.approx(-0.25) and gain.sign == -1
    with pytest.raises(ValueError, match="reference_predicted has 399"):
        evidence.loss_interval(labels, reference[1:], model)


def test_per_image_max_abs_error_by_hand():
    ref = [[0.7, 0.2, 0.1], [0.5, 0.5, 0.0]]
    got = [[0.6, 0.35, 0.05], [0.5, 0.5, 0.0]]
    errors = evidence.per_image_max_abs_error(ref, got)
    assert errors.dtype == np.float64
    np.testing.assert_allclose(errors, [0.15, 0.0])
    with pytest.raises(ValueError, match=r"of one shape, got shapes \(2, 3\) and \(2, 2\)"):
        evidence.per_image_max_abs_error(ref, [[0.1, 0.9], [0.2, 0.8]])


def test_timing_median_and_spread():
    t = evidence.timing([0.012, 0.010, 0.011, 0.0105, 0.0115])  # quartiles: 0.0105 and 0.0115
    assert (t.median, t.rounds) == (0.011, 5) and (t.low, t.high) == pytest.approx((0.0105, 0.0115))
    assert t.spread == pytest.approx(0.001 / 0.011)
    assert t.words() == "0.011 s (median of 5, spread 9 %)"
    assert t.words("ms", ".1f") == "0.0 ms (median of 5, spread 9 %)"
    assert t.to_dict() == {"median": 0.011, "low": t.low, "high": t.high, "rounds": 5, "spread": t.spread}
    slowed = evidence.timing([0.010, 0.010, 0.010, 0.010, 0.500])  # one round slowed by another process
    assert slowed.median == slowed.high == 0.010 and slowed.spread == 0.0
    assert evidence.timing([0.5]).spread == 0.0
    with pytest.raises(ValueError, match="samples: expected a non-empty 1-D array of seconds"):
        evidence.timing([])
    with pytest.raises(ValueError, match="non-negative seconds"):
        evidence.timing([0.1, -0.1])


def test_repeat_times_a_trivial_function():
    calls = []
    t = evidence.repeat(lambda: calls.append(1), rounds=3)
    assert len(calls) == 3 and t.rounds == 3
    assert 0 <= t.low <= t.median <= t.high < 1
    with pytest.raises(ValueError, match="rounds: expected at least 1"):
        evidence.repeat(lambda: None, rounds=0)


def test_ratio_of_medians_and_its_range():
    a, b = evidence.timing([2.0, 3.0, 4.0]), evidence.timing([1.0, 1.5, 2.0])
    assert evidence.ratio(a, b) == pytest.approx((2.0, 2.5 / 1.75, 3.5 / 1.25))  # quartiles 2.5-3.5, 1.25-1.75
    assert math.isclose(evidence.ratio(b, a)[0], 0.5)
    with pytest.raises(ValueError, match="positive timings"):
        evidence.ratio(a, evidence.timing([0.0, 0.0, 1.0]))


def test_in_turn_times_each_function_once_a_round_in_turn():
    order: list[str] = []
    samples = evidence.in_turn({"a": lambda: order.append("a"), "b": lambda: order.append("b")}, 3)
    assert order == ["a", "b"] * 3
    assert list(samples) == ["a", "b"] and all(len(s) == 3 and min(s) >= 0 for s in samples.values())
