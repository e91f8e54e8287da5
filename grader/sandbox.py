"""Run student code in a child process: time, CPU, memory and output limits, a scrubbed environment.

Student code runs only inside an isolation layer: bubblewrap (``/usr/bin/bwrap``) gives the child
a read-only filesystem, a private ``/tmp``, no network and its own PID namespace, and only its
scratch copy is writable. Where bubblewrap does not work, ``run`` refuses: nothing the student
wrote is started, and the result is a ``refused`` ``ChildResult`` whose message names the fix.
Only an explicit opt-in (``allow_unsafe()``, the CLI's ``--unsafe-no-sandbox``, or
``GRADER_UNSAFE_NO_SANDBOX=1`` where a container is the boundary) runs it with rlimits alone.
``sandbox_kind()`` says which applies. The child hands back ``result.json`` and ``.npz`` files;
nothing is unpickled here.
"""
from __future__ import annotations

import atexit
import hashlib
import json
import multiprocessing.util
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from grader.forkserver import ForkServer, apply_limits
from lab.schemas import loads

CHILD = Path(__file__).resolve().with_name("child.py")
PROJECT_ROOT = CHILD.parent.parent  # grader/ and lab/ live here; the child imports lab from it
BWRAP = "/usr/bin/bwrap"
SECRET_ENV = "GRADER_SECRET"
SECRET_FILE_ENV = "GRADER_SECRET_FILE"
NO_BWRAP_ENV = "GRADER_NO_BWRAP"  # behave as if bubblewrap were not installed (tests, diagnosis)
UNSAFE_ENV = "GRADER_UNSAFE_NO_SANDBOX"  # the same as --unsafe-no-sandbox

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


@dataclass
class ChildResult:
    """What came back: ``status`` is ok, timeout, memory, crash or refused (no isolation layer: not run)."""

    status: str
    data: dict = field(default_factory=dict)
    arrays: dict = field(default_factory=dict)
    stderr: str = ""
    seconds: float = 0.0
    message: str = ""


def bwrap_available() -> bool:
    if not os.path.exists(BWRAP) or os.environ.get(NO_BWRAP_ENV):
        return False
    return _bwrap_works()


_UNSAFE: bool | None = None


def allow_unsafe(allowed: bool | None = True) -> None:
    """Run student code with rlimits alone where bubblewrap does not work (``None``: the environment decides)."""
    global _UNSAFE
    _UNSAFE = allowed


def unsafe_allowed() -> bool:
    if _UNSAFE is not None:
        return _UNSAFE
    return os.environ.get(UNSAFE_ENV, "").strip().lower() in ("1", "true", "yes")


def isolation(unsafe: bool | None = None) -> str:
    """How student code runs here: ``bubblewrap``, ``unsafe`` (no isolation, accepted) or ``refused``."""
    if bwrap_available():
        return "bubblewrap"
    return "unsafe" if (unsafe_allowed() if unsafe is None else unsafe) else "refused"


# Every student-code run of this process, by isolation: ``take_runs()`` hands them over and starts again.
_RUNS: list[str] = []


def take_runs() -> list[str]:
    runs = list(_RUNS)
    _RUNS.clear()
    return runs


_BWRAP_OK: bool | None = None


def _bwrap_works() -> bool:
    """bwrap can be installed but unusable (no user namespaces): try it once."""
    global _BWRAP_OK
    if _BWRAP_OK is None:
        try:
            r = subprocess.run([BWRAP, "--ro-bind", "/", "/", "--unshare-net", "--unshare-pid",
                                "--die-with-parent", "/bin/true"], capture_output=True, timeout=10)
            _BWRAP_OK = r.returncode == 0
        except (OSError, subprocess.SubprocessError):
            _BWRAP_OK = False
    return _BWRAP_OK


def sandbox_kind(unsafe: bool | None = None) -> str:
    kind = isolation(unsafe)
    if kind == "bubblewrap":
        return "bubblewrap (read-only root, private /tmp, no network, own PID namespace) + rlimits"
    if kind == "unsafe":
        return ("NONE (--unsafe-no-sandbox): bubblewrap does not work here, and student code runs with rlimits "
                "alone, with your file permissions and your network")
    return ("NONE: bubblewrap does not work here, so student code will NOT be run and the checks that need it "
            "score 0. Install bubblewrap or run the grader in its container; --unsafe-no-sandbox accepts the risk")


