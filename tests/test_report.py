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
from pathlib import Path

import pytest

from bad_submissions import corpus
from browser_support import chromium_path, launched_chromium
from grader.rubric import rubric
from grader.report import write_report
from lab.tools.submit import submit

REPO = Path(__file__).resolve().parent.parent
ARTIFACTS = REPO / "artifacts" / "browser"


def skip_unless_ci(reason: str) -> None:
    if os.environ.get("CI", "").lower() in {"1", "true", "yes"}:
        pytest.fail(f"CI=true but the report's browser test cannot run: {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="module")
def graded(tmp_path_factory, reference_workspace) -> Path:
    """OUT of `grader batch` over the reference hand-in and the bad corpus (it writes report.html), then `grader report OUT`."""
    work = reference_workspace(tmp_path_factory.mktemp("reference") / "workspace")
    good = submit("reference", work, tmp_path_factory.mktemp("handed-in"))
    folder = tmp_path_factory.mktemp("corpus")
    corpus.build(good, folder)
    (folder / "good.zip").write_bytes(good.read_bytes())
    out = tmp_path_factory.mktemp("graded")
    proc = subprocess.run([sys.executable, "-m", "grader", "batch", str(folder), "--out", str(out), "-j", "2",
                           "--timeout", "5", "--no-progress"], cwd=REPO, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (out / "report.html").is_file(), "the batch writes report.html itself"
    (out / "report.html").unlink()  # and `grader report OUT` writes it again
    proc = subprocess.run([sys.executable, "-m", "grader", "report", str(out)], cwd=REPO, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return out


def most_lost(out: Path) -> tuple[str, int]:
    """The check lost by the most submissions (ties: more points lost, then rubric part and name), worked out here."""
    lost: dict[tuple[str, str], list[float]] = {}
    for path in (out / "results").glob("*.json"):
        for c in json.loads(path.read_text()).get("checks", []):
            if c["points"] < c["max_points"]:
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
    html_path, png = graded / "report.html", graded / "report.png"
    assert html_path.is_file() and png.stat().st_size > 10_000 and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
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
        # the figure is drawn (embedded PNG), the page asked nothing of any server
        assert page.locator("#figure").evaluate("img => img.complete && img.naturalWidth > 600")
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
    finally:
        context.close()


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
    assert (tmp_path / "full" / "report.png").is_file()


def test_loading_the_drawing_ahead_never_stops_a_batch():
    """The batch imports the report's matplotlib while its workers grade; without matplotlib that is silent, and the
    report itself then says why it is missing (after the grades are written)."""
    code = ("import sys\nsys.modules['matplotlib'] = None\nfrom grader.report import load_drawing\nload_drawing()\n"
            "print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
    code = ("import sys\nfrom grader.report import load_drawing\nload_drawing()\n"
            "print('matplotlib.figure' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "True", out.stderr
