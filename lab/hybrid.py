"""A quantized model as either kernel family computes it, on any graph: ONNX Runtime runs every op whose result does
not depend on the family, ``lab.kernels`` emulates the integer GEMM and Conv kernels, and numpy the float pools whose
layout the other family's ORT chooses differently.

The families are told apart by ORT's u8 x s8 GEMM and Conv kernels (``lab.kernels``): Concat, Transpose, Shape,
LayerNormalization, Resize, Sigmoid, QLinearAdd, QLinearAveragePool, QLinearGlobalAveragePool and the float ops give
the same result on both (the quantized pools are portable C++ and SSE2 code with no per-CPU kernel: measured bit for
bit under qemu Haswell). What else differs is ORT's **float layout**: its NCHWc transformer puts a float AveragePool,
GlobalAveragePool or Conv into blocks of 8 channels on AVX2 and of 16 on AVX-512, where the block divides the
channels, and a blocked pool sums its window in another order than the generic kernel (measured: up to 1 ulp, which a
following QuantizeLinear turns into an output step on some values, as on a ShuffleNet's 24-channel AveragePool).
So the saturating family, computed on a CPU that is not of it, runs each float pool ORT left unblocked here as an AVX2
CPU does (``Pool``: blocked in numpy where 8 divides its channels, ORT's generic kernel otherwise). Float layouts the
emulation cannot settle (``layout_caveats``: blocked float Convs, whose AVX2 and AVX-512 kernels sum differently; and
the exact family's pools, whose block is 8 or 16 by CPU) make the numbers approximate, and say why.

Which QDQ groups ORT fuses into an integer kernel depends on the whole graph (a Conv whose input also
feeds another op may stay in float), so the graph the audit cuts is **ORT's own optimized graph** for this model
(``optimized``): in it every integer kernel is a node of its own (``EMULATED``: QLinearConv, in NCHW or channels
last, QLinearMatMul at any rank, QGemm, MatMulInteger, MatMulIntegerToFloat). Those run in ``lab.kernels``; the
rest runs in ORT **stages** with graph optimizations off (the graph is already what ORT runs), each a sub-graph of
the nodes whose inputs are ready. An integer op of the family kind that is not emulated (``NOT_EMULATED``) is
refused by name. ``HybridRun(model, family).run(x)`` gives the model's first output; its sessions are built on the
first batch (from the dtypes it meets) and reused, and each batch keeps only the tensors a later step reads.
"""
from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper

from lab import kernels
from lab.kernels import _attr as attr  # noqa: PLC2701 - the emulation's one attribute reader, shared on purpose


def _qlinear_conv(run, node, ins):
    """QLinearConv, NCHW or channels last (ORT's NHWC layout for x86): the latter transposed around the NCHW kernel."""
    if not kernels._attr(node, "channels_last", 0):  # noqa: SLF001 - the emulation's own attribute reader
        return kernels.HANDLERS["QLinearConv"](run, node, ins)
    nchw = onnx.NodeProto()
    nchw.CopyFrom(node)
    del nchw.attribute[:]
    nchw.attribute.extend(a for a in node.attribute if a.name != "channels_last")
    x = np.moveaxis(np.asarray(ins[0]), -1, 1)
    return [np.moveaxis(kernels.HANDLERS["QLinearConv"](run, nchw, [x, *ins[1:]])[0], 1, -1)]


def _matmul_integer_to_float(run, node, ins):
    """ORT's MatMulIntegerToFloat (A, B, a_scale, b_scale, a_zero_point, b_zero_point, bias): the integer GEMM times
    a_scale x b_scale in float32, plus the bias."""
    a, b, sa, sb = ins[:4]
    za = ins[4] if len(ins) > 4 and ins[4] is not None else np.zeros((), np.asarray(a).dtype)
    zb = ins[5] if len(ins) > 5 and ins[5] is not None else np.zeros((), np.asarray(b).dtype)
    out = kernels.matmul_integer_to_float([(np.asarray(a), sa, za), (np.asarray(b), sb, zb)], run.family)
    if len(ins) > 6 and ins[6] is not None:
        out = (out + np.asarray(ins[6], np.float32)).astype(np.float32)
    return [out]


