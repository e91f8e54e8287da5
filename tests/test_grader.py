"""The grader on real submissions: full marks for the reference run, the bad corpus, batch and resume.

One reference workspace is built with ``lab`` calls (grader.reference) and handed in with
``lab.tools.submit``; the bad corpus is generated from it and graded in one batch run with -j 2.
"""
from __future__ import annotations

import csv
import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from bad_submissions import corpus

from grader import core, sandbox
from grader.context import HIDDEN, points, rubric
from grader.lessons import lesson08_the_quantization_toolbox, lesson09_choosing_a_recipe
from grader.results import GradeResult
from lab import contract, schemas
from lab.tools.submit import submit

REPO = Path(__file__).resolve().parent.parent
TIMEOUT = "5"


def not_in_reference() -> float:
    """Points the reference workspace cannot earn: lessons 08 and 09's checks, as their groups declare them (the
    toolbox is too slow to rebuild in a test)."""
    groups = lesson08_the_quantization_toolbox.GROUPS + lesson09_choosing_a_recipe.GROUPS
    return sum(points(part, name) for group in groups for part, name in group.declared())


def not_handed_in_by_reference(message: str) -> bool:
    """A check lost only because the reference leaves out lessons 08 and 09's files (see ``not_in_reference``)."""
    return any(f"{rel} is not in the submission" in message for rel in ("toolbox.json", "outliers.json"))


@pytest.fixture(scope="module")
def good_zip(tmp_path_factory, reference_workspace) -> Path:
    work = reference_workspace(tmp_path_factory.mktemp("reference") / "workspace")
    return submit("reference", work, tmp_path_factory.mktemp("handed-in"))


