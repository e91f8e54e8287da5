"""Every leaf of every JSON file of the reference hand-in is checked or refused.

Each leaf is perturbed so that its meaning changes (a number x1.5, +1 for an integer or a zero, a sign flipped where
x1.5 would keep it; a string another valid-looking value; a boolean flipped), the hand-in packed again with a true
manifest, and graded: the perturbation must lose points or be refused at intake. Only the lesson groups that read
the perturbed file are graded (found by watching which files each group opens on the reference), in process, so
the walk stays short; submission.json is graded whole. Every field NAME (list indices as ``*``) is walked at least
once; the others of a name are sampled deterministically. ``ALLOW`` lists the fields that carry no claim.
"""
from __future__ import annotations

import json
import re
import shutil
import tempfile
import time
from pathlib import Path

import pytest
from bad_submissions import corpus

from grader import core, sandbox
from grader.context import Context
from grader.lessons import lesson05_qdq_vs_qoperator as lesson05
from grader.models import ModelRefused
from grader.submission import Submission, SubmissionInvalid, open_submission
from lab import contract, kernels
from lab.tools.submit import submit

# The handed-in JSON files the workspace contract declares with a schema, lesson 05's calibration cache (ONNX Runtime's
# layout, no schema of the lab's) and the manifest lab submit adds
FILES = (*(e.path for e in contract.ENTRIES if e.schema and e.hand_in != "never"),
         lesson05.CACHE, "submission.json")

# Fields that carry no claim: changing them changes nothing a student asserts. (file, field name) -> reason.
VERSIONS = "tool versions of the student's machine, recorded for the instructor: informational, not a result"
ALLOW = {
    ("submission.json", "submitted_at"): "when the zip was made: a timestamp",
    ("submission.json", "platform"): "the student's OS string, informational",
    ("submission.json", "lab_version"): "the lab's version string, informational",
    ("submission.json", "student"): "identity, not a result: the grader takes the id from the file name and notes a "
                                    "mismatch in the feedback",
    ("submission.json", "versions/*"): VERSIONS,
    ("results.json", "versions/*"): VERSIONS,
    ("growth.json", "versions/*"): VERSIONS,
    ("formats.json", "versions/*"): VERSIONS,
    ("toolbox.json", "versions/*"): VERSIONS,
    ("results.json", "lesson"): "the notebook's name, a label",
    ("growth.json", "lesson"): "the notebook's name, a label",
    ("formats.json", "lesson"): "the notebook's name, a label",
    ("regression.json", "reasons/*"): "the decision in prose; the decision and every number in it are judged "
                                      "from their own fields",
    ("regression.json", "models/*/evidence/kernels/*"): "the execution profile of the student's CPU (which "
                                                        "kernels ONNX Runtime picked there), not a result",
    ("formats.json", "formats/*/kernels_run/*"): "the execution profile of the student's CPU, as in "
                                                 "regression.json's evidence",
    ("toolbox.json", "choice/justification"): "the student's free-text note",
    ("toolbox.json", "speed/*"): "timings and threads of the student's own CPU: not reproducible elsewhere",
    ("outliers.json", "versions/*"): VERSIONS,
    ("outliers.json", "justification"): "the student's free-text note",
    ("outliers.json", "calibration/set"): "the set's label; the set itself is judged by its hash and count",
    ("outliers.json", "calibration/batch_size"): "decides nothing for MinMax's extremes or a histogram (batch-free); "
                                                 "the recalibration uses it, where CalibMovingAverage depends on it",
    ("toolbox.json", "candidates/*/time_ratio"): "a candidate's time on the student's own CPU: not reproducible "
                                                 "elsewhere (the choice's is judged against the limit)",
    # MinMax ranges do not depend on how samples are batched, and nothing in a model records the batch size; the
    # reader contract is checked at other batch sizes, and growth.json's batch size is checked against its stream
    ("results.json", "settings/batch_size"): "decides nothing recorded in the models (MinMax is batch-free)",
    ("formats.json", "settings/batch_size"): "decides nothing recorded in the models (MinMax is batch-free)",
}

def listed(table, rel: str, name: str) -> bool:
    return any(rel == f and re.fullmatch(re.escape(n).replace(r"\*", ".+"), name) for f, n in table)


