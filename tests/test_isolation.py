"""The grader's trust boundary: student code runs only inside an isolation layer, and grading writes
nothing outside the grader's own scratch space.

The corpus's escape attempts (``corpus.ESCAPE_CASES``) write marker files into folders this test owns,
outside the repository and the grader's scratch: one outside /tmp (under bubblewrap a write to /tmp
lands in the sandbox's private /tmp, unseen), one in pytest's tmp_path. A marker that appears is an
escape. Each escape is tried with bubblewrap (the write must fail), without it (the grader must refuse
and run no student code), and with ``--unsafe-no-sandbox`` (the markers must appear: the check can fail).
Nothing here is skipped in CI: there a missing bubblewrap is a failure.
"""
from __future__ import annotations

import csv
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from bad_submissions import corpus
from test_grader import not_handed_in_by_reference

from grader import sandbox
from grader.context import points
from grader.lessons import lesson08_the_quantization_toolbox, lesson09_choosing_a_recipe
from lab.tools.submit import submit

REPO = Path(__file__).resolve().parent.parent
TIMEOUT = "5"
IN_CI = os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")
CODE_CHECKS = {("reader", "contract"), ("reader", "range_from_reader"), ("acceptance", "summarize_code"),
               ("hidden", "secret_summarize"), ("camera", "camera_reader")}


def need_bwrap() -> None:
    if not sandbox.bwrap_available():
        message = "bubblewrap (/usr/bin/bwrap) does not work here: install it (.ci/run does) to test the sandbox"
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)


@pytest.fixture(scope="module")
def good_zip(tmp_path_factory, reference_workspace) -> Path:
    work = reference_workspace(tmp_path_factory.mktemp("reference") / "workspace")
    return submit("reference", work, tmp_path_factory.mktemp("handed-in"))


@pytest.fixture
def markers(tmp_path):
    """Marker folders the test owns: one outside /tmp and outside the repository, one in tmp_path."""
    outside = None
    for base in ("/var/tmp", str(Path.home())):
        try:
            outside = Path(tempfile.mkdtemp(prefix="calibration-lab-escape-", dir=base))
            break
        except OSError:
            continue
    folders = [p for p in (outside, tmp_path / "escape-markers") if p is not None]
    (tmp_path / "escape-markers").mkdir()
    assert all(not f.resolve().is_relative_to(REPO) for f in folders)
    yield folders
    if outside is not None:
        shutil.rmtree(outside, ignore_errors=True)


def marker_files(folders: list[Path]) -> list[str]:
    return sorted(str(p) for f in folders for p in f.rglob("*") if p.is_file())


@pytest.fixture
def escape_class(good_zip, markers, tmp_path, monkeypatch) -> Path:
    """A class folder: the honest hand-in and the corpus's escape attempts, aimed at this test's markers."""
    monkeypatch.setenv(corpus.ESCAPE_MARKERS_ENV, os.pathsep.join(str(m) for m in markers))
    folder = tmp_path / "class"
    corpus.build(good_zip, folder, [c for c in corpus.CASES if c.name in corpus.ESCAPE_CASES])
    shutil.copyfile(good_zip, folder / "good.zip")
    return folder


def grader_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in (sandbox.NO_BWRAP_ENV, sandbox.UNSAFE_ENV, corpus.ESCAPE_MARKERS_ENV)}
    return {**env, **extra}


def run_batch(folder: Path, out: Path, *args: str, env: dict | None = None, prefix: list[str] = (),
              jobs: str = "2") -> subprocess.CompletedProcess:
    cmd = [*prefix, sys.executable, "-m", "grader", "batch", str(folder), "--out", str(out), "-j", jobs,
           "--timeout", TIMEOUT, "--no-progress", "--ids-from-submission-json", *args]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600, env=env or grader_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def gradebook(out: Path) -> dict[str, dict]:
    with open(out / "gradebook.csv", newline="") as f:
        return {r["student"]: r for r in csv.DictReader(f)}


def result(out: Path, student: str) -> dict:
    return json.loads((out / "results" / f"{student}.json").read_text())


def not_in_reference() -> float:
    """Points the reference workspace cannot earn: lessons 08 and 09's checks, as their groups declare them
    (test_grader)."""
    groups = lesson08_the_quantization_toolbox.GROUPS + lesson09_choosing_a_recipe.GROUPS
    return sum(points(part, name) for group in groups for part, name in group.declared())


def full_marks(out: Path, student: str) -> bool:
    d = result(out, student)
    return d["status"] == "graded" and d["score"] == d["max_score"] - not_in_reference()


def no_escape_in_repo() -> list[str]:
    return sorted(str(p.relative_to(REPO)) for p in REPO.glob("ESCAPED*"))


