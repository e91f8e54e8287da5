"""Grade a whole class: one pure job per submission through a ``concurrent.futures`` executor.

Each result is written atomically as it finishes (``OUT/results/ID.json``, ``OUT/feedback/ID.md``)
and appended as one line to ``OUT/journal.jsonl``; ``OUT/gradebook.csv`` is written from memory at
the start, at most every ``GRADEBOOK_EVERY_S`` seconds, and at the end (also on Ctrl-C), so the
bookkeeping per result does not grow with the class and no finished grade is lost. ``--resume``
skips submissions already graded by this grader version with the same input hash (read from the
journal, or from ``results/ID.json`` for a result the journal missed). A job that dies is an
``error`` row, never a stopped batch; a submission not graded yet is a ``pending`` row (the gradebook written
while a batch runs, or left by one that was stopped).

The executor is a local process pool (``jobs`` workers), any executor passed in, or a Dask
cluster (``dask="tcp://scheduler:8786"`` or ``"local:N"``, the CLI's ``--dask``; needs the
``[dask]`` extra). Progress is a tqdm bar with an ETA on stderr.

Student code runs only under bubblewrap: without it each result says the code was refused
(a note in the feedback, ``isolation`` in the result and the gradebook), unless the batch was
started with ``unsafe_no_sandbox`` (the CLI's ``--unsafe-no-sandbox``).
"""
from __future__ import annotations

import contextlib
import csv
import dataclasses
import io
import json
import os
import sys
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Executor, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any

from tqdm import tqdm

from grader import adjustments, sandbox
from grader import state as grader_state
from grader.core import grade, possible_points
from grader.course import DEFAULT, Course
from grader.items import handin_record
from grader.lms_downloads import Collected, HandIn, collect, handed_in_at
from grader.private import private_dir, write_private
from grader.report import write_report
from grader.results import PENDING, GradeResult
from grader.roster import read_roster
from grader.rubric import rubric
from grader.sandbox import Limits, Policy
from grader.submission import sha256_of_input, student_from_path
from grader.version import __version__
from lab import variant


def find_submissions(folder: Path, out: Path | None = None) -> list[Path]:
    """Every ``*.zip`` and every sub-folder (an unpacked submission) in ``folder``, sorted; never ``out`` itself."""
    skip = out.resolve() if out is not None else None
    return [p for p in sorted(folder.iterdir()) if not p.name.startswith(".")
            and (p.suffix == ".zip" or p.is_dir()) and p.resolve() != skip]


JOURNAL = "journal.jsonl"
GRADEBOOK_EVERY_S = 10.0
# Not grading state but the process's one turnstile: each thread keeps its own GraderState (grader.state), yet a job
# is sized for a whole worker process (student code up to Limits.memory_mib, a fork server, the fixtures' caches), so
# a worker with several threads (a Dask worker started without --nthreads 1) grades one hand-in at a time. It must be
# per process, not per state: a lock inside each thread's state would let the threads run at once.
_ONE_JOB_AT_A_TIME = threading.Lock()


@dataclasses.dataclass(frozen=True)
class BatchOptions:
    """How a batch grades, one value from the command line (or ``batch``'s keyword arguments) down to each job."""

    jobs: int = 2  # local worker processes (ignored with an executor or ``dask``)
    resume: bool = False  # skip hand-ins this grader version already graded with the same input hash
    limits: Limits | None = None  # each student-code run's limits (None: ``Limits()``)
    progress: bool = True  # the tqdm bar on stderr
    unsafe_no_sandbox: bool | None = None  # None: GRADER_UNSAFE_NO_SANDBOX decides
    dask: str | None = None  # a Dask scheduler address or ``local:N`` instead of ``jobs`` processes
    classmates: tuple[str, ...] = ()  # the batch's student ids: whose variant a foreign hand-in was made for
    ids_from_submission: bool = False  # credit submission.json's student, not the file name (test hand-ins only)
    course: Course = DEFAULT  # the course file's prices, prediction grading and late policy (grader.course)
    roster: str | Path | None = None  # the course's roster CSV: credit LMS downloads to its students
    names: str | None = None  # with ``roster``, a regex for other LMS's download names


