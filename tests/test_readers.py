"""check_reader against good readers and the two classic mistakes, and the mistakes through ORT itself."""
import numpy as np
import pytest
from onnxruntime.quantization import CalibrationDataReader, quantize_static

from lab import data
from lab.errors import ReaderContractError
from lab.lessons.lesson02_the_calibration_reader import check_reader
from lab.readers import ArrayReader, RecordingReader

X = data.calibration_set("right")


class RaisesAtEnd(CalibrationDataReader):
    def __init__(self, x, batch_size=36):
        self.batches, self.i = [x[i:i + batch_size] for i in range(0, len(x), batch_size)], 0

    def get_next(self):
        batch = self.batches[self.i]  # IndexError after the last batch
        self.i += 1
        return {"pixels": batch}


class Custom(CalibrationDataReader):
    def __init__(self, items):
        self.items = iter(items)

    def get_next(self):
        return next(self.items, None)


def test_array_reader_serves_everything_then_none():
    reader = ArrayReader(X, batch_size=50)
    assert len(reader) == 8
    report = check_reader(reader, expected_samples=360)
    assert report.ok, report.problems
    assert (report.batches, report.samples) == (8, 360)
    assert report.ending == "returned None (correct)"
    assert report.rewind == "gives 8 batches, 360 samples again"
    assert "OK" in str(report)


def test_raising_at_the_end_is_named():
    report = check_reader(RaisesAtEnd(X))
    assert not report.ok
    assert "must return None" in report.problems[0] and "IndexError" in report.problems[0]
    with pytest.raises(ReaderContractError, match="must return None"):
        report.raise_for_problems()


def test_exhausted_reader_is_named():
    reader = Custom([{"pixels": X}])
    reader.get_next()
    report = check_reader(reader)
    assert any("No data is collected" in p for p in report.problems)


def test_second_pass_is_reported_in_plain_words():
    report = check_reader(Custom([{"pixels": X}]))
    assert report.ok and report.second_pass.startswith("ends at once (correct")
    used_up = Custom([{"pixels": X}])
    used_up.get_next()
    assert check_reader(used_up).second_pass.startswith("yields nothing either: this reader is used up")


@pytest.mark.parametrize("item, needle", [
    ({"pixels": X.astype(np.float64)}, "dtype is float64"),
    ({"input": X}, "input is named 'pixels'"),
    ({"pixels": X.reshape(-1, 8, 8)}, "expected [batch, 64]"),
    ({"pixels": X.tolist()}, "numpy array"),
    ([X], "must return a dict"),
])
def test_contract_breaks_name_the_rule(item, needle):
    report = check_reader(Custom([item]))
    assert any(needle in p for p in report.problems), report.problems


def test_reader_that_never_ends_is_caught():
    class Forever(CalibrationDataReader):
        def get_next(self):
            return {"pixels": X[:1]}

    report = check_reader(Forever(), max_batches=50)
    assert any("never returned None" in p for p in report.problems)


def test_wrong_sample_count_is_named():
    assert any("expected 100" in p for p in check_reader(ArrayReader(X), expected_samples=100).problems)


def test_not_a_reader_is_named():
    assert "no get_next()" in check_reader(object()).problems[0]


def test_the_classic_mistakes_fail_for_real_in_quantize_static(tmp_path):
    source = tmp_path / "source.onnx"
    source.write_bytes(data.fixture_path("fp32.onnx").read_bytes())
    with pytest.raises(IndexError):
        quantize_static(str(source), str(tmp_path / "a.onnx"), RaisesAtEnd(X))
    used = ArrayReader(X, 36)
    quantize_static(str(source), str(tmp_path / "b.onnx"), used)
    with pytest.raises(ValueError, match="No data is collected"):
        quantize_static(str(source), str(tmp_path / "c.onnx"), used)


def test_recording_reader_hash_matches_the_data():
    rec = RecordingReader(ArrayReader(X, 7))
    while rec.get_next():
        pass
    assert (rec.samples, rec.batches) == (360, 52)
    assert rec.sha256 == data.data_sha256(X)


