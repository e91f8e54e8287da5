"""Lesson 10, part 1: calibration data through the camera's deployed path, and what the converter does to a CNN.

``check_reader`` is the visible check after the reader exercise: a ``FrameReader`` must serve the sensor frames
through ``lab.camera.preprocess`` (the one deployed path), in batches, then ``None``. ``attractive_frames`` are the
"attractive photographs": the same calibration digits, clean, centred, evenly lit, without the camera's noise.
``quantize_cnn`` is ``quantize_static`` with any reader of the model's ``image`` input, recorded (hash, count).
The rest reads graphs: op counts before and after ``quant_pre_process``, the rulers of a QDQ model, each Conv
weight's scales and their axis, and the lines of ONNX Runtime's source that pick that axis.
"""
from __future__ import annotations

import inspect
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper
from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static
from onnxruntime.quantization.operators import conv

from lab import camera, compare, data, evidence, graph, hybrid, kernels, predictions
from lab.data import data_sha256, file_sha256
from lab.errors import LabError
from lab.readers import RecordingReader

INPUT = camera.INPUT_NAME
BATCH_SIZE = 32
SETS = ("camera", "attractive")
ATTRACTIVE = camera.Shot(background=(55.0, 55.0), contrast=(160.0, 160.0), side=(21.0, 21.0), jitter=0.0,
                         noise=(0.0, 0.0))
"""The attractive photographs: one paper grey, one stroke contrast, one size, centred, no sensor noise."""


class FrameReaderCheckFailed(LabError):
    """The reader does not serve the frames through the deployed path, as the lesson asks."""


def camera_frames() -> np.ndarray:
    """The 360 calibration sensor frames, as the camera shot them (uint8 [N, 32, 32])."""
    return camera.load_split("calibration").frames


def attractive_frames(seed: int = 0) -> np.ndarray:
    """The same calibration digits rendered as attractive photographs (``ATTRACTIVE``): uint8 [N, 32, 32]."""
    cal, digits = camera.load_split("calibration"), data.load_split("calibration")
    assert np.array_equal(cal.index, digits.index), "the CNN's calibration frames are the calibration digits"
    return camera.render(digits.raw, seed, ATTRACTIVE)


def frames_of(kind: str, seed: int = 0) -> np.ndarray:
    """The calibration frames of set ``kind``: ``"camera"`` or ``"attractive"``."""
    if kind not in SETS:
        raise ValueError(f"unknown calibration set {kind!r}; expected one of {list(SETS)}")
    return camera_frames() if kind == "camera" else attractive_frames(seed)


def _served(reader) -> list[Mapping]:
    batches: list[Mapping] = []
    for _ in range(10_000):
        item = reader.get_next()
        if item is None:
            return batches
        if not isinstance(item, Mapping):
            raise FrameReaderCheckFailed(
                f"get_next() returned a {type(item).__name__}; it returns one dict {{input_name: batch}} per call, "
                "then None" + (" (a get_next with yield is a generator function: return the dict instead)"
                               if inspect.isgenerator(item) else ""))
        batches.append(item)
    raise FrameReaderCheckFailed("get_next() never returned None: the calibrator would never finish")


def _rewound(reader, first: list[Mapping]) -> None:
    """After ``rewind()`` the reader serves the same batches again (ORT's calibrator may read them twice)."""
    reader.rewind()
    again = _served(reader)
    same = len(again) == len(first) and all(
        a.keys() == b.keys() and all(np.array_equal(np.asarray(a[k]), np.asarray(b[k])) for k in a)
        for a, b in zip(first, again))
    if not same:
        raise FrameReaderCheckFailed(f"after rewind() the reader served {len(again)} batch(es), not the first "
                                     f"pass's {len(first)} again: rewind() starts again from the first frame")


