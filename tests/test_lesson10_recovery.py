"""Lesson 10, section 9 (``recovery``): the handed-in model loses beyond noise on both families for several student
ids, each step's verdict is rendered from its numbers (every branch), the exclusion exercise's check refuses each
wrong kind of answer by name, fake-quant is the unfused run, and 16-bit activations are emulated as ORT runs them."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from lab import camera, evidence, kernels, variant
from lab.lessons.lesson10_your_own_model import recovery

IDS = [None, "s2417093", "alice"]


class FrameReader:
    """The lesson's reader, as the instructor's solution writes it."""

    def __init__(self, frames, batch_size=32, input_name="image"):
        self.frames, self.batch_size, self.input_name, self.position = camera.as_frames(frames), batch_size, \
            input_name, 0

    def get_next(self):
        if self.position >= len(self.frames):
            return None
        batch = self.frames[self.position:self.position + self.batch_size]
        self.position += self.batch_size
        return {self.input_name: camera.preprocess(batch)}


@pytest.fixture(scope="module", params=IDS, ids=lambda s: s or "reference")
def worked(request, tmp_path_factory):
    """Section 9 worked for one student id: the handed-in model and every step's numbers."""
    with variant.using(request.param):
        work = tmp_path_factory.mktemp("work")
        (work / "camera").mkdir()
        source = work / "camera" / "cnn-fp32.onnx"
        source.write_bytes(camera.model_path().read_bytes())
        ev = camera.load_split("evaluation")
        pre, handed = recovery.handed_in(source, work, FrameReader)
        ranking = recovery.ablate(source, pre, handed, FrameReader, ev.image, ev.labels, handed.parent)
        return {"source": source, "pre": pre, "handed": handed, "ev": ev, "ranking": ranking,
                "data": recovery.data_check(source, handed, ev.image, ev.labels),
                "split": recovery.split(source, handed, ev.image, ev.labels),
                "sixteen": recovery.sixteen_bit(source, pre, handed, FrameReader, ev.image, ev.labels,
                                                handed.parent)}


def test_the_handed_in_model_loses_beyond_noise_on_both_families_and_fp32_reads_the_frames(worked):
    d = worked["data"]
    assert d["fp32_accuracy"] >= d["floor"]
    for f in kernels.FAMILIES:
        assert d[f]["against_fp32"].beyond_noise and d[f]["against_fp32"].difference < 0, (f, d[f])
    assert "INT8 loses" in recovery.data_sentence(d) and "only by noise" not in recovery.data_sentence(d)


def test_fake_quant_loses_as_the_fused_runs_do_so_the_rulers_lose_not_the_kernels(worked):
    s = worked["split"]
    assert s["fake_quant"]["against_fp32"].beyond_noise and s["fake_quant"]["against_fp32"].difference < 0
    for f in kernels.FAMILIES:
        assert not s[f]["against_fake_quant"].beyond_noise, (f, s[f])
    text = recovery.split_sentence(s)
    assert "the rulers themselves" in text and "add only noise" in text


def test_the_ablation_ranks_the_first_conv_worst_and_the_check_accepts_it(worked):
    ranking, labels = worked["ranking"], worked["ev"].labels
    first = recovery.nodes(worked["pre"])[0][0]
    assert recovery.worst(ranking) == first == "conv1"
    assert sorted(r["node"] for r in ranking) == sorted(n for n, _ in recovery.nodes(worked["pre"]))
    assert recovery.check_exclusion(first, ranking).startswith("exclusion ok: conv1")
    without = ranking[0]["model"]
    e = recovery.excluded(worked["source"], worked["handed"], without, worked["ev"].image, labels)
    for f in kernels.FAMILIES:
        assert e[f]["against_handed"].beyond_noise and e[f]["against_handed"].difference > 0
    assert "recovers" in recovery.exclusion_sentence(first, e)


@pytest.mark.parametrize("answer, words", [
    ("conv2", ("EXCLUDE = 'conv2'", "noise is not a ranking", "beyond noise on both families")),
    ("Conv", ("EXCLUDE is 'Conv': not a node the ablation excluded",)),
    (None, ("EXCLUDE is None: not a node the ablation excluded",)),
    ("softmax", ("EXCLUDE is 'softmax': not a node the ablation excluded",)),
])
def test_the_exclusion_check_refuses_a_node_that_is_not_the_worst_beyond_noise(worked, answer, words):
    with pytest.raises(recovery.ExclusionRefused) as caught:
        recovery.check_exclusion(answer, worked["ranking"])
    for w in words:
        assert w in str(caught.value), (w, str(caught.value))


def _row(node: str, answers: np.ndarray, base: np.ndarray, labels: np.ndarray) -> dict:
    ev = evidence.paired(labels, base, answers)
    return {"node": node, "op": "Conv", "labels": labels,
            **{f: {"answers": answers, "against_handed": ev} for f in kernels.FAMILIES}}


