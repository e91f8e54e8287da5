"""The rubric (``rubric.toml``): points per check, the title of each part, and what each check asks.

Read by the checks (``grader.context`` passes it on) and by the results and feedback (part titles, check titles,
the order of parts), so it sits below both: it imports nothing of the grader. A course's own prices
(``grader.course``: part, check, points) are an argument, given by whoever holds the course (``ctx.grading.prices``).
"""
from __future__ import annotations

import tomllib
from functools import lru_cache
from pathlib import Path

RUBRIC_PATH = Path(__file__).resolve().with_name("rubric.toml")
HIDDEN = "hidden"  # the rubric part of the hidden checks: held-out data and the instructor's secret


@lru_cache(maxsize=1)
def _rubric_file() -> dict:
    with open(RUBRIC_PATH, "rb") as f:
        return tomllib.load(f)


def rubric(prices: tuple[tuple[str, str, float], ...] = ()) -> dict:
    """The rubric file: part -> {title, check -> points} (the [titles] table apart: see ``title``), with a course's
    ``prices`` in place of its own."""
    parts = {k: v for k, v in _rubric_file().items() if k != "titles"}
    for part, name, price in prices:
        parts[part] = {**parts[part], name: price}
    return parts


def committed_points(part: str, name: str) -> float:
    """The price ``rubric.toml`` gives a check, whatever the course's: the scale a check's per-rule costs are written
    in, so a repricing keeps each rule's share of the check (``grader.context.share_left``)."""
    return float(_rubric_file()[part][name])


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


def points(part: str, name: str, prices: tuple[tuple[str, str, float], ...] = ()) -> float:
    """A check's price: the course's (``prices``), else rubric.toml's."""
    try:
        return float(rubric(prices)[part][name])
    except KeyError:
        raise KeyError(f"rubric.toml has no [{part}] {name}") from None
