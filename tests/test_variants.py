"""Per-student variants (lab.variant, grader.variants): every hand-in the student's own.

The slow tests build the reference hand-ins (grader.reference.build: lessons 00-07 and 10 from the instructor
notebooks' solutions) of the ids issues named (p00, student07), 10 seeded ids and two fresh random ids per run, on
both kernel families (the other one computed by the lab's emulation, as LAB_KERNEL_FAMILY does for a run), and grade
each: every id gets full marks, with no table of draws. Lessons 07's and 10's decisions, the ones an id's data could
move, are checked for 40 seeded ids and the fresh ones. A copy of one student's hand-in handed in under another id
loses every check that reads a model or report.
"""
from __future__ import annotations

import json
import secrets
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from grader import core, reference, variants
from grader.state import GraderState
from lab import camera, data, kernels, variant, workspace
from lab.errors import LabError, WorkspaceError
from lab.tools.submit import SubmitError, submit

SEEDED = tuple(f"s{n:06d}" for n in np.random.default_rng(35).choice(10**6, 40, replace=False))
FRESH = tuple(f"r{secrets.randbelow(10**9):09d}" for _ in range(2))  # new each run: any id, not only those measured
STUDENTS = ("p00", "student07") + SEEDED[:10] + FRESH  # graded in full: about 18 s an id for both families


# ----- the data: quick -------------------------------------------------------------------------------------------

def test_reference_variant_is_the_committed_split():
    with np.load(data.fixture_path("calibration.npz")) as f:
        committed = f["raw"].copy()
    for student in (None, "", variant.REFERENCE, "headless-run"):
        with variant.using(student):
            assert variant.current() is None
            assert np.array_equal(data.load_split("calibration").raw, committed)
            assert np.array_equal(camera.load_split("calibration").frames,
                                  np.load(data.fixture_path("cnn-calibration.npz"))["frames"])


def test_a_variant_is_its_own_360_training_images():
    pool = np.load(data.fixture_path("calibration-pool.npz"))
    held = {int(i) for name in ("evaluation", "heldout") for i in data.load_split(name).index}
    assert held.isdisjoint(int(i) for i in pool["index"])  # never an evaluation or held-out image
    reference_index = data.load_split("calibration").index
    seen = set()
    for student in STUDENTS[:5]:
        with variant.using(student):
            split = data.load_split("calibration")
            again = data.load_split("calibration")
            frames = camera.load_split("calibration")
        assert len(split) == len(reference_index) == 360
        assert np.array_equal(split.raw, again.raw)  # the same id, the same images
        assert set(split.index.tolist()) <= set(pool["index"].tolist())
        assert not np.array_equal(split.index, reference_index)
        assert np.array_equal(frames.index, split.index)  # lesson 10 shoots the same digits
        seen.add(split.index.tobytes())
    assert len(seen) == 5
    with variant.using("student00", 1), variant.using("student00") as v0:
        assert v0 == ("student00", 0)
    assert variant.seed(("student00", 0)) != variant.seed(("student00", 1))


def test_workspace_records_the_id_once(tmp_path):
    work = workspace.make_workspace(tmp_path / "ws", student="alice")
    assert variant.current() == ("alice", 0)
    assert json.loads((work / workspace.VARIANT_FILE).read_text())["student"] == "alice"
    workspace.make_workspace(work)  # a later lesson: reads the id
    assert variant.current() == ("alice", 0)
    with pytest.raises(WorkspaceError, match="records student 'alice'"):
        workspace.make_workspace(work, student="bob")
    with pytest.raises(SubmitError, match="was made for student 'alice'"):
        submit("bob", work, tmp_path / "out")
    other = workspace.make_workspace(tmp_path / "ref")  # no id: the reference variant
    assert variant.current() is None
    (other / "results.json").write_text("{}")
    with pytest.raises(WorkspaceError, match="reference data"):
        workspace.make_workspace(other, student="carol")
    with pytest.raises(WorkspaceError, match="STUDENT_ID"):
        workspace.make_workspace(tmp_path / "bad", student="no spaces allowed")
    workspace.make_workspace(tmp_path / "ref")


