"""Predictions (lessons 01, 03, 04, 05, 06, 07, 10): each judged against the lesson's truth, recomputed here from the
fixtures.

A prediction asks about the lesson's setup (the sets it names, the fixture model), so neither what the student
reported nor the student's models decide it: a model calibrated on the wrong set is charged once, in its lesson
(03's range_seen), and a prediction that was right keeps its point. The setup is the one the student's run had
(``Setup``): the parameters that change a truth (lesson 04's ``SEED`` and ``MAX_BATCHES``, lesson 07's ``SEED``) are
read from where the run recorded them, as the notebook judged the prediction against that run; a hand-in that
records none (or a stream its own hash does not match) is judged at the lesson's defaults. The input rulers and the
clip/squash diagnosis follow from each named set's min and max (``lab.ruler``, pure numpy). The growth errors, the
two formats' sizes and lesson 07's daylight draft need conversions of the FP32 fixture with the lesson's settings:
each is done once per grader worker (and setup) and cached (the errors per kernel family, as the hand-in's family
computes them), in a temporary folder, so fixtures/ is never written. ``lab.predictions`` judges with the same words
the notebook used.

Each question's FIRST answer is graded (``answer`` in predictions.json); the different answers a workspace got after
it (``later``, predictions/2) are kept for the instructor and never graded, as the lesson judged only the first.
"""
from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from grader.context import Context, check, evaluation, fp32_outputs
from grader.group import Group
from grader.lessons import lesson04_more_batches as grade04
from grader.lessons import lesson07_calibrate_the_deployed_representation as grade07
from lab import compare, convert, data, graph, kernels, ruler, variant
from lab.data import BATCH_SIZE, KINDS
from lab.errors import LabError
from lab.exercise import SETTINGS
from lab.lessons import lesson01_the_ruler, lesson03_narrow_right_wide, lesson04_more_batches, lesson05_qdq_vs_qoperator
from lab.lessons.lesson05_qdq_vs_qoperator import FORMAT_SETTINGS, quantize_both_formats
from lab.lessons.lesson06_accept_or_reject import families
from lab.lessons.lesson06_accept_or_reject.acceptance import CANDIDATE_SETTINGS
from lab.lessons.lesson07_calibrate_the_deployed_representation import recipe, scenario_checks
from lab.lessons.lesson10_your_own_model import camera_path
from lab.lessons.lesson10_your_own_model import release as release10

PART = "predictions"
# the questions, each defined by the lesson that asks it, in lesson order
QUESTIONS = {q.name: q for q in (lesson01_the_ruler.PREDICTION, lesson03_narrow_right_wide.PREDICTION,
                                 lesson04_more_batches.PREDICTION, lesson05_qdq_vs_qoperator.PREDICTION,
                                 families.PREDICTION, scenario_checks.PREDICTION, camera_path.PREDICTION)}
NAMES = tuple(QUESTIONS)
NEEDS = ("predictions.json",)
WHERE = " (measured on the lesson's sets and the fixture, not on your files)"  # what every verdict was judged on
# lesson 04's narrow stream as the lesson runs it by default: (MAX_BATCHES, batch size, SEED)
DEFAULT_STREAM = (lesson04_more_batches.MAX_BATCHES, lesson04_more_batches.BATCH_SIZE, 0)


@dataclass(frozen=True)
class Setup:
    """The parameters of the student's run that a prediction's truth depends on, as the hand-in recorded them (the
    notebook judged each prediction against that run); the lesson's defaults where nothing is recorded."""

    stream: tuple[int, int, int] = DEFAULT_STREAM
    """Lesson 04's narrow stream, (MAX_BATCHES, batch size, SEED): growth.json's ``narrow_stream``."""
    scenario_seed: int = 0
    """Lesson 07's SEED, the scenarios' noise: recipe.json's ``scenarios.seed``."""
    camera_seed: int = 0
    """Lesson 10's SEED, its conditions' noise: camera-release.json's ``acceptance.seed``."""

    def note(self, question: str) -> str:
        """What of the run's setup the truth of ``question`` was measured with, when it is not the lesson's default."""
        if question == "more_batches" and self.stream != DEFAULT_STREAM:
            most, size, seed = self.stream
            return (f"; with your run's narrow stream, as growth.json records it: MAX_BATCHES={most}, batches of "
                    f"{size}, SEED={seed}")
        if question == "failing_scenarios" and self.scenario_seed:
            return f"; with your run's SEED={self.scenario_seed}, as release/recipe.json records it"
        if question == "attractive_photographs" and self.camera_seed:
            return f"; with your run's SEED={self.camera_seed}, as camera-release.json records it"
        return ""


