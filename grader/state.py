"""A grading process's state in one object: made once per worker, passed down, never a module global.

A ``GraderState`` holds what one grader keeps between hand-ins: its isolation policy and limits (``policy``), the
fixture caches and each hand-in's own (``reuse``, the ``lab.cache`` of its grades), and its student-code runs
(``runs``: the fork server, the runs planned ahead, the record of how each ran). Two states in one process grade
independently (``tests/test_grader_state.py``).

``grader.core.grade(path, state=...)`` takes one; the lesson modules reach theirs through ``current()``, which
``active()`` sets for the length of a grade (a context variable, as ``lab.kernels.computing_as`` keeps the kernel
family). Outside any grade, ``current()`` is the calling context's own state, made on first use: a batch worker's
(one per process or thread), or the command line's.
"""
from __future__ import annotations

import contextlib
import contextvars
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


def current() -> GraderState:
    """The state of the grade being run, else the calling context's own (made, and kept in the context, on first
    use)."""
    state = _CURRENT.get()
    if state is None:
        state = GraderState()
        _CURRENT.set(state)
    return state


def for_policy(policy: Policy) -> GraderState:
    """The calling context's state when it has ``policy``; else a new one with it, kept in the context instead (the
    old one's fork server stopped). A batch worker makes its state so, on its first job."""
    state = _CURRENT.get()
    if state is not None and state.policy == policy:
        return state
    if state is not None:
        state.close()
    state = GraderState(policy)
    _CURRENT.set(state)
    return state
