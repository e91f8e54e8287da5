"""``python -m lab submit``: what goes into the zip, what never does, and the refusals."""
from __future__ import annotations

import hashlib
import json
import re
import zipfile
from pathlib import Path

import pytest

from lab import contract, kernels, schemas, workspace
from lab.tools.submit import STUB, SubmitError, default_workspace, main, submit


def make_workspace(root: Path) -> Path:
    work = root / "workspace"
    (work / "growth").mkdir(parents=True)
    for rel in contract.files("required"):
        (work / rel).write_text(f"content of {rel}\n")
    (work / "growth" / "narrow-001.onnx").write_bytes(b"model bytes")
    (work / "source.onnx").write_bytes(b"the fp32 fixture copy")
    (work / "notes.ipynb").write_text("{}")
    (work / "growth" / "narrow-1.onnx").write_bytes(b"not the naming contract")
    return work


def test_zip_holds_manifest_and_workspace_files_only(tmp_path):
    work = make_workspace(tmp_path)
    (tmp_path / "outside.py").write_text("secret = 1")
    path = submit("s-001", work, tmp_path / "out")
    assert path == tmp_path / "out" / "s-001.zip"
    with zipfile.ZipFile(path) as zf:
        names = set(zf.namelist())
        doc = json.loads(zf.read("submission.json"))
        for rel, digest in doc["files"].items():
            assert hashlib.sha256(zf.read(rel)).hexdigest() == digest
    schemas.validate("submission", doc)
    assert names == set(doc["files"]) | {"submission.json"}
    assert set(contract.files("required")) | {"growth/narrow-001.onnx"} == set(doc["files"])
    assert "source.onnx" not in names and "notes.ipynb" not in names and "outside.py" not in names
    assert doc["student"] == "s-001" and {"python", "onnx", "onnxruntime", "numpy"} <= set(doc["versions"])
    assert "metrics.py" in doc["missing"]


