"""Runs inside the sandbox: import the student's module from the scratch folder, drive it, write plain data.

Invoked as ``python -I child.py TASK.json`` with the scratch folder as the working directory.
Writes ``result.json`` (plain JSON) and, for the reader, ``batches.npz`` (float32 arrays, no
pickle) into the scratch folder. Nothing here is trusted by the grader beyond what it
re-checks itself: the student's code runs in this same process.

Of every pass (up to its first end) the reader task reports the SHA-256 of the served values, the batches'
float32 bytes in order (``lab.data.data_sha256`` of them all, whatever the batching), the range of its finite values
(what ORT's MinMax calibrator would make of them) and the first batch's mean and standard deviation: what lets the
grader tell served values from the deployed path's, and a ruler from them, without shipping them.
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import math
import os
import sys
import traceback
from typing import Any

import numpy as np  # every task hands back numpy values through _plain, so every child needs it

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _plain(obj, depth: int = 0):
    """Numpy values to JSON-able Python, refusing anything else."""
    if depth > 6:
        raise TypeError("nested too deeply")
    if isinstance(obj, np.ndarray):
        return _plain(obj.tolist(), depth + 1)
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, (np.floating,)):
        obj = float(obj)
    if isinstance(obj, bool) or obj is None or isinstance(obj, (int, str)):
        return obj
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else str(obj)
    if isinstance(obj, dict):
        return {str(k): _plain(v, depth + 1) for k, v in list(obj.items())[:50]}
    if isinstance(obj, (list, tuple)):
        return [_plain(v, depth + 1) for v in list(obj)[:1000]]
    return f"<{type(obj).__name__}>"


def _load(module: str):
    path = os.path.join(os.getcwd(), f"{module}.py")
    spec = importlib.util.spec_from_file_location(f"student_{module}", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"{module}.py cannot be loaded as a module")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class _Recorder:
    """Pass a reader's answers through, and record each one: keys, dtype, shape, size and a float32 copy.

    Answers are kept per pass: ``rewind()`` starts a new one. Each pass also hashes its batches' values as float32
    bytes, in order, up to its first end (``hashes``: what ``_summary`` reports as ``sha256``). The batch is the
    value under ``input_name`` or, when the reader used another key, its only value, so a wrong key is one
    finding and the sizes and images can still be judged. ``rewind`` exists only when the reader's does.
    """

    def __init__(self, reader, input_name: str, keep_rows: int):
        self.reader, self.input_name, self.keep_rows = reader, input_name, keep_rows
        self.passes: list[list[dict]] = [[]]
        self.hashes = [hashlib.sha256()]
        self.ranges: list[list[float]] = [[]]  # per pass, before its first end: [low, high] of the finite values
        self.ended = [False]
        if not callable(getattr(reader, "rewind", None)):
            # a reader without rewind() is recorded by one without it: check_reader asks for rewind as the reader has it
            self.rewind = None  # type: ignore[method-assign,assignment]  # no rewind, as the reader has none

    def _digest(self, value: np.ndarray, event: dict) -> None:
        """Hash the batch's values into the pass (before its first end) and note the first batch's mean and std."""
        if self.ended[-1]:
            return
        try:
            x = np.ascontiguousarray(value, dtype=np.float32)
        except (TypeError, ValueError):  # values that are no numbers: the dtype finding names them
            event["values"] = "not numbers"
            return
        self.hashes[-1].update(x.tobytes())
        finite = x[np.isfinite(x)]
        if finite.size:
            lo, hi, seen = float(finite.min()), float(finite.max()), self.ranges[-1]
            self.ranges[-1] = [min(seen[0], lo), max(seen[1], hi)] if seen else [lo, hi]
        if not any("mean" in e for e in self.passes[-1]) and x.size:
            event.update(mean=_plain(x.mean(dtype=np.float64)), std=_plain(x.std(dtype=np.float64)))

    def get_next(self):
        item = self.reader.get_next()
        self.passes[-1].append(self._event(item))
        return item

    def rewind(self):  # noqa: F811 - replaced by None on readers without one
        self.passes.append([])
        self.hashes.append(hashlib.sha256())
        self.ranges.append([])
        self.ended.append(False)
        return self.reader.rewind()

    def _event(self, item) -> dict:
        if not item:
            self.ended[-1] = True
            return {"end": True}
        if not isinstance(item, dict):
            return {"type": type(item).__name__}
        keys = [str(k)[:40] for k in list(item)[:5]]
        value = item.get(self.input_name)
        if value is None and len(item) == 1:
            value = next(iter(item.values()))
        event: dict[str, object] = {"keys": keys}
        if isinstance(value, np.ndarray):
            event.update(dtype=str(value.dtype), shape=[int(d) for d in value.shape[:4]])
            self._digest(value, event)
            kept = sum(len(e["rows"]) for e in self.passes[-1] if "rows" in e)
            if value.ndim == 2 and value.shape[1] == 64 and kept < self.keep_rows:
                event["rows"] = np.array(value[:self.keep_rows - kept], dtype=np.float32, copy=True)
        elif value is not None:
            event["type"] = type(value).__name__
        return event


def _first_pass(events: list) -> tuple[list, bool | None]:
    """The answers up to the first end, and whether the call after that end served data again."""
    for i, e in enumerate(events):
        if e.get("end"):
            after = events[i + 1] if i + 1 < len(events) else None
            return events[:i], (None if after is None else not after.get("end"))
    return events, None


def _summary(events: list, digest: str = "", value_range: list | None = None) -> dict:
    sizes = [e["shape"][0] if e.get("shape") else -1 for e in events]
    return {"sizes": sizes[:2000], "batches": len(events),
            "keys": sorted({tuple(e["keys"]) for e in events if "keys" in e})[:5],
            "dtypes": sorted({e["dtype"] for e in events if "dtype" in e}),
            "shapes": sorted({tuple(e["shape"]) for e in events if "shape" in e and
                              (len(e["shape"]) != 2 or e["shape"][1] != 64)})[:3],
            "types": sorted({e["type"] for e in events if "type" in e})[:3],
            "sha256": digest, "range": value_range or [],
            "first_batch": next(({"mean": e["mean"], "std": e["std"]} for e in events if "mean" in e), {})}


def _rows(events: list):
    rows = [e["rows"] for e in events if "rows" in e]
    return np.concatenate(rows) if rows else np.zeros((0, 64), np.float32)


def drive_reader(cls, pixels, drive: dict, max_batches: int, arrays: dict, fresh: bool) -> dict:
    """One configuration lesson 02's tests use: ``lab.lessons.lesson02_the_calibration_reader.check_reader`` drives
    the reader, recorded."""
    from lab.lessons.lesson02_the_calibration_reader import check_reader  # deferred: lesson 02's drive only

    name, n = drive["name"], int(drive["n"])
    data = pixels[:n].astype(drive["dtype"])
    keep = 2 * n + 1
    recorder = _Recorder(cls(data.copy(), batch_size=drive["batch_size"], input_name=drive["input_name"]),
                         drive["input_name"], keep)
    report = check_reader(recorder, input_name=drive["input_name"], expected_samples=n, max_batches=max_batches)
    first, after_none = _first_pass(recorder.passes[0])
    out = {"name": name, "report": report.to_dict(),
           "first": _summary(first, recorder.hashes[0].hexdigest(), recorder.ranges[0]),
           "after_none": after_none, "has_rewind": recorder.rewind is not None, "lines": report.lines()}
    arrays[f"{name}.first"] = _rows(first)
    if len(recorder.passes) > 1:
        again, _ = _first_pass(recorder.passes[1])
        out["rewind"] = _summary(again, recorder.hashes[1].hexdigest(), recorder.ranges[1])
        arrays[f"{name}.rewind"] = _rows(again)
    if fresh:  # a second reader on the same pixels: position kept on the instance, not the class
        other = _Recorder(cls(data.copy(), batch_size=drive["batch_size"], input_name=drive["input_name"]),
                          drive["input_name"], keep)
        check_reader(other, input_name=drive["input_name"], expected_samples=n, max_batches=max_batches)
        again, _ = _first_pass(other.passes[0])
        out["fresh"] = _summary(again, other.hashes[0].hexdigest(), other.ranges[0])
        arrays[f"{name}.fresh"] = _rows(again)
    return out


def run_reader(task: dict) -> dict:
    pixels = np.load(task["input"], allow_pickle=False)["pixels"]
    mod = _load(task["module"])
    cls = getattr(mod, task["class"], None)
    if cls is None:
        return {"ok": False, "error": f"{task['module']}.py defines no class {task['class']}"}
    # deferred: onnxruntime.quantization costs about 0.6 s at import; only the reader task needs it (the fork
    # server preloads it)
    from onnxruntime.quantization import CalibrationDataReader

    subclass = isinstance(cls, type) and issubclass(cls, CalibrationDataReader)
    arrays: dict[str, Any] = {}
    drives = []
    # deferred: like lesson 02's check_reader in drive_reader, which imports lab.data anyway; the lesson's batch size
    from lab.data import BATCH_SIZE

    default = [{"name": "lesson", "n": len(pixels), "batch_size": task.get("batch_size", BATCH_SIZE),
                "input_name": "pixels", "dtype": "float32"}]
    for i, drive in enumerate(task.get("drives") or default):
        drives.append(drive_reader(cls, pixels, drive, task["max_batches"], arrays, fresh=i == 0))
    np.savez(os.path.join(os.getcwd(), "batches.npz"), **arrays)
    return {"ok": True, "subclass": bool(subclass), "drives": drives}


def run_metrics(task: dict) -> dict:
    mod = _load(task["module"])
    fn = getattr(mod, task["function"], None)
    if not callable(fn):
        return {"ok": False, "error": f"{task['module']}.py defines no function {task['function']}()"}
    out = []
    for case in task["cases"]:
        try:
            value = fn(list(case["predictions"]), list(case["labels"]))
            out.append({"name": case["name"], "returned": _plain(value)})
        except Exception as e:  # noqa: BLE001 - the grader judges the exception
            out.append({"name": case["name"], "raised": type(e).__name__, "message": str(e)[:300]})
    return {"ok": True, "cases": out}


def _own_paths(obj, folder: str):
    """``obj`` with the scratch ``folder`` left out of every string: a path reads as the student wrote it
    (``../label_names.json``), and a message is the same in every run (each run's folder has a random name)."""
    if isinstance(obj, str):
        return obj.replace(folder + os.sep, "").replace(folder, ".")
    if isinstance(obj, list):
        return [_own_paths(v, folder) for v in obj]
    if isinstance(obj, dict):
        return {k: _own_paths(v, folder) for k, v in obj.items()}
    return obj


def _failure(e: BaseException, folder: str) -> str:
    """``Type: message``, the student's file and line it was raised from, and, for a missing file, why."""
    own = [f for f in traceback.extract_tb(e.__traceback__) if os.path.dirname(f.filename) == folder]
    where = f" ({os.path.basename(own[-1].filename)}, line {own[-1].lineno})" if own else ""
    why = ("; the grader runs your .py files alone, in an empty folder: no other file of your workspace is there"
           if isinstance(e, FileNotFoundError) else "")
    return f"{type(e).__name__}: {e}"[:400] + where + why


def main() -> int:
    sys.path[:0] = [os.getcwd(), REPO]
    with open(sys.argv[1], encoding="utf-8") as f:
        task = json.load(f)
    try:
        result = {"reader": run_reader, "metrics": run_metrics}[task["task"]](task)
    except MemoryError:
        result = {"ok": False, "error": "MemoryError: ran out of memory", "memory": True}
    except BaseException as e:  # noqa: BLE001 - report, never crash silently
        tb = traceback.format_exception(type(e), e, e.__traceback__)
        result = {"ok": False, "error": _failure(e, os.getcwd()), "traceback": "".join(tb)[-2000:],
                  "memory": isinstance(e, MemoryError)}
    with open(os.path.join(os.getcwd(), "result.json"), "w", encoding="utf-8") as f:
        json.dump(_own_paths(result, os.getcwd()), f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
