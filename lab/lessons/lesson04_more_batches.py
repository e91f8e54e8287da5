"""Grow a calibration set batch by batch and watch what the ruler and the error do.

Lesson 04: more batches of the wrong distribution never widen the ruler past what that
distribution holds, so the error stays where it was; one or two batches of the right data
beat them all. Each batch count gets its own model, ``<kind>-NNN.onnx``. This module holds the narrow stream
(``narrow_batches``), the series (``grow``), its report, its figure (``growth_figure``) and the lesson's
prediction (``PREDICTION``) with its judge.

The module of ``notebooks/04_more_batches.ipynb``.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

import numpy as np

from lab import convert, data, graph, palette, predictions, ruler, tables
from lab.compare import scorecard
from lab.convert import quantize
from lab.data import Split, data_sha256, file_sha256
from lab.errors import LabError, ReaderContractError
from lab.exercise import SETTINGS
from lab.report import header
from lab.ruler import calibration_range

Row = dict

# Small batches, many of them: 512 batches of 8 narrow images is 4096 images, eleven times the right set, and still
# the ruler does not widen; 8 is also small enough that one or two batches of the right data are a fair contrast
BATCH_SIZE = 8
MAX_BATCHES = 512  # the narrow set grows 1, 2, 4, ... up to this many batches (the notebook's MAX_BATCHES)
RIGHT_BATCHES = (1, 2)  # batch counts of the right data to compare with: one or two batches already win
FOLDER = "growth"  # the workspace folder the series is written into


class GrowthCheckFailed(LabError):
    """Lesson 04's exercise did not build the series the lesson asked for."""


Progress = Callable[[Row], None]


def narrow_batches(n_batches: int, batch_size: int = BATCH_SIZE, seed: int = 0,
                   gain: float = data.NARROW_GAIN) -> np.ndarray:
    """A stream of narrow (dark) batches, as many as asked: calibration images at random gains up to ``gain``.

    Returns float32 [n_batches * batch_size, 64]. The same seed gives the same stream, and
    a longer stream starts with the shorter one.
    """
    raw = data.load_split("calibration").raw
    u = np.random.default_rng(seed).random((n_batches * batch_size, 2))  # one row per sample: prefix-stable
    picks = np.minimum((u[:, 0] * len(raw)).astype(np.int64), len(raw) - 1)
    gains = (gain * (0.4 + 0.6 * u[:, 1:])).astype(np.float32)
    return data.preprocess(raw[picks]) * gains


def doubling_counts(max_batches: int) -> list[int]:
    """Batch counts 1, 2, 4, ... up to ``max_batches`` (which ends the list even if not a power of two)."""
    if max_batches < 1:
        raise ValueError(f"max_batches must be at least 1, got {max_batches}")
    counts, n = [], 1
    while n < max_batches:
        counts.append(n)
        n *= 2
    return counts + [max_batches]


def model_name(kind: str, batches: int) -> str:
    """File name of the model calibrated on ``batches`` batches of ``kind``: ``narrow-004.onnx``."""
    return f"{kind}-{batches:03d}.onnx"