def test_the_exclusion_check_refuses_a_node_another_beats_beyond_noise_and_accepts_a_tie():
    labels = np.zeros(200, np.int64)
    base = np.ones(200, np.int64)                      # the handed-in model misreads every frame
    strong, weak, tie = base.copy(), base.copy(), base.copy()
    strong[:120], weak[:40], tie[:115] = 0, 0, 0       # frames each exclusion reads again
    ranking = [_row("a", strong, base, labels), _row("b", weak, base, labels), _row("c", tie, base, labels)]
    with pytest.raises(recovery.ExclusionRefused, match="excluding 'a' recovers more"):
        recovery.check_exclusion("b", ranking)
    assert recovery.check_exclusion("c", ranking).startswith("exclusion ok: c")


def _paired(fixed: int, broken: int, n: int = 400) -> evidence.Paired:
    return evidence.from_counts(n, fixed, broken)


def test_every_verdict_branch_says_noise_when_it_is_noise():
    fine = {"fp32_accuracy": 0.99, "floor": 0.95, "frames": 400,
            **{f: {"against_fp32": _paired(1, 2)} for f in kernels.FAMILIES}}
    text = recovery.data_sentence(fine)
    assert "differs from FP32 only by noise" in text and "fine" in text
    assert "below the floor" in recovery.data_sentence({**fine, "fp32_accuracy": 0.9})
    kernel = {"fake_quant": {"against_fp32": _paired(0, 1)},
              **{f: {"against_fake_quant": _paired(0, 20), "kernel_change": 0.3} for f in kernels.FAMILIES}}
    text = recovery.split_sentence(kernel)
    assert "only by noise" in text and "the kernel adds its own error" in text
    flat = [{"node": n, "op": "Conv", **{f: {"against_handed": _paired(0, 1)} for f in kernels.FAMILIES}}
            for n in ("a", "b")]
    assert "no excluded node" in recovery.ranking_sentence(flat) and recovery.worst(flat) is None
    with pytest.raises(recovery.ExclusionRefused, match="noise is not a ranking"):
        recovery.check_exclusion("a", flat)
    sixteen = {f: {"accuracy": 0.99, "against_handed": _paired(20, 0), "against_fp32": _paired(1, 1)}
               for f in kernels.FAMILIES}
    assert recovery.sixteen_sentence(sixteen).startswith("**Your run.** 16-bit activations recover frames beyond noise")
    assert "within noise of FP32" in recovery.sixteen_sentence(sixteen)
    one = {kernels.EXACT: sixteen[kernels.EXACT],
           kernels.SATURATING: {**sixteen[kernels.SATURATING], "against_handed": _paired(1, 0)}}
    assert "on one family only" in recovery.sixteen_sentence(one)
    e = {"bytes": {"handed": 100, "without": 120},
         **{f: {"accuracy": 0.93, "max_abs_error": 0.9, "handed": {"accuracy": 0.93, "max_abs_error": 0.9},
                "against_handed": _paired(0, 0), "against_fp32": _paired(0, 25)} for f in kernels.FAMILIES}}
    text = recovery.exclusion_sentence("x", e)
    assert "changes the accuracy only by noise" in text and "still 0.0625 below FP32 beyond noise" in text
    assert "The file grows" in text


def test_sixteen_bit_activations_run_at_opset_21_and_the_emulation_matches_ort_unfused(worked):
    s, x = worked["sixteen"], worked["ev"].image
    assert s["opset"] == 21
    so = ort.SessionOptions()
    so.log_severity_level = 3
    here = ort.InferenceSession(str(s["model"]), so, providers=["CPUExecutionProvider"]).run(None, {"image": x})[0]
    for f in kernels.FAMILIES:  # ORT runs the float ops between Q and DQ: no kernel family enters
        emulated = kernels.emulate(s["model"], x, f, "image")
        assert float(np.abs(emulated - here).max()) < 1e-3, f
        assert np.array_equal(emulated.argmax(1), here.argmax(1)), f


def test_fake_quant_is_the_unfused_graph(worked):
    x = worked["ev"].image
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    unfused = ort.InferenceSession(str(worked["handed"]), so, providers=["CPUExecutionProvider"]).run(
        None, {"image": x})[0]
    fake = recovery.fake_quant(worked["handed"], x)
    assert float(np.abs(fake - unfused).max()) <= 1 / 255, "one output step at most"
    assert np.array_equal(fake.argmax(1), unfused.argmax(1))


def test_ort_keeps_16_bit_activations_out_of_its_integer_kernels(worked, tmp_path):
    """What the section says of ORT's optimized graph: float Conv between Q and DQ, no QLinearConv."""
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    ort.InferenceSession(str(worked["sixteen"]["model"]), so, providers=["CPUExecutionProvider"])
    ops = {n.op_type for n in onnx.load(so.optimized_model_filepath).graph.node}
    assert "Conv" in ops and "QLinearConv" not in ops, ops
    assert worked["sixteen"]["qdq_domains"] == ["ai.onnx"]
