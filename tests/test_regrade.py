"""``grader regrade``: a class graded, the rubric changed, the class graded again, and what moved written down.

The rubric change is real (a copy of rubric.toml with two prices changed, read by the grader in this process): the
reader's contract costs 1 point instead of 4 and lesson 03's max abs error 4 instead of 3, so a hand-in that
passed both falls by 2, and the one that hard-coded a number moves on both. The change report
names each student's old and new score and each changed check with why; with ``--never-lower`` no published grade
falls, and the gradebook holds the previous score and the published one beside the new.
"""
from __future__ import annotations

import csv
import json
import math
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from bad_submissions import corpus

from grader import rubric as rubric_mod
from grader.batch import batch
from grader.export import export
from grader.regrade import regrade
from lab.tools.submit import submit

CASES = [c for c in corpus.CASES if c.name in ("numbers_hard_coded", "onnx_empty")]


@pytest.fixture(scope="module")
def good_zip(tmp_path_factory, reference_workspace) -> Path:
    work = reference_workspace(tmp_path_factory.mktemp("reference") / "workspace")
    return submit("reference", work, tmp_path_factory.mktemp("handed-in"))


@pytest.fixture
def graded(good_zip, tmp_path) -> tuple[Path, Path]:
    folder, out = tmp_path / "class", tmp_path / "out"
    corpus.build(good_zip, folder, CASES)
    for s in ("g1", "g2"):
        (folder / f"{s}.zip").write_bytes(good_zip.read_bytes())
    with ThreadPoolExecutor(1) as ex:
        batch(folder, out, executor=ex, progress=False, ids_from_submission=True)  # copies of one hand-in
    return folder, out


@pytest.fixture
def changed_rubric(tmp_path, monkeypatch):
    text = rubric_mod.RUBRIC_PATH.read_text()
    assert "\ncontract = 4 " in text and "\nmax_abs_error = 3 " in text
    path = tmp_path / "rubric.toml"
    path.write_text(text.replace("\ncontract = 4 ", "\ncontract = 1 ").replace("\nmax_abs_error = 3 ",
                                                                              "\nmax_abs_error = 4 "))
    monkeypatch.setattr(rubric_mod, "RUBRIC_PATH", path)
    rubric_mod._rubric_file.cache_clear()
    yield
    rubric_mod._rubric_file.cache_clear()


def book(out: Path) -> dict[str, dict]:
    with open(out / "gradebook.csv", newline="") as f:
        return {r["student"]: r for r in csv.DictReader(f)}


def regraded(folder: Path, out: Path, never_lower: bool):
    with ThreadPoolExecutor(1) as ex:
        return regrade(folder, out, never_lower, executor=ex, progress=False, ids_from_submission=True)


def test_a_regrade_after_a_rubric_change_writes_the_change_report(graded, changed_rubric):
    folder, out = graded
    before = book(out)
    here, changes = regraded(folder, out, never_lower=False)
    by = {c.student: c for c in changes}
    assert sorted(by) == sorted(before)
    g1 = by["g1"]
    assert g1.score_before == float(before["g1"]["score"]) and g1.score_after == g1.score_before - 2
    contract = next(k for k in g1.checks if (k.part, k.name) == ("reader", "contract"))
    assert (contract.before, contract.max_before, contract.after, contract.max_after) == (4, 4, 1, 1)
    assert "the rubric prices it at 1 (was 4); the same share earned" in contract.why
    assert sorted(k.name for k in g1.checks) == ["contract", "max_abs_error"]  # nothing else moved
    hard = by["numbers_hard_coded"]
    assert {k.name for k in hard.checks} == {"contract", "max_abs_error"}
    assert by["onnx_empty"].checks == [] and not by["onnx_empty"].moved  # refused: 0 before and after
    # the files: the class summary, one report per student who moved, the results before, both versions
    summary = (here / "changes.md").read_text()
    assert "4 hand-in(s) graded again: 3 changed, 0 up, 3 down" in summary and "| g1 |" in summary
    assert "the rubric prices it at 1 (was 4)" in (here / "changes" / "g1.md").read_text()
    assert not (here / "changes" / "onnx_empty.md").exists()
    assert json.loads((here / "before" / "results" / "g1.json").read_text())["score"] == g1.score_before
    assert json.loads((here / "changes.json").read_text())["students"][0]["checks"] is not None
    after = book(out)
    assert float(after["g1"]["previous_score"]) == float(before["g1"]["score"])
    assert float(after["g1"]["score"]) == g1.score_after
    assert float(after["g1"]["published"]) == float(after["g1"]["score"])  # without never-lower: the new grade