# op type in ORT's optimized graph -> its emulation (the ops whose result depends on the kernel family)
EMULATED = {"QLinearConv": _qlinear_conv, "QLinearMatMul": kernels.HANDLERS["QLinearMatMul"],
            "QGemm": kernels.HANDLERS["QGemm"], "MatMulInteger": kernels.HANDLERS["MatMulInteger"],
            "MatMulIntegerToFloat": _matmul_integer_to_float}
AVX2_BLOCK = 8   # channels per NCHWc block on AVX2 (16 on AVX-512): ORT blocks a float pool or Conv it divides
FLOAT_POOLS = ("AveragePool", "GlobalAveragePool")
NOT_EMULATED = ("DynamicQuantizeMatMul", "ConvInteger", "QAttention", "DynamicQuantizeLSTM", "QEmbedLayerNormalization",
                "QOrderedMatMul", "NhwcQLinearConv")


@dataclass
class Stage:
    """Nodes ORT runs in one session, the tensors they read from earlier steps and those later ones need."""

    nodes: list
    reads: list = field(default_factory=list)
    writes: list = field(default_factory=list)
    session: ort.InferenceSession | None = None


@dataclass
class Pool(Stage):
    """A float pool ORT left unblocked on this CPU, run as an AVX2 CPU runs it: blocked (``blocked_pool``) where 8
    divides its channels, else as a one-node stage (ORT's generic kernel)."""


@dataclass
class Kernel:
    """One integer kernel node, emulated."""

    node: onnx.NodeProto

    @property
    def reads(self) -> list:
        return [i for i in self.node.input if i]

    @property
    def writes(self) -> list:
        return [o for o in self.node.output if o]


def lean_session(model: onnx.ModelProto, x64_precision: bool = False, optimize: bool = True,
                 entries: dict[str, str] | None = None, profile_prefix: str | None = None) -> ort.InferenceSession:
    """``lab.graph.session`` without ORT's memory arena and memory patterns: each keeps a session's largest batch
    allocated for good, which over the many sessions of an audit adds up to gigabytes on a large model.
    ``optimize=False``: the graph is run as written (it is ORT's optimized graph already); ``entries``: more session
    config entries; ``profile_prefix``: ORT's profiler on, its trace written under that prefix."""
    so = ort.SessionOptions()
    for key, value in (entries or {}).items():
        so.add_session_config_entry(key, value)
    if profile_prefix:
        so.enable_profiling, so.profile_file_prefix = True, profile_prefix
    so.intra_op_num_threads, so.inter_op_num_threads, so.log_severity_level = 1, 1, 4   # the caller words errors
    so.enable_cpu_mem_arena = False
    so.enable_mem_pattern = False
    if not optimize:
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    if x64_precision:
        so.add_session_config_entry(kernels.X64_PRECISION_KEY, "1")
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def optimized(model: onnx.ModelProto, x64_precision: bool = False) -> onnx.ModelProto:
    """The graph ORT's CPU session runs for ``model`` on this machine (``x64_precision``: with the session entry)."""
    with tempfile.TemporaryDirectory(prefix="lab-hybrid-") as folder:
        so = ort.SessionOptions()
        so.log_severity_level = 3
        so.optimized_model_filepath = str(Path(folder) / "optimized.onnx")
        if x64_precision:
            so.add_session_config_entry(kernels.X64_PRECISION_KEY, "1")
        ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
        return onnx.load(so.optimized_model_filepath)


def plan(graph: onnx.GraphProto, pools: bool = False) -> list:
    """Stages and kernels in the order they run: each stage holds every node whose inputs are ready, then every
    kernel (``pools``: and every unblocked float pool, a ``Pool``) whose inputs are ready runs; each stage writes only
    what a later step (or the output) reads."""
    available = {i.name for i in graph.initializer} | {i.name for i in graph.input}
    pending = list(graph.node)
    final = graph.output[0].name
    steps: list = []
    while final not in available:
        stage: list = []
        made: set[str] = set()
        for node in pending:
            if not _own_step(node, pools) and all(not i or i in available or i in made for i in node.input):
                stage.append(node)
                made.update(o for o in node.output if o)
        if stage:
            steps.append(Stage(stage))
            available |= made
        ready = [n for n in pending if _own_step(n, pools) and all(not i or i in available for i in n.input)]
        steps += [Kernel(n) if n.op_type in EMULATED else Pool([n]) for n in ready]
        available.update(o for n in ready for o in n.output if o)
        done = {id(n) for n in stage + ready}
        pending = [n for n in pending if id(n) not in done]
        if not done:
            missing = sorted({i for n in pending for i in n.input if i and i not in available})[:3]
            raise kernels.EmulationError(f"the graph cannot be ordered for the emulation (waiting for {missing})")
    inits = {i.name for i in graph.initializer}
    later: set[str] = {final}
    for step in reversed(steps):
        if isinstance(step, Stage):
            step.writes = sorted({o for n in step.nodes for o in n.output if o} & later)
            made = {o for n in step.nodes for o in n.output}
            step.reads = sorted({i for n in step.nodes for i in n.input if i and i not in made and i not in inits})
        later |= set(step.reads)
    return steps


