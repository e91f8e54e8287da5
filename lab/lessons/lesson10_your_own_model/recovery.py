"""Lesson 10, part 3: recovering accuracy, as a practitioner does it.

The student is handed an INT8 copy of the camera CNN that lost accuracy (``handed_in``; why is the section's
question, answered at its end) and works a practitioner's steps, each measured on both kernel families:

1. ``data_check``: FP32 on the same frames (are the data and the model fine?);
2. ``split``: the QDQ file as fake-quant (ORT's ``session.disable_quant_qdq`` = "1": no QDQ fusion, float ops
   between QuantizeLinear and DequantizeLinear, no integer kernel, so no pair saturation) against FP32 (the rulers'
   error) and against each family's fused run (the kernels' error);
3. ``ablate``: every node with weights left out of quantization once (``nodes_to_exclude``), ranked by the
   frames that leaving it in float recovers, pair by pair (``lab.evidence``);
4. ``excluded``: the worst node excluded, with its evidence (the exercise: ``check_exclusion``);
5. ``sixteen_bit``: 16-bit activations (QDQ, ``activation_type=QUInt16``, 8-bit weights).

Every sentence is rendered from the run (``*_sentence``): a difference inside the noise is called noise.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static

from lab import camera, compare, evidence, hybrid, kernels, load_time
from lab.errors import LabError
from lab.lessons.lesson06_accept_or_reject.acceptance import FLOOR
from lab.lessons.lesson08_the_quantization_toolbox.toolbox import preprocessed
from lab.lessons.lesson10_your_own_model import camera_path, release

DISABLE_QDQ_FUSION = "session.disable_quant_qdq"
"""ORT's session config key ``kOrtSessionOptionsDisableQuantQDQ`` (``onnxruntime_session_options_config_keys.h``):
"1" means "ORT doesn't do fusion logic for QDQ format"."""
FORM = {"quant_format": "QDQ", "per_channel": True, "reduce_range": True}
"""The handed-in model's form: section 8's release form (QDQ, per-channel weights, ``reduce_range``)."""
FOLDER = "recovery"
HANDED = "handed-in.onnx"
ABLATION_FRAMES = 200
"""The ablation measures each model on the first this many evaluation frames: its conversions, each run on both
families (the other by emulation), are most of the section's time."""
WEIGHTED = ("Conv", "Gemm", "MatMul")
"""The ops the ablation leaves in float one at a time: those with weights. Excluding a node without weights (a pool,
a Relu, Flatten) keeps the QuantizeLinear / DequantizeLinear pairs its quantized neighbours put on the tensors it
shares with them, so its conversion changes nothing, or only widens a neighbour's output ruler (measured on this
CNN: the pools, the global average pool and Flatten gave outputs identical to the handed-in model's)."""
SIXTEEN = "activations-u16.onnx"


class ExclusionRefused(LabError, ValueError):
    """The node chosen for exclusion is not the one the ablation ranks worst beyond noise."""


CALIBRATION_LIGHT = 0.4
"""The colleague's calibration frames: the camera's, at 0.4 of the light (darker than the dim condition's half). At
half the light the loss on the residual CNN was within noise for some ids' calibration frames (s2417093: leaving
conv1 in float gave 7 fixed, 3 broken on the ablation's 200 frames); at 0.4 it is beyond noise for every id tried."""


def _calibration_frames() -> np.ndarray:
    """The frames the handed-in model was calibrated on (the section's answer: ``revealed``)."""
    return camera.dimmed(camera_path.camera_frames(), CALIBRATION_LIGHT)


def convert(graph_in: str | Path, output: str | Path, reader_cls, frames: np.ndarray, *,
            exclude: Sequence[str] = (), activation_type: str = "QInt8") -> Path:
    """``quantize_static`` of ``graph_in`` in ``FORM`` (MinMax, 8-bit weights), calibrated by ``reader_cls`` over
    ``frames``, with the nodes ``exclude`` left in float and activations of ``activation_type``."""
    reader = reader_cls(frames, batch_size=camera_path.BATCH_SIZE, input_name=camera_path.INPUT)
    quantize_static(str(graph_in), str(output), reader, quant_format=QuantFormat[FORM["quant_format"]],
                    activation_type=QuantType[activation_type], weight_type=QuantType.QInt8,
                    per_channel=FORM["per_channel"], reduce_range=FORM["reduce_range"],
                    nodes_to_exclude=list(exclude), calibrate_method=CalibrationMethod.MinMax)
    return Path(output)


