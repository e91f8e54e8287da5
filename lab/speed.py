"""Latency and throughput of ONNX models on this CPU, measured honestly.

Every timing: one session per model with pinned threads, warm-up runs that are not
counted, then ``repeats`` timed runs; the median is reported (it ignores the odd run
that another process slowed down). Also: a synthetic MLP of any width, built with
``onnx.helper`` (no download), to find the width where INT8 kernels start to pay off. In the core, not in a
lesson: lesson 07 times its release candidates with it and lesson 09 its recipes and the width sweep.
"""
from __future__ import annotations

import logging
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from onnxruntime.quantization import QuantFormat, QuantType, quantize_static

from lab.graph import session
from lab.readers import ArrayReader

logging.getLogger().setLevel(logging.ERROR)  # ORT's "consider pre-processing" hint, as in lab.convert

SYNTHETIC_INPUT = "x"
SYNTHETIC_OUTPUT = "y"


@dataclass(frozen=True)
class Timing:
    """One model at one batch size: median latency of a run, and samples per second."""

    model: str
    batch: int
    threads: int
    warmup: int
    repeats: int
    median_ms: float
    p90_ms: float
    throughput: float

    def to_dict(self) -> dict:
        return asdict(self)


def time_model(model, x: np.ndarray, *, name: str = "", input_name: str | None = None, threads: int = 1,
               warmup: int = 5, repeats: int = 30, min_seconds: float = 0.0) -> Timing:
    """Median wall time of ``session.run`` on ``x`` after ``warmup`` untimed runs.

    ``repeats`` timed runs at least; more until ``min_seconds`` of timed runs have passed.
    Throughput is batch size / median latency.
    """
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}")
    sess = session(model, threads=threads)
    feed = {input_name or sess.get_inputs()[0].name: np.ascontiguousarray(x, dtype=np.float32)}
    for _ in range(max(0, warmup)):
        sess.run(None, feed)
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < repeats or time.perf_counter() - start < min_seconds:
        t0 = time.perf_counter()
        sess.run(None, feed)
        times.append(time.perf_counter() - t0)
    times.sort()
    median = statistics.median(times)
    p90 = times[min(len(times) - 1, int(round(0.9 * (len(times) - 1))))]
    label = name or (Path(model).stem if isinstance(model, (str, Path)) else "model")
    return Timing(label, int(len(x)), threads, warmup, len(times), median * 1e3, p90 * 1e3,
                  len(x) / median if median > 0 else float("inf"))


def benchmark(models: dict[str, object], x: np.ndarray, batches: tuple[int, ...] = (1, 256), *,
              threads: int = 1, warmup: int = 5, repeats: int = 30, min_seconds: float = 0.0) -> list[Timing]:
    """Time every model at every batch size, on the first ``batch`` rows of ``x`` (tiled if short).

    Models are timed in turn for each batch size, so a slow moment on the machine hits
    them alike rather than one model's whole series.
    """
    rows = []
    for batch in batches:
        xb = np.resize(np.asarray(x, np.float32), (batch, np.asarray(x).shape[1]))
        for name, model in models.items():
            rows.append(time_model(model, xb, name=name, threads=threads, warmup=warmup,
                                   repeats=repeats, min_seconds=min_seconds))
    return rows


def speedups(rows: list[Timing], baseline: str = "FP32") -> dict[tuple[str, int], float]:
    """(model, batch) -> baseline median / model median; above 1 means faster than the baseline."""
    base = {r.batch: r.median_ms for r in rows if r.model == baseline}
    if not base:
        raise ValueError(f"no timings for the baseline {baseline!r}; models timed: {sorted({r.model for r in rows})}")
    return {(r.model, r.batch): base[r.batch] / r.median_ms for r in rows if r.batch in base}