def test_lab_submit_says_plainly_what_the_reference_data_under_a_student_id_costs(tmp_path, capsys):
    from lab.tools.submit import main

    with variant.using(None):
        made_with_reference = workspace.make_workspace(tmp_path / "no-id")
        own = workspace.make_workspace(tmp_path / "dana", student="dana")
    for work in (made_with_reference, own):
        (work / "results.json").write_text("{}")
    said = {}
    for student, work in (("cleo", made_with_reference), (variant.REFERENCE, made_with_reference), ("dana", own)):
        assert main(["--student", student, "--work-dir", str(work), "--out", str(tmp_path / "out" / student)]) == 0
        said[student] = capsys.readouterr().err
        assert (tmp_path / "out" / student / f"{student}.zip").is_file()  # packed all the same: its code's checks count
    assert "the grader will score every check that reads its models and reports 0" in said["cleo"]
    assert "in lesson 00 of a new WORK_DIR set STUDENT_ID = 'cleo', run the lessons again" in said["cleo"]
    assert "warning" not in said[variant.REFERENCE] and "warning" not in said["dana"]


# ----- every id, both families: slow ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def classroom(tmp_path_factory):
    """student -> {family: (work dir, zip, result)} for every id of ``STUDENTS``, draw 0, each family computed as
    such (this machine's kernels, or the lab's emulation); ``want``: the reference variant's score."""
    tmp = tmp_path_factory.mktemp("variants")
    state = GraderState()
    try:
        out: dict = {"by": {s: {} for s in STUDENTS}}
        for family in kernels.FAMILIES:
            with kernels.computing_as(family):
                if family == kernels.machine_family():
                    out["want"] = core.grade(_hand_in(variant.REFERENCE, tmp / "reference"), state=state).score
                for s in STUDENTS:
                    folder = tmp / family / s
                    zip_path = _hand_in(s, folder)
                    out["by"][s][family] = (folder / "workspace", zip_path, core.grade(zip_path, state=state))
        yield out
    finally:
        state.close()


def _hand_in(student: str, folder: Path) -> Path:
    """The reference hand-in made for ``student``'s variant (draw 0, as lesson 00 records it) and packed."""
    work = folder / "workspace"
    work.mkdir(parents=True)
    if student != variant.REFERENCE:
        (work / workspace.VARIANT_FILE).write_text(json.dumps({"schema": "variant/1", "student": student,
                                                               "draw": 0}))
    with variant.using(None):
        reference.build(work)
        return submit(student, work, folder)


@pytest.mark.slow
def test_every_id_full_marks_on_both_families(classroom):
    lost_by = {}
    for s in STUDENTS:
        assert set(classroom["by"][s]) == set(kernels.FAMILIES)
        for family, (_, _, result) in classroom["by"][s].items():
            lost = [(c.name, c.message[:160]) for c in result.checks if c.points < c.max_points
                    and c.part not in ("outliers", "toolbox") and c.name != "choice_heldout"]
            if result.status != "graded" or lost or result.score != classroom["want"]:
                lost_by[(s, family)] = (result.status, result.score, lost)
            assert result.instructor["variant"]["made_for"].startswith(s)
    assert not lost_by, lost_by


