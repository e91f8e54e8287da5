"""The narrow / right / wide experiment end to end, as one table."""
from __future__ import annotations

from pathlib import Path

from lab import compare, data, graph
from lab.convert import quantize
from lab.workspace import make_workspace

KINDS = ("narrow", "right", "wide")


def narrow_right_wide(work_dir: str | Path, batch_size: int = 36, **settings) -> list[dict]:
    """Quantize the FP32 model with each calibration set and measure it on the evaluation set.

    Writes ``<kind>.onnx`` into the workspace. Each row: the input scale and zero point read
    back from the graph, the range seen (scale x grid steps) beside the calibration set's own
    range, the max abs error and accuracy on the evaluation set, and the diagnosis.
    """
    work = make_workspace(work_dir)
    source = work / "source.onnx"
    evaluation = data.load_split("evaluation")
    x = evaluation.pixels
    reference = compare.predict(source, x)
    rows = []
    for kind in KINDS:
        calib = data.calibration_set(kind)
        model = work / f"{kind}.onnx"
        record = quantize(source, model, calib, batch_size=batch_size, **settings)
        ruler = graph.input_ruler(model)
        out = compare.predict(model, x)
        rows.append({
            "kind": kind, "scale": ruler.scale, "zero_point": ruler.zero_point,
            "range_seen": ruler.range_seen,
            "calibration_range": float(calib.max() - min(float(calib.min()), 0.0)),
            "max_abs_error": compare.max_abs_error(reference, out),
            "accuracy": float((out.argmax(1) == evaluation.labels).mean()),
            "diagnosis": compare.diagnose(ruler, x).kind,
            "calibration_sha256": record.calibration_sha256,
        })
    return rows


def format_table(rows: list[dict]) -> str:
    """The experiment as a fixed-width text table."""
    head = f"{'set':<7} {'scale':>10} {'zp':>5} {'range seen':>11} {'calib range':>12} {'max abs err':>12} {'accuracy':>9}  diagnosis"
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(f"{r['kind']:<7} {r['scale']:>10.6f} {r['zero_point']:>5d} {r['range_seen']:>11.4f} "
                     f"{r['calibration_range']:>12.4f} {r['max_abs_error']:>12.4f} {r['accuracy']:>9.4f}  {r['diagnosis']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """``python -m lab table [--work-dir DIR]``."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m lab table", description="narrow / right / wide, one table")
    parser.add_argument("--work-dir", default="build/table-workspace")
    args = parser.parse_args(argv)
    print(format_table(narrow_right_wide(args.work_dir)))
    return 0
