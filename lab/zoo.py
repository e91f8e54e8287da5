"""Models the lab did not build: onnx's own model-zoo test graphs (``light_*``), given seeded weights.

onnx ships the zoo's graphs (ResNet-50, DenseNet-121, Inception, SqueezeNet, ...) without their weights: each weight
is a ``ConstantOfShape``. ``light_model`` turns one into a runnable FP32 model a practitioner might bring: He-normal
weights from a seed, the batch dimension free, the opset raised to 17 (per-channel DequantizeLinear needs an
``axis``), and every BatchNormalization's statistics estimated on the given images, layer by layer in graph order,
so activations keep a sane scale through fifty layers. Nothing downloads.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper, version_converter

from lab.graph import session

LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
OPSET = 17


def light_names() -> list[str]:
    """The zoo graphs onnx ships (``resnet50``, ``squeezenet``, ...)."""
    return sorted(p.stem[len("light_"):] for p in LIGHT.glob("light_*.onnx"))


def _weights(model: onnx.ModelProto, rng: np.random.Generator) -> onnx.ModelProto:
    """Each ``ConstantOfShape`` weight as an initializer: He-normal for a Conv / Gemm weight (fan-in from its shape),
    ones for a BatchNormalization scale and variance, zeros for biases and means."""
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    role: dict[str, tuple[str, int]] = {}
    for node in model.graph.node:
        for k, name in enumerate(node.input):
            role.setdefault(name, (node.op_type, k))
    kept, new = [], []
    for node in model.graph.node:
        if node.op_type != "ConstantOfShape":
            kept.append(node)
            continue
        shape = tuple(int(d) for d in inits[node.input[0]])
        op, k = role.get(node.output[0], ("", 0))
        if op in ("Conv", "Gemm", "MatMul") and k == 1:
            fan_in = int(np.prod(shape[1:])) if op == "Conv" else shape[-1] if op == "Gemm" else shape[0]
            value = rng.normal(0, np.sqrt(2.0 / max(fan_in, 1)), shape)
        elif op == "BatchNormalization" and k in (1, 4):
            value = np.ones(shape)
        else:
            value = np.zeros(shape)
        new.append(numpy_helper.from_array(value.astype(np.float32), node.output[0]))
    used = {i for n in kept for i in n.input}
    del model.graph.node[:]
    model.graph.node.extend(kept)
    old = [i for i in model.graph.initializer if i.name in used]
    del model.graph.initializer[:]
    model.graph.initializer.extend(old + new)
    names = set(inits) | {i.name for i in model.graph.initializer} | {o for n in kept for o in n.output}
    graph_inputs = [i for i in model.graph.input if i.name not in names]
    del model.graph.input[:]
    model.graph.input.extend(graph_inputs)
    return model


def _free_batch(model: onnx.ModelProto) -> onnx.ModelProto:
    for value in (model.graph.input[0], *model.graph.output):
        value.type.tensor_type.shape.dim[0].dim_param = "N"
    for node in model.graph.node:   # a Reshape to a fixed batch of 1 (the zoo's flatten) keeps the batch free
        if node.op_type == "Reshape":
            shape = next((i for i in model.graph.initializer if i.name == node.input[1]), None)
            if shape is not None:
                dims = numpy_helper.to_array(shape).copy()
                if len(dims) and dims[0] == 1:
                    dims[0] = -1 if -1 not in dims[1:] else 0
                    shape.CopyFrom(numpy_helper.from_array(dims.astype(np.int64), shape.name))
    del model.graph.value_info[:]
    return model


def _estimate_batchnorms(model: onnx.ModelProto, x: np.ndarray) -> onnx.ModelProto:
    """Each BatchNormalization's mean and variance from its input on ``x``, in graph order (each one sees the
    layers before it already normalized): one run per layer of a model that stops at that layer's input."""
    inits = {i.name: i for i in model.graph.initializer}
    name = model.graph.input[0].name
    for node in [n for n in model.graph.node if n.op_type == "BatchNormalization"]:
        probe = onnx.ModelProto()
        probe.CopyFrom(model)
        del probe.graph.output[:]
        probe.graph.output.append(onnx.helper.make_tensor_value_info(node.input[0], onnx.TensorProto.FLOAT, None))
        value = session(probe).run([node.input[0]], {name: x})[0]
        axes = (0, *range(2, value.ndim))
        for at, stat in ((3, value.mean(axis=axes)), (4, value.var(axis=axes))):
            inits[node.input[at]].CopyFrom(numpy_helper.from_array(stat.astype(np.float32), node.input[at]))
    return model


def light_model(name: str, x: np.ndarray, seed: int = 0) -> onnx.ModelProto:
    """onnx's ``light_<name>`` graph as a runnable FP32 model: seeded weights, BatchNorm estimated on ``x``."""
    model = onnx.load(str(LIGHT / f"light_{name}.onnx"))
    model = _free_batch(_weights(model, np.random.default_rng(seed)))
    model.ir_version = 8   # initializers need not be graph inputs from IR 4 on
    model = version_converter.convert_version(model, OPSET)
    return _estimate_batchnorms(model, np.asarray(x, np.float32))


def images(n: int, seed: int = 0, size: int = 224) -> np.ndarray:
    """``n`` smooth random RGB images [n, 3, size, size], normalized as ImageNet models expect (about N(0, 1))."""
    rng = np.random.default_rng(seed)
    coarse = rng.normal(0, 1, (n, 3, size // 16 + 1, size // 16 + 1)).astype(np.float32)
    fine = np.repeat(np.repeat(coarse, 16, axis=2), 16, axis=3)[:, :, :size, :size]
    return (fine + 0.3 * rng.normal(0, 1, fine.shape)).astype(np.float32)