def test_never_lower_keeps_every_published_grade(graded, changed_rubric, tmp_path):
    folder, out = graded
    before = book(out)
    here, changes = regraded(folder, out, never_lower=True)
    after = book(out)
    fell = [c for c in changes if c.score_after is not None and c.score_before is not None
            and c.score_after < c.score_before]
    assert {c.student for c in fell} >= {"g1", "g2"}, "the rubric change must lower someone for this test to bite"
    old_max, new_max = float(before["g1"]["max"]), float(after["g1"]["max"])
    assert new_max == old_max - 2  # the repricing: contract 4 -> 1, max_abs_error 3 -> 4
    for s, row in before.items():
        share = float(row["score"]) / old_max
        # never lower compares shares of the points possible; no one ends above them
        assert share - 0.0001 <= float(after[s]["published"]) / new_max <= 1, s
        assert float(after[s]["previous_score"]) == float(row["score"])
    assert all(c.held for c in fell)
    summary = (here / "changes.md").read_text()
    assert "never lower: " in summary and f"The points possible changed from {old_max:g} to {new_max:g}" in summary
    assert "share of the points possible published before" in (here / "changes" / "g1.md").read_text()
    # the LMS gets the published grade, not the lowered score, and never more than the points possible
    roster = tmp_path / "roster.csv"
    roster.write_text("student,idnumber,canvas_id\n" + "".join(f"{s},{s},{n}\n" for n, s in enumerate(before)))
    export(out, roster, ("moodle", "canvas"))
    lines = {r[0]: r[2] for r in csv.reader((out / "lms" / "moodle.csv").open()) if r[0] != "ID number"}
    kept = math.ceil(float(before["g1"]["score"]) / old_max * new_max * 100) / 100  # the share, up to a hundredth
    assert float(lines["g1"]) == kept > float(after["g1"]["score"])
    canvas = list(csv.reader((out / "lms" / "canvas.csv").open()))
    assert float(canvas[1][-1]) == new_max and all(float(r[-1]) <= new_max for r in canvas[2:])
    # a second regrade keeps the grade published first (the gradebook's published column), not the lowered score
    _, again = regraded(folder, out, never_lower=True)
    assert {c.student: c.published for c in again}["g1"] == float(lines["g1"])
    assert (out / "regrades" / "2" / "changes.md").is_file()


def test_resume_and_regrade_keep_published_grades_and_adjustments(graded, changed_rubric, good_zip):
    folder, out = graded
    proc = _cli("adjust", str(out), "--student", "g2", "--points", "2", "--comment", "prose answer graded by hand")
    assert proc.returncode == 0, proc.stderr
    assert "+2 point(s): prose answer graded by hand" in (out / "feedback" / "g2.md").read_text()
    regraded(folder, out, never_lower=True)
    published = {s: r["published"] for s, r in book(out).items()}
    assert book(out)["g2"]["adjustment"] == "+2"
    assert book(out)["g2"]["adjustment_comment"] == "prose answer graded by hand"
    feedback = (out / "feedback" / "g2.md").read_text()
    assert feedback.count("Adjusted by your instructor") == 1 and "prose answer graded by hand" in feedback
    # a late hand-in arrives: --resume grades it alone and keeps everyone's published grade and adjustment
    (folder / "g3.zip").write_bytes(good_zip.read_bytes())
    with ThreadPoolExecutor(1) as ex:
        batch(folder, out, resume=True, executor=ex, progress=False, ids_from_submission=True)
    after = book(out)
    assert {s: r["published"] for s, r in after.items() if s != "g3"} == published
    assert after["g3"]["status"] == "graded" and after["g3"]["published"] == ""  # its score is its grade
    assert after["g2"]["adjustment"] == "+2" and "prose answer" in (out / "feedback" / "g2.md").read_text()
    # a fresh batch would drop the published grades: it refuses and names the commands that keep them
    with pytest.raises(SystemExit, match="holds published grades"):
        batch(folder, out, progress=False, ids_from_submission=True)
    # nor does grade --out into the batch's folder: it would replace one result and leave the gradebook
    proc = _cli("grade", str(folder / "g3.zip"), "--out", str(out), "--ids-from-submission-json")
    assert proc.returncode == 2 and "is a batch's folder" in proc.stderr and "regrade" in proc.stderr, proc.stderr
    # removing the adjustment takes it out of the gradebook and the feedback
    assert _cli("adjust", str(out), "--student", "g2", "--points", "0").returncode == 0
    assert "adjustment" not in book(out)["g2"] and "Adjusted by" not in (out / "feedback" / "g2.md").read_text()
    assert _cli("adjust", str(out), "--student", "nobody", "--points", "1", "--comment", "x").returncode == 2


def _cli(*args: str):
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "grader", *args], capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).resolve().parent.parent)


def test_a_refused_regrade_leaves_no_regrade_folder(graded, monkeypatch):
    """A regrade whose batch refuses before grading anything (a missing --roster, ...) leaves no regrades/N: the next
    one is numbered as if it had not been tried."""
    from grader import regrade as regrade_module

    folder, out = graded
    before = sorted(p.name for p in (out / "regrades").iterdir()) if (out / "regrades").is_dir() else []

    def refuse(*args, **kwargs):
        raise SystemExit("refused before grading")

    monkeypatch.setattr(regrade_module, "batch", refuse)
    with pytest.raises(SystemExit, match="refused before grading"):
        regrade_module.regrade(folder, out)
    after = sorted(p.name for p in (out / "regrades").iterdir()) if (out / "regrades").is_dir() else []
    assert after == before
