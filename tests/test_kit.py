"""The student kit: no solution text survives, it is byte-for-byte deterministic, it is built from committed
files only, it holds no held-out row, no instructor tool and no answer to a graded exercise, and the kit's
lessons run up to their first exercise and stop there with NotImplementedError."""
from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import numpy as np
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from instructor import kit as kit_builder
from instructor.kit import KitError
from lab.tools import run

LESSONS = run.discover()
NAMES = [nb.name for nb in LESSONS]


def notebook(*cells) -> nbformat.NotebookNode:
    nb = new_notebook(cells=list(cells))
    nb.metadata.kernelspec = {"name": "calibration-lab", "display_name": "Calibration Lab", "language": "python"}
    return nb


def region_lines(source: str, begin: str, end: str) -> list[str]:
    """The stripped, non-empty lines strictly inside every ``begin``..``end`` region."""
    inside, lines = False, []
    for line in source.splitlines():
        if begin in line:
            inside = True
        elif end in line:
            inside = False
        elif inside and line.strip():
            lines.append(line.strip())
    return lines


def secret_lines(nb: nbformat.NotebookNode) -> set[str]:
    """Lines that occur only inside solution or hidden-test regions of ``nb`` (not elsewhere in it)."""
    secret, public = set(), set()
    for cell in nb.cells:
        hidden = (region_lines(cell.source, kit_builder.BEGIN_SOLUTION, kit_builder.END_SOLUTION)
                  + region_lines(cell.source, kit_builder.BEGIN_HIDDEN, kit_builder.END_HIDDEN))
        secret.update(hidden)
        remaining = list(cell.source.splitlines())
        for line in hidden:
            for i, candidate in enumerate(remaining):
                if candidate.strip() == line:
                    del remaining[i]
                    break
        public.update(ln.strip() for ln in remaining if ln.strip())
    return secret - public


def kit_lines(nb: nbformat.NotebookNode) -> set[str]:
    return {ln.strip() for cell in nb.cells for ln in cell.source.splitlines()}


# --- the pipeline on small notebooks written here ----------------------------------------------

EXERCISE = notebook(
    new_markdown_cell("You will be able to write a reader."),
    new_code_cell("%%writefile {WORK_DIR}/reader.py\nclass R:\n    def get_next(self):\n"
                  "        ### BEGIN SOLUTION\n        secret_answer = 42\n        return secret_answer\n"
                  "        ### END SOLUTION\n", execution_count=3,
                  outputs=[nbformat.v4.new_output("stream", name="stdout", text="Writing reader.py\n")],
                  metadata={"nbgrader": {"solution": True, "grade_id": "reader"}, "tags": ["exercise"]}),
    new_code_cell("assert True\n### BEGIN HIDDEN TESTS\nassert hidden_check() == 7\n### END HIDDEN TESTS"),
    new_code_cell("### BEGIN HIDDEN TESTS\nassert only_hidden()\n### END HIDDEN TESTS"),
    new_markdown_cell("Why?\n### BEGIN SOLUTION\nBecause the ruler clips.\n### END SOLUTION"),
)


def test_solutions_become_stubs_at_their_indentation_inside_writefile_modules():
    out = kit_builder.student_notebook(nbformat.from_dict(EXERCISE), "notebooks/99_x.ipynb")
    code = out.cells[1].source
    assert code.splitlines()[-1] == "        " + kit_builder.CODE_STUB
    assert code.startswith("%%writefile {WORK_DIR}/reader.py")
    compile("\n".join(code.splitlines()[1:]), "reader.py", "exec")  # the written module still parses
    assert "secret_answer" not in code


def test_hidden_tests_go_and_a_cell_left_empty_goes_too():
    out = kit_builder.student_notebook(nbformat.from_dict(EXERCISE), "notebooks/99_x.ipynb")
    text = kit_builder.dumps(out)
    assert "hidden_check" not in text and "only_hidden" not in text
    assert [c.source for c in out.cells if c.cell_type == "code"][1] == "assert True"
    assert len(out.cells) == len(EXERCISE.cells) - 1


def test_markdown_solutions_become_your_answer_here():
    out = kit_builder.student_notebook(nbformat.from_dict(EXERCISE), "notebooks/99_x.ipynb")
    assert out.cells[-1].source == "Why?\nYOUR ANSWER HERE"


