"""The grader's per-process state is one object (``grader.state.GraderState``), and the lab's caches are consulted by
the cached functions themselves (``lab.cache``): no grader module keeps mutable state at module level, two graders
in one process grade independently, and a function imported by name (lesson 07's ``predict``) is cached."""
from __future__ import annotations
import __future__

import contextvars
import dataclasses
import enum
import importlib
import pkgutil
import re
import shutil
import types
from pathlib import Path, PurePath

import numpy as np
import pytest

import grader
from grader import sandbox, state
from grader.batch import grade_one
from grader.reuse import PixelKeys, Reuse
from grader.sandbox import Policy
from lab import cache, compare, data, schemas, variant
from lab.lessons.lesson07_calibrate_the_deployed_representation import scenario_checks
from lab.tools.submit import submit

# Module-level state in modules other helpers own, left for them (each name is theirs to make immutable or move into
# the grading state: ``lab.variant.per_variant`` replaces an ``lru_cache`` of fixture values). Nothing may be added.
ELSEWHERE = {
    "grader.export": {"NEEDS", "EXPORTED"},
    "grader.lessons.lesson02_the_calibration_reader": {"_RANGES", "DRIVES"},
    "grader.lessons.lesson03_narrow_right_wide": {"SETTING_WORDS", "SETTINGS", "EXPECTED_DIAGNOSIS", "_hidden_values"},
    "grader.lessons.lesson04_more_batches": {"_kept_stream", "_kept_sha256", "ADVICE", "KIND_DATA", "OTHER_KIND"},
    "grader.lessons.lesson06_accept_or_reject": {"NAMES", "FILE_NAMES"},
    "grader.lessons.lesson07_calibrate_the_deployed_representation": {"_acceptance_row_hashes"},
    "grader.lessons.predictions": {"SETTINGS", "FORMAT_SETTINGS", "QUESTIONS", "JUDGES", "lesson_rulers",
                                   "_growth_models", "lesson_growth", "lesson_formats", "lesson_entry",
                                   "lesson_draft_verdicts", "CANDIDATE_SETTINGS", "lesson_cures"},
    "grader.reference": {"STUDENT_MODULES", "SETTINGS"},
    "grader.rubric": {"_rubric_file"},
    "grader.similar": {"KEEP", "SKIP", "_FSTRING"},
}
# The one slot a thread keeps its grading state in between jobs (grader.state: Dask runs each job in a fresh copy of
# a context, so a context variable cannot keep it); everything the state holds is in that one object.
SLOTS = {"grader.state": {"_THREAD"}}
# The one lock a worker process grades through, one job at a time, whichever thread asks (grader.batch says why): a
# lock in each thread's state could not serialise the threads.
LOCKS = {"grader.batch": {"_ONE_JOB_AT_A_TIME"}}
SCALARS = (str, bytes, int, float, complex, bool, type(None), range, PurePath, re.Pattern, contextvars.ContextVar,
           enum.Enum, __future__._Feature)
CODE = (types.ModuleType, type, types.FunctionType, types.BuiltinFunctionType)


def immutable(value) -> bool:
    """A value nothing can change: a scalar, a tuple or frozenset of them, a read-only mapping, a frozen dataclass
    (code within one: a module, a class or a function, is not state)."""
    if isinstance(value, SCALARS + CODE) or type(value).__module__ == "typing":
        return True
    if isinstance(value, (tuple, frozenset)):
        return all(immutable(v) for v in value)
    if isinstance(value, types.MappingProxyType):
        return all(immutable(k) and immutable(v) for k, v in value.items())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return value.__dataclass_params__.frozen and all(immutable(getattr(value, f.name))
                                                         for f in dataclasses.fields(value))
    return False


def module_state(module) -> list[str]:
    """The module-level names of ``module`` that hold state: anything but code (modules, classes, plain functions;
    an ``lru_cache`` is a store) and immutable values."""
    return sorted(name for name, value in vars(module).items()
                  if not (name.startswith("__") and name.endswith("__"))
                  and not isinstance(value, CODE) and not immutable(value))


def grader_modules() -> list[str]:
    return ["grader"] + [m.name for m in pkgutil.walk_packages(grader.__path__, "grader.")]


