"""The isolation policy: how student code may run on this machine, and the limits of each run.

Student code runs only inside an isolation layer (bubblewrap). Where bubblewrap does not work, a run is
refused, unless the instructor accepted running it with rlimits alone (``--unsafe-no-sandbox``, or
``GRADER_UNSAFE_NO_SANDBOX=1`` where a container is the boundary). A ``Policy`` is a value; the grading state
(``grader.state``) holds one and probes bubblewrap once.
"""
from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass, field

from grader.sandbox.bwrap import BWRAP

NO_BWRAP_ENV = "GRADER_NO_BWRAP"  # behave as if bubblewrap were not installed (tests, diagnosis)
UNSAFE_ENV = "GRADER_UNSAFE_NO_SANDBOX"  # the same as --unsafe-no-sandbox
KINDS = ("bubblewrap", "unsafe", "refused")

# What the student and the instructor read when student code was not run (check messages, a note).
REFUSED = ("the grader runs student code only inside an isolation layer, and bubblewrap (/usr/bin/bwrap) "
           "does not work on the grading machine; nothing in the hand-in caused this. Instructor: install "
           "bubblewrap (e.g. `apt-get install bubblewrap`; it needs unprivileged user namespaces) or run the "
           "grader in its container, then grade again (`grader batch ... --resume` re-grades these); or pass "
           "--unsafe-no-sandbox to run student code with your own permissions")
REFUSED_NOTE = f"Student code was not run, and the checks that need it scored 0: {REFUSED}."


@dataclass(frozen=True)
class Limits:
    """Per-child limits. ``wall`` and ``cpu`` in seconds, ``memory`` and ``output`` in bytes."""

    wall: float = 30.0
    cpu: int = 20
    memory: int = 1 << 30
    output: int = 1 << 20
    files: int = 64 << 20


@dataclass(frozen=True)
class Policy:
    """How one grader runs student code: each run's ``limits``; ``unsafe`` (None: ``GRADER_UNSAFE_NO_SANDBOX``
    decides) runs it with rlimits alone where bubblewrap does not work; ``bubblewrap=False`` grades as if it
    were not installed (None: ``GRADER_NO_BWRAP`` decides, else it is tried)."""

    limits: Limits = field(default_factory=Limits)
    unsafe: bool | None = None
    bubblewrap: bool | None = None

    def unsafe_allowed(self) -> bool:
        if self.unsafe is not None:
            return self.unsafe
        return os.environ.get(UNSAFE_ENV, "").strip().lower() in ("1", "true", "yes")

    def bubblewrap_wanted(self) -> bool:
        """Is bubblewrap to be tried at all (installed, and not switched off)?"""
        if self.bubblewrap is not None:
            return self.bubblewrap and os.path.exists(BWRAP)
        return os.path.exists(BWRAP) and not os.environ.get(NO_BWRAP_ENV)

    def kind(self, bwrap_works: bool, unsafe: bool | None = None) -> str:
        """``bubblewrap``, ``unsafe`` (no isolation, accepted) or ``refused``, given whether bubblewrap works."""
        if bwrap_works:
            return "bubblewrap"
        return "unsafe" if (self.unsafe_allowed() if unsafe is None else unsafe) else "refused"


def bwrap_works() -> bool:
    """bwrap can be installed but unusable (no user namespaces): try it (about 10 ms; a state asks once)."""
    try:
        r = subprocess.run([BWRAP, "--ro-bind", "/", "/", "--unshare-net", "--unshare-pid", "--die-with-parent",
                            "/bin/true"], capture_output=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return False
    return r.returncode == 0


def describe(kind: str) -> str:
    """What the command line says about student code under isolation ``kind``."""
    if kind == "bubblewrap":
        return "bubblewrap (read-only root, private /tmp, no network, own PID namespace) + rlimits"
    if kind == "unsafe":
        return ("NONE (--unsafe-no-sandbox): bubblewrap does not work here, and student code runs with rlimits "
                "alone, with your file permissions and your network")
    return ("NONE: bubblewrap does not work here, so student code will NOT be run and the checks that need it "
            "score 0. Install bubblewrap or run the grader in its container; --unsafe-no-sandbox accepts the risk")
