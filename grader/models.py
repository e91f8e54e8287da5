"""Untrusted ONNX files: size cap, self-contained, allowed domains, the checker, and the I/O contract.

Every check runs before ONNX Runtime sees the file. A model that fails any of them is refused
with a message naming the file and what was expected.
"""
from __future__ import annotations

from pathlib import Path

import onnx

from lab import graph
from lab.errors import LabError

MAX_MODEL_BYTES = 16 << 20
ALLOWED_DOMAINS = frozenset({"", "ai.onnx", "com.microsoft"})


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
    except Exception as e:  # noqa: BLE001 - the checker raises several types; any failure is a refusal
        raise ModelRefused(f"{rel}: fails the ONNX checker: {str(e).splitlines()[0][:200]}") from None
    if check_io:
        try:
            graph.check_io(model)
        except LabError as e:
            raise ModelRefused(f"{rel}: {str(e).split(': ', 1)[-1]}") from None
    return model
