"""Runs inside the sandbox: import the student's module from the scratch folder, drive it, write plain data.

Invoked as ``python -I child.py TASK.json`` with the scratch folder as the working directory.
Writes ``result.json`` (plain JSON) and, for the reader, ``batches.npz`` (float32 arrays, no
pickle) into the scratch folder. Nothing here is trusted by the grader beyond what it
re-checks itself: the student's code runs in this same process.
"""
from __future__ import annotations

import json
import math
import os
import sys
import traceback

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _plain(obj, depth: int = 0):
    """Numpy values to JSON-able Python, refusing anything else."""
    import numpy as np

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
    import importlib.util

    path = os.path.join(os.getcwd(), f"{module}.py")
    spec = importlib.util.spec_from_file_location(f"student_{module}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class _Capture:
    """Pass a reader's batches through and keep a float32 copy of the first ``limit`` batches."""

    def __init__(self, reader, input_name: str, limit: int):
        self.reader, self.input_name, self.limit = reader, input_name, limit
        self.batches = []

    def get_next(self):
        item = self.reader.get_next()
        if item and isinstance(item, dict) and len(self.batches) < self.limit:
            import numpy as np

            value = item.get(self.input_name)
            if isinstance(value, np.ndarray) and value.ndim == 2 and value.shape[1] == 64:
                self.batches.append(np.array(value, dtype=np.float32, copy=True))
        return item

    def rewind(self):
        return self.reader.rewind()


def run_reader(task: dict) -> dict:
    import numpy as np

    from lab.readers import check_reader

    pixels = np.load(task["input"], allow_pickle=False)["pixels"]
    mod = _load(task["module"])
    cls = getattr(mod, task["class"], None)
    if cls is None:
        return {"ok": False, "error": f"{task['module']}.py defines no class {task['class']}"}
    from onnxruntime.quantization import CalibrationDataReader

    subclass = isinstance(cls, type) and issubclass(cls, CalibrationDataReader)
    reader = cls(pixels.copy(), batch_size=task["batch_size"], input_name="pixels")
    capture = _Capture(reader, "pixels", task["max_batches"])
    report = check_reader(capture, expected_samples=len(pixels), max_batches=task["max_batches"])
    first = capture.batches[:report.batches]  # the first pass only: rewind() passes are checked by check_reader
    fresh = _Capture(cls(pixels.copy(), batch_size=task["batch_size"], input_name="pixels"), "pixels",
                     task["max_batches"])
    fresh_report = check_reader(fresh, expected_samples=len(pixels), max_batches=task["max_batches"])
    arrays = {"first": np.concatenate(first) if first else np.zeros((0, 64), np.float32),
              "fresh": (np.concatenate(fresh.batches[:fresh_report.batches]) if fresh.batches
                        else np.zeros((0, 64), np.float32))}
    np.savez(os.path.join(os.getcwd(), "batches.npz"), **arrays)
    return {"ok": True, "subclass": bool(subclass), "report": report.to_dict(),
            "lines": report.lines(), "fresh": fresh_report.to_dict(),
            "has_rewind": callable(getattr(reader, "rewind", None))}


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
        result = {"ok": False, "error": f"{type(e).__name__}: {e}"[:500], "traceback": "".join(tb)[-2000:],
                  "memory": isinstance(e, MemoryError)}
    with open(os.path.join(os.getcwd(), "result.json"), "w", encoding="utf-8") as f:
        json.dump(result, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