def grow(source: str | Path, out_dir: str | Path, counts: Iterable[int],
         make_reader: Callable[[np.ndarray], object], stream: np.ndarray, *, kind: str,
         batch_size: int, x: np.ndarray, labels: np.ndarray, reference: np.ndarray,
         progress: Progress | None = None, **settings) -> list[Row]:
    """Quantize ``source`` once per batch count, calibrated on the first ``n x batch_size`` samples of ``stream``.

    ``make_reader(pixels)`` builds the calibration reader (the student's ``DigitReader``).
    Each model is measured against ``reference`` (the FP32 outputs on ``x``). Returns one row per
    count: batches, samples, the calibration hash and range, the input ruler read back from the
    graph, max abs error and accuracy. ``progress(row)`` is called after each model.
    ``settings`` go to ``lab.convert.quantize`` (QDQ, QInt8, per-tensor, MinMax by default).
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    stream = np.asarray(stream, np.float32)
    rows = []
    for n in counts:
        want = int(n) * int(batch_size)
        if want > len(stream):
            raise ValueError(f"{n} batches of {batch_size} need {want} samples; the {kind} stream has "
                             f"{len(stream)}. Draw a longer stream (narrow_batches)")
        pixels = stream[:want]
        model = out_dir / model_name(kind, n)
        record = quantize(source, model, make_reader(pixels), **settings)
        if record.calibration_samples != want:
            raise ReaderContractError(f"the reader served {record.calibration_samples} samples for {kind} x {n} "
                                      f"batches; expected {want}: serve every sample once, in batches, then None")
        ruler = graph.input_ruler(model)
        rows.append({
            "kind": kind, "batches": int(n), "batch_size": int(batch_size), "samples": want,
            "model": model.name, "model_sha256": file_sha256(model),
            "calibration_sha256": data_sha256(pixels), "calibration_range": calibration_range(pixels),
            "scale": ruler.scale, "zero_point": ruler.zero_point, "range_seen": ruler.range_seen,
            **scorecard(model, x, labels, reference),
        })
        if progress is not None:
            progress(rows[-1])
    return rows


def range_kept(source: str | Path, reader, moving_average: bool) -> float:
    """The input range (scale x 255) ORT's MinMax calibrator keeps from ``reader``'s batches: the extremes of all
    batches by default, the mean of each batch's lowest and highest with ``CalibMovingAverage`` (``moving_average``
    in ``create_calibrator``'s options). The calibrator runs on a copy of ``source``; no model is written."""
    lo, hi = convert.calibrated_ranges(source, reader, extra_options={"moving_average": bool(moving_average)})[
        data.INPUT_NAME]
    return ruler.ruler_for(lo, hi).range_seen


def verdict(rows: list[Row], wrong: str = "narrow", right: str = "right") -> dict:
    """Does the most-grown ``wrong`` set still lose to every ``right`` model? The numbers behind the answer."""
    wrong_rows = [r for r in rows if r["kind"] == wrong]
    right_rows = [r for r in rows if r["kind"] == right]
    if not wrong_rows or not right_rows:
        raise ValueError(f"need rows of both kinds {wrong!r} and {right!r}; have {sorted({r['kind'] for r in rows})}")
    most = max(wrong_rows, key=lambda r: r["batches"])
    worst_right = max(right_rows, key=lambda r: r["max_abs_error"])
    return {
        "wrong": wrong, "right": right,
        "wrong_most_batches": most["batches"],
        "wrong_most_batches_max_abs_error": most["max_abs_error"],
        "wrong_most_batches_accuracy": most["accuracy"],
        "wrong_best_max_abs_error": min(r["max_abs_error"] for r in wrong_rows),
        "right_batches": sorted(r["batches"] for r in right_rows),
        "right_worst_max_abs_error": worst_right["max_abs_error"],
        "right_worst_accuracy": min(r["accuracy"] for r in right_rows),
        "wrong_stays_worse": min(r["max_abs_error"] for r in wrong_rows) > worst_right["max_abs_error"],
    }


def format_table(rows: list[Row]) -> str:
    """Rows as a fixed-width table, ranges to 4 decimals, errors to 3, accuracy to 3."""
    head = (f"{'set':<7} {'batches':>7} {'samples':>7} {'calib range':>11} {'range seen':>10} {'max abs err':>11} "
            f"{'accuracy':>8}")
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(f"{r['kind']:<7} {r['batches']:>7d} {r['samples']:>7d} {r['calibration_range']:>11.4f} "
                     f"{r['range_seen']:>10.4f} {r['max_abs_error']:>11.3f} {r['accuracy']:>8.3f}")
    return "\n".join(lines)


HIDDEN = ("relu1.out", "relu2.out", "fc3.out")


def hidden_rulers(source: str | Path, models: dict, x: np.ndarray, tensors: Iterable[str] = HIDDEN) -> list[dict]:
    """Per hidden tensor and model: where the ruler ends, the share of the deployed values it clips, and its
    mean round-trip error on them. Why a small right calibration can match a large one: fewer images see fewer
    extremes, so their rulers end sooner (finer steps, a few values clipped), and the two trade off."""
    tensors = list(tensors)
    values = graph.tensor_values(source, x, tensors)
    rows = []
    for t in tensors:
        v = values[t]
        row: dict[str, object] = {"tensor": t, "values_reach": [float(v.min()), float(v.max())]}
        for label, model in models.items():
            r = graph.input_ruler(model, t)
            stats = ruler.ruler_stats(v, *r.interval)
            row[label] = {"ruler": list(r.interval), "clipped_fraction": stats["clipped_fraction"],
                          "mean_abs_error": stats["mean_abs_error"]}
        rows.append(row)
    return rows


