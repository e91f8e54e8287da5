"""Lesson 02, the calibration reader: drive any reader the way ONNX Runtime's calibrator does, and say what it did.

ONNX Runtime's calibrator loops ``inputs = reader.get_next(); if not inputs: break``.
So a reader must return one ``{input_name: float32 array}`` dict per batch and
then ``None``. Raising at the end escapes ``quantize_static``; a reader that is
already exhausted gives no data at all ("No data is collected"). ``check_reader``
catches both, and the grader drives the student's reader through it too.

The module of ``notebooks/02_the_calibration_reader.ipynb``.
"""
from __future__ import annotations

import textwrap
from dataclasses import dataclass, field

import numpy as np

from lab.data import INPUT_NAME, N_FEATURES
from lab.errors import ReaderContractError


@dataclass
class ReaderReport:
    """What ``check_reader`` saw, in plain words. ``problems`` lists broken rules; empty means fine."""

    batches: int = 0
    samples: int = 0
    input_names: list[str] = field(default_factory=list)
    dtypes: list[str] = field(default_factory=list)
    shapes: list[list[int]] = field(default_factory=list)
    ending: str = ""
    second_pass: str = ""
    rewind: str = ""
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    batch_problems: dict[str, list[int]] = field(default_factory=dict, repr=False)
    served: list[np.ndarray] = field(default_factory=list, repr=False)  # the first pass's well-formed batches

    @property
    def ok(self) -> bool:
        return not self.problems

    def lines(self) -> list[str]:
        shapes = sorted({tuple(s) for s in self.shapes})
        out = [
            f"input names : {', '.join(self.input_names) or '-'}",
            f"dtypes      : {', '.join(self.dtypes) or '-'}",
            f"batch shapes: {', '.join(str(list(s)) for s in shapes[:4]) or '-'}"
            + (" ..." if len(shapes) > 4 else ""),
            f"batches     : {self.batches}",
            f"samples     : {self.samples}",
            f"ending      : {self.ending}",
            _wrap("second pass : ", self.second_pass or "-"),
        ]
        if self.rewind:
            out.append(f"rewind()    : {self.rewind}")
        out += [_wrap("note        : ", n) for n in self.notes]
        out += [_wrap("PROBLEM     : ", p) for p in self.problems]
        out.append("verdict     : " + ("OK, ready for quantize_static" if self.ok
                                        else f"{len(self.problems)} problem(s), fix before converting"))
        return out

    def __str__(self) -> str:
        return "\n".join(self.lines())

    def _repr_pretty_(self, p, cycle):
        p.text(str(self))

    def to_dict(self) -> dict:
        return {"batches": self.batches, "samples": self.samples, "input_names": self.input_names,
                "dtypes": self.dtypes, "ending": self.ending, "second_pass": self.second_pass,
                "rewind": self.rewind, "problems": self.problems, "ok": self.ok}

    def raise_for_problems(self) -> None:
        """Raise ``ReaderContractError`` listing every broken rule, or return quietly."""
        if self.problems:
            raise ReaderContractError("the calibration reader breaks the contract:\n"
                                      + "\n".join(_wrap("  - ", p, 84) for p in self.problems))


def _wrap(label: str, text: str, width: int = 88) -> str:
    """One report line, wrapped at word boundaries and indented under its label."""
    return textwrap.fill(text, width, initial_indent=label, subsequent_indent=" " * len(label))


def _batches(numbers: list[int]) -> str:
    """``batch 3``, ``batches 1-10`` or ``batches 2, 5, 9``."""
    if len(numbers) == 1:
        return f"batch {numbers[0]}"
    if numbers == list(range(numbers[0], numbers[-1] + 1)):
        return f"batches {numbers[0]}-{numbers[-1]}"
    return "batches " + ", ".join(map(str, numbers[:6])) + (" ..." if len(numbers) > 6 else "")


def _one_pass(reader, report: ReaderReport | None, input_name: str, n_features: int,
              max_batches: int) -> tuple[int, int, str]:
    """Call get_next until it returns a falsy value, raises, or max_batches is reached."""
    batches = samples = 0
    while batches < max_batches:
        try:
            item = reader.get_next()
        except StopIteration:
            return batches, samples, "raise StopIteration"
        except Exception as e:  # noqa: BLE001 - any exception is what we report
            return batches, samples, f"raise {type(e).__name__}: {e}"
        if item is None or (isinstance(item, (dict, list, tuple, str)) and not item):
            return batches, samples, "None" if item is None else f"empty {type(item).__name__}"
        batches += 1
        if report is not None:
            samples += _check_item(item, batches, report, input_name, n_features)
        else:
            value = _served(item, input_name)
            samples += len(value) if hasattr(value, "__len__") else 0
    return batches, samples, f"no end after {max_batches} batches"


