"""Lesson 10, part 2: the kernel family on Conv, the scenarios, and a release with its recipe.

``build`` converts the CNN with a ``RECIPE`` (the calibration set, pre-processing, format, per-channel,
``reduce_range``); ``family_rows`` measures models on both INT8 kernel families (the other by ``lab.kernels``'
emulation); ``scenarios`` judges a model under every named operating condition of ``lab.camera`` on both families
with lesson 07's ``judge`` (a condition FP32 itself reads below the floor is "not judged", never "pass");
``unmet`` and ``refuse`` are the release exercise's visible check; ``document`` writes ``camera-release.json``
(schema camera-release/1) and the model is stamped with the recipe by lesson 07's ``stamp``.
"""
from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from functools import partial
from pathlib import Path

import numpy as np

from lab import camera, compare, evidence, graph, kernels, schemas, tables
from lab.convert import versions
from lab.data import EPSILON, data_sha256, file_sha256
from lab.errors import LabError
from lab.lessons.lesson06_accept_or_reject.acceptance import FLOOR, LIMIT
from lab.lessons.lesson07_calibrate_the_deployed_representation import recipe as recipe07
from lab.lessons.lesson07_calibrate_the_deployed_representation import scenario_checks
from lab.lessons.lesson08_the_quantization_toolbox.toolbox import preprocessed
from lab.lessons.lesson10_your_own_model import camera_path
from lab.prose import (
    CITED,
    cites,
    table_numbers,
)
from lab.workspace import atomic_write_text

SCHEMA = "camera-release/1"
RELEASE_ID = "camera-cnn-int8-r1"
FILE, MODEL = "camera-release.json", "camera-release.onnx"
MAX_ERROR = 0.15
"""The release's largest probability change on the daylight evaluation frames, on each kernel family: about twice
the reduce_range form's on the reference runs (about 0.08), far under what a saturating overflow does (about 0.3)."""
RECIPE_KEYS = {"calibration": camera_path.SETS, "pre_process": (True, False), "quant_format": ("QDQ", "QOperator"),
               "per_channel": (True, False), "reduce_range": (True, False)}
FORMS = {  # the kernel-family table: the camera set, pre-processed, one form per row
    "per-tensor QDQ": {"quant_format": "QDQ", "per_channel": False, "reduce_range": False},
    "per-channel QDQ": {"quant_format": "QDQ", "per_channel": True, "reduce_range": False},
    "per-channel QDQ + reduce_range": {"quant_format": "QDQ", "per_channel": True, "reduce_range": True},
    "per-channel QOperator (QLinearConv)": {"quant_format": "QOperator", "per_channel": True, "reduce_range": False},
}
_PREDICTED: OrderedDict[tuple, np.ndarray] = OrderedDict()  # the latest outputs: a lesson's or a grader's models
_KEEP = 192  # outputs kept: a pooled run keeps 10 (all 3,600 frames' outputs and each condition's block, views of them)


class ReleaseRefused(LabError, ValueError):
    """The recipe is not of the form the exercise asks, or its model misses what the release requires."""


def predict(model, x: np.ndarray, family: str, x64_precision: bool = False, blocks: int = 1) -> np.ndarray:
    """``lab.compare.predict`` on the ``image`` input as ``family`` computes it (``x64_precision``: in a session
    with ORT's ``session.x64quantprecision`` = "1"), remembered per model bytes and data (the last ``_KEEP``: a
    lesson measures one model many times, and so does a grader that checks it twice). ``x`` stacked from ``blocks``
    equal blocks (``pooled``'s conditions): each block's outputs are remembered too, so the daylight frames, the
    first block, are not run again (a row's output does not depend on the rows run with it)."""
    model_key, n = file_sha256(model), len(x) // blocks
    key = (model_key, data_sha256(x), family, x64_precision)
    if key not in _PREDICTED:
        out = compare.predict(model, x, input_name=camera_path.INPUT, family=family, x64_precision=x64_precision)
        parts = [(data_sha256(x[i * n:(i + 1) * n]), out[i * n:(i + 1) * n]) for i in range(blocks)] \
            if blocks > 1 else []
        for data_key, part in [*parts, (key[1], out)]:
            _PREDICTED[(model_key, data_key, family, x64_precision)] = part
            _PREDICTED.move_to_end((model_key, data_key, family, x64_precision))
        while len(_PREDICTED) > _KEEP:
            _PREDICTED.popitem(last=False)
    _PREDICTED.move_to_end(key)
    return _PREDICTED[key]


