"""The same hand-in gets the same result, byte for byte apart from timings, however it is graded.

42 identical copies of the reference hand-in, mixed among the bad-submission corpus by name (a copy
sorts first, one last, the rest between the corpus cases), graded three times: ``-j 1``, a second run
with ``-j 2``, and ``-j 4`` over the same files under other names (so the copies land in other places
in the order and beside other neighbours in each worker); one copy and one corpus case graded alone.
Every copy's results JSON must equal every other's, and each corpus case's must equal itself in every
run, once ``seconds`` (a timing) and the file's own name are taken out.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from bad_submissions import corpus

from grader import sandbox
from lab.tools.submit import submit

REPO = Path(__file__).resolve().parent.parent
TIMEOUT = "4"
COPIES = 42
TIMINGS = ("seconds",)  # the only timing in a results JSON
# written by a batch only, and "grader grade" does not print them: the input hash and the course file's (for
# --resume) and the class report's record of what the hand-in answered (grader.items)
NOT_CONTENT = ("input_sha256", "course_sha256", "handin")


def copy_names(prefix: str, corpus_names: list[str]) -> list[str]:
    """COPIES names that sort first, last, and spread between the corpus cases."""
    anchors = sorted(corpus_names)
    names = [f"0{prefix}_first", f"zzz{prefix}_last"]
    i = 0
    while len(names) < COPIES:
        names.append(f"{anchors[i % len(anchors)]}_{prefix}{i:02d}")
        i += 1
    return names


def normalized(d: dict, name: str) -> str:
    d = {k: v for k, v in d.items() if k not in TIMINGS + NOT_CONTENT}
    return json.dumps(d, indent=1, sort_keys=True).replace(json.dumps(name)[1:-1], "<student>")


@pytest.mark.slow
def test_same_hand_in_same_result_in_any_batch(tmp_path, monkeypatch, reference_workspace):
    start = time.monotonic()
    markers = Path(tempfile.mkdtemp(prefix="calibration-lab-escape-", dir="/var/tmp" if os.path.isdir("/var/tmp")
                                    else None))
    monkeypatch.setenv(corpus.ESCAPE_MARKERS_ENV, str(markers))
    try:
        good = submit("reference", reference_workspace(tmp_path / "reference" / "workspace"), tmp_path / "handed-in")
        made = tmp_path / "made"
        cases = [c.name for c in corpus.build(good, made)]
        env = {k: v for k, v in os.environ.items() if k not in (sandbox.NO_BWRAP_ENV, sandbox.UNSAFE_ENV)}

        def klass(folder: Path, prefix: str, case_prefix: str) -> dict[str, str]:
            """Write a class; return student -> what it is ('copy' or the corpus case)."""
            folder.mkdir()
            what = {}
            for name in copy_names(prefix, cases):
                shutil.copyfile(good, folder / f"{name}.zip")
                what[name] = "copy"
            for case in cases:
                shutil.copyfile(made / f"{case}.zip", folder / f"{case_prefix}{case}.zip")
                what[f"{case_prefix}{case}"] = case
            return what

        def batch(folder: Path, jobs: str) -> tuple[Path, float]:
            out = tmp_path / f"out-{folder.name}-j{jobs}"
            t = time.monotonic()
            proc = subprocess.run([sys.executable, "-m", "grader", "batch", str(folder), "--out", str(out),
                                   "-j", jobs, "--timeout", TIMEOUT, "--no-progress", "--ids-from-submission-json"],
                                  cwd=REPO, env=env,
                                  capture_output=True, text=True, timeout=900)
            assert proc.returncode == 0, proc.stderr[-3000:]
            return out, time.monotonic() - t

        first = klass(tmp_path / "a", "a", "")
        second = klass(tmp_path / "b", "b", "m_")  # other names: the copies and cases sort differently
        runs = {}
        for label, (folder, what, jobs) in {"-j 1": (tmp_path / "a", first, "1"),
                                            "-j 2, a second run": (tmp_path / "a", first, "2"),
                                            "-j 4, other names": (tmp_path / "b", second, "4")}.items():
            out, seconds = batch(folder, jobs)
            runs[label] = (out, what, seconds)

        def alone(path: Path) -> dict:
            proc = subprocess.run([sys.executable, "-m", "grader", "grade", str(path), "--json", "--timeout", TIMEOUT,
                                   "--ids-from-submission-json"],
                                  cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
            return json.loads(proc.stdout)

        seen: dict[str, dict[str, list[str]]] = {}  # copy or case -> normalized text -> where
        for label, (out, what, _) in runs.items():
            assert len(list((out / "results").glob("*.json"))) == len(what)
            for student, kind in what.items():
                d = json.loads((out / "results" / f"{student}.json").read_text())
                seen.setdefault(kind, {}).setdefault(normalized(d, student), []).append(f"{label}: {student}")
        for student, kind in (("0a_first", "copy"), ("json_nan", "json_nan")):
            d = alone(tmp_path / "a" / f"{student}.zip")
            seen[kind].setdefault(normalized(d, student), []).append(f"alone: {student}")
        differing = {}
        for kind, texts in seen.items():
            if len(texts) > 1:
                differing[kind] = [f"{len(where)}x e.g. {where[0]}" for where in texts.values()]
        if differing:
            import difflib

            kind = next(iter(differing))
            a, b = list(seen[kind])[:2]
            diff = "\n".join(difflib.unified_diff(a.splitlines(), b.splitlines(), lineterm="", n=1))
            pytest.fail(f"different results for the same hand-in: {differing}\n{kind}:\n{diff[:4000]}")
        # in the batches every copy is the same result: with bubblewrap, full marks
        copy = json.loads(next(iter(seen["copy"])).replace('"<student>"', '"copy"'))
        if sandbox.bwrap_available():
            from test_isolation import not_in_reference

            assert copy["status"] == "graded" and copy["score"] == copy["max_score"] - not_in_reference()
        assert sum(len(w) for w in seen["copy"].values()) == 3 * COPIES + 1
        assert not list(markers.iterdir()), "an escape attempt wrote its marker"
        timings = ", ".join(f"{label} {seconds:.1f} s" for label, (_, _, seconds) in runs.items())
        print(f"\n{COPIES} copies + {len(cases)} corpus cases per batch: {timings}; "
              f"whole test {time.monotonic() - start:.1f} s")
    finally:
        shutil.rmtree(markers, ignore_errors=True)