def handed_in(source: str | Path, work: str | Path, reader_cls) -> tuple[Path, Path]:
    """The pre-processed graph and the INT8 model the student is handed, in ``work/camera/recovery``."""
    out = Path(work) / "camera" / FOLDER
    out.mkdir(parents=True, exist_ok=True)
    pre = preprocessed(source, out / "pre.onnx")
    return pre, convert(pre, out / HANDED, reader_cls, _calibration_frames())


def answers(model, x: np.ndarray, family: str) -> np.ndarray:
    """The model's probabilities on ``x`` as ``family`` computes them (``release.predict``)."""
    return release.predict(model, x, family)


def fake_quant(model, x: np.ndarray) -> np.ndarray:
    """The QDQ file run with ``DISABLE_QDQ_FUSION`` = "1": QuantizeLinear, DequantizeLinear and float ops, no
    integer kernel, so no pair saturation; computed once for both families (ORT's float Convs block by 8 on AVX2
    and by 16 on AVX-512 and may sum in another order: at most an output step apart, ``lab.hybrid``)."""
    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads, so.log_severity_level = 1, 1, 3
    so.add_session_config_entry(DISABLE_QDQ_FUSION, "1")
    return ort.InferenceSession(str(model), so, providers=["CPUExecutionProvider"]).run(
        None, {camera_path.INPUT: np.asarray(x, np.float32)})[0]


def _score(reference: np.ndarray, probs: np.ndarray, labels: np.ndarray) -> dict:
    return {"accuracy": float(np.mean(probs.argmax(1) == labels)),
            "max_abs_error": compare.max_abs_error(reference, probs)}


# --- step 1: FP32 on the same frames ---------------------------------------------------------------------------

def data_check(source, model, x: np.ndarray, labels: np.ndarray) -> dict:
    """FP32's accuracy on ``x`` against lesson 06's floor, and per family the INT8 model's accuracy, max abs error
    and its answers against FP32's, pair by pair."""
    fp32 = answers(source, x, kernels.EXACT)
    out: dict = {"fp32_accuracy": float(np.mean(fp32.argmax(1) == labels)), "floor": FLOOR, "frames": len(labels)}
    for f in kernels.FAMILIES:
        q = answers(model, x, f)
        out[f] = {**_score(fp32, q, labels), "against_fp32": evidence.paired(labels, fp32.argmax(1), q.argmax(1))}
    return out


def data_lines(d: Mapping) -> str:
    lines = [f"FP32      : accuracy {d['fp32_accuracy']:.4f} on {d['frames']} evaluation frames (floor {d['floor']})"]
    lines += [f"{f:<10}: INT8 accuracy {d[f]['accuracy']:.4f}, max abs error {d[f]['max_abs_error']:.3f}; "
              f"against FP32: {d[f]['against_fp32'].words()}" for f in kernels.FAMILIES]
    return "\n".join(lines)


def data_sentence(d: Mapping) -> str:
    ok = d["fp32_accuracy"] >= d["floor"]
    first = (f"FP32 reads {d['fp32_accuracy']:.4f} of these frames, at or above the floor of {d['floor']}: the frames "
             "and the FP32 model are fine, so the loss is the conversion's" if ok else
             f"FP32 reads only {d['fp32_accuracy']:.4f} of these frames, below the floor of {d['floor']}: fix the data "
             "or the model before blaming the conversion")
    parts = []
    for f in kernels.FAMILIES:
        ev = d[f]["against_fp32"]
        verdict = (f"loses {-ev.difference:.4f} beyond noise" if ev.beyond_noise and ev.difference < 0 else
                   f"gains {ev.difference:.4f} beyond noise" if ev.beyond_noise else "differs from FP32 only by noise")
        parts.append(f"on the {f} family INT8 {verdict} ({ev.words()})")
    rest = "; ".join(parts)
    return f"**Your run.** {first}. {rest[:1].upper()}{rest[1:]}."


# --- step 2: fake-quant splits the rulers' error from the kernels' -----------------------------------------------

def split(source, model, x: np.ndarray, labels: np.ndarray) -> dict:
    """Fake-quant against FP32 (the rulers: calibration and rounding), and each family's fused run against
    fake-quant (the kernels), pair by pair, with the largest probability change between them."""
    fp32, fake = answers(source, x, kernels.EXACT), fake_quant(model, x)
    out: dict = {"fake_quant": {**_score(fp32, fake, labels),
                                "against_fp32": evidence.paired(labels, fp32.argmax(1), fake.argmax(1))}}
    for f in kernels.FAMILIES:
        q = answers(model, x, f)
        out[f] = {**_score(fp32, q, labels), "kernel_change": compare.max_abs_error(fake, q),
                  "against_fake_quant": evidence.paired(labels, fake.argmax(1), q.argmax(1))}
    return out


