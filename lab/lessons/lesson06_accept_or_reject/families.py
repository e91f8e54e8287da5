"""One INT8 model on both kernel families: what changes, why, and the settings that cure it.

The saturating family (x86 AVX2 without VNNI) adds each pair of u8 x s8 products into an int16
(``lab.kernels``). A pair of weights ``(w[2j], w[2j+1])`` of one column can pass 32,767 only if
both have the same sign and ``255 x (|w[2j]| + |w[2j+1]|) > 32,767``, that is
``|w[2j]| + |w[2j+1]| >= 129``: per-channel weights reach +-127 in every column, reduce_range's
stop at 64 (64 + 64 = 128), and an S8S8 kernel (QOperator with QInt8 activations) has no such pairs.
Every number here is computed for both families on one machine (``lab.compare.predict``).
"""
from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

from lab import compare, convert, graph, kernels, palette, predictions, tables
from lab.errors import LabError

ACTIVATION_MAX = 255  # the largest u8 activation the U8S8 kernel multiplies
# The candidate's settings, changed one at a time: name -> (what changes, the overrides).
VARIANTS: dict[str, tuple[str, dict]] = {
    "candidate": ("QDQ, per-channel weights (the candidate)", {}),
    "reduce_range": ("7-bit weights (reduce_range=True)", {"reduce_range": True}),
    "per_tensor": ("one weight scale per tensor", {"per_channel": False}),
    "qoperator_s8": ("QOperator, QInt8 activations (S8S8)", {"quant_format": "QOperator", "activation_type": "QInt8"}),
    "qoperator_u8": ("QOperator, QUInt8 activations (U8S8)",
                     {"quant_format": "QOperator", "activation_type": "QUInt8"}),
    "u8u8": ("QUInt8 activations and weights (U8U8)", {"activation_type": "QUInt8", "weight_type": "QUInt8"}),
}


def _accuracy(out: np.ndarray, labels: np.ndarray) -> float:
    return float((out.argmax(axis=1) == np.asarray(labels)).mean())


def _where(family: str) -> str:
    return "emulation" if kernels.emulated(family) else "this machine"


# --- one model, both families ---------------------------------------------------------------------

def side_by_side(source, model, x: np.ndarray, labels: np.ndarray,
                 families: Sequence[str] = kernels.FAMILIES) -> list[dict]:
    """One row per family: where it was computed, accuracy, max abs error vs the FP32 ``source``,
    and how many predictions differ from the first family's."""
    reference = compare.predict(source, x)
    outs = {f: compare.predict(model, x, family=f) for f in families}
    first = outs[families[0]].argmax(axis=1)
    return [{"family": f, "computed_on": _where(f), "accuracy": _accuracy(out, labels),
             "max_abs_error": compare.max_abs_error(reference, out),
             "changed": int((out.argmax(axis=1) != first).sum())} for f, out in outs.items()]


def changed_predictions(model, x: np.ndarray, labels: np.ndarray) -> list[dict]:
    """The images whose predicted digit differs between the exact and the saturating family."""
    exact = compare.predict(model, x, family=kernels.EXACT).argmax(axis=1)
    saturating = compare.predict(model, x, family=kernels.SATURATING).argmax(axis=1)
    return [{"image": int(i), "actual": int(labels[i]), kernels.EXACT: int(exact[i]),
             kernels.SATURATING: int(saturating[i])} for i in np.flatnonzero(exact != saturating)]


def format_side_by_side(rows: Sequence[dict]) -> str:
    """``side_by_side``'s rows as a table."""
    return tables.format_rows(list(rows), [("family", "kernel family", ""), ("computed_on", "computed on", ""),
                                            ("accuracy", "accuracy", ".4f"), ("max_abs_error", "max abs error", ".3f"),
                                            ("changed", f"predictions unlike {rows[0]['family']}", "d")])


# --- the mechanism --------------------------------------------------------------------------------

def pair_sum(activations: Sequence[int], weights: Sequence[int], family: str) -> int:
    """sum_k a[k] x w[k] as ``family`` adds it (u8 activations, s8 weights, zero points 0)."""
    a = np.asarray([activations], np.int64)
    w = np.asarray(weights, np.int64).reshape(-1, 1)
    zero = np.asarray(0, np.int64)
    saturate = kernels.check_family(family) == kernels.SATURATING
    return int(kernels.int_matmul(a, w, zero, zero, saturate_pairs=saturate)[0, 0])


