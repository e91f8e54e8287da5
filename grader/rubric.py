"""The rubric (``rubric.toml``): points per check, the title of each part, and what each check asks.

Read by the checks (``grader.context`` passes it on) and by the results and feedback (part titles, check titles,
the order of parts), so it sits below both: it imports nothing of the grader.
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


def rubric() -> dict:
    """The rubric file: part -> {title, check -> points} (the [titles] table apart: see ``title``)."""
    return {k: v for k, v in _rubric_file().items() if k != "titles"}


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
