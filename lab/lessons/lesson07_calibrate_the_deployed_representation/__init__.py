"""Lesson 07, calibrate the deployed representation: ``scenarios`` (named operating conditions),
``scenario_checks`` (FP32 against INT8 under each), ``recipe`` (the calibration selection, the recipe, the
release) and ``debugging`` (where a model parts from FP32).

The package of ``notebooks/07_calibrate_the_deployed_representation.ipynb``.
"""
from __future__ import annotations

from lab import lazy_submodule

__getattr__ = lazy_submodule(__name__)
