"""Lessons 03-05 in the grader: a setting the prose fixes, changed and reported honestly, costs its lesson's point
with feedback naming the setting; a reader that serves one image per batch is charged once, under lesson 02's
contract, and the batch counts that follow from it are named, not charged again; lesson 04's right series grown
from the narrow stream is told what to change.

Each hand-in is the reference with one mistake, made the way the lesson would write it (its report recomputed from
the changed run), graded against the reference's own result (``test_honest_mistakes`` has the wider corpus).
"""
from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
from bad_submissions import corpus
from test_honest_mistakes import _lab_run_with_reader, _points, _workspace

from grader import core, reference, sandbox
from lab.tools.submit import submit


def _one_image_reader() -> str:
    src = reference.READER_SOURCE
    one = (src.replace("self.position + self.batch_size]", "self.position + 1]")
              .replace("self.position += self.batch_size", "self.position += 1"))
    assert one != src, "the reference reader's slicing changed: update this test's mistake"
    return one


def _lesson03(arrays: bool = False, **settings):
    """Lesson 03's three conversions done with ``settings`` changed (``arrays``: lab.data's arrays passed straight
    to lab.convert.quantize, the student's reader bypassed), results.json written from that run."""
    def make(files: corpus.Files) -> bytes:
        from lab import compare, convert, data
        from lab.lessons import lesson03_narrow_right_wide as lesson03

        with tempfile.TemporaryDirectory() as tmp:
            work, reader_cls = _workspace(Path(tmp))
            (work / "dynamic.onnx").write_bytes(files["dynamic.onnx"])
            records = {kind: convert.quantize(work / "source.onnx", work / f"{kind}.onnx",
                                              data.calibration_set(kind) if arrays else
                                              reader_cls(data.calibration_set(kind), batch_size=data.BATCH_SIZE),
                                              batch_size=data.BATCH_SIZE, **{**lesson03.SETTINGS, **settings})
                       for kind in data.KINDS}
            ev = data.load_split("evaluation")
            doc = lesson03.results_report(work, records, ev, compare.predict(work / "source.onnx", ev.pixels))
            new = {f"{k}.onnx": (work / f"{k}.onnx").read_bytes() for k in data.KINDS}
        return corpus.pack({**files, **new, "results.json": json.dumps(doc, indent=2).encode()})
    return make


def _lesson05(**settings):
    """Lesson 05's conversion to both formats with ``settings`` changed, formats.json written from that run."""
    def make(files: corpus.Files) -> bytes:
        from lab import compare, data
        from lab.lessons import lesson05_qdq_vs_qoperator as lesson05

        with tempfile.TemporaryDirectory() as tmp:
            work, reader_cls = _workspace(Path(tmp))
            out = work / lesson05.FOLDER
            out.mkdir()
            records = lesson05.quantize_both_formats(
                work / "source.onnx", out, reader_cls(data.calibration_set("right"), batch_size=data.BATCH_SIZE),
                stem=lesson05.STEM, **{**lesson05.FORMAT_SETTINGS, **settings})
            ev = data.load_split("evaluation")
            doc = lesson05.formats_report(work / "source.onnx", out, records, ev,
                                          compare.predict(work / "source.onnx", ev.pixels))
            new = {f"{lesson05.FOLDER}/{p.name}": p.read_bytes() for p in out.iterdir()}
        return corpus.pack({**files, **new, "formats.json": json.dumps(doc, indent=2).encode()})
    return make


def _lesson04(right_from_the_stream: bool = False, **settings):
    """Lesson 04's two grow calls, the second given the narrow stream instead of the right set or both with
    ``settings`` changed; growth.json written from that run (its settings as used)."""
    def make(files: corpus.Files) -> bytes:
        from lab import compare, data
        from lab.lessons import lesson04_more_batches as lesson04

        with tempfile.TemporaryDirectory() as tmp:
            work, reader_cls = _workspace(Path(tmp))
            ev = data.load_split("evaluation")
            stream = lesson04.narrow_batches(lesson04.MAX_BATCHES, lesson04.BATCH_SIZE, reference.SEED)
            used = {**lesson04.SETTINGS, **settings}
            common = dict(make_reader=lambda p: reader_cls(p, batch_size=lesson04.BATCH_SIZE),
                          batch_size=lesson04.BATCH_SIZE, x=ev.pixels, labels=ev.labels,
                          reference=compare.predict(work / "source.onnx", ev.pixels), **used)
            rows = lesson04.grow(work / "source.onnx", work / "growth", reference.GROWTH_COUNTS, stream=stream,
                                 kind="narrow", **common)
            rows += lesson04.grow(work / "source.onnx", work / "growth", reference.RIGHT_COUNTS,
                                  stream=stream if right_from_the_stream else data.calibration_set("right"),
                                  kind="right", **common)
            doc = lesson04.growth_report(work / "source.onnx", rows, stream, ev, max_batches=lesson04.MAX_BATCHES,
                                         seed=reference.SEED, settings=used)
            models = {f"growth/{p.name}": p.read_bytes() for p in (work / "growth").glob("*.onnx")}
        return corpus.pack({**files, **models, "growth.json": json.dumps(doc, indent=2).encode()})
    return make


