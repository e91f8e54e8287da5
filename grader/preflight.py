"""Before ``grade``, ``batch`` or ``gradescope``: are the fixtures, the rubric and the instructor secret in place?

A grader without its fixtures does not crash: every check that recomputes a number fails, and a
batch hands the whole class a score of 0 that looks like a grade. So the commands check first and
refuse to start, naming what is missing or differs and how to fix it (reinstall, restore or rebuild
the fixtures, set the secret). Nothing here reads a hand-in.

- Fixtures: each file the grader reads (``REQUIRED_FIXTURES``) is in the ``fixtures`` package and its
  SHA-256 matches ``fixtures/manifest.json``. Found through ``importlib.resources``, as the lab finds them.
- Rubric: ``grader/rubric.toml`` is package data, parses, and gives points to every check the grader has.
- Secret: ``GRADER_SECRET``, or a readable, non-empty file named by ``GRADER_SECRET_FILE``. Without one the
  hidden ``summarize()`` lists are the public ones any student can compute; grading so on purpose (a
  practice run, the tests) takes ``--no-secret`` or ``GRADER_NO_SECRET=1``. A secret file that is named
  but missing or empty always refuses: that is a broken set-up, not a choice.
"""
from __future__ import annotations

import json
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from grader.sandbox.secret import SECRET_ENV, SECRET_FILE_ENV
from lab.data import FixturesNotFound, file_sha256, fixtures_dir

# What the checks open: the FP32 model and the bad-calibration model (lessons 03-08), the three splits
# (calibration for the rulers, evaluation for acceptance, held-out for the hidden checks).
REQUIRED_FIXTURES = ("fp32.onnx", "bad-calibration.onnx", "calibration.npz", "evaluation.npz", "heldout.npz",
                     "calibration-pool.npz",  # the students' variants draw their calibration split from it
                     "cnn-fp32.onnx", "cnn-calibration.npz", "cnn-evaluation.npz", "cnn-heldout.npz")  # lesson 10
MANIFEST = "manifest.json"
RUBRIC = "rubric.toml"
NO_SECRET_ENV = "GRADER_NO_SECRET"
EXIT_REFUSED = 3  # the grader did not start; 1 is a hand-in not graded, 2 a wrong command line

FIX_FIXTURES = ("reinstall the grader (`pip install --force-reinstall .` from the project's folder, or `make setup` "
                "in a checkout), or in a checkout restore the committed fixtures (`git checkout -- fixtures/`); "
                "`make fixtures` rebuilds them with a new manifest, but students' models were made from the "
                "committed ones")
FIX_RUBRIC = ("reinstall the grader (`pip install --force-reinstall .`, or `make setup` in a checkout), or restore "
              "the committed rubric (`git checkout -- grader/rubric.toml`)")
FIX_SECRET = (f"set {SECRET_ENV}, or {SECRET_FILE_ENV} to a file holding the instructor's secret (see "
              f"grader/README.md, 'The rubric'); to grade without one on purpose, pass --no-secret "
              f"({NO_SECRET_ENV}=1): the hidden summarize() lists are then the public ones")


class PreflightError(RuntimeError):
    """The grader is not set up to grade: its message names every problem and its fix."""


@dataclass(frozen=True)
class Problem:
    """One thing the grader needs that is missing or differs, and how the instructor fixes it."""

    what: str
    fix: str


def fixture_problems(folder: Path | None = None) -> list[Problem]:
    """Every required fixture present, listed in the manifest, and with the manifest's SHA-256."""
    try:
        folder = fixtures_dir() if folder is None else folder
    except FixturesNotFound as e:
        return [Problem(f"fixtures: {e}", FIX_FIXTURES)]
    manifest_path = folder / MANIFEST
    if not manifest_path.is_file():
        return [Problem(f"fixtures/{MANIFEST}: missing (looked in {folder})", FIX_FIXTURES)]
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
        if not isinstance(manifest, dict):
            raise ValueError("expected an object of file name -> SHA-256")
    except ValueError as e:
        return [Problem(f"fixtures/{MANIFEST}: not a readable manifest ({e})", FIX_FIXTURES)]
    problems = []
    for name in REQUIRED_FIXTURES:
        path = folder / name
        if name not in manifest:
            kit = " (the student kit's manifest leaves out the held-out split)" if name == "heldout.npz" else ""
            problems.append(Problem(f"fixtures/{MANIFEST} lists no {name}{kit}", FIX_FIXTURES))
        elif not path.is_file():
            problems.append(Problem(f"fixtures/{name}: missing (looked in {folder})", FIX_FIXTURES))
        else:
            found = file_sha256(path)
            if found != manifest[name]:
                problems.append(Problem(f"fixtures/{name}: SHA-256 {found[:12]}... differs from {MANIFEST}'s "
                                        f"{str(manifest[name])[:12]}... (in {folder})", FIX_FIXTURES))
    return problems