def check_recipe(recipe: Mapping, justification: str, printed: Sequence[float] | None = None) -> dict:
    """The recipe as a plain dict; ``ReleaseRefused`` naming a key or value that is not one the exercise offers, or
    a justification that cites no number of the run's tables (``printed``, from ``table_numbers``)."""
    if not isinstance(recipe, Mapping):
        raise ReleaseRefused(f"RECIPE is a {type(recipe).__name__}; expected a dict with keys {list(RECIPE_KEYS)}")
    if sorted(recipe) != sorted(RECIPE_KEYS):
        raise ReleaseRefused(f"RECIPE has keys {sorted(recipe)}; expected exactly {sorted(RECIPE_KEYS)}")
    for key, options in RECIPE_KEYS.items():
        if recipe[key] not in options or type(recipe[key]) is not type(options[0]):
            raise ReleaseRefused(f"RECIPE[{key!r}] is {recipe[key]!r}; expected one of {list(options)}")
    if not isinstance(justification, str) or not any(ch.isdigit() for ch in justification):
        raise ReleaseRefused("JUSTIFICATION must say why, citing numbers the lesson printed")
    if printed is not None and not cites(justification, printed):
        raise ReleaseRefused("JUSTIFICATION cites no number of your tables above (" + (", ".join(
            CITED.findall(justification)) or "no decimal") + "): quote your own run's accuracies, errors or times, "
            "not the numbers of someone else's run")
    return dict(recipe)


def build(source: str | Path, out_dir: str | Path, recipe: Mapping, reader_cls) -> tuple[Path, dict]:
    """The model ``recipe`` gives: its frames served by ``reader_cls`` through the deployed path, the graph
    pre-processed or not, then ``camera_path.quantize_cnn``. Returns the model and the conversion's record."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    graph_in = preprocessed(source, out / "pre.onnx") if recipe["pre_process"] else Path(source)
    name = (f"{recipe['calibration']}-{'pre' if recipe['pre_process'] else 'raw'}-{recipe['quant_format'].lower()}-"
            f"{'pc' if recipe['per_channel'] else 'pt'}{'-rr' if recipe['reduce_range'] else ''}.onnx")
    reader = reader_cls(camera_path.frames_of(recipe["calibration"]), batch_size=camera_path.BATCH_SIZE,
                        input_name=camera_path.INPUT)
    rec = camera_path.quantize_cnn(graph_in, out / name, reader, quant_format=recipe["quant_format"],
                                   per_channel=recipe["per_channel"], reduce_range=recipe["reduce_range"])
    return out / name, rec


def measured(source, model, x: np.ndarray, labels: np.ndarray, families: Sequence[str] = kernels.FAMILIES,
             x64_precision: bool = False) -> dict:
    """Accuracy, accuracy loss and max abs error against FP32 on ``x``, per kernel family (``families``), the
    model run in a default session or (``x64_precision``) with ORT's ``session.x64quantprecision`` = "1"."""
    fp32 = predict(source, x, kernels.EXACT)
    fa = float(np.mean(fp32.argmax(1) == labels))
    out = {}
    for family in families:
        q = predict(model, x, family, x64_precision)
        acc = float(np.mean(q.argmax(1) == labels))
        out[family] = {"accuracy": round(acc, 4), "accuracy_loss": round(fa - acc, 4),
                       "max_abs_error": round(compare.max_abs_error(fp32, q), 4),
                       "computed_on": scenario_checks.computed_on(family)}
    return out


UNFOLDED_ROW = "per-tensor QDQ, BatchNorm unfolded"
"""Section 6's timing row for section 3's unfolded model, beside its folded form (per-tensor QDQ)."""
X64_ROW = "per-channel QDQ, session.x64quantprecision"
"""Section 6's deploy-time row: the per-channel QDQ file unchanged, its session created with ORT's option."""


