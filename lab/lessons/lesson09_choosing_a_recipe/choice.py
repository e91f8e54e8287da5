"""Lesson 09, choosing a recipe for this CPU: the requirement, the candidates measured on both kernel families and
timed here, the choice and its check, ``toolbox.json``. Also the converter's warnings, pre-processing and dynamic
quantization at two batch sizes. The package of ``notebooks/09_choosing_a_recipe.ipynb``.

Conversions and measurements are lesson 08's (``lab.lessons.lesson08_the_quantization_toolbox.toolbox``: ``build``,
``measured``, ``per_family``); timings are the core's ``lab.speed``, in ``ROUNDS`` rounds, and a time is always a
time ratio, "time / FP32's" (below 1: faster than FP32), with the range the rounds allow (``speed.TimeRatio``). The
candidates are timed once: the choice's time is its candidate row's, the same measurement the table printed. The
requirement is named here, so the grader checks the same numbers the lesson states.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import onnx.helper

from lab import graph, kernels, speed
from lab.compare import max_abs_error
from lab.convert import ort_warnings, versions
from lab.data import BATCH_SIZE, EPSILON, INPUT_NAME
from lab.errors import LabError
from lab.lessons.lesson08_the_quantization_toolbox.toolbox import (
    BASELINE,
    MAX_ACCURACY_LOSS,
    build,
    measured,
    per_family,
    preprocessed,
    settings_name,
)
from lab.measure import Evaluation, evaluation, family, input_interval, measure, predict
from lab.prose import CITED, CITED_INTEGER, cites, table_numbers, uncited
from lab.schemas import validate
from lab.tables import number

# ---- the exercise's requirement (the grader imports these) -------------------------------------
MAX_SIZE_RATIO = 0.40
"""A file of at most 40 % of the FP32 file's bytes: the QOperator files (35-38 %) fit, no QDQ file (42-48 %) does."""
MAX_TIME_RATIO = 2.0
"""At most twice FP32's median time for a batch of ``LATENCY_BATCH`` images on this CPU (one thread). Measured on a
VNNI Xeon: QOperator U8S8 about 0.8-1.2 times FP32's time, S8S8 QOperator 3-5 times (ORT's warned slow path on
x86-64). A time whose range (``ROUNDS`` rounds) holds the limit is within noise of it: not a miss."""
LATENCY_BATCH = 256
ROUNDS = speed.ROUNDS
"""Rounds of the candidates' timing: each round times FP32 and every candidate in turn."""
RULE = "among those, the smallest file (a tie in size goes to the lower max abs error on the worse family)"
"""The requirement's last part: which of the rows that meet every limit is the choice (``the_pick``)."""
REQUIREMENT = ("a static INT8 model (a fixed input ruler) that loses at most 0.5 points of accuracy against FP32 on "
               "both kernel families, takes at most twice FP32's time (time / FP32's at most 2) for a batch of 256 on "
               f"this CPU and is at most 40 % of FP32's bytes; {RULE}")
EARLIER_REQUIREMENTS = ("a static INT8 model (a fixed input ruler) that loses at most 0.5 points of accuracy against "
                        "FP32 on both kernel families, takes at most 2x FP32's time for a batch of 256 on this CPU and "
                        "is at most 40 % of FP32's bytes; among those, the smallest file",)
"""The requirement's text as toolbox.json recorded it before it stated the tie rule: the same limits and rule, so a
hand-in made then is read as stating the lab's requirement (the grader's ``requirement`` check)."""
SCHEMA = "toolbox/3"
"""toolbox/3 adds ``time`` (median, low, high, rounds of time / FP32's) to each candidate and to the choice, and the
rounds to the speed section's rows; a toolbox/2 file (one timing, ``time_ratio`` alone) is read as one round."""

