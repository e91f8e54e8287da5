"""Lesson 02: drive the student's DigitReader in the sandbox, then prove right.onnx came from it."""
from __future__ import annotations

import hashlib
import shutil
import tempfile
from pathlib import Path

import numpy as np
from onnxruntime.quantization.calibrate import CalibrationMethod, create_calibrator

from grader import own_code, sandbox
from grader.context import RANGE_REL, SCALE_REL, Context, Missing, charged_under, check, share_left
from grader.group import Group
from grader.mistakes import READER_SIZES, Mistake
from grader.results import Evidence
from lab import contract, data, graph, ruler
from lab.data import BATCH_SIZE
from lab.readers import ArrayReader

PART = "reader"


_RANGES: dict = {}  # (batches' dtype, shape and SHA-256, batch size, fixture size and mtime) -> (lo, hi); per worker


def calibrator_range(batches: np.ndarray, batch_size: int = BATCH_SIZE) -> tuple[float, float]:
    """The range ORT's own MinMax calibrator computes for ``pixels`` from these batches.

    ORT writes ``<model>-inferred.onnx`` beside the model it is given (FIELD-NOTES), so the
    calibrator gets a private copy of the fixture: the fixtures are never written, and two
    grading workers never race on the same file.

    The answer depends only on the batches' values and the FP32 fixture, and the batches checked are
    the 'right' set itself (served unchanged, or the set instead): one calibration per worker for the
    class, not one per hand-in (about 15 ms each, a session and an augmented model written to disk).
    """
    batches = np.ascontiguousarray(batches)
    st = data.fixture_path("fp32.onnx").stat()
    key = (batches.dtype.str, batches.shape, hashlib.sha256(batches.data).hexdigest(), batch_size, st.st_size,
           st.st_mtime_ns)
    if key not in _RANGES:
        if len(_RANGES) >= 8:
            _RANGES.clear()
        _RANGES[key] = _calibrate(batches, batch_size)
    return _RANGES[key]


def _calibrate(batches: np.ndarray, batch_size: int) -> tuple[float, float]:
    with tempfile.TemporaryDirectory(prefix="grader-calib-") as tmp:
        source = Path(tmp) / "fp32.onnx"
        shutil.copyfile(data.fixture_path("fp32.onnx"), source)
        calibrator = create_calibrator(source,
                                       augmented_model_path=str(Path(tmp) / "augmented.onnx"),
                                       calibrate_method=CalibrationMethod.MinMax)
        calibrator.collect_data(ArrayReader(batches, batch_size))
        lo, hi = calibrator.compute_data().data[data.INPUT_NAME].range_value
    return float(np.asarray(lo).reshape(-1)[0]), float(np.asarray(hi).reshape(-1)[0])


# The configurations lesson 02's tests drive the reader in: the lesson's own batches, a batch size that does
# not divide the data, and a tiny float64 set under another input name (its hidden test). Written once here.
DRIVES = (
    {"name": "lesson", "n": 360, "batch_size": BATCH_SIZE, "input_name": "pixels", "dtype": "float32"},
    {"name": "uneven", "n": 360, "batch_size": 100, "input_name": "pixels", "dtype": "float32"},
    {"name": "tiny", "n": 10, "batch_size": 3, "input_name": "x", "dtype": "float64"},
)
RULE_COST = 1.0       # each broken rule costs one point of `contract` at rubric.toml's price (a share of it)
SUBCLASS_COST = 0.5   # not subclassing CalibrationDataReader: half a point (ORT only calls get_next)
SIZES_RULE = "batches of batch_size, the last one partial, every image once"


def _where(drive: dict) -> str:
    return (f"DigitReader({drive['n']} {drive['dtype']} images, batch_size={drive['batch_size']}, "
            f"input_name='{drive['input_name']}')")