def family_rows(source, models: Mapping[str, Path], x: np.ndarray, labels: np.ndarray,
                x64_models: Mapping[str, Path] | None = None) -> list[dict]:
    """One row per (model, family): accuracy, loss and max abs error on ``x``; ``x64_models`` run in sessions with
    ORT's ``session.x64quantprecision`` = "1"."""
    runs = [(name, m, False) for name, m in models.items()] + \
        [(name, m, True) for name, m in (x64_models or {}).items()]
    return [{"name": name, "family": f, **v} for name, m, x64 in runs
            for f, v in measured(source, m, x, labels, x64_precision=x64).items()]


def conditions() -> dict:
    """lab.camera's operating conditions as lesson 07's scenarios: frames -> condition -> the deployed path."""
    return {name: (lambda frames, seed=0, fn=fn: camera.preprocess(fn(frames, seed)))
            for name, fn in camera.CONDITIONS.items()}


def scenarios(source, model, frames: np.ndarray, labels: np.ndarray, seed: int = 0) -> dict[str, list]:
    """Every named condition on both families: family -> lesson 07's ``ScenarioResult`` per condition."""
    out = {}
    every, n = pooled(frames, labels, seed)[0], len(frames)  # one run per model and family, split per condition
    for family in kernels.FAMILIES:
        fp32, int8 = (predict(m, every, f, blocks=len(camera.CONDITIONS))
                      for m, f in ((source, kernels.EXACT), (model, family)))
        outs = {name: (fp32[i * n:(i + 1) * n], int8[i * n:(i + 1) * n]) for i, name in enumerate(conditions())}
        margin = scenario_checks.confident_margin(*outs[scenario_checks.REFERENCE])
        out[family] = [scenario_checks.judge(name, f, q, labels, margin, camera.describe()[name], LIMIT)
                       for name, (f, q) in outs.items()]
    return out


VERDICT_WORDS = {"pass": "pass", "needs work": "WORK", scenario_checks.NOT_JUDGED: "not judged"}


def form_scenarios(source, models: Mapping[str, Path], frames: np.ndarray, labels: np.ndarray,
                   seed: int = 0) -> list[dict]:
    """Every model judged under every condition on both families (``scenarios``): one row per (model, family),
    each condition's INT8 accuracy and verdict as ``"0.973 pass"``; FP32's accuracy per condition first."""
    rows: list[dict] = []
    for name, model in models.items():
        for family, results in scenarios(source, model, frames, labels, seed).items():
            if not rows:
                rows.append({"name": "FP32", "family": "-", **{r.name: f"{r.fp32_accuracy:.3f}" for r in results}})
            rows.append({"name": name, "family": family,
                         **{r.name: f"{r.int8_accuracy:.3f} {VERDICT_WORDS[r.verdict]}" for r in results}})
    return rows


def form_scenario_columns() -> list[tuple[str, str, str]]:
    """``tables.format_rows`` columns for ``form_scenarios``."""
    return [("name", "form", ""), ("family", "family", "")] + [(c, c, "") for c in camera.CONDITIONS]


def form_problems(recipe: Mapping) -> list[str]:
    """The lesson's rules on the recipe's form, each with the section that measured why: BatchNorm folded, one
    weight grid per output channel, QDQ (the QOperator form runs ORT's slow S8S8 kernels on x86-64)."""
    out = []
    if not recipe["pre_process"]:
        out.append("pre_process: False leaves each BatchNormalization unfolded, a float op and an extra rounding per "
                   "layer (section 3; section 6 times it beside its folded form); fold it first")
    if not recipe["per_channel"]:
        out.append("per_channel: False measures every Conv filter on the largest one's grid (sections 4 and 6); "
                   "give each output channel its own")
    if recipe["quant_format"] != "QDQ":
        out.append("quant_format: 'QOperator' with QInt8 activations runs ORT's S8S8 kernels, which its converter "
                   "warns are slow on x86-64 (section 6's timing); use QDQ")
    return out


TIME_BATCH, TIME_ROUNDS = 256, 9


