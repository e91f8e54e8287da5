"""``python -m lab.tools.setup``: the ``.venv`` with the pinned stack and the one Calibration Lab kernel.

What ``make setup`` runs, and what a machine without ``make`` runs instead (Windows: ``py -3.12 -m lab.tools.setup``).
Each step prints what it does, pip its own progress: the preflight (``lab.tools.preflight``) before anything, the
venv, pip, the kernel; then the leftovers go: the venv's own "Python 3" kernel (JupyterLab would offer two), and the
``*.egg-info`` folder the editable install of this folder writes beside the sources (JupyterLab would show it). The
venv's Jupyter configuration offers only the Calibration Lab kernel, and opens notebooks with it.

It runs on Python 3.8 and later (no newer syntax), so that the preflight can say what is wrong with an old one.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from lab.tools import preflight

KERNEL = "calibration-lab"
DISPLAY_NAME = "Calibration Lab"
STAMP = ".installed"
JUPYTER_CONFIG = {
    "KernelSpecManager": {"allowed_kernelspecs": [KERNEL], "ensure_native_kernel": False},
    "MultiKernelManager": {"default_kernel_name": KERNEL},
}
"""Written as the venv's ``etc/jupyter/jupyter_server_config.json``: JupyterLab started from the venv reads it (a
``jupyter_server_config.d`` folder holds only server extensions' settings)."""


def venv_python(venv):
    """The venv's interpreter: ``Scripts\\python.exe`` on Windows, ``bin/python`` elsewhere."""
    venv = Path(venv)
    return venv / "Scripts" / "python.exe" if os.name == "nt" else venv / "bin" / "python"


def step(number, total, text):
    print(f"setup [{number}/{total}] {text}", flush=True)


def run(command):
    """Run ``command`` with its output shown; a failure names the command and stops set-up."""
    proc = subprocess.run([str(c) for c in command])
    if proc.returncode != 0:
        raise SystemExit("setup: `{}` failed (exit {}); see its output above".format(
            " ".join(str(c) for c in command), proc.returncode))


def tidy(venv, folder):
    """Remove what JupyterLab would show besides the lab: the venv's "Python 3" kernel, ``*.egg-info`` in
    ``folder``; write the venv's Jupyter configuration. Returns the paths removed."""
    removed = []
    for spec in sorted((Path(venv) / "share" / "jupyter" / "kernels").glob("*")):
        if spec.is_dir() and spec.name != KERNEL:
            shutil.rmtree(spec)
            removed.append(spec)
    for leftover in sorted(Path(folder).glob("*.egg-info")):
        shutil.rmtree(leftover)
        removed.append(leftover)
    config = Path(venv) / "etc" / "jupyter" / "jupyter_server_config.json"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(json.dumps(JUPYTER_CONFIG, indent=2) + "\n", encoding="utf-8")
    return removed


def setup(venv, requirements, also=(), folder="."):
    """Preflight, venv, ``pip install -r requirements`` (then each of ``also``), kernel, tidy, stamp."""
    total = 5
    step(1, total, "preflight: can this Python install the pins?")
    if preflight.main([]) != 0:
        raise SystemExit(1)
    python = venv_python(venv)
    step(2, total, f"virtual environment {venv}")
    if python.exists():
        print(f"  {python} exists: kept")
    else:
        run([sys.executable, "-m", "venv", venv])
    step(3, total, f"pip install -r {requirements} (a few minutes the first time)")
    run([python, "-m", "pip", "install", "--upgrade", "pip"])
    run([python, "-m", "pip", "install", "-r", requirements])
    for spec in also:
        run([python, "-m", "pip", "install", *spec.split()])
    step(4, total, f"the {DISPLAY_NAME} kernel")
    run([python, "-m", "ipykernel", "install", "--sys-prefix", "--name", KERNEL, "--display-name", DISPLAY_NAME])
    step(5, total, "tidy: one kernel in JupyterLab, no build leftovers")
    for path in tidy(venv, folder):
        print(f"  removed {path}")
    (Path(venv) / STAMP).write_text("set up by python -m lab.tools.setup\n", encoding="utf-8")
    print(f"setup: done. Start JupyterLab with `make jupyter` (without make: `{python} -m jupyter lab "
          "--ServerApp.root_dir=.`).", flush=True)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m lab.tools.setup", description=__doc__.splitlines()[0])
    parser.add_argument("--venv", default=".venv", help="the virtual environment's folder (default .venv)")
    parser.add_argument("--requirements", default="requirements.txt", help="the pins (default requirements.txt)")
    parser.add_argument("--also", action="append", default=[], metavar="SPEC",
                        help="one more pip install after the pins, e.g. \"-e .[dask]\" (repeatable)")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    setup(args.venv, args.requirements, args.also)
    return 0


if __name__ == "__main__":
    sys.exit(main())
