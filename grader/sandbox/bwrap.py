"""The bubblewrap command line and the child's environment: what a sandboxed run sees of the machine."""
from __future__ import annotations

import os
import sys
from pathlib import Path

from grader.sandbox.secret import SECRET_FILE_ENV

GRADER = Path(__file__).resolve().parent.parent
CHILD = GRADER / "child.py"
PROJECT_ROOT = GRADER.parent  # grader/ and lab/ live here; the child imports lab from it
BWRAP = "/usr/bin/bwrap"


def scrubbed_env(home: str) -> dict[str, str]:
    """Only what Python needs; no secrets, tokens or proxies of the grader's environment."""
    env = {"PATH": "/usr/bin:/bin", "HOME": home, "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
           "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
           "PYTHONDONTWRITEBYTECODE": "1", "PYTHONHASHSEED": "0", "TMPDIR": home}
    for key in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):  # correctness on some CPUs, not secrets
        if key in os.environ:
            env[key] = os.environ[key]
    return env


def bwrap_prefix(writable: Path) -> list[str]:
    """bubblewrap arguments: read-only root, private /tmp, only ``writable`` writable, no network, own PIDs.

    The code the child runs (this project, the virtualenv, the Python install, and every site-packages folder
    on the grader's import path: a ``.pth`` file may name one outside the virtualenv) is bound back read-only
    after the private /tmp, so a checkout under /tmp still works inside the sandbox. Nothing else on the
    import path is: the current folder may hold hand-ins.
    """
    cmd = [BWRAP, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]
    libraries = [p for p in sys.path if Path(p).name in ("site-packages", "dist-packages")]
    roots: list[str | Path] = [PROJECT_ROOT, sys.prefix, sys.base_prefix, Path(sys.executable).resolve().parent,
                               *libraries]
    code = {Path(p).resolve() for p in roots}
    for path in sorted(code):
        if path.is_relative_to("/tmp") and path.exists():
            cmd += ["--ro-bind", str(path), str(path)]
    cmd += ["--bind", str(writable), str(writable), "--unshare-net", "--unshare-pid", "--unshare-ipc",
            "--unshare-uts", "--die-with-parent", "--new-session"]
    secret = os.environ.get(SECRET_FILE_ENV)
    if secret and os.path.isfile(secret):
        cmd += ["--ro-bind", "/dev/null", secret]  # the instructor's secret stays hidden
    return cmd + ["--chdir", str(writable)]


def command(scratch: Path, task_file: Path, isolate: bool) -> list[str]:
    """The command of one fresh child: ``grader/child.py`` on its task, inside bubblewrap when ``isolate``."""
    python = [sys.executable, "-I", str(CHILD), str(task_file)]
    return bwrap_prefix(scratch) + ["--"] + python if isolate else python
