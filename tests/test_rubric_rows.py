"""One function per rubric row: no function of the grader's lesson modules is longer than 60 lines.

A check function that computes several rubric rows at once grows past a screen and hides which row a branch
serves; the grader's lesson modules keep one function per row and their helpers short (issue 29, item 3).
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

LESSONS = Path(__file__).resolve().parents[1] / "grader" / "lessons"
LIMIT = 60  # lines, from the def (or its first decorator) to the function's last line
# modules whose owners have not split them yet, named so the lead can fix them: each entry is (module, function)
ALLOWED: frozenset[tuple[str, str]] = frozenset()


def long_functions(source: str, limit: int = LIMIT) -> list[tuple[str, int, int]]:
    """(name, first line, length) of every function or method in ``source`` longer than ``limit`` lines."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            first = min([node.lineno] + [d.lineno for d in node.decorator_list])
            length = node.end_lineno - first + 1
            if length > limit:
                out.append((node.name, first, length))
    return out


MODULES = sorted(LESSONS.glob("*.py"))


@pytest.mark.parametrize("path", MODULES, ids=[p.stem for p in MODULES])
def test_no_function_of_a_grader_lesson_is_longer_than_60_lines(path):
    found = [f"{path.name}:{line} {name} is {length} lines"
             for name, line, length in long_functions(path.read_text(encoding="utf-8"))
             if (path.stem, name) not in ALLOWED]
    assert not found, f"split these into one function per rubric row (at most {LIMIT} lines each): {found}"


def test_the_allow_list_names_only_functions_that_are_still_long():
    still_long = {(p.stem, name) for p in MODULES for name, _, _ in long_functions(p.read_text(encoding="utf-8"))}
    assert ALLOWED <= still_long, f"remove from ALLOWED, they are short now: {sorted(ALLOWED - still_long)}"


def test_the_measure_counts_a_long_function():
    body = "\n".join(f"    x{i} = {i}" for i in range(LIMIT))
    assert long_functions(f"def f():\n{body}\n") == [("f", 1, LIMIT + 1)]
    assert long_functions("@decorated\ndef g():\n    return 1\n", limit=2) == [("g", 1, 3)]
    assert long_functions(f"class C:\n    def m(self):\n{body.replace('    ', '        ')}\n") == \
        [("m", 2, LIMIT + 1)]