def _own_step(node: onnx.NodeProto, pools: bool) -> bool:
    """An emulated integer kernel, or (``pools``) a float pool in ORT's generic layout: a step of its own."""
    return node.op_type in EMULATED or (pools and node.domain in ("", "ai.onnx") and node.op_type in FLOAT_POOLS)


def blocked_pool(node: onnx.NodeProto, x: np.ndarray) -> np.ndarray | None:
    """The float pool ``node`` on ``x`` as ORT's NCHWc kernel computes it on AVX2 (each window summed in float32 in
    row order, then divided by its count), or None where AVX2 keeps the generic kernel: channels not a multiple of
    ``AVX2_BLOCK``, not 4-D, or attributes the emulation does not cover (``unsettled_pool``)."""
    if x.ndim != 4 or x.shape[1] % AVX2_BLOCK or unsettled_pool(node):
        return None
    if node.op_type == "GlobalAveragePool":
        return kernels.average_pool_blocked(x, kernels.ConvShape(tuple(x.shape[2:])), True)
    shape = kernels.ConvShape(tuple(attr(node, "kernel_shape", [])),
                              tuple(attr(node, "strides", [1, 1])),
                              pads=tuple(attr(node, "pads", [0, 0, 0, 0])))
    return kernels.average_pool_blocked(x, shape, bool(attr(node, "count_include_pad", 0)))


def unsettled_pool(node: onnx.NodeProto) -> bool:
    """An AveragePool whose blocked arithmetic the emulation does not cover: not 2-D, auto_pad SAME_*, ceil_mode or
    dilations."""
    if node.op_type != "AveragePool":
        return False
    auto_pad = attr(node, "auto_pad", b"NOTSET")
    auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else auto_pad
    return (len(attr(node, "kernel_shape", [])) != 2 or auto_pad not in ("NOTSET", "VALID")
            or bool(attr(node, "ceil_mode", 0)) or any(d != 1 for d in attr(node, "dilations", [])))


def layout_caveats(graph: onnx.GraphProto, family: str) -> list[str]:
    """Float ops of ORT's optimized graph (on this CPU) whose layout on a CPU of ``family`` the emulation cannot
    settle, each named: float Convs ORT may block (AVX2's and AVX-512's blocked Conv kernels sum in other orders:
    measured; a grouped one is blocked only when depthwise, whose kernels agree), pools the emulation does not
    cover, and, for the exact family, blocked pools (its CPUs block by 8 or by 16: measured one to four output steps
    away from a VNNI CPU on two models when computed on AVX2)."""
    shapes = {i.name: list(i.dims) for i in graph.initializer}
    found = []
    for node in graph.node:
        if node.op_type == "Conv" and int(attr(node, "group", 1)) == 1:   # a depthwise Conv: one kernel on both
            # ORT blocks only a Conv whose weight is an initializer (one read through DequantizeLinear stays as is)
            if node.domain == "com.microsoft.nchwc" or shapes.get(node.input[1], [1])[0] % AVX2_BLOCK == 0:
                found.append("a float Conv ORT may block (NCHWc)")
        elif node.op_type in FLOAT_POOLS and node.domain in ("", "ai.onnx") and unsettled_pool(node):
            found.append("a float AveragePool with ceil_mode, auto_pad or dilations")
        elif node.op_type in FLOAT_POOLS and node.domain == "com.microsoft.nchwc" and family != kernels.SATURATING:
            found.append("a blocked float pool (NCHWc: 8 or 16 channels a block by CPU)")
    return sorted(set(found))


