"""``python -m grader export``: the gradebook as Canvas and as Moodle import it, through a roster.

Each format's file is read back as CSV and held to that LMS's documented columns (grader/README.md cites them),
with a roster that has a student with no hand-in and a class with a hand-in that has no roster row.
"""
from __future__ import annotations

import csv
import io
import subprocess
import sys
from pathlib import Path

import pytest

from grader.export import RosterError, export, read_roster

REPO = Path(__file__).resolve().parent.parent
GRADEBOOK = """student,status,score,max,reader,grader_version,isolation
ada,graded,57.5,59,4,1.0,bubblewrap
bob,invalid,0,59,,1.0,
cy,pending,,,,1.0,
dee,error,0,59,,1.0,
zed,graded,59,59,4,1.0,bubblewrap
"""
ROSTER = """student,name,canvas_id,sis_user_id,sis_login_id,section,idnumber,email
ada,"Lovelace, Ada",101,S101,ada,Lab A,ID101,ada@example.edu
bob,"Builder, Bob",102,S102,bob,Lab A,ID102,bob@example.edu
cy,"Young, Cy",103,S103,cy,Lab B,ID103,cy@example.edu
dee,"Dee, Dee",104,S104,dee,Lab B,ID104,dee@example.edu
eve,"Eve, Eve",105,S105,eve,Lab B,ID105,eve@example.edu
"""


@pytest.fixture
def out(tmp_path) -> Path:
    (tmp_path / "gradebook.csv").write_text(GRADEBOOK)
    (tmp_path / "roster.csv").write_text(ROSTER)
    return tmp_path


def rows(path: Path) -> list[list[str]]:
    return list(csv.reader(io.StringIO(path.read_text(encoding="utf-8"))))


def test_canvas_file_has_canvas_columns_and_names_the_unmatched(out):
    done = export(out, out / "roster.csv", ("canvas",), assignment="Calibration Lab (4242)")
    got = rows(out / "lms" / "canvas.csv")
    # Canvas's gradebook export layout, which its import reads: five identifier columns, then the assignment
    assert got[0] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", "Calibration Lab (4242)"]
    assert got[1] == ["Points Possible", "", "", "", "", "59"]
    body = {r[1]: r for r in got[2:]}
    assert body["101"] == ["Lovelace, Ada", "101", "S101", "ada", "Lab A", "57.5"]
    assert body["102"][-1] == "0"                     # refused at intake: 0, as its feedback says
    # pending, error and no hand-in: no grade yet, so no row (Canvas counts a blank cell as a change)
    assert sorted(body) == ["101", "102"] and len(got) == 2 + 2
    assert "zed" not in (out / "lms" / "canvas.csv").read_text()
    assert done.no_handin == ["eve"] and done.not_in_roster == ["zed"]
    assert done.no_grade == [("cy", "pending"), ("dee", "error")]
    assert "eve" in done.summary() and "zed" in done.summary()
    # no hand-in came from a Canvas download (no --roster batch): no empty feedback zip, and the summary says why
    assert not (out / "lms" / "canvas-feedback.zip").exists() and "canvas feedback" not in done.files
    assert "has no canvas-feedback.zip: it would be empty" in done.summary()


def test_moodle_file_has_moodle_columns_and_names_the_unmatched(out):
    done = export(out, out / "roster.csv", ("moodle",), assignment="Calibration Lab")
    got = rows(out / "lms" / "moodle.csv")
    # Moodle's CSV import maps "ID number" -> useridnumber or "Email address" -> useremail, and the grade column
    assert got[0] == ["ID number", "Email address", "Calibration Lab", "Calibration Lab (feedback)"]
    # Moodle's importer reads an empty cell of an existing grade item as "no grade" and clears the grade
    # (gradeimport_csv's load_data::update_grade_item): a student with no grade yet has no row at all
    assert got[1:] == [["ID101", "ada@example.edu", "57.5", ""], ["ID102", "bob@example.edu", "0", ""]]
    assert not (out / "lms" / "canvas.csv").exists()
    assert done.no_handin == ["eve"] and done.not_in_roster == ["zed"]


def test_the_command_writes_both_and_says_whom_it_could_not_match(out):
    proc = subprocess.run([sys.executable, "-m", "grader", "export", str(out), "--roster", str(out / "roster.csv")],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert (out / "lms" / "canvas.csv").is_file() and (out / "lms" / "moodle.csv").is_file()
    assert "1 roster student(s) with no hand-in (left out: their grade in the LMS is unchanged): eve" in proc.stdout
    assert "1 hand-in(s) with no roster row (not exported): zed" in proc.stdout


@pytest.mark.parametrize("text, words", [
    ("name,email\nAda,a@x\n", "row 1 (the header) has no 'student' column"),
    ("student,mail\nada,a@x\n", "unknown column(s) 'mail'"),
    ("student,email,idnumber\nada,a@x,1\n,b@x,2\n", "row 3, field 'student': empty"),
    ("student,email\nada,a@x\nada,b@x\n", "row 3, field 'student': 'ada' is already on row 2"),
    ("student,email,idnumber\nada,,\n", "row 2 (ada): moodle needs one of the fields idnumber, email"),
    ("student,email\nada,a@x,extra\n", "row 2: more fields than the header's 2"),
])
def test_a_bad_roster_names_the_file_row_and_field(tmp_path, text, words):
    path = tmp_path / "roster.csv"
    path.write_text(text)
    with pytest.raises(RosterError) as e:
        read_roster(path, ("moodle",))
    assert str(path) in str(e.value) and words in str(e.value)


def test_a_roster_for_canvas_needs_a_canvas_identifier_and_may_carry_a_bom(tmp_path):
    path = tmp_path / "roster.csv"
    path.write_bytes("\ufeffstudent,name,email\nada,\"Lovelace, Ada\",a@x\n".encode())
    assert read_roster(path, ("moodle",))["ada"]["email"] == "a@x"  # Excel's byte-order mark is read past
    with pytest.raises(RosterError, match="row 2 \\(ada\\): canvas needs one of the fields canvas_id"):
        read_roster(path, ("canvas",))
    path.write_bytes(b"student,email\n\xff\xfe\n")
    with pytest.raises(RosterError, match="not UTF-8"):
        read_roster(path)
    proc = subprocess.run([sys.executable, "-m", "grader", "export", str(tmp_path), "--roster", str(path)],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "has no gradebook.csv" in proc.stderr


def test_an_adjustment_is_added_within_the_points_possible_and_a_published_grade_never_passes_them(out):
    from grader import adjustments

    adjustments.record(out, "ada", 3, "lesson 05's prose answer, graded by hand")
    adjustments.record(out, "bob", -2, "late")
    done = export(out, out / "roster.csv", ("moodle",))
    got = {r[0]: r[2] for r in rows(out / "lms" / "moodle.csv")[1:]}
    assert got == {"ID101": "59", "ID102": "0"}  # 57.5 + 3 kept at 59 / 59; 0 - 2 kept at 0
    assert "eve" in done.no_handin
    with pytest.raises(adjustments.AdjustmentError, match="needs the reason"):
        adjustments.record(out, "ada", 1, "")
