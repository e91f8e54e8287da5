"""``python -m lab COMMAND``: run the workbook, release student copies, hand in, or print the experiment table."""
from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys

COMMANDS = {
    "run": ("lab.run", "run every lesson headlessly with papermill, then print a summary"),
    "release": ("lab.release", "write the student copies of the lessons"),
    "submit": ("lab.submit", "pack the workspace into a submission zip"),
    "table": ("lab.experiment", "quantize narrow / right / wide and print one table"),
}


def available() -> dict[str, tuple[str, str]]:
    """The commands whose module is here: the student kit has no ``lab.release`` (an instructor tool)."""
    return {k: v for k, v in COMMANDS.items() if importlib.util.find_spec(v[0]) is not None}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    commands = available()
    if not argv or argv[0] not in commands:
        parser = argparse.ArgumentParser(prog="python -m lab", description=__doc__)
        parser.add_argument("command", choices=sorted(commands),
                            help="; ".join(f"{k}: {v[1]}" for k, v in commands.items()))
        parser.parse_args(argv[:1])
        return 2
    module = importlib.import_module(commands[argv[0]][0])
    return int(module.main(argv[1:]) or 0)


if __name__ == "__main__":
    sys.exit(main())
