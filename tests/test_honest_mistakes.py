"""Honest mistakes: the reference hand-in with one mistake a student really makes, as the lesson would write it.

Each case states the points it must lose (check -> points, against its base hand-in's own result) and words its
feedback must contain. Nothing else may be charged: one mistake, one charge. A lesson 08 case starts from the
reference with a toolbox that meets the requirement (``BASES``). ``FUZZ_FINDINGS`` are what a seeded fuzz of the
reference found unchecked, each now recomputed or refused.

The predictions part judges against the lesson's truth, recomputed from the fixtures: a model calibrated on the
wrong set costs its lesson's point only, never a prediction that was right.
"""
from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
from bad_submissions import corpus

from grader import core, items, reference, sandbox
from lab.tools.submit import submit

READER = corpus.READER_HEAD + corpus.GOOD_NEXT


@dataclass(frozen=True)
class Mistake:
    name: str
    make: Callable[[corpus.Files], bytes]
    lost: dict | Callable[[], dict] = field(default_factory=dict)  # "part.check" -> points lost (or, where the
    # mistake's cost is the lesson's own verdict on the model it makes, a function of that verdict, called after make)
    words: tuple[str, ...] = ()
    base: str = "reference"  # the hand-in it is made from, and graded against: a key of BASES
    status: str = "graded"   # "invalid": refused at intake, the words in the reason


def reader(src: str):
    return corpus.with_file("calibration_reader.py", src)


def _model_fields(path: Path, x: np.ndarray) -> dict:
    """What lesson 03's results.json says about a model's rulers, from the model (as the notebook writes it)."""
    from lab import compare, graph, ruler

    r = graph.input_ruler(path)
    d = compare.diagnose(r, x)
    return {"interval": list(r.interval), "clipped_fraction": d.clipped_fraction,
            "grid_used_fraction": d.grid_used_fraction,
            "pixel_round_trip_max_error": float(np.abs(ruler.round_trip(x, r.scale, r.zero_point) - x).max()),
            "hidden_layer": reference._hidden_layer(path, x)}


def _right_on_evaluation(files: corpus.Files) -> bytes:
    """Lesson 03's 'right' model calibrated on the evaluation split, and results.json written from that run."""
    import tempfile

    from lab import compare, convert, data, graph
    from lab.data import file_sha256

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "source.onnx").write_bytes(data.fixture_path("fp32.onnx").read_bytes())
        (work / "calibration_reader.py").write_text(reference.READER_SOURCE)
        from lab import workspace

        cls = workspace.load_module(work, "calibration_reader").DigitReader
        x = data.load_split("evaluation").pixels
        record = convert.quantize(work / "source.onnx", work / "right.onnx", cls(x, batch_size=36))
        r = graph.input_ruler(work / "right.onnx")
        doc = json.loads(files["results.json"])
        ref = compare.predict(data.fixture_path("fp32.onnx"), x)
        doc["sets"]["right"].update(
            model_sha256=file_sha256(work / "right.onnx"), calibration_samples=record.calibration_samples,
            calibration_batches=record.calibration_batches, calibration_sha256=record.calibration_sha256,
            scale=r.scale, zero_point=r.zero_point, range_seen=r.range_seen,
            max_abs_error=compare.max_abs_error(ref, compare.predict(work / "right.onnx", x)),
            accuracy=float((compare.predict(work / "right.onnx", x).argmax(1) == data.load_split("evaluation").labels)
                           .mean()), **_model_fields(work / "right.onnx", x))
        model = (work / "right.onnx").read_bytes()
    return corpus.pack({**files, "right.onnx": model, "results.json": json.dumps(doc, indent=2).encode()})


def _right_on(kind: str, model: str = "right"):
    """Lesson 03's ``model`` calibrated on another named set (the loop's variable copied), reported honestly."""
    def make(files: corpus.Files) -> bytes:
        import tempfile

        from lab import compare, convert, data, graph

        with tempfile.TemporaryDirectory() as tmp:
            work, reader_cls = _workspace(Path(tmp))
            evaluation = data.load_split("evaluation")
            x, labels = evaluation.pixels, evaluation.labels
            path = work / f"{model}.onnx"
            record = convert.quantize(work / "source.onnx", path, reader_cls(data.calibration_set(kind), batch_size=36))
            r = graph.input_ruler(path)
            doc = json.loads(files["results.json"])
            ref, out = compare.predict(data.fixture_path("fp32.onnx"), x), compare.predict(path, x)
            doc["sets"][model].update(
                model_sha256=data.file_sha256(path), calibration_samples=record.calibration_samples,
                calibration_batches=record.calibration_batches, calibration_sha256=record.calibration_sha256,
                scale=r.scale, zero_point=r.zero_point, range_seen=r.range_seen, diagnosis=compare.diagnose(r, x).kind,
                max_abs_error=compare.max_abs_error(ref, out),
                accuracy=float((out.argmax(1) == labels).mean()), **_model_fields(path, x))
            data_bytes = path.read_bytes()
        return corpus.pack({**files, f"{model}.onnx": data_bytes, "results.json": json.dumps(doc, indent=2).encode()})
    return make


def _flip_loss(files: corpus.Files) -> bytes:
    doc = json.loads(files[corpus_release("scenarios")])
    for row in doc["results"]:
        if row.get("loss"):
            row["loss"] = -row["loss"]
            break
    else:
        doc["results"][0]["loss"] = 0.5
    return corpus.pack({**files, corpus_release("scenarios"): json.dumps(doc, indent=2).encode()})


def corpus_release(kind: str) -> str:
    return f"release/{kind}.json"


_copy = corpus._copy


def _edit(rel: str, path: str, val):
    return corpus.with_json(rel, corpus.set_field(path, val))


def _duplicate_first(rel: str, raw: str):
    """A wrong first copy of a key before the right one: read last-wins, the wrong copy would pass unseen."""
    def make(files: corpus.Files) -> bytes:
        text = files[rel].decode()
        at = text.index('"max_abs_error"')
        return corpus.pack({**files, rel: (text[:at] + raw + text[at:]).encode()})
    return make


