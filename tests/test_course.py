"""The course file (``--config course.toml``): prices, prediction grading and a late policy, without touching the
project. A class is graded twice, with the committed rubric and with a course file that reprices the reader's
contract (4 -> 2 points), grades predictions for completion and has a due date, a penalty per day and an extension;
the hand-ins' times come from the downloaded files (their modification times), never from the zips.
"""
from __future__ import annotations

import csv
import grp
import os
import shutil
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from bad_submissions import corpus

from grader import course
from grader.batch import batch
from grader.export import export
from lab.tools.submit import submit

DUE = datetime(2026, 12, 4, 23, 59, tzinfo=UTC)
COURSE = """[points]
reader.contract = 2

[predictions]
graded = "completion"

[late]
due = 2026-12-04T23:59:00Z
per_day = 0.1
extensions = "extensions.csv"
"""


def write_course(folder: Path, text: str = COURSE) -> Path:
    (folder / "extensions.csv").write_text("student,due\nextended,2026-12-08T23:59:00+00:00\n")
    (folder / "course.toml").write_text(text)
    return folder / "course.toml"


@pytest.mark.parametrize("text, words", [
    ("[points]\nreader.nothing = 1\n", "[points] reader.nothing: no such check"),
    ("[points]\nnopart.x = 1\n", "[points] nopart: no such rubric part"),
    ("[points]\nreader.contract = -1\n", "[points] reader.contract = -1; expected a number from 0"),
    ("[predictions]\ngraded = 'vibes'\n", "[predictions] graded = 'vibes'; expected one of correctness, completion"),
    ("[late]\ndue = 2026-12-04T23:59:00\n", "[late] due = datetime.datetime(2026, 12, 4, 23, 59); expected a "
                                             "date-time with its offset"),
    ("[late]\nper_day = 2\n", "[late] per_day = 2; expected a number from 0 to 1"),
    ("[late]\nextensions = 'missing.csv'\n", "[late] extensions:"),
    ("[rubric]\n", "unknown table(s) ['rubric']"),
    ("[files]\ngroup = 'no-such-group-here'\n", "[files] group = 'no-such-group-here': no such group"),
])
def test_a_bad_course_file_names_the_file_and_the_field(tmp_path, text, words):
    path = tmp_path / "course.toml"
    path.write_text(text)
    with pytest.raises(course.CourseError) as e:
        course.load(path)
    assert str(path) in str(e.value) and words in str(e.value)


def test_days_late_count_a_started_day_and_honour_an_extension(tmp_path):
    late = course.load(write_course(tmp_path)).late
    assert late.days_late("anyone", DUE) == 0
    assert late.days_late("anyone", DUE + timedelta(minutes=1)) == 1
    assert late.days_late("anyone", DUE + timedelta(days=2)) == 2
    assert late.days_late("extended", DUE + timedelta(days=2)) == 0
    assert late.days_late("anyone", datetime(2026, 12, 5, 23, 58)) == 1  # no offset (Blackboard): the due date's
    assert late.penalty(20, 68) == 68


@pytest.fixture(scope="module")
def good_zip(tmp_path_factory, reference_workspace) -> Path:
    work = reference_workspace(tmp_path_factory.mktemp("reference") / "workspace")
    return submit("reference", work, tmp_path_factory.mktemp("handed-in"))


def graded(folder: Path, out: Path, config: course.Course | None = None) -> dict[str, dict]:
    with ThreadPoolExecutor(1) as ex:
        batch(folder, out, executor=ex, progress=False, ids_from_submission=True,
              course=config or course.DEFAULT)
    with open(out / "gradebook.csv", newline="") as f:
        return {r["student"]: r for r in csv.DictReader(f)}


@pytest.fixture
def umask_022():
    """The usual umask, for the duration of a test: the grader's files must be 0600 under it."""
    old = os.umask(0o022)
    yield
    os.umask(old)


