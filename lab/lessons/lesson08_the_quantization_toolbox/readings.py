"""Lesson 08's tables read against the noise: every comparison the lesson's prose draws, computed from the run.

``compared`` puts a model against a baseline on the same evaluation images, as the target kernel family computes
them: the images it fixed and broke (``lab.evidence.paired``, an exact test) and the change of its max abs error
against FP32 with a paired bootstrap interval over images (``lab.evidence.bootstrap_difference`` of the per-image
max abs errors). The ``*_sentence`` functions turn a table and its comparisons into the paragraph the notebook shows
with ``lab.prose.say`` ("**Your run.** ..."): the student's own numbers and verdicts, so the lesson's static prose
only points at them and says what to conclude either way. Part of ``notebooks/08_the_quantization_toolbox.ipynb``.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lab import evidence, kernels
from lab.measure import Evaluation, predict
from lab.prose import listing


@dataclass(frozen=True)
class Comparison:
    """A model against a baseline on the same images: the images it fixed and broke, its max abs error's change
    (b - a, with a bootstrap interval over images) and whether the two gave identical outputs."""

    accuracy: evidence.Paired
    error: evidence.Interval
    identical: bool

    @property
    def beyond_noise(self) -> bool:
        """Whether the images or the max abs error changed beyond the noise."""
        return self.accuracy.beyond_noise or self.error.beyond_noise

    def words(self) -> str:
        """One line, as ``lab.measure.against`` prints it."""
        return f"accuracy: {self.accuracy.words()}; max abs err {self.error.words()}"


def compared_outputs(ev: Evaluation, baseline: np.ndarray, model: np.ndarray) -> Comparison:
    """Two models' probabilities on ``ev``'s images compared (``baseline`` is a, ``model`` is b)."""
    return Comparison(evidence.paired_from_probabilities(ev.labels, baseline, model),
                      evidence.max_error_change(ev.reference, baseline, model),
                      bool(np.array_equal(baseline, model)))


def compared(baseline: str | Path, model: str | Path, ev: Evaluation) -> Comparison:
    """``model`` against ``baseline`` on ``ev``'s images, as the target kernel family computes both."""
    return compared_outputs(ev, predict(baseline, ev.pixels), predict(model, ev.pixels))


def compared_each(baseline: str | Path, models: Mapping[str, str | Path], ev: Evaluation) -> dict[str, Comparison]:
    """``compared`` for each model of ``models`` (name -> file), in their order."""
    return {name: compared(baseline, m, ev) for name, m in models.items()}


def against_fp32(model: str | Path, ev: Evaluation) -> evidence.Paired:
    """``model``'s answers against FP32's on ``ev``'s images, pair by pair."""
    return evidence.paired_from_probabilities(ev.labels, ev.reference, predict(model, ev.pixels))


# ---- words ---------------------------------------------------------------------------------------
def error_change(i: evidence.Interval) -> str:
    """The max abs error's change, its interval and which way it went: higher or lower beyond the noise, or within."""
    way = {1: "higher, beyond the noise", -1: "lower, beyond the noise",
           0: "its near end under one output step: within the noise" if i.under_floor else "within the noise"}[i.sign]
    return f"max abs error {i.estimate:+.3f} [{i.low:+.3f}, {i.high:+.3f}]: {way}"


def images_change(p: evidence.Paired) -> str:
    """The images fixed and broken, and which way the accuracy went: up or down beyond the noise, or within."""
    if p.fixed + p.broken == 0:
        return "no image changed"
    if not p.beyond_noise:
        return p.words()
    return f"{p.words()}, {'more' if p.difference > 0 else 'fewer'} digits read"


def change(c: Comparison) -> str:
    """Both changes of one comparison, the max abs error first."""
    if c.identical:
        return "identical outputs"
    return f"{error_change(c.error)}; {images_change(c.accuracy)}"