def _served(item, input_name: str):
    """The batch array in one ``get_next()`` result: under ``input_name``, or a one-key dict's only value."""
    if not isinstance(item, dict):
        return None
    return item[input_name] if input_name in item else next(iter(item.values())) if len(item) == 1 else None


def _check_item(item, number: int, report: ReaderReport, input_name: str, n_features: int) -> int:
    def problem(msg: str) -> None:
        batches = report.batch_problems.setdefault(msg, [])
        if len(report.batch_problems) <= 8:
            batches.append(number)

    if not isinstance(item, dict):
        bare = (" (ONNX Runtime's loop tests `if not inputs`, which a bare array cannot answer: "
                "'truth value of an array is ambiguous')" if isinstance(item, np.ndarray) else "")
        problem(f"it is a {type(item).__name__}; get_next() must return a dict "
                f"like {{'{input_name}': array}} or None{bare}")
        return 0
    for name in item:
        if name not in report.input_names:
            report.input_names.append(str(name))
    if input_name not in item:
        problem(f"it has keys {sorted(map(str, item))}; the input is named '{input_name}' (the input_name "
                "given to __init__), so return {self.input_name: array}")
        if len(item) != 1:
            return 0
    value = _served(item, input_name)  # a one-key dict under another name: its other rules are checked too
    if not isinstance(value, np.ndarray):
        problem(f"'{input_name}' is a {type(value).__name__}; return a numpy array "
                f"(np.asarray(x, dtype=np.float32))")
        return 0
    if str(value.dtype) not in report.dtypes:
        report.dtypes.append(str(value.dtype))
    report.shapes.append(list(value.shape))
    if value.dtype != np.float32:
        problem(f"dtype is {value.dtype}; the model takes float32, "
                f"so convert with .astype(np.float32)")
    if value.ndim != 2 or value.shape[1] != n_features:
        problem(f"shape is {list(value.shape)}; expected [batch, {n_features}] "
                f"(reshape each 8x8 image to 64 values)")
        return 0
    if value.size and not np.all(np.isfinite(value)):
        problem("it holds NaN or infinity; calibration ranges would be meaningless")
    report.served.append(value)
    return int(value.shape[0])


def _first_call_problem(ending: str) -> str:
    """A reader that raises before serving one batch has a bug, not an end: name it as such.

    The usual cause is ``__init__``: an attribute it never set (``AttributeError``), or a value it stored in
    the wrong shape or type, which the first ``get_next()`` trips over.
    """
    error = ending.replace("raise ", "", 1)
    if error.startswith("AttributeError"):
        where = ("__init__ never set the attribute it names: set every attribute get_next() and rewind() use "
                 "in __init__ (self.pixels, self.batch_size, the position, ...)")
    else:
        where = ("a bug in __init__ (a value stored in the wrong shape or type) or in get_next() itself; "
                 "the data has not run out, because no batch was served yet")
    return f"get_next() raised {error} on its first call, before serving any batch: {where}"


def _second_pass(again: int, first: int) -> str:
    """The second pass in words: a reader that served its data once and then ends at once is right."""
    if again:
        return f"yields data again ({again} batch seen) without rewind(): it starts over by itself"
    if first:
        return ("ends at once (correct: a reader is a one-pass stream); the next conversion needs a fresh "
                "reader or rewind()")
    return "yields nothing either: this reader is used up (mistake (b)); make a fresh one or call rewind()"


def check_other_input(reader_class, pixels: np.ndarray, input_name: str = "x", n: int = 10,
                      batch_size: int = 3) -> ReaderReport:
    """``check_reader`` on ``reader_class`` built as the grader also builds it: ``n`` float64 pixels, a small
    ``batch_size`` and another ``input_name``. It names the rules a reader fixed to 'pixels' or to the dtype it was
    given breaks: the batches come under the name given to ``__init__``, and as float32 whatever came in."""
    odd = np.asarray(pixels, dtype=np.float64)[:n]
    return check_reader(reader_class(odd, batch_size=batch_size, input_name=input_name), input_name=input_name,
                        expected_samples=len(odd), pixels=odd, batch_size=batch_size)


def _sizes_problem(sizes: list[int], batch_size: int) -> str:
    """'' when every batch holds ``batch_size`` images but the last (at most that many); else the rule in words."""
    if all(n == batch_size for n in sizes[:-1]) and (not sizes or 0 < sizes[-1] <= batch_size):
        return ""
    shown = ", ".join(map(str, sizes[:8])) + (" ..." if len(sizes) > 8 else "")
    return (f"served batches of {shown} images; with batch_size={batch_size}, every batch holds {batch_size} "
            "images but the last, which holds what is left (use self.batch_size, not a number of your own)")


