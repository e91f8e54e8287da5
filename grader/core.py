"""Grade one submission: intake, then each lesson group's checks; a crash in a check is a failed check.

``grade(path)`` is a pure function of the submission (and the fixtures, the rubric and the
instructor's secret): path in, ``GradeResult`` out. It never raises for a bad submission. What the
grader keeps between hand-ins (caches, the fork server, the isolation policy) is the ``GraderState``
it is given (``grader.state``): the caller's own when none is. What one grade runs with (that state, the course, the
limits, the hand-in's variant and family) is one ``GradingRun``, handed to the checks as ``ctx.grading``.
"""
from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any

from grader import state as grader_state
from grader import variants
from grader.context import Context, Missing, StudentFileError, is_runtime_error, runtime_problem
from grader.course import DEFAULT, Course
from grader.group import Group
from grader.lessons import (
    lesson02_the_calibration_reader,
    lesson03_narrow_right_wide,
    lesson04_more_batches,
    lesson05_qdq_vs_qoperator,
    lesson06_accept_or_reject,
    lesson07_calibrate_the_deployed_representation,
    lesson08_the_quantization_toolbox,
    lesson09_choosing_a_recipe,
    lesson10_your_own_model,
    predictions,
)
from grader.mistakes import MISTAKES
from grader.models import ModelRefused
from grader.results import GradeResult, safe_text
from grader.rubric import points, rubric
from grader.sandbox.policy import Limits
from grader.state import GradingRun
from grader.submission import SubmissionInvalid, open_submission, sha256_of_input, student_from_path
from grader.version import __version__
from lab import kernels
from lab.environment import EnvironmentProblem
from lab.errors import LabError, WorkspaceError

# The grader's lesson modules, in the order feedback lists their checks and the groups run; each declares its GROUPS
LESSONS = (lesson02_the_calibration_reader, lesson03_narrow_right_wide, lesson04_more_batches,
           lesson05_qdq_vs_qoperator, lesson06_accept_or_reject, lesson07_calibrate_the_deployed_representation,
           lesson08_the_quantization_toolbox, lesson09_choosing_a_recipe, lesson10_your_own_model, predictions)


class GroupOrderError(Exception):
    """The groups' declared mistakes do not fit their order: a mistake read before it is charged, or charged twice."""


def verify_mistakes(groups: tuple[Group, ...]) -> tuple[Group, ...]:
    """``groups`` if each mistake of the registry is charged by one group, under one of that group's checks, and every
    group that reads one runs after it; else ``GroupOrderError`` naming the mistake and the groups."""
    if len({m.key for m in MISTAKES}) != len(MISTAKES):
        raise GroupOrderError("two mistakes of grader.mistakes.MISTAKES share a key")
    charger = {m: [g for g in groups if m in g.charges] for m in MISTAKES}
    for m, by in charger.items():
        if len(by) != 1:
            raise GroupOrderError(f"mistake {m.key!r} is charged by {len(by)} groups"
                                  + (f" ({'; '.join(g.label for g in by)})" if by else "") + ": it must be one")
        if (m.part, m.check) not in by[0].declared():
            raise GroupOrderError(f"mistake {m.key!r} is charged under [{m.part}] {m.check}, which its charging group "
                                  f"{by[0].label} does not produce")
    for i, group in enumerate(groups):
        for m in group.charges + group.reads:
            if m not in charger:
                raise GroupOrderError(f"{group.label} declares mistake {m.key!r}, which grader.mistakes.MISTAKES "
                                      "does not hold")
        for m in group.reads:
            if charger[m][0] not in groups[:i]:
                raise GroupOrderError(f"{group.label} reads mistake {m.key!r} before {charger[m][0].label} charges "
                                      "it: the charging group must run first (order them in grader.core.LESSONS or "
                                      "the lesson's GROUPS)")
    return groups


GROUPS: tuple[Group, ...] = verify_mistakes(tuple(group for lesson in LESSONS for group in lesson.GROUPS))


def possible_points(prices: tuple[tuple[str, str, float], ...] = ()) -> float:
    """The points on offer: every group's checks, hidden ones included, as the rubric (or a course's ``prices``)
    weighs them."""
    return sum(points(part, name, prices) for group in GROUPS for part, name in group.declared())


