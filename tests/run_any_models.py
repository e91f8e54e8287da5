"""Run ONNX models with one input each on one batch and save their outputs: usable under any kernel family.

    python run_any_models.py OUT.npz IN.npz MODEL.onnx [MODEL.onnx ...]

Like run_models.py, but for models whose one input has any name and shape (the CNN's ``image`` [N, 1, 16, 16],
onnx's test models' ``0``): IN.npz holds one array per model, under the model's file stem, fed as that model's
only input. OUT.npz gets each model's first output under the same key. Sessions use the CPU provider, default
graph optimizations (so the fused integer kernels run) and one intra-op thread.

Only numpy and onnxruntime are imported (the arm64 Python that tests/kernel_families.py builds has nothing
else). Prints one line: the machine, the ORT version and the keys written.
"""
from __future__ import annotations

import platform
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort


def main(argv: list[str]) -> int:
    if len(argv) < 3:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    out_path, in_path, *model_paths = (Path(a) for a in argv)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    outputs = {}
    with np.load(in_path) as inputs:
        for path in model_paths:
            if path.stem not in inputs:
                print(f"{in_path}: no array {path.stem!r} for {path.name} (has {sorted(inputs.files)})",
                      file=sys.stderr)
                return 2
            session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
            names = [i.name for i in session.get_inputs()]
            if len(names) != 1:
                print(f"{path}: expected one input, the model has {names}", file=sys.stderr)
                return 2
            outputs[path.stem] = session.run(None, {names[0]: np.ascontiguousarray(inputs[path.stem])})[0]
    tmp = out_path.with_name(out_path.name + ".partial.npz")
    np.savez(tmp, **outputs)
    tmp.replace(out_path)
    print(f"{platform.machine()} onnxruntime {ort.__version__}: wrote {', '.join(outputs)} to {out_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
