"""A preloaded fork server for student-code runs, inside one bubblewrap sandbox per grading worker.

Measured here: a fresh child spends about 0.27 s importing numpy, onnxruntime and its quantization
package before the student's reader runs, and two children per submission were about 70 % of a
submission's grading time. The server imports them once; each run is a ``fork()``.

Isolation per run, on top of the sandbox's read-only root, private /tmp, no network and own PID
namespace: the forked child gets its own session, rlimits (memory, CPU, file size) and a scratch
folder that is deleted afterwards; after each run the server kills every other process in the
namespace (``kill(-1)``), so nothing a student starts outlives their run; the server is not
dumpable, so a child cannot ptrace it. Only used where bubblewrap works (``kill(-1)`` outside a PID
namespace would be wrong), otherwise each run starts a fresh process (``grader.sandbox``).
"""
from __future__ import annotations

import ctypes
import json
import os
import re
import resource
import select
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve()
REPO = HERE.parent.parent


def apply_limits(memory: int, cpu: int, files: int) -> None:
    """The child's rlimits: address space, CPU seconds, file size; no core dumps. Also ``grader.sandbox``'s."""
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    resource.setrlimit(resource.RLIMIT_FSIZE, (files, files))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def mounts_under(folder: str, mountinfo: str) -> list[Path]:
    """The mount points strictly under ``folder``, from ``/proc/self/mountinfo`` text (its fifth field; the kernel
    writes a space, tab, newline or backslash in it as an octal escape such as ``\\040``)."""
    points = []
    for line in mountinfo.splitlines():
        fields = line.split()
        if len(fields) > 4:
            point = Path(re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4]))
            if Path(folder) in point.parents:
                points.append(point)
    return points


def _wipe(folder: str, keep: list[Path]) -> None:
    """Empty ``folder``, except each path in ``keep`` (and the folders on the way to it): the grader's bind-mounted
    work folder, and the read-only binds of the project and its packages when they live under /tmp (a checkout
    there): deleting those is refused file by file, 0.2 s after every run for a virtualenv."""
    for entry in Path(folder).iterdir():
        if entry in keep:
            continue
        if any(entry in k.parents for k in keep):
            _wipe(str(entry), keep)  # it holds a kept folder: the rest of it goes
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)