SPLIT_COLUMNS = [("run", "run", ""), ("accuracy", "accuracy", ".4f"), ("max_abs_error", "max abs err vs FP32", ".3f"),
                 ("kernel_change", "max change vs fake-quant", ".3f"), ("evidence", "frame by frame", "")]


def split_rows(s: Mapping) -> list[dict]:
    fq = s["fake_quant"]
    rows = [{"run": "fake-quant (fusion off)", "accuracy": fq["accuracy"], "max_abs_error": fq["max_abs_error"],
             "kernel_change": 0.0, "evidence": "against FP32: " + fq["against_fp32"].words()}]
    rows += [{"run": f"fused, {f} family", "accuracy": s[f]["accuracy"], "max_abs_error": s[f]["max_abs_error"],
              "kernel_change": s[f]["kernel_change"],
              "evidence": "against fake-quant: " + s[f]["against_fake_quant"].words()} for f in kernels.FAMILIES]
    return rows


def split_sentence(s: Mapping) -> str:
    ev = s["fake_quant"]["against_fp32"]
    rulers = (f"Fake-quant already loses {-ev.difference:.4f} against FP32 beyond noise ({ev.words()}): the rulers "
              "themselves (the calibration, the rounding) lose it, before any integer kernel runs"
              if ev.beyond_noise and ev.difference < 0 else
              f"Fake-quant differs from FP32 only by noise ({ev.words()}): the rulers are not where the loss is")
    parts = []
    for f in kernels.FAMILIES:
        k = s[f]["against_fake_quant"]
        parts.append(f"on the {f} family the fused kernels "
                     + (f"change {k.fixed + k.broken} answers against fake-quant, beyond noise ({k.words()}): "
                        "the kernel adds its own error" if k.beyond_noise else
                        f"add only noise ({k.words()}; largest probability change {s[f]['kernel_change']:.3f})"))
    return f"**Your run.** {rulers}; " + "; ".join(parts) + "."


# --- step 3: ablation, one node left in float at a time -----------------------------------------------------------

def nodes(graph_in) -> list[tuple[str, str]]:
    """(name, op type) of every node with weights (``WEIGHTED``) of the graph the converter quantizes, in graph
    order."""
    return [(n.name, n.op_type) for n in onnx.load(str(graph_in)).graph.node if n.op_type in WEIGHTED]


def ablate(source, pre, model, reader_cls, x: np.ndarray, labels: np.ndarray, out_dir: str | Path) -> list[dict]:
    """Quantize all but one node, for every node with weights of ``pre`` (``nodes``); on the first
    ``ABLATION_FRAMES`` of ``x``, per family the accuracy, the max abs error against FP32, the frames leaving it in
    float fixes and breaks against ``model`` (exact test) and the mean per-frame max abs error's change (bootstrap
    interval). Ranked: the most frames recovered on the family that recovers fewest first. Each row keeps its answers
    and the ``labels`` they are judged on."""
    out_dir = Path(out_dir)
    x, labels = np.asarray(x)[:ABLATION_FRAMES], np.asarray(labels)[:ABLATION_FRAMES]
    fp32 = answers(source, x, kernels.EXACT)
    base = {f: answers(model, x, f) for f in kernels.FAMILIES}
    handed = {f: _score(fp32, base[f], labels) for f in kernels.FAMILIES}
    rows = []
    for name, op in nodes(pre):
        m = convert(pre, out_dir / f"without-{name}.onnx", reader_cls, _calibration_frames(), exclude=[name])
        runs_as = runs_in_session(m, name)
        row: dict = {"node": name, "op": op, "model": m, "labels": labels, "runs_as": runs_as}
        for f in kernels.FAMILIES:
            q = answers(m, x, f)
            row[f] = {**_score(fp32, q, labels), "answers": q.argmax(1), "handed": handed[f],
                      "against_handed": evidence.paired(labels, base[f].argmax(1), q.argmax(1)),
                      "error_change": evidence.bootstrap_difference(  # counted past one output step, as in 08
                          evidence.per_image_max_abs_error(fp32, base[f]), evidence.per_image_max_abs_error(fp32, q),
                          np.mean, floor=evidence.OUTPUT_STEP)}
        rows.append(row)
    return sorted(rows, key=lambda r: (-min(r[f]["against_handed"].difference for f in kernels.FAMILIES),
                                       min(r[f]["against_handed"].p_value for f in kernels.FAMILIES)))