def job(path: str, student: str | None = None, options: BatchOptions = BatchOptions()) -> dict:
    """The pure per-submission job: path in, result dict out. Never raises. ``student``: the roster id it is credited
    to (an LMS download's; default the file or folder name); ``options``: the batch's (its limits, sandbox, class,
    course).

    One job at a time per process (``_ONE_JOB_AT_A_TIME``, above): a worker with several threads (a Dask worker
    started without ``--nthreads 1``) grades in turn, each thread with its own state.
    """
    with _ONE_JOB_AT_A_TIME:
        state = grader_state.for_policy(Policy(options.limits or Limits(), options.unsafe_no_sandbox))  # kept
        d = package(*grade_one(path, state=state, classmates=options.classmates, student=student,
                               credited=not options.ids_from_submission, course=options.course))
        d["course_sha256"] = options.course.sha256  # --resume grades it again under another course file
        if d["checks"]:  # past intake: the class report's answers and code fingerprints (grader.items)
            d["handin"] = handin_record(path)
        return d


def grade_one(path: str | Path, limits: Limits | None = None, state: grader_state.GraderState | None = None,
              classmates: tuple[str, ...] = (), student: str | None = None,
              credited: bool = True, course: Course = DEFAULT) -> tuple[GradeResult, str]:
    """``grader.core.grade`` with ``state`` (default ``grader.state.current()``), plus how its student code ran
    (``isolation_label``) and a note if it was refused. ``student``, ``credited``, ``course``: ``grade``'s."""
    state = state or grader_state.current()
    state.runs.take()
    state.runs.warm_up()  # the fork server preloads while intake and the model checks run
    # one session per model; the fixtures' data and predictions once per worker
    result = grade(path, limits, state, classmates, student, credited, course)
    runs = state.runs.take()
    if "refused" in runs:
        result.notes.append(sandbox.REFUSED_NOTE)
    return result, isolation_label(runs)


def isolation_label(runs: list[str]) -> str:
    """The gradebook's ``isolation``: bubblewrap, refused, none (--unsafe-no-sandbox), or '' when no student code
    was due."""
    names = {"bubblewrap": "bubblewrap", "refused": "refused: student code not run (no bubblewrap)",
             "unsafe": "none (--unsafe-no-sandbox)"}
    return "; ".join(names[k] for k in names if k in runs)


def package(result: GradeResult, isolation: str = "") -> dict:
    """What a batch writes for one result: the dict, its Markdown feedback and its Gradescope JSON."""
    d = result.to_dict()
    d["isolation"] = isolation
    d["input_sha256"] = result.submission_sha256
    d["feedback"] = result.to_markdown()
    d["gradescope"] = result.to_gradescope()
    return d


def _atomic(path: Path, text: str) -> None:
    write_private(path, text)


def write_result(out: Path, d: dict, adjustment: adjustments.Adjustment | None = None, late: str = "") -> None:
    """A result's files; its feedback ends with the late policy's line and the instructor's adjustment, if any."""
    student = d["student"]
    feedback, gradescope = d.pop("feedback", None), d.pop("gradescope", None)
    if feedback is not None:
        _atomic(out / "feedback" / f"{student}.md", adjustments.in_feedback(feedback + late, adjustment))
    if gradescope is not None:
        _atomic(out / "gradescope" / f"{student}.json", json.dumps(gradescope, indent=2))
    _atomic(out / "results" / f"{student}.json", json.dumps(d, indent=2, allow_nan=False))


def parts() -> list[str]:
    return list(rubric())


def columns() -> list[str]:
    return ["student", "status", "score", "max", *parts(), "grader_version", "isolation"]


# Columns after the batch's own, each written only when some row has it: where an LMS download came from
# (``--roster``), what a regrade published, and the instructor's adjustments (``grader.adjustments``).
EXTRA_COLUMNS = ("handed_in", "late", "handed_in_at", "late_days", "late_penalty", "note", "previous_score",
                 "published", "adjustment", "adjustment_comment", "course")
KEPT = ("previous_score", "published")  # what a regrade wrote, kept by every later write of a kept result


def read_gradebook(out: Path) -> dict[str, dict]:
    """``OUT/gradebook.csv`` as student -> row (empty when there is none yet)."""
    try:
        with open(out / "gradebook.csv", newline="", encoding="utf-8") as f:
            return {r["student"]: r for r in csv.DictReader(f)}
    except (OSError, KeyError):
        return {}


def gradebook_row(d: dict) -> dict:
    """A result dict (as written to ``results/ID.json``) as its gradebook row."""
    # an error is the grader's failure: whatever its checks scored is no grade
    return {"student": d["student"], "status": d["status"], "score": "" if d["status"] == "error" else d["score"],
            "max": d["max_score"],
            **{n: d["parts"].get(n, {}).get("points", "") for n in parts()},
            "grader_version": d["grader_version"], "isolation": d.get("isolation", "")}


