"""Lesson 07's named scenarios: FP32 against INT8 under each condition, with a verdict per scenario.

``compare_scenarios`` runs both models on the acceptance set under every named condition of
``lab.lessons.lesson07_calibrate_the_deployed_representation.scenarios``; ``judge`` gives each scenario its
verdict; the tables and the figure show them.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, cast

import numpy as np

from lab import evidence, kernels, palette, predictions, tables
from lab.compare import predict
from lab.data import EPSILON
from lab.errors import LabError
from lab.lessons.lesson06_accept_or_reject.acceptance import FLOOR, LIMIT
from lab.lessons.lesson07_calibrate_the_deployed_representation import scenarios


class SelectionCheckFailed(LabError):
    """Lesson 07's calibration selection does not fix the release."""


NOT_JUDGED = "not judged"
REFERENCE = "daylight"
"""The condition the calibration represents: its largest probability change sets each model's confident margin."""
MARGIN_FACTOR = 2.0
"""Swapping FP32's top two answers takes a change of at least half their gap on each side: a margin of twice the
largest change INT8 makes where the calibration is right (``REFERENCE``), measured per model and kernel family."""


def confident_margin(fp32: np.ndarray, int8: np.ndarray) -> float:
    """``MARGIN_FACTOR`` x the largest probability change INT8 makes on the reference (daylight) images.

    A changed answer whose FP32 top-two gap is at least this wide moved more than INT8 moves anything where the
    calibration is right: a defect. Below it, FP32 itself was close enough to unsure: an accepted difference.
    """
    return MARGIN_FACTOR * float(np.max(np.abs(np.asarray(fp32, np.float64) - np.asarray(int8, np.float64))))


@dataclass(frozen=True)
class ScenarioResult:
    """FP32 against INT8 under one named condition, with its own verdict."""

    name: str
    description: str
    count: int
    fp32_accuracy: float
    int8_accuracy: float
    loss: float
    changed: int
    accepted_differences: int
    defects: int
    max_abs_error: float
    verdict: str
    note: str
    margin: float
    fixed: int = 0
    """Images FP32 misread that INT8 reads right."""
    broken: int = 0
    """Images FP32 read right that INT8 misreads."""
    p_value: float = 1.0
    """Exact McNemar test of ``fixed`` against ``broken`` (``lab.evidence.paired``)."""
    evidence: str = ""
    """``fixed``, ``broken`` and whether the accuracy difference is beyond noise, in words."""

    @property
    def passed(self) -> bool:
        return self.verdict == "pass"

    @property
    def judged(self) -> bool:
        """FP32 itself reaches the floor here; below it there is nothing to judge INT8 against (lesson 06, rule 1)."""
        return self.verdict != NOT_JUDGED

    @property
    def needs_work(self) -> bool:
        return self.verdict == "needs work"

    def to_dict(self) -> dict:
        return asdict(self)


def describe(fn: Callable) -> str:
    return (fn.__doc__ or "").strip().splitlines()[0] if fn.__doc__ else fn.__name__


def tolerated_defects(count: int, limit: float = LIMIT) -> int:
    """How many confident changes a verdict on ``count`` images forgives: as many images as the loss limit forgives
    (``limit`` x ``count``, rounded down: 4 of 400, 0 of 60), so one image cannot flip a verdict on a large set."""
    return int(np.floor(limit * count + EPSILON))


