"""What one grade runs with, in one object you can see: ``GradingRun``, passed to every check as ``ctx.grading``.

A ``GraderState`` is what a grading process keeps between hand-ins: its student-code runs (``runs``: the isolation
policy, the fork server, the runs planned ahead) and its caches (``reuse``, the ``lab.cache`` of its grades). Two
states in one process grade independently (``tests/test_grader_state.py``).

A ``GradingRun`` is one grade's settings: the state (its ``sandbox`` and its ``cache``), the course (prices and how
predictions are graded), the limits of each student-code run, the hand-in's variant and kernel family. Frozen, made
by ``grader.core.grade`` and handed to the checks. ``active()`` is the one place that sets what the lab's own
functions consult (``lab.cache``, ``lab.variant``, ``lab.kernels``: each a context variable of the lab's) and the
grader's one context variable, ``_CURRENT``, read by ``check`` for the course's prices and by the ``grader.sandbox``
functions. Outside any grade, ``current()`` is the calling thread's own state (``_THREAD``, made on first use): a
batch worker's (``for_policy``), or the command line's. A thread keeps it, not a context variable: Dask runs each
task in a copy of its event loop's context, where a state set by one job would be gone (its fork server still
running) by the next.
"""
from __future__ import annotations

import contextlib
import contextvars
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

from grader.course import DEFAULT, Course
from grader.reuse import Reuse
from grader.sandbox.plan import Runs
from grader.sandbox.policy import Limits, Policy
from lab import cache, kernels, variant


class GraderState:
    """One grader: ``policy`` (isolation and limits), ``reuse`` (caches), ``runs`` (student code)."""

    def __init__(self, policy: Policy = Policy()):
        self.reuse = Reuse()
        self.runs = Runs(policy)

    @property
    def policy(self) -> Policy:
        return self.runs.policy

    @policy.setter
    def policy(self, policy: Policy) -> None:
        self.runs.policy = policy

    def active(self) -> contextlib.AbstractContextManager[GradingRun]:
        """Within the block, ``current()`` is this state: a ``GradingRun`` of it with the course's defaults."""
        return GradingRun(self, limits=self.policy.limits).active()

    def close(self) -> None:
        """Stop what this state started (its fork server)."""
        self.runs.close()


@dataclass(frozen=True)
class GradingRun:
    """One grade: the state it runs in, the course, each student-code run's limits, the variant and the family."""

    state: GraderState
    course: Course = DEFAULT
    limits: Limits = field(default_factory=Limits)
    variant: tuple | None = None  # ``lab.variant.using``'s (student, draw); None: as it is
    family: str | None = None  # the kernel family numbers are computed as (``lab.kernels``); None: as it is

    @property
    def sandbox(self) -> Runs:
        """Where student code runs: ``ctx.grading.sandbox.run(*request)``."""
        return self.state.runs

    @property
    def cache(self) -> Reuse:
        return self.state.reuse

    @property
    def prices(self) -> tuple[tuple[str, str, float], ...]:
        """The course's (part, check, points) prices, in place of rubric.toml's."""
        return self.course.prices

    @contextlib.contextmanager
    def active(self) -> Iterator[GradingRun]:
        """Within the block this run is current, and the lab's functions compute with its cache, variant and family."""
        token = _CURRENT.set(self)
        try:
            with contextlib.ExitStack() as lab_state:
                lab_state.enter_context(cache.using(self.state.reuse))
                if self.variant is not None:
                    lab_state.enter_context(variant.using(*self.variant))
                if self.family is not None:
                    lab_state.enter_context(kernels.computing_as(self.family))
                yield self
        finally:
            _CURRENT.reset(token)


# The grader's one context variable: the grade being run (``GradingRun.active``)
_CURRENT: contextvars.ContextVar[GradingRun | None] = contextvars.ContextVar("grading_run", default=None)


class _ThreadsState(threading.local):
    """Where a thread keeps its own state between grades: the one slot, per thread (see the module docstring)."""

    state: GraderState | None = None


_THREAD = _ThreadsState()


def current_run() -> GradingRun:
    """The grade being run, else a run of the calling thread's own state with the course's defaults."""
    run = _CURRENT.get()
    return run if run is not None else GradingRun(_own())


def current_course() -> Course:
    """The course of the grade being run; the defaults outside one (``check`` prices a check with it)."""
    run = _CURRENT.get()
    return run.course if run is not None else DEFAULT


def current() -> GraderState:
    """The state of the grade being run, else the calling thread's own (made on first use)."""
    run = _CURRENT.get()
    return run.state if run is not None else _own()


def _own() -> GraderState:
    state = _THREAD.state
    if state is None:
        state = _THREAD.state = GraderState()
    return state


def for_policy(policy: Policy) -> GraderState:
    """The calling thread's state when it has ``policy``; else a new one with it, kept by the thread instead (the
    old one's fork server stopped). A batch worker makes its state so, on its first job, and keeps it."""
    state = _THREAD.state
    if state is not None and state.policy == policy:
        return state
    if state is not None:
        state.close()
    state = _THREAD.state = GraderState(policy)
    return state
