"""lab.kernels computes what each INT8 kernel family outputs: checked against ORT's real kernels.

ONNX Runtime's U8S8 integer GEMM comes in two families (field notes, "The CPU decides INT8 results"):
*exact* int32 sums (VNNI, AMX, ARM) and *saturating* int16 pair sums (x86 AVX2 without VNNI). The lab
grades and teaches with ``lab.kernels.emulate``, a numpy forward pass that computes either family on
any machine, so here it must agree with the real thing:

* fast: the probe names this machine's family; ``int_matmul`` matches a brute-force loop; for every
  model kind the lab builds, the emulation of this machine's family equals this machine's ORT output
  bit for bit; an op the emulation does not cover is refused by name; and per-tensor weights never
  saturate while per-channel ones do (a fact of the arithmetic, true on every host).
* slow: every model kind runs under the *real* kernels of both families whatever the host is
  (``qemu-x86_64-static -cpu Haswell`` for saturating, an aarch64 sysroot under qemu for exact; see
  tests/kernel_families.py), one process per family, and is compared with that family's emulation.
  Haswell must be bit-identical. ARM's optimizer fuses the Adds into ``QLinearAdd`` where x86 leaves
  them in float, so there each output may be one output step away, and a prediction may change only
  where the emulation's top two scores are within one step.
"""
from __future__ import annotations

import shutil

import kernel_families as kf
import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from onnx import TensorProto, helper
from onnxruntime.quantization.shape_inference import quant_pre_process

from lab import data, graph, kernels
from lab.convert import quantize, quantize_dynamic_model
from lab.kernels import EXACT, FAMILIES, SATURATING, EmulationError

DYNAMIC_TOLERANCE = 1e-6   # the dynamic model's output is float: summation order may move the last bits

# kind -> how it is built: ("static", pre-processed?, quantize() settings) or ("dynamic", ...)
KINDS = {
    "qdq_tensor": ("static", False, dict(quant_format="QDQ")),
    "qdq_channel": ("static", False, dict(quant_format="QDQ", per_channel=True)),
    "qdq_channel_rr": ("static", False, dict(quant_format="QDQ", per_channel=True, reduce_range=True)),
    "qdq_u8_channel": ("static", False, dict(quant_format="QDQ", activation_type="QUInt8", per_channel=True)),
    "qop_s8_channel": ("static", False, dict(quant_format="QOperator", per_channel=True)),
    "qop_u8_channel": ("static", False, dict(quant_format="QOperator", activation_type="QUInt8",
                                             per_channel=True)),
    "dynamic": ("dynamic", False, {}),
    # quant_pre_process fuses MatMul + Add into Gemm: QOperator then gives QGemm, QDQ a fused Gemm.
    "pre_qop_u8_channel": ("static", True, dict(quant_format="QOperator", activation_type="QUInt8",
                                                per_channel=True)),
    "pre_qdq_channel": ("static", True, dict(quant_format="QDQ", per_channel=True)),
}


# --- fixtures and helpers ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict:
    """Every kind in KINDS, converted once from a copy of the FP32 fixture (ORT writes next to its input)."""
    folder = tmp_path_factory.mktemp("kinds")
    source = folder / "source.onnx"
    shutil.copy(data.fixture_path("fp32.onnx"), source)
    preprocessed = folder / "preprocessed.onnx"
    quant_pre_process(str(source), str(preprocessed), skip_symbolic_shape=True)
    calibration = data.load_split("calibration").pixels
    built = {}
    for kind, (mode, pre, options) in KINDS.items():
        out = folder / f"{kind}.onnx"      # the file stem is run_models.py's output key
        if mode == "dynamic":
            quantize_dynamic_model(source, out)
        else:
            quantize(preprocessed if pre else source, out, calibration, **options)
        built[kind] = out
    return built


@pytest.fixture(scope="module")
def x() -> np.ndarray:
    return data.load_split("evaluation").pixels


def native(model, x) -> np.ndarray:
    """This machine's real ORT output."""
    return graph.session(model).run(None, {data.INPUT_NAME: x})[0]


def is_dynamic(kind: str) -> bool:
    return KINDS[kind][0] == "dynamic"


def output_step(model) -> float:
    """One step of the model's output grid (1/255 when the output is not quantized)."""
    return graph.output_scale(model) or 1 / 255


def top_two_gap(scores: np.ndarray) -> np.ndarray:
    """Per row, the best score minus the second best."""
    top = np.sort(scores, axis=1)
    return top[:, -1] - top[:, -2]


def run_all(prefix: list[str], models: dict, x: np.ndarray, folder) -> dict:
    """All models in ONE process under ``prefix`` (qemu start-up costs seconds): kind -> output."""
    inputs, out = folder / "x.npz", folder / "out.npz"
    np.savez(inputs, x=x)
    kf.run(prefix, kf.RUN_MODELS, out, inputs, *models.values(), timeout=900)
    with np.load(out) as saved:
        return {kind: saved[kind] for kind in models}


# --- fast: the probe ----------------------------------------------------------------------------------

def test_machine_family_is_what_the_probe_says():
    family = kernels.machine_family()
    assert family in FAMILIES
    assert family == kernels.family_from_probe(kernels.probe_answer())


