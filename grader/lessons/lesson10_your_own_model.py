"""Lesson 10: the camera CNN. The FrameReader is driven in the sandbox, the released model measured here on both
kernel families and camera-release.json recomputed from the fixtures. ``lesson_sets`` (the lesson's own two
conversions) is what grader.lessons.predictions judges lesson 10's prediction against.

The sandbox's reader task records batch sizes, shapes, dtypes and keys, and of the served values their SHA-256 (the
float32 bytes of every batch, in order) and the first batch's mean and std, not the values themselves (it keeps rows
only for the MLP's [N, 64] pixels). ``camera_reader`` compares that hash with ``lab.camera.preprocess`` of the same
frames: the deployed path is deterministic numpy, per batch or all at once the same bytes, so a reader with its own
copy of the path (one that skips the mean/std step, say) is told apart. The released model is proven through its
ruler too: ORT's calibrator on the camera frames through ``lab.camera.preprocess`` must give its input ruler.
"""
from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np

from grader import own_code, sandbox
from grader.context import SOFTMAX_STEP, Context, charged_under, check, close, value
from grader.group import Group
from lab import camera, graph, variant
from lab.convert import calibrated_ranges
from lab.data import EPSILON, data_sha256, file_sha256
from lab.lessons.lesson08_the_quantization_toolbox import toolbox
from lab.lessons.lesson10_your_own_model import camera_path, release
from lab.prose import cites
from lab.readers import ArrayReader

PART = "camera"
READER, MODEL, DOC = "camera_reader.py", release.MODEL, release.FILE
FLIPS = 2  # frames near a decision boundary that may flip on another CPU (accuracy); see lesson 09's grader
PRINTED = 1e-4  # the rounding of a printed ratio


def _request(ctx: Context, frames: np.ndarray) -> sandbox.Request:
    drive = {"name": "lesson", "n": int(len(frames)), "batch_size": camera_path.BATCH_SIZE,
             "input_name": camera_path.INPUT, "dtype": "uint8"}
    return (ctx.sub.root, {"task": "reader", "module": "camera_reader", "class": "FrameReader", "input": "input.npz",
                           "drives": [drive], "max_batches": 1000}, {"input.npz": {"pixels": frames}}, ctx.limits)


def frame_reader_runs(ctx: Context) -> list[sandbox.Request]:
    """The reader run ``camera_reader`` asks for (its group's ``request``, planned ahead), if it will run the reader."""
    if not ctx.has(READER) or own_code.refusal_for(ctx.sub.path(READER)):
        return []
    return [_request(ctx, camera_path.camera_frames())]


# The rules of FrameReader's contract, each judged once (``reader_findings``): a mistake is charged under the first
# rule it breaks, and a rule that only follows from another's finding is not judged (a pass that stops early has no
# partial last batch to shape; rewind() and a second reader are held to the first pass, not to the expected sizes).
# The ones whose finding means the reader served other values than the deployed path (``SERVED``): a release
# calibrated with that reader is named under camera_release and camera_reported, not charged again.
SIZES, SHAPES, DTYPE, KEY, VALUES, NONE_AGAIN, REWIND, FRESH = (
    "sizes", "shapes", "dtype", "key", "values", "none_again", "rewind", "fresh")
SERVED = frozenset({SIZES, SHAPES, DTYPE, KEY, VALUES})


def reader_findings(drive: dict, n: int, frames: np.ndarray | None = None) -> list[str]:
    """What the drive's record says the reader broke (``rule_findings``' words, in order)."""
    return [why for _, why in rule_findings(drive, n, frames)]


