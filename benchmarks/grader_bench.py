"""Grader benchmark: a class of 100 submissions, graded with ``grader batch -j 2``, against a floor.

The class: honest hand-ins, each made for its own student's variant of the lab's data (``lab.variant``: every model
file differs, so no per-process cache of one hand-in's results serves the next), every lesson run (full marks), up
to ``VARIANTS`` of them (a larger class's other hand-ins are copies of theirs under other ids); about 20 % broken in
different ways (from the bad corpus, minus the cases built to hit the time limit), made from the reference run. The
floor: one process per submission that starts Python, imports onnxruntime and evaluates the handed-in models once,
two at a time. Floor and batch run in ``PAIRS`` back-to-back pairs (the order alternating), and the ratio is the
median of the pairs' ratios: the machine's speed drifts within a run, a pair's two runs drift together. Also
reported: a worker's peak memory, the per-child cost of the sandbox, and the anchor a user would otherwise pick:
nbgrader-style grading that re-executes each student's notebooks (measured for one student, scaled to the class).

At scale (``--scale N``, default 2,000): N copies of one cheap hand-in (the corpus's
``hash_mismatch``: the reference run with one file changed, so intake hashes the files and
refuses it as ``invalid`` before loading a model), graded with ``-j 2`` and with
``--dask local:2``. This measures the batch's own cost per hand-in (executor, result files,
journal, gradebook), not the checks. Reported: hand-ins per second for each, as a ratio to the
floor's hand-ins per second (the same one-process-per-submission floor, timed on a sample of
``SCALE_FLOOR_SAMPLE`` of those hand-ins), the parent's bookkeeping per hand-in at N and at N/10
(flat when the bookkeeping is linear), and what one full gradebook rewrite from the results
costs at N (what the batch used to pay after every result).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from benchmarks import alternating_pairs, median_pair
from grader import reference, sandbox
from grader.batch import write_gradebook
from lab import camera, data
from lab.tools.submit import submit

REPO = Path(__file__).resolve().parent.parent
# `python -m grader` refuses to start without an instructor secret (grader.preflight); the benchmark grades copies
# of the reference run, and the public summarize() lists cost what the secret ones do. A secret that is set is used.
os.environ.setdefault("GRADER_NO_SECRET", "1")
N_STUDENTS = 100
BROKEN_FRACTION = 0.2
JOBS = 2
SCALE = 2000
SCALE_CASE = "hash_mismatch"
SCALE_FLOOR_SAMPLE = 40
QUICK_ENV = "BENCH_QUICK"  # set by ``python -m benchmarks --quick``: a class of QUICK_N, no anchor, no scale run
QUICK_N = 20
HONEST = ("good", "copy")  # make_class's kinds that are not a broken case
VARIANTS = 20  # honest hand-ins built, each its own variant (about 20 s each); a larger class's others are copies
SINGLE_REPEATS = 3
PAIRS = 3  # floor and batch, back to back; the median of the pairs' ratios is reported
PHASE_REPEATS = 4  # gradings of one hand-in in one process: the first pays the one-off costs, the rest do not
AIM_BATCH_RATIO = 1.0
AIM_SINGLE_S = 1.5
DISTINCT_N = 8  # the class of distinct students: each its own variant, so no cache of one hand-in serves another
AIM_DISTINCT_RATIO = 3.0
OUT = REPO / "build" / "bench"

FLOOR_SCRIPT = r'''
import sys, zipfile
import numpy as np
import onnxruntime as ort
inputs = dict(np.load(sys.argv[2]))  # input name -> its evaluation set: the digits' pixels, the camera's image
so = ort.SessionOptions(); so.intra_op_num_threads = 1; so.inter_op_num_threads = 1
with zipfile.ZipFile(sys.argv[1]) as zf:
    for name in zf.namelist():
        if name.endswith(".onnx"):
            try:  # a broken hand-in's model may not load or run: the grader refuses it too
                s = ort.InferenceSession(zf.read(name), so, providers=["CPUExecutionProvider"])
                s.run(None, {i.name: inputs[i.name] for i in s.get_inputs()})
            except Exception:
                pass
'''

WORKER_SCRIPT = r'''
import json, resource, sys, time
from grader.batch import job
paths = sys.argv[1:]
start = time.perf_counter()
for p in paths:
    job(p)
print(json.dumps({"seconds": time.perf_counter() - start, "n": len(paths),
                  "worker_peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "child_peak_mib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024}))
'''


def make_class(folder: Path, n: int = N_STUDENTS, broken: float = BROKEN_FRACTION,
               variants: int = VARIANTS) -> dict[str, str]:
    """``n`` submissions in ``folder``, about ``broken`` of them broken; the others honest, each made for its own
    student id's variant (the first ``variants``; later ones copy theirs under their own ids). Returns id -> kind."""
    sys.path.insert(0, str(REPO / "tests"))
    from bad_submissions import corpus  # deferred: the corpus lives in tests/, put on the path just above

    made = folder.parent / "made"
    files = corpus.read_zip(submit("reference", reference.build(made / "reference"), made))
    cases = [c for c in corpus.CASES if c.status != "timeout"]
    n_broken = round(n * broken)
    kinds: dict[str, str] = {}
    honest: list[bytes] = []
    for i in range(n):
        student = f"student{i:03d}"
        n_bad = sum(k not in HONEST for k in kinds.values())
        if i % round(1 / broken) == 0 and n_bad < n_broken:
            case = cases[n_bad % len(cases)]
            (folder / f"{student}.zip").write_bytes(case.make(dict(files)))
            kinds[student] = case.name
            continue
        if len(honest) < variants:
            work = with_lesson_08(reference.build(made / student, student=student))  # every id's lessons hold
            honest.append(submit(student, work, made).read_bytes())
            kinds[student] = "good"
        else:  # a copy of an earlier student's hand-in: graded in full, its artifacts refused as another's
            honest.append(honest[len(honest) % variants])
            kinds[student] = "copy"
        (folder / f"{student}.zip").write_bytes(honest[-1])
    return kinds