def format_timings(rows: list[Timing], baseline: str = "FP32") -> str:
    """A fixed-width table: model, batch, median ms, p90 ms, samples/s, speed-up against the baseline."""
    ratio = speedups(rows, baseline) if any(r.model == baseline for r in rows) else {}
    w = max([12, *(len(r.model) for r in rows)])
    head = f"{'model':<{w}} {'batch':>6} {'median ms':>10} {'p90 ms':>9} {'samples/s':>11} {'vs ' + baseline:>9}"
    lines = [head, "-" * len(head)]
    for r in rows:
        x = ratio.get((r.model, r.batch))
        lines.append(f"{r.model:<{w}} {r.batch:>6} {r.median_ms:>10.3f} {r.p90_ms:>9.3f} {r.throughput:>11.0f} "
                     f"{(f'{x:.2f}x' if x else '-'):>9}")
    return "\n".join(lines)


def synthetic_mlp(width: int, depth: int = 3, n_in: int | None = None, n_out: int = 10,
                  seed: int = 0) -> onnx.ModelProto:
    """An FP32 MLP ``depth`` linear layers deep (MatMul + Add, Relu between), ``width`` units wide.

    Built with ``onnx.helper`` from seeded random weights (He-scaled so activations stay
    in a sane range); input ``x`` [N, n_in or width], output ``y`` [N, n_out]. No download.
    """
    if width < 1 or depth < 1:
        raise ValueError(f"width and depth must be at least 1, got width={width}, depth={depth}")
    rng = np.random.default_rng(seed)
    n_in = n_in or width
    dims = [n_in] + [width] * (depth - 1) + [n_out]
    nodes, inits, prev = [], [], SYNTHETIC_INPUT
    for i, (a, b) in enumerate(zip(dims[:-1], dims[1:]), start=1):
        w = (rng.standard_normal((a, b)) * np.sqrt(2.0 / a)).astype(np.float32)
        bias = (rng.standard_normal(b) * 0.01).astype(np.float32)
        inits += [numpy_helper.from_array(w, f"fc{i}.weight"), numpy_helper.from_array(bias, f"fc{i}.bias")]
        last = i == len(dims) - 1
        nodes += [helper.make_node("MatMul", [prev, f"fc{i}.weight"], [f"fc{i}.matmul"], name=f"fc{i}_MatMul"),
                  helper.make_node("Add", [f"fc{i}.matmul", f"fc{i}.bias"],
                                   [SYNTHETIC_OUTPUT if last else f"fc{i}.out"], name=f"fc{i}_Add")]
        if not last:
            nodes.append(helper.make_node("Relu", [f"fc{i}.out"], [f"relu{i}.out"], name=f"relu{i}"))
            prev = f"relu{i}.out"
    graph = helper.make_graph(nodes, f"mlp{width}",
                              [helper.make_tensor_value_info(SYNTHETIC_INPUT, TensorProto.FLOAT, ["N", n_in])],
                              [helper.make_tensor_value_info(SYNTHETIC_OUTPUT, TensorProto.FLOAT, ["N", n_out])],
                              inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="lab.speed")
    model.ir_version = 9
    onnx.checker.check_model(model)
    return model