def rule_findings(drive: dict, n: int, frames: np.ndarray | None = None) -> list[tuple[str, str]]:
    """(rule, what the reader did) for each rule the drive's record says the reader broke: sizes, shapes, dtype, key,
    the end, rewind and a fresh reader; given the ``frames`` it was driven on, also the served values against
    ``lab.camera.preprocess`` of the frames it served (the first ones, judged only when the shapes and dtype are
    right: else those findings already name the mistake)."""
    b = camera_path.BATCH_SIZE
    sizes = [min(b, n - i) for i in range(0, n, b)]
    first, out = drive.get("first", {}), []
    served = first.get("sizes", [])
    shapes = [tuple(s) for s in first.get("shapes", [])]
    if served != sizes:
        out.append((SIZES, f"it served {len(served)} batches ({sum(s for s in served if s > 0)} of {n} frames: "
                           f"{served[:4]}...); expected {len(sizes)} batches of {b}, the last {sizes[-1]}"))
    # the batch dimension is the sizes rule's: here only each batch's [1, 16, 16]
    shaped = bool(shapes) and all(len(s) == 4 and s[1:] == (1, camera.SIZE, camera.SIZE) for s in shapes)
    if not shaped:
        out.append((SHAPES, f"its batches have shapes {first.get('shapes')}; expected [n, 1, {camera.SIZE}, "
                            f"{camera.SIZE}] (lab.camera.preprocess of each batch of frames)"))
    if first.get("dtypes") != ["float32"]:
        out.append((DTYPE, f"its batches are {first.get('dtypes')}; expected float32"))
    if [list(k) for k in first.get("keys", [])] != [[camera_path.INPUT]]:
        out.append((KEY, f"its batches are keyed {first.get('keys')}; expected {camera_path.INPUT!r} (input_name)"))
    count = sum(served) if served and -1 not in served else 0
    if frames is not None and shaped and first.get("dtypes") == ["float32"] and 0 < count <= n:
        out += [(VALUES, why) for why in _values_findings(first, frames[:count])]
    if drive.get("after_none") is not False:
        out.append((NONE_AGAIN, "get_next() did not keep returning None after the end"))
    for again, who in ((REWIND, "rewind()"), (FRESH, "a second FrameReader")):
        got = drive.get(again, {})
        if got.get("sizes") != served or got.get("sha256", first.get("sha256")) != first.get("sha256"):
            out.append((again, f"{who} did not serve the same batches as the first pass"))
    return out


def _values_findings(first: dict, frames: np.ndarray) -> list[str]:
    """The served values' hash against ``lab.camera.preprocess`` of the frames, with the first batch's mean and std
    beside the deployed path's when they differ."""
    if first.get("sha256") == camera_path.served_sha256(frames):
        return []
    want = camera.preprocess(frames[:camera_path.BATCH_SIZE]).astype(np.float64)
    got = first.get("first_batch") or {}

    def num(v) -> str:
        return f"{v:.4g}" if isinstance(v, (int, float)) else str(v)

    return [f"its batches are not lab.camera.preprocess of the frames (values differ from the deployed path's: the "
            f"first batch's mean {num(got.get('mean'))} and std {num(got.get('std'))}, lab.camera.preprocess's "
            f"{want.mean():.4g} and {want.std():.4g}); call lab.camera.preprocess on each batch of frames, not a "
            "copy of its steps"]


def _reader(ctx: Context) -> tuple:
    """camera_reader: FrameReader keeps the reader contract on the camera's frames (driven in the sandbox). Also what
    it served on them (the drive's first pass) when that is charged here as not the deployed path's, else None."""
    refused = own_code.refusal_for(ctx.sub.path(READER), READER)
    if refused:
        return check(PART, "camera_reader", 0, refused), None
    child = sandbox.run(*frame_reader_runs(ctx)[0])
    if child.status != "ok" or not child.data.get("ok"):
        return check(PART, "camera_reader", 0, f"the camera reader could not be run: "
                     f"{child.message or child.data.get('error', '')}"), None
    drive = child.data["drives"][0]
    found = rule_findings(drive, len(camera_path.camera_frames()), camera_path.camera_frames())
    served = None
    if SERVED & {rule for rule, _ in found}:
        served = drive.get("first", {})
    return check(PART, "camera_reader", max(0.0, 1 - 0.5 * len(found)),
                 "FrameReader serves the camera's frames as lesson 10 asks" if not found else
                 "FrameReader breaks the contract: " + "; ".join(why for _, why in found)
                 + ". Run lesson 10's check cell, camera_path.check_reader(FrameReader), to see it"), served


