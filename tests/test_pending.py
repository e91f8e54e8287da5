"""Pending is pending: a gradebook written while a batch runs marks the hand-ins not graded yet ``pending``.

The batch is really killed (SIGKILL to its whole process group, workers included) after a few results, and the
gradebook it left is read: no row says ``error``, every hand-in the journal does not hold is ``pending``, and every
one it holds has its row. ``--resume`` then grades the pending ones only.
"""
from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from grader.batch import write_gradebook
from grader.report import write_report
from lab.tools.submit import submit

REPO = Path(__file__).resolve().parent.parent
STUDENTS = [f"s{i:02d}" for i in range(14)]
# the batch's own code, with the gradebook rewritten after every result (its default: at most every 10 s)
RUN = ("import sys, grader.batch as b; b.GRADEBOOK_EVERY_S = 0.0; from grader.__main__ import main; "
       "sys.exit(main(sys.argv[1:]))")


@pytest.fixture(scope="module")
def good_zip(tmp_path_factory, reference_workspace) -> Path:
    work = reference_workspace(tmp_path_factory.mktemp("reference") / "workspace")
    return submit("reference", work, tmp_path_factory.mktemp("handed-in"))


def rows_of(out: Path) -> dict[str, dict]:
    with open(out / "gradebook.csv", newline="") as f:
        return {r["student"]: r for r in csv.DictReader(f)}


def journal_students(out: Path) -> set[str]:
    if not (out / "journal.jsonl").exists():
        return set()
    lines = (out / "journal.jsonl").read_text().splitlines()
    return {json.loads(line)["student"] for line in lines if line.endswith("}")}


def test_a_killed_batch_leaves_pending_rows_not_errors(good_zip, tmp_path):
    folder, out = tmp_path / "class", tmp_path / "out"
    folder.mkdir()
    for s in STUDENTS:
        (folder / f"{s}.zip").write_bytes(good_zip.read_bytes())
    proc = subprocess.Popen([sys.executable, "-c", RUN, "batch", str(folder), "--out", str(out), "-j", "1",
                             "--no-progress"], cwd=REPO, start_new_session=True, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 300
        while len(journal_students(out)) < 3:
            assert proc.poll() is None, f"the batch ended before it was killed: {proc.stderr.read()[-2000:]}"
            assert time.monotonic() < deadline, "no 3 results in 300 s"
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    done = journal_students(out)
    rows = rows_of(out)
    assert sorted(rows) == STUDENTS, "one row per hand-in, always"
    assert 3 <= len(done) < len(STUDENTS), f"killed after {len(done)} of {len(STUDENTS)}"
    assert not [s for s, r in rows.items() if r["status"] == "error"], rows
    for s, r in rows.items():
        if s not in done:
            assert r["status"] == "pending" and r["score"] == "", r
    # the gradebook is written after a result is journalled: all but the last result or two are in it already
    assert sum(r["status"] == "graded" for r in rows.values()) >= len(done) - 2
    assert all(rows[s]["status"] in ("graded", "pending") for s in done)
    # the class report of the stopped batch says pending, not error
    page = write_report(out).read_text()
    statuses = page.split('<p id="statuses">', 1)[1].split("</p>", 1)[0]
    assert f"{sum(r['status'] == 'pending' for r in rows.values())} pending" in statuses and "error" not in statuses
    # --resume grades only what is pending, and leaves no pending row
    resumed = subprocess.run([sys.executable, "-m", "grader", "batch", str(folder), "--out", str(out), "-j", "1",
                              "--resume", "--no-progress"], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert f"{len(done)} already graded" in resumed.stderr
    assert {r["status"] for r in rows_of(out).values()} == {"graded"}


def test_a_gradebook_from_disk_says_pending_for_no_result_and_error_for_an_unreadable_one(tmp_path):
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "broken.json").write_text("{not json")
    write_gradebook(tmp_path, ["broken", "missing"])
    rows = rows_of(tmp_path)
    assert rows["missing"]["status"] == "pending" and rows["broken"]["status"] == "error"
