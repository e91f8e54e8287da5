"""The workspace never touches the fixtures, and says clearly when it cannot be written."""
import contextvars
import json

import pytest

from lab import data, kernels, workspace
from lab.errors import WorkspaceError


def test_make_workspace_copies_the_source(tmp_path):
    work = workspace.make_workspace(tmp_path / "ws")
    assert data.file_sha256(work / "source.onnx") == data.manifest()["fp32.onnx"]


def test_a_drifted_source_is_copied_again(tmp_path):
    work = workspace.make_workspace(tmp_path)
    (work / "source.onnx").write_bytes(b"edited")
    workspace.make_workspace(tmp_path)
    assert data.file_sha256(work / "source.onnx") == data.manifest()["fp32.onnx"]


def test_workspace_that_is_a_file_is_named(tmp_path):
    target = tmp_path / "taken"
    target.write_text("not a folder")
    with pytest.raises(WorkspaceError, match="WORK_DIR .*taken.* cannot be written"):
        workspace.make_workspace(target)


def test_load_module_reads_fresh_and_names_missing_files(tmp_path):
    (tmp_path / "mod.py").write_text("VALUE = 1\n")
    assert workspace.load_module(tmp_path, "mod").VALUE == 1
    (tmp_path / "mod.py").write_text("VALUE = 2\n")
    assert workspace.load_module(tmp_path, "mod").VALUE == 2
    with pytest.raises(WorkspaceError, match="absent.py does not exist"):
        workspace.load_module(tmp_path, "absent")


def test_load_module_names_the_line_of_a_broken_module(tmp_path):
    """A student's metrics.py that does not parse, or raises while importing, is one line naming file and line."""
    (tmp_path / "metrics.py").write_text("def summarize(p, l):\nreturn {}\n")
    with pytest.raises(WorkspaceError, match=r"^metrics.py line 2: IndentationError: expected an indented block"):
        workspace.load_module(tmp_path, "metrics")
    (tmp_path / "metrics.py").write_text("import numpy\nLIMIT = undefined_name\n")
    with pytest.raises(WorkspaceError,
                       match=r"^importing metrics.py raised NameError on line 2: name 'undefined_name'"):
        workspace.load_module(tmp_path, "metrics")


def test_atomic_write_replaces_whole_file(tmp_path):
    path = workspace.atomic_write_text(tmp_path / "a" / "b.json", "{}")
    assert path.read_text() == "{}" and not [p for p in path.parent.iterdir() if p.name.startswith(".")]


def test_missing_reader_points_to_lesson_02(tmp_path):
    with pytest.raises(WorkspaceError, match="lesson 02"):
        workspace.student_reader(tmp_path)
    (tmp_path / "calibration_reader.py").write_text("X = 1\n")
    with pytest.raises(WorkspaceError, match="no class DigitReader"):
        workspace.student_reader(tmp_path)


# --- where the workspace is, and the modes of what it holds ------------------------------------------

@pytest.fixture
def kit(tmp_path, monkeypatch):
    """A kit as ``make kit`` writes it (notebooks/ and its marker), with no LAB_WORK_DIR and not on Colab."""
    root = tmp_path / "kit"
    (root / "notebooks" / "sub").mkdir(parents=True)
    (root / ".calibration-lab-kit").write_text("")
    monkeypatch.delenv(workspace.ENV_WORK_DIR, raising=False)
    monkeypatch.delenv("COLAB_RELEASE_TAG", raising=False)
    return root


@pytest.mark.parametrize("start", [".", "notebooks", "notebooks/sub"])
def test_a_relative_work_dir_is_read_against_the_kits_notebooks_wherever_the_kernel_starts(kit, monkeypatch, start):
    monkeypatch.chdir(kit / start)
    assert workspace.kit_root() == kit.resolve()
    assert workspace.resolve_work_dir("../workspace") == (kit / "workspace").resolve()


def test_lab_work_dir_wins_and_an_absolute_work_dir_stays(kit, monkeypatch, tmp_path):
    monkeypatch.chdir(kit / "notebooks")
    assert workspace.resolve_work_dir(tmp_path / "mine") == tmp_path / "mine"
    monkeypatch.setenv(workspace.ENV_WORK_DIR, str(tmp_path / "hub" / "workspace"))
    assert workspace.resolve_work_dir("../workspace") == tmp_path / "hub" / "workspace"
    assert workspace.make_workspace("../workspace") == tmp_path / "hub" / "workspace"


