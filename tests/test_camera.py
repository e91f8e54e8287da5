"""lab.camera and the CNN fixture: sensor frames, the deployed preprocessing path, the operating conditions."""
from __future__ import annotations

import json

import numpy as np
import pytest
from sklearn.datasets import load_digits

from fixtures import build, build_cnn
from lab import camera, data, graph
from lab.lessons.lesson06_accept_or_reject.acceptance import FLOOR


@pytest.fixture(scope="module")
def evaluation() -> camera.Frames:
    return camera.load_split("evaluation")


# --- the deployed path -------------------------------------------------------------------------------------------

def test_preprocess_gives_the_models_input():
    frames = np.random.default_rng(0).integers(0, 256, (3, camera.FRAME, camera.FRAME), dtype=np.uint8)
    x = camera.preprocess(frames)
    assert x.shape == (3, 1, camera.SIZE, camera.SIZE) and x.dtype == np.float32 and x.flags.c_contiguous


def test_a_uniform_frame_normalises_to_one_value():
    for value in (0, 83, 255):
        x = camera.preprocess(np.full((1, camera.FRAME, camera.FRAME), value, np.uint8))
        np.testing.assert_allclose(x, (value / 255 - camera.MEAN) / camera.STD, rtol=0, atol=1e-5)


def test_only_the_central_crop_reaches_the_model():
    frames = np.full((1, camera.FRAME, camera.FRAME), 60, np.uint8)
    border = frames.copy()
    border[:, :camera.CROP_START] = 255
    border[:, :, -camera.CROP_START:] = 0
    np.testing.assert_array_equal(camera.preprocess(frames), camera.preprocess(border))
    inside = frames.copy()
    inside[:, camera.FRAME // 2, camera.FRAME // 2] = 255
    assert not np.array_equal(camera.preprocess(frames), camera.preprocess(inside))


def test_resize_matrix_keeps_a_constant_and_is_the_identity_at_equal_size():
    m = camera.resize_matrix(camera.CROP, camera.SIZE)
    np.testing.assert_allclose(m.sum(axis=1), 1.0, atol=1e-6)
    np.testing.assert_array_equal(camera.resize_matrix(7, 7), np.eye(7, dtype=np.float32))


@pytest.mark.parametrize("bad", [np.zeros((2, 32, 32), np.float32), np.zeros((2, 16, 16), np.uint8),
                                 np.zeros((32, 32), np.uint8)])
def test_preprocess_names_what_it_expects(bad):
    with pytest.raises(ValueError, match=r"expected sensor frames: uint8 \[N, 32, 32\]"):
        camera.preprocess(bad)


# --- the operating conditions ------------------------------------------------------------------------------------

def ink_centre(frames: np.ndarray) -> np.ndarray:
    """Each frame's centre of brightness above its paper, (row, column)."""
    f = frames.astype(np.float64)
    ink = np.clip(f - np.median(f, axis=(1, 2), keepdims=True), 0, None)
    rows, cols = np.indices(f.shape[1:])
    total = ink.sum(axis=(1, 2))
    return np.stack([(ink * rows).sum(axis=(1, 2)) / total, (ink * cols).sum(axis=(1, 2)) / total], axis=1)


def ink_spread(frames: np.ndarray) -> np.ndarray:
    f = frames.astype(np.float64)
    return (f > np.median(f, axis=(1, 2), keepdims=True) + 40).sum(axis=(1, 2))


@pytest.mark.parametrize("name", list(camera.CONDITIONS))
def test_each_condition_gives_sensor_frames_and_is_seeded(evaluation, name):
    frames = evaluation.frames[:20]
    out = camera.condition(name, frames, seed=3)
    assert out.dtype == np.uint8 and out.shape == frames.shape
    np.testing.assert_array_equal(out, camera.condition(name, frames, seed=3))
    assert camera.describe()[name]


def test_the_conditions_do_what_they_say(evaluation):
    frames = evaluation.frames[:50]
    np.testing.assert_array_equal(camera.daylight(frames), frames)
    assert abs(camera.dim(frames).mean() / frames.mean() - 0.5) < 0.01
    assert (camera.flash(frames) == 255).mean() > (frames == 255).mean() + 0.05
    np.testing.assert_allclose(ink_centre(camera.off_centre(frames)) - ink_centre(frames), 4.0, atol=0.6)
    assert 0.4 < np.median(ink_spread(camera.small_distant(frames)) / ink_spread(frames)) < 0.6  # 0.7 x 0.7 of it
    noise = camera.noisy(frames).astype(float) - frames
    bright, dark = frames > 180, frames < 70
    assert 15 < noise[bright].std() < 19 and 7 < noise[dark].std() < 11      # shot noise: sigma sqrt(1.6 v)
    lifted = camera.gamma(frames).astype(float) - frames
    assert lifted[dark].mean() > 2 * lifted[bright].mean() > 0                # gamma lifts the paper far more
    sharp = np.abs(np.diff(frames.astype(float), axis=2)).mean()
    assert np.abs(np.diff(camera.blur(frames).astype(float), axis=2)).mean() < 0.7 * sharp   # measured 0.63
    assert abs(camera.blur(frames).astype(float).mean() - frames.mean()) < 1.0   # a blur keeps the light


def test_jpeg_quantizes_each_8x8_block_in_the_dct():
    frames = camera.load_split("evaluation").frames[:20]
    out = camera.jpeg(frames).astype(np.float64) - 128
    d = camera._dct_matrix(camera.JPEG_BLOCK)
    np.testing.assert_allclose(d @ d.T, np.eye(camera.JPEG_BLOCK), atol=1e-12)        # orthonormal
    blocks = out.reshape(20, 4, 8, 4, 8).transpose(0, 1, 3, 2, 4)
    coef = (d @ blocks @ d.T) / camera._jpeg_steps()
    unclipped = (np.abs(out) < 127).reshape(20, 4, 8, 4, 8).transpose(0, 1, 3, 2, 4).all(axis=(3, 4))
    # blocks the uint8 rounding and clipping left alone: every coefficient within rounding of a multiple of its step
    assert np.abs(coef - np.rint(coef))[unclipped].max() < 0.2
    flat = np.full((1, camera.FRAME, camera.FRAME), 92, np.uint8)   # DC (92 - 128) x 8 = -288: 6 steps of 48
    np.testing.assert_array_equal(camera.jpeg(flat), flat)


def test_an_unknown_condition_is_named():
    with pytest.raises(ValueError, match="unknown operating condition 'fog'"):
        camera.condition("fog", np.zeros((1, 32, 32), np.uint8))


# --- the fixture -----------------------------------------------------------------------------------------------

def test_the_splits_are_disjoint_frames_of_the_digits_splits():
    splits = {name: camera.load_split(name) for name in camera.SPLITS}
    for name, split in splits.items():
        assert split.frames.dtype == np.uint8 and split.frames.shape[1:] == (camera.FRAME, camera.FRAME)
        assert len(split.frames) == len(split.labels) == len(split.index)
        np.testing.assert_array_equal(split.index, data.load_split(name).index)  # the MLP's digits, per split
    for a in camera.SPLITS:
        for b in camera.SPLITS:
            if a < b:
                assert not set(splits[a].index) & set(splits[b].index), (a, b)


def test_the_frames_are_the_cameras_seeded_shots():
    digits = load_digits().data.astype(np.uint8)
    split = camera.load_split("evaluation")
    seed = build.SEED + 1 + camera.SPLITS.index("evaluation")
    np.testing.assert_array_equal(camera.render(digits[split.index], seed)[:25], split.frames[:25])


def test_the_cnn_reads_its_evaluation_frames(evaluation):
    out = graph.session(camera.model_path()).run(None, {camera.INPUT_NAME: evaluation.image})[0]
    assert out.shape == (len(evaluation), camera.N_CLASSES)
    assert float((out.argmax(axis=1) == evaluation.labels).mean()) >= 0.95


@pytest.mark.parametrize("split", ["evaluation", "heldout"])
def test_the_cnn_reads_every_condition_at_lesson_06s_floor(split):
    """Trained on frames from every condition, FP32 reaches the floor under each: lesson 10 judges every scenario."""
    frames = camera.load_split(split)
    session = graph.session(camera.model_path())
    for name in camera.CONDITIONS:
        x = camera.preprocess(camera.condition(name, frames.frames))
        accuracy = float((session.run(None, {camera.INPUT_NAME: x})[0].argmax(axis=1) == frames.labels).mean())
        assert accuracy >= FLOOR, (split, name, accuracy)


def test_the_cnn_has_batchnorm_as_exported():
    model = camera.model_path()
    assert graph.op_counts(model) == {"Add": 1, "BatchNormalization": 3, "Conv": 3, "Flatten": 1, "Gemm": 1,
                                      "GlobalAveragePool": 1, "MaxPool": 2, "Relu": 3, "Softmax": 1}
    convs = {n.name: n for n in graph.load(model).graph.node if n.op_type == "Conv"}
    group = {a.name: a.i for a in convs["dwconv"].attribute}.get("group")
    assert group == build_cnn.CHANNELS[0]                           # depthwise: one filter per channel
    add = next(n for n in graph.load(model).graph.node if n.op_type == "Add")
    assert list(add.input) == ["relu_dw.out", "pool1.out"]          # the residual: the block's output plus its input
    m = graph.load(model)
    assert [i.name for i in m.graph.input] == [camera.INPUT_NAME]
    assert [o.name for o in m.graph.output] == [camera.OUTPUT_NAME]


def test_the_cnn_fixture_is_small():
    assert sum(data.fixture_path(name).stat().st_size for name in build_cnn.FILES) < 2_000_000


@pytest.mark.slow
@pytest.mark.rebuild
def test_a_rebuild_gives_the_same_frames_and_the_same_accuracy(tmp_path):
    """``python -m fixtures.build_cnn`` (about 4 minutes): the same frames, labels and rows; the weights may differ
    in the last bits on another CPU (BLAS), so the accuracy is held to within one image in a hundred."""
    build_cnn.build(tmp_path)
    for name in camera.SPLITS:
        with np.load(tmp_path / f"cnn-{name}.npz") as new, np.load(data.fixture_path(f"cnn-{name}.npz")) as old:
            for key in ("frames", "labels", "index"):
                np.testing.assert_array_equal(new[key], old[key])
    evaluation = camera.load_split("evaluation")

    def accuracy(model):
        out = graph.session(model).run(None, {camera.INPUT_NAME: evaluation.image})[0]
        return float((out.argmax(axis=1) == evaluation.labels).mean())

    assert abs(accuracy(tmp_path / build_cnn.MODEL_FILE) - accuracy(camera.model_path())) <= 0.01
    assert sorted(json.loads((tmp_path / "manifest.json").read_text())) == sorted(build_cnn.FILES)


# --- the app's own copy of the path (lesson 10's mismatch question) -------------------------------------------------

def test_the_app_parts_from_the_deployed_path_in_one_value_step(evaluation):
    frames = evaluation.frames[:30]
    dep, app = camera.preprocess(frames), camera.app_preprocess(frames)
    assert app.shape == dep.shape and app.dtype == np.float32
    assert not np.allclose(app, dep)
    # an affine map of the deployed values: the same pixels, another normalisation
    slope, offset = np.polyfit(dep.ravel(), app.ravel(), 1)
    np.testing.assert_allclose(app, slope * dep + offset, atol=1e-4)
    assert camera.STEPS == ("crop", "resize", "scale", "normalise", "layout")


def _diagnostics(evaluation):
    from lab.lessons.lesson10_your_own_model import camera_path
    return camera_path, {"cards": {"deployed": camera_path.card_values(camera.preprocess),
                                   "app": camera_path.card_values(camera.app_preprocess)},
                         "range": {"deployed": [-1.0, 3.9], "app": [-0.7, 1.0]}, "ruler": [-1.9, 4.0]}


@pytest.mark.parametrize("step, why", [
    ("crop", "cannot move it"), ("resize", "cannot move it"), ("layout", "cannot move it"),
    ("scale", "whatever the divisor"), ("colour", "name one of")])
def test_the_mismatch_check_refuses_a_step_the_cards_rule_out(evaluation, step, why):
    camera_path, diag = _diagnostics(evaluation)
    with pytest.raises(camera_path.MismatchRefused, match=why):
        camera_path.check_mismatch(step, diag)


def test_the_mismatch_check_names_the_apps_normalisation(evaluation):
    camera_path, diag = _diagnostics(evaluation)
    line = camera_path.check_mismatch("normalise", diag)
    assert line.startswith("mismatch ok: the normalisation") and "(x - 0.50) / 0.50" in line