EXAMPLE_PAIRS = (((255, 255), (127, 127)), ((255, 40), (127, 127)), ((255, 255), (64, 64)), ((120, 120), (127, 127)))


def pair_saturation_example(pairs=EXAMPLE_PAIRS) -> list[dict]:
    """A few pairs (a[2j], a[2j+1]) x (w[2j], w[2j+1]) added exactly and in a saturating int16."""
    rows = []
    for a, w in pairs:
        exact, saturating = pair_sum(a, w, kernels.EXACT), pair_sum(a, w, kernels.SATURATING)
        rows.append({"activations": tuple(a), "weights": tuple(w), "exact": exact, "saturating": saturating,
                     "fits": exact == saturating})
    return rows


def format_pairs(rows: Sequence[Mapping]) -> str:
    """``pair_saturation_example``'s rows, one sum per line."""
    lines = [f"int16 holds -32,768 .. {kernels.INT16_MAX:,}"]
    for r in rows:
        (a1, a2), (w1, w2) = r["activations"], r["weights"]
        verdict = "fits" if r["fits"] else f"saturates: the kernel keeps {r['saturating']:,}"
        lines.append(f"{a1:>3} x {w1:>3} + {a2:>3} x {w2:>3} = {a1 * w1:>6,} + {a2 * w2:>6,} = {r['exact']:>6,}  "
                     f"{verdict}")
    return "\n".join(lines)


def weight_matrices(model) -> dict[str, np.ndarray]:
    """The quantized weight matrices: every 2-D INT8 initializer, [K inputs, M output columns]."""
    m = model if isinstance(model, onnx.ModelProto) else onnx.load(str(model))
    return {i.name: numpy_helper.to_array(i) for i in m.graph.initializer
            if i.data_type == onnx.TensorProto.INT8 and len(i.dims) == 2}


def risky_pairs(w: np.ndarray) -> np.ndarray:
    """[K/2, M] booleans: the weight pairs (rows 2j, 2j+1) that pass int16 when both activations are 255."""
    w = np.asarray(w, np.int64)
    if w.shape[0] % 2:
        w = np.pad(w, ((0, 1), (0, 0)))
    first, second = w[0::2], w[1::2]
    return (first * second > 0) & (ACTIVATION_MAX * (np.abs(first) + np.abs(second)) > kernels.INT16_MAX)


def saturation_risk(model) -> list[dict]:
    """Per weight matrix: columns, the largest |w|, columns that reach 127, and the pairs that can saturate."""
    rows = []
    for name, w in weight_matrices(model).items():
        risky = risky_pairs(w)
        rows.append({"weights": name, "columns": int(w.shape[1]),
                     "max_abs_weight": int(np.abs(w.astype(np.int64)).max()),
                     "full_columns": int((np.abs(w.astype(np.int64)).max(axis=0) >= 127).sum()),
                     "pairs": int(risky.size), "risky_pairs": int(risky.sum()),
                     "risky_columns": int(risky.any(axis=0).sum())})
    return rows


def format_risk(by_model: Mapping[str, Sequence[Mapping]]) -> str:
    """``saturation_risk`` for several models, one table."""
    rows = [dict(r, model=name) for name, rs in by_model.items() for r in rs]
    return tables.format_rows(rows, [("model", "model", ""), ("weights", "weights", ""),
                                      ("max_abs_weight", "max |w|", "d"),
                                      ("full_columns", "columns reaching 127", "d"), ("columns", "of", "d"),
                                      ("risky_pairs", "pairs that can pass int16", "d"), ("pairs", "of", "d")])


def weights_figure(models: Mapping[str, object]):
    """Histogram of |w| over every weight matrix, one step line per model, with reduce_range's limit marked (a Figure).

    Drawn cheaply (``lab.plots``): plain decade labels, no minor ticks, margins fixed in inches."""
    from matplotlib.figure import Figure  # deferred: half a second to import; the grader imports this module

    from lab.plots import fixed_margins, plain_log_scale  # deferred: lab.plots imports matplotlib, as above

    fig = Figure(figsize=(8.5, 4))
    ax = fig.subplots()
    bins = (np.arange(0, 129) - 0.5).tolist()
    for i, (name, model) in enumerate(models.items()):
        values = np.concatenate([np.abs(w.astype(np.int64)).ravel() for w in weight_matrices(model).values()])
        look = palette.style(name, i)
        ax.hist(values, bins=bins, histtype="step", lw=1.6, color=look["color"], ls=look["linestyle"], label=name)
    ax.axvspan(64.5, 127.5, color=palette.ALERT, alpha=0.08)
    ax.axvline(64.5, color=palette.ALERT, ls="--", lw=1)
    ax.text(66, 0.97, "only with a weight out here can a pair reach |w1| + |w2| >= 129\n"
            "and pass int16 when both activations are bright",
            fontsize=8, color=palette.ALERT, va="top", transform=ax.get_xaxis_transform())
    plain_log_scale(ax)
    ax.set_xlabel("|quantized weight|")
    ax.set_ylabel("weights (log scale)")
    ax.set_title("How far the INT8 weights reach: per-channel uses +-127 in every column", y=1.0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=9, loc="lower left")
    return fixed_margins(fig, left=0.62, right=0.1, bottom=0.55, top=0.35)