def test_family_from_probe_names_the_two_answers():
    assert kernels.family_from_probe(8128) == EXACT
    assert kernels.family_from_probe(4096) == SATURATING
    for other in (4112.0, 0.0, 8192.0, float("nan")):
        with pytest.raises(EmulationError, match="probe answered"):
            kernels.family_from_probe(other)


# --- fast: the integer GEMM against a brute-force loop ---------------------------------------------

def brute_int_matmul(a, b, a_zero, b_zero, saturate_pairs: bool) -> np.ndarray:
    """sum_k (a - za)(b - zb) in Python ints; the raw products go in pairs (2j, 2j+1) clipped to int16
    when ``saturate_pairs``, the zero-point terms are exact."""
    n, k = a.shape
    m = b.shape[1]
    za = int(a_zero)
    zbs = [int(v) for v in np.broadcast_to(np.asarray(b_zero).reshape(-1), (m,))]
    out = np.zeros((n, m), np.int64)
    for i in range(n):
        for j in range(m):
            raw = 0
            for p in range(0, k, 2):
                pair = sum(int(a[i, q]) * int(b[q, j]) for q in (p, p + 1) if q < k)
                raw += min(max(pair, -32768), 32767) if saturate_pairs else pair
            col, row = sum(int(b[q, j]) for q in range(k)), sum(int(a[i, q]) for q in range(k))
            out[i, j] = raw - za * col - zbs[j] * row + k * za * zbs[j]
    return out


@st.composite
def gemm_operands(draw):
    n, k, m = draw(st.integers(1, 4)), draw(st.integers(1, 9)), draw(st.integers(1, 4))
    # bias towards the extremes, where pairs saturate
    u8 = st.one_of(st.integers(0, 255), st.sampled_from([0, 1, 254, 255]))
    s8 = st.one_of(st.integers(-128, 127), st.sampled_from([-128, -127, 126, 127]))
    a = draw(hnp.arrays(np.uint8, (n, k), elements=u8))
    b = draw(hnp.arrays(np.int8, (k, m), elements=s8))
    a_zero = np.uint8(draw(st.integers(0, 255)))
    per_column = draw(st.booleans())
    b_zero = draw(hnp.arrays(np.int8, (m,) if per_column else (), elements=st.integers(-128, 127)))
    return a, b, a_zero, b_zero


@settings(max_examples=200, deadline=None)
@given(gemm_operands(), st.booleans())
def test_int_matmul_matches_a_brute_force_loop(operands, saturate_pairs):
    a, b, a_zero, b_zero = operands
    got = kernels.int_matmul(a, b, a_zero, b_zero, saturate_pairs)
    assert got.shape == (a.shape[0], b.shape[1])
    np.testing.assert_array_equal(got, brute_int_matmul(a, b, a_zero, b_zero, saturate_pairs))


@settings(max_examples=50, deadline=None)
@given(st.integers(1, 3), st.integers(1, 7), st.integers(1, 3), st.integers(0, 2 ** 62), st.booleans())
def test_int_matmul_is_exact_beyond_8_bit_operands(n, k, m, seed, saturate_pairs):
    """Operands far past 8 bits (pairs that saturate many times over): still exact, in both paths."""
    rng = np.random.default_rng(seed)
    big = int(rng.choice([2 ** 8, 2 ** 11, 2 ** 12, 2 ** 16, 2 ** 28]))  # 2**11-2**12: summed in float32, in blocks
    a, b = rng.integers(-big, big, (n, k)), rng.integers(-big, big, (k, m))
    got = kernels.int_matmul(a, b, 3, 0, saturate_pairs)
    np.testing.assert_array_equal(got, brute_int_matmul(a, b, 3, 0, saturate_pairs))


def test_int_matmul_saturates_an_odd_k_pair_of_extremes():
    """K = 3: the pair (0, 1) clips at 32767, the lone k = 2 does not; without saturation all is exact."""
    a = np.full((1, 3), 255, np.uint8)
    b = np.full((3, 1), 127, np.int8)
    zero_a, zero_b = np.uint8(0), np.int8(0)
    assert kernels.int_matmul(a, b, zero_a, zero_b, True).item() == 32767 + 255 * 127
    assert kernels.int_matmul(a, b, zero_a, zero_b, False).item() == 3 * 255 * 127


@pytest.mark.parametrize("saturate_pairs", [False, True])
def test_int_matmul_odd_k_with_zero_points(saturate_pairs):
    """K = 3 with both zero points set: sum_k (a - 5)(b - 2) = 5 x -1 + 15 x 0 + 25 x 1 = 20."""
    a = np.array([[10, 20, 30]], np.uint8)
    b = np.array([[1], [2], [3]], np.int8)
    assert kernels.int_matmul(a, b, np.uint8(5), np.int8(2), saturate_pairs).item() == 20


# --- fast: the emulation of this machine's family equals this machine -------------------------------

