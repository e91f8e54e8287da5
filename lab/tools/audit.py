"""``python -m lab audit FP32 INT8 --data FILE [--labels FILE] [--reconvert] [--html PATH]``: the lessons' diagnostics.

Prints a five-line summary, then every ruler of the INT8 model (the input's, each activation's, each weight's)
against the FP32 values on the data, the error by input size, where INT8 parts from FP32, accuracy or agreement under
both kernel families, the latency on this CPU with the INT8 model's time by kind of op (``--latency-runs``,
``lab.op_time``), the node to exclude (``--reconvert``: re-converted for real, ``lab.reconvert``) and the recipe
(see ``lab.audit``), reading the data ``--batch`` samples at a time (``--max-samples`` caps them). ``--json`` prints
the same as one JSON document; ``--html PATH`` also writes it as one HTML page with figures (``lab.audit_html``). A
model or data file it cannot take is named with what was expected, and the exit status is 2.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tqdm import tqdm

from lab import audit, op_time, reconvert
from lab.errors import LabError


def _at_least(low: int):
    """An argparse type: an integer of at least ``low`` (argparse names the option and the value it refuses)."""
    def whole(text: str) -> int:
        n = int(text)
        if n < low:
            raise ValueError(text)
        return n
    whole.__name__ = f"integer of at least {low}"
    return whole


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m lab audit", description=__doc__.splitlines()[0].split(": ", 1)[1])
    p.add_argument("fp32", help="the FP32 ONNX model")
    p.add_argument("int8", help="the quantized ONNX model (QDQ, QOperator or dynamic) made from it")
    p.add_argument("--data", required=True, help="the model's input: .npy, or .npz with an array named after it")
    p.add_argument("--labels", help="class labels, one per sample: .npy, or .npz with an array 'labels'")
    p.add_argument("--batch", type=_at_least(1), default=audit.BATCH,
                   help=f"samples per run (default {audit.BATCH}; memory grows with it, not with the data)")
    p.add_argument("--max-samples", type=_at_least(1), help="audit only the first N samples of the data")
    p.add_argument("--rank-samples", type=_at_least(0), default=audit.RANK_SAMPLES,
                   help=f"samples the ranking of nodes to exclude runs on (default {audit.RANK_SAMPLES}; 0: none)")
    p.add_argument("--reconvert", action="store_true",
                   help="re-convert the FP32 model with the suggested node excluded, as the INT8 model's graph says it "
                        f"was made, calibrated on the data's first {reconvert.CALIBRATION} samples, and measure it")
    p.add_argument("--latency-runs", type=_at_least(0), default=op_time.RUNS, metavar="N",
                   help=f"rounds the latency on this CPU is timed in, over the data's first {op_time.BATCHES} batches "
                        f"(default {op_time.RUNS}; 0: not timed)")
    p.add_argument("--json", action="store_true", help="print one JSON document instead of the text report")
    p.add_argument("--html", metavar="PATH", help="also write the report as one self-contained HTML page to PATH")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    page = Path(args.html) if args.html else None
    if page is not None and (page.is_dir() or not page.parent.is_dir()):   # refused before the audit's minutes
        why = "it is a folder" if page.is_dir() else f"no folder {page.parent}"
        print(f"python -m lab audit: {args.html}: cannot write the HTML report ({why}); nothing was audited",
              file=sys.stderr)
        return 2

    def progress(items):
        return tqdm(items, unit="batch", file=sys.stderr, disable=None, leave=False)

    try:
        doc = audit.audit(args.fp32, args.int8, args.data, args.labels, progress=progress,
                          options=audit.Options(batch=args.batch, max_samples=args.max_samples,
                                                rank_samples=args.rank_samples, reconvert=args.reconvert,
                                                latency_runs=args.latency_runs))
    except LabError as exc:
        print(f"python -m lab audit: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(audit.jsonable(doc), indent=2, allow_nan=False) if args.json else audit.format_report(doc))
    if args.html:
        from lab import audit_html  # deferred: matplotlib is imported only for the page's figures

        try:
            audit_html.write(doc, args.html)
        except OSError as exc:
            print(f"python -m lab audit: {args.html}: cannot write the HTML report ({exc.strerror})", file=sys.stderr)
            return 2
        print(f"python -m lab audit: wrote {args.html}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
