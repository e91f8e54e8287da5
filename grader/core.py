"""Grade one submission: intake, then each lesson group's checks; a crash in a check is a failed check.

``grade(path)`` is a pure function of the submission (and the fixtures, the rubric and the
instructor's secret): path in, ``GradeResult`` out. It never raises for a bad submission.
"""
from __future__ import annotations

import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from grader import __version__
from lab import kernels
from grader.lessons import lesson06_accept_or_reject as acceptance
from grader.lessons import lesson03_narrow_right_wide as calibration
from grader.lessons import lesson04_more_batches as growth
from grader.lessons import lesson05_qdq_vs_qoperator
from grader.lessons import predictions
from grader.lessons import lesson02_the_calibration_reader as reader
from grader.lessons import lesson07_calibrate_the_deployed_representation as release
from grader.lessons import lesson08_the_quantization_toolbox as toolbox
from grader.context import Context, Missing, StudentFileError, check, is_runtime_error, rubric, runtime_problem
from lab.environment import EnvironmentProblem
from lab.errors import LabError, WorkspaceError
from grader.models import ModelRefused, load_checked
from grader.results import GradeResult, safe_text
from grader.sandbox import Limits
from grader.submission import SubmissionInvalid, open_submission, sha256_of_input, student_from_path


@dataclass(frozen=True)
class Group:
    """One lesson group: the rubric checks it produces, the files it needs, and the function that checks."""

    lesson: str
    part: str
    names: tuple[str, ...]
    needs: tuple[str, ...]
    run: Callable[[Context], list]
    active: Callable[[], bool] = lambda: True


GROUPS = (
    Group("02", "reader", ("contract", "range_from_reader"), ("calibration_reader.py",), reader.run),
    Group("03", "calibration", ("quantized", "ruler_reported", "range_seen", "max_abs_error", "diagnosis",
                                "dynamic"), ("results.json",), calibration.run),
    Group("04", "growth", ("series", "lesson_point"), ("growth.json",), growth.run_growth),
    Group("05", "formats", ("two_formats", "same_scales", "same_order", "elementwise"),
          ("formats.json", "formats/model.qdq.onnx", "formats/model.qoperator.onnx"), lesson05_qdq_vs_qoperator.run_formats),
    # lesson 06: each check needs only the files it uses (the gate uses the fixture alone); summarize() first,
    # so the summaries it wrote into regression.json are not charged again for its mistake
    Group("06", "acceptance", ("summarize_code",), ("metrics.py",), acceptance.run_summarize),
    Group("06", "acceptance", ("fp32_gate",), (), acceptance.run_gate),
    Group("06", "acceptance", ("summaries", "probabilities", "decisions"), ("regression.json", "candidate.onnx"),
          acceptance.run),
    Group("06", "acceptance", ("candidate",), ("candidate.onnx",), acceptance.run_candidate),
    Group("06", "hidden", ("heldout",), ("candidate.onnx",), acceptance.run_heldout),
    Group("07", "release", ("recipe", "disjoint", "metadata", "scenarios"), release.NEEDS, release.run,
          release.active),
    Group("08", "toolbox", ("choice_meets", "choice_reported"), toolbox.NEEDS, toolbox.run, toolbox.active),
    Group("01", "predictions", predictions.NAMES, predictions.NEEDS, predictions.run),
)
HIDDEN_NAMES = {"secret_summarize", "heldout", "choice_heldout"}


def _failed_group(group: Group, message: str) -> list:
    out = [check(group.part, name, 0, message, hidden=name in HIDDEN_NAMES) for name in group.names]
    if group.run is acceptance.run_summarize:
        out.append(check("hidden", "secret_summarize", 0, message, hidden=True))
    if group.run is toolbox.run:
        out.append(check("hidden", "choice_heldout", 0, message, hidden=True))
    return out


def possible_points() -> float:
    """The points on offer this term: every active group's checks, hidden ones included."""
    total = 0.0
    for group in GROUPS:
        if group.active():
            total += sum(p.max_points for p in _failed_group(group, ""))
    return total


def intake_models(ctx: Context) -> None:
    """Every ONNX file in the submission passes the model checks before any is run."""
    for rel in sorted(ctx.sub.files):
        if rel.endswith(".onnx"):
            ctx._models[rel] = load_checked(ctx.sub.path(rel), rel)


def run_groups(ctx: Context) -> list:
    checks = []
    for group in GROUPS:
        if not group.active():
            continue
        missing = [rel for rel in group.needs if not ctx.has(rel)]
        if missing:
            checks += _failed_group(group, f"{missing[0]} is not in the submission: lesson {group.lesson} "
                                           "writes it into the workspace; run that lesson, then hand in again")
            continue
        ctx.touched = []
        try:
            got = group.run(ctx)
        except Missing as e:
            got = _failed_group(group, f"{e.rel} is not in the submission: lesson {group.lesson} writes it")
        except Exception as e:  # noqa: BLE001 - a crash in a check is a failed check with its reason
            mistake = students_mistake(e, ctx, group)
            if mistake is not None:
                got = _failed_group(group, mistake)
            else:
                got = _failed_group(group, f"the grader could not check this ({type(e).__name__}: "
                                           f"{safe_text(e, 500)}). This is the grader's fault, not a problem "
                                           "found in your files: tell your instructor")
        checks += got
    return checks


