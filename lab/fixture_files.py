"""Where the fixture files are: the ``fixtures`` package's folder, wherever the lab is installed.

Its own module so that ``lab.data`` and ``lab.variant`` (which reads the instructor's table of draws there) both
find it without importing each other.
"""
from __future__ import annotations

from importlib import resources
from pathlib import Path

from lab import cache


class FixturesNotFound(FileNotFoundError):
    """The ``fixtures`` package (its files are package data) cannot be found or is not a folder on disk."""


def fixtures_dir() -> Path:
    """The folder of the ``fixtures`` package, wherever the lab is installed (asked through the current ``lab.cache``).

    Found through ``importlib.resources``, not from this file's location: a non-editable install puts
    ``lab`` and ``fixtures`` side by side in site-packages, an editable one leaves them in the source tree,
    the Gradescope bundle puts them on ``PYTHONPATH``. ONNX Runtime and numpy open files by path, so the
    package must be a real folder (not inside a zip).
    """
    return cache.through(cache.FIXTURES_DIR, _fixtures_dir)


def _fixtures_dir() -> Path:
    try:
        root = resources.files("fixtures")
    except ModuleNotFoundError:
        raise FixturesNotFound("the 'fixtures' package is not installed next to 'lab'; reinstall the project "
                               "(`pip install .`, or `make setup` in a checkout)") from None
    path = Path(str(root))
    if not path.is_dir():
        raise FixturesNotFound(f"the 'fixtures' package is not a folder on disk ({root}); install the project "
                               "unzipped (`pip install .`)")
    return path
