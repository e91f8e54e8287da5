"""Named operating conditions for acceptance.

Each scenario is a pure function on the deployed preprocessing path: it takes
pixels in [0, 1] (float32 [N, 64]) and returns pixels in [0, 1], the way the
camera would deliver the same digits under another condition. Randomness is
seeded, so a scenario is the same every run. Conditions in ``BEYOND_UNIT_RANGE``
(flash) deliberately leave [0, 1]: the deployed path divides by 16 and never clips.

Also here, because the scenario checks and the recipe both read it: which calibration positions a selection may
draw from (``pool_positions``) and which it may not (``TUNING``); the tuning images are ``recipe.tuning_set``'s.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

POOL_SIZE = 300  # positions 0..299 of the calibration split: the pool a calibration selection draws from
# positions 300..359, which a selection may not use. They were the tuning images; those are now 400 images no
# calibration split holds, the same for every variant (``recipe.tuning_set``, ``lab.variant.tuning_positions``)
TUNING = slice(POOL_SIZE, 360)


def pool_positions() -> range:
    """The positions of the calibration split a selection may use: all but the ``TUNING`` images held aside."""
    return range(POOL_SIZE)


def daylight(x: np.ndarray, seed: int = 0) -> np.ndarray:
    """As deployed: bright, centred, clean digits. The identity."""
    return np.asarray(x, np.float32).copy()


def dim(x: np.ndarray, seed: int = 0) -> np.ndarray:
    """Dusk: the whole scene at 60 % brightness."""
    return (np.asarray(x, np.float32) * np.float32(0.6)).astype(np.float32)


def low_contrast(x: np.ndarray, seed: int = 0) -> np.ndarray:
    """Fog or a grey background: paper at 0.35, strokes at most 0.85."""
    return (np.float32(0.35) + np.float32(0.5) * np.asarray(x, np.float32)).astype(np.float32)


def shifted(x: np.ndarray, seed: int = 0) -> np.ndarray:
    """The digit sits one pixel right and one pixel down in the 8x8 frame."""
    img = np.asarray(x, np.float32).reshape(-1, 8, 8)
    out = np.zeros_like(img)
    out[:, 1:, 1:] = img[:, :-1, :-1]
    return out.reshape(-1, 64)


def noisy(x: np.ndarray, seed: int = 0) -> np.ndarray:
    """Sensor noise: Gaussian, sigma 0.15, clipped back to [0, 1]."""
    rng = np.random.default_rng(seed)
    x = np.asarray(x, np.float32)
    return np.clip(x + rng.normal(0.0, 0.15, size=x.shape).astype(np.float32), 0, 1).astype(np.float32)


SCENARIOS: dict[str, Callable[..., np.ndarray]] = {
    "daylight": daylight,
    "dim": dim,
    "low_contrast": low_contrast,
    "shifted": shifted,
    "noisy": noisy,
}


def apply(name: str, x: np.ndarray, seed: int = 0) -> np.ndarray:
    """Apply the named scenario to preprocessed pixels."""
    if name not in SCENARIOS:
        raise ValueError(f"unknown scenario {name!r}; expected one of {sorted(SCENARIOS)}")
    return SCENARIOS[name](x, seed)


def describe() -> dict[str, str]:
    """Scenario name -> its one-line description."""
    return {name: (fn.__doc__ or "").strip().splitlines()[0] for name, fn in SCENARIOS.items()}


FLASH_GAIN = 1.75
"""How far a flash overexposes. At 1.5 the daylight draft's flash defect was about one image in 100 (4 or 5 confident
changes on the 400 tuning images), right at the verdict's tolerance, so a student's variant could pass or fail it; at
1.75 it measured 6 for the reference and 6 students' variants, the fixed selection's candidates 3 or fewer."""


def flash(x: np.ndarray, seed: int = 0) -> np.ndarray:
    """Camera flash: strokes overexposed to 1.75 x; the deployed path (raw / 16) never clips, so pixels reach 1.75."""
    return (np.asarray(x, np.float32) * np.float32(FLASH_GAIN)).astype(np.float32)


BEYOND_UNIT_RANGE: dict[str, Callable[..., np.ndarray]] = {"flash": flash}
"""Conditions whose pixels leave [0, 1]: the deployed preprocessing divides by 16 and does not clip."""


def acceptance_conditions() -> dict[str, Callable[..., np.ndarray]]:
    """Every named condition a release is accepted against: ``SCENARIOS`` plus ``BEYOND_UNIT_RANGE``."""
    return {**SCENARIOS, **BEYOND_UNIT_RANGE}