# The lab's errors about the machine it runs on, not about what it was given
GRADER_SIDE = (EnvironmentProblem, WorkspaceError)


def students_mistake(e: Exception, ctx: Context, group: Group) -> str | None:
    """The message that names the hand-in's file and its problem when ``e`` is the student's doing, else None.

    The student's: the lab's own errors about what it was given (``LabError``: a model that is not quantized,
    a file that breaks a contract, ...) and ONNX Runtime's errors while it ran one of the student's models.
    Anything else is the grader's fault and is reported as such.
    """
    onnx_files = [rel for rel in ctx.touched if rel.endswith(".onnx")]
    if isinstance(e, StudentFileError):
        rel, problem = e.rel, e.problem
    elif isinstance(e, LabError) and not isinstance(e, GRADER_SIDE):
        # the file the message names, else the last one the check opened (a check may open several first)
        files = ctx.touched or list(group.needs)
        named = [r for r in files if r in str(e) or r.rsplit("/", 1)[-1] in str(e)]
        rel, problem = (named or files)[-1], str(e)
    elif is_runtime_error(e) and onnx_files:
        rel, problem = onnx_files[-1], f"ONNX Runtime could not run it: {runtime_problem(e)}"
    else:
        return None
    problem = safe_text(problem, 600).rstrip(". ")
    if problem.startswith(f"{rel}: "):
        problem = problem[len(rel) + 2:]
    return (f"{rel}: {problem}. Lesson {written_by(rel, group.lesson)} writes {rel}: re-run that lesson, check "
            "what it wrote, then hand in again")


def written_by(rel: str, default: str) -> str:
    """The lesson that writes ``rel`` into the workspace (``lab.tools.submit`` knows), else ``default``."""
    from lab.tools import submit

    if rel in submit.WRITTEN_BY:
        return submit.WRITTEN_BY[rel]
    if rel == "calibration_reader.py":
        return "02"
    if rel in submit.REQUIRED:
        return "03"
    return {"growth": "04", "release": "07"}.get(rel.split("/")[0], default)


def kernel_family_note(recorded: str | None) -> tuple[str, str]:
    """The family to recompute under (the hand-in's, else this grader's) and a feedback line that says so."""
    mine = kernels.machine_family()
    family = recorded or mine

    def cpu(f: str) -> str:
        return f"the {f} INT8 kernel family ({kernels.DESCRIPTIONS[f]})"

    if recorded is None:
        text = f"your hand-in records no INT8 kernel family; numbers recomputed as this grader's CPU computes them: {cpu(mine)}"
    elif recorded == mine:
        text = f"your hand-in was made on a CPU of {cpu(recorded)}; this grader's CPU computes the same way"
    else:
        text = (f"your hand-in was made on a CPU of {cpu(recorded)}; numbers recomputed as that CPU computes them, "
                f"emulated on this grader's CPU of the {mine} family")
    return text, family


def grade(path: str | Path, limits: Limits | None = None) -> GradeResult:
    """Grade one submission (a zip or a folder). Never raises for anything the submission holds."""
    start = time.monotonic()
    path = Path(path)
    student = student_from_path(path)
    rubric()  # a broken rubric is the instructor's error: raise it, do not blame the student
    scratch = Path(tempfile.mkdtemp(prefix="grader-sub-"))
    common = {"grader_version": __version__, "possible": possible_points()}
    try:
        common["submission_sha256"] = sha256_of_input(path) if path.exists() else ""
        try:
            sub = open_submission(path, scratch / "submission")
            ctx = Context(sub, limits or Limits())
            intake_models(ctx)
        except (SubmissionInvalid, ModelRefused) as e:
            return GradeResult.without_results(student, "invalid", str(e), seconds=time.monotonic() - start,
                                               **common)
        family_note, family = kernel_family_note(sub.kernel_family)
        with kernels.computing_as(family):
            checks = run_groups(ctx)
        notes = list(sub.notes) + [family_note] + list(ctx.notes)
        if sub.student != student:
            notes.append(f"submission.json names student {sub.student!r}; the file is named {student!r}")
        status = "timeout" if ctx.timed_out else "graded"
        reason = ("student code hit its time limit; the checks that needed it scored 0"
                  if ctx.timed_out else "")
        return GradeResult(student, status, checks, reason, notes, seconds=time.monotonic() - start, **common)
    except Exception as e:  # noqa: BLE001 - the grader's own failure is a status, not a crash
        return GradeResult.without_results(student, "error", f"the grader failed: {type(e).__name__}: {e}",
                                           seconds=time.monotonic() - start, **common)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
