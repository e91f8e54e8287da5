"""Lint and types: ruff and mypy, configured in pyproject.toml, find nothing, and every suppression says why.

Both run over what pyproject.toml names (ruff: the project; mypy: lab/, grader/ and instructor/), with no baseline:
one finding fails. ``.ci/run`` runs both before the tests, to fail early with the findings printed; these tests
hold the same line for a local ``make test``. Skipped only where a tool is not installed (``make setup`` installs
both).
"""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
MYPY_ERROR = re.compile(r"^([^:\s]+\.py):(\d+): error: (.*)$", re.M)
# the folders whose suppressions must say why (the project's own Python: the lessons, grader, tools and tests)
SUPPRESSING = ("lab", "grader", "instructor", "benchmarks", "tests", "fixtures")
# '# noqa', '# noqa: CODE[, CODE]' or '# type: ignore[code, ...]', then whatever follows it on the line
SUPPRESSION = re.compile(r"#\s*(?:noqa(?::\s*[A-Z]+[0-9]+(?:\s*,\s*[A-Z]+[0-9]+)*)?|type:\s*ignore(?:\[[^\]]*\])?)"
                         r"(?P<after>.*)$")
REASON = re.compile(r"[A-Za-z]{3,}")  # a word: 'why' after the marker ('- ...', '# ...' or '(...)')


def tool(name: str) -> str:
    """The tool beside this Python (the virtualenv's), else on PATH; the test is skipped without it."""
    found = shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(name)
    if found is None:
        pytest.skip(f"{name} is not installed (make setup installs it)")
    return found


def test_ruff_finds_nothing():
    proc = subprocess.run([tool("ruff"), "check", "--output-format", "json", "--no-cache", "."], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode in (0, 1), proc.stderr[-2000:]
    found = [f"{Path(f['filename']).resolve().relative_to(REPO).as_posix()}:{f['location']['row']}: {f['code']} "
             f"{f['message']}" for f in json.loads(proc.stdout or "[]")]
    assert not found, f"ruff: {len(found)} finding(s):\n  " + "\n  ".join(found[:40])


def test_mypy_finds_nothing(tmp_path):
    proc = subprocess.run([tool("mypy"), "--cache-dir", str(tmp_path / "mypy-cache")], cwd=REPO,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode in (0, 1), proc.stdout[-2000:] + proc.stderr[-2000:]
    found = [f"{path}:{line}: {what}" for path, line, what in MYPY_ERROR.findall(proc.stdout)]
    assert not found and proc.returncode == 0, f"mypy: {len(found)} error(s):\n  " + "\n  ".join(found[:40])


def unexplained(text: str) -> list[int]:
    """The lines (from 1) of ``text`` with a ``# noqa`` or ``# type: ignore`` that does not say why after it."""
    return [n for n, line in enumerate(text.splitlines(), 1)
            if (m := SUPPRESSION.search(line)) and not REASON.search(m["after"])]


def test_unexplained_finds_a_bare_suppression_and_passes_an_explained_one():
    text = "\n".join([
        "except Exception:  # noqa: BLE001",                                              # 1: bare
        "except Exception:  # noqa: BLE001 - the student's code may raise anything",     # 2
        "x = f()  # type: ignore[attr-defined]",                                          # 3: bare
        "x = f()  # type: ignore[attr-defined]  # as lru_cache's own",                    # 4
        "import dask  # noqa: F401  (the extra must be installed)",                       # 5
        "import os  # noqa",                                                              # 6: bare
        "y = 1  # type: ignore",                                                          # 7: bare
        "z = 2  # an ordinary comment"])                                                  # 8
    assert unexplained(text) == [1, 3, 6, 7]


def test_every_suppression_says_why():
    bare = [f"{path.relative_to(REPO).as_posix()}:{n}" for folder in SUPPRESSING
            for path in sorted((REPO / folder).rglob("*.py")) if ".venv" not in path.parts
            for n in unexplained(path.read_text(encoding="utf-8"))]
    assert not bare, ("say why after each '# noqa: CODE - why' / '# type: ignore[code]  # why':\n  "
                      + "\n  ".join(bare))
