"""FP32 vs INT8 speed on this CPU: the digit reader, then a synthetic MLP of growing width.

Same measurement as lessons 07 and 09 (``lab.speed``): one pinned thread, warm-up, repeats, medians.
Every number is a ratio against FP32 timed in the same run, so machines compare by ratio.
"""
from __future__ import annotations

import tempfile

from lab import data, speed
from lab.convert import quantize_dynamic_model
from lab.lessons.lesson08_the_quantization_toolbox import toolbox as tb
from lab.workspace import make_workspace

BATCHES = (1, 256)
WIDTHS = (64, 128, 256, 512, 1024, 2048)
SWEEP_BATCH = 64


def digit_reader_timings(work, repeats: int = 200, warmup: int = 20) -> list[speed.Timing]:
    """FP32, QDQ, QOperator (S8S8, right calibration) and dynamic digit readers at ``BATCHES``."""
    source = work / "source.onnx"
    right = data.calibration_set("right")
    models = {"FP32": source, "QDQ": work / "qdq.onnx", "QOperator": work / "qoperator.onnx",
              "dynamic": work / "dynamic.onnx"}
    tb.build(source, models["QDQ"], right, {})
    tb.build(source, models["QOperator"], right, {"quant_format": "QOperator"})
    quantize_dynamic_model(source, models["dynamic"])
    x = data.load_split("evaluation").pixels
    return speed.benchmark(models, x, BATCHES, threads=1, warmup=warmup, repeats=repeats)


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="speed-bench-") as tmp:
        work = make_workspace(tmp)
        timings = digit_reader_timings(work)
    print("digit reader (64-64-32-10 MLP), 1 thread, median of repeated runs (one round)")
    print(speed.format_timings(timings))
    points = speed.width_sweep(WIDTHS, batch=SWEEP_BATCH, threads=1, warmup=3, repeats=15)
    cross = speed.crossover(points)
    print(f"\nsynthetic 3-layer MLP, QDQ U8S8 vs FP32, batch {SWEEP_BATCH}, 1 thread")
    print(speed.format_sweep(points))
    print("crossover (INT8 faster beyond the noise of its rounds from this width on): "
          f"{cross if cross else 'none in these widths'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
