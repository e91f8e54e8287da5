"""The rubric (``rubric.toml``): points per check, the title of each part, and what each check asks.

Read by the checks (``grader.context`` passes it on) and by the results and feedback (part titles, check titles,
the order of parts), so it sits below both: it imports nothing of the grader.
"""
from __future__ import annotations

import contextlib
import tomllib
from contextvars import ContextVar
from functools import lru_cache
from pathlib import Path

RUBRIC_PATH = Path(__file__).resolve().with_name("rubric.toml")
HIDDEN = "hidden"  # the rubric part of the hidden checks: held-out data and the instructor's secret
# A course's own prices (``grader.course``: part -> check -> points), in effect for the grades run under ``priced``:
# a context variable the rubric consults, so every reader of the rubric (checks, points possible, the gradebook's
# columns) sees the same prices, in a worker as in the batch's process.
_PRICES: ContextVar[tuple[tuple[str, str, float], ...]] = ContextVar("course_prices", default=())


@lru_cache(maxsize=1)
def _rubric_file() -> dict:
    with open(RUBRIC_PATH, "rb") as f:
        return tomllib.load(f)


def rubric() -> dict:
    """The rubric file: part -> {title, check -> points} (the [titles] table apart: see ``title``), with the
    course's prices where one is in effect (``priced``)."""
    parts = {k: v for k, v in _rubric_file().items() if k != "titles"}
    for part, name, price in _PRICES.get():
        parts[part] = {**parts[part], name: price}
    return parts


def committed_points(part: str, name: str) -> float:
    """The price ``rubric.toml`` gives a check, whatever the course's: the scale a check's per-rule costs are written
    in, so a repricing keeps each rule's share of the check (``grader.context.share_left``)."""
    return float(_rubric_file()[part][name])


@contextlib.contextmanager
def priced(prices: tuple[tuple[str, str, float], ...]):
    """Grade with these (part, check, points) prices instead of rubric.toml's."""
    token = _PRICES.set(prices)
    try:
        yield
    finally:
        _PRICES.reset(token)


def title(part: str, name: str) -> str:
    """What a check asks, in the student's words (rubric.toml [titles.PART]); its id if it has none."""
    return str(_rubric_file().get("titles", {}).get(part, {}).get(name, name))


def part_title(part: str) -> str:
    """A rubric part's title ("06 acceptance"); its id if it has none."""
    return str(rubric().get(part, {}).get("title", part))


def charged_under(part: str, name: str) -> str:
    """How a check names a mistake another check charges: "not charged here: charged once, under 06 acceptance:
    summarize() counts right, ...". One wording for every group, so a student finds the entry that took the points."""
    return f"not charged here: charged once, under {rubric()[part].get('title', part)}: {title(part, name)}"


def points(part: str, name: str) -> float:
    try:
        return float(rubric()[part][name])
    except KeyError:
        raise KeyError(f"rubric.toml has no [{part}] {name}") from None
