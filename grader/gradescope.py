"""A Gradescope autograder: ``build`` writes the bundle, ``run`` grades one submission inside it.

``python -m grader gradescope --out autograder.zip`` writes the zip Gradescope takes:

- ``setup.sh``: run once when Gradescope builds the image; installs Python 3.11+, the pinned packages
  the grader imports (``requirements.txt``, pins read from the project's) and bubblewrap;
- ``run_autograder``: run once per submission; grades ``$AUTOGRADER_ROOT/submission/`` (default root
  ``/autograder``) into ``$AUTOGRADER_ROOT/results/results.json`` with ``GradeResult.to_gradescope()``,
  with the ``python3`` first on ``PATH``;
- ``grader/`` (its rubric included), ``lab/`` and ``fixtures/`` (the held-out split too: only the
  grader reads it);
- ``instructor/secret.txt``, only when an instructor secret is given at bundle time
  (``GRADER_SECRET`` or ``GRADER_SECRET_FILE``); it is never read from the repository. At run time
  ``GRADER_SECRET`` / ``GRADER_SECRET_FILE`` take precedence over the bundled one.

Isolation on Gradescope: each submission gets its own container, and that container is the isolation
layer. bubblewrap usually cannot start there (no user namespaces), and where it could, its child would
still be root and could read the held-out split; so ``run_autograder`` says explicitly that student code
runs without bubblewrap (``GRADER_UNSAFE_NO_SANDBOX=1``, ``GRADER_NO_BWRAP=1``) and as the unprivileged
user ``nobody`` (``GRADER_CHILD_USER``, ``grader.sandbox.child_user``). The grader runs as root; the secret
and the held-out split are root's, mode 0600, so student code cannot open them, and cannot write the
results either.
"""
from __future__ import annotations

import argparse
import json
import os
import stat
import sys
import time
import zipfile
from datetime import datetime
from importlib import metadata
from pathlib import Path

from fixtures import HELDOUT_FILES
from grader import course, sandbox
from grader.results import GradeResult
from grader.sandbox import Limits
from grader.submission import handed_in_path as submission_path
from grader.version import __version__

SOURCE = Path(__file__).resolve().parent.parent  # the project, or /autograder/source inside the bundle
SECRET_REL = "instructor/secret.txt"
COURSE_REL = "course/course.toml"  # the course file (grader.course), when the bundle was built with --config
# root only (0600): student code runs as another user
PRIVATE = (*(f"fixtures/{name}" for name in HELDOUT_FILES), SECRET_REL)
BUNDLED = ("grader", "lab", "fixtures")
LEFT_OUT = ("fixtures/build.py",)  # an instructor tool that rebuilds the fixtures; the grader never runs it
# What grading imports (measured: the modules loaded by grading a hand-in); their pins come from
# requirements.txt, written there once. pip resolves their own dependencies.
# ml_dtypes: see requirements.txt
GRADING_PACKAGES = ("numpy", "onnx", "ml_dtypes", "onnxruntime", "jsonschema", "tqdm")
ZIP_TIME = (2026, 1, 1, 0, 0, 0)

SETUP_SH = """#!/usr/bin/env bash
# Gradescope runs this once, as root, while it builds the autograder image, from /autograder/source.
set -euo pipefail
cd "$(dirname "$0")"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# bubblewrap: the grader's local sandbox, for `python3 -m grader grade` when you debug in this container.
# run_autograder does not use it (see there): the container is the isolation layer on Gradescope.
apt-get install -y -qq --no-install-recommends python3 python3-pip python3-venv bubblewrap
# The grader needs Python 3.11 or newer (tomllib); Ubuntu 22.04's python3 is 3.10.
if ! python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  apt-get install -y -qq --no-install-recommends python3.11 python3.11-venv
  ln -sf "$(command -v python3.11)" /usr/local/bin/python3
  hash -r
  python3 -m ensurepip --upgrade
fi
# The pinned packages the grader imports (pins from the project's requirements.txt).
PIP_BREAK_SYSTEM_PACKAGES=1 python3 -m pip install --no-cache-dir --quiet -r requirements.txt
# Fail the image build now, not the first submission: the grader imports, and the private files are locked.
PYTHONPATH="$PWD" python3 -m grader.gradescope --lock-down
"""

