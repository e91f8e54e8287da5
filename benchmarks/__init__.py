"""Benchmarks of the workbook and the grader, each as a ratio against a floor measured in the same run.

Every ``benchmarks/<name>_bench.py`` module has a ``main() -> int``; ``python -m benchmarks`` runs them all.
"""
from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import TypeVar

Run = TypeVar("Run")


def alternating_pairs(n: int, floor: Callable[[int], Run], subject: Callable[[int], Run]) -> list[tuple[Run, Run]]:
    """``n`` pairs ``(floor(i), subject(i))`` run back to back, the floor first in even pairs and second in odd ones:
    the machine's speed drifts within a run, and a pair's two runs drift together."""
    pairs = []
    for i in range(n):
        if i % 2 == 0:
            first = floor(i)
            pairs.append((first, subject(i)))
        else:
            second = subject(i)
            pairs.append((floor(i), second))
    return pairs


def median_pair(pairs: list[tuple[Run, Run]], seconds: Callable[[Run], float]) -> tuple[float, tuple[Run, Run]]:
    """The median of the pairs' ratios (subject / floor), and the pair whose ratio is nearest to it."""
    ratio = statistics.median(seconds(s) / seconds(f) for f, s in pairs)
    return ratio, min(pairs, key=lambda p: abs(seconds(p[1]) / seconds(p[0]) - ratio))