def expected_sizes(n: int, batch_size: int) -> list[int]:
    """Full batches of ``batch_size``, then the partial rest: 360 in 100s is [100, 100, 100, 60]."""
    return [batch_size] * (n // batch_size) + ([n % batch_size] if n % batch_size else [])


def _runs(sizes: list[int]) -> str:
    """[100, 100, 100, 60] -> "3 x 100, 1 x 60"."""
    out: list[list[int]] = []
    for s in sizes:
        if out and out[-1][1] == s:
            out[-1][0] += 1
        else:
            out.append([1, s])
    text = ", ".join(f"{k} x {s}" for k, s in out[:4]) + (" ..." if len(out) > 4 else "")
    return text or "nothing"


def _ended(drive: dict) -> bool:
    return str(drive.get("report", {}).get("ending", "")).startswith("returned None")


def _ending(s: dict, d: dict, arrays: dict, pixels: np.ndarray) -> str | None:
    end = str(d.get("report", {}).get("ending", ""))
    if end.startswith("raise"):
        return (f"{_where(s)}: get_next() must return None when the data runs out; it "
                f"{end.replace('raise', 'raised', 1)}. The calibrator stops on None, and an exception escapes "
                "quantize_static")
    if end.startswith("no end"):
        return f"{_where(s)}: get_next() never returned None ({end}); calibration would never finish"
    if end.startswith("empty"):
        return (f"{_where(s)}: get_next() ended with an {end}, not None; ONNX Runtime's loop happens to stop on "
                "any empty value, but None is the contract, and lesson 02's test reads the batch it gets")
    return None


def _key(s: dict, d: dict, arrays: dict, pixels: np.ndarray) -> str | None:
    keys = [list(k) for k in d["first"]["keys"]]
    if keys and keys != [[s["input_name"]]]:
        shown = ", ".join(str(k) for k in keys)
        return (f"{_where(s)}: its batches have keys {shown}; the model's input is named "
                f"'{s['input_name']}', so return {{self.input_name: batch}}")
    if d["first"]["types"]:
        return f"{_where(s)}: get_next() returned a {d['first']['types'][0]}; return a dict {{input_name: array}}"
    return None


def _dtype(s: dict, d: dict, arrays: dict, pixels: np.ndarray) -> str | None:
    bad = [t for t in d["first"]["dtypes"] if t != "float32"]
    if bad:
        given = f"given {s['dtype']} pixels, " if s["dtype"] != "float32" else ""
        return (f"{_where(s)}: {given}its dtype is {bad[0]}; the model takes float32, so convert the pixels "
                "with np.asarray(pixels, dtype=np.float32)")
    return None


def _shape(s: dict, d: dict, arrays: dict, pixels: np.ndarray) -> str | None:
    if d["first"]["shapes"]:
        return f"{_where(s)}: a batch has shape {list(d['first']['shapes'][0])}; expected [batch, 64]"
    return None


def _sizes(s: dict, d: dict, arrays: dict, pixels: np.ndarray) -> str | None:
    want, got = expected_sizes(s["n"], s["batch_size"]), d["first"]["sizes"]
    if _ending(s, d, arrays, pixels) or got == want or -1 in got:
        return None
    served = sum(got)
    what = (f"served {_runs(got)} ({served} of {s['n']} images); expected {_runs(want)}")
    if served < s["n"] and got == want[:len(got)]:
        what += ": the last, partial batch must be served too"
    elif got and max(got) < s["batch_size"] and served == s["n"]:
        what += ": serve batch_size images per call"
    return f"{_where(s)}: {what}"


def _images(s: dict, d: dict, arrays: dict, pixels: np.ndarray) -> str | None:
    got = arrays.get(f"{s['name']}.first")
    want = pixels[:s["n"]].astype(s["dtype"]).astype(np.float32)
    if got is None or not len(got) or not _ended(d):  # a pass that never ended is charged once, as such
        return None
    k = min(len(got), len(want))
    if not np.isfinite(got).all():
        return (f"{_where(s)}: calibration_reader.py served NaN or infinite pixels, and a calibration range "
                "needs finite ones; serve the pixels unchanged")
    if np.array_equal(got[:k], want[:k]):
        return None
    # a reader that serves another count of images breaks the sizes rule ("every image once"), charged there: here
    # only whether what it served is the given images, unchanged and in order (one skipped or repeated is the sizes')
    first = (_out_of_order(got, want) if len(got) != len(want) else
             int(np.argmax(~np.all(got[:k] == want[:k], axis=1))))
    if first is None:
        return None
    return (f"{_where(s)}: the images it served are not the ones it was given, in order (the first "
            f"difference is image {first}); serve the pixels unchanged")


def _out_of_order(got: np.ndarray, want: np.ndarray) -> int | None:
    """The first served image that is not a given one at or after the previous one's place: None when every served
    image is one of the given images, unchanged, in their order (some skipped, or served twice in a row)."""
    at = 0
    for i, row in enumerate(got):
        found = np.flatnonzero(np.all(want[at:] == row, axis=1))
        if not len(found):
            return i
        at += int(found[0])
    return None


def _none_again(s: dict, d: dict, arrays: dict, pixels: np.ndarray) -> str | None:
    if _ended(d) and d.get("after_none"):
        return (f"{_where(s)}: after returning None, the next get_next() served data again; once the data "
                "has run out it must keep returning None (lesson 02's test), until rewind()")
    return None


def _restart(s: dict, d: dict, arrays: dict, pixels: np.ndarray) -> str | None:
    if not _ended(d):
        return None
    if not d.get("has_rewind"):
        return "DigitReader has no rewind() method; rewind() must start again from the first image"
    first = arrays.get(f"{s['name']}.first")
    for what, label in (("rewind", "after rewind()"), ("fresh", "a new DigitReader on the same pixels")):
        if what not in d:
            continue
        again = arrays.get(f"{s['name']}.{what}")
        same = (d[what]["sizes"] == d["first"]["sizes"] and first is not None and again is not None
                and np.array_equal(again, first, equal_nan=True))
        if not same:
            fix = ("rewind() must restart at the first image" if what == "rewind" else
                   "keep the position on the instance (self.position), not on the class or the module")
            return (f"{_where(s)}: {label} it served {_runs(d[what]['sizes'])}, not the same batches as "
                    f"the first pass ({_runs(d['first']['sizes'])}); {fix}")
    return None


# the reader contract's rules, in the order they are judged: (rule, test, the registry's mistake when a later group
# names it)
RULES = (("get_next() returns None at the end, without raising", _ending, None),
         ("each batch is {input_name: array}, under the name it was given", _key, None),
         ("batches are float32, whatever dtype the pixels came in", _dtype, None),
         ("batches have shape [batch, 64]", _shape, None),
         (SIZES_RULE, _sizes, READER_SIZES),
         ("the images are served unchanged and in order", _images, None),
         ("after None, get_next() keeps returning None", _none_again, None),
         ("rewind() and a new reader serve the same batches again", _restart, None))


def findings(data: dict, arrays: dict, pixels: np.ndarray) -> list[tuple[str, str, float, Mistake | None]]:
    """Each broken rule of the reader contract once: (rule, what the reader did, points it costs, its mistake).

    A rule is judged on the first configuration that breaks it; rules that need a finished pass
    (None again, rewind) are judged only where the pass ended with None.
    """
    drives = {d["name"]: d for d in data.get("drives", [])}
    runs = [(s, drives[s["name"]]) for s in DRIVES if s["name"] in drives]  # the lab's order of configurations
    out = []
    for rule, test, mistake in RULES:
        why = next((w for s, d in runs if (w := test(s, d, arrays, pixels))), None)
        if why:
            out.append((rule, why, RULE_COST, mistake))
    if not data.get("subclass"):
        out.append(("DigitReader subclasses CalibrationDataReader",
                    "DigitReader does not subclass onnxruntime.quantization.CalibrationDataReader", SUBCLASS_COST,
                    None))
    return out


def run(ctx: Context) -> list:
    if not ctx.has("calibration_reader.py"):
        raise Missing("calibration_reader.py")
    refused = own_code.refusal_for(ctx.sub.path("calibration_reader.py"), "calibration_reader.py")
    if refused:  # it would pass on the lab's ArrayReader, not the student's code: nothing of it is run
        return [check(PART, "contract", 0, refused), check(PART, "range_from_reader", 0, refused)]
    pixels = data.calibration_set("right")
    child = ctx.grading.sandbox.run(*reader_runs(ctx)[0])
    if child.status != "ok" or not child.data.get("ok"):
        if child.status == "timeout":
            ctx.timed_out = True
        why = child.message or child.data.get("error", "")
        hint = {"timeout": "Does get_next() return None once every sample has been served?",
                "memory": "Does the reader copy or grow its data on every call?"}.get(child.status, "")
        if child.status == "memory" or child.data.get("memory"):
            why = f"the reader ran out of memory (limit {ctx.limits.memory >> 20} MiB): {why}"
        msg = f"the calibration reader could not be run: {why}. {hint}".strip()
        if child.status == "refused":  # the grading machine's fault: nothing of the student's was judged
            not_run = ("not checked: the reader was not run, because student code runs only inside an isolation "
                       "layer and the grading machine has none")
            return [check(PART, "contract", 0, msg), check(PART, "range_from_reader", 0, not_run)]
        return [check(PART, "contract", 0, msg), _range_check(ctx, None, pixels)]
    drives = {d["name"]: d for d in child.data.get("drives", [])}
    found = findings(child.data, child.arrays, pixels)
    lesson = drives.get("lesson", {})
    report = lesson.get("report", {})
    for *_, mistake in found:
        if mistake is not None:
            ctx.charge(mistake)
    cost = sum(c for _, _, c, _ in found)
    fraction = share_left(PART, "contract", cost)
    if found:
        msg = (f"the reader in calibration_reader.py breaks {len(found)} rule(s) of the contract lesson 02's tests "
               f"check: "
               + " ".join(f"({i}) '{rule}': {why}." for i, (rule, why, _, _) in enumerate(found, 1))
               + " Run lesson 02's check cell (lesson.check_reader and lesson.check_other_input, which builds the "
                 "reader with input_name='x' and float64 pixels) and its test cell to see each rule")
        problems = " ".join(report.get("problems", []))
        if "MemoryError" in problems:
            msg = f"the reader ran out of memory (limit {ctx.limits.memory >> 20} MiB). " + msg
    else:
        msg = (f"the reader keeps the contract: {report.get('batches')} batches of {BATCH_SIZE}, then None; batches "
               "of 100 and of 3 with the last one partial; input name 'x'; float64 pixels served as float32; "
               "None again after the end; rewind() and a new reader serve the same batches")
    results = [check(PART, "contract", fraction, msg,
                     [Evidence("samples served", None, report.get("samples"), len(pixels),
                               "the calibration set size")])]
    first = child.arrays.get("lesson.first")
    served = first is not None and first.shape == pixels.shape and np.array_equal(first, pixels)
    results.append(_range_check(ctx, first if served else None, pixels))
    return results


def _range_check(ctx: Context, first: np.ndarray | None, pixels: np.ndarray):
    """right.onnx's input ruler against ORT's calibrator on the reader's batches.

    When the reader did not serve the calibration set (already charged under ``contract``), the
    ruler is checked against the set lesson 03 names instead: one mistake, one charge.
    """
    instead = ""
    if first is None:
        first = pixels
        instead = ("checked against lesson 03's 'right' calibration set itself, because your reader did not serve "
                   f"it ({charged_under(PART, 'contract')}): ")
    try:
        model = ctx.model("right.onnx")
    except Missing:
        return check(PART, "range_from_reader", 0,
                     f"right.onnx is missing; lesson {contract.lesson_of('right.onnx')} writes it with this reader")
    lo, hi = calibrator_range(first)
    got = graph.input_ruler(model)
    scale, zp = ruler.scale_zero_point(lo, hi, got.dtype)  # a uint8 ruler is charged under lesson 03's quantized
    rel = abs(got.scale - float(scale)) / float(scale)
    ok = rel <= SCALE_REL and got.zero_point == zp
    source = "the 'right' set" if instead else "your reader's batches"
    # right.onnx's ruler is the model's, not a number the student reported: the message names both
    ev: list[Evidence] = []
    if not ok and _other_data(ctx, got, pixels):
        return check(PART, "range_from_reader", 1.0, instead + (
            f"right.onnx's input ruler (scale {got.scale:.6g}, zero point {got.zero_point}) is not the one ORT's "
            f"calibrator gives on {source} (scale {float(scale):.6g}): right.onnx was calibrated on other data than "
            f"the 'right' set; {charged_under('calibration', 'range_seen')}"), ev)
    msg = instead + (
        f"ORT's calibrator on {source} gives range [{lo:.4g}, {hi:.4g}], the ruler inside right.onnx" if ok else
        f"right.onnx's input ruler (scale {got.scale:.6g}, zero point {got.zero_point}) does not come from "
        f"{source} (calibrator range [{lo:.4g}, {hi:.4g}] gives scale {float(scale):.6g}, zero point {zp}). "
        f"Re-run lesson 03 with DigitReader(lab.data.calibration_set('right'), batch_size={BATCH_SIZE})")
    return check(PART, "range_from_reader", 1.0 if ok else 0.0, msg, ev)


def _other_data(ctx: Context, got, pixels: np.ndarray) -> bool:
    """Is right.onnx calibrated on other data than the 'right' set, as lesson 03's range_seen judges it?

    Then the mistake is lesson 03's (the model's data), charged there, not the reader's: one mistake, one charge.
    Without results.json lesson 03's checks cannot judge it, and this check charges it.
    """
    if not ctx.has("results.json"):
        return False
    want, zp = ruler.scale_zero_point(float(pixels.min()), float(pixels.max()), got.dtype)
    return abs(got.scale - float(want)) > RANGE_REL * float(want) or got.zero_point != zp


def reader_batches_charged(ctx: Context) -> str:
    """'' unless the reader's batch sizes were charged under ``contract`` (``READER_SIZES``); then how a later check
    names a batch count that follows from them (a report honestly records the batches the reader served)."""
    if not ctx.charged(READER_SIZES):
        return ""
    return f"because of {READER_SIZES.wording} above ({READER_SIZES.charged_under()})"


def _reader_request(ctx: Context, pixels: np.ndarray, drives=DRIVES) -> sandbox.Request:
    """``sandbox.run``'s arguments for a DigitReader run: these drives of the reader on ``pixels``."""
    return (ctx.sub.root, {"task": "reader", "module": "calibration_reader", "class": "DigitReader",
                           "input": "input.npz", "drives": list(drives), "max_batches": 1000},
            {"input.npz": {"pixels": np.asarray(pixels, np.float32)}}, ctx.limits)


def _served_drive(pixels: np.ndarray, batch_size: int) -> dict:
    return {"name": "served", "n": int(len(pixels)), "batch_size": int(batch_size), "input_name": "pixels",
            "dtype": "float32"}


def reader_runs(ctx: Context) -> list[sandbox.Request]:
    """The reader run ``run`` asks for (its group's ``request``, planned ahead), if it will run the reader at all."""
    if not ctx.has("calibration_reader.py") or own_code.refusal_for(ctx.sub.path("calibration_reader.py")):
        return []
    return [_reader_request(ctx, data.calibration_set("right"))]


def served_request(ctx: Context, pixels: np.ndarray, batch_size: int) -> sandbox.Request | None:
    """The run ``served_count`` asks for (for ``sandbox.plan``), or None when it will not run the reader."""
    if not ctx.has("calibration_reader.py") or own_code.refusal_for(ctx.sub.path("calibration_reader.py")):
        return None
    return _reader_request(ctx, pixels, [_served_drive(pixels, batch_size)])


def served_count(ctx: Context, pixels: np.ndarray, batch_size: int) -> int | None:
    """How many of ``pixels`` the student's DigitReader serves at ``batch_size`` before None; None if not run."""
    request = served_request(ctx, pixels, batch_size)
    if request is None:
        return None
    child = ctx.grading.sandbox.run(*request)
    if child.status != "ok" or not child.data.get("ok") or not child.data.get("drives"):
        return None
    got = child.data["drives"][0]
    if not _ended(got) or -1 in got["first"]["sizes"]:
        return None
    return int(sum(got["first"]["sizes"]))


GROUPS = (Group("02", PART, ("contract", "range_from_reader"), run, needs=("calibration_reader.py",),
                charges=(READER_SIZES,), request=reader_runs),)