def dynamic_batches(model: str | Path, ev: Evaluation, batch_sizes: tuple[int, ...] = (400, 1),
                    families: tuple[str, ...] = kernels.FAMILIES) -> list[dict]:
    """A dynamic model on the evaluation images served in batches of each size, on each family.

    ``DynamicQuantizeLinear`` computes one range per tensor per run: a batch of all 400 images fits every
    activation's ruler to the evaluation set itself; a batch of one (a camera's frame) gets its own ruler.
    """
    rows = []
    own = graph.session(model)  # one session for this CPU's family: a session per image costs more than the runs
    for size in batch_sizes:
        for f in families:
            with kernels.computing_as(f):
                out = np.concatenate([predict(model, ev.pixels[i:i + size]) if kernels.emulated(f) else
                                      own.run(None, {INPUT_NAME: ev.pixels[i:i + size]})[0]
                                      for i in range(0, len(ev.pixels), size)])
            rows.append({"batch_size": size, "family": f, "max_abs_error": round(max_abs_error(ev.reference, out), 4),
                         "accuracy": round(float((out.argmax(1) == ev.labels).mean()), 4)})
    return rows


def conversion_warnings(convert) -> list[str]:
    """Run ``convert()`` and return the warnings ONNX Runtime's converter logged (the lab keeps its root logger at
    ERROR, so they are not printed otherwise), each once, in order (``lab.convert.ort_warnings``)."""
    with ort_warnings() as messages:
        convert()
    return list(dict.fromkeys(messages))


def describe(settings: dict) -> dict:
    """Table columns for a settings dict: format, weights, activations, reduce_range, pre-processed."""
    s = {**BASELINE, **settings}
    return {"format": s["quant_format"], "weights": "per-channel" if s["per_channel"] else "per-tensor",
            "activations": s["activation_type"] + (" sym" if s["activation_symmetric"] else ""),
            "reduce_range": s["reduce_range"], "preprocessed": s["preprocess"]}


def candidate_settings() -> list[dict]:
    """The 32 settings of the candidates table: format x per-channel x activation type x reduce_range x
    pre-processing, the rest the baseline's (the grader rebuilds the same ones)."""
    return [{**BASELINE, "quant_format": fmt, "per_channel": pc, "activation_type": act, "reduce_range": rr,
             "preprocess": pre}
            for fmt, pc, act, rr, pre in itertools.product(("QDQ", "QOperator"), (False, True), ("QInt8", "QUInt8"),
                                                           (False, True), (False, True))]


def candidates(source: str | Path, out_dir: str | Path, ev: Evaluation, calibration: np.ndarray,
               batch_size: int = BATCH_SIZE, families: tuple[str, ...] = kernels.FAMILIES) -> list[dict]:
    """Every combination of format, per-channel, activation type, reduce_range and pre-processing.

    32 static conversions from the same calibration; each row has its settings, bytes and size ratio, and per
    kernel family (``families``) its max abs error, accuracy and accuracy loss against FP32 (``by_family``), with
    the worse family's loss and error beside them. No verdict: ``unmet`` names what a row misses, and the
    latency column comes from ``with_latency`` (this CPU's own kernels). Writes ``candidates/*.onnx``.
    """
    out = Path(out_dir) / "candidates"
    out.mkdir(parents=True, exist_ok=True)
    fp32_bytes = Path(source).stat().st_size
    rows = []
    for settings in candidate_settings():
        model = out / f"{settings_name(settings)}.onnx"
        build(source, model, calibration, settings, batch_size)
        row = {"name": settings_name(settings), "settings": settings, **describe(settings), **measured(model, ev)}
        row.update(per_family(model, ev, families))
        row["size_ratio"] = round(row["bytes"] / fp32_bytes, 4)
        rows.append(row)
    return rows


# ---- section 3: speed on this CPU ------------------------------------------------------------------------------
SPEED_MODELS = {"QDQ": {}, "QDQ pre": {"preprocess": True},
                "QOperator S8S8": {"quant_format": "QOperator"},
                "QOperator U8S8": {"quant_format": "QOperator", "activation_type": "QUInt8"},
                "QOperator U8S8 pre": {"quant_format": "QOperator", "activation_type": "QUInt8", "preprocess": True}}
"""The static models section 3 times against FP32 (and dynamic): lesson 08's baseline (QDQ, QInt8 activations) and
the settings that change one thing at a time from it, so every ``ONE_SETTING_APART`` pair is like with like."""
ONE_SETTING_APART = (
    ("activations QInt8 -> QUInt8 (QOperator, not pre-processed)", "QOperator S8S8", "QOperator U8S8"),
    ("format QDQ -> QOperator (QInt8 activations, not pre-processed)", "QDQ", "QOperator S8S8"),
    ("pre-processing (QDQ, QInt8 activations)", "QDQ", "QDQ pre"),
    ("pre-processing (QOperator, QUInt8 activations)", "QOperator U8S8", "QOperator U8S8 pre"),
)
"""Pairs of timed models that differ in one setting: (what changes, from, to). A comparison of two models that
differ in two settings cannot say which one made the difference."""


