"""The kernel-family emulation against this machine's own kernels, on lesson 10's CNN.

Lessons 06-10 and the grader compute every INT8 number on both kernel families: one on this machine's kernels (an
ONNX Runtime session), the other in ``lab.kernels``' emulation. The floor is the session: this machine's kernels on
the same model and frames. Each form of the camera CNN (converted as lesson 10 converts it, calibrated on the camera's
frames) runs on the frames of every condition (lesson 10's ``pooled``, 3,600 frames), the session and the
emulation of each family taken in turn in every round; a form's ratio is the median of the rounds' ratios. A form
``family_free`` finds alike on both families is run by the session alone in the lessons (the last column).
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable
from functools import partial
from pathlib import Path

import numpy as np
from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quant_pre_process, quantize_static

from lab import camera, compare, evidence, kernels
from lab.lessons.lesson10_your_own_model import release
from lab.readers import ArrayReader

OUT = Path(__file__).resolve().parent.parent / "build" / "bench"
ROUNDS, QUICK_ROUNDS = 7, 3
FORMS = {"per-tensor QDQ": dict(quant_format=QuantFormat.QDQ),
         "per-channel QDQ": dict(quant_format=QuantFormat.QDQ, per_channel=True),
         "per-channel QOperator (S8S8)": dict(quant_format=QuantFormat.QOperator, per_channel=True)}


def convert(folder: Path) -> dict[str, Path]:
    """Each of ``FORMS`` from the pre-processed CNN, calibrated (MinMax) on the camera's calibration frames."""
    source, pre = folder / "cnn-fp32.onnx", folder / "pre.onnx"
    shutil.copy(camera.model_path(), source)
    quant_pre_process(str(source), str(pre), skip_symbolic_shape=True)
    frames = camera.load_split("calibration").image
    out = {}
    for name, options in FORMS.items():
        out[name] = folder / f"{name.split()[0]}-{options['quant_format'].name}.onnx"
        quantize_static(str(pre), str(out[name]), ArrayReader(frames, 36, camera.INPUT_NAME),
                        activation_type=QuantType.QInt8, weight_type=QuantType.QInt8,
                        calibrate_method=CalibrationMethod.MinMax, **options)
    return out


def timed(models: dict[str, Path], x: np.ndarray, rounds: int) -> list[dict]:
    """Per form: the session's median seconds, and each family's emulation as a ratio to it (median, quartiles)."""
    rows = []
    for name, model in models.items():
        feed = {camera.INPUT_NAME: x}
        fns: dict[str, Callable[[], object]] = {"session": partial(compare.session(model).run, None, feed)}
        fns.update({f: partial(kernels.emulate, model, x, f, camera.INPUT_NAME) for f in kernels.FAMILIES})
        for fn in fns.values():
            fn()   # warm-up: the session's first run, the emulation's first load of the model
        samples = evidence.in_turn(fns, rounds)
        floor = np.asarray(samples["session"])
        row = {"form": name, "session_s": round(float(np.median(floor)), 4),
               "family_free": kernels.family_free(model)}
        for f in kernels.FAMILIES:
            r = evidence.timing(np.asarray(samples[f]) / floor)
            row[f"{f}_s"] = round(float(np.median(samples[f])), 4)
            row[f"{f}_ratio"], row[f"{f}_range"] = round(r.median, 2), f"{r.low:.2f}-{r.high:.2f}"
        rows.append(row)
    return rows


def markdown(rows: list[dict], frames: int) -> str:
    lines = ["# Emulation benchmark", "",
             f"Lesson 10's CNN on {frames:,} frames: ONNX Runtime's session on this machine (the floor) against "
             "`lab.kernels.emulate` of each family; ratio = emulation / session, the median of the rounds' ratios "
             "(quartiles in brackets).", "",
             "| form | session s | " + " | ".join(f"{f} emulation s | x session" for f in kernels.FAMILIES)
             + " | lessons run it on the session alone |",
             "|---|---:|" + "---:|---:|" * len(kernels.FAMILIES) + "---|"]
    for r in rows:
        lines.append(f"| {r['form']} | {r['session_s']:.3f} | " + " | ".join(
            f"{r[f + '_s']:.3f} | {r[f + '_ratio']:.2f} ({r[f + '_range']})" for f in kernels.FAMILIES)
            + f" | {'yes (family_free)' if r['family_free'] else 'no'} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    rounds = QUICK_ROUNDS if os.environ.get("BENCH_QUICK") else ROUNDS
    ev = camera.load_split("evaluation")
    x = np.ascontiguousarray(release.pooled(ev.frames, ev.labels)[0], np.float32)
    with tempfile.TemporaryDirectory() as tmp:
        rows = timed(convert(Path(tmp)), x, rounds)
    text = markdown(rows, len(x))
    print(text)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "emulation.md").write_text(text)
    (OUT / "emulation.json").write_text(json.dumps({"benchmark": "emulation", "frames": len(x), "rounds": rounds,
                                                    "machine_family": kernels.machine_family(), "forms": rows},
                                                   indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