def judge(name: str, fp32: np.ndarray, int8: np.ndarray, labels: np.ndarray, margin: float, description: str = "",
          limit: float = LIMIT) -> ScenarioResult:
    """Compare FP32 and INT8 probabilities on one scenario.

    Not judged when FP32 reads fewer than ``FLOOR`` of the images (lesson 06's rule 1: no reference to judge
    against). Otherwise passes when the accuracy loss is within ``limit`` and no more images FP32 read with a top-two
    gap of at least ``margin`` (``confident_margin``) changed their answer than ``tolerated_defects`` forgives (the
    share of images the loss limit forgives); changes under the margin are accepted differences.
    """
    fp32, int8, labels = np.asarray(fp32), np.asarray(int8), np.asarray(labels)
    f, q = fp32.argmax(1), int8.argmax(1)
    top2 = np.sort(fp32, axis=1)[:, -2:]
    gap = top2[:, 1] - top2[:, 0]
    changed = f != q
    defects = int((changed & (gap >= margin)).sum())
    fa, qa = float((f == labels).mean()), float((q == labels).mean())
    loss = fa - qa
    problems = []
    if loss > limit + EPSILON:
        problems.append(f"loses {loss:.4f} accuracy (limit {limit:.2f})")
    tolerated = tolerated_defects(len(labels), limit)
    if defects > tolerated:
        problems.append(f"{defects} confident FP32 answer(s) changed (more than the {tolerated} tolerated on "
                        f"{len(labels)} images)")
    verdict = "needs work" if problems else "pass"
    if fa + EPSILON < FLOOR:
        verdict, problems = NOT_JUDGED, [f"FP32 itself reads only {fa:.0%} here (floor {FLOOR:.0%}): a model limit, "
                                         "not judged"]
    pairs = evidence.paired(labels, f, q)
    return ScenarioResult(name, description, int(len(labels)), fa, qa, loss, int(changed.sum()),
                          int(changed.sum()) - defects, defects,
                          float(np.max(np.abs(fp32.astype(np.float64) - int8))), verdict, "; ".join(problems),
                          float(margin), pairs.fixed, pairs.broken, pairs.p_value, pairs.words())


def compare_scenarios(float_model, int8_model, x: np.ndarray, labels: np.ndarray,
                      conditions: Mapping[str, Callable] | None = None, seed: int = 0,
                      limit: float = LIMIT) -> list[ScenarioResult]:
    """Every named condition (default: ``scenarios.acceptance_conditions()``) applied to the acceptance set.

    The confident margin is ``confident_margin`` on the reference condition (daylight), as this family computes it.
    """
    conditions = conditions or scenarios.acceptance_conditions()
    outs = {name: (predict(float_model, fn(x, seed)), predict(int8_model, fn(x, seed)))
            for name, fn in conditions.items()}
    ref = outs.get(REFERENCE) or (predict(float_model, x), predict(int8_model, x))
    margin = confident_margin(*ref)
    return [judge(name, fp32, int8, labels, margin, describe(conditions[name]), limit)
            for name, (fp32, int8) in outs.items()]


def compare_families(float_model, int8_model, x: np.ndarray, labels: np.ndarray, families: Sequence[str],
                     seed: int = 0, **kwargs) -> dict[str, list[ScenarioResult]]:
    """``compare_scenarios`` once per INT8 kernel family: family -> results, as CPUs of that family compute them.

    The family this machine runs uses its own kernels; any other is computed by ``lab.kernels``' emulation.
    """
    out = {}
    for family in dict.fromkeys(families):
        with kernels.computing_as(family):
            out[family] = compare_scenarios(float_model, int8_model, x, labels, seed=seed, **kwargs)
    return out


def judged_lines(float_model, x: np.ndarray, labels: np.ndarray, seed: int = 0) -> str:
    """FP32's accuracy under every named condition and whether the scenario is judged (FP32 at or above ``FLOOR``):
    what a prediction about the INT8 verdicts may know before anything INT8 is measured."""
    lines = []
    for name, fn in scenarios.acceptance_conditions().items():
        acc = float((predict(float_model, fn(x, seed)).argmax(1) == np.asarray(labels)).mean())
        lines.append(f"{name:<13} FP32 {acc:.3f}  " + ("judged" if acc + EPSILON >= FLOOR else
                                                      f"not judged (FP32 below the floor {FLOOR:.2f})"))
    return "\n".join(lines)


def computed_on(family: str) -> str:
    """``"this machine"`` when its kernels are ``family``, else ``"emulation"``."""
    return "emulation" if kernels.emulated(family) else "this machine"


def format_families(by_family: Mapping[str, Sequence[ScenarioResult]]) -> str:
    """One verdict table per kernel family, each headed by the family and where it was computed."""
    blocks = []
    for family, results in by_family.items():
        verdict = "every judged scenario passes" if not any(r.needs_work for r in results) else \
            "needs work: " + ", ".join(r.name for r in results if r.needs_work)
        blocks.append(f"kernel family {family} ({computed_on(family)}): {verdict}\n" + format_scenarios(results))
    return "\n\n".join(blocks)