def one_setting_apart(rows: list[speed.Series], pairs: tuple[tuple[str, str, str], ...] = ONE_SETTING_APART) -> str:
    """Each pair of ``pairs`` at each batch size timed: the second model's time over the first's, with the range the
    rounds allow and the verdict (``speed.TimeRatio``), one line each."""
    timed = {(r.model, r.batch): r.ms for r in rows}
    lines = []
    for batch in dict.fromkeys(r.batch for r in rows):
        for what, a, b in pairs:
            if (a, batch) in timed and (b, batch) in timed:
                r = speed.TimeRatio.of(timed[(b, batch)], timed[(a, batch)])
                lines.append(f"batch {batch:>3}, {what}: {b}'s time / {a}'s {r.text()}, {r.against(1.0)}")
    return "\n".join(lines)


def multiply_adds(model: str | Path) -> int:
    """Multiply-adds per image of an MLP: the sum of its MatMul (or Gemm) weight matrices' sizes, from the graph."""
    m = graph.load(model)
    weights = {i.name: int(np.prod(i.dims)) for i in m.graph.initializer if len(i.dims) == 2}
    return sum(weights[n.input[1]] for n in m.graph.node
               if n.op_type in ("MatMul", "Gemm") and len(n.input) > 1 and n.input[1] in weights)


def no_arithmetic(source: str | Path) -> onnx.ModelProto:
    """A model with ``source``'s input and one Identity node: a run of it is the runtime's own cost (the run call,
    feeding the input, dispatching a node, returning the output), with no arithmetic."""
    src = graph.load(source).graph.input[0]
    out = onnx.helper.make_tensor_value_info("same", src.type.tensor_type.elem_type,
                                             [d.dim_param or d.dim_value for d in src.type.tensor_type.shape.dim])
    g = onnx.helper.make_graph([onnx.helper.make_node("Identity", [src.name], ["same"], name="identity")],
                               "no_arithmetic", [src], [out])
    model = onnx.helper.make_model(g, opset_imports=[onnx.helper.make_opsetid("", 17)], producer_name="lab")
    model.ir_version = 9
    return model


def per_image(rows: list[speed.Series], source: str | Path, x: np.ndarray, *, rounds: int = ROUNDS, warmup: int = 5,
              repeats: int = 30) -> str:
    """What one FP32 image costs: its multiply-adds (``multiply_adds``), FP32's time per image at each batch size of
    ``rows``, and, timed here in rounds at batch 1 beside FP32, a model with no arithmetic (``no_arithmetic``): the
    part of a batch-1 run that is the runtime's own cost."""
    fp32 = {r.batch: r for r in rows if r.model == "FP32"}
    lines = [f"FP32 multiply-adds per image: {multiply_adds(source)} (the weight matrices' sizes, read from the graph)"]
    lines += [f"FP32 time per image at batch {b}: {r.ms.median / b * 1e3:.3f} us (quartiles "
              f"{r.ms.low / b * 1e3:.3f}-{r.ms.high / b * 1e3:.3f})" for b, r in sorted(fp32.items(), reverse=True)]
    nothing = speed.timed_rounds({"FP32": Path(source), "no arithmetic": no_arithmetic(source)}, x, (1,),
                                 rounds=rounds, threads=1, warmup=warmup, repeats=repeats)
    ratio = speed.ratios(nothing)[("no arithmetic", 1)]
    lines.append(f"a model with no arithmetic (one Identity) at batch 1: {nothing[1].ms.median * 1e3:.3f} us a run, "
                 f"{speed.RATIO_HEADING} {ratio.text()}")
    if 1 in fp32 and len(fp32) > 1:
        most = max(fp32)
        share = fp32[most].ms.median / most / fp32[1].ms.median
        lines.append(f"so of FP32's run at batch 1, the arithmetic (its time per image at batch {most}) is "
                     f"{share:.0%}, the runtime's own cost (the no-arithmetic run) {ratio.median:.0%}")
    return "\n".join(lines)


