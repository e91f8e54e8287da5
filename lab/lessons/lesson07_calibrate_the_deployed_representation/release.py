"""Lesson 07's release recipe, chosen from numbers: each candidate's verdicts on both kernel families, its
saturation mechanism, and its latency on this CPU against FP32.

``convert_candidates`` converts the fixed selection once per recipe and keeps ONNX Runtime's own warnings;
``candidate_rows`` judges each on the tuning images under both families; ``time_candidates`` times them here
(``lab.speed``) in a few interleaved rounds, whose spread is the noise;
``choose`` applies the rule: among the recipes that hold on both families, the fastest here within that noise.
"""
from __future__ import annotations

import logging
import statistics
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from lab import kernels, tables
from lab.errors import LabError
from lab.lessons.lesson06_accept_or_reject import families
from lab.lessons.lesson07_calibrate_the_deployed_representation import scenario_checks

# The draft's settings (per-channel QDQ, QInt8 activations and weights) changed one way each: name -> (what, overrides)
CANDIDATES: dict[str, tuple[str, dict]] = {
    "per_channel": ("the draft: per-channel QDQ (U8S8 GEMM)", {}),
    "reduce_range": ("per-channel QDQ, 7-bit weights", {"reduce_range": True}),
    "per_tensor": ("per-tensor QDQ", {"per_channel": False}),
    "s8s8_qoperator": ("per-channel QOperator, QInt8 activations (S8S8)", {"quant_format": "QOperator"}),
    "u8u8": ("per-channel QDQ, QUInt8 activations and weights (U8U8)",
             {"activation_type": "QUInt8", "weight_type": "QUInt8"}),
}
DRAFT_SETTINGS = {"quant_format": "QDQ", "activation_type": "QInt8", "weight_type": "QInt8", "per_channel": True}
BATCHES = (1, 256)  # a camera reads one image at a time; 256 is a batch job
DECIDING_BATCH = 1  # the deployment: one camera frame per run
ROUNDS = 3  # timing rounds, interleaved; their spread is the noise the choice respects
NOISE_FLOOR = 0.05  # never call two latencies different by less than 5 %, however calm the rounds were


class ReleaseChoiceError(LabError):
    """No candidate recipe holds on every kernel family."""


@contextmanager
def ort_warnings() -> Iterator[list[str]]:
    """Collect the warnings ONNX Runtime's quantizer logs (``lab.convert`` keeps them out of every other cell)."""
    seen: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record):
            seen.append(record.getMessage())

    root, handler = logging.getLogger(), Keep(logging.WARNING)
    level, others = root.level, list(root.handlers)  # the others (a notebook's stderr) would print them again
    root.handlers = [handler]
    root.setLevel(logging.WARNING)
    try:
        yield seen
    finally:
        root.handlers = others
        root.setLevel(level)


def convert_candidates(source, out_dir, reader: Callable[[], object],
                       candidates: Mapping[str, tuple[str, dict]] = CANDIDATES) -> tuple[dict[str, Path], dict]:
    """Each candidate converted from ``source`` on the same selection (``reader()`` gives a fresh reader): paths, and
    per candidate the warnings ONNX Runtime logged other than its pre-processing hint (lesson 09 teaches that)."""
    paths, warnings = {}, {}
    for name, (_, overrides) in candidates.items():
        with ort_warnings() as seen:
            paths.update(families.convert_variants(source, out_dir, reader, DRAFT_SETTINGS, {name: ("", overrides)}))
        warnings[name] = [w for w in seen if "pre-processing" not in w and "pre-process" not in w]
    return paths, warnings


def gemm_kind(model) -> str:
    """The integer GEMM the model's MatMuls run on x86 (lesson 06's ``families.kernel_kind``)."""
    return families.kernel_kind(model)


def saturation_free(model) -> tuple[bool, str]:
    """Whether no U8S8 pair can pass int16, whatever the images (lesson 06's mechanism), and why."""
    kind = gemm_kind(model)
    if kind != "U8S8":
        return True, f"{kind} GEMM: no u8 x s8 pairs in int16"
    risky = sum(r["risky_pairs"] for r in families.saturation_risk(model))
    if risky == 0:
        return True, "U8S8, but no weight pair can pass int16"
    return False, f"U8S8 with {risky} weight pairs that can pass int16"


def candidate_rows(source, paths: Mapping[str, Path], x: np.ndarray, labels: np.ndarray,
                   candidates: Mapping[str, tuple[str, dict]] = CANDIDATES, seed: int = 0) -> list[dict]:
    """Each candidate on the tuning images under both families: daylight accuracy, the largest change over the
    judged scenarios, the scenarios that need work, the mechanism, and whether it holds (both pass, no mechanism).
    ``seed`` seeds the scenarios (the notebook's ``SEED``, as every other scenario check of the lesson)."""
    rows = []
    for name, path in paths.items():
        by_family = scenario_checks.compare_families(source, path, x, labels, kernels.FAMILIES, seed=seed)
        free, why = saturation_free(path)
        row = {"name": name, "recipe": candidates[name][0], "gemm": gemm_kind(path), "saturation_free": free,
               "mechanism": why}
        for family, results in by_family.items():
            judged = [r for r in results if r.judged]
            row[f"{family}_accuracy"] = next(r.int8_accuracy for r in results if r.name == scenario_checks.REFERENCE)
            row[f"{family}_error"] = max(r.max_abs_error for r in judged)
            row[f"{family}_needs_work"] = [r.name for r in results if r.needs_work]
        row["holds"] = free and not any(row[f"{f}_needs_work"] for f in kernels.FAMILIES)
        rows.append(row)
    return rows


