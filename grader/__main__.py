"""``python -m grader grade PATH`` or ``python -m grader batch DIR --out OUT [-j N] [--resume]``; ``python -m grader
collect '/home/*/calibration-lab/workspace' --out DIR`` packs students' workspaces from their homes for ``batch``.

Both refuse to run student code where bubblewrap does not work, unless given ``--unsafe-no-sandbox``.
``grade``, ``batch`` and ``gradescope`` first check the fixtures, the rubric and the instructor secret
(``grader.preflight``) and refuse to start, exit code 3, when one is missing or differs: never a class of zeros.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from grader import gradescope, preflight, sandbox
from grader.private import write_private
from grader.report import write_report
from grader.roster import RosterError, read_roster
from grader.sandbox import Limits
from lab.errors import exit_with


def parser() -> argparse.ArgumentParser:
    """The command line: one subparser a subcommand, each with its ``handler`` (and ``preflight``: check the set-up
    first; ``warm_up``: start the fork server first)."""
    parser = argparse.ArgumentParser(prog="python -m grader", description="Calibration Lab grader")
    sub = parser.add_subparsers(dest="command", required=True)
    co = sub.add_parser("collect", help="pack every student's workspace from their home (a pattern whose one '*' is "
                        "the user) into OUT/ID.zip, as `lab submit` packs it, for `grader batch OUT`")
    co.add_argument("pattern", help="where each workspace is, the user's part as '*': "
                    "'/home/*/calibration-lab/workspace' (quote it: the shell must not expand it)")
    co.add_argument("--out", required=True, help="a new folder for the zips and collection.csv / collection.md")
    co.add_argument("--users", metavar="FILE", help="the hub's users (one a line, or JupyterHub's /hub/api/users "
                    "JSON), each put in place of the '*'; default: every folder the pattern matches")
    co.add_argument("--roster", metavar="CSV", help="map each user to a roster id (its student, username or "
                    "sis_login_id column) and list the roster's students with no home as missing")
    g = sub.add_parser("grade", help="grade one submission (a zip or a folder) and print its feedback")
    g.add_argument("path")
    g.add_argument("--json", action="store_true", help="print the result as JSON instead of Markdown")
    g.add_argument("--gradescope", metavar="FILE", help="also write Gradescope's results.json here")
    g.add_argument("--out", metavar="DIR", help="also write DIR/feedback/ID.md and DIR/results/ID.json, as a batch "
                   "does")
    b = sub.add_parser("batch", help="grade every submission in DIR")
    b.add_argument("folder")
    b.add_argument("--out", required=True)
    b.add_argument("-j", "--jobs", type=int, default=2)
    b.add_argument("--resume", action="store_true", help="skip submissions already graded by this version")
    b.add_argument("--no-progress", action="store_true")
    b.add_argument("--dask", metavar="SCHEDULER", help="grade on a Dask cluster: a scheduler address "
                   "(tcp://host:8786) or local:N for a local cluster of N workers; needs the [dask] extra")
    rg = sub.add_parser("regrade", help="grade a graded OUT folder again (after a grader, rubric or secret change) "
                        "and write OUT/regrades/N/: who moved, by how much, each check that changed and why")
    rg.add_argument("folder")
    rg.add_argument("--out", required=True)
    rg.add_argument("-j", "--jobs", type=int, default=2)
    rg.add_argument("--no-progress", action="store_true")
    rg.add_argument("--dask", metavar="SCHEDULER", help="as batch's --dask")
    rg.add_argument("--never-lower", action="store_true", help="publish the higher of the new score and the grade "
                    "published before (the gradebook's 'published' column, which `grader export` reads)")
    for p in (b, rg):
        p.add_argument("--roster", metavar="CSV", help="the course's roster (grader/roster.py's columns): credit each "
                       "LMS bulk-download file (Canvas, Moodle, Blackboard) to the roster student the LMS named it "
                       "after; a file naming no roster student, or two files for one, is a gradebook row with no grade")
        p.add_argument("--config", metavar="TOML", help="the course file (grader/course.py): prices, predictions "
                       "graded for correctness or completion, due date and late policy; its hash goes in the gradebook")
        p.add_argument("--names", metavar="REGEX", help="with --roster, download names of another LMS: a regex whose "
                       "named groups are roster columns, e.g. '(?P<sis_user_id>\\d+)_.*'")
    for p in (g, b, rg):
        p.add_argument("--ids-from-submission-json", action="store_true",
                       help="credit each hand-in to the student its submission.json names, not its file name: for "
                            "the instructor's own test hand-ins only (submission.json is the student's to write, so "
                            "in a class a copy renamed to another id would grade as its owner's)")
        p.add_argument("--unsafe-no-sandbox", action="store_true",
                       help="where bubblewrap does not work, run student code anyway, with rlimits alone: it can "
                            "then read and write whatever you can and reach the network (default: refuse to "
                            "run it; those checks score 0)")
        p.add_argument("--timeout", type=float, default=Limits.wall, help="wall-clock seconds per student-code run")
        p.add_argument("--memory-mib", type=int, default=Limits.memory >> 20, help="memory limit of student code")
    gs = sub.add_parser("gradescope", help="build Gradescope's autograder zip (the secret from GRADER_SECRET or "
                        "GRADER_SECRET_FILE, never the repository)")
    gs.add_argument("--out", default="autograder.zip")
    gs.add_argument("--config", metavar="TOML", help="bundle the course file (grader/course.py): its prices, "
                    "prediction grading and late policy (time from Gradescope's submission metadata)")
    for p in (g, b, rg, gs):
        p.add_argument("--no-secret", action="store_true",
                       help="grade (or bundle) without an instructor secret: the hidden summarize() lists are then "
                            "the public ones (default: refuse to start without GRADER_SECRET or GRADER_SECRET_FILE)")
    rp = sub.add_parser("report", help="write OUT/report.html and OUT/report.svg for a batch's OUT folder")
    rp.add_argument("out")
    ex = sub.add_parser("export", help="write a batch's gradebook as Canvas and Moodle import it (OUT/lms/)")
    ex.add_argument("out")
    ex.add_argument("--roster", required=True, help="CSV: student (the hand-in's id) and the LMS's identifiers "
                    "(Canvas: name, canvas_id, sis_user_id, sis_login_id, section; Moodle: idnumber, email)")
    ex.add_argument("--format", choices=("canvas", "moodle", "both"), default="both")
    ex.add_argument("--assignment", default="Calibration Lab", help="the Canvas assignment's or Moodle grade "
                    "item's column name (Canvas matches an existing assignment by 'Name (ID)')")
    ex.add_argument("--dest", help="folder for canvas.csv and moodle.csv (default OUT/lms)")
    ad = sub.add_parser("adjust", help="record a manual adjustment (points and the comment the student reads) in "
                        "OUT/adjustments.csv; kept across regrades, shown in the feedback and added by export")
    ad.add_argument("out")
    ad.add_argument("--student", required=True, help="the gradebook's student id")
    ad.add_argument("--points", type=float, required=True, help="points to add (negative to take away; 0 with no "
                    "comment removes the adjustment)")
    ad.add_argument("--comment", default="", help="why, in words the student reads in their feedback")
    for p, handler in ((co, _collect), (g, _grade), (b, _batch), (rg, _regrade), (gs, _gradescope), (rp, _report),
                       (ex, _export), (ad, _adjust)):
        p.set_defaults(handler=handler, preflight=p in (g, b, rg, gs), warm_up=p is g)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.warm_up and not args.unsafe_no_sandbox:
        # the sandbox's fork server preloads numpy and ONNX Runtime (about 0.4 s) on the other core while this
        # process checks its set-up and imports the grading stack; the reader's run used to wait for it
        sandbox.warm_up()
    if args.preflight:
        try:
            preflight.require(args.command, no_secret=args.no_secret)
        except preflight.PreflightError as e:
            print(e, file=sys.stderr)
            return preflight.EXIT_REFUSED
        if preflight.secret_note() and args.command != "gradescope":  # the bundle says so in its own words
            print(preflight.secret_note(), file=sys.stderr)
        if preflight.secret_exposed():
            print(preflight.secret_exposed(), file=sys.stderr)
    return args.handler(args)


def _limits(args) -> Limits:
    """Each student-code run's limits, from ``--timeout`` and ``--memory-mib``."""
    return Limits(wall=args.timeout, cpu=max(1, int(args.timeout)), memory=args.memory_mib << 20)


