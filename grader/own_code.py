"""A graded module must be the student's own code: it may not hand the exercise to the lab's helpers.

``lab`` (what the kit ships) and ``grader`` (importable where grading runs) hold reference code:
``lab.readers.ArrayReader`` serves arrays to ONNX Runtime the way lesson 02's ``DigitReader`` must,
and the grader keeps reference solutions. A ``calibration_reader.py`` that is
``from lab.readers import ArrayReader as DigitReader`` would pass every behavioural check, so the
grader reads the module's source first, with ``ast`` (nothing is run), and refuses it.

Found, in any form: ``import lab``, ``import lab.readers as r``,
``from lab.lessons.lesson06_accept_or_reject.acceptance import x``,
``importlib.import_module("lab...")``, ``__import__("lab...")``, ``sys.modules["lab..."]``, and an
import whose module name is computed at run time (the grader cannot tell it is not the lab's; a
graded module never needs one). Relative imports are not found: a graded module is loaded alone,
outside any package, where they fail on their own.

A module may import what its workspace contract entry allows (``lab.contract.allowed_imports``): the camera reader
of lesson 10 must call the deployed path, ``lab.camera``, rather than copy it; that module does no exercise.

Pure functions; ``refusal(source, file)`` is the message a check shows, or None.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

from lab import contract

INSTRUCTOR_PACKAGES = ("lab", "grader")
DYNAMIC = "a module named at run time"
MAX_SHOWN = 3
MAX_NAME = 80


@dataclass(frozen=True)
class Delegation:
    """One place where a module reaches for the lab's (or the grader's) code."""

    line: int
    what: str  # e.g. "lab.readers.ArrayReader", or DYNAMIC

    def __str__(self) -> str:
        return f"line {self.line} imports {self.what}"


def _ours(name: object) -> bool:
    return isinstance(name, str) and name.split(".", 1)[0] in INSTRUCTOR_PACKAGES


def _printable(name: str) -> str:
    """A name from the student's source, safe to print: no lone surrogates, no control characters, short."""
    text = name.encode("utf-8", "backslashreplace").decode("utf-8")
    text = "".join(c if c.isprintable() else "?" for c in text)
    return text if len(text) <= MAX_NAME else text[:MAX_NAME - 3] + "..."


def _call_name(func: ast.expr) -> str:
    """``importlib.import_module`` -> "import_module"; ``__import__`` -> "__import__"."""
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return ""


def _first_arg(call: ast.Call) -> ast.expr | None:
    if call.args:
        return call.args[0]
    return next((k.value for k in call.keywords if k.arg == "name"), None)


def _is_sys_modules(node: ast.expr) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "modules" and \
        isinstance(node.value, ast.Name) and node.value.id == "sys"


def delegations(tree: ast.AST) -> list[Delegation]:
    """Every import of ``lab`` or ``grader`` in a parsed module, in line order."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [Delegation(node.lineno, alias.name) for alias in node.names if _ours(alias.name)]
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0 and _ours(node.module):
                found += [Delegation(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
        elif isinstance(node, ast.Call) and _call_name(node.func) in ("import_module", "__import__"):
            arg = _first_arg(node)
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                if _ours(arg.value):
                    found.append(Delegation(node.lineno, str(arg.value)))
            elif arg is not None:
                found.append(Delegation(node.lineno, DYNAMIC))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" \
                and _is_sys_modules(node.func.value):
            arg = _first_arg(node)
            if isinstance(arg, ast.Constant) and _ours(arg.value):
                found.append(Delegation(node.lineno, str(arg.value)))
        elif isinstance(node, ast.Subscript) and _is_sys_modules(node.value):
            if isinstance(node.slice, ast.Constant) and _ours(node.slice.value):
                found.append(Delegation(node.lineno, str(node.slice.value)))
    return sorted(set(found), key=lambda d: (d.line, d.what))


def find(source: str | bytes) -> list[Delegation] | None:
    """The delegations in ``source``; None if it does not parse (running it will say why)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    return delegations(tree)


def refusal(source: str | bytes, file: str, exercise: str | None = None) -> str | None:
    """The message for a graded module that delegates its exercise, or None if it is its own code.

    For ``from lab.readers import ArrayReader as DigitReader`` in ``calibration_reader.py`` it starts
    "write DigitReader yourself; calibration_reader.py line 1 imports lab.readers.ArrayReader".
    """
    allowed = contract.allowed_imports().get(file, ())
    found = [d for d in find(source) or [] if not any(d.what == m or d.what.startswith(m + ".") for m in allowed)]
    if not found:
        return None
    exercise = exercise or contract.exercises().get(file) or "this exercise"
    places = "; ".join(f"line {d.line} imports {_printable(d.what)}" for d in found[:MAX_SHOWN])
    more = f" (and {len(found) - MAX_SHOWN} more)" if len(found) > MAX_SHOWN else ""
    return (f"write {exercise} yourself; {file} {places}{more}. A graded module may not import the lab's "
            f"or the grader's code (the lab's helpers stop where the exercise begins): remove the import and "
            f"write {exercise} in {file}, then run its lesson again")


def refusal_for(path: str | Path, file: str | None = None, exercise: str | None = None) -> str | None:
    """``refusal`` of the module at ``path`` (read as bytes, so its own encoding line decides)."""
    path = Path(path)
    return refusal(path.read_bytes(), file or path.name, exercise)
