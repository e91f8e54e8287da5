"""One module (or package) per lesson, named after its notebook: what that notebook shows, and what the grader
recomputes for it. ``lab.lessons.lesson05_qdq_vs_qoperator`` is ``notebooks/05_qdq_vs_qoperator.ipynb``'s.

Lessons import the core (``lab.data``, ``lab.graph``, ...) and earlier lessons, never a later one or a tool.
Submodules load on first use, as in ``lab``.
"""
from __future__ import annotations

from lab import lazy_submodule

__getattr__ = lazy_submodule(__name__)
