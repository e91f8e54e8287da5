"""The bad-submission corpus: each case is made by code from one good submission.

``build(good_zip, out_dir)`` writes ``out_dir/<case>.zip`` for every case and returns the cases.
Each case states the status the grader must give and a substring its feedback must contain.
Run ``python -m grader batch out_dir --out OUT`` over the folder to grade them all at once.
"""
from __future__ import annotations

import hashlib
import io
import json
import re
import stat
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import onnx

Files = dict[str, bytes]


@dataclass(frozen=True)
class Case:
    name: str
    status: str
    message: str
    make: Callable[[Files], bytes]
    needs_bwrap: bool = False


def read_zip(path: Path) -> Files:
    with zipfile.ZipFile(path) as zf:
        return {i.filename: zf.read(i) for i in zf.infolist() if not i.is_dir()}


def pack(files: Files, manifest: bool = True, extra: list[tuple[zipfile.ZipInfo, bytes]] = ()) -> bytes:
    """A zip of ``files``; with ``manifest`` the submission.json lists their true hashes."""
    files = dict(files)
    if manifest and "submission.json" in files:
        doc = json.loads(files["submission.json"])
        doc["files"] = {rel: hashlib.sha256(b).hexdigest() for rel, b in sorted(files.items())
                        if rel != "submission.json"}
        files["submission.json"] = json.dumps(doc, indent=2).encode()
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for rel, data in files.items():
            info = zipfile.ZipInfo(rel, (2026, 1, 1, 0, 0, 0))
            info.external_attr = (stat.S_IFREG | 0o644) << 16
            zf.writestr(info, data)
        for info, data in extra:
            zf.writestr(info, data)
    return buf.getvalue()


def with_file(rel: str, data: bytes | str) -> Callable[[Files], bytes]:
    def make(files: Files) -> bytes:
        return pack({**files, rel: data.encode() if isinstance(data, str) else data})
    return make


def with_json(rel: str, edit: Callable[[dict], None], raw: Callable[[str], str] | None = None):
    def make(files: Files) -> bytes:
        doc = json.loads(files[rel])
        edit(doc)
        text = json.dumps(doc, indent=2)
        return pack({**files, rel: (raw(text) if raw else text).encode()})
    return make


def with_model(rel: str, edit: Callable[[onnx.ModelProto], None]):
    def make(files: Files) -> bytes:
        model = onnx.load_from_string(files[rel])
        edit(model)
        return pack({**files, rel: model.SerializeToString()})
    return make


def without(rel: str, manifest: bool = True):
    def make(files: Files) -> bytes:
        return pack({k: v for k, v in files.items() if k != rel}, manifest=manifest)
    return make


def with_entry(name: str, data: bytes, mode: int = stat.S_IFREG | 0o644):
    def make(files: Files) -> bytes:
        info = zipfile.ZipInfo(name, (2026, 1, 1, 0, 0, 0))
        info.external_attr = mode << 16
        return pack(files, extra=[(info, data)])
    return make


# ----- student code that misbehaves -----

READER_HEAD = '''import numpy as np
from onnxruntime.quantization import CalibrationDataReader


class DigitReader(CalibrationDataReader):
    def __init__(self, pixels, batch_size=32, input_name="pixels"):
        self.pixels = np.asarray(pixels, dtype=np.float32)
        self.batch_size, self.input_name, self.position = batch_size, input_name, 0

    def rewind(self):
        self.position = 0

'''
GOOD_NEXT = '''    def get_next(self):
        if self.position >= len(self.pixels):
            return None
        batch = self.pixels[self.position:self.position + self.batch_size]
        self.position += self.batch_size
        return {self.input_name: batch}
'''


def reader(get_next: str) -> Callable[[Files], bytes]:
    return with_file("calibration_reader.py", READER_HEAD + get_next)


