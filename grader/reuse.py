"""What grading repeats, done once: sessions, the fixtures' data and predictions, schema validations.

A ``Reuse`` is the ``lab.cache`` of one grading worker (``grader.state.GraderState.reuse``): inside ``hand_in()``
(the block around one grade) the lab's cached functions ask it, whatever name their caller imported them under:

- ``lab.compare.predict`` builds one ONNX Runtime session per model *content* and computes a model's
  outputs on the same pixels, as the same kernel family, once. The checks run one model on the evaluation
  set, the held-out split and each lesson-07 condition, and a lesson's call may name a model by its path
  where another check holds it loaded (lesson 05's ``describe``; ``right.onnx`` and lesson 05's QDQ model are
  often the same bytes): each used to build its own session.
- What depends only on the fixtures is computed once per worker and kept for its life: the fixtures'
  sessions and outputs (the FP32 model on every condition, the bad-calibration model), the splits
  (``lab.data.load_split``, which read the ``.npz`` again on each of about 40 calls per hand-in), the three
  calibration sets and what ``lab.variant.per_variant`` keeps (``lab.cache.kept``: the evaluation split's
  read-only pixels, the FP32 outputs), whether or not a hand-in is being graded. Each caller gets its own copy of
  the arrays, so nothing a check does to one reaches the next hand-in; keys hold the fixture file's size and
  mtime, and the student's variant as the lab's function gives it (``lab.variant``: the calibration split and
  everything made from it are each student's own).
- A prediction is keyed by its model (a path is looked up among the fixtures once per hand-in) and its pixels'
  digest; a read-only array that owns its data (the evaluation split's pixels) is hashed once per worker.
- ``lab.schemas.validate`` checks one document against one schema once per hand-in: intake validates every
  JSON file, and lesson 07's ``recipe.verify`` reads and validates ``release/recipe.json`` again (the largest
  document, about a tenth of a hand-in's JSON time).

A hand-in's own sessions, outputs and validations are dropped when the block ends, so one hand-in can never
change another's grade, and a class of identical hand-ins costs what a class of different ones does.
``hits`` counts the answers given from a store, by function name.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np

from lab import cache, data

READ_ONLY_KEPT = 16  # read-only arrays whose digest a worker remembers (the evaluation split's pixels among them)


def _digest(x) -> tuple:
    x = np.ascontiguousarray(x, np.float32)
    return x.shape, hashlib.blake2b(x.data, digest_size=16).hexdigest()


class PixelKeys:
    """(shape, digest) of pixels as float32. A read-only array that owns its data (the evaluation split's pixels,
    which about 23 of a hand-in's 25 predictions are given) is hashed once and remembered by identity."""

    def __init__(self, digest: Callable[[Any], tuple] = _digest):
        self.digest = digest
        self._read_only: dict[int, tuple] = {}  # id(array) -> (the array, its key): kept, so its id stays its own

    def __call__(self, x) -> tuple:
        if isinstance(x, np.ndarray) and not x.flags.writeable and x.base is None:
            if id(x) not in self._read_only:
                if len(self._read_only) >= READ_ONLY_KEPT:
                    self._read_only.clear()
                self._read_only[id(x)] = (x, self.digest(x))
            return self._read_only[id(x)][1]
        return self.digest(x)


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


class _HandIn:
    """One hand-in's own stores, dropped when its grade ends."""

    def __init__(self, folder: Path):
        self.folder, self.fixtures = folder, folder.resolve()  # as lab.data finds it, and resolved for comparisons
        self.sessions: dict = {}  # content digest -> session
        self.outputs: dict = {}
        self.digests: dict = {}  # id(loaded model) -> (model, digest): the model is kept so its id stays its own
        self.validated: set = set()  # (schema, document as canonical JSON) that passed in this hand-in
        self.fixture_keys: dict = {}  # str(model path) -> _fixture_key (None: not a fixture)


class Reuse:
    """One worker's caches (see the module docstring): ``call`` answers the lab's cached functions (``lab.cache``)."""

    def __init__(self) -> None:
        self.fixture_sessions: dict = {}  # (fixture path, size, mtime) -> session
        self.fixture_outputs: dict = {}  # (fixture key, family, input name, pixels digest) -> probabilities
        self.splits: dict = {}  # (split name, file key, variant or None) -> lab.data.Split
        self.sets: dict = {}  # (kind, calibration file key, variant or None) -> float32 pixels
        self.values: dict = {}  # kept(): what depends only on the fixtures and the variant, by key
        self.pixel_keys = PixelKeys()
        self.hits: Counter = Counter()  # function name -> answers from a store
        self._hand_in: _HandIn | None = None

    @contextlib.contextmanager
    def hand_in(self) -> Iterator[Reuse]:
        """The block of one grade: the lab's cached functions ask this worker's stores; the hand-in's own go after."""
        outer = self._hand_in
        self._hand_in = _HandIn(data.fixtures_dir())
        try:
            with cache.using(self):
                yield self
        finally:
            self._hand_in = outer

    @property
    def _own(self) -> _HandIn:
        """The stores of the hand-in being graded (only asked for inside ``hand_in``, where ``call`` answers)."""
        assert self._hand_in is not None
        return self._hand_in

    def call(self, name: str, compute: Callable[..., Any], args: tuple) -> Any:
        """``lab.cache.Cache``: answer ``compute(*args)`` for the lab function ``name``; ``cache.kept`` values for the
        worker's life, the rest only while a hand-in is graded."""
        if name == cache.KEPT:
            (key,) = args
            return self.kept(key, lambda: compute(key))
        if self._hand_in is None:
            return compute(*args)
        return getattr(self, _METHODS[name])(compute, *args)

    def kept(self, key: tuple, compute: Callable[[], Any]) -> Any:
        """``compute()`` once per worker, under ``key``: only for what depends on the fixtures and the variant alone
        (``lab.variant.per_variant`` puts the variant in the key)."""
        if key in self.values:
            self.hits["kept"] += 1
        else:
            self.values[key] = compute()
        return self.values[key]

    def _model_key(self, model) -> tuple:
        own = self._own
        fixture = None
        if isinstance(model, (str, Path)):
            if str(model) not in own.fixture_keys:
                own.fixture_keys[str(model)] = _fixture_key(model, own.fixtures)
            fixture = own.fixture_keys[str(model)]
        if fixture is not None:
            return ("fixture",) + fixture
        if isinstance(model, (str, Path, bytes, bytearray)):
            return ("sha256", hashlib.sha256(_content(model)).hexdigest())
        if id(model) not in own.digests:
            own.digests[id(model)] = (model, hashlib.sha256(_content(model)).hexdigest())
        return ("sha256", own.digests[id(model)][1])

    def _stored(self, name: str, store: dict, key, compute: Callable[[], Any]) -> Any:
        if key in store:
            self.hits[name] += 1
        else:
            store[key] = compute()
        return store[key]

    def _session(self, compute, model, threads: int):
        if threads != 1:
            return compute(model, threads)
        key = self._model_key(model)
        store = self.fixture_sessions if key[0] == "fixture" else self._own.sessions
        return self._stored(cache.SESSION, store, key, lambda: compute(model, threads))

    def _predict(self, compute, model, x, input_name: str, threads: int, family: str):
        if threads != 1:
            return compute(model, x, input_name, threads, family)
        key = self._model_key(model)
        out_key = (key, family, input_name, self.pixel_keys(x))
        store = self.fixture_outputs if key[0] == "fixture" else self._own.outputs
        return self._stored(cache.PREDICT, store, out_key, lambda: compute(model, x, input_name, threads,
                                                                             family)).copy()

    def _load_split(self, compute, name: str, v) -> data.Split:
        key = (name, _file_key(data.fixture_path(f"{name}.npz")), v)  # v: the variant's (calibration only)
        return _split_copy(self._stored(cache.LOAD_SPLIT, self.splits, key, lambda: compute(name, v)))

    def _calibration_set(self, compute, kind: str, raw, v) -> np.ndarray:
        if raw is not None or kind not in data.CALIBRATION_SETS:
            return compute(kind, raw, v)
        key = (kind, _file_key(data.fixture_path("calibration.npz")), v)
        return self._stored(cache.CALIBRATION_SET, self.sets, key, lambda: compute(kind, None, v)).copy()

    def _fixtures_dir(self, compute) -> Path:
        self.hits[cache.FIXTURES_DIR] += 1
        return self._own.folder  # looked up by every lab.data.fixture_path call (about 60 per hand-in)

    def _validate(self, compute, name: str, obj: object, source: str) -> object:
        try:
            key = (name, json.dumps(obj, sort_keys=True, allow_nan=True))
        except (TypeError, ValueError):  # not plain JSON: validate it as it is
            return compute(name, obj, source)
        if key in self._own.validated:
            self.hits[cache.VALIDATE] += 1
        else:
            compute(name, obj, source)
            self._own.validated.add(key)  # only a document that passed: a failure is raised again, with its source
        return obj


# lab.cache name -> the Reuse method that answers it
_METHODS = MappingProxyType({cache.PREDICT: "_predict", cache.SESSION: "_session", cache.LOAD_SPLIT: "_load_split",
                             cache.CALIBRATION_SET: "_calibration_set", cache.FIXTURES_DIR: "_fixtures_dir",
                             cache.VALIDATE: "_validate"})