def check_reader(reader_cls, frames: np.ndarray | None = None, batch_size: int = BATCH_SIZE) -> str:
    """The reader exercise's check: ``reader_cls(frames, batch_size, input_name)`` serves
    ``lab.camera.preprocess(frames)`` under ``image``, ``batch_size`` frames a batch, then None. Raises
    ``FrameReaderCheckFailed`` naming the mistake; returns the verdict as a line."""
    frames = camera_frames() if frames is None else frames
    want = camera.preprocess(frames)
    try:
        reader = reader_cls(frames, batch_size=batch_size, input_name=INPUT)
        batches = _served(reader)
    except (FrameReaderCheckFailed, NotImplementedError):  # an exercise not done yet says so itself
        raise
    except Exception as e:  # noqa: BLE001 - the student's reader raised: name it, as the calibrator would meet it
        raise FrameReaderCheckFailed(f"FrameReader(frames, batch_size={batch_size}, input_name={INPUT!r}) raised "
                                     f"{type(e).__name__}: {e}. It takes the uint8 sensor frames themselves; "
                                     "lab.camera.preprocess each batch in get_next()") from None
    if not batches:
        raise FrameReaderCheckFailed("the reader served no batch at all before None")
    keys = sorted({k for b in batches for k in b})
    if keys != [INPUT]:
        raise FrameReaderCheckFailed(f"the batches are keyed {keys}; the model's input is {INPUT!r} (input_name)")
    got = [np.asarray(b[INPUT]) for b in batches]
    shapes = sorted({a.shape[1:] for a in got})
    if shapes != [want.shape[1:]]:
        raise FrameReaderCheckFailed(
            f"the batches have shape(s) {['x'.join(map(str, s)) for s in shapes]} per frame; the model takes "
            f"{'x'.join(map(str, want.shape[1:]))}: the frames skipped the deployed path (lab.camera.preprocess: "
            "crop, resize, scale, normalise, NCHW)")
    if any(a.dtype != np.float32 for a in got):
        raise FrameReaderCheckFailed(f"the batches are {sorted({str(a.dtype) for a in got})}; the model takes float32")
    sizes = [len(a) for a in got]
    expected = [min(batch_size, len(frames) - i) for i in range(0, len(frames), batch_size)]
    if sizes != expected:
        raise FrameReaderCheckFailed(f"batch sizes {sizes[:4]}...{sizes[-2:]} ({sum(sizes)} frames); expected "
                                     f"{len(expected)} batches of {batch_size}, the last {expected[-1]}, "
                                     f"{len(frames)} frames in all")
    served = np.concatenate(got)
    if not np.array_equal(served, want):
        err = float(np.max(np.abs(served.astype(np.float64) - want)))
        raise FrameReaderCheckFailed(
            f"the served images differ from lab.camera.preprocess(frames) by up to {err:.3g}: a second copy of "
            "the preprocessing is not the deployed path. Call lab.camera.preprocess on each batch of frames")
    try:
        _rewound(reader, batches)
    except FrameReaderCheckFailed:
        raise
    except Exception as e:  # noqa: BLE001 - the student's rewind raised
        raise FrameReaderCheckFailed(f"rewind() raised {type(e).__name__}: {e}") from None
    return (f"reader ok: {len(frames)} frames through lab.camera.preprocess, {len(batches)} batches of "
            f"{batch_size} (the last {expected[-1]}), then None")


def quantize_cnn(source: str | Path, output: str | Path, reader, *, quant_format: str = "QDQ",
                 per_channel: bool = False, reduce_range: bool = False, activation_type: str = "QInt8") -> dict:
    """``quantize_static`` of ``source`` calibrated by ``reader`` (MinMax, QInt8 weights; QInt8 activations unless
    ``activation_type`` says QUInt8): the settings, the served images' SHA-256 and count, and the model's SHA-256."""
    if activation_type not in ("QInt8", "QUInt8"):
        raise ValueError(f"activation_type {activation_type!r}: expected 'QInt8' or 'QUInt8'")
    recorder = RecordingReader(reader, input_name=INPUT)
    quantize_static(str(source), str(output), recorder, quant_format=QuantFormat[quant_format],
                    activation_type=QuantType[activation_type], weight_type=QuantType.QInt8,
                    per_channel=bool(per_channel), reduce_range=bool(reduce_range),
                    calibrate_method=CalibrationMethod.MinMax)
    return {"quant_format": quant_format, "per_channel": bool(per_channel), "reduce_range": bool(reduce_range),
            "activation_type": activation_type, "weight_type": "QInt8", "calibrate_method": "MinMax",
            "served_sha256": recorder.sha256, "served_samples": recorder.samples, "served_batches": recorder.batches,
            "sha256": file_sha256(output)}


