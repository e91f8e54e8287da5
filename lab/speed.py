"""Latency and throughput of ONNX models on this CPU, measured honestly.

Every timing: one session per model with pinned threads, warm-up runs that are not
counted, then ``repeats`` timed runs; the median is reported (it ignores the odd run
that another process slowed down). A timing that decides anything is taken in ``ROUNDS`` rounds (``timed_rounds``):
each round times every model in turn, and the median of the rounds is reported with their first and third
quartiles (``lab.evidence.Timing``): the noise, which one round slowed by another process does not swamp. A
comparison is a time ratio, "time / FP32's" (below 1: faster than FP32), with the range the rounds' quartiles
allow (``lab.evidence.ratio``); two models whose ranges overlap are within noise.

Also: a synthetic MLP of any width, built with ``onnx.helper`` (no download), to find the width where INT8 kernels
start to pay off. In the core, not in a lesson: lesson 07 times its release candidates with it and lesson 09 its
recipes and the width sweep.
"""
from __future__ import annotations

import logging
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from onnxruntime.quantization import QuantFormat, QuantType, quantize_static

from lab import palette
from lab.graph import session
from lab.readers import ArrayReader
from lab.tables import format_rows

if TYPE_CHECKING:
    from lab import evidence  # deferred to the functions using it

logging.getLogger().setLevel(logging.ERROR)  # ORT's "consider pre-processing" hint, as in lab.convert

SYNTHETIC_INPUT = "x"
SYNTHETIC_OUTPUT = "y"
ROUNDS = 5
"""Rounds of a timing that decides anything: one round can land on a slow moment of the machine (lesson 09 once
recorded 1.19x FP32's time for a model whose five re-timings gave 0.81-0.82x); the median of five cannot, and
their quartiles show how far the machine moved."""
RATIO_HEADING = "time / FP32's"
"""The one name of a comparison of speed: the model's time over FP32's (below 1: faster), never a speed-up."""


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
    """(model, batch) -> baseline median / model median; above 1 means faster than the baseline.

    One round each: for a table, ``ratios`` of ``timed_rounds`` (the time ratio, with the noise)."""
    base = {r.batch: r.median_ms for r in rows if r.model == baseline}
    if not base:
        raise ValueError(f"no timings for the baseline {baseline!r}; models timed: {sorted({r.model for r in rows})}")
    return {(r.model, r.batch): base[r.batch] / r.median_ms for r in rows if r.batch in base}


def format_timings(rows: list[Timing], baseline: str = "FP32") -> str:
    """A fixed-width table of one round: model, batch, median ms, p90 ms, samples/s, time / the baseline's."""
    ratio = speedups(rows, baseline) if any(r.model == baseline for r in rows) else {}
    heading = f"time / {baseline}'s"
    w = max([12, *(len(r.model) for r in rows)])
    head = f"{'model':<{w}} {'batch':>6} {'median ms':>10} {'p90 ms':>9} {'samples/s':>11} {heading:>{len(heading)}}"
    lines = [head, "-" * len(head)]
    for r in rows:
        x = ratio.get((r.model, r.batch))
        lines.append(f"{r.model:<{w}} {r.batch:>6} {r.median_ms:>10.3f} {r.p90_ms:>9.3f} {r.throughput:>11.0f} "
                     f"{(f'{1 / x:.2f}' if x else '-'):>{len(heading)}}")
    return "\n".join(lines)


