"""The workbook benchmark: ``python -m lab run`` against a floor measured in the same run.

The floor is the same number of trivial notebooks (same names, same parameters cell) that only
import ``lab`` and the libraries the lessons use, run by the same command, engine and kernel. So
the ratio is what the lessons' own work costs on top of starting kernels and importing libraries.
Floor and lessons run in back-to-back pairs (``PAIRS``; ``QUICK_PAIRS`` with ``--quick``), which goes first
alternating, and the ratio is the median of the pairs' ratios: the machine's speed drifts within a run, and a
pair's two runs drift together. The per-lesson tables are the median pair's.

Each lesson's seconds are also given as a ratio to its own floor notebook, and compared with the previous
``workbook.json`` in ``build/bench/`` (if any): run it before and after a change to see what the change
bought, each side against the floor measured in its own run.
"""
from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from benchmarks import alternating_pairs, median_pair
from lab.environment import KERNEL_NAME
from lab.tools import run

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "build" / "bench"
TARGET_RATIO = 1.5
PAIRS, QUICK_PAIRS = 3, 2
FLOOR_IMPORTS = ("import lab\nimport matplotlib\nimport matplotlib.pyplot as plt\nimport numpy as np\n"
                 "import onnx\nimport onnxruntime as ort\n"
                 "print(lab.__version__, np.__version__, onnx.__version__, ort.__version__)")


@dataclass
class Timing:
    """One ``python -m lab run``: its wall time, exit code and each lesson's seconds from the run log."""

    label: str
    seconds: float
    returncode: int
    lessons: dict[str, float] = field(default_factory=dict)


def floor_notebook(name: str) -> nbformat.NotebookNode:
    """A trivial lesson: the same kernel, parameters cell and imports, and nothing else."""
    nb = new_notebook(cells=[
        new_markdown_cell(f"Floor for {name}: imports only."),
        new_code_cell(FLOOR_IMPORTS),
        new_code_cell('WORK_DIR = "../workspace"\nSEED = 0\nINTERACTIVE = True', metadata={"tags": ["parameters"]}),
    ])
    nb.metadata.kernelspec = {"name": KERNEL_NAME, "display_name": "Calibration Lab", "language": "python"}
    return nb


def write_floor(names: list[str], dest: Path) -> Path:
    """One trivial notebook per lesson name in ``dest`` (emptied first)."""
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    for name in names:
        nbformat.write(floor_notebook(name), dest / name)
    return dest


def timed_run(label: str, notebooks: Path, base: Path) -> Timing:
    """Run ``python -m lab run`` over ``notebooks`` into a fresh ``base``; its output goes to ``base.log``."""
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(parents=True)
    cmd = [sys.executable, "-m", "lab", "run", "--notebooks", str(notebooks), "--work-dir", str(base / "workspace"),
           "--out", str(base / "notebooks")]
    start = time.perf_counter()
    with open(base.with_suffix(".log"), "w") as log:
        code = subprocess.run(cmd, cwd=REPO, stdout=log, stderr=subprocess.STDOUT).returncode
    seconds = time.perf_counter() - start
    log_path = base / "notebooks" / run.RUN_LOG
    lessons = {}
    if log_path.exists():
        lessons = {r["notebook"]: r["seconds"] for r in json.loads(log_path.read_text())["lessons"]}
    return Timing(label, round(seconds, 2), code, lessons)