def served_sha256(frames: np.ndarray) -> str:
    """The hash ``quantize_cnn`` records when a reader serves ``frames`` through the deployed path."""
    return data_sha256(camera.preprocess(frames))


def input_range(model) -> list[float]:
    """The model's input ruler as [low, high], 4 significant digits."""
    lo, hi = graph.input_ruler(model, INPUT).interval
    return [float(f"{lo:.4g}"), float(f"{hi:.4g}")]


# --- the graph ------------------------------------------------------------------------------------------------

def op_table(models: dict[str, str | Path]) -> list[dict]:
    """One row per op type: its count in each named model."""
    counts = {name: graph.op_counts(m) for name, m in models.items()}
    ops = sorted({op for c in counts.values() for op in c})
    return [{"op": op, **{name: c.get(op, 0) for name, c in counts.items()}} for op in ops]


def ruled_tensors(model) -> list[str]:
    """The tensors a QDQ model gives a ruler (QuantizeLinear's float input), in graph order."""
    return [n.input[0] for n in graph.load(model).graph.node if n.op_type == "QuantizeLinear"]


def weight_scales(model) -> list[dict]:
    """Each quantized weight of a QDQ or QOperator model: its shape, how many scales it has and along which axis."""
    m = graph.load(model)
    inits = {i.name: i for i in m.graph.initializer}
    rows = []
    for node in m.graph.node:
        pairs = ([(node.input[0], node.input[1], node)] if node.op_type == "DequantizeLinear" else
                 [(node.input[3], node.input[4], node)] if node.op_type in ("QLinearConv", "QGemm") else [])
        for w, s, n in pairs:
            if w not in inits or len(inits[w].dims) < 2:
                continue
            scale = numpy_helper.to_array(inits[s]).reshape(-1)
            axis = next((a.i for a in n.attribute if a.name == "axis"), 1) if n.op_type == "DequantizeLinear" else \
                0 if n.op_type == "QLinearConv" else 1 - next((a.i for a in n.attribute if a.name == "transB"), 0)
            rows.append({"weight": w, "shape": "x".join(map(str, inits[w].dims)), "scales": int(scale.size),
                         "axis": axis if scale.size > 1 else "-",
                         "scale_min": float(scale.min()), "scale_max": float(scale.max()),
                         "ratio": float(scale.max() / scale.min()) if scale.min() > 0 else float("inf")})
    return rows


def axis_source() -> list[str]:
    """The lines of ONNX Runtime's source that pick a Conv weight's per-channel axis (QDQ and QOperator)."""
    out = []
    for cls, key in ((conv.QDQConv, "default_axis"), (conv.QLinearConv, "quantize_weight_per_channel")):
        lines = inspect.getsource(cls.quantize).splitlines()
        i = next(k for k, line in enumerate(lines) if key in line)
        out.append(f"{cls.__name__}.quantize:")
        out += ["    " + line.strip() for line in lines[i - (1 if key == "default_axis" else 0):i + 4]
                if line.strip() and not line.strip().startswith(")")][:4]
    return out


def onnx_model(path) -> onnx.ModelProto:
    return graph.load(path)


# --- the prediction -------------------------------------------------------------------------------------------

def _form(q: predictions.Question, answer) -> dict:
    a = q.mapping(answer, '"larger_error" and "wider_ruler"')
    missing = sorted({"larger_error", "wider_ruler"} - set(a))
    if missing or set(a) - {"larger_error", "wider_ruler"}:
        raise q.fail("the keys", '"larger_error" and "wider_ruler"', sorted(a))
    return {k: q.choice(k, a[k], list(SETS)) for k in ("larger_error", "wider_ruler")}


PREDICTION = predictions.Question(
    "attractive_photographs", "10", "which calibration set, the camera's frames or the attractive photographs, gives "
    "the larger error (more digits misread) on the camera's evaluation frames under its operating conditions, and "
    "whose input ruler is wider", '{"larger_error": "attractive", "wider_ruler": "camera"}', _form)