def run(ctx: Context) -> list:
    served = None
    if ctx.has(READER):
        reader_check, served = _reader(ctx)
    else:
        reader_check = check(PART, "camera_reader", 0, f"{READER} is missing; lesson 10 writes it")
    results = [reader_check]
    results += _release(ctx, served) if ctx.has(DOC) and ctx.has(MODEL) else [
        check(PART, name, 0, f"{DOC} and {MODEL} are needed; lesson 10's last cells write them")
        for name in ("camera_release", "camera_reported")]
    return results


def _calibrated_on_camera(path) -> tuple[bool, str]:
    """ORT's calibrator on the camera frames through the deployed path gives the model's input ruler (one step)."""
    x = camera.preprocess(camera_path.camera_frames())
    lo, hi = calibrated_ranges(camera.model_path(), ArrayReader(x, camera_path.BATCH_SIZE, camera_path.INPUT))[
        camera_path.INPUT]
    ok, got = _ruler_from(path, lo, hi)
    return ok, (f"its input ruler {got} against ORT's calibrator on the camera's frames through "
                f"lab.camera.preprocess, [{lo:.4g}, {hi:.4g}]")


def _ruler_from(path, lo: float, hi: float) -> tuple[bool, str]:
    """Is the model's input ruler the one ORT's MinMax calibrator makes of values spanning [lo, hi] (the interval
    widened to hold 0, within one step)? And the ruler, as feedback shows it."""
    ruler = graph.input_ruler(path, camera_path.INPUT)
    got_lo, got_hi = ruler.interval
    ok = abs(got_lo - min(lo, 0.0)) <= ruler.scale + EPSILON and abs(got_hi - max(hi, 0.0)) <= ruler.scale + EPSILON
    return ok, f"[{got_lo:.4g}, {got_hi:.4g}]"


def _with_the_reader(path, served: dict | None) -> str:
    """'' unless the model's input ruler is the one ORT's calibrator makes of what the student's FrameReader served
    (``served``: its first pass, charged under camera_reader as not the deployed path's); then how a later check
    names what follows from calibrating with that reader, without a charge."""
    span = (served or {}).get("range") or []
    if len(span) != 2 or not _ruler_from(path, *span)[0]:
        return ""
    return (f"calibrated with your FrameReader, whose batches are not the deployed path's (its input ruler "
            f"{_ruler_from(path, *span)[1]} is the range they span, [{span[0]:.4g}, {span[1]:.4g}]; "
            f"{charged_under(PART, 'camera_reader')})")


def _release(ctx: Context, served: dict | None = None) -> list:
    doc, path = ctx.doc(DOC), ctx.sub.path(MODEL)
    ctx.model(MODEL)
    ev = camera.load_split("evaluation")
    source = camera.model_path()
    by_family = release.scenarios(source, path, ev.frames, ev.labels, seed=value(doc, "acceptance.seed") or 0)
    daylight = release.measured(source, path, ev.image, ev.labels)   # after: the daylight frames ran in by_family
    return [_meets(doc, path, daylight, by_family, served),
            _reported(ctx, doc, path, daylight, by_family, ev, served)]


