"""Lesson 09, choosing a recipe for this CPU: ``choice`` (the requirement, the candidates on both kernel families and
timed here with ``lab.speed``, the check, ``toolbox.json``).

The package of ``notebooks/09_choosing_a_recipe.ipynb``.
"""
from __future__ import annotations

from lab import lazy_submodule

__getattr__ = lazy_submodule(__name__)
