"""``sudo python3 -m instructor hub --jupyterlab-env ENV``: the lab installed once, read-only, for every hub user.

Run as root from the project's checkout (a git checkout: the kit is built from committed files). It
1. creates a venv under ``--prefix`` (default ``/opt/calibration-lab/venv``) and installs the student pins into it
   (``requirements.txt`` without the test stack), as ``lab.tools.setup`` does for one student;
2. writes the student kit (``python -m instructor kit``) to ``PREFIX/kit`` and installs the lab from it into the venv,
   not editable: no grader, no instructor tool, no held-out data, nothing a student can change;
3. registers the ``calibration-lab`` kernel for every user (``--kernel-prefix``, default ``/usr/local``: jupyter's
   system path) with ``LAB_WORK_DIR=~/calibration-lab/workspace``, which the lab expands in each user's kernel;
4. installs ``jupyterlab_widgets`` into ``--jupyterlab-env``, the environment that runs the single-user JupyterLab:
   widgets render only where JupyterLab runs with it;
5. leaves everything it wrote root's, readable by all and writable by none (0755 folders, 0644 files).

Idempotent: a second run keeps the venv, lets pip do nothing and rebuilds the kit. Standard library only (and
``lab.tools.setup``, which is too): it runs on the system's ``python3`` before any venv exists.
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

from instructor import pins
from lab.tools import preflight, setup

REPO = Path(__file__).resolve().parent.parent
DEFAULT_PREFIX = Path("/opt/calibration-lab")
KERNEL_PREFIX = Path("/usr/local")  # <prefix>/share/jupyter/kernels: on every user's Jupyter path (jupyter_core)
WORK_DIR = "~/calibration-lab/workspace"  # kernel.json cannot expand ~; lab.workspace does, in each user's kernel
STUDENT_COPY = "cp -rn {kit}/. ~/calibration-lab/"  # a student's first step: their own copy, never overwritten
STEPS = 6


class HubError(Exception):
    """The hub install cannot go on; the message says what to do."""


def step(number: int, text: str) -> None:
    print(f"hub [{number}/{STEPS}] {text}", flush=True)


def check_root(euid: int) -> None:
    if euid != 0:
        raise HubError("run as root (sudo python3 -m instructor hub ...): it installs for every user of the hub")


def check_venv_module() -> None:
    """``python3 -m venv`` needs ``venv`` and ``ensurepip`` (Debian and Ubuntu ship them in ``python3-venv``)."""
    missing = [m for m in ("venv", "ensurepip") if importlib.util.find_spec(m) is None]
    if missing:
        raise HubError(f"this Python ({sys.executable}) has no {' or '.join(missing)} module: install python3-venv "
                       "(Debian, Ubuntu: apt-get install python3-venv) or use another python3")


def unreachable(path: Path) -> Path | None:
    """The first folder above ``path`` (or ``path``) that users other than its owner cannot enter or read, or None."""
    path = Path(os.path.realpath(path))
    for part in (*reversed(path.parents), path):
        mode = part.stat().st_mode
        if not mode & stat.S_IXOTH or (part == path and not mode & stat.S_IROTH):
            return part
    return None


def check_python_for_everyone(python: Path) -> None:
    """A venv runs its base interpreter: every student must be able to run it (not a pyenv under /root)."""
    blocked = unreachable(python)
    if blocked is not None:
        raise HubError(f"students cannot run this Python ({os.path.realpath(python)}): {blocked} is closed to other "
                       "users; run the command with a python3 every user can run, e.g. /usr/bin/python3")


def jupyterlab_python(env: Path) -> Path:
    """The interpreter of the environment that runs the hub's JupyterLab; HubError if it has no JupyterLab."""
    python = setup.venv_python(env)
    python = python if python.exists() else python.with_name("python3")  # a system environment has only python3
    if not python.exists():
        raise HubError(f"--jupyterlab-env {env}: no {python}; name the environment the hub's single-user servers run "
                       "JupyterLab from (e.g. /opt/tljh/user, /opt/conda)")
    if subprocess.run([str(python), "-c", "import jupyterlab"], capture_output=True).returncode != 0:
        raise HubError(f"--jupyterlab-env {env}: its Python cannot import jupyterlab; name the environment the "
                       "hub's single-user servers run JupyterLab from")
    return python


def share_read_only(root: Path) -> int:
    """Every folder under ``root`` 0755 and every file 0644 (0755 if executable): readable by all, writable by the
    owner only. Returns how many modes changed."""
    changed = 0
    for folder, _, files in os.walk(root):
        for path, is_dir in ((folder, True), *((os.path.join(folder, f), False) for f in files)):
            if os.path.islink(path):
                continue
            mode = stat.S_IMODE(os.stat(path).st_mode)
            want = 0o755 if is_dir or mode & 0o111 else 0o644
            if mode != want:
                os.chmod(path, want)
                changed += 1
    return changed