LOOPS = '''    def get_next(self):
        while True:
            pass
'''
ALLOCATES = '''    def get_next(self):
        hoard = []
        while True:
            hoard.append(np.zeros(50_000_000))  # 400 MB each, until the memory limit
'''
RAISES = GOOD_NEXT.replace("            return None", "            raise StopIteration")
WRONG_DTYPE = GOOD_NEXT.replace("return {self.input_name: batch}", "return {self.input_name: batch.astype(np.float64)}")
# Escape attempts write into marker folders the test owns, outside the repository and the grader's
# scratch: ``ESCAPE_MARKERS_ENV`` (folders joined with os.pathsep) when the corpus is built, else
# ``DEFAULT_ESCAPE_MARKERS``. A marker file that appears is an escape. The folder outside /tmp matters
# under bubblewrap, whose private /tmp would swallow a write to /tmp unseen: there the write must
# fail with "Read-only file system".
ESCAPE_MARKERS_ENV = "CALIBRATION_LAB_ESCAPE_MARKERS"
DEFAULT_ESCAPE_MARKERS = ("/var/tmp/calibration-lab-escapes",)
ESCAPE_CASES = ("reader_escapes", "metrics_escapes")


def escape_markers() -> list[str]:
    import os

    env = os.environ.get(ESCAPE_MARKERS_ENV)
    return [d for d in env.split(os.pathsep) if d] if env else list(DEFAULT_ESCAPE_MARKERS)


ESCAPE_WRITE = '''def _escape(name):
    import os
    errors = []
    for folder in {folders!r}:
        try:
            os.makedirs(folder, exist_ok=True)
            with open(os.path.join(folder, name), "w") as f:
                f.write("escaped from the sandbox")
        except OSError as e:
            errors.append(f"{{folder}}: {{type(e).__name__}}: {{e.strerror}}")
    if errors:
        raise OSError("; ".join(errors))
'''


def _reader_escapes(files: Files) -> bytes:
    """The reader writes a marker when the calibrator first asks for data."""
    code = (ESCAPE_WRITE.format(folders=escape_markers()) + "\n\n" + READER_HEAD
            + "    def get_next(self):\n        _escape('ESCAPED_BY_READER.txt')\n        return None\n")
    return pack({**files, "calibration_reader.py": code.encode()})


def _metrics_escapes(files: Files) -> bytes:
    """metrics.py writes a marker as it is imported, before any function is called."""
    code = (ESCAPE_WRITE.format(folders=escape_markers()) + "\n\n_escape('ESCAPED_BY_METRICS.txt')\n\n\n"
            "def summarize(predictions, labels):\n    return {}\n")
    return pack({**files, "metrics.py": code.encode()})


NEVER_ENDS = '''    def get_next(self):
        return {self.input_name: self.pixels[:self.batch_size]}
'''
WRONG_KEY = GOOD_NEXT.replace("return {self.input_name: batch}", "return {'input': batch}")

METRICS_TRANSPOSED = '''def summarize(predictions, labels):
    if len(predictions) != len(labels) or not labels:
        raise ValueError("lengths")
    if any(not 0 <= int(v) <= 9 for v in list(predictions) + list(labels)):
        raise ValueError("classes")
    confusion = [[0] * 10 for _ in range(10)]
    for p, t in zip(predictions, labels):
        confusion[int(p)][int(t)] += 1  # rows predicted: the transposition trap
    correct = sum(confusion[i][i] for i in range(10))
    return {"count": len(labels), "correct": correct, "accuracy": correct / len(labels), "confusion": confusion}
'''
METRICS_SLEEPS = '''import time


def summarize(predictions, labels):
    time.sleep(3600)
'''


def _external(model: onnx.ModelProto) -> None:
    init = model.graph.initializer[0]
    init.ClearField("raw_data")
    init.data_location = onnx.TensorProto.EXTERNAL
    entry = init.external_data.add()
    entry.key, entry.value = "location", "../../../../etc/passwd"