def test_a_tilde_in_lab_work_dir_is_each_users_home(kit, monkeypatch, tmp_path):
    """A hub's kernel.json sets ``LAB_WORK_DIR=~/calibration-lab/workspace`` for every user; kernel.json expands no
    ``~``, so the lab does, from the kernel's own ``HOME``."""
    monkeypatch.chdir(kit / "notebooks")
    monkeypatch.setenv(workspace.ENV_WORK_DIR, "~/calibration-lab/workspace")
    for user in ("s1", "s2"):
        monkeypatch.setenv("HOME", str(tmp_path / "home" / user))
        assert workspace.resolve_work_dir("../workspace") == tmp_path / "home" / user / "calibration-lab" / "workspace"


def test_outside_a_kit_colab_keeps_the_workspace_under_content(tmp_path, monkeypatch):
    monkeypatch.delenv(workspace.ENV_WORK_DIR, raising=False)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("COLAB_RELEASE_TAG", raising=False)
    assert workspace.resolve_work_dir("../workspace") == (tmp_path / "../workspace").resolve()
    monkeypatch.setenv("COLAB_RELEASE_TAG", "release-colab-test")
    assert workspace.resolve_work_dir("../workspace") == workspace.COLAB_ROOT / "workspace"


@pytest.mark.parametrize("mask, mode", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_files_get_the_umasks_mode(tmp_path, mask, mode):
    import os
    import stat

    old = os.umask(mask)
    try:
        path = workspace.atomic_write_text(tmp_path / "report.json", "{}\n")
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == mode


def test_a_folder_without_write_permission_says_permission_denied(tmp_path):
    import os

    if os.geteuid() == 0:
        pytest.skip("root writes everywhere: no permission to deny")
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    with pytest.raises(WorkspaceError, match="permission denied"):
        workspace.make_workspace(locked / "workspace")


def _in_own_context(fn, *args):
    """Run ``fn`` in a copy of the context: a pinned family must not outlive the test."""
    return contextvars.copy_context().run(fn, *args)


def test_the_first_lesson_records_the_family_and_later_lessons_compute_as_it(tmp_path, monkeypatch, capsys):
    """A Colab runtime or hub node can change CPU between sessions: the workspace keeps computing as its family."""
    monkeypatch.delenv(kernels.ENV_VAR, raising=False)
    here = kernels.machine_family()
    other = next(f for f in kernels.FAMILIES if f != here)

    def opened(work):
        workspace.make_workspace(work)
        return kernels.target_family()

    assert _in_own_context(opened, tmp_path / "mine") == here
    assert workspace.recorded_family(tmp_path / "mine") == here
    assert capsys.readouterr().out == ""
    (tmp_path / "moved").mkdir()
    (tmp_path / "moved" / workspace.FAMILY_FILE).write_text(json.dumps({"family": other}))
    assert _in_own_context(opened, tmp_path / "moved") == other
    assert f"computed as the {other} family" in capsys.readouterr().out
    assert kernels.target_family() == here  # nothing leaked out of the notebook's context


def test_an_explicit_family_wins_and_says_the_workspace_disagrees(tmp_path, monkeypatch, capsys):
    here = kernels.machine_family()
    other = next(f for f in kernels.FAMILIES if f != here)
    work = tmp_path / "ws"
    work.mkdir()
    (work / workspace.FAMILY_FILE).write_text(json.dumps({"family": here}))
    monkeypatch.setenv(kernels.ENV_VAR, other)
    assert _in_own_context(lambda: (workspace.make_workspace(work), kernels.target_family())[1]) == other
    assert f"records {here}, but {kernels.ENV_VAR}={other}" in capsys.readouterr().out
    (work / workspace.FAMILY_FILE).write_text(json.dumps({"family": "avx"}))
    with pytest.raises(WorkspaceError, match="kernel-family.json: field 'family' should be 'exact' or 'saturating'"):
        workspace.make_workspace(work)


def test_lesson_00_run_first_without_an_id_can_still_take_one(tmp_path, monkeypatch):
    """A student who ran lesson 00 once with STUDENT_ID empty has only its own records there: the id is taken."""
    monkeypatch.delenv(kernels.ENV_VAR, raising=False)
    work = _in_own_context(workspace.make_workspace, tmp_path / "ws")
    assert (work / workspace.FAMILY_FILE).exists()
    _in_own_context(workspace.make_workspace, work, "stu4711")
    assert workspace.recorded_student(work) == "stu4711"
    with pytest.raises(WorkspaceError, match="already holds narrow.onnx"):
        _reference_then_id(tmp_path / "ws3")


def _reference_then_id(work):
    _in_own_context(workspace.make_workspace, work)
    (work / "narrow.onnx").write_bytes(b"a model made with the reference data")
    _in_own_context(workspace.make_workspace, work, "stu4711")