def setup_of(ctx: Context) -> Setup:
    """The hand-in's ``Setup``: lesson 04's stream when growth.json hashes the stream it names
    (``grader.lessons.lesson04_more_batches.recorded_stream``), lesson 07's seed from recipe.json."""
    stream = grade04.recorded_stream(ctx.doc("growth.json")) if ctx.has("growth.json") else None
    seed = grade07.scenario_seed(ctx.doc(grade07.RECIPE)) if ctx.has(grade07.RECIPE) else 0
    camera_seed = ctx.doc(release10.FILE).get("acceptance", {}).get("seed", 0) if ctx.has(release10.FILE) else 0
    if not isinstance(camera_seed, int) or isinstance(camera_seed, bool) or camera_seed < 0:
        camera_seed = 0  # the schema allows no other; a hand-in that got past it is judged at the lesson's default
    return Setup(stream or DEFAULT_STREAM, seed, camera_seed)


# ----- the lesson's truth: pure, from the named sets ------------------------------------------------------

@variant.lru_cache(maxsize=1)  # each student's variant has its own
def lesson_rulers() -> dict:
    """Lesson 03: the input ruler MinMax lays on each named set (its min and max, widened to include 0)."""
    sets = {kind: data.calibration_set(kind) for kind in KINDS}
    return {kind: ruler.ruler_for(float(x.min()), float(x.max())) for kind, x in sets.items()}


# ----- the lesson's truth: conversions of the fixture, once per worker ------------------------------------

def _source(tmp: str) -> Path:
    """A copy of the FP32 fixture: ORT writes <model>-inferred.onnx beside the model it is given, and fixtures/
    is shared by every batch worker (two raced on that file) and may be read-only."""
    return Path(shutil.copy(data.fixture_path("fp32.onnx"), tmp))


@variant.lru_cache(maxsize=4)  # each student's variant has its own, and each stream a run can record
def _growth_models(stream: tuple[int, int, int] = DEFAULT_STREAM) -> dict:
    """Lesson 04's series as the lesson runs it (the narrow ``stream``, (MAX_BATCHES, batch size, SEED), its counts
    and settings): (kind, batches) -> model.

    Each calibration is served as one batch: MinMax keeps the lowest and highest value over all batches, so
    the models are the lesson's (same bytes as its batches of 8), in half the time."""
    most, batch_size, seed = stream
    pixels = lesson04_more_batches.narrow_batches(most, batch_size, seed=seed)
    series = [("narrow", n, pixels) for n in lesson04_more_batches.doubling_counts(most)]
    series += [("right", n, data.calibration_set("right")) for n in lesson04_more_batches.RIGHT_BATCHES]
    models = {}
    with tempfile.TemporaryDirectory(prefix="grader-lesson04-") as tmp:
        source = _source(tmp)
        for kind, n, pixels in series:
            path = Path(tmp) / lesson04_more_batches.model_name(kind, n)
            served = pixels[:n * batch_size]
            convert.quantize(source, path, served, batch_size=len(served), **SETTINGS)
            models[(kind, n)] = graph.load(path)
    return models


@variant.lru_cache(maxsize=8)  # each student's variant has its own
def lesson_growth(family: str, stream: tuple[int, int, int] = DEFAULT_STREAM) -> tuple[dict, dict, float]:
    """Lesson 04 as CPUs of ``family`` compute it, on the narrow ``stream`` (``_growth_models``): narrow and right
    max abs errors per batch count, and the range the largest narrow calibration sees."""
    models = _growth_models(stream)
    errors: dict[str, dict[int, float]] = {"narrow": {}, "right": {}}
    for (kind, n), model in models.items():
        errors[kind][n] = compare.max_abs_error(fp32_outputs(), compare.predict(model, evaluation()[0],
                                                                                family=family))
    largest = graph.input_ruler(models[("narrow", max(errors["narrow"]))]).range_seen
    return errors["narrow"], errors["right"], largest


@variant.lru_cache(maxsize=1)  # each student's variant has its own
def lesson_formats() -> tuple[dict, bool]:
    """Lesson 05: both formats from one calibration of the 'right' set: file bytes per format, and whether their
    input rulers are the same. Sizes and rulers do not depend on the kernel family."""
    with tempfile.TemporaryDirectory(prefix="grader-lesson05-") as tmp:
        records = quantize_both_formats(_source(tmp), tmp, data.calibration_set("right"), batch_size=BATCH_SIZE,
                                        **FORMAT_SETTINGS)
        paths = {f: Path(r.output) for f, r in records.items()}
        sizes = {f: p.stat().st_size for f, p in paths.items()}
        rulers = [graph.input_ruler(p) for p in paths.values()]
    return sizes, len({(r.scale, r.zero_point) for r in rulers}) == 1