def selection_check(selection, results: Sequence[ScenarioResult] = ()) -> str:
    """Lesson 07, exercise 2: every daylight image of the calibration pool, plus flash images, none held aside; with
    ``results`` (judged on the tuning images), no judged scenario needs work.

    Returns the check's verdict as a line; raises ``SelectionCheckFailed`` naming what is wrong.
    """
    if selection.split != "calibration":
        raise SelectionCheckFailed(f"the selection draws from the {selection.split!r} split; draw calibration "
                                   "images from the calibration split only")
    parts = dict(selection.parts)
    pool = set(scenarios.pool_positions())
    held = sorted({p for positions in parts.values() for p in positions} - pool)
    if held:
        raise SelectionCheckFailed(f"the selection uses {len(held)} position(s) outside the calibration "
                                   f"pool ({scenarios.TUNING.start}..{scenarios.TUNING.stop - 1}, e.g. {held[0]}): "
                                   "the pool is the split's first 300 images, the same count for everyone. Draw "
                                   "positions from "
                                   "scenarios.pool_positions() (None means all of them)")
    missing = sorted(pool - set(parts.get("daylight", ())))
    if missing:
        have = ", ".join(f"{c} {len(p)}" for c, p in selection.parts)
        raise SelectionCheckFailed(f"the selection ({have}) lacks {len(missing)} of the {len(pool)} daylight images "
                                   "of the calibration pool: deployment is daylight, so the selection keeps all of "
                                   "them, ('daylight', None), and adds flash images beside them")
    if "flash" not in parts:
        raise SelectionCheckFailed(f"the selection holds only {', '.join(sorted(parts))}: "
                                   "add flash images so the ruler covers what a flash feeds the model")
    failing = [r for r in results if r.needs_work]
    if failing:
        raise SelectionCheckFailed("with this selection, on the tuning images, "
                                   + "; ".join(f"{r.name} still needs work ({r.note})" for r in failing)
                                   + ". Try a different share of flash images")
    return f"check: the selection ({len(selection)} images) keeps every daylight image of the pool and adds flash" + (
        "; no judged scenario needs work on the tuning images" if results else "")


def summary_line(results: Sequence[ScenarioResult]) -> str:
    """Which scenarios pass and which need work, with the defects and the largest change of each."""
    def one(r):
        return (f"{r.name} {r.verdict}" + (f" ({r.defects} confident answer(s) changed, largest change "
                                          f"{r.max_abs_error:.3f})" if r.needs_work else ""))
    return "; ".join(one(r) for r in results)


def _fp32(r: ScenarioResult) -> str:
    """FP32 accuracy, starred when FP32 itself is below the floor (a model limit, not a quantization one)."""
    return f"{r.fp32_accuracy:.3f}" + ("*" if not r.judged else " ")


def _footnote(results: Sequence[ScenarioResult]) -> list[str]:
    lines = []
    if results:
        lines.append(f"confident: FP32's top-two gap >= {results[0].margin:.3f}, twice INT8's largest change on "
                     f"{REFERENCE} here; tolerated: {tolerated_defects(results[0].count)} confident change(s) on "
                     f"{results[0].count} images, as many as the loss limit forgives")
    weak = [f"{r.name} {r.fp32_accuracy:.0%}" for r in results if not r.judged]
    if weak:
        lines += [f"* FP32 itself reads fewer than {FLOOR:.0%} of these images ({', '.join(weak)}): nothing to judge "
                  "INT8 against,", "  so these are not judged (a limit of the model, not of quantization)."]
    return lines


def format_scenarios(results: Sequence[ScenarioResult]) -> str:
    """A fixed-width table: one row per scenario; a footnote gives the margin and marks scenarios FP32 itself fails."""
    head = (f"{'scenario':<13}{'FP32':>7} {'INT8':>6}{'loss':>9}{'changed':>9}{'accepted':>9}{'defects':>8}"
            f"{'max err':>8}  verdict (INT8 vs FP32)")
    lines = [head, "-" * len(head)]
    for r in results:
        problems = r.note if r.needs_work else ""
        lines.append(f"{r.name:<13}{_fp32(r):>8}{r.int8_accuracy:>6.3f}{r.loss:>+9.4f}{r.changed:>9d}"
                     f"{r.accepted_differences:>9d}{r.defects:>8d}{r.max_abs_error:>8.3f}  {r.verdict}"
                     + (f": {problems}" if problems else ""))
    lines += ["", "INT8 against FP32, image by image (fixed: FP32 wrong, INT8 right; broken: the reverse):"]
    lines += [f"  {r.name:<15}{r.evidence}" for r in results]
    return "\n".join(lines + _footnote(results))