@pytest.fixture(scope="module")
def corpus_run(good_zip, tmp_path_factory) -> tuple[Path, Path, list[corpus.Case]]:
    folder = tmp_path_factory.mktemp("corpus")
    cases = corpus.build(good_zip, folder)
    (folder / "good.zip").write_bytes(good_zip.read_bytes())
    out = tmp_path_factory.mktemp("graded")
    proc = subprocess.run([sys.executable, "-m", "grader", "batch", str(folder), "--out", str(out), "-j", "2",
                           "--timeout", TIMEOUT, "--no-progress",
                           "--ids-from-submission-json"], cwd=REPO, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return folder, out, cases


def test_reference_run_grades_full_marks(good_zip):
    result = core.grade(good_zip)
    failed = [f"{c.part}.{c.name}: {c.message}" for c in result.checks
              if not c.passed and not not_handed_in_by_reference(c.message)]
    assert result.status == "graded", result.reason
    assert not failed, failed
    assert [(c.part, c.name) for c in result.checks] == declared(), "the checks are not the ones the groups declare"
    assert result.max_score >= 40 and result.score == result.max_score - not_in_reference()
    doc = result.to_dict()
    schemas.validate("grade", doc)
    assert {"reader", "calibration", "growth", "formats", "acceptance", "hidden"} <= set(doc["parts"])
    md = result.to_markdown()
    assert f"Score: {result.score:g} / {result.max_score:g}" in md
    assert "| lesson | points | checks not met (points lost) |" in md
    gs = result.to_gradescope()
    assert gs["score"] == result.score and len(gs["tests"]) == len(result.checks)
    assert all({"name", "number", "score", "max_score", "status", "output", "visibility"} <= set(t)
               for t in gs["tests"])
    assert {t["status"] for t in gs["tests"]} <= {"passed", "failed"}
    assert all(t["visibility"] == ("after_published" if c.hidden else "visible")
               for t, c in zip(gs["tests"], result.checks))


def test_every_bad_submission_gets_its_status_and_message(corpus_run):
    folder, out, cases = corpus_run
    assert len(cases) >= 25
    wrong = []
    for case in cases:
        if case.needs_bwrap and not sandbox.bwrap_available():
            continue
        result = json.loads((out / "results" / f"{case.name}.json").read_text())
        schemas.validate("grade", {k: v for k, v in result.items() if k != "feedback"})
        text = corpus.feedback_text(result)
        if result["status"] != case.status or case.message not in text:
            wrong.append(f"{case.name}: got {result['status']}, want {case.status} with {case.message!r}; "
                         f"{text[:300]}")
        assert (out / "feedback" / f"{case.name}.md").exists()
    assert not wrong, "\n".join(wrong)


def test_gradebook_has_one_row_per_submission(corpus_run):
    folder, out, cases = corpus_run
    with open(out / "gradebook.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert sorted(r["student"] for r in rows) == sorted([c.name for c in cases] + ["good"])
    assert set(rows[0]) >= {"student", "status", "score", "max", "reader", "calibration", "grader_version"}
    by = {r["student"]: r for r in rows}
    assert by["good"]["status"] == "graded"
    assert float(by["good"]["score"]) == float(by["good"]["max"]) - not_in_reference() > 0
    assert {r["status"] for r in rows} <= {"graded", "invalid", "timeout", "error"}
    # a hard-coded number costs points, and the feedback shows reported beside recomputed
    assert float(by["numbers_hard_coded"]["score"]) < float(by["good"]["score"])
    md = (out / "feedback" / "numbers_hard_coded.md").read_text()
    assert "| right max abs error | 0.01 | 0.10" in md and "| **no** |" in md
    assert "Why this tolerance: one step of the Softmax output grid" in md
    # only the lost point has details: the summary table, then one entry
    entries = [ln for ln in md.splitlines()  # lessons 08 and 09 are not in the reference: see not_in_reference
               if ln.startswith("### ") and not ln.startswith(("### 08 ", "### 09 "))
               and "your choice holds up on unseen data" not in ln]
    assert entries == ["### 03 narrow / right / wide: the reported max abs error and accuracy recompute (2 / 3)"], \
        entries
    # a refused submission is 0 out of the points on offer, not 0 / 0
    assert by["not_a_zip"]["max"] == by["good"]["max"] and float(by["not_a_zip"]["score"]) == 0
    # re-zipped by hand, with the OS's leftovers or inside a folder: graded like the good one
    for name in ("zip_with_os_junk", "zip_in_a_folder"):
        assert by[name]["score"] == by["good"]["score"], name


def _result(checks, **kw):
    from grader.results import Check, Evidence

    return GradeResult("s1", "graded", [Check(*c[:5], [Evidence(*e) for e in c[5]] if len(c) > 5 else [])
                                        for c in checks], grader_version="9", **kw)


def test_full_marks_feedback_is_the_summary_table_only():
    md = _result([("reader", "contract", 4, 4, "keeps the contract", [("samples", 360, 360, 0, "exact")]),
                  ("calibration", "max_abs_error", 3, 3, "recomputed",
                   [("right max abs error", 0.1, 0.1, 1 / 255, "one grid step")])]).to_markdown()
    assert "| 02 the calibration reader | 4 / 4 | full marks |" in md and "Full marks" in md
    assert "## Where you lost points" not in md and "| what |" not in md and "one grid step" not in md


def test_lost_points_show_only_the_numbers_outside_their_tolerance():
    md = _result([("calibration", "max_abs_error", 2, 3, "1 of 3 wrong: narrow",
                   [("narrow max abs error", 0.5, 0.98, 1 / 255, "one grid step"),
                    ("right max abs error", 0.1, 0.1, 1 / 255, "one grid step")]),
                  ("release", "recipe", 0, 2, "release/model.onnx is not in the submission"),
                  ("release", "disjoint", 0, 1, "release/model.onnx is not in the submission")]).to_markdown()
    assert "| 03 narrow / right / wide | 2 / 3 | the reported max abs error and accuracy recompute (-1) |" in md
    assert "| narrow max abs error | 0.5 | 0.98 | 0.48 | 0.00392157 | **no** |" in md
    assert "right max abs error" not in md and "1 other reported number(s)" in md
    assert "Why this tolerance: one grid step." in md
    # one cause (a missing file) is one entry, not one per check
    assert md.count("release/model.onnx is not in the submission") == 1
    assert ("the recipe matches the fixtures and what was served; calibration and acceptance share no image (0 / 3)"
            in md)


def test_hidden_check_feedback_does_not_reveal_the_secret_lists():
    from grader.lessons import lesson06_accept_or_reject as acceptance

    case = acceptance.summarize_cases("instructor-secret")[-1]
    want = acceptance.expected_summary(case)
    wrong = dict(want, count=want["count"] - 1)
    kind, problem = acceptance._same(wrong, want)
    assert kind == "count" and str(want["count"]) in problem  # the visible cases name the expected value ...
    hidden = acceptance._without_values(kind, problem, {"returned": wrong})
    assert hidden == "its count is wrong" and str(want["count"]) not in hidden  # ... the secret one does not
    as_percent = dict(want, accuracy=100 * want["accuracy"])
    kind, problem = acceptance._same(as_percent, want)
    assert kind == "percentage" and "(a 0-1 ratio)" in problem
    assert acceptance._without_values(kind, problem, {"returned": as_percent}) == ("its accuracy is a percentage, "
                                                                                  "not a 0-1 ratio")


@pytest.mark.parametrize("isolate", [None, True, False], ids=["fork-server", "bubblewrap", "rlimits-only"])
def test_child_gets_no_secret_and_no_network(good_zip, tmp_path, monkeypatch, isolate):
    if isolate and not sandbox.bwrap_available():
        pytest.skip("bubblewrap is not available")
    from grader.submission import open_submission

    sub = open_submission(good_zip, tmp_path / "sub")
    (sub.root / "metrics.py").write_text(
        "import os, socket\n"
        "def summarize(p, l):\n"
        "    s = socket.socket()\n"
        "    s.settimeout(2)\n"
        "    try:\n"
        "        s.connect(('127.0.0.1', 9))\n"
        "        net = 'connected'\n"
        "    except OSError as e:\n"
        "        net = type(e).__name__ + ': ' + str(e)\n"
        "    return {'env': dict(os.environ), 'net': net}\n")
    monkeypatch.setenv("GRADER_SECRET", "s3cret-value")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "leak")
    child = sandbox.run(sub.root, {"task": "metrics", "module": "metrics", "function": "summarize",
                                   "cases": [{"name": "x", "labels": [1], "predictions": [1]}]}, isolate=isolate)
    assert child.status == "ok", child.message + child.stderr
    got = child.data["cases"][0]["returned"]
    assert "s3cret-value" not in json.dumps(got) and "AWS_SECRET_ACCESS_KEY" not in got["env"]
    if isolate is not False and sandbox.bwrap_available():
        assert got["net"] != "connected"


def test_a_crash_in_a_check_is_a_failed_check_and_the_hand_in_an_error(good_zip, monkeypatch):
    """The grader's own failure is never a grade: the other groups still run and show, but the status is error."""
    def boom(ctx):
        raise RuntimeError("boom")

    groups = tuple(dataclasses.replace(g, run=boom) if g.part == "growth" else g for g in core.GROUPS)
    monkeypatch.setattr(core, "GROUPS", groups)
    result = core.grade(good_zip)
    growth = [c for c in result.checks if c.part == "growth"]
    assert result.status == "error" and growth and all(c.points == 0 for c in growth)
    assert "RuntimeError: boom" in growth[0].message and "grader's fault" in growth[0].message
    assert "the grader failed on its side (RuntimeError: boom)" in result.reason and "not a grade" in result.reason
    assert result.score == result.max_score - sum(c.max_points for c in growth) - not_in_reference()


def declared() -> list[tuple[str, str]]:
    """Every (part, check) the groups declare, in the order grading produces them."""
    return [pc for group in core.GROUPS for pc in group.declared()]


def test_every_rubric_check_is_declared_by_exactly_one_group():
    r = rubric()
    in_rubric = {(part, name) for part, table in r.items() for name in table if name != "title"}
    every = [pc for group in core.GROUPS for pc in group.declared()]
    assert len(every) == len(set(every)), sorted(pc for pc in every if every.count(pc) > 1)
    assert set(every) - in_rubric == set(), "declared by a group, missing from rubric.toml"
    assert in_rubric - set(every) == set(), "in rubric.toml, declared by no group"
    assert core.possible_points() == sum(float(r[part][name]) for part, name in declared())


def test_groups_read_the_workspace_contract():
    """Every file a group needs is one the contract hands in, and messages name the lesson the contract says."""
    for group in core.GROUPS:
        for rel in group.needs:
            assert contract.handed_in(rel), f"lesson {group.lesson} needs {rel}, which lab.contract does not hand in"
            assert group.writer(rel) == contract.lesson_of(rel)
    assert contract.lesson_of("growth/narrow-NNN.onnx") == "04" and contract.lesson_of("predictions.json") == "01"
    assert contract.lesson_of("formats/model.calibration.json") == "05" and contract.lesson_of("notes.txt") is None


def test_a_group_that_fails_names_all_its_checks_hidden_ones_included(good_zip, monkeypatch):
    def boom(ctx):
        raise RuntimeError("boom")

    monkeypatch.setattr(core, "GROUPS", tuple(dataclasses.replace(g, run=boom) for g in core.GROUPS))
    result = core.grade(good_zip)
    assert result.status == "error" and result.score == 0 and result.max_score == core.possible_points()
    assert [(c.part, c.name) for c in result.checks] == declared()
    assert all(c.hidden == (c.part == HIDDEN) for c in result.checks)
    assert {c.name for c in result.checks if c.hidden} >= {"secret_summarize", "heldout"}
    assert all("RuntimeError: boom" in c.message or "is not in the submission" in c.message for c in result.checks)


def test_without_results_is_a_value():
    r = GradeResult.without_results("s1", "error", "the grader failed", possible=54)
    assert r.score == 0 and r.to_dict()["status"] == "error" and "the grader failed" in r.to_markdown()
    assert r.max_score == 54 and "Score: 0 / 54" in r.to_markdown() and "tell your instructor" in r.to_markdown()
    assert GradeResult.from_dict(r.to_dict()).max_score == 54
    gs = r.to_gradescope()
    assert gs["score"] == 0 and gs["tests"] == [] and gs["output"].startswith("error: the grader failed")
    with pytest.raises(ValueError):
        GradeResult("s1", "passed")


def test_batch_killed_midway_resumes_without_regrading(good_zip, tmp_path):
    folder, out = tmp_path / "class", tmp_path / "out"
    folder.mkdir()
    for i in range(6):
        (folder / f"s{i}.zip").write_bytes(good_zip.read_bytes())
    cmd = [sys.executable, "-m", "grader", "batch", str(folder), "--out", str(out), "-j", "1", "--no-progress",
           "--ids-from-submission-json"]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and len(list((out / "results").glob("*.json"))) < 2:
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    finished = {p.name: p.stat().st_mtime_ns for p in (out / "results").glob("*.json")}
    assert 2 <= len(finished) < 6, "the batch should have been stopped midway"
    for name in finished:
        assert json.loads((out / "results" / name).read_text())["status"] == "graded"  # nothing half-written
    resumed = subprocess.run(cmd + ["--resume"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert f"{len(finished)} already graded" in resumed.stderr
    for name, mtime in finished.items():
        assert (out / "results" / name).stat().st_mtime_ns == mtime, f"{name} was graded again"
    with open(out / "gradebook.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [r["student"] for r in rows] == [f"s{i}" for i in range(6)]
    assert all(r["status"] == "graded" and float(r["score"]) == float(r["max"]) - not_in_reference() for r in rows)


def test_nothing_one_run_leaves_reaches_the_next(good_zip, tmp_path):
    from grader.submission import open_submission

    if sandbox.fork_server() is None:
        pytest.skip("no fork server without bubblewrap: every run is a fresh process")
    sub = open_submission(good_zip, tmp_path / "sub")
    (sub.root / "metrics.py").write_text(
        "import os, subprocess, time\n"
        "def cmdline(pid):\n"
        "    try:\n"
        "        return open(f'/proc/{pid}/cmdline', 'rb').read()\n"
        "    except OSError:\n"
        "        return b''\n"
        "def summarize(p, l):\n"
        "    seen = sorted(os.listdir('/tmp'))\n"
        "    open('/tmp/left-behind.txt', 'w').write('x')\n"
        "    child = subprocess.Popen(['sleep', '60'], start_new_session=True)\n"
        "    for _ in range(300):  # until the child has exec'd sleep\n"
        "        if cmdline(child.pid) == b'sleep\\x0060\\x00':\n"
        "            break\n"
        "        time.sleep(0.01)\n"
        "    sleepers = [d for d in os.listdir('/proc') if d.isdigit() and cmdline(d) == b'sleep\\x0060\\x00']\n"
        "    return {'seen': seen, 'sleepers': len(sleepers)}\n")
    task = {"task": "metrics", "module": "metrics", "function": "summarize",
            "cases": [{"name": "x", "labels": [1], "predictions": [1]}]}
    first = sandbox.run(sub.root, task).data["cases"][0]["returned"]
    second = sandbox.run(sub.root, task).data["cases"][0]["returned"]
    assert "left-behind.txt" not in second["seen"]
    # each run sees its own sleeper only (a reaped process, or a zombie with no command line, is not alive)
    assert first["sleepers"] == second["sleepers"] == 1, "the sleeper from the first run is still alive"


@pytest.mark.parametrize("steps, kept", [(0.5, True), (1.5, False)])
def test_lesson_06s_probability_sums_are_judged_within_the_labs_tolerance(good_zip, tmp_path, steps, kept):
    """The candidate's reported minimum row sum, moved by a fraction of lesson 06's probability_tolerance (the lab's,
    not a looser copy of the grader's): within it the check holds, beyond it the point is lost."""
    files = corpus.read_zip(good_zip)
    doc = json.loads(files["regression.json"])
    rec = doc["models"]["candidate"]["probabilities"]
    rec["min_sum"] -= steps * rec["tolerance"]
    zip_path = tmp_path / "moved.zip"
    zip_path.write_bytes(corpus.pack({**files, "regression.json": json.dumps(doc, indent=2).encode()}))
    result = core.grade(zip_path, credited=False)  # moved.zip: the reference hand-in, edited, graded as made
    (probabilities,) = [c for c in result.checks if (c.part, c.name) == ("acceptance", "probabilities")]
    assert probabilities.passed is kept, probabilities.message


def test_a_grading_process_runs_blas_on_one_thread():
    """``import grader`` before numpy leaves OpenBLAS one thread: grading's small products gain nothing from a
    second, which spins on the other core after each one (0.37 s -> 0.25 s of CPU per hand-in, two cores)."""
    import os
    import subprocess
    import sys

    code = ("import grader, numpy\nfrom threadpoolctl import threadpool_info\n"
            "print(sorted({i['num_threads'] for i in threadpool_info() if i['user_api'] == 'blas'}))")
    env = {k: v for k, v in os.environ.items() if not k.endswith("_NUM_THREADS")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[1]"


def test_the_grading_stack_imports_no_plotting_library():
    """matplotlib takes half a second to import and grading draws no figure (the class report is SVG, drawn by hand):
    every grading process, and each single ``grader grade``, would pay it."""
    import subprocess
    import sys

    code = ("import sys\nimport grader.core, grader.batch\n"
            "print(sorted(m for m in sys.modules if m.startswith('matplotlib')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_the_fixture_side_kept_per_worker_is_what_a_fresh_computation_gives():
    """Lesson 04's streams and their hashes and lesson 07's acceptance hashes are computed once per grading worker:
    the same values as computing them again, and a kept stream cannot be written into by a check."""
    import numpy as np

    from grader.lessons import lesson04_more_batches as g04
    from grader.lessons import lesson07_calibrate_the_deployed_representation as g07
    from lab import data
    from lab.lessons import lesson04_more_batches as lab04
    from lab.lessons.lesson07_calibrate_the_deployed_representation import recipe

    for n, bs in ((512, 8), (24, 1), (g04.STREAM_KEPT + 8, 1)):  # kept, a prefix, past what is kept
        fresh = lab04.narrow_batches(n, bs, seed=3)
        assert g04.stream_sha256(n, bs, 3) == data.data_sha256(fresh) == g04.stream_sha256(n, bs, 3)
        np.testing.assert_array_equal(g04.narrow_batches(n, bs, 3), fresh)
    kept = g04.narrow_batches(16, 8, 3)
    with pytest.raises(ValueError, match="read-only"):
        kept[0, 0] = 1.0
    assert g04.narrow_batches(16, 8, 3)[0, 0] == lab04.narrow_batches(16, 8, seed=3)[0, 0]
    hashes = g07.acceptance_row_hashes("evaluation")
    assert hashes == recipe.condition_row_hashes(data.load_split("evaluation").pixels)
    hashes.clear()  # a caller's copy: the kept one is untouched
    assert g07.acceptance_row_hashes("evaluation") == recipe.condition_row_hashes(data.load_split("evaluation").pixels)


def test_prediction_keys_remember_only_arrays_nothing_can_change():
    """grader.reuse keys a prediction by its pixels' digest. The evaluation split's read-only pixels are hashed once
    per worker; a writable array, or a read-only view of one, is hashed at every call, so an edit shows."""

    from grader import reuse
    from grader.context import evaluation

    hashed = []
    digest = reuse._digest
    pixels_key = reuse.PixelKeys(lambda x: hashed.append(1) or digest(x))  # one worker's (grader.state)
    pixels = evaluation()[0]
    assert not pixels.flags.writeable and not evaluation()[1].flags.writeable
    assert pixels_key(pixels) == pixels_key(pixels) == digest(pixels) and len(hashed) == 1
    mine = pixels.copy()
    first = pixels_key(mine)
    mine[0, 0] += 1
    assert pixels_key(mine) != first
    view = mine[:10]
    view.flags.writeable = False
    before = pixels_key(view)
    mine[0, 0] += 1
    assert pixels_key(view) != before and len(hashed) == 5
