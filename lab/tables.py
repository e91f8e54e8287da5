"""Fixed-width text tables: the one formatter behind the lab's printed tables, and real tables in a notebook.

A column is a heading and a format spec: ``"<16"`` (text, left in 16 characters), ``">11.4f"`` (a number, right
in 11, four decimals) or ``""`` (as it comes: the last column of free text). The heading takes the spec's
alignment and width, so a table's layout is written once, next to its headings, not in every f-string.
``format_rows`` sizes the columns from their contents instead, and returns a ``Table``: the same text for ``print``,
a terminal and ``lab run``, and an HTML table with column and row headers when a notebook displays it (WCAG 2.1
1.3.1: a screen reader announces each cell with its headings, not padded rows).
"""
from __future__ import annotations

import re
from collections.abc import Sequence
from html import escape

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


class Table(str):
    """A table's text, which a notebook shows as an HTML table: headings as column headers, the first column as
    row headers, numbers right-aligned. String operations give plain text, so the text form is never lost."""

    headings: tuple[str, ...]
    cells: tuple[tuple[str, ...], ...]
    right: tuple[bool, ...]  # per column: right-aligned (a number)

    def __new__(cls, text: str, headings: Sequence[str], cells: Sequence[Sequence[str]], right: Sequence[bool]):
        table = super().__new__(cls, text)
        table.headings, table.cells, table.right = tuple(headings), tuple(map(tuple, cells)), tuple(right)
        return table

    def _repr_html_(self) -> str:
        return html_table(self.headings, self.cells, self.right)

    def _repr_pretty_(self, p, cycle) -> None:
        """The text form where a notebook shows plain text (IPython would show a str's quoted repr)."""
        p.text(str(self))

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict:
        return {"text/plain": str(self), "text/html": self._repr_html_()}


def html_table(headings: Sequence[str], cells: Sequence[Sequence[str]], right: Sequence[bool]) -> str:
    """An HTML table: ``<th scope="col">`` headings, each row's first cell a ``<th scope="row">``."""
    align = [' style="text-align: right"' if r else ' style="text-align: left"' for r in right]
    head = "".join(f'<th scope="col"{a}>{escape(h)}</th>' for h, a in zip(headings, align))
    body = "".join("<tr>" + "".join((f'<th scope="row"{a}>' if i == 0 else f"<td{a}>") + escape(c)
                                    + ("</th>" if i == 0 else "</td>") for i, (c, a) in enumerate(zip(r, align)))
                   + "</tr>" for r in cells)
    return f'<table class="lab-table"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def format_rows(rows: list[dict], columns: list[tuple[str, str, str]]) -> Table:
    """A table sized to its contents. ``columns``: (key, heading, format spec such as '.4f'); text left, numbers
    right; a missing value shows as ``-``, a bool as yes/no, a list as its values, a dict as key=value."""
    cells = [[_cell(r.get(key), spec) for key, _, spec in columns] for r in rows]
    widths = [max([len(h)] + [len(c[i]) for c in cells]) for i, (_, h, _) in enumerate(columns)]
    right = [i > 0 and bool(spec) for i, (_, _, spec) in enumerate(columns)]
    placed = [(h, f"{'>' if r else '<'}{w}") for r, (_, h, _), w in zip(right, columns, widths)]
    head = header(placed, "  ").rstrip()
    text = "\n".join([head, rule(head)] + [row(c, placed, "  ").rstrip() for c in cells])
    return Table(text, [h for _, h, _ in columns], cells, right)