def format_before_after(before: Sequence[ScenarioResult], after: Sequence[ScenarioResult],
                        labels: tuple[str, str] = ("before", "after")) -> str:
    """Two runs side by side per scenario: INT8 accuracy, defects, max abs error and verdict."""
    b, a = labels
    head = (f"{'scenario':<13}{'FP32':>7}  | {b + ' INT8':>12}{'defects':>8}{'max err':>8} {'verdict':<11}"
            f"| {a + ' INT8':>11}{'defects':>8}{'max err':>8} verdict")
    lines = [head, "-" * len(head)]
    after_by = {r.name: r for r in after}
    for r in before:
        s = after_by[r.name]
        lines.append(f"{r.name:<13}{_fp32(r):>8} | {r.int8_accuracy:>12.3f}{r.defects:>8d}{r.max_abs_error:>8.3f} "
                     f"{r.verdict:<11}| {s.int8_accuracy:>11.3f}{s.defects:>8d}{s.max_abs_error:>8.3f} {s.verdict}")
    margins = f"confident margins: {b} {before[0].margin:.3f}, {a} {after[0].margin:.3f}" if before else ""
    return "\n".join(lines + [margins] + _footnote(before)[1:])


def _bar_look(j: int) -> dict:
    """The j-th INT8 run's bars (1 on): a colour and a hatch, so runs are told apart without colour too."""
    return {"color": palette.CYCLE[(j - 1) % len(palette.CYCLE)], "hatch": palette.HATCHES[j % len(palette.HATCHES)],
            "edgecolor": "white"}


def scenario_figure(runs: Mapping[str, Sequence[ScenarioResult]]):
    """Per scenario: accuracy of FP32 and of each INT8 run (FP32's own limit shaded), then the INT8-vs-FP32 checks.

    Top: accuracy against the true digits, with the FP32 floor; scenarios FP32 itself fails are
    shaded, because no calibration can fix them. Bottom: what the verdict looks at, confident FP32
    answers that INT8 changed, and the largest probability change. Drawn cheaply: margins fixed in inches
    (``lab.plots.fixed_margins``) and legends placed, not searched for, in place of a layout engine.
    """
    import matplotlib.pyplot as plt  # deferred: 1.8 s to import (python -X importtime); only figures need it

    from lab.plots import fixed_margins  # deferred: lab.plots imports matplotlib, as above

    first = next(iter(runs.values()))
    names = [r.name for r in first]
    x = np.arange(len(names))
    fig = plt.figure(figsize=(11, 6.6))
    top, bottom = cast("Sequence[Any]", fig.subfigures(2, 1, height_ratios=[1.1, 1]))
    acc = top.subplots()
    width = 0.8 / (len(runs) + 1)
    for i, r in enumerate(first):
        if not r.judged:
            acc.axvspan(i - 0.45, i + 0.45, color="0.92", zorder=0)
            acc.text(i, 1.02, "FP32 limit", ha="center", va="bottom", fontsize=8, color="0.35")
    acc.bar(x - 0.4 + width / 2, [r.fp32_accuracy for r in first], width, color=palette.NEUTRAL, label="FP32")
    for j, (label, rows) in enumerate(runs.items(), start=1):
        acc.bar(x - 0.4 + width * (j + 0.5), [r.int8_accuracy for r in rows], width, **_bar_look(j),
                label=f"INT8, {label}")
    acc.axhline(FLOOR, color="k", ls=":", lw=1)
    acc.text(len(names) - 0.5, FLOOR, f" floor {FLOOR}", va="center", ha="left", fontsize=8)
    acc.set_xticks(x, names)
    acc.set_ylim(0, 1.12)
    acc.set_xlim(-0.5, len(names) - 0.5)
    acc.set_ylabel("accuracy (true digits)")
    acc.set_title("Accuracy per scenario: INT8 tracks FP32; shaded scenarios fail in FP32 already", y=1.0)
    acc.legend(loc="upper center", bbox_to_anchor=(0.5, -0.1), fontsize=8, ncols=len(runs) + 1)
    axes = bottom.subplots(1, 2)
    width = 0.8 / len(runs)
    for j, (label, rows) in enumerate(runs.items()):
        pos = x - 0.4 + width * (j + 0.5)
        axes[0].bar(pos, [r.defects for r in rows], width, **_bar_look(j + 1), label=f"INT8, {label}")
        axes[1].bar(pos, [r.max_abs_error for r in rows], width, **_bar_look(j + 1), label=f"INT8, {label}")
    tolerated = tolerated_defects(first[0].count)
    axes[0].axhline(tolerated, color="k", ls=":", lw=1)
    axes[0].text(len(names) - 0.5, tolerated, f" {tolerated} tolerated", va="center", ha="left", fontsize=8)
    for ax, title, ylabel in ((axes[0], "Confident FP32 answers INT8 changed",
                               f"images (pass: at most {tolerated})"),
                              (axes[1], "Largest probability change vs FP32", "max abs error")):
        ax.set_xticks(x, names, rotation=25)
        ax.set_title(title, fontsize=10, y=1.0)
        ax.set_ylabel(ylabel)
        ax.legend(fontsize=8, loc="upper left")
    fixed_margins(top, left=0.75, right=0.7, bottom=0.75, top=0.35)
    fixed_margins(bottom, left=0.75, right=0.7, bottom=0.8, top=0.35, wgap=0.9)
    return fig


