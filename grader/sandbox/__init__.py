"""Run student code in a child process: time, CPU, memory and output limits, a scrubbed environment.

Student code runs only inside an isolation layer: bubblewrap (``/usr/bin/bwrap``) gives the child
a read-only filesystem, a private ``/tmp``, no network and its own PID namespace, and only its
scratch copy is writable. Where bubblewrap does not work, ``run`` refuses: nothing the student
wrote is started, and the result is a ``refused`` ``ChildResult`` whose message names the fix.
Only an explicit opt-in (``allow_unsafe()``, the CLI's ``--unsafe-no-sandbox``, or
``GRADER_UNSAFE_NO_SANDBOX=1`` where a container is the boundary) runs it with rlimits alone.
``sandbox_kind()`` says which applies. The child hands back ``result.json`` and ``.npz`` files;
nothing is unpickled here.

One module per concern: ``policy`` (the isolation policy and the limits), ``bwrap`` (the bubblewrap command
line and the child's environment), ``spawn`` (one run: its folder, its process, what came back), ``plan``
(one grader's runs: the fork server, the runs planned ahead, the record) and ``secret`` (the instructor's).
The functions here act on the current grading state (``grader.state.current()``): the grade being run, else
the caller's own.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from grader.forkserver import ForkServer
from grader.sandbox.bwrap import BWRAP, CHILD, PROJECT_ROOT, bwrap_prefix, scrubbed_env
from grader.sandbox.plan import Request, Runs
from grader.sandbox.policy import NO_BWRAP_ENV, REFUSED, REFUSED_NOTE, UNSAFE_ENV, Limits, Policy
from grader.sandbox.secret import SECRET_ENV, SECRET_FILE_ENV, secret
from grader.sandbox.spawn import CHILD_USER_ENV, ChildResult, child_user

__all__ = ["BWRAP", "CHILD", "CHILD_USER_ENV", "NO_BWRAP_ENV", "PROJECT_ROOT", "REFUSED", "REFUSED_NOTE",
           "SECRET_ENV", "SECRET_FILE_ENV", "UNSAFE_ENV", "ChildResult", "Limits", "Policy", "Request", "Runs",
           "allow_unsafe", "bwrap_available", "bwrap_prefix", "child_user", "end_plan", "fork_server", "isolation",
           "plan", "run", "sandbox_kind", "scrubbed_env", "secret", "take_runs", "unsafe_allowed", "warm_up"]


def _runs() -> Runs:
    from grader import state  # deferred: grader.state holds this package's Runs (a cycle at module level)

    return state.current().runs


def run(submission_root: Path, task: dict, inputs: dict | None = None, limits: Limits | None = None,
        isolate: bool | None = None) -> ChildResult:
    """``Runs.run`` of the current grading state."""
    return _runs().run(submission_root, task, inputs, limits, isolate)


def plan(requests: list[Request]) -> None:
    _runs().plan(requests)


def end_plan() -> None:
    _runs().end_plan()


def take_runs() -> list[str]:
    return _runs().take()


def warm_up() -> None:
    _runs().warm_up()


def fork_server(wait: bool = True) -> ForkServer | None:
    return _runs().fork_server(wait)


def bwrap_available() -> bool:
    return _runs().bwrap_available()


def isolation(unsafe: bool | None = None) -> str:
    """How student code runs here: ``bubblewrap``, ``unsafe`` (no isolation, accepted) or ``refused``."""
    return _runs().isolation(unsafe)


def sandbox_kind(unsafe: bool | None = None) -> str:
    return _runs().describe(unsafe)


def allow_unsafe(allowed: bool | None = True) -> None:
    """Run student code with rlimits alone where bubblewrap does not work (``None``: the environment decides)."""
    runs = _runs()
    runs.policy = replace(runs.policy, unsafe=allowed)


def unsafe_allowed() -> bool:
    return _runs().policy.unsafe_allowed()
