"""The ruler by hand: scale, zero point, quantize, dequantize, in numpy.

Mirrors ONNX Runtime: ``compute_scale_zp`` widens the range to include 0, then
``scale = (rmax - rmin) / (qmax - qmin)`` and ``zero_point = round(qmin - rmin / scale)``.
QuantizeLinear is ``q = clip(round_half_even(x / scale) + zero_point, qmin, qmax)``
and DequantizeLinear is ``x = (q - zero_point) * scale``.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# a scale as ORT stores it (float32, what scale_zero_point returns) or as a Python float
Scale = float | np.float32

QRANGES = {"int8": (-128, 127), "uint8": (0, 255)}


def qrange(dtype: str = "int8", reduce_range: bool = False) -> tuple[int, int]:
    """(qmin, qmax) of a quantized type; ``reduce_range`` uses ORT's reduced ranges (int8: -64..64, uint8: 0..127)."""
    if dtype not in QRANGES:
        raise ValueError(f"unknown quantized type {dtype!r}; expected int8 or uint8")
    if reduce_range:
        return (-64, 64) if dtype == "int8" else (0, 127)
    return QRANGES[dtype]


@dataclass(frozen=True)
class InputRuler:
    """The scale and zero point of the QuantizeLinear that consumes the graph input."""

    scale: float
    zero_point: int
    dtype: str
    node: str

    @property
    def steps(self) -> int:
        qmin, qmax = qrange(self.dtype)
        return qmax - qmin

    @property
    def range_seen(self) -> float:
        """Width of the range the calibration saw: scale x (qmax - qmin)."""
        return float(np.float32(self.scale) * self.steps)

    @property
    def interval(self) -> tuple[float, float]:
        """The real interval the grid covers: [(qmin - zp) x scale, (qmax - zp) x scale]."""
        qmin, qmax = qrange(self.dtype)
        s = np.float32(self.scale)
        return float((qmin - self.zero_point) * s), float((qmax - self.zero_point) * s)


def calibration_range(values: np.ndarray) -> float:
    """Width of the range a MinMax calibrator sees in ``values``, widened to include 0 as ``scale_zero_point`` (and
    ORT) widen it: ``max(max, 0) - min(min, 0)``. Divided by the grid's 255 steps it is the scale."""
    x = np.asarray(values, np.float32)
    return float(max(float(x.max()), 0.0) - min(float(x.min()), 0.0))


def scale_zero_point(rmin: float, rmax: float, dtype: str = "int8",
                     symmetric: bool = False) -> tuple[np.float32, int]:
    """Scale (float32) and zero point (int) for the range [rmin, rmax], the way ORT computes them."""
    if not (np.isfinite(rmin) and np.isfinite(rmax)) or rmin > rmax:
        raise ValueError(f"need finite rmin <= rmax, got [{rmin}, {rmax}]")
    qmin, qmax = qrange(dtype)
    rmin, rmax = min(float(rmin), 0.0), max(float(rmax), 0.0)
    if symmetric:
        absmax = max(abs(rmin), abs(rmax))
        rmin, rmax = -absmax, absmax
    scale = (rmax - rmin) / (qmax - qmin)
    if scale < np.finfo(np.float32).tiny:
        return np.float32(1.0), 0
    if symmetric:
        zp = int(np.round((qmin + qmax) / 2.0))
    else:
        zp = int(np.round(qmin - rmin / scale))
    return np.float32(scale), zp


def quantize(x: np.ndarray, scale: Scale, zero_point: int, dtype: str = "int8") -> np.ndarray:
    """QuantizeLinear: round half to even, add the zero point, saturate."""
    qmin, qmax = qrange(dtype)
    q = np.rint(np.asarray(x, np.float32) / np.float32(scale)) + zero_point
    return np.clip(q, qmin, qmax).astype(np.int8 if dtype == "int8" else np.uint8)


def dequantize(q: np.ndarray, scale: Scale, zero_point: int) -> np.ndarray:
    """DequantizeLinear: ``(q - zero_point) * scale`` in float32."""
    return ((np.asarray(q).astype(np.int32) - zero_point).astype(np.float32) * np.float32(scale))


def round_trip(x: np.ndarray, scale: Scale, zero_point: int, dtype: str = "int8") -> np.ndarray:
    """Quantize then dequantize: what the model sees after the QuantizeLinear/DequantizeLinear pair."""
    return dequantize(quantize(x, scale, zero_point, dtype), scale, zero_point)


def representable_range(scale: Scale, zero_point: int, dtype: str = "int8") -> tuple[float, float]:
    """The real interval the grid covers: [(qmin - zp) * scale, (qmax - zp) * scale]."""
    qmin, qmax = qrange(dtype)
    return float((qmin - zero_point) * np.float32(scale)), float((qmax - zero_point) * np.float32(scale))


def ruler_stats(x: np.ndarray, rmin: float, rmax: float, dtype: str = "int8") -> dict:
    """What a calibration range [rmin, rmax] does to the values ``x``.

    Returns the scale and zero point, the fraction of values clipped, the fraction of the
    grid's steps the values actually use, and the max and mean absolute round-trip error.
    """
    x = np.asarray(x, np.float32).ravel()
    scale, zp = scale_zero_point(rmin, rmax, dtype)
    lo, hi = representable_range(scale, zp, dtype)
    q = quantize(x, scale, zp, dtype)
    err = np.abs(dequantize(q, scale, zp) - x)
    qmin, qmax = qrange(dtype)
    clipped = (x < lo - scale / 2) | (x > hi + scale / 2)
    used = (min(x.max(), hi) - max(x.min(), lo)) / scale if x.size else 0.0
    return {
        "rmin": float(rmin), "rmax": float(rmax), "scale": float(scale), "zero_point": int(zp),
        "clipped_fraction": float(clipped.mean()) if x.size else 0.0,
        "steps_used": int(min(qmax - qmin, max(0.0, round(float(used))))),
        "steps": qmax - qmin,
        "max_abs_error": float(err.max()) if x.size else 0.0,
        "mean_abs_error": float(err.mean()) if x.size else 0.0,
        "bound": float(scale) / 2,
    }


def ruler_for(rmin: float, rmax: float, dtype: str = "int8"):
    """The ruler a MinMax calibration that saw [rmin, rmax] lays on a tensor, as ``InputRuler``, so
    ``compare.diagnose`` can judge a range before any model is built (lesson 01)."""
    scale, zero_point = scale_zero_point(rmin, rmax, dtype)
    return InputRuler(float(scale), int(zero_point), dtype, f"[{rmin:g}, {rmax:g}]")
