"""The class report's item analysis, in Chromium: a class with copies, honest mistakes and wrong predictions.

The class: four copies of the reference hand-in, a copy whose reader was disguised (names, comments, docstrings,
strings and layout changed, the same code), three copies with wrong predictions, three honest mistakes from the
bad corpus (a transposed confusion, a reader that raises, a hard-coded number) and a refused hand-in. It is
graded by ``python -m grader batch``, and the page must show: the copy group (every hand-in whose two modules are
the reference's or the disguised reader, and no other), every check's pass rate as the results give it, and each
prediction's answers with the ones the grader judged right marked. The expected values are worked out here from
the results and from how the class was built, not read from the page's own code.
"""
from __future__ import annotations

import csv
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from bad_submissions import corpus
from test_report import browser  # noqa: F401 - the class report's Chromium fixture (skips, or fails in CI)

from grader import core, similar
from grader.items import analyse
from grader.rubric import rubric, title
from lab.tools.submit import submit

REPO = Path(__file__).resolve().parent.parent
ARTIFACTS = REPO / "artifacts" / "browser"
MISTAKES = ("metrics_transposed", "reader_raises", "numbers_hard_coded")
SAME_CODE = ("numbers_hard_coded",)  # a mistake in a JSON file: the modules are the reference's
WRONG = {"wp1": {"clip_or_squash": {"clips": "wide", "squashes": "narrow"}},
         "wp2": {"clip_or_squash": {"clips": "wide", "squashes": "narrow"}},
         "wp3": {"clip_or_squash": {"clips": "wide", "squashes": "narrow"},
                 "formats": {"smaller": "QDQ", "same_input_ruler": True}}}


def disguised(source: str) -> str:
    """The reference reader with other names, comments, docstrings, strings and layout: the same code."""
    text = re.sub(r'""".*?"""', '"""Reads the digits in chunks."""', source, flags=re.S)
    text = text.replace("self.position", "self.cursor").replace("batch = ", "chunk = ").replace(
        "{self.input_name: batch}", "{self.input_name: chunk}").replace("must be at least 1", "too small")
    text = text.replace("    def get_next(self):", "    # hand the next chunk\n\n    def get_next(  self ):")
    return text.replace("    ", "  ")  # two-space indents