def judge_attractive_photographs(answer, measured: dict, labels: np.ndarray) -> predictions.Verdict:
    """The prediction against ``release.sets_measured``' rows for one family (``measured``: set -> its input ruler
    and its answers ``under_conditions``, whose true digits are ``labels``). The larger error is the set that misreads
    more frames, decided pair by pair (``lab.evidence.paired``); within noise it is shown and not judged."""
    said = PREDICTION.normalise(answer)
    ev = evidence.paired(labels, measured["camera"]["under_conditions"], measured["attractive"]["under_conditions"])
    err = None if not ev.beyond_noise else ("attractive" if ev.difference < 0 else "camera")
    width = max(SETS, key=lambda k: measured[k]["input_range"][1] - measured[k]["input_range"][0])
    rulers = ", ".join(f"{k} {measured[k]['input_range']}" for k in SETS)
    return predictions.verdict("attractive_photographs", [
        (None if err is None else said["larger_error"] == err,
         f"larger error: you said {said['larger_error']}, measured "
         f"{err or 'neither beyond noise'} (attractive against camera: {ev.words()})"),
        (said["wider_ruler"] == width, f"wider input ruler: you said {said['wider_ruler']}, measured {width} "
         f"({rulers})")],
        "clean photographs never show the camera's dark paper, bright strokes or noise: their ruler is narrower, "
        "and the camera's frames clip against it")


# --- the residual Add: QLinearAdd's requantization ---------------------------------------------------------------

ADD_NODE = "residual"   # the fixture's residual Add (fixtures.build_cnn)


RESIDUAL_OPS = ("Conv", "Add", "QLinearConv", "QLinearAdd")


def residual_block_ops(models: dict[str, str | Path]) -> list[dict]:
    """For each named model, what ORT's CPU session on this machine runs (its optimized graph, saved by the session):
    the float ``Conv`` and ``Add`` nodes left between DequantizeLinear and QuantizeLinear, and the integer
    ``QLinearConv`` and ``QLinearAdd`` (com.microsoft) kernels; one row per op type."""
    counts = {}
    for name, model in models.items():
        ops = [n.op_type for n in hybrid.optimized(graph.load(model)).graph.node]
        counts[name] = {op: ops.count(op) for op in RESIDUAL_OPS}
    return [{"op": op, **{name: c[op] for name, c in counts.items()}} for op in RESIDUAL_OPS]


def _q_of(m: onnx.ModelProto, tensor: str):
    """The QuantizeLinear that reads ``tensor`` (its ruler) in a QDQ graph."""
    return next(n for n in m.graph.node if n.op_type == "QuantizeLinear" and n.input[0] == tensor)


def add_requantization(model, x: np.ndarray, family: str, node: str = ADD_NODE) -> dict:
    """What the residual Add's requantization does in QDQ ``model`` on images ``x``, as ``family`` computes it.

    The two inputs arrive as integers on their own rulers (scales ``a_scale``, ``b_scale``); the sum is written on
    the output's ruler (``out_scale``, ``ruler``) with one rounding, by QLinearAdd or by a float Add and the
    QuantizeLinear after it. Measured against the exact sum of the two inputs' dequantized values: for the sums
    inside the output ruler, the largest and mean error in output steps (rounding: at most half a step); how many
    sums fall past the ruler's ends (calibrated on the calibration frames) and clip, and by how many steps."""
    m = graph.load(model)
    add = next(n for n in m.graph.node if n.name.startswith(node) and n.op_type == "Add")
    inits = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
    producers = {o: n for n in m.graph.node for o in n.output}
    dq = [producers[i] for i in add.input]
    if any(d.op_type != "DequantizeLinear" for d in dq):
        raise LabError(f"the Add '{add.name}' does not read two DequantizeLinear outputs: not a QDQ residual Add")
    q_out = _q_of(m, add.output[0])
    names = [d.input[0] for d in dq] + [q_out.output[0]]
    got = kernels.emulate_tensors(m, x, family, names, INPUT)
    scales = [float(inits[d.input[1]]) for d in dq] + [float(inits[q_out.input[1]])]
    zeros = [int(inits[d.input[2]]) for d in dq] + [int(inits[q_out.input[2]])]
    a, b, out = ((got[n].astype(np.int64) - z) * np.float64(s) for n, z, s in zip(names, zeros, scales))
    exact = a + b
    step = scales[2]
    err = np.abs(out - exact)
    limits = np.iinfo(got[names[2]].dtype)
    lo, hi = (limits.min - zeros[2]) * step, (limits.max - zeros[2]) * step
    clipped = (exact < lo - step / 2) | (exact > hi + step / 2)
    inside = err[~clipped]
    read = [producers[d.input[0]].input[0] if d.input[0] in producers else d.input[0] for d in dq]
    return {"node": add.name, "inputs": read, "a_scale": scales[0], "b_scale": scales[1], "out_scale": step,
            "ruler": [float(lo), float(hi)], "count": int(err.size),
            "inside_max_steps": float(inside.max() / step) if inside.size else 0.0,
            "inside_mean_steps": float(inside.mean() / step) if inside.size else 0.0,
            "clipped": int(clipped.sum()), "max_error": float(err.max()),
            "clipped_max_steps": float(err[clipped].max() / step) if clipped.any() else 0.0}


