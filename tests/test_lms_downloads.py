"""Hand-ins from LMS bulk downloads: each file credited to the roster student the LMS named it after.

The names are the LMSs' own: Canvas ``okaforchidi_88101_4412345_s2400101.zip`` (``_LATE_`` when late), Moodle
``Beatriz Silva_54333_assignsubmission_file_s2400112.zip`` or a folder per student, Blackboard
``Calibration Lab_bsilva_attempt_2026-12-04-17-03-11_s2400112.zip``. The class below is graded for real: two honest
students' own hand-ins (their variants' reference builds) under Canvas and Moodle names, a classmate's zip handed in
under a third student's Moodle name, a file naming no roster student and two files for one student; then exported.
"""
from __future__ import annotations

import csv
import io
import os
import shutil
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from grader.batch import batch
from grader.export import export
from grader.lms_downloads import DUPLICATE, UNMATCHED, collect, identify, user_naming
from lab.tools.submit import submit

ROSTER = """student,name,canvas_id,sis_login_id,idnumber,email,moodle_id
s2400101,"Okafor, Chidi",88101,cokafor,ID101,chidi@example.edu,
s2400112,"Silva, Beatriz",,bsilva,ID112,beatriz@example.edu,54333
s2400113,"Mendes, Carla",,cmendes,ID113,carla@example.edu,
s2400114,"Lee, Ann",88114,alee,ID114,ann@example.edu,
s2400115,"Park, Jun",88115,jpark,ID115,jun@example.edu,
"""
CANVAS = "okaforchidi_88101_4412345_s2400101.zip"
MOODLE = "Beatriz Silva_54333_assignsubmission_file_"  # Moodle's folder per student
COPY = "Carla Mendes_54334_assignsubmission_file_s2400101.zip"  # Carla hands in Chidi's zip, his name on it
STRANGER = "Nobody Known_99999_assignsubmission_file_x.zip"
TWICE = ("leeann_88114_5550001_s2400114.zip", "leeann_88114_5550002_s2400114-1.zip")


def roster(tmp_path: Path) -> dict[str, dict]:
    from grader.roster import read_roster

    (tmp_path / "roster.csv").write_text(ROSTER)
    return read_roster(tmp_path / "roster.csv")


# ----- the names, one LMS at a time ----------------------------------------------------------------

@pytest.mark.parametrize("stem, student, lms, late", [
    ("okaforchidi_88101_4412345_s2400101", "s2400101", "Canvas", False),
    ("okaforchidi_LATE_88101_4412345_s2400101", "s2400101", "Canvas", True),
    ("okaforchidi_88101_4412345_someone-elses-id", "s2400101", "Canvas", False),  # the student's own part: ignored
    ("parkjun_77777_4412399_s2400115", "s2400115", "Canvas", False),  # a user id not on the roster: the name
    ("Beatriz Silva_54333_assignsubmission_file_s2400112", "s2400112", "Moodle", False),
    ("Beatriz Silva_54333_assignsubmission_file_", "s2400112", "Moodle", False),
    ("Carla Mendes_54334_assignsubmission_file_s2400101", "s2400113", "Moodle", False),  # no moodle_id: the name
    ("Calibration Lab_bsilva_attempt_2026-12-04-17-03-11_s2400112", "s2400112", "Blackboard", False),
    ("s2400114", "s2400114", "file name", False),  # named by the instructor
])
def test_each_lms_download_name_credits_its_roster_student(tmp_path, stem, student, lms, late):
    assert identify(stem, roster(tmp_path)) == (student, lms, late, "")


@pytest.mark.parametrize("stem, words", [
    ("Nobody Known_99999_assignsubmission_file_x", "a Moodle download name whose moodle_id '99999' or name "
                                                   "'Nobody Known' matches no roster row"),
    ("someone_99_1_x", "a Canvas download name whose canvas_id '99' or name 'someone' matches no roster row"),
    ("s2400199", "names no roster student"),
    ("Calibration Lab_nobody_attempt_2026-12-04-17-03-11_x", "Blackboard download name whose username 'nobody'"),
])
def test_a_name_that_names_no_roster_student_says_why(tmp_path, stem, words):
    student, _, _, why = identify(stem, roster(tmp_path))
    assert student is None and words in why


def test_a_name_two_roster_rows_share_is_credited_to_neither(tmp_path):
    rows = roster(tmp_path)
    rows["s2400116"] = {"student": "s2400116", "name": "Okafor, Chidi"}
    student, _, _, why = identify("okaforchidi_12345_4412345_x", rows)
    assert student is None and "matches 2 roster rows (s2400101, s2400116)" in why


def test_another_lms_by_a_regex_of_roster_columns(tmp_path):
    naming = user_naming(r"(?P<sis_login_id>[a-z]+)-week3-.*")
    assert identify("bsilva-week3-final", roster(tmp_path), (naming,))[0] == "s2400112"
    with pytest.raises(ValueError, match="no named group names a roster column"):
        user_naming(r"(?P<who>\w+)")
    with pytest.raises(ValueError, match="not a regular expression"):
        user_naming(r"(?P<student>")


def test_two_files_for_one_student_and_a_stranger_are_set_apart(tmp_path):
    for name in (*TWICE, STRANGER, CANVAS):
        (tmp_path / name).write_bytes(b"")
    got = collect(sorted(tmp_path.glob("*.zip")), roster(tmp_path))
    assert [h.student for h in got.hand_ins] == ["s2400101"]
    by = {u.status: u for u in got.unclaimed}
    assert by[DUPLICATE].key == "s2400114" and by[DUPLICATE].files == TWICE
    assert "2 files for s2400114" in by[DUPLICATE].reason
    assert by[UNMATCHED].files == (STRANGER,)


