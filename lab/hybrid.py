"""A quantized model as either kernel family computes it, on any graph: ONNX Runtime runs every op whose result does
not depend on the family, ``lab.kernels`` emulates only the integer GEMM and Conv kernels.

Only ORT's u8 x s8 GEMM and Conv kernels differ between the families (``lab.kernels``): Concat, Transpose, Shape,
AveragePool, LayerNormalization, Resize, Sigmoid, the QLinear element-wise ops and every float op give the same
result on both. So the graph is cut around its **kernel groups**, each an integer kernel ORT runs:

- QDQ: ``DequantizeLinear -> MatMul | Conv | Gemm -> QuantizeLinear`` (ORT fuses it into QLinearMatMul, QLinearConv
  or QGemm: ``lab.kernels.FUSED``), and ``DequantizeLinear -> MatMul`` with an int8 weight and a float output
  (MatMulIntegerToFloat);
- QOperator: ``QLinearMatMul``, ``QLinearConv``, ``QGemm``, ``MatMulInteger``.

The rest runs in ORT **stages**, each a sub-graph of the nodes whose inputs are ready, so ORT fuses and runs them as
it does in the whole model (a DequantizeLinear is copied into every stage that reads it, so ``DQ -> Add -> Q`` stays
one QLinearAdd). Kernel groups run between stages at any rank: a 3-D activation times a 2-D weight, or two
activations (attention), slice by slice. ``HybridRun(model, family).run(x)`` gives the model's first output; its
sessions are built on the first batch (from the dtypes it meets) and reused.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import numpy_helper

import onnxruntime as ort

from lab import kernels

KERNEL_OPS = ("MatMul", "Conv", "Gemm")          # between DequantizeLinear and QuantizeLinear: a fused integer kernel
QOPERATOR_KERNELS = ("QLinearMatMul", "QLinearConv", "QGemm", "MatMulInteger")


@dataclass
class Group:
    """One integer kernel: the nodes it replaces, the tensors it reads (quantized) and the one it writes."""

    nodes: list
    reads: list
    writes: str
    quantize: onnx.NodeProto | None = None   # the QDQ group's closing QuantizeLinear (None: QOperator, float out)


@dataclass
class Stage:
    """Nodes ORT runs in one session, the tensors they read from earlier stages and those later ones need."""

    nodes: list
    reads: list
    writes: list
    session: object = None


@dataclass
class Plan:
    stages_and_groups: list = field(default_factory=list)   # Stage or Group, in the order they run


def _producers(model: onnx.ModelProto) -> dict:
    return {o: n for n in model.graph.node for o in n.output if o}


def _consumers(model: onnx.ModelProto) -> dict:
    out: dict[str, list] = {}
    for n in model.graph.node:
        for i in n.input:
            out.setdefault(i, []).append(n)
    return out


def kernel_groups(model: onnx.ModelProto) -> list[Group]:
    """Every integer GEMM or Conv kernel ORT runs for this graph on x86 (see the module's docstring)."""
    producer, consumers = _producers(model), _consumers(model)
    constants = {i.name: i for i in model.graph.initializer}

    def dq(name):
        node = producer.get(name)
        return node if node is not None and node.op_type == "DequantizeLinear" else None

    groups = []
    for node in model.graph.node:
        if node.op_type in QOPERATOR_KERNELS:
            groups.append(Group([node], [i for i in node.input if i], node.output[0]))
            continue
        if node.op_type not in KERNEL_OPS or not all(dq(i) for i in node.input if i):
            continue
        after = consumers.get(node.output[0], [])
        reads = [i for n in (dq(i) for i in node.input if i) for i in n.input if i]
        if len(after) == 1 and after[0].op_type == "QuantizeLinear":
            q = after[0]
            groups.append(Group([node, q], reads + [i for i in q.input[1:] if i], q.output[0], q))
        elif node.op_type == "MatMul" and node.input[1] and dq(node.input[1]).input[0] in constants and \
                constants[dq(node.input[1]).input[0]].data_type == onnx.TensorProto.INT8:
            groups.append(Group([node], reads, node.output[0]))   # MatMulIntegerToFloat
    return groups


def plan(model: onnx.ModelProto) -> Plan:
    """The stages and kernel groups in the order they run; DequantizeLinear nodes are copied into each stage that
    reads them, never cut from their consumer."""
    groups = kernel_groups(model)
    in_group = {id(n) for g in groups for n in g.nodes}
    producer = _producers(model)
    inits = {i.name for i in model.graph.initializer}
    final = model.graph.output[0].name
    available = set(inits) | {i.name for i in model.graph.input}
    pending = [n for n in model.graph.node if id(n) not in in_group]
    waiting = list(groups)
    out = Plan()

    def dq_ready(name):
        """A DequantizeLinear reading what earlier steps made: copied into the stage of its consumer. (One reading
        a QuantizeLinear of the same stage waits for the next: ORT fused such a Q -> DQ -> Softmax -> Q -> DQ
        tail differently from the whole model.)"""
        node = producer.get(name)
        return node is not None and node.op_type == "DequantizeLinear" and all(
            not i or i in available for i in node.input)

    while final not in available:
        stage: list = []
        made: set = set()
        for node in pending:
            if node.op_type == "DequantizeLinear":
                continue
            if all(not i or i in available or i in made or dq_ready(i) for i in node.input):
                copies = [producer[i] for i in node.input if i and i not in available and i not in made
                          and producer[i] not in stage]
                stage += copies
                made.update(o for n in copies for o in n.output)
                stage.append(node)
                made.update(o for o in node.output if o)
        if final not in available and final not in made and dq_ready(final):
            stage.append(producer[final])
            made.add(final)
        ran = {id(n) for n in stage}
        pending = [n for n in pending if id(n) not in ran]
        if stage:
            out.stages_and_groups.append(Stage(stage, [], sorted(made)))
            available |= made
        ready = [g for g in waiting if all(i in available for i in g.reads)]
        waiting = [g for g in waiting if g not in ready]
        for g in ready:
            out.stages_and_groups.append(g)
            available.add(g.writes)
        if not stage and not ready:
            missing = sorted({i for n in pending for i in n.input if i and i not in available})[:3]
            raise kernels.EmulationError(f"the graph cannot be ordered for the emulation (waiting for {missing})")
    _trim(out, final, inits)
    return out


def _trim(p: Plan, final: str, inits: set) -> None:
    """Each stage reads what it does not make and writes only what a later step (or the output) reads."""
    later: set[str] = {final}
    for step in reversed(p.stages_and_groups):
        if isinstance(step, Group):
            later |= set(step.reads)
            continue
        step.writes = sorted(set(step.writes) & later)
        made = {o for n in step.nodes for o in n.output}
        step.reads = sorted({i for n in step.nodes for i in n.input if i and i not in made and i not in inits})
        later |= set(step.reads)


def lean_session(model: onnx.ModelProto, x64_precision: bool = False) -> ort.InferenceSession:
    """``lab.graph.session`` without ORT's memory arena and memory patterns: each keeps a session's largest batch
    allocated for good, which over the many sessions of an audit adds up to gigabytes on a large model."""
    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads, so.log_severity_level = 1, 1, 3
    so.enable_cpu_mem_arena = False
    so.enable_mem_pattern = False
    if x64_precision:
        so.add_session_config_entry(kernels.X64_PRECISION_KEY, "1")
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def _stage_model(model: onnx.ModelProto, stage: Stage, values: dict) -> onnx.ModelProto:
    """The stage as a model: its nodes, the initializers they read, inputs typed from the values they meet."""
    used = {i for n in stage.nodes for i in n.input}
    inputs = []
    for name in stage.reads:
        v = np.asarray(values[name])
        dims = ["N" if k == 0 and v.ndim > 1 else d for k, d in enumerate(v.shape)]
        inputs.append(onnx.helper.make_tensor_value_info(
            name, onnx.helper.np_dtype_to_tensor_dtype(v.dtype), dims))
    outputs = [onnx.ValueInfoProto(name=w) for w in stage.writes]   # untyped: ORT infers them
    graph = onnx.helper.make_graph(list(stage.nodes), "stage", inputs, outputs,
                                   [i for i in model.graph.initializer if i.name in used])
    return onnx.helper.make_model(graph, opset_imports=list(model.opset_import), ir_version=max(model.ir_version, 8))


def last_reads(p: Plan, kept: set) -> dict[int, list]:
    """Step (by id) -> the tensors no later step reads (``kept`` never dropped)."""
    seen: set[str] = set(kept)
    out: dict[int, list] = {}
    for step in reversed(p.stages_and_groups):
        reads = set(step.reads) - seen
        out[id(step)] = sorted(reads)
        seen |= reads
    return out


class HybridRun:
    """``model`` as CPUs of ``family`` compute it (``x64_precision``: with ``kernels.X64_PRECISION_KEY`` set), batch by
    batch: ORT stages for the ops the family does not change, ``lab.kernels`` for the integer kernels."""

    def __init__(self, model: onnx.ModelProto, family: str, input_name: str, x64_precision: bool = False,
                 label: str = "the model"):
        self.model, self.family, self.input_name = model, kernels.check_family(family), input_name
        self.x64, self.label = x64_precision, label
        self.plan = plan(model)
        self.constants = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
        self.producer, self.consumers = _producers(model), _consumers(model)
        self.opset = max([o.version for o in model.opset_import if o.domain in ("", "ai.onnx")], default=0)
        self.last_read = last_reads(self.plan, set(self.constants) | {model.graph.output[0].name})

    def run(self, x: np.ndarray) -> np.ndarray:
        values = dict(self.constants)
        values[self.input_name] = x
        for step in self.plan.stages_and_groups:
            if isinstance(step, Stage):
                if step.session is None:
                    step.session = lean_session(_stage_model(self.model, step, values), self.x64)
                outs = step.session.run(step.writes, {r: values[r] for r in step.reads})
                values.update(zip(step.writes, outs))
            else:
                values[step.writes] = self._kernel(step, values)
            for name in self.last_read.get(id(step), ()):
                values.pop(name, None)   # no later step reads it: a batch holds only what is still to be read
        return np.asarray(values[self.model.graph.output[0].name])

    def _kernel(self, group: Group, values: dict) -> np.ndarray:
        run = kernels._Run(values, self.producer, self.consumers, self.family, self.label, self.x64,  # noqa: SLF001 - the emulation's own walker state, shared on purpose
                           frozenset(self.constants), self.opset)
        op = group.nodes[0]
        if group.quantize is None and op.op_type in QOPERATOR_KERNELS:
            return kernels.HANDLERS[op.op_type](run, op, [values.get(i) if i else None for i in op.input])[0]
        sources = [_second_operand_to_u8(run.dq_source(i), k, i, run) for k, i in enumerate(op.input) if i]
        if group.quantize is None:
            return kernels.matmul_integer_to_float(sources, self.family)
        q = group.quantize
        y_scale = values[q.input[1]]
        y_zero = values[q.input[2]] if len(q.input) > 2 and q.input[2] else np.zeros((), np.uint8)
        return kernels.FUSED[op.op_type](run, op, sources, y_scale, y_zero)


def _second_operand_to_u8(source, at: int, name: str, run) -> tuple:
    """A DequantizeLinear's (q, scale, zero point); an int8 activation as the second operand (attention's two
    activations) moves to uint8, as ORT's QDQS8ToU8Transformer moves every int8 activation on x86 (the first
    operand's shift is the kernels' own ``shift_s8_activations``; a constant weight stays int8)."""
    q, scale, zero = source
    if at == 1 and np.asarray(q).dtype == np.int8 and run.producer[name].input[0] not in run.constants:
        return ((np.asarray(q, np.int16) + 128).astype(np.uint8), scale,
                (np.asarray(zero, np.int16) + 128).astype(np.uint8))
    return q, scale, zero
