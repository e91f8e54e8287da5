"""``python -m instructor COMMAND``: ``workbook`` (every lesson, then its grade), ``kit`` (the student kit), ``hub``
(the lab for every user of a JupyterHub)."""
from __future__ import annotations

import argparse
import importlib
import sys

COMMANDS = {
    "workbook": ("instructor.workbook", "run every lesson headlessly, hand the workspace in and grade it"),
    "kit": ("instructor.kit",
            "write the student kit: the lessons with their solutions stubbed out, the lab package, fixtures"),
    "hub": ("instructor.hub", "as root: install the lab read-only for every user of a JupyterHub, and its kernel"),
}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in COMMANDS:
        parser = argparse.ArgumentParser(prog="python -m instructor", description=__doc__)
        parser.add_argument("command", choices=sorted(COMMANDS),
                            help="; ".join(f"{k}: {v[1]}" for k, v in COMMANDS.items()))
        parser.parse_args(argv[:1])
        return 2
    return int(importlib.import_module(COMMANDS[argv[0]][0]).main(argv[1:]) or 0)


if __name__ == "__main__":
    sys.exit(main())
