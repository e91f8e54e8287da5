"""The Gradescope autograder, without Gradescope: the bundle unpacked into a root laid out like /autograder/.

``python -m grader gradescope`` builds the zip; the test unzips it into ``ROOT/source``, copies
``run_autograder`` to ``ROOT``, puts a hand-in into ``ROOT/submission`` and runs ``run_autograder`` with
``AUTOGRADER_ROOT=ROOT`` and a ``python3`` first on ``PATH``, as Gradescope would (as root). Student code
runs as ``nobody`` there, so the root and that ``python3`` must be reachable by ``nobody``: the root is a
world-traversable folder under the system temp folder, and where this venv's interpreter lives under a
private home, ``python3`` is a venv of the system's Python of the same version that sees this venv's
packages.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import zipfile
from pathlib import Path

import pytest
from bad_submissions import corpus

from grader import gradescope
from lab.tools.submit import submit

REPO = Path(__file__).resolve().parent.parent
BUNDLE_SECRET = "bundle-secret-7f3a9c"   # given at bundle time (GRADER_SECRET), lands in instructor/secret.txt
RUNTIME_SECRET = "runtime-secret-c41d2e"  # given at run time instead
VISIBILITY = {"hidden", "after_due_date", "after_published", "visible"}


def _ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def validate(doc: dict) -> None:
    """Gradescope's documented results.json fields, with their types."""
    number = (int, float)
    assert isinstance(doc["score"], number) and not isinstance(doc["score"], bool)
    assert isinstance(doc["execution_time"], number) and doc["execution_time"] >= 0
    assert isinstance(doc["output"], str)
    assert doc["visibility"] in VISIBILITY and doc["stdout_visibility"] in VISIBILITY
    assert isinstance(doc["tests"], list)
    for t in doc["tests"]:
        assert isinstance(t["name"], str) and t["name"]
        assert isinstance(t["score"], number) and isinstance(t["max_score"], number)
        assert 0 <= t["score"] <= t["max_score"]
        assert isinstance(t["output"], str)
        assert t["visibility"] in VISIBILITY
        assert t.get("status", "passed") in ("passed", "failed")
    json.loads(json.dumps(doc, allow_nan=False))


def not_in_reference() -> float:
    from test_grader import not_in_reference as points

    return points()


# ----- set-up ------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def good_zip(tmp_path_factory, reference_workspace) -> Path:
    work = reference_workspace(tmp_path_factory.mktemp("reference") / "workspace")
    return submit("reference", work, tmp_path_factory.mktemp("handed-in"))


def _nobody_can_run(python: str) -> bool:
    r = subprocess.run(["runuser", "-u", "nobody", "--", python, "-I", "-c", "import numpy, onnxruntime.quantization"],
                       capture_output=True, timeout=120)
    return r.returncode == 0