def _meets(doc: dict, path, daylight: dict, by_family: dict, served: dict | None = None):
    """camera_release: the released model, measured here: stamped with its record, calibrated on the camera's frames,
    of the form the lesson measured (folded, per-channel, QDQ: read from the graph), daylight error within the limit
    and no judged scenario needing work, on both families.

    A model calibrated with a FrameReader camera_reader charged for serving other values (``_with_the_reader``): its
    ruler, and the daylight error and scenarios that follow from it, are named here, not charged again."""
    release_id, sha = release.stamp_of(path)
    on_camera, ruler_text = _calibrated_on_camera(path)
    ruler = f"calibrated on the camera's frames ({ruler_text})"
    parts = {"the model's metadata names camera-release.json (release id and SHA-256)":
                 release_id == release.RELEASE_ID and sha == file_sha256_of_doc(path), ruler: on_camera}
    for problem in release.form_problems(_recipe_in_graph(path)):
        parts[f"the form the lesson measured ({problem}, as the graph shows)"] = False
    measured = {f"daylight max abs error {v['max_abs_error']:.3f} within {release.MAX_ERROR} ({f} family)":
                v["max_abs_error"] <= release.MAX_ERROR + EPSILON for f, v in daylight.items()}
    for f, rows in by_family.items():
        bad = [r.name for r in rows if r.needs_work]
        measured[f"no judged scenario needs work ({f} family{': ' + ', '.join(bad) if bad else ''})"] = not bad
    parts.update(measured)
    # the parts that follow from the calibration: the ruler, then the daylight errors and the scenarios
    named = _with_the_reader(path, served) if not on_camera else ""
    follows = [k for k in (ruler, *measured) if not parts[k]] if named else []
    missed = [k for k, ok in parts.items() if not ok and k not in follows]
    return check(PART, "camera_release", (len(parts) - len(missed)) / len(parts),
                 ("the released model, measured here, meets the release's requirements" if not missed else
                  "the released model, measured here, misses: " + "; ".join(missed))
                 + (f"{' but for' if not missed else '; and'} what follows from its calibration, {'; '.join(follows)}"
                    f": it was {named}" if follows else ""))


def file_sha256_of_doc(path) -> str:
    return file_sha256(path.parent / DOC)


def _recipe_in_graph(path) -> dict:
    """The recipe as the graph shows it: format, per-channel, reduce_range, pre-processed."""
    ops = graph.op_counts(path)
    scales = camera_path.weight_scales(path)
    return {"quant_format": graph.quant_format(path), "per_channel": any(s["scales"] > 1 for s in scales),
            "reduce_range": toolbox.max_abs_weight(path) <= 64, "pre_process": "BatchNormalization" not in ops}


def _reported(ctx: Context, doc: dict, path, daylight: dict, by_family: dict, ev, served: dict | None = None):
    """camera_reported: camera-release.json describes the model and recomputes. A record of what a FrameReader
    camera_reader charged served (its hash and count, on the camera's frames) is named, not charged again."""
    rec, cal = value(doc, "recipe") or {}, value(doc, "calibration") or {}
    in_graph = _recipe_in_graph(path)
    n = len(ev.labels)
    tol = FLIPS / n + PRINTED
    kind = cal.get("set")
    frames = camera_path.frames_of(kind) if kind in camera_path.SETS else None
    named = _served_by_the_reader(cal, kind, served)
    checks = {
        "recipe (against the graph: " + ", ".join(f"{k}={v}" for k, v in in_graph.items()) + ")":
            all(rec.get(k) == v for k, v in in_graph.items()) and rec.get("calibration") == kind,
        "calibration (frames hash, served hash and count)": frames is not None
            and cal.get("frames_sha256") == data_sha256(frames) and (
                (cal.get("served_sha256"), cal.get("samples")) == (camera_path.served_sha256(frames), len(frames))
                or bool(named)),
        "calibration.input_range": isinstance(cal.get("input_range"), list)
            and all(close(a, b, PRINTED * 10) for a, b in zip(cal["input_range"], camera_path.input_range(path))),
        "acceptance (the evaluation frames)": value(doc, "acceptance.sha256") == data_sha256(ev.frames)
            and value(doc, "acceptance.count") == n,
        "limits": value(doc, "limits") == {"floor": release.FLOOR, "accuracy_loss": release.LIMIT,
                                          "max_abs_error": release.MAX_ERROR},
        "daylight (both families)": all(
            isinstance((value(doc, "daylight") or {}).get(f), dict)
            and close(doc["daylight"][f].get("max_abs_error"), v["max_abs_error"], SOFTMAX_STEP)
            and close(doc["daylight"][f].get("accuracy"), v["accuracy"], tol) for f, v in daylight.items()),
        "scenarios (verdicts and accuracies, both families)": _same_scenarios(value(doc, "scenarios"), by_family, tol),
        "not_judged": value(doc, "not_judged") == release.not_judged(by_family),
    }
    if not release.unmet({**in_graph, "calibration": kind}, by_family, daylight):
        # judged where the release is one the lesson accepts: a refused one is charged under camera_release, once
        said = value(doc, "justification")
        checks["justification (cites the released model's own numbers, measured here)"] = isinstance(said, str) and \
            bool(cites(said, release.release_numbers(daylight, by_family)))
    wrong = [k for k, ok in checks.items() if not ok]
    return check(PART, "camera_reported", (len(checks) - len(wrong)) / len(checks),
                 (f"{DOC} describes {MODEL}" if not wrong else f"{DOC} does not match {MODEL} in: {', '.join(wrong)}")
                 + (f"; {named}" if named else ""))


