"""``python -m lab run``: run every lesson headlessly with papermill, then summarize the workspace.

Each lesson runs with the project's kernel, ``cwd`` = ``notebooks/``, a per-cell time limit,
``WORK_DIR`` set to one absolute workspace and ``INTERACTIVE = False``. Executed copies go to a
build folder (never over the sources). On a failure the partial output is kept, the notebook and
the failing cell are named, and the exit code is non-zero.
"""
from __future__ import annotations

import argparse
import ast
import json
import math
import re
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from lab.schemas import format_checkers_blocked

with format_checkers_blocked():  # nbformat imports jsonschema: 1.2 s more with the format checkers' libraries
    import nbformat
import papermill
from jupyter_client.manager import AsyncKernelManager
from papermill.engines import NBClientEngine, papermill_engines
from papermill.exceptions import PapermillExecutionError
from tqdm import tqdm

from lab import tables
from lab.environment import KERNEL_NAME
from lab.tools.summary import summarize_workspace

REPO = Path(__file__).resolve().parents[2]
NOTEBOOKS = REPO / "notebooks"
DEFAULT_WORK_DIR = "build/workspace"
DEFAULT_OUT = "build/notebooks"
DEFAULT_TIMEOUT = 900
START_TIMEOUT = 120
SAVE_EVERY_S = 10
"""While a lesson runs, its executed copy is rewritten at most this often (papermill rewrites it twice per cell)."""
LESSON_GLOB = "[0-9][0-9]_*.ipynb"
RUN_LOG = "run-log.json"
KERNEL_LOG = "kernel-stderr.log"


@dataclass(frozen=True)
class LessonRun:
    """One lesson's headless run: where its executed copy is, how long it took, and what failed."""

    notebook: str
    output: str
    seconds: float
    error: str | None = None
    failed_cell: int | None = None
    ename: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


def discover(notebooks_dir: str | Path = NOTEBOOKS) -> list[Path]:
    """The lessons ``NN_topic.ipynb`` in ``notebooks_dir``, in lesson order."""
    return sorted(Path(notebooks_dir).glob(LESSON_GLOB))


def find_notebooks(option: str | None = None, cwd: Path | None = None,
                   checkout: Path = NOTEBOOKS) -> Path:
    """The lessons' folder: ``--notebooks`` when given; else ``./notebooks``, the current folder, or the
    checkout the lab is imported from (an editable install), the first that holds lessons.

    After ``pip install .`` the lab lives in site-packages and the lessons do not: run from the project's
    folder, or name the folder. Raises ``FileNotFoundError`` naming every place looked in.
    """
    if option:
        candidates = [Path(option)]
    else:
        cwd = Path.cwd() if cwd is None else cwd
        candidates = list(dict.fromkeys([cwd / "notebooks", cwd, checkout]))
    for folder in candidates:
        if discover(folder):
            return folder.resolve()
    looked = ", ".join(str(c) for c in candidates)
    raise FileNotFoundError(f"no lessons ({LESSON_GLOB}) in {looked}; run from the project's folder (the one "
                            f"holding notebooks/), or pass --notebooks DIR")


def select(notebooks: list[Path], only: str | None) -> list[Path]:
    """Keep the lessons whose number is in ``only`` (``"03,04"``); all of them when ``only`` is empty."""
    if not only:
        return list(notebooks)
    wanted = [w.strip().zfill(2) for w in only.split(",") if w.strip()]
    missing = [w for w in wanted if not any(nb.name.startswith(f"{w}_") for nb in notebooks)]
    if missing:
        have = ", ".join(nb.name[:2] for nb in notebooks) or "none"
        raise ValueError(f"--only {only}: no lesson numbered {', '.join(missing)} (have {have})")
    return [nb for nb in notebooks if nb.name[:2] in wanted]


def parameters_cell(nb: nbformat.NotebookNode) -> nbformat.NotebookNode | None:
    """The code cell tagged ``parameters``, or None."""
    for cell in nb.cells:
        if cell.cell_type == "code" and "parameters" in cell.get("metadata", {}).get("tags", []):
            return cell
    return None


def declared_parameters(notebook: str | Path | nbformat.NotebookNode) -> dict[str, object]:
    """The names and literal values assigned in a notebook's ``parameters`` cell (empty if it has none)."""
    nb = notebook if isinstance(notebook, nbformat.NotebookNode) else nbformat.read(notebook, as_version=4)
    cell = parameters_cell(nb)
    if cell is None:
        return {}
    declared: dict[str, object] = {}
    for node in ast.parse(cell.source).body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if isinstance(target, ast.Name) and node.value is not None:
                    try:
                        declared[target.id] = ast.literal_eval(node.value)
                    except ValueError:
                        declared[target.id] = None
    return declared