def format_hidden_rulers(rows: list[dict]) -> str:
    """One line per tensor: where the deployed values reach, then each model's ruler, clipped share, mean error."""
    labels = [k for k in rows[0] if k not in ("tensor", "values_reach")]
    head = f"{'tensor':<10} {'values reach':>17}" + "".join(f" | {label + ': ruler':>24} {'clipped':>7} {'mean err':>8}"
                                                              for label in labels)
    lines = [head, "-" * len(head)]
    for r in rows:
        lo, hi = r["values_reach"]
        line = f"{r['tensor']:<10} [{lo:>7.2f}, {hi:>6.2f}]"
        for label in labels:
            m = r[label]
            line += (f" | {'[' + format(m['ruler'][0], '.2f') + ', ' + format(m['ruler'][1], '.2f') + ']':>24} "
                     f"{m['clipped_fraction']:>7.1%} {m['mean_abs_error']:>8.4f}")
        lines.append(line)
    return "\n".join(lines)


def growth_report(source: str | Path, rows: list[Row], stream: np.ndarray, evaluation: Split, *,
                  max_batches: int, seed: int, batch_size: int = BATCH_SIZE,
                  right_batches: Iterable[int] | None = None, settings: Mapping[str, object] = SETTINGS,
                  folder: str = FOLDER) -> dict:
    """Lesson 04's ``growth.json``, from what the lesson produced: the ``rows`` of its two ``grow`` calls, the
    narrow ``stream`` they drew from (``narrow_batches(max_batches, batch_size, seed)``) and the settings
    they converted with. ``right_batches`` defaults to the right rows' batch counts. The verdict is recomputed
    from the rows."""
    return {
        **header("growth/1", "04_more_batches", source,
                 {**{k: settings[k] for k in SETTINGS}, "batch_size": int(batch_size)}, evaluation),
        "folder": folder,
        "narrow_stream": {"max_batches": int(max_batches), "batch_size": int(batch_size), "seed": int(seed),
                          "sha256": data_sha256(stream)},
        "right_data": {"batches": [int(n) for n in (right_batches if right_batches is not None else
                                                     (r["batches"] for r in rows if r["kind"] == "right"))]},
        "rows": rows,
        "verdict": verdict(rows),
    }


# The columns of the table a student may read to say why more narrow batches never catch up, and why each other
# one does not answer it (lesson 04's exercise asks for one: READ)
COLUMNS = {
    "range_seen": "",
    "max_abs_error": "max_abs_error shows that every narrow model stays bad, not why: read the column that you can "
                     "set beside what deployment feeds the model (pixels up to 1.0)",
    "accuracy": "accuracy wanders by a point or two from one count to the next and says nothing about why: read the "
                "column that you can set beside what deployment feeds the model (pixels up to 1.0)",
    "samples": "samples is how much you grew, not what MinMax saw: read the column that you can set beside what "
               "deployment feeds the model (pixels up to 1.0)",
    "calibration_range": "calibration_range is the data's own range, read before any conversion: read what the "
                         "model's ruler became (it is the ruler that clips)",
}


SOURCES = {"narrow": "`stream` (lesson.narrow_batches)", "right": "`right` (lab.data.calibration_set('right'))"}
OTHER = {"narrow": "right", "right": "narrow"}


def _series_from(rows: list[Row], kind: str, pixels: np.ndarray) -> str:
    """'' when every ``kind`` row was calibrated on a prefix of ``pixels``, else what it was drawn from."""
    for r in rows:
        if r["kind"] == kind and r.get("calibration_sha256") != data_sha256(pixels[:r["samples"]]):
            return f"{kind} x {r['batches']}"
    return ""