def time_ratios(models: dict[str, Path], source: str | Path, x: np.ndarray, *, batch: int = LATENCY_BATCH,
                warmup: int = 5, repeats: int = 30, rounds: int = ROUNDS) -> dict[str, speed.TimeRatio]:
    """Each model's time for one batch of ``batch`` images over FP32's (``source``), on this CPU's own kernels, one
    thread, in ``rounds`` rounds (``speed.timed_rounds``; timings never run in an emulation): the ratio of the
    medians and the range the rounds allow."""
    series = speed.timed_rounds({"FP32": Path(source), **models}, x, (batch,), rounds=rounds, threads=1,
                                warmup=warmup, repeats=repeats)
    ratio = speed.ratios(series)
    return {name: ratio[(name, batch)] for name in models}


def time_fields(ratio: speed.TimeRatio) -> dict:
    """What a row records of its time: ``time`` (median, low, high, rounds) and ``time_ratio``, its median."""
    time = ratio.to_dict()
    return {"time_ratio": time["median"], "time": time}


def recorded_time(row: dict) -> speed.TimeRatio | None:
    """The time a row or ``toolbox.json``'s choice records: its ``time`` (toolbox/3), else its ``time_ratio`` as one
    round (toolbox/2); None if it has neither."""
    if isinstance(row.get("time"), dict):
        return speed.TimeRatio.from_dict(row["time"])
    x = row.get("time_ratio")
    return speed.TimeRatio.one(float(x)) if isinstance(x, (int, float)) and not isinstance(x, bool) else None


def with_latency(rows: list[dict], source: str | Path, out_dir: str | Path, x: np.ndarray, **timing) -> list[dict]:
    """Each candidate row with its time (``time_ratios``, ``time_fields``), from its ``candidates/<name>.onnx``."""
    ratios = time_ratios({r["name"]: Path(out_dir) / "candidates" / f"{r['name']}.onnx" for r in rows}, source, x,
                         **timing)
    return [{**r, **time_fields(ratios[r["name"]])} for r in rows]


def choice_time(row: dict | None, choice: str | Path, source: str | Path, x: np.ndarray, **timing) -> speed.TimeRatio:
    """The chosen model's time / FP32's: its candidate row's (``row``), the very measurement the table printed, or,
    for a choice that is no row of the table (``row`` None), ``choice`` timed now in rounds, as the rows were."""
    if row is not None:
        ratio = recorded_time(row)
        if ratio is not None:
            return ratio
    return time_ratios({"choice": Path(choice)}, source, x, **timing)["choice"]


def flat(row: dict) -> dict:
    """A candidate row with each family's loss and error as columns of their own and its time as text (the median
    and the rounds' range), for ``tables.format_rows``."""
    out = dict(row)
    for f, v in row["by_family"].items():
        out[f"loss_{f}"], out[f"error_{f}"] = v["accuracy_loss"], v["max_abs_error"]
    time = recorded_time(row)
    out["time_text"] = time.text() if time is not None else None
    return out


def near_the_time_limit(rows: list[dict]) -> list[str]:
    """The rows whose time's range holds ``MAX_TIME_RATIO``: within noise of the limit, neither under nor over it."""
    return [r["name"] for r in rows if (t := recorded_time(r)) is not None and t.within_noise(MAX_TIME_RATIO)]


Time = speed.TimeRatio | dict | float | None
"""A time / FP32's: measured in rounds (``speed.TimeRatio``, or a row's ``"time"`` record), one reading (a float),
or not timed (None)."""


def as_time(time: Time) -> speed.TimeRatio | None:
    if isinstance(time, dict):
        return speed.TimeRatio.from_dict(time)
    return speed.TimeRatio.one(float(time)) if isinstance(time, (int, float)) else time


