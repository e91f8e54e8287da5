"""grader collect: students' workspaces packed from their homes, as ``lab submit`` packs them, then graded by batch.

Real workspaces (the reference build of two students' variants) in a class of homes made here: two students' own,
a third home holding the first student's workspace (its recorded id is not the home's), one the instructor may not
enter, one with a folder of handed-in files it may not list, one with no workspace, and a roster student with no
home. A folder of files never handed in (``drafts/``) that the instructor may not list stops nothing. The collector
runs as a process that file modes bind (as root, with every capability dropped), so each denial is a real
``PermissionError``.
"""
from __future__ import annotations

import csv
import json
import os
import shutil
import stat
import subprocess
import sys
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from grader import collect as co
from grader.batch import batch
from lab.tools.submit import submit

REPO = Path(__file__).resolve().parent.parent
UNPRIVILEGED = ("setpriv", "--bounding-set=-all", "--inh-caps=-all") if os.geteuid() == 0 else ()  # file modes bind
ROSTER = ("student,username\ns2400101,chidi\ns2400112,bea\ns2400113,carla\ns2400114,dan\ns2400115,eve\n"
          "s2400116,jun\ns2400117,fay\n")
LOCKED = ("dan", "fay/calibration-lab/workspace/release", "chidi/calibration-lab/workspace/drafts")
OWN = {"chidi": "s2400101", "bea": "s2400112"}


def workspace(homes: Path, user: str) -> Path:
    return homes / user / "calibration-lab" / "workspace"


@pytest.fixture(scope="module")
def collected(tmp_path_factory):
    """(the class's base folder, the collector's finished process)."""
    from grader import reference
    from lab import variant

    base = tmp_path_factory.mktemp("class")
    homes = base / "home"
    for user, student in OWN.items():
        with variant.using(None):
            reference.build(workspace(homes, user), student=student)
    shutil.copytree(workspace(homes, "chidi"), workspace(homes, "carla"))  # Carla's home holds Chidi's workspace
    shutil.copytree(workspace(homes, "bea"), workspace(homes, "dan"))
    shutil.copytree(workspace(homes, "bea"), workspace(homes, "fay"))
    (homes / "eve").mkdir()
    for locked in LOCKED:
        (homes / locked).chmod(0)
    (base / "roster.csv").write_text(ROSTER)
    try:
        if subprocess.run([*UNPRIVILEGED, "test", "-x", str(homes / "dan")]).returncode == 0:
            pytest.skip("cannot run a process that file modes bind here (setpriv could not drop capabilities)")
        proc = subprocess.run([*UNPRIVILEGED, sys.executable, "-m", "grader", "collect",
                               f"{homes}/*/calibration-lab/workspace", "--out", str(base / "out"),
                               "--roster", str(base / "roster.csv")],
                              cwd=REPO, capture_output=True, text=True, timeout=300)
        yield base, proc
    finally:
        for locked in LOCKED:
            (homes / locked).chmod(0o755)  # so that pytest can delete them


def rows(out: Path) -> dict[str, dict]:
    with open(out / "collection.csv", newline="") as f:
        return {r["student"]: r for r in csv.DictReader(f)}


def test_each_home_is_collected_or_says_why_not(collected):
    base, proc = collected
    assert proc.returncode == 0, proc.stderr
    out = base / "out"
    assert "7 home(s) or roster student(s): 2 collected, 2 missing, 2 unreadable, 1 flagged" in proc.stdout
    got = rows(out)
    assert {s: r["status"] for s, r in got.items()} == {
        "s2400101": "collected", "s2400112": "collected", "s2400113": "flagged", "s2400114": "unreadable",
        "s2400115": "missing", "s2400116": "missing", "s2400117": "unreadable"}
    assert "recorded student s2400101" in got["s2400113"]["note"] and got["s2400113"]["user"] == "carla"
    assert "permission denied" in got["s2400114"]["note"] and "ask the admin" in got["s2400114"]["note"]
    assert f"permission denied on {base / 'home' / LOCKED[1]}:" in got["s2400117"]["note"]
    assert got["s2400114"]["note"] in proc.stdout  # the summary says why, not only how many
    assert got["s2400116"]["user"] == "" and "no home" in got["s2400116"]["note"]
    assert sorted(p.name for p in out.iterdir()) == ["collection.csv", "collection.md", "s2400101.zip",
                                                     "s2400112.zip"]  # nothing credited to Carla or Dan
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in out.iterdir())
    assert "| s2400114 | unreadable |" in (out / "collection.md").read_text()


def test_a_collected_zip_is_what_lab_submit_packs(collected, tmp_path):
    base, _ = collected
    own = submit("s2400112", workspace(base / "home", "bea"), tmp_path)
    with zipfile.ZipFile(base / "out" / "s2400112.zip") as a, zipfile.ZipFile(own) as b:
        assert a.namelist() == b.namelist()
        assert json.loads(a.read("submission.json"))["files"] == json.loads(b.read("submission.json"))["files"]


def test_batch_grades_the_collected_class(collected, tmp_path):
    from test_grader import not_in_reference

    base, _ = collected
    with ThreadPoolExecutor(1) as ex:
        graded = {r["student"]: r for r in batch(base / "out", tmp_path, executor=ex, progress=False,
                                                 roster=base / "roster.csv")}
    assert sorted(graded) == sorted(OWN.values())
    for student in OWN.values():
        r = graded[student]
        assert r["status"] == "graded" and float(r["score"]) == float(r["max"]) - not_in_reference(), r


def test_homes_from_a_hub_user_list_and_patterns_refused(tmp_path):
    users = tmp_path / "users.json"
    users.write_text(json.dumps([{"name": "ann", "admin": False}, {"name": "bo"}]))
    found = co.homes(f"{tmp_path}/jupyter-*/work", co.read_users(users))
    assert found == [co.Home("ann", tmp_path / "jupyter-ann" / "work"), co.Home("bo", tmp_path / "jupyter-bo" / "work")]
    (tmp_path / "jupyter-cy").mkdir()
    (tmp_path / "jupyter-cy.txt").write_text("")
    assert co.homes(f"{tmp_path}/jupyter-*/work") == [co.Home("cy", tmp_path / "jupyter-cy" / "work")]
    for bad in ("/home/*/x/*", "/home/a*b*/w", "/home/u/w", "/home/?/w"):
        with pytest.raises(co.CollectError, match="one '\\*' standing for the user"):
            co.homes(bad)
    assert co.student_of("ann", None) == ("ann", "")
    assert co.student_of("zed", {"s1": {"username": "ann"}})[0] is None
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "old.zip").write_bytes(b"")
    with pytest.raises(co.CollectError, match="collect into a new folder"):
        co.collect(f"{tmp_path}/jupyter-*/work", tmp_path / "out")
