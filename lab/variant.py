"""Per-student variants of the lab's data: the student's id, given once, selects which calibration images they get.

Every honest hand-in then holds models of its own (each is calibrated on its own 360 images), while every lesson
teaches the same thing: the counts (360 calibration images in batches of 36, 400 evaluation), the evaluation and
held-out splits, the FP32 model and the three sets' recipes (narrow, right, wide) are the same for everyone. Only
WHICH training images make up the calibration split changes: a variant draws its 360 from the pool of the FP32
model's training images (``fixtures/calibration-pool.npz``, never one of lesson 07's 400 tuning images,
``tuning_positions``), seeded by the id (and a draw number, 0 for every student; recorded for older workspaces).
Every lesson holds for every id, so no id needs another draw.

The variant is found the way ``lab.kernels.computing_as`` finds the kernel family: the lab's data functions ask
``current()`` themselves. Inside ``using(student)``: that student's (the grader, for each hand-in). Otherwise the
one ``activate`` set in this context (``lab.workspace.make_workspace``, from the id the workspace records: a
notebook's kernel keeps it from cell to cell), else the instructor's reference variant: exactly the committed
``calibration.npz``, the one nbval references and the lessons' prose use. The workspace is the one place a run's id
lives (no environment variable), so what a run computed and what ``lab submit`` says it computed cannot part.
"""
from __future__ import annotations

import contextlib
import contextvars
import functools
import hashlib
import re
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import numpy as np

from lab import cache
from lab.fixture_files import fixtures_dir

REFERENCE = "reference"  # the reserved id of the instructor's reference variant (as no id at all)
# Hand-ins of the reference variant by design: the instructor's own runs (instructor.workbook hands in as this)
RESERVED = frozenset({REFERENCE, "headless-run"})
STUDENT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")  # what lab submit accepts
SALT = "calibration-lab variant/1"  # changing it gives every student another variant: never, once a course runs
TUNING_COUNT = 400  # the tuning images: as many as the acceptance set, so a verdict forgives 4 images as it does
TUNING_SALT = "calibration-lab tuning/1"  # which of the pool's images are the tuning images: the same for everyone

Variant = tuple[str, int]  # (student id, draw): the draw'th seeded choice of images for that id
T = TypeVar("T")
_UNSET = object()
_CURRENT: contextvars.ContextVar[object] = contextvars.ContextVar("lab_variant", default=_UNSET)


def key(student: str | None, draw: int | None = None) -> Variant | None:
    """The variant an id selects: None for the reference variant (no id, ``""`` or a reserved id), else the id and
    its draw (``draw``, else 0)."""
    if student is None or student == "" or student in RESERVED:
        return None
    if not isinstance(student, str) or not STUDENT_ID.fullmatch(student):
        raise ValueError(f"student id {student!r}: use letters, digits, '_', '.' or '-' (at most 64), starting "
                         "with a letter or digit")
    if draw is None:
        draw = 0
    if not isinstance(draw, int) or isinstance(draw, bool) or draw < 0:
        raise ValueError(f"draw {draw!r} of student {student!r}: expected an integer >= 0")
    return (student, draw)


def current() -> Variant | None:
    """The variant the lab's data functions compute for (None: the reference variant)."""
    chosen = _CURRENT.get()
    return None if chosen is _UNSET else chosen  # type: ignore[return-value]  # always set through key()


@contextlib.contextmanager
def using(student: str | None, draw: int | None = None) -> Iterator[Variant | None]:
    """Within the block, the lab's data is ``student``'s variant (None or a reserved id: the reference)."""
    v = key(student, draw)
    token = _CURRENT.set(v)
    try:
        yield v
    finally:
        _CURRENT.reset(token)


def activate(student: str | None, draw: int | None = None) -> Variant | None:
    """From here on in this context (a notebook's kernel), the lab's data is ``student``'s variant."""
    v = key(student, draw)
    _CURRENT.set(v)
    return v