# ---- rounds: the timings that decide anything ----------------------------------------------------------------------
@dataclass(frozen=True)
class TimeRatio:
    """A model's time over a baseline's (``RATIO_HEADING``; below 1: faster), with the range the rounds allow.

    ``median`` is the ratio of the two medians; ``low`` and ``high`` are the model's low quartile over the
    baseline's high quartile and its high quartile over the baseline's low one (``lab.evidence.ratio``: the two
    timings' quartile ranges overlap exactly when [low, high] holds 1): a value inside [low, high] is one the
    rounds cannot tell this ratio from. One round (``rounds`` 1) has no range to show
    the noise: its low and high are the reading itself.
    """

    median: float
    low: float
    high: float
    rounds: int

    @classmethod
    def of(cls, model: evidence.Timing, baseline: evidence.Timing) -> TimeRatio:
        from lab import evidence  # deferred: see the import at the top

        median, low, high = evidence.ratio(model, baseline)
        return cls(median, low, high, min(model.rounds, baseline.rounds))

    @classmethod
    def one(cls, x: float) -> TimeRatio:
        """A single reading (a ``toolbox/2`` record): no range, so no evidence of the noise."""
        return cls(x, x, x, 1)

    @classmethod
    def from_dict(cls, d: dict) -> TimeRatio:
        return cls(float(d["median"]), float(d["low"]), float(d["high"]), int(d["rounds"]))

    def within_noise(self, x: float = 1.0) -> bool:
        """Can the rounds not tell this ratio from ``x`` (1: the baseline's own time; or a limit)? Needs a range:
        one round never says within noise, nor beyond it (``measured``)."""
        return self.measured and self.low <= x <= self.high

    @property
    def measured(self) -> bool:
        """Taken in more than one round, so its range shows the noise."""
        return self.rounds > 1

    def above(self, x: float) -> bool:
        """Over ``x`` beyond the noise: even the range's low end is."""
        return self.measured and self.low > x

    def below(self, x: float) -> bool:
        """Under ``x`` beyond the noise: even the range's high end is."""
        return self.measured and self.high < x

    def against(self, x: float = 1.0, under: str = "faster", over: str = "slower") -> str:
        """The verdict against ``x`` in words: ``under``, ``over``, "within noise", or "one round" (no range)."""
        if not self.measured:
            return "one round: noise unknown"
        return under if self.below(x) else over if self.above(x) else "within noise"

    def text(self, fmt: str = ".2f") -> str:
        """``0.81 (0.80-0.82)``: the median and, in brackets, the range the rounds allow."""
        return f"{self.median:{fmt}} ({self.low:{fmt}}-{self.high:{fmt}})" if self.measured else \
            f"{self.median:{fmt}} (1 round)"

    def to_dict(self) -> dict:
        return {"median": round(self.median, 4), "low": round(self.low, 4), "high": round(self.high, 4),
                "rounds": self.rounds}


@dataclass(frozen=True)
class Series:
    """One model at one batch size timed in rounds: ``ms`` is the median and quartiles (low, high) of the rounds'
    times (each the median of ``repeats`` runs after ``warmup`` untimed ones): ``lab.evidence.timing``."""

    model: str
    batch: int
    threads: int
    warmup: int
    repeats: int
    ms: evidence.Timing

    @property
    def median_ms(self) -> float:
        return self.ms.median

    @property
    def throughput(self) -> float:
        """Samples per second at the median."""
        return self.batch / (self.ms.median / 1e3) if self.ms.median > 0 else float("inf")

    def to_dict(self) -> dict:
        return {"model": self.model, "batch": self.batch, "threads": self.threads, "warmup": self.warmup,
                "repeats": self.repeats, "rounds": self.ms.rounds, "median_ms": self.ms.median,
                "low_ms": self.ms.low, "high_ms": self.ms.high, "throughput": self.throughput}


def timed_rounds(models: dict[str, object], x: np.ndarray, batches: tuple[int, ...] = (1, 256), *,
                 rounds: int = ROUNDS, threads: int = 1, warmup: int = 5, repeats: int = 30,
                 min_seconds: float = 0.0) -> list[Series]:
    """Every model at every batch size in ``rounds`` rounds, each a ``benchmark`` of all of them in turn (so a slow
    moment of the machine hits them alike); per model and batch, the rounds' times as a ``lab.evidence.Timing``.
    Rows in ``benchmark``'s order."""
    from lab import evidence  # deferred: see the import at the top

    if rounds < 1:
        raise ValueError(f"rounds must be at least 1, got {rounds}")
    samples: dict[tuple[str, int], list[float]] = {}
    for _ in range(rounds):
        for t in benchmark(models, x, batches, threads=threads, warmup=warmup, repeats=repeats,
                           min_seconds=min_seconds):
            samples.setdefault((t.model, t.batch), []).append(t.median_ms)
    return [Series(model, batch, threads, warmup, repeats, evidence.timing(ms))
            for (model, batch), ms in samples.items()]


