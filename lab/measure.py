"""A converted model measured against FP32 on the same images, as one table row.

``measure`` gives the max abs error of the probabilities against FP32, the accuracy and the file size, on the
images of one ``Evaluation``, as CPUs of one kernel family compute them (``lab.kernels.target_family()``, this
machine's unless told otherwise; ``family_line`` says which). The rows print with ``lab.tables.format_rows``.
Lesson 08 measures every setting of its toolbox this way.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lab import compare, data, evidence, graph, kernels


@dataclass(frozen=True)
class Evaluation:
    """The images every model is measured on, and the FP32 model's answers on them."""

    split: str
    pixels: np.ndarray
    labels: np.ndarray
    reference: np.ndarray

    @property
    def fp32_accuracy(self) -> float:
        return float((self.reference.argmax(1) == self.labels).mean())


def evaluation(source: str | Path, split: str = "evaluation") -> Evaluation:
    """Load ``split`` through the deployed preprocessing and run the FP32 ``source`` on it."""
    s = data.load_split(split)
    return Evaluation(split, s.pixels, s.labels, compare.predict(source, s.pixels))


def family() -> str:
    """The kernel family ``measure`` computes for: ``lab.kernels.target_family()``."""
    return kernels.target_family()


def family_line(family_: str | None = None) -> str:
    """One line for people: which family the numbers are for, and whether it is emulated here."""
    f = family_ or family()
    how = f"emulated in numpy; this CPU computes as {kernels.machine_family()}" if kernels.emulated(f) \
        else "this CPU's own kernels"
    return f"INT8 numbers computed as the {f} kernel family ({how})"


def predict(model: str | Path, x: np.ndarray) -> np.ndarray:
    """``compare.predict`` for the target family."""
    return compare.predict(model, x)


def measure(model: str | Path, ev: Evaluation) -> dict:
    """Max abs error against FP32, accuracy, and the file's bytes, as the target kernel family computes them."""
    out = predict(model, ev.pixels)
    return {"max_abs_error": round(compare.max_abs_error(ev.reference, out), 4),
            "accuracy": round(float((out.argmax(1) == ev.labels).mean()), 4),
            "bytes": Path(model).stat().st_size}


def input_interval(model: str | Path) -> list[float] | None:
    """The real interval the input ruler covers, or None for a model without one (dynamic)."""
    try:
        lo, hi = graph.input_ruler(model).interval
    except Exception:  # noqa: BLE001 - dynamic models have no static input ruler
        return None
    return [round(lo, 4), round(hi, 4)]


def against(baseline: str | Path, model: str | Path, ev: Evaluation) -> str:
    """``model`` against ``baseline`` on the same images, as the target family computes them: the images it fixed and
    broke (``lab.evidence.paired``) and the change in max abs error against FP32 with its bootstrap interval over
    images, each saying whether it is beyond the noise."""
    a, b = predict(baseline, ev.pixels), predict(model, ev.pixels)
    pairs = evidence.paired(ev.labels, a.argmax(1), b.argmax(1))
    error = evidence.max_error_change(ev.reference, a, b)
    return f"accuracy: {pairs.words()}; max abs err {error.words()}"


def against_lines(baseline_name: str, baseline: str | Path, models: dict[str, str | Path], ev: Evaluation) -> str:
    """One ``against`` line per model of ``models`` (name -> file), headed by what they are compared with."""
    width = max(len(n) for n in models)
    return "\n".join([f"against {baseline_name}, image by image (fixed / broken; the max abs err's change with its "
                      "95 % interval over images):"]
                     + [f"  {name:<{width}}  {against(baseline, m, ev)}" for name, m in models.items()])
