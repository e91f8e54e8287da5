"""A schema compiled to plain Python checks: a fast yes for the documents that match it.

jsonschema walks a document keyword by keyword through its validator objects: about 14 ms for a lesson-07
recipe, 25-30 ms for a whole hand-in's JSON at the grader's intake. ``compile_schema(schema)`` turns the
keywords the lab's schemas use into nested closures, each keyword applied to exactly the instances
jsonschema applies it to (draft 2020-12, jsonschema's own type tests), that answer the same question in
about a tenth of the time.

The answer is used one way only: True means the document matches, and nothing else runs. False sends it to
jsonschema, which decides and names the field that is wrong. Where this module might say True and
jsonschema False, it says False instead: ``enum`` and ``const`` match only a value of the very same type
(jsonschema also equates 1 with 1.0), and a schema with any keyword not listed here is not compiled at all
(``Unsupported``), so jsonschema alone checks it. tests/test_schemas_compiled.py holds the two to the same
answers on every document a hand-in carries, and on thousands of broken copies.
"""
from __future__ import annotations

import numbers
import operator
import re
from collections.abc import Callable

Check = Callable[[object], bool]

ANNOTATIONS = frozenset({"$schema", "$id", "$defs", "$comment", "title", "description", "examples", "default"})
SCALARS = (str, bool, int, float, type(None))  # enum and const values this module compares; others: Unsupported


class Unsupported(ValueError):
    """The schema uses a keyword (or a form of one) this module does not compile."""


def is_object(x) -> bool:
    return isinstance(x, dict)


def is_array(x) -> bool:
    return isinstance(x, list)


def is_string(x) -> bool:
    return isinstance(x, str)


def is_number(x) -> bool:
    return not isinstance(x, bool) and isinstance(x, numbers.Number)


def is_integer(x) -> bool:
    return not isinstance(x, bool) and (isinstance(x, int) or isinstance(x, float) and x.is_integer())


TYPES = {"object": is_object, "array": is_array, "string": is_string, "number": is_number, "integer": is_integer,
         "boolean": lambda x: isinstance(x, bool), "null": lambda x: x is None}


def _itself(x):
    return x


# keyword -> (the instances it applies to, what of them it bounds, how that must compare with the keyword's value)
BOUNDS = {"minimum": (is_number, _itself, operator.ge), "maximum": (is_number, _itself, operator.le),
          "exclusiveMinimum": (is_number, _itself, operator.gt), "exclusiveMaximum": (is_number, _itself, operator.lt),
          "minLength": (is_string, len, operator.ge), "maxLength": (is_string, len, operator.le),
          "minItems": (is_array, len, operator.ge), "maxItems": (is_array, len, operator.le),
          "minProperties": (is_object, len, operator.ge), "maxProperties": (is_object, len, operator.le)}


def compile_schema(root: dict) -> Check:
    """``check(document) -> bool`` for ``root`` (True only where jsonschema finds no error); raises ``Unsupported``."""
    defs = root.get("$defs", {})
    compiled: dict[str, Check] = {}

    def ref(target: str) -> Check:
        name = target[len("#/$defs/"):]
        if not target.startswith("#/$defs/") or name not in defs or "/" in name:
            raise Unsupported(f"$ref {target!r}: only '#/$defs/NAME' is compiled")
        if name not in compiled:
            compiled[name] = lambda x: False  # a definition that refers to itself, while it is compiled
            compiled[name] = build(defs[name])
        return lambda x: compiled[name](x)

    def build(schema) -> Check:
        if schema is True:
            return lambda x: True
        if schema is False:
            return lambda x: False
        if not isinstance(schema, dict):
            raise Unsupported(f"a schema must be an object or a boolean, not {schema!r}")
        checks = [_keyword(key, value, schema, build, ref) for key, value in schema.items() if key not in ANNOTATIONS]
        return _all(checks)

    return build(root)


def _all(checks: list[Check]) -> Check:
    if len(checks) == 1:
        return checks[0]

    def check(x) -> bool:
        for c in checks:
            if not c(x):
                return False
        return True

    return check


def _same(value) -> Check:
    if not isinstance(value, SCALARS):
        raise Unsupported(f"enum or const value {value!r}: only strings, numbers, booleans and null are compiled")
    kind = type(value)
    return lambda x: type(x) is kind and x == value


def _keyword(key: str, value, schema: dict, build, ref) -> Check:  # noqa: C901 - one branch per keyword, flat
    """One keyword's check, applied to the instances jsonschema applies it to (else it passes)."""
    if key == "$ref":
        return ref(value)
    if key == "type":
        names = [value] if isinstance(value, str) else list(value)
        if any(t not in TYPES for t in names):
            raise Unsupported(f"type {value!r}")
        tests = [TYPES[t] for t in names]
        return tests[0] if len(tests) == 1 else (lambda x: any(t(x) for t in tests))
    if key == "properties":
        subs = [(name, build(sub)) for name, sub in value.items()]

        def properties(x) -> bool:
            if isinstance(x, dict):
                for name, sub in subs:
                    if name in x and not sub(x[name]):
                        return False
            return True
        return properties
    if key == "required":
        names = list(value)
        return lambda x: not isinstance(x, dict) or all(name in x for name in names)
    if key == "additionalProperties":
        if "patternProperties" in schema:
            raise Unsupported("additionalProperties beside patternProperties")
        known = set(schema.get("properties", {}))
        if value is False:
            return lambda x: not isinstance(x, dict) or all(k in known for k in x)
        sub = build(value)
        return lambda x: not isinstance(x, dict) or all(sub(v) for k, v in x.items() if k not in known)
    if key == "items":
        if "prefixItems" in schema:
            raise Unsupported("items beside prefixItems")
        sub = build(value)
        return lambda x: not isinstance(x, list) or all(sub(v) for v in x)
    if key == "allOf":
        return _all([build(sub) for sub in value])
    if key == "enum":
        options = [_same(v) for v in value]
        return lambda x: any(o(x) for o in options)
    if key == "const":
        return _same(value)
    if key == "pattern":
        pattern = re.compile(value)
        return lambda x: not isinstance(x, str) or pattern.search(x) is not None
    if key == "propertyNames":
        sub = build(value)
        return lambda x: not isinstance(x, dict) or all(sub(k) for k in x)
    if key in BOUNDS:
        applies, measure, holds = BOUNDS[key]
        return lambda x: not applies(x) or holds(measure(x), value)
    raise Unsupported(f"keyword {key!r} is not compiled")