SAMPLES_PER_NAME = 2  # leaves walked per field name beyond which the rest are sampled out


def leaves(obj, path=()):
    """(path, value) for each leaf in document order; an empty list or object is a leaf too."""
    if isinstance(obj, dict) and obj:
        for k, v in obj.items():
            yield from leaves(v, path + (k,))
    elif isinstance(obj, list) and obj:
        for i, v in enumerate(obj):
            yield from leaves(v, path + (i,))
    else:
        yield path, obj


def name_of(path) -> str:
    return "/".join("*" if isinstance(p, int) else str(p) for p in path)


HEX = re.compile(r"^[0-9a-f]{8,}$")


def larger(value):
    """A second, larger change for a number a tolerance absorbed (a count within the near-boundary policy)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return value * 10 + 50 if isinstance(value, int) else value * 10 + 1.0


def perturb(value):
    """A value of the same kind whose meaning differs, or None when there is nothing to change (null, [], {})."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, float):
        return value * 1.5 if value else 1.0
    if isinstance(value, str):
        if HEX.match(value):
            return value[:-1] + ("0" if value[-1] != "0" else "1")
        return value + "2" if value else "x"
    return None


def _get(doc, path):
    for p in path:
        doc = doc[p]
    return doc


def set_leaf(doc, path, val):
    node = doc
    for p in path[:-1]:
        node = node[p]
    node[path[-1]] = val


def walk_plan(files: corpus.Files) -> list[tuple[str, tuple, object]]:
    """(file, path, new value): every field name at least once, then up to SAMPLES_PER_NAME per name, in order."""
    plan = []
    for rel in FILES:
        if rel not in files:
            continue
        seen: dict[str, int] = {}
        for path, value in leaves(json.loads(files[rel])):
            name = name_of(path)
            new = perturb(value)
            if new is None or listed(ALLOW, rel, name):
                continue
            if seen.get(name, 0) >= SAMPLES_PER_NAME:
                continue
            seen[name] = seen.get(name, 0) + 1
            plan.append((rel, path, new))
    return plan


class Grading:
    """Grades only the groups that read a file, in process; learns which they are from the reference."""

    def __init__(self, zip_path: Path):
        self.reads: dict[str, set[int]] = {}  # file -> indices of core.GROUPS that open it
        self.base = self._grade(zip_path, None, watch=True)

    def _grade(self, path: Path, only: set[int] | None, watch: bool = False):
        scratch = Path(tempfile.mkdtemp(prefix="walk-"))
        try:
            try:
                sub = open_submission(path, scratch / "s")
                ctx = Context(sub)
                core.intake_models(ctx)
            except (SubmissionInvalid, ModelRefused) as e:
                return str(e)
            _, family = core.kernel_family_note(sub.kernel_family)
            out = {}
            with kernels.computing_as(family):
                for i, group in enumerate(core.GROUPS):
                    if only is not None and i not in only:
                        continue
                    opened: list[str] = []
                    if watch:
                        original = Submission.path
                        Submission.path = lambda s, rel, _o=original, _seen=opened: (_seen.append(rel), _o(s, rel))[1]
                    try:
                        saved = core.GROUPS
                        core.GROUPS = (group,)
                        checks = core.run_groups(ctx)
                    finally:
                        core.GROUPS = saved
                        if watch:
                            Submission.path = original
                    for rel in set(opened) | set(ctx.touched):
                        self.reads.setdefault(rel, set()).add(i)
                    for c in checks:
                        out[f"{c.part}.{c.name}"] = c.points
            return out
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

    def grade(self, path: Path, rel: str):
        """Points of the checks that read ``rel`` (all for submission.json), or the refusal's reason."""
        if rel == "submission.json":
            r = core.grade(path)
            return r.reason if r.status == "invalid" else {f"{c.part}.{c.name}": c.points for c in r.checks}
        return self._grade(path, self.reads.get(rel, set()))


