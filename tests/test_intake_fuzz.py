"""No hand-in stops a batch, and blame lands where it belongs (issue 11, item 6).

Hand-ins made from the reference one: named cases for what a fuzz of intake found (lone surrogates,
invalid UTF-8, deep nesting, broken zips, a student's model or module at fault) and a seeded
hypothesis fuzz of zips, JSON and modules. All of them are graded in ONE batch run; the batch must
finish with one gradebook row each, no ``error`` row, no traceback in any feedback, and every file
it wrote valid UTF-8.
"""
from __future__ import annotations

import csv
import io
import json
import os
import re
import stat
import struct
import subprocess
import sys
import zipfile
from pathlib import Path

import onnx
import pytest
from bad_submissions.corpus import Files, pack, read_zip
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from onnx import numpy_helper

from lab.tools.submit import submit

REPO = Path(__file__).resolve().parent.parent
# hypothesis examples per family, each one hand-in in the batch; a module is graded in full (about 1 s), most
# broken zips and JSON are refused at intake (milliseconds)
FUZZ_EXAMPLES = {"zip": 24, "json": 24, "module": 12}


# ----- raw zip surgery: what zipfile will not write for us -----

def _stored_zip(entries: list[tuple[str, bytes]], flags: int = 0) -> bytes:
    """A zip whose members are stored (not deflated), so their bytes can be found and changed in place."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as zf:
        for name, data in entries:
            info = zipfile.ZipInfo(name, (2026, 1, 1, 0, 0, 0))
            info.external_attr = (stat.S_IFREG | 0o644) << 16
            info.flag_bits |= flags
            zf.writestr(info, data)
    return buf.getvalue()


def _manifested(files: Files) -> Files:
    """``files`` with submission.json listing their true hashes."""
    return read_zip_bytes(pack(files))


def read_zip_bytes(data: bytes) -> Files:
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        return {i.filename: zf.read(i) for i in zf.infolist() if not i.is_dir()}


def _patch_headers(data: bytes, name: bytes, *, new_name: bytes | None = None, local_only: bool = False,
                   method: int | None = None, flag: int = 0) -> bytes:
    """Change a member's name, compression method or flags in its local header and its central directory entry."""
    out = bytearray(data)
    for sig, name_len_at, method_at, flag_at, header_len in ((b"PK\x03\x04", 26, 8, 6, 30),
                                                              (b"PK\x01\x02", 28, 10, 8, 46)):
        if local_only and sig == b"PK\x01\x02":
            continue
        pos = 0
        while (pos := out.find(sig, pos)) >= 0:
            (n,) = struct.unpack_from("<H", out, pos + name_len_at)
            if bytes(out[pos + header_len:pos + header_len + n]) == name:
                if new_name is not None:
                    assert len(new_name) == len(name)
                    out[pos + header_len:pos + header_len + n] = new_name
                if method is not None:
                    struct.pack_into("<H", out, pos + method_at, method)
                if flag:
                    (f,) = struct.unpack_from("<H", out, pos + flag_at)
                    struct.pack_into("<H", out, pos + flag_at, f | flag)
            pos += 4
    return bytes(out)


def bad_crc(files: Files) -> bytes:
    data = bytearray(_stored_zip(list(_manifested(files).items())))
    at = bytes(data).find(files["metrics.py"][:40])
    data[at] ^= 0x01  # one bit of metrics.py: the stored CRC no longer matches
    return bytes(data)


def mismatched_name(files: Files) -> bytes:
    data = _stored_zip(list(_manifested(files).items()))
    return _patch_headers(data, b"metrics.py", new_name=b"metricz.py", local_only=True)


def file_then_folder(files: Files) -> bytes:
    return _stored_zip([*_manifested(files).items(), ("notes.txt", b"a file"),
                        ("notes.txt/inside.txt", b"and a folder")])


def folder_then_file(files: Files) -> bytes:
    return _stored_zip([*_manifested(files).items(), ("notes.txt/inside.txt", b"a folder"),
                        ("notes.txt", b"then a file")])