SUMMARY_COLUMNS = [("scenario", "<14"), ("FP32", ">7"), ("INT8", ">7"), ("max abs err", ">12"), ("  verdict", "")]


def summary_lines(doc: dict) -> list[str]:
    """The run's summary of ``release/scenarios.json``: the release against every named operating condition."""
    n = tables.number
    lines = [f"  release {doc.get('release_id', '-')}", "  " + tables.header(SUMMARY_COLUMNS, "")]
    for row in doc.get("results", []):
        lines.append("  " + tables.row([row.get("name", "-"), n(row.get("fp32_accuracy"), ".3f"),
                                        n(row.get("int8_accuracy"), ".3f"), n(row.get("max_abs_error")),
                                        f"  {row.get('verdict', '-')}"], SUMMARY_COLUMNS, ""))
    return lines


# --- lesson 07's prediction: which judged scenarios the daylight draft needs work on ----------------------------

def _failing(q: predictions.Question, answer) -> list[str]:
    known = list(scenarios.acceptance_conditions())
    if isinstance(answer, str) or not isinstance(answer, (set, frozenset, list, tuple)):
        raise q.fail("the answer", "a set of scenario names, e.g. {\"dim\"} (set() for none)", answer)
    for name in answer:
        q.choice("a scenario", name, known)
    return sorted(set(answer), key=known.index)


PREDICTION = predictions.Question(
    "failing_scenarios", "07", "which judged scenarios the daylight draft needs work on (tuning images, exact "
    "arithmetic)", '{"dim", "noisy"}', _failing)


def judge_failing_scenarios(answer, measured: Sequence[ScenarioResult]) -> predictions.Verdict:
    """The predicted set against the daylight draft's measured verdicts (``measured``): right only when it is exactly
    the set of judged scenarios that need work; each scenario it gets wrong is named with its measured verdict."""
    said = set(PREDICTION.normalise(answer))
    truth = [r.name for r in measured if r.needs_work]
    wrong = [f"{r.name} " + ("needs work" if r.needs_work else "is not judged (FP32 below the floor)" if not r.judged
                             else "passes")
             for r in measured if (r.name in said) != r.needs_work]
    text = (f"you said {', '.join(sorted(said)) or 'none'} need(s) work; measured: {', '.join(truth) or 'none'}"
            + (f" ({'; '.join(wrong)})" if wrong else ""))
    return predictions.verdict("failing_scenarios", [(not wrong, text)],
                               "the daylight selection spans [0, 1]: dim, low contrast and noise stay inside that "
                               "range, so their pixels keep their resolution; a flash pushes strokes to 1.75, past the "
                               "ruler's end, and they clip. A scenario FP32 cannot read is not judged at all")
