"""Where does a quantized model part from FP32? Per-tensor SQNR with ORT's ``qdq_loss_debug``.

SQNR (signal to quantization noise ratio) is ``20 log10(|reference| / |reference - quantized|)``
in dB: 40 dB means the error is 1 % of the signal, 20 dB means 10 %. Two numbers per tensor:
``own`` compares the tensor just before and just after its QuantizeLinear/DequantizeLinear pair in
the INT8 model (what that one ruler does), ``vs_fp32`` compares the INT8 model's tensor with the
FP32 model's (everything accumulated so far).
"""
from __future__ import annotations

import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from onnxruntime.quantization import qdq_loss_debug as qd

from lab import compare, kernels, palette
from lab.errors import LabError
from lab.graph import load, output_scale
from lab.lessons.lesson07_calibrate_the_deployed_representation.scenario_checks import computed_on
from lab.readers import ArrayReader


@dataclass(frozen=True)
class LayerSQNR:
    """One tensor's SQNR in dB: its own quantization, and the INT8 model against FP32."""

    tensor: str
    own: float
    vs_fp32: float

    def to_dict(self) -> dict:
        return asdict(self)


def tensor_order(model) -> list[str]:
    """The float model's inputs, then every node output, in graph order."""
    m = load(model)
    names = [i.name for i in m.graph.input]
    for node in m.graph.node:
        names += [o for o in node.output if o not in names]
    return names


def _reader(data, batch_size: int = 100):
    if isinstance(data, np.ndarray):
        return ArrayReader(data, batch_size)
    if not callable(getattr(data, "rewind", None)):
        raise TypeError(f"{type(data).__name__} has no rewind(); the float and INT8 runs must see the same "
                        "batches, so pass an array or a reader with rewind()")
    return data


def layer_sqnr(float_model: str | Path, qdq_model: str | Path, data, work_dir: str | Path) -> list[LayerSQNR]:
    """Per-tensor SQNR of a QDQ model against its FP32 source on ``data`` (an array or a reader).

    Uses ``modify_model_output_intermediate_tensors``, ``collect_activations`` (the reader is
    rewound before each model), ``create_activation_matching`` and ``compute_activation_error``.
    The augmented models live in a temporary folder inside ``work_dir``. Rows follow graph order;
    tensors without a QDQ pair (such as an Add fused behind a Relu) are left out.
    """
    reader = _reader(data)
    with tempfile.TemporaryDirectory(dir=work_dir, prefix=".debug-") as tmp:
        aug_float, aug_qdq = Path(tmp) / "float.onnx", Path(tmp) / "qdq.onnx"
        qd.modify_model_output_intermediate_tensors(str(float_model), str(aug_float))
        qd.modify_model_output_intermediate_tensors(str(qdq_model), str(aug_qdq))
        reader.rewind()
        float_acts = qd.collect_activations(str(aug_float), reader)
        reader.rewind()
        qdq_acts = qd.collect_activations(str(aug_qdq), reader)
        reader.rewind()
    matching = qd.create_activation_matching(qdq_acts, float_acts)
    matching = {k: v for k, v in matching.items() if "float" in v}  # compute_activation_error needs a float match
    errors = qd.compute_activation_error(matching)
    order = tensor_order(float_model)
    return [LayerSQNR(name, float(errors[name]["qdq_err"]), float(errors[name]["xmodel_err"]))
            for name in order if name in errors]


def entry_point(rows: Sequence[LayerSQNR], reference: Sequence[LayerSQNR], drop_db: float = 10.0) -> LayerSQNR | None:
    """The first tensor, in graph order, whose SQNR against FP32 is ``drop_db`` below the reference run's.

    The reference is the same comparison on a condition that passes (daylight): the first large drop
    is where the error enters; every later tensor inherits it.
    """
    ref = {r.tensor: r.vs_fp32 for r in reference}
    for r in rows:
        if r.tensor in ref and r.vs_fp32 < ref[r.tensor] - drop_db:
            return r
    return None


class EntryCheckFailed(LabError):
    """Lesson 07, exercise 1: the entry tensor or the flash measurement behind it is not what was asked."""


def check_entry_tensor(answer, flash_rows: Sequence[LayerSQNR], daylight_rows: Sequence[LayerSQNR],
                       measured: Sequence[LayerSQNR], order: Sequence[str], drop_db: float = 10.0) -> str:
    """Lesson 07, exercise 1: the student's flash SQNR rows match the lab's own ``measured`` run (1 dB), and
    ``answer`` is the first tensor, in graph order, ``drop_db`` below daylight's. Returns the check's line;
    raises ``EntryCheckFailed`` naming the mistake (the wrong tensor, with both runs' dB at it)."""
    mine = {r.tensor: r.vs_fp32 for r in flash_rows}
    day = {r.tensor: r.vs_fp32 for r in daylight_rows}
    for r in measured:
        if r.tensor not in mine:
            raise EntryCheckFailed(f"flash_errors has no row for {r.tensor!r}: run compute_activation_error on "
                                   "the matching of both augmented models (every tensor of the graph)")
        if abs(mine[r.tensor] - r.vs_fp32) > 1.0:
            raise EntryCheckFailed(
                f"flash_errors[{r.tensor!r}]['xmodel_err'] is {mine[r.tensor]:.1f} dB, but the flash run measures "
                f"{r.vs_fp32:.1f} dB there: collect both models' activations with a DigitReader over flash_pixels, "
                "rewind() it between the two runs, and pass the QDQ activations first to create_activation_matching")
    if answer not in order:
        raise EntryCheckFailed(f"ENTRY_TENSOR = {answer!r} is not a tensor of this graph; pick one of `order`: "
                               + ", ".join(order))
    expected = entry_point(measured, daylight_rows, drop_db)
    if expected is None or answer == expected.tensor:
        return (f"check: ENTRY_TENSOR is the first tensor, in graph order, whose SQNR against FP32 falls more than "
                f"{drop_db:g} dB below daylight's")
    at = (f"at {answer}, flash has {mine[answer]:.1f} dB against daylight's {day[answer]:.1f} dB"
          if answer in mine and answer in day else f"{answer} has no QDQ pair, so no SQNR row")
    raise EntryCheckFailed(
        f"ENTRY_TENSOR is {answer!r}, but the first tensor in graph order that falls more than {drop_db:g} dB below "
        f"daylight is {expected.tensor!r} ({mine[expected.tensor]:.1f} dB against {day[expected.tensor]:.1f} dB); "
        f"{at}. The error enters at the first such tensor: every later one inherits it")


