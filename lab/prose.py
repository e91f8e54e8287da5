"""Sentences rendered from the run: prose that states a student's own numbers is printed by a cell, not written.

``say`` shows Markdown in a notebook (its ``text/markdown`` output is what a reader and the prose test see) and
prints the same text anywhere else.
"""
from __future__ import annotations

import re
from collections.abc import Mapping, Sequence


def say(*paragraphs: str) -> None:
    """Show ``paragraphs`` as Markdown in a notebook, or print them."""
    text = "\n\n".join(p for p in paragraphs if p)
    try:
        from IPython import get_ipython  # deferred: IPython matters only where a notebook shows the text
        from IPython.display import Markdown, display  # deferred: as above
    except ImportError:  # pragma: no cover - the lab's environment has IPython
        print(text)
        return
    if get_ipython() is None:
        print(text)
    else:
        display(Markdown(text))


def listing(items: list[str]) -> str:
    """``items`` as a Markdown list (one line each)."""
    return "\n".join(f"- {item}" for item in items)


CITED = re.compile(r"(?<![\w.])\d+\.\d+")
"""A decimal in a justification: what ``cites`` compares with the tables (a bare integer such as "2x" or "5 stuck
pixels" is the prose's, not a measurement)."""


def precise(token: str) -> bool:
    """A decimal precise enough to name a measurement: two places or more ("0.15"), or three significant digits
    ("12.5"); "1.0" or "0.1" would match too many rows of any table."""
    whole, places = token.split(".")
    return len(places) >= 2 or len((whole + places).lstrip("0")) >= 3


CITED_INTEGER = re.compile(r"(?<![\w.,])\d{1,3}(?:,\d{3})+(?![\w.])|(?<![\w.,])\d{3,}(?![\w.,])")
"""An integer of three digits or more (``9452`` or ``9,452``): cited only against a table's integers (bytes)."""


def table_numbers(*tables_: object, integers: bool = False) -> list[float]:
    """Every float in ``tables_`` (dicts and lists of rows, nested): what a justification may cite. ``integers``:
    also every int (bools aside), for tables whose measurements are counts, such as bytes."""
    out: list[float] = []
    stack = list(tables_)
    while stack:
        item = stack.pop()
        if isinstance(item, Mapping):
            stack += list(item.values())
        elif isinstance(item, (list, tuple)):
            stack += list(item)
        elif isinstance(item, float) or (integers and isinstance(item, int) and not isinstance(item, bool)):
            out.append(item)
    return out


def uncited(justification: str, printed: Sequence[float]) -> list[str]:
    """The ``precise`` decimals of ``justification`` that none of ``printed`` gives (``cites``' rule); a percentage
    ("0.1 %", a share or an option) is the prose's, not a measurement of the table."""
    return [m.group(0) for m in CITED.finditer(justification) if precise(m.group(0))
            and not re.match(r"\s?%", justification[m.end():]) and not cites(m.group(0), printed)]


def cites(justification: str, printed: Sequence[float]) -> list[str]:
    """The numbers in ``justification`` that one of ``printed`` gives: a ``precise`` decimal that one rounds to at
    the decimal's own precision, or an integer of three digits or more equal to an int of ``printed``."""
    found = []
    for token in filter(precise, CITED.findall(justification)):
        half = 0.5 * 10 ** -len(token.split(".")[1]) + 1e-9
        if any(abs(float(token) - v) <= half for v in printed):
            found.append(token)
    ints = {v for v in printed if isinstance(v, int)}
    found += [t for t in CITED_INTEGER.findall(justification) if int(t.replace(",", "")) in ints]
    return found