@pytest.fixture(scope="module")
def graded(tmp_path_factory, reference_workspace) -> Path:
    work = reference_workspace(tmp_path_factory.mktemp("reference") / "workspace")
    good = submit("reference", work, tmp_path_factory.mktemp("handed-in"))
    folder = tmp_path_factory.mktemp("class")
    files = corpus.read_zip(good)
    for s in ("g1", "g2", "g3", "g4"):
        (folder / f"{s}.zip").write_bytes(good.read_bytes())
    reader = files["calibration_reader.py"].decode()
    assert disguised(reader) != reader
    (folder / "copy_disguised.zip").write_bytes(corpus.with_file("calibration_reader.py", disguised(reader))(files))
    for s, answers in WRONG.items():
        def edit(doc, answers=answers):
            for q, a in answers.items():
                doc["predictions"][q]["answer"] = a
        (folder / f"{s}.zip").write_bytes(corpus.with_json("predictions.json", edit)(files))
    corpus.build(good, folder, [c for c in corpus.CASES if c.name in (*MISTAKES, "onnx_empty")])
    out = tmp_path_factory.mktemp("graded")
    proc = subprocess.run([sys.executable, "-m", "grader", "batch", str(folder), "--out", str(out), "-j", "2",
                           "--timeout", "5", "--no-progress",
                           "--ids-from-submission-json"], cwd=REPO, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return out


def results(out: Path) -> dict[str, dict]:
    return {p.stem: json.loads(p.read_text()) for p in (out / "results").glob("*.json")}


@pytest.mark.browser
def test_the_report_shows_copies_pass_rates_and_predictions_in_chromium(graded, browser):  # noqa: F811 - fixture
    res = results(graded)
    copies = sorted(["g1", "g2", "g3", "g4", "copy_disguised", *WRONG, *SAME_CODE])
    assert all(res[s]["status"] == "graded" for s in copies)
    context = browser.new_context(viewport={"width": 1500, "height": 1000})
    page = context.new_page()
    errors: list[str] = []
    page.on("console", lambda m: m.type == "error" and errors.append(m.text))
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        page.goto((graded / "report.html").as_uri())
        page.wait_for_load_state("load")
        # the copy group: every hand-in with the reference's modules (or the disguised reader), and no other
        groups = page.locator("#similar-code tbody tr").evaluate_all(
            "rs => rs.map(r => r.cells[2].innerText.split(', ').sort())")
        assert groups == [copies], groups
        # every check's pass rate: one row per check that ran, counts as the results give them
        table = page.locator("#pass-rates tbody tr").evaluate_all(
            "rs => rs.map(r => [r.cells[1].innerText, +r.cells[2].innerText, +r.cells[3].innerText])")
        checked = [d for d in res.values() if d.get("checks")]
        # a check counts for the hand-ins that attempted its lesson (its group's): handed in a file the lesson writes
        # (the reference hand-in here has no lesson 08 or 09 file), or, a prediction, answered it
        lesson = {key: g.lesson for g in core.GROUPS for key in g.declared()}
        want = {}
        for d in checked:
            for c in d["checks"]:
                tried = (c["name"] in d["handin"]["predictions"] if c["part"] == "predictions" else
                         lesson[(c["part"], c["name"])] in d["handin"]["lessons"])
                if not tried:
                    continue
                k = want.setdefault(title(c["part"], c["name"]), [0, 0])
                k[0] += c["points"] >= c["max_points"]
                k[1] += 1
        assert {t: [p, n] for t, p, n in table} == want
        assert {n for _, _, n in table} == {len(checked)}  # every hand-in here made for its own variant
        # nobody is set apart whole; each hand-in only for the lessons it has no file of (08 and 09 here)
        apart = page.locator("#set-apart tbody tr").evaluate_all("rs => rs.map(r => r.cells[1].innerText)")
        missing = sorted({lesson[key] for key in lesson if key[0] != "predictions"} - set(
            checked[0]["handin"]["lessons"]))
        assert apart == [f"partial: no file of lesson(s) {', '.join(missing)} handed in; those lessons' checks are "
                         "left out of the learning signals"] * len(checked), apart
        bars = page.locator("#pass-rate-figure rect.bar").evaluate_all("rs => rs.map(r => +r.dataset.count)")
        assert bars == [round(100 * p / n) for _, p, n in table]
        # each prediction's answers, the grader's right ones marked: clip_or_squash has 3 wrong answers
        rows = page.locator("#answers-clip_or_squash tbody tr").evaluate_all(
            "rs => rs.map(r => [r.className, r.cells[0].innerText, +r.cells[1].innerText])")
        assert rows[0] == ["right", "clips=narrow, squashes=wide", len(checked) - 3]
        assert rows[1] == ["wrong", "clips=wide, squashes=narrow", 3]
        formats = page.locator("#answers-formats tbody tr.wrong td").first.inner_text()
        assert "smaller=QDQ" in formats
        told = next(c["message"] for c in res["wp1"]["checks"] if c["name"] == "clip_or_squash")
        assert told.splitlines()[0][:80] in page.locator("#wrong-feedback-clip_or_squash").inner_text()
        assert page.locator("#wrong-feedback-entry_tensor").count() == 0  # nobody was wrong there
        for q in rubric()["predictions"]:
            if q == "title":
                continue
            counts = page.locator(f"#prediction-{q} rect.bar").evaluate_all("rs => rs.map(r => +r.dataset.count)")
            assert sum(counts) == len(checked), q  # every graded hand-in's answer is in the chart
        marked = page.locator("#prediction-clip_or_squash rect.bar").first.get_attribute("data-label")
        assert marked.startswith("\u2713 ")
        # every lesson's score distribution: one panel per part, each hand-in once in each
        assert page.locator("#lesson-scores tbody tr").count() == len(analyse(res).parts)
        per_part = page.locator("#lesson-score-figure rect.bar").evaluate_all(
            "rs => rs.reduce((a, r) => (a[r.dataset.label] = (a[r.dataset.label] || 0) + +r.dataset.count, a), {})")
        assert set(per_part.values()) == {len(checked)}
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "class-report-items.png"), full_page=True)
        assert not errors, errors
    finally:
        context.close()


def test_similar_code_ignores_names_comments_strings_and_layout_but_not_logic():
    a = 'class R:\n    def f(self, x):  # add\n        """Doc."""\n        return x + "s"\n'
    b = "class Q:\n  def   g(self,\n        y):\n\n      return y + 'other words'\n"
    c = "class Q:\n  def g(self, y):\n      return y - 'other words'\n"
    assert similar.fingerprint(a) == similar.fingerprint(b) != similar.fingerprint(c)
    assert similar.fingerprint("def broken(:\n") != similar.fingerprint("def broken2(:\n")  # not tokenized: text
    records = {"a": {"calibration_reader.py": "r", "metrics.py": "m"}, "b": {"calibration_reader.py": "r",
               "metrics.py": "m"}, "c": {"calibration_reader.py": "r", "metrics.py": "other"},
               "d": {"calibration_reader.py": None, "metrics.py": None}, "e": {"calibration_reader.py": None,
               "metrics.py": None}}
    assert similar.groups(records) == [["a", "b"]]  # c differs in one module; hand-ins with neither are no group


def test_item_analysis_of_results_without_a_handin_record(tmp_path):
    """Results written before the record existed (or a hand-in whose files could not be read) still report."""
    check = {"part": "reader", "name": "contract", "points": 4, "max_points": 4, "passed": True, "message": ""}
    res = {"a": {"checks": [check], "parts": {"reader": {"points": 4, "max_points": 4}}},
           "b": {"checks": [], "status": "invalid"}}
    items = analyse(res)
    assert [(c.name, c.passed, c.graded) for c in items.checks] == [("contract", 1, 1)]
    assert items.predictions == [] and items.similar == [] and items.parts["reader"] == (7.0, [4.0])


