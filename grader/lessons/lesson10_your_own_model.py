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
from grader.context import SOFTMAX_STEP, Context, check, close, value
from grader.group import Group
from lab import camera, graph, variant
from lab.convert import calibrated_ranges
from lab.data import EPSILON, data_sha256, file_sha256
from lab.lessons.lesson08_the_quantization_toolbox import toolbox
from lab.lessons.lesson10_your_own_model import camera_path, release
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


def runs_planned(ctx: Context) -> list:
    """The reader run ``camera_reader`` asks for (``sandbox.plan``)."""
    if not ctx.has(READER) or own_code.refusal_for(ctx.sub.path(READER)):
        return []
    return [_request(ctx, camera_path.camera_frames())]


def reader_findings(drive: dict, n: int, frames: np.ndarray | None = None) -> list[str]:
    """What the drive's record says the reader broke: sizes, shapes, dtype, key, the end, rewind and a fresh reader;
    given the ``frames`` it was driven on, also the served values against ``lab.camera.preprocess`` of them (judged
    only when the shapes, dtype and frame count are right: else those findings already name the mistake)."""
    b = camera_path.BATCH_SIZE
    sizes = [min(b, n - i) for i in range(0, n, b)]
    want_shapes = sorted({(s, 1, camera.SIZE, camera.SIZE) for s in sizes})
    first, out = drive.get("first", {}), []
    if first.get("sizes") != sizes:
        out.append(f"it served batches of {first.get('sizes', [])[:4]}...; expected {len(sizes)} batches of {b}, "
                   f"the last {sizes[-1]}")
    if sorted(tuple(s) for s in first.get("shapes", [])) != want_shapes:
        out.append(f"its batches have shapes {first.get('shapes')}; expected [n, 1, {camera.SIZE}, {camera.SIZE}] "
                   "(lab.camera.preprocess of each batch of frames)")
    if first.get("dtypes") != ["float32"]:
        out.append(f"its batches are {first.get('dtypes')}; expected float32")
    if [list(k) for k in first.get("keys", [])] != [[camera_path.INPUT]]:
        out.append(f"its batches are keyed {first.get('keys')}; expected {camera_path.INPUT!r} (input_name)")
    comparable = (sorted(tuple(s) for s in first.get("shapes", [])) == want_shapes
                  and first.get("dtypes") == ["float32"] and sum(first.get("sizes", [])) == n)
    if frames is not None and comparable:
        out += _values_findings(first, frames)
    if drive.get("after_none") is not False:
        out.append("get_next() did not keep returning None after the end")
    for again in ("rewind", "fresh"):
        got = drive.get(again, {})
        if got.get("sizes") != sizes or got.get("sha256", first.get("sha256")) != first.get("sha256"):
            out.append(f"{'rewind()' if again == 'rewind' else 'a second FrameReader'} did not serve the same batches")
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


def _reader(ctx: Context):
    """camera_reader: FrameReader keeps the reader contract on the camera's frames (driven in the sandbox)."""
    refused = own_code.refusal_for(ctx.sub.path(READER), READER)
    if refused:
        return check(PART, "camera_reader", 0, refused)
    child = sandbox.run(*_request(ctx, camera_path.camera_frames()))
    if child.status != "ok" or not child.data.get("ok"):
        return check(PART, "camera_reader", 0, f"the camera reader could not be run: "
                     f"{child.message or child.data.get('error', '')}")
    found = reader_findings(child.data["drives"][0], len(camera_path.camera_frames()), camera_path.camera_frames())
    return check(PART, "camera_reader", max(0.0, 1 - 0.5 * len(found)),
                 "FrameReader serves the camera's frames as lesson 10 asks" if not found else
                 "FrameReader breaks the contract: " + "; ".join(found)
                 + ". Run lesson 10's check cell, camera_path.check_reader(FrameReader), to see it")


def run(ctx: Context) -> list:
    results = [_reader(ctx) if ctx.has(READER) else
               check(PART, "camera_reader", 0, f"{READER} is missing; lesson 10 writes it")]
    results += _release(ctx) if ctx.has(DOC) and ctx.has(MODEL) else [
        check(PART, name, 0, f"{DOC} and {MODEL} are needed; lesson 10's last cells write them")
        for name in ("camera_release", "camera_reported")]
    return results


