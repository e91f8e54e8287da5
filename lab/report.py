"""The header every lesson report starts with, built once: which schema and lesson, the source model, the tools,
the settings, and the images every number was measured on. Each lesson adds its own fields after it."""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from lab import convert
from lab.data import Split, data_sha256, file_sha256


def evaluation_entry(evaluation: Split) -> dict:
    """The ``evaluation`` block every lesson report carries: which images the numbers were measured on."""
    return {"name": evaluation.name, "count": int(len(evaluation)), "sha256": data_sha256(evaluation.pixels)}


def header(schema: str, lesson: str, source: str | Path, settings: Mapping, evaluation: Split) -> dict:
    """``schema``, ``lesson`` (the notebook's name), ``source_sha256`` (of the FP32 ``source`` every conversion
    read), ``versions`` (``lab.convert.versions()``), ``settings`` and ``evaluation`` (``evaluation_entry``), in
    that order: the first fields of results.json, growth.json and formats.json."""
    return {"schema": schema, "lesson": lesson, "source_sha256": file_sha256(source),
            "versions": convert.versions(), "settings": dict(settings), "evaluation": evaluation_entry(evaluation)}
