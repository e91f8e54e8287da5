"""Calibration Lab: the helper package the lessons import.

Submodules load on first use, so ``import lab`` stays quick and
``lab.data``, ``lab.readers``, ``lab.quantize`` ... all work after it.
"""
from __future__ import annotations

import importlib

__version__ = "0.1.0"

_SUBMODULES = {
    "data", "readers", "workspace", "quantize", "graph", "compare", "ruler",
    "experiment", "run", "release", "submit", "metrics", "plots", "scenarios",
    "recipe", "schemas", "toolbox", "widgets", "errors",
}


def __getattr__(name: str):
    if name in _SUBMODULES:
        return importlib.import_module(f"lab.{name}")
    if name == "check_reader":
        return importlib.import_module("lab.readers").check_reader
    raise AttributeError(f"module 'lab' has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + list(_SUBMODULES) + ["check_reader"])