def latency(time: Time) -> tuple[bool, str]:
    """(misses the limit, what the time says against ``MAX_TIME_RATIO``). A time in rounds misses it only when its
    whole range is over the limit: a range that holds the limit is within noise of it, said and not a miss. One
    reading has no range: over the limit, it misses it (the lesson's own check; the grader, which cannot time again,
    does not charge one reading)."""
    t = as_time(time)
    where = f"for a batch of {LATENCY_BATCH} on this CPU"
    limit = f"the limit is {MAX_TIME_RATIO:g}"
    if t is None:
        return True, f"not timed ({speed.RATIO_HEADING} {where}); {limit}"
    said = f"{speed.RATIO_HEADING} {t.text()} {where}"
    if t.within_noise(MAX_TIME_RATIO):
        return False, f"{said}: within noise of the limit {MAX_TIME_RATIO:g} (the rounds' range holds it)"
    if t.median > MAX_TIME_RATIO:
        return True, f"{said}; {limit}" + ("" if t.measured else " (one round: noise unknown)")
    return False, f"{said}: under the limit {MAX_TIME_RATIO:g}" + (" beyond the noise" if t.measured else "")


def meets(losses: dict[str, float], size_ratio: float, static: bool, time_ratio: Time) -> bool:
    """The exercise's requirement, on numbers measured on the same images as FP32."""
    return not unmet(losses, size_ratio, static, time_ratio)


def unmet(losses: dict[str, float], size_ratio: float, static: bool, time_ratio: Time) -> list[str]:
    """Each part of the requirement the numbers miss, with the number and the limit. ``losses``: family -> accuracy
    loss; ``time_ratio``: the time / FP32's (``latency``: within noise of the limit is no miss), None: not timed (a
    missing number misses the part)."""
    out = []
    if not static:
        out.append("static: no static input ruler (a dynamic model computes its ranges at run time)")
    for f, loss in losses.items():
        if loss > MAX_ACCURACY_LOSS + EPSILON:
            out.append(f"accuracy ({f} family): loss {loss:.4f} is over the limit {MAX_ACCURACY_LOSS}")
    if size_ratio > MAX_SIZE_RATIO:
        out.append(f"size: {size_ratio:.1%} of FP32 is over the limit {MAX_SIZE_RATIO:.0%}")
    missed, said = latency(time_ratio)
    if missed:
        out.append(f"latency: {said}")
    return out


# ---- the requirement's last part: among the rows that meet it, the smallest file ---------------------------------
def worse_error(record: dict) -> tuple[float, str]:
    """The larger of a row's (or a ``check_choice`` result's) max abs errors over the kernel families, and whose it
    is: a family's name, or "both families" when they are equal."""
    by = record["by_family"]
    err = max(float(v["max_abs_error"]) for v in by.values())
    whose = [f for f, v in by.items() if float(v["max_abs_error"]) == err]
    return err, whose[0] if len(whose) == 1 else "both families"


def row_unmet(row: dict, loss_slack: float = 0.0) -> list[str]:
    """``unmet`` on a candidate row's own numbers: each family's loss, its size ratio and its recorded time (every
    candidate is a static conversion, unless the row says ``static`` false). ``loss_slack`` is added to each loss:
    the grader's tolerance across CPUs, 0 for the lesson's own check."""
    return unmet({f: float(v["accuracy_loss"]) + loss_slack for f, v in row["by_family"].items()},
                 float(row["size_ratio"]), bool(row.get("static", True)), recorded_time(row))


def qualifying(rows: list[dict], loss_slack: float = 0.0) -> list[dict]:
    """The rows that meet every limit of the requirement (``row_unmet`` names nothing)."""
    return [r for r in rows if not row_unmet(r, loss_slack)]


def the_pick(rows: list[dict], loss_slack: float = 0.0) -> dict | None:
    """The row the requirement's last part (``RULE``) picks: of the qualifying rows, the fewest bytes, and of those
    the lowest max abs error on the worse family (rows equal in both are the same pick). None: no row qualifies."""
    return min(qualifying(rows, loss_slack), key=lambda r: (int(r["bytes"]), worse_error(r)[0]), default=None)


def label(row: dict) -> str:
    """A row as the table shows it: format, weights, activations, reduce_range, pre-processing, and its name."""
    d = describe(row["settings"])
    return (f"{d['format']}, {d['weights']} weights, {d['activations']} activations, reduce_range "
            f"{'yes' if d['reduce_range'] else 'no'}, pre-processed {'yes' if d['preprocessed'] else 'no'} "
            f"({settings_name({**BASELINE, **row['settings']})})")


def _two(a: float, b: float) -> tuple[str, str]:
    """Two errors at the table's 3 decimals, or at 4 where 3 would show them equal."""
    fmt = ".3f" if f"{a:.3f}" != f"{b:.3f}" or a == b else ".4f"
    return f"{a:{fmt}}", f"{b:{fmt}}"