def _served_by_the_reader(cal: dict, kind, served: dict | None) -> str:
    """'' unless the record's served hash and count are what the student's FrameReader served on the camera's frames
    (``served``, charged under camera_reader); then how the record is named without a charge: it is honest."""
    if served is None or kind != "camera":
        return ""
    count, frames = sum(served.get("sizes", [])), camera_path.camera_frames()
    record = (cal.get("served_sha256"), cal.get("samples"))
    if record != (served.get("sha256"), count) or record == (camera_path.served_sha256(frames), len(frames)):
        return ""
    return (f"its calibration records what your FrameReader served ({count} frames, served hash "
            f"{str(cal.get('served_sha256'))[:12]}...), not lab.camera.preprocess of the camera's "
            f"{len(frames)} frames: {charged_under(PART, 'camera_reader')}")


def _same_scenarios(rep, mine: dict, tol: float) -> bool:
    if not isinstance(rep, dict):
        return False
    for f, rows in mine.items():
        got = {r.get("name"): r for r in rep.get(f, []) if isinstance(r, dict)}
        for r in rows:
            g = got.get(r.name)
            if g is None or g.get("verdict") != r.verdict or not close(g.get("int8_accuracy"), r.int8_accuracy, tol) \
                    or not close(g.get("fp32_accuracy"), r.fp32_accuracy, PRINTED):
                return False
    return True


@variant.lru_cache(maxsize=2)  # each student's variant has its own
def lesson_sets(family: str, seed: int = 0) -> tuple[dict, np.ndarray]:
    """The lesson's own two conversions (per-tensor QDQ, pre-processed, from the fixture), measured as ``family``:
    set -> input ruler and its answers on the evaluation frames under every condition (``seed``: the run's SEED, the
    noisy condition's), and those frames' labels."""
    ev = camera.load_split("evaluation")
    x, labels = release.pooled(ev.frames, ev.labels, seed)
    out = {}
    with tempfile.TemporaryDirectory(prefix="grader-l10-") as tmp:
        source = Path(tmp) / "cnn-fp32.onnx"
        source.write_bytes(camera.model_path().read_bytes())
        for kind in camera_path.SETS:
            model = Path(tmp) / f"{kind}.onnx"
            frames = camera.preprocess(camera_path.frames_of(kind))
            camera_path.quantize_cnn(toolbox.preprocessed(source, Path(tmp) / "pre.onnx"), model,
                                     ArrayReader(frames, camera_path.BATCH_SIZE, camera_path.INPUT))
            out[kind] = {"input_range": camera_path.input_range(model),
                         "under_conditions": release.predict(model, x, family).argmax(1)}
    return out, labels


GROUPS = (Group("10", PART, ("camera_reader", "camera_release", "camera_reported"), run, request=frame_reader_runs),)