def test_the_course_file_changes_prices_prediction_grading_and_late_policy(good_zip, tmp_path, umask_022):
    folder = tmp_path / "class"
    folder.mkdir()
    files = corpus.read_zip(good_zip)
    for s in ("ontime", "late2", "extended"):
        shutil.copy(good_zip, folder / f"{s}.zip")

    def wrong(doc):
        doc["predictions"]["clip_or_squash"]["answer"] = {"clips": "wide", "squashes": "narrow"}
    (folder / "wrongguess.zip").write_bytes(corpus.with_json("predictions.json", wrong)(files))
    corpus.build(good_zip, folder, [c for c in corpus.CASES if c.name == "reader_raises"])
    times = {"ontime": DUE - timedelta(hours=1), "late2": DUE + timedelta(days=1, hours=3),
             "extended": DUE + timedelta(days=3), "wrongguess": DUE, "reader_raises": DUE}
    for s, when in times.items():
        os.utime(folder / f"{s}.zip", (when.timestamp(), when.timestamp()))
    before = graded(folder, tmp_path / "committed")
    config = course.load(write_course(tmp_path, COURSE + '\n[files]\ngroup = "nogroup"\n'))
    after = graded(folder, tmp_path / "course", config)

    # prices: the contract is worth 2, and a broken rule keeps its share of it
    assert float(after["ontime"]["max"]) == float(before["ontime"]["max"]) - 2
    assert float(before["reader_raises"]["reader"]) < float(before["ontime"]["reader"])
    lost_before = (float(before["ontime"]["reader"]) - float(before["reader_raises"]["reader"])) / 4
    lost_after = (float(after["ontime"]["reader"]) - float(after["reader_raises"]["reader"])) / 2
    assert lost_after == pytest.approx(lost_before, abs=0.25)  # the same share, to the half point
    # predictions graded for completion: a wrong answer counts, and the feedback still says what was measured
    assert float(before["wrongguess"]["predictions"]) < float(before["ontime"]["predictions"])
    assert after["wrongguess"]["predictions"] == after["ontime"]["predictions"]
    feedback = (tmp_path / "course" / "feedback" / "wrongguess.md").read_text()
    result = (tmp_path / "course" / "results" / "wrongguess.json").read_text()
    assert "graded for completion" in result and "prediction wrong" in result and "Calibration Lab" in feedback
    # the late policy: time from the downloaded file, a started day counts, an extension moves the due date
    assert [after[s]["late_days"] for s in ("ontime", "late2", "extended")] == ["0", "2", "0"]
    possible = float(after["late2"]["max"])
    assert float(after["late2"]["late_penalty"]) == pytest.approx(0.2 * possible, abs=0.01)
    feedback = (tmp_path / "course" / "feedback" / "late2.md").read_text()
    assert "## Handed in late" in feedback and "2 day(s) after the due date" in feedback
    assert "Handed in late" not in (tmp_path / "course" / "feedback" / "ontime.md").read_text()
    # the gradebook records the course file's hash; the committed rubric's has no such column
    assert {r["course"] for r in after.values()} == {config.sha256[:16]} and "course" not in before["ontime"]
    roster = tmp_path / "roster.csv"
    roster.write_text("student,idnumber\n" + "".join(f"{s},{s}\n" for s in after))
    export(tmp_path / "course", roster, ("moodle",))  # written after the batch: the folder's group reads it too
    grades = {r[0]: float(r[2]) for r in csv.reader((tmp_path / "course" / "lms" / "moodle.csv").open())
              if r[0] != "ID number"}
    assert grades["late2"] == pytest.approx(float(after["late2"]["score"]) - float(after["late2"]["late_penalty"]))
    assert grades["extended"] == float(after["extended"]["score"])
    # the TA group reads the grades: files 0640, folders 0750, the group's; without a course file, the user's only
    nogroup = grp.getgrnam("nogroup").gr_gid
    for path in (tmp_path / "course" / "gradebook.csv", tmp_path / "course" / "journal.jsonl",
                 tmp_path / "course" / "feedback" / "late2.md", tmp_path / "course" / "lms" / "moodle.csv"):
        assert (os.stat(path).st_mode & 0o777, os.stat(path).st_gid) == (0o640, nogroup), path
    assert os.stat(tmp_path / "course" / "feedback").st_mode & 0o777 == 0o750
    assert os.stat(tmp_path / "committed" / "gradebook.csv").st_mode & 0o777 == 0o600
    # without a group every file the grader wrote is the instructor's alone, whatever the umask (022 here)
    modes = {p.relative_to(tmp_path).as_posix(): oct(p.stat().st_mode & 0o777)
             for p in (tmp_path / "committed").rglob("*") if p.is_file()}
    assert set(modes.values()) == {oct(0o600)}, modes
    folders = {p.relative_to(tmp_path).as_posix(): oct(p.stat().st_mode & 0o777)
               for p in [tmp_path / "committed", *(tmp_path / "committed").rglob("*")] if p.is_dir()}
    assert set(folders.values()) == {oct(0o700)}, folders  # nobody else can list whose feedback is there
    # --resume without the course file the gradebook was graded under refuses, rather than regrade at other prices
    with pytest.raises(SystemExit, match="give --config again"), ThreadPoolExecutor(1) as ex:
        batch(folder, tmp_path / "course", executor=ex, progress=False, ids_from_submission=True, resume=True,
              course=course.DEFAULT)
