"""Re-record the reference outputs nbval compares (cells that start with ``# NBVAL_CHECK_OUTPUT``).

Run it after a change in ``lab`` moves a number a lesson prints::

    .venv/bin/python tests/record_references.py            # every lesson
    .venv/bin/python tests/record_references.py 02 04      # only these (earlier lessons still run first)

Every lesson runs in order into a temporary workspace, with ``INTERACTIVE=False`` and its
default sizes, exactly as the nbval test runs them. Only the marked cells of the named lessons
get the new stdout and execution count; every other cell stays without outputs.
"""
from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import nbformat

from lab.tools import run

MARK = "# NBVAL_CHECK_OUTPUT"


def is_reference(cell) -> bool:
    return cell.cell_type == "code" and cell.source.lstrip().startswith(MARK)


def copy_references(source: nbformat.NotebookNode, executed: nbformat.NotebookNode) -> int:
    """Copy stdout and execution counts of marked cells from ``executed`` into ``source`` (matched by cell id)."""
    by_id = {c.get("id"): c for c in executed.cells}
    changed = 0
    for cell in source.cells:
        if not is_reference(cell):
            continue
        done = by_id.get(cell.get("id"))
        if done is None or done.source != cell.source:
            raise SystemExit(f"cell {cell.get('id')} not found unchanged in the executed copy")
        outputs = [o for o in done.outputs if not (o.output_type == "stream" and o.name == "stderr")]
        if outputs != cell.outputs or cell.execution_count != done.execution_count:
            changed += 1
        cell.outputs, cell.execution_count = outputs, done.execution_count
    return changed


def main(argv: list[str]) -> int:
    lessons = run.discover()
    wanted = run.select(lessons, ",".join(argv)) if argv else lessons
    last = max(lessons.index(p) for p in wanted)
    with tempfile.TemporaryDirectory(prefix="references-") as tmp:
        work, out = Path(tmp) / "workspace", Path(tmp) / "executed"
        for nb in lessons[:last + 1]:
            params = run.lesson_parameters(run.declared_parameters(nb), work, {})
            result = run.run_lesson(nb, out, params)
            if not result.ok:
                print(f"{nb.name}: failed at cell {result.failed_cell}: {result.error}", file=sys.stderr)
                return 1
            if nb in wanted:
                source = nbformat.read(nb, as_version=4)
                changed = copy_references(source, nbformat.read(out / nb.name, as_version=4))
                nbformat.write(source, nb)
                print(f"{nb.name}: {changed} reference cell(s) changed")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
