"""``python -m lab run`` on small lessons written here: parameters, the build folder, the summary,
and a failure that names the notebook and the cell and keeps the partial output."""
from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from lab import tables
from lab.tools import run


def lesson(*sources: str,
           parameters: str = 'WORK_DIR = "../workspace"\nSEED = 0\nINTERACTIVE = True') -> nbformat.NotebookNode:
    cells = [new_markdown_cell("You will be able to ..."), new_code_cell("import lab, json, pathlib")]
    if parameters is not None:
        cells.append(new_code_cell(parameters, metadata={"tags": ["parameters"]}))
    cells += [new_code_cell(s) for s in sources]
    nb = new_notebook(cells=cells)
    nb.metadata.kernelspec = {"name": "calibration-lab", "display_name": "Calibration Lab", "language": "python"}
    return nb


@pytest.fixture
def lessons(tmp_path) -> Path:
    """Two lessons that pass a number through the workspace, and a third that fails in cell 4."""
    src = tmp_path / "notebooks"
    src.mkdir()
    nbformat.write(lesson(
        'w = pathlib.Path(WORK_DIR)\nw.mkdir(parents=True, exist_ok=True)\nassert INTERACTIVE is False\n'
        '(w / "results.json").write_text(json.dumps({"schema": "results/1", "sets": {"right": '
        '{"max_abs_error": 0.104166, "accuracy": 0.975}}}))',
        parameters='WORK_DIR = "../workspace"\nSEED = 0\nINTERACTIVE = True\nMAX_BATCHES = 512'),
        src / "00_first.ipynb")
    nbformat.write(lesson(
        'r = json.loads((pathlib.Path(WORK_DIR) / "results.json").read_text())\n'
        'assert r["sets"]["right"]["accuracy"] == 0.975'), src / "01_second.ipynb")
    nbformat.write(lesson("x = 1", "y = 1 / 0", "z = 3"), src / "02_broken.ipynb")
    (src / "notes.ipynb").write_text("not a lesson: the glob needs NN_")
    return src


def test_discover_finds_lessons_in_order_and_select_picks_by_number(lessons):
    found = run.discover(lessons)
    assert [p.name for p in found] == ["00_first.ipynb", "01_second.ipynb", "02_broken.ipynb"]
    assert [p.name for p in run.select(found, "2, 00")] == ["00_first.ipynb", "02_broken.ipynb"]
    with pytest.raises(ValueError, match="no lesson numbered 07 .have 00, 01, 02."):
        run.select(found, "01,07")


def test_only_declared_parameters_are_injected(lessons):
    declared = run.declared_parameters(lessons / "01_second.ipynb")
    assert declared == {"WORK_DIR": "../workspace", "SEED": 0, "INTERACTIVE": True}
    params = run.lesson_parameters(declared, Path("/ws"), {"MAX_BATCHES": 16, "SEED": 3})
    assert params == {"WORK_DIR": "/ws", "INTERACTIVE": False, "SEED": 3}
    assert run.declared_parameters(lesson("x = 1", parameters=None)) == {}


@pytest.mark.parametrize("text, value",
                         [("16", 16), ("0.5", 0.5), ("False", False), ("None", None), ("narrow", "narrow")])
def test_parameter_values_parse_like_papermill(text, value):
    assert run.parse_value(text) == value and type(run.parse_value(text)) is type(value)


def test_summary_shows_each_lessons_numbers_tolerantly(tmp_path):
    (tmp_path / "release").mkdir()
    (tmp_path / "results.json").write_text(json.dumps({
        "schema": "results/1",
        "sets": {"narrow": {"range_seen": 0.25, "calibration_range": 0.25, "max_abs_error": 0.98233,
                            "accuracy": 0.8475, "diagnosis": "clipping"}},
        "dynamic": {"max_abs_error": 0.042, "accuracy": 0.975}}))
    (tmp_path / "release" / "scenarios.json").write_text("{not json")
    (tmp_path / "toolbox.json").write_text(json.dumps({"choice": "not an object"}))
    lines = run.summarize_workspace(tmp_path)
    assert lines[0] == "03 narrow / right / wide  (results.json)"
    assert lines[2].split() == ["narrow", "0.2500", "0.2500", "0.9823", "0.8475", "clipping"]
    assert lines[3].split() == ["dynamic", "0.0420", "0.9750"]
    assert lines[4] == "07 the deployed representation  (release/scenarios.json)"
    assert lines[5].startswith("  (unreadable:")
    assert lines[6] == "09 choosing a recipe  (toolbox.json)" and lines[7].startswith("  (unexpected layout:")
    assert not any("growth" in line for line in lines)  # lessons that wrote nothing are left out


