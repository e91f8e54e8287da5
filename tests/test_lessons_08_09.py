"""Lessons 08 and 09: the facts the grader reads from a chosen model's graph, on every format the toolbox builds."""
from __future__ import annotations

import itertools

import pytest

from grader.lessons import lesson08_the_quantization_toolbox as grader08
from lab import data, graph
from lab.lessons.lesson08_the_quantization_toolbox import toolbox as tb
from lab.workspace import make_workspace


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """Every format x per-channel x pre-processing combination of the toolbox, from the right set."""
    work = make_workspace(tmp_path_factory.mktemp("toolbox-graphs"))
    source, right = work / "source.onnx", data.calibration_set("right")
    models = {}
    for fmt, pc, pre in itertools.product(("QDQ", "QOperator"), (False, True), (False, True)):
        settings = {"quant_format": fmt, "per_channel": pc, "preprocess": pre}
        path = work / f"{tb.settings_name({**tb.BASELINE, **settings})}.onnx"
        tb.build(source, path, right, settings, scratch_dir=work / "scratch")
        models[(fmt, pc, pre)] = path
    return models


@pytest.mark.parametrize("fmt,pc,pre", itertools.product(("QDQ", "QOperator"), (False, True), (False, True)))
def test_per_channel_is_read_from_every_graph_the_toolbox_builds(built, fmt, pc, pre):
    path = built[(fmt, pc, pre)]
    ops = graph.op_counts(path)
    if fmt == "QOperator" and pre:
        assert "QGemm" in ops and "QLinearMatMul" not in ops, ops  # the case the reader used to miss
    assert graph.per_channel(path) is pc


def test_a_per_channel_preprocessed_qoperator_choice_is_reported_right(built):
    """Issue 25 item 9: such a choice lost half a point for 'does not match choice.onnx in: settings.per_channel'."""
    path = built[("QOperator", True, True)]
    settings = {**tb.BASELINE, "quant_format": "QOperator", "per_channel": True, "preprocess": True}
    shown = grader08._settings_in_graph(path)
    assert shown["preprocess"] is True and shown["reduce_range"] is False
    assert graph.per_channel(path) is settings["per_channel"]