def _cache_without_data(files: corpus.Files) -> bytes:
    """formats/model.calibration.json with its ranges deleted, and formats.json's hash updated to match."""
    import hashlib

    cache = json.loads(files[CACHE])
    cache["data"] = {}
    raw = json.dumps(cache).encode()
    doc = json.loads(files["formats.json"])
    doc["calibration"]["cache_sha256"] = hashlib.sha256(raw).hexdigest()
    return corpus.pack({**files, CACHE: raw, "formats.json": json.dumps(doc, indent=2).encode()})


CACHE = "formats/model.calibration.json"


def _carried_recipe_duplicate(files: corpus.Files) -> bytes:
    """release/model.onnx whose carried recipe has a wrong first copy of release_id before the right one."""
    import hashlib

    import onnx

    from lab.lessons.lesson07_calibrate_the_deployed_representation import recipe

    model = onnx.load_from_string(files["release/model.onnx"])
    for prop in model.metadata_props:
        if prop.key == recipe.META_RECIPE:
            prop.value = prop.value.replace("{", '{"release_id": "another-release", ', 1)
    raw = model.SerializeToString()
    scen = json.loads(files["release/scenarios.json"])
    scen["model_sha256"] = hashlib.sha256(raw).hexdigest()  # scenarios.json written for this model, as lab does
    return corpus.pack({**files, "release/model.onnx": raw, "release/scenarios.json": json.dumps(scen).encode()})


def _workspace(tmp: Path, reader_source: str = reference.READER_SOURCE):
    """A scratch workspace with the FP32 source and a reader, as lessons 03-08 start: (folder, DigitReader)."""
    from lab import data, workspace

    (tmp / "source.onnx").write_bytes(data.fixture_path("fp32.onnx").read_bytes())
    (tmp / "calibration_reader.py").write_text(reader_source)
    return tmp, workspace.load_module(tmp, "calibration_reader").DigitReader


def _growth_rerun(files: corpus.Files, batch_size: int) -> bytes:
    """Lesson 04's grow cell run again with another BATCH_SIZE; the growth.json cell not run again."""
    import tempfile

    from lab import compare, data
    from lab.lessons import lesson04_more_batches as growth

    with tempfile.TemporaryDirectory() as tmp:
        work, reader_cls = _workspace(Path(tmp))
        ev = data.load_split("evaluation")
        common = dict(make_reader=lambda p: reader_cls(p, batch_size=batch_size), batch_size=batch_size, x=ev.pixels,
                      labels=ev.labels, reference=compare.predict(work / "source.onnx", ev.pixels))
        counts = reference.GROWTH_COUNTS
        growth.grow(work / "source.onnx", work / "growth", counts,
                    stream=growth.narrow_batches(max(counts), batch_size), kind="narrow", **common)
        growth.grow(work / "source.onnx", work / "growth", reference.RIGHT_COUNTS, stream=data.calibration_set("right"),
                    kind="right", **common)
        models = {f"growth/{p.name}": p.read_bytes() for p in (work / "growth").glob("*.onnx")}
    return corpus.pack({**files, **models})


def _lesson05(files: corpus.Files, per_channel: bool = False, qoperator_apart: bool = False) -> bytes:
    """Lesson 05 done again with one change; formats.json written from the new models, its settings as typed."""
    import tempfile

    from lab import compare, convert, data
    from lab.data import file_sha256
    from lab.lessons import lesson05_qdq_vs_qoperator as formats

    with tempfile.TemporaryDirectory() as tmp:
        work, reader_cls = _workspace(Path(tmp))
        out = work / "formats"
        out.mkdir()
        calib = data.calibration_set("right")
        cache = out / "model.calibration.json"
        if qoperator_apart:
            record = convert.quantize(work / "source.onnx", out / "model.qdq.onnx", reader_cls(calib, batch_size=36),
                                       quant_format="QDQ", calibration_cache_path=cache)
            convert.quantize(work / "source.onnx", out / "model.qoperator.onnx", reader_cls(calib[:36], batch_size=36),
                              quant_format="QOperator")
        else:
            record = formats.quantize_both_formats(work / "source.onnx", out, reader_cls(calib, batch_size=36),
                                                   per_channel=per_channel)["QDQ"]
        ev = data.load_split("evaluation")
        doc = json.loads(files["formats.json"])  # settings as the student typed them: per_channel False
        doc.update(formats.compare_formats(out / "model.qdq.onnx", out / "model.qoperator.onnx", ev.pixels, ev.labels,
                                           compare.predict(work / "source.onnx", ev.pixels)))
        doc["calibration"].update(cache_sha256=file_sha256(cache), samples=record.calibration_samples,
                                  batches=record.calibration_batches, sha256=record.calibration_sha256)
        new = {f"formats/{p.name}": p.read_bytes() for p in out.iterdir()}
    return corpus.pack({**files, **new, "formats.json": json.dumps(doc, indent=2).encode()})


DROPS_LAST = reference.READER_SOURCE.replace("if self.position >= len(self.pixels):",
                                             "if self.position + self.batch_size > len(self.pixels):")


def _lab_run_with_reader(source: str) -> bytes:
    """Every lesson run with this reader (lesson 02's exercise), then handed in with ``lab submit``."""
    import tempfile

    original = reference.READER_SOURCE
    with tempfile.TemporaryDirectory() as tmp:
        reference.READER_SOURCE = source
        try:
            work = reference.build(Path(tmp) / "workspace")
        finally:
            reference.READER_SOURCE = original
        return submit("reference", work, Path(tmp) / "out").read_bytes()


GOOD_CHOICE = {"quant_format": "QOperator", "preprocess": True}


# lesson 09's answer by the requirement's last part on every variant (tests/test_toolbox.py checks it on several):
# the smallest file meeting every limit, 9452 bytes, and of the two rows that size the lower worse-family error
RULE_CHOICE = {"quant_format": "QOperator", "activation_type": "QUInt8", "preprocess": True}
# a time this CPU could measure, in rounds: S8S8 QOperator is ORT's slow path on x86-64, the rest about FP32's
TIME = {"median": 1.0, "low": 0.95, "high": 1.05, "rounds": 5}
SLOW = {"median": 3.4, "low": 3.38, "high": 3.45, "rounds": 5}


