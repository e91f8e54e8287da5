"""Whether a difference between two models on the same images is beyond noise.

Accuracy: the images one model fixes and the other breaks, with an exact McNemar test. A per-image error (max or
mean): a paired bootstrap interval over images, seeded so every machine prints the same interval. Timings: the
median of repeated runs with their spread. Pure numpy: no model is run here.
"""
from __future__ import annotations

import math
import time
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

ALPHA = 0.05  # a difference is beyond noise when p < ALPHA / the interval excludes 0 at 1 - ALPHA
BOOTSTRAP_ROUNDS = 2000
SEED = 0  # bootstraps are seeded: the same data give the same interval on every machine
OUTPUT_STEP = 1 / 255
"""One step of an 8-bit probability grid (QDQ's Softmax output; QOperator's is 1/256): a change in the largest error
smaller than this is the grid's rounding, not a difference between the models, whatever the resampling says."""
_CHUNK_ELEMENTS = 5_000_000  # resampled indices held at once (rounds x images)


def _vector(name: str, values: npt.ArrayLike, what: str = "values") -> np.ndarray:
    """``values`` as a non-empty 1-D array, or a ValueError naming ``name`` and what was expected."""
    array = np.asarray(values)
    if array.ndim != 1 or array.size == 0:
        raise ValueError(f"{name}: expected a non-empty 1-D array of {what}, got shape {array.shape}")
    return array


def _same_length(**arrays: np.ndarray) -> None:
    """A ValueError naming every length when the arrays (one entry per image) differ."""
    if len({len(a) for a in arrays.values()}) > 1:
        lengths = ", ".join(f"{name} has {len(a)}" for name, a in arrays.items())
        raise ValueError(f"expected one entry per image in each array, but {lengths}")


@dataclass(frozen=True)
class Paired:
    """Two models' answers on the same images: images fixed by b (a wrong, b right) and broken by b (a right, b
    wrong)."""

    n: int
    fixed: int
    broken: int
    p_value: float

    @property
    def difference(self) -> float:
        """b's accuracy minus a's."""
        return (self.fixed - self.broken) / self.n

    @property
    def beyond_noise(self) -> bool:
        """Whether the exact test tells the difference from noise at ``ALPHA``."""
        return self.p_value < ALPHA

    def words(self) -> str:
        """One line: the counts, the verdict and the p-value."""
        if self.fixed + self.broken == 0:
            return "no image changed: within noise"
        p = "p < 0.0001" if self.p_value < 1e-4 else f"p = {self.p_value:.2g}"
        verdict = "beyond noise" if self.beyond_noise else "within noise"
        return f"{self.fixed} fixed, {self.broken} broken: {verdict} ({p})"

    def to_dict(self) -> dict[str, Any]:
        """The counts, the p-value, the difference, the verdict and its words."""
        return {"n": self.n, "fixed": self.fixed, "broken": self.broken, "p_value": self.p_value,
                "difference": self.difference, "beyond_noise": self.beyond_noise, "words": self.words()}


def paired(labels: npt.ArrayLike, a_predicted: npt.ArrayLike, b_predicted: npt.ArrayLike) -> Paired:
    """Compare a's and b's predicted class indices on the same images with the exact two-sided McNemar test."""
    y = _vector("labels", labels, "class indices")
    a = _vector("a_predicted", a_predicted, "class indices")
    b = _vector("b_predicted", b_predicted, "class indices")
    _same_length(labels=y, a_predicted=a, b_predicted=b)
    a_right, b_right = a == y, b == y
    return from_counts(len(y), int(np.sum(~a_right & b_right)), int(np.sum(a_right & ~b_right)))


def sign_test(k: int, n: int) -> float:
    """The exact two-sided binomial test of ``k`` successes in ``n`` at p = 0.5 (scipy's ``binomtest(k, n).pvalue``,
    in integers: no scipy import, about a second): twice the smaller tail, at most 1."""
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(k, n - k) + 1))
    return min(1.0, float(Fraction(2 * tail, 2 ** n)))


def from_counts(n: int, fixed: int, broken: int) -> Paired:
    """``Paired`` from the counts alone (a report's, say): the same exact test ``paired`` runs."""
    if not all(isinstance(v, int) and v >= 0 for v in (n, fixed, broken)) or fixed + broken > n:
        raise ValueError(f"expected counts 0 <= fixed + broken <= n, got n={n!r}, fixed={fixed!r}, broken={broken!r}")
    p = sign_test(fixed, fixed + broken)
    return Paired(n=n, fixed=fixed, broken=broken, p_value=p)