def parse_value(text: str) -> object:
    """A ``-p NAME VALUE`` value as papermill's command line reads it: int, float, bool, None, else str."""
    for convert in (int, float):
        try:
            return convert(text)
        except ValueError:
            pass
    return {"True": True, "False": False, "None": None}.get(text, text)


def lesson_parameters(declared: dict[str, object], work_dir: Path,
                      overrides: dict[str, object]) -> dict[str, object]:
    """What to inject into one lesson: only the names it declares."""
    wanted = {"WORK_DIR": str(work_dir), "INTERACTIVE": False, **overrides}
    return {name: value for name, value in wanted.items() if name in declared}


def source_cell_number(nb: nbformat.NotebookNode, cell_index: int) -> int:
    """Map a cell index in papermill's output notebook back to the source notebook's cell index."""
    injected = sum(1 for cell in nb.cells[:cell_index]
                   if "injected-parameters" in cell.get("metadata", {}).get("tags", []))
    return cell_index - injected


def _first_line(source: str) -> str:
    lines = [ln.strip() for ln in source.splitlines() if ln.strip()]
    first = lines[0] if lines else "(empty cell)"
    return first if len(first) <= 70 else first[:67] + "..."


def _raising_line(exc) -> str:
    """``line N: <statement>`` of the cell line the traceback points at, else the cell's first line."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", "\n".join(getattr(exc, "traceback", None) or []))
    match = re.search(r"Cell In\[\d+\], line (\d+)", text) or re.search(r"^-*> ?(\d+) ", text, re.M)
    lines = (exc.source or "").splitlines()
    if match and 0 < int(match.group(1)) <= len(lines):
        n = int(match.group(1))
        return f"line {n}: {_first_line(lines[n - 1])}"
    return _first_line(exc.source or "")


@dataclass(frozen=True)
class Failure:
    """Where a lesson stopped: the source cell index (None if unknown), the error's name, and one line to show."""

    cell: int | None
    ename: str
    message: str


def describe_failure(exc: BaseException, output: Path) -> Failure:
    """Name the failing cell (by source index and first line) and the error."""
    try:
        nb = nbformat.read(output, as_version=4)
    except Exception:  # noqa: BLE001 - the engine may have died before writing anything (or half of it)
        nb = None
    if isinstance(exc, PapermillExecutionError):
        index = exc.cell_index
        if nb is not None:
            # papermill adds an error header at the top and an anchor before the cell: leave them out
            cells = [c for c in nb.cells if "papermill-error-cell-tag" not in c.get("metadata", {}).get("tags", [])]
            index = source_cell_number(nbformat.from_dict({"cells": cells}), exc.cell_index)
        return Failure(index, exc.ename, f"cell {index} (In [{exc.exec_count}], {_raising_line(exc)}) "
                                         f"raised {exc.ename}: {_whole(exc.evalue or '')}")
    index, where = None, ""
    if nb is not None:
        # a timeout or a dead kernel: the last cell that started is where the run stopped
        started = [i for i, cell in enumerate(nb.cells)
                   if cell.get("metadata", {}).get("papermill", {}).get("start_time")]
        if started:
            index = source_cell_number(nb, started[-1])
            where = f"cell {index} ({_first_line(nb.cells[started[-1]].source)}): "
    return Failure(index, type(exc).__name__, f"{where}{type(exc).__name__}: {_whole(str(exc))}")


MESSAGE_LINES = 12  # an error's lines shown (a check's bullets name every rule it broke); the rest: the notebook


def _whole(message: str) -> str:
    """An error's message, every line (the first ``MESSAGE_LINES``), the later ones indented under the first."""
    lines = [ln.rstrip() for ln in message.strip().splitlines() if ln.strip()]
    if len(lines) > MESSAGE_LINES:
        lines = lines[:MESSAGE_LINES] + [f"... ({len(lines) - MESSAGE_LINES} more lines in the executed notebook)"]
    return "\n      ".join(lines)


# ipykernel warns on every start that its local TCP sockets are not encrypted. The headless run's kernels
# listen on 127.0.0.1 only, for one process of the same user, so the line says nothing about this run; it is
# the one line left out of the kernel's log (every other line, crash messages included, is kept).
TCP_WARNING = b"Kernel is running over TCP without encryption"