RUNS_AS = {"integer": "integer kernel, weights quantized at load", "float-int8": "float op, weights quantized at load",
           "float": "float"}
"""What an excluded node runs as in ORT's session: ORT quantizes the float weights of a Conv or Gemm that reads a
quantized tensor and writes one (``lab.load_time``: int8 per tensor, from their min and max), then fuses it into an
integer kernel where the QDQ fusion's type rules allow."""


def runs_in_session(model, name: str) -> str:
    """``RUNS_AS``'s words for node ``name`` of ``model``, read from the graph ORT's session optimizes."""
    written = onnx.load(str(model))
    at_load = name in load_time.requantized(written)
    still_float = any(n.name == name and n.op_type in WEIGHTED for n in hybrid.optimized(written).graph.node)
    return RUNS_AS["float" if not at_load else "float-int8" if still_float else "integer"]

ABLATION_COLUMNS = [("rank", "rank", "d"), ("node", "excluded", ""), ("op", "op", ""),
                    ("runs_as", "runs in the session as", ""), ("family", "family", ""),
                    ("accuracy", f"accuracy ({ABLATION_FRAMES} frames)", ".4f"),
                    ("max_abs_error", "max abs err", ".3f"),
                    ("evidence", "against the handed-in model, frame by frame", ""),
                    ("error_change", "mean per-frame error change", "")]


HANDED_ROW = "none (the handed-in model)"


def ablation_rows(ranking: Sequence[Mapping]) -> list[dict]:
    """``ablate``'s ranking as table rows: the handed-in model on the same frames first, then one per (node, family);
    a rank only for the nodes that recover frames beyond noise on every family (the others have no order)."""
    ranks = {r["node"]: i for i, r in enumerate((r for r in ranking if recovers(r)), 1)}
    handed = [{"node": HANDED_ROW, "family": f, **ranking[0][f]["handed"]} for f in kernels.FAMILIES] if ranking else []
    return handed + [{"rank": ranks.get(r["node"]), "node": r["node"], "op": r["op"], "runs_as": r["runs_as"],
                      "family": f, "accuracy": r[f]["accuracy"], "max_abs_error": r[f]["max_abs_error"],
                      "evidence": r[f]["against_handed"].words(), "error_change": r[f]["error_change"].words()}
                     for r in ranking for f in kernels.FAMILIES]


def recovers(row: Mapping) -> bool:
    """Whether leaving the row's node in float fixes more frames than it breaks, beyond noise, on every family."""
    return all(row[f]["against_handed"].beyond_noise and row[f]["against_handed"].difference > 0
               for f in kernels.FAMILIES)


def worst(ranking: Sequence[Mapping]) -> str | None:
    """The node the ranking puts first when leaving it in float recovers beyond noise on every family, else None."""
    return ranking[0]["node"] if ranking and recovers(ranking[0]) else None


def ranking_sentence(ranking: Sequence[Mapping]) -> str:
    found = [r for r in ranking if recovers(r)]
    noise = [r["node"] for r in ranking if not any(r[f]["against_handed"].beyond_noise for f in kernels.FAMILIES)]
    n = ranking[0][kernels.EXACT]["against_handed"].n if ranking else 0
    if not found:
        return (f"**Your run.** On {n} frames, no excluded node recovers frames beyond noise on both families: "
                "the loss is spread over the graph, and excluding one node will not buy it back.")
    top = found[0]
    gains = ", ".join(f"{f} {top[f]['against_handed'].words()}" for f in kernels.FAMILIES)
    return (f"**Your run.** On {n} frames, excluding `{top['node']}` ({top['op']}; in the session it runs as "
            f"{top['runs_as']}) recovers frames beyond noise on both "
            f"families ({gains}). " + (f"Every other node that recovers beyond noise: "
                                       f"{', '.join(r['node'] for r in found[1:])}. " if len(found) > 1 else
                                       "No other node does. ")
            + (f"For {', '.join(noise)} the frames fixed and broken are noise on both families: no rank among them "
               "(their error column may still move beyond noise, on frames whose answer does not change; the frame "
               "by frame column decides)." if noise else ""))


