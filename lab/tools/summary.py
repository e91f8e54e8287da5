"""The headless run's summary: the few numbers each lesson exists to show, read from the workspace.

Each lesson's section is its module's ``summary_lines``, a pure function of the JSON document the lesson writes.
A document that is missing is left out (the lesson did not run); one that cannot be read says so.
"""
from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from lab import contract
from lab.lessons import lesson03_narrow_right_wide as lesson03
from lab.lessons import lesson04_more_batches as lesson04
from lab.lessons import lesson05_qdq_vs_qoperator as lesson05
from lab.lessons.lesson06_accept_or_reject import acceptance
from lab.lessons.lesson07_calibrate_the_deployed_representation import scenario_checks
from lab.lessons.lesson08_the_quantization_toolbox import outliers
from lab.lessons.lesson09_choosing_a_recipe import choice
from lab.lessons.lesson10_your_own_model import release as lesson10

# (title, the document's schema, its lesson's summary_lines): the file and the lesson that writes it come from
# lab.contract, the lines from the lesson's module
SECTIONS: list[tuple[str, str, Callable[[dict], list[str]]]] = [
    ("narrow / right / wide", "results", lesson03.summary_lines),
    ("more batches", "growth", lesson04.summary_lines),
    ("QDQ vs QOperator", "formats", lesson05.summary_lines),
    ("accept or reject", "regression", acceptance.summary_lines),
    ("the deployed representation", "scenarios", scenario_checks.summary_lines),
    ("the toolbox: stuck pixels", "outliers", outliers.summary_lines),
    ("choosing a recipe", "toolbox", choice.summary_lines),
    ("your own model: the camera CNN's release", "camera-release", lesson10.summary_lines),
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