def with_lesson_08(work: Path) -> Path:
    """``work`` with lessons 08 and 09 run into it by ``python -m lab run --only 08,09``: ``reference.build`` leaves
    them out (its docstring says why), and a student's hand-in has their ``outliers.json``, ``outliers.onnx``,
    ``toolbox.json`` and ``choice.onnx``, which the grader checks and the floor runs."""
    proc = subprocess.run([sys.executable, "-m", "lab", "run", "--only", "08,09", "--work-dir", str(work), "--out",
                           str(work.parent / "lesson-08-run")], cwd=REPO, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"lessons 08 and 09 did not run into the reference workspace: {proc.stderr[-1000:]}")
    return work


def distinct_class(folder: Path, kinds: dict[str, str], tmp: Path, n: int = DISTINCT_N) -> dict:
    """The first ``n`` honest hand-ins (each its own student's variant) graded with ``grader batch -j 2`` against
    their floor, in ``PAIRS`` back-to-back pairs; the median pair's ratio."""
    distinct = tmp / "distinct"
    distinct.mkdir()
    for student in [s for s, k in sorted(kinds.items()) if k == "good"][:n]:
        (distinct / f"{student}.zip").write_bytes((folder / f"{student}.zip").read_bytes())
    runs = alternating_pairs(PAIRS, lambda i: time_floor(distinct),
                             lambda i: time_batch(distinct, tmp / f"distinct-out-{i}")[0])
    ratio, (floor, batch_s) = median_pair(runs, float)
    return {"n": len(list(distinct.glob("*.zip"))), "jobs": JOBS, "floor_seconds": floor, "batch_seconds": batch_s,
            "ratio": round(ratio, 3), "pairs": [{"floor": f, "batch": b, "ratio": round(b / f, 3)} for f, b in runs],
            "aim_ratio": AIM_DISTINCT_RATIO, "met": ratio <= AIM_DISTINCT_RATIO}


def reference_zip(tmp: Path) -> Path:
    return submit("reference", reference.build(tmp / "reference-workspace"), tmp)


def make_cheap_class(folder: Path, n: int, good_zip: Path) -> None:
    """``n`` copies of the ``SCALE_CASE`` hand-in (refused at intake: a hash differs from submission.json)."""
    sys.path.insert(0, str(REPO / "tests"))
    from bad_submissions import corpus  # deferred: the corpus lives in tests/, put on the path just above

    case = next(c for c in corpus.CASES if c.name == SCALE_CASE)
    data = case.make(dict(corpus.read_zip(good_zip)))
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        (folder / f"h{i:05d}.zip").write_bytes(data)