def format_sqnr(runs: Mapping[str, Sequence[LayerSQNR]]) -> str:
    """Several runs side by side: one row per tensor, own and vs-FP32 SQNR per run, rounded to 1 dB."""
    names = list(runs)
    tensors = [r.tensor for r in next(iter(runs.values()))]
    head = f"{'tensor':<14}" + "".join(f"{n + ' own':>16}{n + ' vs FP32':>18}" for n in names)
    lines = [head, "-" * len(head)]
    for t in tensors:
        cells = ""
        for n in names:
            row = next((r for r in runs[n] if r.tensor == t), None)
            cells += f"{row.own:>16.0f}{row.vs_fp32:>18.0f}" if row else f"{'-':>16}{'-':>18}"
        lines.append(f"{t:<14}{cells}")
    return "\n".join(lines)


def sqnr_figure(runs: Mapping[str, Sequence[LayerSQNR]], title: str = "Where the INT8 model parts from FP32"):
    """SQNR against FP32 per tensor, in graph order, one line per run (higher is closer to FP32).

    Margins fixed in inches (``lab.plots.fixed_margins``) in place of a layout pass: cheaper to draw."""
    import matplotlib.pyplot as plt  # deferred: 1.8 s to import (python -X importtime); only figures need it

    from lab.plots import fixed_margins  # deferred: lab.plots imports matplotlib, as above

    fig, ax = plt.subplots(figsize=(8, 4))
    for i, (name, rows) in enumerate(runs.items()):
        ax.plot([r.tensor for r in rows], [r.vs_fp32 for r in rows], **palette.style(name, i), label=name)
    ax.axhline(20, color=palette.NEUTRAL, linestyle=":", linewidth=1)
    ax.text(0, 21, "20 dB: error 10 % of the signal", color=palette.NEUTRAL, fontsize=8)
    ax.set_xlabel("tensor, in graph order (input first)")
    ax.set_ylabel("SQNR vs FP32 (dB)")
    ax.set_title(title, y=1.0)
    ax.legend()
    ax.tick_params(axis="x", rotation=30)
    return fixed_margins(fig, left=0.7, right=0.15, bottom=1.0, top=0.35)


@dataclass(frozen=True)
class DebugCopyCheck:
    """The debug copy's final output against the deployed model's, as CPUs of ``family`` compute it."""

    family: str
    computed_on: str
    max_difference: float
    steps: float
    changed_predictions: int

    @property
    def same(self) -> bool:
        """Within one output step, with no answer changed: the SQNR table describes the deployed arithmetic."""
        return self.steps <= 1 + 1e-6 and self.changed_predictions == 0

    def __str__(self) -> str:
        head = (f"debug copy vs deployed model ({self.family} kernels, {self.computed_on}): max difference "
                f"{self.max_difference:.4f} ({self.steps:.0f} output step(s)), {self.changed_predictions} "
                "answer(s) differ")
        if self.same:
            return head + "\n  -> they agree: the SQNR table describes what the deployed model computes here"
        return (head + "\n  -> they disagree: qdq_loss_debug runs an unfused copy (float MatMuls, no int16 pairs), "
                "while the deployed kernels of this family compute differently (int16 pairs that saturate); the SQNR "
                "table cannot see that defect, so judge the deployed model by its own outputs")


def debug_copy_check(debug_output, deployed_model: str | Path, x: np.ndarray,
                     family: str | None = None) -> DebugCopyCheck:
    """Compare the debug copy's final output (e.g. ``qdq_activations["probabilities"]``) with the deployed model's.

    ``debug_output`` may be the list of per-batch arrays ``collect_activations`` returns; its values are
    flattened, so they are reshaped to the deployed output's shape.
    """
    family = family or kernels.target_family()
    deployed = compare.predict(deployed_model, x, family=family)
    debug = np.concatenate([np.asarray(b, np.float32).ravel() for b in debug_output]) \
        if isinstance(debug_output, (list, tuple)) else np.asarray(debug_output, np.float32)
    if debug.size != deployed.size:
        raise ValueError(f"the debug output has {debug.size} values; the deployed model gives {deployed.size} "
                         f"for these {len(deployed)} images: run both on the same images")
    debug = debug.reshape(deployed.shape)
    diff = float(np.max(np.abs(debug.astype(np.float64) - deployed))) if deployed.size else 0.0
    step = output_scale(deployed_model) or 1 / 255
    return DebugCopyCheck(family, computed_on(family), diff, round(diff / step, 3),
                          int((debug.argmax(1) != deployed.argmax(1)).sum()))