def intake_models(ctx: Context) -> None:
    """Every ONNX file in the submission passes the model checks before any is run (``Context.check_models``)."""
    ctx.check_models()


def planned_runs(ctx: Context) -> list:
    """The student-code runs the groups will ask for, in the order they ask (each group's ``request``).

    A group that cannot say (a document it cannot read yet) plans nothing: its run then starts when asked for.
    """
    runs = []
    for group in GROUPS:
        if group.request is None:
            continue
        try:
            runs += group.request(ctx)
        except Exception:  # noqa: BLE001 - planning ahead is only for speed; the group reports its own problem
            continue
    return runs


def run_groups(ctx: Context, finding: variants.Finding | None = None) -> list:
    """Every group's checks; a ``finding`` of another student's variant scores 0 each check that read a model or
    report (``grader.variants.foreign``)."""
    checks = []
    for group in GROUPS:
        missing = [rel for rel in group.needs if not ctx.has(rel)]
        if missing:
            checks += group.failed(f"{missing[0]} is not in the submission: lesson {group.writer(missing[0])} "
                                   "writes it into the workspace; run that lesson, then hand in again")
            continue
        ctx.touched = []
        ctx.declare(frozenset(group.charges), frozenset(group.reads))
        try:
            got = group.run(ctx)
        except Missing as e:
            got = group.failed(f"{e.rel} is not in the submission: lesson {group.writer(e.rel)} writes it")
        except Exception as e:  # noqa: BLE001 - a crash in a check is a failed check with its reason
            mistake = students_mistake(e, ctx, group)
            if mistake is not None:
                got = group.failed(mistake)
            else:
                ctx.grader_faults.append(f"{type(e).__name__}: {safe_text(e, 300)}")
                got = group.failed(f"the grader could not check this ({type(e).__name__}: "
                                   f"{safe_text(e, 500)}). This is the grader's fault, not a problem "
                                   "found in your files: tell your instructor")
        if finding is not None and finding.foreign:
            got = variants.foreign(got, ctx.touched or list(group.needs), finding.student or ctx.sub.student,
                                   finding.reference)
        checks += got
    return checks


def outcome(ctx: Context) -> tuple[str, str]:
    """A graded hand-in's status and reason: ``error`` when the grader failed on its own side (a check it could not
    run, such as student code it could not start), since its points would be the grader's fault, never a grade."""
    if ctx.grader_faults:
        faults = sorted(set(ctx.grader_faults))
        return "error", (f"the grader failed on its side ({'; '.join(faults)[:600]}), so this is not a grade: "
                         f"{len(ctx.grader_faults)} check group(s) could not run. Fix the grader's set-up and grade "
                         "again (`--resume` grades error rows again)")
    if ctx.timed_out:
        return "timeout", "student code hit its time limit; the checks that needed it scored 0"
    return "graded", ""


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
    return (f"{rel}: {problem}. Lesson {group.writer(rel)} writes {rel}: re-run that lesson, check "
            "what it wrote, then hand in again")


def kernel_family_note(recorded: str | None) -> tuple[str, str]:
    """The family to recompute under (the hand-in's, else this grader's) and a feedback line that says so."""
    mine = kernels.machine_family()
    family = recorded or mine

    def cpu(f: str) -> str:
        return f"the {f} INT8 kernel family, {kernels.DESCRIPTIONS[f]}"

    if recorded is None:
        text = ("your hand-in records no INT8 kernel family; numbers recomputed as this grader's CPU computes them: "
                f"{cpu(mine)}")
    elif recorded == mine:
        text = f"your hand-in was made on a CPU of {cpu(recorded)}; this grader's CPU computes the same way"
    else:
        text = (f"your hand-in was made on a CPU of {cpu(recorded)}; numbers recomputed as that CPU computes them, "
                f"emulated on this grader's CPU of the {mine} family")
    return text, family


def variant_notes(finding: variants.Finding, student: str) -> list[str]:
    """The feedback's line on the variant, when the files are not the student's own (never whose they are)."""
    if finding.reference:
        return [variants.REFERENCE_NOTE.format(student=student)]
    if finding.foreign:
        return ["your hand-in's files were made for another student's variant of the lab's data, not yours: every "
                "check that reads one of its models or reports scores 0"]
    return []