def time_floor(folder: Path, jobs: int = JOBS, limit: int | None = None) -> float:
    x_path = folder.parent / "x.npz"
    save_floor_inputs(x_path)
    script = folder.parent / "floor.py"
    script.write_text(FLOOR_SCRIPT)
    zips = sorted(folder.glob("*.zip"))[:limit]
    start = time.perf_counter()
    with ThreadPoolExecutor(jobs) as pool:
        list(pool.map(lambda z: subprocess.run([sys.executable, str(script), str(z), str(x_path)],
                                               capture_output=True, check=False), zips))
    return time.perf_counter() - start


def time_batch(folder: Path, out: Path, jobs: int = JOBS) -> tuple[float, str]:
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "grader", "batch", str(folder), "--out", str(out), "-j", str(jobs),
                           "--no-progress"], cwd=REPO, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"grader batch failed: {proc.stderr[-1000:]}")
    return seconds, proc.stdout.strip().splitlines()[-1]


BATCH_LINE = re.compile(r"graded (\d+) in ([\d.]+) s \(([\d.]+) hand-ins/s\); bookkeeping ([\d.]+) ms per hand-in")


def time_scale(folder: Path, out: Path, *how: str) -> dict:
    """One CLI batch; the batch's own figures (grading loop only) and the command's wall clock."""
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "grader", "batch", str(folder), "--out", str(out), "--no-progress",
                           *how], cwd=REPO, capture_output=True, text=True)
    wall = time.perf_counter() - start
    m = BATCH_LINE.search(proc.stderr)
    if proc.returncode != 0 or not m:
        raise RuntimeError(f"grader batch {' '.join(how)} failed: {proc.stderr[-1000:]}")
    return {"n": int(m[1]), "seconds": float(m[2]), "rate": float(m[3]), "bookkeeping_ms": float(m[4]), "wall": wall}


def full_rewrite_ms(out: Path) -> float:
    """One gradebook rewritten from every ``results/ID.json`` (the old per-result cost)."""
    students = sorted(p.stem for p in (out / "results").glob("*.json"))
    start = time.perf_counter()
    write_gradebook(out, students)
    return (time.perf_counter() - start) * 1000


