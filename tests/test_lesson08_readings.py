"""Lesson 08's readings: every verdict the lesson's prose states comes from the run's own comparison, for either
outcome, and the static prose no longer quotes the reference data's verdicts (issues 35 and 36)."""
from __future__ import annotations

import shutil
from pathlib import Path

import nbformat
import numpy as np
import pytest

from lab import data, evidence, graph, kernels, measure
from lab.lessons.lesson08_the_quantization_toolbox import calibrators, readings, toolbox

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "08_the_quantization_toolbox.ipynb"


def comparison(fixed: int = 0, broken: int = 0, p: float = 1.0, error: tuple[float, float, float] = (0.0, -0.01, 0.01),
               identical: bool = False) -> readings.Comparison:
    """A comparison as ``readings.compared`` makes it, from its counts and its error interval."""
    return readings.Comparison(evidence.Paired(n=400, fixed=fixed, broken=broken, p_value=p),
                               evidence.Interval(*error, level=0.95), identical)


WITHIN = comparison(1, 2, 1.0, (0.004, -0.02, 0.03))
HIGHER = comparison(0, 3, 0.25, (0.113, 0.034, 0.162))
LOWER = comparison(0, 0, 1.0, (-0.081, -0.095, -0.032))
BROKE = comparison(1, 8, 0.039, (0.761, 0.56, 0.79))


# --- comparisons from outputs -------------------------------------------------------------------

def _ev(n: int = 40) -> measure.Evaluation:
    rng = np.random.default_rng(0)
    reference = rng.dirichlet(np.ones(10), size=n).astype(np.float32)
    return measure.Evaluation("synthetic", np.zeros((n, 64), np.float32), reference.argmax(1), reference)


def test_a_model_against_itself_is_identical_and_within_noise():
    ev = _ev()
    c = readings.compared_outputs(ev, ev.reference, ev.reference.copy())
    assert c.identical and not c.beyond_noise
    assert readings.change(c) == "identical outputs"
    assert c.words() == "accuracy: no image changed: within noise; max abs err +0.000 [0.000, 0.000]: within noise"


def test_a_model_that_misreads_every_image_is_worse_beyond_noise_on_both_counts():
    ev = _ev()
    wrong = np.roll(ev.reference, 1, axis=1)  # every image's most probable class moves
    c = readings.compared_outputs(ev, ev.reference, wrong)
    assert c.accuracy.broken == len(ev.labels) and c.accuracy.beyond_noise and c.error.sign > 0
    assert readings.worse(c) and not readings.better(c)
    assert "higher, beyond the noise" in readings.change(c) and "fewer digits read" in readings.change(c)


# --- verdict words: each outcome has its own --------------------------------------------------------

def test_verdicts_name_each_direction_and_call_the_rest_noise():
    words = readings.verdicts({"a": HIGHER, "b": LOWER, "c": WITHIN, "d": BROKE}, "MinMax")
    assert "a higher max abs error than MinMax's: a and d" in words
    assert "a lower max abs error than MinMax's: b" in words
    assert "fewer digits read: d" in words
    assert words.endswith("Within the noise of MinMax, neither better nor worse as far as these images can tell: c.")


def test_verdicts_when_nothing_is_beyond_noise_say_so():
    assert readings.verdicts({"a": WITHIN, "b": WITHIN}, "the baseline").startswith(
        "Nothing here differs from the baseline beyond the noise")


def test_names_with_commas_are_kept_apart():
    assert readings.verdicts({"dynamic": LOWER, "dynamic, per-channel": LOWER}, "x").startswith(
        "Beyond the noise, a lower max abs error than x's: dynamic; and dynamic, per-channel.")


def test_methods_sentence_says_whether_any_method_rescued_the_narrow_set():
    far = comparison(1, 52, 1e-12, (0.888, 0.81, 0.918))
    rescued = readings.methods_sentence({"Percentile": WITHIN}, {"MinMax": far, "Entropy": far})
    assert "every method reads fewer digits, beyond the noise (51 to 51 fewer of 400)" in rescued
    mixed = readings.methods_sentence({"Percentile": WITHIN}, {"MinMax": far, "Entropy": WITHIN})
    assert "Entropy do not read fewer digits beyond the noise" in mixed and "no method rescued" not in mixed


RELU_ROWS = [{"model": m, "relus": r} for m, r in (("MinMax", 0), ("Distribution", 0), ("Distribution, Relus kept", 2))]


@pytest.mark.parametrize("deleted, kept, words", [
    (WITHIN, WITHIN, "the deleted Relus are the whole cost"),
    (WITHIN, LOWER, "(Distribution, Relus kept: even a lower max abs error, beyond the noise)"),
    (WITHIN, HIGHER, "Not all of it on your data: Distribution, Relus kept stay worse than MinMax"),
    (BROKE, WITHIN, "Distribution read the digits differently from FP32 without its Relus"),
])
def test_relus_sentence_reads_the_cost_from_both_controls(deleted, kept, words):
    sentence = readings.relus_sentence(RELU_ROWS, 2, {"Distribution": deleted}, {"Distribution, Relus kept": kept})
    assert "Relu nodes: FP32: 2; MinMax: 0; Distribution: 0; Distribution, Relus kept: 2." in sentence
    assert words in sentence