def pending_row(student: str) -> dict:
    """The row of a submission the batch has not graded yet: ``pending``, no score (``--resume`` grades it)."""
    return {"student": student, "status": PENDING, "score": "", "max": "", "grader_version": __version__}


def error_row(student: str) -> dict:
    """The row of a submission whose result file exists but cannot be read: the grader's failure."""
    return {"student": student, "status": "error", "score": 0, "max": "", "grader_version": __version__}


def _read_result_row(out: Path, student: str) -> dict | None:
    path = out / "results" / f"{student}.json"
    if not path.exists():
        return None
    try:
        return gradebook_row(json.loads(path.read_text()))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return error_row(student)


def write_gradebook(out: Path, students: list[str], rows: dict[str, dict] | None = None,
                    extras: dict[str, dict] | None = None) -> Path:
    """One row per submission, always: a submission with no result yet is a ``pending`` row.

    With ``rows`` (student -> row, kept in memory by the batch) nothing is read from disk;
    without, each row is read from ``results/ID.json`` (one that cannot be read is an ``error`` row).
    ``extras``: student -> ``EXTRA_COLUMNS`` values (download, published grade, adjustment) added to its row.
    """
    buf = io.StringIO()
    extras = extras or {}
    names = columns() + [c for c in EXTRA_COLUMNS if any(e.get(c) not in (None, "") for e in extras.values())]
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(names)
    for student in students:
        row = rows.get(student) if rows is not None else _read_result_row(out, student)
        row = {**(row or pending_row(student)), **extras.get(student, {})}
        w.writerow([row.get(n, "") for n in names])
    target = out / "gradebook.csv"
    _atomic(target, buf.getvalue())
    return target


def read_journal(out: Path) -> dict[str, dict]:
    """``journal.jsonl``: student -> the last entry written for them. A torn last line is skipped."""
    entries: dict[str, dict] = {}
    try:
        with open(out / JOURNAL, encoding="utf-8") as f:
            for line in f:
                try:
                    e = json.loads(line)
                    entries[e["student"]] = e
                except (ValueError, KeyError, TypeError):
                    continue
    except OSError:
        pass
    return entries


def journal_entry(d: dict) -> dict:
    return {"student": d["student"], "grader_version": d.get("grader_version"), "status": d.get("status"),
            "isolation": d.get("isolation", ""), "input_sha256": d.get("input_sha256", ""),
            "course_sha256": d.get("course_sha256", ""),
            "row": gradebook_row(d)}


def _already_graded(out: Path, student: str, path: Path, journal: dict[str, dict] | None = None,
                    course_sha256: str = "") -> dict | None:
    """The gradebook row of a result that ``--resume`` keeps, or None to grade it (again)."""
    d = (journal or {}).get(student)
    if d is None or not (out / "results" / f"{student}.json").is_file():
        try:
            d = json.loads((out / "results" / f"{student}.json").read_text())
            d = journal_entry(d)
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None
    keep = (d.get("grader_version") == __version__ and d.get("status") != "error"
            and not str(d.get("isolation", "")).startswith("refused")  # graded again once bubblewrap works
            and d.get("input_sha256") == sha256_of_input(path)
            and d.get("course_sha256", "") == course_sha256)
    return d["row"] if keep else None


def progress_bar(total: int, enabled: bool = True):
    """tqdm on stderr: done/total, rate and ETA; ``enabled=False`` (``--no-progress``) prints nothing."""
    return tqdm(total=total, disable=not enabled, unit="hand-in", desc="grading", file=sys.stderr,
                dynamic_ncols=True, mininterval=0.5, smoothing=0.1)


@contextlib.contextmanager
def dask_executor(address: str):
    """A ``concurrent.futures`` executor on a Dask cluster: ``local:N`` starts a ``LocalCluster`` of N
    one-thread worker processes; anything else is a scheduler address (``tcp://host:8786``)."""
    try:
        # deferred: Dask's distributed costs about 1.5 s at import, and is an optional extra ([dask])
        from distributed import Client, LocalCluster
    except ImportError as e:
        raise SystemExit("--dask needs Dask: pip install -e '.[dask]'") from e
    with contextlib.ExitStack() as stack:
        if address.startswith("local:"):
            n = int(address.split(":", 1)[1])
            cluster = stack.enter_context(LocalCluster(n_workers=n, threads_per_worker=1, processes=True,
                                                       dashboard_address=None))
            client = stack.enter_context(Client(cluster))
        else:
            client = stack.enter_context(Client(address))
        client.wait_for_workers(1, timeout=120)
        ex = client.get_executor()
        ex.workers_label = f"{sum(client.nthreads().values())} Dask worker thread(s) at {client.scheduler.address}"
        yield ex