def paired_from_probabilities(labels: npt.ArrayLike, a_probs: npt.ArrayLike, b_probs: npt.ArrayLike) -> Paired:
    """``paired`` on each model's most probable class (probabilities of shape images x classes)."""
    a, b = np.asarray(a_probs), np.asarray(b_probs)
    for name, probs in (("a_probs", a), ("b_probs", b)):
        if probs.ndim != 2 or probs.size == 0:
            raise ValueError(f"{name}: expected a non-empty 2-D array (images x classes), got shape {probs.shape}")
    return paired(labels, a.argmax(1), b.argmax(1))


@dataclass(frozen=True)
class Interval:
    """A statistic's difference b - a with its paired bootstrap interval over images; ``floor``: the smallest
    difference that counts (``OUTPUT_STEP`` for a largest error), 0 for any."""

    estimate: float
    low: float
    high: float
    level: float
    floor: float = 0.0

    @property
    def beyond_noise(self) -> bool:
        """Whether the interval lies wholly above ``floor`` or wholly below ``-floor``."""
        return self.low > self.floor or self.high < -self.floor

    @property
    def under_floor(self) -> bool:
        """The interval excludes 0 but not the band within ``floor`` of it: a change too small to count."""
        return not self.beyond_noise and (self.low > 0 or self.high < 0)

    @property
    def sign(self) -> int:
        """+1 when b is larger beyond noise, -1 when a is, 0 within noise."""
        return 0 if not self.beyond_noise else (1 if self.low > 0 else -1)

    def words(self, fmt: str = ".3f") -> str:
        """One line: the estimate, its interval and the verdict."""
        verdict = "beyond noise" if self.beyond_noise else \
            f"within noise (its near end under one output step, {self.floor:{fmt}})" if self.under_floor \
            else "within noise"
        return f"{self.estimate:+{fmt}} [{self.low:{fmt}}, {self.high:{fmt}}]: {verdict}"

    def to_dict(self) -> dict[str, Any]:
        """The estimate, the interval, its level and floor, the verdict, the sign and the words."""
        return {"estimate": self.estimate, "low": self.low, "high": self.high, "level": self.level,
                "floor": self.floor, "beyond_noise": self.beyond_noise, "sign": self.sign, "words": self.words()}


