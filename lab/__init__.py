"""Calibration Lab: the helper package the lessons import.

Submodules load on first use, so ``import lab`` stays quick and
``lab.data``, ``lab.readers``, ``lab.quantize`` ... all work after it.
"""
from __future__ import annotations

import importlib
import importlib.util

__version__ = "0.1.0"


def __getattr__(name: str):
    if name == "check_reader":
        return importlib.import_module("lab.readers").check_reader
    if not name.startswith("_") and importlib.util.find_spec(f"lab.{name}") is not None:
        return importlib.import_module(f"lab.{name}")
    raise AttributeError(f"module 'lab' has no attribute {name!r}")
