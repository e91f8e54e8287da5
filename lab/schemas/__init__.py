"""Versioned JSON Schemas for every JSON file the lessons write and the grader reads.

One file per document: ``<name>.schema.json``. ``validate(name, obj)`` raises
``SchemaError`` naming the field that is wrong and what was expected.
"""
from __future__ import annotations

import contextlib
import functools
import json
import math
import sys
from importlib import resources
from pathlib import Path
from typing import Any

from lab import cache
from lab.errors import LabError
from lab.schemas.compiled import Unsupported, compile_schema

HERE = resources.files(__name__)  # the schemas are package data: found wherever the lab is installed


class SchemaError(LabError):
    """A JSON document does not match its schema."""


@functools.cache
def load(name: str) -> dict:
    """The schema called ``name`` (e.g. ``"results"``)."""
    path = HERE / f"{name}.schema.json"
    if not path.is_file():
        raise FileNotFoundError(f"no schema named {name!r}; have {names()}")
    return json.loads(path.read_text(encoding="utf-8"))


def names() -> list[str]:
    return sorted(p.name[: -len(".schema.json")] for p in HERE.iterdir() if p.name.endswith(".schema.json"))


class _Refused:
    """A value the parser met that is refused once its place in the document is known (to name the field)."""

    def __init__(self, problem: str):
        self.problem = problem


def _constant(token: str) -> _Refused:
    return _Refused(f"is {token}, which is not valid JSON; write null or a finite number")


def _float(text: str) -> float | _Refused:
    value = float(text)
    if math.isfinite(value):
        return value
    return _Refused(f"is {text[:40]}, too large for a float: it reads as {value}; only finite numbers are allowed")


MAX_DEPTH = 64  # the lessons' documents nest 5 deep; 1,000 deep would exhaust the parser's or a validator's stack
TOO_DEEP = f"lists and objects are nested deeper than {MAX_DEPTH} levels; the lessons write at most a few"


class _Duplicated(dict):
    """An object in which a key appeared twice (the last copy kept until the whole document is refused)."""

    key: str = ""


def _no_duplicates(pairs: list[tuple[str, object]]) -> dict:
    obj: dict = {}
    for key, val in pairs:
        if key in obj and not isinstance(obj, _Duplicated):
            obj = _Duplicated(obj)
            obj.key = key
        obj[key] = val
    return obj


def _path(trail) -> str:
    """'a/b/0' from the linked trail ``(parent_trail, key)`` built while walking (strings only when needed)."""
    keys = []
    while trail:
        trail, key = trail
        keys.append(str(key))
    return "/".join(reversed(keys))


def _refused(obj: object) -> str | None:
    """The first refused value in document order, as "field 'a/b' is ..." (no recursion); None if there is none."""
    stack: list[tuple[object, tuple | None, int]] = [(obj, None, 1)]
    while stack:
        node, trail, depth = stack.pop()
        if depth > MAX_DEPTH + 1:
            return TOO_DEEP
        if isinstance(node, _Refused):
            return f"field '{_path(trail) or '(top level)'}' {node.problem}"
        if isinstance(node, _Duplicated):
            return f"key {_path((trail, node.key))!r} appears twice in one object; which one is meant cannot be told"
        if isinstance(node, dict):
            stack.extend((v, (trail, k), depth + 1) for k, v in reversed(node.items()))
        elif isinstance(node, list):
            stack.extend((v, (trail, i), depth + 1) for i, v in reversed(list(enumerate(node))))
    return None


def loads(text: str) -> object:
    """Parse JSON strictly; every JSON file of a hand-in is read through here.

    Refused, naming the field: NaN and Infinity, a number too large for a float (``-1e999`` reads as
    ``-inf``), a key twice in one object (read last-wins, a wrong first copy would pass), and nesting
    past ``MAX_DEPTH``.
    """
    try:
        obj = json.loads(text, parse_constant=_constant, parse_float=_float, object_pairs_hook=_no_duplicates)
    except RecursionError:
        raise ValueError(TOO_DEEP) from None
    problem = _refused(obj)
    if problem:
        raise ValueError(problem)
    return obj


