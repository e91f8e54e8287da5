"""What the lessons' exercises share: the conversion settings they fix, and the error their checks raise.

Lessons 03, 04 and 05 convert with ``SETTINGS`` (05 with every one of them but the format), their notebooks check
the exercise with a function that raises ``ExerciseCheckFailed``, and the grader's reference hand-in converts with
the same settings: written once here, read by all of them.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from lab.errors import LabError

if TYPE_CHECKING:  # a type only: lab.convert imports ONNX Runtime, which this module does not need
    from lab.convert import QuantizeSettings

# ORT's defaults spelled out (QDQ, signed 8 bits, one scale per tensor, MinMax), so the only thing that changes
# between the three-way lesson's models, and along the growth lesson's series, is the calibration data
SETTINGS: QuantizeSettings = {"quant_format": "QDQ", "activation_type": "QInt8", "weight_type": "QInt8",
                               "per_channel": False, "calibrate_method": "MinMax"}


class ExerciseCheckFailed(LabError):
    """A lesson's exercise did not produce what the lesson asked for; the message names the file and the rule."""