RUN_AUTOGRADER = """#!/usr/bin/env bash
# Gradescope runs this once per submission, as root, in a fresh container: it grades
# $AUTOGRADER_ROOT/submission/ into $AUTOGRADER_ROOT/results/results.json (root: /autograder).
set -uo pipefail
ROOT="${AUTOGRADER_ROOT:-/autograder}"
SOURCE="$ROOT/source"
# Isolation: on Gradescope each submission has its own container, and that container is the
# isolation layer. bubblewrap usually cannot start in it (no user namespaces), and where it could,
# student code would still run as root inside it. So student code runs without bubblewrap, by this explicit setting
# rather than a silent fallback ...
export GRADER_UNSAFE_NO_SANDBOX=1
export GRADER_NO_BWRAP=1
# ... and as an unprivileged user, who cannot read the root-only (0600) instructor secret and held-out
# split, nor write the results.
export GRADER_CHILD_USER="${GRADER_CHILD_USER:-nobody}"
export PYTHONPATH="$SOURCE${PYTHONPATH:+:$PYTHONPATH}"
cd "$SOURCE"
exec python3 -m grader.gradescope --root "$ROOT"
"""


def requirements(project: Path = SOURCE) -> str:
    """The bundle's requirements.txt: the project's exact pins of ``GRADING_PACKAGES``."""
    if not (project / "requirements.txt").is_file():  # an installed grader (pip install .): the versions it runs with
        return "# Written by `python -m grader gradescope`: the packages the grader imports, pinned as installed\n" \
            + "\n".join(f"{p}=={metadata.version(p)}" for p in GRADING_PACKAGES) + "\n"
    pins = {}
    for line in (project / "requirements.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if "==" in line:
            name = line.split("==", 1)[0].strip().lower()
            pins[name] = line
    missing = [p for p in GRADING_PACKAGES if p not in pins]
    if missing:
        raise SystemExit(f"requirements.txt pins no version of {missing}; the bundle installs exact pins")
    return "# Written by `python -m grader gradescope`: the packages the grader imports, pinned as in the project\n" \
        + "\n".join(pins[p] for p in GRADING_PACKAGES) + "\n"


def bundle_secret() -> str | None:
    """The instructor secret at bundle time: ``GRADER_SECRET``, or the file ``GRADER_SECRET_FILE`` names."""
    return sandbox.secret()


def _files(project: Path) -> list[tuple[Path, str]]:
    out = []
    for top in BUNDLED:
        for path in sorted((project / top).rglob("*")):
            rel = path.relative_to(project).as_posix()
            if (path.is_file() and "__pycache__" not in path.parts and path.suffix not in (".pyc", ".pyo")
                    and rel not in LEFT_OUT and not path.name.startswith(".")):
                out.append((path, rel))
    return out


def _add(zf: zipfile.ZipFile, name: str, data: bytes, mode: int) -> None:
    info = zipfile.ZipInfo(name, ZIP_TIME)
    info.external_attr = (stat.S_IFREG | mode) << 16
    info.compress_type = zipfile.ZIP_DEFLATED
    zf.writestr(info, data)


def build(out: str | Path, project: Path = SOURCE, secret: str | None = None, course_file: Path | None = None) -> Path:
    """Write the autograder zip to ``out``; ``secret`` (default: ``bundle_secret()``) goes in ``instructor/``, the
    course file (``grader.course``, checked first) and its extensions file in ``course/``."""
    if course_file is not None:
        course.load(course_file)  # a bad course file is refused here, not on the first student's hand-in
    out = Path(out)
    secret = bundle_secret() if secret is None else secret
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".part")
    # the instructor's only (0600): it holds the secret and the held-out split, which students must never read
    with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as raw, \
            zipfile.ZipFile(raw, "w") as zf:
        _add(zf, "setup.sh", SETUP_SH.encode(), 0o755)
        _add(zf, "run_autograder", RUN_AUTOGRADER.encode(), 0o755)
        _add(zf, "requirements.txt", requirements(project).encode(), 0o644)
        for path, rel in _files(project):
            _add(zf, rel, path.read_bytes(), 0o600 if rel in PRIVATE else 0o644)
        if secret:
            _add(zf, SECRET_REL, secret.encode() + b"\n", 0o600)
        if course_file is not None:
            _add(zf, COURSE_REL, Path(course_file).read_bytes(), 0o644)
            for extra in course.files_of(Path(course_file)):
                _add(zf, f"course/{extra.name}", extra.read_bytes(), 0o600)  # students' extensions: staff only
    os.chmod(tmp, 0o600)  # a .part left by an earlier run kept its mode
    os.replace(tmp, out)
    return out


