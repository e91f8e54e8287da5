"""The headless run's summary: the few numbers each lesson exists to show, read from the workspace.

Each lesson's section is a pure function of its JSON document. A document that is missing is
left out (the lesson did not run); one that cannot be read says so.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

from lab import contract, tables


def _f(value, spec: str = ".4f") -> str:
    return format(value, spec) if isinstance(value, (int, float)) and not isinstance(value, bool) else "-"


SETS = [("set", "<16"), ("range seen", ">11"), ("calib range", ">12"), ("max abs err", ">12"), ("accuracy", ">9"),
        ("  diagnosis", "")]


def calibration_sets(doc: dict) -> list[str]:
    """Lesson 03: the ruler each calibration set built, and what it did."""
    lines = ["  " + tables.header(SETS, "")]
    for kind, row in doc.get("sets", {}).items():
        lines.append("  " + tables.row([kind, _f(row.get("range_seen")), _f(row.get("calibration_range")),
                                        _f(row.get("max_abs_error")), _f(row.get("accuracy")),
                                        f"  {row.get('diagnosis', '-')}"], SETS, ""))
    for name in ("dynamic", "bad_calibration"):
        row = doc.get(name) or {}
        if row:
            lines.append("  " + tables.row([name.replace("_", " "), "", "", _f(row.get("max_abs_error")),
                                            _f(row.get("accuracy"))], SETS, ""))
    return lines


def growth(doc: dict) -> list[str]:
    """Lesson 04: the most narrow batches against the fewest right ones."""
    v = doc.get("verdict", {})
    return [f"  narrow x {v.get('wrong_most_batches', '-')} batches: max abs err "
            f"{_f(v.get('wrong_most_batches_max_abs_error'))}, accuracy {_f(v.get('wrong_most_batches_accuracy'))}",
            f"  right  x {v.get('right_batches', '-')} batches: worst max abs err "
            f"{_f(v.get('right_worst_max_abs_error'))}, worst accuracy {_f(v.get('right_worst_accuracy'))}",
            f"  more wrong data stays worse: {v.get('wrong_stays_worse', '-')}"]


FORMATS = [("format", "<10"), ("input scale", ">12"), ("output scale", ">13"), ("max abs err", ">12"),
           ("bytes", ">7"), ("nodes", ">6")]


def formats(doc: dict) -> list[str]:
    """Lesson 05: one calibration, two formats."""
    lines = ["  " + tables.header(FORMATS, "")]
    for name, row in doc.get("formats", {}).items():
        lines.append("  " + tables.row([name, _f(row.get("input_scale"), ".6f"), _f(row.get("output_scale"), ".6f"),
                                        _f(row.get("max_abs_error")), row.get("size_bytes", "-"),
                                        row.get("nodes", "-")], FORMATS, ""))
    d = doc.get("difference", {})
    lines.append(f"  elementwise: max difference {_f(d.get('max_abs_difference'))}, "
                 f"{_f(d.get('fraction_elements_differ'), '.1%')} of outputs differ, "
                 f"{d.get('predictions_differ', '-')} predictions differ")
    return lines


def regression(doc: dict) -> list[str]:
    """Lesson 06: the decision and the numbers it rests on."""
    models = doc.get("models", {})
    lines = ["  " + ", ".join(f"{name} {_f(m.get('accuracy'))}" for name, m in models.items())]
    reasons = doc.get("reasons", {})
    lines += [f"  {name}: {reason}" for name, reason in reasons.items()]
    return lines


SCENARIOS = [("scenario", "<14"), ("FP32", ">7"), ("INT8", ">7"), ("max abs err", ">12"), ("  verdict", "")]


def scenarios(doc: dict) -> list[str]:
    """Lesson 07: the release against every named operating condition."""
    lines = [f"  release {doc.get('release_id', '-')}", "  " + tables.header(SCENARIOS, "")]
    for row in doc.get("results", []):
        lines.append("  " + tables.row([row.get("name", "-"), _f(row.get("fp32_accuracy"), ".3f"),
                                        _f(row.get("int8_accuracy"), ".3f"), _f(row.get("max_abs_error")),
                                        f"  {row.get('verdict', '-')}"], SCENARIOS, ""))
    return lines


def toolbox(doc: dict) -> list[str]:
    """Lesson 08: the settings chosen for the stated requirement."""
    choice = doc.get("choice", {})
    settings = choice.get("settings", {})
    picked = ", ".join(f"{k}={v}" for k, v in settings.items())
    return [f"  requirement: {doc.get('requirement', {}).get('text', '-')}",
            f"  chosen: {picked or '-'}",
            f"  {choice.get('bytes', '-')} bytes ({_f(choice.get('size_ratio'), '.1%')} of FP32), "
            f"accuracy {_f(choice.get('accuracy'))}, loss {_f(choice.get('accuracy_loss'))}"]


# (title, the document's schema, its section): the file and the lesson that writes it come from lab.contract
SECTIONS: list[tuple[str, str, Callable[[dict], list[str]]]] = [
    ("narrow / right / wide", "results", calibration_sets),
    ("more batches", "growth", growth),
    ("QDQ vs QOperator", "formats", formats),
    ("accept or reject", "regression", regression),
    ("the deployed representation", "scenarios", scenarios),
    ("the toolbox", "toolbox", toolbox),
]


def summarize_workspace(work_dir: str | Path, lessons: set[str] | None = None) -> list[str]:
    """Every lesson's key numbers, as text lines; lessons that wrote nothing are left out.

    ``lessons`` (lesson numbers such as ``"03"``) keeps only those: after a failed run, the files an
    earlier run left for later lessons are not this run's numbers.
    """
    lines: list[str] = []
    for title, schema, section in SECTIONS:
        name = contract.path_of_schema(schema)
        lesson = contract.lesson_of(name)
        path = Path(work_dir) / name
        if not path.exists() or (lessons is not None and lesson not in lessons):
            continue
        lines.append(f"{lesson} {title}  ({name})")
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
            lines += section(doc) if isinstance(doc, dict) else ["  (not a JSON object)"]
        except (OSError, ValueError, UnicodeDecodeError) as e:
            lines.append(f"  (unreadable: {e})")
        except (AttributeError, TypeError, KeyError) as e:
            lines.append(f"  (unexpected layout: {type(e).__name__}: {e})")
    models = sorted(Path(work_dir).rglob("*.onnx"))
    if models:
        size = sum(m.stat().st_size for m in models)
        lines.append(f"{len(models)} ONNX models in the workspace, {size / 1e6:.1f} MB")
    return lines
