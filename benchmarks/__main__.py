"""``python -m benchmarks [--quick] [NAME ...]``: run every ``benchmarks/*_bench.py`` (or the named ones) in order.

``--quick`` asks each benchmark for its small size (``BENCH_QUICK=1``; CI uses it). Afterwards
``build/bench/bench.md`` gathers every benchmark's figures (its ``build/bench/<name>.md``, or for the
workbook its per-lesson table from ``workbook.json``) into one page.
"""
from __future__ import annotations

import importlib
import json
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE.parent / "build" / "bench"


def discover() -> list[str]:
    """Names of the benchmark modules, e.g. ``["grader", "workbook"]`` for grader_bench.py and workbook_bench.py."""
    return sorted(p.name[: -len("_bench.py")] for p in HERE.glob("*_bench.py"))


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--quick" in argv:
        argv.remove("--quick")
        os.environ["BENCH_QUICK"] = "1"
    names = discover()
    unknown = [n for n in argv if n not in names]
    if unknown:
        print(f"no benchmark named {', '.join(unknown)}; have {', '.join(names) or 'none'}", file=sys.stderr)
        return 2
    failed = []
    for name in argv or names:
        print(f"== {name} ({name}_bench.py)", flush=True)
        start = time.perf_counter()
        try:
            code = int(importlib.import_module(f"benchmarks.{name}_bench").main() or 0)
        except Exception as e:  # noqa: BLE001 - one broken benchmark does not hide the others' numbers
            print(f"{name}: {type(e).__name__}: {e}", file=sys.stderr)
            code = 1
        verdict = "ok" if code == 0 else f"exit {code}"
        print(f"== {name}: {verdict} in {time.perf_counter() - start:.0f} s\n", flush=True)
        if code:
            failed.append(name)
    if failed:
        print(f"benchmarks that failed: {', '.join(failed)}", file=sys.stderr)
    print(f"wrote {write_summary(argv or names)}")
    return 1 if failed else 0


def workbook_markdown(report: dict) -> str:
    """The workbook's per-lesson seconds beside its floor's, from ``workbook.json``."""
    lines = ["# Workbook benchmark", "",
             f"`python -m lab run`: **{report['lessons_seconds']:.1f} s** against a floor of "
             f"{report['floor_seconds']:.1f} s: **{report['ratio']:.2f}x** (target <= {report['target_ratio']}x).", "",
             "| lesson | seconds | floor (s) | x floor |", "|---|---:|---:|---:|"]
    for name, row in report.get("lessons", {}).items():
        lines.append(f"| {name} | {row.get('seconds') or 0:.1f} | {row.get('floor_seconds', 0) or 0:.1f} | "
                     f"{row.get('ratio') or 0:.2f} |")
    return "\n".join(lines) + "\n"


def write_summary(ran: list[str]) -> Path:
    """``build/bench/bench.md``: the figures of the benchmarks just run, each against its own floor."""
    parts = []
    for name in ran:
        md, js = OUT / f"{name}.md", OUT / f"{name}.json"
        if name == "workbook" and js.exists():
            try:
                parts.append(workbook_markdown(json.loads(js.read_text())))
            except (ValueError, KeyError, TypeError) as e:
                parts.append(f"# Workbook benchmark\n\nworkbook.json unreadable: {e}\n")
        elif md.exists():
            parts.append(md.read_text())
    OUT.mkdir(parents=True, exist_ok=True)
    target = OUT / "bench.md"
    target.write_text("\n".join(parts) or "no benchmark wrote figures\n")
    return target


if __name__ == "__main__":
    sys.exit(main())