def scrubbed_env(home: str) -> dict[str, str]:
    """Only what Python needs; no secrets, tokens or proxies of the grader's environment."""
    env = {"PATH": "/usr/bin:/bin", "HOME": home, "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
           "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
           "PYTHONDONTWRITEBYTECODE": "1", "PYTHONHASHSEED": "0", "TMPDIR": home}
    for key in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):  # correctness on some CPUs, not secrets
        if key in os.environ:
            env[key] = os.environ[key]
    return env


def _limit(limits: Limits):
    def apply() -> None:
        apply_limits(limits.memory, limits.cpu, limits.files)
    return apply


def bwrap_prefix(writable: Path) -> list[str]:
    """bubblewrap arguments: read-only root, private /tmp, only ``writable`` writable, no network, own PIDs.

    The code the child runs (this project, the virtualenv, the Python install, and every site-packages folder
    on the grader's import path: a ``.pth`` file may name one outside the virtualenv) is bound back read-only
    after the private /tmp, so a checkout under /tmp still works inside the sandbox. Nothing else on the
    import path is: the current folder may hold hand-ins.
    """
    cmd = [BWRAP, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]
    libraries = [p for p in sys.path if Path(p).name in ("site-packages", "dist-packages")]
    code = {Path(p).resolve() for p in (PROJECT_ROOT, sys.prefix, sys.base_prefix, Path(sys.executable).resolve().parent,
                                         *libraries)}
    for path in sorted(code):
        if path.is_relative_to("/tmp") and path.exists():
            cmd += ["--ro-bind", str(path), str(path)]
    cmd += ["--bind", str(writable), str(writable), "--unshare-net", "--unshare-pid", "--unshare-ipc",
            "--unshare-uts", "--die-with-parent", "--new-session"]
    secret = os.environ.get(SECRET_FILE_ENV)
    if secret and os.path.isfile(secret):
        cmd += ["--ro-bind", "/dev/null", secret]  # the instructor's secret stays hidden
    return cmd + ["--chdir", str(writable)]


def _command(scratch: Path, task_file: Path, isolate: bool) -> list[str]:
    python = [sys.executable, "-I", str(CHILD), str(task_file)]
    return bwrap_prefix(scratch) + ["--"] + python if isolate else python


_SERVER = None


def warm_up() -> None:
    """Start this process's fork server now, without waiting for its preload, where student code will run in it.

    A grade calls this first: the server's imports then overlap intake and the model checks (on another
    core) instead of delaying the first student-code run.
    """
    if isolation() == "bubblewrap":
        fork_server(wait=False)


def fork_server(wait: bool = True):
    """This process's preloaded fork server (``grader.forkserver``), or None where it is not used.

    ``wait=False`` returns it before its preload is done; its first ``run`` waits.
    """
    global _SERVER
    if os.environ.get("GRADER_NO_FORKSERVER") or not bwrap_available():
        return None
    if _SERVER is None or not _SERVER.alive():
        base = Path(tempfile.mkdtemp(prefix="grader-fs-"))
        try:
            _SERVER = ForkServer(base, scrubbed_env(str(base)), bwrap_prefix(base), wait=wait)
        except (OSError, RuntimeError):
            shutil.rmtree(base, ignore_errors=True)
            return None
        def close(server=_SERVER) -> None:
            server.close()
            shutil.rmtree(server.base, ignore_errors=True)

        atexit.register(close)
        # a process-pool worker leaves through multiprocessing, which skips atexit but runs its finalizers
        multiprocessing.util.Finalize(None, close, exitpriority=10)
    return _SERVER


def run(submission_root: Path, task: dict, inputs: dict | None = None, limits: Limits = Limits(),
        isolate: bool | None = None) -> ChildResult:
    """Copy the submission's ``.py`` files into a fresh scratch folder, run ``task`` there, collect plain data.

    ``isolate`` left as None: under bubblewrap (in this process's fork server when there is one,
    else a fresh process); without bubblewrap, refused (status ``refused``, nothing started) unless
    ``unsafe_allowed()``. ``isolate=True`` forces a fresh bubblewrap process; ``isolate=False`` is
    the caller's explicit choice of rlimits alone (tests and benchmarks; the risk of
    ``--unsafe-no-sandbox``). A run ``plan`` started ahead is not started again: its result is handed over.
    """
    server = None
    if isolate is None:
        kind = isolation()
        if kind == "refused":
            _RUNS.append(kind)
            return ChildResult("refused", message=REFUSED)
        isolate = kind == "bubblewrap"
        if isolate:
            planned = _claim(submission_root, task, inputs, limits)
            if planned is not None:
                _RUNS.append("bubblewrap")
                return planned
            server = fork_server()
    _RUNS.append("bubblewrap" if isolate else "unsafe")
    prepared = _prepare(submission_root, task, inputs, limits, isolate, server)
    start = time.monotonic()
    code, timed_out = None, None
    try:
        if server is not None:
            try:
                code, timed_out = server.run(prepared.scratch, prepared.task_file, prepared.err_path, limits)
            except RuntimeError:
                timed_out = None  # the server died (perhaps killed by this run): run it the slow way
        if timed_out is None:
            code, timed_out = _spawn(prepared.scratch, prepared.task_file, prepared.out_path, prepared.err_path,
                                     limits, isolate, prepared.user)
    except BaseException:
        shutil.rmtree(prepared.base, ignore_errors=True)
        raise
    result = _collect(prepared, code, timed_out, time.monotonic() - start)
    _start_next()
    return result


