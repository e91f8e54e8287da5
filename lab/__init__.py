"""Calibration Lab: the helper package the lessons import.

The layout: the core every lesson uses sits here (``data``, ``ruler``, ``graph``, ``readers``, ``convert``,
``compare``, ``measure``, ``kernels``, ``workspace``, ``schemas``, ``errors``, ...); ``lab.lessons`` holds one
module per lesson, named after its notebook; ``lab.tools`` the command-line tools. Nothing here imports the grader.

Submodules load on first use, so ``import lab`` stays quick and ``lab.data``, ``lab.readers``,
``lab.lessons.lesson04_more_batches`` ... all work after it.
"""
from __future__ import annotations

import importlib
import importlib.util

from lab.version import __version__

__all__ = ["__version__", "hand_in", "lazy_submodule"]


def lazy_submodule(package: str):
    """A module ``__getattr__`` that imports ``package.NAME`` on first use."""
    def __getattr__(name: str):
        if not name.startswith("_") and importlib.util.find_spec(f"{package}.{name}") is not None:
            return importlib.import_module(f"{package}.{name}")
        raise AttributeError(f"module {package!r} has no attribute {name!r}")
    return __getattr__


__getattr__ = lazy_submodule(__name__)


def hand_in(student: str | None = None, work_dir="../workspace", out_dir=None):
    """Hand in from a notebook cell: ``lab.handin.hand_in`` (packs the workspace the lessons used into
    ``<student>.zip`` in your folder and prints what is missing)."""
    from lab import handin  # deferred: keeps ``import lab`` quick (it loads the converter's versions)

    return handin.hand_in(student, work_dir, out_dir)