def slowest_cells(executed: Path, count: int = 5) -> list[dict]:
    """The ``count`` slowest cells of the executed lessons (papermill records each cell's duration);
    cell indices are the source notebook's."""
    cells = []
    for path in sorted(executed.glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        for index, cell in enumerate(nb.cells):
            duration = cell.get("metadata", {}).get("papermill", {}).get("duration")
            if duration:
                first = next((ln.strip() for ln in cell.source.splitlines() if ln.strip()), "")
                cells.append({"notebook": path.name, "cell": run.source_cell_number(nb, index),
                              "seconds": round(duration, 2), "source": first[:60]})
    return sorted(cells, key=lambda c: -c["seconds"])[:count]


def table(names: list[str], lessons: Timing, floor: Timing) -> list[str]:
    """Per-lesson seconds beside the floor notebook of the same name, and the totals."""
    width = max([len(n) for n in names] + [len("whole run (wall)")])
    lines = [f"{'lesson':<{width}}  {'lessons s':>9}  {'floor s':>7}  {'ratio':>6}"]
    for name in names:
        a, b = lessons.lessons.get(name), floor.lessons.get(name)
        ratio = f"{a / b:6.2f}" if a is not None and b else "     -"
        lines.append(f"{name:<{width}}  {a if a is not None else float('nan'):>9.1f}  "
                     f"{b if b is not None else float('nan'):>7.1f}  {ratio}")
    lines.append(f"{'whole run (wall)':<{width}}  {lessons.seconds:>9.1f}  {floor.seconds:>7.1f}  "
                 f"{lessons.seconds / floor.seconds:6.2f}")
    return lines


def lesson_ratios(names: list[str], lessons: Timing, floor: Timing) -> dict[str, dict]:
    """Per lesson: its seconds, its floor notebook's seconds, and their ratio."""
    rows = {}
    for name in names:
        a, b = lessons.lessons.get(name), floor.lessons.get(name)
        rows[name] = {"seconds": a, "floor_seconds": b, "ratio": round(a / b, 3) if a is not None and b else None}
    return rows


def previous_ratios(report: dict) -> dict[str, dict]:
    """``lesson_ratios`` of an earlier ``workbook.json`` (older reports: rebuilt from their runs)."""
    if "lessons" in report:
        return report["lessons"]
    runs = report.get("runs", [])
    lessons = next((r for r in runs if r["label"] == "lessons"), None)
    floors = [r for r in runs if r["label"].startswith("floor")]
    if not lessons or not floors:
        return {}
    floor = min(floors, key=lambda r: r["seconds"])
    return lesson_ratios(list(lessons["lessons"]), Timing(**lessons), Timing(**floor))


def comparison(now: dict[str, dict], before: dict[str, dict], label: str) -> list[str]:
    """Per lesson, before and now, each as seconds and as a ratio to its own run's floor."""
    names = [n for n in now if n in before]
    if not names:
        return []
    width = max(len(n) for n in names)
    lines = [f"against {label}:", f"{'lesson':<{width}}  {'before s':>8}  {'ratio':>6}  {'now s':>6}  {'ratio':>6}"]
    for n in names:
        b, a = before[n], now[n]
        fmt = lambda v, w, f: f"{v:>{w}{f}}" if v is not None else f"{'-':>{w}}"
        lines.append(f"{n:<{width}}  {fmt(b['seconds'], 8, '.1f')}  {fmt(b['ratio'], 6, '.2f')}  "
                     f"{fmt(a['seconds'], 6, '.1f')}  {fmt(a['ratio'], 6, '.2f')}")
    return lines


def commit() -> str | None:
    """The checked-out commit, with ``+changes`` when the work tree differs from it."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO,
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return head + ("+changes" if dirty else "")


def main() -> int:
    names = [p.name for p in run.discover()]
    if not names:
        print("no lessons in notebooks/; nothing to time")
        return 1
    OUT.mkdir(parents=True, exist_ok=True)
    previous = None
    if (OUT / "workbook.json").exists():
        try:
            previous = json.loads((OUT / "workbook.json").read_text())
        except ValueError:
            previous = None
    floor_dir = write_floor(names, OUT / "floor-notebooks")
    print(f"timing {len(names)} lessons against {len(names)} trivial notebooks (papermill, kernel {KERNEL_NAME})",
          flush=True)
    pairs = alternating_pairs(QUICK_PAIRS if os.environ.get("BENCH_QUICK") else PAIRS,
                              lambda i: timed_run(f"floor {i + 1}", floor_dir, OUT / "floor"),
                              lambda i: timed_run(f"lessons {i + 1}", run.NOTEBOOKS, OUT / "lessons"))
    for i, (floor_run, lessons_run) in enumerate(pairs, 1):
        print(f"pair {i}: lessons {lessons_run.seconds:.1f} s, floor {floor_run.seconds:.1f} s "
              f"({lessons_run.seconds / floor_run.seconds:.2f}x)", flush=True)
    ratios = sorted(lr.seconds / fr.seconds for fr, lr in pairs)
    # the median pair (of two, the one nearer to their mean) gives the per-lesson tables
    ratio, (floor, lessons) = median_pair(pairs, lambda t: t.seconds)
    slowest = max(lessons.lessons.items(), key=lambda kv: kv[1], default=("-", 0.0))

    print("\n".join(table(names, lessons, floor)))
    print(f"ratio: the median of {len(pairs)} pairs' ratios ({', '.join(f'{r:.2f}x' for r in ratios)}); the tables are "
          f"the median pair's")
    print(f"slowest lesson: {slowest[0]} ({slowest[1]:.1f} s)")
    cells = slowest_cells(OUT / "lessons" / "notebooks")  # the last run's executed copies
    print("slowest cells:")
    for c in cells:
        print(f"  {c['seconds']:6.1f} s  {c['notebook']} cell {c['cell']}: {c['source']}")
    print(f"ratio {ratio:.2f}x the floor; target <= {TARGET_RATIO}x: {'met' if ratio <= TARGET_RATIO else 'NOT met'}")
    per_lesson = lesson_ratios(names, lessons, floor)
    if previous:
        before = {**previous_ratios(previous), "whole run (wall)": {
            "seconds": previous.get("lessons_seconds"), "ratio": previous.get("ratio")}}
        now = {**per_lesson, "whole run (wall)": {"seconds": lessons.seconds, "ratio": round(ratio, 3)}}
        print("\n".join(comparison(now, before, f"the previous run (commit {previous.get('commit') or 'unrecorded'})")))
    failed = next((lr for _, lr in pairs if lr.returncode), None)
    if failed:
        print(f"python -m lab run failed (exit {failed.returncode}); see {OUT / 'lessons.log'}", file=sys.stderr)

    report = {"benchmark": "workbook", "lessons_seconds": lessons.seconds, "floor_seconds": floor.seconds,
              "ratio": round(ratio, 3), "target_ratio": TARGET_RATIO, "met": ratio <= TARGET_RATIO,
              "slowest_lesson": {"notebook": slowest[0], "seconds": slowest[1]}, "slowest_cells": cells,
              "lessons": per_lesson, "commit": commit(),
              "previous": {"commit": previous.get("commit"), "lessons": previous_ratios(previous),
                           "lessons_seconds": previous.get("lessons_seconds"), "ratio": previous.get("ratio")}
              if previous else None,
              "pair_ratios": [round(r, 3) for r in ratios],
              "runs": [asdict(t) for pair in pairs for t in pair],
              "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()}}
    (OUT / "workbook.json").write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")
    print(f"wrote {OUT / 'workbook.json'}")
    return 1 if any(t.returncode for pair in pairs for t in pair) else 0
