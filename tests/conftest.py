"""Shared test set-up: nbval compares no stderr, and one headless run of every lesson per session."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from lab import run

# The grader's commands refuse to start without an instructor secret (grader.preflight). The tests grade with the
# public summarize() lists, as they always have, unless a test sets a secret itself.
os.environ.setdefault("GRADER_NO_SECRET", "1")

# Sizes small enough for CI; only the names a lesson declares in its parameters cell are passed.
SMALL_PARAMETERS = {"MAX_BATCHES": 16, "ENTROPY_BINS": 512, "SPEED_WARMUP": 3, "SPEED_REPEATS": 20,
                    "LARGE_WIDTHS": [64, 256, 1024], "SWEEP_REPEATS": 5}
CELL_TIMEOUT_S = 600


def pytest_collectstart(collector):
    """nbval: ORT's warnings (the pre-processing hint) go to stderr; they are never compared."""
    if getattr(collector, "path", None) is not None and collector.path.suffix == ".ipynb":
        collector.skip_compare += ("stderr",)


@dataclass(frozen=True)
class LessonSuite:
    """Every lesson run in order into one workspace, as ``python -m lab run`` does."""

    work_dir: Path
    out_dir: Path
    runs: dict[str, run.LessonRun]


def run_lessons(notebooks: list[Path], work_dir: Path, out_dir: Path,
                overrides: dict[str, object] = SMALL_PARAMETERS) -> LessonSuite:
    """Run ``notebooks`` in order into ``work_dir``; a failing lesson does not stop the later ones."""
    runs = {}
    for nb in notebooks:
        params = run.lesson_parameters(run.declared_parameters(nb), work_dir, overrides)
        runs[nb.name] = run.run_lesson(nb, out_dir, params, timeout=CELL_TIMEOUT_S, cwd=nb.parent)
    return LessonSuite(work_dir, out_dir, runs)


@pytest.fixture(scope="session")
def lesson_suite(tmp_path_factory) -> LessonSuite:
    """The instructor's lessons (solutions in) run once per session with small parameters."""
    base = tmp_path_factory.mktemp("lessons")
    return run_lessons(run.discover(), base / "ws", base / "executed")