def quantize_synthetic(model: onnx.ModelProto, out_dir: str | Path, *, samples: int = 64, seed: int = 0,
                       quant_format: str = "QDQ", activation_type: str = "QUInt8") -> Path:
    """Static INT8 version of a synthetic MLP, calibrated on seeded uniform [0, 1) inputs.

    Writes ``<graph name>.<format>.onnx`` into ``out_dir`` and returns its path, beside the FP32 model it
    converted, ``<graph name>.fp32.onnx``. QUInt8 activations by default: the U8S8 kernels are the fast
    path on x86-64.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    n_in = model.graph.input[0].type.tensor_type.shape.dim[1].dim_value
    calib = np.random.default_rng(seed).random((samples, n_in), dtype=np.float32)
    src = out_dir / f"{model.graph.name}.fp32.onnx"
    onnx.save(model, src)
    out = out_dir / f"{model.graph.name}.{quant_format.lower()}.onnx"
    quantize_static(str(src), str(out), ArrayReader(calib, 32, input_name=SYNTHETIC_INPUT),
                    quant_format=QuantFormat[quant_format], activation_type=QuantType[activation_type],
                    weight_type=QuantType.QInt8)
    return out


@dataclass(frozen=True)
class WidthPoint:
    """FP32 against INT8 (QDQ) for one synthetic width at one batch size."""

    width: int
    batch: int
    fp32_ms: float
    int8_ms: float

    @property
    def speedup(self) -> float:
        return self.fp32_ms / self.int8_ms

    def to_dict(self) -> dict:
        return {**asdict(self), "speedup": self.speedup}


def width_sweep(widths: tuple[int, ...] = (64, 256, 1024), batch: int = 64, *, depth: int = 3,
                threads: int = 1, warmup: int = 3, repeats: int = 15, seed: int = 0) -> list[WidthPoint]:
    """For each width, build the synthetic MLP, quantize it (QDQ), and time FP32 and INT8 at ``batch``."""
    points = []
    with tempfile.TemporaryDirectory(prefix="lab-speed-") as tmp:
        for width in widths:
            fp32 = synthetic_mlp(width, depth=depth, seed=seed)
            int8 = quantize_synthetic(fp32, tmp, seed=seed)
            x = np.random.default_rng(seed + 1).random((batch, width), dtype=np.float32)
            # the FP32 file quantize_synthetic wrote: a session from a file skips serializing the model again
            t_fp32 = time_model(Path(tmp) / f"{fp32.graph.name}.fp32.onnx", x, threads=threads, warmup=warmup,
                                repeats=repeats)
            t_int8 = time_model(int8, x, threads=threads, warmup=warmup, repeats=repeats)
            points.append(WidthPoint(width, batch, t_fp32.median_ms, t_int8.median_ms))
    return points


def crossover(points: list[WidthPoint], margin: float = 1.1) -> int | None:
    """The smallest width from which INT8 stays faster than FP32 by more than ``margin`` times; None if never.

    "Stays": every wider point measured is faster too, so one lucky narrow point does not count.
    The default margin (10 %) is above the few percent that repeated runs differ by on a shared CPU.
    """
    points = sorted(points, key=lambda p: p.width)
    for i, p in enumerate(points):
        if all(q.speedup > margin for q in points[i:]):
            return p.width
    return None


def format_sweep(points: list[WidthPoint]) -> str:
    """The width sweep as a fixed-width table."""
    head = f"{'width':>6} {'batch':>6} {'FP32 ms':>9} {'INT8 ms':>9} {'speed-up':>9}"
    lines = [head, "-" * len(head)]
    for p in points:
        lines.append(f"{p.width:>6} {p.batch:>6} {p.fp32_ms:>9.3f} {p.int8_ms:>9.3f} {p.speedup:>8.2f}x")
    return "\n".join(lines)


def plot_sweep(points: list[WidthPoint], margin: float = 1.1, ax=None):
    """FP32 / INT8 speed-up against layer width (log scale), with the break-even line and the crossover."""
    import matplotlib.pyplot as plt  # deferred: 1.8 s to import (python -X importtime); only figures need it

    from lab.plots import fixed_margins  # deferred: lab.plots imports matplotlib, as above

    new = ax is None
    if new:
        _, ax = plt.subplots(figsize=(6.4, 3.6))
    points = sorted(points, key=lambda p: p.width)
    widths = [p.width for p in points]
    ax.plot(widths, [p.speedup for p in points], "o-", label=f"INT8 (QDQ) at batch {points[0].batch}")
    ax.axhline(1.0, color="grey", lw=1, ls="--", label="break-even")
    cross = crossover(points, margin)
    if cross is not None:
        ax.axvline(cross, color="tab:green", lw=1, ls=":", label=f"crossover: width {cross}")
    ax.set_xscale("log", base=2)
    ax.set_xticks(widths, [str(w) for w in widths])
    ax.set_xlabel("layer width (units per hidden layer)")
    ax.set_ylabel("speed-up (FP32 time / INT8 time)")
    ax.set_title("When do INT8 kernels pay off? Synthetic 3-layer MLP, 1 thread", y=1.0)
    ax.legend(loc="upper left")
    ax.grid(alpha=0.3)
    if new:  # margins in inches, no layout pass: the lesson shows the figure drawn once, uncropped
        fixed_margins(ax.figure, left=0.75, right=0.15, bottom=0.55, top=0.35)
    return ax.figure