def _unsafe(args) -> bool | None:
    """``--unsafe-no-sandbox``: True; else None (``GRADER_UNSAFE_NO_SANDBOX`` decides)."""
    return True if args.unsafe_no_sandbox else None


def _options(args):
    """``batch`` and ``regrade``'s arguments as one ``grader.batch.BatchOptions``."""
    from grader.batch import BatchOptions  # deferred: the grading stack (about 1 s), after preflight

    return BatchOptions(jobs=args.jobs, resume=getattr(args, "resume", False), limits=_limits(args),
                        progress=not args.no_progress, unsafe_no_sandbox=_unsafe(args), dask=args.dask,
                        ids_from_submission=args.ids_from_submission_json, course=_course(args), roster=args.roster,
                        names=args.names)


def _grade(args) -> int:
    """``grade``: one hand-in's feedback on stdout (or its JSON), and where else it was written."""
    # deferred: grader.batch loads the grading stack (about 1 s: onnx, onnxruntime, every lesson); preflight
    # refuses a broken install before it, and `report` and `gradescope` never need it
    from grader.batch import grade_one

    if not Path(args.path).exists():
        print(f"grade: {args.path} does not exist", file=sys.stderr)
        return 2
    if args.out and (Path(args.out) / "gradebook.csv").is_file():
        print(f"grade: {args.out} is a batch's folder (it has gradebook.csv), whose gradebook grade --out would leave "
              f"behind; grade the class into it with `python -m grader batch FOLDER --out {args.out} --resume` (a "
              f"changed hand-in is graded again) or `python -m grader regrade FOLDER --out {args.out}`, or give grade "
              "another --out", file=sys.stderr)
        return 2
    sandbox.allow_unsafe(_unsafe(args))
    print(f"sandbox: {sandbox.sandbox_kind()}", file=sys.stderr)
    result, isolation = grade_one(args.path, _limits(args), credited=not args.ids_from_submission_json)
    if args.json:
        print(json.dumps(dict(result.to_dict(), isolation=isolation), indent=2, allow_nan=False))
    else:
        print(result.to_markdown())
    if args.gradescope:
        write_private(args.gradescope, json.dumps(result.to_gradescope(), indent=2))
    where = "feedback printed above (--out DIR also writes it to a file)"
    if args.out:
        where = "feedback: " + str(_write_one(Path(args.out), result, isolation))
    print(f"{result.student}: {result.status}, score {result.score:g} / {result.max_score:g}"
          + (f"; {isolation}" if isolation.startswith("refused") else "") + f"; {where}", file=sys.stderr)
    return 0 if result.status == "graded" else 1


