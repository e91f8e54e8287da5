"""``python -m benchmarks [NAME ...]``: run every ``benchmarks/*_bench.py`` (or the named ones) in order."""
from __future__ import annotations

import importlib
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def discover() -> list[str]:
    """Names of the benchmark modules, e.g. ``["grader", "workbook"]`` for grader_bench.py and workbook_bench.py."""
    return sorted(p.name[: -len("_bench.py")] for p in HERE.glob("*_bench.py"))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
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
        except Exception as e:  # one broken benchmark does not hide the others' numbers
            print(f"{name}: {type(e).__name__}: {e}", file=sys.stderr)
            code = 1
        print(f"== {name}: {'ok' if code == 0 else f'exit {code}'} in {time.perf_counter() - start:.0f} s\n", flush=True)
        if code:
            failed.append(name)
    if failed:
        print(f"benchmarks that failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
