"""``session.x64quantprecision = "1"``: lab.kernels computes it on both families, checked against ORT's real kernels.

ONNX Runtime's deploy-time fix for the saturating family (field notes, "Checked in December, second pass"): the
session config entry ``kernels.X64_PRECISION_KEY`` makes the session shift constant int8 weights with a value
outside [-64, 64] to uint8 (+128, zero point +128) when it loads, in a QDQ graph's DequantizeLinear
(``QDQS8ToU8Transformer``) and in QLinearMatMul (opset 10 only), QLinearConv, QGemm, MatMulInteger and their
fused forms (``Avx2WeightS8ToU8Transformer``), so U8U8 kernels run, which never pair-saturate. ORT reads it on
x86 wherever its U8S8 and U8U8 GEMMs differ, VNNI machines included; a QDQ Add whose int8 bias turned uint8
then fuses into QLinearAdd; and an op left with int8 activations and uint8 weights (QOperator S8S8) has no
kernel: the session is refused.

* fast: on this machine the option gives what the emulation says, bit for bit (x86); on an exact machine it
  changes nothing on the lab's per-channel candidate, CNN or dynamic model; the emulated saturating family with
  it equals the exact family within one output step (without it, it differs); QOperator S8S8 is refused as ORT
  refuses it; a prediction with the option never goes through ``lab.cache`` (whose keys do not carry it).
* slow: real AVX2 kernels (``qemu-x86_64-static -cpu Haswell``, tests/kernel_families.py) with and without the
  option, bit for bit against the emulation, in one process: the lab's per-channel candidate (lesson 06), with
  ``reduce_range`` (weights within [-64, 64]: nothing shifted), a per-channel QDQ CNN (lesson 10's ``build``), a
  dynamic per-channel MLP, a QOperator U8S8 MLP at opset 17 and at opset 21 (its QLinearMatMul is not shifted:
  it still saturates), and a QDQ Add the option fuses. Skipped without qemu, except in CI (CI=true).
"""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import kernel_families as kf
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper, version_converter

from lab import cache, camera, compare, data, graph, kernels
from lab.convert import quantize, quantize_dynamic_model
from lab.kernels import EXACT, SATURATING, EmulationError
from lab.lessons.lesson06_accept_or_reject.acceptance import CANDIDATE_SETTINGS
from lab.lessons.lesson10_your_own_model import release
from lab.readers import ArrayReader

DYNAMIC_TOLERANCE = 1e-6   # a dynamic model's output is float: summation order may move the last bits
CNN_RECIPE = {"calibration": "camera", "pre_process": False, "quant_format": "QDQ", "per_channel": True,
              "reduce_range": False}
# name -> how each MLP is built from the FP32 fixture (opset 17) or its opset-21 copy
MLPS = {
    "candidate": ("static", 17, dict(CANDIDATE_SETTINGS)),
    "candidate_rr": ("static", 17, dict(CANDIDATE_SETTINGS, reduce_range=True)),
    "dynamic": ("dynamic", 17, {}),
    "qop_u8": ("static", 17, dict(quant_format="QOperator", activation_type="QUInt8", per_channel=True)),
    "qop_u8_opset21": ("static", 21, dict(quant_format="QOperator", activation_type="QUInt8", per_channel=True)),
    "qop_s8": ("static", 17, dict(quant_format="QOperator", activation_type="QInt8", per_channel=True)),
}
REFUSED = {"qop_s8"}  # int8 activations, weights shifted to uint8: no kernel, no session


class Frames(ArrayReader):
    """Lesson 10's FrameReader: sensor frames through the camera's deployed path."""

    def __init__(self, frames, batch_size=32, input_name=camera.INPUT_NAME):
        super().__init__(camera.preprocess(frames), batch_size=batch_size, input_name=input_name)