def test_the_gradebook_and_results_hold_no_fingerprint_text_from_the_page(graded):
    """The record is the answers and hashes: no student source reaches the results or the report."""
    page = (graded / "report.html").read_text()
    assert "def get_next" not in page and "self.cursor" not in page
    with open(graded / "gradebook.csv", newline="") as f:
        assert "handin" not in next(csv.reader(f))


# ----- issue 38, item 5: learning signals apart from integrity and incomplete hand-ins -----

def _check(part: str, name: str, passed: bool, points: float = 1.0) -> dict:
    return {"part": part, "name": name, "points": points if passed else 0.0, "max_points": points, "passed": passed,
            "message": f"{name} {'passed' if passed else 'lost'}"}


def _result(passed: bool, lessons: list[str], made_for: str = "s", answered: tuple[str, ...] = ("clip_or_squash",),
            own: str = "s") -> dict:
    checks = [_check("reader", "contract", passed, 4), _check("acceptance", "fp32_gate", passed),
              _check("hidden", "heldout", passed, 2), _check("predictions", "clip_or_squash", passed)]
    return {"status": "graded", "checks": checks,
            "parts": {p: {"points": sum(c["points"] for c in checks if c["part"] == p), "max_points": 1}
                      for p in ("reader", "acceptance", "hidden", "predictions")},
            "instructor": {"variant": {"own": own, "made_for": made_for, "evidence": "test"}},
            "handin": {"predictions": {q: "x" for q in answered}, "code": {}, "lessons": lessons}}


CLASS = {"honest": _result(True, ["01", "02", "06"]),
         "slipped": _result(False, ["01", "02", "06"]),
         "copy": _result(False, ["01", "02", "06"], made_for="honest"),       # a classmate's files: another variant
         "partial": _result(False, ["01", "02"], answered=()),                  # no lesson 06 file, no answer given
         "old": {**_result(True, []), "handin": None}}                          # a result without the record


def test_pass_rates_count_only_own_variant_hand_ins_that_attempted_the_lesson():
    items = analyse(CLASS)
    rates = {(c.part, c.name): (c.passed, c.graded) for c in items.checks}
    assert rates[("reader", "contract")] == (2, 4)          # honest, old; slipped, partial (the copy left out)
    assert rates[("acceptance", "fp32_gate")] == (2, 3)     # partial handed in no lesson 06 file: not attempted
    assert rates[("hidden", "heldout")] == (2, 3)           # a hidden check is its lesson's (06)
    assert rates[("predictions", "clip_or_squash")] == (2, 3)  # partial did not answer it
    assert sorted(items.parts["acceptance"][1]) == [0.0, 1.0, 1.0]
    assert sorted(items.parts["reader"][1]) == [0.0, 0.0, 4.0, 4.0]
    apart = {a.student: a.why for a in items.apart}
    assert set(apart) == {"copy", "partial"}
    assert apart["copy"].startswith("made for another variant than its own (honest)")
    assert apart["partial"].startswith("partial: no file of lesson(s) 06 handed in")


def test_most_lost_leaves_out_other_variants_and_lessons_not_attempted(tmp_path):
    from grader import report

    (tmp_path / "results").mkdir()
    with open(tmp_path / "gradebook.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["student", "status", "score", "max"])
        for s, d in CLASS.items():
            w.writerow([s, "graded", "0", "8"])
            (tmp_path / "results" / f"{s}.json").write_text(json.dumps(d))
    lost = {(c.part, c.name): sorted(c.students) for c in report.summarize(tmp_path).lost}
    assert lost[("reader", "contract")] == ["partial", "slipped"]
    assert lost[("acceptance", "fp32_gate")] == lost[("hidden", "heldout")] == ["slipped"]
    page = report.render(report.summarize(tmp_path), "")
    assert 'id="set-apart"' in page and "made for another variant than its own (honest)" in page


def test_each_checks_lesson_is_its_groups():
    from grader import core
    from grader.items import check_lesson

    for group in core.GROUPS:
        for part, name in group.declared():
            if part != "predictions":
                assert check_lesson(part, name) == group.lesson, (part, name, group.lesson)


def test_the_handin_record_names_the_lessons_handed_in(tmp_path):
    from grader.items import handin_record

    files = {"submission.json": b"{}", "calibration_reader.py": b"", "regression.json": b"{}",
             "release/model.onnx": b""}
    path = tmp_path / "s.zip"
    path.write_bytes(corpus.pack(files, manifest=False))
    assert handin_record(path)["lessons"] == ["02", "06", "07"]
    folder = tmp_path / "nested.zip"  # a workspace zipped by hand inside its one folder
    folder.write_bytes(corpus.pack({f"workspace/{k}": v for k, v in files.items()}, manifest=False))
    assert handin_record(folder)["lessons"] == ["02", "06", "07"]
