"""Lint and types: ruff and mypy, configured in pyproject.toml, find nothing new.

Both run over what pyproject.toml names (ruff: the project; mypy: lab/, grader/ and instructor/). The files that
had findings when the tools were configured are held to their counts then (``tests/lint_baseline.json``): a file
may only get better, every other file must be clean. Skipped only where a tool is not installed (``make setup``
installs both). ``python tests/test_lint.py --baseline`` writes the counts found now as the baseline (after fixing,
to lower it; never to let a new finding in).
"""
from __future__ import annotations

import collections
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
BASELINE = json.loads((REPO / "tests" / "lint_baseline.json").read_text(encoding="utf-8"))
MYPY_ERROR = re.compile(r"^([^:\s]+\.py):\d+: error: (.*)$", re.M)


def tool(name: str) -> str:
    """The tool beside this Python (the virtualenv's), else on PATH; the test is skipped without it."""
    found = shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(name)
    if found is None:
        pytest.skip(f"{name} is not installed (make setup installs it)")
    return found


def over_baseline(counts: dict[str, int], baseline: dict[str, int]) -> dict[str, str]:
    """Each file with more findings than its baseline allows (none for a file not in it): file -> 'found / allowed'."""
    return {f: f"{n} / {baseline.get(f, 0)}" for f, n in sorted(counts.items()) if n > baseline.get(f, 0)}


def test_over_baseline_counts_only_what_grew():
    found = over_baseline({"a.py": 2, "b.py": 1, "c.py": 3}, {"a.py": 2, "c.py": 1})
    assert found == {"b.py": "1 / 0", "c.py": "3 / 1"}
    assert over_baseline({"a.py": 1}, {"a.py": 2}) == {}


def ruff_findings(ruff: str) -> list[tuple[str, str]]:
    """(file relative to the project, 'line: code message') for every ruff finding."""
    proc = subprocess.run([ruff, "check", "--output-format", "json", "--no-cache", "."], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode in (0, 1), proc.stderr[-2000:]
    return [(Path(f["filename"]).resolve().relative_to(REPO).as_posix(),
             f"{f['location']['row']}: {f['code']} {f['message']}") for f in json.loads(proc.stdout or "[]")]


def mypy_errors(mypy: str, cache: Path) -> list[tuple[str, str]]:
    """(file, message) for every mypy error (its cache in ``cache``, not in the project)."""
    proc = subprocess.run([mypy, "--cache-dir", str(cache)], cwd=REPO, capture_output=True, text=True, timeout=900)
    assert proc.returncode in (0, 1), proc.stdout[-2000:] + proc.stderr[-2000:]
    return MYPY_ERROR.findall(proc.stdout)


def assert_nothing_new(name: str, found: list[tuple[str, str]]) -> None:
    grew = over_baseline(collections.Counter(path for path, _ in found), BASELINE[name])
    shown = [f"{path}:{what}" for path, what in found if path in grew]
    assert not grew, f"{name}: new findings (found / allowed) {grew}:\n  " + "\n  ".join(shown[:40])


def test_ruff_finds_nothing_new():
    assert_nothing_new("ruff", ruff_findings(tool("ruff")))


def test_mypy_finds_nothing_new(tmp_path):
    assert_nothing_new("mypy", mypy_errors(tool("mypy"), tmp_path / "mypy-cache"))


if __name__ == "__main__" and sys.argv[1:] == ["--baseline"]:
    import tempfile

    with tempfile.TemporaryDirectory() as cache:
        counts = {"ruff": ruff_findings(tool("ruff")), "mypy": mypy_errors(tool("mypy"), Path(cache))}
    BASELINE.update({k: dict(sorted(collections.Counter(p for p, _ in v).items())) for k, v in counts.items()})
    (REPO / "tests" / "lint_baseline.json").write_text(json.dumps(BASELINE, indent=1) + "\n", encoding="utf-8")
    print({k: sum(v.values()) for k, v in BASELINE.items() if isinstance(v, dict)})