@pytest.mark.slow
def test_no_two_students_share_a_model_file(classroom):
    """Every model a lesson writes from the data differs between students: none of the 20 x 19 pairs holds one
    file of identical bytes (the data-free conversions aside: `dynamic.onnx`, lesson 03's quantize_dynamic of the
    FP32 model, needs no calibration data and is the same for everyone)."""
    family = kernels.machine_family()
    digests: dict = {}
    for s in STUDENTS:
        work = classroom["by"][s][family][0]
        with zipfile.ZipFile(classroom["by"][s][family][1]) as zf:
            handed = [n for n in zf.namelist() if n.endswith(".onnx")]
        assert len(handed) > 20
        for rel in handed:
            if rel in DATA_FREE:
                continue
            digests.setdefault(rel, {}).setdefault(data.file_sha256(work / rel), []).append(s)
    shared = {rel: [v for v in by.values() if len(v) > 1] for rel, by in digests.items()}
    assert not {rel: v for rel, v in shared.items() if v}


DATA_FREE = frozenset({"dynamic.onnx"})


@pytest.mark.slow
def test_a_copy_under_another_id_loses_every_artifact_check(classroom, tmp_path):
    family = kernels.machine_family()
    alice, bob = STUDENTS[0], STUDENTS[1]
    src = classroom["by"][alice][family][0]
    # (a) the workspace copied, variant.json deleted so lab submit takes it; (b) edited to the copier's id;
    # (c) the zip itself with submission.json's student changed (its variant field still names the owner)
    cases = {}
    for how in ("deleted", "edited"):
        work = tmp_path / how
        shutil.copytree(src, work)
        if how == "deleted":
            (work / workspace.VARIANT_FILE).unlink()
        else:
            (work / workspace.VARIANT_FILE).write_text(json.dumps({"schema": "variant/1", "student": bob,
                                                                   "draw": 0}))
        cases[how] = submit(bob, work, tmp_path / f"out-{how}")
    cases["renamed"] = _renamed(classroom["by"][alice][family][1], bob, tmp_path / "out-renamed")
    for how, zip_path in cases.items():
        result = core.grade(zip_path)
        kept = [c for c in result.checks if c.points > 0]
        assert result.score < classroom["want"] / 4, (how, result.score)
        for c in result.checks:
            if c.points == 0 and variants.FOREIGN_MESSAGE.split("(")[0] in c.message:
                assert alice not in c.message
        assert all(not _reads_artifacts(c) for c in kept), (how, [(c.name, c.message[:80]) for c in kept])
        assert any("another student's variant" in n for n in result.notes)
        assert alice not in result.to_markdown()  # whose: the instructor's only
        made_for = result.instructor["variant"]["made_for"]
        assert made_for == (alice if how == "renamed" else variants.UNKNOWN), (how, made_for)


def _reads_artifacts(check) -> bool:
    """A kept check must be one that read no model or report: the student's code (the FP32 gate reads regression.json,
    the student's own lesson 06 run, since issue 38)."""
    return check.name not in {"summarize_code", "secret_summarize"}


def _renamed(zip_path: Path, student: str, out: Path) -> Path:
    out.mkdir(parents=True)
    target = out / f"{student}.zip"
    with zipfile.ZipFile(zip_path) as src, zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as dst:
        for name in src.namelist():
            body = src.read(name)
            if name == "submission.json":
                doc = json.loads(body)
                doc["student"] = student
                body = json.dumps(doc).encode()
            dst.writestr(name, body)
    return target


@pytest.mark.slow
def test_one_variant_through_the_real_notebooks(tmp_path):
    """Every lesson, 00-10, run headlessly (python -m lab run) for one student's variant (draw 0, as for everyone),
    then handed in and graded: full marks, recomputed under that variant."""
    state = GraderState()
    try:
        work = tmp_path / "workspace"
        work.mkdir()
        (work / workspace.VARIANT_FILE).write_text(json.dumps({"schema": "variant/1", "student": "carol",
                                                               "draw": 0}))
        run = subprocess.run([sys.executable, "-m", "lab", "run", "--work-dir", str(work), "--out",
                              str(tmp_path / "executed")], capture_output=True, text=True, timeout=900)
        assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
        lesson00 = (tmp_path / "executed" / "00_start_here.ipynb").read_text()
        assert "calibration data: student carol's variant" in lesson00
        result = core.grade(submit("carol", work, tmp_path / "out"), state=state)
    finally:
        state.close()
    assert result.status == "graded" and result.score == result.max_score, [
        (c.name, c.message[:160]) for c in result.checks if c.points < c.max_points]
    assert result.instructor["variant"]["made_for"] == result.instructor["variant"]["own"]
    assert result.instructor["variant"]["own"].startswith("carol")