@pytest.mark.parametrize("kind", KINDS)
def test_emulation_equals_this_machine(models, x, kind):
    model = models[kind]
    real = native(model, x)
    emulated = kernels.emulate(model, x, kernels.machine_family())
    assert emulated.shape == real.shape
    if is_dynamic(kind):
        np.testing.assert_allclose(emulated, real, rtol=0, atol=DYNAMIC_TOLERANCE)
    else:
        np.testing.assert_array_equal(emulated, real)


def test_preprocessed_kinds_use_the_fused_ops(models):
    """The pre-processed kinds exist to cover QGemm and Gemm in the emulation."""
    assert graph.op_counts(models["pre_qop_u8_channel"]).get("QGemm", 0) > 0
    assert graph.op_counts(models["pre_qdq_channel"]).get("Gemm", 0) > 0


def test_an_unknown_op_is_refused_by_name():
    node = helper.make_node("Sin", [data.INPUT_NAME], ["y"], name="the_sine")
    g = helper.make_graph([node], "sine",
                          [helper.make_tensor_value_info(data.INPUT_NAME, TensorProto.FLOAT, [1, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    for family in FAMILIES:
        with pytest.raises(EmulationError, match=r"op Sin \('the_sine'\)"):
            kernels.emulate(model, np.zeros((1, 4), np.float32), family)


# --- fast: facts of the arithmetic, the same on every host ------------------------------------------

def test_per_tensor_weights_never_saturate(models, x):
    """Per-tensor weights are small enough that no pair clips: both families compute the same."""
    model = onnx.load(str(models["qdq_tensor"]))
    np.testing.assert_array_equal(kernels.emulate(model, x, SATURATING), kernels.emulate(model, x, EXACT))


def test_per_channel_weights_saturate(models, x):
    """Per-channel weights use the full +-127 in every column: some pairs clip on the saturating family."""
    model = onnx.load(str(models["qdq_channel"]))
    differ = kernels.emulate(model, x, SATURATING) != kernels.emulate(model, x, EXACT)
    assert differ.any()


# --- slow: the real kernels of both families, whatever this host is -----------------------------------

@pytest.fixture(scope="module")
def haswell_outputs(models, x, tmp_path_factory) -> dict:
    prefix = kf.family_prefix(kf.require_haswell)
    return run_all(prefix, models, x, tmp_path_factory.mktemp("haswell"))


@pytest.fixture(scope="module")
def aarch64_outputs(models, x, tmp_path_factory) -> dict:
    prefix = kf.family_prefix(kf.require_aarch64, kf.DEFAULT_AARCH64_CACHE)
    return run_all(prefix, models, x, tmp_path_factory.mktemp("aarch64"))


@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS)
def test_real_saturating_kernels_equal_the_emulation(haswell_outputs, models, x, kind):
    """qemu Haswell (AVX2, no VNNI): the real saturating kernels, bit for bit."""
    real = haswell_outputs[kind]
    emulated = kernels.emulate(models[kind], x, SATURATING)
    diff = float(np.abs(real - emulated).max())
    print(f"saturating (qemu Haswell) {kind}: max difference {diff / output_step(models[kind]):.4g} "
          f"output steps ({diff:.3g})")
    if is_dynamic(kind):
        np.testing.assert_allclose(real, emulated, rtol=0, atol=DYNAMIC_TOLERANCE)
    else:
        np.testing.assert_array_equal(real, emulated)


@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS)
def test_real_exact_kernels_are_within_one_step_of_the_emulation(aarch64_outputs, models, x, kind):
    """aarch64 (dot product, int32): within one output step; predictions move only on near ties."""
    real = aarch64_outputs[kind]
    emulated = kernels.emulate(models[kind], x, EXACT)
    step = output_step(models[kind])
    tolerance = DYNAMIC_TOLERANCE if is_dynamic(kind) else step
    diff = float(np.abs(real - emulated).max())
    moved = real.argmax(axis=1) != emulated.argmax(axis=1)
    print(f"exact (qemu aarch64) {kind}: max difference {diff / step:.4g} output steps "
          f"({diff:.3g}), {int(moved.sum())} predictions moved")
    assert diff <= tolerance * (1 + 1e-6), f"{kind}: {diff / step:.3g} steps apart"
    near_tie = top_two_gap(emulated) <= tolerance * (1 + 1e-6)
    assert not (moved & ~near_tie).any(), f"{kind}: rows {np.flatnonzero(moved & ~near_tie)} moved without a tie"


@pytest.mark.parametrize("shape", [(921, 9), (230, 144), (5, 3), (0, 4), (4, 0), (7, 5000), (4097, 1), (1, 1)])
@pytest.mark.parametrize("dtype", [np.float32, np.int8, np.uint8, np.int64])
def test_column_extremes_are_numpys_with_zero_included(shape, dtype):
    """The saturating check's column extremes, reduced over wide rows for speed: numpy's ``min``/``max`` down each
    column with 0 included, for tall, wide and empty arrays."""
    low = 0 if dtype == np.uint8 else -100
    a = np.random.default_rng(1).integers(low, 100, shape).astype(dtype)
    lo, hi = kernels._column_extremes(a)
    np.testing.assert_array_equal(lo, a.min(axis=0, initial=0))
    np.testing.assert_array_equal(hi, a.max(axis=0, initial=0))