def test_timing_table_marks_the_slowest():
    runs = [run.LessonRun("00_a.ipynb", "o", 1.0), run.LessonRun("01_b.ipynb", "o", 3.5, "cell 2 ...", 2, "ValueError")]
    table = run.timing_table(runs)
    assert table[2] == "01_b.ipynb       3.5  FAILED  <- slowest"
    assert table[-1].split() == ["total", "4.5"]
    assert table[0] == "lesson       seconds  status"


def test_a_table_column_places_its_heading_as_its_values():
    columns = [("set", "<7"), ("scale", ">10.6f"), ("share", ">7.1%"), ("note", "")]
    assert tables.placement(">10.6f") == ">10" and tables.placement(".4f") == "" and tables.placement("*^9") == "*^9"
    head = tables.header(columns)
    assert head == "set          scale   share note" and tables.rule(head) == "-" * len(head)
    assert tables.row(["narrow", 0.00392157, 0.5, "clips"], columns) == "narrow    0.003922   50.0% clips"
    assert tables.row(["total", 1.0], columns, "  ") == "total      1.000000"  # fewer values: the rest left out
    text = tables.format_rows([{"a": "x", "b": 1.23456, "c": None}, {"a": "longer", "b": 10.0, "c": [1, 2.5]}],
                              [("a", "name", ""), ("b", "value", ".3f"), ("c", "list", "")])
    assert text.splitlines() == ["name     value  list", "--------------------", "x        1.235  -",
                                 "longer  10.000  [1, 2.5]"]


@pytest.mark.slow
def test_run_writes_executed_copies_and_summarizes(lessons, tmp_path, capsys):
    work, out = tmp_path / "ws", tmp_path / "build"
    code = run.main(["--notebooks", str(lessons), "--work-dir", str(work), "--out", str(out),
                     "--only", "00,01", "-p", "MAX_BATCHES", "16"])
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert sorted(p.name for p in out.glob("*.ipynb")) == ["00_first.ipynb", "01_second.ipynb"]
    executed = nbformat.read(out / "00_first.ipynb", as_version=4)
    injected = [c for c in executed.cells if "injected-parameters" in c.metadata.get("tags", [])]
    assert len(injected) == 1 and f"WORK_DIR = \"{work}\"" in injected[0].source
    assert "MAX_BATCHES = 16" in injected[0].source
    assert "MAX_BATCHES" not in next(c for c in nbformat.read(out / "01_second.ipynb", as_version=4).cells
                                     if "injected-parameters" in c.metadata.get("tags", [])).source
    assert not any(c.get("outputs") for c in nbformat.read(lessons / "00_first.ipynb", as_version=4).cells)
    assert "03 narrow / right / wide  (results.json)\n" in printed
    assert any(line.split() == ["right", "-", "-", "0.1042", "0.9750", "-"] for line in printed.splitlines())
    assert "00_first.ipynb" in printed.split("Wall time per lesson")[1]
    log = json.loads((out / run.RUN_LOG).read_text())
    assert [r["notebook"] for r in log["lessons"]] == ["00_first.ipynb", "01_second.ipynb"]


@pytest.mark.slow
def test_a_failure_names_notebook_and_cell_keeps_partial_output_and_exits_nonzero(lessons, tmp_path, capsys):
    out = tmp_path / "build"
    nbformat.write(lesson("x = 1"), lessons / "03_after.ipynb")
    (tmp_path / "ws").mkdir()  # an earlier run left lesson 08's numbers: they are not this run's
    (tmp_path / "ws" / "toolbox.json").write_text(json.dumps({"choice": {"settings": {}}}))
    nbformat.write(lesson("x = 1", "y = 2\nz = 1 / 0\nw = 3"), lessons / "02_broken.ipynb")
    code = run.main(["--notebooks", str(lessons), "--work-dir", str(tmp_path / "ws"), "--out", str(out)])
    printed = capsys.readouterr()
    err = printed.err
    assert code == 1
    assert "FAILED: 02_broken.ipynb, cell 4 (In [" in err and "raised ZeroDivisionError: division by zero" in err
    assert "line 2: z = 1 / 0" in err, err  # the statement that raised, not the cell's first line
    assert "09 choosing a recipe" not in printed.out and "the lessons that ran to the end this time" in printed.out
    assert "1 later lesson(s) not run" in err and not (out / "03_after.ipynb").exists()
    partial = nbformat.read(out / "02_broken.ipynb", as_version=4)
    ran = [c for c in partial.cells if c.cell_type == "code" and c.source == "x = 1"]
    assert ran and ran[0].execution_count is not None
    failed = json.loads((out / run.RUN_LOG).read_text())["lessons"][-1]
    assert (failed["failed_cell"], failed["ename"]) == (4, "ZeroDivisionError")