def unsupported_compression(files: Files) -> bytes:
    return _patch_headers(_stored_zip(list(_manifested(files).items())), b"metrics.py", method=99)


def encrypted(files: Files) -> bytes:
    return _patch_headers(_stored_zip(list(_manifested(files).items())), b"metrics.py", flag=0x1)


def member_name_not_utf8(files: Files) -> bytes:
    data = _stored_zip([*_manifested(files).items(), ("caf\u00e9.txt", b"notes")])  # zipfile sets the UTF-8 flag
    return _patch_headers(data, "caf\u00e9.txt".encode(), new_name=b"caf\xff\xfe.txt")


def member_name_cp437(files: Files) -> bytes:
    """No UTF-8 flag: the name is read as cp437 and the manifest cannot list it."""
    data = _stored_zip([*_manifested(files).items(), ("caf\u00e9.txt", b"notes")])
    data = _patch_headers(data, "caf\u00e9.txt".encode(), new_name=b"caf\x81\x9b.txt")
    out = bytearray(data)
    pos = 0
    while (pos := out.find(b"PK\x01\x02", pos)) >= 0:  # clear bit 11 (UTF-8) everywhere
        (f,) = struct.unpack_from("<H", out, pos + 8)
        struct.pack_into("<H", out, pos + 8, f & ~0x800)
        pos += 4
    pos = 0
    while (pos := out.find(b"PK\x03\x04", pos)) >= 0:
        (f,) = struct.unpack_from("<H", out, pos + 6)
        struct.pack_into("<H", out, pos + 6, f & ~0x800)
        pos += 4
    return bytes(out)


# ----- JSON a student (or their editor) could have written -----

def with_text(rel: str, text: str | bytes):
    def make(files: Files) -> bytes:
        return pack({**files, rel: text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text})
    return make


def json_edit(rel: str, edit):
    def make(files: Files) -> bytes:
        text = files[rel].decode()
        return pack({**files, rel: edit(text).encode("utf-8", "surrogatepass")})
    return make


def insert_key(text: str, raw: str) -> str:
    """``raw`` (JSON text, e.g. ``"\\ud800": 1``) as the first member of the top-level object."""
    head, rest = text.split("{", 1)
    return head + "{" + raw + ", " + rest


def deep(depth: int) -> str:
    return "[" * depth + "]" * depth


def manifest_edit(edit):
    """submission.json changed after packing (its own hash is not in it, so the edit reaches the schema)."""
    def make(files: Files) -> bytes:
        packed = _manifested(files)
        packed["submission.json"] = edit(packed["submission.json"].decode()).encode("utf-8", "surrogatepass")
        return _stored_zip(list(packed.items()))
    return make


# ----- models and modules that are the student's fault -----

def with_model(rel: str, edit):
    def make(files: Files) -> bytes:
        model = onnx.load_from_string(files[rel])
        edit(model)
        return pack({**files, rel: model.SerializeToString()})
    return make


def fp32_as(rel: str):
    def make(files: Files) -> bytes:
        from lab import data

        return pack({**files, rel: data.fixture_path("fp32.onnx").read_bytes()})
    return make


def _nan_weights(model: onnx.ModelProto) -> None:
    import numpy as np

    for i, init in enumerate(model.graph.initializer):
        arr = numpy_helper.to_array(init)
        if arr.dtype == np.float32 and arr.size > 10:
            model.graph.initializer[i].CopyFrom(numpy_helper.from_array(np.full_like(arr, np.nan), init.name))


def _bad_reshape(model: onnx.ModelProto) -> None:
    """A constant shape that cannot hold the batch: ONNX Runtime fails while running it."""
    import numpy as np
    from onnx import helper

    out = model.graph.output[0].name
    last = next(n for n in model.graph.node if out in n.output)
    mid = "fuzz_reshaped"
    last.output[list(last.output).index(out)] = mid
    model.graph.initializer.append(numpy_helper.from_array(np.array([7, 3], np.int64), "fuzz_shape"))
    model.graph.node.append(helper.make_node("Reshape", [mid, "fuzz_shape"], [out], name="fuzz_reshape"))