@dataclass
class _Prepared:
    """One run's private folder (``base``), its scratch copy of the student's code, its task and its limits."""

    base: Path
    scratch: Path
    task_file: Path
    out_path: Path
    err_path: Path
    inputs: tuple
    limits: Limits
    user: tuple[int, int] | None


def _prepare(submission_root: Path, task: dict, inputs: dict | None, limits: Limits, isolate: bool,
             server) -> _Prepared:
    """A fresh folder (in the fork server's, when it runs there) with the ``.py`` files, the inputs and the task."""
    # deferred: numpy (about 0.2 s) writes the child's arrays; the command line imports this module to say how student
    # code would run, and needs none
    import numpy as np

    base = Path(tempfile.mkdtemp(prefix="grader-child-", dir=server.base if server else None))
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
    return _Prepared(base, scratch, task_file, base / "stdout", base / "stderr", tuple(inputs or ()), limits, user)


def _collect(prepared: _Prepared, code: int | None, timed_out: bool, seconds: float) -> ChildResult:
    """What the child handed back (``result.json``, its ``.npz`` files), then its folder deleted."""
    import numpy as np  # deferred: as in _prepare

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
        arrays = {}
        for npz in scratch.glob("*.npz"):
            if npz.name in prepared.inputs or npz.stat().st_size > limits.files:
                continue
            try:
                with np.load(npz, allow_pickle=False) as f:
                    arrays.update({k: np.asarray(f[k]) for k in f.files})
            except Exception:  # noqa: BLE001 - a bad file is simply not used
                pass
        status = "memory" if data.get("memory") else "ok"
        return ChildResult(status, data, arrays, stderr, seconds,
                           f"ran out of memory (limit {limits.memory >> 20} MiB)" if status == "memory" else "")
    finally:
        shutil.rmtree(prepared.base, ignore_errors=True)


# --- Runs planned ahead: student code runs in the fork server while the grader checks other lessons ---
# A grade plans the runs its checks will ask for (``plan``), in the order they ask. The first starts at once, and
# each next one as soon as the one before it has been handed over, so the fork server works on one run while this
# process checks the lessons in between: one run at a time, as before, each in its own fresh folder, and the
# server's folder emptied after each. A run is recorded (``take_runs``) when a check asks for it; one nobody asked
# for by the end of the grade (``end_plan``) is dropped, and stopped if it still runs.
Request = tuple  # (submission root, task, inputs, limits): what ``run`` is called with

_PLAN: list[tuple[tuple, Request]] = []  # (key, request) planned, not started yet
_RUNNING: tuple | None = None  # (key, prepared, server) started in the fork server, not answered yet
_FINISHED: dict = {}  # key -> ChildResult of a planned run answered before a check asked for it


def _key(submission_root: Path, task: dict, inputs: dict | None, limits: Limits) -> tuple:
    """A request's identity: the folder, the task, every input array's bytes, the limits."""
    import numpy as np  # deferred: as in _prepare

    arrays = tuple((name, k, a.dtype.str, a.shape, hashlib.sha256(np.ascontiguousarray(a).data).hexdigest())
                   for name, group in sorted((inputs or {}).items())
                   for k, a in sorted((k, np.asarray(v)) for k, v in group.items()))
    return str(Path(submission_root)), json.dumps(task, sort_keys=True), arrays, limits


def plan(requests: list[Request]) -> None:
    """The runs this grade's checks will ask for, in order (``run``'s arguments); started ahead where the fork
    server runs them (bubblewrap works), else ignored: each run then starts when it is asked for."""
    end_plan()
    if isolation() != "bubblewrap" or fork_server(wait=False) is None:
        return
    _PLAN.extend((_key(*r), r) for r in requests)
    _start_next()