def scale(tmp: Path, n: int, good_zip: Path) -> list[str]:
    lines: list[str] = []
    folder = tmp / "scale"
    make_cheap_class(folder, n, good_zip)
    small = tmp / "scale-small"
    make_cheap_class(small, max(n // 10, 1), good_zip)
    floor_s = time_floor(folder, limit=SCALE_FLOOR_SAMPLE)
    floor_rate = min(SCALE_FLOOR_SAMPLE, n) / floor_s
    local = time_scale(folder, tmp / "scale-local", "-j", str(JOBS))
    local_small = time_scale(small, tmp / "scale-local-small", "-j", str(JOBS))
    rewrite = full_rewrite_ms(tmp / "scale-local")
    try:
        dask = time_scale(folder, tmp / "scale-dask", "--dask", f"local:{JOBS}")
    except RuntimeError as e:
        dask = None
        lines.append(f"dask: not measured ({str(e).strip().splitlines()[-1]}); pip install -e '.[dask]'")
    lines.append(f"at scale: {n} copies of the '{SCALE_CASE}' hand-in "
                 "(refused at intake: a file's hash differs from submission.json)")
    lines.append(f"floor (one process per hand-in, {JOBS} at a time, on {min(SCALE_FLOOR_SAMPLE, n)} of them): "
                 f"{floor_rate:6.1f} hand-ins/s")
    for name, r in (("grader batch -j 2", local), (f"grader batch --dask local:{JOBS}", dask)):
        if r is None:
            continue
        lines.append(f"{name + ':':<32}{r['rate']:6.1f} hand-ins/s ({r['rate'] / floor_rate:.1f}x the floor's rate; "
              f"{r['n']} in {r['seconds']:.1f} s, {r['wall']:.1f} s with start-up); bookkeeping "
              f"{r['bookkeeping_ms']:.2f} ms per hand-in")
    growth = local["bookkeeping_ms"] / local_small["bookkeeping_ms"]
    lines.append(f"bookkeeping per hand-in, -j 2: {local_small['bookkeeping_ms']:.2f} ms at {local_small['n']}, "
                 f"{local['bookkeeping_ms']:.2f} ms at {local['n']} ({growth:.2f}x; "
                 f"linear bookkeeping stays near 1x); one full gradebook rewrite from the results at {n}: "
                 f"{rewrite:.0f} ms (the old per-result cost, {rewrite / local['bookkeeping_ms']:.0f}x today's)")
    return lines


def worker_memory(folder: Path, n: int = 10) -> dict:
    zips = [str(p) for p in sorted(folder.glob("*.zip"))[:n]]
    proc = subprocess.run([sys.executable, "-c", WORKER_SCRIPT, *zips], cwd=REPO, capture_output=True, text=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def child_cost(folder: Path, isolate: bool | None, n: int = 5) -> float:
    """Seconds for one student-code run of the reader task: a fresh process (``isolate`` True/False)
    or a fork of the preloaded server (None)."""
    scratch = folder.parent / "child"
    scratch.mkdir(exist_ok=True)
    (scratch / "calibration_reader.py").write_text(reference.READER_SOURCE)
    task = {"task": "reader", "module": "calibration_reader", "class": "DigitReader", "input": "input.npz",
            "batch_size": 36, "max_batches": 1000}
    inputs = {"input.npz": {"pixels": data.calibration_set("right")}}
    sandbox.run(scratch, task, inputs, isolate=isolate)
    start = time.perf_counter()
    for _ in range(n):
        sandbox.run(scratch, task, inputs, isolate=isolate)
    return (time.perf_counter() - start) / n


def time_notebook_regrade(tmp: Path) -> float | None:
    """nbgrader-style: re-execute every lesson for one student, as ``lab run`` does. Seconds, or None."""
    proc_start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "lab", "run", "--work-dir", str(tmp / "nb-ws"), "--out",
                           str(tmp / "nb-out")], cwd=REPO, capture_output=True, text=True)
    seconds = time.perf_counter() - proc_start
    return seconds if proc.returncode == 0 else None


def save_floor_inputs(path: Path) -> None:
    """The floor's inputs, by input name: the digits' evaluation pixels and the camera's evaluation image (lesson
    10's handed-in CNN), so the floor runs every handed-in model once on its own evaluation set."""
    np.savez(path, **{data.INPUT_NAME: data.load_split("evaluation").pixels,
                      camera.INPUT_NAME: camera.load_split("evaluation").image})


def median_seconds(cmd: list[str], repeats: int = SINGLE_REPEATS) -> float:
    """Median wall-clock seconds of ``cmd`` run ``repeats`` times from the repository (output discarded)."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, check=False)
        times.append(time.perf_counter() - start)
        if proc.returncode not in (0, 1):  # 1: graded, but not "graded" (a broken hand-in); else it did not grade
            raise RuntimeError(f"{' '.join(cmd[1:3])} exited {proc.returncode}: {proc.stderr[-800:]}")
    return statistics.median(times)


def single_grade(zip_path: Path, tmp: Path) -> dict:
    """One ``python -m grader grade`` of one honest hand-in (its student's own variant) against the floor for it."""
    x_path = tmp / "x-single.npz"
    save_floor_inputs(x_path)
    script = tmp / "floor-single.py"
    script.write_text(FLOOR_SCRIPT)
    floor = median_seconds([sys.executable, str(script), str(zip_path), str(x_path)])
    grade = median_seconds([sys.executable, "-m", "grader", "grade", str(zip_path)])
    return {"grade_seconds": grade, "floor_seconds": floor, "ratio": grade / floor, "aim_seconds": AIM_SINGLE_S}


def phase_profile(zip_path: Path, repeats: int = PHASE_REPEATS) -> dict:
    """``benchmarks.phases`` in a fresh process: the first grading (what a single ``grader grade`` pays,
    with the imports before it) and the median of the later ones (what a batch worker pays per hand-in)."""
    proc = subprocess.run([sys.executable, "-m", "benchmarks.phases", str(zip_path), str(repeats)], cwd=REPO,
                          capture_output=True, text=True)
    runs = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or len(runs) != repeats:
        raise RuntimeError(f"benchmarks.phases failed: {proc.stderr[-1000:]}")
    first = dict(runs[0]["phases"], **{"imports before grading": runs[0]["imports_before"]})
    later = {k: statistics.median(r["phases"][k] for r in runs[1:]) for k in runs[0]["phases"]}
    return {"first": first, "steady": later, "calls": runs[-1]["calls"],
            "first_wall": runs[0]["wall"] + runs[0]["imports_before"],
            "steady_wall": statistics.median(r["wall"] for r in runs[1:]), "status": runs[0]["status"]}


def phase_table(phases: dict, floor_per_hand_in: float) -> list[str]:
    """Seconds per phase, each as a ratio to the floor's seconds for one hand-in, first and steady."""
    names = list(phases["first"])
    lines = [f"{'phase':<34}{'first (s)':>10}{'x floor':>9}{'steady (s)':>12}{'x floor':>9}{'calls':>7}"]
    for name in names:
        first, steady = phases["first"][name], phases["steady"].get(name, 0.0)
        lines.append(f"{name:<34}{first:>10.3f}{first / floor_per_hand_in:>9.2f}{steady:>12.3f}"
                     f"{steady / floor_per_hand_in:>9.2f}{phases['calls'].get(name, ''):>7}")
    lines.append(f"{'whole grading':<34}{phases['first_wall']:>10.3f}{phases['first_wall'] / floor_per_hand_in:>9.2f}"
                 f"{phases['steady_wall']:>12.3f}{phases['steady_wall'] / floor_per_hand_in:>9.2f}")
    return lines


def markdown(report: dict) -> str:
    """``build/bench/grader.md``: the same figures as the printed tables."""
    c, lines = report.get("class"), ["# Grader benchmark", ""]
    if c:
        runs = "; ".join(f"{p['batch']:.1f} s against {p['floor']:.1f} s ({p['ratio']:.2f}x)"
                         for p in c.get("pairs", []))
        lines += [f"Class of {c['n']} ({c['broken']} broken), `grader batch -j {JOBS}`: **{c['ratio']:.2f}x** its "
                  f"floor (aim <= {AIM_BATCH_RATIO}x), the median of {len(c.get('pairs', []))} back-to-back pairs: "
                  f"{runs}. Sandbox: {report['sandbox']}.", ""]
    d = report.get("distinct")
    if d:
        runs = "; ".join(f"{p['batch']:.1f} s against {p['floor']:.1f} s ({p['ratio']:.2f}x)" for p in d["pairs"])
        lines += [f"Class of {d['n']} distinct students (each its own variant: no cache of one serves another), "
                  f"`grader batch -j {d['jobs']}`: **{d['ratio']:.2f}x** its floor (aim <= {d['aim_ratio']:g}x), "
                  f"the median of {len(d['pairs'])} back-to-back pairs: {runs}.", ""]
    g = report.get("single")
    if g:
        lines += [f"One `python -m grader grade`: **{g['grade_seconds']:.2f} s** against "
                  f"{g['floor_seconds']:.2f} s for the floor of one hand-in "
                  f"({g['ratio']:.2f}x; aim < {AIM_SINGLE_S:g} s).", ""]
    ph = report.get("phases")
    if ph:
        per = report["floor_per_hand_in_seconds"]
        lines += [f"Phases of one hand-in's grading (exclusive seconds; ratio to the floor's {per:.3f} s per hand-in). "
                  "*First*: a fresh process, as a single `grader grade`; *steady*: a batch worker after its first.", "",
                  "| phase | first (s) | x floor | steady (s) | x floor |", "|---|---:|---:|---:|---:|"]
        for name, first in ph["first"].items():
            steady = ph["steady"].get(name, 0.0)
            lines.append(f"| {name} | {first:.3f} | {first / per:.2f} | {steady:.3f} | {steady / per:.2f} |")
        lines.append(f"| whole grading | {ph['first_wall']:.3f} | {ph['first_wall'] / per:.2f} | "
                     f"{ph['steady_wall']:.3f} | {ph['steady_wall'] / per:.2f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="grader_bench", description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=N_STUDENTS)
    parser.add_argument("--no-anchor", action="store_true", help="skip re-executing the notebooks")
    parser.add_argument("--scale", type=int, default=SCALE, help="hand-ins in the bookkeeping run (0: skip it)")
    parser.add_argument("--only-scale", action="store_true", help="skip the class of 100, the memory and the anchor")
    args = parser.parse_args(argv if argv is not None else [])
    if os.environ.get(QUICK_ENV):
        args.n, args.no_anchor, args.scale = min(args.n, QUICK_N), True, 0
    with tempfile.TemporaryDirectory(prefix="grader-bench-") as tmp:
        tmp = Path(tmp)
        if not args.only_scale:
            folder = tmp / "class"
            folder.mkdir()
            kinds = make_class(folder, args.n)
            broken = sum(k not in HONEST for k in kinds.values())
            copies = sum(k == "copy" for k in kinds.values())
            runs = alternating_pairs(PAIRS, lambda i: time_floor(folder),
                                     lambda i: time_batch(folder, tmp / f"out-{i}"))
            summary = runs[-1][1][1]  # the batch's own last line (the same class every time)
            distinct = distinct_class(folder, kinds, tmp)
            ratio, (floor, batch_s) = median_pair([(f, b) for f, (b, _) in runs], float)
            ratio = round(ratio, 3)
            pairs = [{"floor": f, "batch": b, "ratio": round(b / f, 3)} for f, (b, _) in runs]
            mem = worker_memory(folder)
            fresh = child_cost(folder, True if sandbox.bwrap_available() else False)
            forked = child_cost(folder, None)
            anchor = None if args.no_anchor else time_notebook_regrade(tmp)
            ref = folder / next(s for s, k in sorted(kinds.items()) if k == "good")
            ref = ref.with_suffix(".zip")
            single = single_grade(ref, tmp)
            phases = phase_profile(ref)
        scale_lines = scale(tmp, args.scale, reference_zip(tmp / "scale-ref")) if args.scale else []
    if not args.only_scale:
        print(f"class: {args.n} submissions, {args.n - broken - copies} honest, each its own variant, {copies} "
              f"copies of them, {broken} broken in {len(set(kinds.values()) - set(HONEST))} ways; "
              f"sandbox: {sandbox.sandbox_kind()}")
        print(f"{PAIRS} pairs, back to back: floor (python + onnxruntime + each model once, {JOBS} at a time) and "
              f"grader batch -j {JOBS}: " + "; ".join(f"{p['floor']:.1f} s and {p['batch']:.1f} s "
                                                      f"({p['ratio']:.2f}x)" for p in pairs))
        print(f"grader batch -j {JOBS}, the median pair: {batch_s:6.1f} s against {floor:.1f} s "
              f"({ratio:.2f}x the floor; aim <= {AIM_BATCH_RATIO}x) -> {summary}")
        print(f"a class of {distinct['n']} distinct students (each its own variant), grader batch -j {JOBS}: "
              + "; ".join(f"{p['batch']:.1f} s against {p['floor']:.1f} s ({p['ratio']:.2f}x)"
                          for p in distinct["pairs"])
              + f"; the median pair {distinct['ratio']:.2f}x its floor (aim <= {AIM_DISTINCT_RATIO:g}x)")
        per = floor * JOBS / args.n
        print(f"one python -m grader grade: {single['grade_seconds']:.2f} s (median of {SINGLE_REPEATS}); "
              f"the floor for that one hand-in {single['floor_seconds']:.2f} s "
              f"({single['ratio']:.2f}x; aim < {AIM_SINGLE_S:g} s)")
        print(f"phases of one hand-in's grading, exclusive seconds, each / the floor's {per:.3f} s per hand-in "
              f"(first: a fresh process; steady: a batch worker's later hand-ins):")
        print("\n".join("  " + line for line in phase_table(phases, per)))
        print(f"per submission: {batch_s / args.n * JOBS:.2f} s of a worker; one reader run costs {fresh:.2f} s "
              f"in a fresh sandboxed process, {forked:.2f} s forked from the preloaded server "
              "(two runs per submission)")
        print(f"worker peak memory: {mem['worker_peak_mib']:.0f} MiB (grader process), "
              f"{mem['child_peak_mib']:.0f} MiB (largest sandboxed child)")
        if anchor is not None:
            print(f"nbgrader-style re-execution of every lesson: {anchor:.1f} s for one student, "
                  f"~{anchor * args.n / JOBS / 60:.0f} min for the class with {JOBS} workers "
                  f"({anchor * args.n / JOBS / batch_s:.0f}x the grader)")
        elif not args.no_anchor:
            print("nbgrader-style re-execution: the lessons did not all run; no anchor figure")
    for line in scale_lines:
        print(line)
    report = {"benchmark": "grader", "sandbox": sandbox.sandbox_kind(), "scale": scale_lines,
              "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()}}
    if not args.only_scale:
        report.update({"class": {"n": args.n, "broken": broken, "copies": copies, "jobs": JOBS, "floor_seconds": floor,
                                 "pairs": pairs, "batch_seconds": batch_s, "ratio": ratio,
                                 "aim_ratio": AIM_BATCH_RATIO, "met": ratio <= AIM_BATCH_RATIO},
                       "distinct": distinct, "single": single, "phases": phases,
                       "floor_per_hand_in_seconds": floor * JOBS / args.n,
                       "worker_peak_mib": mem["worker_peak_mib"], "child_peak_mib": mem["child_peak_mib"],
                       "reader_run_seconds": {"fresh_process": fresh, "forked": forked}, "anchor_seconds": anchor})
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "grader.json").write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")
    (OUT / "grader.md").write_text(markdown(report))
    print(f"wrote {OUT / 'grader.json'} and {OUT / 'grader.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
