"""The workspace never touches the fixtures, and says clearly when it cannot be written."""
import pytest

from lab import data, workspace
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
