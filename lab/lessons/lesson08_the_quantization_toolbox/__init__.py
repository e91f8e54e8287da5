"""Lesson 08, the quantization toolbox: ``toolbox`` (every converter setting, measured), ``calibrators`` (ORT's
calibration methods run directly), ``readings`` (each comparison the prose reads off a table, decided against the
noise and written from the run) and ``outliers`` (the exercise: calibrate through stuck pixels).

The package of ``notebooks/08_the_quantization_toolbox.ipynb``.
"""
from __future__ import annotations

from lab import lazy_submodule

__getattr__ = lazy_submodule(__name__)
