"""The layout shows the architecture: imports go one way, and every notebook has its lesson module and its grader
module, named after it.

One way: notebooks -> lessons -> core; grader -> lessons -> core; ``instructor`` composes the lab and the grader
from outside both. The imports are read from the source with ``ast`` (nothing is imported, so a broken module
cannot hide an edge), at module level and inside functions, plus ``importlib.import_module("a.literal")`` calls.
A package's own ``__init__`` importing its children is not an edge back from them: only what a module names counts.
"""
from __future__ import annotations

import ast
import importlib.util
import json
import re
import subprocess
import sys
from collections import deque
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import nbformat
import pytest

from instructor import kit as kit_builder
from lab import contract

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("lab", "grader", "instructor", "fixtures", "benchmarks")
# What students get (the kit holds lab/ and fixtures/): none of it may import what the kit lacks.
KIT_PACKAGES = ("lab", "fixtures")
INSTRUCTOR_SIDE = ("grader", "instructor", "benchmarks")
# `python -m lab` dispatches to the tools by name: the command-line entry, not part of the core.
NOT_CORE = ("lab.lessons", "lab.tools", "lab.__main__")
NOTEBOOK = re.compile(r"(\d\d)_(\w+)\.ipynb")
LESSON = re.compile(r"lesson(\d\d)_(\w+)")
DEFERRED = re.compile(r"#\s*deferred:\s*\S")

# Notebooks with no module of their own, and why. Any other notebook without one is a missing module.
NO_LAB_LESSON = {
    "00": "lesson 00 checks the environment and shows the digit reader and the workspace with the core alone "
          "(lab.environment, lab.data, lab.workspace): it has no computation of its own",
}
NO_GRADER_LESSON = {
    "00": "lesson 00 hands in nothing: it checks the environment (its source.onnx is a copy of the fixture)",
    "01": "lesson 01's graded work is its prediction, judged in grader/lessons/predictions.py with those of "
          "lessons 03, 04, 05 and 07",
}
# Grader modules that belong to no single notebook, and why.
GRADER_MODULES_OF_NO_NOTEBOOK = {
    "predictions": "the predictions of lessons 01, 03, 04, 05 and 07 are one rubric part, [predictions]: each is "
                   "judged against its lesson's truth, recomputed from the fixtures, not from the student's models",
}


# --- reading the imports --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Import:
    """One import statement (or ``importlib.import_module`` call) of a module, and the module it names."""
    importer: str
    target: str  # a module of PACKAGES, or the top-level name of any other (numpy, onnxruntime, ...)
    path: Path
    line: int
    in_function: bool
    commented: bool  # a '# deferred: why' comment on the statement or just above it (or above its run of imports)

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(REPO).as_posix()}:{self.line}"


@cache
def modules() -> dict[str, Path]:
    """``{dotted name: file}`` of every module of PACKAGES (a package is its ``__init__.py``)."""
    found = {}
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            parts = path.relative_to(REPO).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def resolve(name: str) -> str:
    """The longest prefix of ``name`` that is one of our modules (``lab.data.load_split`` -> ``lab.data``);
    the top-level name for anything else."""
    known = modules()
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        if ".".join(parts[:end]) in known:
            return ".".join(parts[:end])
    return parts[0]


def named_modules(node: ast.AST, module: str, is_package: bool) -> list[str]:
    """The modules an import statement (or an ``importlib.import_module("literal")`` call) names."""
    if isinstance(node, ast.Import):
        return [resolve(alias.name) for alias in node.names]
    if isinstance(node, ast.ImportFrom):
        base = node.module or ""
        if node.level:
            package = module if is_package else module.rpartition(".")[0]
            for _ in range(node.level - 1):
                package = package.rpartition(".")[0]
            base = f"{package}.{base}" if base else package
        return [resolve(f"{base}.{alias.name}") for alias in node.names]
    return [resolve(node.args[0].value)]


def is_import_module_call(node: ast.AST) -> bool:
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "import_module"
            and len(node.args) >= 1 and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str))


