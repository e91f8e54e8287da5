"""What grading repeats, done once: sessions, the fixtures' data and predictions, schema validations.

``reuse()`` is the block around one grade (``grader.batch.grade_one``). Inside it, the lab's module
attributes below are replaced for the block's length and restored after:

- ``lab.compare.predict`` builds one ONNX Runtime session per model *content* and computes a model's
  outputs on the same pixels, as the same kernel family, once. The checks run one model on the evaluation
  set, the held-out split and each lesson-07 condition, and a lesson's call may name a model by its path
  where another check holds it loaded (lesson 05's ``describe``; ``right.onnx`` and lesson 05's QDQ model are
  often the same bytes): each used to build its own session.
- What depends only on the fixtures is computed once per worker process and kept for its life: the fixtures'
  sessions and outputs (the FP32 model on every condition, the bad-calibration model), the splits
  (``lab.data.load_split``, which read the ``.npz`` again on each of about 40 calls per hand-in) and the three
  calibration sets. Each caller gets its own copy of the arrays, so nothing a check does to one reaches the
  next hand-in; keys hold the fixture file's size and mtime.
- A prediction is keyed by its model (a path is looked up among the fixtures once per hand-in) and its pixels'
  digest; the evaluation split's pixels (``grader.context.evaluation``, read-only) are hashed once per worker.
- ``lab.schemas.validate`` checks one document against one schema once per hand-in: intake validates every
  JSON file, and lesson 07's ``recipe.verify`` reads and validates ``release/recipe.json`` again (the largest
  document, about a tenth of a hand-in's JSON time).

A hand-in's own sessions, outputs and validations are dropped when the block ends, so one hand-in can never
change another's grade, and a class of identical hand-ins costs what a class of different ones does.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
from dataclasses import replace
from pathlib import Path

import numpy as np

from lab import compare, data, kernels, schemas
from lab.data import INPUT_NAME

_FIXTURE_SESSIONS: dict = {}  # (fixture path, size, mtime) -> session; kept for the worker's life
_FIXTURE_OUTPUTS: dict = {}  # (fixture key, family, input name, pixels digest) -> probabilities
_SPLITS: dict = {}  # (split name, file key) -> lab.data.Split
_SETS: dict = {}  # (kind, calibration file key) -> float32 pixels
_READ_ONLY_KEYS: dict = {}  # id(read-only array) -> (the array, its _pixels_key); kept for the worker's life


def _pixels_key(x) -> tuple:
    """(shape, digest) of ``x`` as float32. A read-only array that owns its data (the evaluation split's pixels, which
    about 23 of a hand-in's 25 predictions are given) is hashed once per worker and remembered by identity."""
    if isinstance(x, np.ndarray) and not x.flags.writeable and x.base is None:
        if id(x) not in _READ_ONLY_KEYS:
            if len(_READ_ONLY_KEYS) >= 16:
                _READ_ONLY_KEYS.clear()
            _READ_ONLY_KEYS[id(x)] = (x, _digest(x))  # the array is kept, so its id stays its own
        return _READ_ONLY_KEYS[id(x)][1]
    return _digest(x)


def _digest(x) -> tuple:
    x = np.ascontiguousarray(x, np.float32)
    return x.shape, hashlib.blake2b(x.data, digest_size=16).hexdigest()


def _file_key(path: Path) -> tuple:
    st = path.stat()
    return str(path), st.st_size, st.st_mtime_ns


def _fixture_key(model, fixtures: Path) -> tuple | None:
    """``(path, size, mtime)`` when ``model`` is a path to one of the lab's fixtures, else None."""
    if not isinstance(model, (str, Path)):
        return None
    path = Path(model).resolve()
    if path.parent != fixtures:
        return None
    return _file_key(path)


def _content(model) -> bytes:
    """The bytes ONNX Runtime would be given for ``model``: a file's, or a loaded model serialized."""
    if isinstance(model, (str, Path)):
        return Path(model).read_bytes()
    if isinstance(model, (bytes, bytearray)):
        return bytes(model)
    return model.SerializeToString()


def _split_copy(split: data.Split) -> data.Split:
    return replace(split, raw=split.raw.copy(), labels=split.labels.copy(), index=split.index.copy())


@contextlib.contextmanager
def reuse():
    """Within the block (one grade): one session and one output per model content and input, the fixtures'
    data and predictions once per worker, each document validated once. See the module docstring."""
    fixtures = data.fixtures_dir().resolve()
    own_sessions: dict = {}  # content digest -> session
    own_outputs: dict = {}
    digests: dict = {}  # id(loaded model) -> (model, digest): the model is kept so its id stays its own
    validated: set = set()  # (schema, document as canonical JSON) that passed in this hand-in
    fixture_keys: dict = {}  # str(model path) -> _fixture_key (None: not a fixture); the files do not change mid-grade
    originals = {(compare, "session"): compare.session, (compare, "predict"): compare.predict,
                 (data, "load_split"): data.load_split, (data, "calibration_set"): data.calibration_set,
                 (data, "fixtures_dir"): data.fixtures_dir, (schemas, "validate"): schemas.validate}
    make_session, predict = compare.session, compare.predict
    load_split, calibration_set, validate = data.load_split, data.calibration_set, schemas.validate
    fixtures_dir = data.fixtures_dir

    def model_key(model) -> tuple:
        fixture = None
        if isinstance(model, (str, Path)):
            if str(model) not in fixture_keys:
                fixture_keys[str(model)] = _fixture_key(model, fixtures)
            fixture = fixture_keys[str(model)]
        if fixture is not None:
            return ("fixture",) + fixture
        if isinstance(model, (str, Path, bytes, bytearray)):
            return ("sha256", hashlib.sha256(_content(model)).hexdigest())
        if id(model) not in digests:
            digests[id(model)] = (model, hashlib.sha256(_content(model)).hexdigest())
        return ("sha256", digests[id(model)][1])

    def session(model, threads: int = 1, *args, **kwargs):
        if args or kwargs or threads != 1:
            return make_session(model, threads, *args, **kwargs)
        key = model_key(model)
        store = _FIXTURE_SESSIONS if key[0] == "fixture" else own_sessions
        if key not in store:
            store[key] = make_session(model, threads)
        return store[key]

    def cached_predict(model, x, input_name: str = INPUT_NAME, threads: int = 1, family: str | None = None):
        if threads != 1:
            return predict(model, x, input_name, threads, family)
        key = model_key(model)
        out_key = (key, family or kernels.target_family(), input_name, _pixels_key(x))
        store = _FIXTURE_OUTPUTS if key[0] == "fixture" else own_outputs
        if out_key not in store:
            store[out_key] = predict(model, x, input_name, threads, family)
        return store[out_key].copy()

    def cached_split(name: str) -> data.Split:
        key = (name, _file_key(data.fixture_path(f"{name}.npz")))
        if key not in _SPLITS:
            _SPLITS[key] = load_split(name)
        return _split_copy(_SPLITS[key])

    def cached_set(kind: str, raw: np.ndarray | None = None) -> np.ndarray:
        if raw is not None or kind not in data.CALIBRATION_SETS:
            return calibration_set(kind, raw)
        key = (kind, _file_key(data.fixture_path("calibration.npz")))
        if key not in _SETS:
            _SETS[key] = calibration_set(kind)
        return _SETS[key].copy()

    def validate_once(name: str, obj: object, source: str = "") -> object:
        try:
            key = (name, json.dumps(obj, sort_keys=True, allow_nan=True))
        except (TypeError, ValueError):  # not plain JSON: validate it as it is
            return validate(name, obj, source)
        if key not in validated:
            validate(name, obj, source)
            validated.add(key)  # only a document that passed: a failure is raised again, with its own source
        return obj

    folder = fixtures_dir()
    compare.session, compare.predict = session, cached_predict
    data.load_split, data.calibration_set = cached_split, cached_set
    data.fixtures_dir = lambda: folder  # looked up by every lab.data.fixture_path call (about 60 per hand-in)
    schemas.validate = validate_once
    try:
        yield
    finally:
        for (module, name), original in originals.items():
            setattr(module, name, original)