def _batch(args) -> int:
    """``batch``: a class into OUT, then a line of counts (and how many hand-ins' code was refused)."""
    from grader.batch import batch  # deferred: as in `grade`

    if not Path(args.folder).is_dir():
        print(f"batch: {args.folder} is not a folder of submissions", file=sys.stderr)
        return 2
    try:
        rows = batch(args.folder, args.out, _options(args))
    except (RosterError, ValueError) as e:
        print(f"batch: {e}", file=sys.stderr)
        return 2
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    print(f"{len(rows)} submission(s): " + ", ".join(f"{v} {k}" for k, v in sorted(counts.items()))
          + f"; gradebook: {Path(args.out) / 'gradebook.csv'}")
    refused = sum(r.get("isolation", "").startswith("refused") for r in rows)
    if refused:
        print(f"student code was NOT run for {refused} submission(s) (gradebook column 'isolation'): "
              f"{sandbox.REFUSED}", file=sys.stderr)
    return 0


def _write_one(out: Path, result, isolation: str) -> Path:
    """One grade's feedback and result under ``out``, named by the student id as a batch names them."""
    (out / "feedback").mkdir(parents=True, exist_ok=True)
    (out / "results").mkdir(parents=True, exist_ok=True)
    write_private(out / "results" / f"{result.student}.json",
                  json.dumps(dict(result.to_dict(), isolation=isolation), indent=2, allow_nan=False) + "\n")
    return write_private(out / "feedback" / f"{result.student}.md", result.to_markdown())


def _gradescope(args) -> int:
    """``gradescope`` (grader.gradescope): the autograder zip; no student code runs."""
    secret = gradescope.bundle_secret()
    try:
        path = gradescope.build(args.out, secret=secret or "", course_file=Path(args.config) if args.config else None)
    except ValueError as e:  # grader.course.CourseError: the file, the field, what was expected
        print(f"gradescope: {e}", file=sys.stderr)
        return 2
    print(f"{path}: Gradescope autograder, " + ("with the instructor secret (instructor/secret.txt, 0600)" if secret
          else "WITHOUT an instructor secret (set GRADER_SECRET or GRADER_SECRET_FILE and build again)"))
    return 0


def _report(args) -> int:
    """``report`` (grader.report): a batch's report.html again; no student code runs."""
    if not (Path(args.out) / "gradebook.csv").is_file():
        print(f"report: {args.out} has no gradebook.csv; run `python -m grader batch DIR --out {args.out}` first",
              file=sys.stderr)
        return 2
    print(write_report(args.out))
    return 0


