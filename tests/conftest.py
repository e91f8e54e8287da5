"""Shared test set-up: nbval compares no stderr, and one headless run of every lesson per session."""
from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from lab.tools import run

# The grader's commands refuse to start without an instructor secret (grader.preflight). The tests grade with the
# public summarize() lists, as they always have, unless a test sets a secret itself.
os.environ.setdefault("GRADER_NO_SECRET", "1")

# Sizes small enough for CI; only the names a lesson declares in its parameters cell are passed.
SMALL_PARAMETERS = {"MAX_BATCHES": 16, "ENTROPY_BINS": 512, "SPEED_WARMUP": 3, "SPEED_REPEATS": 20,
                    "LARGE_WIDTHS": [64, 256, 1024], "SWEEP_REPEATS": 5}
CELL_TIMEOUT_S = 600


def pytest_collectstart(collector):
    """nbval: ORT's warnings (the pre-processing hint) go to stderr; they are never compared."""
    if getattr(collector, "path", None) is not None and collector.path.suffix == ".ipynb":
        collector.skip_compare += ("stderr",)


@dataclass(frozen=True)
class LessonSuite:
    """Every lesson run in order into one workspace, as ``python -m lab run`` does."""

    work_dir: Path
    out_dir: Path
    runs: dict[str, run.LessonRun]


def run_lessons(notebooks: list[Path], work_dir: Path, out_dir: Path,
                overrides: dict[str, object] = SMALL_PARAMETERS) -> LessonSuite:
    """Run ``notebooks`` in order into ``work_dir``; a failing lesson does not stop the later ones."""
    runs = {}
    for nb in notebooks:
        params = run.lesson_parameters(run.declared_parameters(nb), work_dir, overrides)
        runs[nb.name] = run.run_lesson(nb, out_dir, params, timeout=CELL_TIMEOUT_S, cwd=nb.parent)
    return LessonSuite(work_dir, out_dir, runs)


@pytest.fixture(scope="session")
def lesson_suite(tmp_path_factory) -> LessonSuite:
    """The instructor's lessons (solutions in) run once per session with small parameters."""
    base = tmp_path_factory.mktemp("lessons")
    return run_lessons(run.discover(), base / "ws", base / "executed")


@pytest.fixture(scope="session")
def reference_workspace(tmp_path_factory):
    """``make(dest, growth_counts=...)``: the reference hand-in's workspace (``grader.reference.build``) copied to
    ``dest``. Each growth series is built once per xdist worker (a few seconds each) and copied for every module
    that asks; a test that changes the reference's sources calls ``reference.build`` itself."""
    from grader import reference  # the grading stack, about a second: only the tests that grade need it

    built: dict[tuple, Path] = {}

    def make(dest: Path, growth_counts=None) -> Path:
        key = tuple(reference.GROWTH_COUNTS if growth_counts is None else growth_counts)
        if key not in built:
            built[key] = reference.build(tmp_path_factory.mktemp("reference-build") / "workspace", key)
        shutil.copytree(built[key], dest)
        return Path(dest)

    return make


# Screenshots into artifacts/browser/, JupyterLab on notebooks/.
REPO_WRITERS = ("test_browser.py", "test_report.py", "test_item_analysis.py")
REPO_WATCHERS = ("test_batch_with_a_read_only_project_writes_nothing",)  # fails if any path in the repository changes


# The longest groups (``pytest --durations`` on a 2-core machine: each takes minutes) go to the workers first, so
# that no worker is left running one of them alone at the end of a run while the other waits.
LONGEST_FIRST = ("test_fresh_machine.py", "test_hub.py", "test_colab_root.py", "test_setup_kit.py",
                 "test_prose_numbers.py", "test_determinism.py", "test_every_field.py", "test_packaging.py",
                 "nbval: this machine's",
                 "nbval: the other", "lesson_suite", "test_honest_mistakes.py", "test_grader_families.py",
                 "test_dask.py", "test_kit_wrong_answers.py", "test_grader.py", "test_intake_fuzz.py")


