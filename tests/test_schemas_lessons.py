"""results/1, growth/1 and formats/1: the schemas, the documents lessons 03-05 write, and the numbers in them.

The documents come from the session's headless run of every lesson (``lesson_suite``), so they are
exactly what a student's run writes; each check recomputes a number from the models beside it.
"""
from __future__ import annotations

import copy
import json
import re

import jsonschema
import pytest

from lab import data, graph, schemas
from lab.lessons import lesson04_more_batches as growth
from lab.schemas import SchemaError

DOCS = {"results": ("03_narrow_right_wide.ipynb", "results.json"),
        "growth": ("04_more_batches.ipynb", "growth.json"),
        "formats": ("05_qdq_vs_qoperator.ipynb", "formats.json")}


@pytest.mark.parametrize("name", sorted(DOCS))
def test_schema_is_valid_and_versioned(name):
    schema = schemas.load(name)
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["$id"] == f"{name}/1"
    assert schema["properties"]["schema"] == {"const": f"{name}/1"}
    undocumented = [k for k in schema["required"] if k != "schema" and "description" not in schema["properties"][k]
                    and k not in ("lesson", "source_sha256", "versions", "formats", "rows", "evaluation")]
    assert not undocumented, f"{name}: describe {undocumented} for the grader"


def _doc(lesson_suite, name):
    notebook, file = DOCS[name]
    result = lesson_suite.runs.get(notebook)
    if result is None or not result.ok:
        pytest.fail(f"{notebook} did not run: {getattr(result, 'error', 'not found')}")
    return schemas.read(name, lesson_suite.work_dir / file)


@pytest.mark.slow
def test_results_numbers_match_the_models(lesson_suite):
    doc = _doc(lesson_suite, "results")
    work = lesson_suite.work_dir
    assert doc["evaluation"] == {"name": "evaluation", "count": 400,
                                 "sha256": data.data_sha256(data.load_split("evaluation").pixels)}
    for kind, entry in doc["sets"].items():
        ruler = graph.input_ruler(work / entry["model"])
        assert (entry["scale"], entry["zero_point"]) == (ruler.scale, ruler.zero_point)
        assert entry["model_sha256"] == data.file_sha256(work / entry["model"])
        assert entry["calibration_sha256"] == data.data_sha256(data.calibration_set(kind))
        assert entry["calibration_samples"] == 360 and entry["calibration_batches"] == 10
        assert entry["range_seen"] == pytest.approx(entry["calibration_range"], rel=1e-5)
        assert entry["hidden_layer"]["scale"] == graph.input_ruler(work / entry["model"], "relu1.out").scale
    sets = doc["sets"]
    assert [sets[k]["diagnosis"] for k in ("narrow", "right", "wide")] == ["clipping", "fine", "squashing"]
    assert sets["narrow"]["hidden_layer"]["clipped_fraction"] > 0.1 > sets["wide"]["hidden_layer"]["clipped_fraction"]
    round_trip = {name: sets[name]["hidden_layer"]["mean_round_trip_error"] for name in ("wide", "right")}
    assert round_trip["wide"] > 5 * round_trip["right"]
    assert doc["dynamic"]["max_abs_error"] < sets["right"]["max_abs_error"] < sets["wide"]["max_abs_error"] \
        < sets["narrow"]["max_abs_error"]
    assert doc["bad_calibration"]["accuracy"] < sets["narrow"]["accuracy"] < sets["right"]["accuracy"]


@pytest.mark.slow
def test_growth_rows_match_the_models(lesson_suite):
    doc = _doc(lesson_suite, "growth")
    folder = lesson_suite.work_dir / doc["folder"]
    stream = doc["narrow_stream"]
    counts = growth.doubling_counts(stream["max_batches"])
    assert [r["batches"] for r in doc["rows"] if r["kind"] == "narrow"] == counts
    assert [r["batches"] for r in doc["rows"] if r["kind"] == "right"] == doc["right_data"]["batches"]
    narrow = growth.narrow_batches(stream["max_batches"], stream["batch_size"], stream["seed"])
    assert data.data_sha256(narrow) == stream["sha256"]
    for r in doc["rows"]:
        assert r["model"] == growth.model_name(r["kind"], r["batches"])
        assert r["model_sha256"] == data.file_sha256(folder / r["model"])
        assert r["scale"] == graph.input_ruler(folder / r["model"]).scale
        if r["kind"] == "narrow":
            assert r["calibration_sha256"] == data.data_sha256(narrow[:r["samples"]])
    assert doc["verdict"] == growth.verdict(doc["rows"])
    assert doc["verdict"]["wrong_stays_worse"] is True


@pytest.mark.slow
def test_formats_numbers_match_the_models(lesson_suite):
    doc = _doc(lesson_suite, "formats")
    work = lesson_suite.work_dir
    assert data.file_sha256(work / doc["calibration"]["cache"]) == doc["calibration"]["cache_sha256"]
    assert doc["same_input_ruler"] is True
    for name, entry in doc["formats"].items():
        path = work / "formats" / entry["file"]
        assert entry["sha256"] == data.file_sha256(path)
        assert entry["quant_format"] == graph.quant_format(path) == name
        assert entry["output_scale"] == graph.output_scale(path)
    bands = doc["bands"]
    assert bands["identical"] + bands["within_grid"] + bands["beyond_grid"] == pytest.approx(1.0)