def check_exclusion(node: object, ranking: Sequence[Mapping]) -> str:
    """The exercise's check: ``node`` must be a node of the ablation, recover frames beyond noise on every family,
    and not be beaten beyond noise by the top of the ranking. ``ExclusionRefused`` names the mistake."""
    names = [r["node"] for r in ranking]
    if not isinstance(node, str) or node not in names:
        raise ExclusionRefused(f"EXCLUDE is {node!r}: not a node the ablation excluded. Its nodes are "
                               f"{names}: pick one by its name in the ranking's first column")
    row = ranking[names.index(node)]
    for f in kernels.FAMILIES:
        ev = row[f]["against_handed"]
        if not (ev.beyond_noise and ev.difference > 0):
            raise ExclusionRefused(
                f"EXCLUDE = {node!r}: excluding it gives {ev.words()} on the {f} family. "
                + ("That is noise, and noise is not a ranking: " if not ev.beyond_noise else "That loses frames: ")
                + "pick the node whose exclusion recovers frames beyond noise on both families")
    top = ranking[0]
    for f in kernels.FAMILIES:
        ev = evidence.paired(top["labels"], row[f]["answers"], top[f]["answers"])
        if node != top["node"] and ev.beyond_noise and ev.difference > 0:
            raise ExclusionRefused(f"EXCLUDE = {node!r} recovers frames, but excluding {top['node']!r} "
                                   f"recovers more on the {f} family ({top['node']} against {node}: {ev.words()}): "
                                   "exclude the worst node first, the top of your ranking")
    return (f"exclusion ok: {node} recovers beyond noise on both families ("
            + "; ".join(f"{f} {row[f]['against_handed'].words()}" for f in kernels.FAMILIES) + ")")


# --- step 4: the worst node excluded -------------------------------------------------------------------------------

def excluded(source, model, without, x: np.ndarray, labels: np.ndarray) -> dict:
    """Per family: the model ``without`` one node against the handed-in ``model`` and against FP32, pair by pair;
    and both files' bytes."""
    fp32 = answers(source, x, kernels.EXACT)
    out: dict = {"bytes": {"handed": Path(model).stat().st_size, "without": Path(without).stat().st_size}}
    return {**out, **against_handed(fp32, model, without, x, labels)}


def against_handed(fp32: np.ndarray, model, other, x: np.ndarray, labels: np.ndarray) -> dict:
    """Per family: ``other`` scored against FP32's answers ``fp32``, and pair by pair against the handed-in
    ``model`` and against FP32."""
    out = {}
    for f in kernels.FAMILIES:
        base, q = answers(model, x, f), answers(other, x, f)
        out[f] = {**_score(fp32, q, labels), "handed": _score(fp32, base, labels),
                  "against_handed": evidence.paired(labels, base.argmax(1), q.argmax(1)),
                  "against_fp32": evidence.paired(labels, fp32.argmax(1), q.argmax(1))}
    return out


def _left(ev: evidence.Paired) -> str:
    if ev.beyond_noise and ev.difference < 0:
        return f"still {-ev.difference:.4f} below FP32 beyond noise ({ev.words()})"
    return f"within noise of FP32 ({ev.words()})"


def exclusion_sentence(node: str, e: Mapping) -> str:
    parts = []
    for f in kernels.FAMILIES:
        ev = e[f]["against_handed"]
        change = (f"recovers {ev.difference:.4f} beyond noise ({ev.words()})" if ev.beyond_noise and ev.difference > 0
                  else f"changes the accuracy only by noise ({ev.words()})" if not ev.beyond_noise else
                  f"loses {-ev.difference:.4f} beyond noise ({ev.words()})")
        parts.append(f"on the {f} family, {e[f]['handed']['accuracy']:.4f} -> {e[f]['accuracy']:.4f}: it {change}, "
                     f"and is {_left(e[f]['against_fp32'])}; max abs error {e[f]['handed']['max_abs_error']:.3f} -> "
                     f"{e[f]['max_abs_error']:.3f}")
    b = e["bytes"]
    size = ("grows" if b["without"] > b["handed"] else "shrinks" if b["without"] < b["handed"] else "keeps its size")
    return (f"**Your run.** With `{node}` excluded: " + "; ".join(parts)
            + f". The file {size}: {b['handed']:,} -> {b['without']:,} bytes (that node's weights stay float32, with "
            "no DequantizeLinear; a QuantizeLinear / DequantizeLinear pair on a tensor it shares with a quantized "
            "node stays, and only the pairs no quantized node needs go).")