def timed(source, models: Mapping[str, Path], x: np.ndarray, x64_models: Mapping[str, Path] | None = None
          ) -> list[dict]:
    """Each model's time for one batch of ``TIME_BATCH`` frames on this CPU (one thread, after a warm-up), the forms
    taken in turn in each of ``TIME_ROUNDS`` rounds so that a slow moment of the machine slows every form alike; its
    ratio to FP32's is the median of the rounds' paired ratios, with their quartiles as its range;
    ``x64_models`` in sessions with ORT's ``session.x64quantprecision`` = "1"."""
    batch = np.ascontiguousarray(x[:TIME_BATCH], np.float32)
    runs = [("FP32", source, False)] + [(n, m, False) for n, m in models.items()] + \
        [(n, m, True) for n, m in (x64_models or {}).items()]
    sessions = {name: compare.session(model, x64_precision=x64) for name, model, x64 in runs}
    feed = {camera_path.INPUT: batch}
    for sess in sessions.values():
        sess.run(None, feed)
    samples = evidence.in_turn({name: partial(sess.run, None, feed) for name, sess in sessions.items()},
                               TIME_ROUNDS)
    fp32 = np.asarray(samples["FP32"])
    rows = []
    for name, seconds in samples.items():
        t, r = evidence.timing(seconds), evidence.timing(np.asarray(seconds) / fp32)
        rows.append({"name": name, "ms": 1e3 * t.median, "spread": t.spread, "ratio": r.median,
                     "low": r.low, "high": r.high, "range": f"{r.low:.2f}-{r.high:.2f}"})
    return rows


TIME_COLUMNS = [("name", "form", ""), ("ms", "ms per batch", ".2f"), ("spread", "spread", ".0%"),
                ("ratio", "time / FP32's", ".2f"), ("range", "range", "")]


def release_numbers(daylight: Mapping[str, dict], by_family: Mapping[str, Sequence]) -> list[float]:
    """The released model's own measurements, which its justification must cite one of: its daylight accuracy, loss
    and max abs error, and its accuracy under each condition, on either family (its recipe's row of the form table,
    when the recipe is one of the forms)."""
    return table_numbers(dict(daylight)) + [float(r.int8_accuracy) for rows in by_family.values() for r in rows]


JUSTIFIED_BY = ("JUSTIFICATION cites none of the released model's own numbers (its daylight accuracy, loss or max "
                "abs error, or its accuracy under a condition, on either family): a release is justified by what its "
                "own recipe measured, such as that recipe's row of the form table")


def unmet(recipe: Mapping, by_family: Mapping[str, Sequence], daylight: Mapping[str, dict],
          justification: str | None = None) -> list[str]:
    """What the release requires that this recipe's model misses, each with its number and its limit; with
    ``justification``, also a justification that cites none of the model's own numbers (``release_numbers``)."""
    out = form_problems(recipe)
    if justification is not None and not cites(justification, release_numbers(daylight, by_family)):
        out.append(JUSTIFIED_BY)
    if recipe["calibration"] != "camera":
        out.append(f"calibration: {recipe['calibration']!r} frames skipped the camera; the release is calibrated "
                   "on the camera's own frames, through the deployed path")
    for family, v in daylight.items():
        if v["max_abs_error"] > MAX_ERROR + EPSILON:
            out.append(f"error ({family} family): max abs error {v['max_abs_error']:.3f} on daylight is over "
                       f"{MAX_ERROR}")
    for family, rows in by_family.items():
        out += [f"scenario {r.name} ({family} family) needs work: {r.note}" for r in rows if r.needs_work]
    return out


def refuse(problems: Sequence[str]) -> None:
    """The release exercise's visible check: ``ReleaseRefused`` naming every requirement missed."""
    if problems:
        raise ReleaseRefused("not released: " + "; ".join(problems)
                             + ". Read the tables above again: which recipe holds on both families?")


def verdict_table(by_family: Mapping[str, Sequence]) -> str:
    return scenario_checks.format_families(by_family)


def not_judged(by_family: Mapping[str, Sequence]) -> list[str]:
    rows = next(iter(by_family.values()))
    return [r.name for r in rows if not r.judged]