def time_candidates(source, paths: Mapping[str, Path], x: np.ndarray, batches: Sequence[int] = BATCHES,
                    rounds: int = ROUNDS, repeats: int = 20) -> dict[tuple[str, int], list[float]]:
    """(name, batch) -> time against FP32 in each round (above 1: slower than FP32), one thread, on this CPU.

    Every round times FP32 and every candidate in turn, so a slow moment of the machine hits them alike."""
    from lab import speed  # deferred: only the timing cell needs it

    ratios: dict[tuple[str, int], list[float]] = {}
    models = {"FP32": source, **paths}
    for _ in range(rounds):
        rows = speed.benchmark(models, x, batches=tuple(batches), threads=1, warmup=3, repeats=repeats)
        for (name, batch), faster in speed.speedups(rows).items():
            if name != "FP32":
                ratios.setdefault((name, batch), []).append(1.0 / faster)
    return ratios


def noise(ratios: Mapping[tuple[str, int], Sequence[float]]) -> float:
    """The largest relative spread (max - min over the median) of any model's rounds, at least ``NOISE_FLOOR``."""
    spreads = [(max(r) - min(r)) / statistics.median(r) for r in ratios.values() if len(r) > 1]
    return max([NOISE_FLOOR, *spreads])


def choose(rows: Sequence[Mapping], ratios: Mapping[tuple[str, int], Sequence[float]],
           batch: int = DECIDING_BATCH) -> tuple[str, str]:
    """The release: among the rows that hold, the fastest at ``batch`` within ``noise``; a tie goes to the smaller
    largest change on the exact family. Returns (name, the reason in words); raises if none holds."""
    holding = [r for r in rows if r["holds"]]
    if not holding:
        raise ReleaseChoiceError("no candidate holds on every kernel family: "
                                 + "; ".join(f"{r['name']}: {r['mechanism']}, needs work "
                                             f"{r['exact_needs_work'] + r['saturating_needs_work']}" for r in rows))
    time = {r["name"]: statistics.median(ratios[(r["name"], batch)]) for r in holding}
    fastest, tol = min(time.values()), noise(ratios)
    tied = [r for r in holding if time[r["name"]] <= fastest * (1 + tol)]
    best = min(tied, key=lambda r: r[f"{kernels.EXACT}_error"])
    others = [r["name"] for r in tied if r is not best]
    why = (f"{best['name']}: holds on both families and runs {time[best['name']]:.2f}x FP32's time at batch {batch}"
           + (f", tied within the {tol:.0%} noise with {', '.join(others)}; the smaller largest change "
              f"({best['exact_error']:.3f}) breaks the tie" if others else
              f", the fastest of the {len(holding)} that hold (noise {tol:.0%})"))
    return best["name"], why


def format_candidates(rows: Sequence[Mapping], ratios: Mapping[tuple[str, int], Sequence[float]],
                      batches: Sequence[int] = BATCHES) -> str:
    """The candidates as a table: both families' numbers on the tuning images, the mechanism, latency here."""
    table = []
    for r in rows:
        row = dict(r, holds="yes" if r["holds"] else "no")
        for f in kernels.FAMILIES:
            row[f"{f}_needs"] = ", ".join(r[f"{f}_needs_work"]) or "-"
        for b in batches:
            row[f"t{b}"] = statistics.median(ratios[(r["name"], b)])
        table.append(row)
    e, s = kernels.EXACT, kernels.SATURATING
    return tables.format_rows(table, [
        ("name", "candidate", ""), ("gemm", "GEMM", ""),
        (f"{e}_accuracy", f"{e} acc", ".3f"), (f"{e}_error", f"{e} err", ".3f"), (f"{e}_needs", "needs work", ""),
        (f"{s}_accuracy", f"{s} acc", ".3f"), (f"{s}_error", f"{s} err", ".3f"), (f"{s}_needs", "needs work", ""),
        ("saturation_free", "no int16 pairs", ""), ("holds", "holds", ""),
        *[(f"t{b}", f"batch {b} time / FP32's", ".2f") for b in batches]])


def settings_of(name: str, candidates: Mapping[str, tuple[str, dict]] = CANDIDATES) -> dict:
    """The conversion settings of one candidate (the draft's, with its overrides)."""
    return {**DRAFT_SETTINGS, **candidates[name][1]}
