"""Versioned JSON Schemas for every JSON file the lessons write and the grader reads.

One file per document: ``<name>.schema.json``. ``validate(name, obj)`` raises
``SchemaError`` naming the field that is wrong and what was expected.
"""
from __future__ import annotations

import json
import math
from functools import lru_cache
from pathlib import Path

from lab.errors import LabError

HERE = Path(__file__).resolve().parent


class SchemaError(LabError):
    """A JSON document does not match its schema."""


@lru_cache(maxsize=None)
def load(name: str) -> dict:
    """The schema called ``name`` (e.g. ``"results"``)."""
    path = HERE / f"{name}.schema.json"
    if not path.exists():
        raise FileNotFoundError(f"no schema named {name!r}; have {names()}")
    return json.loads(path.read_text())


def names() -> list[str]:
    return sorted(p.name[: -len(".schema.json")] for p in HERE.glob("*.schema.json"))


def _reject_constant(token: str):
    raise ValueError(f"{token} is not valid JSON; write null or a finite number")


MAX_DEPTH = 64  # the lessons' documents nest 5 deep; 1,000 deep would exhaust the parser's or a validator's stack


def _no_duplicates(pairs: list[tuple[str, object]]) -> dict:
    obj = {}
    for key, val in pairs:
        if key in obj:
            raise ValueError(f"key {key!r} appears twice in one object; which one is meant cannot be told")
        obj[key] = val
    return obj


def _depth(obj: object) -> int:
    """How deep lists and objects nest in ``obj`` (without recursion), stopping once past ``MAX_DEPTH``."""
    deepest, stack = 0, [(obj, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, (dict, list)):
            deepest = max(deepest, depth)
            if depth > MAX_DEPTH:
                break
            stack.extend((v, depth + 1) for v in (node.values() if isinstance(node, dict) else node))
    return deepest


def loads(text: str) -> object:
    """Parse JSON strictly: NaN and Infinity, a key twice in one object, and nesting past ``MAX_DEPTH`` are refused."""
    too_deep = f"lists and objects are nested deeper than {MAX_DEPTH} levels; the lessons write at most a few"
    try:
        obj = json.loads(text, parse_constant=_reject_constant, object_pairs_hook=_no_duplicates)
    except RecursionError:
        raise ValueError(too_deep) from None
    if _depth(obj) > MAX_DEPTH:
        raise ValueError(too_deep)
    return obj


def validate(name: str, obj: object, source: str = "") -> object:
    """Check ``obj`` against schema ``name``; raise ``SchemaError`` that names the field."""
    import jsonschema

    where = f"{source}: " if source else ""
    _check_finite(obj, where)
    validator = jsonschema.Draft202012Validator(load(name))
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


def read(name: str, path: str | Path) -> object:
    """Read a JSON file and validate it against schema ``name``; errors name the file and field."""
    path = Path(path)
    try:
        obj = loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as e:
        raise SchemaError(f"{path.name}: not valid JSON ({e})") from None
    return validate(name, obj, path.name)
