"""Lesson 10 (the camera CNN): the reader check, the release check and its record, the prediction, and the grader's
part on a real release (real conversions, the other kernel family by lab.kernels' emulation)."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from grader import own_code, reference
from grader.context import Context
from grader.lessons import lesson10_your_own_model as graded
from grader.submission import open_submission
from lab import camera, evidence, workspace
from lab.lessons.lesson10_your_own_model import camera_path, release
from lab.tools.submit import submit

WHY_TEXT = "reduce_range keeps per-channel QDQ at 0.088 on both families"  # for the recipe checks
GOOD = {"calibration": "camera", "pre_process": True, "quant_format": "QDQ", "per_channel": True,
        "reduce_range": True}


@pytest.fixture(scope="module")
def reader_module(tmp_path_factory):
    work = tmp_path_factory.mktemp("l10-reader")
    (work / "camera_reader.py").write_text(reference.CAMERA_READER_SOURCE)
    return workspace.load_module(work, "camera_reader")


@pytest.fixture(scope="module")
def released(tmp_path_factory, reader_module):
    """A workspace holding the notebook's release (its solution recipe), built as the notebook builds it."""
    work = tmp_path_factory.mktemp("l10-work")
    (work / "camera_reader.py").write_text(reference.CAMERA_READER_SOURCE)
    doc = release.release_workspace(work, reader_module.FrameReader, GOOD, why(work, reader_module))
    return work, doc


def why(work, reader_module) -> str:
    """A justification citing the recipe's own row, as the notebook's solution does: its saturating daylight error."""
    source = release.workspace_source(work)
    ev = camera.load_split("evaluation")
    model, _ = release.build(source, work / "camera", GOOD, reader_module.FrameReader)
    error = release.measured(source, model, ev.image, ev.labels)["saturating"]["max_abs_error"]
    return f"reduce_range keeps per-channel QDQ at {error:.3f} on the saturating family"


def test_a_justification_that_cites_none_of_the_released_models_numbers_is_refused(released):
    """The prose's numbers, or another recipe's, do not justify this release: the check names the rule."""
    work, doc = released
    source, ev = release.workspace_source(work), camera.load_split("evaluation")
    daylight = release.measured(source, work / release.MODEL, ev.image, ev.labels)
    rows = release.scenarios(source, work / release.MODEL, ev.frames, ev.labels)
    assert release.unmet(GOOD, rows, daylight, doc["justification"]) == []
    problems = release.unmet(GOOD, rows, daylight, "reduce_range, as the lesson's prose run showed (0.9577)")
    assert problems == [release.JUSTIFIED_BY]
    vague = "accuracy about 1.0 as good as FP32, max abs err about 0.1 on both families"   # matches any table
    assert release.unmet(GOOD, rows, daylight, vague) == [release.JUSTIFIED_BY]
    with pytest.raises(release.ReleaseRefused, match="cites none of the released model's own numbers"):
        release.refuse(problems)


def test_the_solution_reader_passes_and_the_typical_wrong_ones_are_named(reader_module):
    frames = camera_path.camera_frames()
    assert camera_path.check_reader(reader_module.FrameReader).startswith("reader ok: 360 frames")

    class Raw(reader_module.FrameReader):  # the sensor frames as they come, no deployed path
        def get_next(self):
            item = super().get_next()
            return None if item is None else {self.input_name: self.frames[self.position - len(item["image"]):
                                                                          self.position].astype(np.float32)}

    class Copy(reader_module.FrameReader):  # a second copy of the path, without the normalisation
        def get_next(self):
            item = super().get_next()
            return None if item is None else {"image": (item["image"] * camera.STD + camera.MEAN).astype(np.float32)}

    class PreprocessedTwice(reader_module.FrameReader):
        def __init__(self, frames, batch_size=32, input_name="image"):
            super().__init__(frames, batch_size, input_name)
            self.frames = camera.preprocess(frames)

    with pytest.raises(camera_path.FrameReaderCheckFailed, match="skipped the deployed path"):
        camera_path.check_reader(Raw, frames)
    with pytest.raises(camera_path.FrameReaderCheckFailed, match="second copy of the preprocessing"):
        camera_path.check_reader(Copy, frames)
    with pytest.raises(camera_path.FrameReaderCheckFailed, match="raised ValueError: expected sensor frames: uint8"):
        camera_path.check_reader(PreprocessedTwice, frames)
    with pytest.raises(camera_path.FrameReaderCheckFailed, match="batch sizes"):
        camera_path.check_reader(lambda f, batch_size, input_name: reader_module.FrameReader(f, 30, input_name), frames)


