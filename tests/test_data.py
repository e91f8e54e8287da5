"""Preprocessing, calibration sets and scenarios."""
import numpy as np
import pytest

from lab import data
from lab.lessons.lesson07_calibrate_the_deployed_representation import scenarios


def test_preprocess_maps_raw_to_unit_float32():
    raw = np.array([[0] * 32 + [16] * 16 + [8] * 16], dtype=np.uint8)
    x = data.preprocess(raw)
    assert x.dtype == np.float32 and x.shape == (1, 64)
    assert x.min() == 0.0 and x.max() == 1.0 and x[0, -1] == 0.5


def test_calibration_sets_come_from_the_same_images():
    right, narrow, wide = (data.calibration_set(k) for k in ("right", "narrow", "wide"))
    assert right.shape == narrow.shape == wide.shape == (360, 64)
    assert right.max() == 1.0
    assert narrow.max() == pytest.approx(data.NARROW_GAIN)
    assert wide.max() == 16.0
    np.testing.assert_allclose(narrow, right * data.NARROW_GAIN)
    np.testing.assert_allclose(wide, right * 16)


def test_unknown_calibration_set_names_the_choices():
    with pytest.raises(ValueError, match="narrow"):
        data.calibration_set("medium")


def test_data_sha256_ignores_batching_but_not_content():
    x = data.calibration_set("right")
    assert data.data_sha256(x) == data.data_sha256(x.copy())
    assert data.data_sha256(x) != data.data_sha256(x[::-1])


def test_row_hashes_find_shared_content():
    cal, ev = data.load_split("calibration"), data.load_split("evaluation")
    assert data.row_hashes(cal.pixels[:5]) <= data.row_hashes(cal.pixels)
    assert not data.row_hashes(cal.pixels) & data.row_hashes(ev.pixels)  # disjoint by content, not only by index
    assert len(data.row_hashes(cal.pixels)) == len(cal)  # no duplicate image inside the calibration set


@pytest.mark.parametrize("name", sorted(scenarios.SCENARIOS))
def test_every_scenario_stays_on_the_deployed_path(name):
    x = data.load_split("evaluation").pixels[:50]
    y = scenarios.apply(name, x, seed=1)
    assert y.shape == x.shape and y.dtype == np.float32
    assert y.min() >= 0.0 and y.max() <= 1.0
    np.testing.assert_array_equal(y, scenarios.apply(name, x, seed=1))  # pure and seeded
    assert scenarios.describe()[name]


def test_daylight_is_the_identity_and_others_are_not():
    x = data.load_split("evaluation").pixels[:50]
    np.testing.assert_array_equal(scenarios.apply("daylight", x), x)
    for name in set(scenarios.SCENARIOS) - {"daylight"}:
        assert not np.array_equal(scenarios.apply(name, x), x), name
