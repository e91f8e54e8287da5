"""Grade a whole class: one pure job per submission through a ``concurrent.futures`` executor.

Each result is written atomically as it finishes (``OUT/results/ID.json``, ``OUT/feedback/ID.md``)
and ``OUT/gradebook.csv`` is rewritten from the results after each one, so Ctrl-C loses no
finished grade. ``--resume`` skips submissions already graded by this grader version with the
same input hash. A job that dies is an ``error`` row, never a stopped batch.

Student code runs only under bubblewrap: without it each result says the code was refused
(a note in the feedback, ``isolation`` in the result and the gradebook), unless the batch was
started with ``unsafe_no_sandbox`` (the CLI's ``--unsafe-no-sandbox``).
"""
from __future__ import annotations

import csv
import io
import json
import sys
import time
from concurrent.futures import FIRST_COMPLETED, Executor, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

from grader import __version__
from grader.context import rubric
from grader.results import GradeResult
from grader import sandbox
from grader.sandbox import Limits
from grader.submission import sha256_of_input, student_from_path


def find_submissions(folder: Path, out: Path | None = None) -> list[Path]:
    """Every ``*.zip`` and every sub-folder (an unpacked submission) in ``folder``, sorted; never ``out`` itself."""
    skip = out.resolve() if out is not None else None
    return [p for p in sorted(folder.iterdir()) if not p.name.startswith(".")
            and (p.suffix == ".zip" or p.is_dir()) and p.resolve() != skip]


def job(path: str, limits: Limits | None = None, unsafe_no_sandbox: bool | None = None) -> dict:
    """The pure per-submission job: path in, result dict out. Never raises."""
    if unsafe_no_sandbox is not None:
        sandbox.allow_unsafe(unsafe_no_sandbox)
    return package(*grade_one(path, limits))


def grade_one(path: str | Path, limits: Limits | None = None) -> tuple[GradeResult, str]:
    """``grader.core.grade``, plus how its student code ran (``isolation_label``) and a note if it was refused."""
    from grader.core import grade

    sandbox.take_runs()
    result = grade(path, limits)
    runs = sandbox.take_runs()
    if "refused" in runs:
        result.notes.append(sandbox.REFUSED_NOTE)
    return result, isolation_label(runs)


def isolation_label(runs: list[str]) -> str:
    """The gradebook's ``isolation``: bubblewrap, refused, none (--unsafe-no-sandbox), or '' when no student code was due."""
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


def _possible() -> float:
    from grader.core import possible_points

    return possible_points()


def _atomic(path: Path, text: str) -> None:
    from lab.workspace import atomic_write_text

    atomic_write_text(path, text)


def write_result(out: Path, d: dict) -> None:
    student = d["student"]
    feedback, gradescope = d.pop("feedback", None), d.pop("gradescope", None)
    if feedback is not None:
        _atomic(out / "feedback" / f"{student}.md", feedback)
    if gradescope is not None:
        _atomic(out / "gradescope" / f"{student}.json", json.dumps(gradescope, indent=2))
    _atomic(out / "results" / f"{student}.json", json.dumps(d, indent=2, allow_nan=False))


def parts() -> list[str]:
    return list(rubric())


def write_gradebook(out: Path, students: list[str]) -> Path:
    """One row per submission, always: a missing result is an ``error`` row."""
    buf = io.StringIO()
    names = parts()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["student", "status", "score", "max", *names, "grader_version", "isolation"])
    for student in students:
        path = out / "results" / f"{student}.json"
        try:
            d = json.loads(path.read_text())
            row = [student, d["status"], d["score"], d["max_score"],
                   *[d["parts"].get(n, {}).get("points", "") for n in names], d["grader_version"],
                   d.get("isolation", "")]
        except (OSError, ValueError, KeyError):
            row = [student, "error", 0, "", *[""] * len(names), __version__, ""]
        w.writerow(row)
    target = out / "gradebook.csv"
    _atomic(target, buf.getvalue())
    return target