def ratios(rows: list[Series], baseline: str = "FP32") -> dict[tuple[str, int], TimeRatio]:
    """(model, batch) -> its time over the baseline's at that batch, with the rounds' range (``TimeRatio``)."""
    base = {r.batch: r.ms for r in rows if r.model == baseline}
    if not base:
        raise ValueError(f"no timings for the baseline {baseline!r}; models timed: {sorted({r.model for r in rows})}")
    return {(r.model, r.batch): TimeRatio.of(r.ms, base[r.batch]) for r in rows if r.batch in base}


def format_series(rows: list[Series], baseline: str = "FP32") -> str:
    """The rounds as a table: model, batch, median ms and the rounds' quartiles, samples/s, time / the baseline's
    with its range, and the verdict against the baseline (faster, slower or within noise: the two ranges overlap)."""
    ratio = ratios(rows, baseline) if any(r.model == baseline for r in rows) else {}
    table = []
    for r in rows:
        x = ratio.get((r.model, r.batch))
        own = r.model == baseline
        table.append({"model": r.model, "batch": r.batch, "median_ms": r.ms.median,
                      "range_ms": f"{r.ms.low:.3f}-{r.ms.high:.3f}", "throughput": r.throughput,
                      "ratio": "1.00" if own else x.text() if x else None,
                      "verdict": "" if own or x is None else x.against(1.0)})
    return format_rows(table, [("model", "model", ""), ("batch", "batch", "d"), ("median_ms", "median ms", ".3f"),
                               ("range_ms", "quartiles ms", ">"), ("throughput", "samples/s", ".0f"),
                               ("ratio", f"time / {baseline}'s", ">"), ("verdict", "verdict", "")])


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
    """FP32 against INT8 (QDQ) for one synthetic width at one batch size: the medians of the rounds and INT8's time
    over FP32's with the range the rounds allow (``ratio_low``, ``ratio_high``; a point of one round has none)."""

    width: int
    batch: int
    fp32_ms: float
    int8_ms: float
    ratio_low: float | None = None
    ratio_high: float | None = None
    rounds: int = 1

    @property
    def time_ratio(self) -> TimeRatio:
        """INT8's time over FP32's (below 1: INT8 is faster), with its range."""
        median = self.int8_ms / self.fp32_ms
        if self.rounds < 2 or self.ratio_low is None or self.ratio_high is None:
            return TimeRatio.one(median)
        return TimeRatio(median, self.ratio_low, self.ratio_high, self.rounds)

    @property
    def speedup(self) -> float:
        """FP32's time over INT8's (above 1: INT8 is faster); lesson 09 prints ``time_ratio`` instead."""
        return self.fp32_ms / self.int8_ms

    def to_dict(self) -> dict:
        return {"width": self.width, "batch": self.batch, "fp32_ms": self.fp32_ms, "int8_ms": self.int8_ms,
                "time_ratio": self.time_ratio.to_dict()}


def width_sweep(widths: tuple[int, ...] = (64, 256, 1024), batch: int = 64, *, depth: int = 3,
                threads: int = 1, warmup: int = 3, repeats: int = 15, seed: int = 0,
                rounds: int = ROUNDS) -> list[WidthPoint]:
    """For each width, build the synthetic MLP and quantize it (QDQ); then time FP32 and INT8 of every width at
    ``batch`` in ``rounds`` rounds (``timed_rounds``: each round times them all in turn)."""
    from lab import evidence  # deferred: see the import at the top

    if rounds < 1:
        raise ValueError(f"rounds must be at least 1, got {rounds}")
    points = []
    with tempfile.TemporaryDirectory(prefix="lab-speed-") as tmp:
        models, inputs = {}, {}
        for width in widths:
            fp32 = synthetic_mlp(width, depth=depth, seed=seed)
            int8 = quantize_synthetic(fp32, tmp, seed=seed)
            # the FP32 file quantize_synthetic wrote: a session from a file skips serializing the model again
            models[width] = {"FP32": Path(tmp) / f"{fp32.graph.name}.fp32.onnx", "INT8": int8}
            inputs[width] = np.random.default_rng(seed + 1).random((batch, width), dtype=np.float32)
        samples: dict[tuple[int, str], list[float]] = {}
        for _ in range(rounds):
            for width in widths:
                for kind, model in models[width].items():
                    t = time_model(model, inputs[width], threads=threads, warmup=warmup, repeats=repeats)
                    samples.setdefault((width, kind), []).append(t.median_ms)
        for width in widths:
            fp32_ms, int8_ms = evidence.timing(samples[(width, "FP32")]), evidence.timing(samples[(width, "INT8")])
            ratio = TimeRatio.of(int8_ms, fp32_ms)
            points.append(WidthPoint(width, batch, fp32_ms.median, int8_ms.median, ratio.low, ratio.high,
                                     ratio.rounds))
    return points