# --- step 5: 16-bit activations ----------------------------------------------------------------------------------

def sixteen_bit(source, pre, model, reader_cls, x: np.ndarray, labels: np.ndarray, out_dir: str | Path) -> dict:
    """The same calibration with 16-bit activations (QUInt16, 8-bit weights; ``quantize_static`` moves the graph to
    opset 21, whose QuantizeLinear takes 16-bit types): the opset and the Q/DQ ops' domain, per family against the
    handed-in model and FP32, and the bytes."""
    m = convert(pre, Path(out_dir) / SIXTEEN, reader_cls, _calibration_frames(), activation_type="QUInt16")
    fp32 = answers(source, x, kernels.EXACT)
    written = onnx.load(str(m))
    opset = max(o.version for o in written.opset_import if o.domain in ("", "ai.onnx"))
    domains = sorted({n.domain or "ai.onnx" for n in written.graph.node
                      if n.op_type in ("QuantizeLinear", "DequantizeLinear")})
    out: dict = {"model": m, "opset": opset, "qdq_domains": domains, "bytes": {"fp32": Path(source).stat().st_size,
                                                       "handed": Path(model).stat().st_size,
                                                       "sixteen": m.stat().st_size}}
    return {**out, **against_handed(fp32, model, m, x, labels)}


def sixteen_lines(s: Mapping) -> str:
    b = s["bytes"]
    lines = [f"opset {s['opset']}, QuantizeLinear / DequantizeLinear from {', '.join(s['qdq_domains'])}",
             f"bytes: FP32 {b['fp32']:,}, handed-in {b['handed']:,}, 16-bit activations {b['sixteen']:,}"]
    lines += [f"{f:<10}: accuracy {s[f]['accuracy']:.4f} (handed-in {s[f]['handed']['accuracy']:.4f}), max abs error "
              f"{s[f]['max_abs_error']:.3f} (handed-in {s[f]['handed']['max_abs_error']:.3f}); against the handed-in "
              f"model: {s[f]['against_handed'].words()}" for f in kernels.FAMILIES]
    return "\n".join(lines)


def sixteen_sentence(s: Mapping) -> str:
    helped = all(s[f]["against_handed"].beyond_noise and s[f]["against_handed"].difference > 0
                 for f in kernels.FAMILIES)
    same = not any(s[f]["against_handed"].beyond_noise for f in kernels.FAMILIES)
    parts = [f"{f} {s[f]['accuracy']:.4f}, {_left(s[f]['against_fp32'])}" for f in kernels.FAMILIES]
    verdict = ("16-bit activations recover frames beyond noise on both families" if helped else
               "16-bit activations change the accuracy only by noise on both families" if same else
               "16-bit activations move the accuracy beyond noise on one family only")
    return (f"**Your run.** {verdict} ({'; '.join(parts)}). 16 bits give each ruler 65,536 grid values, 256 times "
            "the 8-bit grid's 256: a finer resolution; they do not move its ends.")


# --- why -------------------------------------------------------------------------------------------------------------

def revealed(model, camera_model) -> dict:
    """What the handed-in model was calibrated on, and its input ruler against a camera-calibrated model's."""
    return {"calibration": f"the camera's calibration frames at {CALIBRATION_LIGHT} of the light "
                           f"(lab.camera.dimmed(frames, {CALIBRATION_LIGHT}): darker than the dim condition's half)",
            "handed_input_range": camera_path.input_range(model),
            "camera_input_range": camera_path.input_range(camera_model)}


def why_sentence(r: Mapping, x: np.ndarray, ranking: Sequence[Mapping], first: str) -> str:
    """The answer, from the run: the calibration frames, both input rulers, the share of the evaluation frames'
    pixels outside the handed-in ruler, and whether the ablation's worst node is ``first``, the node that reads
    the input."""
    lo, hi = r["handed_input_range"]
    clipped = float(np.mean((x < lo) | (x > hi)))
    top = worst(ranking)
    where = (f"they clip at `{first}`, the node that reads the input and the one your ablation ranked worst"
             if top == first else f"they clip at `{first}`, the node that reads the input")
    return (f"**Why.** The handed-in model was calibrated on {r['calibration']}. Its input ruler is "
            f"{r['handed_input_range']}, the camera-calibrated model's (section 2) {r['camera_input_range']}: "
            f"{clipped:.1%} of the evaluation frames' input values fall outside the handed-in ruler, and {where}.")