def id_note(claimed: str, student: str, finding: variants.Finding, given: bool) -> str:
    """The feedback's line when ``submission.json`` names another student than the one the grade is credited to.
    A foreign hand-in's names no id but the student's own (whose files they were is the instructor's only)."""
    credit = f"the grade is credited to {student!r}" if given else f"the file is named {student!r}"
    if finding.student != student:  # a reserved or no student id credited: the manifest's student stands
        return f"submission.json names student {claimed!r}; {credit}"
    return (f"submission.json names another student than {student!r} ({credit}): every check is recomputed under "
            f"{student!r}'s variant of the lab's data, the grade's own")


def grade(path: str | Path, limits: Limits | None = None,
          state: grader_state.GraderState | None = None, classmates: Iterable[str] = (),
          student: str | None = None, credited: bool = True, course: Course = DEFAULT) -> GradeResult:
    """Grade one submission (a zip or a folder) with ``state`` (default ``grader.state.current()``); ``limits``
    (default the state's policy's) bound each student-code run. ``classmates``: the class's student ids (a batch's),
    so that a hand-in made for another student's variant names whose in the instructor's field
    (``grader.variants.made_for``); alone, the grader tries the hand-in's own, claimed and reference variants.

    ``student``: the id the grade is credited to (the result's ``student``; default the file or folder name,
    ``student_from_path``, as a batch files it). Its variant is the hand-in's own: ``submission.json``'s student is
    only a claim. ``credited=False``: no credited id is known (Gradescope without a roster id), so
    ``submission.json``'s student stands, as the instructor's field says. ``course``: the course file's prices and
    prediction grading (``grader.course``). Never raises for anything the submission holds."""
    state = state or grader_state.current()
    run = GradingRun(state, course, limits or state.policy.limits)
    with state.reuse.hand_in(), run.active():
        return _grade(Path(path), run, tuple(classmates), student, credited)


def _grade(path: Path, run: GradingRun, classmates: tuple[str, ...], given: str | None = None,
           credited: bool = True) -> GradeResult:
    start = time.monotonic()
    student = given or student_from_path(path)
    rubric()  # a broken rubric is the instructor's error: raise it, do not blame the student
    scratch = Path(tempfile.mkdtemp(prefix="grader-sub-"))
    common: dict[str, Any] = {"grader_version": __version__, "possible": possible_points(run.prices)}
    try:
        common["submission_sha256"] = sha256_of_input(path) if path.exists() else ""
        try:
            sub = open_submission(path, scratch / "submission")
            ctx = Context(sub, run)
            intake_models(ctx)
        except (SubmissionInvalid, ModelRefused) as e:
            return GradeResult.without_results(student, "invalid", str(e), seconds=time.monotonic() - start,
                                               **common)
        # whose variant of the lab's data the files were made for, graded for the id the grade is credited to
        finding = variants.made_for(sub, classmates, student if credited else None)
        family_note, family = kernel_family_note(sub.kernel_family)
        ctx.grading = replace(run, variant=finding.grade_under, family=family)
        with ctx.grading.active():
            # past intake: its code runs in the sandbox while lessons are checked
            run.sandbox.plan(planned_runs(ctx))
            checks = run_groups(ctx, finding)
        notes = list(sub.notes) + [family_note] + variant_notes(finding, finding.student) + list(ctx.notes)
        if sub.student != student and credited:
            notes.append(id_note(sub.student, student, finding, given is not None))
        status, reason = outcome(ctx)
        return GradeResult(student, status, checks, reason, notes, seconds=time.monotonic() - start,
                           instructor=finding.instructor(), **common)
    except Exception as e:  # noqa: BLE001 - the grader's own failure is a status, not a crash
        return GradeResult.without_results(student, "error", f"the grader failed: {type(e).__name__}: {e}",
                                           seconds=time.monotonic() - start, **common)
    finally:
        run.sandbox.end_plan()
        shutil.rmtree(scratch, ignore_errors=True)
