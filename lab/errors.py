"""Errors that lessons and the grader show to people: each names what was expected."""
from __future__ import annotations

import os
import sys
from collections.abc import Callable


class LabError(Exception):
    """Base class: a message written for a student, not a traceback."""

    def _render_traceback_(self):  # IPython shows this instead of a traceback
        return [f"\x1b[31m{type(self).__name__}\x1b[0m: {self}"]


class NotQuantizedError(LabError):
    """The model has no QuantizeLinear on the named input."""


class ReaderContractError(LabError):
    """A calibration reader broke the CalibrationDataReader contract."""


class ModelContractError(LabError):
    """A model does not have the expected input or output."""


class WorkspaceError(LabError):
    """The workspace cannot be created or written."""


def exit_with(main: Callable[[], int]) -> None:
    """``sys.exit(main())`` for a ``python -m`` command; a reader of its output that left early (``| head``) ends
    it quietly, with no BrokenPipeError traceback."""
    try:
        sys.exit(main())
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)
