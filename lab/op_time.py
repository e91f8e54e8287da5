"""Latency on this CPU, and where the INT8 model's time goes: integer kernels, QuantizeLinear / DequantizeLinear, or
float ops.

``latency`` times one batch on the FP32 and on the INT8 model in ONNX Runtime with the audit's own session settings
(``lab.hybrid.lean_session``: one intra-op thread, no memory arena): the first ``BATCHES`` batches of the data, after
one warm-up run, ``runs`` rounds with the two models taking turns so a slow moment of the machine hits both; the median
decides and the quartiles say how far the machine moved (``lab.evidence.timing``). ``split`` runs a model once more
with ORT's profiler (``SessionOptions.enable_profiling``), sums the trace's ``*_kernel_time`` events (``cat ==
"Node"``, by ``args.op_name``) after its warm-up run, and deletes the trace file. Each op type falls in one ``KINDS``:
an op whose first input is an 8-bit tensor and that is no integer kernel by name (a MaxPool, Transpose or Reshape ORT
runs on 8-bit data) counts as ``8-bit``; every other op as ``float``. Shares are of the kernel time the profiler
recorded, which leaves out the session's own work around the kernels.
"""
from __future__ import annotations

import json
import tempfile
from functools import partial
from pathlib import Path

import numpy as np
import onnx

from lab import evidence, hybrid

BATCHES = 3   # the first batches of the data that are timed
RUNS = 5      # rounds over them: the median of 5 cannot land on one slow moment (lab.speed.ROUNDS)
TOP = 3       # op types named by their time
INTEGER = ("QGemm", "MatMulInteger", "ConvInteger", "DynamicQuantizeLinear", "MatMulIntegerToFloat",
           "DynamicQuantizeMatMul", "DynamicQuantizeLSTM", "QAttention", "QEmbedLayerNormalization", "QOrderedMatMul")
KINDS = {"integer": "integer kernels (QLinear*, QGemm, *Integer, ...)",
         "quantize": "QuantizeLinear / DequantizeLinear",
         "8-bit": "other ops on 8-bit tensors (pools, transposes, reshapes)",
         "float": "float ops"}


def kind(op: str, first_input: str | None = None) -> str:
    """The ``KINDS`` key of op type ``op`` whose first input has element type ``first_input`` (ORT's word)."""
    if op in ("QuantizeLinear", "DequantizeLinear"):
        return "quantize"
    if op.startswith(("QLinear", "NhwcQLinear")) or op in INTEGER or op.endswith("Integer"):
        return "integer"
    return "8-bit" if first_input in ("int8", "uint8") else "float"


def passes(session, feeds: list[dict], runs: int) -> None:
    """``runs`` rounds over ``feeds``."""
    for _ in range(runs):
        for feed in feeds:
            session.run(None, feed)


def timings(models: dict[str, onnx.ModelProto], feeds: list[dict], runs: int) -> tuple[dict, dict]:
    """Each model's wall time per batch (``evidence.Timing``), after one warm-up run, the models taking turns round
    by round; and the sessions' thread counts."""
    sessions = {k: hybrid.lean_session(m) for k, m in models.items()}
    for session in sessions.values():
        session.run(None, feeds[0])
    timed = evidence.in_turn({(k, i): partial(session.run, None, feed) for k, session in sessions.items()
                              for i, feed in enumerate(feeds)}, runs)
    samples = {k: [t for (model, _), ts in timed.items() if model == k for t in ts] for k in models}
    options = next(iter(sessions.values())).get_session_options()
    threads = {"intra_op": options.intra_op_num_threads, "inter_op": options.inter_op_num_threads}
    return {k: evidence.timing(v) for k, v in samples.items()}, threads


def trace(model: onnx.ModelProto, feeds: list[dict], runs: int, folder: str | Path | None = None) -> list[dict]:
    """ORT's profile of one warm-up run then ``runs`` rounds over ``feeds``, read; its file (in ``folder``, else a
    temporary folder) deleted."""
    with tempfile.TemporaryDirectory(prefix="lab-profile-") as tmp:
        session = hybrid.lean_session(model, profile_prefix=str(Path(folder or tmp) / "ort-profile"))
        passes(session, feeds[:1], 1)
        passes(session, feeds, runs)
        path = Path(session.end_profiling())
        try:
            return json.loads(path.read_text())
        finally:
            path.unlink(missing_ok=True)


def kernel_events(events: list[dict]) -> list[dict]:
    """The trace's kernel events after its first run (the warm-up)."""
    first = min((e for e in events if e.get("cat") == "Session" and e.get("name") == "model_run"),
                key=lambda e: e["ts"], default=None)
    after = first["ts"] + first["dur"] if first else 0
    return [e for e in events if e.get("cat") == "Node" and e.get("name", "").endswith("_kernel_time")
            and e["ts"] >= after]


def op_times(events: list[dict]) -> dict[tuple[str, str], float]:
    """(op type, its kind) -> the microseconds its kernels took, summed over ``kernel_events`` (one op type can run
    on float and on 8-bit tensors: a MaxPool)."""
    us: dict[tuple[str, str], float] = {}
    for e in kernel_events(events):
        op = e["args"]["op_name"]
        types: list[dict] = e["args"].get("input_type_shape") or [{}]
        key = (op, kind(op, next(iter(types[0]), None)))
        us[key] = us.get(key, 0.0) + float(e["dur"])
    return us


def split(us: dict[tuple[str, str], float], runs: int) -> dict:
    """The kernel time per run, each kind's share of it (percent) and the ``TOP`` op types by time."""
    total = sum(us.values())
    share = {k: 100 * sum(v for (_, kd), v in us.items() if kd == k) / total if total else 0.0 for k in KINDS}
    top = sorted(us.items(), key=lambda item: -item[1])[:TOP]
    return {"kernel_ms_per_run": total / 1000 / runs, "shares_percent": share,
            "top_ops": [{"op": op, "kind": kd, "share_percent": 100 * v / total} for (op, kd), v in top],
            "ops": sorted({op for op, _ in us})}


def latency(fp32: onnx.ModelProto, int8: onnx.ModelProto, feeds: list[dict], runs: int = RUNS) -> dict:
    """Both models' median wall time per batch of ``feeds`` on this CPU, their ratio, and each model's time split by
    kind of op (``split``, ORT's profiler, one more pass each)."""
    t, threads = timings({"fp32": fp32, "int8": int8}, feeds, runs)
    ratio, low, high = evidence.ratio(t["int8"], t["fp32"])
    return {"batches": len(feeds), "runs": runs, "threads": threads,
            **{k: {"median_ms": v.median * 1e3, "low_ms": v.low * 1e3, "high_ms": v.high * 1e3, "rounds": v.rounds}
               for k, v in t.items()},
            "ratio": ratio, "ratio_range": [low, high],
            "split": {k: split(op_times(trace(m, feeds, runs)), runs * len(feeds))
                      for k, m in (("int8", int8), ("fp32", fp32))}}


def first_batches(x, name: str, batch: int, dtype, count: int = BATCHES) -> list[dict]:
    """Feeds of the first ``count`` batches of ``x`` (as many as it holds)."""
    return [{name: np.ascontiguousarray(x[s:s + batch], dtype)} for s in range(0, min(len(x), count * batch), batch)]