def test_the_owner_of_a_copy_is_named_among_the_class_ids(tmp_path):
    """A copy whose variant.json was deleted (submission.json names no variant): the three variants tried first
    (own, claimed, reference) do not know it; the class's ids do, and name the owner (the instructor's field)."""
    from grader.submission import Submission

    with variant.using("student07"):
        theirs = data.data_sha256(data.calibration_set("right"))
    (tmp_path / "results.json").write_text(json.dumps({"right": {"calibration_sha256": theirs}}))
    sub = Submission(tmp_path, "student03", {"student": "student03"}, {"results.json": "0" * 64})
    assert variants.made_for(sub).made_for == variants.UNKNOWN
    alone = variants.made_for(sub, classmates=["student01", "student03"])
    assert alone.made_for == variants.UNKNOWN and "class's other ids" in alone.evidence
    found = variants.made_for(sub, classmates=["student01", "student03", "student07", "student09"])
    assert found.foreign and found.made_for == ("student07", 0)
    assert found.instructor()["variant"]["made_for"] == "student07"


@pytest.mark.slow
def test_forty_random_ids_keep_lesson_07s_decisions_at_draw_0(tmp_path):
    """Lesson 07's functions, as its notebook and the reference hand-in call them, for 40 random ids at draw 0: on
    the tuning images (the same 400 for everyone) the daylight draft needs work on flash alone on both families
    (the prediction's truth), the solution's daylight + flash selection needs work nowhere, and the reference
    hand-in's recipe (reduce_range) holds there and passes the acceptance set on both families."""
    from lab import convert
    from lab.lessons.lesson07_calibrate_the_deployed_representation import recipe, release, scenario_checks
    from lab.readers import ArrayReader

    rng = np.random.default_rng(28)
    ids = [f"s{n:06d}" for n in rng.choice(10**6, 40, replace=False)]
    tuning, evaluation = recipe.tuning_set(), data.load_split("evaluation")
    with variant.using("someone"):
        assert set(recipe.tuning_set().index.tolist()) == set(tuning.index.tolist())  # the same for every variant
    failed = {}
    for sid in ids:
        work = tmp_path / sid
        with variant.using(None):
            workspace.make_workspace(work, student=sid)
            assert not set(data.load_split("calibration").index.tolist()) & set(tuning.index.tolist())
            source = work / "source.onnx"

            def verdicts(selection, name, x, labels, source=source, work=work, **settings):
                convert.quantize(source, work / name, ArrayReader(selection.pixels, batch_size=data.BATCH_SIZE),
                                 **settings)
                by = scenario_checks.compare_families(source, work / name, x, labels, kernels.FAMILIES)
                return {f: [r.name for r in rows if r.needs_work] for f, rows in by.items()}

            day = verdicts(recipe.select([("daylight", None)]), "day.onnx", tuning.pixels, tuning.labels,
                           per_channel=True)
            fixed_selection = recipe.select([("daylight", None), ("flash", slice(0, None, 2))])
            fixed = verdicts(fixed_selection, "fixed.onnx", tuning.pixels, tuning.labels, per_channel=True)
            chosen = release.settings_of("reduce_range")
            on_tuning = verdicts(fixed_selection, "rr.onnx", tuning.pixels, tuning.labels, **chosen)
            accepted = verdicts(fixed_selection, "rr.onnx", evaluation.pixels, evaluation.labels, **chosen)
        got = (day, fixed, on_tuning, accepted)
        want = ({f: ["flash"] for f in kernels.FAMILIES},) + ({f: [] for f in kernels.FAMILIES},) * 3
        if got != want:
            failed[sid] = got
    assert not failed, failed


