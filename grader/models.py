"""Untrusted ONNX files: size cap, self-contained, allowed domains, the checker, and the I/O contract.

Every check runs before ONNX Runtime sees the file. A model that fails any of them is refused
with a message naming the file and what was expected.
"""
from __future__ import annotations

import contextlib
import hashlib
from pathlib import Path

import numpy as np
import onnx

from lab import compare, data, graph, kernels
from lab.data import INPUT_NAME
from lab.errors import LabError

MAX_MODEL_BYTES = 16 << 20
ALLOWED_DOMAINS = {"", "ai.onnx", "com.microsoft"}


class ModelRefused(LabError):
    """An ONNX file from a submission is unsafe or malformed."""


def _external(tensor) -> str | None:
    if tensor.data_location == onnx.TensorProto.EXTERNAL or tensor.external_data:
        where = {e.key: e.value for e in tensor.external_data}.get("location", "?")
        return where
    return None


def _all_tensors(graph):
    yield from graph.initializer
    for node in graph.node:
        for attr in node.attribute:
            if attr.HasField("t"):
                yield attr.t
            yield from attr.tensors
            if attr.HasField("g"):
                yield from _all_tensors(attr.g)
            for g in attr.graphs:
                yield from _all_tensors(g)


def _all_nodes(graph):
    for node in graph.node:
        yield node
        for attr in node.attribute:
            if attr.HasField("g"):
                yield from _all_nodes(attr.g)
            for g in attr.graphs:
                yield from _all_nodes(g)


def load_checked(path: str | Path, rel: str | None = None, check_io: bool = True) -> onnx.ModelProto:
    """Load ``path`` as an untrusted model and return it, or raise ``ModelRefused``."""
    path = Path(path)
    rel = rel or path.name
    size = path.stat().st_size
    if size == 0:
        raise ModelRefused(f"{rel}: the file is empty; expected an ONNX model written by the lesson")
    if size > MAX_MODEL_BYTES:
        raise ModelRefused(f"{rel}: {size / 2**20:.1f} MiB; models are capped at {MAX_MODEL_BYTES >> 20} MiB")
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as e:  # noqa: BLE001 - any parse failure is a refusal
        raise ModelRefused(f"{rel}: not a readable ONNX file ({type(e).__name__}); re-run the lesson "
                           "cell that writes it") from None
    if not model.graph.node:
        raise ModelRefused(f"{rel}: the graph has no nodes; not a model written by the lesson")
    for tensor in _all_tensors(model.graph):
        where = _external(tensor)
        if where is not None:
            raise ModelRefused(f"{rel}: tensor '{tensor.name}' keeps its data in an external file "
                               f"({where!r}); models must be self-contained (save without "
                               "use_external_data_format)")
    # declared-but-unused opset imports (pre-processing adds a dozen) are harmless; nodes are what run
    domains = {n.domain for n in _all_nodes(model.graph)}
    bad = sorted(domains - ALLOWED_DOMAINS)
    if bad:
        raise ModelRefused(f"{rel}: uses operator domain(s) {bad}; only the standard domain and "
                           "'com.microsoft' are allowed")
    if model.functions:
        raise ModelRefused(f"{rel}: defines local functions; models from the lessons have none")
    try:
        onnx.checker.check_model(model)
    except Exception as e:  # noqa: BLE001
        raise ModelRefused(f"{rel}: fails the ONNX checker: {str(e).splitlines()[0][:200]}") from None
    if check_io:
        try:
            graph.check_io(model)
        except LabError as e:
            raise ModelRefused(f"{rel}: {str(e).split(': ', 1)[-1]}") from None
    return model


# ----- one ONNX Runtime session per model, and the fixtures' predictions once per worker -----

_FIXTURE_SESSIONS: dict = {}  # (fixture path, size, mtime) -> session; kept for the worker's life
_FIXTURE_OUTPUTS: dict = {}  # (fixture key, family, input name, pixels digest) -> probabilities


def _pixels_key(x) -> tuple:
    x = np.ascontiguousarray(x, np.float32)
    return x.shape, hashlib.blake2b(x.data, digest_size=16).hexdigest()


def _fixture_key(model) -> tuple | None:
    """``(path, size, mtime)`` when ``model`` is a path to one of the lab's fixtures, else None."""
    if not isinstance(model, (str, Path)):
        return None
    path = Path(model).resolve()
    if path.parent != Path(data.FIXTURES).resolve():
        return None
    st = path.stat()
    return str(path), st.st_size, st.st_mtime_ns


@contextlib.contextmanager
def reuse():
    """Within the block (one grade), ``lab.compare.predict`` builds one ONNX Runtime session per model and
    computes a model's outputs on the same pixels, as the same kernel family, once.

    The checks run one model on the evaluation set, the held-out split and each lesson-07 condition, and
    lesson 07's verdicts are recomputed per kernel family (this machine's family twice: once for the
    scenarios, once in the per-family table); each run used to build its own session. The fixtures'
    sessions and outputs (the FP32 model on every condition, the bad-calibration model) depend on nothing a
    student hands in, so a batch worker keeps them for every hand-in it grades. A hand-in's sessions and
    outputs are dropped when the block ends, so one hand-in can never change another's grade.
    """
    own_sessions: dict = {}  # model key -> (model, session): the model is kept so its id stays its own
    own_outputs: dict = {}
    make_session, predict = compare.session, compare.predict

    def model_key(model) -> tuple:
        fixture = _fixture_key(model)
        if fixture is not None:
            return ("fixture",) + fixture
        return (type(model).__name__, str(model) if isinstance(model, (str, Path)) else id(model))

    def session(model, threads: int = 1, *args, **kwargs):
        if args or kwargs or threads != 1:
            return make_session(model, threads, *args, **kwargs)
        key = model_key(model)
        if key[0] == "fixture":
            if key not in _FIXTURE_SESSIONS:
                _FIXTURE_SESSIONS[key] = make_session(model, threads)
            return _FIXTURE_SESSIONS[key]
        if key not in own_sessions:
            own_sessions[key] = (model, make_session(model, threads))
        return own_sessions[key][1]

    def cached_predict(model, x, input_name: str = INPUT_NAME, threads: int = 1, family: str | None = None):
        if threads != 1:
            return predict(model, x, input_name, threads, family)
        key = model_key(model)
        out_key = (key, family or kernels.target_family(), input_name, _pixels_key(x))
        store = _FIXTURE_OUTPUTS if key[0] == "fixture" else own_outputs
        if out_key not in store:
            store[out_key] = (model, predict(model, x, input_name, threads, family))
        return store[out_key][1].copy()

    compare.session, compare.predict = session, cached_predict
    try:
        yield
    finally:
        compare.session, compare.predict = make_session, predict