def bootstrap_difference(a_values: npt.ArrayLike, b_values: npt.ArrayLike,
                         statistic: Callable[..., Any] = np.max, rounds: int = BOOTSTRAP_ROUNDS, seed: int = SEED,
                         level: float = 1 - ALPHA, floor: float = 0.0) -> Interval:
    """statistic(b) - statistic(a) over per-image values, with a percentile interval from resampling the images
    (the same indices for a and b); ``statistic`` must accept ``axis=1``, as np.max and np.mean do. ``floor``: the
    smallest difference that counts as beyond noise."""
    a = _vector("a_values", a_values).astype(np.float64)
    b = _vector("b_values", b_values).astype(np.float64)
    _same_length(a_values=a, b_values=b)
    if not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))):
        raise ValueError("a_values and b_values: expected finite numbers, got NaN or infinity")
    if rounds < 1 or not 0 < level < 1:
        raise ValueError(f"expected rounds >= 1 and 0 < level < 1, got rounds={rounds}, level={level}")
    n, rng = len(a), np.random.default_rng(seed)
    chunk = max(1, _CHUNK_ELEMENTS // n)
    differences = []
    for start in range(0, rounds, chunk):
        idx = rng.integers(0, n, size=(min(chunk, rounds - start), n))
        differences.append(np.asarray(statistic(b[idx], axis=1) - statistic(a[idx], axis=1), dtype=np.float64))
    tail = (1 - level) / 2
    low, high = np.quantile(np.concatenate(differences), [tail, 1 - tail])
    return Interval(estimate=float(statistic(b) - statistic(a)), low=float(low), high=float(high), level=level,
                    floor=floor)


def max_error_change(reference_probs: npt.ArrayLike, a_probs: npt.ArrayLike, b_probs: npt.ArrayLike) -> Interval:
    """b's max abs error against the reference minus a's, with its interval over images and ``OUTPUT_STEP`` as its
    floor: when one image is the worst for both models, most resamples repeat the estimate, so the interval alone
    would call a change of a fraction of a grid step beyond noise."""
    return bootstrap_difference(per_image_max_abs_error(reference_probs, a_probs),
                                per_image_max_abs_error(reference_probs, b_probs), np.max, floor=OUTPUT_STEP)


def per_image_max_abs_error(reference_probs: npt.ArrayLike, probs: npt.ArrayLike) -> np.ndarray:
    """Each image's largest absolute difference from the reference over classes, as float64."""
    ref, got = np.asarray(reference_probs, dtype=np.float64), np.asarray(probs, dtype=np.float64)
    if ref.ndim != 2 or ref.size == 0 or ref.shape != got.shape:
        raise ValueError(f"expected two non-empty 2-D arrays (images x classes) of one shape, got shapes "
                         f"{ref.shape} and {got.shape}")
    return np.abs(ref - got).max(axis=1)


def loss_interval(labels: npt.ArrayLike, reference_predicted: npt.ArrayLike, predicted: npt.ArrayLike,
                  rounds: int = BOOTSTRAP_ROUNDS, seed: int = SEED, level: float = 1 - ALPHA) -> Interval:
    """Accuracy loss (reference accuracy - model accuracy) with a paired bootstrap interval over images."""
    y = _vector("labels", labels, "class indices")
    ref = _vector("reference_predicted", reference_predicted, "class indices")
    got = _vector("predicted", predicted, "class indices")
    _same_length(labels=y, reference_predicted=ref, predicted=got)
    return bootstrap_difference(got == y, ref == y, np.mean, rounds=rounds, seed=seed, level=level)


@dataclass(frozen=True)
class Timing:
    """A timing repeated ``rounds`` times: the median decides; ``low`` and ``high``, the rounds' first and third
    quartiles, say how far to trust it (one round slowed by another process moves neither much)."""

    median: float
    low: float
    high: float
    rounds: int

    @property
    def spread(self) -> float:
        """The interquartile range of the rounds as a fraction of the median."""
        if self.high == self.low:
            return 0.0
        return (self.high - self.low) / self.median if self.median > 0 else float("inf")

    def to_dict(self) -> dict[str, Any]:
        """The median, the range, the number of rounds and the spread."""
        return {"median": self.median, "low": self.low, "high": self.high, "rounds": self.rounds,
                "spread": self.spread}

    def words(self, unit: str = "s", fmt: str = ".3g") -> str:
        """One line: the median with its unit, the rounds and the spread in percent."""
        return f"{self.median:{fmt}} {unit} (median of {self.rounds}, spread {self.spread * 100:.0f} %)"


def timing(samples: npt.ArrayLike) -> Timing:
    """The median and quartiles of measured seconds (at least one sample)."""
    s = _vector("samples", samples, "seconds").astype(np.float64)
    if not np.all(np.isfinite(s)) or np.any(s < 0):
        raise ValueError(f"samples: expected finite non-negative seconds, got {s.tolist()}")
    low, median, high = np.percentile(s, [25, 50, 75])
    return Timing(median=float(median), low=float(low), high=float(high), rounds=len(s))


def repeat(fn: Callable[[], object], rounds: int = 5) -> Timing:
    """Time ``fn()`` ``rounds`` times with ``time.perf_counter``."""
    if rounds < 1:
        raise ValueError(f"rounds: expected at least 1, got {rounds}")
    samples = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return timing(samples)


K = TypeVar("K", bound=Hashable)


def in_turn(fns: Mapping[K, Callable[[], object]], rounds: int) -> dict[K, list[float]]:
    """Each of ``fns`` timed once a round, in turn, for ``rounds`` rounds, so that a slow moment of the machine slows
    each alike: key -> its seconds, round by round."""
    samples: dict[K, list[float]] = {k: [] for k in fns}
    for _ in range(rounds):
        for k, fn in fns.items():
            start = time.perf_counter()
            fn()
            samples[k].append(time.perf_counter() - start)
    return samples


def ratio(a: Timing, b: Timing) -> tuple[float, float, float]:
    """a / b: the ratio of the medians and its range from the spreads, (a.low / b.high, a.high / b.low)."""
    if b.low <= 0:
        raise ValueError(f"b: expected positive timings to divide by, got low = {b.low}")
    return a.median / b.median, a.low / b.high, a.high / b.low
