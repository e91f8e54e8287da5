"""The CPU's INT8 kernel family: which one this machine runs, and the other one computed in numpy.

ONNX Runtime multiplies u8 activations by s8 weights in one of two ways:

- **exact**: products added into int32 (x86 VNNI / AVX-VNNI / AMX, ARM dot product). Never overflows.
- **saturating**: x86 AVX2 or AVX-512BW without VNNI. ``vpmaddubsw`` adds each *pair* of adjacent
  products ``a[2j]*w[2j] + a[2j+1]*w[2j+1]`` into an int16 that saturates at +-32,767;
  255 x 127 x 2 = 64,770 does not fit, so large activations times large weights clip.

``machine_family()`` asks the kernel itself (a one-MatMul probe), never the CPU's flag strings.
``emulate(model, x, family)`` runs a model as either family computes it, with numpy, following the kernels
ONNX Runtime uses on x86: a QDQ ``DequantizeLinear -> op -> QuantizeLinear`` runs as the op's integer kernel
(``QLinearMatMul``, ``QGemm``, ``QLinearConv`` with s8 activations shifted to u8; ``QLinearSoftmax``,
``QLinearGlobalAveragePool``; ``QLinearAdd`` when its inputs and output are of one integer type on x86, s8
activations counted as u8 where ORT moves them, a QuantizeLinear / DequantizeLinear pair with one consumer: a
tensor two nodes read keeps int8, and its readers stay float ops), every other QDQ op as written. Convolutions
pair their raw products along K in the order ORT's kernels read it (kernel position major, input channel minor);
depthwise ones run on an exact kernel in both families (MLAS widens each product to int32), and QLinearAdd, which
sums no products, is the same float32 arithmetic on both. ``HANDLERS`` maps each op type it covers to its
handler; an op it does not cover raises ``EmulationError`` instead of guessing, and ``uncovered(model)`` lists
them beforehand.

``emulate(..., x64_precision=True)`` computes what a session with ONNX Runtime's config entry
``session.x64quantprecision = "1"`` (``X64_PRECISION_KEY``) outputs on x86: when the session loads, every constant
int8 weight with a value outside [-64, 64] becomes uint8 (w + 128, its zero point + 128: ``x64_weights``), in
a QDQ graph's DequantizeLinear (``QDQS8ToU8Transformer``) and in the integer ops ``X64_WEIGHT_INPUTS`` names
(``Avx2WeightS8ToU8Transformer``), so U8U8 kernels run, which never pair-saturate; a QDQ Add whose bias turned
uint8 then fuses into ``QLinearAdd``. The model file is unchanged: whoever creates the session decides.
"""
from __future__ import annotations

import contextlib
import contextvars
import functools
import math
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from lab import load_time
from lab.errors import LabError
from lab.graph import session

EXACT, SATURATING = "exact", "saturating"
FAMILIES = (EXACT, SATURATING)
DESCRIPTIONS = {
    EXACT: "exact int32 sums (x86 with VNNI, AVX-VNNI or AMX; ARM)",
    SATURATING: "int16 pair sums that saturate (x86 AVX2 or AVX-512 without VNNI)",
}
INT16_MAX, INT16_MIN = 32767, -32768
ENV_VAR = "LAB_KERNEL_FAMILY"  # set it to run a whole session as the other family computes
PROBE_EXACT, PROBE_SATURATING = 8128.0, 4096.0

X64_PRECISION_KEY = "session.x64quantprecision"
"""ORT's session config key (``kOrtSessionOptionsAvx2PrecisionMode``): "1" runs U8U8 kernels on x86 (``emulate``'s
``x64_precision``). Read only on x86, and only where ORT's U8S8 and U8U8 GEMMs differ (``MlasPlatformU8S8Overflow``:
every AVX2 CPU, VNNI or not); on ARM it changes nothing."""
S7_LIMIT = 64  # an int8 weight within [-64, 64] stays int8 (255 x 64 x 2 = 32,640 fits an int16 pair sum)
X64_WEIGHT_INPUTS = {"QLinearMatMul": (3, 5), "QLinearConv": (3, 5), "QGemm": (3, 5), "MatMulInteger": (1, 3)}
"""The integer ops of the emulation whose constant weight (input index, zero point index) ``x64_precision``
shifts: ``Avx2WeightS8ToU8Transformer``'s list (which also has MatMulIntegerToFloat, DynamicQuantizeMatMul and
QAttention, the fused forms ORT makes of these, and DynamicQuantizeLSTM); QLinearMatMul only at its opset-10
version (an opset-21 model's stays int8 and saturates)."""


class EmulationError(LabError):
    """The emulation cannot compute this model (an op or a type it does not cover)."""


def check_family(family: str) -> str:
    """``family`` if it names a kernel family, else a ``ValueError`` naming the two."""
    if family not in FAMILIES:
        raise ValueError(f"unknown kernel family {family!r}; expected one of {list(FAMILIES)}")
    return family


# --- which family this machine runs -------------------------------------------------------------

def probe_model() -> onnx.ModelProto:
    """One QDQ MatMul whose answer tells the families apart.

    64 inputs of 1.0 at scale 1/255 (u8 255) times 64 weights of 127 at scale 1, output scale 64:
    exact int32 sums give 64 x 127 = 8,128; pairs saturating at 32,767 give 32 x 32,767 / 255,
    which lands on 4,096 after the output's grid of 64.
    """
    k = 64
    inits = [numpy_helper.from_array(np.array(1 / 255, np.float32), "x_scale"),
             numpy_helper.from_array(np.array(0, np.uint8), "x_zero_point"),
             numpy_helper.from_array(np.full((k, 1), 127, np.int8), "w_quantized"),
             numpy_helper.from_array(np.array(1.0, np.float32), "w_scale"),
             numpy_helper.from_array(np.array(0, np.int8), "w_zero_point"),
             numpy_helper.from_array(np.array(64.0, np.float32), "y_scale"),
             numpy_helper.from_array(np.array(0, np.uint8), "y_zero_point")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "x_scale", "x_zero_point"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "x_scale", "x_zero_point"], ["xd"]),
             helper.make_node("DequantizeLinear", ["w_quantized", "w_scale", "w_zero_point"], ["wd"]),
             helper.make_node("MatMul", ["xd", "wd"], ["m"]),
             helper.make_node("QuantizeLinear", ["m", "y_scale", "y_zero_point"], ["yq"]),
             helper.make_node("DequantizeLinear", ["yq", "y_scale", "y_zero_point"], ["y"])]
    graph = helper.make_graph(nodes, "kernel_family_probe",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, k])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def family_from_probe(value: float) -> str:
    """The family a probe answer means; ``EmulationError`` for an answer neither family gives."""
    if math.isclose(value, PROBE_EXACT):
        return EXACT
    if math.isclose(value, PROBE_SATURATING):
        return SATURATING
    raise EmulationError(f"the kernel probe answered {value}; expected {PROBE_EXACT:g} (exact int32) "
                         f"or {PROBE_SATURATING:g} (int16 pairs saturating)")


def probe_answer() -> float:
    """What this machine's ONNX Runtime computes for the probe."""
    out = session(probe_model()).run(None, {"x": np.ones((1, 64), np.float32)})[0]
    return float(out.reshape(-1)[0])


@functools.cache
def machine_family() -> str:
    """The kernel family this machine's ONNX Runtime runs, from the probe's answer."""
    return family_from_probe(probe_answer())


# --- which family numbers are computed for ------------------------------------------------------

_TARGET: contextvars.ContextVar[str | None] = contextvars.ContextVar("kernel_family_target", default=None)


def target_family() -> str:
    """The family ``lab.compare.predict`` computes for.

    Inside ``computing_as(family)``: that family. Otherwise ``$LAB_KERNEL_FAMILY`` when set
    (so a whole run, notebooks included, can compute as the other family), else this machine's.
    """
    chosen = _TARGET.get() or os.environ.get(ENV_VAR) or None
    return check_family(chosen) if chosen else machine_family()


