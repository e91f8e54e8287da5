"""Axe-core in Chromium on every executed lesson's accessible reading copy (``python -m lab reading-copy``): no
serious or critical WCAG 2.1 A/AA violation, every image with alt text, every lab table with column headers."""
from __future__ import annotations

from pathlib import Path

import pytest
from browser_support import axe_blocking, chromium_path, launched_chromium

from lab import palette
from lab.tools import reading_copy, run

NAMES = [nb.name for nb in run.discover()]
PAGE_FACTS = """() => ({
  images: [...document.querySelectorAll('.jp-OutputArea-output img')].map(i => i.getAttribute('alt') || ''),
  tables: [...document.querySelectorAll('table.lab-table')].map(t => t.querySelectorAll('th[scope=col]').length),
})"""


def test_every_contrast_fix_reaches_4_5_to_1_on_its_background():
    for selector, (color, background) in reading_copy.CONTRAST_FIXES.items():
        assert palette.contrast(color, background) >= 4.5, selector
    assert reading_copy.style_block().count("!important") == 2 * len(reading_copy.CONTRAST_FIXES)


@pytest.fixture(scope="module")
def chromium():
    if chromium_path() is None:
        pytest.skip("no Chromium on this machine")
    yield from launched_chromium(pytest.skip)


@pytest.mark.slow
@pytest.mark.browser
@pytest.mark.parametrize("name", NAMES)
def test_the_reading_copy_has_no_serious_or_critical_wcag_violation(lesson_suite, chromium, tmp_path, name):
    result = lesson_suite.runs[name]
    if not result.ok:
        pytest.skip(f"{name} did not run (test_notebooks reports why)")
    page_path = reading_copy.export([Path(result.output)], tmp_path)[0]
    page = chromium.new_page()
    try:
        page.goto(page_path.as_uri())
        blocking = axe_blocking(page)
        facts = page.evaluate(PAGE_FACTS)
    finally:
        page.close()
    assert not blocking, f"{name}: axe-core finds\n" + "\n".join(blocking)
    assert all(len(alt) > 20 for alt in facts["images"]), f"{name}: an image without alt text: {facts['images']}"
    assert all(n > 0 for n in facts["tables"]), f"{name}: a table without column headers"