def test_outputs_counts_and_instructor_metadata_are_cleared():
    nb = nbformat.from_dict(EXERCISE)
    nb.metadata["nbgrader"] = {"__altered__": False}
    nb.metadata["papermill"] = {"parameters": {}}
    out = kit_builder.student_notebook(nb, "notebooks/99_x.ipynb")
    cell = out.cells[1]
    assert cell.outputs == [] and cell.execution_count is None
    assert cell.metadata == {"tags": ["exercise"]}
    assert set(out.metadata) == {"kernelspec"}
    nbformat.validate(out)


@pytest.mark.parametrize("source, expected", [
    ("x = 1\n### BEGIN SOLUTION\ny = 2", "cell 1: '### BEGIN SOLUTION' on line 2 has no '### END SOLUTION' after it"),
    ("y = 2\n### END SOLUTION", "cell 1: '### END SOLUTION' on line 2 has no '### BEGIN SOLUTION' before it"),
    ("### BEGIN SOLUTION\n### BEGIN SOLUTION\n### END SOLUTION", "cell 1: '### BEGIN SOLUTION' on line 2 comes before"),
    ("### BEGIN HIDDEN TESTS\nassert x", "cell 1: '### BEGIN HIDDEN TESTS' on line 1 has no '### END HIDDEN TESTS'"),
])
def test_unbalanced_markers_name_the_notebook_and_cell(source, expected):
    nb = notebook(new_markdown_cell("You will be able to ..."), new_code_cell(source))
    with pytest.raises(KitError) as info:
        kit_builder.student_notebook(nb, "notebooks/42_broken.ipynb")
    assert str(info.value).startswith("notebooks/42_broken.ipynb, " + expected)


def test_the_builder_refuses_a_folder_that_is_not_an_earlier_kit(tmp_path):
    (tmp_path / "precious.txt").write_text("keep me")
    with pytest.raises(KitError, match="not an earlier kit"):
        kit_builder.build_kit(tmp_path)
    assert (tmp_path / "precious.txt").read_text() == "keep me"


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.org", *args],
                          check=True, capture_output=True, text=True).stdout


def small_repo(root: Path, notebooks: dict[str, nbformat.NotebookNode]) -> Path:
    """A git checkout with what the kit builder reads: README, requirements, a lab package, fixtures, notebooks."""
    repo = root / "repo"
    (repo / "notebooks").mkdir(parents=True)
    (repo / "lab").mkdir()
    (repo / "fixtures").mkdir()
    (repo / "README.md").write_text("# Kit\n\nPitch.\n\n## For students\n\nRun the lessons.\n")
    (repo / "requirements.txt").write_text("numpy==2.0\n# tests\npytest\n")
    (repo / "lab" / "__init__.py").write_text("")
    (repo / "lab" / "graph.py").write_text("COMMITTED = True\n")
    (repo / "fixtures" / "build.py").write_text("# rebuilds every split from its seed\n")
    (repo / "fixtures" / "manifest.json").write_text('{"heldout.npz": "aa", "fp32.onnx": "bb"}\n')
    for name, nb in notebooks.items():
        nbformat.write(nb, repo / "notebooks" / name)
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "kit sources")
    return repo


def test_cli_reports_a_broken_notebook_and_writes_nothing(tmp_path, capsys, monkeypatch):
    repo = small_repo(tmp_path, {"07_broken.ipynb": notebook(new_code_cell("### BEGIN SOLUTION\nx = 1"))})
    monkeypatch.setattr(kit_builder, "REPO", repo)
    assert kit_builder.main(["--out", str(tmp_path / "rel")]) == 1
    assert "notebooks/07_broken.ipynb, cell 0: '### BEGIN SOLUTION' on line 1" in capsys.readouterr().err
    assert not (tmp_path / "rel").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".rel.")], "staging folder left behind"