def test_the_camera_reader_may_import_the_deployed_path_and_nothing_else_of_the_lab():
    assert own_code.refusal(reference.CAMERA_READER_SOURCE, "camera_reader.py") is None
    refused = own_code.refusal("from lab.readers import ArrayReader as FrameReader\n", "camera_reader.py")
    assert refused and refused.startswith("write FrameReader yourself; camera_reader.py line 1 imports lab.readers")
    assert own_code.refusal("from lab import camera\n", "calibration_reader.py")  # only its own entry allows it


def test_a_recipe_of_the_wrong_form_is_refused_naming_the_field():
    with pytest.raises(release.ReleaseRefused, match="RECIPE has keys"):
        release.check_recipe({"calibration": "camera"}, WHY_TEXT)
    with pytest.raises(release.ReleaseRefused, match=r"RECIPE\['per_channel'\] is 1; expected one of \[True, False\]"):
        release.check_recipe({**GOOD, "per_channel": 1}, WHY_TEXT)
    with pytest.raises(release.ReleaseRefused, match="JUSTIFICATION must say why"):
        release.check_recipe(GOOD, "because")


def test_the_release_check_refuses_the_attractive_set_and_the_saturating_overflow(tmp_path, reader_module):
    source = release.workspace_source(tmp_path)
    ev = camera.load_split("evaluation")
    bad = {**GOOD, "reduce_range": False}
    model, _ = release.build(source, tmp_path / "camera", bad, reader_module.FrameReader)
    daylight = release.measured(source, model, ev.image, ev.labels)
    problems = release.unmet({**bad, "calibration": "attractive"}, {}, daylight)
    assert problems[0].startswith("calibration: 'attractive' frames skipped the camera")
    assert any(p.startswith("error (saturating family): max abs error") for p in problems), problems
    assert not any("exact family" in p for p in problems), "per-channel QDQ is fine on the exact family"
    with pytest.raises(release.ReleaseRefused, match="not released: calibration"):
        release.refuse(problems)


def test_the_prediction_is_judged_on_the_lessons_two_sets():
    measured, labels = graded.lesson_sets("exact")
    ev = evidence.paired(labels, measured["camera"]["under_conditions"], measured["attractive"]["under_conditions"])
    assert ev.beyond_noise and ev.difference < 0 and ev.broken > 2 * ev.fixed  # the attractive set misreads more
    right = camera_path.judge_attractive_photographs({"larger_error": "attractive", "wider_ruler": "camera"}, measured,
                                                     labels)
    wrong = camera_path.judge_attractive_photographs({"larger_error": "camera", "wider_ruler": "camera"}, measured,
                                                     labels)
    assert right.ok and wrong.score == 0.5 and "you said camera, measured attractive" in wrong.message
    with pytest.raises(Exception, match="expected one of 'camera', 'attractive'"):
        camera_path.PREDICTION.normalise({"larger_error": "photos", "wider_ruler": "camera"})


def test_a_larger_error_within_noise_is_shown_and_never_judged_wrong():
    """Two sets that differ by one frame each way: neither misreads more beyond the noise, so either answer keeps
    its point, and the message says so with the evidence."""
    labels = np.zeros(400, np.int64)
    camera_answers, attractive_answers = labels.copy(), labels.copy()
    camera_answers[0], attractive_answers[1] = 1, 1
    measured = {"camera": {"input_range": [-1.0, 4.0], "under_conditions": camera_answers},
                "attractive": {"input_range": [-0.5, 3.0], "under_conditions": attractive_answers}}
    for said in ("camera", "attractive"):
        v = camera_path.judge_attractive_photographs({"larger_error": said, "wider_ruler": "camera"}, measured, labels)
        assert v.score == 1.0 and "1 fixed, 1 broken: within noise" in v.message, v.message
        assert "within noise, not judged" in v.message