class ForgotPosition(CalibrationDataReader):
    """A bug in __init__: the position get_next() reads is never set."""

    def __init__(self, x, batch_size=36):
        self.x, self.batch_size = x, batch_size

    def get_next(self):
        if self.position >= len(self.x):
            return None
        self.position += self.batch_size
        return {"pixels": self.x[self.position - self.batch_size:self.position]}


def test_a_bug_in_init_is_named_as_such_not_as_the_end_of_the_data():
    report = check_reader(ForgotPosition(X))
    assert not report.ok
    problem = report.problems[0]
    assert "first call, before serving any batch" in problem and "__init__ never set" in problem
    assert "position" in problem and "must return None" not in problem


def test_a_used_up_reader_is_named_as_lesson_02s_mistake_not_no_data_is_collected(tmp_path):
    from lab import convert
    from lab.errors import ReaderContractError

    source = tmp_path / "source.onnx"
    source.write_bytes(data.fixture_path("fp32.onnx").read_bytes())
    reader = ArrayReader(X, 36)
    convert.quantize(source, tmp_path / "first.onnx", reader)
    with pytest.raises(ReaderContractError, match=r"used up. That is lesson 02's mistake \(b\).*fresh DigitReader"):
        convert.quantize(source, tmp_path / "second.onnx", reader)


def test_the_reference_reader_is_lesson_02s_own_and_keeps_the_contract(tmp_path):
    """The reference hand-in's calibration_reader.py is the instructor notebook's %%writefile cell, not a copy."""
    from grader import reference
    from lab.workspace import load_module

    source = reference.solution_module("02_the_calibration_reader.ipynb", "calibration_reader.py")
    assert source.startswith('"""') and "class DigitReader(CalibrationDataReader)" in source
    (tmp_path / "calibration_reader.py").write_text(source)
    report = check_reader(load_module(tmp_path, "calibration_reader").DigitReader(X, batch_size=36),
                          expected_samples=len(X))
    assert report.ok and report.batches == 10, report


def test_a_notebook_without_the_module_cell_is_named():
    from grader import reference

    with pytest.raises(LookupError, match=r"03_narrow_right_wide.ipynb has no code cell starting '%%writefile"):
        reference.solution_module("03_narrow_right_wide.ipynb", "calibration_reader.py")


class Batches(CalibrationDataReader):
    """Serves the given batches (each an array under 'pixels'), then ``end``."""

    def __init__(self, batches, end=None):
        self.batches, self.end, self.i = batches, end, 0

    def get_next(self):
        self.i += 1
        return {"pixels": self.batches[self.i - 1]} if self.i <= len(self.batches) else self.end

    def rewind(self):
        self.i = 0


def _in_batches(x, size):
    return [np.asarray(x[i:i + size], np.float32) for i in range(0, len(x), size)]


@pytest.mark.parametrize("batches, end, needle", [
    (_in_batches(X, 36), {}, "ended with an empty dict; return None"),
    (_in_batches(X[::-1], 36), None, "not served unchanged and in order (image 0 differs"),
    (_in_batches(X / 16, 36), None, "not served unchanged and in order"),
    (_in_batches(X, len(X)), None, "served batches of 360 images; with batch_size=36"),
    (_in_batches(X, 1), None, "served batches of 1, 1, 1"),
])
def test_the_notebook_check_refuses_what_the_contract_forbids(batches, end, needle):
    """Lesson 02's check cell, given the pixels and the batch size, refuses what the grader charges (the student's
    review found each of these called 'OK, ready for quantize_static')."""
    report = check_reader(Batches(batches, end), expected_samples=len(X), pixels=X, batch_size=36)
    assert any(needle in p for p in report.problems), report.problems


def test_the_notebook_check_accepts_the_contract():
    report = check_reader(Batches(_in_batches(X, 36)), expected_samples=len(X), pixels=X, batch_size=36)
    assert report.ok, report.problems
    odd = check_reader(Batches(_in_batches(X[:10].astype(np.float64), 3)), expected_samples=10, pixels=X[:10],
                       batch_size=3)
    assert odd.ok, odd.problems