CASES = {
    # name: (make, {check: points lost}, words the feedback must hold)
    "03_per_channel": (_lesson03(per_channel=True), {"calibration.quantized": 1},
                       ("narrow.onnx has per-channel weight scales: lesson 03 asks per_channel=False",)),
    "03_quint8": (_lesson03(activation_type="QUInt8"), {"calibration.quantized": 1},
                  ("input ruler is uint8 (zero point 0): lesson 03 asks activation_type='QInt8'",)),
    "03_reader_bypassed": (_lesson03(arrays=True), {"calibration.range_seen": 1},
                           ("sets/narrow/right/wide/served_by is 'an array'", "not your DigitReader")),
    "05_quint8": (_lesson05(activation_type="QUInt8"), {"formats.two_formats": 1},
                  ("input ruler is uint8 (zero point 0): lesson 05 asks activation_type='QInt8'",)),
    "05_per_channel": (_lesson05(per_channel=True), {"formats.two_formats": 1},
                       ("model.qdq.onnx has per-channel weight scales: lesson 05 asks per_channel=False",)),
    "one_image_per_batch": (lambda files: _lab_run_with_reader(_one_image_reader()), {"reader.contract": 1},
                            ("serve batch_size images per call",
                             "sets/narrow/calibration_batches is 360 where batches of 36 give 10, because of the "
                             "reader's batch sizes above (not charged here: charged once, under 02 the calibration "
                             "reader", "lesson 05: calibration/batches is 360 where batches of 36 give 10")),
    "04_per_channel": (_lesson04(per_channel=True), {"growth.series": 1},
                       ("growth/narrow-001.onnx: narrow-001.onnx has per-channel weight scales: lesson 04 asks "
                        "per_channel=False", "grow(..., **SETTINGS)")),
    "04_right_from_narrow": (_lesson04(right_from_the_stream=True), {"growth.series": 1},
                             ("growth/right-001.onnx was calibrated on the first 1 batch(es) of 8 of the narrow "
                              "stream, not the right set", "lab.data.calibration_set('right')",
                              "not judged: the right-NNN models were not calibrated on the right set")),
}


@pytest.fixture(scope="module")
def graded(tmp_path_factory, reference_workspace):
    if not sandbox.bwrap_available():
        pytest.skip("student code runs only under bubblewrap")
    work = reference_workspace(tmp_path_factory.mktemp("reference") / "workspace")
    good_zip = submit("reference", work, tmp_path_factory.mktemp("handed-in"))
    files = corpus.read_zip(good_zip)
    return core.grade(good_zip), files, tmp_path_factory.mktemp("mistakes")


@pytest.mark.parametrize("name", list(CASES))
def test_each_mistake_is_charged_once_where_it_was_made_and_named(graded, name):
    good, files, folder = graded
    make, lost_expected, words = CASES[name]
    path = folder / f"{name}.zip"
    path.write_bytes(make(dict(files)))
    result = core.grade(path, credited=False)  # the reference hand-in under the case's name, graded as made
    assert result.status == "graded", result.reason
    before, after = _points(good), _points(result)
    lost = {k: round(before[k] - after.get(k, 0), 4) for k in before if round(before[k] - after.get(k, 0), 4)}
    assert lost == lost_expected, (lost, [c.message for c in result.checks if not c.passed])
    text = result.to_markdown() + "\n".join(c.message for c in result.checks) + "\n".join(result.notes)
    for w in words:
        assert w in text, (w, text[-4000:])
    assert "Re-run lesson 04 from the top" not in text or name != "04_right_from_narrow", text[-3000:]