@dataclass(frozen=True)
class RuleMiss:
    """A choice that meets every limit, but is not the file the requirement's last part picks: ``row`` is the pick,
    ``tie`` whether the two files are the same size (then the worse family's error decided), ``text`` says which
    numbers decided it."""

    row: dict
    tie: bool
    text: str


def against_the_rule(chosen: dict, rows: list[dict], *, loss_slack: float = 0.0,
                     error_slack: float = 0.0) -> RuleMiss | None:
    """Is ``chosen`` (a ``check_choice`` result or a row: its ``bytes`` and ``by_family``) the file ``RULE`` picks
    from ``rows``? None if it is (or no row qualifies); else the pick, and the numbers that decided. The lesson's
    check uses the student's own table as it is; the grader passes its tolerances across CPUs (``loss_slack``
    against a smaller row's qualifying, ``error_slack`` against its lower error) to ask whether the pick beats the
    choice beyond them. Meant for a choice that meets every limit: one that misses a limit is ``unmet``'s to name."""
    pick = the_pick(rows, loss_slack)
    if pick is None:
        return None
    size, pick_size = int(chosen["bytes"]), int(pick["bytes"])
    (err, whose), (pick_err, pick_whose) = worse_error(chosen), worse_error(pick)
    if pick_size < size:
        same = [r for r in qualifying(rows, loss_slack) if int(r["bytes"]) == pick_size]
        tail = (f"; of the {len(same)} rows of {pick_size} bytes that meet every limit it has the lowest max abs "
                f"error on the worse family ({pick_err:.3f}, {pick_whose})" if len(same) > 1 else "")
        return RuleMiss(pick, False, f"not the smallest file that meets every limit: {label(pick)} meets them with "
                                     f"{pick_size} bytes, against your choice's {size}{tail}")
    if pick_size == size and pick_err + error_slack < err:
        mine, theirs = _two(err, pick_err)
        return RuleMiss(pick, True, f"a tie in size goes to the lower max abs error on the worse family: {label(pick)} "
                                    f"has the same {size} bytes, meets every limit and has {theirs} on its worse "
                                    f"family ({pick_whose}) against your choice's {mine} ({whose})")
    return None


def rule_words(chosen: dict, rows: list[dict]) -> str:
    """What the requirement's last part decided on ``rows``, with the numbers that decided it: how many rows meet
    every limit, the smallest size among them, and, on a tie in size, the errors that broke it."""
    ok = qualifying(rows)
    pick = the_pick(rows)
    if pick is None:
        return f"no row of the {len(rows)} meets every limit"
    size = int(pick["bytes"])
    same = sorted((r for r in ok if int(r["bytes"]) == size), key=lambda r: worse_error(r)[0])
    head = f"{len(ok)} of {len(rows)} rows meet every limit; the smallest file among them is {size} bytes"
    if len(same) == 1:
        pick_words = f"{head}, one row: {label(pick)}"
    else:
        errors = ", ".join(f"{worse_error(r)[0]:.4f}" for r in same)
        pick_words = (f"{head}, {len(same)} rows of that size (max abs error on the worse family: {errors}): the "
                      f"lowest is {label(pick)}")
    missed = row_unmet(chosen)
    if missed:
        return f"{pick_words}. Your choice misses a limit: {'; '.join(missed)}"
    miss = against_the_rule(chosen, rows)
    return f"{pick_words}. " + (f"Your choice is not that file: {miss.text}" if miss else "Your choice is that file")


# ---- pre-processing ------------------------------------------------------------------------------
def preprocess_report(source: str | Path, out_dir: str | Path) -> dict:
    """What ``quant_pre_process`` changes in this graph: op counts, shapes recorded, metadata, bytes."""
    out = preprocessed(source, Path(out_dir) / "source.preprocessed.onnx")
    before, after = graph.load(source), graph.load(out)
    return {"ops_before": graph.op_counts(before), "ops_after": graph.op_counts(after),
            "value_info_before": len(before.graph.value_info), "value_info_after": len(after.graph.value_info),
            "metadata_after": {p.key: p.value for p in after.metadata_props},
            "nodes_after": [f"{n.name} ({n.op_type})" for n in after.graph.node],
            "bytes_before": Path(source).stat().st_size, "bytes_after": out.stat().st_size}


