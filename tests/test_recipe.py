"""Lesson 07: scenario checks, the calibration selection, the recipe, the stamp and verify."""
from __future__ import annotations

import json
import shutil

import numpy as np
import onnx
import pytest

from lab import data, kernels, schemas
from lab.convert import quantize
from lab.errors import ModelContractError
from lab.lessons.lesson07_calibrate_the_deployed_representation import recipe, scenario_checks, scenarios

RELEASE_ID = "digits-int8-test"


@pytest.fixture(scope="module")
def drafts(tmp_path_factory):
    """The daylight-only model and the daylight + flash model, converted for real."""
    work = tmp_path_factory.mktemp("release")
    source = work / "source.onnx"
    shutil.copyfile(data.fixture_path("fp32.onnx"), source)
    daylight = recipe.select([("daylight", None)])
    fixed = recipe.select([("daylight", None), ("flash", slice(0, None, 2))])
    rec_d = quantize(source, work / "daylight.onnx", daylight.pixels, per_channel=True, batch_size=36)
    rec_f = quantize(source, work / "fixed.onnx", fixed.pixels, per_channel=True, batch_size=36)
    ev = data.load_split("evaluation")
    with kernels.computing_as(kernels.EXACT):  # where the calibration alone decides (per-channel U8S8 saturates)
        before = scenario_checks.compare_scenarios(source, work / "daylight.onnx", ev.pixels, ev.labels)
        after = scenario_checks.compare_scenarios(source, work / "fixed.onnx", ev.pixels, ev.labels)
    return {"work": work, "source": source, "fixed": fixed, "settings": rec_f.settings, "ev": ev,
            "before": {r.name: r for r in before}, "after": {r.name: r for r in after},
            "daylight_settings": rec_d.settings}


def test_judge_separates_confident_changes_from_accepted_differences():
    labels = np.array([0, 1])
    fp32 = np.array([[0.9, 0.1] + [0.0] * 8, [0.45, 0.55] + [0.0] * 8])
    int8 = np.array([[0.2, 0.8] + [0.0] * 8, [0.55, 0.45] + [0.0] * 8])  # both answers change
    r = scenario_checks.judge("x", fp32, int8, labels, margin=0.25)
    assert (r.changed, r.defects, r.accepted_differences) == (2, 1, 1)
    assert r.verdict == "needs work"
    r = scenario_checks.judge("y", fp32[1:], int8[1:], labels[1:], margin=0.25)
    assert r.defects == 0 and r.loss == 1.0 and r.verdict == "needs work"  # a loss over the limit fails too
    same = scenario_checks.judge("z", fp32, fp32, labels, margin=0.25)
    assert same.passed and same.changed == 0


def test_daylight_passes_and_flash_needs_work_with_daylight_calibration(drafts):
    before = drafts["before"]
    assert before["daylight"].passed
    assert not before["flash"].passed and before["flash"].defects > 0
    assert before["flash"].loss <= scenario_checks.LIMIT  # accuracy alone would have let it through


def test_the_fixed_selection_passes_every_scenario(drafts):
    after = drafts["after"]
    assert set(after) == set(scenarios.acceptance_conditions())
    assert not any(r.needs_work for r in after.values()), {k: r.note for k, r in after.items() if r.needs_work}
    assert after["flash"].max_abs_error < drafts["before"]["flash"].max_abs_error / 3


def test_selection_records_samples_and_hash(drafts):
    sel = drafts["fixed"]
    d = sel.to_dict()
    assert d["count"] == recipe.POOL_SIZE + recipe.POOL_SIZE // 2 and sel.conditions == ["daylight", "flash"]
    assert d["sha256"] == data.data_sha256(sel.pixels)
    cal = data.load_split("calibration")
    assert d["parts"][1]["dataset_index"] == [int(i) for i in cal.index[:recipe.POOL_SIZE:2]]
    np.testing.assert_array_equal(sel.pixels[recipe.POOL_SIZE:], scenarios.flash(cal.pixels[:recipe.POOL_SIZE:2]))
    with pytest.raises(ValueError, match="unknown condition"):
        recipe.select([("sunset", None)])


def test_disjointness_is_checked_by_content(drafts):
    ev = drafts["ev"]
    assert set(recipe.check_disjoint(drafts["fixed"].pixels, ev.pixels).values()) == {0}
    flashed_acceptance = scenarios.flash(ev.pixels[:7])
    with pytest.raises(recipe.ReleaseError, match="7 under flash"):
        recipe.check_disjoint(np.concatenate([drafts["fixed"].pixels, flashed_acceptance]), ev.pixels)