# ----- inside Gradescope's container -----------------------------------------------------------------

def lock_down(source: Path = SOURCE) -> None:
    """The private files root's and 0600; everything else readable (student code imports ``lab`` as another user).

    Zip tools (and Gradescope's unpacking) do not all keep modes, so this runs at set-up and before each
    grade. Without root (a local trial run) nothing can be handed to another user and nothing is changed.
    """
    if os.geteuid() != 0:
        return
    private = {source / rel for rel in PRIVATE}
    named = os.environ.get("GRADER_SECRET_FILE")  # an instructor's file named at run time
    if named and Path(named).is_file():
        private.add(Path(named))
    for path in private:
        if path.is_file():
            os.chown(path, 0, 0)
            os.chmod(path, 0o600)
    for top in BUNDLED:
        for path in [source / top, *(source / top).rglob("*")]:
            if path in private or path.is_symlink():
                continue
            mode = path.stat().st_mode
            want = mode | (0o555 if path.is_dir() else 0o444)
            if want != mode:
                os.chmod(path, stat.S_IMODE(want))
    instructor = source / "instructor"
    if instructor.is_dir():
        os.chmod(instructor, 0o700)


METADATA = "submission_metadata.json"  # Gradescope's, beside submission/: who handed in (users[], each with its sid)


def roster_id(metadata: Path, handed_in: Path) -> str | None:
    """The roster's student id of who handed in (``submission_metadata.json``'s ``users[i]["sid"]``), or None.

    Gradescope documents ``users`` (email, id, name; several in a group submission); the roster's Student ID comes as
    ``sid`` when the roster gives one (a number or a string; missing or empty otherwise). In a group the member whose
    id ``submission.json`` claims is the one credited (each member gets the grade), else the first."""
    try:
        users = json.loads(metadata.read_text(encoding="utf-8")).get("users") or []
    except (OSError, ValueError, AttributeError):
        return None
    sids = [str(u["sid"]).strip() for u in users if isinstance(u, dict) and u.get("sid") not in (None, "")
            and not isinstance(u.get("sid"), (bool, dict, list))]
    sids = [s for s in sids if s]
    if not sids:
        return None
    claimed = _claimed_student(handed_in)
    return claimed if claimed in sids else sids[0]


def _claimed_student(handed_in: Path) -> str | None:
    """``submission.json``'s student, read without trusting it (only to pick a group's member)."""
    try:
        if handed_in.is_dir():
            text = (handed_in / "submission.json").read_text(encoding="utf-8")
        else:
            with zipfile.ZipFile(handed_in) as zf:
                names = [n for n in zf.namelist() if n.rsplit("/", 1)[-1] == "submission.json" and n.count("/") <= 1]
                if len(names) != 1 or zf.getinfo(names[0]).file_size > 1 << 20:
                    return None
                text = zf.read(names[0]).decode("utf-8")
        student = json.loads(text).get("student")
    except Exception:  # noqa: BLE001 - only picks a group's member; the intake names whatever is wrong with it
        return None
    return student if isinstance(student, str) else None


def instructor_line(result: GradeResult) -> str:
    """Whose variant the hand-in was graded under and made for (``GradeResult.instructor``), on one line."""
    v = result.instructor.get("variant")
    if not v:
        return "variant: not determined (the hand-in did not reach its checks)"
    return (f"variant: own {v.get('own')} ({v.get('own_from')}); made for {v.get('made_for')} "
            f"({v.get('evidence')})")