def _domain(model: onnx.ModelProto) -> None:
    model.graph.node[0].domain = "evil.ops"
    model.opset_import.add(domain="evil.ops", version=1)


def _rename_input(model: onnx.ModelProto) -> None:
    model.graph.input[0].name = "image"
    for node in model.graph.node:
        for i, name in enumerate(node.input):
            if name == "pixels":
                node.input[i] = "image"


def _copy(src: str, dst: str) -> Callable[[Files], bytes]:
    def make(files: Files) -> bytes:
        return pack({**files, dst: files[src]})
    return make


def _fp32_candidate(files: Files) -> bytes:
    from lab import data

    return pack({**files, "candidate.onnx": data.fixture_path("fp32.onnx").read_bytes()})


def _bad_candidate(files: Files) -> bytes:
    from lab import data

    return pack({**files, "candidate.onnx": data.fixture_path("bad-calibration.onnx").read_bytes()})


def _too_many(files: Files) -> bytes:
    return pack({**files, **{f"notes/n{i:03d}.txt": b"x" for i in range(250)}})


def _with_os_junk(files: Files) -> bytes:
    """Re-zipped by hand on a Mac, from JupyterLab's folder: Finder's and Jupyter's leftovers come along."""
    junk = [("__MACOSX/._results.json", b"\x00\x05\x16\x07"), (".DS_Store", b"\x00\x00\x00\x01Bud1"),
            (".ipynb_checkpoints/metrics-checkpoint.py", files["metrics.py"])]
    extra = []
    for name, data in junk:
        info = zipfile.ZipInfo(name, (2026, 1, 1, 0, 0, 0))
        info.external_attr = (stat.S_IFREG | 0o644) << 16
        extra.append((info, data))
    return pack(files, extra=extra)