# --- the cures ------------------------------------------------------------------------------------

_QUANTIZE_KEYS = set(inspect.signature(convert.quantize).parameters) - {"source", "output", "calibration"}


def convert_variants(source, out_dir, calibration: np.ndarray | Callable[[], object], base: Mapping,
                     variants: Mapping[str, tuple[str, dict]] = VARIANTS) -> dict[str, Path]:
    """Convert ``source`` once per variant (``base`` settings with its overrides) into ``out_dir``/<name>.onnx.

    ``calibration`` is a float32 array or a function returning a fresh reader (a reader is used up
    by one conversion). ``base`` is the candidate's settings, e.g. ``QuantRecord.settings``.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    settings = {k: v for k, v in base.items() if k in _QUANTIZE_KEYS}
    paths = {}
    for name, (_, overrides) in variants.items():
        data = calibration if isinstance(calibration, np.ndarray) else calibration()
        paths[name] = out_dir / f"{name}.onnx"
        convert.quantize(source, paths[name], data, **{**settings, **overrides})
    return paths


def cures_table(source, models: Mapping[str, Path], x: np.ndarray, labels: np.ndarray,
                variants: Mapping[str, tuple[str, dict]] = VARIANTS) -> list[dict]:
    """Each model on both families: accuracy and max abs error vs FP32, predictions and outputs that change."""
    reference = compare.predict(source, x)
    rows = []
    for name, path in models.items():
        outs = {f: compare.predict(path, x, family=f) for f in kernels.FAMILIES}
        e, s = outs[kernels.EXACT], outs[kernels.SATURATING]
        risk = saturation_risk(path)
        rows.append({"name": name, "setting": variants[name][0] if name in variants else name,
                     "kernel": kernel_kind(path),
                     **{f"{f}_accuracy": _accuracy(o, labels) for f, o in outs.items()},
                     **{f"{f}_error": compare.max_abs_error(reference, o) for f, o in outs.items()},
                     "changed": int((e.argmax(axis=1) != s.argmax(axis=1)).sum()),
                     "output_difference": compare.max_abs_error(e, s),
                     "max_abs_weight": max((r["max_abs_weight"] for r in risk), default=None),
                     "risky_pairs": sum(r["risky_pairs"] for r in risk)})
    base = next((r for r in rows if r["name"] == "candidate"), None)
    for r in rows:  # what a cure costs where nothing saturates: its exact-family error against the candidate's
        r["exact_cost"] = r[f"{kernels.EXACT}_error"] - base[f"{kernels.EXACT}_error"] if base else None
    return rows


def kernel_kind(model) -> str:
    """``U8S8``, ``S8S8`` or ``U8U8``: the integer GEMM the model's MatMuls run on x86 (QDQ shifts s8 activations to
    u8; unsigned weights make it U8U8)."""
    m = model if isinstance(model, onnx.ModelProto) else onnx.load(str(model))
    if any(i.data_type == onnx.TensorProto.UINT8 and len(i.dims) == 2 for i in m.graph.initializer):
        return "U8U8"  # unsigned weight matrices
    s8_activations = graph.input_ruler(model).dtype == "int8"
    return "S8S8" if graph.quant_format(model) == "QOperator" and s8_activations else "U8S8"


def format_cures(rows: Sequence[dict]) -> str:
    """``cures_table``'s rows as a table, both families side by side."""
    e, s = kernels.EXACT, kernels.SATURATING
    return tables.format_rows(list(rows), [
        ("name", "setting", ""), ("kernel", "GEMM", ""), ("max_abs_weight", "max |w|", "d"),
        ("risky_pairs", "risky pairs", "d"),
        (f"{e}_accuracy", f"{e} acc", ".4f"), (f"{e}_error", f"{e} err", ".3f"),
        (f"{s}_accuracy", f"{s} acc", ".4f"), (f"{s}_error", f"{s} err", ".3f"),
        ("changed", "predictions changed", "d"), ("output_difference", "max output diff", ".3f"),
        ("exact_cost", f"{e} err vs candidate", "+.3f")])