def last_reads(steps: list, kept: set) -> dict[int, list]:
    """Step (by id) -> the tensors no later step reads (``kept`` never dropped)."""
    seen: set[str] = set(kept)
    out: dict[int, list] = {}
    for step in reversed(steps):
        reads = set(step.reads) - seen
        out[id(step)] = sorted(reads)
        seen |= reads
    return out


def _stage_model(model: onnx.ModelProto, stage: Stage, values: dict) -> onnx.ModelProto:
    """The stage as a model: its nodes, the initializers they read, inputs typed from the values they meet."""
    used = {i for n in stage.nodes for i in n.input}
    inputs = [onnx.helper.make_tensor_value_info(name, onnx.helper.np_dtype_to_tensor_dtype(
        np.asarray(values[name]).dtype), None) for name in stage.reads]   # no shapes: any batch size
    outputs = [onnx.ValueInfoProto(name=w) for w in stage.writes]   # untyped: ORT infers them
    graph = onnx.helper.make_graph(list(stage.nodes), "stage", inputs, outputs,
                                   [i for i in model.graph.initializer if i.name in used])
    return onnx.helper.make_model(graph, opset_imports=list(model.opset_import), ir_version=max(model.ir_version, 8))


class HybridRun:
    """``model`` as CPUs of ``family`` compute it (``x64_precision``: with ``kernels.X64_PRECISION_KEY`` set), batch by
    batch: ORT stages for the ops the family does not change, ``lab.kernels`` for the integer kernels."""

    def __init__(self, model: onnx.ModelProto, family: str, input_name: str, x64_precision: bool = False,
                 label: str = "the model"):
        self.family, self.input_name, self.label = kernels.check_family(family), input_name, label
        self.model = optimized(model, x64_precision)
        refused = sorted({n.op_type for n in self.model.graph.node if n.op_type in NOT_EMULATED})
        if refused:
            raise kernels.EmulationError(f"{label}: ORT runs {', '.join(refused)} for it, an integer kernel the "
                                         "emulation does not cover; run the audit on a CPU of that family")
        here = self.family == kernels.machine_family()   # then the hybrid is ORT here, layout and all
        self.approximate = [] if here else layout_caveats(self.model.graph, self.family)
        self.steps = plan(self.model.graph, pools=not here and self.family == kernels.SATURATING)
        self.constants = {i.name: numpy_helper.to_array(i) for i in self.model.graph.initializer}
        self.producer = {o: n for n in self.model.graph.node for o in n.output if o}
        self.consumers: dict[str, list] = {}
        for n in self.model.graph.node:
            for i in n.input:
                self.consumers.setdefault(i, []).append(n)
        self.opset = max([o.version for o in self.model.opset_import if o.domain in ("", "ai.onnx")], default=0)
        self.last_read = last_reads(self.steps, set(self.constants) | {self.model.graph.output[0].name})

    def run(self, x: np.ndarray) -> np.ndarray:
        values = dict(self.constants)
        values[self.input_name] = x
        for step in self.steps:
            blocked = blocked_pool(step.nodes[0], np.asarray(values[step.nodes[0].input[0]])) \
                if isinstance(step, Pool) and step.writes else None
            if blocked is not None:
                values[step.writes[0]] = blocked
            elif isinstance(step, Stage):
                if step.session is None:
                    step.session = lean_session(_stage_model(self.model, step, values), optimize=False)
                values.update(zip(step.writes, step.session.run(step.writes, {r: values[r] for r in step.reads})))
            else:
                # the graph already holds what x64 precision does to the weights: the kernels take them as they are
                run = kernels._Run(values, self.producer, self.consumers, self.family, self.label, False,  # noqa: SLF001 - the emulation's walker state, shared on purpose
                                   frozenset(self.constants), self.opset)
                node = step.node
                values.update(zip(step.writes, EMULATED[node.op_type](run, node, [values.get(i) if i else None
                                                                                  for i in node.input])))
            for name in self.last_read.get(id(step), ()):
                values.pop(name, None)   # no later step reads it: a batch holds only what is still to be read
        return np.asarray(values[self.model.graph.output[0].name])