MODULE_RAISES = '''class DigitReader:
    def __init__(self, *a, **k):
        raise ValueError({text!r})
'''
METRICS_RAISES = '''def summarize(predictions, labels):
    raise RuntimeError({text!r})
'''
READER_NAN = '''import numpy as np
from onnxruntime.quantization import CalibrationDataReader


class DigitReader(CalibrationDataReader):
    def __init__(self, pixels, batch_size=32, input_name="pixels"):
        self.pixels = np.full_like(np.asarray(pixels, dtype=np.float32), np.nan)
        self.batch_size, self.input_name, self.position = batch_size, input_name, 0

    def rewind(self):
        self.position = 0

    def get_next(self):
        if self.position >= len(self.pixels):
            return None
        batch = self.pixels[self.position:self.position + self.batch_size]
        self.position += self.batch_size
        return {self.input_name: batch}
'''
CACHE = "formats/model.calibration.json"
SURROGATES = "\udc80\ud800 lone surrogates, \x1b[31m escape, \x00 NUL, \u202e right-to-left"

NAMED = {
    # zips that break while unpacking
    "zip_bad_crc": bad_crc,
    "zip_mismatched_name": mismatched_name,
    "zip_file_then_folder": file_then_folder,
    "zip_folder_then_file": folder_then_file,
    "zip_unsupported_compression": unsupported_compression,
    "zip_encrypted": encrypted,
    "zip_member_name_not_utf8": member_name_not_utf8,
    "zip_member_name_cp437": member_name_cp437,
    "zip_truncated": lambda f: pack(f)[: len(pack(f)) // 2],
    # JSON text
    "json_surrogate_key_in_manifest": manifest_edit(lambda t: insert_key(t, '"\\udc80k": 1')),
    "json_surrogate_value_in_manifest": manifest_edit(lambda t: t.replace('"platform": "', '"platform": "\\ud800', 1)),
    "json_surrogate_key_in_results": json_edit("results.json", lambda t: insert_key(t, '"\\udc80k": "\\ud800"')),
    "json_surrogate_value_in_results": json_edit(
        "results.json", lambda t: t.replace('"diagnosis": "', '"diagnosis": "\\udfff\\u0000\\u001b', 1)),
    "json_raw_surrogate_bytes": with_text("regression.json", b'{"schema": "\xed\xa0\x80"}'),
    "json_invalid_utf8": with_text("results.json", b'{"schema": "results/1", "x": "\xff\xfe"}'),
    "json_invalid_utf8_manifest": manifest_edit(lambda t: t.replace('"platform": "', '"platform": "\udcff', 1)),
    "json_deep_1000": with_text("results.json", '{"deep": ' + deep(1000) + "}"),
    "json_deep_100000": with_text("growth.json", deep(100_000)),
    "json_deep_manifest": manifest_edit(lambda t: insert_key(t, '"deep": ' + deep(1000))),
    "json_deep_dicts": with_text("formats.json", '{"a": ' * 5000 + "1" + "}" * 5000),
    "json_duplicate_keys": json_edit("results.json", lambda t: insert_key(t, '"schema": "results/1"')),
    # every JSON file the grader reads, schema or not (lesson 05's calibration cache has none): one strict loader
    "json_duplicate_key_nested_in_cache": json_edit(
        CACHE, lambda t: t.replace('"pixels": {"lowest": {"data": [',
                                   '"pixels": {"lowest": {"data": [0.5], "data": [', 1)),
    "json_minus_1e999_in_cache": json_edit(
        CACHE, lambda t: re.sub(r'("pixels": \{"lowest": \{"data": \[)[^\]]*', r"\1-1e999", t, count=1)),
    "json_1e999_in_growth": json_edit("growth.json", lambda t: re.sub(r'("max_abs_error": )[0-9.eE+-]+', r"\g<1>1e999",
                                                                      t, count=1)),
    "json_duplicate_key_in_manifest": manifest_edit(lambda t: insert_key(t, '"student": "someone-else"')),
    # the student's model or data at fault
    "model_fp32_right": fp32_as("right.onnx"),
    "model_fp32_qdq": fp32_as("formats/model.qdq.onnx"),
    "model_nan_candidate": with_model("candidate.onnx", _nan_weights),
    "model_nan_right": with_model("right.onnx", _nan_weights),
    "model_bad_reshape": with_model("dynamic.onnx", _bad_reshape),
    "model_bad_reshape_candidate": with_model("candidate.onnx", _bad_reshape),
    "reader_nan_batches": with_text("calibration_reader.py", READER_NAN),
    "reader_message_surrogates": with_text("calibration_reader.py", MODULE_RAISES.format(text=SURROGATES * 50)),
    "metrics_message_surrogates": with_text("metrics.py", METRICS_RAISES.format(text=SURROGATES)),
    "metrics_not_utf8": with_text("metrics.py", b"def summarize(p, l):\n    return '\xff\xfe'\n"),
    "metrics_prints_binary": with_text("metrics.py", "import sys, os\nos.write(1, b'\\xff\\xfe\\x00\\x1b')\n"
                                       "os.write(2, b'\\xed\\xa0\\x80')\ndef summarize(p, l):\n    return {}\n"),
}

# What each named case must come back as, and a phrase its feedback must hold (the file and the problem).
EXPECT = {
    "zip_bad_crc": ("invalid", "Bad CRC-32 for file 'metrics.py'"),
    "zip_mismatched_name": ("invalid", "File name in directory 'metrics.py'"),
    "zip_file_then_folder": ("invalid", "but the archive also holds a file named notes.txt"),
    "zip_folder_then_file": ("invalid", "notes.txt is both a folder and a file"),
    "zip_unsupported_compression": ("invalid", "compression method not supported"),
    "zip_encrypted": ("invalid", "the entry is encrypted"),
    "zip_member_name_not_utf8": ("invalid", "an entry's name is marked UTF-8 but is not"),
    "zip_member_name_cp437": ("invalid", "not listed in submission.json"),
    "zip_truncated": ("invalid", "not a readable zip archive"),
    "json_surrogate_key_in_manifest": ("invalid", "('\\udc80k' was unexpected)"),
    "json_surrogate_key_in_results": ("invalid", "('\\udc80k' was unexpected)"),
    "json_surrogate_value_in_results": ("invalid", "'\\udfff\\x00\\x1bclipping' is not one of"),
    "json_surrogate_value_in_manifest": ("graded", ""),
    "json_raw_surrogate_bytes": ("invalid", "regression.json: not valid JSON ('utf-8' codec can't decode"),
    "json_invalid_utf8": ("invalid", "results.json: not valid JSON ('utf-8' codec can't decode byte 0xff"),
    "json_invalid_utf8_manifest": ("invalid", "submission.json: not valid JSON"),
    "json_deep_1000": ("invalid", "results.json: not valid JSON (lists and objects are nested deeper than 64"),
    "json_deep_100000": ("invalid", "growth.json: not valid JSON (lists and objects are nested deeper than 64"),
    "json_deep_manifest": ("invalid", "submission.json: not valid JSON (lists and objects are nested deeper"),
    "json_deep_dicts": ("invalid", "formats.json: not valid JSON (lists and objects are nested deeper"),
    "json_duplicate_keys": ("invalid", "results.json: not valid JSON (key 'schema' appears twice"),
    "json_duplicate_key_nested_in_cache": ("invalid", "formats/model.calibration.json: not valid JSON (key "
                                           "'data/pixels/lowest/data' appears twice"),
    "json_minus_1e999_in_cache": ("invalid", "formats/model.calibration.json: not valid JSON (field "
                                  "'data/pixels/lowest/data/0' is -1e999, too large for a float: it reads as -inf"),
    "json_1e999_in_growth": ("invalid", "growth.json: not valid JSON (field 'rows/0/max_abs_error' is 1e999"),
    "json_duplicate_key_in_manifest": ("invalid", "submission.json: not valid JSON (key 'student' appears twice"),
    "model_fp32_right": ("graded", "right.onnx: not quantized"),
    "model_fp32_qdq": ("graded", "formats/model.qdq.onnx: not quantized"),
    "model_nan_candidate": ("graded", "accept_candidate is True, but"),
    "model_nan_right": ("graded", ""),
    "model_bad_reshape": ("graded", "dynamic.onnx: ONNX Runtime could not run it: FAIL"),
    "model_bad_reshape_candidate": ("graded", "candidate.onnx: ONNX Runtime could not run it"),
    "reader_nan_batches": ("graded", "calibration_reader.py served NaN or infinite pixels"),
    "reader_message_surrogates": ("graded", "ValueError: \\udc80\\ud800 lone surrogates, \\x1b[31m escape"),
    "metrics_message_surrogates": ("graded", "raised RuntimeError: \\udc80\\ud800 lone surrogates"),
    "metrics_not_utf8": ("graded", "metrics.py could not be run: SyntaxError"),
    "metrics_prints_binary": ("graded", ""),
}
assert set(EXPECT) == set(NAMED)


# ----- the seeded fuzz: hand-ins derived from the reference one -----

JSON_FILES = ("results.json", "regression.json", "growth.json", "formats.json", "release/recipe.json")
MODULES = ("calibration_reader.py", "metrics.py")
# text with what broke the batch before: lone surrogates, controls, bidi overrides, NUL, long runs
nasty_text = st.one_of(
    st.text(max_size=40),
    st.text(st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF), min_size=1, max_size=4),
    st.lists(st.sampled_from(["\ud800", "\udc80", "\x00", "\x1b[2J", "\r", "\u202e", "|", "\n# ", "`", "\\",
                              "Traceback", "\ufeff", "é", "\U0001f600", "a" * 300]), max_size=8).map("".join),
)
json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=False), nasty_text),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(nasty_text, inner, max_size=4)),
    max_leaves=12)


