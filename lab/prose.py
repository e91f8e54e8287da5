"""Sentences rendered from the run: prose that states a student's own numbers is printed by a cell, not written.

``say`` shows Markdown in a notebook (its ``text/markdown`` output is what a reader and the prose test see) and
prints the same text anywhere else.
"""
from __future__ import annotations


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