def kernel_requirements(repo: Path) -> str:
    """The pins the kernel's venv gets: the lessons' pins the lab ships (``lab/pins.txt``: the student kit's, without
    the editable install of the checkout)."""
    return (repo / "lab" / "pins.txt").read_text(encoding="utf-8")


def install(prefix: Path, jupyterlab_env: Path, kernel_prefix: Path = KERNEL_PREFIX, repo: Path = REPO) -> Path:
    """Steps 1-6 of the module's docstring; returns the kit's folder."""
    lab_python = jupyterlab_python(jupyterlab_env)
    check_python_for_everyone(Path(sys.executable))
    os.umask(0o022)
    os.environ.setdefault("PIP_ROOT_USER_ACTION", "ignore")
    venv, kit = prefix / "venv", prefix / "kit"
    python = setup.venv_python(venv)
    step(1, f"virtual environment {venv}")
    if python.exists():
        print(f"  {python} exists: kept")
    else:
        setup.run([sys.executable, "-m", "venv", venv])
    for where in (prefix, kernel_prefix):
        where.mkdir(parents=True, exist_ok=True)
        if unreachable(where) is not None:
            raise HubError(f"{unreachable(where)} is closed to other users, so students could not reach {where}; "
                           "choose a prefix every user can enter (the default is /opt/calibration-lab)")
    step(2, "pip install the student pins (a few minutes the first time)")
    with tempfile.TemporaryDirectory(prefix="calibration-lab-hub-") as tmp:
        requirements = Path(tmp) / "requirements.txt"
        requirements.write_text(kernel_requirements(repo), encoding="utf-8")
        setup.run([python, "-m", "pip", "install", "--upgrade", "pip"])
        setup.run([python, "-m", "pip", "install", "-r", requirements])
    step(3, f"the student kit in {kit}, and the lab from it into the venv")
    # git refuses a checkout that root does not own ("dubious ownership") unless told it is safe: this one is
    env = dict(os.environ, PYTHONPATH=str(repo), GIT_CONFIG_COUNT="1", GIT_CONFIG_KEY_0="safe.directory",
               GIT_CONFIG_VALUE_0=str(repo))
    if subprocess.run([str(python), "-m", "instructor", "kit", "--out", str(kit)], cwd=repo, env=env).returncode:
        raise HubError("python -m instructor kit failed (its message is above)")
    with tempfile.TemporaryDirectory(prefix="calibration-lab-kit-") as tmp:
        source = Path(shutil.copytree(kit, Path(tmp) / "kit"))  # pip builds in the folder: never in the shared kit
        setup.run([python, "-m", "pip", "install", "--no-deps", "--force-reinstall", source])
    setup.tidy(venv, kit)
    step(4, f"the {setup.DISPLAY_NAME} kernel for every user, in {kernel_prefix}/share/jupyter/kernels")
    setup.run([python, "-m", "ipykernel", "install", "--prefix", kernel_prefix, "--name", setup.KERNEL,
               "--display-name", setup.DISPLAY_NAME, "--env", "LAB_WORK_DIR", WORK_DIR])
    step(5, f"jupyterlab_widgets into {jupyterlab_env}, where the hub's JupyterLab runs")
    setup.run([lab_python, "-m", "pip", "install", pins.pin((repo / "requirements.txt").read_text(encoding="utf-8"),
                                                            "jupyterlab_widgets")])
    step(6, "read-only for every user")
    changed = sum(share_read_only(p) for p in (prefix, kernel_prefix / "share" / "jupyter" / "kernels" / setup.KERNEL))
    print(f"  {changed} modes set to 0755 / 0644")
    return kit


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m instructor hub", description=__doc__.splitlines()[0])
    parser.add_argument("--jupyterlab-env", required=True, type=Path,
                        help="the environment the hub's single-user servers run JupyterLab from (e.g. /opt/tljh/user)")
    parser.add_argument("--prefix", default=DEFAULT_PREFIX, type=Path,
                        help=f"where the venv and the kit go (default {DEFAULT_PREFIX})")
    parser.add_argument("--kernel-prefix", default=KERNEL_PREFIX, type=Path,
                        help=f"the kernel goes to PREFIX/share/jupyter/kernels (default {KERNEL_PREFIX})")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    try:
        check_root(os.geteuid())
        check_venv_module()
        if not args.prefix.is_absolute() or not args.kernel_prefix.is_absolute():
            raise HubError("--prefix and --kernel-prefix must be absolute paths")
        if preflight.main([]) != 0:
            return 1
        kit = install(args.prefix, args.jupyterlab_env, args.kernel_prefix)
    except HubError as e:
        print(f"hub: {e}", file=sys.stderr)
        return 2
    print(f"hub: done. Each student's first step, in a JupyterLab terminal: {STUDENT_COPY.format(kit=kit)}\n"
          f"  then the lessons in ~/calibration-lab/notebooks with the {setup.DISPLAY_NAME} kernel; their work goes "
          "to ~/calibration-lab/workspace, lab.hand_in() writes ~/calibration-lab/ID.zip", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