def document(*, source, model, recipe: Mapping, record: Mapping, by_family: Mapping[str, Sequence],
             daylight: Mapping[str, dict], justification: str, frames: np.ndarray, seed: int = 0) -> dict:
    """The ``camera-release/1`` document: the recipe, what it was calibrated on, and what it measures."""
    cal = camera_path.frames_of(recipe["calibration"])  # as build() serves them; ``seed`` is the scenarios' noise
    doc = {"schema": SCHEMA, "release_id": RELEASE_ID, "versions": versions(),
           "source_model": {"file": Path(source).name, "sha256": file_sha256(source)},
           "preprocessing": {"module": "lab.camera.preprocess", "frame": camera.FRAME, "crop": camera.CROP,
                             "size": camera.SIZE, "mean": float(camera.MEAN), "std": float(camera.STD)},
           "recipe": dict(recipe),
           "calibration": {"set": recipe["calibration"], "reader": "camera_reader.FrameReader",
                           "frames_sha256": data_sha256(cal), "samples": int(record["served_samples"]),
                           "batch_size": camera_path.BATCH_SIZE, "served_sha256": record["served_sha256"],
                           "input_range": camera_path.input_range(model)},
           "model": {"file": MODEL, "draft_sha256": file_sha256(model)},
           "acceptance": {"split": "evaluation", "count": int(len(frames)), "sha256": data_sha256(frames),
                          "seed": seed},
           "limits": {"floor": FLOOR, "accuracy_loss": LIMIT, "max_abs_error": MAX_ERROR},
           "daylight": {f: dict(v) for f, v in daylight.items()},
           "scenarios": {f: [_row(r) for r in rows] for f, rows in by_family.items()},
           "not_judged": not_judged(by_family), "justification": justification}
    schemas.validate("camera-release", doc)
    return doc


def _row(r) -> dict:
    return {"name": r.name, "fp32_accuracy": round(r.fp32_accuracy, 4), "int8_accuracy": round(r.int8_accuracy, 4),
            "max_abs_error": round(r.max_abs_error, 4), "verdict": r.verdict}


def release(work: str | Path, draft: str | Path, doc: dict) -> dict[str, Path]:
    """Write ``camera-release.json``, then the model: the draft stamped with the document's SHA-256 (lesson 07's
    ``stamp``), so the released file names the record it was released with."""
    work = Path(work)
    schemas.validate("camera-release", doc)
    doc_path = _write(work / FILE, doc)
    model = recipe07.stamp(draft, work / MODEL, RELEASE_ID, doc_path)
    return {"model": model, "document": doc_path}


def _write(path: Path, doc: dict) -> Path:
    return atomic_write_text(path, json.dumps(doc, indent=1) + "\n")


def stamp_of(model) -> tuple[str | None, str | None]:
    """The release id and the document's SHA-256 the model's metadata names (lesson 07's ``stamp``)."""
    props = {p.key: p.value for p in graph.load(model).metadata_props}
    return props.get(recipe07.META_RELEASE), props.get(recipe07.META_SHA)


SUMMARY_COLUMNS = [("scenario", "<14"), ("FP32", ">7"), ("exact", ">7"), ("saturating", ">11"),
                   ("  verdict (exact / saturating)", "")]


def summary_lines(doc: dict) -> list[str]:
    """The run's summary of ``camera-release.json``: the recipe, then per scenario FP32 and each family's INT8 accuracy
    and verdict, and the daylight max abs error per family."""
    n = tables.number
    r, day, by = doc.get("recipe", {}), doc.get("daylight", {}), doc.get("scenarios", {})
    rows = {f: {x.get("name"): x for x in v} for f, v in by.items()}
    exact, sat = rows.get(kernels.EXACT, {}), rows.get(kernels.SATURATING, {})
    lines = [f"  release {doc.get('release_id', '-')}: " + ", ".join(f"{k}={v}" for k, v in r.items()),
             "  daylight max abs err: " + ", ".join(f"{f} {n(v.get('max_abs_error'))}" for f, v in day.items()),
             "  " + tables.header(SUMMARY_COLUMNS, "")]
    for name, e in exact.items():
        s = sat.get(name, {})
        lines.append("  " + tables.row([name, n(e.get("fp32_accuracy"), ".3f"), n(e.get("int8_accuracy"), ".3f"),
                                        n(s.get("int8_accuracy"), ".3f"),
                                        f"  {e.get('verdict', '-')} / {s.get('verdict', '-')}"], SUMMARY_COLUMNS, ""))
    return lines



