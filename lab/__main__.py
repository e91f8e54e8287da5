"""``python -m lab COMMAND``: run the workbook, hand in, or audit a model."""
from __future__ import annotations

import argparse
import importlib
import sys

from lab.errors import exit_with

COMMANDS = {
    "run": ("lab.tools.run", "run every lesson headlessly with papermill, then print a summary"),
    "submit": ("lab.tools.submit", "pack the workspace into a submission zip"),
    "audit": ("lab.tools.audit", "rulers, clipping, where INT8 parts from FP32, both kernel families: any model"),
    "reading-copy": ("lab.tools.reading_copy", "the executed lessons as accessible HTML pages"),
}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    commands = COMMANDS
    if not argv or argv[0] not in commands:
        parser = argparse.ArgumentParser(prog="python -m lab", description=__doc__)
        parser.add_argument("command", choices=sorted(commands),
                            help="; ".join(f"{k}: {v[1]}" for k, v in commands.items()))
        parser.parse_args(argv[:1])
        return 2
    module = importlib.import_module(commands[argv[0]][0])
    return int(module.main(argv[1:]) or 0)


if __name__ == "__main__":
    exit_with(main)