def xdist_group(item) -> str | None:
    """The pytest-xdist group of a test that shares an expensive fixture, or that must not run beside another.

    ``--dist loadgroup`` keeps a group on one worker, one test after another, so each of those fixtures is made
    once per test run and the groups run side by side on the workers: the headless run of every lesson, one
    kernel family's nbval run, and a module's own module- or session-scoped fixtures (a reference hand-in, a
    graded corpus, a built kit), which each worker would otherwise make again for its share of the module."""
    names = getattr(item, "fixturenames", ())
    if item.path.name in REPO_WRITERS or item.name in REPO_WATCHERS:
        return "repository"  # never side by side: one writes into the repository while the other watches it
    if "lesson_suite" in names:
        return "lesson_suite"
    if "nbval_runs" in names:
        params = getattr(getattr(item, "callspec", None), "params", {})
        return f"nbval: {params.get('family', 'the other')}"
    fixtures = getattr(getattr(item, "_fixtureinfo", None), "name2fixturedefs", {})
    module = getattr(getattr(item, "module", None), "__name__", None)
    if any(defs and defs[-1].scope in ("module", "session") and getattr(defs[-1].func, "__module__", None) == module
           for defs in fixtures.values()):
        return item.path.name
    return item.path.name if item.path.name in LONGEST_FIRST else None


def first_rank(group: str | None) -> int:
    """Where a group goes in the workers' queue: ``LONGEST_FIRST``'s order, then every other test as collected."""
    return LONGEST_FIRST.index(group) if group in LONGEST_FIRST else len(LONGEST_FIRST)


# pytest-xdist's own --dist loadgroup renames each test (item._nodeid += "@group"), which pytest 9 ignores
# (a node id is derived from item._id), so every group is scattered over the workers. Here the workers write
# node id -> group into a file while they collect, and the controller's scheduler sends each group whole.
GROUPS_ENV = "CALIBRATION_LAB_XDIST_GROUPS"


def pytest_configure(config):
    if getattr(config.option, "dist", "no") == "loadgroup" and not hasattr(config, "workerinput"):
        import tempfile

        fd, path = tempfile.mkstemp(prefix="xdist-groups-", suffix=".json")
        os.close(fd)
        os.environ[GROUPS_ENV] = path  # the workers, started after this, inherit it
        config.option.loadscopereorder = False  # the queue follows the workers' order (LONGEST_FIRST), not group sizes


# Modules whose tests grade whole hand-ins, run lessons, build kits or start clusters: seconds to minutes each
# (``pytest --durations`` on a 2-core machine). Marked slow here, so ``make test-fast`` (``-m "not slow and not
# browser"``) keeps the unit tests of lab and grader, the schemas, the layout and the lint.
WHOLE_RUNS = frozenset({
    "test_collect.py", "test_course.py", "test_dask.py", "test_every_field.py", "test_export.py", "test_gradescope.py",
    "test_grader.py", "test_grader_families.py", "test_honest_mistakes.py", "test_intake_fuzz.py", "test_isolation.py",
    "test_item_analysis.py", "test_kit_wrong_answers.py", "test_lesson10.py", "test_lesson10_kit.py",
    "test_lesson10_recovery.py", "test_lessons_03_05_grader.py", "test_lms_downloads.py", "test_packaging.py",
    "test_pending.py", "test_prose_numbers.py", "test_regrade.py", "test_report.py", "test_schemas_lessons.py",
    "test_setup.py", "test_variants.py"})


@pytest.hookimpl(tryfirst=True)  # the markers go on before -m deselects by them
def pytest_collection_modifyitems(config, items):
    import json

    for item in items:
        if item.path.name in WHOLE_RUNS:
            item.add_marker(pytest.mark.slow)

    path = os.environ.get(GROUPS_ENV)
    if path and hasattr(config, "workerinput"):
        groups = {item.nodeid: group for item in items if (group := xdist_group(item))}
        items.sort(key=lambda item: first_rank(groups.get(item.nodeid)))  # stable: the rest keep their order
        tmp = f"{path}.{config.workerinput['workerid']}"
        with open(tmp, "w") as f:
            json.dump(groups, f)
        os.replace(tmp, path)  # every worker collects the same tests: any one's file will do


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist: unknown where it is not loaded (nbval's run)
def pytest_xdist_make_scheduler(config, log):
    """``--dist loadgroup``: each group (see ``xdist_group``) to one worker, every other test on its own."""
    import json

    if getattr(config.option, "dist", "no") != "loadgroup" or not os.environ.get(GROUPS_ENV):
        return None
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):
        groups: dict | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self.groups is None:
                try:
                    with open(os.environ[GROUPS_ENV]) as f:
                        GroupScheduling.groups = json.load(f)
                except (OSError, ValueError):
                    return nodeid
            return self.groups.get(nodeid, nodeid)

    return GroupScheduling(config, log)


def pytest_unconfigure(config):
    path = os.environ.get(GROUPS_ENV)
    if path and not hasattr(config, "workerinput"):
        for p in (path, *(f"{path}.gw{i}" for i in range(64))):
            if os.path.exists(p):
                os.remove(p)
