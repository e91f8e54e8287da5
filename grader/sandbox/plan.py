"""One grader's student-code runs: its isolation, its fork server, the runs planned ahead and the record of each run.

A grade plans the runs its checks will ask for (``plan``), in the order they ask. The first starts at once, and
each next one as soon as the one before it has been handed over, so the fork server works on one run while the
grader checks the lessons in between: one run at a time, each in its own fresh folder, and the server's folder
emptied after each. A run is recorded (``take``) when a check asks for it; one nobody asked for by the end of the
grade (``end_plan``) is dropped, and stopped if it still runs. A ``Runs`` belongs to one grading state
(``grader.state``); nothing of it is shared between two.
"""
from __future__ import annotations

import atexit
import hashlib
import json
import multiprocessing.util
import os
import shutil
import tempfile
import time
from pathlib import Path

from grader.forkserver import ForkServer
from grader.sandbox.bwrap import bwrap_prefix, scrubbed_env
from grader.sandbox.policy import REFUSED, Limits, Policy, bwrap_works, describe
from grader.sandbox.spawn import ChildResult, Prepared, collect, prepare, spawn

Request = tuple  # (submission root, task, inputs, limits): what ``Runs.run`` is called with
NO_FORKSERVER_ENV = "GRADER_NO_FORKSERVER"


def request_key(submission_root: Path, task: dict, inputs: dict | None, limits: Limits) -> tuple:
    """A request's identity: the folder, the task, every input array's bytes, the limits."""
    import numpy as np  # deferred: numpy (about 0.2 s); the command line imports this module and needs none

    arrays = tuple((name, k, a.dtype.str, a.shape, hashlib.sha256(np.ascontiguousarray(a).data).hexdigest())
                   for name, group in sorted((inputs or {}).items())
                   for k, a in sorted((k, np.asarray(v)) for k, v in group.items()))
    return str(Path(submission_root)), json.dumps(task, sort_keys=True), arrays, limits


def _close(server: ForkServer) -> None:
    server.close()
    shutil.rmtree(server.base, ignore_errors=True)