def test_the_release_grades_full_and_a_tampered_record_is_named(released, tmp_path):
    work, doc = released
    assert doc["not_judged"] == []   # trained on every condition: FP32 reaches the floor under each
    assert all(r["verdict"] == "pass" for f in doc["scenarios"].values() for r in f)
    assert [r["name"] for r in doc["scenarios"]["exact"]] == list(camera.CONDITIONS)
    ctx = Context(open_submission(submit("s", work, tmp_path / "a"), tmp_path / "opened"))
    got = {c.name: (c.points, c.max_points, c.message) for c in graded.run(ctx)}
    assert all(p == m for p, m, _ in got.values()), got
    # a record that hides 'flash' (the closest call) as not judged: the recomputed verdicts name the field
    tampered = shutil.copytree(work, tmp_path / "tampered")
    d = json.loads((tampered / release.FILE).read_text())
    for rows in d["scenarios"].values():
        next(r for r in rows if r["name"] == "flash")["verdict"] = "not judged"
    d["not_judged"] = ["flash"]
    (tampered / release.FILE).write_text(json.dumps(d))
    ctx = Context(open_submission(submit("t", tampered, tmp_path / "b"), tmp_path / "opened-t"))
    got = {c.name: (c.points, c.message) for c in graded.run(ctx)}
    assert "scenarios (verdicts and accuracies, both families)" in got["camera_reported"][1]
    assert "metadata names camera-release.json" in got["camera_release"][1], "the model no longer names the record"


def test_section_8s_forms_judged_per_scenario_fail_where_the_lesson_says(tmp_path, reader_module):
    """Section 8's table: per-channel QDQ without reduce_range needs work on the saturating family only, the
    attractive set on both; the release's recipe passes every scenario on both families."""
    source = release.workspace_source(tmp_path)
    ev = camera.load_split("evaluation")
    recipes = {"per-channel QDQ": {**GOOD, "reduce_range": False}, "solution": GOOD,
               "attractive": {**release.PER_TENSOR, "calibration": "attractive"}}
    models = {k: release.build(source, tmp_path / "camera", r, reader_module.FrameReader)[0]
              for k, r in recipes.items()}
    rows = {(r["name"], r["family"]): r for r in release.form_scenarios(source, models, ev.frames, ev.labels)}
    work = {key: [c for c in camera.CONDITIONS if r[c].endswith("WORK")] for key, r in rows.items()}
    assert work[("per-channel QDQ", "exact")] == [] and work[("per-channel QDQ", "saturating")], work
    assert work[("attractive", "exact")] and work[("attractive", "saturating")], work
    assert work[("solution", "exact")] == work[("solution", "saturating")] == [], work
    assert all(float(rows[("FP32", "-")][c]) >= release.FLOOR for c in camera.CONDITIONS)   # every one judged


def test_reader_findings_name_each_broken_rule():
    n, b = 360, camera_path.BATCH_SIZE
    sizes = [min(b, n - i) for i in range(0, n, b)]
    good = {"first": {"sizes": sizes, "shapes": [[32, 1, 16, 16], [8, 1, 16, 16]], "dtypes": ["float32"],
                      "keys": [["image"]]}, "after_none": False, "rewind": {"sizes": sizes}, "fresh": {"sizes": sizes}}
    assert graded.reader_findings(good, n) == []
    raw = {**good, "first": {**good["first"], "shapes": [[32, 32, 32], [8, 32, 32]], "dtypes": ["uint8"]}}
    found = graded.reader_findings(raw, n)
    assert len(found) == 2 and "lab.camera.preprocess" in found[0] and "expected float32" in found[1]


@pytest.mark.parametrize("family", ["exact", "saturating"])
def test_the_daylight_frames_are_not_run_again_after_every_condition(monkeypatch, tmp_path, family):
    """``release.predict`` of the pooled frames (``blocks``: one per condition) remembers each condition's block: the
    daylight frames' outputs, asked next, come from that run, equal to running them alone (a row's output does not
    depend on the rows run with it), on each family."""
    from lab.readers import ArrayReader

    ev = camera.load_split("evaluation")
    every = release.pooled(ev.frames, ev.labels)[0]
    assert np.array_equal(every[:len(ev.image)], ev.image)
    source = tmp_path / "cnn-fp32.onnx"
    shutil.copy(camera.model_path(), source)
    model = tmp_path / "cnn-int8.onnx"
    camera_path.quantize_cnn(source, model, ArrayReader(camera.load_split("calibration").image, 36, camera_path.INPUT))
    monkeypatch.setattr(release, "_PREDICTED", type(release._PREDICTED)())
    ran = []
    real = release.compare.predict
    monkeypatch.setattr(release.compare, "predict", lambda *a, **k: ran.append(len(a[1])) or real(*a, **k))
    pooled = release.predict(model, every, family, blocks=len(camera.CONDITIONS))
    daylight = release.predict(model, ev.image, family)
    assert ran == [len(every)]
    np.testing.assert_array_equal(daylight, real(model, ev.image, input_name=camera_path.INPUT, family=family))
    np.testing.assert_array_equal(daylight, pooled[:len(ev.image)])