def check_series(rows, counts: list[int], right_batches: list[int], folder: Path, *, stream: np.ndarray | None = None,
                 right: np.ndarray | None = None, read: str = "range_seen", max_batches: int | None = None) -> str:
    """Lesson 04's exercise: a narrow series grown from ``stream`` up to ``max_batches`` (default: the last of
    ``counts``), a right series of one or two batches (``right_batches``) from ``right``, every row in one flat
    list, each model in ``folder``, and ``read``, the column that says why. Raises ``GrowthCheckFailed`` naming the
    choice that is wrong."""
    if not isinstance(rows, list) or any(isinstance(r, (list, tuple)) for r in rows):
        raise GrowthCheckFailed("rows holds lists, not rows: rows = [narrow_rows, right_rows] nests the two series. "
                                "Put the rows themselves in one list: rows = narrow_rows + right_rows")
    rows = [r for r in rows if isinstance(r, dict)]
    got = {kind: [r.get("batches") for r in rows if r.get("kind") == kind] for kind in ("narrow", "right")}
    for kind in ("narrow", "right"):
        if not got[kind]:
            raise GrowthCheckFailed(f"rows hold no {kind} models: call lesson.grow(..., kind={kind!r}) and put its "
                                    "rows in `rows`")
    top = max_batches or max(counts)
    if max(got["narrow"]) < top or got["narrow"] != sorted(set(got["narrow"])) or len(got["narrow"]) < 3:
        raise GrowthCheckFailed(f"the narrow series has batch counts {got['narrow']}: to show whether more narrow "
                                f"batches help, grow it from a few batches up to MAX_BATCHES ({top}), at least three "
                                "counts in increasing order (`counts` does)")
    if max(got["right"]) > max(right_batches):
        raise GrowthCheckFailed(f"the right series has batch counts {got['right']}: the lesson's point is that one or "
                                f"two batches of the right data already win; grow it over RIGHT_BATCHES "
                                f"({list(right_batches)})")
    for kind, own, other in (("narrow", stream, right), ("right", right, stream)):
        where = _series_from(rows, kind, own) if own is not None else ""
        if where:
            drawn = (SOURCES[OTHER[kind]] if other is not None and not _series_from(rows, kind, other)
                     else "other data")
            raise GrowthCheckFailed(f"{where} was calibrated on {drawn}, not on {SOURCES[kind]}: grow the {kind} "
                                    f"series from {SOURCES[kind]}")
    missing = [r["model"] for r in rows if not (Path(folder) / r["model"]).exists()]
    if missing:
        raise GrowthCheckFailed(f"{missing[0]} is not in {Path(folder).name}/: pass GROWTH as grow's out_dir")
    if read not in COLUMNS:
        raise GrowthCheckFailed(f"READ is {read!r}; expected one of the table's columns: "
                                + ", ".join(map(repr, COLUMNS)))
    if COLUMNS[read]:
        raise GrowthCheckFailed(f"READ is {read!r}: {COLUMNS[read]}")
    return f"{len(rows)} models in {Path(folder).name}/: the narrow series up to {top} batches, the right one " \
           f"over {got['right']}; read {read} against the deployed range"


def growth_figure(rows: Sequence[Mapping], deployed_range: float = 1.0):
    """Range seen and max abs error against the number of calibration batches (log2 axis), one line per set:
    a matplotlib Figure, with margins fixed in inches (``lab.plots.fixed_margins``): cheaper to draw."""
    from matplotlib.figure import Figure  # deferred: 0.6 s to import (python -X importtime); the grader draws nothing

    from lab.plots import fixed_margins  # deferred: lab.plots imports matplotlib
    fig = Figure(figsize=(11, 4.2))
    ax_range, ax_err = fig.subplots(1, 2)
    kinds = list(dict.fromkeys(r["kind"] for r in rows))
    for i, kind in enumerate(kinds):
        mine = sorted((r for r in rows if r["kind"] == kind), key=lambda r: r["batches"])
        n = [r["batches"] for r in mine]
        style = dict(palette.style(kind, i), ms=5, lw=1.5, label=f"{kind} data")
        ax_range.plot(n, [r["range_seen"] for r in mine], **style)
        ax_err.plot(n, [r["max_abs_error"] for r in mine], **style)
    ax_range.axhline(deployed_range, color="grey", ls="--", lw=1)
    ax_range.annotate("deployed pixels span this", (1, deployed_range), xytext=(0, -12),
                      textcoords="offset points", fontsize=8, color="grey")
    ax_range.set_ylim(0, deployed_range * 1.15)
    ax_range.set_title("Input range seen (scale x 255)", y=1.0)
    ax_range.set_ylabel("range seen")
    ax_err.set_title("Max abs error on the evaluation set", y=1.0)
    ax_err.set_ylabel("max |INT8 - FP32| probability")
    ax_err.set_ylim(0, 1.05)
    ticks = sorted({r["batches"] for r in rows})
    for ax in (ax_range, ax_err):
        ax.set_xscale("log", base=2)
        ax.set_xticks(ticks, [str(t) for t in ticks])
        ax.minorticks_off()
        ax.set_xlabel("calibration batches")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=9)
    fig.suptitle("More batches of the wrong data do not widen the ruler")
    return fixed_margins(fig, left=0.75, right=0.15, bottom=0.55, top=0.65, wgap=0.9)