def _with_toolbox(files: corpus.Files, settings: dict, extra: dict | None = None, table: bool = False) -> bytes:
    return corpus.pack(_toolbox_files(files, settings, extra, table=table))


def _toolbox_files(files: corpus.Files, settings: dict, extra: dict | None = None,
                   outlier_answer: tuple[str, dict] = ("Percentile", {"CalibPercentile": 99.9}),
                   table: bool = False) -> corpus.Files:
    """Lesson 09's choice.onnx and toolbox.json, its candidates cut to the chosen row (the full lesson takes
    minutes; the grader reads the choice), and lesson 08's outliers.onnx and outliers.json. ``settings`` is the
    student's CHOICE; ``extra`` adds top-level keys to toolbox.json (an exploration table a student hands in after
    all); ``outlier_answer`` is lesson 08's METHOD and OPTIONS. ``table``: the whole candidates table instead (the
    lesson's 32 rows, measured, each timed ``TIME`` or, S8S8 QOperator, ``SLOW``), as the requirement's last part
    reads it."""
    import tempfile

    from lab import data, measure
    from lab.lessons.lesson08_the_quantization_toolbox import outliers
    from lab.lessons.lesson08_the_quantization_toolbox import toolbox as tb
    from lab.lessons.lesson09_choosing_a_recipe import choice as ch

    with tempfile.TemporaryDirectory() as tmp:
        work, _ = _workspace(Path(tmp))
        source, choice = work / "source.onnx", work / "choice.onnx"
        tb.build(source, choice, data.calibration_set("right"), settings, scratch_dir=work / "scratch")
        ev = measure.evaluation(source)
        full = {**tb.BASELINE, **settings}
        time = SLOW if table and full["quant_format"] == "QOperator" and full["activation_type"] == "QInt8" else TIME
        check = ch.check_choice(choice, source, "evaluation", time_ratio=time)
        m = measure.measure(choice, ev)
        row = {"name": tb.settings_name(full), "settings": full, **ch.describe(full), **m,
               "by_family": check["by_family"], "accuracy_loss": check["worst_accuracy_loss"],
               "worst_max_abs_error": max(v["max_abs_error"] for v in check["by_family"].values()),
               "size_ratio": check["size_ratio"], "time_ratio": time["median"], "time": dict(time)}
        rows = [row]
        if table:
            rows = [{**r, "time_ratio": t["median"], "time": dict(t)}
                    for r in ch.candidates(source, work, ev, data.calibration_set("right"))
                    for t in [SLOW if r["format"] == "QOperator" and r["activations"] == "QInt8" else TIME]]
        doc = ch.document(
            ev=ev, speed={"threads": 1, "timings": [], "sweep": [], "crossover_width": None}, candidates_=rows,
            choice={"file": "choice.onnx", "sha256": data.file_sha256(choice), "settings": full,
                    "max_abs_error": check["max_abs_error"], "accuracy": check["accuracy"], "bytes": check["bytes"],
                    "by_family": check["by_family"], "accuracy_loss": check["worst_accuracy_loss"],
                    "size_ratio": check["size_ratio"], "time_ratio": time["median"], "time": dict(time),
                    "justification": f"the candidate I picked: {row['name']}, {check['bytes']} bytes, measured on "
                                     "the evaluation split"})
        doc.update(extra or {})
        method, options = outlier_answer
        stuck, model = outliers.stuck_set(), work / "outliers.onnx"
        outliers.build(source, model, stuck, method, options)
        out_doc = outliers.document(ev=ev, model=model, calibration=stuck, method=method, options=options,
                                    batch_size=data.BATCH_SIZE, result=outliers.check(model, ev),
                                    justification=f"{method} {options}: the outlier table's 5 stuck pixels")
        return {**files, "choice.onnx": choice.read_bytes(), "toolbox.json": json.dumps(doc, indent=1).encode(),
                "outliers.onnx": model.read_bytes(), "outliers.json": json.dumps(out_doc, indent=1).encode()}


def _edit_json(files: corpus.Files, rel: str, change) -> bytes:
    doc = json.loads(files[rel])
    change(doc)
    return corpus.pack({**files, rel: json.dumps(doc, indent=1).encode()})


# ----- lesson 10: the camera CNN -----

CAMERA_READER = reference.CAMERA_READER_SOURCE
CAMERA_DOC, CAMERA_MODEL = "camera-release.json", "camera-release.onnx"
# The reader's own copy of the deployed path that forgets the mean/std step: crop, resize, /255, NCHW. Lesson 10's
# check cell refuses it ("a second copy of the preprocessing is not the deployed path").
_OWN_PATH = """

def _my_preprocess(batch):
    window = batch[:, camera.CROP_START:camera.CROP_START + camera.CROP,
                   camera.CROP_START:camera.CROP_START + camera.CROP].astype(np.float32)
    small = np.einsum("ij,njk,lk->nil", camera._RESIZE, window, camera._RESIZE)
    return np.ascontiguousarray((small / np.float32(255))[:, None], np.float32)
"""


def camera_reader(src: str):
    return corpus.with_file("camera_reader.py", src)


def _camera_reader_serves(expression: str, extra: str = "") -> str:
    """The reference FrameReader whose get_next() returns ``expression`` of the batch instead of the deployed path."""
    src = CAMERA_READER.replace("return {self.input_name: camera.preprocess(batch)}",
                                f"return {{self.input_name: {expression}}}")
    assert src != CAMERA_READER, "lesson 10's reader no longer returns camera.preprocess(batch)"
    return src.replace("from lab import camera\n", "import numpy as np\n\nfrom lab import camera\n" + extra, 1)


def _camera_rereleased(edit: Callable[[dict], None]):
    """camera-release.json edited (as a student types into the record before releasing), then released as
    ``release.release`` does: the document written, the model stamped with the edited document's SHA-256."""
    def make(files: corpus.Files) -> bytes:
        import tempfile

        from lab.lessons.lesson10_your_own_model import release

        doc = json.loads(files[CAMERA_DOC])
        edit(doc)
        with tempfile.TemporaryDirectory() as tmp:
            work = Path(tmp)
            draft = work / "draft.onnx"
            draft.write_bytes(files[CAMERA_MODEL])
            paths = release.release(work, draft, doc)
            new = {CAMERA_DOC: paths["document"].read_bytes(), CAMERA_MODEL: paths["model"].read_bytes()}
        return corpus.pack({**files, **new})
    return make


