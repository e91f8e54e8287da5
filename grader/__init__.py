"""Calibration Lab grader: recompute every reported number from what the student handed in.

``grader.grade(path) -> GradeResult`` grades one submission (a zip or a folder); the result has
``.score``, ``.max_score``, ``.status`` and ``.to_dict()``. ``python -m grader`` grades one
submission or a whole class.
"""
from __future__ import annotations

import os

# One BLAS thread per grading process, set before numpy loads (OpenBLAS reads it once). Grading's matrices are
# small: a second BLAS thread gains nothing there and spins on the other core after each product, and a batch runs
# one grading process per core. Measured on a 2-core machine: 0.37 s -> 0.25 s of CPU per hand-in.
# The sandboxed student code gets the same (``grader.sandbox.scrubbed_env``).
for _name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_name, "1")

from grader.version import __version__  # noqa: E402 - after the BLAS setting, as everything the grader imports


def grade(path, limits=None):
    """Grade one submission; see ``grader.core.grade``."""
    # deferred: grader.core loads the whole grading stack (about 1 s); `import grader` (its version, the command
    # line) stays light
    from grader.core import grade as _grade

    return _grade(path, limits)


__all__ = ["grade", "__version__"]