FORMAT_CHECKER_LIBRARIES = ("rfc3987_syntax", "rfc3987", "rfc3986_validator", "rfc3339_validator", "isoduration",
                            "webcolors", "jsonpointer", "uri_template", "fqdn", "idna")
"""What jsonschema imports, when installed (JupyterLab's dependencies install most), only to offer format checkers."""


@contextlib.contextmanager
def format_checkers_blocked():
    """Within the block, jsonschema imports without its format checkers' libraries: 0.1 s instead of 1.3 s.

    ``rfc3987_syntax`` alone compiles 38 Lark grammars on import (``python -X importtime``). The lab's schemas
    use no "format" and are validated without a format checker, so validation is the same without them; nbformat
    (which imports jsonschema with itself) checks no format either. The block (``None`` in ``sys.modules`` makes an
    import raise ImportError) covers only the libraries nothing has imported yet, and is lifted on leaving.
    """
    blocked = () if "jsonschema" in sys.modules else tuple(m for m in FORMAT_CHECKER_LIBRARIES if m not in sys.modules)
    sys.modules.update(dict.fromkeys(blocked))
    try:
        yield
    finally:
        for name in blocked:
            if sys.modules.get(name, 0) is None:
                del sys.modules[name]


@functools.cache
def _validator(name: str):
    """One validator per schema: building one resolves the schema's references again (a third of a small validation)."""
    with format_checkers_blocked():
        import jsonschema  # deferred: 0.1 s, paid only by a validation (a lesson's report, the grader's intake)
    return jsonschema.Draft202012Validator(load(name))


@functools.cache
def _compiled(name: str):
    """The schema's quick check (``lab.schemas.compiled``), or None where jsonschema alone checks it."""
    try:
        return compile_schema(load(name))
    except Unsupported:
        return None


def _matches_quickly(name: str, obj: object) -> bool:
    """True only where the compiled check finds ``obj`` valid; anything else (or an error) is for jsonschema."""
    check = _compiled(name)
    try:
        return check is not None and check(obj)
    except Exception:  # noqa: BLE001 - e.g. an in-process value that does not compare: jsonschema decides
        return False


def validate(name: str, obj: object, source: str = "") -> object:
    """Check ``obj`` against schema ``name``; raise ``SchemaError`` that names the field.

    A document the compiled check accepts is valid (about a tenth of jsonschema's time); any other is
    checked by jsonschema, which decides and names the field. Asked through the current ``lab.cache``.
    """
    return cache.through(cache.VALIDATE, _validate, name, obj, source)


def _validate(name: str, obj: object, source: str) -> object:
    where = f"{source}: " if source else ""
    _check_finite(obj, where)
    if _matches_quickly(name, obj):
        return obj
    validator = _validator(name)
    errors = sorted(validator.iter_errors(obj), key=lambda e: list(e.absolute_path))
    if errors:
        e = errors[0]
        field = "/".join(str(p) for p in e.absolute_path) or "(top level)"
        more = f" (and {len(errors) - 1} more problem(s))" if len(errors) > 1 else ""
        raise SchemaError(f"{where}field '{field}' does not match schema '{name}': {e.message}{more}")
    return obj


def _check_finite(obj: object, where: str, path: str = "") -> None:
    if isinstance(obj, float) and not math.isfinite(obj):
        raise SchemaError(f"{where}field '{path or '(top level)'}' is {obj}; only finite numbers are allowed")
    if isinstance(obj, dict):
        for k, v in obj.items():
            _check_finite(v, where, f"{path}/{k}" if path else str(k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            _check_finite(v, where, f"{path}/{i}" if path else str(i))


def read(name: str, path: str | Path) -> Any:
    """Read a JSON file and validate it against schema ``name`` (the document, as the schema shapes it); errors name
    the file and field."""
    path = Path(path)
    try:
        obj = loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as e:
        raise SchemaError(f"{path.name}: not valid JSON ({e})") from None
    return validate(name, obj, path.name)
