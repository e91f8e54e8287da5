"""The committed fixtures: checksums, accuracy, the bad model, and a reproducible rebuild."""
import numpy as np
import pytest

from fixtures import build, build_cnn
from lab import compare, data, graph


def test_every_fixture_matches_the_manifest():
    checked = data.verify_fixtures()
    assert set(checked) == set(build.MODEL_FILES + build.DATA_FILES + build_cnn.FILES)
    assert all(checked.values()), f"fixtures differ from the manifest: {[k for k, v in checked.items() if not v]}"


def accuracy(model, split):
    return float((compare.predict(model, split.pixels).argmax(1) == split.labels).mean())


def test_fp32_reads_digits():
    assert accuracy(data.fixture_path("fp32.onnx"), data.load_split("evaluation")) >= 0.95


def test_bad_calibration_is_measurably_worse():
    evaluation = data.load_split("evaluation")
    good = accuracy(data.fixture_path("fp32.onnx"), evaluation)
    bad = accuracy(data.fixture_path("bad-calibration.onnx"), evaluation)
    assert bad < good - 0.2
    assert graph.quant_format(data.fixture_path("bad-calibration.onnx")) == "QDQ"


def test_splits_are_disjoint_and_sized():
    splits = {n: data.load_split(n) for n in ("calibration", "evaluation", "heldout")}
    assert len(splits["calibration"]) == 360
    for a in splits:
        for b in splits:
            if a < b:
                assert not set(splits[a].index) & set(splits[b].index), (a, b)
    assert splits["calibration"].raw.dtype == np.uint8 and splits["calibration"].raw.max() <= 16


def test_fp32_graph_has_the_contract():
    model = data.fixture_path("fp32.onnx")
    graph.check_io(model)
    assert graph.op_counts(model) == {"Add": 3, "MatMul": 3, "Relu": 2, "Softmax": 1}
    assert graph.load(model).opset_import[0].version >= 17


@pytest.mark.slow
@pytest.mark.rebuild
def test_rebuild_gives_same_shapes_names_splits_and_accuracy(tmp_path):
    build.build(tmp_path)
    for name in build.DATA_FILES:
        with np.load(tmp_path / name) as new, np.load(data.fixture_path(name)) as old:
            for key in ("raw", "labels", "index"):
                np.testing.assert_array_equal(new[key], old[key])
    new_model, old_model = graph.load(tmp_path / "fp32.onnx"), graph.load(data.fixture_path("fp32.onnx"))
    assert [n.name for n in new_model.graph.node] == [n.name for n in old_model.graph.node]
    assert {i.name: list(i.dims) for i in new_model.graph.initializer} == \
           {i.name: list(i.dims) for i in old_model.graph.initializer}
    evaluation = data.load_split("evaluation")
    assert abs(accuracy(tmp_path / "fp32.onnx", evaluation)
               - accuracy(data.fixture_path("fp32.onnx"), evaluation)) <= 0.005
    assert accuracy(tmp_path / "bad-calibration.onnx", evaluation) < 0.75
