"""``python -m lab audit`` on a ResNet-50-sized QDQ model as the data grows: peak memory and time against a floor.

The model is onnx's ``light_resnet50`` graph with seeded weights (``lab.zoo``), pre-processed and quantized QDQ
per-channel as ORT's docs advise; the data is seeded 224x224 images. For each size the audit runs in a fresh process
(``python -m lab audit ... --json``) and so does the floor: the FP32 and the INT8 model each run once over the same
data in ONNX Runtime, in batches of the audit's size. Peak memory is each process's own high-water mark
(``VmHWM``, written by ``HIGH_WATER`` as it exits), not ``os.wait4``'s ``ru_maxrss``: Linux records the memory map a
child replaces at exec into its maxrss, so that counts this benchmark's own peak (3.01 GB after making 1,000 images)
for every process it starts. The time ratio is the audit's seconds over the floor's. Target: at most ``TARGET_GB``
at 64 images, and memory flat as the data grows to 1,000 images (the largest size within ``FLAT_GB`` of the
smallest). ``BENCH_AUDIT_SIZES=16,1000`` runs other sizes.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx
from onnxruntime.quantization import QuantFormat, quantize_static
from onnxruntime.quantization.shape_inference import quant_pre_process

from lab import audit, zoo
from lab.readers import ArrayReader

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "build" / "bench"
WORK = OUT / "audit"
SIZES, QUICK_SIZES = (16, 64, 1000), (8, 32)
TARGET_GB, TARGET_AT = 3.0, 64
FLAT_GB = 0.25
HIGH_WATER = """
import atexit, runpy, sys
path, mode, target, *rest = sys.argv[1:]
def record():
    with open('/proc/self/status') as status:
        kb = next(int(line.split()[1]) for line in status if line.startswith('VmHWM:'))
    with open(path, 'w') as out:
        out.write(str(kb))
atexit.register(record)
if mode == '-m':
    sys.argv = [target, *rest]
    runpy.run_module(target, run_name='__main__', alter_sys=True)
else:
    sys.argv = ['-c', *rest]
    exec(compile(target, '<floor>', 'exec'), {'__name__': '__main__'})
"""
FLOOR = """
import pathlib, sys, numpy as np, onnxruntime as ort
from lab import audit
fp32, int8, batch = sys.argv[1], sys.argv[2], int(sys.argv[4])
data = audit.NpyFile(pathlib.Path(sys.argv[3]))
so = ort.SessionOptions()
so.intra_op_num_threads = so.inter_op_num_threads = 1
so.log_severity_level = 3
for path in (fp32, int8):
    s = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    for i in range(0, len(data), batch):
        s.run(None, {s.get_inputs()[0].name: np.ascontiguousarray(data[i:i + batch], np.float32)})