def copy_kernel_stderr(stream, log_path: Path, drop: bytes = TCP_WARNING) -> None:
    """Copy the kernel's stderr ``stream`` into ``log_path`` line by line, without the lines holding ``drop``."""
    with stream, open(log_path, "ab") as log:
        for line in iter(stream.readline, b""):
            if drop not in line:
                log.write(line)
                log.flush()


def kernel_manager_logging_to(log_path: Path) -> type:
    """A kernel manager whose kernel's own stderr (start-up chatter, crash messages) goes to ``log_path``,
    without ipykernel's unencrypted-TCP warning (``TCP_WARNING``).

    Cell output, warnings included, still reaches the executed notebook; only the kernel process's
    log lines are kept out of the terminal.
    """
    class LoggingKernelManager(AsyncKernelManager):
        async def _async_launch_kernel(self, kernel_cmd, **kw):
            log_path.parent.mkdir(parents=True, exist_ok=True)
            kw["stderr"] = subprocess.PIPE
            await super()._async_launch_kernel(kernel_cmd, **kw)
            process = getattr(self.provisioner, "process", None)
            if process is not None and process.stderr is not None:
                threading.Thread(target=copy_kernel_stderr, args=(process.stderr, log_path), daemon=True,
                                 name="kernel-stderr").start()

    return LoggingKernelManager


class SparseSavesEngine(NBClientEngine):
    """papermill's own engine, saving the executed copy at most every ``SAVE_EVERY_S`` seconds while it runs.

    papermill rewrites the whole executed notebook, figures and all, before and after every cell: 40 ms per
    rewrite of lesson 08 (nbformat's indented JSON), about a second and a half of the lesson. The copy is
    still written in full when the lesson ends, fails or times out (papermill's ``notebook_complete``), and
    a long lesson's copy still shows its progress every ``SAVE_EVERY_S`` seconds.
    """

    @classmethod
    def execute_managed_notebook(cls, nb_man, kernel_name, **kwargs):
        every_save = nb_man.save

        def sparse_save(**kw):
            if (nb_man.now() - nb_man.last_save_time).total_seconds() >= SAVE_EVERY_S:
                every_save(**kw)

        nb_man.save = sparse_save
        try:
            return super().execute_managed_notebook(nb_man, kernel_name, **kwargs)
        finally:
            nb_man.save = every_save  # papermill's last save, after this returns, always writes


ENGINE = "calibration-lab"
papermill_engines.register(ENGINE, SparseSavesEngine)


def run_lesson(notebook: Path, out_dir: Path, parameters: dict[str, object],
               timeout: float = DEFAULT_TIMEOUT, cwd: Path = NOTEBOOKS) -> LessonRun:
    """Execute one lesson into ``out_dir`` with papermill; a failure is returned, not raised."""
    out_dir.mkdir(parents=True, exist_ok=True)
    output = out_dir / notebook.name
    if output.resolve() == notebook.resolve():
        raise ValueError(f"{output}: the executed copy would overwrite the lesson; choose another --out")
    start = time.perf_counter()
    failure = None
    try:
        papermill.execute_notebook(
            str(notebook), str(output), parameters=parameters, kernel_name=KERNEL_NAME, cwd=str(cwd),
            execution_timeout=timeout, start_timeout=START_TIMEOUT,
            log_output=False, progress_bar=False, engine_name=ENGINE, coalesce_streams=True,  # one text per stream
            kernel_manager_class=kernel_manager_logging_to(out_dir / KERNEL_LOG))
    except Exception as exc:  # noqa: BLE001 - every failure becomes a value naming the cell
        failure = describe_failure(exc, output)
    seconds = round(time.perf_counter() - start, 2)
    if failure is None:
        return LessonRun(notebook.name, str(output), seconds)
    return LessonRun(notebook.name, str(output), seconds, failure.message, failure.cell, failure.ename)


def format_value(value: object) -> str:
    """Numbers to 4 significant digits; lists of numbers as first..last with their length."""
    if isinstance(value, bool) or value is None:
        return str(value)
    if isinstance(value, list):
        if len(value) <= 4:
            return "[" + ", ".join(format_value(v) for v in value) + "]"
        return f"[{format_value(value[0])} .. {format_value(value[-1])}] ({len(value)} values)"
    if isinstance(value, float):
        return f"{value:.4g}" if math.isfinite(value) else str(value)
    return str(value)