@pytest.fixture(scope="module")
def world() -> Path:
    """A folder ``nobody`` can traverse (pytest's own temp folders are private to their user)."""
    if os.geteuid() != 0 or shutil.which("runuser") is None:
        if _ci():
            pytest.fail("CI runs as root with runuser: the autograder's privilege drop must be tested there")
        pytest.skip("run_autograder runs as root (as on Gradescope) and drops student code to nobody")
    base = Path(tempfile.mkdtemp(prefix="gradescope-test-"))
    os.chmod(base, 0o755)
    yield base
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def python_bin(world) -> Path:
    """A folder holding a ``python3`` with this venv's packages that ``nobody`` can run."""
    bin_dir = world / "bin"
    bin_dir.mkdir()
    python = sys.executable
    if not _nobody_can_run(python):
        version = f"python{sys.version_info.major}.{sys.version_info.minor}"
        base = next((p for p in (f"/usr/bin/{version}", f"/usr/local/bin/{version}") if os.path.exists(p)), None)
        if base is None:
            pytest.skip(f"this interpreter is not reachable by nobody, and there is no system {version}")
        venv = world / "py"
        subprocess.run([base, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
        site = Path(subprocess.check_output([str(venv / "bin" / "python3"), "-c",
                                             "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                            text=True).strip())
        (site / "project-venv.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
        python = str(venv / "bin" / "python3")
        shut = next((p for p in Path(sysconfig.get_paths()["purelib"]).parents if not os.stat(p).st_mode & 0o001),
                    None)
        assert _nobody_can_run(python), "the system Python's venv cannot import this venv's packages as nobody" + (
            f": {shut} is not searchable by others (mode {os.stat(shut).st_mode & 0o777:o}, as `mktemp -d` makes "
            "it); clone the project where nobody can reach it, as Gradescope's autograder runs it" if shut else "")
    wrapper = bin_dir / "python3"
    wrapper.write_text(f'#!/bin/sh\nexec "{python}" "$@"\n')
    wrapper.chmod(0o755)
    return bin_dir


@pytest.fixture(scope="module")
def bundle(world) -> Path:
    return gradescope.build(world / "autograder.zip", secret=BUNDLE_SECRET)


@pytest.fixture
def autograder(world, bundle, python_bin):
    """Run ``run_autograder`` on a hand-in (a zip's bytes) in a fresh /autograder-like root; results.json back."""
    roots = []

    def grade(handin, metadata: dict | None = None, bundle_zip: Path | None = None,
              **env) -> tuple[dict, subprocess.CompletedProcess]:
        """``handin``: a zip's bytes, or a function of the root that returns them (a probe names paths in it);
        ``metadata``: Gradescope's ``submission_metadata.json`` beside ``submission/`` (who handed in);
        ``bundle_zip``: another bundle than the module's."""
        root = Path(tempfile.mkdtemp(prefix="root-", dir=world))
        roots.append(root)
        if callable(handin):
            handin = handin(root)
        os.chmod(root, 0o755)
        with zipfile.ZipFile(bundle_zip or bundle) as zf:
            zf.extractall(root / "source")
            for info in zf.infolist():  # extractall does not keep modes; Gradescope's unzip does
                os.chmod(root / "source" / info.filename, (info.external_attr >> 16) & 0o777)
        shutil.copy2(root / "source" / "run_autograder", root / "run_autograder")
        (root / "submission").mkdir()
        (root / "results").mkdir()
        if metadata is not None:
            (root / gradescope.METADATA).write_text(json.dumps(metadata))
        zip_path = world / "handin.zip"
        zip_path.write_bytes(handin)
        with zipfile.ZipFile(zip_path) as zf:
            zf.extractall(root / "submission")
        clean = {k: v for k, v in os.environ.items() if not k.startswith("GRADER_")}
        clean.update(PATH=f"{python_bin}:{os.environ.get('PATH', '/usr/bin:/bin')}", AUTOGRADER_ROOT=str(root), **env)
        proc = subprocess.run([str(root / "run_autograder")], cwd=root, env=clean, capture_output=True, text=True,
                              timeout=600)
        results = root / "results" / "results.json"
        assert results.is_file(), f"no results.json; run_autograder said:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
        return json.loads(results.read_text()), proc

    yield grade
    for root in roots:
        shutil.rmtree(root, ignore_errors=True)


def _files(good_zip: Path) -> corpus.Files:
    return corpus.read_zip(good_zip)


# ----- the bundle ----------------------------------------------------------------------------------

def test_bundle_holds_what_gradescope_runs(tmp_path, monkeypatch):
    monkeypatch.delenv("GRADER_SECRET", raising=False)
    secret_file = tmp_path / "secret"
    secret_file.write_text(BUNDLE_SECRET + "\n")
    monkeypatch.setenv("GRADER_SECRET_FILE", str(secret_file))
    proc = subprocess.run([sys.executable, "-m", "grader", "gradescope", "--out", str(tmp_path / "ag.zip")],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert os.stat(tmp_path / "ag.zip").st_mode & 0o777 == 0o600  # it holds the secret: the instructor's only
    with zipfile.ZipFile(tmp_path / "ag.zip") as zf:
        infos = {i.filename: i for i in zf.infolist()}
        names = set(infos)
        assert {"setup.sh", "run_autograder", "requirements.txt", "grader/rubric.toml", "grader/core.py",
                "grader/gradescope.py", "lab/__init__.py", "fixtures/fp32.onnx", "fixtures/heldout.npz",
                "fixtures/manifest.json", "instructor/secret.txt"} <= names
        assert not any("__pycache__" in n or n.endswith(".pyc") for n in names)
        assert "fixtures/build.py" not in names
        mode = {n: (i.external_attr >> 16) & 0o777 for n, i in infos.items()}
        assert mode["run_autograder"] == 0o755 and mode["setup.sh"] == 0o755
        assert mode["fixtures/heldout.npz"] == 0o600 and mode["instructor/secret.txt"] == 0o600
        assert zf.read("instructor/secret.txt").decode().strip() == BUNDLE_SECRET
        leaks = [n for n in names if n != "instructor/secret.txt" and BUNDLE_SECRET.encode() in zf.read(n)]
        assert not leaks
        run_script = zf.read("run_autograder").decode()
        setup = zf.read("setup.sh").decode()
        reqs = [r for r in zf.read("requirements.txt").decode().splitlines() if r and not r.startswith("#")]
    # the explicit isolation settings, said where they are made
    assert "export GRADER_UNSAFE_NO_SANDBOX=1" in run_script and "isolation layer" in run_script
    assert 'GRADER_CHILD_USER="${GRADER_CHILD_USER:-nobody}"' in run_script
    assert "AUTOGRADER_ROOT:-/autograder" in run_script and "exec python3 " in run_script
    assert "bubblewrap" in setup and "-r requirements.txt" in setup
    pinned = [line.strip() for line in (REPO / "requirements.txt").read_text().splitlines()]
    assert reqs and all(r in pinned and "==" in r for r in reqs)
    for script in ("setup.sh", "run_autograder"):
        path = tmp_path / script
        path.write_text(setup if script == "setup.sh" else run_script)
        assert subprocess.run(["bash", "-n", str(path)]).returncode == 0


def test_no_secret_given_means_none_bundled(tmp_path, monkeypatch):
    monkeypatch.delenv("GRADER_SECRET", raising=False)
    monkeypatch.delenv("GRADER_SECRET_FILE", raising=False)
    with zipfile.ZipFile(gradescope.build(tmp_path / "ag.zip")) as zf:
        assert not any(n.startswith("instructor/") for n in zf.namelist())


# ----- grading in an /autograder-like root -----------------------------------------------------------

def test_reference_handin_gets_full_marks(autograder, good_zip):
    doc, proc = autograder(good_zip.read_bytes())
    validate(doc)
    assert doc["extra_data"]["status"] == "graded", doc["output"]
    assert doc["extra_data"]["isolation"] == "none (--unsafe-no-sandbox)"  # no bubblewrap, by the bundle's setting
    assert doc["score"] == doc["extra_data"]["max_score"] - not_in_reference() and doc["score"] > 40
    lost = [t["name"] for t in doc["tests"] if t["score"] < t["max_score"]  # lessons 08 and 09: not_in_reference
            and "toolbox.json" not in t["output"] and "outliers.json" not in t["output"]]
    assert not lost, lost
    hidden = [t for t in doc["tests"] if t["name"].startswith("hidden checks")]
    assert len(hidden) >= 2 and all(t["visibility"] == "after_published" for t in hidden)
    assert all(t["visibility"] == "visible" for t in doc["tests"] if t not in hidden)
    assert "the file is named" not in doc["output"]
    assert BUNDLE_SECRET not in json.dumps(doc) and BUNDLE_SECRET not in proc.stdout + proc.stderr


def test_student_code_the_grader_cannot_start_is_an_error_never_a_grade(autograder, good_zip):
    """A grader-side failure to start student code (here: the unprivileged user it drops to does not exist) used to
    be graded, the checks that needed the code at 0 with "this is the grader's fault" inside."""
    doc, _ = autograder(good_zip.read_bytes(), GRADER_CHILD_USER="no-such-user")
    validate(doc)
    assert doc["extra_data"]["status"] == "error" and doc["score"] == 0 and doc["tests"] == []
    assert "the grader failed on its side" in doc["output"] and "no-such-user" in doc["output"]
    assert "not yours" in doc["output"]


@pytest.mark.parametrize("case", ["onnx_corrupt", "metrics_transposed", "hash_mismatch"])
def test_bad_handin_gets_its_corpus_status(autograder, good_zip, case):
    spec = next(c for c in corpus.CASES if c.name == case)
    doc, _ = autograder(spec.make(_files(good_zip)))
    validate(doc)
    assert doc["extra_data"]["status"] == spec.status
    text = doc["output"] + "\n".join(t["output"] for t in doc["tests"])
    assert spec.message in text
    if spec.status == "invalid":
        assert doc["score"] == 0 and doc["tests"] == [] and doc["extra_data"]["max_score"] > 0


def test_zip_handed_in_unopened_is_graded(autograder, good_zip):
    """A student who uploads ID.zip itself (Gradescope unpacks only what the upload dialog unpacks)."""
    buf = tempfile.SpooledTemporaryFile()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("reference.zip", good_zip.read_bytes())
    buf.seek(0)
    doc, _ = autograder(buf.read())
    validate(doc)
    assert doc["extra_data"]["status"] == "graded" and doc["score"] > 40


PROBE = '''import os
from onnxruntime.quantization import CalibrationDataReader

ROOT = {root!r}


def probe():
    out = []
    for tag, path, mode in (("secret", ROOT + "/source/instructor/secret.txt", "rb"),
                            ("heldout", ROOT + "/source/fixtures/heldout.npz", "rb"),
                            ("environ", "/proc/%d/environ" % os.getppid(), "rb"),
                            ("results", ROOT + "/results/results.json", "wb")):
        try:
            with open(path, mode) as f:
                data = f.read() if "r" in mode else b"wrote"
                if tag == "environ":
                    data = [e for e in data.split(b"\\0") if e.startswith(b"GRADER_SECRET")]
                out.append(tag + "=READ:" + repr(data[:40]))
        except Exception as e:
            out.append(tag + "=" + type(e).__name__)
    return " ".join(out)
'''
READER = '''

class DigitReader(CalibrationDataReader):
    def __init__(self, pixels, batch_size=32, input_name="pixels"):
        raise RuntimeError("PROBE " + probe())

    def get_next(self):
        return None

    def rewind(self):
        pass
'''
METRICS = '''

def summarize(predictions, labels):
    raise RuntimeError("PROBE " + probe())
'''


def _probe_handin(good_zip: Path, root: str) -> bytes:
    """Its reader and summarize() raise with what they could open: the contents, or the error."""
    files = _files(good_zip)
    files["calibration_reader.py"] = (PROBE.format(root=root) + READER).encode()
    files["metrics.py"] = (PROBE.format(root=root) + METRICS).encode()
    return corpus.pack(files)


def test_student_code_cannot_read_the_secret_or_the_heldout_split(autograder, good_zip, world):
    """A hand-in whose reader and metrics.py open the secret, the held-out split and the grader's environment."""
    doc, proc = autograder(lambda root: _probe_handin(good_zip, str(root)), GRADER_SECRET=RUNTIME_SECRET)
    text = json.dumps(doc) + proc.stdout + proc.stderr
    validate(doc)
    probes = [t["output"] for t in doc["tests"] if "PROBE" in t["output"]]
    assert len(probes) >= 2, [t["output"][:200] for t in doc["tests"]]
    for out in probes:
        assert ("secret=PermissionError heldout=PermissionError environ=PermissionError "
                "results=PermissionError") in out, out
    assert BUNDLE_SECRET not in text and RUNTIME_SECRET not in text
    # the grader itself read both: the held-out check ran on the held-out split, as root
    heldout = next(t for t in doc["tests"] if "held-out images" in t["output"])
    assert heldout["score"] == heldout["max_score"], heldout["output"]


def test_the_probe_is_live_as_root(autograder, good_zip, world):
    """The same hand-in with student code left as root reads both: the test above can fail."""
    doc, proc = autograder(lambda root: _probe_handin(good_zip, str(root)), GRADER_CHILD_USER="root",
                           GRADER_SECRET=RUNTIME_SECRET)
    text = json.dumps(doc) + proc.stdout + proc.stderr
    probes = [t["output"] for t in doc["tests"] if "PROBE" in t["output"]]
    assert probes and all("secret=READ" in p and "heldout=READ" in p for p in probes)
    assert BUNDLE_SECRET in text and RUNTIME_SECRET in text



# ----- whose grade it is: the roster's sid in submission_metadata.json ------------------------------------------

OWNERS = ("anna", "s001", "s002", "s003", "s004")  # the first whose draw 0 the lessons accept (as in test_variants)


@pytest.fixture(scope="module")
def owned_zip(tmp_path_factory) -> tuple[str, Path]:
    """A student's own hand-in (the reference build for their variant), and the student's id."""
    from grader import reference
    from lab import variant
    from lab.errors import LabError

    tmp = tmp_path_factory.mktemp("owned")
    for owner in OWNERS:
        with variant.using(None):
            try:
                work = reference.build(tmp / owner / "workspace", student=owner)
            except LabError:  # lesson 10's release refuses this id's draw 0: the next id
                continue
        return owner, submit(owner, work, tmp / owner / "handed-in")
    pytest.fail(f"no id of {OWNERS} builds at draw 0")


def _metadata(*sids) -> dict:
    """Gradescope's submission_metadata.json (its documented fields), each user with the roster's sid."""
    return {"id": 1, "created_at": "2026-12-01T12:00:00.000000-08:00", "assignment": {"id": 2, "title": "Lab"},
            "submission_method": "upload", "previous_submissions": [],
            "users": [{"email": f"{s}@example.edu", "id": 100 + i, "name": f"Student {s}", "sid": s}
                      for i, s in enumerate(sids)]}


def test_the_roster_sid_is_whose_grade_it_is(autograder, owned_zip):
    """The owner's zip handed in by ben (the roster's sid): every artifact check 0, feedback says another student's
    variant, and run_autograder's stdout (the instructor's only) names the owner. By the owner: full marks; in a group
    with ben, the member submission.json names is credited."""
    owner, zip_path = owned_zip
    theirs, proc = autograder(zip_path.read_bytes(), metadata=_metadata(owner))
    validate(theirs)
    assert theirs["extra_data"]["status"] == "graded"
    assert theirs["score"] == theirs["extra_data"]["max_score"] - not_in_reference(), theirs["output"]
    assert f"variant: own {owner} (the credited id" in proc.stdout
    copied, proc = autograder(zip_path.read_bytes(), metadata=_metadata("ben"))
    validate(copied)
    assert copied["score"] < theirs["score"] / 4
    zeroed = [t for t in copied["tests"] if "were made for another student's variant" in t["output"]]
    assert len(zeroed) > 20 and all(t["score"] == 0 for t in zeroed)
    assert "STUDENT_ID = 'ben'" in zeroed[0]["output"]
    assert "variant: own ben (the credited id" in proc.stdout and f"made for {owner} (" in proc.stdout
    assert f"'{owner}'" not in json.dumps(copied)  # whose: the instructor's only (stdout is hidden from students)
    group, _ = autograder(zip_path.read_bytes(), metadata=_metadata("ben", owner))
    assert group["score"] == theirs["score"]


def test_without_a_roster_sid_submission_json_s_student_stands(autograder, owned_zip):
    """No sid (a roster without Student IDs): the grader knows no credited id and says so to the instructor."""
    owner, zip_path = owned_zip
    meta = _metadata("x")
    del meta["users"][0]["sid"]
    doc, proc = autograder(zip_path.read_bytes(), metadata=meta)
    assert doc["score"] == doc["extra_data"]["max_score"] - not_in_reference(), doc["output"]
    assert f"variant: own {owner} (submission.json's student (no credited id known" in proc.stdout


def test_a_bundled_course_file_prices_and_takes_its_late_penalty_from_gradescope_s_time(autograder, good_zip, world):
    """``gradescope --config``: the course's prices and its late policy, the time from submission_metadata.json's
    created_at (2026-12-01T12:00-08:00 is 20:00 UTC, a started day after a due date of midnight UTC)."""
    folder = Path(tempfile.mkdtemp(prefix="course-", dir=world))
    (folder / "extensions.csv").write_text("student,due\nsomeone,2026-12-09T00:00:00+00:00\n")
    (folder / "course.toml").write_text('[points]\nreader.contract = 2\n\n[late]\ndue = 2026-12-01T00:00:00Z\n'
                                        'per_day = 0.1\nextensions = "extensions.csv"\n')
    coursed = gradescope.build(folder / "autograder.zip", secret=BUNDLE_SECRET, course_file=folder / "course.toml")
    with zipfile.ZipFile(coursed) as zf:
        assert {"course/course.toml", "course/extensions.csv"} <= set(zf.namelist())
    plain, _ = autograder(good_zip.read_bytes(), metadata=_metadata("reference"))
    doc, _ = autograder(good_zip.read_bytes(), metadata=_metadata("reference"), bundle_zip=coursed)
    validate(doc)
    possible = doc["extra_data"]["max_score"]
    assert possible == plain["extra_data"]["max_score"] - 2 and doc["extra_data"]["late_days"] == 1
    assert doc["score"] == pytest.approx(plain["score"] - 2 - round(0.1 * possible, 2))
    assert "Handed in late: 1 day(s) after the due date" in doc["output"]