def test_escapes_fail_under_bubblewrap(escape_class, markers, tmp_path):
    need_bwrap()
    out = tmp_path / "grades"
    run_batch(escape_class, out)
    assert marker_files(markers) == [] and no_escape_in_repo() == []
    book = gradebook(out)
    assert {r["isolation"] for r in book.values()} == {"bubblewrap"}
    assert full_marks(out, "good")
    for name in corpus.ESCAPE_CASES:
        text = corpus.feedback_text(result(out, name))
        assert "Read-only file system" in text, text[:2000]


def test_without_bubblewrap_no_student_code_runs(escape_class, markers, tmp_path):
    """GRADER_NO_BWRAP makes the grader believe bubblewrap is missing: it must refuse, and say why."""
    out = tmp_path / "grades"
    proc = run_batch(escape_class, out, env=grader_env(**{sandbox.NO_BWRAP_ENV: "1"}))
    assert marker_files(markers) == [] and no_escape_in_repo() == [], "student code ran without bubblewrap"
    assert "student code will NOT be run" in proc.stderr and "--unsafe-no-sandbox" in proc.stderr
    assert "student code was NOT run for 3 submission(s)" in proc.stderr
    book = gradebook(out)
    assert set(book) == {"good", *corpus.ESCAPE_CASES}
    for student, row in book.items():
        assert row["status"] == "graded" and row["isolation"].startswith("refused"), row
        d = result(out, student)
        assert sandbox.REFUSED_NOTE in d["notes"]
        feedback = (out / "feedback" / f"{student}.md").read_text()
        assert "Student code was not run" in feedback and "install bubblewrap" in feedback
        for c in d["checks"]:
            if (c["part"], c["name"]) in CODE_CHECKS:
                assert c["points"] == 0 and "isolation layer" in c["message"], c
    # the rest of the honest hand-in is graded as usual: only the student-code checks are lost
    good = result(out, "good")
    assert all(c["passed"] for c in good["checks"] if (c["part"], c["name"]) not in CODE_CHECKS
               and not not_handed_in_by_reference(c["message"]))
    if sandbox.bwrap_available():  # bubblewrap installed: --resume grades the refused ones again
        proc = run_batch(escape_class, out, "--resume")
        assert "0 already graded" in proc.stderr
        assert {r["isolation"] for r in gradebook(out).values()} == {"bubblewrap"} and full_marks(out, "good")
        assert marker_files(markers) == []


def test_the_escape_check_can_fail(escape_class, markers, tmp_path):
    """--unsafe-no-sandbox without bubblewrap runs the escapes unconfined: the markers appear."""
    out = tmp_path / "grades"
    proc = run_batch(escape_class, out, "--unsafe-no-sandbox", env=grader_env(**{sandbox.NO_BWRAP_ENV: "1"}))
    assert "NONE (--unsafe-no-sandbox)" in proc.stderr
    found = marker_files(markers)
    assert found == sorted(str(f / name) for f in markers for name in ("ESCAPED_BY_METRICS.txt",
                                                                       "ESCAPED_BY_READER.txt")), found
    assert {r["isolation"] for r in gradebook(out).values()} == {"none (--unsafe-no-sandbox)"}
    assert full_marks(out, "good")


def test_grade_command_refuses_without_bubblewrap(escape_class, markers):
    proc = subprocess.run([sys.executable, "-m", "grader", "grade", str(escape_class / "metrics_escapes.zip"),
                           "--json", "--timeout", TIMEOUT], cwd=REPO, capture_output=True, text=True,
                          timeout=300, env=grader_env(**{sandbox.NO_BWRAP_ENV: "1"}))
    d = json.loads(proc.stdout)
    assert d["isolation"].startswith("refused") and sandbox.REFUSED_NOTE in d["notes"]
    assert "student code will NOT be run" in proc.stderr and "student code not run" in proc.stderr
    assert marker_files(markers) == []


def test_sandbox_run_refuses_in_process(good_zip, tmp_path, monkeypatch):
    """Without bubblewrap (``GRADER_NO_BWRAP``): ``sandbox.run`` starts nothing unless unsafe is allowed."""
    from grader.submission import open_submission

    monkeypatch.delenv(sandbox.UNSAFE_ENV, raising=False)
    monkeypatch.setenv(sandbox.NO_BWRAP_ENV, "1")  # as if bubblewrap were not installed
    sub = open_submission(good_zip, tmp_path / "sub")
    marker = tmp_path / "ran.txt"
    (sub.root / "metrics.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n"
                                         "def summarize(p, l):\n    return {}\n")
    task = {"task": "metrics", "module": "metrics", "function": "summarize",
            "cases": [{"name": "x", "labels": [1], "predictions": [1]}]}
    sandbox.take_runs()
    child = sandbox.run(sub.root, task)
    assert child.status == "refused" and "install bubblewrap" in child.message and not marker.exists()
    assert sandbox.take_runs() == ["refused"]
    try:
        sandbox.allow_unsafe(True)
        child = sandbox.run(sub.root, task)
    finally:
        sandbox.allow_unsafe(None)
    assert child.status == "ok" and marker.exists() and sandbox.take_runs() == ["unsafe"]