def _names(names: Sequence[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``; with semicolons between names that hold commas themselves."""
    names = list(names)
    if len(names) == 1:
        return names[0]
    if any("," in n for n in names):
        return "; ".join(names[:-1]) + "; and " + names[-1]
    return ", ".join(names[:-1]) + " and " + names[-1]


def verdicts(comparisons: Mapping[str, Comparison], baseline: str) -> str:
    """One sentence: which rows moved beyond the noise against ``baseline``, and which way; or that none did."""
    parts = []
    for words, names in (
            (f"a higher max abs error than {baseline}'s", [n for n, c in comparisons.items() if c.error.sign > 0]),
            (f"a lower max abs error than {baseline}'s", [n for n, c in comparisons.items() if c.error.sign < 0]),
            ("fewer digits read", [n for n, c in comparisons.items()
                                   if c.accuracy.beyond_noise and c.accuracy.difference < 0]),
            ("more digits read", [n for n, c in comparisons.items()
                                  if c.accuracy.beyond_noise and c.accuracy.difference > 0])):
        if names:
            parts.append(f"{words}: {_names(names)}")
    if not parts:
        return (f"Nothing here differs from {baseline} beyond the noise: on your data these images cannot tell any "
                f"of them from {baseline}.")
    rest = [n for n, c in comparisons.items() if not c.beyond_noise]
    tail = (f" Within the noise of {baseline}, neither better nor worse as far as these images can tell: "
            f"{_names(rest)}." if rest else "")
    return "Beyond the noise, " + "; ".join(parts) + "." + tail


# ---- the sentences ------------------------------------------------------------------------------
def methods_sentence(right: Mapping[str, Comparison], narrow: Mapping[str, Comparison]) -> str:
    """Section 1's first table: each method on the right set against MinMax on the right set (``right``), and each
    method on the narrow set against the same MinMax (``narrow``)."""
    lost = {n: -c.accuracy.difference * c.accuracy.n for n, c in narrow.items()}
    fewer = [n for n, c in narrow.items() if c.accuracy.beyond_noise and c.accuracy.difference < 0]
    if len(fewer) == len(narrow):
        narrow_words = (f"every method reads fewer digits, beyond the noise ({min(lost.values()):.0f} to "
                        f"{max(lost.values()):.0f} fewer of {next(iter(narrow.values())).accuracy.n}): no method "
                        "rescued the narrow set.")
    else:
        narrow_words = (f"{_names([n for n in narrow if n not in fewer])} do not read fewer digits beyond the noise "
                        "on your data (their lines above give the counts).")
    return (f"**Your run.** Right set, each method against MinMax. {verdicts(right, 'MinMax')}\n\n"
            f"Narrow set, each method against MinMax on the right set: {narrow_words}")


def worse(c: Comparison) -> bool:
    """Whether the model is worse than its baseline beyond the noise: a higher max abs error or fewer digits read."""
    return c.error.sign > 0 or (c.accuracy.beyond_noise and c.accuracy.difference < 0)


def better(c: Comparison) -> bool:
    """Whether the model is better than its baseline beyond the noise, and nowhere worse."""
    return not worse(c) and (c.error.sign < 0 or (c.accuracy.beyond_noise and c.accuracy.difference > 0))


def relus_sentence(rows: Sequence[Mapping], fp32_relus: int, deleted: Mapping[str, Comparison],
                   kept: Mapping[str, Comparison]) -> str:
    """The Relu table: each model's Relu nodes; the symmetric models without Relus against FP32 with its Relus as
    Identity (``deleted``: do they read the digits as that graph does?), the ones that kept them against MinMax
    (``kept``: are they worse than MinMax?); and what that says the cost of the symmetric ranges is."""
    counts = "; ".join(f"{r['model']}: {r['relus']}" for r in rows if r["model"] in {"MinMax", *deleted, *kept})
    lines = ([f"{name} against FP32 with its Relus as Identity: {change(c)}" for name, c in deleted.items()]
             + [f"{name} against MinMax: {change(c)}" for name, c in kept.items()])
    unlike = [n for n, c in deleted.items() if c.accuracy.beyond_noise]
    costs = [n for n, c in kept.items() if worse(c)]
    gains = [n for n, c in kept.items() if better(c)]
    if not unlike and not costs:
        verdict = ("So on your data the deleted Relus are the whole cost of the symmetric ranges: without them the "
                   "models read the digits as FP32 without its Relus does (within the noise), and with them none "
                   "does worse than MinMax beyond the noise"
                   + (f" ({_names(gains)}: even a lower max abs error, beyond the noise)." if gains else "."))
    else:
        found = ([f"{_names(unlike)} read the digits differently from FP32 without its Relus"] if unlike else []) + \
                ([f"{_names(costs)} stay worse than MinMax"] if costs else [])
        verdict = (f"Not all of it on your data: {'; and '.join(found)}, beyond the noise, so the symmetric ranges "
                   "cost something besides the deleted Relus here.")
    return (f"**Your run.** Relu nodes: FP32: {fp32_relus}; {counts}.\n\n" + listing(lines) + "\n\n" + verdict)


def moving_sentence(rows: Sequence[Mapping], comparisons: Mapping[str, Comparison]) -> str:
    """The batch-combining table: the rulers by batch size, and each moving-average model against plain MinMax."""
    plain = next(r for r in rows if not r["moving_average"])
    moving = sorted((r for r in rows if r["moving_average"]), key=lambda r: r["batch_size"])
    tops = [float(r["input_range"][1]) for r in moving]
    rulers = []
    for key, what, of in (("relu1.out_range", "`relu1.out` ruler ends at", lambda r: float(r[1])),
                          ("fc3.out_range", "`fc3.out` ruler spans", lambda r: float(r[1] - r[0]))):
        values = [of(r[key]) for r in moving]
        order = ("smaller for smaller batches" if all(a <= b for a, b in zip(values, values[1:]))
                 else "not in the order of the batch sizes")
        rulers.append(f"the {what} {', '.join(f'{v:.3g}' for v in values)} (plain MinMax: {of(plain[key]):.3g}; "
                      f"{order})")
    inputs = (f"the input ruler ends at {tops[0]:g} for every batch size" if len(set(tops)) == 1 else
              f"the input ruler ends at {', '.join(f'{t:g}' for t in tops)}")
    sizes = ", ".join(str(r["batch_size"]) for r in moving)
    return (f"**Your run.** With `CalibMovingAverage` and batches of {sizes} images: {inputs}; "
            + "; ".join(rulers) + f".\n\nAgainst plain MinMax: {verdicts(comparisons, 'plain MinMax')}")


def settings_sentence(rows: Sequence[Mapping], comparisons: Mapping[str, Comparison], family: str) -> str:
    """Section 2's table: each setting against the baseline on the target family, which gave the baseline's outputs
    exactly, and which kept the Relus."""
    same = [n for n, c in comparisons.items() if c.identical]
    kept = [r["name"] for r in rows if r.get("relus")]
    return (f"**Your run** ({family} family), each setting against the baseline. "
            + verdicts(comparisons, "the baseline")
            + (f" Identical to the baseline's outputs: {_names(same)}." if same else
               " No setting gives outputs identical to the baseline's.")
            + (f" Relu nodes left in the graph: {_names(kept)}." if kept else " No setting keeps a Relu node."))


def family_sentence(by_family: Mapping[str, Mapping[str, Comparison]], x64_same: bool) -> str:
    """The family table: each family's settings against its baseline, and what per-channel weights do on the
    saturating family; ``x64_same``: whether the per-channel file in a ``session.x64quantprecision`` session computes
    on the saturating family exactly what the exact family computes."""
    parts = [f"{f} family, against the baseline. {verdicts(c, 'the baseline')}" for f, c in by_family.items()]
    pc = by_family[kernels.SATURATING]["per-channel weights"]
    if pc.error.sign > 0 and pc.accuracy.beyond_noise:
        sat = ("So on the saturating family per-channel weights raise the max abs error and misread digits, both "
               "beyond the noise.")
    elif pc.error.sign > 0:
        sat = ("So on the saturating family per-channel weights raise the max abs error beyond the noise; the "
               f"digits they change ({images_change(pc.accuracy)}) are not beyond the noise on these images.")
    else:
        sat = "So on the saturating family per-channel weights stay within the noise of the baseline on your data."
    x64 = ("In a session with `session.x64quantprecision = 1` the per-channel file computes, on the saturating "
           "family, exactly the exact family's outputs." if x64_same else
           "In a session with `session.x64quantprecision = 1` the per-channel file's outputs on the saturating "
           "family still differ from the exact family's.")
    return "**Your run.**\n\n" + listing(parts) + f"\n\n{sat} {x64}"


def sensitivity_sentence(sens: Mapping, weight_of: Mapping[str, str]) -> str:
    """The SQNR tables: the node with the largest drop, its drop, and where its weight's SQNR ranks."""
    node = sens["most_sensitive_node"]
    if node is None:
        return "**Your run.** No node's drop could be measured."
    drop = next(d for d in sens["drops"] if d["node"] == node)
    weights = {w["tensor"]: w["sqnr_db"] for w in sens["weights"]}
    w = weight_of.get(node)
    rank = ""
    if w in weights:
        lowest = min(weights, key=lambda k: weights[k])
        rank = (f"; its weight `{w}` has the lowest weight SQNR, {weights[w]:.1f} dB" if w == lowest else
                f"; its weight `{w}` has SQNR {weights[w]:.1f} dB (the lowest is `{lowest}`'s, "
                f"{weights[lowest]:.1f} dB)")
    return (f"**Your run.** The largest drop is `{node}`'s, {drop['drop_db']:.1f} dB from `{drop['input']}` to "
            f"`{drop['output']}`{rank}.")


def excluded_sentence(baseline: Mapping, excluded: Mapping, comparison: Comparison) -> str:
    """The baseline against the baseline with its most sensitive node left in FP32: size, and the changes."""
    ratio = excluded["bytes"] / baseline["bytes"]
    if comparison.beyond_noise:
        verdict = "a change beyond the noise: weigh it against the bytes."
    else:
        verdict = "both within the noise: the extra bytes bought nothing these images can tell."
    return (f"**Your run.** Leaving `{excluded['excluded'][0]}` in FP32 makes the file {ratio:.2f} times the "
            f"baseline's. Against the baseline: {change(comparison)}; {verdict}")


def samples_sentence(summary: Sequence[Mapping], enough: int | None, whole: Mapping,
                     draws: Mapping[tuple[int, int], Comparison]) -> str:
    """The sample-count table: from which count every draw stays within the loss limit, the widest spread between
    draws, and every draw of a smaller count against the whole set's model (``draws``: (n, draw) ->
    ``compared(whole set's file, draw's file)``)."""
    first = (f"From n = {enough} on, every draw stays within the accuracy loss limit" if enough is not None else
             "No count keeps every draw (and every larger count's) within the loss limit")
    spread = max(summary, key=lambda r: r["error_max"] - r["error_min"])
    counts = sorted({n for n, _ in draws})

    def where(sign: int) -> str:
        found = []
        for n in counts:
            of = [c for (m, _), c in draws.items() if m == n]
            k = sum(c.error.sign == sign for c in of)
            if k:
                found.append(f"n = {n} ({k} of {len(of)})")
        return ", ".join(found) if found else "none"

    lower, higher = where(-1), where(1)
    k = sum(c.error.sign < 0 for c in draws.values())
    if lower != "none":
        verdict = (f"so {k} of {len(draws)} draws of fewer images gave a smaller max abs error than the whole set, "
                   "beyond the noise (with this many comparisons one or two can be chance): more images did not keep "
                   "lowering it here.")
    elif higher != "none":
        verdict = "so on your data no smaller draw beat the whole set beyond the noise, and some did worse."
    else:
        verdict = "so on your data every draw is within the noise of the whole set."
    return (f"**Your run.** {first}. The widest spread between draws is at n = {spread['n']} (max abs error "
            f"{spread['error_min']:.3f} to {spread['error_max']:.3f}). Each draw against the whole set of "
            f"{whole['n']} images (max abs error {whole['max_abs_error']:.3f}): lower beyond the noise at {lower}; "
            f"higher beyond the noise at {higher}; every other draw within the noise; {verdict}")