def add_lines(rows: dict[str, dict]) -> list[str]:
    """The residual Add's requantization on each family, one block of lines."""
    first = next(iter(rows.values()))
    out = [f"the Add '{first['node']}' reads {first['inputs'][0]} (scale {first['a_scale']:.5f}) and "
           f"{first['inputs'][1]} (scale {first['b_scale']:.5f}); writes on scale {first['out_scale']:.5f}, "
           "ruler [{:.4g}, {:.4g}]".format(*first["ruler"])]
    for family, r in rows.items():
        out.append(f"{family:<10}: of {r['count']:,} sums, {r['count'] - r['clipped']:,} inside the output ruler, "
                   f"off the exact sum of the two inputs by at most {r['inside_max_steps']:.2f} output step "
                   f"(mean {r['inside_mean_steps']:.2f}); {r['clipped']:,} past its ends, clipped by up to "
                   f"{r['clipped_max_steps']:.2f} steps (max error {r['max_error']:.4f})")
    return out


# --- the app's preprocessing: find the step that differs -----------------------------------------------------------

class MismatchRefused(LabError):
    """The named step cannot be the one where the app's path parts from the deployed path: the measurements say why."""


CARDS = {"black": 0, "grey": 128, "white": 255}
"""Uniform test cards (sensor values): every pixel the same, so cropping, resampling or re-laying them changes nothing,
and only the value steps (the division, the normalisation) can move where they land."""


def card_values(path) -> dict[str, float]:
    """Where each uniform test card (``CARDS``) lands through ``path`` (a function of uint8 frames): its model input."""
    return {name: float(path(np.full((1, camera.FRAME, camera.FRAME), v, np.uint8)).mean())
            for name, v in CARDS.items()}


def app_diagnostics(fp32, int8, frames: np.ndarray, labels: np.ndarray, seed: int = 0) -> dict:
    """The deployed path (``lab.camera.preprocess``) against the app's (``lab.camera.app_preprocess``) on the same
    frames: the test cards' values, each path's input range on the evaluation frames beside ``int8``'s input ruler,
    FP32 accuracy under every condition through each path, and ``int8``'s daylight accuracy through each on both
    kernel families."""
    paths = {"deployed": camera.preprocess, "app": camera.app_preprocess}
    session = graph.session(fp32)
    accuracy: dict[str, dict[str, float]] = {k: {} for k in paths}
    for name in camera.CONDITIONS:
        shot = camera.condition(name, frames, seed)
        for k, path in paths.items():
            out = session.run(None, {INPUT: path(shot)})[0]
            accuracy[k][name] = float(np.mean(out.argmax(axis=1) == labels))
    x = {k: path(frames) for k, path in paths.items()}
    return {"cards": {k: card_values(path) for k, path in paths.items()},
            "range": {k: [float(v.min()), float(v.max())] for k, v in x.items()},
            "ruler": input_range(int8), "fp32": accuracy,
            "int8_daylight": {k: {f: float(np.mean(compare.predict(int8, x[k], INPUT, family=f).argmax(axis=1)
                                                   == labels)) for f in kernels.FAMILIES} for k in paths}}