def batch(folder: str | Path, out: str | Path, options: BatchOptions | None = None, *,
          executor: Executor | None = None, regrading: bool = False, **settings: Any) -> list[dict]:
    """Grade every submission in ``folder`` into ``out`` with ``options`` (or ``settings``, ``BatchOptions``' fields
    by name, in place of those); return the gradebook rows as dicts.

    ``unsafe_no_sandbox=True`` runs student code with rlimits alone where bubblewrap does not
    work; ``None`` leaves it to ``GRADER_UNSAFE_NO_SANDBOX``; otherwise such code is refused.
    ``dask`` (a scheduler address or ``local:N``) grades on a Dask cluster instead of ``jobs`` processes, and
    ``executor`` on any ``concurrent.futures`` executor.
    Each hand-in is credited to its file or folder name, whose variant is its own (``grader.variants``); with
    ``roster`` (the course's roster CSV, ``grader.roster``) to the roster student its LMS download name names
    (``grader.lms_downloads``; ``names``: a regex for other names), and a file credited to no one is a gradebook row
    of its own. ``ids_from_submission=True`` credits the student its ``submission.json`` names instead, for the
    instructor's own test hand-ins (copies of one hand-in under many names): never for a class, where it lets a
    renamed copy grade as its owner's. ``course``: the course file's settings (``grader.course``), given to
    every grade and recorded in the gradebook. A gradebook with published grades (a regrade's) is kept by
    ``--resume`` and ``regrade`` (``regrading``); a fresh batch over it refuses, rather than drop them.
    """
    options = options_of(options, settings)
    folder, out = Path(folder), Path(out)
    resume, course = options.resume, options.course
    private_dir(out)
    previous = read_gradebook(out)
    if not resume and not regrading and any(r.get("published") for r in previous.values()):
        roster = f" --roster {options.roster}" if options.roster else ""
        raise SystemExit(f"{out / 'gradebook.csv'} holds published grades (a regrade's): a fresh batch would drop "
                         f"them; grade again with `python -m grader regrade {folder} --out {out}{roster}` (or "
                         "--resume to grade only what is missing), or into a new --out")
    if options.roster is None and any(r.get("handed_in") for r in previous.values()):
        raise SystemExit(f"{out / 'gradebook.csv'} was graded from LMS downloads with --roster: give the same --roster "
                         "again, or each download would be credited to its file name")
    recorded = sorted({r["course"] for r in previous.values() if r.get("course")})
    if resume and recorded and not course.sha256:
        raise SystemExit(f"{out / 'gradebook.csv'} was graded under a course file (sha256 {recorded[0]}...): give "
                         "--config again, or --resume would grade every hand-in again at the committed prices, "
                         "without its late policy")
    collected = intake(find_submissions(folder, out), options.roster, options.names)
    students = [h.student for h in collected.hand_ins]
    if len(set(students)) != len(students):
        dupes = sorted({s for s in students if students.count(s) > 1})
        raise SystemExit(f"two submissions for the same student: {dupes}; keep one of each")
    options = dataclasses.replace(options, classmates=class_ids(students))
    with contextlib.ExitStack() as stack:
        if options.dask:
            executor = stack.enter_context(dask_executor(options.dask))
        rows = _batch(out, collected, previous, options, executor)
    report_after(out)
    course.share(out)  # the course's TA group, if it names one
    return rows


def options_of(options: BatchOptions | None, settings: dict[str, Any]) -> BatchOptions:
    """``options`` with ``settings`` (``BatchOptions``' fields by name) in place of those it has."""
    return dataclasses.replace(options or BatchOptions(), **settings)


def intake(paths: list[Path], roster: str | Path | None, names: str | None = None) -> Collected:
    """Whose each file is: the roster student its LMS download name names, else (no roster) its own name."""
    if roster is None:
        return Collected([HandIn(p, student_from_path(p), p.name, "", handed_in_at=handed_in_at(p, {}))
                          for p in paths])
    return collect(paths, read_roster(roster), names)