def deferred_comment(lines: list[str], node: ast.AST, import_lines: set[int]) -> bool:
    """A ``# deferred: why`` on the statement's lines, or in the comments just above it or above the run of import
    statements it belongs to (one comment may explain a group)."""
    if any(DEFERRED.search(lines[i - 1]) for i in range(node.lineno, node.end_lineno + 1)):
        return True
    i = node.lineno - 1
    while i >= 1 and i in import_lines:
        i -= 1
    while i >= 1 and lines[i - 1].strip().startswith("#"):
        if DEFERRED.search(lines[i - 1]):
            return True
        i -= 1
    return False


@cache
def imports_of(module: str) -> tuple[Import, ...]:
    path = modules()[module]
    text = path.read_text(encoding="utf-8")
    tree, lines = ast.parse(text, filename=str(path)), text.splitlines()
    statements: list[tuple[ast.AST, bool]] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)) or is_import_module_call(child):
                statements.append((child, in_function))
            visit(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

    visit(tree, False)
    import_lines = {i for node, _ in statements if not isinstance(node, ast.Call)
                    for i in range(node.lineno, node.end_lineno + 1)}
    found = []
    for node, in_function in statements:
        if isinstance(node, ast.ImportFrom) and node.module == "__future__":
            continue
        commented = deferred_comment(lines, node, import_lines)
        for target in dict.fromkeys(named_modules(node, module, path.name == "__init__.py")):
            if target != module:
                found.append(Import(module, target, path, node.lineno, in_function, commented))
    return tuple(found)


def all_imports() -> list[Import]:
    return [imp for module in modules() for imp in imports_of(module)]


def internal_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {module: set() for module in modules()}
    for imp in all_imports():
        if imp.target in graph:
            graph[imp.importer].add(imp.target)
    return graph


def within(module: str, *prefixes: str) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def lesson_number(module: str) -> str | None:
    """``"04"`` for ``lab.lessons.lesson04_more_batches`` and its submodules; None for the rest."""
    match = re.match(r"lab\.lessons\.lesson(\d\d)_", module)
    return match.group(1) if match else None


def violations(rule, imports) -> list[str]:
    return [f"{imp.where}: {imp.importer} imports {imp.target}" for imp in imports if rule(imp)]


# --- no cycles ---------------------------------------------------------------------------------------------------

def strongly_connected(graph: dict[str, set[str]]) -> list[set[str]]:
    """Tarjan's components with more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(component)

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return found


def shortest_cycle_through(start: str, graph: dict[str, set[str]], component: set[str]) -> list[str]:
    """The shortest chain ``start -> ... -> start`` inside ``component`` (breadth first)."""
    came_from: dict[str, str] = {}
    queue = deque([start])
    while queue:
        v = queue.popleft()
        for w in sorted(graph[v] & component):
            if w == start:
                chain = [v]
                while chain[-1] != start:
                    chain.append(came_from[chain[-1]])
                return [start, *reversed(chain[:-1]), start]
            if w not in came_from:
                came_from[w] = v
                queue.append(w)
    raise AssertionError(f"{start} is in a component but on no cycle")


def cycles(graph: dict[str, set[str]]) -> list[str]:
    """Every cycle as a chain ``a -> b -> a``: the shortest through each module of each component, each once."""
    chains: dict[frozenset, str] = {}
    for component in strongly_connected(graph):
        for module in sorted(component):
            chain = shortest_cycle_through(module, graph, component)
            key = frozenset(zip(chain, chain[1:]))
            chains.setdefault(key, " -> ".join(chain))
    return sorted(chains.values())


def test_the_cycle_finder_names_each_cycle_as_a_chain():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"f"}, "f": {"e"}}
    assert cycles(graph) == ["a -> b -> c -> a", "e -> f -> e"]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_import_reader_resolves_names_and_finds_deferred_comments():
    lines = ["def f():", "    # deferred: onnxruntime costs 0.3 s at import", "    import numpy",
             "    from lab import data", "    import json", "", "    import os"]
    body = ast.parse("\n".join(lines)).body[0].body
    assert [deferred_comment(lines, node, {3, 4, 5, 7}) for node in body] == [True, True, True, False]
    bare = ["def f():", "    import numpy  # deferred:"]
    assert not deferred_comment(bare, ast.parse("\n".join(bare)).body[0].body[0], {2})  # a reason is required
    assert resolve("lab.data.load_split") == "lab.data" and resolve("numpy.linalg") == "numpy"
    relative = ast.parse("from .data import load_split\nfrom . import ruler\nfrom .. import grader").body
    assert [named_modules(node, "lab.graph", False) for node in relative[:2]] == [["lab.data"], ["lab.ruler"]]
    assert named_modules(relative[1], "lab.lessons", True) == ["lab.lessons"]
    assert named_modules(ast.parse("importlib.import_module('lab.readers')").body[0].value, "lab", True) == \
        ["lab.readers"]


def test_no_import_cycles():
    found = cycles(internal_graph())
    assert not found, "import cycles (each a chain of modules that import one another):\n  " + "\n  ".join(found)


# --- one way ---------------------------------------------------------------------------------------------------

def test_nothing_students_get_imports_the_grader_or_an_instructor_tool():
    """The kit holds lab/ and fixtures/ only: an import of grader/, instructor/ or benchmarks/ breaks it."""
    bad = violations(lambda imp: within(imp.importer, *KIT_PACKAGES) and within(imp.target, *INSTRUCTOR_SIDE),
                     all_imports())
    assert not bad, "the lab imports what the student kit does not have:\n  " + "\n  ".join(bad)


def test_the_core_imports_no_lesson_and_no_tool():
    """The core (lab/*.py, lab/schemas) has no lesson numbers in it: lessons build on it, never the other way."""
    bad = violations(lambda imp: within(imp.importer, "lab") and not within(imp.importer, *NOT_CORE)
                     and within(imp.target, "lab.lessons", "lab.tools") and imp.target != "lab.lessons",
                     all_imports())
    assert not bad, "the lab core imports a lesson or a tool:\n  " + "\n  ".join(bad)


def lesson_may_not_import(number: str, target: str) -> bool:
    """A lesson builds on the core and earlier lessons: never a later lesson, a tool, the grader or the instructor."""
    later = lesson_number(target)
    return (later is not None and later > number) or within(target, "lab.tools", "lab.__main__", *INSTRUCTOR_SIDE)


def test_a_lesson_imports_the_core_and_earlier_lessons_only():
    bad = violations(lambda imp: lesson_number(imp.importer) is not None
                     and lesson_may_not_import(lesson_number(imp.importer), imp.target), all_imports())
    assert not bad, "a lesson imports a later lesson, a tool or the grader:\n  " + "\n  ".join(bad)


def test_the_grader_never_imports_an_instructor_tool():
    bad = violations(lambda imp: within(imp.importer, "grader") and within(imp.target, "instructor", "benchmarks"),
                     all_imports())
    assert not bad, "the grader imports an instructor tool:\n  " + "\n  ".join(bad)


def notebook_code(path: Path) -> list[tuple[int, str]]:
    """``(cell index, Python source)`` of each code cell as students get it: hidden tests removed (the kit removes
    them), IPython magics and shell lines blanked, a ``%%writefile`` cell's body kept (it is a module)."""
    nb = json.loads(path.read_text(encoding="utf-8"))
    found = []
    for index, cell in enumerate(nb["cells"]):
        if cell["cell_type"] != "code":
            continue
        source = "".join(cell["source"])
        kept = kit_builder.remove_hidden_tests(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source)]),
                                               f"notebooks/{path.name}")
        source = kept.cells[0].source if kept.cells else ""
        source = "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines())
        found.append((index, source))
    return found


def lab_names_used(source: str) -> set[str]:
    """Our modules a cell reaches: by import, or by an attribute chain from ``lab`` (``lab.lessons.lesson04_x.f``)."""
    tree = ast.parse(source)
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)) and not (isinstance(node, ast.ImportFrom) and node.level):
            found.update(named_modules(node, "notebook", False))
        elif isinstance(node, ast.Attribute):
            parts = []
            while isinstance(node, ast.Attribute):
                parts.append(node.attr)
                node = node.value
            if isinstance(node, ast.Name) and node.id == "lab":
                found.add(resolve(".".join(["lab", *reversed(parts)])))
    return {name for name in found if within(name, *PACKAGES)}


def test_a_notebook_uses_the_core_its_own_lesson_and_earlier_lessons_only():
    """Notebooks -> lessons -> core, as students get them (an instructor's hidden test may call the grader)."""
    bad = []
    for path in sorted((REPO / "notebooks").glob("*.ipynb")):
        number = NOTEBOOK.fullmatch(path.name).group(1)
        for index, source in notebook_code(path):
            for name in sorted(lab_names_used(source)):
                if lesson_may_not_import(number, name):
                    bad.append(f"notebooks/{path.name}, cell {index}: uses {name}")
    assert not bad, "a notebook reaches past its lesson:\n  " + "\n  ".join(bad)


def test_every_import_inside_a_function_says_why_it_is_deferred():
    """Imports sit at the top of a module; the heavy ones kept inside a function carry ``# deferred: why`` (the
    measured cost), on the statement or just above it."""
    unsaid: dict[tuple[str, int], list[str]] = {}
    for imp in all_imports():
        if imp.in_function and not imp.commented:
            unsaid.setdefault((imp.path.relative_to(REPO).as_posix(), imp.line), []).append(imp.target)
    bad = [f"{path}:{line}: {', '.join(targets)}" for (path, line), targets in sorted(unsaid.items())]
    assert not bad, (f"{len(bad)} import(s) inside functions without a '# deferred: why' comment (move them to the "
                     "top, or say why not):\n  " + "\n  ".join(bad))


# --- every notebook has its lesson module and its grader module --------------------------------------------------

def notebooks() -> dict[str, str]:
    """``{"05": "05_qdq_vs_qoperator", ...}``"""
    found = {}
    for path in sorted((REPO / "notebooks").glob("*.ipynb")):
        match = NOTEBOOK.fullmatch(path.name)
        assert match, f"notebooks/{path.name}: expected a name NN_<name>.ipynb"
        found[match.group(1)] = path.stem
    return found


def lesson_entries(folder: Path) -> dict[str, Path]:
    """``{stem: path}`` of the modules and packages directly in ``folder`` (``__init__`` and caches left out)."""
    return {p.stem: p for p in sorted(folder.iterdir())
            if (p.suffix == ".py" and p.stem != "__init__") or (p.is_dir() and (p / "__init__.py").exists())}


def lab_lesson(stem: str) -> Path | None:
    lessons = REPO / "lab" / "lessons"
    for path in (lessons / f"lesson{stem}.py", lessons / f"lesson{stem}" / "__init__.py"):
        if path.exists():
            return path
    return None


def test_the_exception_tables_name_real_notebooks_and_their_reasons_hold():
    for number in (*NO_LAB_LESSON, *NO_GRADER_LESSON):
        assert number in notebooks(), f"the exception for lesson {number} names no notebook"
    assert set(notebooks()) >= {"00", "01", "02", "03", "04", "05", "06", "07", "08", "09"}
    # The workspace contract agrees: lesson 00 hands in nothing, lesson 01 only its prediction.
    assert contract.files_of_lesson("00") == ()
    assert contract.files_of_lesson("01") == ("predictions.json",)


@pytest.mark.parametrize("number", sorted(notebooks()))
def test_every_notebook_has_its_lesson_module_and_its_grader_module(number):
    stem = notebooks()[number]
    module = lab_lesson(stem)
    grader = REPO / "grader" / "lessons" / f"lesson{stem}.py"
    if number in NO_LAB_LESSON:
        assert module is None, \
            f"lesson {number} has lab/lessons/lesson{stem} now: drop its exception ({NO_LAB_LESSON[number]})"
    else:
        assert module is not None, f"notebooks/{stem}.ipynb has no lab/lessons/lesson{stem}.py (or package)"
    if number in NO_GRADER_LESSON:
        assert not grader.exists(), \
            f"{grader.relative_to(REPO)} exists now: drop its exception ({NO_GRADER_LESSON[number]})"
    else:
        assert grader.exists(), f"notebooks/{stem}.ipynb has no grader/lessons/lesson{stem}.py"


def test_each_lesson_module_names_its_notebook_in_its_docstring():
    """A reader who opens ``lab/lessons/lesson05_qdq_vs_qoperator.py`` learns at once which notebook it serves."""
    unnamed = []
    for stem in notebooks().values():
        module = lab_lesson(stem)
        if module is None:
            continue
        if f"{stem}.ipynb" not in (ast.get_docstring(ast.parse(module.read_text("utf-8"))) or ""):
            unnamed.append(f"{module.relative_to(REPO)} (expected notebooks/{stem}.ipynb in its docstring)")
    assert not unnamed, "lesson modules whose docstring names no notebook:\n  " + "\n  ".join(unnamed)


@pytest.mark.parametrize("folder", ["lab/lessons", "grader/lessons"])
def test_every_lesson_module_maps_back_to_a_notebook(folder):
    stems = set(notebooks().values())
    exceptions = GRADER_MODULES_OF_NO_NOTEBOOK if folder == "grader/lessons" else {}
    strays = [f"{folder}/{path.name}" for name, path in lesson_entries(REPO / folder).items()
              if name not in exceptions and not (LESSON.fullmatch(name) and name.removeprefix("lesson") in stems)]
    assert not strays, f"modules in {folder} named after no notebook (expected lessonNN_<notebook name>): {strays}"
    for name in exceptions:
        assert name in lesson_entries(REPO / folder), f"{folder}/{name}.py is gone: drop its exception"


# --- the README says where things live, and its commands exist ---------------------------------------------------

README = REPO / "README.md"
TREE_ENTRY = re.compile(r"( *)(\S+/|[\w.]+\.(?:py|toml))(?:\s|$)")


def readme_tree() -> list[str]:
    """The paths the tree under "## Where things live" names (folders end with ``/``)."""
    text = README.read_text(encoding="utf-8")
    assert "## Where things live" in text, "README.md has no '## Where things live' section"
    section = text.split("## Where things live", 1)[1]
    block = section.split("```", 2)[1]
    paths, stack = [], []
    for line in block.splitlines():
        match = TREE_ENTRY.match(line)
        if not match:
            continue  # a description's second line
        depth, name = len(match.group(1)) // 2, match.group(2)
        stack[depth:] = [name]
        paths.append("".join(stack))
    return paths


def project_modules_and_packages() -> set[str]:
    """Every module (``__init__.py`` aside: its folder stands for it) and package folder of PACKAGES."""
    found = set()
    for path in modules().values():
        rel = path.relative_to(REPO).as_posix()
        found.add(rel.removesuffix("__init__.py") if path.name == "__init__.py" else rel)
    return found


def test_the_readme_tree_names_every_module_and_nothing_that_is_gone():
    listed = readme_tree()
    missing = sorted(project_modules_and_packages() - set(listed))
    assert not missing, f"README.md's 'Where things live' does not name: {missing} (one line each, with what it is)"
    gone = [p for p in listed if not (REPO / p).exists()]
    assert not gone, f"README.md's 'Where things live' names what does not exist: {gone}"
    assert len(listed) == len(set(listed)), "README.md's tree names a path twice"


def readme_code() -> str:
    """The README's code: fenced blocks and inline spans."""
    text = README.read_text(encoding="utf-8")
    blocks = re.findall(r"```[^\n]*\n(.*?)```", text, re.S)
    spans = re.findall(r"`([^`\n]+)`", re.sub(r"```.*?```", "", text, flags=re.S))
    return "\n".join(blocks + spans)


def make_targets(makefile: str) -> set[str]:
    """The targets of a Makefile's rules (``a b c:`` gives three)."""
    return {target for rule in re.findall(r"^([a-z][\w -]*):(?!=)", makefile, re.M) for target in rule.split()}


def test_every_make_target_the_readme_names_exists():
    """The project's Makefile, or the kit's (the students' section speaks of the kit's `make submit`)."""
    targets = make_targets((REPO / "Makefile").read_text()) | make_targets(kit_builder.STUDENT_MAKEFILE)
    named = set(re.findall(r"(?<![\w-])make ([a-z][\w-]*)", readme_code()))
    assert {"lab", "kit", "test"} <= named
    assert not named - targets, f"README.md names make targets no Makefile has: {sorted(named - targets)}"


PYTHON_M = re.compile(r"python -m ([\w.]+)(?: ([a-z][\w-]*)((?: \| [a-z][\w-]*)*))?")


def readme_commands() -> set[tuple[str, str | None]]:
    """``(module, command)`` for every ``python -m`` of our packages the README names (``a | b`` gives both)."""
    found = set()
    for module, first, more in PYTHON_M.findall(README.read_text(encoding="utf-8")):
        if within(module, *PACKAGES):
            for command in [first, *re.findall(r"[a-z][\w-]*", more)] if first else [None]:
                found.add((module, command))
    return found


def test_every_python_m_command_the_readme_names_answers_help():
    commands = readme_commands()
    assert {("instructor", "workbook"), ("instructor", "kit"), ("lab", "run"), ("grader", "grade")} <= commands
    failed = []
    for module, command in sorted(commands, key=str):
        if command is None:
            if importlib.util.find_spec(module) is None:
                failed.append(f"python -m {module}: no such module")
            continue
        proc = subprocess.run([sys.executable, "-m", module, command, "--help"], cwd=REPO, capture_output=True,
                              text=True, timeout=120)
        if proc.returncode != 0 or "usage:" not in proc.stdout:
            failed.append(f"python -m {module} {command} --help exited {proc.returncode}: {proc.stderr[-300:]}")
    assert not failed, "README.md names commands that do not work:\n  " + "\n  ".join(failed)


def installed_with(declared: list[str]) -> set[str]:
    """The distributions ``pip install`` brings with ``declared`` requirements: them and, transitively, what each
    requires (extras left out), as installed here; names normalized as pip does."""
    from importlib import metadata

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    seen, todo = set(), deque(Requirement(r) for r in declared)
    while todo:
        req = todo.popleft()
        name = canonicalize_name(req.name)
        if name in seen or (req.marker and not req.marker.evaluate({"extra": ""})):
            continue
        seen.add(name)
        try:
            todo.extend(Requirement(r) for r in metadata.requires(name) or ())
        except metadata.PackageNotFoundError:
            pass  # declared but not installed here: pip check (test_packaging) names it
    return seen


def test_every_library_the_installed_packages_import_comes_with_pip_install():
    """``pip install .`` gives what lab, grader, instructor and fixtures import: each third-party import is a declared
    dependency (the dask extra for the grader's Dask option) or comes with one (IPython with ipykernel)."""
    import tomllib
    from importlib import metadata

    from packaging.utils import canonicalize_name

    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    declared = [*project["dependencies"], *project["optional-dependencies"]["dask"]]
    available = installed_with(declared)
    distributions = metadata.packages_distributions()
    missing = []
    for imp in all_imports():
        top = imp.target.split(".")[0]
        if imp.importer.split(".")[0] == "benchmarks" or top in PACKAGES or top in sys.stdlib_module_names:
            continue
        names = {canonicalize_name(d) for d in distributions.get(top, [top])}
        if not names & available:
            missing.append(f"{imp.where}: imports {top} (distribution {', '.join(sorted(names))})")
    assert {"ipython", "jupyter-client", "onnxruntime"} <= available
    assert not missing, "not in pyproject.toml's dependencies nor brought by one:\n" + "\n".join(missing)