@pytest.fixture(scope="module")
def handed_in(tmp_path_factory, reference_workspace):
    if not sandbox.bwrap_available():
        pytest.skip("student code runs only under bubblewrap")
    work = reference_workspace(tmp_path_factory.mktemp("reference") / "workspace")
    files = corpus.read_zip(submit("reference", work, tmp_path_factory.mktemp("handed-in")))
    from test_honest_mistakes import GOOD_CHOICE, _toolbox_files

    files = _toolbox_files(files, GOOD_CHOICE)
    manifest = json.loads(files["submission.json"])  # lesson 08's files are handed in: none is missing now
    manifest["missing"] = [m for m in manifest.get("missing", []) if m not in files]
    files["submission.json"] = json.dumps(manifest, indent=2).encode()
    base = tmp_path_factory.mktemp("base") / "reference.zip"
    base.write_bytes(corpus.pack(files))
    return files, base


def test_every_field_is_checked_or_refused(handed_in, tmp_path):
    files, base = handed_in
    start = time.monotonic()
    whole = core.grade(base)  # the walk starts from full marks: every lost point is the perturbation's
    assert whole.score == whole.max_score, [c.message for c in whole.checks if not c.passed]
    grading = Grading(base)
    assert isinstance(grading.base, dict) and grading.reads, grading.base
    plan = walk_plan(files)
    unchecked, tolerated, refused, charged = [], [], 0, 0

    def caught(n, rel, path, new) -> str:
        doc = json.loads(files[rel])
        set_leaf(doc, path, new)
        changed = {**files, rel: json.dumps(doc, indent=2).encode()}
        zip_path = tmp_path / f"{n}.zip"
        zip_path.write_bytes(corpus.pack(changed, manifest=rel != "submission.json" or path[0] != "files"))
        got = grading.grade(zip_path, rel)
        zip_path.unlink()
        if isinstance(got, str):
            return "refused"
        return "charged" if sum(grading.base[k] - got.get(k, 0) for k in got) > 0 else ""

    for n, (rel, path, new) in enumerate(plan):
        how = caught(n, rel, path, new)
        where = f"{rel}: {'/'.join(map(str, path))}"
        big = larger(_get(json.loads(files[rel]), path))
        if not how and big is not None:
            if caught(n, rel, path, big):  # checked, within a stated tolerance (near-boundary policy, grid steps)
                tolerated.append(f"{where} -> {new!r} kept its points, {big!r} did not")
                continue
        if not how:
            unchecked.append(f"{where} -> {new!r}")
        refused += how == "refused"
        charged += how == "charged"
    seconds = time.monotonic() - start
    print(f"\nwalked {len(plan)} perturbations ({len({(r, name_of(p)) for r, p, _ in plan})} field names) in "
          f"{seconds:.0f} s: {refused} refused at intake, {charged} lost points, {len(tolerated)} within a "
          f"tolerance only, {len(unchecked)} unchecked")
    print("\n".join(tolerated))
    names = {(rel, name_of(p)) for rel, p, _ in plan}
    assert len(names) >= 100, len(names)
    assert not unchecked, f"{len(unchecked)} perturbation(s) kept every point:\n" + "\n".join(unchecked)


def test_perturb_changes_meaning():
    assert perturb(0.5) == 0.75 and perturb(0.0) == 1.0 and perturb(7) == 8 and perturb(True) is False
    assert perturb("a" * 64) != "a" * 64 and len(perturb("a" * 64)) == 64 and perturb(None) is None


def test_lesson_08s_exploration_tables_are_not_handed_in_and_refused_if_added(handed_in, tmp_path):
    """The tables describe models the hand-in does not hold (rebuilding them takes minutes per student), so they
    stay in toolbox-tables.json, which lab submit leaves out, and toolbox.json's schema refuses them."""
    files, _ = handed_in
    assert not contract.handed_in("toolbox-tables.json")
    if "toolbox.json" not in files:
        pytest.skip("lesson 08 is not graded in this build")
    doc = json.loads(files["toolbox.json"])
    assert set(doc) == {"schema", "versions", "evaluation", "requirement", "speed", "candidates", "choice"}
    doc["sensitivity"] = {"activations": [], "drops": [], "weights": [], "most_sensitive_node": "fc1_MatMul"}
    zip_path = tmp_path / "tables.zip"
    zip_path.write_bytes(corpus.pack({**files, "toolbox.json": json.dumps(doc, indent=2).encode()}))
    result = core.grade(zip_path)
    assert result.status == "invalid" and "toolbox.json" in result.reason and "sensitivity" in result.reason, \
        result.reason