def gradebook_extras(out: Path, collected: Collected, previous: dict[str, dict], kept: set[str],
                     course: Course = DEFAULT) -> dict[str, dict]:
    """student -> the ``EXTRA_COLUMNS`` of their row: the download it came from (with a roster), when it was handed in
    and what the course's late policy takes for it, the published grade of a result this batch keeps (``kept``), the
    instructor's adjustment and the course file's hash."""
    extras: dict[str, dict] = {}
    for h in collected.hand_ins:
        row = extras.setdefault(h.student, {"course": course.sha256[:16]})
        if h.lms:
            row.update(handed_in=h.file, late="late" if h.late else "")
        row.update(late_columns(course, h))
    for u in collected.unclaimed:
        extras[u.key] = {"handed_in": "; ".join(u.files), "note": u.reason}
    for s in kept:
        extras.setdefault(s, {}).update({k: previous.get(s, {}).get(k, "") for k in KEPT})
    for s, a in adjustments.read(out).items():
        extras.setdefault(s, {}).update(adjustments.columns(a))
    return extras


def late_columns(course: Course, h: HandIn) -> dict[str, str]:
    """``handed_in_at``, ``late_days`` and ``late_penalty`` (points the export takes) when the course has a due date."""
    if course.late.due is None:
        return {}
    days = course.late.days_late(h.student, h.handed_in_at)
    return {"handed_in_at": h.handed_in_at.isoformat(timespec="seconds") if h.handed_in_at else "",
            "late_days": str(days), "late_penalty": f"{course.late.penalty(days, possible_points(course.prices)):g}"}


def late_feedback(row: dict, course: Course) -> str:
    """The feedback's line on a late hand-in (empty when it was on time or the course has no due date)."""
    if not row.get("late_days") or row["late_days"] == "0":
        return ""
    return (f"\n\n## Handed in late\n\n{row['late_days']} day(s) after the due date (handed in "
            f"{row['handed_in_at']}): -{row['late_penalty']} point(s), {course.late.per_day:.0%} of the points "
            "possible per day or part of a day. The grade your course records is lowered by it.\n")


def unclaimed_row(status: str) -> dict:
    """The row of files credited to no one (``grader.lms_downloads``): their status, no grade."""
    return {"status": status, "score": "", "max": "", "grader_version": __version__}


def class_ids(students: list[str]) -> tuple[str, ...]:
    """The batch's student ids a variant can be drawn for (``lab.variant.key``: not a reserved id, a valid one)."""
    ids = []
    for s in students:
        try:
            if variant.key(s) is not None:
                ids.append(s)
        except ValueError:  # a file name that is no student id (the intake says so): no variant to try
            continue
    return tuple(ids)


def report_after(out: Path) -> None:
    """``OUT/report.html`` for the instructor; a report that cannot be drawn never costs the gradebook."""
    try:
        write_report(out)
    except Exception as e:  # noqa: BLE001 - the grades are written; say why the page is missing
        print(f"grader: report.html not written ({type(e).__name__}: {e}); "
              f"`python -m grader report {out}` retries", file=sys.stderr)


def _batch(out: Path, collected: Collected, previous: dict[str, dict], options: BatchOptions,
           executor: Executor | None) -> list[dict]:
    resume = options.resume
    rows: dict[str, dict] = {u.key: {"student": u.key, **unclaimed_row(u.status)} for u in collected.unclaimed}
    journal = read_journal(out) if resume else {}
    todo = []
    for h in collected.hand_ins:
        row = _already_graded(out, h.student, h.path, journal, options.course.sha256) if resume else None
        if row is None:
            todo.append(h)
        else:
            rows[h.student] = row
    del journal
    kept = {h.student for h in collected.hand_ins if h.student in rows}
    # --resume keeps the published grade of each result it keeps; a regrade writes its own for all
    dropped = sorted(s for s, r in previous.items() if r.get("published") and s not in kept) if resume else []
    if dropped:
        print(f"the published grade of {len(dropped)} hand-in(s) graded again is replaced by the new grade: "
              + ", ".join(dropped), file=sys.stderr)
    extras = gradebook_extras(out, collected, previous, kept, options.course)
    students = [h.student for h in collected.hand_ins] + [u.key for u in collected.unclaimed]
    workers = getattr(executor, "workers_label", None) or f"{options.jobs} worker(s)"
    print(f"grader {__version__}: {len(collected.hand_ins)} submission(s), {len(collected.hand_ins) - len(todo)} "
          f"already graded, {len(todo)} to grade with {workers}; sandbox: "
          f"{sandbox.sandbox_kind(options.unsafe_no_sandbox)}", file=sys.stderr)
    for u in collected.unclaimed:
        print(f"{u.status}: {', '.join(u.files)}: {u.reason}", file=sys.stderr)
    if options.course.late.due is not None:  # an unzip that drops times makes all late: say so
        late = sorted(s for s, e in extras.items() if e.get("late_days") not in (None, "", "0"))
        print(f"late policy: {len(late)} of {len(collected.hand_ins)} hand-in(s) late (the time each came in: a "
              "Blackboard name's, else the downloaded file's modification time; an unzip that does not keep times "
              "makes every hand-in late)" + (": " + ", ".join(late) if late else ""), file=sys.stderr)
    write_gradebook(out, students, rows, extras)
    # one line per result, appended as it is written; a fresh batch starts a new journal; private, as every result
    fd = os.open(out / JOURNAL, os.O_WRONLY | os.O_CREAT | (os.O_APPEND if resume else os.O_TRUNC), 0o600)
    os.fchmod(fd, 0o600)
    with os.fdopen(fd, "a" if resume else "w", encoding="utf-8") as jf:
        try:
            return _grade(out, todo, students, rows, extras, options, executor, jf)
        except BaseException:
            write_gradebook(out, students, rows, extras)  # Ctrl-C: every result written so far is in it
            raise