_RELEASED_ANYWAY: dict[str, list[str]] = {}  # mistake name -> what lesson 10's refuse() named for that model


def _released_despite_the_refusal(calibration: str):
    """Lesson 10's release with RECIPE's calibration set to ``calibration``: section 8's check cell refuses it, and
    the student runs the release cell by hand anyway (draft, record, daylight and by_family were set before the
    refusal). camera-release.json is written honestly from that run."""
    name = f"camera_released_on_{calibration}_despite_the_refusal"

    def make(files: corpus.Files) -> bytes:
        import tempfile

        from lab import camera, workspace
        from lab.lessons.lesson10_your_own_model import release

        old = json.loads(files[CAMERA_DOC])
        recipe, seed = {**old["recipe"], "calibration": calibration}, old["acceptance"]["seed"]
        with tempfile.TemporaryDirectory() as tmp:
            work = Path(tmp)
            (work / "camera_reader.py").write_bytes(files["camera_reader.py"])
            reader_cls = workspace.load_module(work, "camera_reader").FrameReader
            source, ev = release.workspace_source(work), camera.load_split("evaluation")
            draft, record = release.build(source, work / "camera", recipe, reader_cls)
            daylight = release.measured(source, draft, ev.image, ev.labels)
            by_family = release.scenarios(source, draft, ev.frames, ev.labels, seed=seed)
            _RELEASED_ANYWAY[name] = release.unmet(recipe, by_family, daylight)
            doc = release.document(source=source, model=draft, recipe=recipe, record=record, by_family=by_family,
                                   daylight=daylight, justification=old["justification"], frames=ev.frames, seed=seed)
            paths = release.release(work, draft, doc)
            new = {CAMERA_DOC: paths["document"].read_bytes(), CAMERA_MODEL: paths["model"].read_bytes()}
        return corpus.pack({**files, **new})

    def lost() -> dict:
        """camera_release's share for each requirement the lesson's own refusal named (the stamp always holds):
        the calibration, each family whose daylight error is over the limit, each family with a scenario that
        needs work, out of its six parts, rounded down to half points as the grader's feedback shows them."""
        import math

        from grader.rubric import points

        named = _RELEASED_ANYWAY[name]
        families = {w: {line.split("(")[1].split(" family")[0] for line in named if line.startswith(w)}
                    for w in ("error (", "scenario ")}
        missed = 1 + len(families["error ("]) + len(families["scenario "])
        full = points("camera", "camera_release")
        return {"camera.camera_release": full - math.floor(full * (6 - missed) / 6 * 2 + 1e-9) / 2}

    return name, make, lost


_ATTRACTIVE = _released_despite_the_refusal("attractive")


def _camera_released_with_reader(src: str):
    """Lesson 10 run past its check cell with this FrameReader: the reader written, its check cell's refusal run
    past, and the release built, measured and released with it (the RECIPE unchanged); camera-release.json is written
    honestly from that run, so it records what this reader served."""
    def make(files: corpus.Files) -> bytes:
        import tempfile

        from lab import camera, workspace
        from lab.lessons.lesson10_your_own_model import release

        old = json.loads(files[CAMERA_DOC])
        recipe, seed = old["recipe"], old["acceptance"]["seed"]
        with tempfile.TemporaryDirectory() as tmp:
            work = Path(tmp)
            (work / "camera_reader.py").write_text(src)
            reader_cls = workspace.load_module(work, "camera_reader").FrameReader
            source, ev = release.workspace_source(work), camera.load_split("evaluation")
            draft, record = release.build(source, work / "camera", recipe, reader_cls)
            daylight = release.measured(source, draft, ev.image, ev.labels)
            by_family = release.scenarios(source, draft, ev.frames, ev.labels, seed=seed)
            doc = release.document(source=source, model=draft, recipe=recipe, record=record, by_family=by_family,
                                   daylight=daylight, justification=old["justification"], frames=ev.frames, seed=seed)
            paths = release.release(work, draft, doc)
            new = {CAMERA_DOC: paths["document"].read_bytes(), CAMERA_MODEL: paths["model"].read_bytes()}
        return corpus.pack({**files, "camera_reader.py": src.encode(), **new})
    return make


# lesson 10's FrameReader that stops before the last, partial batch (360 frames in 32s: 11 batches, 352 frames)
CAMERA_DROPS_LAST = CAMERA_READER.replace("if self.position >= len(self.frames):",
                                          "if self.position + self.batch_size > len(self.frames):")
CAMERA_UNNORMALISED = _camera_reader_serves("_my_preprocess(batch)", extra=_OWN_PATH)
# lesson 06's summarize() with the accuracy as a percentage; lesson 06 then cannot write regression.json (a 0-1 ratio)
METRICS_PERCENT = reference.METRICS_SOURCE.replace('"accuracy": correct / len(labels)',
                                                   '"accuracy": 100 * correct / len(labels)')
# lesson 02's reader whose slice stops one image short of each batch (it still steps batch_size)
READER_SLICE_ONE_SHORT = READER.replace("self.position:self.position + self.batch_size]",
                                        "self.position:self.position + self.batch_size - 1]")
CHARGED_IN_10 = "not charged here: charged once, under 10 your own model: your FrameReader serves"


def _recipe_flag_flipped(key: str):
    def edit(doc: dict) -> None:
        doc["recipe"][key] = not doc["recipe"][key]
    return edit


def _first_verdict_changed(doc: dict) -> None:
    """The exact family's first scenario reported with another verdict than the lesson's table printed."""
    row = doc["scenarios"]["exact"][0]
    row["verdict"] = "needs work" if row["verdict"] == "pass" else "pass"


BASES = {"reference": lambda files: files, "toolbox": lambda files: _toolbox_files(files, GOOD_CHOICE),
         "toolbox_table": lambda files: _toolbox_files(files, RULE_CHOICE, table=True)}