def snapshot(root: Path) -> dict[str, tuple[int, int]]:
    """Every path under ``root`` (but .git): (size, mtime) for files, (-1, 0) for folders."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if not (dirpath == str(root) and d in (".git", ".pytest_cache"))]
        for name in dirnames:
            out[os.path.relpath(os.path.join(dirpath, name), root)] = (-1, 0)
        for name in filenames:
            path = os.path.join(dirpath, name)
            try:
                st = os.lstat(path)
            except OSError:
                continue
            out[os.path.relpath(path, root)] = (st.st_size, st.st_mtime_ns)
    return out


def test_batch_with_a_read_only_project_writes_nothing(good_zip, tmp_path):
    """Four honest hand-ins on two workers, with the project (fixtures, code, virtualenv) read-only.

    With bubblewrap the batch runs in a mount namespace where the repository is bind-mounted
    read-only (a root user would write through file modes); without it the fixtures are made
    read-only with chmod and restored afterwards. Either way no path in the repository may appear,
    vanish or change.
    """
    folder, out = tmp_path / "class", tmp_path / "grades"
    folder.mkdir()
    for i in range(4):
        shutil.copyfile(good_zip, folder / f"s{i}.zip")
    fixtures = REPO / "fixtures"
    before = snapshot(REPO)
    modes = {}
    try:
        if sandbox.bwrap_available():
            prefix = [sandbox.BWRAP, "--dev-bind", "/", "/", "--ro-bind", str(REPO), str(REPO), "--"]
            args: tuple[str, ...] = ()
        else:
            prefix, args = [], ("--unsafe-no-sandbox",)  # the honest reference only
            for p in [fixtures, *fixtures.rglob("*")]:
                modes[p] = stat.S_IMODE(p.stat().st_mode)
                p.chmod(modes[p] & ~0o222)
        run_batch(folder, out, *args, prefix=prefix)
    finally:
        for p, mode in modes.items():
            p.chmod(mode)
    after = snapshot(REPO)
    changed = sorted(p for p in set(before) | set(after) if before.get(p) != after.get(p))
    assert changed == [], f"grading changed the repository: {changed[:20]}"
    for i in range(4):
        assert full_marks(out, f"s{i}"), result(out, f"s{i}")["checks"]


def test_site_packages_on_the_import_path_are_bound_back_under_tmp_and_nothing_else(tmp_path, monkeypatch):
    """A .pth file may put a site-packages folder under /tmp on the grader's import path (the packaging test's
    virtualenv does): the sandbox binds it back read-only over its private /tmp. Another folder on the path (the
    current folder, which may hold hand-ins) stays hidden."""
    libraries = tmp_path / "elsewhere" / "lib" / "python3" / "site-packages"
    libraries.mkdir(parents=True)
    hand_ins = tmp_path / "class"
    hand_ins.mkdir()
    monkeypatch.setattr(sys, "path", [str(hand_ins), *sys.path, str(libraries)])
    cmd = sandbox.bwrap_prefix(tmp_path / "scratch")
    bound = [cmd[i + 1] for i, arg in enumerate(cmd) if arg == "--ro-bind"]
    assert str(libraries) in bound and str(hand_ins) not in bound


def test_the_fork_servers_wipe_spares_its_work_folder_and_every_bind_under_tmp(tmp_path):
    """After each run the server empties its private /tmp, except its own work folder and the read-only binds of
    the project and its packages when they live under /tmp (a checkout there): trying to delete those failed file
    by file, about 0.2 s after every run. Everything else a run leaves goes, beside a bind too."""
    from grader.forkserver import _wipe, mounts_under

    for rel in ("work/run/scratch/x", "tmp.ab/c/.venv/lib/site.py", "tmp.ab/left.txt", "student/junk.bin", "top.txt"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("x")
    mountinfo = (f"36 25 0:32 / {tmp_path} rw - tmpfs tmpfs rw\n"
                 f"37 36 8:1 /x {tmp_path}/tmp.ab/c ro - ext4 /dev/sda1 ro\n"
                 "39 25 8:1 / /usr ro - ext4 /dev/sda1 ro\n")
    binds = mounts_under(str(tmp_path), mountinfo)
    assert binds == [tmp_path / "tmp.ab" / "c"]
    _wipe(str(tmp_path), [tmp_path / "work", *binds])
    left = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file())
    assert left == ["tmp.ab/c/.venv/lib/site.py", "work/run/scratch/x"]
    assert mounts_under("/tmp", "38 36 8:1 /y /tmp/a\\040b ro - ext4 /dev/sda1 ro") == [Path("/tmp/a b")]