def test_the_kit_is_built_from_committed_files_only_and_names_what_it_left_out(tmp_path, capsys, monkeypatch):
    repo = small_repo(tmp_path, {"00_x.ipynb": notebook(new_markdown_cell("committed"))})
    (repo / "lab" / "graph.py").write_text("COMMITTED = False  # a local edit\n")
    (repo / "lab" / "scratch.py").write_text("untracked = True\n")
    nbformat.write(notebook(new_markdown_cell("edited, not committed")), repo / "notebooks" / "00_x.ipynb")
    monkeypatch.setattr(kit_builder, "REPO", repo)
    assert kit_builder.main(["--out", str(tmp_path / "kit")]) == 0
    out = tmp_path / "kit"
    assert (out / "lab" / "graph.py").read_text() == "COMMITTED = True\n"
    assert not (out / "lab" / "scratch.py").exists()
    assert "edited" not in (out / "notebooks" / "00_x.ipynb").read_text()
    err = capsys.readouterr().err
    assert "3 uncommitted change(s) are not in the kit: lab/graph.py, lab/scratch.py, notebooks/00_x.ipynb" in err
    # instructor tools and the held-out split stay out, and the manifest lists only what the kit holds
    assert not (out / "fixtures" / "build.py").exists()
    assert (out / "fixtures" / "manifest.json").read_text() == '{\n  "fp32.onnx": "bb"\n}\n'


def test_the_builder_refuses_a_folder_that_is_not_a_git_checkout(tmp_path):
    (tmp_path / "src").mkdir()
    with pytest.raises(KitError, match="committed files only"):
        kit_builder.build_kit(tmp_path / "out", repo=tmp_path / "src")
    assert not (tmp_path / "out").exists()


def test_the_safety_net_refuses_a_kit_holding_a_heldout_row(tmp_path):
    source, kit = tmp_path / "src", tmp_path / "kit"
    (source / "fixtures").mkdir(parents=True)
    (kit / "fixtures").mkdir(parents=True)
    raw = np.arange(3 * 64, dtype=np.uint8).reshape(3, 64) % 17
    np.savez(source / "fixtures" / "heldout.npz", raw=raw, labels=np.array([1, 2, 3]), index=np.array([7, 8, 9]))
    np.savez(kit / "fixtures" / "evaluation.npz", raw=raw[1:2] + 0, labels=np.array([1, 2, 3]), index=np.array([1]))
    with pytest.raises(KitError, match=r"fixtures/evaluation.npz:raw \(1 rows\)"):
        kit_builder.check_kit(kit, source)
    np.savez(kit / "fixtures" / "evaluation.npz", pixels=(raw[2:] / 16).astype(np.float32), labels=np.array([1]))
    with pytest.raises(KitError, match="evaluation.npz:pixels"):
        kit_builder.check_kit(kit, source)
    np.savez(kit / "fixtures" / "evaluation.npz", raw=raw[:1] + 1, labels=np.array([1, 2, 3]), index=np.array([1]))
    kit_builder.check_kit(kit, source)  # labels alone (digits every split shares) are no leak


# --- the real lessons -------------------------------------------------------------------------

@pytest.fixture(scope="module")
def commit() -> str:
    """The commit every kit in this module is built from (HEAD may move while the tests run)."""
    return kit_builder.commit_of(kit_builder.REPO, "HEAD")


@pytest.fixture(scope="module")
def student_kit(tmp_path_factory, commit) -> Path:
    return kit_builder.build_kit(tmp_path_factory.mktemp("kit") / "student", rev=commit)