"""


def build(folder: Path) -> tuple[Path, Path]:
    """The FP32 and QDQ ResNet-50 (built once, kept in ``folder``: about a minute and a half)."""
    fp32, int8 = folder / "resnet50.onnx", folder / "resnet50-qdq.onnx"
    if fp32.is_file() and int8.is_file():
        return fp32, int8
    folder.mkdir(parents=True, exist_ok=True)
    model = zoo.light_model("resnet50", zoo.images(4, seed=1))
    onnx.save(model, fp32)
    pre = folder / "resnet50-pre.onnx"
    quant_pre_process(str(fp32), str(pre))
    quantize_static(str(pre), str(int8), ArrayReader(zoo.images(8, seed=3), 4, model.graph.input[0].name),
                    quant_format=QuantFormat.QDQ, per_channel=True)
    return fp32, int8


def peak_run(mode: str, target: str, args: list[str]) -> tuple[float, float, int]:
    """(seconds, peak resident GB, exit status) of one fresh process running ``python -m target`` or ``python -c
    target`` (``mode``) with ``args``; the peak is its own ``VmHWM`` (``HIGH_WATER``), else ``ru_maxrss``."""
    WORK.mkdir(parents=True, exist_ok=True)
    peak = WORK / "peak-kb.txt"
    peak.unlink(missing_ok=True)
    argv = [sys.executable, "-c", HIGH_WATER, str(peak), mode, target, *args]
    with open(WORK / "stderr.txt", "w+b") as err:   # a file, not a pipe: a full pipe would stall the child
        start = time.perf_counter()
        proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.DEVNULL, stderr=err,
                                env={**os.environ, "PYTHONPATH": str(REPO)})
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - start
        code = os.waitstatus_to_exitcode(status)
        if code:
            err.seek(0)
            print(f"  {mode} {target[:40]}: exit {code}: {err.read().decode()[-300:]}")
    kb = int(peak.read_text()) if peak.is_file() else usage.ru_maxrss   # both in kB on Linux
    return seconds, kb / 1e6, code


def write_images(path: Path, n: int, chunk: int = 64) -> None:
    """``n`` seeded 224x224 images into a ``.npy``, ``chunk`` at a time (chunk k from seed 5 + k): 1,000 of them at
    once would hold 2-3 GB in this process while it generates them."""
    out = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(n, 3, 224, 224))
    for k, start in enumerate(range(0, n, chunk)):
        out[start:start + chunk] = zoo.images(min(chunk, n - start), seed=5 + k)
    out.flush()
    del out


def measure(fp32: Path, int8: Path, n: int, batch: int) -> dict:
    data = WORK / f"images-{n}.npy"
    if not data.is_file():
        write_images(data, n)
    audit_s, audit_gb, rc = peak_run("-m", "lab", ["audit", str(fp32), str(int8), "--data", str(data), "--batch",
                                                   str(batch), "--json"])
    floor_s, floor_gb, _ = peak_run("-c", FLOOR, [str(fp32), str(int8), str(data), str(batch)])
    return {"samples": n, "audit_seconds": audit_s, "audit_peak_gb": audit_gb, "exit": rc, "floor_seconds": floor_s,
            "floor_peak_gb": floor_gb, "ratio": audit_s / floor_s}


def markdown(report: dict) -> str:
    lines = ["# Audit benchmark", "", f"`python -m lab audit` on a ResNet-50-sized QDQ model (batch {report['batch']}),"
             " against a floor that runs both models once over the same data.", "",
             "| images | audit (s) | floor (s) | x floor | audit peak (GB) | floor peak (GB) |",
             "|---:|---:|---:|---:|---:|---:|"]
    lines += [f"| {r['samples']} | {r['audit_seconds']:.1f} | {r['floor_seconds']:.1f} | {r['ratio']:.1f} | "
              f"{r['audit_peak_gb']:.2f} | {r['floor_peak_gb']:.2f} |" for r in report["rows"]]
    verdict = {True: "met", False: "missed", None: "not measured"}[report["met"]]
    lines += ["", f"Target: at most {TARGET_GB} GB at {TARGET_AT} images ({verdict}); "
              f"memory flat as the data grows: {'yes' if report['flat'] else 'no'}."]
    return "\n".join(lines)


def main() -> int:
    quick = os.environ.get("BENCH_QUICK") == "1"
    chosen = os.environ.get("BENCH_AUDIT_SIZES", "")
    sizes = tuple(int(n) for n in chosen.split(",")) if chosen else QUICK_SIZES if quick else SIZES
    fp32, int8 = build(WORK)
    rows = []
    for n in sizes:
        rows.append(measure(fp32, int8, n, audit.BATCH))
        r = rows[-1]
        print(f"{n:5d} images: audit {r['audit_seconds']:.1f} s, {r['audit_peak_gb']:.2f} GB peak; floor "
              f"{r['floor_seconds']:.1f} s, {r['floor_peak_gb']:.2f} GB; {r['ratio']:.1f}x the floor's time",
              flush=True)
    at = next((r for r in rows if r["samples"] == TARGET_AT), None)
    report = {"batch": audit.BATCH, "rows": rows, "target_gb": TARGET_GB, "target_at": TARGET_AT,
              "met": bool(at and at["audit_peak_gb"] <= TARGET_GB and not at["exit"]) if at else None,
              "flat": rows[-1]["audit_peak_gb"] - rows[0]["audit_peak_gb"] <= FLAT_GB}
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "audit.json").write_text(json.dumps(report, indent=2))
    (OUT / "audit.md").write_text(markdown(report) + "\n")
    print(markdown(report))
    for stale in WORK.glob("images-*.npy"):
        if int(stale.stem.split("-")[1]) not in sizes:
            stale.unlink()
    shutil.rmtree(WORK / "tmp", ignore_errors=True)
    return 0 if all(not r["exit"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