def rubric_problems(path: Path | None = None) -> list[Problem]:
    """The rubric present, valid TOML, and pricing every check the grader's groups declare."""
    path = Path(str(resources.files("grader") / RUBRIC)) if path is None else path
    if not path.is_file():
        return [Problem(f"grader/{RUBRIC}: missing (looked in {path.parent})", FIX_RUBRIC)]
    try:
        with open(path, "rb") as f:
            tomllib.load(f)
    except tomllib.TOMLDecodeError as e:
        return [Problem(f"grader/{RUBRIC}: not valid TOML ({e})", FIX_RUBRIC)]
    # deferred: the groups and their checks; grader.core imports the grader's stack (about 1 s), once the fixtures
    # and the rubric file are known to be there, so a broken install is named, not an ImportError
    from grader import core

    try:
        total = core.possible_points()
    except KeyError as e:  # grader.rubric.points: "rubric.toml has no [part] name"
        return [Problem(f"grader/{RUBRIC}: {e.args[0] if e.args else e}; this rubric is not the grader's", FIX_RUBRIC)]
    if total <= 0:
        return [Problem(f"grader/{RUBRIC}: no points on offer", FIX_RUBRIC)]
    return []


def secret_problems(env: Mapping[str, str] = os.environ, no_secret: bool = False) -> list[Problem]:
    """The instructor secret as ``grader.sandbox.secret.secret`` finds it; none only when asked for."""
    if env.get(SECRET_ENV):
        return []
    named = env.get(SECRET_FILE_ENV)
    if named:
        path = Path(named)
        if not path.is_file():
            return [Problem(f"instructor secret: {SECRET_FILE_ENV} names {named}, which is not a file", FIX_SECRET)]
        try:
            text = path.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as e:
            return [Problem(f"instructor secret: {named} cannot be read ({type(e).__name__}: {e})", FIX_SECRET)]
        return [] if text else [Problem(f"instructor secret: {named} is empty", FIX_SECRET)]
    if no_secret or env.get(NO_SECRET_ENV, "").strip() not in ("", "0"):
        return []
    return [Problem(f"instructor secret: neither {SECRET_ENV} nor {SECRET_FILE_ENV} is set", FIX_SECRET)]


def secret_note(env: Mapping[str, str] = os.environ) -> str:
    """One line for stderr when grading without a secret on purpose; empty when there is one."""
    if env.get(SECRET_ENV) or env.get(SECRET_FILE_ENV):
        return ""
    return "instructor secret: none (--no-secret): the hidden summarize() lists are the public ones"


def secret_exposed(env: Mapping[str, str] = os.environ) -> str:
    """One line for stderr when the secret's file may be read by others than its owner; empty otherwise."""
    named = env.get(SECRET_FILE_ENV)
    if env.get(SECRET_ENV) or not named or not Path(named).is_file():
        return ""
    mode = Path(named).stat().st_mode & 0o777
    return f"instructor secret: {named} is readable by others (mode {mode:o}): chmod 600 {named}" if mode & 0o077 \
        else ""


def problems(no_secret: bool = False, env: Mapping[str, str] = os.environ) -> list[Problem]:
    """Everything the grader needs and lacks, fixtures first (the cheapest and the likeliest)."""
    return fixture_problems() + rubric_problems() + secret_problems(env, no_secret)


def message(found: list[Problem], command: str) -> str:
    """What the instructor reads: the problems, then each fix once."""
    lines = [f"grader {command}: refusing to start, nothing was graded. The grader is not set up:"]
    lines += [f"  - {p.what}" for p in found]
    lines += ["To fix:"] + [f"  - {fix}" for fix in dict.fromkeys(p.fix for p in found)]
    return "\n".join(lines)


def require(command: str, no_secret: bool = False, env: Mapping[str, str] = os.environ) -> None:
    """Raise ``PreflightError`` (its message from ``message``) unless the grader can grade."""
    found = problems(no_secret, env)
    if found:
        raise PreflightError(message(found, command))