MISTAKES = [
    Mistake("reader_drops_last_partial_batch",
            reader(READER.replace("if self.position >= len(self.pixels):",
                                  "if self.position + self.batch_size > len(self.pixels):")),
            {"reader.contract": 1}, ("the last, partial batch must be served too", "batch_size=100")),
    Mistake("reader_ignores_input_name",
            reader(READER.replace("return {self.input_name: batch}", "return {'pixels': batch}")),
            {"reader.contract": 1}, ("input_name='x'", "the model's input is named 'x'")),
    Mistake("reader_keeps_float64",
            reader(READER.replace("np.asarray(pixels, dtype=np.float32)", "np.asarray(pixels)")),
            {"reader.contract": 1}, ("given float64 pixels", "dtype is float64")),
    Mistake("reader_restarts_after_none",
            reader(READER.replace("            return None", "            self.position = 0\n            return None")),
            {"reader.contract": 1}, ("must keep returning None",)),
    Mistake("reader_ends_with_an_empty_dict",
            reader(READER.replace("            return None", "            return {}", 1)),
            {"reader.contract": 1}, ("ended with an empty dict, not None",)),
    Mistake("reader_one_image_per_call",
            reader(READER.replace("self.position + self.batch_size]", "self.position + 1]")
                   .replace("self.position += self.batch_size", "self.position += 1")),
            {"reader.contract": 1}, ("serve batch_size images per call",)),
    Mistake("reader_without_rewind",
            reader(READER.replace("    def rewind(self):\n        self.position = 0\n", "")),
            {"reader.contract": 1}, ("no rewind() method",)),
    Mistake("reader_never_ends_charged_once", reader(corpus.READER_HEAD + corpus.NEVER_ENDS),
            {"reader.contract": 1},
            ("never returned None", "not charged here: charged once, under 02 the calibration reader")),
    Mistake("right_calibrated_on_evaluation", _right_on_evaluation,
            {"calibration.range_seen": 1}, ("a hash of the evaluation split",)),
    # lesson 03's loop calibrated 'right' on the wide set: charged under range_seen, named by the reader's check.
    # The predictions ask about the lesson's sets, not this model: a right prediction keeps its point.
    Mistake("right_calibrated_on_the_wide_set", _right_on("wide"),
            {"calibration.range_seen": 1},
            ("a hash of the 'wide' calibration set", "right.onnx was calibrated on other data than the 'right' set; "
                                                     "not charged here: charged once, under 03 narrow / right / wide")),
    # the same slip for 'narrow' (calibrated on the right set): its diagnosis is not judged, range_seen charges it
    Mistake("narrow_calibrated_on_the_right_set", _right_on("right", model="narrow"),
            {"calibration.range_seen": 1},
            ("narrow: not judged, narrow.onnx was calibrated on other data than the narrow set (not charged here",)),
    # lesson 06's file missing zeroes the checks that read it, the FP32 gate among them: judged on the student's own
    # lesson 06 run, it is no free point (issue 38)
    Mistake("regression_json_missing", corpus.without("regression.json"),
            {"acceptance.summaries": 3, "acceptance.probabilities": 1, "acceptance.decisions": 2,
             "acceptance.fp32_gate": 1}, ("regression.json is not in the submission",)),
    Mistake("summarize_transposed", corpus.with_file("metrics.py", corpus.METRICS_TRANSPOSED),
            {"acceptance.summarize_code": 1.5}, ("confusion is transposed",)),
    # a last-minute edit to metrics.py that does not even import: charged once, under summarize_code
    Mistake("metrics_does_not_import", corpus.with_file("metrics.py", reference.METRICS_SOURCE.replace(
        "    ### BEGIN SOLUTION\n", "    ### BEGIN SOLUTION\n  predictions = list(predictions)\n", 1)),
            {"acceptance.summarize_code": 3}, ("metrics.py could not be run", "IndentationError",
                                               "not charged here: charged once, under 06 acceptance")),
    # metrics.py reads a file of the workspace at import: only the .py files reach the sandbox; the message names
    # the path as the student wrote it and their line, never the grader's scratch folder (the same in every run)
    Mistake("metrics_reads_a_workspace_file", corpus.with_file("metrics.py", "import json\n\nNAMES = json.load(open("
                                                               "'../label_names.json'))\n" + reference.METRICS_SOURCE),
            {"acceptance.summarize_code": 3}, ("No such file or directory: '../label_names.json' (metrics.py, line 3)",
                                               "the grader runs your .py files alone, in an empty folder")),
    Mistake("scenario_loss_sign_flipped", _flip_loss, {"release.scenarios": 0.5},
            ("is not FP32 accuracy minus INT8 accuracy",)),
    # lesson 04: the grow cell re-run with BATCH_SIZE = 16 after growth.json was written for 8
    Mistake("growth_models_from_another_batch_size", lambda f: _growth_rerun(f, batch_size=16), {"growth.series": 3},
            ("is not what the first 1 batch(es) of 8 of the narrow stream give", "Re-run lesson 04 from the top")),
    # lesson 05: the ORT guide's per-channel recipe in the conversion, per_channel False typed into formats.json
    Mistake("formats_per_channel_reported_as_false", lambda f: _lesson05(f, per_channel=True),
            {"formats.two_formats": 1}, ("settings/per_channel is False, but formats/model.qdq.onnx has per-channel",)),
    # lesson 05: the QOperator model converted on its own, from one batch ("the second format needs no more"),
    # not the cache
    Mistake("formats_from_two_calibrations", lambda f: _lesson05(f, qoperator_apart=True), {"formats.same_scales": 1},
            ("that format was calibrated apart from the cache",)),
    # lesson 07 run with a reader that drops the last partial batch: the release saw 432 of the recipe's 450 images
    Mistake("lab_run_with_a_reader_that_drops_the_last_batch", lambda f: _lab_run_with_reader(DROPS_LAST),
            {"reader.contract": 1}, ("the last, partial batch must be served too", "recipe.json says 450 calibration "
                                     "images, but your DigitReader serves 432", "not charged here: charged once, "
                                     "under 02 the calibration reader")),
    # lesson 08: the choice picked by the lowest error instead of the smallest file; size is charged once
    # (one of choice_meets' six parts: static, accuracy on each of the two families, size, latency, and the smallest
    # such file, not judged for a choice that misses a limit)
    Mistake("toolbox_choice_misses_the_size", lambda f: _with_toolbox(f, {}), {"toolbox.choice_meets": 0.5},
            ("size ratio", "NO", "misses the requirement on size only", "not charged here: charged once, under 09 "
                                                                        "choosing a recipe"),
            base="toolbox"),
    # lesson 09 (issue 36): a choice that meets every limit but is not the file the requirement's last part picks
    # from the whole table: one part of choice_meets' six (static, accuracy on each family, size, latency, the rule)
    Mistake("toolbox_choice_loses_the_tie_in_size",  # same 9452 bytes, the higher max abs error on the worse family
            lambda f: _with_toolbox(f, {**RULE_CHOICE, "reduce_range": True}, table=True),
            {"toolbox.choice_meets": 0.5},
            ("a tie in size goes to the lower max abs error on the worse family: QOperator, per-tensor weights, "
             "QUInt8 activations, reduce_range no, pre-processed yes", "has the same 9452 bytes", ": NO"),
            base="toolbox_table"),
    Mistake("toolbox_choice_not_the_smallest",  # QOperator per-tensor QUInt8, not pre-processed: meets every limit
            lambda f: _with_toolbox(f, {"quant_format": "QOperator", "activation_type": "QUInt8"}, table=True),
            {"toolbox.choice_meets": 0.5},
            ("not the smallest file that meets every limit", "meets them with 9452 bytes, against your choice's 9765"),
            base="toolbox_table"),
    Mistake("toolbox_choice_per_channel_reduce_range",  # the safe-looking per-channel row: meets every limit, larger
            lambda f: _with_toolbox(f, {"quant_format": "QOperator", "activation_type": "QUInt8", "per_channel": True,
                                        "reduce_range": True}, table=True),
            {"toolbox.choice_meets": 0.5},
            ("not the smallest file that meets every limit", "against your choice's 10296"), base="toolbox_table"),
    # lesson 08: MinMax through the stuck pixels; the ruler ends at 12.5 and the error is over the limit on both
    # families (three of outliers_meets' five parts)
    Mistake("outliers_calibrated_with_minmax",
            lambda f: corpus.pack(_toolbox_files(f, GOOD_CHOICE, outlier_answer=("MinMax", {}))),
            # at the 0.2 error limit MinMax's error (0.188) passes: its ruler alone rules it out
            {"outliers.outliers_meets": 0.5}, ("input ruler: it ends at 12.5",),
            base="toolbox"),
    # lesson 08: outliers.json says Percentile 99.99 for a model calibrated with 99.9
    Mistake("outliers_misreported_percentile",
            lambda f: _edit_json(_toolbox_files(f, GOOD_CHOICE), "outliers.json",
                                 lambda d: d["options"].update(CalibPercentile=99.99)),
            {"outliers.outliers_reported": 0.5}, ("method and options (ORT's calibrator",), base="toolbox"),

    # lesson 10: a FrameReader that lays the batch out NHWC [n, 16, 16, 1]: one contract finding, half its point
    Mistake("camera_reader_serves_nhwc",
            camera_reader(_camera_reader_serves("camera.preprocess(batch).transpose(0, 2, 3, 1).copy()")),
            {"camera.camera_reader": 0.5}, ("FrameReader breaks the contract", "its batches have shapes",
                                            "expected [n, 1, 16, 16]")),
    # lesson 10: the sensor frames handed over as they come (uint8 [n, 32, 32]): the shape and the dtype
    Mistake("camera_reader_serves_raw_frames", camera_reader(_camera_reader_serves("batch")),
            {"camera.camera_reader": 1}, ("its batches have shapes", "expected float32")),
    # lesson 10: the reader's own copy of the path without the mean/std step (crop, resize, /255, NCHW): the shapes
    # and dtype are right, the values are not; the sandbox's reader task reports their SHA-256 (issue 26)
    Mistake("camera_reader_skips_normalisation",
            camera_reader(_camera_reader_serves("_my_preprocess(batch)", extra=_OWN_PATH)),
            {"camera.camera_reader": 0.5},
            ("FrameReader breaks the contract: its batches are not lab.camera.preprocess of the frames (values "
             "differ from the deployed path's: the first batch's mean", "lab.camera.preprocess's")),
    # lesson 10: the release's recipe says per-tensor for a per-channel model (RECIPE retyped after the build)
    Mistake("camera_recipe_does_not_match_its_model", _camera_rereleased(_recipe_flag_flipped("per_channel")),
            {"camera.camera_reported": 0.5},
            ("camera-release.json does not match camera-release.onnx in: recipe (against the graph",
             "per_channel=True")),
    # lesson 10: the recipe says pre_process is off for a model whose BatchNorms are folded
    Mistake("camera_recipe_says_not_pre_processed", _camera_rereleased(_recipe_flag_flipped("pre_process")),
            {"camera.camera_reported": 0.5}, ("recipe (against the graph", "pre_process=True")),
    # lesson 10: a justification that cites the prose's run, none of the released model's own numbers
    Mistake("camera_justification_cites_no_number_of_the_release",
            _camera_rereleased(lambda d: d.update(justification="reduce_range, as the lesson's prose run showed "
                                                                "(0.9577 on daylight)")),
            {"camera.camera_reported": 0.5}, ("justification (cites the released model's own numbers",)),
    # lesson 10: one scenario's verdict typed against what the verdict table (and the model) show
    Mistake("camera_scenario_verdict_misreported", _camera_rereleased(_first_verdict_changed),
            {"camera.camera_reported": 0.5}, ("scenarios (verdicts and accuracies, both families)",)),
    # lesson 10: the attractive photographs chosen for the release; the check cell refuses it and the student runs
    # the release cell by hand anyway. camera_release loses a part for each requirement the refusal named.
    Mistake(_ATTRACTIVE[0], _ATTRACTIVE[1], lost=_ATTRACTIVE[2],
            words=("the released model, measured here, misses: calibrated on the camera's frames",)),
    # issue 38, one mistake charged once, where it was made, with no false finding:
    # lesson 10's FrameReader drops the last partial batch and the student releases with it: the sizes, once (not
    # its shapes, nor rewind() and a second reader, which serve what the first pass served); camera-release.json
    # honestly records what that reader served, which camera_reported names without a charge
    Mistake("camera_reader_drops_the_last_batch_released_with_it", _camera_released_with_reader(CAMERA_DROPS_LAST),
            {"camera.camera_reader": 0.5},
            ("FrameReader breaks the contract: it served 11 batches (352 of 360 frames",
             "expected 12 batches of 32, the last 8. Run",
             "its calibration records what your FrameReader served (352 frames", CHARGED_IN_10)),
    # lesson 10's FrameReader whose rewind() does nothing: one finding, the rewind
    Mistake("camera_reader_rewind_does_nothing",
            camera_reader("pass".join(CAMERA_READER.rsplit("self.position = 0", 1))),  # rewind()'s body
            {"camera.camera_reader": 0.5}, ("rewind() did not serve the same batches",)),
    # lesson 10's FrameReader without the mean/std step, run past the check cell into the release: charged once, under
    # camera_reader; the release's ruler and what follows from it, and the record of what it served, are named
    Mistake("camera_reader_skips_normalisation_released_with_it", _camera_released_with_reader(CAMERA_UNNORMALISED),
            {"camera.camera_reader": 0.5},
            ("its batches are not lab.camera.preprocess of the frames",
             "meets the release's requirements but for what follows from its calibration, calibrated on the camera's "
             "frames", "it was calibrated with your FrameReader", CHARGED_IN_10)),
    # lesson 06's summarize() returns the accuracy as a percentage: one mistake (on every list it shows), one charge
    Mistake("summarize_accuracy_as_percentage",
            lambda f: corpus.pack({**{k: v for k, v in f.items() if k != "regression.json"},
                                   "metrics.py": METRICS_PERCENT.encode()}),
            {"acceptance.summarize_code": 1.5},
            ("accuracy is a percentage", "(a 0-1 ratio)",
             "not charged here: charged once, under 06 acceptance: summarize() counts right")),
    # lesson 02's reader slices one image short of each batch: its batch sizes, once (the images it does serve are
    # the given ones, in order: that rule holds)
    Mistake("reader_slice_one_short", reader(READER_SLICE_ONE_SHORT), {"reader.contract": 1},
            ("batches of batch_size, the last one partial, every image once", "served 10 x 35")),
]

