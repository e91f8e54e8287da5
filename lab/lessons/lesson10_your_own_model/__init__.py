"""Lesson 10, your own model: a small CNN behind a camera. ``camera_path`` (the reader through the deployed path,
the attractive photographs, pre-processing, per-channel axes, the two formats) and ``release`` (the kernel family on
Conv, the scenarios, the release and its recipe, ``camera-release.json``) and ``recovery`` (a handed-in model that
lost accuracy, worked as a practitioner does: FP32, fake-quant, ablation, 16-bit activations).

The package of ``notebooks/10_your_own_model.ipynb``.
"""
from __future__ import annotations

from lab import lazy_submodule

__getattr__ = lazy_submodule(__name__)
