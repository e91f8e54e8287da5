"""The kit README's systems table, measured again: for each system and Python of the table, pip resolves the kit's
pins to binary wheels (``pip install --dry-run --only-binary=:all: --python-version V --platform P``) exactly where
the table says yes. It asks PyPI 26 times (under 3 minutes here), and a new wheel of an unpinned dependency can
turn a no into a yes, so it runs only with ``LAB_MEASURE_WHEELS=1``: after changing a pin, or to re-check the table.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from instructor import kit as kit_builder
from lab.tools import preflight

MANYLINUX = ("manylinux_2_17", "manylinux_2_24", "manylinux_2_26", "manylinux_2_27", "manylinux_2_28", "manylinux2014")
PLATFORMS = {
    "Linux x86-64": [f"{tag}_x86_64" for tag in MANYLINUX],
    "Linux aarch64": [f"{tag}_aarch64" for tag in MANYLINUX],
    "macOS arm64": ["macosx_14_0_arm64"],
    "Windows x64": ["win_amd64"],
    "Windows on": ["win_arm64"],
    "macOS x86-64": ["macosx_14_0_x86_64"],
}
"""The wheel tags each row of the table stands for (its first two words), as the README says."""

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not os.environ.get("LAB_MEASURE_WHEELS"), reason="set LAB_MEASURE_WHEELS=1 (PyPI)")]


def resolves(requirements: Path, python: str, platforms: list[str], log: Path) -> bool:
    command = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--only-binary=:all:",
               "--python-version", python, *[a for p in platforms for a in ("--platform", p)], "-r", str(requirements)]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=600)
    log.write_text(proc.stdout + proc.stderr, encoding="utf-8")
    return proc.returncode == 0


def test_the_systems_table_is_what_pip_resolves(tmp_path):
    from test_setup import readme_table

    pins = kit_builder.student_requirements((kit_builder.REPO / "requirements.txt").read_text(encoding="utf-8"))
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("\n".join(ln for ln in pins.splitlines() if ln.strip() != "-e ."), encoding="utf-8")
    rows = readme_table((kit_builder.KIT_FILES / "README.md").read_text(encoding="utf-8"), "| system | 3.11")
    first, last = preflight.PYTHONS
    columns = [f"3.{minor}" for minor in range(first[1], last[1] + 1)]
    measured, wrong = [], []
    for name, *cells in rows:
        key = re.sub(r",$", "", " ".join(name.split()[:2]))
        for python, cell in zip(columns, cells):
            got = resolves(requirements, python, PLATFORMS[key], tmp_path / f"{key}-{python}.log".replace(" ", "_"))
            measured.append(f"{key} {python}: {'yes' if got else 'no'}")
            if got != cell.startswith("yes"):
                wrong.append(f"{name}, Python {python}: the README says {cell!r}, pip {'resolves' if got else 'fails'}")
    for python in (f"3.{first[1] - 1}", f"3.{last[1] + 1}"):  # just outside the range: nothing resolves
        if resolves(requirements, python, PLATFORMS["Linux x86-64"], tmp_path / f"outside-{python}.log"):
            wrong.append(f"Python {python} resolves on Linux x86-64, outside the range the README gives")
    print("\n".join(measured))
    assert not wrong, "\n".join(wrong)