class Runs:
    """Student-code runs under one ``Policy``: bubblewrap probed once, one fork server, the plan, the record."""

    def __init__(self, policy: Policy = Policy()):
        self.policy = policy
        self.record: list[str] = []  # each run's isolation, in order: ``take`` hands them over
        self._bwrap_ok: bool | None = None
        self._server: ForkServer | None = None
        self._plan: list[tuple[tuple, Request]] = []  # (key, request) planned, not started yet
        self._running: tuple[tuple, Prepared, ForkServer] | None = None  # started in the server, not answered yet
        self._finished: dict = {}  # key -> ChildResult of a planned run answered before a check asked for it

    # --- isolation ---
    def bwrap_available(self) -> bool:
        if not self.policy.bubblewrap_wanted():
            return False
        if self._bwrap_ok is None:
            self._bwrap_ok = bwrap_works()
        return self._bwrap_ok

    def isolation(self, unsafe: bool | None = None) -> str:
        """How student code runs here: ``bubblewrap``, ``unsafe`` (no isolation, accepted) or ``refused``."""
        return self.policy.kind(self.bwrap_available(), unsafe)

    def describe(self, unsafe: bool | None = None) -> str:
        return describe(self.isolation(unsafe))

    def take(self) -> list[str]:
        """Every run recorded since the last ``take``, by isolation."""
        runs, self.record = self.record, []
        return runs

    # --- the fork server ---
    def warm_up(self) -> None:
        """Start the fork server now, without waiting for its preload, where student code will run in it: its imports
        then overlap intake and the model checks (on another core) instead of delaying the first run."""
        if self.isolation() == "bubblewrap":
            self.fork_server(wait=False)

    def fork_server(self, wait: bool = True) -> ForkServer | None:
        """The preloaded fork server (``grader.forkserver``), or None where it is not used; ``wait=False`` returns it
        before its preload is done (its first ``run`` waits)."""
        if os.environ.get(NO_FORKSERVER_ENV) or not self.bwrap_available():
            return None
        if self._server is None or not self._server.alive():
            base = Path(tempfile.mkdtemp(prefix="grader-fs-"))
            try:
                self._server = ForkServer(base, scrubbed_env(str(base)), bwrap_prefix(base), wait=wait)
            except (OSError, RuntimeError):
                shutil.rmtree(base, ignore_errors=True)
                return None
            atexit.register(_close, self._server)
            # a process-pool worker leaves through multiprocessing, which skips atexit but runs its finalizers
            multiprocessing.util.Finalize(None, _close, args=(self._server,), exitpriority=10)
        return self._server

    def close(self) -> None:
        """Stop the fork server (a new one starts if this state runs student code again)."""
        self.end_plan()
        if self._server is not None:
            _close(self._server)
            self._server = None

    # --- one run ---
    def run(self, submission_root: Path, task: dict, inputs: dict | None = None, limits: Limits | None = None,
            isolate: bool | None = None) -> ChildResult:
        """Copy the submission's ``.py`` files into a fresh scratch folder, run ``task`` there, collect plain data.

        ``isolate`` left as None: under bubblewrap (in the fork server when there is one, else a fresh process);
        without bubblewrap, refused (status ``refused``, nothing started) unless the policy accepts running it
        unsafe. ``isolate=True`` forces a fresh bubblewrap process; ``isolate=False`` is the caller's explicit
        choice of rlimits alone (tests and benchmarks). A planned run is not started again: its result is handed
        over. ``limits``: the policy's when None.
        """
        limits = self.policy.limits if limits is None else limits
        server = None
        if isolate is None:
            kind = self.isolation()
            if kind == "refused":
                self.record.append(kind)
                return ChildResult("refused", message=REFUSED)
            isolate = kind == "bubblewrap"
            if isolate:
                planned = self._claim(submission_root, task, inputs, limits)
                if planned is not None:
                    self.record.append("bubblewrap")
                    return planned
                server = self.fork_server()
        self.record.append("bubblewrap" if isolate else "unsafe")
        prepared = prepare(submission_root, task, inputs, limits, isolate, server.base if server else None)
        start = time.monotonic()
        code, timed_out = None, None
        try:
            if server is not None:
                try:
                    code, timed_out = server.run(prepared.scratch, prepared.task_file, prepared.err_path, limits)
                except RuntimeError:
                    timed_out = None  # the server died (perhaps killed by this run): run it the slow way
            if timed_out is None:
                code, timed_out = spawn(prepared, isolate)
        except BaseException:
            shutil.rmtree(prepared.base, ignore_errors=True)
            raise
        result = collect(prepared, code, timed_out, time.monotonic() - start)
        self._start_next()
        return result

    # --- runs planned ahead ---
    def plan(self, requests: list[Request]) -> None:
        """The runs this grade's checks will ask for, in order (``run``'s arguments); started ahead where the fork
        server runs them (bubblewrap works), else ignored: each run then starts when it is asked for."""
        self.end_plan()
        if self.isolation() != "bubblewrap" or self.fork_server(wait=False) is None:
            return
        self._plan.extend((request_key(*r), r) for r in requests)
        self._start_next()

    def _start_next(self) -> None:
        """Start the next planned run if none is running and the fork server is ready (never waits for it)."""
        if self._running is not None or not self._plan:
            return
        server = self.fork_server(wait=False)
        if server is None or not server.ready_now():
            return  # the next ask starts it (the server's preload is still running)
        key, (root, task, inputs, limits) = self._plan.pop(0)
        try:
            prepared = prepare(root, task, inputs, limits, True, server.base)
        except OSError:
            self._plan.clear()
            return
        try:
            server.submit(prepared.scratch, prepared.task_file, prepared.err_path, limits)
        except RuntimeError:
            shutil.rmtree(prepared.base, ignore_errors=True)
            self._plan.clear()
            return
        self._running = (key, prepared, server)

    def _answer_running(self) -> tuple[tuple, ChildResult]:
        """Wait for the planned run in the fork server; its key and what it handed back."""
        assert self._running is not None  # only called with a run in the server
        key, prepared, server = self._running
        self._running = None
        try:
            code, timed_out, seconds = server.answer(prepared.scratch, prepared.limits)
        except RuntimeError:  # the server died (perhaps killed by this run): run it the slow way, as run() does
            start = time.monotonic()
            code, timed_out = spawn(prepared, True)
            seconds = time.monotonic() - start
        return key, collect(prepared, code, timed_out, seconds)

    def _claim(self, submission_root: Path, task: dict, inputs: dict | None, limits: Limits) -> ChildResult | None:
        """The result of this request if it was planned (waiting for it if it still runs), else None.

        Any other planned run still running is answered first (one run at a time), and this request, if planned
        for later, is taken off the plan: the caller runs it now.
        """
        if not (self._plan or self._running or self._finished):
            return None
        key = request_key(submission_root, task, inputs, limits)
        if key in self._finished:
            result = self._finished.pop(key)
            self._start_next()
            return result
        if self._running is not None:
            done, result = self._answer_running()
            if done == key:
                self._start_next()
                return result
            self._finished[done] = result
        for i, (planned, _) in enumerate(self._plan):
            if planned == key:
                del self._plan[i]
                break
        return None

    def end_plan(self) -> None:
        """Drop what was planned and not asked for: a finished result is deleted, a run still going is stopped."""
        self._plan.clear()
        self._finished.clear()
        if self._running is not None:
            key, prepared, server = self._running
            if server.done():
                self._answer_running()
            else:  # nobody asked for it and it still runs (a reader that never ends): stop the server, a new one starts
                self._running = None
                server.close()
                shutil.rmtree(prepared.base, ignore_errors=True)