@pytest.mark.slow
def test_forty_ids_keep_lesson_10s_decisions(tmp_path):
    """Lesson 10's release (the solution's recipe) passes every condition on both families, and the prediction's
    truth (the attractive set misreads more under every condition) is beyond noise, for 40 seeded ids and two fresh
    random ones: the decisions a student's calibration frames could move."""
    from lab.lessons.lesson10_your_own_model import release
    from lab.readers import ArrayReader

    class Frames(ArrayReader):  # the solution's FrameReader: frames through the deployed path
        def __init__(self, frames, batch_size=32, input_name="image"):
            super().__init__(camera.preprocess(frames), batch_size=batch_size, input_name=input_name)

    recipe = {"calibration": "camera", "pre_process": True, "quant_format": "QDQ", "per_channel": True,
              "reduce_range": True}
    ev = camera.load_split("evaluation")
    failed = {}
    for sid in SEEDED + FRESH:
        with variant.using(sid):
            source = release.workspace_source(tmp_path / sid)
            model, _ = release.build(source, tmp_path / sid, recipe, Frames)
            by_family = release.scenarios(source, model, ev.frames, ev.labels)
            problems = release.unmet(recipe, by_family, release.measured(source, model, ev.image, ev.labels))
            sets = release.sets_measured(source, tmp_path / sid / "sets", Frames, ev.image, ev.labels, ev.frames)
            truth = release.sets_evidence(sets, release.pooled(ev.frames, ev.labels)[1])
        unclear = [f for f, e in truth.items() if not (e.beyond_noise and e.difference < 0)]
        if problems or unclear:
            failed[sid] = (problems, unclear)
    assert not failed, failed


# ----- a class batch: a copy named among the class's ids, the reference data under a student's id ---------------

@pytest.fixture(scope="module")
def class_batch(tmp_path_factory, reference_workspace, owned):
    """One batch of four hand-ins: the owner's own (``anna``, else the first of ``OWNERS`` the lessons accept);
    ``ben`` handing in the owner's workspace (variant.json deleted, so
    submission.json names no variant); ``cleo`` handing in a workspace made with the reference data (lesson 00's
    STUDENT_ID empty); and that same workspace under the reserved id ``reference``. Returns out folder, results."""
    from grader import sandbox
    from grader.batch import batch

    if not sandbox.bwrap_available():
        pytest.skip("student code runs only under bubblewrap")
    tmp = tmp_path_factory.mktemp("class")
    folder = tmp / "handed-in"
    owner, _, anna = owned
    submit(owner, anna, folder)
    copy = shutil.copytree(anna, tmp / "ben")
    (copy / workspace.VARIANT_FILE).unlink()
    submit("ben", copy, folder)
    made_with_reference = reference_workspace(tmp / "no-id")
    submit("cleo", made_with_reference, folder)
    submit(variant.REFERENCE, made_with_reference, folder)
    out = tmp / "graded"
    batch(folder, out, jobs=1, progress=False)
    return out, {p.stem: json.loads(p.read_text()) for p in (out / "results").glob("*.json")}, owner


def _lost_only_to_missing_lessons(result: dict) -> list:
    """The checks a reference build loses for other reasons than lessons 08 and 09's files left out of it."""
    return [(c["name"], c["message"][:120]) for c in result["checks"] if c["points"] < c["max_points"]
            and not any(f"{rel} is not in the submission" in c["message"] for rel in ("toolbox.json", "outliers.json"))]