def test_shared_rows_from_hashes_kept_for_the_acceptance_set(drafts):
    """The grader keeps the acceptance side's hashes (``condition_row_hashes``) and counts with ``shared_with``: the
    same counts as ``shared_rows``, a row shared under one condition counted under that one only."""
    ev = drafts["ev"]
    selection = np.concatenate([drafts["fixed"].pixels, scenarios.dim(ev.pixels[:3]), ev.pixels[5:7]])
    kept = recipe.condition_row_hashes(ev.pixels)
    assert recipe.shared_with(selection, kept) == recipe.shared_rows(selection, ev.pixels)
    assert {k: v for k, v in recipe.shared_with(selection, kept).items() if v} == {"daylight": 2, "dim": 3}


def test_the_table_marks_scenarios_fp32_itself_fails_and_judges_int8_against_fp32():
    labels = np.arange(10) % 10
    right = np.eye(10)[labels] * 0.9 + 0.01
    wrong = np.eye(10)[(labels + 1) % 10] * 0.9 + 0.01
    weak = scenario_checks.judge("weak", wrong, wrong, labels, 0.25)  # FP32 reads none; INT8 agrees with FP32
    fine = scenario_checks.judge("fine", right, right, labels, 0.25)
    assert weak.verdict == "not judged" and not weak.passed and weak.fp32_accuracy == 0.0 and "model limit" in weak.note
    table = scenario_checks.format_scenarios([fine, weak]).splitlines()
    assert "0.000*" in table[3] and "*" not in table[2] and table[3].rstrip().endswith("not judged")
    assert table[-2].startswith("* FP32 itself reads fewer than 95% of these images (weak 0%)")
    assert "not judged" in table[-1]
    assert "*" not in scenario_checks.format_scenarios([fine])  # no footnote when FP32 reads every scenario
    side = scenario_checks.format_before_after([fine, weak], [fine, weak]).splitlines()
    assert "0.000*" in side[3] and side[-2].startswith("* FP32 itself")


def test_scenario_figure_shows_fp32_and_each_run(drafts):
    import matplotlib
    matplotlib.use("Agg")
    fig = scenario_checks.scenario_figure({"daylight": list(drafts["before"].values()),
                                           "fixed": list(drafts["after"].values())})
    axes = [ax for sub in fig.subfigs for ax in sub.axes]
    assert len(axes) == 3
    acc = axes[0]
    assert acc.get_ylabel().startswith("accuracy") and [t.get_text() for t in acc.get_legend().get_texts()] == \
        ["FP32", "INT8, daylight", "INT8, fixed"]
    shaded = [t.get_text() for t in acc.texts if t.get_text() == "FP32 limit"]
    assert len(shaded) == sum(r.fp32_accuracy < scenario_checks.FLOOR for r in drafts["before"].values()) >= 1


@pytest.fixture(scope="module")
def release(drafts):
    doc = recipe.recipe(RELEASE_ID, drafts["source"], drafts["fixed"], drafts["settings"], 36, drafts["ev"],
                        list(drafts["after"].values()), drafts["work"] / "fixed.onnx", "shifted and foggy digits")
    return recipe.write_release(drafts["work"] / "release", drafts["work"] / "fixed.onnx", doc, drafts["ev"],
                                list(drafts["after"].values()))


def test_release_files_match_their_schemas_and_the_model_carries_the_recipe(release):
    doc = schemas.read("recipe", release["recipe"])
    rec = schemas.read("scenarios", release["scenarios"])
    assert doc["release_id"] == rec["release_id"] == RELEASE_ID and rec["judged_pass"] is True
    assert doc["source_model"]["sha256"] == data.manifest()["fp32.onnx"]
    assert doc["acceptance"]["shared_rows_with_calibration"] == 0
    assert rec["model_sha256"] == data.file_sha256(release["model"])
    meta = {p.key: p.value for p in onnx.load(str(release["model"])).metadata_props}
    assert meta[recipe.META_RELEASE] == RELEASE_ID
    assert meta[recipe.META_SHA] == data.file_sha256(release["recipe"])
    assert json.loads(meta[recipe.META_RECIPE]) == doc
    assert recipe.verify(release["model"], release["recipe"]).ok