def _already_graded(out: Path, student: str, path: Path) -> bool:
    try:
        d = json.loads((out / "results" / f"{student}.json").read_text())
    except (OSError, ValueError):
        return False
    return (d.get("grader_version") == __version__ and d.get("status") != "error"
            and not str(d.get("isolation", "")).startswith("refused")  # graded again once bubblewrap works
            and d.get("input_sha256") == sha256_of_input(path))


class Progress:
    """A one-line progress bar with an ETA on stderr."""

    def __init__(self, total: int, stream=sys.stderr):
        self.total, self.done, self.start, self.stream = total, 0, time.monotonic(), stream

    def step(self, label: str) -> None:
        self.done += 1
        elapsed = time.monotonic() - self.start
        eta = elapsed / self.done * (self.total - self.done) if self.done else 0
        width = 30
        filled = int(width * self.done / max(self.total, 1))
        self.stream.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total} "
                          f"{elapsed:5.1f}s ETA {eta:5.1f}s {label[:24]:<24}")
        if self.done == self.total:
            self.stream.write("\n")
        self.stream.flush()


def batch(folder: str | Path, out: str | Path, jobs: int = 2, resume: bool = False,
          limits: Limits | None = None, executor: Executor | None = None, progress: bool = True,
          unsafe_no_sandbox: bool | None = None) -> list[dict]:
    """Grade every submission in ``folder`` into ``out``; return the gradebook rows as dicts.

    ``unsafe_no_sandbox=True`` runs student code with rlimits alone where bubblewrap does not
    work; ``None`` leaves it to ``GRADER_UNSAFE_NO_SANDBOX``; otherwise such code is refused.
    """
    folder, out = Path(folder), Path(out)
    out.mkdir(parents=True, exist_ok=True)
    subs = find_submissions(folder, out)
    students = [student_from_path(p) for p in subs]
    if len(set(students)) != len(students):
        dupes = sorted({s for s in students if students.count(s) > 1})
        raise SystemExit(f"two submissions for the same student: {dupes}; keep one of each")
    todo = [p for p, s in zip(subs, students) if not (resume and _already_graded(out, s, p))]
    print(f"grader {__version__}: {len(subs)} submission(s), {len(subs) - len(todo)} already graded, "
          f"{len(todo)} to grade with {jobs} worker(s); sandbox: {sandbox.sandbox_kind(unsafe_no_sandbox)}",
          file=sys.stderr)
    bar = Progress(len(todo)) if progress else None
    write_gradebook(out, students)
    own = executor is None
    pending_paths = list(todo)
    while pending_paths:
        pool = executor or ProcessPoolExecutor(max_workers=jobs)
        try:
            futures = {pool.submit(job, str(p), limits, unsafe_no_sandbox): p for p in pending_paths}
            pending_paths = []
            not_done = set(futures)
            while not_done:
                done, not_done = wait(not_done, return_when=FIRST_COMPLETED)
                for fut in done:
                    p = futures[fut]
                    student = student_from_path(p)
                    try:
                        d = fut.result()
                    except BrokenProcessPool:
                        # a worker died (e.g. killed by the OOM killer): this one is an error, the rest go again
                        d = GradeResult.without_results(student, "error", "the grading worker died while "
                                                        "grading this submission", grader_version=__version__,
                                                        possible=_possible())
                        d = package(d)
                        pending_paths = [futures[f] for f in not_done]
                        not_done = set()
                    except Exception as e:  # noqa: BLE001
                        d = package(GradeResult.without_results(student, "error", f"{type(e).__name__}: {e}",
                                                                grader_version=__version__, possible=_possible()))
                    if not d.get("input_sha256"):
                        d["input_sha256"] = sha256_of_input(p) if p.exists() else ""
                    write_result(out, d)
                    write_gradebook(out, students)
                    if bar:
                        bar.step(student)
        finally:
            if own:
                pool.shutdown(wait=True, cancel_futures=True)
    with open(out / "gradebook.csv", newline="") as f:
        return list(csv.DictReader(f))
