"""A measured number in a lesson's prose is printed by that lesson's own run, on both INT8 kernel families.

Every lesson runs once per family at its default parameters (the prose speaks of those, not of CI's small sizes),
each run under another student's id (``STUDENT_ID``), so each run calibrates on its own variant of the data: a
number the prose quotes from one variant's run is not printed by the other's. ``tests/prose_numbers.py`` says what
counts as a measured number.
"""
from __future__ import annotations

import os

import nbformat
import pytest
from conftest import run_lessons
from prose_numbers import backed, claims, printed_numbers, prose, unbacked

from lab import kernels
from lab.tools import run

STUDENT_IDS = {kernels.EXACT: "prose-ann", kernels.SATURATING: "prose-bo"}  # two variants, one per family


def _family_runs(tmp_path_factory) -> dict:
    runs = {}
    for family in kernels.FAMILIES:
        base = tmp_path_factory.mktemp(f"prose-{family}")
        old = os.environ.get(kernels.ENV_VAR)
        os.environ[kernels.ENV_VAR] = family
        try:
            runs[family] = run_lessons(run.discover(), base / "ws", base / "executed",
                                       overrides={"STUDENT_ID": STUDENT_IDS[family]})
        finally:
            os.environ.pop(kernels.ENV_VAR) if old is None else os.environ.__setitem__(kernels.ENV_VAR, old)
    return runs


@pytest.fixture(scope="module")
def family_runs(tmp_path_factory):
    return _family_runs(tmp_path_factory)


def test_every_lesson_ran_on_both_families(family_runs):
    failed = {family: [name for name, r in suite.runs.items() if not r.ok] for family, suite in family_runs.items()}
    assert not any(failed.values()), failed


@pytest.mark.parametrize("name", [nb.name for nb in run.discover()])
def test_prose_numbers_are_printed_by_the_run(family_runs, name):
    source = run.NOTEBOOKS / name
    problems = unbacked(source, [suite.out_dir for suite in family_runs.values()])
    assert not problems, "\n".join(problems)


def test_the_checker_catches_a_drifted_number():
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell("Accuracy 0.975, error 9 %, `per_channel=0.5`, 255 x 64 x 2 = 32,640, "
                                      "and 2,554 words."),
    ])
    found = {c.text for c in claims("99", nb)}
    assert found == {"0.975", "9 %", "2,554"}, found
    assert "32,640" not in prose("255 x 64 x 2 = 32,640") and "32,131" in prose("255 x 63 x 2 = 32,131")
    executed = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(outputs=[
        nbformat.v4.new_output("stream", name="stdout", text="accuracy 0.9750, share 0.092, words 2554\n")])])
    printed = printed_numbers(executed)
    by_text = {c.text: c for c in claims("99", nb)}
    assert backed(by_text["0.975"], printed) and backed(by_text["9 %"], printed) and backed(by_text["2,554"], printed)
    drifted = claims("99", nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("Accuracy 0.965.")]))
    assert not backed(drifted[0], printed)