def serve() -> None:
    """Server side: preload, then one fork per request line; answer one JSON line per request."""
    sys.path[:] = [str(REPO)] + [p for p in sys.path if Path(p or ".").resolve() != HERE.parent]
    # deferred: the server's preload (numpy, onnxruntime and its quantization package, about 0.3 s, the reason the
    # server exists): it runs in the sandboxed server once sys.path names this project, never in the grader
    import numpy  # noqa: F401 - preloaded for the children
    import onnxruntime  # noqa: F401 - preloaded for the children
    import onnxruntime.quantization  # noqa: F401 - preloaded for the children

    # deferred: the project's own modules, importable from here only once sys.path names this project (above)
    import grader.child as child
    import lab.lessons.lesson02_the_calibration_reader  # noqa: F401 - check_reader, preloaded for the children

    try:
        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0: children cannot ptrace the server
    except (OSError, AttributeError):
        pass
    base = Path.cwd()
    keep = [base, *mounts_under("/tmp", Path("/proc/self/mountinfo").read_text())]
    out = sys.stdout
    out.write(json.dumps({"ready": True}) + "\n")
    out.flush()
    for line in sys.stdin:
        req = json.loads(line)
        start = time.monotonic()
        pid = os.fork()
        if pid == 0:  # the student's run
            try:
                os.setsid()
                os.chdir(req["scratch"])
                fd = os.open(req["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                null = os.open(os.devnull, os.O_RDONLY)
                os.dup2(null, 0)
                os.dup2(fd, 1)
                os.dup2(fd, 2)
                sys.stdout = open(1, "w", closefd=False)
                sys.stderr = open(2, "w", closefd=False)
                apply_limits(req["memory"], req["cpu"], req["files"])
                sys.argv = [str(HERE.with_name("child.py")), req["task"]]
                child.main()
            except BaseException:  # noqa: BLE001 - the child never returns into the server loop
                pass
            finally:
                os._exit(0)
        timed_out, status = False, 0
        deadline = start + req["wall"]
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            if time.monotonic() > deadline:
                timed_out = True
                try:
                    os.killpg(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                os.waitpid(pid, 0)
                break
            time.sleep(0.003)
        try:
            os.kill(-1, signal.SIGKILL)  # anything the run left behind, in this PID namespace only
        except ProcessLookupError:
            pass
        while True:
            try:
                if os.waitpid(-1, os.WNOHANG)[0] == 0:
                    break
            except ChildProcessError:
                break
        _wipe("/tmp", keep)  # the sandbox's private /tmp: nothing one student leaves is seen by the next
        out.write(json.dumps({"code": os.waitstatus_to_exitcode(status) if not timed_out else None,
                              "timed_out": timed_out, "seconds": time.monotonic() - start}) + "\n")
        out.flush()


class ForkServer:
    """Client side: one server per grading process, started lazily, restarted if it dies.

    Starting it does not wait for its preload (about 0.3 s of imports, more on a busy machine): the
    first ``run`` does, so a grader that starts it early does intake and model checks meanwhile.
    """

    def __init__(self, base: Path, env: dict[str, str], sandbox: list[str], wait: bool = True):
        """``sandbox``: the bubblewrap command (``grader.sandbox.bwrap_prefix(base)``) the server runs inside."""
        self.base = base
        self.ready = False
        cmd = sandbox + ["--", sys.executable, "-I", str(HERE), "serve"]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     env=env, text=True, bufsize=1)
        assert self.proc.stdin is not None and self.proc.stdout is not None  # both are pipes (PIPE above)
        self.requests, self.answers = self.proc.stdin, self.proc.stdout
        if wait:
            self.wait_ready()

    def wait_ready(self) -> None:
        """Wait for the server's hello once; raises ``RuntimeError`` (and closes it) if it never comes."""
        if self.ready:
            return
        hello = self._read(60)
        if not hello or not hello.get("ready"):
            self.close()
            raise RuntimeError("the fork server did not start")
        self.ready = True

    def ready_now(self) -> bool:
        """Is the preload done (its hello read, or readable now)? Never waits; False if the server died."""
        if not self.ready and self.alive() and select.select([self.answers], [], [], 0)[0]:
            try:
                self.wait_ready()
            except RuntimeError:
                return False
        return self.ready and self.alive()

    def _read(self, timeout: float) -> dict | None:
        ready, _, _ = select.select([self.answers], [], [], timeout)
        if not ready:
            return None
        line = self.answers.readline()
        return json.loads(line) if line else None

    def alive(self) -> bool:
        return self.proc.poll() is None

    def run(self, scratch: Path, task: Path, stderr: Path, limits) -> tuple[int | None, bool]:
        """Run one task; returns (exit code, timed out). Raises ``RuntimeError`` if the server died."""
        self.submit(scratch, task, stderr, limits)
        code, timed_out, _ = self.answer(scratch, limits)
        return code, timed_out

    def submit(self, scratch: Path, task: Path, stderr: Path, limits) -> None:
        """Start one task and return at once; ``answer`` waits for it. One task at a time: answer it before the next.

        Raises ``RuntimeError`` if the server died (its preload is waited for first)."""
        self.wait_ready()
        req = {"scratch": str(scratch), "task": str(task), "stderr": str(stderr), "wall": limits.wall,
               "cpu": limits.cpu, "memory": limits.memory, "files": limits.files}
        try:
            self.requests.write(json.dumps(req) + "\n")
            self.requests.flush()
        except (BrokenPipeError, OSError):
            raise RuntimeError("the fork server is gone") from None

    def done(self) -> bool:
        """Has the task submitted last answered (``answer`` would not wait)?"""
        return bool(select.select([self.answers], [], [], 0)[0])

    def answer(self, scratch: Path, limits) -> tuple[int | None, bool, float]:
        """The submitted task's (exit code, timed out, seconds from its fork to its end, as the server timed it).

        Then anything the run left in the server's folder beside its own task folder is deleted, before any
        other task is submitted. Raises ``RuntimeError`` if the server died or stopped answering."""
        answer = self._read(limits.wall + 10)
        if answer is None:
            self.close()
            raise RuntimeError("the fork server stopped answering")
        for entry in self.base.iterdir():  # anything a run left beside its own task folder
            if entry != scratch.parent:
                shutil.rmtree(entry, ignore_errors=True) if entry.is_dir() and not entry.is_symlink() \
                    else entry.unlink(missing_ok=True)
        return answer["code"], answer["timed_out"], answer["seconds"]

    def close(self) -> None:
        try:
            self.proc.kill()
            self.proc.wait(timeout=5)
        except (OSError, subprocess.SubprocessError):
            pass


if __name__ == "__main__" and sys.argv[1:] == ["serve"]:
    serve()
