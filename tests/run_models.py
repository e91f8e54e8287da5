"""Run ONNX models on one input batch and save their outputs: usable under any kernel family.

    python run_models.py OUT.npz IN.npz MODEL.onnx [MODEL.onnx ...]

IN.npz holds ``x``: float32 [N, 64], fed as each model's input ``pixels``. OUT.npz gets each model's
first output under the model's file stem (``daylight.onnx`` -> ``daylight``). Sessions use the CPU
provider, default graph optimizations (so the fused integer kernels run) and one intra-op thread.

Only numpy and onnxruntime are imported: the arm64 Python that tests/kernel_families.py builds has
nothing else. Prints one line: the machine, the ORT version and the keys written.
"""
from __future__ import annotations

import platform
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort

INPUT_KEY = "x"
INPUT_NAME = "pixels"


def main(argv: list[str]) -> int:
    if len(argv) < 3:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    out_path, in_path, *model_paths = (Path(a) for a in argv)
    with np.load(in_path) as inputs:
        if INPUT_KEY not in inputs:
            print(f"{in_path}: no array {INPUT_KEY!r} (has {sorted(inputs.files)})", file=sys.stderr)
            return 2
        x = np.ascontiguousarray(inputs[INPUT_KEY], dtype=np.float32)
    stems = [p.stem for p in model_paths]
    if len(set(stems)) != len(stems):
        print(f"two models share a file stem (the output key): {stems}", file=sys.stderr)
        return 2

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    outputs = {}
    for path in model_paths:
        session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        names = [i.name for i in session.get_inputs()]
        if names != [INPUT_NAME]:
            print(f"{path}: expected one input {INPUT_NAME!r}, the model has {names}", file=sys.stderr)
            return 2
        outputs[path.stem] = session.run(None, {INPUT_NAME: x})[0]

    tmp = out_path.with_name(out_path.name + ".partial.npz")
    np.savez(tmp, **outputs)
    tmp.replace(out_path)
    print(f"{platform.machine()} onnxruntime {ort.__version__}: wrote {', '.join(outputs)} to {out_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