def _calibrated_on_camera(path) -> tuple[bool, str]:
    """ORT's calibrator on the camera frames through the deployed path gives the model's input ruler (one step)."""
    x = camera.preprocess(camera_path.camera_frames())
    lo, hi = calibrated_ranges(camera.model_path(), ArrayReader(x, camera_path.BATCH_SIZE, camera_path.INPUT))[
        camera_path.INPUT]
    ruler = graph.input_ruler(path, camera_path.INPUT)
    got_lo, got_hi = ruler.interval
    ok = abs(got_lo - min(lo, 0.0)) <= ruler.scale + EPSILON and abs(got_hi - max(hi, 0.0)) <= ruler.scale + EPSILON
    return ok, (f"its input ruler [{got_lo:.4g}, {got_hi:.4g}] against ORT's calibrator on the camera's frames "
                f"through lab.camera.preprocess, [{lo:.4g}, {hi:.4g}]")


def _release(ctx: Context) -> list:
    doc, path = ctx.doc(DOC), ctx.sub.path(MODEL)
    ctx.model(MODEL)
    ev = camera.load_split("evaluation")
    source = camera.model_path()
    daylight = release.measured(source, path, ev.image, ev.labels)
    by_family = release.scenarios(source, path, ev.frames, ev.labels, seed=value(doc, "acceptance.seed") or 0)
    return [_meets(doc, path, daylight, by_family), _reported(ctx, doc, path, daylight, by_family, ev)]


def _meets(doc: dict, path, daylight: dict, by_family: dict):
    """camera_release: the released model, measured here: stamped with its record, calibrated on the camera's frames,
    of the form the lesson measured (folded, per-channel, QDQ: read from the graph), daylight error within the limit
    and no judged scenario needing work, on both families."""
    release_id, sha = release.stamp_of(path)
    on_camera, ruler_text = _calibrated_on_camera(path)
    parts = {"the model's metadata names camera-release.json (release id and SHA-256)":
                 release_id == release.RELEASE_ID and sha == file_sha256_of_doc(path),
             f"calibrated on the camera's frames ({ruler_text})": on_camera}
    for problem in release.form_problems(_recipe_in_graph(path)):
        parts[f"the form the lesson measured ({problem}, as the graph shows)"] = False
    for f, v in daylight.items():
        parts[f"daylight max abs error {v['max_abs_error']:.3f} within {release.MAX_ERROR} ({f} family)"] = \
            v["max_abs_error"] <= release.MAX_ERROR + EPSILON
    for f, rows in by_family.items():
        bad = [r.name for r in rows if r.needs_work]
        parts[f"no judged scenario needs work ({f} family{': ' + ', '.join(bad) if bad else ''})"] = not bad
    missed = [k for k, ok in parts.items() if not ok]
    return check(PART, "camera_release", (len(parts) - len(missed)) / len(parts),
                 "the released model, measured here, meets the release's requirements" if not missed else
                 "the released model, measured here, misses: " + "; ".join(missed))


def file_sha256_of_doc(path) -> str:
    return file_sha256(path.parent / DOC)


def _recipe_in_graph(path) -> dict:
    """The recipe as the graph shows it: format, per-channel, reduce_range, pre-processed."""
    ops = graph.op_counts(path)
    scales = camera_path.weight_scales(path)
    return {"quant_format": graph.quant_format(path), "per_channel": any(s["scales"] > 1 for s in scales),
            "reduce_range": toolbox.max_abs_weight(path) <= 64, "pre_process": "BatchNormalization" not in ops}


def _reported(ctx: Context, doc: dict, path, daylight: dict, by_family: dict, ev):
    """camera_reported: camera-release.json describes the model and recomputes."""
    rec, cal = value(doc, "recipe") or {}, value(doc, "calibration") or {}
    in_graph = _recipe_in_graph(path)
    n = len(ev.labels)
    tol = FLIPS / n + PRINTED
    kind = cal.get("set")
    frames = camera_path.frames_of(kind) if kind in camera_path.SETS else None
    checks = {
        "recipe (against the graph: " + ", ".join(f"{k}={v}" for k, v in in_graph.items()) + ")":
            all(rec.get(k) == v for k, v in in_graph.items()) and rec.get("calibration") == kind,
        "calibration (frames hash, served hash and count)": frames is not None
            and cal.get("frames_sha256") == data_sha256(frames)
            and cal.get("served_sha256") == camera_path.served_sha256(frames) and cal.get("samples") == len(frames),
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
    wrong = [k for k, ok in checks.items() if not ok]
    return check(PART, "camera_reported", (len(checks) - len(wrong)) / len(checks),
                 f"{DOC} describes {MODEL}" if not wrong else f"{DOC} does not match {MODEL} in: {', '.join(wrong)}")


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


GROUPS = (Group("10", PART, ("camera_reader", "camera_release", "camera_reported"), run),)