# ---- the choice, the document, the check ---------------------------------------------------------
class ChoiceError(LabError, ValueError):
    """``CHOICE`` or ``JUSTIFICATION`` is not what the exercise asks for; shown as one line."""


def measured_numbers(rows: list[dict]) -> list[float]:
    """Every number the candidates table ``rows`` measured (bytes, accuracies, losses, errors, times; not its
    settings)."""
    return table_numbers([{k: v for k, v in r.items() if k not in ("settings", "name")} for r in rows
                          if isinstance(r, dict)], integers=True)


def cited(justification: object, rows: list[dict]) -> list[str]:
    """The numbers of ``justification`` that the candidates table ``rows`` measured: ``lab.prose.cites``."""
    return cites(justification, measured_numbers(rows)) if isinstance(justification, str) else []


def check_choice_input(choice, justification, rows: list[dict]) -> tuple[dict | None, list[str]]:
    """Check the exercise's answer before anything is built: ``CHOICE`` must be a settings dict (a row's
    ``"settings"``, not the row), ``JUSTIFICATION`` a text citing a number of ``rows`` (``lab.prose.cites``).
    Returns the row of ``rows`` the choice is (None if it is none of them) and notes for the student; a wrong type
    raises ``ChoiceError``."""
    if not isinstance(choice, dict):
        raise ChoiceError(f"CHOICE is a {type(choice).__name__} ({choice!r:.60}); expected the settings dict of one "
                          "row of cands, e.g. CHOICE = row[\"settings\"]")
    if "settings" in choice or "accuracy_loss" in choice:
        raise ChoiceError("CHOICE is a whole row of cands (it has 'settings', 'accuracy_loss', ...); "
                          "set CHOICE = row[\"settings\"], the settings dict of that row")
    unknown = sorted(set(choice) - set(BASELINE))
    if unknown:
        raise ChoiceError(f"CHOICE has keys {unknown} that are not settings; expected keys among {sorted(BASELINE)} "
                          "(dynamic models have no fixed input ruler and cannot meet the requirement)")
    if not isinstance(justification, str) or not justification.strip():
        raise ChoiceError("JUSTIFICATION is empty; say why that row, citing its numbers from the table")
    wanted = {**BASELINE, **choice}
    row = next((r for r in rows if {**BASELINE, **r["settings"]} == wanted), None)
    notes = []
    if row is None:
        notes.append("CHOICE is none of the rows measured above; it is measured below all the same, but select "
                     "a row of cands in code so the choice follows the measurements")
    numbers = measured_numbers(rows)
    if rows and not cites(justification, numbers):
        raise ChoiceError("JUSTIFICATION cites no number of cands (" + (", ".join(
            CITED.findall(justification) + CITED_INTEGER.findall(justification)) or "no number") + "): quote the "
            "row's bytes, accuracy, loss or error as your table printed them")
    stray = uncited(justification, numbers)
    if rows and stray:
        notes.append(f"JUSTIFICATION cites {', '.join(stray)}, which no row of cands gives: quote your own run's "
                     "numbers as your table printed them")
    return row, notes


def check_choice(choice: str | Path, source: str | Path, split: str = "evaluation",
                 time_ratio: Time = None) -> dict:
    """Measure a chosen model against the requirement on ``split``, as every kernel family computes it: the numbers
    the grader looks at. ``time_ratio`` is the choice's time / FP32's on the student's CPU (``choice_time``: its
    candidate row's, in rounds): a measurement of that CPU, which no other machine can repeat, so it is passed in,
    not measured here. ``latency`` says it against the limit in words (``latency``).

    The default is the evaluation split, the one students may measure on. The grader's hidden check
    passes ``split="heldout"``: that split stays instructor-side (the kit has no ``heldout.npz``).
    """
    ev = evaluation(source, split)
    m = measure(choice, ev)
    fam = per_family(choice, ev)
    static = input_interval(choice) is not None
    ratio = round(m["bytes"] / Path(source).stat().st_size, 4)
    losses = {f: v["accuracy_loss"] for f, v in fam["by_family"].items()}
    time = as_time(time_ratio)
    return {"split": split, "kernel_family": family(), "fp32_accuracy": round(ev.fp32_accuracy, 4), **m,
            "accuracy_loss": round(ev.fp32_accuracy - m["accuracy"], 4), "by_family": fam["by_family"],
            "worst_accuracy_loss": fam["accuracy_loss"], "size_ratio": ratio, "static": static,
            "time_ratio": None if time is None else time.to_dict()["median"],
            "time": None if time is None else time.to_dict(), "latency": latency(time)[1],
            "unmet": unmet(losses, ratio, static, time)}