def test_a_failure_shows_every_line_of_a_checks_message(lessons, tmp_path, capsys):
    """A check that names each broken rule on its own line: every line reaches the terminal, not only the first."""
    nbformat.write(lesson("x = 1", 'raise ValueError("not released:\\n- calibration: attractive\\n- per_channel")'),
                   lessons / "02_broken.ipynb")
    assert run.main(["--notebooks", str(lessons), "--work-dir", str(tmp_path / "ws"), "--out",
                     str(tmp_path / "build")]) == 1
    err = capsys.readouterr().err
    assert "raised ValueError: not released:" in err and "- calibration: attractive" in err and "- per_channel" in err


def test_the_kernel_log_keeps_every_line_but_the_unencrypted_tcp_warning(tmp_path):
    import os

    read, write = os.pipe()
    with os.fdopen(write, "wb") as w:
        w.write(b"[IPKernelApp] WARNING | Kernel is running over TCP without encryption. All communication ...\n"
                b"Traceback: the kernel died\n")
    run.copy_kernel_stderr(os.fdopen(read, "rb"), tmp_path / "kernel.log")
    assert (tmp_path / "kernel.log").read_bytes() == b"Traceback: the kernel died\n"


@pytest.mark.slow
def test_a_headless_run_shows_no_unencrypted_tcp_warning(lessons, tmp_path, capfd):
    out = tmp_path / "build"
    code = run.main(["--notebooks", str(lessons), "--work-dir", str(tmp_path / "ws"), "--out", str(out),
                     "--only", "00"])
    printed = capfd.readouterr()
    assert code == 0, printed
    assert "without encryption" not in printed.out + printed.err
    assert "without encryption" not in (out / run.KERNEL_LOG).read_text()
    executed = nbformat.read(out / "00_first.ipynb", as_version=4)
    assert "without encryption" not in json.dumps(executed)


def test_bad_arguments_exit_2_without_running(lessons, tmp_path, capsys):
    assert run.main(["--notebooks", str(lessons), "--out", str(lessons)]) == 2
    assert "never go over the sources" in capsys.readouterr().err
    assert run.main(["--notebooks", str(lessons), "--out", str(tmp_path / "o"), "-p", "MAX_BATHCES", "4"]) == 2
    assert "MAX_BATHCES: no selected lesson declares it" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_grade_hook_names_what_an_unfinished_workspace_lacks(tmp_path):
    from instructor import workbook
    from lab.tools.submit import SubmitError

    with pytest.raises(SubmitError, match="holds none of the files the lessons write"):
        workbook.grade_workspace(tmp_path)


@pytest.mark.slow
def test_a_cell_over_the_time_limit_is_named(tmp_path, capsys):
    src = tmp_path / "notebooks"
    src.mkdir()
    nbformat.write(lesson("import time", "time.sleep(60)"), src / "00_slow.ipynb")
    code = run.main(["--notebooks", str(src), "--work-dir", str(tmp_path / "ws"), "--out", str(tmp_path / "b"),
                     "--timeout", "2"])
    assert code == 1
    assert "FAILED: 00_slow.ipynb, cell 4 (time.sleep(60)): CellTimeoutError" in capsys.readouterr().err


@pytest.mark.slow
def test_the_executed_copy_is_rewritten_sparsely_while_it_runs_and_whole_at_the_end(tmp_path):
    """papermill rewrites the copy before and after every cell; the lab's engine at most every SAVE_EVERY_S
    seconds. A cell that reads its own executed copy from disk sees none of the earlier cells' outputs yet;
    the copy written at the end holds every output."""
    src, out = tmp_path / "notebooks", tmp_path / "build"
    src.mkdir()
    peek = (f'on_disk = json.loads(pathlib.Path({str(out / "00_peek.ipynb")!r}).read_text())\n'
            'print("outputs on disk:", sum(bool(c.get("outputs")) for c in on_disk["cells"]))')
    nbformat.write(lesson('print("first")', 'print("second")', peek), src / "00_peek.ipynb")
    result = run.run_lesson(src / "00_peek.ipynb", out, {"WORK_DIR": str(tmp_path / "ws")}, cwd=src)
    assert result.ok, result
    cells = nbformat.read(out / "00_peek.ipynb", as_version=4).cells
    printed = ["".join(o.get("text", "") for o in c.get("outputs", [])) for c in cells if c.cell_type == "code"]
    assert printed[-3:] == ["first\n", "second\n", "outputs on disk: 0\n"], printed
