"""A grading process's state in one object: made once per worker and passed down, not spread over module globals.

A ``GraderState`` holds what one grader keeps between hand-ins: its isolation policy and limits (``policy``), the
fixture caches and each hand-in's own (``reuse``, the ``lab.cache`` of its grades), and its student-code runs
(``runs``: the fork server, the runs planned ahead, the record of how each ran). Two states in one process grade
independently (``tests/test_grader_state.py``).

``grader.core.grade(path, state=...)`` takes one; the lesson modules reach theirs through ``current()``, which
``active()`` sets for the length of a grade (a context variable, as ``lab.kernels.computing_as`` keeps the kernel
family). Outside any grade, ``current()`` is the calling thread's own state, made on first use: a batch worker's
(``for_policy``), or the command line's. It is kept by the thread, not in a context variable: Dask runs each task
in a copy of its event loop's context, where a state set by one job would be gone (with its fork server still
running) by the next. That per-thread slot (``_THREAD``) is the one module-level name that refers to grading state.
"""
from __future__ import annotations

import contextlib
import contextvars
import threading
from collections.abc import Iterator

from grader.reuse import Reuse
from grader.sandbox.plan import Runs
from grader.sandbox.policy import Policy


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

    @contextlib.contextmanager
    def active(self) -> Iterator[GraderState]:
        """Within the block, ``current()`` is this state (the lesson modules' ``sandbox.run``, say)."""
        token = _CURRENT.set(self)
        try:
            yield self
        finally:
            _CURRENT.reset(token)

    def close(self) -> None:
        """Stop what this state started (its fork server)."""
        self.runs.close()


_CURRENT: contextvars.ContextVar[GraderState | None] = contextvars.ContextVar("grader_state", default=None)


class _ThreadsState(threading.local):
    """Where a thread keeps its own state between grades: the one slot, per thread (see the module docstring)."""

    state: GraderState | None = None


_THREAD = _ThreadsState()


def current() -> GraderState:
    """The state of the grade being run, else the calling thread's own (made on first use)."""
    state = _CURRENT.get()
    if state is None:
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
