"""The released kit's lesson 10 with a typical wrong answer filled in: each gets a message that names the mistake.

Uses tests/test_kit_wrong_answers.py's machinery (the kit built from HEAD, run with papermill on the kit's own
``lab``; every other stub gets the instructor's solution; the run stops after the cell that checks the answer).
The region an answer replaces starts after its marker's indentation, so an answer inside the %%writefile cell's
methods is left-stripped.
"""
from __future__ import annotations

import pytest
import test_kit_wrong_answers as base
from test_kit_wrong_answers import Wrong, kit, workspace  # noqa: F401 - the base test's fixtures

LESSON = "10_your_own_model"
CASES = {
    "10 prediction: the camera set has the larger error": Wrong(
        LESSON, "l10-08", lambda s: 'PREDICTION = {"larger_error": "camera", "wider_ruler": "camera"}', "l10-09",
        ("prediction wrong: larger error: you said camera, measured attractive",
         "clean photographs never show the camera's dark paper"), fails=False),
    "10 reader preprocesses in __init__, then again per batch": Wrong(
        LESSON, "l10-05", lambda s: s.lstrip().replace("camera.as_frames(frames)", "camera.preprocess(frames)"),
        "l10-06",
        ("FrameReaderCheckFailed", "raised ValueError: expected sensor frames: uint8",
         "lab.camera.preprocess each batch in get_next()")),
    "10 release calibrated on attractive photographs": Wrong(
        LESSON, "l10-28", lambda s: s.replace('"calibration": "camera"', '"calibration": "attractive"'), "l10-29",
        ("ReleaseRefused", "calibration: 'attractive' frames skipped the camera")),
    "10 release per-channel QDQ without reduce_range": Wrong(
        LESSON, "l10-28", lambda s: s.replace('"reduce_range": True', '"reduce_range": False'), "l10-29",
        ("ReleaseRefused", "error (saturating family): max abs error", "on daylight is over 0.15")),
    "10 mismatch: the division by 255": Wrong(
        LESSON, "l10-31d", lambda s: 'MISMATCH = "scale"', "l10-31e",
        ("MismatchRefused", "MISMATCH = 'scale'", "whatever the divisor", "The offset moved")),
    "10 mismatch: the resize": Wrong(
        LESSON, "l10-31d", lambda s: 'MISMATCH = "resize"', "l10-31e",
        ("MismatchRefused", "a uniform card has one value in every pixel", "A value step differs")),
    "10 exclusion: a node whose effect is noise": Wrong(
        LESSON, "l10-r08", lambda s: 'EXCLUDE = "conv2"', "l10-r09",
        ("ExclusionRefused", "EXCLUDE = 'conv2': excluding it gives", "noise is not a ranking",
         "beyond noise on both families")),
    "10 exclusion: an op type, not a node": Wrong(
        LESSON, "l10-r08", lambda s: 'EXCLUDE = "Conv"', "l10-r09",
        ("ExclusionRefused", "EXCLUDE is 'Conv': not a node the ablation excluded", "the ranking's first column")),
}


@pytest.mark.parametrize("name", list(CASES))
def test_a_wrong_answer_in_lesson_10_gets_a_message_that_names_the_mistake(name, kit, workspace, tmp_path,  # noqa: F811 - kit, workspace: the base test's fixtures
                                                                           monkeypatch):
    monkeypatch.setitem(base.CASES, name, CASES[name])  # the base test reads its case by name
    base.test_a_wrong_answer_gets_a_message_that_names_the_mistake(name, kit, workspace, tmp_path, monkeypatch)