def test_the_state_check_finds_what_it_should():
    mod = types.ModuleType("example")
    mod.TABLE, mod.ROWS, mod.SEEN, mod._cache = {"a": 1}, [1], {1}, {}
    mod.FROZEN, mod.LIMITS, mod.NAMES = types.MappingProxyType({"a": (1, 2)}), sandbox.Limits(), ("a", "b")
    mod.POLICY = Policy()
    mod.mutable_limits = sandbox.ChildResult("ok")  # a dataclass that is not frozen
    mod.cached = __import__("functools").lru_cache(maxsize=1)(lambda: 1)
    mod.kept = variant.per_variant(lambda: 1)
    assert module_state(mod) == ["ROWS", "SEEN", "TABLE", "_cache", "cached", "mutable_limits"]


def test_no_grader_module_keeps_mutable_state_at_module_level():
    found = {}
    for name in grader_modules():
        extra = (set(module_state(importlib.import_module(name))) - ELSEWHERE.get(name, set())
                 - SLOTS.get(name, set()) - LOCKS.get(name, set()))
        if extra:
            found[name] = sorted(extra)
    assert not found, f"module-level state (put it in grader.state.GraderState, or make it immutable): {found}"


# --- the lab's functions consult the current cache -------------------------------------------------------------

class Recorder:
    """A ``lab.cache.Cache`` that computes everything and records what was asked."""

    def __init__(self):
        self.names: list[str] = []

    def call(self, name, compute, args):
        self.names.append(name)
        return compute(*args)


def test_every_cached_lab_function_asks_the_current_cache_however_it_was_imported():
    from lab.compare import predict
    from lab.data import calibration_set, fixtures_dir, load_split
    from lab.schemas import validate

    recorder = Recorder()
    x = data.load_split("evaluation").pixels[:4]
    with cache.using(recorder):
        predict(data.fixture_path("fp32.onnx"), x, family="exact")
        load_split("evaluation")
        calibration_set("narrow")
        fixtures_dir()
        with pytest.raises(schemas.SchemaError):
            validate("results", {})
        assert variant.per_variant(lambda: 7)() == 7
    assert set(recorder.names) == set(cache.NAMES)
    assert cache.current() is None
    recorder.names.clear()
    predict(data.fixture_path("fp32.onnx"), x)
    assert recorder.names == []  # outside the block: nothing asks it


def test_lesson_07s_predict_imported_by_name_is_cached(monkeypatch, tmp_path):
    """``scenario_checks`` does ``from lab.compare import predict``: its second comparison computes nothing."""
    computed = []
    real = compare._predict
    monkeypatch.setattr(compare, "_predict", lambda *a: computed.append(a[0]) or real(*a))
    own = tmp_path / "candidate.onnx"  # a hand-in's model: kept for the hand-in only
    shutil.copyfile(data.fixture_path("bad-calibration.onnx"), own)
    split = data.load_split("evaluation")
    reuse = Reuse()
    with reuse.hand_in():
        first = scenario_checks.compare_scenarios(data.fixture_path("fp32.onnx"), own, split.pixels, split.labels)
        n, hits = len(computed), reuse.hits[cache.PREDICT]
        again = scenario_checks.compare_scenarios(data.fixture_path("fp32.onnx"), own, split.pixels, split.labels)
    assert n >= 2 * len(first) - 1 and len(computed) == n, "the second comparison ran the models again"
    assert reuse.hits[cache.PREDICT] - hits >= n
    assert [r.int8_accuracy for r in again] == [r.int8_accuracy for r in first]
    with reuse.hand_in():  # the next hand-in: the fixture's outputs are kept, the hand-in's own model is not
        scenario_checks.compare_scenarios(data.fixture_path("fp32.onnx"), own, split.pixels, split.labels)
    assert 0 < len(computed) - n <= len(first) and set(computed[n:]) == {own}


def test_per_variant_keeps_a_value_per_state_while_grading():
    calls = []

    @variant.per_variant
    def value(k):
        calls.append(k)
        return [k]

    a, b = Reuse(), Reuse()
    value(1), value(1)
    assert calls == [1, 1]  # no grade running: computed at each call
    with a.hand_in():
        first = value(1)
        assert value(1) is first
    with b.hand_in():
        assert value(1) is not first
    with a.hand_in():
        assert value(1) is first
    assert calls == [1, 1, 1, 1]