def tree_bytes(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_student_kit_has_the_package_and_fixtures_but_no_grader_tests_or_benchmarks(student_kit):
    top = {p.name for p in student_kit.iterdir()}
    assert {"lab", "fixtures", "notebooks", "requirements.txt", "pyproject.toml", "Makefile"} <= top
    assert not {"grader", "tests", "benchmarks", ".git", ".venv", "workspace", "build"} & top
    assert (student_kit / "lab" / "__init__.py").exists() and (student_kit / "fixtures" / "fp32.onnx").exists()
    assert not [p for p in student_kit.rglob("*") if p.name in {"__pycache__", ".ipynb_checkpoints"}]
    assert sorted(p.name for p in (student_kit / "notebooks").glob("*.ipynb")) == sorted(NAMES)


def test_student_kit_makefile_readme_and_requirements_are_written_for_students(student_kit):
    import re
    import subprocess

    makefile = (student_kit / "Makefile").read_text()
    targets = set(re.findall(r"^([a-z-]+):", makefile, re.M))
    assert {"setup", "jupyter", "lab", "submit", "clean"} <= targets
    assert not {"test", "bench", "fixtures", "kit"} & targets  # no tests/, benchmarks/ or sources in the kit
    assert "-m lab run\n" in makefile and "rm -rf build\n" in makefile  # clean never touches workspace/
    assert "--ServerApp.root_dir=. " in makefile  # JupyterLab shows notebooks/, docs/ and workspace/
    assert (student_kit / "notebooks" / "Makefile").read_text() == kit_builder.NOTEBOOKS_MAKEFILE
    readme = (student_kit / "README.md").read_text()
    assert "## For students" in readme and "make submit STUDENT=YOUR_ID" in readme
    assert "For instructors" not in readme and "-m grader" not in readme and "make test" not in readme
    reqs = (student_kit / "requirements.txt").read_text()
    repo_pins = [ln for ln in (kit_builder.REPO / "requirements.txt").read_text().splitlines()
                 if ln.startswith(("onnx", "numpy"))]
    assert repo_pins and all(pin in reqs.splitlines() for pin in repo_pins)
    assert "pytest" not in reqs and "playwright" not in reqs and "jupyterhub" not in reqs and "-e ." in reqs
    assert "jupyterlab_widgets==" in reqs  # a hub's JupyterLab needs it; the kernel's venv has it with ipywidgets
    assert "LAB_WORK_DIR" in (student_kit / "docs" / "hub.md").read_text()  # the course on a hub, for students
    if shutil.which("make"):
        for target in (["lab"], ["submit", "STUDENT=s1"], ["help"]):
            dry = subprocess.run(["make", "-n", *target], cwd=student_kit, capture_output=True, text=True)
            assert dry.returncode == 0, dry.stderr
        refused = subprocess.run(["make", "submit"], cwd=student_kit, capture_output=True, text=True)
        assert refused.returncode != 0 and "usage: make submit STUDENT=YOUR_ID" in refused.stdout
        assert not (student_kit / ".venv").exists()  # refused before setting anything up


def test_the_kit_is_byte_for_byte_deterministic(student_kit, commit, tmp_path):
    again = kit_builder.build_kit(tmp_path / "again", rev=commit)
    first, second = tree_bytes(student_kit), tree_bytes(again)
    assert sorted(first) == sorted(second)
    assert [k for k in first if first[k] != second[k]] == [], "files differ between two builds"
    assert kit_builder.build_kit(again, rev=commit) == again and tree_bytes(again) == second  # rebuilt in place


# --- hidden data stays hidden, no instructor tool, no answer --------------------------------------

def test_the_kit_holds_no_heldout_row_by_content_hash(student_kit, commit):
    """Every row of every array of every .npz in the kit, hashed, against every held-out row (raw pixels,
    deployed pixels and digit-set index), read from the commit the kit was built from."""
    from io import BytesIO

    from lab.data import preprocess, row_hashes

    blob = subprocess.run(["git", "-C", str(kit_builder.REPO), "show", f"{commit}:fixtures/heldout.npz"],
                          check=True, capture_output=True).stdout
    with np.load(BytesIO(blob)) as f:
        heldout = row_hashes(f["raw"]) | row_hashes(preprocess(f["raw"])) | row_hashes(f["index"])
        assert len(heldout) == 3 * len(f["raw"])
    npz = sorted(student_kit.rglob("*.npz"))
    assert {p.name for p in npz} >= {"calibration.npz", "evaluation.npz"} and "heldout.npz" not in {p.name for p in npz}
    rows = 0
    for path in npz:
        with np.load(path) as f:
            for key in f.files:
                if key == "labels" or not f[key].ndim:
                    continue
                rows += len(f[key])
                shared = row_hashes(f[key]) & heldout
                assert not shared, f"{path.relative_to(student_kit)}:{key} holds {len(shared)} held-out row(s)"
    assert rows >= 2 * (360 + 400)


# This venv has the project installed in editable mode; its finder would serve a module the kit lacks (such as
# instructor.kit) from the project. A student's kit has no such finder, so the kit's Python drops it.
KIT_ONLY = ("import sys\n"
            "sys.meta_path[:] = [f for f in sys.meta_path\n"
            "                    if 'Editable' not in getattr(f, '__name__', type(f).__name__)]\n")


def kit_python(kit: Path, code: str) -> subprocess.CompletedProcess:
    """Run ``code`` with the kit's own ``lab`` and nothing of the project's (as a student's kernel would)."""
    env = {**os.environ, "PYTHONPATH": str(kit)}
    return subprocess.run([sys.executable, "-c", KIT_ONLY + code], cwd=kit, env=env, capture_output=True, text=True,
                          timeout=120)


def test_the_kit_checks_its_fixtures_against_its_own_manifest(student_kit):
    proc = kit_python(student_kit, "import json, lab, lab.data as d\n"
                                "print(lab.__file__)\nprint(json.dumps(d.verify_fixtures()))")
    assert proc.returncode == 0, proc.stderr
    where, matches = proc.stdout.splitlines()
    assert Path(where).resolve().is_relative_to(student_kit.resolve())
    assert json.loads(matches) == {"bad-calibration.onnx": True, "calibration.npz": True, "evaluation.npz": True,
                                   "calibration-pool.npz": True,  # the students' variants draw from it
                                   "fp32.onnx": True, "cnn-calibration.npz": True, "cnn-evaluation.npz": True,
                                   "cnn-fp32.onnx": True}


def test_the_kit_has_no_instructor_tool_and_no_kit_command(student_kit):
    assert not (student_kit / "instructor").exists()  # the kit builder and the run-then-grade command
    assert not (student_kit / "fixtures" / "build.py").exists()  # it would rebuild the held-out split
    assert not (student_kit / "grader").exists() and not (student_kit / "tests").exists()
    assert "heldout.npz" not in (student_kit / "fixtures" / "README.md").read_text()
    proc = kit_python(student_kit, "import sys, lab.__main__ as m\nsys.exit(m.main(['kit', '--out', 'x']))")
    assert proc.returncode == 2 and "invalid choice: 'kit'" in proc.stderr
    assert not (student_kit / "x").exists()


def defined_names(path: Path) -> set[str]:
    return {n.name for n in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
            if isinstance(n, (ast.FunctionDef, ast.ClassDef))}


def test_the_kit_holds_no_answer_to_lesson_06s_exercise_and_measures_on_the_evaluation_split(student_kit):
    assert not [p.relative_to(student_kit).as_posix() for p in (student_kit / "lab").rglob("*.py")
                if "summarize" in defined_names(p)]
    proc = kit_python(student_kit, "import inspect\n"
                                "import lab.lessons.lesson06_accept_or_reject.acceptance as a\n"
                                "import lab.lessons.lesson09_choosing_a_recipe.choice as t\n"
                                "print(hasattr(a, 'summarize'))\n"
                                "print(inspect.signature(t.check_choice).parameters['split'].default)")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["False", "evaluation"]


def test_no_solution_text_survives_in_the_kit(student_kit):
    if not NAMES:
        pytest.skip("no lessons yet")
    checked = 0
    for path in LESSONS:
        secret = secret_lines(nbformat.read(path, as_version=4))
        out = nbformat.read(student_kit / "notebooks" / path.name, as_version=4)
        leaked = secret & kit_lines(out)
        assert not leaked, f"{path.name}: solution or hidden-test lines survive in the kit: {sorted(leaked)}"
        text = (student_kit / "notebooks" / path.name).read_text()
        for marker in ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS", "END HIDDEN TESTS"):
            assert marker not in text, f"{path.name}: marker {marker!r} survives"
        assert not any(c.get("outputs") for c in out.cells), f"{path.name}: outputs survive"
        checked += len(secret)
    if checked == 0:
        pytest.skip("no lesson has a solution region yet")


def first_stub_cell(nb: nbformat.NotebookNode) -> int | None:
    for index, cell in enumerate(nb.cells):
        if cell.cell_type == "code" and kit_builder.CODE_STUB in cell.source:
            return index
    return None


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_a_kit_lesson_stops_at_its_first_exercise_with_not_implemented(lesson_suite, student_kit, tmp_path, name):
    """Each of the kit's lessons runs in a workspace where the earlier lessons were done (a copy of the
    instructor's), so it reaches its own first exercise, and must stop there with NotImplementedError."""
    broken = [n for n, r in lesson_suite.runs.items() if n <= name and not r.ok]
    if broken:
        pytest.skip(f"the instructor's {broken[0]} does not run (test_notebooks reports why), "
                    f"so the kit's {name} has no workspace to start from")
    path = student_kit / "notebooks" / name
    nb = nbformat.read(path, as_version=4)
    work_dir = tmp_path / "ws"
    if lesson_suite.work_dir.exists():
        shutil.copytree(lesson_suite.work_dir, work_dir)
    params = run.lesson_parameters(run.declared_parameters(nb), work_dir, {"MAX_BATCHES": 16})
    result = run.run_lesson(path, tmp_path / "executed", params, timeout=600, cwd=path.parent)
    stub = first_stub_cell(nb)
    if stub is None:
        assert result.ok, f"the kit's {name} has no exercise, so it should run through: {result.error}"
        return
    assert not result.ok, f"the kit's {name} ran through although cell {stub} is a stub"
    assert result.ename == "NotImplementedError", \
        f"the kit's {name} should stop with NotImplementedError at its first exercise, got {result.error}"
    assert result.failed_cell is not None and result.failed_cell >= stub, \
        f"the kit's {name} failed at cell {result.failed_cell}, before its first exercise (cell {stub})"


# --- a kit written for students -----------------------------------------------------------------------

def test_the_kits_markdown_speaks_to_students_only(student_kit):
    assert kit_builder.instructor_words_in(student_kit) == {}
    readme = (student_kit / "README.md").read_text()
    fixtures = (student_kit / "fixtures" / "README.md").read_text()
    for text in (readme, fixtures):
        assert "batch-grades" not in text and "make fixtures" not in text and "tests/test_fixtures.py" not in text
    assert readme.startswith(kit_builder.STUDENT_INTRO) and "## For students" in readme
    assert "lesson 00 checks them" in fixtures and "| `fp32.onnx` |" in fixtures
    assert "<!--" not in readme + fixtures


def test_instructor_only_paragraphs_go_and_a_kit_that_still_names_a_tool_is_refused(tmp_path):
    text = ("# T\n\nFor all.\n\n<!-- instructor-only -->\nRun `make fixtures`.\n<!-- end instructor-only -->\n\n"
            "Also for all.\n")
    assert kit_builder.strip_instructor(text) == "# T\n\nFor all.\n\nAlso for all.\n"
    with pytest.raises(KitError, match="has no '<!-- end instructor-only -->' after it"):
        kit_builder.strip_instructor("<!-- instructor-only -->\nsecret\n")
    kit, source = tmp_path / "kit", tmp_path / "source"
    (kit / "fixtures").mkdir(parents=True)
    source.mkdir()
    (kit / "fixtures" / "README.md").write_text("Rebuild them with `make fixtures`.\n")
    with pytest.raises(KitError, match="fixtures/README.md says 'make fixtures'"):
        kit_builder.check_kit(kit, source)


@pytest.mark.skipif(not shutil.which("make"), reason="make is not installed")
def test_hand_in_works_from_the_notebooks_folder_as_the_readme_says(student_kit, tmp_path):
    """A JupyterLab terminal may start in notebooks/: the README's `make submit STUDENT=YOUR_ID` must work there."""
    kit = tmp_path / "kit"
    shutil.copytree(student_kit, kit)
    readme = (kit / "README.md").read_text()
    assert "`make submit STUDENT=YOUR_ID`, from the kit's folder or from `notebooks/`" in readme
    # The kit's .venv is this project's (set up already): make must not reinstall it.
    (kit / ".venv").symlink_to(kit_builder.REPO / ".venv")
    assert (kit / ".venv" / ".installed").exists(), "run `make setup` first"
    for name in ("requirements.txt", "pyproject.toml"):
        os.utime(kit / name, (0, 0))
    work = kit / "workspace"
    work.mkdir()
    (work / "calibration_reader.py").write_text("class DigitReader:\n    pass\n")
    (work / "results.json").write_text('{"schema": "results/1"}\n')
    done = subprocess.run(["make", "submit", "STUDENT=s-001"], cwd=kit / "notebooks", capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"wrote {kit / 's-001.zip'} (2 files from {work})" in done.stdout
    assert "  lesson 03: narrow.onnx, right.onnx, wide.onnx, dynamic.onnx\n" in done.stdout
    refused = subprocess.run(["make", "submit"], cwd=kit / "notebooks", capture_output=True, text=True, timeout=60)
    assert refused.returncode != 0 and "usage: make submit STUDENT=YOUR_ID" in refused.stdout


# --- the kit's lessons 06, 08 and 09 with a typical wrong answer: a message that names the mistake ----

KIT_CASES = {
    "06 summarize without the 0-9 rule": (
        "06_accept_or_reject", '%%writefile "{work}/metrics.py"',
        lambda s: s.replace("    for name, values in ((\"predictions\", predictions), (\"labels\", labels)):\n"
                            "        for i, value in enumerate(values):\n"
                            "            if value != int(value) or not 0 <= value < N_CLASSES:\n"
                            "                raise ValueError(f\"{name}[{i}] is {value}; expected a digit 0-9\")\n",
                            ""),
        "acceptance.check_summarize(", True,
        ("SummarizeCheckError", "raised IndexError (list index out of range) instead: a label outside 0-9 must "
                                "raise ValueError naming the bad value 10")),
    "06 summarize with a transposed matrix": (
        "06_accept_or_reject", '%%writefile "{work}/metrics.py"',
        lambda s: s.replace("confusion[int(actual)][int(predicted)] += 1",
                            "confusion[int(predicted)][int(actual)] += 1"),
        "acceptance.check_summarize(", True, ("the confusion matrix is transposed", "belongs in confusion[1][2]")),
    "06 PREDICTION names a setting that is not in the table": (
        "06_accept_or_reject", "PREDICTION = ", lambda s: 'PREDICTION = {"per_channel"}\n',
        "lab.predictions.record(work, families.PREDICTION", True,
        ("PredictionError", "a setting: expected one of 'candidate', 'reduce_range'", "got 'per_channel'")),
    "06 PREDICTION that misses a setting": (
        "06_accept_or_reject", "PREDICTION = ", lambda s: 'PREDICTION = {"reduce_range"}\n',
        "families.judge_saturating_settings(", False, ("prediction wrong", "NO  reduce_range", "no pair can saturate")),
    "08 MinMax through the stuck pixels": (
        "08_the_quantization_toolbox", "METHOD = ",
        lambda s: 'METHOD = "MinMax"\nOPTIONS = {}\nJUSTIFICATION = "MinMax keeps every value: ends at 12.5"\n',
        "outliers.check_input(", True, ("OutlierChoiceError", "input ruler: it ends at 12.5")),
    "08 Percentile's default": (
        "08_the_quantization_toolbox", "METHOD = ",
        lambda s: s.replace('OPTIONS = {"CalibPercentile": 99.9}', "OPTIONS = {}"),
        "outliers.check_input(", True, ("OutlierChoiceError", "input ruler: it ends at 12.49")),
    "08 symmetric MinMax, the trap the exercise names": (
        "08_the_quantization_toolbox", "METHOD = ",
        lambda s: s.replace('METHOD = "Percentile"', 'METHOD = "MinMax"').replace(
            'OPTIONS = {"CalibPercentile": 99.9}', 'OPTIONS = {"CalibTensorRangeSymmetric": True}'),
        "outliers.check_input(", True, ("OutlierChoiceError", "the Relus on its flags")),
    "08 the calibrator's option name": (
        "08_the_quantization_toolbox", "METHOD = ", lambda s: s.replace('OPTIONS = {"CalibPercentile": 99.9}',
                                                                         'OPTIONS = {"percentile": 99.9}'),
        "outliers.check_input(", True, ("OutlierChoiceError", "OPTIONS has ['percentile']; expected keys among")),
    "09 CHOICE is the whole row": (
        "09_choosing_a_recipe", "CHOICE = best", lambda s: s.replace('CHOICE = best["settings"]', "CHOICE = best"),
        "choice.check_choice_input(", True, ("ChoiceError", "CHOICE is a whole row of cands")),
    "09 CHOICE that is too big": (
        "09_choosing_a_recipe", "CHOICE = best",
        lambda s: s.replace('CHOICE = best["settings"]', 'CHOICE = next(r for r in cands if r["accuracy_loss"] == 0 '
                                                          'and r["size_ratio"] > choice.MAX_SIZE_RATIO)["settings"]'),
        "choice.check_choice_input(", True, ("ChoiceError", "misses the requirement on size: ")),
    "09 CHOICE on the S8S8 QOperator path": (
        "09_choosing_a_recipe", "CHOICE = best",
        lambda s: s.replace('CHOICE = best["settings"]', 'CHOICE = next(r for r in cands if r["format"] == "QOperator" '
                                                          'and r["activations"] == "QInt8" and r["accuracy_loss"] == 0)'
                                                          '["settings"]'),
        "choice.check_choice_input(", True, ("ChoiceError", "misses the requirement on latency: ")),
    "09 CHOICE that holds on one family only": (
        "09_choosing_a_recipe", "CHOICE = best",
        lambda s: s.replace('CHOICE = best["settings"]', 'CHOICE = next(r for r in cands if r["by_family"]["exact"]'
                                                          '["accuracy_loss"] == 0 and r["accuracy_loss"] > '
                                                          'toolbox.MAX_ACCURACY_LOSS)["settings"]'),
        "choice.check_choice_input(", True, ("ChoiceError", "accuracy (saturating family): loss 0.0100")),
}


def _kit_lesson_with(kit_nb: Path, answer_marker: str, answer, stop_marker: str) -> nbformat.NotebookNode:
    """The kit's lesson up to the cell holding ``stop_marker``: every stub filled with the instructor's solution,
    the one holding ``answer_marker`` with ``answer(solution)`` instead."""
    nb = nbformat.read(kit_nb, as_version=4)
    original = nbformat.read(kit_builder.REPO / "notebooks" / kit_nb.name, as_version=4)
    source = {c.get("id"): c.source for c in original.cells}

    def instructor(text: str) -> str:
        text = kit_builder.remove_hidden_tests(nbformat.v4.new_notebook(cells=[new_code_cell(text)]), "x").cells
        lines = text[0].source.splitlines() if text else []
        return "\n".join(ln for ln in lines if ln.strip() not in (kit_builder.BEGIN_SOLUTION, kit_builder.END_SOLUTION))

    cells = []
    for cell in nb.cells:
        if kit_builder.CODE_STUB in cell.source:
            full = source[cell.get("id")]
            if answer_marker in full:
                begin, end = full.index(kit_builder.BEGIN_SOLUTION), full.index(kit_builder.END_SOLUTION)
                start, after = full.rfind("\n", 0, begin) + 1, full.find("\n", end)
                region = full[full.index("\n", begin) + 1:full.rindex("\n", 0, end) + 1]
                full = full[:start] + answer(region) + (full[after + 1:] if after >= 0 else "")
            cell.source = instructor(full)
        cells.append(cell)
        if stop_marker in cell.source:
            break
    else:
        raise AssertionError(f"{kit_nb.name} has no cell holding {stop_marker!r}: the case would run the whole lesson")
    nb.cells = cells
    return nb


@pytest.fixture(scope="module")
def done_workspace(tmp_path_factory, reference_workspace) -> Path:
    """Lessons 00-05 done right (the grader's reference hand-in)."""
    return reference_workspace(tmp_path_factory.mktemp("done") / "workspace", growth_counts=(1, 2))


@pytest.mark.slow
@pytest.mark.parametrize("name", list(KIT_CASES))
def test_a_wrong_answer_in_lessons_06_08_and_09_of_the_kit_is_named(name, student_kit, done_workspace, tmp_path,
                                                                    monkeypatch):
    import re

    lesson, answer_marker, answer, stop_marker, fails, words = KIT_CASES[name]
    monkeypatch.setenv("PYTHONPATH", str(student_kit))  # the kernel imports the kit's lab, as a student's does
    work = shutil.copytree(done_workspace, tmp_path / "workspace")
    (work / "predictions.json").unlink(missing_ok=True)  # the case's prediction is then the first, the one judged
    path = tmp_path / f"{lesson}.ipynb"
    nbformat.write(_kit_lesson_with(student_kit / "notebooks" / path.name, answer_marker, answer, stop_marker), path)
    got = run.run_lesson(path, tmp_path / "out", {"WORK_DIR": str(work), "INTERACTIVE": False},
                         cwd=student_kit / "notebooks")
    shown, error = [], ""
    for cell in nbformat.read(got.output, as_version=4).cells:
        for o in cell.get("outputs", []):
            if o.output_type == "stream":
                shown.append(o.text)
            elif o.output_type == "error":
                error = re.sub(r"\x1b\[[0-9;]*m", "", "\n".join(o.traceback))
                shown.append(error)
    text = "\n".join(shown)
    assert (got.error is not None) == fails, (got.error, text[-2000:])
    for w in words:
        assert w in text, (w, text[-3000:])
    if fails:  # one line, not a traceback wall
        assert len(error.splitlines()) == 1 and "Traceback" not in error, error


def test_the_kit_folder_is_readable_by_everyone_the_umask_allows(student_kit):
    """A hub shares one kit: its folder has the umask's mode (0755 under 022), not mkdtemp's 0700."""
    import os
    import stat

    mask = os.umask(0o022)
    os.umask(mask)
    assert stat.S_IMODE(student_kit.stat().st_mode) == 0o777 & ~mask