# What a seeded fuzz of the reference hand-in found unchecked: each now recomputed, or refused by its schema.
FUZZ_FINDINGS = [
    Mistake("fuzz_growth_model_swapped", _copy("growth/narrow-001.onnx", "growth/narrow-064.onnx"),
            {"growth.series": 1}, ("growth/narrow-064.onnx: its input ruler", "its bytes are those of "
                                                                            "growth/narrow-001.onnx")),
    Mistake("fuzz_growth_batch_size_8_to_7", _edit("growth.json", "settings.batch_size", 7), {"growth.series": 1},
            ("settings/batch_size is 7, narrow_stream/batch_size 8",)),
    Mistake("fuzz_formats_size_bytes", _edit("formats.json", "formats.QDQ.size_bytes", 999),
            {"formats.two_formats": 1}, ("formats/QDQ/size_bytes is 999",)),
    Mistake("fuzz_formats_predictions_differ_0_to_10", _edit("formats.json", "difference.predictions_differ", 10),
            {"formats.elementwise": 1}, ("predictions that differ: 0 (reported 10)",)),
    Mistake("fuzz_calibration_cache_data_deleted", _cache_without_data, {"formats.same_scales": 1},
            ("formats/model.calibration.json field 'data' holds no ranges",)),
    Mistake("fuzz_scenarios_limit", _edit(corpus_release("scenarios"), "limit", 0.05), {"release.scenarios": 0.5},
            ("limit is 0.05; the lab's (lab.lessons.lesson07_calibrate_the_deployed_representation.recipe.LIMIT) "
             "is 0.01",)),
    Mistake("fuzz_results_model_sha256", _edit("results.json", "sets.narrow.model_sha256", "0" * 64),
            {"calibration.quantized": 1}, ("results.json's model_sha256 is not the hash of narrow.onnx",)),
    Mistake("fuzz_results_accuracy", _edit("results.json", "sets.right.accuracy", 0.9),
            {"calibration.max_abs_error": 1}, ("results.json's sets.right: accuracy is 0.9, recomputed 0.9750",)),
    # lesson 03's remaining fields, each recomputed from the model in the check it belongs to
    Mistake("fuzz_results_interval", _edit("results.json", "sets.right.interval", [0.0, 1.5]),
            {"calibration.ruler_reported": 1}, ("sets/right/interval/1 is 1.5, recomputed from right.onnx 1",)),
    Mistake("fuzz_results_hidden_layer_clipped", _edit("results.json", "sets.wide.hidden_layer.clipped_fraction", 0.2),
            {"calibration.ruler_reported": 1}, ("sets/wide/hidden_layer/clipped_fraction is 0.2, recomputed from "
                                                "wide.onnx 0",)),
    Mistake("fuzz_results_clipped_fraction", _edit("results.json", "sets.narrow.clipped_fraction", 0.0),
            {"calibration.diagnosis": 1}, ("sets/narrow/clipped_fraction is 0, lab.compare.diagnose gives",)),
    Mistake("fuzz_results_grid_used_fraction", _edit("results.json", "sets.right.grid_used_fraction", 0.5),
            {"calibration.diagnosis": 0.5}, ("sets/right/grid_used_fraction is 0.5, lab.compare.diagnose gives 1",)),
    Mistake("fuzz_regression_size_bytes", _edit("regression.json", "models.candidate.evidence.size_bytes", 5000),
            {"acceptance.summaries": 1}, ("evidence size_bytes 5000, the file has",)),
    Mistake("fuzz_regression_limit", _edit("regression.json", "limit", 0.02), {"acceptance.decisions": 0.5},
            ("regression.json limit is 0.02; lesson 06's is 0.01",)),
    # lesson 08's exploration tables stay in toolbox-tables.json (not handed in): the grader cannot check them
    Mistake("toolbox_exploration_table_handed_in",
            lambda f: _with_toolbox(f, GOOD_CHOICE, extra={"excluded": {"name": "fc3.matmul left in FP32",
                                                                        "excluded": ["fc3.matmul"], "bytes": 1e308}}),
            words=("toolbox.json", "'excluded' was unexpected"), base="toolbox", status="invalid"),
    # the recipe carried in the released model's metadata is read by the same strict loader: last-wins would pass
    Mistake("fuzz_carried_recipe_duplicate_key", _carried_recipe_duplicate, {"release.metadata": 1},
            ("is not valid JSON (key 'release_id' appears twice",)),
    Mistake("fuzz_duplicate_key_wrong_first_copy", _duplicate_first("results.json", '"max_abs_error": 0.01, '),
            words=("results.json: not valid JSON (key 'sets/narrow/max_abs_error' appears twice",),
            status="invalid"),
]
ALL = MISTAKES + FUZZ_FINDINGS