def app_rows(diag: dict) -> list[dict]:
    """The diagnostics as rows: one per measurement, the deployed path and the app side by side."""
    rows = [{"measure": f"{card} card ({v}) -> model input", "deployed": f"{diag['cards']['deployed'][card]:.3f}",
             "app": f"{diag['cards']['app'][card]:.3f}"} for card, v in CARDS.items()]
    rows.append({"measure": "input range, evaluation frames",
                 "deployed": "{:.3f} .. {:.3f}".format(*diag["range"]["deployed"]),
                 "app": "{:.3f} .. {:.3f}".format(*diag["range"]["app"])})
    rows.append({"measure": "the INT8 release's input ruler", "deployed": "{:.3f} .. {:.3f}".format(*diag["ruler"]),
                 "app": "{:.3f} .. {:.3f}".format(*diag["ruler"])})
    rows += [{"measure": f"FP32 accuracy, {name}", "deployed": f"{diag['fp32']['deployed'][name]:.4f}",
              "app": f"{diag['fp32']['app'][name]:.4f}"} for name in diag["fp32"]["deployed"]]
    rows += [{"measure": f"INT8 release, daylight, {family}", "deployed": f"{acc:.4f}",
              "app": f"{diag['int8_daylight']['app'][family]:.4f}"}
             for family, acc in diag["int8_daylight"]["deployed"].items()]
    return rows


APP_COLUMNS = [("measure", "measurement", ""), ("deployed", "lab.camera.preprocess", ""), ("app", "the app", "")]


SPELLINGS = {"normalize": "normalise"}
"""Another spelling of a step's name, accepted as the step."""


def check_mismatch(step: str, diag: dict) -> str:
    """The exercise's check: ``step`` (one of ``lab.camera.STEPS``) must be the step where the app parts from the
    deployed path, as ``diag`` (``app_diagnostics``) measures it. Raises ``MismatchRefused`` naming why a wrong
    step cannot be it; returns the verdict as a line."""
    step = SPELLINGS.get(step, step) if isinstance(step, str) else step
    if step not in camera.STEPS:
        raise MismatchRefused(f"MISMATCH = {step!r}: name one of the deployed path's steps {list(camera.STEPS)}")
    dep, app = diag["cards"]["deployed"], diag["cards"]["app"]
    moved = max(abs(app[c] - dep[c]) for c in CARDS)
    if moved < 1e-4:
        raise MismatchRefused("the test cards land where the deployed path puts them: nothing to find in the values")
    black = f"a black card reaches the model at {app['black']:.3f} through the app, {dep['black']:.3f} through " \
            "lab.camera.preprocess"
    if step in ("crop", "resize", "layout"):
        raise MismatchRefused(f"MISMATCH = {step!r}: a uniform card has one value in every pixel, so cropping, "
                              f"resampling or re-laying its pixels cannot move it; yet {black}. A value step differs")
    s = 1 / (app["white"] - app["black"])          # the app's x = (v / 255 - m) / s, from two cards
    m = -app["black"] * s
    if step == "scale":
        if abs(app["black"] - dep["black"]) > 1e-3:
            raise MismatchRefused(f"MISMATCH = 'scale': dividing by another number than 255 scales a pixel before "
                                  f"the mean is subtracted, so a black card (0) lands at -MEAN/STD = "
                                  f"{dep['black']:.3f} whatever the divisor; but {black}. The offset moved: the "
                                  "step after the division")
        return f"mismatch ok: the division; the white card lands at {app['white']:.3f}, not {dep['white']:.3f}"
    if abs(app["black"] - dep["black"]) <= 1e-3:
        raise MismatchRefused(f"MISMATCH = 'normalise': the black card lands where training puts it "
                              f"({dep['black']:.3f}), so the mean/std step agrees at 0; only the white card moved "
                              f"({app['white']:.3f} against {dep['white']:.3f}): the division before it differs")
    return (f"mismatch ok: the normalisation. From the cards the app computes (x - {m:.2f}) / {s:.2f}, training "
            f"(x - {float(camera.MEAN):.2f}) / {float(camera.STD):.2f}: the app's inputs span "
            "{:.3f} .. {:.3f}, ".format(*diag["range"]["app"]) +
            "inside the release's ruler {:.3f} .. {:.3f} but on ".format(*diag["ruler"]) +
            f"{(diag['range']['app'][1] - diag['range']['app'][0]) / (diag['ruler'][1] - diag['ruler'][0]):.0%} "
            "of its width, and the model reads them as other images")