def _start_next() -> None:
    """Start the next planned run if none is running and the fork server is ready (never waits for it)."""
    global _RUNNING
    if _RUNNING is not None or not _PLAN:
        return
    server = fork_server(wait=False)
    if server is None or not server.ready_now():
        return  # the next ask starts it (the server's preload is still running)
    key, (root, task, inputs, limits) = _PLAN.pop(0)
    try:
        prepared = _prepare(root, task, inputs, limits, True, server)
    except OSError:
        _PLAN.clear()
        return
    try:
        server.submit(prepared.scratch, prepared.task_file, prepared.err_path, limits)
    except RuntimeError:
        shutil.rmtree(prepared.base, ignore_errors=True)
        _PLAN.clear()
        return
    _RUNNING = (key, prepared, server)


def _answer_running() -> tuple[tuple, ChildResult]:
    """Wait for the planned run in the fork server; its key and what it handed back."""
    global _RUNNING
    key, prepared, server = _RUNNING
    _RUNNING = None
    try:
        code, timed_out, seconds = server.answer(prepared.scratch, prepared.limits)
    except RuntimeError:  # the server died (perhaps killed by this run): run it the slow way, as run() does
        start = time.monotonic()
        code, timed_out = _spawn(prepared.scratch, prepared.task_file, prepared.out_path, prepared.err_path,
                                 prepared.limits, True, None)
        seconds = time.monotonic() - start
    return key, _collect(prepared, code, timed_out, seconds)


def _claim(submission_root: Path, task: dict, inputs: dict | None, limits: Limits) -> ChildResult | None:
    """The result of this request if it was planned (waiting for it if it still runs), else None.

    Any other planned run still running is answered first (one run at a time), and this request, if planned
    for later, is taken off the plan: the caller runs it now.
    """
    if not (_PLAN or _RUNNING or _FINISHED):
        return None
    key = _key(submission_root, task, inputs, limits)
    if key in _FINISHED:
        result = _FINISHED.pop(key)
        _start_next()
        return result
    if _RUNNING is not None:
        done, result = _answer_running()
        if done == key:
            _start_next()
            return result
        _FINISHED[done] = result
    for i, (planned, _) in enumerate(_PLAN):
        if planned == key:
            del _PLAN[i]
            break
    return None


def end_plan() -> None:
    """Drop what was planned and not asked for: a finished result is deleted, a run still going is stopped."""
    global _RUNNING
    _PLAN.clear()
    _FINISHED.clear()
    if _RUNNING is not None:
        key, prepared, server = _RUNNING
        if server.done():
            _answer_running()
        else:  # nobody asked for it and it still runs (a reader that never ends): stop the server, a new one starts
            _RUNNING = None
            server.close()
            shutil.rmtree(prepared.base, ignore_errors=True)


def _spawn(scratch: Path, task_file: Path, out_path: Path, err_path: Path, limits: Limits,
           isolate: bool, user: tuple[int, int] | None = None) -> tuple[int | None, bool]:
    """One fresh child process for one run: (exit code, timed out)."""
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        proc = subprocess.Popen(_command(scratch, task_file, isolate), cwd=scratch, stdin=subprocess.DEVNULL,
                                stdout=out, stderr=err, env=scrubbed_env(str(scratch)),
                                preexec_fn=_limit(limits), start_new_session=True,
                                **({} if user is None else {"user": user[0], "group": user[1], "extra_groups": []}))
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


# --- An unprivileged user for student code where no bubblewrap runs (the Gradescope autograder) ---
# grader.gradescope sets GRADER_CHILD_USER=nobody: there the per-submission container is the isolation
# layer and the grader runs as root, so student code (run without bubblewrap) is started as that user,
# and cannot read root's 0600 files (the instructor's secret, the held-out split) or write the results.
CHILD_USER_ENV = "GRADER_CHILD_USER"


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


def _tail(path: Path, cap: int) -> str:
    size = path.stat().st_size
    with open(path, "rb") as f:
        f.seek(max(0, size - min(cap, 4096)))
        return f.read().decode("utf-8", "replace")


def secret() -> str | None:
    """The instructor's secret: ``GRADER_SECRET`` or the file named by ``GRADER_SECRET_FILE``."""
    if os.environ.get(SECRET_ENV):
        return os.environ[SECRET_ENV]
    path = os.environ.get(SECRET_FILE_ENV)
    if path and os.path.isfile(path):
        return Path(path).read_text(encoding="utf-8").strip() or None
    return None