@pytest.mark.slow
@pytest.mark.parametrize("name, path, value, field", [
    ("results", ["sets", "wide", "diagnosis"], "too wide", "sets/wide/diagnosis"),
    ("results", ["sets", "narrow", "scale"], None, "sets/narrow"),
    ("results", ["dynamic", "accuracy"], 1.5, "dynamic/accuracy"),
    ("growth", ["rows", 0, "model"], "narrow-1.onnx", "rows/0/model"),
    ("growth", ["verdict", "wrong_stays_worse"], "yes", "verdict/wrong_stays_worse"),
    ("formats", ["bands"], None, "(top level)"),
    ("formats", ["formats", "QDQ", "output_scale"], 0, "formats/QDQ/output_scale"),
])
def test_a_broken_document_names_the_field(lesson_suite, name, path, value, field):
    doc = copy.deepcopy(_doc(lesson_suite, name))
    parent = doc
    for key in path[:-1]:
        parent = parent[key]
    if value is None:
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    with pytest.raises(SchemaError, match=re.escape(f"field '{field}'")):
        schemas.validate(name, json.loads(json.dumps(doc)))


@pytest.mark.slow
def test_nan_is_refused(lesson_suite):
    doc = copy.deepcopy(_doc(lesson_suite, "results"))
    doc["sets"]["right"]["max_abs_error"] = float("nan")
    with pytest.raises(SchemaError, match="sets/right/max_abs_error"):
        schemas.validate("results", doc)


def test_a_trailing_newline_does_not_pass_an_id_or_hash_pattern():
    """Python's `$` matches before a final newline; the schemas' patterns must not (a student id "ref\\n")."""
    doc = {"schema": "submission/1", "student": "ref", "submitted_at": "2026-12-01T00:00:00Z", "lab_version": "0",
           "versions": {"python": "3", "onnx": "1", "onnxruntime": "1", "numpy": "2"}, "platform": "p",
           "files": {"results.json": "0" * 64}}
    schemas.validate("submission", doc)
    for field, bad in (("student", "ref\n"), ("files", {"results.json": "0" * 64 + "\n"})):
        broken = copy.deepcopy(doc)
        broken[field] = bad
        with pytest.raises(SchemaError):
            schemas.validate("submission", broken)


@pytest.mark.parametrize("name, path", [
    ("toolbox", ["$defs", "measured", "properties", "bytes"]),
    ("toolbox-tables", ["$defs", "measured", "properties", "bytes"]),
    ("formats", ["properties", "formats", "properties", "QDQ", "properties", "size_bytes"]),
    ("formats", ["properties", "formats", "properties", "QOperator", "properties", "size_bytes"]),
    ("regression", ["$defs", "model", "properties", "evidence", "properties", "size_bytes"]),
])
def test_a_file_size_is_bounded_by_the_hand_in_cap(name, path):
    """JSON Schema's "integer" takes 1e308 (a float with no fraction): a size the grader does not recompute
    must be bounded, or 1e308 bytes passes (lesson 08's tables are not handed in, but lesson 08 validates them)."""
    from grader.submission import MAX_FILE_BYTES

    node = schemas.load(name)
    for key in path:
        node = node[key]
    check = jsonschema.Draft202012Validator(node)
    assert check.is_valid(11935) and check.is_valid(MAX_FILE_BYTES)
    assert not check.is_valid(1e308) and not check.is_valid(MAX_FILE_BYTES + 1)


def test_validation_loads_no_format_checker_library_and_leaves_them_importable():
    """A fresh process validates a document without importing jsonschema's format checkers' libraries (rfc3987_syntax
    alone took 1.2 s), and each of them that is installed still imports afterwards: the block is lifted."""
    import subprocess
    import sys

    code = ("import importlib.util, sys\nfrom lab import schemas\n"
            "try:\n    schemas.validate('results', {})\nexcept schemas.SchemaError as e:\n    print('refused:', e)\n"
            "print(sorted(m for m in schemas.FORMAT_CHECKER_LIBRARIES if m in sys.modules))\n"
            "for m in schemas.FORMAT_CHECKER_LIBRARIES:\n"
            "    if importlib.util.find_spec(m) is not None:\n        __import__(m)\nprint('imported')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    refused, loaded, imported = out.stdout.splitlines()
    assert refused.startswith("refused: field '(top level)'") and loaded == "[]" and imported == "imported"


def test_the_headless_runner_imports_nbformat_without_rfc3987_syntax():
    """``python -m lab run`` imports nbformat, which imports jsonschema: without the block its format checkers'
    grammars cost every run 1.2 s. (requests, which papermill imports, brings idna on its own.)"""
    import subprocess
    import sys

    code = ("import importlib.util, sys\nimport lab.tools.run\n"
            "importlib.util.find_spec('rfc3987_syntax') is None or __import__('rfc3987_syntax')\n"
            "print('jsonschema' in sys.modules, 'loaded')")
    blocked = "import sys\nimport lab.tools.run\nprint('rfc3987_syntax' in sys.modules)"
    def printed(source: str) -> list[str]:
        proc = subprocess.run([sys.executable, "-c", source], capture_output=True, text=True, timeout=120)
        return proc.stdout.split()

    assert printed(blocked) == ["False"]
    assert printed(code) == ["True", "loaded"]
