"""Lesson 06, accept or reject a quantized model: ``acceptance`` (summaries, probability checks, evidence, the
decision) and ``families`` (one INT8 model on both kernel families).

The package of ``notebooks/06_accept_or_reject.ipynb``.
"""
from __future__ import annotations

from lab import lazy_submodule

__getattr__ = lazy_submodule(__name__)
