"""The hand-made ruler agrees with ONNX Runtime: compute_scale_zp, QuantizeLinear and DequantizeLinear."""
import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper
from onnxruntime.quantization.quant_utils import compute_scale_zp

from lab import ruler
from lab.graph import session

finite = st.floats(-1e3, 1e3, allow_nan=False, width=32)


def qdq_model(scale: float, zp: int, dtype: str) -> onnx.ModelProto:
    elem = TensorProto.INT8 if dtype == "int8" else TensorProto.UINT8
    g = helper.make_graph(
        [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
         helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"])],
        "qdq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None])],
        [helper.make_tensor_value_info("q", elem, [None]),
         helper.make_tensor_value_info("y", TensorProto.FLOAT, [None])],
        [helper.make_tensor("s", TensorProto.FLOAT, [], [scale]), helper.make_tensor("z", elem, [], [zp])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


@settings(max_examples=60, deadline=None)
@given(finite, finite, st.sampled_from(["int8", "uint8"]), st.booleans())
def test_scale_zero_point_match_ort(a, b, dtype, symmetric):
    rmin, rmax = min(a, b), max(a, b)
    qmin, qmax = ruler.qrange(dtype)
    np_dtype = np.int8 if dtype == "int8" else np.uint8
    zp_ort, s_ort = compute_scale_zp(np.array(rmin, np.float32), np.array(rmax, np.float32),
                                     np.array(qmin, np_dtype), np.array(qmax, np_dtype), symmetric)
    scale, zp = ruler.scale_zero_point(rmin, rmax, dtype, symmetric)
    assert np.float32(scale) == np.float32(s_ort)
    assert zp == int(zp_ort)


@settings(max_examples=40, deadline=None)
@given(st.lists(finite, min_size=1, max_size=64), st.floats(0.0009765625, 10, width=32),
       st.integers(-128, 127), st.sampled_from(["int8", "uint8"]))
def test_quantize_dequantize_match_ort_kernels(values, scale, zp, dtype):
    if dtype == "uint8":
        zp = zp + 128
    x = np.array(values, np.float32)
    q, y = session(qdq_model(scale, zp, dtype)).run(None, {"x": x})
    np.testing.assert_array_equal(ruler.quantize(x, scale, zp, dtype), q)
    np.testing.assert_array_equal(ruler.dequantize(q, scale, zp), y)


@settings(max_examples=40, deadline=None)
@given(st.floats(0.015625, 100, width=32), st.lists(st.floats(0, 1, width=32), min_size=1, max_size=64))
def test_round_trip_inside_the_range_is_within_half_a_step(rmax, fractions):
    scale, zp = ruler.scale_zero_point(0.0, rmax)
    x = np.array(fractions, np.float32) * np.float32(rmax)
    err = np.abs(ruler.round_trip(x, scale, zp) - x)
    assert err.max() <= scale / 2 * (1 + 1e-5) + np.spacing(np.float32(rmax))


def test_unit_range_gives_the_textbook_ruler():
    scale, zp = ruler.scale_zero_point(0.0, 1.0)
    assert np.isclose(scale, 1 / 255) and zp == -128
    assert ruler.representable_range(scale, zp) == (0.0, float(np.float32(255) * scale))


def test_ruler_stats_tell_clipping_from_squashing():
    x = np.linspace(0, 1, 1001, dtype=np.float32)
    right, narrow, wide = (ruler.ruler_stats(x, 0, hi) for hi in (1.0, 0.25, 16.0))
    assert right["clipped_fraction"] == 0 and right["steps_used"] == 255
    assert narrow["clipped_fraction"] > 0.7 and narrow["max_abs_error"] > 0.7
    assert wide["clipped_fraction"] == 0 and wide["steps_used"] <= 16
    assert wide["max_abs_error"] > right["max_abs_error"]


def test_bad_ranges_are_named():
    import pytest
    with pytest.raises(ValueError, match="rmin <= rmax"):
        ruler.scale_zero_point(1.0, 0.0)
    with pytest.raises(ValueError, match="int8 or uint8"):
        ruler.qrange("int4")


@pytest.mark.parametrize("dtype", ["int8", "uint8"])
@pytest.mark.parametrize("reduce_range", [False, True])
def test_qrange_is_onnx_runtimes(dtype, reduce_range):
    """Including reduce_range: ORT's reduced int8 range is -64..64, so |w| can reach 64 (255 x 128 still fits int16)."""
    from onnx import TensorProto
    from onnxruntime.quantization.quant_utils import get_qmin_qmax_for_qType

    qtype = TensorProto.INT8 if dtype == "int8" else TensorProto.UINT8
    assert ruler.qrange(dtype, reduce_range) == tuple(int(v) for v in get_qmin_qmax_for_qType(qtype, reduce_range))