def refuse_unmet(check: dict, rows: list[dict]) -> None:
    """The exercise's visible check: raise ``ChoiceError`` naming each limit ``check`` misses, and, for a choice that
    meets every limit, the row the requirement's last part (``RULE``) picks from ``rows`` instead (the table the
    choice was made from: ``against_the_rule``), with the numbers that decided it."""
    if check["unmet"]:
        raise ChoiceError("choice.onnx misses the requirement on " + "; ".join(check["unmet"])
                          + f". Pick another row of cands: filter by every limit of the requirement, then {RULE}")
    miss = against_the_rule(check, rows)
    if miss is not None:
        raise ChoiceError(f"choice.onnx meets every limit, but not the requirement's last part ({RULE}): {miss.text}. "
                          "Select that row in code: CHOICE = its \"settings\"")


def requirement() -> dict:
    """The requirement as toolbox.json records it (the grader compares it with this, not with the student's)."""
    return {"text": REQUIREMENT, "max_accuracy_loss": MAX_ACCURACY_LOSS, "families": list(kernels.FAMILIES),
            "max_size_ratio": MAX_SIZE_RATIO, "max_time_ratio": MAX_TIME_RATIO, "latency_batch": LATENCY_BATCH,
            "static": True}


def evaluation_record(ev: Evaluation) -> dict:
    return {"split": ev.split, "samples": int(len(ev.labels)), "fp32_accuracy": round(ev.fp32_accuracy, 4),
            "kernel_family": family()}


def document(*, ev: Evaluation, speed: dict, candidates_: list[dict], choice: dict) -> dict:
    """The ``toolbox/3`` document handed in: the requirement, the candidates and the chosen settings.

    It holds only what the grader recomputes from choice.onnx or reads as the student's own CPU (``speed``);
    the exploration tables describe models the hand-in does not hold, so they go to ``tables`` instead.
    ``evaluation.kernel_family`` names the family every INT8 number in it was computed for; the
    speed section's ``machine_family`` is this CPU's (timings always run on its own kernels).
    """
    speed = {**speed, "machine_family": kernels.machine_family()}
    doc = {"schema": SCHEMA, "versions": versions(), "evaluation": evaluation_record(ev), "requirement": requirement(),
           "speed": speed, "candidates": candidates_, "choice": choice}
    validate("toolbox", doc)
    return doc


def summary_lines(doc: dict) -> list[str]:
    """The run's summary of ``toolbox.json``: the settings chosen for the stated requirement."""
    n, choice = number, doc.get("choice", {})
    picked = ", ".join(f"{k}={v}" for k, v in choice.get("settings", {}).items())
    return [f"  requirement: {doc.get('requirement', {}).get('text', '-')}",
            f"  chosen: {picked or '-'}",
            f"  {choice.get('bytes', '-')} bytes ({n(choice.get('size_ratio'), '.1%')} of FP32), "
            f"accuracy {n(choice.get('accuracy'))}, loss {n(choice.get('accuracy_loss'))}, "
            f"{speed.RATIO_HEADING} {_time_text(choice)}",
            f"  the rule on the table: {_rule_text(choice, doc.get('candidates'))}"]


def _rule_text(choice: dict, rows) -> str:
    """A summary's ``rule_words``: read from a file another run wrote, so a table it cannot read shows as ``-``."""
    try:
        return rule_words(choice, [r for r in rows if isinstance(r, dict)])
    except (KeyError, TypeError, ValueError, AttributeError):
        return "-"


def _time_text(row: dict) -> str:
    """A summary's time: read from a file another run wrote, so anything it holds shows as ``-`` if unreadable."""
    try:
        t = recorded_time(row)
    except (KeyError, TypeError, ValueError):
        t = None
    return "-" if t is None else t.text()