def test_a_missing_lesson_is_named_not_refused_and_an_empty_workspace_is_refused(tmp_path, capsys):
    work = make_workspace(tmp_path)
    (work / "right.onnx").unlink()
    (work / "calibration_reader.py").unlink()
    assert main(["--student", "s1", "--work-dir", str(work), "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "the grader will score the checks that need them 0" in out
    assert "  lesson 02: calibration_reader.py\n" in out and "  lesson 03: right.onnx\n" in out
    with zipfile.ZipFile(tmp_path / "s1.zip") as zf:
        assert "right.onnx" not in zf.namelist() and "wide.onnx" in zf.namelist()
    empty = tmp_path / "empty"
    (empty / "drafts").mkdir(parents=True)
    (empty / "source.onnx").write_bytes(b"the fixture copy is not handed in")
    with pytest.raises(SubmitError, match="holds none of the files the lessons write"):
        submit("s1", empty, tmp_path)


def test_missing_by_lesson_groups_files_and_folders():
    handed_in = set(contract.files("required")) | {"growth/right-001.onnx", "metrics.py"}
    missing = contract.missing_by_lesson(handed_in)
    assert "02" not in missing and "03" not in missing
    assert missing["04"] == ["growth.json"]
    assert missing["07"] == ["release/model.onnx", "release/recipe.json", "release/scenarios.json"]
    assert "metrics.py" not in missing["06"] and "candidate.onnx" in missing["06"]
    assert contract.missing_by_lesson(set())["04"] == ["growth.json", "growth/"]


def test_refuses_empty_files_symlinks_and_bad_ids(tmp_path):
    work = make_workspace(tmp_path)
    with pytest.raises(SubmitError, match="student id"):
        submit("../evil", work, tmp_path)
    (work / "results.json").write_text("")
    with pytest.raises(SubmitError, match="results.json is empty"):
        submit("s1", work, tmp_path)
    (work / "results.json").unlink()
    (work / "results.json").symlink_to("/etc/passwd")
    with pytest.raises(SubmitError, match="symbolic link"):
        submit("s1", work, tmp_path)


def test_cli_prints_the_refusal(tmp_path, capsys):
    assert main(["--student", "s1", "--work-dir", str(tmp_path / "nowhere"), "--out", str(tmp_path)]) == 2
    assert "does not exist" in capsys.readouterr().err
    work = make_workspace(tmp_path)
    assert main(["--student", "s1", "--work-dir", str(work), "--out", str(tmp_path)]) == 0
    assert "wrote" in capsys.readouterr().out


def test_cli_names_the_lessons_still_to_run_and_warns_about_an_unfinished_exercise(tmp_path, capsys):
    work = make_workspace(tmp_path)
    assert main(["--student", "s1", "--work-dir", str(work), "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "not in the workspace yet, so the grader will score the checks that need them 0" in out
    lessons = re.findall(r"^  lesson (\d\d): ", out, re.M)
    assert lessons == ["01", "04", "05", "06", "07", "08", "09", "10"] and "  lesson 04: growth.json\n" in out
    assert "warning" not in out
    (work / "calibration_reader.py").write_text(f"class DigitReader:\n    def get_next(self):\n        {STUB}\n")
    assert main(["--student", "s1", "--work-dir", str(work), "--out", str(tmp_path)]) == 0
    assert "warning: calibration_reader.py still holds `raise NotImplementedError`" in capsys.readouterr().out


def test_default_workspace_is_found_from_the_notebooks_folder(tmp_path):
    kit = tmp_path / "kit"
    (kit / "notebooks").mkdir(parents=True)
    assert default_workspace(kit / "notebooks", kit) == kit / "notebooks" / "workspace"  # nothing yet: says so
    (kit / "workspace").mkdir()
    assert default_workspace(kit / "notebooks", kit) == kit / "workspace"  # a JupyterLab terminal starts here
    assert default_workspace(kit, kit) == kit / "workspace"
    (kit / "notebooks" / "workspace").mkdir()
    assert default_workspace(kit / "notebooks", kit) == kit / "notebooks" / "workspace"  # the one here wins


def test_a_file_over_the_contracts_cap_is_refused(tmp_path):
    """The cap is lab.contract's, the one the grader's intake applies too."""
    work = make_workspace(tmp_path)
    with open(work / "results.json", "r+b") as f:
        f.truncate(contract.MAX_FILE_BYTES + 1)  # sparse: no 32 MiB written
    with pytest.raises(SubmitError, match=r"results.json is 32 MiB; the grader takes files up to 32 MiB"):
        submit("s1", work, tmp_path / "out")


def test_hand_in_from_a_cell_packs_the_workspace_the_lessons_used_into_the_students_folder(tmp_path, monkeypatch,
                                                                                           capsys):
    """``lab.hand_in()`` in a lesson: the kit's workspace (as ``WORK_DIR = "../workspace"`` resolves), the id lesson 00
    recorded, the zip beside the lessons, and exactly what is missing."""
    import lab
    from lab import workspace

    kit = tmp_path / "kit"
    (kit / "notebooks").mkdir(parents=True)
    (kit / ".calibration-lab-kit").write_text("")
    (kit / "workspace").mkdir()
    workspace.record_student(kit / "workspace", "s-042")  # lesson 00, before any lesson writes
    work = kit / "workspace"
    for rel in contract.files("required"):
        (work / rel).write_text(f"content of {rel}\n")
    (work / "right.onnx").unlink()
    monkeypatch.delenv(workspace.ENV_WORK_DIR, raising=False)
    monkeypatch.chdir(kit / "notebooks")
    path = lab.hand_in()
    assert path == kit.resolve() / "s-042.zip" and path.is_file()
    out = capsys.readouterr().out
    assert out.startswith(f"wrote {path} (") and f"from {work.resolve()}" in out
    assert "  lesson 03: right.onnx\n" in out
    with zipfile.ZipFile(path) as zf:
        assert json.loads(zf.read("submission.json"))["variant"] == "s-042"
    monkeypatch.setenv(workspace.ENV_WORK_DIR, str(tmp_path / "elsewhere"))
    with pytest.raises(SubmitError, match="no student id"):
        lab.hand_in()


def test_hand_in_from_a_shared_read_only_kit_writes_beside_the_students_workspace(tmp_path, monkeypatch, capsys):
    """On a hub a lesson may be opened from the shared kit (root's, read-only): ``LAB_WORK_DIR`` puts the workspace
    in the student's home, and the zip goes beside it, never into the kit."""
    import lab
    from lab import workspace

    kit = tmp_path / "opt" / "kit"
    (kit / "notebooks").mkdir(parents=True)
    (kit / ".calibration-lab-kit").write_text("")
    work = tmp_path / "home" / "calibration-lab" / "workspace"
    work.mkdir(parents=True)
    workspace.record_student(work, "s-007")
    for rel in contract.files("required"):
        (work / rel).write_text(f"content of {rel}\n")
    monkeypatch.setenv(workspace.ENV_WORK_DIR, str(work))
    monkeypatch.chdir(kit / "notebooks")
    path = lab.hand_in()
    assert path == work.parent.resolve() / "s-007.zip" and path.is_file()
    assert not list(kit.glob("*.zip"))


def test_the_zip_records_the_family_the_workspace_was_computed_as_not_the_packing_process(tmp_path, monkeypatch):
    """A workspace made as one family and packed where the other is computed is graded as the one it holds."""
    work = make_workspace(tmp_path)
    other = next(f for f in kernels.FAMILIES if f != kernels.machine_family())
    (work / workspace.FAMILY_FILE).write_text(json.dumps({"family": other}))
    monkeypatch.delenv(kernels.ENV_VAR, raising=False)
    with zipfile.ZipFile(submit("s-001", work, tmp_path / "out")) as zf:
        assert json.loads(zf.read("submission.json"))["kernel_family"] == other
        assert workspace.FAMILY_FILE not in zf.namelist()
