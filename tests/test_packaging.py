"""Packaging: the grader refuses to start without its fixtures, rubric or secret, and ``pip install .`` (not
editable, its dependencies taken from the test environment) into a fresh virtualenv runs every lesson and grades
the result in full (``python -m instructor workbook``), from outside the project.

The refusals run ``python -m grader`` with a damaged copy of a package ahead of the real one on ``PYTHONPATH``:
the source tree is never touched. Each must exit non-zero before any hand-in is read (no feedback, no gradebook).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from grader import preflight, rubric

REPO = Path(__file__).resolve().parent.parent
# The quick sizes of the other headless runs (conftest.SMALL_PARAMETERS), those `-p` can pass (scalars).
QUICK = {"MAX_BATCHES": 16, "ENTROPY_BINS": 512, "SPEED_WARMUP": 3, "SPEED_REPEATS": 20, "SWEEP_REPEATS": 5}
LEFT_OUT = (".git", ".venv", "build", "kit", "workspace", "grades", "artifacts", "__pycache__", "*.egg-info",
            ".ipynb_checkpoints", ".pytest_cache", ".hypothesis")


def env_without_grader_settings(**extra: str) -> dict[str, str]:
    """This environment without any GRADER_* setting (conftest's GRADER_NO_SECRET included), plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GRADER_") and k != "PYTHONPATH"}
    return {**env, **extra}


def grader_cli(tmp_path: Path, *args: str, shadow: Path | None = None, **env: str) -> subprocess.CompletedProcess:
    """``python -m grader ARGS`` from a folder of its own, with ``shadow``'s packages ahead of the project's."""
    where = tmp_path / "cwd"
    where.mkdir(exist_ok=True)
    full = env_without_grader_settings(**env)
    if shadow is not None:
        full["PYTHONPATH"] = str(shadow)
    return subprocess.run([sys.executable, "-m", "grader", *args], cwd=where, env=full, capture_output=True,
                          text=True, timeout=300)


@pytest.fixture
def a_class(tmp_path) -> Path:
    """A folder with one hand-in. It is never opened: every command here must stop before."""
    folder = tmp_path / "class"
    folder.mkdir()
    (folder / "s-001.zip").write_bytes(b"PK\x05\x06" + b"\0" * 18)
    return folder


def shadow_fixtures(tmp_path: Path) -> Path:
    """A copy of the ``fixtures`` package (its code and data) in ``tmp_path/shadow``; returns the copy's folder."""
    folder = tmp_path / "shadow" / "fixtures"
    folder.mkdir(parents=True)
    for name in ("__init__.py", preflight.MANIFEST, *preflight.REQUIRED_FIXTURES):
        shutil.copy2(REPO / "fixtures" / name, folder / name)
    return folder


def assert_refused(proc: subprocess.CompletedProcess, *words: str) -> None:
    assert proc.returncode == preflight.EXIT_REFUSED, proc.stdout + proc.stderr
    assert "refusing to start, nothing was graded" in proc.stderr
    for word in words:
        assert word in proc.stderr, proc.stderr
    assert "score" not in proc.stdout + proc.stderr and "Where you lost points" not in proc.stdout


def test_a_damaged_fixture_refuses_a_batch_before_any_hand_in(tmp_path, a_class):
    fixtures = shadow_fixtures(tmp_path)
    model = bytearray((fixtures / "fp32.onnx").read_bytes())
    model[len(model) // 2] ^= 0xFF
    (fixtures / "fp32.onnx").write_bytes(bytes(model))
    out = tmp_path / "grades"
    proc = grader_cli(tmp_path, "batch", str(a_class), "--out", str(out), shadow=fixtures.parent, GRADER_SECRET="s")
    assert_refused(proc, "fixtures/fp32.onnx: SHA-256", "differs from manifest.json", "pip install --force-reinstall",
                   "git checkout -- fixtures/")
    assert not out.exists(), "a refused batch writes no gradebook"


def test_a_missing_fixture_refuses_a_grade(tmp_path, a_class):
    fixtures = shadow_fixtures(tmp_path)
    (fixtures / "heldout.npz").unlink()
    proc = grader_cli(tmp_path, "grade", str(a_class / "s-001.zip"), shadow=fixtures.parent, GRADER_SECRET="s")
    assert_refused(proc, "fixtures/heldout.npz: missing", "reinstall the grader")
    assert proc.stdout == ""


def test_a_missing_rubric_refuses_a_grade(tmp_path, a_class):
    shadow = tmp_path / "shadow"
    shutil.copytree(REPO / "grader", shadow / "grader", ignore=shutil.ignore_patterns("__pycache__", "rubric.toml"))
    proc = grader_cli(tmp_path, "grade", str(a_class / "s-001.zip"), shadow=shadow, GRADER_SECRET="s")
    assert_refused(proc, "grader/rubric.toml: missing", "reinstall the grader", "git checkout -- grader/rubric.toml")


def test_a_missing_secret_refuses_grade_batch_and_the_gradescope_bundle(tmp_path, a_class):
    out = tmp_path / "grades"
    for args in (["grade", str(a_class / "s-001.zip")], ["batch", str(a_class), "--out", str(out)],
                 ["gradescope", "--out", str(tmp_path / "autograder.zip")]):
        proc = grader_cli(tmp_path, *args)
        assert_refused(proc, "instructor secret: neither GRADER_SECRET nor GRADER_SECRET_FILE is set",
                       "--no-secret")
    assert not out.exists() and not (tmp_path / "autograder.zip").exists()


def test_a_secret_file_that_is_not_there_refuses_even_with_no_secret(tmp_path, a_class):
    gone = tmp_path / "instructor-secret.txt"
    proc = grader_cli(tmp_path, "grade", str(a_class / "s-001.zip"), "--no-secret", GRADER_SECRET_FILE=str(gone))
    assert_refused(proc, f"GRADER_SECRET_FILE names {gone}, which is not a file")
    gone.write_text("\n")
    proc = grader_cli(tmp_path, "grade", str(a_class / "s-001.zip"), GRADER_SECRET_FILE=str(gone))
    assert_refused(proc, f"{gone} is empty")


def test_a_grader_that_is_set_up_starts(tmp_path):
    """Past the preflight, the command's own checks answer: here, a hand-in that does not exist."""
    for env in ({"GRADER_SECRET": "s"}, {"GRADER_NO_SECRET": "1"}):
        proc = grader_cli(tmp_path, "grade", str(tmp_path / "nowhere.zip"), **env)
        assert proc.returncode == 2 and "does not exist" in proc.stderr, proc.stderr
        assert ("the hidden summarize() lists are the public ones" in proc.stderr) == ("GRADER_NO_SECRET" in env)
    assert preflight.problems(env={"GRADER_SECRET": "s"}) == []


def test_a_rubric_that_does_not_price_a_check_is_named(monkeypatch):
    full = rubric.rubric()
    part = next(p for p, checks in full.items() if len([k for k in checks if k != "title"]) > 1)
    name = next(k for k in full[part] if k != "title")
    without = {**full, part: {k: v for k, v in full[part].items() if k != name}}
    monkeypatch.setattr(rubric, "rubric", lambda prices=(): without)
    found = preflight.rubric_problems()
    assert len(found) == 1 and f"rubric.toml has no [{part}] {name}" in found[0].what
    assert "this rubric is not the grader's" in found[0].what


def test_the_manifest_of_the_student_kit_is_named(tmp_path):
    """An instructor pointing the grader at the kit's fixtures (no held-out split) is told so."""
    fixtures = shadow_fixtures(tmp_path)
    manifest = json.loads((fixtures / preflight.MANIFEST).read_text())
    del manifest["heldout.npz"]
    (fixtures / preflight.MANIFEST).write_text(json.dumps(manifest))
    found = preflight.fixture_problems(fixtures)
    assert [p.what for p in found] == ["fixtures/manifest.json lists no heldout.npz (the student kit's manifest "
                                       "leaves out the held-out split)"]


def test_lab_run_finds_the_lessons_from_the_current_folder_or_says_where_it_looked(tmp_path):
    from lab.tools import run

    project, empty = tmp_path / "project", tmp_path / "empty"
    (project / "notebooks").mkdir(parents=True)
    (project / "notebooks" / "00_start.ipynb").write_text("{}")
    empty.mkdir()
    assert run.find_notebooks(cwd=project, checkout=empty) == (project / "notebooks").resolve()
    assert run.find_notebooks(cwd=project / "notebooks", checkout=empty) == (project / "notebooks").resolve()
    found = run.find_notebooks(str(project / "notebooks"), cwd=empty, checkout=empty)
    assert found == (project / "notebooks").resolve()
    with pytest.raises(FileNotFoundError, match=r"no lessons .* in .*empty/notebooks, .*empty; run from the "
                                                r"project's folder .* or pass --notebooks DIR"):
        run.find_notebooks(cwd=empty, checkout=empty)
    with pytest.raises(FileNotFoundError, match="pass --notebooks DIR"):
        run.find_notebooks(str(empty), cwd=project, checkout=project / "notebooks")


def test_the_environment_check_finds_the_pins_beside_the_lessons_when_installed(tmp_path):
    """Installed in site-packages, the lab has no requirements.txt beside it: lessons run in notebooks/."""
    from lab import environment

    site, project = tmp_path / "site-packages", tmp_path / "project"
    (project / "notebooks").mkdir(parents=True)
    (project / "requirements.txt").write_text("numpy==2.4.6\n")
    site.mkdir()
    assert environment.project_root(site, cwd=project / "notebooks") == project
    assert environment.project_root(site, cwd=tmp_path) == site  # not found: the check says the pins are missing
    assert environment.project_root(REPO, cwd=tmp_path) == REPO


# ----- pip install . into a fresh virtualenv ---------------------------------------------------------------------

def clean_copy(dest: Path) -> Path:
    """The project as a checkout has it: no virtualenv, build output, egg-info or caches."""
    shutil.copytree(REPO, dest, ignore=shutil.ignore_patterns(*LEFT_OUT), symlinks=True)
    return dest


def run(cmd: list[str], cwd: Path, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{' '.join(cmd)}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


@pytest.mark.slow
def test_a_non_editable_install_runs_every_lesson_and_grades_full_marks(tmp_path):
    """``pip install .`` of a clean copy (its dependencies from this environment), then, from another folder with
    that virtualenv's Python, ``python -m instructor workbook --notebooks`` (every lesson, then the grade of that
    run) and ``python -m grader grade`` of the hand-in it wrote: every lesson runs and the hand-in gets full marks,
    twice."""
    seconds: dict[str, float] = {}
    start = time.monotonic()
    project = clean_copy(tmp_path / "project")
    venv, elsewhere = tmp_path / "venv", tmp_path / "elsewhere"
    elsewhere.mkdir()
    python = venv / "bin" / "python"
    env = env_without_grader_settings(JUPYTER_PREFER_ENV_PATH="1")
    for name in ("VIRTUAL_ENV", "PYTHONHOME", "JUPYTER_PATH", "JUPYTER_DATA_DIR"):
        env.pop(name, None)
    run([sys.executable, "-m", "venv", str(venv)], elsewhere, env, 300)
    # The dependencies come from this environment (a path line in a .pth file: its own .pth files, the editable
    # install of the project among them, are not read), so the project alone is installed; `pip check` then proves
    # each declared dependency is there at a version the project accepts. Installing them afresh took two minutes.
    site_of = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    theirs = Path(run([str(python), "-c", site_of], elsewhere, env, 60).stdout.strip())
    (theirs / "dependencies-from-the-test-environment.pth").write_text(
        run([sys.executable, "-c", site_of], elsewhere, env, 60).stdout.strip() + "\n")
    run([str(python), "-m", "pip", "install", "--quiet", "--no-deps", str(project)],
        elsewhere, env, 600)
    run([str(python), "-m", "pip", "check"], elsewhere, env, 120)
    seconds["venv and pip install ."] = time.monotonic() - start

    where = json.loads(run([str(python), "-c", (
        "import json, sysconfig, lab, grader, fixtures, instructor, lab.data\n"
        "print(json.dumps({'site': sysconfig.get_paths()['purelib'], 'lab': lab.__file__, 'grader': grader.__file__,"
        " 'instructor': instructor.__file__, 'fixtures': str(lab.data.fixtures_dir())}))")], elsewhere, env,
        120).stdout)
    site = Path(where["site"]).resolve()
    for name in ("lab", "grader", "instructor", "fixtures"):
        path = Path(where[name]).resolve()
        assert path.is_relative_to(site), f"{name} imports from {path}, not the virtualenv's site-packages"
        assert not path.is_relative_to(REPO) and not path.is_relative_to(project)
    assert sorted(p.name for p in (site / "fixtures").iterdir() if p.suffix in (".onnx", ".npz", ".json")) == \
        sorted(preflight.REQUIRED_FIXTURES + (preflight.MANIFEST,))
    assert (site / "grader" / "rubric.toml").is_file() and any((site / "lab" / "schemas").glob("*.schema.json"))

    # The lessons' kernel, as `make setup` registers it, inside the virtualenv.
    run([str(python), "-m", "ipykernel", "install", "--sys-prefix", "--name", "calibration-lab",
         "--display-name", "Calibration Lab"], elsewhere, env, 120)
    specs = json.loads(run([str(python), "-c", "import json; from jupyter_client.kernelspec import KernelSpecManager; "
                            "print(json.dumps(KernelSpecManager().get_all_specs()))"], elsewhere, env, 120).stdout)
    assert Path(specs["calibration-lab"]["spec"]["argv"][0]).parent.parent.resolve() == venv.resolve()

    # Without --notebooks, from a folder with no lessons: a clear refusal naming where it looked.
    lost = subprocess.run([str(python), "-m", "lab", "run"], cwd=elsewhere, env=env, capture_output=True, text=True,
                          timeout=120)
    assert lost.returncode == 2 and "no lessons" in lost.stderr and "--notebooks DIR" in lost.stderr, lost.stderr

    t = time.monotonic()
    quick = [arg for name, value in QUICK.items() for arg in ("-p", name, str(value))]
    ran = run([str(python), "-m", "instructor", "workbook", "--notebooks", str(project / "notebooks"), "--work-dir",
               "ws", "--out", "executed", *quick], elsewhere, env, 3600)
    seconds["python -m instructor workbook (every lesson, quick sizes, then its grade)"] = time.monotonic() - t
    grade_line = next(line for line in ran.stdout.splitlines() if line.startswith("Grade: "))
    score = re.fullmatch(r"Grade: (\S+) / (\S+) \(graded\)", grade_line)
    assert score and score[1] == score[2] and "lost" not in ran.stdout.split(grade_line)[1], ran.stdout[-3000:]
    assert (elsewhere / "ws").is_dir() and not (project / "workspace").exists()  # the lessons wrote where told

    t = time.monotonic()
    handed_in = elsewhere / "executed" / "headless-run.zip"
    graded = run([str(python), "-m", "grader", "grade", str(handed_in), "--json"], elsewhere,
                 {**env, "GRADER_SECRET": "packaging-test-secret"}, 900)
    seconds["python -m grader grade"] = time.monotonic() - t
    doc = json.loads(graded.stdout[graded.stdout.index("{"):])
    assert doc["status"] == "graded" and doc["max_score"] > 0
    assert doc["score"] == doc["max_score"], [c["name"] for c in doc["checks"] if not c["passed"]]
    seconds["total"] = time.monotonic() - start
    print("\n".join(f"{name}: {s:.1f} s" for name, s in seconds.items()))


def test_a_secret_file_others_may_read_is_named_with_the_fix(tmp_path):
    from grader import preflight
    from grader.sandbox.secret import SECRET_FILE_ENV

    secret = tmp_path / "secret.txt"
    secret.write_text("s3cret\n")
    secret.chmod(0o644)
    words = preflight.secret_exposed({SECRET_FILE_ENV: str(secret)})
    assert "readable by others (mode 644)" in words and f"chmod 600 {secret}" in words
    secret.chmod(0o600)
    assert preflight.secret_exposed({SECRET_FILE_ENV: str(secret)}) == ""
    assert preflight.secret_problems({SECRET_FILE_ENV: str(secret)}) == []
