"""Fixed-width text tables: the one formatter behind the lab's printed tables.

A column is a heading and a format spec: ``"<16"`` (text, left in 16 characters), ``">11.4f"`` (a number, right
in 11, four decimals) or ``""`` (as it comes: the last column of free text). The heading takes the spec's
alignment and width, so a table's layout is written once, next to its headings, not in every f-string.
``format_rows`` sizes the columns from their contents instead.
"""
from __future__ import annotations

import re
from collections.abc import Sequence

Column = tuple[str, str]  # (heading, format spec)

# [[fill]align][sign][z][#][0][width]: the part of a spec that places a value, without its precision or type
_PLACEMENT = re.compile(r"(?:.?[<>=^])?[+\- ]?z?#?0?\d*")


def placement(spec: str) -> str:
    """The alignment and width of ``spec`` (``">11.4f"`` -> ``">11"``): how a heading or a ``-`` sits there."""
    found = _PLACEMENT.match(spec)
    assert found is not None, spec  # every part of the pattern is optional: it matches at the start of any spec
    return found.group(0)


def row(values: Sequence, columns: Sequence[Column], sep: str = " ") -> str:
    """One line: each value formatted with its column's spec; fewer values than columns leave the rest out."""
    return sep.join(format(v, spec) for v, (_, spec) in zip(values, columns))


def header(columns: Sequence[Column], sep: str = " ") -> str:
    """The headings, each placed as its column's values are."""
    return sep.join(format(heading, placement(spec)) for heading, spec in columns)


def number(value, spec: str = ".4f") -> str:
    """A number in ``spec``, or ``-`` for anything else (a missing field, a bool): a summary read from a file
    another run wrote shows what it has."""
    return format(value, spec) if isinstance(value, (int, float)) and not isinstance(value, bool) else "-"


def rule(line: str) -> str:
    """A line of ``-`` as long as ``line`` (the header above it)."""
    return "-" * len(line)


def _cell(value, spec: str) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(f"{x:.3g}" for x in value) + "]"
    if isinstance(value, dict):
        return ", ".join(f"{k}={v}" for k, v in value.items()) or "defaults"
    return format(value, spec)


def format_rows(rows: list[dict], columns: list[tuple[str, str, str]]) -> str:
    """A table sized to its contents. ``columns``: (key, heading, format spec such as '.4f'); text left, numbers
    right; a missing value shows as ``-``, a bool as yes/no, a list as its values, a dict as key=value."""
    cells = [[_cell(r.get(key), spec) for key, _, spec in columns] for r in rows]
    widths = [max([len(h)] + [len(c[i]) for c in cells]) for i, (_, h, _) in enumerate(columns)]
    placed = [(h, f"{'<' if i == 0 or not spec else '>'}{w}")
              for i, ((_, h, spec), w) in enumerate(zip(columns, widths))]
    head = header(placed, "  ").rstrip()
    return "\n".join([head, rule(head)] + [row(c, placed, "  ").rstrip() for c in cells])