def _regrade(args) -> int:
    """``regrade`` (grader.regrade): the batch again, then the change report and both versions in the gradebook."""
    from grader.regrade import max_change, regrade  # deferred: the grading stack, as in `batch`

    if not Path(args.folder).is_dir() or not (Path(args.out) / "gradebook.csv").is_file():
        print(f"regrade: needs a folder of submissions ({args.folder}) and a graded OUT folder with a gradebook.csv "
              f"({args.out}); run `python -m grader batch` first", file=sys.stderr)
        return 2
    try:
        here, changes = regrade(args.folder, args.out, args.never_lower, _options(args))
    except (RosterError, ValueError) as e:
        print(f"regrade: {e}", file=sys.stderr)
        return 2
    moved = [c for c in changes if c.moved]
    print(f"{len(changes)} hand-in(s) regraded, {len(moved)} changed"
          + (f", {sum(c.held for c in changes)} published grade(s) kept (never lower)" if args.never_lower else "")
          + f"; change report: {here / 'changes.md'}")
    if max_change(changes):
        print(max_change(changes) + (": published grades kept as the same share of the new points possible"
                                     if args.never_lower else ""))
    return 0


def _course(args):
    """The course file's settings (``--config``), or the defaults; a bad file raises ``CourseError`` (a ValueError)."""
    from grader import course  # deferred: only the commands that grade read it

    return course.load(args.config) if args.config else course.DEFAULT


def _adjust(args) -> int:
    """``adjust`` (grader.adjustments): the instructor's file, then the gradebook row and the feedback again."""
    from grader import adjustments, course, export  # deferred: only this command needs them
    from grader.batch import read_gradebook, write_gradebook  # deferred: the grading stack, as in `batch`

    out = Path(args.out)
    book = read_gradebook(out)
    if args.student not in book:
        print(f"adjust: {out / 'gradebook.csv'} has no row for student {args.student!r}"
              + ("" if book else "; run `python -m grader batch` first"), file=sys.stderr)
        return 2
    try:
        every = adjustments.record(out, args.student, args.points, args.comment)
    except adjustments.AdjustmentError as e:
        print(f"adjust: {e}", file=sys.stderr)
        return 2
    extras = {s: {k: v for k, v in r.items() if k not in ("adjustment", "adjustment_comment")} for s, r in book.items()}
    for s, each in every.items():
        extras.setdefault(s, {}).update(adjustments.columns(each))
    write_gradebook(out, list(book), book, extras)
    feedback = out / "feedback" / f"{args.student}.md"
    a, row = every.get(args.student), book[args.student]
    total = export.grade_of(row, a)
    total = f"{total} / {float(row['max']):g}" if total and row.get("max") not in (None, "") else total
    if feedback.is_file():
        write_private(feedback, adjustments.in_feedback(feedback.read_text(encoding="utf-8"), a, total))
    course.like_folder(out, [out / adjustments.FILE, out / "gradebook.csv", feedback])
    print(f"{args.student}: " + (f"{a.points:+g} point(s), '{a.comment}'" if a else "no adjustment")
          + (f", grade now {total}" if total else "")
          + f"; {out / adjustments.FILE}, gradebook and feedback updated. The LMS files and report.html still hold "
          f"the old grade: run `python -m grader export {out} ...` (and `python -m grader report {out}`) again")
    return 0


def _collect(args) -> int:
    """``collect`` (grader.collect): no student code runs; a bad pattern, user list or roster is exit code 2."""
    from grader import collect  # deferred: lab.handin's packing (onnxruntime's versions); only this command needs it

    try:
        users = collect.read_users(args.users) if args.users else None
        roster = read_roster(args.roster) if args.roster else None
        rows = collect.collect(args.pattern, args.out, users, roster)
    except (OSError, ValueError) as e:  # RosterError and CollectError are ValueErrors
        print(f"collect: {e}", file=sys.stderr)
        return 2
    print(collect.summary(rows))
    print(f"zips and {collect.REPORT}.csv / {collect.REPORT}.md in {args.out}; grade them with "
          f"`python -m grader batch {args.out} --out GRADES`")
    return 0


def _export(args) -> int:
    """``export`` (grader.export): no student code runs; a bad roster is exit code 2, naming file, row and field."""
    from grader.export import RosterError, export  # deferred: reads only CSV files; the other commands never need it

    if not (Path(args.out) / "gradebook.csv").is_file():
        print(f"export: {args.out} has no gradebook.csv; run `python -m grader batch DIR --out {args.out}` first",
              file=sys.stderr)
        return 2
    formats = ("canvas", "moodle") if args.format == "both" else (args.format,)
    try:
        done = export(args.out, args.roster, formats, args.assignment, args.dest)
    except RosterError as e:
        print(f"export: {e}", file=sys.stderr)
        return 2
    print(done.summary())
    return 0


if __name__ == "__main__":
    exit_with(main)