# --- the whole release, as the notebook's cells run it (the grader's reference hand-in builds with it) ------------

def workspace_source(work: str | Path) -> Path:
    """``camera/cnn-fp32.onnx`` in the workspace: a copy of the fixture (the converter writes beside what it reads)."""
    drafts = Path(work) / "camera"
    drafts.mkdir(parents=True, exist_ok=True)
    source = drafts / "cnn-fp32.onnx"
    source.write_bytes(camera.model_path().read_bytes())
    return source


def pooled(frames: np.ndarray, labels: np.ndarray, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The frames under every operating condition, through the deployed path, stacked: (images, labels)."""
    xs = [fn(frames, seed) for fn in conditions().values()]
    return np.concatenate(xs), np.tile(np.asarray(labels), len(xs))


def sets_measured(source, out_dir, reader_cls, x: np.ndarray, labels: np.ndarray,
                  frames: np.ndarray | None = None, seed: int = 0) -> dict:
    """Section 2's two per-tensor conversions: set -> model, input ruler and each family's numbers on ``x``; with
    the evaluation ``frames``, each family's answers under every condition too (``under_conditions``)."""
    out = {}
    every = pooled(frames, labels, seed) if frames is not None else None
    for kind in camera_path.SETS:
        model, _ = build(source, out_dir, {"calibration": kind, **PER_TENSOR}, reader_cls)
        conditions_answers = {} if every is None else {   # first: ``x``, the daylight frames, is their first block
            f: predict(model, every[0], f, blocks=len(camera.CONDITIONS)).argmax(1) for f in kernels.FAMILIES}
        out[kind] = {"model": model, "input_range": camera_path.input_range(model),
                     **measured(source, model, x, labels)}
        if every is not None:
            for family, answers in conditions_answers.items():
                out[kind][family]["under_conditions"] = answers
                out[kind][family]["conditions_accuracy"] = round(float(np.mean(answers == every[1])), 4)
    return out


def set_rows(sets: Mapping[str, dict]) -> list[dict]:
    """``sets_measured`` as table rows: one per (set, family)."""
    return [{"set": k, "input_range": v["input_range"], "family": f, **v[f]} for k, v in sets.items()
            for f in kernels.FAMILIES]


SET_COLUMNS = [("set", "calibration set", ""), ("input_range", "input ruler", ""), ("family", "family", ""),
               ("computed_on", "computed on", ""), ("accuracy", "daylight acc", ".4f"),
               ("max_abs_error", "daylight max err", ".3f"), ("conditions_accuracy", "every condition acc", ".4f")]


def sets_evidence(sets: Mapping[str, dict], labels: np.ndarray) -> dict[str, evidence.Paired]:
    """Per family: the attractive set's answers against the camera set's on the same frames under every condition
    (``labels``: ``pooled``'s), pair by pair: frames the attractive set fixed, and broke."""
    return {f: evidence.paired(labels, sets["camera"][f]["under_conditions"], sets["attractive"][f]["under_conditions"])
            for f in kernels.FAMILIES}


def sets_evidence_lines(sets: Mapping[str, dict], labels: np.ndarray) -> str:
    """One line per family: how many frames the attractive set misread that the camera set read, and back."""
    return "\n".join(f"{f:<10}: attractive against camera on the {len(labels):,} frames of every condition: "
                     f"{ev.words()}" for f, ev in sets_evidence(sets, labels).items())


PER_TENSOR = {"pre_process": True, "quant_format": "QDQ", "per_channel": False, "reduce_range": False}


def release_workspace(work: str | Path, reader_cls, recipe: Mapping, justification: str, seed: int = 0) -> dict:
    """Section 8 end to end: check the recipe, build it, judge it on both families, refuse or release. The document."""
    source = workspace_source(work)
    ev = camera.load_split("evaluation")
    recipe = check_recipe(recipe, justification)
    draft, record = build(source, Path(work) / "camera", recipe, reader_cls)
    by_family = scenarios(source, draft, ev.frames, ev.labels, seed=seed)   # first: it runs the daylight frames too
    daylight = measured(source, draft, ev.image, ev.labels)
    refuse(unmet(recipe, by_family, daylight, justification))
    doc = document(source=source, model=draft, recipe=recipe, record=record, by_family=by_family, daylight=daylight,
                   justification=justification, frames=ev.frames, seed=seed)
    release(work, draft, doc)
    return doc


# --- the prose each section prints from the run (lab.prose.say shows it) --------------------------------------------

def sets_sentence(sets: Mapping[str, dict], labels: np.ndarray) -> str:
    """Section 2 from the run: each family's accuracy under every condition per set, and whether the difference is
    beyond noise."""
    parts = []
    for f, ev in sets_evidence(sets, labels).items():
        c, a = sets["camera"][f]["conditions_accuracy"], sets["attractive"][f]["conditions_accuracy"]
        verdict = ("the attractive set misreads more" if ev.beyond_noise and ev.difference < 0 else
                   "the camera set misreads more" if ev.beyond_noise else "no set misreads more beyond the noise")
        parts.append(f"{f} family: under every condition the camera set reads {c:.4f} of the frames and the "
                     f"attractive set {a:.4f}: {verdict} ({ev.words()})")
    return "**Your run.** " + "; ".join(parts) + "."


def _worst_per_channel(rows: Sequence[Mapping]) -> str:
    """The per-channel form with the largest max abs error on the exact family."""
    err = {(r["name"], r["family"]): r["max_abs_error"] for r in rows}
    return max((n for n in FORMS if n.startswith("per-channel")), key=lambda n: err[n, kernels.EXACT])


def per_tensor_change(source, forms: Mapping[str, Path], x: np.ndarray, rows: Sequence[Mapping]) -> evidence.Interval:
    """On the exact family, per-tensor QDQ's max abs error minus the worst per-channel form's, with its interval over
    the frames (``lab.evidence.max_error_change``): whether per-tensor is worse beyond the noise."""
    fp32 = predict(source, x, kernels.EXACT)
    return evidence.max_error_change(fp32, predict(forms[_worst_per_channel(rows)], x, kernels.EXACT),
                                     predict(forms["per-tensor QDQ"], x, kernels.EXACT))


def forms_sentence(rows: Sequence[Mapping], change: evidence.Interval | None = None) -> str:
    """Section 6 from the run: the per-channel forms' max abs error per family against per-tensor QDQ's, and
    (``change``: ``per_tensor_change``) whether per-tensor's is larger beyond the noise."""
    err = {(r["name"], r["family"]): r["max_abs_error"] for r in rows}
    pcs = [n for n in FORMS if n.startswith("per-channel")]
    lo, hi = (min(err[n, kernels.EXACT] for n in pcs), max(err[n, kernels.EXACT] for n in pcs))
    pt = err["per-tensor QDQ", kernels.EXACT]
    sat, rr = err["per-channel QDQ", kernels.SATURATING], err["per-channel QDQ + reduce_range", kernels.SATURATING]
    x64 = err.get((X64_ROW, kernels.SATURATING))
    verdict = "" if change is None else (
        f"; against {_worst_per_channel(rows)}, {change.estimate:+.3f} [{change.low:+.3f}, {change.high:+.3f}]: "
        "per-tensor is "
        + ("worse beyond the noise" if change.sign > 0 else "better beyond the noise" if change.sign < 0
           else "not worse beyond the noise on these frames, the interval's near end being under one output step"
           if change.under_floor else "not worse beyond the noise on these frames"))
    return (f"**Your run.** On the exact family the per-channel forms' max abs errors span {lo:.3f} to {hi:.3f} "
            f"and per-tensor QDQ's is {pt:.3f} ({pt / hi:.1f} x the largest of them{verdict}). On the saturating "
            f"family per-channel QDQ's grows from {err['per-channel QDQ', kernels.EXACT]:.3f} to {sat:.3f}; with "
            f"`reduce_range` it is {rr:.3f}"
            + (f"; the same per-channel file in a session with `session.x64quantprecision` gives {x64:.3f}, the "
               f"exact family's {err['per-channel QDQ', kernels.EXACT]:.3f}" if x64 is not None else "") + ".")


def judged_sentence(rows: Sequence[Mapping]) -> str:
    """Section 8 from the run (``form_scenarios``' rows): FP32's range over the conditions, and every (form,
    family, condition) that needs work, with its INT8 accuracy."""
    fp32 = next(r for r in rows if r["name"] == "FP32")
    accs = [float(fp32[c]) for c in camera.CONDITIONS]
    work: dict[tuple[str, str], list[str]] = {}
    for r in rows[1:]:
        for c in camera.CONDITIONS:
            acc, word = str(r[c]).split(" ", 1)
            if word == VERDICT_WORDS["needs work"]:
                work.setdefault((r["name"], c), []).append(f"{r['family']} {acc}")
    found = [f"{name} under {c} ({', '.join(fams)})" for (name, c), fams in work.items()]
    return (f"**Your run.** FP32 reads {min(accs):.3f} to {max(accs):.3f} of each condition's frames. Needs work: "
            + ("; ".join(found) if found else "nothing") + ".")


def closest_call(by_family: Mapping[str, Sequence]) -> str:
    """The release's closest judged call, from the run: the scenario with the largest loss on either family, its
    confident changes against the tolerated count, and its paired evidence."""
    family, r = max(((f, r) for f, rows in by_family.items() for r in rows if r.judged),
                    key=lambda fr: (fr[1].loss, fr[1].defects))
    tolerated = scenario_checks.tolerated_defects(r.count)
    return (f"**Your run.** The closest call is {r.name} on the {family} family: INT8 loses {r.loss:.4f} there "
            f"against the limit of {LIMIT}, with {r.defects} confident answer(s) changed of the {tolerated} "
            f"tolerated ({r.evidence}).")


def timing_sentence(rows: Sequence[Mapping]) -> str:
    """Section 6's timing, from the run: the slowest and the fastest INT8 form on this CPU against FP32, each named
    only when its range clears every other form's, and whether INT8 is faster than FP32 beyond the noise."""
    int8 = [r for r in rows if r["name"] != "FP32"]
    slow, fast = max(int8, key=lambda r: r["ratio"]), min(int8, key=lambda r: r["ratio"])
    words = []
    if all(slow["low"] > r["high"] for r in int8 if r is not slow):
        words.append(f"the slowest form is {slow['name']} at {slow['ratio']:.2f} x FP32's time (range "
                     f"{slow['range']}), its range clear of every other form's")
    if all(fast["high"] < r["low"] for r in int8 if r is not fast):
        words.append(f"the fastest is {fast['name']} at {fast['ratio']:.2f} x ({fast['range']}), clear of the others")
    if not words:
        words.append(f"no form's range clears the others' (from {fast['ratio']:.2f} x to {slow['ratio']:.2f} x "
                     "FP32's time): their order is this machine's noise")
    faster = [r["name"] for r in int8 if r["high"] < 1]
    slower = [r["name"] for r in int8 if r["low"] > 1]
    words.append("faster than FP32 beyond the noise: " + (", ".join(faster) or "no INT8 form") +
                 "; slower beyond it: " + (", ".join(slower) or "none"))
    by_name = {r["name"]: r for r in rows}
    if UNFOLDED_ROW in by_name and "per-tensor QDQ" in by_name:
        u, f = by_name[UNFOLDED_ROW], by_name["per-tensor QDQ"]
        verdict = "slower beyond the noise" if u["low"] > f["high"] else "faster beyond the noise" \
            if u["high"] < f["low"] else "no different beyond the noise"
        words.append(f"unfolded, the per-tensor model takes {u['ratio']:.2f} x against {f['ratio']:.2f} x folded: "
                     f"{verdict}")
    text = "; ".join(words)
    return (f"**Your run, this CPU.** {text[0].upper()}{text[1:]}. Where two ranges overlap, the difference is "
            "noise.")