def test_a_batch_names_the_classmate_whose_workspace_was_handed_in(class_batch):
    out, results, anna = class_batch
    assert results[anna]["instructor"]["variant"]["made_for"] == anna
    ben = results["ben"]["instructor"]["variant"]
    assert ben["own"] == "ben" and ben["made_for"] == anna, ben  # alone, the grader could not say: unknown
    assert "found among the class's ids" in ben["evidence"]
    assert anna not in (out / "feedback" / "ben.md").read_text()  # whose: the instructor's only
    html = (out / "report.html").read_text()
    section = html[html.index("<h2>Variants</h2>"):]
    assert f"<tr><td>ben</td><td>{anna}</td>" in section and "<tr><td>cleo</td><td>reference</td>" in section


def test_the_reference_data_under_a_student_id_loses_every_artifact_check(class_batch):
    out, results, _ = class_batch
    cleo = results["cleo"]
    assert cleo["status"] == "graded"
    assert cleo["instructor"]["variant"] == {**cleo["instructor"]["variant"], "own": "cleo", "made_for": "reference"}
    fix = "in lesson 00 of a new WORK_DIR set STUDENT_ID = 'cleo', run the lessons again"
    kept = [c for c in cleo["checks"] if c["points"] > 0]
    assert all(not _reads_artifacts(SimpleNamespace(**c)) for c in kept), [(c["name"], c["message"][:80])
                                                                            for c in kept]
    zeroed = [c for c in cleo["checks"] if "made with the instructor's reference data" in c["message"]]
    assert len(zeroed) > 20 and all(c["points"] == 0 and fix in c["message"] for c in zeroed)
    assert any("scores 0" in n and fix in n for n in cleo["notes"])
    assert cleo["score"] < results[variant.REFERENCE]["score"] / 4
    # the same files under the reserved id: the instructor's own run, graded as made
    ref = results[variant.REFERENCE]
    assert ref["instructor"]["variant"]["made_for"] == ref["instructor"]["variant"]["own"] == variant.REFERENCE
    assert not _lost_only_to_missing_lessons(ref), _lost_only_to_missing_lessons(ref)
    assert not any("reference data" in n for n in ref["notes"])



# ----- the id the grade is credited to: the file name (a batch, grader grade) or Gradescope's roster -------------

OWNERS = ("anna",)  # every id's lessons hold: the first builds


@pytest.fixture(scope="module")
def owned(tmp_path_factory) -> tuple[str, Path, Path]:
    """The student's id, their own hand-in (the reference build for their variant: lessons 00-07 and 10) as lab
    submit packs it, and its workspace."""
    tmp = tmp_path_factory.mktemp("owner")
    refused = []
    for owner in OWNERS:
        with variant.using(None):
            try:
                work = reference.build(tmp / owner / "workspace", student=owner)
            except LabError as e:
                refused.append(f"{owner}: {str(e)[:120]}")
                continue
        return owner, submit(owner, work, tmp / owner / "handed-in"), work
    pytest.fail(f"no id of {OWNERS} builds at draw 0: {refused}")


def _copied(zip_path: Path, name: str, out: Path) -> Path:
    """The zip itself, byte for byte, under another name (a classmate's hand-in renamed)."""
    out.mkdir(parents=True, exist_ok=True)
    return Path(shutil.copyfile(zip_path, out / f"{name}.zip"))


def _edited(zip_path: Path, out: Path, **fields) -> Path:
    """The zip with submission.json's fields changed (the other files' hashes still match), named for ``student``."""
    out.mkdir(parents=True, exist_ok=True)
    target = out / f"{fields['student']}.zip"
    with zipfile.ZipFile(zip_path) as src, zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as dst:
        for name in src.namelist():
            body = src.read(name)
            if name == "submission.json":
                body = json.dumps({**json.loads(body), **fields}).encode()
            dst.writestr(name, body)
    return target


def _artifact_checks_lost(result, owner: str) -> None:
    kept = [c for c in result.checks if c.points > 0]
    assert result.status == "graded" and kept, result.reason
    assert all(not _reads_artifacts(c) for c in kept), [(c.name, c.message[:80]) for c in kept]
    zeroed = [c for c in result.checks if "were made for another student's variant" in c.message]
    assert len(zeroed) > 20 and all(c.points == 0 for c in zeroed)
    assert any("made for another student's variant" in n for n in result.notes)
    assert owner not in result.to_markdown()  # whose: the instructor's only