@variant.lru_cache(maxsize=1)  # each student's variant has its own
def lesson_cures() -> list:
    """Lesson 06: the candidate's settings changed one at a time (``families.VARIANTS``), calibrated on the 'right'
    set, each on the evaluation images as both kernel families compute it (``families.cures_table``): whether its
    answers change does not depend on the CPU that grades."""
    with tempfile.TemporaryDirectory(prefix="grader-lesson06-") as tmp:
        source = _source(tmp)
        paths = families.convert_variants(source, Path(tmp) / "cpu", data.calibration_set("right"),
                                          {**CANDIDATE_SETTINGS, "batch_size": BATCH_SIZE})
        x, labels = evaluation()
        return families.cures_table(source, paths, x, labels)


@variant.lru_cache(maxsize=1)  # each student's variant has its own
def _daylight_draft():
    """Lesson 07's daylight draft as the lesson builds it: per-channel QDQ, calibrated on every daylight image of the
    calibration pool."""
    with tempfile.TemporaryDirectory(prefix="grader-lesson07-") as tmp:
        draft = Path(tmp) / "daylight.onnx"
        convert.quantize(_source(tmp), draft, recipe.select([("daylight", None)]).pixels, batch_size=BATCH_SIZE,
                         per_channel=True)
        return graph.load(draft)


@variant.lru_cache(maxsize=4)  # each student's variant has its own
def lesson_draft_verdicts(seed: int = 0) -> list:
    """Lesson 07: the daylight draft's verdicts on the tuning images, with exact int32 arithmetic (the question's own
    terms, so one answer is right on every kernel family), the scenarios drawn with ``seed`` (the run's SEED)."""
    tuning = recipe.tuning_set()
    with kernels.computing_as(kernels.EXACT):
        return scenario_checks.compare_scenarios(data.fixture_path("fp32.onnx"), _daylight_draft(), tuning.pixels,
                                                 tuning.labels, seed=seed)


# ----- the judges ------------------------------------------------------------------------------------------

def _clip_or_squash(answer, setup: Setup):

    x = evaluation()[0]
    diagnoses = {k: compare.diagnose(r, x) for k, r in lesson_rulers().items()}
    return lesson01_the_ruler.judge_clip_or_squash(answer, diagnoses)


def _input_rulers(answer, setup: Setup):

    return lesson03_narrow_right_wide.judge_input_rulers(answer, lesson_rulers(), measured="the lesson's set gives")


def _more_batches(answer, setup: Setup):

    lesson04_more_batches.PREDICTION.normalise(answer)  # a malformed answer costs no conversion
    return lesson04_more_batches.judge_more_batches(answer, *lesson_growth(kernels.target_family(), setup.stream))


def _formats(answer, setup: Setup):

    lesson05_qdq_vs_qoperator.PREDICTION.normalise(answer)
    return lesson05_qdq_vs_qoperator.judge_formats(answer, *lesson_formats())


def _saturating_settings(answer, setup: Setup):

    families.PREDICTION.normalise(answer)
    return families.judge_saturating_settings(answer, lesson_cures())


def _failing_scenarios(answer, setup: Setup):

    scenario_checks.PREDICTION.normalise(answer)
    return scenario_checks.judge_failing_scenarios(answer, lesson_draft_verdicts(setup.scenario_seed))



def _attractive_photographs(answer, setup: Setup):
    """Lesson 10: the lesson's two per-tensor conversions of the CNN (camera frames, attractive photographs)."""
    from grader.lessons.lesson10_your_own_model import lesson_sets  # deferred: lesson 10's module imports ORT's

    return camera_path.judge_attractive_photographs(answer, *lesson_sets(kernels.target_family(), setup.camera_seed))


JUDGES = {"clip_or_squash": _clip_or_squash, "input_rulers": _input_rulers, "more_batches": _more_batches,
          "formats": _formats, "saturating_settings": _saturating_settings,
          "failing_scenarios": _failing_scenarios, "attractive_photographs": _attractive_photographs}


def run(ctx: Context) -> list:

    doc = ctx.doc("predictions.json")
    saved = {q: e.get("answer") for q, e in doc.get("predictions", {}).items() if isinstance(e, dict)}
    setup = setup_of(ctx)
    out = []
    for name in NAMES:
        q = QUESTIONS[name]
        if name not in saved:
            out.append(check(PART, name, 0, f"predictions.json has no prediction for {name}: lesson {q.lesson} asks "
                                            f"{q.asks}; run its prediction cell, then hand in again"))
            continue
        try:
            verdict = JUDGES[name](saved[name], setup)
        except LabError as e:  # a malformed answer: the message names the field
            out.append(check(PART, name, 0, str(e)))
            continue
        if ctx.grading.course.predictions == "completion":  # the course grades answering, not being right
            out.append(check(PART, name, 1, "graded for completion: your answer counts whatever it is. "
                             + verdict.message + WHERE + setup.note(name)))
            continue
        out.append(check(PART, name, verdict.score, verdict.message + WHERE + setup.note(name)))
    return out


GROUPS = (Group("01", PART, NAMES, run, needs=NEEDS),)