def timing_table(runs: list[LessonRun]) -> list[str]:
    """Per-lesson wall time and status, slowest marked."""
    if not runs:
        return []
    columns = [("lesson", f"<{max(len(r.notebook) for r in runs)}"), ("seconds", ">8.1f"), ("status", "")]
    slowest = max(runs, key=lambda r: r.seconds)
    lines = [tables.header(columns, "  ")]
    for r in runs:
        mark = "  <- slowest" if r is slowest and len(runs) > 1 else ""
        lines.append(tables.row([r.notebook, r.seconds, ("ok" if r.ok else "FAILED") + mark], columns, "  "))
    lines.append(tables.row(["total", sum(r.seconds for r in runs)], columns, "  "))
    return lines


def parse_args(argv: list[str], prog: str = "python -m lab run",
               description: str | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=prog, description=description or __doc__.splitlines()[0])
    parser.add_argument("--work-dir", default=DEFAULT_WORK_DIR, help="the one workspace every lesson writes into")
    parser.add_argument("--out", default=DEFAULT_OUT, help="folder for the executed copies of the lessons")
    parser.add_argument("--only", default=None, help="lesson numbers to run, e.g. 03,04 (default: all)")
    parser.add_argument("-p", "--parameter", nargs=2, action="append", default=[], metavar=("NAME", "VALUE"),
                        help="set a parameter in every lesson that declares it, e.g. -p MAX_BATCHES 16")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, help="seconds allowed per cell")
    parser.add_argument("--notebooks", default=None, metavar="DIR",
                        help="the lessons' folder (default: ./notebooks, else the checkout the lab runs from)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None, prog: str = "python -m lab run", description: str | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv, prog, description)
    try:
        notebooks_dir = find_notebooks(args.notebooks)
        lessons = select(discover(notebooks_dir), args.only)
    except (ValueError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    work_dir, out_dir = Path(args.work_dir).resolve(), Path(args.out).resolve()
    if out_dir == notebooks_dir:
        print(f"error: --out {args.out} is the lessons' own folder; executed copies never go over the sources",
              file=sys.stderr)
        return 2
    overrides = {name: parse_value(value) for name, value in args.parameter}
    declared = {nb.name: declared_parameters(nb) for nb in lessons}
    unknown = sorted(n for n in overrides if not any(n in d for d in declared.values()))
    if unknown:
        print(f"error: -p {', '.join(unknown)}: no selected lesson declares it in its parameters cell",
              file=sys.stderr)
        return 2
    work_dir.mkdir(parents=True, exist_ok=True)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / KERNEL_LOG).unlink(missing_ok=True)
    print(f"Running {len(lessons)} lesson(s); workspace {work_dir}, executed copies in {out_dir}", flush=True)

    runs: list[LessonRun] = []
    # a bar on a terminal (the lesson running and its time so far); one line per lesson when it ends, always
    with tqdm(lessons, unit="lesson", file=sys.stderr, disable=None, leave=False) as bar:
        for i, nb in enumerate(bar, 1):
            bar.set_description(nb.name)
            run = run_lesson(nb, out_dir, lesson_parameters(declared[nb.name], work_dir, overrides),
                             timeout=args.timeout, cwd=notebooks_dir)
            runs.append(run)
            tqdm.write(f"[{i}/{len(lessons)}] {nb.name} ... {'ok' if run.ok else 'FAILED'} ({run.seconds:.1f} s)",
                       file=sys.stdout)
            sys.stdout.flush()  # a piped run (make lab | tee) shows each lesson as it ends
            if not run.ok:
                break
    (out_dir / RUN_LOG).write_text(json.dumps(
        {"work_dir": str(work_dir), "lessons": [asdict(r) for r in runs],
         "total_seconds": round(sum(r.seconds for r in runs), 2)}, indent=2, sort_keys=True) + "\n")

    failed = next((r for r in runs if not r.ok), None)
    if failed is None:
        print("\nKey numbers from the workspace")
        print("\n".join(summarize_workspace(work_dir)) or "  (no lesson has written its numbers yet)")
    else:  # files an earlier run left for the lessons after the failure are not this run's numbers
        print("\nKey numbers from the lessons that ran to the end this time")
        print("\n".join(summarize_workspace(work_dir, {Path(r.notebook).name[:2] for r in runs if r.ok}))
              or "  (none of them writes numbers)")
    print("\nWall time per lesson")
    print("\n".join(timing_table(runs)))

    if failed is not None:
        skipped = len(lessons) - len(runs)
        print(f"\nFAILED: {failed.notebook}, {failed.error}\n  partial output kept in {failed.output}"
              + (f"\n  {skipped} later lesson(s) not run" if skipped else ""), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