def summary_lines(doc: dict) -> list[str]:
    """The run's summary of ``growth.json``: the most narrow batches against the fewest right ones."""
    n, v = tables.number, doc.get("verdict", {})
    return [f"  narrow x {v.get('wrong_most_batches', '-')} batches: max abs err "
            f"{n(v.get('wrong_most_batches_max_abs_error'))}, accuracy {n(v.get('wrong_most_batches_accuracy'))}",
            f"  right  x {v.get('right_batches', '-')} batches: worst max abs err "
            f"{n(v.get('right_worst_max_abs_error'))}, worst accuracy {n(v.get('right_worst_accuracy'))}",
            f"  more wrong data stays worse: {v.get('wrong_stays_worse', '-')}"]


def _more_batches(q: predictions.Question, answer) -> dict:
    answer = q.mapping(answer, '"narrow_reaches_right" and "largest_narrow_range"')
    return {"narrow_reaches_right": q.flag("narrow_reaches_right", answer.get("narrow_reaches_right")),
            "largest_narrow_range": q.positive("largest_narrow_range", answer.get("largest_narrow_range"))}


PREDICTION = predictions.Question(
    "more_batches", "04", "whether any number of narrow batches reaches the right data's error, and the range the "
    "largest narrow calibration will see",
    '{"narrow_reaches_right": <True or False>, "largest_narrow_range": <a number>}', _more_batches)


# The largest range a narrow calibration can see is a judgement about the data (its brightest gain), checked within
# 2 %: the stream's brightest pixel sits a hair below the gain's limit
PREDICTED_RANGE_REL = 0.02


def judge_more_batches(answer, narrow_errors: Mapping[int, float], right_errors: Mapping[int, float],
                       largest_range: float) -> predictions.Verdict:
    """Errors are max abs errors against FP32 per batch count; ``largest_range`` is the largest narrow model's
    ruler width (scale x 255)."""
    answer = PREDICTION.normalise(answer)
    best_narrow = min(narrow_errors, key=narrow_errors.__getitem__)
    worst_right = max(right_errors, key=right_errors.__getitem__)
    reaches = narrow_errors[best_narrow] <= right_errors[worst_right]
    said = answer["narrow_reaches_right"]
    rng = answer["largest_narrow_range"]
    parts = [(said == reaches,
              f"you said more narrow batches {'do' if said else 'never'} reach the right data's error; measured, "
              f"the best narrow model ({best_narrow} batch{'' if best_narrow == 1 else 'es'}) has "
              f"{narrow_errors[best_narrow]:.3f} against "
              f"{right_errors[worst_right]:.3f} for {worst_right} right batch(es)"),
             (abs(rng - largest_range) <= PREDICTED_RANGE_REL * largest_range,
              f"you said the largest narrow calibration sees a range of {rng:.4g}; its ruler spans "
              f"{largest_range:.4g}")]
    return predictions.verdict("more_batches", parts,
                    "MinMax keeps the largest value the data holds. Every narrow image is dimmed to at most a quarter "
                    "of full scale, so no number of them ever holds a brighter pixel: the range stops below 0.25 and "
                    "every bright stroke deployment feeds the model is clipped. More samples of the same "
                    "distribution make that answer surer, never different")