def emulated(family: str | None = None) -> bool:
    """True when ``family`` (default: the target) is not what this machine's kernels compute."""
    return (family or target_family()) != machine_family()


def pin(family: str) -> None:
    """From here on in this context (a notebook's kernel), compute as ``family``; this machine's own: no pin."""
    _TARGET.set(None if check_family(family) == machine_family() else family)


@contextlib.contextmanager
def computing_as(family: str | None):
    """Within the block, quantized models run as ``family`` computes them (None: this machine's)."""
    token = _TARGET.set(check_family(family) if family is not None else None)
    try:
        yield
    finally:
        _TARGET.reset(token)


def describe(family: str) -> str:
    """One line for people: the family's name and the CPUs that have it."""
    return f"{check_family(family)}: {DESCRIPTIONS[family]}"


# --- the arithmetic ------------------------------------------------------------------------------

def int_matmul(a: np.ndarray, b: np.ndarray, a_zero: np.ndarray, b_zero: np.ndarray,
               saturate_pairs: bool, a_bound: int | None = None, as_float32: bool = False) -> np.ndarray:
    """sum_k (a - a_zero)(b - b_zero) as int64 [N, M], from integer a [N, K] and b [K, M].

    With ``saturate_pairs`` the raw products are added in pairs (k = 2j, 2j + 1) into a saturating
    int16 first, as ``vpmaddubsw`` does; the zero-point terms are exact in every kernel. ``as_float32``: the same
    integers as float32, for a caller that has checked ``fits_float32`` (no int64 pass over the result).
    """
    a, b = np.asarray(a), np.asarray(b)
    za, zb = np.asarray(a_zero, np.int64), np.asarray(b_zero, np.int64).reshape(1, -1)
    n, k = a.shape
    out = _saturated_pairs_matmul(a, b, a_bound, as_float32) if saturate_pairs else \
        exact_matmul(a, b, a_bound, as_float32)
    if za.any():
        out -= za * b.sum(axis=0, keepdims=True, dtype=np.int64) - k * za * zb
    if zb.any():  # symmetric weights (zero point 0, the usual) need no row sums of a
        out -= a.sum(axis=1, keepdims=True, dtype=np.int64) * zb
    return out


FLOAT32_EXACT = 1 << 24  # every integer up to this magnitude is a float32, and so is every sum that stays below it


def fits_float32(k: int, a_bound: int, a_zero, b: np.ndarray, b_zero, extra: int = 0) -> bool:
    """Whether ``int_matmul``'s sums over K = ``k`` (|a| <= ``a_bound``), and every partial sum on the way, stay
    under 2**24 in magnitude with ``extra`` (a bias) added: float32 then holds each of them exactly."""
    za, zb = int(np.abs(np.asarray(a_zero, np.int64)).max()), int(np.abs(np.asarray(b_zero, np.int64)).max())
    return k * (a_bound + za) * (int(_abs_max(b)) + zb) + extra < FLOAT32_EXACT


def _abs_max(x: np.ndarray, axis: int | None = None):
    """max |x| without an int64 copy of ``x`` (int8's -128 included): the extremes in ``x``'s own dtype, then cast."""
    lo, hi = x.min(axis=axis, initial=0), x.max(axis=axis, initial=0)
    return np.maximum(np.abs(np.asarray(lo, np.int64)), np.asarray(hi, np.int64))


def _bound(x: np.ndarray) -> int:
    """max |x|: from the dtype alone for 8-bit integers (no pass over ``x``), else measured."""
    if x.dtype.itemsize == 1 and x.dtype.kind in "iu":
        return 255 if x.dtype.kind == "u" else 128
    return int(_abs_max(x))


def exact_matmul(a: np.ndarray, b: np.ndarray, a_bound: int | None = None, as_float32: bool = False) -> np.ndarray:
    """a @ b for integer a [N, K] and b [K, M] (any integer dtypes), exactly, as int64.

    Multiplied in float32 by BLAS (the grader runs it on one thread, ``grader/__init__.py``), in blocks of K short
    enough that no partial sum can pass 2**24, below which float32 counts exactly in any order of summation.
    Operands whose single products pass 2**24 are multiplied as integers. ``a`` is never copied to int64 (a
    convolution's is the size of the input times the kernel's taps). ``a`` may also be float32 holding integers
    (an im2col written straight into float32), with ``a_bound`` its integers' largest magnitude. ``as_float32``: the
    result as float32 (exact when the caller checked ``fits_float32``).
    """
    bound = (_bound(a) if a_bound is None else a_bound) * _bound(b)
    if bound * a.shape[1] >= FLOAT32_EXACT:  # the dtypes' extremes could pass 2**24: measure the operands
        bound = int(_abs_max(a)) * int(_abs_max(b))
    if bound >= FLOAT32_EXACT:
        return a.astype(np.int64) @ b.astype(np.int64)
    step = FLOAT32_EXACT // max(bound, 1)
    a32, b32 = a.astype(np.float32, copy=False), b.astype(np.float32)
    if a.shape[1] <= step:
        return a32 @ b32 if as_float32 else (a32 @ b32).astype(np.int64)
    out = np.zeros((a.shape[0], b.shape[1]), np.float32 if as_float32 else np.int64)
    for start in range(0, a.shape[1], step):
        block = a32[:, start:start + step] @ b32[start:start + step]
        out += block if as_float32 else block.astype(np.int64)
    return out


def _saturated_pairs_matmul(a: np.ndarray, b: np.ndarray, a_bound: int | None = None,
                            as_float32: bool = False) -> np.ndarray:
    """sum_j saturate_int16(a[:, 2j] b[2j] + a[:, 2j+1] b[2j+1]) as int64 [N, M]; an odd K's last pair has one product.

    The exact sum, less what saturation takes off. Only a pair whose largest possible sum (the column maxima of
    |a| times |b|) passes the int16 range can saturate; those pairs, and only their columns of b, are summed one
    at a time and corrected. An odd K's lone last product is a pair with a zero partner (``a`` is never padded: b is).
    """
    k = a.shape[1]
    b64 = b.astype(np.int64)
    out = exact_matmul(a, b64, a_bound, as_float32)
    lo, hi = _column_extremes(a)
    top = np.maximum(np.abs(np.asarray(lo, np.int64)), np.asarray(hi, np.int64))   # each column's max |a|
    if k % 2:
        top, b64 = np.append(top, 0), np.pad(b64, ((0, 1), (0, 0)))
    bound = top[0::2, None] * np.abs(b64[0::2]) + top[1::2, None] * np.abs(b64[1::2])  # [ceil(K/2), M]
    risky = np.flatnonzero((bound > INT16_MAX).any(axis=1))
    if not risky.size:
        return out
    # per risky pair, the rows whose own two values can pass the int16 range with its risky columns' weights
    hot = bound[risky] > INT16_MAX
    w0 = np.where(hot, np.abs(b64[2 * risky]), 0).max(axis=1)
    w1 = np.where(hot, np.abs(b64[2 * risky + 1]), 0).max(axis=1)
    # |a0| w0 + |a1| w1 for every row and risky pair at once, as one GEMM: exact, each sum is under 2**24
    exact = np.float32 if a.dtype == np.float32 or a.dtype.itemsize <= 2 else np.float64
    weights = np.zeros((k, len(risky)), exact)
    weights[2 * risky, np.arange(len(risky))] = w0
    odd = 2 * risky + 1 < k
    weights[2 * risky[odd] + 1, np.flatnonzero(odd)] = w1[odd]
    size = a if np.min(lo) >= 0 else np.abs(a, dtype=exact)
    sums: np.ndarray = size.astype(exact, copy=False) @ weights
    reach = np.ascontiguousarray((sums > INT16_MAX).T)   # [risky pairs, N]
    for i, j in enumerate(risky):
        rows = np.flatnonzero(reach[i])
        if rows.size:
            cols = np.flatnonzero(hot[i])
            a0 = a[rows, 2 * j].astype(np.int64)
            a1 = a[rows, 2 * j + 1].astype(np.int64) if 2 * j + 1 < k else np.zeros_like(a0)
            pair = a0[:, None] * b64[2 * j, cols] + a1[:, None] * b64[2 * j + 1, cols]
            out[np.ix_(rows, cols)] -= pair - np.clip(pair, INT16_MIN, INT16_MAX)
    return out