def test_the_honest_hand_in_keeps_its_marks(owned):
    owner, zip_path, _ = owned
    result = core.grade(zip_path)
    assert result.student == owner and not _lost_only_to_missing_lessons(result.to_dict())
    v = result.instructor["variant"]
    assert v["own"] == v["made_for"] == owner and "credited id" in v["own_from"]


def test_a_classmates_zip_under_another_name_loses_every_artifact_check(owned, tmp_path):
    """The owner's zip, byte for byte, handed in as ben.zip: submission.json still names the owner, but the grade
    is ben's, so the files are another student's."""
    owner, zip_path, _ = owned
    result = core.grade(_copied(zip_path, "ben", tmp_path))
    assert result.student == "ben"
    _artifact_checks_lost(result, owner)
    assert result.score < core.grade(zip_path).score / 4
    assert result.instructor["variant"] == {**result.instructor["variant"], "own": "ben", "made_for": owner}
    assert any("every check is recomputed under 'ben''s variant" in n for n in result.notes)


@pytest.mark.parametrize("claim", ["student", "student and variant"])
def test_an_edited_submission_json_is_only_a_claim(owned, tmp_path, claim):
    """submission.json's student (and variant) edited to ben's, the zip named ben.zip: still the owner's files."""
    owner, zip_path, _ = owned
    fields = {"student": "ben"} if claim == "student" else {"student": "ben", "variant": "ben", "variant_draw": 0}
    edited = _edited(zip_path, tmp_path, **fields)
    result = core.grade(edited)
    _artifact_checks_lost(result, owner)
    assert result.instructor["variant"]["own"] == "ben"
    # the variant field still names the owner: named; edited too, the class's ids name them
    assert result.instructor["variant"]["made_for"] == (owner if claim == "student" else variants.UNKNOWN)
    in_class = core.grade(edited, classmates=[owner, "ben", "cleo"])
    assert in_class.instructor["variant"]["made_for"] == owner and in_class.score == result.score


def test_a_reserved_name_is_the_instructors_own_file_graded_as_made(owned, tmp_path):
    """The owner's zip named reference.zip (the instructor's own run, credited to no student): graded as made."""
    owner, zip_path, _ = owned
    result = core.grade(_copied(zip_path, variant.REFERENCE, tmp_path))
    assert not _lost_only_to_missing_lessons(result.to_dict())
    v = result.instructor["variant"]
    assert v["own"] == v["made_for"] == owner and "reserved" in v["own_from"]


def test_no_credited_id_leaves_submission_json_s_student(owned, tmp_path):
    """Gradescope without a roster id (credited=False), or a file name that is no student id: the claim stands, and
    the instructor's field says where the id came from; with a roster id (student=...) the grade is that id's."""
    owner, zip_path, _ = owned
    alone = core.grade(_copied(zip_path, "ben", tmp_path / "a"), credited=False)
    assert alone.instructor["variant"]["own"] == owner and "no credited id" in alone.instructor["variant"]["own_from"]
    assert not _lost_only_to_missing_lessons(alone.to_dict())
    assert not any("names student" in n or "names another student" in n for n in alone.notes)
    named = core.grade(_copied(zip_path, "Ben Lee", tmp_path / "b"))
    assert named.instructor["variant"]["own"] == owner and "no student id" in named.instructor["variant"]["own_from"]
    assert named.score == alone.score
    roster = core.grade(_copied(zip_path, "upload", tmp_path / "c"), student="ben")  # Gradescope's sid: ben's grade
    assert roster.student == "ben" and roster.instructor["variant"]["own"] == "ben"
    _artifact_checks_lost(roster, owner)
    assert any("the grade is credited to 'ben'" in n for n in roster.notes)
