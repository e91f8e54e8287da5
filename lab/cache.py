"""A cache the lab's functions consult themselves: a context variable, as ``lab.kernels.computing_as`` keeps the family.

``lab.compare.predict`` and ``session``, ``lab.data.load_split``, ``calibration_set`` and ``fixtures_dir``, and
``lab.schemas.validate`` each hand their work to ``through(name, compute, *args)``. Outside ``using(cache)`` that
computes; inside, ``cache.call(name, compute, args)`` answers (the grader's ``grader.reuse.Reuse``). The function
itself asks, so how a caller imported it changes nothing: ``from lab.compare import predict`` is cached too.
"""
from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator
from typing import Any, Protocol

# The names the lab's functions pass to ``through``: what a cache dispatches on
PREDICT = "lab.compare.predict"
SESSION = "lab.compare.session"
LOAD_SPLIT = "lab.data.load_split"
CALIBRATION_SET = "lab.data.calibration_set"
FIXTURES_DIR = "lab.data.fixtures_dir"
VALIDATE = "lab.schemas.validate"
KEPT = "lab.cache.kept"
NAMES = (PREDICT, SESSION, LOAD_SPLIT, CALIBRATION_SET, FIXTURES_DIR, VALIDATE, KEPT)


class Cache(Protocol):
    """What ``using`` accepts: one method that answers a call of one of the ``NAMES``."""

    def call(self, name: str, compute: Callable[..., Any], args: tuple) -> Any: ...


_CURRENT: contextvars.ContextVar[Cache | None] = contextvars.ContextVar("lab_cache", default=None)


def current() -> Cache | None:
    """The cache of the block being run (``using``), or None."""
    return _CURRENT.get()


def through(name: str, compute: Callable[..., Any], *args: Any) -> Any:
    """``compute(*args)``, or the current cache's answer for it."""
    cache = _CURRENT.get()
    return compute(*args) if cache is None else cache.call(name, compute, args)


def kept(key: tuple, compute: Callable[[], Any]) -> Any:
    """``compute()``, or the current cache's value under ``key`` (the grader's worker keeps, for its life, what
    depends on the fixtures and the variant alone: ``lab.variant.per_variant``). ``compute`` is handed the key."""
    return through(KEPT, lambda _key: compute(), key)


@contextlib.contextmanager
def using(cache: Cache | None) -> Iterator[None]:
    """Within the block, the lab's cached functions ask ``cache`` (None: no cache)."""
    token = _CURRENT.set(cache)
    try:
        yield
    finally:
        _CURRENT.reset(token)