def test_pixel_keys_remember_only_arrays_nothing_can_change():
    hashed = []
    keys = PixelKeys(lambda x: hashed.append(1) or (x.shape, x.tobytes()))
    pixels = data.load_split("evaluation").pixels
    pixels.flags.writeable = False
    assert keys(pixels) == keys(pixels) and len(hashed) == 1
    view = pixels[:3]
    keys(view), keys(view)
    assert len(hashed) == 3  # a view may change with its base: hashed at every call
    assert PixelKeys()(pixels) and len(hashed) == 3  # another worker's keys are its own


# --- two graders in one process --------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def good_zip(tmp_path_factory, reference_workspace) -> Path:
    work = reference_workspace(tmp_path_factory.mktemp("reference") / "workspace")
    return submit("reference", work, tmp_path_factory.mktemp("handed-in"))


def test_two_graders_in_one_process_grade_independently(good_zip):
    refusing = state.GraderState(Policy(bubblewrap=False, unsafe=False))
    unsafe = state.GraderState(Policy(bubblewrap=False, unsafe=True))
    own = state.current()
    own_runs = list(own.runs.record)  # what earlier tests in this worker ran under it
    try:
        first, first_label = grade_one(good_zip, state=refusing)
        ran, ran_label = grade_one(good_zip, state=unsafe)
        again, again_label = grade_one(good_zip, state=refusing)
    finally:
        refusing.close()
        unsafe.close()
    assert first_label == again_label and first_label.startswith("refused") and sandbox.REFUSED_NOTE in first.notes
    assert ran_label == "none (--unsafe-no-sandbox)" and sandbox.REFUSED_NOTE not in ran.notes
    assert ran.score > first.score == again.score
    assert [c.points for c in first.checks] == [c.points for c in again.checks]
    # each keeps its own caches: the evaluation split's read-only pixels are each state's own array
    key = ("grader.context", "evaluation", (), None)  # per_variant keys end with the variant (None: the reference)
    assert refusing.reuse.values[key][0] is not unsafe.reuse.values[key][0]
    assert np.array_equal(refusing.reuse.values[key][0], unsafe.reuse.values[key][0])
    assert refusing.reuse.hits[cache.PREDICT] > unsafe.reuse.hits[cache.PREDICT] > 0  # it graded twice
    assert state.current() is own and own.runs.record == own_runs  # the caller's own state saw none of it


def test_a_worker_keeps_its_state_across_jobs_run_in_copied_contexts(monkeypatch):
    """Dask runs each task in a copy of its event loop's context: the worker's state (and its one fork server) must
    outlive the copy, and a job with another policy replaces it."""
    monkeypatch.setattr(state._THREAD, "state", None)  # this thread's own state comes back after the test
    policy = Policy(bubblewrap=False, unsafe=False)
    first = contextvars.copy_context().run(state.for_policy, policy)
    assert contextvars.copy_context().run(state.for_policy, policy) is first
    other = contextvars.copy_context().run(state.for_policy, Policy(bubblewrap=False, unsafe=True))
    assert other is not first and state.for_policy(other.policy) is other
    other.close()


def test_a_state_is_current_only_while_active():
    a, b = state.GraderState(), state.GraderState()
    own = state.current()
    with a.active():
        assert state.current() is a
        with b.active():
            assert state.current() is b and sandbox.take_runs() == []
        assert state.current() is a
    assert state.current() is own is state.current()


def test_the_grader_has_one_context_variable_and_a_run_sets_the_labs():
    """The grade being run is the grader's one context variable; the lab's own (cache, variant, family) are set from
    the ``GradingRun`` in one place, and restored after it."""
    from lab import kernels, variant

    found = sorted((name, attr) for name in grader_modules()
                   for attr, value in vars(importlib.import_module(name)).items()
                   if isinstance(value, contextvars.ContextVar))
    assert found == [("grader.state", "_CURRENT")]
    own = state.GraderState()
    other = kernels.SATURATING if kernels.machine_family() == kernels.EXACT else kernels.EXACT
    run = state.GradingRun(own, variant=("ben", 0), family=other)
    before = (cache.current(), variant.current(), kernels.target_family())
    with run.active():
        assert state.current_run() is run and state.current() is own
        assert (cache.current(), variant.current(), kernels.target_family()) == (own.reuse, ("ben", 0), other)
    assert (cache.current(), variant.current(), kernels.target_family()) == before
    assert state.current_run() is not run
