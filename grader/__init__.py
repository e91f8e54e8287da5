"""Calibration Lab grader: recompute every reported number from what the student handed in.

``grader.grade(path) -> GradeResult`` grades one submission (a zip or a folder); the result has
``.score``, ``.max_score``, ``.status`` and ``.to_dict()``. ``python -m grader`` grades one
submission or a whole class.
"""
from __future__ import annotations

from grader.version import __version__


def grade(path, limits=None):
    """Grade one submission; see ``grader.core.grade``."""
    # deferred: grader.core loads the whole grading stack (about 1 s); `import grader` (its version, the command
    # line) stays light
    from grader.core import grade as _grade

    return _grade(path, limits)


__all__ = ["grade", "__version__"]
