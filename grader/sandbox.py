"""Run student code in a child process: time, CPU, memory and output limits, a scrubbed environment.

With bubblewrap (``/usr/bin/bwrap``) the child also gets a read-only filesystem, a private
``/tmp``, no network and its own PID namespace, and only its scratch copy is writable.
Without it the limits are rlimits alone (``sandbox_kind()`` says which). The child hands
back ``result.json`` and ``.npz`` files; nothing is unpickled here.
"""
from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

CHILD = Path(__file__).resolve().with_name("child.py")
PROJECT_ROOT = CHILD.parent.parent  # grader/ and lab/ live here; the child imports lab from it
BWRAP = "/usr/bin/bwrap"
SECRET_ENV = "GRADER_SECRET"
SECRET_FILE_ENV = "GRADER_SECRET_FILE"


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
    """What came back: ``status`` is ok, timeout, memory or crash; ``data`` is the child's JSON."""

    status: str
    data: dict = field(default_factory=dict)
    arrays: dict = field(default_factory=dict)
    stderr: str = ""
    seconds: float = 0.0
    message: str = ""


def bwrap_available() -> bool:
    if not os.path.exists(BWRAP) or os.environ.get("GRADER_NO_BWRAP"):
        return False
    return _bwrap_works()


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


def sandbox_kind() -> str:
    return ("bubblewrap (read-only root, private /tmp, no network, own PID namespace) + rlimits"
            if bwrap_available() else "rlimits only (bubblewrap not available): no filesystem or network isolation")


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
        resource.setrlimit(resource.RLIMIT_AS, (limits.memory, limits.memory))
        resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu, limits.cpu + 1))
        resource.setrlimit(resource.RLIMIT_FSIZE, (limits.files, limits.files))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    return apply


def bwrap_prefix(writable: Path) -> list[str]:
    """bubblewrap arguments: read-only root, private /tmp, only ``writable`` writable, no network, own PIDs.

    The code the child runs (this project, the virtualenv, the Python install) is bound back
    read-only after the private /tmp, so a checkout under /tmp still works inside the sandbox.
    """
    cmd = [BWRAP, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]
    code = {Path(p).resolve() for p in (PROJECT_ROOT, sys.prefix, sys.base_prefix, Path(sys.executable).resolve().parent)}
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


def fork_server():
    """This process's preloaded fork server (``grader.forkserver``), or None where it is not used."""
    global _SERVER
    if os.environ.get("GRADER_NO_FORKSERVER") or not bwrap_available():
        return None
    if _SERVER is None or not _SERVER.alive():
        import atexit

        from grader.forkserver import ForkServer

        base = Path(tempfile.mkdtemp(prefix="grader-fs-"))
        try:
            _SERVER = ForkServer(base, scrubbed_env(str(base)))
        except (OSError, RuntimeError):
            shutil.rmtree(base, ignore_errors=True)
            return None
        atexit.register(lambda server=_SERVER: (server.close(), shutil.rmtree(server.base, ignore_errors=True)))
    return _SERVER


def run(submission_root: Path, task: dict, inputs: dict | None = None, limits: Limits = Limits(),
        isolate: bool | None = None) -> ChildResult:
    """Copy the submission's ``.py`` files into a fresh scratch folder, run ``task`` there, collect plain data.

    Runs in this process's fork server when there is one (``isolate`` left as None), else in a
    fresh process (under bubblewrap when ``isolate``).
    """
    import numpy as np

    from lab.schemas import loads

    server = fork_server() if isolate is None else None
    isolate = bwrap_available() if isolate is None else isolate
    base = Path(tempfile.mkdtemp(prefix="grader-child-", dir=server.base if server else None))
    scratch = base / "scratch"
    scratch.mkdir()
    try:
        for py in submission_root.glob("*.py"):
            shutil.copyfile(py, scratch / py.name)
        for name, arrays in (inputs or {}).items():
            np.savez(scratch / name, **arrays)
        task_file = scratch / "task.json"
        task_file.write_text(json.dumps(task))
        out_path, err_path = base / "stdout", base / "stderr"
        start = time.monotonic()
        code, timed_out = None, None
        if server is not None:
            try:
                code, timed_out = server.run(scratch, task_file, err_path, limits)
            except RuntimeError:
                timed_out = None  # the server died (perhaps killed by this run): run it the slow way
        if timed_out is None:
            code, timed_out = _spawn(scratch, task_file, out_path, err_path, limits, isolate)
        seconds = time.monotonic() - start
        err_path.touch()
        stderr = _tail(err_path, limits.output)
        if timed_out:
            return ChildResult("timeout", stderr=stderr, seconds=seconds,
                               message=f"stopped after {limits.wall:g} s of wall-clock time")
        if code == -signal.SIGXCPU or code == -signal.SIGKILL and seconds >= limits.cpu:
            return ChildResult("timeout", stderr=stderr, seconds=seconds,
                               message=f"stopped after {limits.cpu} s of CPU time")
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
            if npz.name in (inputs or {}) or npz.stat().st_size > limits.files:
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
        shutil.rmtree(base, ignore_errors=True)


def _spawn(scratch: Path, task_file: Path, out_path: Path, err_path: Path, limits: Limits,
           isolate: bool) -> tuple[int | None, bool]:
    """One fresh child process for one run: (exit code, timed out)."""
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        proc = subprocess.Popen(_command(scratch, task_file, isolate), cwd=scratch, stdin=subprocess.DEVNULL,
                                stdout=out, stderr=err, env=scrubbed_env(str(scratch)),
                                preexec_fn=_limit(limits), start_new_session=True)
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