def _in_a_folder(files: Files) -> bytes:
    """The workspace's files zipped with their folder: every entry starts with 'workspace/'."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for rel, data in files.items():
            zf.writestr(f"workspace/{rel}", data)
    return buf.getvalue()


def set_field(path: str, val):
    def edit(doc: dict) -> None:
        node = doc
        keys = path.split(".")
        for k in keys[:-1]:
            node = node[k]
        node[keys[-1]] = val
    return edit


def _reject_hardcoded(doc: dict) -> None:
    doc["models"]["bad"] = dict(doc["models"]["fp32"], file="bad-calibration.onnx")
    doc["bad_loss"] = 0.0
    doc["reject_bad"] = True


def _tamper(files: Files) -> bytes:
    doc = json.loads(files["results.json"])
    doc["sets"]["right"]["max_abs_error"] = 0.01
    return pack({**files, "results.json": json.dumps(doc).encode()}, manifest=False)


CASES = [
    Case("reader_loops_forever", "timeout", "stopped after", reader(LOOPS)),
    Case("reader_allocates", "graded", "out of memory", reader(ALLOCATES)),
    Case("reader_raises", "graded", "must return None", reader(RAISES)),
    Case("reader_wrong_dtype", "graded", "dtype is float64", reader(WRONG_DTYPE)),
    Case("reader_escapes", "graded", "Read-only file system", _reader_escapes, needs_bwrap=True),
    Case("metrics_escapes", "graded", "Read-only file system", _metrics_escapes, needs_bwrap=True),
    Case("reader_never_ends", "graded", "never returned None", reader(NEVER_ENDS)),
    Case("reader_wrong_key", "graded", "the model's input is named 'pixels'", reader(WRONG_KEY)),
    Case("reader_empty", "graded", "defines no class DigitReader", with_file("calibration_reader.py", "")),
    Case("metrics_transposed", "graded", "confusion is transposed", with_file("metrics.py", METRICS_TRANSPOSED)),
    Case("metrics_sleeps", "timeout", "metrics.py could not be run", with_file("metrics.py", METRICS_SLEEPS)),
    Case("onnx_corrupt", "invalid", "right.onnx: not a readable ONNX file",
         with_file("right.onnx", b"\x08\x07garbage" * 50)),
    Case("onnx_empty", "invalid", "right.onnx: the file is empty", with_file("right.onnx", b"")),
    Case("onnx_external_data", "invalid", "external file", with_model("right.onnx", _external)),
    Case("onnx_custom_domain", "invalid", "operator domain", with_model("wide.onnx", _domain)),
    Case("onnx_wrong_input", "invalid", "expected an input named 'pixels'", with_model("narrow.onnx", _rename_input)),
    Case("candidate_is_fp32", "graded", "FP32 model renamed", _fp32_candidate),
    Case("candidate_accepted_but_bad", "graded", "accept_candidate is True, but", _bad_candidate),
    Case("right_is_narrow", "graded", "right.onnx was calibrated on other data than the 'right' set",
         _copy("narrow.onnx", "right.onnx")),
    Case("numbers_hard_coded", "graded", "sets.right: max_abs_error is 0.01, recomputed", with_json("results.json",
                                                                       set_field("sets.right.max_abs_error", 0.01))),
    Case("reject_bad_hard_coded", "graded", "do not follow from your own numbers",
         with_json("regression.json", _reject_hardcoded)),
    Case("json_nan", "invalid", "is NaN, which is not valid JSON",
         with_json("results.json", lambda d: None,
                   raw=lambda t: re.sub(r'("max_abs_error": )[0-9.eE+-]+', r"\1NaN", t, count=1))),
    Case("json_schema", "invalid", "does not match schema 'results'",
         with_json("results.json", lambda d: d.pop("sets"))),
    Case("json_empty", "invalid", "results.json: the file is empty", with_file("results.json", "")),
    Case("hash_mismatch", "invalid", "does not match submission.json", _tamper),
    Case("zip_slip", "invalid", "zip slip", with_entry("../escape.py", b"print('out')")),
    Case("absolute_path", "invalid", "absolute path", with_entry("/tmp/escape.py", b"print('out')")),
    Case("symlink", "invalid", "symbolic link", with_entry("link.py", b"/etc/passwd", stat.S_IFLNK | 0o777)),
    Case("device_file", "invalid", "device or special file", with_entry("dev.txt", b"", stat.S_IFCHR | 0o644)),
    Case("archive_too_large", "invalid", "MiB", with_file("notes.txt", bytes(40 << 20))),
    Case("too_many_files", "invalid", "the limit is 200", _too_many),
    Case("unlisted_file", "invalid", "not listed in submission.json",
         lambda f: pack({**f, "extra.py": b"x = 1"}, manifest=False)),
    Case("missing_manifest", "invalid", "no submission.json", without("submission.json", manifest=False)),
    Case("zip_with_os_junk", "graded", "left out 3 file(s) an operating system or editor added", _with_os_junk),
    Case("zip_in_a_folder", "graded", "every file was inside the folder 'workspace/'", _in_a_folder),
    Case("not_a_zip", "invalid", "not a readable zip archive", lambda f: b"PK\x03\x04 not really a zip" * 10),
]


def build(good_zip: Path, out_dir: Path, cases: list[Case] = CASES) -> list[Case]:
    """Write one ``<case>.zip`` per case into ``out_dir``, all made from ``good_zip``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    files = read_zip(good_zip)
    for case in cases:
        (out_dir / f"{case.name}.zip").write_bytes(case.make(dict(files)))
    return cases


def feedback_text(result: dict) -> str:
    """Everything a student reads about one result: the reason and every check's message."""
    return "\n".join([result.get("reason", "")] + list(result.get("notes", []))
                     + [c["message"] for c in result.get("checks", [])]
                     + [json.dumps(e) for c in result.get("checks", []) for e in c.get("evidence", [])])


def numbers(result: dict) -> dict[str, float]:
    return {f"{c['part']}.{c['name']}": c["points"] for c in result.get("checks", [])}


__all__ = ["CASES", "Case", "build", "feedback_text"]
