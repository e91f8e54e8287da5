"""The Colab first cell's work: install the lab and its lean pins (``lab/pins-colab.txt``) into the runtime's Python,
then say in one line whether the runtime must restart, or that the lessons can start.

The cell runs it by path (``%run "{KIT}/lab/tools/colab.py"``), before the lab is installed: it imports the standard
library only. A package the runtime had already imported at another version (Colab's numpy, imported when the
kernel starts) keeps running at that version until a restart, so the second run, after the restart, finds nothing
to change and says "ready", and moves the kernel into the kit's ``notebooks/``: the lessons' ``WORK_DIR``
("../workspace") is then the kit's ``workspace/`` as on a laptop, on Drive when the kit is there (every lesson's
runtime sees it, and it outlives the runtime), and ``lab.hand_in()`` writes the zip into the kit's folder.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from importlib import metadata
from pathlib import Path

KIT = Path(__file__).resolve().parents[2]
PINS = KIT / "lab" / "pins-colab.txt"
DISTRIBUTION = "calibration-lab"
MODULES = {"protobuf": "google.protobuf"}  # distributions whose module is not their name with "_" for "-"
CONFLICT = re.compile(r"^(\S+ \S+) requires (\S+?),? but you have (\S+ \S+)", re.M)
RESTART = ("restart the runtime now (Runtime > Restart session), then run this cell again: {changes} "
           "{verb} already imported in this runtime")
OWN_BUILD = (70, 1)  # a setuptools that builds a wheel without the ``wheel`` package


def requirement_names(text: str) -> list[str]:
    """The distribution names of a requirements file's lines (options and comments skipped)."""
    lines = (ln.split("#", 1)[0].strip() for ln in text.splitlines())
    return [re.split(r"[\s<>=!~;\[]", ln, maxsplit=1)[0] for ln in lines if ln and not ln.startswith("-")]


def installed(names: list[str]) -> dict[str, str | None]:
    found: dict[str, str | None] = {}
    for name in names:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    return found


def stale(names: list[str], modules: dict | None = None) -> dict[str, tuple[str, str | None]]:
    """{name: (version running, version installed)} of each imported package whose files are now another version."""
    modules = sys.modules if modules is None else modules
    out = {}
    for name, version in installed(names).items():
        running = getattr(modules.get(MODULES.get(name, name.replace("-", "_"))), "__version__", None)
        if isinstance(running, str) and running != version:
            out[name] = (running, version)
    return out


def restart_line(changed: dict[str, tuple[str, str | None]]) -> str:
    """The one line that says to restart, naming each package by its running and its installed version."""
    changes = ", ".join(f"{name} {old} -> {new or 'removed'}" for name, (old, new) in sorted(changed.items()))
    return RESTART.format(changes=changes, verb="was" if len(changed) == 1 else "were")


def pip(*args: str) -> str:
    """``python -m pip install -q ARGS`` in this kernel's Python; pip's output (it stops the cell if pip fails)."""
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "-q", *args], capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit(f"pip install {' '.join(args)} failed:\n{(proc.stdout + proc.stderr)[-3000:]}")
    return proc.stdout + proc.stderr


def build_options(version: str | None) -> list[str]:
    """Build with the runtime's own setuptools when it can (Colab's can): a lesson's start then downloads nothing."""
    own = version is not None and tuple(int(p) for p in re.findall(r"\d+", version)[:2]) >= OWN_BUILD
    return ["--no-build-isolation"] if own else []


def install_lab(kit: Path = KIT) -> None:
    """The kit's lab and fixtures, built from a copy (pip would write build files into the kit's folder on Drive)."""
    with tempfile.TemporaryDirectory(prefix="calibration-lab-") as tmp:
        for part in ("lab", "fixtures"):
            shutil.copytree(kit / part, Path(tmp) / part, ignore=shutil.ignore_patterns("__pycache__"))
        shutil.copy2(kit / "pyproject.toml", tmp)
        pip("--no-deps", *build_options(installed(["setuptools"])["setuptools"]), tmp)


def main() -> None:
    names = requirement_names(PINS.read_text(encoding="utf-8"))
    said = pip("-r", str(PINS))
    conflicts = CONFLICT.findall(said)
    if conflicts:
        print("pip: these preinstalled packages ask for other versions; no lesson imports them: "
              + "; ".join(f"{who} wants {want} (now {have})" for who, want, have in conflicts))
    if "lab" not in sys.modules:  # imported: this runtime's lessons already run it; a restart reinstalls it
        install_lab()
    changed = stale(names)
    if changed:
        print(restart_line(changed))
        return
    os.chdir(KIT / "notebooks")  # the lessons' "../workspace" is then the kit's workspace, as on a laptop
    versions = installed(["onnx", "onnxruntime", "numpy", DISTRIBUTION])
    print(f"ready: calibration-lab {versions[DISTRIBUTION]} with onnx {versions['onnx']}, onnxruntime "
          f"{versions['onnxruntime']}, numpy {versions['numpy']}; your workspace: {KIT / 'workspace'}")


if __name__ == "__main__":
    main()