def why(row: Mapping) -> str:
    """Why a setting's answers do or do not change between the families, from its measured row."""
    if row["kernel"] == "S8S8":
        return "an S8S8 kernel adds s8 x s8 products in int32: there are no int16 pairs to saturate"
    if row["kernel"] == "U8U8":
        return "a U8U8 kernel (unsigned weights) has no u8 x s8 pairs for vpmaddubsw to add into an int16"
    if row["risky_pairs"] == 0:
        w = row["max_abs_weight"]
        return (f"its largest |w| is {w}: 255 x ({w} + {w}) = {255 * 2 * w:,} fits in int16, "
                "so no pair can saturate")
    if row["changed"]:
        return (f"U8S8 with {row['risky_pairs']} weight pairs that can pass int16: "
                f"{row['changed']} prediction(s) change, outputs move by up to {row['output_difference']:.3f}")
    moved = ("the outputs are identical" if row["output_difference"] == 0 else
             f"outputs move by up to {row['output_difference']:.4f}, no prediction changes")
    return (f"{row['risky_pairs']} weight pairs could pass int16, but on these images saturation is rare "
            f"and does not reach the outputs: {moved}")


def _settings(q: predictions.Question, answer) -> list[str]:
    if isinstance(answer, str) or not isinstance(answer, (set, frozenset, list, tuple)):
        raise q.fail("the answer", "a set of setting names, e.g. {\"candidate\"} (set() for none)", answer)
    for name in answer:
        q.choice("a setting", name, list(VARIANTS))
    return sorted(set(answer), key=list(VARIANTS).index)


PREDICTION = predictions.Question(
    "saturating_settings", "06", "which settings change at least one answer between an exact and a saturating CPU",
    '{"candidate"}', _settings)


def judge_saturating_settings(answer, rows: Sequence[Mapping]) -> predictions.Verdict:
    """The predicted set against ``cures_table``'s rows: the share of settings right, and ``check_prediction``'s
    table (one line per setting, with the measured reason) as the message."""
    said = PREDICTION.normalise(answer)
    matched, report = check_prediction(set(said), rows)
    right, n = sum((r["name"] in said) == (r["changed"] > 0) for r in rows), len(rows)
    lines = report.split("\n", 1)[1]  # the per-setting table without its head line, which the prefix replaces
    head = ("prediction right on every setting" if matched else "prediction wrong on every setting" if not right else
            f"prediction wrong on {n - right} of {n} settings, right on {right} (partial credit: {right}/{n} of the "
            "points, rounded down to a half point); the lines marked NO say why")
    return predictions.Verdict("saturating_settings", right / n, f"{head}:\n{lines}")


class PredictionError(LabError, ValueError):
    """``PREDICTION`` is not a set of the table's setting names; shown as one line, not a traceback."""


def check_prediction(prediction, rows: Sequence[Mapping]) -> tuple[bool, str]:
    """Compare a predicted set of setting names (those whose answers change on a saturating CPU) with
    the measured rows. Returns (matched, a table with the reason for each setting); unknown names raise."""
    names = [r["name"] for r in rows]
    if isinstance(prediction, str) or not all(isinstance(p, str) for p in prediction):
        raise PredictionError(f"PREDICTION should be a set of setting names, e.g. {{'{names[0]}'}}; got {prediction!r}")
    unknown = sorted(set(prediction) - set(names))
    if unknown:
        raise PredictionError(f"PREDICTION names {unknown}, which are not settings here; choose from {names}")
    lines, right = [], 0
    width = max(map(len, names))
    for r in rows:
        said, measured = r["name"] in prediction, r["changed"] > 0
        right += said == measured
        lines.append(f"{'ok ' if said == measured else 'NO '} {r['name']:<{width}}  you said "
                     f"{'changes' if said else 'same   '}, measured {'changes' if measured else 'same   '}: {why(r)}")
    matched = right == len(rows)
    head = ("Your prediction matched on every setting." if matched else
            f"Your prediction matched on {right} of {len(rows)} settings; the lines marked NO say why.")
    return matched, "\n".join([head] + lines)