def test_verify_names_what_differs(drafts, release, tmp_path):
    other = recipe.verify(drafts["work"] / "daylight.onnx", release["recipe"])
    assert not other.ok
    assert any("never stamped" in d for d in other.differences)
    assert any("input_ruler" in d for d in other.differences)
    edited = json.loads(release["recipe"].read_text())
    edited["release_id"] = "digits-int8-other"
    edited["calibration"]["batch_size"] = 64
    (tmp_path / "recipe.json").write_text(json.dumps(edited))
    v = recipe.verify(release["model"], tmp_path / "recipe.json")
    text = str(v)
    assert "release_id: the model says 'digits-int8-test'" in text
    assert "recipe SHA-256" in text and "calibration/batch_size" in text
    with pytest.raises(recipe.ReleaseError):
        v.raise_for_differences()


def test_verify_compares_the_graph_with_the_settings(drafts, release, tmp_path):
    edited = json.loads(release["recipe"].read_text())
    edited["quantization"]["per_channel"] = False
    (tmp_path / "recipe.json").write_text(json.dumps(edited))
    assert any(d.startswith("quantization/per_channel: the graph's weights are per channel")
               for d in recipe.verify(release["model"], tmp_path / "recipe.json").differences)


def test_bad_recipe_and_bad_model_are_refused_with_the_field_or_expectation(release, tmp_path):
    edited = json.loads(release["recipe"].read_text())
    del edited["calibration"]["not_covered"]
    (tmp_path / "recipe.json").write_text(json.dumps(edited))
    with pytest.raises(schemas.SchemaError, match="calibration.*not_covered"):
        recipe.verify(release["model"], tmp_path / "recipe.json")
    m = onnx.load(str(release["model"]))
    m.graph.input[0].name = "image"
    onnx.save(m, str(tmp_path / "renamed.onnx"))
    with pytest.raises(ModelContractError, match="expected an input named 'pixels'"):
        recipe.verify(tmp_path / "renamed.onnx", release["recipe"])


def test_a_selection_from_a_split_that_is_not_there_names_the_calibration_split(monkeypatch):
    def missing(name):
        raise FileNotFoundError(name)

    monkeypatch.setattr(data, "load_split", missing)
    with pytest.raises(recipe.ReleaseError, match="no 'heldout' split here.*calibration split only"):
        recipe.select([("daylight", None)], split="heldout")


def test_exercise_1_check_names_the_wrong_entry_tensor_with_both_runs_db(drafts, tmp_path):
    from lab.lessons.lesson07_calibrate_the_deployed_representation import debugging

    work = drafts["source"].parent
    ev = data.load_split("evaluation")
    daylight = debugging.layer_sqnr(drafts["source"], work / "daylight.onnx", ev.pixels, tmp_path)
    flash = debugging.layer_sqnr(drafts["source"], work / "daylight.onnx", scenarios.flash(ev.pixels, 0), tmp_path)
    order = debugging.tensor_order(drafts["source"])
    entry = debugging.entry_point(flash, daylight).tensor
    assert debugging.check_entry_tensor(entry, flash, daylight, flash, order).startswith("check: ENTRY_TENSOR")
    later = next(r.tensor for r in flash if r.tensor != entry)
    with pytest.raises(debugging.EntryCheckFailed, match=rf"ENTRY_TENSOR is '{later}', but the first tensor .* "
                                                         rf"is '{entry}' \(.* dB against .* dB\); at {later}, flash"):
        debugging.check_entry_tensor(later, flash, daylight, flash, order)
    with pytest.raises(debugging.EntryCheckFailed, match="not a tensor of this graph"):
        debugging.check_entry_tensor("pixel", flash, daylight, flash, order)
    with pytest.raises(debugging.EntryCheckFailed, match="rewind\\(\\) it between the two runs"):
        debugging.check_entry_tensor(entry, daylight, daylight, flash, order)


def test_a_release_that_fails_a_family_names_the_scenario_and_why(drafts):
    before = list(drafts["before"].values())
    with pytest.raises(recipe.ReleaseError, match=r"exact: .*flash needs work \(.+\)"):
        recipe.check_families({"exact": before, "saturating": list(drafts["after"].values())}, ["exact"])
    with pytest.raises(recipe.ReleaseError, match="never evaluated under its target kernel family saturating"):
        recipe.check_families({"exact": before}, ["exact", "saturating"])