def add_model(bias: np.ndarray) -> onnx.ModelProto:
    """``pixels`` [N, 64] -> QDQ Add of a constant int8 ``bias`` -> QDQ output, all on uint8 activations.

    Scales 0.1 and 0.2 put many sums exactly on a half step, where QLinearAdd (the fused kernel) and a float Add
    then QuantizeLinear round differently: so the outputs tell which one ran. On x86 the Add fuses only when the bias
    is uint8 too, which the option makes of an int8 bias with a value outside [-64, 64].
    """
    inits = [numpy_helper.from_array(np.array(0.1, np.float32), "s"),
             numpy_helper.from_array(np.array(0, np.uint8), "z"),
             numpy_helper.from_array(bias.astype(np.int8).reshape(1, 64), "bias"),
             numpy_helper.from_array(np.array(0, np.int8), "bias_zero_point"),
             numpy_helper.from_array(np.array(0.2, np.float32), "out_scale")]
    nodes = [helper.make_node("QuantizeLinear", [data.INPUT_NAME, "s", "z"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"]),
             helper.make_node("DequantizeLinear", ["bias", "s", "bias_zero_point"], ["bd"]),
             helper.make_node("Add", ["xd", "bd"], ["y"]),
             helper.make_node("QuantizeLinear", ["y", "out_scale", "z"], ["yq"]),
             helper.make_node("DequantizeLinear", ["yq", "out_scale", "z"], ["out"])]
    g = helper.make_graph(nodes, "qdq_add", [helper.make_tensor_value_info(data.INPUT_NAME, TensorProto.FLOAT,
                                                                          ["N", 64])],
                          [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["N", 64])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


ADD_BIASES = {"add_wide": np.arange(64) * 3 - 96,    # -96..93: shifted to uint8, the Add fuses
              "add_narrow": np.arange(64) - 32}      # -32..31: stays int8, the Add stays float


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, tuple[Path, np.ndarray]]:
    """name -> (model file, its input batch). The file stem is the runner's key. Converted from private copies
    (ORT writes next to the model it quantizes)."""
    folder = tmp_path_factory.mktemp("x64")
    source = {17: folder / "fp32.onnx", 21: folder / "fp32-opset21.onnx"}
    shutil.copy(data.fixture_path("fp32.onnx"), source[17])
    onnx.save(version_converter.convert_version(onnx.load(source[17]), 21), source[21])
    calibration, pixels = data.load_split("calibration").pixels, data.load_split("evaluation").pixels
    built = {}
    for name, (mode, opset, settings) in MLPS.items():
        out = folder / f"{name}.onnx"
        if mode == "dynamic":
            quantize_dynamic_model(source[opset], out, per_channel=True)
        else:
            quantize(source[opset], out, calibration, **settings)
        built[name] = (out, pixels)
    cnn_source = folder / "cnn-fp32.onnx"
    shutil.copy(camera.model_path(), cnn_source)
    cnn, _ = release.build(cnn_source, folder / "cnn-build", CNN_RECIPE, Frames)
    built["cnn"] = (Path(shutil.copy(cnn, folder / "cnn.onnx")), camera.load_split("evaluation").image)
    ties = (np.random.default_rng(36).integers(0, 100, (400, 64)) * np.float32(0.1)).astype(np.float32)
    for name, bias in ADD_BIASES.items():
        onnx.save(add_model(bias), folder / f"{name}.onnx")
        built[name] = (folder / f"{name}.onnx", ties)
    return built


def input_name(model) -> str:
    return graph.load(model).graph.input[0].name


def emulate(model, x, family, x64_precision=False) -> np.ndarray:
    return kernels.emulate(model, x, family, input_name(model), x64_precision)


def native(model, x, x64_precision=False) -> np.ndarray:
    return compare.session(model, x64_precision=x64_precision).run(None, {input_name(model): x})[0]


def output_step(model) -> float:
    return graph.output_scale(model, graph.load(model).graph.output[0].name) or 1 / 255


def assert_same(name: str, real: np.ndarray, emulated: np.ndarray) -> None:
    """Bit for bit; a dynamic model's float output to DYNAMIC_TOLERANCE."""
    if name == "dynamic":
        np.testing.assert_allclose(real, emulated, rtol=0, atol=DYNAMIC_TOLERANCE, err_msg=name)
    else:
        np.testing.assert_array_equal(real, emulated, err_msg=name)


def option_applies_here() -> bool:
    """Does this machine's ORT shift weights under the option (x86 where U8S8 and U8U8 GEMMs differ)? Read from the
    optimized probe graph: the shifted weight is a new initializer named ``<weight>_s8_2_u8``."""
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.add_session_config_entry(kernels.X64_PRECISION_KEY, "1")
    with tempfile.TemporaryDirectory(prefix="x64-probe-") as folder:
        so.optimized_model_filepath = str(Path(folder) / "optimized.onnx")
        ort.InferenceSession(kernels.probe_model().SerializeToString(), so, providers=["CPUExecutionProvider"])
        return any(i.name.endswith("_s8_2_u8") for i in onnx.load(so.optimized_model_filepath).graph.initializer)


# --- fast: the rule itself ---------------------------------------------------------------------------------

def test_x64_weights_shifts_only_int8_beyond_64():
    wide, narrow = np.array([-65, 0, 3], np.int8), np.array([-64, 0, 64], np.int8)
    w, zp = kernels.x64_weights(wide, np.array([0, 1, -2], np.int8))
    assert w.dtype == np.uint8 and w.tolist() == [63, 128, 131]
    assert zp.dtype == np.uint8 and zp.tolist() == [128, 129, 126]
    assert kernels.x64_weights(wide, None)[1].tolist() == 128     # no zero point: ORT adds one of 128
    assert kernels.x64_weights(narrow, np.int8(0))[0] is narrow   # within [-64, 64]: left int8
    unsigned = np.array([0, 255], np.uint8)
    assert kernels.x64_weights(unsigned, np.uint8(0))[0] is unsigned


# --- fast: this machine's real session --------------------------------------------------------------------

def test_this_machines_session_with_the_option_is_what_the_emulation_computes(models):
    """Bit for bit on every model (x86: ORT applies the option here, VNNI or not)."""
    if not option_applies_here():
        pytest.skip("ONNX Runtime ignores the option on this machine (not x86, or no U8S8 overflow dispatch)")
    family = kernels.machine_family()
    for name, (model, x) in models.items():
        if name in REFUSED:
            continue
        assert_same(name, native(model, x, True), emulate(model, x, family, True))


def test_on_an_exact_machine_the_option_changes_nothing(models):
    """VNNI's int32 sums never saturated: U8U8 gives the same outputs as before on the lab's models."""
    if kernels.machine_family() != EXACT:
        pytest.skip("this machine's kernels saturate")
    for name in ("candidate", "candidate_rr", "cnn", "dynamic", "qop_u8"):
        model, x = models[name]
        assert_same(name, native(model, x, True), native(model, x))


def test_the_option_makes_the_saturating_family_compute_as_the_exact_one(models):
    """With it no pair saturates: the saturating family equals the exact one under the option bit for bit (a fact
    of the arithmetic), and within one output step of the exact family without it (only a fused QLinearAdd may
    round differently); without the option the per-channel models differ by many steps."""
    for name in ("candidate", "cnn", "dynamic", "qop_u8"):
        model, x = models[name]
        saturating, exact = emulate(model, x, SATURATING, True), emulate(model, x, EXACT)
        assert_same(name, saturating, emulate(model, x, EXACT, True))
        step = output_step(model)
        assert float(np.abs(saturating - exact).max()) <= step * (1 + 1e-6), name
        assert float(np.abs(emulate(model, x, SATURATING) - exact).max()) > 10 * step, name


def test_the_candidates_error_under_the_option(models):
    """Lesson 06's candidate against FP32 on the evaluation split: the saturating family's error falls to the exact
    family's (field notes: 0.246 by default, 0.093 with the option, under real Haswell kernels)."""
    model, x = models["candidate"]
    fp32 = compare.predict(data.fixture_path("fp32.onnx"), x)
    errors = {(family, option): compare.max_abs_error(fp32, emulate(model, x, family, option))
              for family in (SATURATING, EXACT) for option in (False, True)}
    print({f"{family}{' + x64' if option else ''}": round(e, 4) for (family, option), e in errors.items()})
    assert errors[SATURATING, True] == errors[EXACT, True] == errors[EXACT, False] < errors[SATURATING, False]


def test_weights_within_64_are_left_int8(models):
    """reduce_range keeps every weight within [-64, 64]: the option shifts nothing and changes no output (no pair
    could saturate anyway)."""
    model, x = models["candidate_rr"]
    for family in (SATURATING, EXACT):
        assert_same("candidate_rr", emulate(model, x, family, True), emulate(model, x, family))


def test_an_opset_21_qlinearmatmul_still_saturates(models):
    """Avx2WeightS8ToU8Transformer matches QLinearMatMul's opset-10 version only: at opset 21 the option shifts
    nothing and the saturating family still differs."""
    model, x = models["qop_u8_opset21"]
    assert [o.version for o in graph.load(model).opset_import if o.domain in ("", "ai.onnx")] == [21]
    np.testing.assert_array_equal(emulate(model, x, SATURATING, True), emulate(model, x, SATURATING))
    assert (emulate(model, x, SATURATING, True) != emulate(model, x, EXACT)).any()


def test_the_option_fuses_a_qdq_add_whose_bias_turns_uint8(models):
    """The wide bias is shifted, so the Add's inputs and output are all uint8 and it runs as QLinearAdd, which rounds
    the half steps differently from a float Add; the narrow one stays int8 and the Add stays float."""
    wide, x = models["add_wide"]
    assert (emulate(wide, x, EXACT, True) != emulate(wide, x, EXACT)).sum() > 100
    narrow, _ = models["add_narrow"]
    np.testing.assert_array_equal(emulate(narrow, x, EXACT, True), emulate(narrow, x, EXACT))


def test_int8_activations_with_shifted_weights_are_refused_as_ort_refuses(models):
    """QOperator S8S8: the option leaves int8 activations on uint8 weights, a pair ORT has no kernel for."""
    model, x = models["qop_s8"]
    for family in (SATURATING, EXACT):
        with pytest.raises(EmulationError, match=r"QLinearMatMul 'fc1_MatMul_quant' become uint8.*NOT_IMPLEMENTED"):
            emulate(model, x, family, True)
        emulate(model, x, family)  # without the option it runs
    if option_applies_here():
        with pytest.raises(Exception, match="NOT_IMPLEMENTED"):
            compare.session(model, x64_precision=True)


class Recording:
    """A ``lab.cache.Cache`` that computes and writes down what it was asked."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    def call(self, name, compute, args):
        self.asked.append(name)
        return compute(*args)


def test_predict_with_the_option_bypasses_the_cache(models):
    """``lab.cache`` keys a prediction by model, family, input and data: a prediction with the option never goes
    through it, so it can neither answer one nor be answered by one; without the option nothing changes."""
    model, x = models["candidate"]
    recording = Recording()
    with cache.using(recording):
        for family in (SATURATING, EXACT):
            with_option = compare.predict(model, x, family=family, x64_precision=True)
            np.testing.assert_array_equal(with_option, emulate(model, x, family, True)
                                          if kernels.emulated(family) else native(model, x, True))
        assert recording.asked == []
        compare.predict(model, x)
    assert recording.asked[:1] == [cache.PREDICT]


# --- slow: the real saturating kernels, with and without the option ---------------------------------------

RUNNER = '''"""python runner.py OUT.npz IN.npz MODEL.onnx...: each model's output with the option "0" and "1"."""
import sys
import numpy as np
import onnxruntime as ort

out, inputs, *models = sys.argv[1:]
got, refused = {}, []
with np.load(inputs) as feed:
    for path in models:
        stem = path.rsplit("/", 1)[-1][:-len(".onnx")]
        for option in ("0", "1"):
            so = ort.SessionOptions()
            so.intra_op_num_threads = so.inter_op_num_threads = 1
            so.log_severity_level = 3
            so.add_session_config_entry("''' + kernels.X64_PRECISION_KEY + '''", option)
            try:
                session = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
            except Exception as exc:
                refused.append(f"{stem}-{option}: {exc}")
                continue
            got[f"{stem}-{option}"] = session.run(None, {session.get_inputs()[0].name: feed[stem]})[0]
np.savez(out, refused=np.array(refused, dtype=str), **got)
'''


@pytest.fixture(scope="module")
def haswell(models, tmp_path_factory) -> dict[str, np.ndarray]:
    """Every model with and without the option in ONE process under qemu Haswell (its start-up costs seconds)."""
    prefix = kf.family_prefix(kf.require_haswell)
    folder = tmp_path_factory.mktemp("haswell-x64")
    (folder / "runner.py").write_text(RUNNER)
    np.savez(folder / "in.npz", **{path.stem: x for path, x in models.values()})
    kf.run(prefix, folder / "runner.py", folder / "out.npz", folder / "in.npz",
           *(path for path, _ in models.values()), timeout=1800)
    with np.load(folder / "out.npz") as saved:
        return {key: saved[key] for key in saved.files}


@pytest.mark.slow
@pytest.mark.parametrize("name", [*MLPS, "cnn", *ADD_BIASES])
@pytest.mark.parametrize("option", [False, True], ids=["default", "x64quantprecision"])
def test_real_saturating_kernels_equal_the_emulation(haswell, models, name, option):
    """qemu Haswell (AVX2, no VNNI), bit for bit; QOperator S8S8 with the option is refused there too."""
    model, x = models[name]
    key = f"{name}-{int(option)}"
    if name in REFUSED and option:
        assert key not in haswell
        assert any(r.startswith(key) and "NOT_IMPLEMENTED" in r for r in haswell["refused"].tolist())
        with pytest.raises(EmulationError):
            emulate(model, x, SATURATING, True)
        return
    emulated = emulate(model, x, SATURATING, option)
    print(f"{key}: max difference {float(np.abs(haswell[key] - emulated).max()):.3g}")
    assert_same(name, haswell[key], emulated)


@pytest.mark.slow
def test_real_saturating_kernels_with_the_option_give_the_candidates_exact_error(haswell, models):
    """The field notes' figures, under real AVX2 kernels: 0.246 by default, 0.093 with the option."""
    model, x = models["candidate"]
    fp32 = compare.predict(data.fixture_path("fp32.onnx"), x)
    default, fixed = (compare.max_abs_error(fp32, haswell[f"candidate-{o}"]) for o in (0, 1))
    print(f"candidate under qemu Haswell: max abs error {default:.4f} by default, {fixed:.4f} with the option")
    assert fixed == compare.max_abs_error(fp32, emulate(model, x, EXACT)) < default