# ----- a class downloaded from Canvas and Moodle, graded and exported ----------------------------------

@pytest.fixture(scope="module")
def own_zips(tmp_path_factory) -> dict[str, Path]:
    """Two students' own hand-ins: the reference build of each one's variant."""
    from grader import reference
    from lab import variant

    tmp = tmp_path_factory.mktemp("own")
    zips = {}
    for student in ("s2400101", "s2400112"):
        with variant.using(None):
            work = reference.build(tmp / student / "workspace", student=student)
        zips[student] = submit(student, work, tmp / student / "handed-in")
    return zips


@pytest.fixture(scope="module")
def graded_class(own_zips, tmp_path_factory) -> tuple[Path, Path, Path]:
    base = tmp_path_factory.mktemp("class")
    folder, out = base / "downloads", base / "out"
    folder.mkdir()
    shutil.copy(own_zips["s2400101"], folder / CANVAS)
    (folder / MOODLE).mkdir()
    shutil.copy(own_zips["s2400112"], folder / MOODLE / "s2400112.zip")
    shutil.copy(own_zips["s2400101"], folder / COPY)
    shutil.copy(own_zips["s2400112"], folder / STRANGER)
    for name in TWICE:
        shutil.copy(own_zips["s2400112"], folder / name)
    (base / "roster.csv").write_text(ROSTER)
    with ThreadPoolExecutor(1) as ex:
        batch(folder, out, executor=ex, progress=False, roster=base / "roster.csv")
    return folder, out, base / "roster.csv"


def book(out: Path) -> dict[str, dict]:
    with open(out / "gradebook.csv", newline="") as f:
        return {r["student"]: r for r in csv.DictReader(f)}


def test_honest_downloads_grade_under_their_roster_ids_and_a_relabelled_copy_does_not(graded_class):
    from test_grader import not_in_reference

    _, out, _ = graded_class
    rows = book(out)
    full = float(rows["s2400101"]["max"]) - not_in_reference()  # the reference build leaves out lessons 08 and 09
    for student, name in (("s2400101", CANVAS), ("s2400112", MOODLE)):
        assert rows[student]["status"] == "graded" and float(rows[student]["score"]) == full, rows[student]
        assert rows[student]["handed_in"] == name
        assert "another student's variant" not in (out / "feedback" / f"{student}.md").read_text()
    copy = rows["s2400113"]  # Carla's download holds Chidi's files: graded as hers, his variant's files score 0
    assert copy["handed_in"] == COPY and float(copy["score"]) < full / 2
    assert "another student's variant" in (out / "feedback" / "s2400113.md").read_text()
    stranger = rows["Nobody Known_99999_assignsubmission_file_x"]
    assert stranger["status"] == UNMATCHED and stranger["score"] == "" and "matches no roster row" in stranger["note"]
    twice = rows["s2400114"]
    assert twice["status"] == DUPLICATE and twice["score"] == "" and twice["handed_in"] == "; ".join(TWICE)
    assert not (out / "results" / "s2400114.json").exists()  # credited to no one: nothing graded
    assert "s2400115" not in rows  # on the roster, nothing handed in
    with pytest.raises(SystemExit, match="give the same --roster"):  # never credited to download names by mistake
        batch(graded_class[0], out, resume=True, progress=False)
    assert os.stat(out / "journal.jsonl").st_mode & 0o777 == 0o600 == os.stat(out / "gradebook.csv").st_mode & 0o777


def test_the_export_leaves_out_who_has_no_grade_and_carries_the_feedback(graded_class):
    _, out, roster_csv = graded_class
    done = export(out, roster_csv, ("canvas", "moodle"))
    canvas = list(csv.reader(io.StringIO((out / "lms" / "canvas.csv").read_text())))
    assert [r[1] for r in canvas[2:]] == ["88101", "", ""]  # Chidi, Beatriz, Carla: no blank cell for anyone
    assert all(r[-1] for r in canvas[2:])
    moodle = list(csv.reader(io.StringIO((out / "lms" / "moodle.csv").read_text())))
    assert moodle[0] == ["ID number", "Email address", "Calibration Lab", "Calibration Lab (feedback)"]
    assert [r[0] for r in moodle[1:]] == ["ID101", "ID112", "ID113"]
    assert moodle[1][3] == (out / "feedback" / "s2400101.md").read_text()
    assert ("s2400114", DUPLICATE) in done.no_grade and done.no_handin == ["s2400115"]
    assert "Nobody Known_99999_assignsubmission_file_x" in done.not_in_roster
    assert os.stat(out / "lms" / "canvas-feedback.zip").st_mode & 0o777 == 0o600
    with zipfile.ZipFile(out / "lms" / "canvas-feedback.zip") as zf:
        # Canvas reads the first two numbers of a name as the user and the attachment its comment goes on
        assert zf.namelist() == ["okaforchidi_88101_4412345_feedback.txt"]
        assert zf.read(zf.namelist()[0]).decode() == (out / "feedback" / "s2400101.md").read_text()
    assert done.feedback_by_hand == ["s2400112", "s2400113"]  # Moodle downloads: no Canvas name to upload under