class Graded:
    """The reference hand-in and each mistake made from it, graded when a test first asks (``-k`` grades only what
    it selects): ``base(name)`` and ``result(mistake)``, both cached for the module."""

    def __init__(self, files: corpus.Files, folder: Path):
        self.files, self.folder = files, folder
        self.bases: dict[str, tuple[corpus.Files, core.GradeResult]] = {}
        self.results: dict[str, core.GradeResult] = {}

    def applies(self, m: Mistake) -> bool:
        return not (m.name.startswith(("scenario", "fuzz_scenarios", "fuzz_carried"))
                    and "release/scenarios.json" not in self.files)

    def base(self, name: str):
        if name not in self.bases:
            base = BASES[name](dict(self.files))
            path = self.folder / f"base-{name}.zip"
            path.write_bytes(corpus.pack(base))
            self.bases[name] = (base, core.grade(path, credited=False))  # the reference's, under its name
        return self.bases[name]

    def result(self, m: Mistake):
        if m.name not in self.results:
            path = self.folder / f"{m.name}.zip"
            path.write_bytes(m.make(dict(self.base(m.base)[0])))
            self.results[m.name] = core.grade(path, credited=False)
        return self.results[m.name]


@pytest.fixture(scope="module")
def graded(tmp_path_factory) -> Graded:
    if not sandbox.bwrap_available():
        pytest.skip("student code runs only under bubblewrap")
    work = reference.build(tmp_path_factory.mktemp("reference") / "workspace")
    good_zip = submit("reference", work, tmp_path_factory.mktemp("handed-in"))
    return Graded(corpus.read_zip(good_zip), tmp_path_factory.mktemp("mistakes"))


