"""One run of student code: its private folder, a fresh child process (or the fork server's), what it handed back.

The child hands back ``result.json`` and ``.npz`` files; nothing is unpickled here.
"""
from __future__ import annotations

import json
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from grader.forkserver import apply_limits
from grader.sandbox.bwrap import command, scrubbed_env
from grader.sandbox.policy import Limits
from lab.schemas import loads

# An unprivileged user for student code where no bubblewrap runs (the Gradescope autograder): grader.gradescope sets
# GRADER_CHILD_USER=nobody, where the per-submission container is the isolation layer and the grader runs as root, so
# student code (run without bubblewrap) is started as that user and cannot read root's 0600 files (the instructor's
# secret, the held-out split) or write the results.
CHILD_USER_ENV = "GRADER_CHILD_USER"


@dataclass
class ChildResult:
    """What came back: ``status`` is ok, timeout, memory, crash or refused (no isolation layer: not run)."""

    status: str
    data: dict = field(default_factory=dict)
    arrays: dict = field(default_factory=dict)
    stderr: str = ""
    seconds: float = 0.0
    message: str = ""


@dataclass
class Prepared:
    """One run's private folder (``base``), its scratch copy of the student's code, its task and its limits."""

    base: Path
    scratch: Path
    task_file: Path
    out_path: Path
    err_path: Path
    inputs: tuple
    limits: Limits
    user: tuple[int, int] | None


def child_user() -> tuple[int, int] | None:
    """(uid, gid) of ``GRADER_CHILD_USER`` for student code run without bubblewrap; None when unset."""
    name = os.environ.get(CHILD_USER_ENV, "").strip()
    if not name:
        return None
    entry = pwd.getpwnam(name)
    if os.geteuid() != 0 and os.geteuid() != entry.pw_uid:
        raise RuntimeError(f"{CHILD_USER_ENV}={name}: only root can run student code as another user")
    return entry.pw_uid, entry.pw_gid


def _hand_to(user: tuple[int, int], base: Path, scratch: Path) -> None:
    """Let ``user`` reach its scratch folder (and only that) inside the grader's private ``base``."""
    os.chmod(base, 0o711)
    os.chown(scratch, *user)


def prepare(submission_root: Path, task: dict, inputs: dict | None, limits: Limits, isolate: bool,
            under: Path | None = None) -> Prepared:
    """A fresh folder (in ``under``, the fork server's, when it runs there) with the ``.py`` files, inputs and task."""
    # deferred: numpy (about 0.2 s) writes the child's arrays; the command line imports this module to say how student
    # code would run, and needs none
    import numpy as np

    base = Path(tempfile.mkdtemp(prefix="grader-child-", dir=under))
    scratch = base / "scratch"
    try:
        scratch.mkdir()
        user = None if isolate else child_user()
        if user is not None:
            _hand_to(user, base, scratch)
        for py in submission_root.glob("*.py"):
            shutil.copyfile(py, scratch / py.name)
        for name, arrays in (inputs or {}).items():
            np.savez(scratch / name, **arrays)
        task_file = scratch / "task.json"
        task_file.write_text(json.dumps(task))
    except BaseException:
        shutil.rmtree(base, ignore_errors=True)
        raise
    return Prepared(base, scratch, task_file, base / "stdout", base / "stderr", tuple(inputs or ()), limits, user)


def _tail(path: Path, cap: int) -> str:
    size = path.stat().st_size
    with open(path, "rb") as f:
        f.seek(max(0, size - min(cap, 4096)))
        return f.read().decode("utf-8", "replace")


def _arrays(prepared: Prepared) -> dict:
    """The child's ``.npz`` files (not the inputs, none over the cap), read without pickle; a bad one is left out."""
    import numpy as np  # deferred: as in prepare

    arrays = {}
    for npz in prepared.scratch.glob("*.npz"):
        if npz.name in prepared.inputs or npz.stat().st_size > prepared.limits.files:
            continue
        try:
            with np.load(npz, allow_pickle=False) as f:
                arrays.update({k: np.asarray(f[k]) for k in f.files})
        except Exception:  # noqa: BLE001 - a bad file is simply not used
            pass
    return arrays


def collect(prepared: Prepared, code: int | None, timed_out: bool, seconds: float) -> ChildResult:
    """What the child handed back (``result.json``, its ``.npz`` files), then its folder deleted."""
    limits, scratch = prepared.limits, prepared.scratch
    try:
        prepared.err_path.touch()
        stderr = _tail(prepared.err_path, limits.output)
        # One message for either limit: which of the two fires first depends on the machine's load
        # (a busy loop on a shared core reaches the wall clock first), and a grade must not.
        if timed_out or code == -signal.SIGXCPU or code == -signal.SIGKILL and seconds >= limits.cpu:
            return ChildResult("timeout", stderr=stderr, seconds=seconds,
                               message=f"stopped after reaching its time limit ({limits.cpu} s of CPU time "
                                       f"or {limits.wall:g} s of wall-clock time)")
        result_path = scratch / "result.json"
        if not result_path.is_file() or result_path.stat().st_size > limits.output:
            memory = "MemoryError" in stderr or "std::bad_alloc" in stderr
            return ChildResult("memory" if memory else "crash", stderr=stderr, seconds=seconds,
                               message=(f"ran out of memory (limit {limits.memory >> 20} MiB)" if memory else
                                        f"the child process ended with exit code {code} and no result"))
        try:
            data = loads(result_path.read_text(encoding="utf-8"))
            if not isinstance(data, dict):
                raise ValueError("not an object")
        except (ValueError, UnicodeDecodeError) as e:
            return ChildResult("crash", stderr=stderr, seconds=seconds, message=f"unreadable result ({e})")
        status = "memory" if data.get("memory") else "ok"
        return ChildResult(status, data, _arrays(prepared), stderr, seconds,
                           f"ran out of memory (limit {limits.memory >> 20} MiB)" if status == "memory" else "")
    finally:
        shutil.rmtree(prepared.base, ignore_errors=True)


def _limit(limits: Limits):
    def apply() -> None:
        apply_limits(limits.memory, limits.cpu, limits.files)
    return apply


def spawn(prepared: Prepared, isolate: bool) -> tuple[int | None, bool]:
    """One fresh child process for one prepared run: (exit code, timed out)."""
    limits, user = prepared.limits, prepared.user
    with open(prepared.out_path, "wb") as out, open(prepared.err_path, "wb") as err:
        proc = subprocess.Popen(command(prepared.scratch, prepared.task_file, isolate), cwd=prepared.scratch,
                                stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                env=scrubbed_env(str(prepared.scratch)), preexec_fn=_limit(limits),
                                start_new_session=True, user=None if user is None else user[0],
                                group=None if user is None else user[1], extra_groups=None if user is None else [])
        try:
            return proc.wait(timeout=limits.wall), False
        except subprocess.TimeoutExpired:
            return None, True
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