def _column_extremes(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each column's min and max of a 2-D ``a``, with 0 included (``min(axis=0, initial=0)``). A tall, narrow
    ``a`` (an im2col of few channels) is reduced as rows of several of its rows at once: numpy reduces down
    wide rows many times faster than down a few long columns."""
    n, k = a.shape
    lo = hi = np.zeros(k, a.dtype)
    if not n or not k:
        return lo, hi
    group = min(n, max(1, 4096 // k))
    whole = n - n % group   # the rows that fill wide rows of ``group`` rows each; the rest reduced as they are
    for part in (a[:whole].reshape(-1, group * k), a[whole:]):
        if part.size:
            lo = np.minimum(lo, part.min(axis=0).reshape(-1, k).min(axis=0))
            hi = np.maximum(hi, part.max(axis=0).reshape(-1, k).max(axis=0))
    return lo, hi


def _limits(dtype) -> tuple[int, int]:
    info = np.iinfo(dtype)
    return int(info.min), int(info.max)


def quantize_linear(x: np.ndarray, scale, zero_point) -> np.ndarray:
    """ONNX QuantizeLinear: saturate(round_half_even(x / scale) + zero_point), in float32."""
    zp = np.asarray(zero_point)
    lo, hi = _limits(zp.dtype)
    q = np.rint(np.asarray(x, np.float32) / np.float32(scale)) + zp.astype(np.float32)
    return np.clip(q, lo, hi).astype(zp.dtype)


def dequantize_linear(q: np.ndarray, scale, zero_point=None, axis: int = 1) -> np.ndarray:
    """ONNX DequantizeLinear: (q - zero_point) x scale in float32; per-axis when scale is 1-D."""
    scale = np.asarray(scale, np.float32)
    zp = np.zeros_like(scale, np.int64) if zero_point is None else np.asarray(zero_point, np.int64)
    q = np.asarray(q)
    if q.dtype.itemsize <= 2 and scale.size == 1:   # (q - zp) is exact in float32 below 2**24: one copy, in place
        out = q.astype(np.float32)
        if zp.any():
            out -= np.float32(zp.reshape(-1)[0])
        out *= scale.reshape(-1)[0]
        return out
    if scale.ndim == 1 and scale.size > 1:
        shape = [1] * q.ndim
        shape[axis] = scale.size
        scale, zp = scale.reshape(shape), zp.reshape(shape)
    return ((q.astype(np.int64) - zp).astype(np.float32) * scale).astype(np.float32)


def requantize(acc: np.ndarray, multiplier: np.ndarray, zero_point) -> np.ndarray:
    """MLAS's requantization: float32(acc) x multiplier, clamped, rounded half to even, plus the zero point."""
    zp = np.asarray(zero_point)
    lo, hi = _limits(zp.dtype)
    z = int(zp.reshape(-1)[0])
    v = np.asarray(acc, np.float32) * np.asarray(multiplier, np.float32).reshape(1, -1)
    v = np.clip(v, np.float32(lo - z), np.float32(hi - z), out=v)
    v = np.rint(v, out=v)
    return (np.add(v, np.float32(z), out=v) if z else v).astype(zp.dtype)


def x64_weights(w, zero_point) -> tuple:
    """A constant weight and its zero point as a session with ``X64_PRECISION_KEY`` holds them: an int8 tensor with a
    value outside [-64, 64] becomes uint8 w + 128, its zero point + 128 (128 when it has none); anything else is
    returned as it was. The products are the same, (w + 128) - (z + 128) = w - z; only the kernel changes (U8U8)."""
    w = np.asarray(w)
    if w.dtype != np.int8 or (zero_point is not None and np.asarray(zero_point).dtype != np.int8):
        return w, zero_point
    if w.size == 0 or (int(w.min()) >= -S7_LIMIT and int(w.max()) <= S7_LIMIT):
        return w, zero_point
    zp = np.zeros((), np.int16) if zero_point is None else np.asarray(zero_point, np.int16)
    return (w.astype(np.int16) + 128).astype(np.uint8), (zp + 128).astype(np.uint8)


def _u8_activations(a, a_zero, shift_s8_activations: bool):
    """(a, its zero point, is it u8?): ORT's QDQ path on x86 moves s8 activations to u8 (+128) first."""
    a, a_zero = np.asarray(a), np.asarray(a_zero)
    if shift_s8_activations and a.dtype == np.int8:   # v + 128 as uint8: the sign bit flipped, no wider copy
        return a.view(np.uint8) ^ np.uint8(0x80), a_zero.astype(np.int64) + 128, True
    return a, a_zero, a.dtype == np.uint8


def qlinear_matmul(a, a_scale, a_zero, b, b_scale, b_zero, y_scale, y_zero, family: str,
                   shift_s8_activations: bool = False) -> np.ndarray:
    """QLinearMatMul as ``family`` computes it.

    ``shift_s8_activations``: ORT's QDQ path on x86 moves s8 activations to u8 (+128) before a
    U8S8 GEMM; the sum is the same, but the saturating kernel sees the shifted values.
    The saturating family clips pairs only in that U8S8 kernel (u8 activations, s8 weights).
    """
    a, a_zero, a_is_u8 = _u8_activations(a, a_zero, shift_s8_activations)
    saturate = check_family(family) == SATURATING and a_is_u8 and np.asarray(b).dtype == np.int8
    acc = matmul_nd(a, b, lambda a2, b2: int_matmul(a2, b2, a_zero, b_zero, saturate))
    multiplier = (np.float32(a_scale) * np.asarray(b_scale, np.float32).reshape(-1)) / np.float32(y_scale)
    return requantize(acc, multiplier, y_zero)


def matmul_nd(a, b, matmul: Callable) -> np.ndarray:
    """``matmul`` (of a 2-D [N, K] and a 2-D [K, M]) at any rank, as ONNX MatMul broadcasts: a 2-D ``b`` takes every
    row of ``a`` at once; stacked operands (attention) go slice by slice."""
    a, b = np.asarray(a), np.asarray(b)
    if a.ndim == 2 and b.ndim == 2:
        return matmul(a, b)
    if b.ndim == 2:
        return matmul(a.reshape(-1, a.shape[-1]), b).reshape(*a.shape[:-1], b.shape[-1])
    lead = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    a, b = np.broadcast_to(a, lead + a.shape[-2:]), np.broadcast_to(b, lead + b.shape[-2:])
    out = [matmul(a[i], b[i]) for i in np.ndindex(*lead)]
    return np.stack(out).reshape(*lead, a.shape[-2], b.shape[-1])


def matmul_integer_to_float(sources, family: str) -> np.ndarray:
    """ORT's MatMulIntegerToFloat (``DequantizeLinear -> MatMul`` with an int8 weight and a float output): the
    integer GEMM on s8 activations shifted to u8, scaled to float32; ``sources`` are the two (q, scale, zero point)."""
    (a, sa, za), (b, sb, zb) = sources
    za = np.asarray(za)
    a_u8, za_u8 = (a.astype(np.int64) + 128, za.astype(np.int64) + 128) if a.dtype == np.int8 else (a, za)
    saturate = family == SATURATING and np.asarray(b).dtype == np.int8
    acc = matmul_nd(a_u8, b, lambda a2, b2: int_matmul(a2, b2, za_u8, zb, saturate))
    return (acc.astype(np.float32) * (np.float32(sa) * np.asarray(sb, np.float32).reshape(1, -1))).astype(np.float32)


def qgemm(a, a_scale, a_zero, b, b_scale, b_zero, c=None, y_scale=None, y_zero=None, family: str = EXACT,
          alpha: float = 1.0, trans_a: int = 0, trans_b: int = 0, shift_s8_activations: bool = False) -> np.ndarray:
    """ORT's QGemm: integer GEMM plus an int32 bias ``c``, requantized to ``y_scale`` (or float without it)."""
    a, b = np.asarray(a), np.asarray(b)
    a = a.T if trans_a else a
    b = b.T if trans_b else b
    a, a_zero, a_is_u8 = _u8_activations(a, a_zero, shift_s8_activations)
    saturate = check_family(family) == SATURATING and a_is_u8 and b.dtype == np.int8
    acc = int_matmul(a, b, a_zero, b_zero, saturate)
    if c is not None:
        acc = acc + np.asarray(c, np.int64).reshape(1, -1)
    scale = np.float32(alpha) * np.float32(a_scale) * np.asarray(b_scale, np.float32).reshape(-1)
    if y_scale is None:
        return (acc.astype(np.float32) * scale.reshape(1, -1)).astype(np.float32)
    return requantize(acc, scale / np.float32(y_scale), y_zero)


def qlinear_softmax(x: np.ndarray, x_scale, x_zero, y_scale, y_zero) -> np.ndarray:
    """ORT's QLinearSoftmax (last axis): a float32 exp lookup table, then round(e x floor(1/y_scale) / sum)."""
    x = np.asarray(x)
    d = x.shape[-1]
    s = float(np.float32(x_scale))
    bit_shift = max(0.0, math.log(np.finfo(np.float32).max / d) - 5) / s
    xmax = x.astype(np.int64).max(axis=-1, keepdims=True)
    e = np.exp((x.astype(np.int64) - xmax + bit_shift) * s).astype(np.float32)
    total = np.zeros(x.shape[:-1] + (1,), np.float32)
    for j in range(d):  # float32 sums in the kernel's order
        total = (total + e[..., j:j + 1]).astype(np.float32)
    grid = np.float32(math.floor(np.float32(1.0) / np.float32(y_scale)))
    zp = np.asarray(y_zero)
    q = np.rint((e * grid) / total).astype(np.int64) + int(zp.reshape(-1)[0])
    return np.clip(q, *_limits(zp.dtype)).astype(zp.dtype)


def qlinear_add(a, a_scale, a_zero, b, b_scale, b_zero, c_scale, c_zero) -> np.ndarray:
    """QLinearAdd as MLAS computes it on x86 (``MlasQLinearAddKernelAvx2Helper``, ``qladd_avx2.cpp``; both x86
    families run it): float32 ratios ``ra = sa / sc``, ``rb = sb / sc`` and a fixed part ``zc - (ra za + rb zb)``,
    then ``fma(a, ra, fma(b, rb, fixed))`` (each fused multiply-add rounded once to float32), rounded half to even,
    saturated. Family-independent: no integer products are summed. ``(a - za) ra + (b - zb) rb`` rounded twice
    differs from it in the last bit, and so in the integer near a half."""
    f32 = np.float32
    ra, rb = f32(f32(a_scale) / f32(c_scale)), f32(f32(b_scale) / f32(c_scale))
    za, zb, zc = (f32(int(np.asarray(z).reshape(-1)[0])) for z in (a_zero, b_zero, c_zero))
    fixed = f32(zc - f32(f32(ra * za) + f32(rb * zb)))
    # an 8-bit integer times a float32 is exact in float64, and so is its sum with a float32 of like magnitude:
    # one rounding to float32 per fused multiply-add, as the kernel's
    t = (np.asarray(b, np.float64) * np.float64(rb) + np.float64(fixed)).astype(np.float32)
    v = (np.asarray(a, np.float64) * np.float64(ra) + t.astype(np.float64)).astype(np.float32)
    zp = np.asarray(c_zero)
    lo, hi = _limits(zp.dtype)
    return np.clip(np.rint(v), lo, hi).astype(zp.dtype)


@dataclass(frozen=True)
class ConvShape:
    """A 2-D Conv's attributes, as ONNX defines them (pads: top, left, bottom, right)."""

    kernel: tuple[int, int]
    strides: tuple[int, int] = (1, 1)
    dilations: tuple[int, int] = (1, 1)
    pads: tuple[int, int, int, int] = (0, 0, 0, 0)
    group: int = 1

    def output_size(self, h: int, w: int) -> tuple[int, int]:
        (kh, kw), (sh, sw), (dh, dw) = self.kernel, self.strides, self.dilations
        return ((h + self.pads[0] + self.pads[2] - dh * (kh - 1) - 1) // sh + 1,
                (w + self.pads[1] + self.pads[3] - dw * (kw - 1) - 1) // sw + 1)


def _taps(x: np.ndarray, shape: ConvShape, pad_value) -> Iterator[np.ndarray]:
    """Each kernel position's [N, C, OH, OW] view of ``x`` padded with ``pad_value``, kernel row major."""
    _, _, h, w = x.shape
    (kh, kw), (sh, sw), (dh, dw) = shape.kernel, shape.strides, shape.dilations
    oh, ow = shape.output_size(h, w)
    t, left, b, r = shape.pads
    padded = x
    if t or b or left or r:
        padded = np.full((x.shape[0], x.shape[1], h + t + b, w + left + r), pad_value, x.dtype)
        padded[:, :, t:t + h, left:left + w] = x
    for i in range(kh):
        for j in range(kw):
            yield padded[:, :, i * dh:i * dh + sh * (oh - 1) + 1:sh, j * dw:j * dw + sw * (ow - 1) + 1:sw]


def im2col_nhwc(x: np.ndarray, shape: ConvShape, pad_value=0, dtype=None) -> np.ndarray:
    """[N, C, H, W] -> [G, N*OH*OW, KH*KW*C/G]: each output position's window, kernel position major and the
    group's input channels minor, as ORT's NHWC im2col lays out the integer GEMM's K (padding reads ``pad_value``,
    the input's zero point). The input is padded once as NHWC (in ``dtype``, default ``x``'s), and its windows are
    copied out in one pass."""
    n, c, h, w = x.shape
    (kh, kw), (sh, sw), (dh, dw) = shape.kernel, shape.strides, shape.dilations
    oh, ow = shape.output_size(h, w)
    t, left, b, r = shape.pads
    g = shape.group
    padded = np.full((n, h + t + b, w + left + r, c), pad_value, dtype or x.dtype)
    padded[:, t:t + h, left:left + w, :] = x.transpose(0, 2, 3, 1)
    windows = np.lib.stride_tricks.sliding_window_view(padded, ((kh - 1) * dh + 1, (kw - 1) * dw + 1), axis=(1, 2))
    windows = windows[:, :sh * (oh - 1) + 1:sh, :sw * (ow - 1) + 1:sw, :, ::dh, ::dw]  # N, OH, OW, C, KH, KW
    windows = windows.reshape(n, oh, ow, g, c // g, kh, kw).transpose(3, 0, 1, 2, 5, 6, 4)
    return np.ascontiguousarray(windows).reshape(g, n * oh * ow, kh * kw * (c // g))


def conv_weights(w: np.ndarray, group: int) -> np.ndarray:
    """[M, C/G, KH, KW] -> [G, KH*KW*C/G, M/G], K in the order of :func:`im2col_nhwc`."""
    m, cg, kh, kw = w.shape
    return w.reshape(group, m // group, cg, kh * kw).transpose(0, 3, 2, 1).reshape(group, kh * kw * cg, m // group)


def int_conv(x, x_zero, w, w_zero, shape: ConvShape, saturate_pairs: bool, as_float32: bool = False) -> np.ndarray:
    """sum (x - x_zero)(w - w_zero) over each window as int64 [N, M, OH, OW], from integer x [N, C, H, W] and w.

    With ``saturate_pairs`` the raw products pair along K (kernel position major, input channel minor) into a
    saturating int16, as ORT's U8S8 convolution kernels (the im2col GEMM and the symmetric indirect kernel) do
    on AVX2 without VNNI. A depthwise convolution (one input and one output channel per group) runs on another
    kernel that sums in int32 on every x86 family, so it is exact either way. ``as_float32``: as ``int_matmul``.
    """
    x, w = np.asarray(x), np.asarray(w)
    n, _, h, wd = x.shape
    oh, ow = shape.output_size(h, wd)
    m, cg = w.shape[0], w.shape[1]
    depthwise = cg == 1 and m == shape.group
    # written straight into float32 (exact for 8- and 16-bit integers), the form the integer GEMM multiplies in
    cols = im2col_nhwc(x, shape, pad_value=np.asarray(x_zero).reshape(-1)[0], dtype=np.float32)
    kernels = conv_weights(w, shape.group)
    zw = np.broadcast_to(np.asarray(w_zero, np.int64).reshape(-1), (m,)).reshape(shape.group, -1)
    bound = _bound(x)
    parts = [int_matmul(cols[g], kernels[g], x_zero, zw[g], saturate_pairs and not depthwise, bound, as_float32)
             for g in range(shape.group)]
    out = parts[0] if len(parts) == 1 else np.concatenate(parts, axis=1)
    return out.reshape(n, oh, ow, m).transpose(0, 3, 1, 2)


def qlinear_conv(x, x_scale, x_zero, w, w_scale, w_zero, y_scale, y_zero, bias, shape: ConvShape, family: str,
                 shift_s8_activations: bool = False) -> np.ndarray:
    """QLinearConv as ``family`` computes it: integer convolution plus the int32 bias, requantized per output
    channel to ``y_scale``; the saturating family clips pairs only for u8 activations and s8 weights."""
    x, x_zero, x_is_u8 = _u8_activations(x, x_zero, shift_s8_activations)
    saturate = check_family(family) == SATURATING and x_is_u8 and np.asarray(w).dtype == np.int8
    w = np.asarray(w)
    extra = 0 if bias is None else int(_abs_max(np.asarray(bias)))
    small = fits_float32(int(np.prod(w.shape[1:])), _bound(x), x_zero, w, w_zero, extra)
    acc = int_conv(x, x_zero, w, w_zero, shape, saturate, as_float32=small)
    m = acc.shape[1]
    flat = acc.transpose(0, 2, 3, 1).reshape(-1, m)   # the GEMM's own [N*OH*OW, M]: a view, no copy
    if bias is not None:
        flat += np.asarray(bias, np.float32 if small else np.int64).reshape(1, -1)
    multiplier = np.broadcast_to((np.float32(x_scale) * np.asarray(w_scale, np.float32).reshape(-1))
                                 / np.float32(y_scale), (m,))
    return requantize(flat, multiplier, y_zero).reshape(acc.shape[0], *acc.shape[2:], m).transpose(0, 3, 1, 2)


def conv_float(x: np.ndarray, w: np.ndarray, b, shape: ConvShape) -> np.ndarray:
    """A float Conv (the model as written; float32 products summed in float64, then rounded to float32)."""
    n, c, h, wd = x.shape
    oh, ow = shape.output_size(h, wd)
    if w.shape[1] == 1 and w.shape[0] == shape.group == c:   # depthwise: a product per tap, summed tap by tap
        w64 = np.asarray(w, np.float64).reshape(c, -1)
        out, product = np.zeros((n, c, oh, ow), np.float64), np.empty((n, c, oh, ow), np.float64)
        for t, tap in enumerate(_taps(np.asarray(x, np.float64), shape, 0.0)):
            out += np.multiply(tap, w64[:, t].reshape(1, c, 1, 1), out=product)
    else:
        cols = im2col_nhwc(np.asarray(x, np.float64), shape)
        kernels = conv_weights(np.asarray(w, np.float64), shape.group)
        out = np.concatenate([cols[g] @ kernels[g] for g in range(shape.group)], axis=1)
        out = out.reshape(n, oh, ow, -1).transpose(0, 3, 1, 2)
    if b is not None:
        out = out + np.asarray(b, np.float64).reshape(1, -1, 1, 1)
    return out.astype(np.float32)


def batch_normalization(x, scale, bias, mean, var, epsilon: float) -> np.ndarray:
    """ORT's inference BatchNormalization: x * (scale / sqrt(var + eps)) + (bias - mean * that), in float32."""
    inv_std = (np.float32(1) / np.sqrt(np.asarray(var, np.float32) + np.float32(epsilon))).astype(np.float32)
    new_scale = (inv_std * np.asarray(scale, np.float32)).astype(np.float32)
    new_bias = (np.asarray(bias, np.float32) - np.asarray(mean, np.float32) * new_scale).astype(np.float32)
    shape = (1, -1) + (1,) * (np.asarray(x).ndim - 2)
    return (np.asarray(x, np.float32) * new_scale.reshape(shape) + new_bias.reshape(shape)).astype(np.float32)


def max_pool(x: np.ndarray, shape: ConvShape) -> np.ndarray:
    """MaxPool over 2-D windows (any dtype: the max commutes with a ruler, so int8 and float agree); padding never
    wins."""
    x = np.asarray(x)
    lowest = np.iinfo(x.dtype).min if np.issubdtype(x.dtype, np.integer) else -np.inf
    taps = _taps(x, shape, lowest)
    out = next(taps).copy()
    for tap in taps:
        np.maximum(out, tap, out=out)
    return out


def average_pool_blocked(x: np.ndarray, shape: ConvShape, count_include_pad: bool) -> np.ndarray:
    """A float AveragePool as ORT's NCHWc kernel computes it (on AVX2 and AVX-512 alike, measured): each window
    summed in float32 in row order, then divided by the window's size (``count_include_pad``) or by the positions
    inside the image. ORT's generic kernel sums in another order: the two differ in the last bit."""
    x = np.asarray(x, np.float32)
    total = np.zeros((), np.float32)
    for tap in _taps(x, shape, 0):
        total = (total + tap).astype(np.float32)
    if count_include_pad:
        return (total / np.float32(shape.kernel[0] * shape.kernel[1])).astype(np.float32)
    count = np.zeros((), np.float32)
    for tap in _taps(np.ones((1, 1, *x.shape[2:]), np.float32), shape, 0):
        count = count + tap
    return (total / count).astype(np.float32)


def qlinear_global_average_pool(x, x_scale, x_zero, y_scale, y_zero) -> np.ndarray:
    """MLAS's QLinearGlobalAveragePool (NCHW): the int32 sum less the zero points, times
    x_scale / (y_scale x count) in float32, requantized."""
    x = np.asarray(x)
    count = int(np.prod(x.shape[2:]))
    scale = np.float32(x_scale) / (np.float32(y_scale) * np.float32(count))
    acc = x.reshape(x.shape[0] * x.shape[1], -1).sum(axis=1, dtype=np.int64) - int(np.asarray(x_zero)) * count
    out = requantize(acc.reshape(-1, 1), np.asarray([scale], np.float32), y_zero)
    return out.reshape(x.shape[0], x.shape[1], *([1] * (x.ndim - 2)))


def global_average_pool(x: np.ndarray) -> np.ndarray:
    """GlobalAveragePool in float32: each channel's mean over its spatial positions."""
    x = np.asarray(x, np.float32)
    return x.mean(axis=tuple(range(2, x.ndim)), keepdims=True, dtype=np.float32)


def dynamic_quantize_linear(x: np.ndarray):
    """ONNX DynamicQuantizeLinear: u8 with a range that includes 0."""
    x = np.asarray(x, np.float32)
    lo, hi = min(0.0, float(x.min())), max(0.0, float(x.max()))
    scale = np.float32((hi - lo) / 255) if hi > lo else np.float32(1.0)
    zp = np.uint8(np.clip(np.rint(np.float32(-lo) / scale), 0, 255))
    return quantize_linear(x, scale, zp), scale, zp


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return (e / e.sum(axis=axis, keepdims=True)).astype(np.float32)


# --- the graph walker: a table from op type to handler (as ORT's quantization registry.py keeps one) ---

def _attr(node, name, default):
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


@dataclass
class _Run:
    """One emulated run: the tensors computed so far, who produces and consumes each, the family, and whether the
    session has ``X64_PRECISION_KEY`` (``constants``: the initializers; ``opset``: the default domain's version)."""

    values: dict
    producer: dict
    consumers: dict
    family: str
    label: str
    x64_precision: bool = False
    constants: frozenset = frozenset()
    opset: int = 0
    graph_outputs: frozenset = frozenset()

    def dq_source(self, name: str, deployed: bool = True):
        """The (q, scale, zero point) behind a DequantizeLinear output, or None. ``deployed``: as the session holds
        them, a constant int8 weight shifted to uint8 under x64 precision (``x64_weights``)."""
        node = self.producer.get(name)
        if node is None or node.op_type != "DequantizeLinear":
            return None
        has_zp = len(node.input) > 2 and bool(node.input[2])
        q, zp = self.values[node.input[0]], self.values[node.input[2]] if has_zp else None
        if deployed and self.x64_precision and node.input[0] in self.constants and \
                (not has_zp or node.input[2] in self.constants):
            q, zp = x64_weights(q, zp)
        return q, self.values[node.input[1]], np.zeros((), np.uint8) if zp is None else zp

    def x86_dtype(self, name: str):
        """The integer type behind a DequantizeLinear output in the session's graph on x86. A constant's is
        ``dq_source``'s; an activation's int8 moves to uint8 only where ORT's ``QDQS8ToU8Transformer`` converts its
        QuantizeLinear / DequantizeLinear pair (``x86_shifted``)."""
        q = np.asarray(self.dq_source(name)[0])
        dq = self.producer[name]
        if dq.input[0] in self.constants or q.dtype != np.int8:
            return q.dtype
        quantize = self.producer.get(dq.input[0])
        return np.dtype(np.uint8) if quantize is not None and self.x86_shifted(quantize) else q.dtype

    def x86_shifted(self, quantize) -> bool:
        """Whether ORT on x86 moves this int8 QuantizeLinear (and its DequantizeLinear) to uint8.
        ``QDQS8ToU8Transformer`` converts a QuantizeLinear whose output has exactly one consumer, a DequantizeLinear,
        and is no graph output (``optimizer_utils::CheckOutputEdges(graph, node, 1)``); it runs after
        ``EnsureUniqueDQForNodeUnit`` has given each consumer of a shared DequantizeLinear its own copy, so a pair
        whose DequantizeLinear feeds two nodes (a residual block's input) keeps int8 (seen in the session's
        optimized graph)."""
        zp = np.asarray(self.values[quantize.input[2]]) if len(quantize.input) > 2 and quantize.input[2] else None
        if zp is None or zp.dtype != np.int8 or quantize.output[0] in self.graph_outputs:
            return False
        after = self.consumers.get(quantize.output[0], [])
        if len(after) != 1 or after[0].op_type != "DequantizeLinear":
            return False
        dq_out = after[0].output[0]
        return len(self.consumers.get(dq_out, [])) + (dq_out in self.graph_outputs) <= 1

    def fused_producer(self, node):
        """The op a QuantizeLinear closes into one integer kernel (``DequantizeLinear -> op -> QuantizeLinear``),
        or None: its producer must be in FUSED, feed only it, and read every input through a DequantizeLinear;
        its inputs (a Conv's, MatMul's or Gemm's activations only: their weights have a type of their own) and
        its output must be of one integer type in the session's graph on x86 (ORT's QDQ selectors:
        ``ConvNodeGroupSelector``'s "input and output types need to be same", the Binary selector's likewise; an
        Add's constant bias counts, so it fuses only when the bias is uint8),
        and uint8 for Conv, MatMul and Gemm (``QDQIsInt8Allowed()`` is false off ARM). Never with
        16-bit activations (``activation_type=QUInt16``): the CPU's integer kernels take 8-bit ones, so ORT leaves
        the float op between DequantizeLinear and QuantizeLinear (seen in its optimized graph), the same on every
        family. An all-int8 Add, Softmax or GlobalAveragePool on x86 (every pair kept int8) is refused: not
        measured, so not guessed."""
        op = self.producer.get(node.input[0])
        if op is None or op.op_type not in FUSED or len(self.consumers[op.output[0]]) != 1:
            return None
        if not all(self.dq_source(i) is not None for i in op.input):
            return None
        out_zero = self.values[node.input[2]] if len(node.input) > 2 and node.input[2] else None
        if np.asarray(self.dq_source(op.input[0])[0]).dtype.itemsize > 1 or \
                (out_zero is not None and np.asarray(out_zero).dtype.itemsize > 1):
            return None
        out = np.asarray(out_zero).dtype if out_zero is not None else np.dtype(np.uint8)
        out = np.dtype(np.uint8) if out == np.int8 and self.x86_shifted(node) else out
        weighted = op.op_type in ("Conv", "MatMul", "Gemm")   # their constant weights have a type of their own
        read = [i for i in op.input if not weighted or self.producer[i].input[0] not in self.constants]
        types = {self.x86_dtype(i) for i in read} | {out}
        if len(types) != 1:
            return None
        if types == {np.dtype(np.int8)}:
            if op.op_type in ("Conv", "MatMul", "Gemm"):
                return None
            raise EmulationError(f"{self.label}: {op.op_type} '{op.name}' between int8 DequantizeLinear and "
                                 "QuantizeLinear pairs that ORT keeps int8 on x86: the emulation does not know "
                                 "whether ORT fuses it, and does not guess")
        return op

    def kernel_weights(self, node, ins: list) -> list:
        """``ins`` of an integer op with its constant weight and zero point as the session holds them: shifted to
        uint8 under x64 precision (``X64_WEIGHT_INPUTS``, ``x64_weights``). ORT has no kernel for int8 activations
        with uint8 weights, so such a session does not load: ``EmulationError``, as ORT refuses it."""
        where = X64_WEIGHT_INPUTS.get(node.op_type)
        if not self.x64_precision or where is None or (node.op_type == "QLinearMatMul" and self.opset >= 21):
            return ins
        w_at, zp_at = where
        zp_name = node.input[zp_at] if len(node.input) > zp_at else ""
        if node.input[w_at] not in self.constants or (zp_name and zp_name not in self.constants):
            return ins
        w, zp = x64_weights(ins[w_at], ins[zp_at] if zp_name else None)
        if w is ins[w_at]:
            return ins
        if np.asarray(ins[0]).dtype == np.int8:
            raise EmulationError(f"{self.label}: with {X64_PRECISION_KEY} = 1 the weights of {node.op_type} "
                                 f"'{node.name}' become uint8 and its activations are int8: ONNX Runtime has no "
                                 "such kernel and refuses the session (NOT_IMPLEMENTED)")
        out = list(ins) + [None] * (zp_at + 1 - len(ins))
        out[w_at], out[zp_at] = w, zp
        return out


Handler = Callable[[_Run, onnx.NodeProto, list], list]


def _fused_matmul(run, op, srcs, y_scale, y_zero):
    """The QDQ MatMul runs as QLinearMatMul."""
    (a, sa, za), (b, sb, zb) = srcs
    return qlinear_matmul(a, sa, za, b, sb, zb, y_scale, y_zero, run.family, shift_s8_activations=True)


def _fused_gemm(run, op, srcs, y_scale, y_zero):
    """The QDQ Gemm runs as QGemm, its bias added in int32."""
    (a, sa, za), (b, sb, zb) = srcs[:2]
    c = srcs[2][0] if len(srcs) > 2 else None
    return qgemm(a, sa, za, b, sb, zb, c, y_scale, y_zero, run.family, _attr(op, "alpha", 1.0),
                 _attr(op, "transA", 0), _attr(op, "transB", 0), shift_s8_activations=True)


def _fused_softmax(run, op, srcs, y_scale, y_zero):
    """``DequantizeLinear -> Softmax -> QuantizeLinear`` runs as QLinearSoftmax."""
    (a, sa, za), = srcs
    return qlinear_softmax(a, sa, za, y_scale, y_zero)


def _conv_shape(run, node, kernel) -> ConvShape:
    """A Conv's or a pool's attributes; ``EmulationError`` for what the emulation does not cover."""
    kernel = tuple(int(k) for k in kernel)
    auto_pad = _attr(node, "auto_pad", b"NOTSET")
    auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else auto_pad
    if len(kernel) != 2 or auto_pad not in ("NOTSET", "VALID") or _attr(node, "ceil_mode", 0):
        raise EmulationError(f"{run.label}: {node.op_type} '{node.name}' with a {len(kernel)}-D kernel, auto_pad "
                             f"{auto_pad}, ceil_mode {_attr(node, 'ceil_mode', 0)}; the emulation covers 2-D "
                             "windows with explicit pads and ceil_mode 0")
    return ConvShape(kernel, tuple(_attr(node, "strides", [1, 1])), tuple(_attr(node, "dilations", [1, 1])),
                     tuple(_attr(node, "pads", [0, 0, 0, 0])), int(_attr(node, "group", 1)))


def _fused_conv(run, op, srcs, y_scale, y_zero):
    """The QDQ Conv runs as QLinearConv, its bias added in int32."""
    (x, sx, zx), (w, sw, zw) = srcs[:2]
    bias = srcs[2][0] if len(srcs) > 2 else None
    return qlinear_conv(x, sx, zx, w, sw, zw, y_scale, y_zero, bias, _conv_shape(run, op, w.shape[2:]),
                        run.family, shift_s8_activations=True)


def _fused_add(run, op, srcs, y_scale, y_zero):
    """``DequantizeLinear -> Add -> QuantizeLinear`` of one integer type runs as QLinearAdd (com.microsoft). On x86
    int8 activations reach it as uint8 (``QDQS8ToU8Transformer``: values and zero points + 128), which moves the
    kernel's float32 roundings: computed on the shifted values, then shifted back."""
    def u8(q):   # an int8 tensor or zero point as the session holds it once shifted to uint8; uint8 as it is
        q = np.asarray(q)
        return (q.astype(np.int16) + 128).astype(np.uint8) if q.dtype == np.int8 else q

    (a, sa, za), (b, sb, zb) = srcs
    y_zero = np.asarray(y_zero)
    if y_zero.dtype == np.int8 and all(run.x86_dtype(i) == np.uint8 for i in op.input):
        out = qlinear_add(u8(a), sa, u8(za), u8(b), sb, u8(zb), y_scale, u8(y_zero))
        return (out.astype(np.int16) - 128).astype(np.int8)
    return qlinear_add(a, sa, za, b, sb, zb, y_scale, y_zero)


def _fused_global_average_pool(run, op, srcs, y_scale, y_zero):
    """``DequantizeLinear -> GlobalAveragePool -> QuantizeLinear`` runs as QLinearGlobalAveragePool."""
    (x, sx, zx), = srcs
    return qlinear_global_average_pool(x, sx, zx, y_scale, y_zero)


# op between a DequantizeLinear and a QuantizeLinear -> the integer kernel ORT's QDQ fusion runs instead
FUSED: dict[str, Callable] = {"MatMul": _fused_matmul, "Gemm": _fused_gemm, "Softmax": _fused_softmax,
                              "Conv": _fused_conv, "GlobalAveragePool": _fused_global_average_pool,
                              "Add": _fused_add}


def _quantize(run, node, ins):
    op = run.fused_producer(node)
    if op is not None:
        return [FUSED[op.op_type](run, op, [run.dq_source(i) for i in op.input], ins[1], ins[2])]
    return [quantize_linear(ins[0], ins[1], ins[2])]


def _dequantize(run, node, ins):
    return [dequantize_linear(ins[0], ins[1], ins[2] if len(ins) > 2 else None, _attr(node, "axis", 1))]


def _matmul(run, node, ins):
    written = [run.dq_source(i, deployed=False) for i in node.input]
    if written[0] is not None and np.asarray(written[0][0]).dtype.itemsize > 1:
        # at opset 21 ORT 1.32 runs DequantizeLinear(8-bit weight) -> MatMul as MatMulNBits, which brings 16-bit
        # activations back to 8 bits inside the kernel (accuracy level 4): a kernel this module does not emulate
        raise EmulationError(f"{node.name or 'MatMul'}: a MatMul on 16-bit activations may run as ORT's MatMulNBits, "
                             "which this emulation does not cover")
    if all(s is not None for s in written) and np.asarray(written[1][0]).dtype == np.int8:
        # DequantizeLinear -> MatMul with a float output runs as MatMulIntegerToFloat
        return [matmul_integer_to_float([run.dq_source(i) for i in node.input], run.family)]
    return [(ins[0] @ ins[1]).astype(np.float32)]


def _qlinear_matmul(run, node, ins):
    return [qlinear_matmul(*run.kernel_weights(node, ins), family=run.family)]


def _qgemm(run, node, ins):
    ins = run.kernel_weights(node, ins)
    a, sa, za, b, sb, zb = ins[:6]
    c = ins[6] if len(ins) > 6 else None
    ys = ins[7] if len(ins) > 7 else None
    yz = ins[8] if len(ins) > 8 else (np.zeros((), np.uint8) if ys is not None else None)
    return [qgemm(a, sa, za, b, sb, zb, c, ys, yz, run.family, _attr(node, "alpha", 1.0),
                  _attr(node, "transA", 0), _attr(node, "transB", 0))]


def _gemm(run, node, ins):
    a, b = ins[0], ins[1]
    a = a.T if _attr(node, "transA", 0) else a
    b = b.T if _attr(node, "transB", 0) else b
    y = np.float32(_attr(node, "alpha", 1.0)) * (a @ b)
    if len(ins) > 2 and ins[2] is not None:
        y = y + np.float32(_attr(node, "beta", 1.0)) * ins[2]
    return [y.astype(np.float32)]


def _reshape(run, node, ins):
    shape = [int(d) for d in ins[1]]
    shape = [ins[0].shape[i] if d == 0 and not _attr(node, "allowzero", 0) else d for i, d in enumerate(shape)]
    return [ins[0].reshape(shape)]


def _qlinear_add(run, node, ins):
    return [qlinear_add(*ins)]


def _qlinear_softmax(run, node, ins):
    if _attr(node, "axis", -1) not in (-1, 1):
        raise EmulationError(f"{run.label}: QLinearSoftmax '{node.name}' on axis {_attr(node, 'axis', -1)}; "
                             "the emulation covers the last axis only")
    return [qlinear_softmax(*ins)]


def _matmul_integer(run, node, ins):
    ins = run.kernel_weights(node, ins)
    a, b = ins[0], ins[1]
    za = ins[2] if len(ins) > 2 and ins[2] is not None else np.zeros((), a.dtype)
    zb = ins[3] if len(ins) > 3 and ins[3] is not None else np.zeros((), b.dtype)
    saturate = run.family == SATURATING and a.dtype == np.uint8 and b.dtype == np.int8
    return [matmul_nd(a, b, lambda a2, b2: int_matmul(a2, b2, za, zb, saturate)).astype(np.int32)]


def _dynamic_quantize(run, node, ins):
    return list(dynamic_quantize_linear(ins[0]))


def _cast(run, node, ins):
    return [ins[0].astype(helper.tensor_dtype_to_np_dtype(_attr(node, "to", TensorProto.FLOAT)))]


def _add(run, node, ins):
    a, b = (np.asarray(v) for v in ins)
    return [(a + b).astype(np.result_type(a.dtype, b.dtype))]


def _mul(run, node, ins):
    a, b = (np.asarray(v) for v in ins)
    return [(a * b).astype(np.result_type(a.dtype, b.dtype))]


def _relu(run, node, ins):
    return [np.maximum(ins[0], 0).astype(ins[0].dtype)]


def _softmax(run, node, ins):
    return [softmax(ins[0], _attr(node, "axis", -1))]


def _conv(run, node, ins):
    after = run.consumers.get(node.output[0], [])
    if len(after) == 1 and after[0].op_type == "QuantizeLinear" and run.fused_producer(after[0]) is node:
        return [None]   # nothing reads the float result: the QuantizeLinear after it runs QLinearConv instead
    return [conv_float(ins[0], ins[1], ins[2] if len(ins) > 2 else None, _conv_shape(run, node, ins[1].shape[2:]))]


def _qlinear_conv(run, node, ins):
    x, sx, zx, w, sw, zw, sy, zy = run.kernel_weights(node, ins)[:8]
    bias = ins[8] if len(ins) > 8 else None
    if _attr(node, "channels_last", 0):
        raise EmulationError(f"{run.label}: QLinearConv '{node.name}' is channels_last; the emulation covers NCHW")
    return [qlinear_conv(x, sx, zx, w, sw, zw, sy, zy, bias, _conv_shape(run, node, w.shape[2:]), run.family)]


def _batch_normalization(run, node, ins):
    if _attr(node, "training_mode", 0):
        raise EmulationError(f"{run.label}: BatchNormalization '{node.name}' in training mode")
    return [batch_normalization(*ins[:5], epsilon=_attr(node, "epsilon", 1e-5))]


def _max_pool(run, node, ins):
    if len(node.output) > 1 and node.output[1]:
        raise EmulationError(f"{run.label}: MaxPool '{node.name}' asks for indices; the emulation gives values")
    return [max_pool(ins[0], _conv_shape(run, node, _attr(node, "kernel_shape", [])))]


def _global_average_pool(run, node, ins):
    return [global_average_pool(ins[0])]


def _qlinear_global_average_pool(run, node, ins):
    if _attr(node, "channels_last", 0):
        raise EmulationError(f"{run.label}: QLinearGlobalAveragePool '{node.name}' is channels_last; the emulation "
                             "covers NCHW")
    return [qlinear_global_average_pool(*ins[:5])]


def _flatten(run, node, ins):
    axis = _attr(node, "axis", 1)
    x = ins[0]
    axis = axis + x.ndim if axis < 0 else axis
    return [x.reshape(int(np.prod(x.shape[:axis], dtype=np.int64)), -1)]


HANDLERS: dict[str, Handler] = {
    "QuantizeLinear": _quantize, "DequantizeLinear": _dequantize, "DynamicQuantizeLinear": _dynamic_quantize,
    "MatMul": _matmul, "QLinearMatMul": _qlinear_matmul, "MatMulInteger": _matmul_integer,
    "Gemm": _gemm, "QGemm": _qgemm, "QLinearAdd": _qlinear_add, "QLinearSoftmax": _qlinear_softmax,
    "Reshape": _reshape, "Cast": _cast, "Add": _add, "Mul": _mul, "Relu": _relu, "Softmax": _softmax,
    "Conv": _conv, "QLinearConv": _qlinear_conv, "BatchNormalization": _batch_normalization, "MaxPool": _max_pool,
    "GlobalAveragePool": _global_average_pool, "QLinearGlobalAveragePool": _qlinear_global_average_pool,
    "Flatten": _flatten,
}


WEIGHT_SLOTS = {"Conv": 1, "MatMul": 1, "Gemm": 1, "QLinearConv": 3, "QLinearMatMul": 3, "QGemm": 3,
                "MatMulInteger": 1, "ConvInteger": 1}
"""Per op that may run an integer GEMM: the input that holds its weights."""


S8S8_OPS = frozenset({"QLinearConv", "QLinearMatMul", "QGemm", "MatMulInteger"})
"""The QOperator ops the emulation runs whose input 2 is the activation's zero point: on int8 activations, S8S8."""


def family_free(model, x64_precision: bool = False) -> bool:
    """True when both families compute ``model`` alike: every weight an integer GEMM or Conv reads is a constant
    uint8, or an int8 within [-64, 64] (two products of 255 x 64 stay inside int16, so no pair can saturate), or
    its QOperator op reads int8 activations (ORT's S8S8 kernels on x86 add in int32; QDQ's move them to uint8), unless
    in a session with ``X64_PRECISION_KEY`` (``x64_precision``), which has no kernel for int8 activations.
    Conservative: a computed weight, another dtype, or a float Conv, MatMul or Gemm reading a DequantizeLinear's
    output that ORT leaves in float is not (one it quantizes at load, ``lab.load_time``, counts as quantized)."""
    m = load_time.weight_bias_quantization(model if isinstance(model, onnx.ModelProto) else onnx.load(str(model)))
    consts = {i.name: i for i in m.graph.initializer}
    producer = {o: n for n in m.graph.node for o in n.output}

    def in_range(name: str) -> bool:
        if name not in consts:
            return False
        w = numpy_helper.to_array(consts[name])
        return w.dtype == np.uint8 or (w.dtype == np.int8 and (w.size == 0 or int(np.abs(
            w.astype(np.int16)).max()) <= S7_LIMIT))

    def s8_activations(node) -> bool:   # a QOperator op on int8 activations runs an S8S8 kernel: int32 sums
        if x64_precision or node.op_type not in S8S8_OPS:
            return False
        zero = node.input[2] if len(node.input) > 2 else ""
        return zero in consts and consts[zero].data_type == TensorProto.INT8

    for node in m.graph.node:
        slot = WEIGHT_SLOTS.get(node.op_type)
        if slot is None or len(node.input) <= slot:
            continue
        if node.op_type in ("Conv", "MatMul", "Gemm"):
            dq = producer.get(node.input[slot])
            if dq is not None and dq.op_type == "DequantizeLinear":
                if not in_range(dq.input[0]):
                    return False
            elif any(getattr(producer.get(i), "op_type", None) == "DequantizeLinear" for i in node.input):
                return False
        elif not (in_range(node.input[slot]) or s8_activations(node)):
            return False
    return True


def uncovered(model) -> list[str]:
    """The op types of ``model`` the emulation does not cover, in graph order (empty: it can run it)."""
    m = model if isinstance(model, onnx.ModelProto) else onnx.load(str(model))
    return list(dict.fromkeys(n.op_type for n in m.graph.node if n.op_type not in HANDLERS))


def emulate(model, x: np.ndarray, family: str, input_name: str = "pixels", x64_precision: bool = False) -> np.ndarray:
    """The model's first output on ``x``, as a CPU of ``family`` computes it; ``x64_precision``: in a session with
    ``X64_PRECISION_KEY`` set to "1" (x86's rules: constant int8 weights beyond [-64, 64] shifted to uint8)."""
    m = model if isinstance(model, onnx.ModelProto) else onnx.load(str(model))
    out = m.graph.output[0].name
    return np.asarray(emulate_tensors(m, x, family, [out], input_name, x64_precision,
                                      "the model" if isinstance(model, onnx.ModelProto) else Path(model).name)[out],
                      np.float32)


def emulate_tensors(model, x: np.ndarray, family: str, names, input_name: str = "pixels", x64_precision: bool = False,
                    label: str | None = None) -> dict[str, np.ndarray]:
    """The tensors ``names`` of the model on ``x`` as a CPU of ``family`` computes them, in their own dtypes (a
    QuantizeLinear's output as the integers the session holds). A tensor a fused kernel never materialises as
    float (a Conv's float output before its QuantizeLinear) is None."""
    check_family(family)
    m = load_time.weight_bias_quantization(model if isinstance(model, onnx.ModelProto) else onnx.load(str(model)))
    label = label or ("the model" if isinstance(model, onnx.ModelProto) else Path(model).name)
    values = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
    values[input_name] = np.asarray(x, np.float32)
    consumers: dict[str, list] = {}
    for n in m.graph.node:
        for i in n.input:
            consumers.setdefault(i, []).append(n)
    opset = max([o.version for o in m.opset_import if o.domain in ("", "ai.onnx")], default=0)
    constants = frozenset(values) - {i.name for i in m.graph.input} - {input_name}
    run = _Run(values, {o: n for n in m.graph.node for o in n.output}, consumers, family, label, bool(x64_precision),
               constants, opset, frozenset(o.name for o in m.graph.output))
    for node in m.graph.node:
        handler = HANDLERS.get(node.op_type)
        if handler is None:
            raise EmulationError(f"{label}: op {node.op_type} ('{node.name}') is not covered by the kernel-family "
                                 "emulation; run this model on a CPU of that family instead")
        ins = [values.get(i) if i else None for i in node.input]
        values.update(zip(node.output, handler(run, node, ins)))
    missing = [n for n in names if n not in values]
    if missing:
        raise KeyError(f"{label} has no tensor named {missing}")
    return {n: values[n] for n in names}