def _paths(node, prefix=()):
    yield prefix
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _paths(v, prefix + (i,))


def _dumps(doc, ascii_only: bool) -> bytes:
    return json.dumps(doc, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")


@st.composite
def fuzzed_json(draw, files: Files) -> bytes:
    rel = draw(st.sampled_from(JSON_FILES + ("submission.json",)))
    doc = json.loads(files[rel])
    how = draw(st.sampled_from(["restring", "replace", "add_key", "deepen", "raw_insert"]))
    ascii_only = draw(st.booleans())
    if how == "raw_insert":
        text = _dumps(doc, ascii_only)
        at = draw(st.integers(0, len(text)))
        text = text[:at] + draw(st.binary(min_size=1, max_size=6) | nasty_text.map(
            lambda t: t.encode("utf-8", "surrogatepass"))) + text[at:]
    else:
        paths = [p for p in _paths(doc) if p]
        if how == "restring":  # a string the schema allows becomes a nasty one: most of these reach grading
            paths = [p for p in paths if isinstance(_at(doc, p), str) and p[-1] not in ("schema", "student")]
        path = draw(st.sampled_from(paths))
        parent = _at(doc, path[:-1])
        sentinel = "\x00deep\x00"
        if how in ("restring", "replace"):
            parent[path[-1]] = draw(nasty_text if how == "restring" else json_values)
        elif how == "add_key":
            target = parent[path[-1]] if isinstance(parent[path[-1]], dict) else doc
            target[draw(nasty_text)] = draw(json_values)
        else:
            parent[path[-1]] = sentinel
        text = _dumps(doc, ascii_only)
        if how == "deepen":  # written as text: json.dumps itself cannot nest 1,000 deep
            depth = draw(st.integers(1, 3000))
            text = text.replace(json.dumps(sentinel).encode(), b"[" * depth + b"0" + b"]" * depth)
    if rel == "submission.json":  # its own hash is not in it: the edit reaches intake as it is
        packed = _manifested(files)
        packed[rel] = text
        return _stored_zip(list(packed.items()))
    return pack({**files, rel: text})


def _at(doc, path):
    for step in path:
        doc = doc[step]
    return doc


MODULE_TEMPLATES = {
    "raises": "class DigitReader:\n    def __init__(self, *a, **k):\n        raise {exc}({text!r})\n"
              "def summarize(p, l):\n    raise {exc}({text!r})\n",
    "prints": "import sys\nprint({text!r})\nsys.stderr.write({text!r})\n"
              "def summarize(p, l):\n    print({text!r}); return {value!r}\n",
    "returns": "def summarize(p, l):\n    return {value!r}\n"
               "class DigitReader:\n    def __init__(self, *a, **k): pass\n    def get_next(self): return {value!r}\n"
               "    def rewind(self): pass\n",
}


@st.composite
def fuzzed_module(draw, files: Files) -> bytes:
    rel = draw(st.sampled_from(MODULES))
    kind = draw(st.sampled_from(sorted(MODULE_TEMPLATES) + ["text", "bytes"]))
    if kind == "text":
        source = draw(nasty_text).encode("utf-8", "surrogatepass")
    elif kind == "bytes":
        source = files[rel] + b"\n" + draw(st.binary(max_size=20))
    else:
        source = MODULE_TEMPLATES[kind].format(
            exc=draw(st.sampled_from(["ValueError", "KeyError", "UnicodeError", "SystemExit", "RecursionError"])),
            text=draw(nasty_text), value=draw(json_values)).encode("utf-8", "surrogatepass")
    return pack({**files, rel: source})


@st.composite
def fuzzed_zip(draw, files: Files) -> bytes:
    how = draw(st.sampled_from(["flip", "member_bytes", "member_name", "extra_entry", "cut"]))
    if how == "member_bytes":  # a member's own bytes damaged, the manifest re-written to match
        rel = draw(st.sampled_from(sorted(r for r in files if r != "submission.json")))
        data = bytearray(files[rel])
        for _ in range(draw(st.integers(1, 4))):
            data[draw(st.integers(0, len(data) - 1))] ^= draw(st.integers(1, 255))
        return pack({**files, rel: bytes(data)})
    archive = _stored_zip(list(_manifested(files).items()))
    if how == "flip":
        data = bytearray(archive)
        for _ in range(draw(st.integers(1, 4))):
            data[draw(st.integers(0, len(data) - 1))] ^= draw(st.integers(1, 255))
        return bytes(data)
    if how == "cut":
        return archive[:draw(st.integers(0, len(archive) - 1))]
    if how == "member_name":
        rel = draw(st.sampled_from(sorted(files)))
        name = rel.encode()
        new = draw(st.binary(min_size=len(name), max_size=len(name)))
        return _patch_headers(archive, name, new_name=new, flag=draw(st.sampled_from([0, 0x800])))
    name = draw(nasty_text.filter(lambda t: t.strip("/") != "")).encode("utf-8", "surrogatepass")
    data = _stored_zip([*_manifested(files).items(), ("placeholder.txt", b"x")])
    if len(name) < len(b"placeholder.txt"):
        name = name + b"." * (len(b"placeholder.txt") - len(name))
    return _patch_headers(data, b"placeholder.txt", new_name=name[:len(b"placeholder.txt")],
                          flag=draw(st.sampled_from([0, 0x800])))


FAMILIES = {"zip": fuzzed_zip, "json": fuzzed_json, "module": fuzzed_module}


def write_fuzz(files: Files, folder: Path, examples: dict[str, int] = FUZZ_EXAMPLES) -> list[str]:
    """Seeded hand-ins (``examples[family]`` of each family) into ``folder``; the names written."""
    written: list[str] = []
    for family, strategy in FAMILIES.items():
        count = [0]

        # one() runs at once, inside its iteration, so the loop variables it reads are this family's (B023 below).
        # Its source is hypothesis's seed (derandomize): editing its body changes every generated hand-in.
        @settings(max_examples=examples[family], derandomize=True, database=None, deadline=None,
                  suppress_health_check=list(HealthCheck), phases=[Phase.generate])
        @given(strategy(files))
        def one(archive: bytes) -> None:
            name = f"fuzz_{family}_{count[0]:03d}"  # noqa: B023 - see above
            count[0] += 1  # noqa: B023 - see above
            (folder / f"{name}.zip").write_bytes(archive)
            written.append(name)

        one()
    return written


# ----- one batch over all of them -----

@pytest.fixture(scope="module")
def reference_files(tmp_path_factory, reference_workspace) -> Files:
    work = reference_workspace(tmp_path_factory.mktemp("reference") / "workspace")
    return read_zip(submit("reference", work, tmp_path_factory.mktemp("handed-in")))


@pytest.fixture(scope="module")
def fuzz_batch(reference_files, tmp_path_factory):
    folder = tmp_path_factory.mktemp("fuzz-class")
    for name, make in NAMED.items():
        (folder / f"{name}.zip").write_bytes(make(dict(reference_files)))
    fuzzed = write_fuzz(reference_files, folder)
    # the hand-in's own file name: not UTF-8 on disk, or with an escape sequence in it
    (folder / os.fsdecode(b"name_not_utf8_\xff.zip")).write_bytes(pack(dict(reference_files)))
    (folder / "name_with_escape_\x1b[2J.zip").write_bytes(b"not a zip")
    fuzzed += ["name_not_utf8_\\udcff", "name_with_escape_\\x1b[2J"]
    out = tmp_path_factory.mktemp("fuzz-graded")
    proc = subprocess.run([sys.executable, "-m", "grader", "batch", str(folder), "--out", str(out), "-j", "2",
                           "--timeout", "5", "--no-progress",
                           "--ids-from-submission-json"], cwd=REPO, capture_output=True, timeout=600)
    return folder, out, proc, list(NAMED) + fuzzed


def _unsafe(text: str) -> list[str]:
    """Characters that must never reach a written file: lone surrogates and controls other than newline and tab."""
    import unicodedata

    return sorted({repr(ch) for ch in text if ch not in "\n\t" and unicodedata.category(ch) in ("Cc", "Cs")})


def _strings(node):
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for k, v in node.items():
            yield k
            yield from _strings(v)
    elif isinstance(node, list):
        for v in node:
            yield from _strings(v)


def test_the_batch_finishes_with_one_row_each_and_no_error(fuzz_batch):
    folder, out, proc, names = fuzz_batch
    stderr = proc.stderr.decode("utf-8", "replace")
    assert proc.returncode == 0, stderr[-3000:]
    assert "Traceback" not in stderr, stderr[-3000:]
    assert len(names) >= len(NAMED) + sum(FUZZ_EXAMPLES.values()) // 2
    with open(out / "gradebook.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert sorted(r["student"] for r in rows) == sorted(names)
    errors = {r["student"]: (out / "results" / f"{r['student']}.json").read_text()[:600]
              for r in rows if r["status"] not in ("graded", "invalid", "timeout")}
    assert not errors, errors


def test_every_file_the_batch_wrote_is_utf8_and_printable(fuzz_batch):
    folder, out, proc, names = fuzz_batch
    written = [p for p in out.rglob("*") if p.is_file() and p.suffix != ".png"]  # the class report's picture
    assert len(written) >= 3 * len(names) + 1  # results, feedback, gradescope each, and the gradebook
    assert (out / "report.html") in written
    bad = {}
    for path in written:
        text = path.read_bytes().decode("utf-8")  # strict: raises on anything that is not UTF-8
        strings = list(_strings(json.loads(text))) if path.suffix == ".json" else [text]
        unsafe = sorted({c for s in strings for c in _unsafe(s)})
        if unsafe:
            bad[path.relative_to(out).as_posix()] = unsafe
    assert not bad, bad


def test_no_feedback_shows_a_traceback_or_blames_the_grader(fuzz_batch):
    folder, out, proc, names = fuzz_batch
    found = {}
    for name in names:
        md = (out / "feedback" / f"{name}.md").read_text(encoding="utf-8")
        for phrase in ("Traceback (most recent call last)", 'File "/', "the grader could not check",
                       "the grader failed", "grader's failure"):
            if phrase in md:
                found[name] = (phrase, md[md.index(phrase) - 200:md.index(phrase) + 300])
    assert not found, found


def test_named_cases_get_their_status_and_name_the_problem(fuzz_batch):
    from bad_submissions.corpus import feedback_text

    folder, out, proc, names = fuzz_batch
    wrong = []
    for name, (status, phrase) in EXPECT.items():
        result = json.loads((out / "results" / f"{name}.json").read_text(encoding="utf-8"))
        text = feedback_text(result)
        if result["status"] != status or phrase not in text:
            wrong.append(f"{name}: got {result['status']}, want {status} with {phrase!r}: {text[:400]}")
    assert not wrong, "\n".join(wrong)


def test_grade_prints_on_a_strict_utf8_stdout(reference_files, tmp_path):
    """``grader grade`` on a hand-in full of lone surrogates prints its feedback, even where stdout is strict."""
    path = tmp_path / "surrogates.zip"
    path.write_bytes(NAMED["json_surrogate_key_in_manifest"](dict(reference_files)))
    env = {**os.environ, "PYTHONIOENCODING": "utf-8:strict"}
    proc = subprocess.run([sys.executable, "-m", "grader", "grade", str(path)], cwd=REPO, env=env,
                          capture_output=True, timeout=120)
    assert proc.returncode == 1, proc.stderr.decode("utf-8", "replace")[-2000:]
    assert "Traceback" not in proc.stderr.decode("utf-8", "replace")
    text = proc.stdout.decode("utf-8")
    assert "\\udc80k" in text and not _unsafe(text)


def test_safe_text_and_strict_json():
    from grader.results import Check, Evidence, GradeResult, safe_text
    from lab import schemas

    assert safe_text("a\udc80b\x1b[31m\x00\tc\nd\u202e") == "a\\udc80b\\x1b[31m\\x00\tc\nd\\u202e"
    assert safe_text("é 😀 plain") == "é 😀 plain"
    long = safe_text("x" * 5000, 100)
    assert long.startswith("x" * 100) and long.endswith("(4900 more characters cut)")
    ev = Evidence("w\ud800", {"\udc80": [float("nan"), "\x07"]}, float("inf"))
    assert ev.reported == {"\\udc80": ["nan", "\\x07"]} and ev.recomputed == "inf"
    r = GradeResult("s", "graded", [Check("reader", "contract", 0, 1, "m\udc80", [ev])], reason="\ud800",
                    notes=["\x1b"])
    for text in (r.to_json(), r.to_markdown(), json.dumps(r.to_gradescope(), ensure_ascii=False)):
        text.encode("utf-8")
        assert not _unsafe(text)
    for bad, why in (("[" * 1000 + "]" * 1000, "nested deeper"), ('{"a": ' * 65 + "1" + "}" * 65, "nested deeper"),
                     ('{"a": 1, "a": 2}', "appears twice"), ('{"a": NaN}', "field 'a' is NaN"),
                     ('{"a": {"b": [1, {"c": 1, "c": 2}]}}', "key 'a/b/1/c' appears twice"),
                     ('{"a": [0.5, -1e999]}', "field 'a/1' is -1e999, too large for a float: it reads as -inf")):
        with pytest.raises(ValueError, match=why):
            schemas.loads(bad)
    assert schemas.loads('{"a": ' * 64 + "1" + "}" * 64) is not None