def run(root: str | Path) -> dict:
    """Grade ``root/submission`` into ``root/results/results.json``; a crash is an ``error`` result, never none."""
    root = Path(root)
    start = time.monotonic()
    results = root / "results"
    results.mkdir(parents=True, exist_ok=True)
    settings = course.DEFAULT
    try:
        # deferred: inside the try, so an image that cannot import the grading stack (about 1 s: onnx, onnxruntime)
        # still writes an error results.json for Gradescope
        from grader.batch import grade_one

        if not os.environ.get("GRADER_SECRET") and not os.environ.get("GRADER_SECRET_FILE") \
                and (SOURCE / SECRET_REL).is_file():
            os.environ["GRADER_SECRET_FILE"] = str(SOURCE / SECRET_REL)
        if os.environ.get("GRADER_CHILD_USER") and os.geteuid() != 0:
            raise RuntimeError("run_autograder runs as root (as on Gradescope), so that student code can "
                               "run as an unprivileged user who cannot read the secret or the held-out split")
        lock_down()
        # deferred: as grade_one above; fixtures and rubric as built (the secret was checked when the bundle was)
        from grader import preflight

        found = preflight.fixture_problems() + preflight.rubric_problems()
        if found:
            raise preflight.PreflightError(preflight.message(found, "run_autograder"))
        sid = roster_id(root / METADATA, submission_path(root / "submission"))
        settings = course.load(SOURCE / COURSE_REL) if (SOURCE / COURSE_REL).is_file() else course.DEFAULT
        # the grade is the roster student's: their variant is the hand-in's own (without a roster id the grader
        # knows no credited id, and submission.json's student stands: the instructor's field says so)
        result, isolation = grade_one(submission_path(root / "submission"), Limits(), student=sid,
                                      credited=sid is not None, course=settings)
        print(instructor_line(result))  # run_autograder's stdout: the instructor's only (stdout_visibility hidden)
    except Exception as e:  # noqa: BLE001 - Gradescope must get a results.json whatever happened
        try:
            from grader.core import possible_points  # deferred: the stack may be what failed to import

            possible = possible_points()
        except Exception:  # noqa: BLE001 - without the points possible, the results.json still says what failed
            possible = 0.0
        result = GradeResult.without_results("submission", "error", f"the autograder failed: {type(e).__name__}: "
                                             f"{e}", grader_version=__version__, possible=possible)
        isolation = ""
    doc = result.to_gradescope()
    if result.status != "error":
        late_policy(doc, settings, sid or result.student, submitted_at(root / METADATA), result.max_score)
    doc["execution_time"] = round(time.monotonic() - start, 3)
    doc.setdefault("extra_data", {})["isolation"] = isolation
    tmp = results / "results.json.part"
    tmp.write_text(json.dumps(doc, indent=2, allow_nan=False), encoding="utf-8")
    os.chmod(tmp, 0o644)
    os.replace(tmp, results / "results.json")
    print(f"{result.status}: {result.score:g} / {result.max_score:g} in {doc['execution_time']:.1f} s; "
          f"student code: {isolation or 'not run'}")
    return doc


def submitted_at(metadata: Path) -> datetime | None:
    """When Gradescope received the hand-in (``submission_metadata.json``'s ``created_at``), never the zip's time."""
    try:
        return datetime.fromisoformat(json.loads(metadata.read_text(encoding="utf-8"))["created_at"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def late_policy(doc: dict, settings: course.Course, student: str, when: datetime | None, possible: float) -> None:
    """The course file's late penalty taken off a Gradescope result, said in its output (nothing without a due)."""
    days = settings.late.days_late(student, when)
    doc.setdefault("extra_data", {}).update(course_sha256=settings.sha256, late_days=days)
    if days:
        penalty = settings.late.penalty(days, possible)
        doc["score"] = round(max(0.0, doc["score"] - penalty), 4)
        doc["output"] += (f"\nHanded in late: {days} day(s) after the due date: -{penalty:g} point(s), "
                          f"{settings.late.per_day:.0%} of the points possible per day or part of a day.")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m grader.gradescope",
                                     description="run_autograder's grader (inside the Gradescope bundle)")
    parser.add_argument("--root", default=os.environ.get("AUTOGRADER_ROOT", "/autograder"))
    parser.add_argument("--lock-down", action="store_true", help="only make the private files root's (setup.sh)")
    args = parser.parse_args(argv)
    if args.lock_down:
        lock_down()
        import grader.core  # noqa: F401 # deferred: importing it is the check that the image can grade
        print("grader imports; private files locked")
        return 0
    run(args.root)
    return 0  # the grade, whatever it is, is in results.json


if __name__ == "__main__":
    sys.exit(main())
