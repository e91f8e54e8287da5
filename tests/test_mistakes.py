"""One mistake, one charge, as code: each mistake of ``grader.mistakes`` is charged by one group, under one of its own
checks, and read only by groups that run after it; ``grader.core`` refuses any other order when it is imported."""
from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path
from typing import cast

import pytest

from grader import core, mistakes
from grader.context import Context, UndeclaredMistake
from grader.mistakes import MISTAKES, READER_SIZES, SUMMARY_PERCENTAGE
from grader.rubric import rubric
from grader.submission import Submission

REPO = Path(__file__).resolve().parent.parent


def by_part(part: str, check: str):
    return next(g for g in core.GROUPS if (part, check) in g.declared())


def test_every_mistake_is_charged_under_a_rubric_check_by_one_group_and_read_after_it():
    assert core.verify_mistakes(core.GROUPS) is core.GROUPS
    for m in MISTAKES:
        assert m.check in rubric()[m.part], m
        chargers = [g for g in core.GROUPS if m in g.charges]
        assert chargers == [by_part(m.part, m.check)]
        readers = [g for g in core.GROUPS if m in g.reads]
        assert readers, f"{m.key} is charged but no group reads it: it needs no registry entry"
        assert all(core.GROUPS.index(g) > core.GROUPS.index(chargers[0]) for g in readers)


def test_a_group_that_reads_a_mistake_before_its_charger_runs_is_refused():
    groups = list(core.GROUPS)
    reader, charger = by_part("calibration", "range_seen"), by_part("reader", "contract")
    groups.remove(charger)
    groups.insert(groups.index(reader) + 1, charger)
    with pytest.raises(core.GroupOrderError) as e:
        core.verify_mistakes(tuple(groups))
    assert "'reader_sizes'" in str(e.value) and charger.label in str(e.value) and reader.label in str(e.value)


@pytest.mark.parametrize("fault, words", [
    ("charged twice", "charged by 2 groups"),
    ("never charged", "charged by 0 groups"),
    ("charged under another group's check", "does not produce"),
    ("not in the registry", "does not hold"),
])
def test_the_registry_and_the_declarations_must_agree(fault, words, monkeypatch):
    charger, other = by_part("reader", "contract"), by_part("calibration", "range_seen")
    moved = dataclasses.replace(READER_SIZES, key="moved", part="calibration", check="range_seen")
    if fault == "charged twice":
        change = {other: dataclasses.replace(other, charges=(READER_SIZES,))}
    elif fault == "never charged":
        change = {charger: dataclasses.replace(charger, charges=())}
    elif fault == "charged under another group's check":
        monkeypatch.setattr(core, "MISTAKES", MISTAKES + (moved,))
        change = {charger: dataclasses.replace(charger, charges=(READER_SIZES, moved))}
    else:
        change = {charger: dataclasses.replace(charger, charges=(READER_SIZES,), reads=(moved,))}
    with pytest.raises(core.GroupOrderError, match=words):
        core.verify_mistakes(tuple(change.get(g, g) for g in core.GROUPS))


def test_importing_the_core_refuses_a_bad_order():
    """The check runs when ``grader.core`` is imported: lesson 06's groups reversed are refused."""
    code = ("from grader.lessons import lesson06_accept_or_reject as l06\n"
            "l06.GROUPS = l06.GROUPS[::-1]\n"
            "import grader.core\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode != 0 and "GroupOrderError" in done.stderr, done.stderr[-2000:]
    assert "reads mistake 'summary_percentage' before lesson 06 acceptance (summarize_code, secret_summarize)" \
        in done.stderr, done.stderr[-2000:]


def test_a_check_charges_and_reads_only_what_its_group_declares():
    ctx = Context(sub=cast(Submission, None))  # no hand-in: only the mistakes are used
    ctx.declare(frozenset({READER_SIZES}), frozenset())
    ctx.charge(READER_SIZES)
    with pytest.raises(UndeclaredMistake):
        ctx.charge(SUMMARY_PERCENTAGE)
    with pytest.raises(UndeclaredMistake):
        ctx.charged(READER_SIZES)
    ctx.declare(frozenset(), frozenset({READER_SIZES, SUMMARY_PERCENTAGE}))
    assert ctx.charged(READER_SIZES) and not ctx.charged(SUMMARY_PERCENTAGE)


def test_the_registry_is_data():
    assert all(isinstance(m, mistakes.Mistake) for m in MISTAKES)
    assert len({m.key for m in MISTAKES}) == len(MISTAKES)
    assert READER_SIZES.charged_under().startswith("not charged here: charged once, under 02 the calibration reader")
