"""The sandbox's reader task reports a digest of the values a reader served, and lesson 10's grader compares it with
``lab.camera.preprocess`` of the same frames (issue 26: a reader with its own copy of the path, mean/std skipped,
kept the shapes and dtype and got full camera_reader marks).

The reader task is driven here in-process (``grader.child.drive_reader``: the same function the sandbox runs), on
lesson 10's own reader and on one that skips the normalisation; the sandboxed run is tests/test_honest_mistakes.py's.
"""
from __future__ import annotations

import importlib.util
import time
from pathlib import Path

import numpy as np
import pytest

from grader import child, reference
from grader.lessons import lesson10_your_own_model as graded
from lab import camera
from lab.data import data_sha256
from lab.lessons.lesson10_your_own_model import camera_path

SKIPS_NORMALISATION = '''

def _my_preprocess(batch):
    window = batch[:, camera.CROP_START:camera.CROP_START + camera.CROP,
                   camera.CROP_START:camera.CROP_START + camera.CROP].astype(np.float32)
    small = np.einsum("ij,njk,lk->nil", camera._RESIZE, window, camera._RESIZE)
    return np.ascontiguousarray((small / np.float32(255))[:, None], np.float32)
'''


def _reader_class(tmp_path: Path, source: str, name: str):
    path = tmp_path / f"{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(f"student_{name}", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.FrameReader


def _drive(cls, frames: np.ndarray) -> dict:
    drive = {"name": "lesson", "n": len(frames), "batch_size": camera_path.BATCH_SIZE, "input_name": camera_path.INPUT,
             "dtype": "uint8"}
    return child.drive_reader(cls, frames, drive, 1000, {}, fresh=True)


def _skipping_source() -> str:
    src = reference.CAMERA_READER_SOURCE
    served = "return {self.input_name: camera.preprocess(batch)}"
    assert served in src, "lesson 10's reader no longer returns camera.preprocess(batch)"
    src = src.replace(served, "return {self.input_name: _my_preprocess(batch)}")
    return src.replace("from lab import camera\n", "import numpy as np\n\nfrom lab import camera\n"
                       + SKIPS_NORMALISATION, 1)


@pytest.fixture(scope="module")
def frames() -> np.ndarray:
    return camera_path.camera_frames()


def test_the_deployed_path_gives_the_same_bytes_per_batch_as_on_all_frames(frames):
    whole = camera.preprocess(frames).tobytes()
    for b in (1, 7, camera_path.BATCH_SIZE, 100, len(frames)):
        per = np.concatenate([camera.preprocess(frames[i:i + b]) for i in range(0, len(frames), b)])
        assert per.tobytes() == whole, f"batches of {b}"


def test_lesson_10s_reader_serves_the_deployed_paths_digest_and_gets_no_finding(tmp_path, frames):
    d = _drive(_reader_class(tmp_path, reference.CAMERA_READER_SOURCE, "camera_reader"), frames)
    assert d["first"]["sha256"] == camera_path.served_sha256(frames) == data_sha256(camera.preprocess(frames))
    assert d["rewind"]["sha256"] == d["fresh"]["sha256"] == d["first"]["sha256"]
    want = camera.preprocess(frames[:camera_path.BATCH_SIZE]).astype(np.float64)
    assert d["first"]["first_batch"]["mean"] == pytest.approx(want.mean())
    assert graded.reader_findings(d, len(frames), frames) == []


def test_a_reader_that_skips_the_normalisation_is_named_with_its_first_batchs_mean(tmp_path, frames):
    d = _drive(_reader_class(tmp_path, _skipping_source(), "skipping_reader"), frames)
    assert d["first"]["shapes"] and d["first"]["dtypes"] == ["float32"]  # what the grader checked before
    found = graded.reader_findings(d, len(frames), frames)
    assert len(found) == 1, found
    unnormalised = camera.preprocess(frames[:camera_path.BATCH_SIZE]).astype(np.float64) * camera.STD + camera.MEAN
    mean = d["first"]["first_batch"]["mean"]
    assert mean == pytest.approx(unnormalised.mean(), abs=1e-5)  # what it served: the frames scaled, not normalised
    want = camera.preprocess(frames[:camera_path.BATCH_SIZE]).astype(np.float64)
    assert found[0].startswith("its batches are not lab.camera.preprocess of the frames (values differ from the "
                               f"deployed path's: the first batch's mean {mean:.4g} and std ")
    assert f"lab.camera.preprocess's {want.mean():.4g} and {want.std():.4g}" in found[0]
    assert graded.reader_findings(d, len(frames)) == []  # no frames given: the values are not judged


def test_a_rewind_that_serves_other_values_is_named(tmp_path, frames):
    d = _drive(_reader_class(tmp_path, reference.CAMERA_READER_SOURCE, "camera_reader"), frames)
    d["rewind"] = {**d["rewind"], "sha256": "0" * 64}
    assert graded.reader_findings(d, len(frames), frames) == ["rewind() did not serve the same batches as the "
                                                              "first pass"]


def test_a_reader_that_stops_before_the_last_batch_is_one_finding_and_its_range_is_reported(tmp_path, frames):
    """Issue 38: a partial FrameReader was four findings, two false (rewind() and a second reader serve what the first
    pass served) and one that followed (the missing partial batch's shape): one mistake, one finding, the sizes'."""
    src = reference.CAMERA_READER_SOURCE.replace("if self.position >= len(self.frames):",
                                                 "if self.position + self.batch_size > len(self.frames):")
    d = _drive(_reader_class(tmp_path, src, "partial_reader"), frames)
    b, n = camera_path.BATCH_SIZE, len(frames)
    served = n // b * b
    found = graded.reader_findings(d, n, frames)
    assert found == [f"it served {served // b} batches ({served} of {n} frames: {[b] * 4}...); expected "
                     f"{-(-n // b)} batches of {b}, the last {n % b}"], found
    x = camera.preprocess(frames[:served])  # what it served is the deployed path's, of the frames it served
    assert d["first"]["sha256"] == data_sha256(x) and d["first"]["range"] == [float(x.min()), float(x.max())]
    assert d["rewind"]["range"] == d["fresh"]["range"] == d["first"]["range"]


def test_a_reader_that_skips_the_normalisation_reports_the_range_it_served(tmp_path, frames):
    d = _drive(_reader_class(tmp_path, _skipping_source(), "skipping_reader"), frames)
    lo, hi = d["first"]["range"]
    assert 0 <= lo < hi <= 1  # the frames scaled to [0, 1], not the deployed path's normalised values
    x = camera.preprocess(frames)
    assert [float(x.min()), float(x.max())] != [lo, hi]


def test_hashing_the_served_values_costs_the_child_little(tmp_path, frames):
    cls = _reader_class(tmp_path, reference.CAMERA_READER_SOURCE, "camera_reader")
    reader = cls(frames, batch_size=camera_path.BATCH_SIZE, input_name=camera_path.INPUT)
    served = []
    while (item := reader.get_next()) is not None:
        served.append(item[camera_path.INPUT])
    start = time.perf_counter()
    recorder = child._Recorder(_Served(served), camera_path.INPUT, 0)
    while recorder.get_next():
        pass
    seconds = time.perf_counter() - start
    assert recorder.hashes[0].hexdigest() == camera_path.served_sha256(frames)
    assert seconds < 0.05, f"recording {len(served)} batches took {seconds:.3f} s"


class _Served:
    """A reader over batches already served: what the recorder alone costs."""

    def __init__(self, batches: list[np.ndarray]):
        self.batches = list(batches)

    def get_next(self):
        return {camera_path.INPUT: self.batches.pop(0)} if self.batches else None
