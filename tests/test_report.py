"""The class report (grader.report): a known batch (the reference hand-in plus the bad corpus) in Chromium.

The page is opened from disk (file://, no server) in Debian's Chromium, as the browser test launches it.
It must name the check most students lost, which the test works out itself from results/*.json.
"""
from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path

import pytest
from bad_submissions import corpus
from browser_support import axe_blocking, chromium_path, launched_chromium

from grader import report, report_items
from grader.report import write_report
from grader.rubric import rubric
from lab.tools.submit import submit

REPO = Path(__file__).resolve().parent.parent
ARTIFACTS = REPO / "artifacts" / "browser"
SVG = "{http://www.w3.org/2000/svg}"


def rows_all(out: Path) -> list[dict]:
    with open(out / "gradebook.csv", newline="") as f:
        return list(csv.DictReader(f))


def skip_unless_ci(reason: str) -> None:
    if os.environ.get("CI", "").lower() in {"1", "true", "yes"}:
        pytest.fail(f"CI=true but the report's browser test cannot run: {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="module")
def graded(tmp_path_factory, reference_workspace) -> Path:
    """OUT of `grader batch` over the reference hand-in and the bad corpus (it writes report.html), then
    `grader report OUT`."""
    work = reference_workspace(tmp_path_factory.mktemp("reference") / "workspace")
    good = submit("reference", work, tmp_path_factory.mktemp("handed-in"))
    folder = tmp_path_factory.mktemp("corpus")
    corpus.build(good, folder)
    (folder / "good.zip").write_bytes(good.read_bytes())
    out = tmp_path_factory.mktemp("graded")
    # each hand-in graded as its submission.json's student (the reference): under its file name each would be made
    # for another variant, which the report sets apart from the learning signals it checks here
    proc = subprocess.run([sys.executable, "-m", "grader", "batch", str(folder), "--out", str(out), "-j", "2",
                           "--timeout", "5", "--no-progress", "--ids-from-submission-json"], cwd=REPO,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (out / "report.html").is_file(), "the batch writes report.html itself"
    (out / "report.html").unlink()  # and `grader report OUT` writes it again
    proc = subprocess.run([sys.executable, "-m", "grader", "report", str(out)], cwd=REPO, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return out


def most_lost(out: Path) -> tuple[str, int]:
    """The check lost by the most submissions (ties: more points lost, then rubric part and name), worked out here:
    a learning signal, so only a hand-in made for its own variant that attempted the check's lesson (its group's)
    counts: handed in a file the lesson writes, or, a prediction, answered it."""
    from grader import core

    lesson = {key: g.lesson for g in core.GROUPS for key in g.declared()}
    lost: dict[tuple[str, str], list[float]] = {}
    for path in (out / "results").glob("*.json"):
        d = json.loads(path.read_text())
        variant = (d.get("instructor") or {}).get("variant") or {}
        record = d.get("handin") or {}
        for c in d.get("checks", []):
            tried = ("lessons" not in record or (c["name"] in record["predictions"] if c["part"] == "predictions"
                                                 else lesson[(c["part"], c["name"])] in record["lessons"]))
            if c["points"] < c["max_points"] and tried and variant.get("made_for") == variant.get("own"):
                lost.setdefault((c["part"], c["name"]), []).append(c["max_points"] - c["points"])
    (part, name), losses = min(lost.items(), key=lambda kv: (-len(kv[1]), -sum(kv[1]), kv[0]))
    return f"{rubric()[part].get('title', part)}: {name}", len(losses)


@pytest.fixture(scope="module")
def browser():
    if chromium_path() is None:
        skip_unless_ci("Chromium is not installed at /usr/bin/chromium (Debian: apt-get install chromium)")
    yield from launched_chromium(skip_unless_ci)


@pytest.mark.browser
def test_report_names_the_most_lost_check_in_chromium(graded, browser):
    html_path, svg = graded / "report.html", graded / "report.svg"
    assert html_path.is_file() and ET.fromstring(svg.read_text()).tag == "{http://www.w3.org/2000/svg}svg"
    context = browser.new_context(viewport={"width": 1500, "height": 1000})
    page = context.new_page()
    errors: list[str] = []
    requests: list[str] = []
    page.on("console", lambda m: m.type == "error" and errors.append(m.text))
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("request", lambda r: requests.append(r.url))
    try:
        page.goto(html_path.as_uri())
        page.wait_for_load_state("load")
        title, students = most_lost(graded)
        assert page.locator("#top-lost").inner_text().strip() == title
        first_row = page.locator("#lost-checks tbody tr").first.locator("td")
        assert first_row.nth(0).inner_text().startswith(title)
        assert int(first_row.nth(1).inner_text()) == students
        assert first_row.nth(3).inner_text().strip()  # one example feedback line
        # the figure is drawn (inline SVG, as wide as the page allows): one bar per status and bin of the scores, one
        # per lost check (the top one as tall as its count), one per bin of the grading times; nothing from a server
        assert page.locator("#figure").bounding_box()["width"] > 600
        bars = page.locator("#figure rect.bar").evaluate_all("rs => rs.map(r => [r.dataset.label, +r.dataset.count])")
        statuses = [r["status"] for r in rows_all(graded)]
        for status in ("graded", "invalid", "timeout"):
            assert sum(n for label, n in bars if label == status) == statuses.count(status), status
        assert sum(n for label, n in bars if label == "results") == len(statuses)
        assert page.locator(f'#figure rect.bar[data-label="{title}"]').get_attribute("data-count") == str(students)
        assert all(u.startswith(("file:", "data:")) for u in requests), requests
        # every submission that was not graded is there, with its status and its reason
        with open(graded / "gradebook.csv", newline="") as f:
            rows = [r for r in csv.DictReader(f) if r["status"] != "graded"]
        assert {r["status"] for r in rows} >= {"invalid", "timeout"}
        table = page.locator("#not-graded").inner_text()
        for r in rows:
            reason = json.loads((graded / "results" / f"{r['student']}.json").read_text())["reason"]
            assert r["student"] in table and reason.splitlines()[0][:60] in table
        statuses = page.locator("#statuses").inner_text()
        for status in ("invalid", "timeout"):
            assert f"{sum(r['status'] == status for r in rows)} {status}" in statuses
        assert "s of grading in all" in page.locator("#timing").inner_text()
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "class-report.png"), full_page=True)
        assert not errors, errors
        # WCAG 2.1 AA, as the lessons' reading copies are checked: axe-core in this Chromium, nothing serious
        blocking = axe_blocking(page)
        assert not blocking, "report.html: axe-core finds\n" + "\n".join(blocking)
    finally:
        context.close()


class Page(HTMLParser):
    """What a reader of the page gets: each figure's bars (label, count, fill, tooltip), each table's body rows as
    cell texts, and every element's ``title=`` tooltip."""

    def __init__(self, text: str):
        super().__init__()
        self.bars: dict[str, list[dict]] = {}
        self.tables: dict[str, list[list[str]]] = {}
        self.tooltips: list[str] = []
        self._svg = self._table = None
        self._bar: dict | None = None
        self._cell: list[str] | None = None
        self._in_title = False
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if "title" in a:
            self.tooltips.append(a["title"])
        if tag == "svg":
            self._svg = a["id"]
            self.bars[self._svg] = []
        elif tag == "rect" and a.get("class") == "bar":
            self._bar = {"label": a["data-label"], "count": a["data-count"], "fill": a["fill"], "title": ""}
            self.bars[self._svg].append(self._bar)
        elif tag == "title" and self._bar is not None:
            self._in_title = True
        elif tag == "table":
            self._table = a.get("id")
            self.tables[self._table] = []
        elif tag == "tr" and self._table is not None:
            self.tables[self._table].append([])
        elif tag == "td" and self._table is not None:
            self._cell = []

    def handle_endtag(self, tag):
        if tag == "svg":
            self._svg = None
        elif tag == "rect":
            self._bar = None
        elif tag == "title":
            self._in_title = False
        elif tag == "table":
            self._table = None
        elif tag == "tr" and self._table is not None and not self.tables[self._table][-1]:
            self.tables[self._table].pop()  # the header's row: no td
        elif tag == "td" and self._cell is not None:
            self.tables[self._table][-1].append("".join(self._cell).strip())
            self._cell = None

    def handle_data(self, data):
        if self._in_title:
            self._bar["title"] += data
        if self._cell is not None:
            self._cell.append(data)


def test_no_status_is_told_by_colour_alone_and_no_number_by_hover_alone(graded):
    """Every bar of every figure is a row of that figure's data table (its label, its count), not only a tooltip;
    a bar coloured by a status or a verdict says it in words, and a table row says the pass-rate band."""
    page = Page((graded / "report.html").read_text())
    assert not page.tooltips  # no title= attribute: a tooltip is read by no keyboard and no screen reader
    assert {"figure", "pass-rate-figure", "lesson-score-figure"} <= set(page.bars)
    assert any(svg.startswith("prediction-") for svg in page.bars)
    for svg, bars in page.bars.items():
        rows = [(label, count) for _, label, _, count in page.tables[f"{svg}-data"]]
        assert rows == [(b["label"], b["count"]) for b in bars], svg
        assert all(b["title"] == f"{b['label']}: {b['count']}" for b in bars)  # the tooltip holds nothing more
    by_status = [b for b in page.bars["figure"] if b["label"] in report.STATUS_COLORS]
    assert {b["label"] for b in by_status} >= {"graded", "invalid", "timeout"}
    assert all(b["fill"] == report.STATUS_COLORS[b["label"]] for b in by_status)  # the word is the colour's
    words = {report_items.RIGHT: ("(pass)", "right:"), report_items.MIXED: ("(partial)", "partly right:"),
             report_items.WRONG: ("(fail)", "wrong:")}
    for svg in [s for s in page.bars if s == "pass-rate-figure" or s.startswith("prediction-")]:
        for b in page.bars[svg]:
            assert any(w in b["label"] for w in words[b["fill"]]), (svg, b)
    bands = {row[-1] for row in page.tables["pass-rates"]}
    assert bands and bands <= {"pass", "partial", "fail"}
    for table in [t for t in page.tables if t.startswith("answers-")]:
        assert all(row[-1].split(":")[0] in ("\u2713 right", "\u2717 wrong", "partly right")
                   for row in page.tables[table])


def _fake_batch(out: Path, rows: list[dict]) -> None:
    (out / "results").mkdir(parents=True)
    with open(out / "gradebook.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["student", "status", "score", "max", "grader_version", "isolation"])
        for d in rows:
            w.writerow([d["student"], d["status"], d["score"], d["max_score"], "1.0.0", "bubblewrap"])
            (out / "results" / f"{d['student']}.json").write_text(json.dumps(d))


def test_handin_text_is_escaped(tmp_path):
    """A student id, a reason and a message from a hand-in are text on the page, never markup."""
    evil = '<script>alert("x")</script><img src=x onerror=alert(1)>'
    check = {"part": "reader", "name": "contract", "points": 0, "max_points": 2, "passed": False,
             "message": f"your reader said {evil}", "hidden": False, "evidence": []}
    _fake_batch(tmp_path, [
        {"student": "s1", "status": "graded", "score": 0, "max_score": 2, "seconds": 0.5, "checks": [check]},
        {"student": "s2-x", "status": "invalid", "score": 0, "max_score": 2, "seconds": 0.1, "checks": [],
         "reason": f"bad file {evil}"},
    ])
    text = write_report(tmp_path).read_text()
    assert "<script>alert" not in text and "<img src=x" not in text
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in text
    assert f'id="top-lost">{rubric()["reader"].get("title", "reader")}: contract</strong>' in text


def test_empty_and_all_graded_batches_still_report(tmp_path):
    _fake_batch(tmp_path / "empty", [])
    assert "0 submission(s)" in write_report(tmp_path / "empty").read_text()
    _fake_batch(tmp_path / "full", [{"student": "a", "status": "graded", "score": 2, "max_score": 2, "seconds": 1.0,
                                     "checks": []}])
    text = write_report(tmp_path / "full").read_text()
    assert "No check was lost" in text and "Every submission was graded" in text
    assert ET.fromstring((tmp_path / "full" / "report.svg").read_text()).find(f"{SVG}rect[@class='bar']") is not None


def test_chart_ticks_bins_and_bars():
    """grader.chart: ticks are round steps that reach the top; every value falls in one bin; a bar's height is
    its count on the panel's scale; text from a hand-in is escaped."""
    from grader import chart

    assert chart.nice_ticks(59) == [0, 10, 20, 30, 40, 50, 60]
    assert chart.nice_ticks(1.31) == [0, 0.25, 0.5, 0.75, 1, 1.25, 1.5]
    assert chart.nice_ticks(0) == [0, 0.2, 0.4, 0.6, 0.8, 1]
    assert chart.histogram([0, 0.5, 59, 58.99, 30, -1, 70, float("nan"), float("inf")], 59, 20) == [
        3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 3]
    panel = chart.stacked_histogram((0.1, 0.2, 0.3, 0.7), "t", "x", 10, [("a", "red", [1, 1, 9]),
                                                                         ("b", "blue", [1])])
    svg = ET.fromstring(chart.svg([panel], "<fig>"))
    bars = svg.findall(f"{SVG}rect[@class='bar']")
    assert [(b.get("data-label"), b.get("data-count")) for b in bars] == [("a", "2"), ("b", "1"), ("a", "1")]
    unit = panel.h / panel.y_top  # pixels per submission
    assert [float(b.get("height")) / unit for b in bars] == pytest.approx([2, 1, 1], abs=0.01)
    data = Page(chart.svg([panel], "f") + chart.data_table([panel], "figure"))
    assert data.tables["figure-data"] == [["t", "a", "1 to 1.5", "2"], ["t", "b", "1 to 1.5", "1"],
                                          ["t", "a", "9 to 9.5", "1"]]  # each bar: panel, label, bin, count
    rows = chart.horizontal_bars((0.5, 0.2, 0.3, 0.7), "t", "x", [("<b>evil</b>", 4), ("ok", 2)], "red", "none")
    text = chart.svg([rows], "f")
    assert "<b>evil" not in text and "&lt;b&gt;evil&lt;/b&gt;" in text
    widths = [float(b.get("width")) for b in ET.fromstring(text).findall(f"{SVG}rect[@class='bar']")]
    assert widths[0] == pytest.approx(2 * widths[1])


def test_the_report_imports_no_plotting_library(tmp_path):
    """The batch draws its report after the last result: no matplotlib to import then (it took about 1 s of CPU)."""
    _fake_batch(tmp_path, [{"student": "a", "status": "graded", "score": 2, "max_score": 2, "seconds": 1.0,
                            "checks": []}])
    code = (f"import sys\nfrom grader.report import write_report\nwrite_report({str(tmp_path)!r})\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('matplotlib', 'PIL')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stderr