def _images_problem(served: list[np.ndarray], pixels: np.ndarray) -> str:
    """'' when the batches, in order, are ``pixels`` as float32; else the first image that differs."""
    want = np.asarray(pixels, np.float32)
    got = np.concatenate(served) if served else np.zeros((0, want.shape[1]), np.float32)
    if got.shape == want.shape and np.array_equal(got, want):
        return ""
    n = min(len(got), len(want))
    differs = np.flatnonzero(~np.all(got[:n] == want[:n], axis=1))
    where = (f"image {differs[0]} differs from pixels[{differs[0]}]" if differs.size else
             f"{len(got)} images served of {len(want)}")
    return (f"the images are not served unchanged and in order ({where}): serve pixels[i:i + batch_size] as they "
            "came (only converted to float32), from the first image on, without rescaling or reordering")


def check_reader(reader, input_name: str = INPUT_NAME, n_features: int = N_FEATURES,
                 expected_samples: int | None = None, max_batches: int = 100_000,
                 pixels: np.ndarray | None = None, batch_size: int | None = None) -> ReaderReport:
    """Drive ``reader`` the way ONNX Runtime's calibrator does, and report in plain words.

    Catches the two classic mistakes: raising at the end instead of returning ``None``,
    and reusing an exhausted reader (the second pass yields nothing unless ``rewind()``). Given the ``pixels`` the
    reader was built on and its ``batch_size``, also that every image is served once, unchanged and in order, in
    batches of that size. The reader is consumed; rewind it or make a new one before converting.
    """
    report = ReaderReport()
    if not callable(getattr(reader, "get_next", None)):
        report.problems.append(f"{type(reader).__name__} has no get_next() method; subclass "
                               "onnxruntime.quantization.CalibrationDataReader and define get_next()")
        return report
    report.batches, report.samples, ending = _one_pass(reader, report, input_name, n_features, max_batches)
    report.problems = [f"{_batches(numbers)}: {msg}" for msg, numbers in report.batch_problems.items() if numbers]
    report.ending = {"None": "returned None (correct)"}.get(ending, ending)
    if ending.startswith("raise") and report.batches == 0 and ending != "raise StopIteration":
        report.problems.append(_first_call_problem(ending))
    elif ending.startswith("raise"):
        raised = ending.replace("raise", "raised", 1)
        report.problems.append(f"get_next() must return None when the data runs out; it {raised}. "
                               "The calibrator stops on None, and any exception escapes quantize_static")
    elif ending.startswith("no end"):
        report.problems.append(f"get_next() never returned None ({ending}); calibration would never finish")
    elif ending != "None":
        report.problems.append(f"get_next() ended with an {ending}; return None when the data runs out (ONNX "
                               "Runtime's loop happens to stop on any empty value, but None is the contract, and "
                               "code that reads the batch it gets, as lesson 02's test does, fails on an empty one)")
    if report.batches == 0 and not ending.startswith("raise"):
        report.problems.append("the first pass gave no batches: calibration would fail with "
                               "'No data is collected'. Is the reader already used up?")
    if expected_samples is not None and report.samples != expected_samples:
        report.problems.append(f"gave {report.samples} samples; expected {expected_samples}")
    if batch_size is not None and report.served and not report.batch_problems:
        report.problems += [p for p in [_sizes_problem([len(b) for b in report.served], batch_size)] if p]
    if pixels is not None and report.served and not report.batch_problems and report.samples == len(pixels):
        report.problems += [p for p in [_images_problem(report.served, pixels)] if p]
    if report.problems and ending.startswith(("raise", "no end")):
        report.second_pass = "not tried: the first pass did not end with None"
        return report
    again, _, _ = _one_pass(reader, None, input_name, n_features, max_batches=1)
    report.second_pass = _second_pass(again, report.batches)
    if callable(getattr(reader, "rewind", None)):
        try:
            reader.rewind()
            b, s, _ = _one_pass(reader, None, input_name, n_features, max_batches)
            report.rewind = f"gives {b} batches, {s} samples again"
            if report.batches and (b, s) != (report.batches, report.samples):
                report.problems.append(f"after rewind() it gave {b} batches / {s} samples, but the first "
                                       f"pass gave {report.batches} / {report.samples}; rewind() must "
                                       "restart from the first batch")
            reader.rewind()
        except Exception as e:  # noqa: BLE001 - a student's rewind() may raise anything: the report names it
            report.problems.append(f"rewind() raised {type(e).__name__}: {e}")
    return report