def _points(result) -> dict:
    return {f"{c.part}.{c.name}": c.points for c in result.checks}


@pytest.mark.parametrize("mistake", ALL, ids=[m.name for m in ALL])
def test_each_honest_mistake_loses_its_points_once_and_says_why(graded, mistake):
    if not graded.applies(mistake):
        pytest.skip("that lesson is not in this lab")
    result, good = graded.result(mistake), graded.base(mistake.base)[1]
    if mistake.base != "reference":  # a base made here must itself earn full marks (the reference's test is elsewhere)
        assert all(c.passed for c in good.checks), [c.message for c in good.checks if not c.passed]
    assert result.status == mistake.status, result.reason
    if mistake.status == "graded":
        before, after = _points(good), _points(result)
        lost = {k: round(before[k] - after.get(k, 0), 4) for k in before if round(before[k] - after.get(k, 0), 4)}
        expected = mistake.lost() if callable(mistake.lost) else mistake.lost
        assert lost == expected, (lost, [c.message for c in result.checks if not c.passed])
    text = (result.reason + result.to_markdown() + "\n".join(c.message for c in result.checks)
            + "\n".join(result.notes))
    for words in mistake.words:
        assert words in text, (words, text[-3000:])
    assert "grader-child" not in text and "grader-fs" not in text, text[-3000:]  # no path of the grader's own


def test_reference_scores_whole_or_half_points_only(graded):
    results = [graded.result(m) for m in ALL if graded.applies(m)]
    for r in [*(b for _, b in graded.bases.values()), *results]:
        assert all(c.points * 2 == int(c.points * 2) for c in r.checks)
        assert "1.33" not in r.to_markdown() and "0.67" not in r.to_markdown()


def test_feedback_names_checks_by_what_they_ask(graded):
    md = graded.result(next(m for m in ALL if m.name == "summarize_transposed")).to_markdown()
    assert "summarize() counts right, with actual digits as rows" in md and "`summarize_code`" not in md


def test_expected_sizes():
    from grader.lessons.lesson02_the_calibration_reader import expected_sizes

    assert expected_sizes(360, 100) == [100, 100, 100, 60] and expected_sizes(10, 3) == [3, 3, 3, 1]
    assert expected_sizes(360, 36) == [36] * 10 and np.sum(expected_sizes(7, 8)) == 7


def test_a_check_that_could_not_judge_keeps_its_points_but_is_no_pass(graded):
    """metrics.py that cannot run is charged once, under summarize_code; the hidden check on the instructor's lists
    keeps its point but judged nothing: Gradescope shows it failed, and the class report's pass rates leave it out."""
    result = graded.result(next(m for m in MISTAKES if m.name == "metrics_reads_a_workspace_file"))
    hidden = next(c for c in result.checks if c.name == "secret_summarize")
    assert hidden.points == hidden.max_points and not hidden.assessed
    assert result.to_dict()["checks"][result.checks.index(hidden)]["assessed"] is False
    status = {t["name"]: t["status"] for t in result.to_gradescope()["tests"]}
    assert [s for n, s in status.items() if "instructor's lists" in n or "secret" in n] == ["failed"], status
    rates = {r.name: r for r in items.check_rates({"someone": result.to_dict()})}
    assert "secret_summarize" not in rates and rates["summarize_code"].passed == 0