def _grade(out: Path, todo: list[HandIn], students: list[str], rows: dict[str, dict], extras: dict[str, dict],
           options: BatchOptions, executor: Executor | None, jf) -> list[dict]:
    own = executor is None
    pending_paths = list(todo)
    own_adjustments = adjustments.read(out)
    possible = possible_points(options.course.prices)  # what a hand-in the grader failed on is out of
    bookkeeping = 0.0
    started = time.perf_counter()
    last_gradebook = time.monotonic()
    with progress_bar(len(todo), options.progress) as bar:
        while pending_paths:
            pool = executor or ProcessPoolExecutor(max_workers=options.jobs)
            try:
                futures = {pool.submit(job, str(h.path), h.student, options): h for h in pending_paths}
                pending_paths = []
                not_done = set(futures)
                while not_done:
                    done, not_done = wait(not_done, return_when=FIRST_COMPLETED)
                    for fut in done:
                        h = futures[fut]
                        p, student = h.path, h.student
                        try:
                            d = fut.result()
                        except BrokenProcessPool:
                            # a worker died (e.g. killed by the OOM killer): this one is an error, the rest go again
                            died = GradeResult.without_results(student, "error", "the grading worker died while "
                                                               "grading this submission", grader_version=__version__,
                                                               possible=possible)
                            d = package(died)
                            pending_paths = [futures[f] for f in not_done]
                            not_done = set()
                        except Exception as e:  # noqa: BLE001 - Dask: KilledWorker after a worker died repeatedly
                            d = package(GradeResult.without_results(student, "error", f"{type(e).__name__}: {e}",
                                                                    grader_version=__version__, possible=possible))
                        t0 = time.perf_counter()
                        if not d.get("input_sha256"):
                            d["input_sha256"] = sha256_of_input(p) if p.exists() else ""
                        write_result(out, d, own_adjustments.get(student),
                                     late_feedback(extras.get(student, {}), options.course))
                        entry = journal_entry(d)
                        jf.write(json.dumps(entry) + "\n")
                        jf.flush()
                        rows[student] = entry["row"]
                        if time.monotonic() - last_gradebook >= GRADEBOOK_EVERY_S:
                            write_gradebook(out, students, rows, extras)
                            last_gradebook = time.monotonic()
                        bar.set_postfix_str(student[:24], refresh=False)
                        bar.update(1)
                        bookkeeping += time.perf_counter() - t0
            finally:
                if own:
                    pool.shutdown(wait=True, cancel_futures=True)
    seconds = time.perf_counter() - started
    t0 = time.perf_counter()
    write_gradebook(out, students, rows, extras)
    bookkeeping += time.perf_counter() - t0
    if todo:
        print(f"graded {len(todo)} in {seconds:.2f} s ({len(todo) / seconds:.2f} hand-ins/s); bookkeeping "
              f"{bookkeeping / len(todo) * 1000:.3f} ms per hand-in", file=sys.stderr)
    cols = columns() + [c for c in EXTRA_COLUMNS if any(e.get(c) not in (None, "") for e in extras.values())]
    return [{n: str({**(rows.get(s) or pending_row(s)), **extras.get(s, {})}.get(n, "")) for n in cols}
            for s in students]