@pytest.mark.parametrize("per_channel, words", [
    (comparison(0, 12, 0.0005, (0.15, 0.08, 0.19)), "raise the max abs error and misread digits, both beyond"),
    (HIGHER, "the digits they change (0 fixed, 3 broken: within noise (p = 0.25)) are not beyond the noise"),
    (WITHIN, "stay within the noise of the baseline"),
])
def test_family_sentence_says_which_part_of_saturation_is_beyond_noise(per_channel, words):
    by = {kernels.EXACT: {"per-channel weights": WITHIN}, kernels.SATURATING: {"per-channel weights": per_channel}}
    sentence = readings.family_sentence(by, x64_same=True)
    assert words in sentence and "exactly the exact family's outputs" in sentence
    assert "still differ" in readings.family_sentence(by, x64_same=False)


def test_excluded_sentence_weighs_bytes_only_against_a_change_beyond_noise():
    base, exc = {"bytes": 100}, {"bytes": 198, "excluded": ["fc1_MatMul"]}
    assert "1.98 times" in readings.excluded_sentence(base, exc, WITHIN)
    assert "bought nothing these images can tell" in readings.excluded_sentence(base, exc, WITHIN)
    assert "weigh it against the bytes" in readings.excluded_sentence(base, exc, LOWER)


def test_samples_sentence_counts_draws_on_each_side_of_the_whole_set():
    summary = [{"n": 1, "error_min": 0.1, "error_max": 0.5}, {"n": 30, "error_min": 0.05, "error_max": 0.1}]
    whole = {"n": 360, "max_abs_error": 0.09}
    draws = {(1, 0): HIGHER, (1, 1): WITHIN, (30, 0): LOWER, (30, 1): WITHIN}
    sentence = readings.samples_sentence(summary, 30, whole, draws)
    assert "From n = 30 on" in sentence and "widest spread between draws is at n = 1" in sentence
    assert "lower beyond the noise at n = 30 (1 of 2); higher beyond the noise at n = 1 (1 of 2)" in sentence
    assert "1 of 4 draws of fewer images" in sentence and "more images did not keep lowering it" in sentence
    calm = readings.samples_sentence(summary, None, whole, {(1, 0): WITHIN})
    assert calm.startswith("**Your run.** No count keeps") and "every draw is within the noise" in calm


# --- the files the tables name ------------------------------------------------------------------

def test_a_rows_file_is_the_model_again_under_its_folder(tmp_path):
    out = tmp_path / "toolbox"
    model = out / "methods" / "right-minmax.onnx"
    assert calibrators.relative(model, out) == "methods/right-minmax.onnx"
    assert out / calibrators.relative(model, out) == model
    elsewhere = tmp_path / "other.onnx"
    assert out / calibrators.relative(elsewhere, out) == elsewhere.resolve()
    assert calibrators.method_label({"method": "Entropy", "options": {"num_bins": 2048}}) == "Entropy (2048 bins)"
    assert calibrators.method_label({"method": "Percentile", "options": {"percentile": 99.9}}) == "Percentile (99.9 %)"
    assert calibrators.method_label({"method": "Entropy", "options": {}}) == "Entropy (defaults)"
    assert calibrators.method_label({"method": "MinMax", "options": {}}) == "MinMax"


def test_the_activation_symmetric_flag_keeps_the_relus_a_symmetric_calibrated_range_does_not(tmp_path):
    """ORT decides on its flags: ActivationSymmetric keeps the Relus; the baseline (and, in test_lesson08_relus,
    a symmetric calibrated range without the flag) loses them."""
    source = Path(shutil.copy(data.fixture_path("fp32.onnx"), tmp_path))
    right = data.calibration_set("right")
    counts = {}
    for name, settings in (("baseline", {}), ("symmetric", {"activation_symmetric": True})):
        toolbox.build(source, tmp_path / f"{name}.onnx", right, settings)
        counts[name] = graph.op_counts(tmp_path / f"{name}.onnx").get("Relu", 0)
    assert counts == {"baseline": 0, "symmetric": graph.op_counts(source)["Relu"]}


# --- the static prose ---------------------------------------------------------------------------

STALE = ("read it as noise", "roughly even", "an image or so", "less than a hundredth", "ORT's guide",
         "ONNX Runtime's guide", "wasted on negative", "the error and the accuracy match the baseline's",
         "for a small cut in error", "a handful of right images already")


def test_the_prose_states_no_verdict_of_the_reference_data():
    """Issue 35: the lesson's markdown once quoted verdicts true of the reference data only; they are rendered from
    the run now (lab.prose.say), and the guide the course reads is quoted as what it is (issue 36)."""
    nb = nbformat.read(NOTEBOOK, as_version=4)
    prose = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    assert [s for s in STALE if s in prose] == []
    code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    for sentence in ("methods_sentence", "relus_sentence", "moving_sentence", "settings_sentence", "family_sentence",
                     "sensitivity_sentence", "excluded_sentence", "samples_sentence"):
        assert f"lab.prose.say(readings.{sentence}(" in code, sentence


def test_every_sentence_cell_is_followed_by_prose_that_points_at_it():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code" and "lab.prose.say(" in cell.source:
            following = next(c for c in nb.cells[i + 1:] if c.cell_type == "markdown").source
            assert "sentence above" in following or "sentence under" in following, (cell.source, following[:200])