def crossover(points: list[WidthPoint], margin: float = 1.1) -> int | None:
    """The smallest width from which INT8 stays faster than FP32 beyond the noise; None if never.

    "Stays": every wider point measured is faster too, so one lucky narrow point does not count. "Beyond the noise":
    a point's whole time-ratio range (its rounds) is under 1; a point of one round has no range, so it must be
    under 1 / ``margin`` instead (10 % by default: above the few percent that repeated runs differ by).
    """
    def faster(p: WidthPoint) -> bool:
        r = p.time_ratio
        return r.below(1.0) if r.measured else r.median * margin < 1.0

    points = sorted(points, key=lambda p: p.width)
    for i, p in enumerate(points):
        if all(faster(q) for q in points[i:]):
            return p.width
    return None


def format_sweep(points: list[WidthPoint]) -> str:
    """The width sweep as a table: FP32's and INT8's medians, INT8's time over FP32's with its range, and the
    verdict (faster, slower or within noise)."""
    rows = [{"width": p.width, "batch": p.batch, "fp32_ms": p.fp32_ms, "int8_ms": p.int8_ms,
             "ratio": p.time_ratio.text(), "verdict": p.time_ratio.against(1.0, "INT8 faster", "INT8 slower")}
            for p in points]
    return format_rows(rows, [("width", "width", "d"), ("batch", "batch", "d"), ("fp32_ms", "FP32 ms", ".3f"),
                              ("int8_ms", "INT8 ms", ".3f"), ("ratio", f"INT8 {RATIO_HEADING}", ">"),
                              ("verdict", "verdict", "")])


def plot_sweep(points: list[WidthPoint], margin: float = 1.1, ax=None):
    """INT8's time over FP32's against layer width (log scale), each point's range as an error bar, with the
    break-even line and the crossover."""
    import matplotlib.pyplot as plt  # deferred: 1.8 s to import (python -X importtime); only figures need it

    from lab.plots import fixed_margins  # deferred: lab.plots imports matplotlib, as above

    new = ax is None
    if new:
        _, ax = plt.subplots(figsize=(6.4, 3.6))
    points = sorted(points, key=lambda p: p.width)
    widths = [p.width for p in points]
    r = [p.time_ratio for p in points]
    ax.errorbar(widths, [x.median for x in r], yerr=[[x.median - x.low for x in r], [x.high - x.median for x in r]],
                fmt="o-", capsize=3,
                label=f"INT8 (QDQ) at batch {points[0].batch}: median, quartile range of the rounds")
    ax.axhline(1.0, color=palette.NEUTRAL, lw=1, ls="--", label="break-even (FP32's time)")
    cross = crossover(points, margin)
    if cross is not None:
        ax.axvline(cross, color=palette.CYCLE[2], lw=1, ls=":", label=f"crossover: width {cross}")
    ax.set_xscale("log", base=2)
    ax.set_xticks(widths, [str(w) for w in widths])
    ax.set_xlabel("layer width (units per hidden layer)")
    ax.set_ylabel(f"INT8 {RATIO_HEADING} (below 1: faster)")
    ax.set_title("When do INT8 kernels pay off? Synthetic 3-layer MLP, 1 thread", y=1.0)
    ax.set_ylim(0, max([1.0, *(x.high for x in r)]) * 1.45)  # room above the points and break-even for the legend
    ax.legend(loc="upper right")
    ax.grid(alpha=0.3)
    if new:  # margins in inches, no layout pass: the lesson shows the figure drawn once, uncropped
        fixed_margins(ax.figure, left=0.75, right=0.15, bottom=0.55, top=0.35)
    return ax.figure
