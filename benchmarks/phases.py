"""Where one hand-in's grading spends its time, by phase, without editing the grader.

``profile(path)`` wraps the grader's entry points for each phase (module attributes, patched for
the duration of the call), grades ``path`` as ``python -m grader grade`` does, and returns the
seconds each phase took *exclusive* of the phases nested inside it (a model check inside an
inference counts as a model check), so the phases add up to the grade's wall time. Run it in a
fresh process (``python -m benchmarks.phases PATH``) to see the one-off costs a single ``grader
grade`` pays; call it twice in one process to see what a batch worker pays per hand-in after its first.
"""
from __future__ import annotations

import contextlib
import importlib
import json
import sys
import time
from pathlib import Path

# phase -> the attributes that do that phase's work ("module:attr" or "module:Class.method")
PHASES = {
    "intake and hashing": ["grader.core:sha256_of_input", "grader.core:open_submission"],
    "model checks": ["grader.context:load_checked"],
    "student code in the sandbox": ["grader.sandbox.plan:Runs.run", "grader.sandbox.plan:Runs.plan",
                                    "grader.sandbox.plan:Runs.end_plan"],
    "recomputed calibrations": ["grader.lessons.lesson02_the_calibration_reader:calibrator_range",
                                "lab.data:calibration_set", "lab.lessons.lesson04_more_batches:narrow_batches",
                                "lab.data:data_sha256", "lab.data:load_split", "lab.compare:diagnose",
                                "lab.ruler:scale_zero_point"],
    "inference": ["lab.compare:predict"],
    "reports": ["grader.results:GradeResult.to_markdown", "grader.results:GradeResult.to_dict",
                "grader.results:GradeResult.to_gradescope"],
}
OTHER = "check logic (the rest of grade)"


class Clock:
    """Exclusive time per phase: a nested phase's time is taken out of the phase that called it."""

    def __init__(self):
        self.seconds: dict[str, float] = {p: 0.0 for p in PHASES}
        self.calls: dict[str, int] = {p: 0 for p in PHASES}
        self._stack: list[list] = []  # [phase, start, time spent in nested phases]

    def wrap(self, phase: str, fn):
        def timed(*args, **kwargs):
            self._stack.append([phase, time.perf_counter(), 0.0])
            try:
                return fn(*args, **kwargs)
            finally:
                _, start, nested = self._stack.pop()
                total = time.perf_counter() - start
                self.seconds[phase] += total - nested
                self.calls[phase] += 1
                if self._stack:
                    self._stack[-1][2] += total
        timed.__wrapped__ = fn
        return timed


@contextlib.contextmanager
def patched(clock: Clock):
    """Every attribute in ``PHASES`` wrapped by ``clock``; restored on exit."""
    undo = []
    try:
        for phase, targets in PHASES.items():
            for target in targets:
                mod_name, attr = target.split(":")
                owner = importlib.import_module(mod_name)
                *path, name = attr.split(".")
                for part in path:
                    owner = getattr(owner, part)
                original = owner.__dict__[name] if isinstance(owner, type) else getattr(owner, name)
                undo.append((owner, name, original))
                setattr(owner, name, clock.wrap(phase, original))
        yield clock
    finally:
        for owner, name, original in reversed(undo):
            setattr(owner, name, original)


def profile(path: str | Path) -> dict:
    """Grade ``path`` once (``grade_one`` plus the feedback, JSON and Gradescope renderings); seconds by phase."""
    from grader.batch import grade_one, package  # deferred: main() imports the grader first, and times it

    clock = Clock()
    with patched(clock):
        start = time.perf_counter()
        result, isolation = grade_one(path)
        package(result, isolation)
        wall = time.perf_counter() - start
    phases = dict(clock.seconds)
    phases[OTHER] = max(0.0, wall - sum(phases.values()))
    return {"wall": wall, "phases": phases, "calls": clock.calls, "status": result.status, "score": result.score,
            "max_score": result.max_score}


def main(argv: list[str]) -> int:
    """``python -m benchmarks.phases PATH [REPEATS]``: one JSON line per grading of PATH in this process."""
    start = time.perf_counter()
    # deferred: timed here: what ``python -m grader grade`` imports before it grades (about 0.25 s)
    from grader import batch, core, sandbox  # noqa: F401 - imported to be timed, not used

    imports = time.perf_counter() - start
    for i in range(int(argv[1]) if len(argv) > 1 else 1):
        out = profile(argv[0])
        out["imports_before"] = imports if i == 0 else 0.0
        print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