def describe(v: object = _UNSET) -> str:
    """One line for people: whose variant ``v`` is (a ``Variant`` or None; default: the current one)."""
    v = current() if v is _UNSET else v
    if v is None:
        return "the instructor's reference variant"
    if isinstance(v, tuple):
        return f"student {v[0]}'s variant" + (f" (draw {v[1]})" if v[1] else "")
    return f"{v} variant"


def seed(v: Variant) -> int:
    """The variant's seed: 64 bits of SHA-256 of the id and draw (stable across machines, Pythons and runs)."""
    student, draw = v
    return int.from_bytes(hashlib.sha256(f"{SALT}:{student}:{draw}".encode()).digest()[:8], "little")


def tuning_positions() -> np.ndarray:
    """Which of the pool's images are lesson 07's tuning images, sorted: ``TUNING_COUNT`` of those the reference
    split does not hold, chosen once by a fixed seed. The same for every variant (no draw ever calibrates on them),
    so the images that decide lesson 07's fix and release do not change from student to student."""
    return _tuning_positions(str(fixtures_dir()))


@functools.lru_cache(maxsize=4)
def _tuning_positions(folder: str) -> np.ndarray:
    with np.load(f"{folder}/calibration-pool.npz") as f:
        index = f["index"]
    with np.load(f"{folder}/calibration.npz") as f:
        reference = f["index"]
    free = np.flatnonzero(~np.isin(index, reference))
    rng = np.random.default_rng(int.from_bytes(hashlib.sha256(TUNING_SALT.encode()).digest()[:8], "little"))
    chosen = np.sort(rng.choice(free, TUNING_COUNT, replace=False))
    chosen.setflags(write=False)
    return chosen


def positions(v: Variant, pool_size: int, n: int) -> np.ndarray:
    """Which ``n`` of the pool's ``pool_size`` images make up variant ``v``'s calibration split, in the seeded draw's
    order, never a tuning image (``tuning_positions``). Not sorted: sorted, every variant's first batch was mostly
    the pool's first images, and two students' one-batch models of lesson 04 came out byte-identical."""
    held = tuning_positions()
    if held.size and held.max() >= pool_size:
        raise ValueError(f"the tuning images reach pool position {held.max()}, past the pool's {pool_size} images")
    drawable = np.setdiff1d(np.arange(pool_size), held)
    if n > drawable.size:
        raise ValueError(f"a variant draws {n} images from the {drawable.size} of the pool that are not tuning "
                         "images; the pool is too small")
    return np.random.default_rng(seed(v)).choice(drawable, n, replace=False)


def per_variant(fn: Callable[..., T]) -> Callable[..., T]:
    """``fn`` (of the fixtures and the variant alone, with hashable arguments) kept by the current ``lab.cache``
    (``cache.kept``: the grader's worker keeps one value per function, arguments and variant); computed at each call
    where no cache is in use. Each grading state keeps its own, unlike ``lru_cache``'s one store per process."""

    @functools.wraps(fn)
    def once(*args: Any) -> T:
        return cache.kept((fn.__module__, fn.__qualname__, args, current()), lambda: fn(*args))

    return once


def lru_cache(maxsize: int) -> Callable[[Callable[..., T]], Callable[..., T]]:
    """``functools.lru_cache`` keyed by the current variant as well as the arguments: for what a variant's data
    decides (the grader's truths of a lesson), so one process can compute for many students' variants. The
    result is computed inside ``using`` its variant, whichever context later asks for it."""

    def decorate(fn: Callable[..., T]) -> Callable[..., T]:
        @functools.lru_cache(maxsize=maxsize)
        def keyed(v: Variant | None, *args: Any) -> T:
            with using(*(v or (None,))):
                return fn(*args)

        @functools.wraps(fn)
        def call(*args: Any) -> T:
            return keyed(current(), *args)

        call.cache_clear = keyed.cache_clear  # type: ignore[attr-defined]  # as lru_cache's own
        return call

    return decorate
