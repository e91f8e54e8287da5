"""The lessons in a real JupyterLab, driven by Debian's Chromium through Playwright.

JupyterLab serves the folder above notebooks/, as `make jupyter` does. Runs lesson 01 through the UI, moves the
range explorer's slider and checks the numbers change, then runs lesson 00 and checks no output holds an error.
Then runs lesson 02 with a broken reader and checks the student sees the contract error as a message, not a
traceback. Then runs lesson 10 (the camera CNN) in the same workspace: no error, its visible checks (the reader
check, the release check, the release) printed, every figure it outputs rendered. Screenshots go to
artifacts/browser/.
Skipped when Chromium is absent, except in CI (CI=true), where that is a failure.
"""
from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import nbformat
import pytest
from browser_support import (
    JupyterServer,
    ServerStartError,
    _api,
    chromium_path,
    copy_notebooks,
    free_port,
    launched_chromium,
    start_jupyter,
    stop_jupyter,
)

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = REPO / "notebooks"
ARTIFACTS = REPO / "artifacts" / "browser"
KERNEL = "calibration-lab"
RULER = "01_the_ruler.ipynb"
OWN_MODEL = "10_your_own_model.ipynb"  # needs no earlier lesson's files: make_workspace copies its model in
BROKEN = "02_broken_reader.ipynb"  # lesson 02 with a student's broken reader, written into the temp copy
PANEL = "#jp-main-dock-panel .jp-NotebookPanel:not(.lm-mod-hidden)"  # the notebook on screen
RUN_TIMEOUT_S = 420        # one lesson, all cells, on a busy 2-core machine
WIDGET_TIMEOUT_MS = 30_000  # a widget round trip: browser -> kernel -> browser
# Console errors that come from the lab's own widgets: ipywidgets' models and views, our cl-* classes.
WIDGET_ERROR = re.compile(r"jupyter-widgets|ipywidgets|could not (create|render|display)|"
                          r"widget (model|view|state)|comm_id|cl-range", re.IGNORECASE)

pytestmark = pytest.mark.browser


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in {"1", "true", "yes"}


def skip_unless_ci(reason: str) -> None:
    """Skip locally; in CI the browser test must run, so the same reason is a failure."""
    if in_ci():
        pytest.fail(f"CI=true but the browser test cannot run: {reason}", pytrace=False)
    pytest.skip(reason)


def test_ci_has_chromium():
    """In CI the browser test must not be skipped: .ci/run installs Debian's chromium package."""
    if not in_ci():
        pytest.skip("only checked in CI (CI=true)")
    assert chromium_path() is not None, "CI=true but /usr/bin/chromium is missing: apt-get install chromium"


# --- the harness's own failure modes: fast, no browser needed ------------------------------------

def test_port_in_use_is_named(tmp_path):
    import socket

    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        with pytest.raises(ServerStartError, match=f"port {port} .*already in use"):
            start_jupyter(tmp_path, tmp_path / "state", kernel=KERNEL, port=port, timeout=10)


def test_missing_kernel_is_named(tmp_path):
    with pytest.raises(ServerStartError, match="kernel 'no-such-kernel' is not registered"):
        start_jupyter(tmp_path, tmp_path / "state", kernel="no-such-kernel", port=free_port(), timeout=10)


# --- fixtures -------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def lab_root(tmp_path_factory) -> Path:
    """A temp copy of notebooks/; lessons then write ../workspace next to it, not into the repo."""
    return copy_notebooks(NOTEBOOKS, tmp_path_factory.mktemp("browser"))


@pytest.fixture(scope="module")
def jupyter(lab_root) -> JupyterServer:
    if chromium_path() is None:
        skip_unless_ci("Chromium is not installed at /usr/bin/chromium (Debian: apt-get install chromium)")
    for pattern in (RULER, "00_*.ipynb"):
        if not any(lab_root.glob(pattern)):
            skip_unless_ci(f"notebooks/{pattern} does not exist yet")
    # As `make jupyter` does: JupyterLab serves the kit's folder (notebooks/, docs/, workspace/), not notebooks/.
    server = start_jupyter(lab_root.parent, lab_root.parent / "server", kernel=KERNEL)
    try:
        yield server
    finally:
        code = stop_jupyter(server)
        print(f"JupyterLab on port {server.port} stopped (exit code {code})")


@pytest.fixture(scope="module")
def browser(jupyter):
    yield from launched_chromium(skip_unless_ci)


@pytest.fixture
def page(browser):
    """A fresh page, and the list its console errors (and uncaught exceptions) collect in."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    errors: list[str] = []
    page.on("console", lambda m: m.type == "error" and errors.append(m.text))
    page.on("pageerror", lambda e: errors.append(f"uncaught: {e}"))
    try:
        yield page, errors
    finally:
        context.close()


# --- UI steps -------------------------------------------------------------------------------------

def shot(target, name: str) -> Path:
    """Screenshot a page or an element into artifacts/browser/ and return the path."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / name
    target.screenshot(path=str(path))
    return path


def open_notebook(page, server: JupyterServer, name: str) -> None:
    """Open ``name`` alone (``reset`` drops the tabs of the last visit) and wait for its idle kernel."""
    page.goto(server.lab_url(f"{NOTEBOOKS.name}/{name}").replace("?", "?reset&", 1), timeout=60_000)
    page.locator("#jp-main-dock-panel .lm-TabBar-tab.lm-mod-current", has_text=name).wait_for(timeout=90_000)
    page.locator(f"{PANEL} .jp-Notebook-ExecutionIndicator").wait_for(timeout=60_000)
    page.wait_for_function("() => document.querySelector('#jp-main-statusbar')?.innerText.includes('Idle')",
                           timeout=90_000)


def run_all_cells(page) -> None:
    """Run > Run All Cells through the menu bar, as a student would."""
    page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(r"^Run$")).click(timeout=15_000)
    page.locator(".lm-Menu-itemLabel", has_text=re.compile(r"^Run All Cells$")).click(timeout=15_000)


CELL_STATE = f"""() => {{
  const panel = document.querySelector('{PANEL}');
  const prompts = [...panel.querySelectorAll('.jp-CodeCell .jp-InputArea-prompt')].map(p => p.innerText.trim());
  const status = panel.querySelector('.jp-Notebook-ExecutionIndicator')?.dataset.status;
  return {{prompts, status}};
}}"""


def drag_upper_handle(page, explorer, keep: float) -> None:
    """Drag the slider's upper handle with the mouse until the range keeps ``keep`` of its width."""
    lower = explorer.locator(".cl-range-slider .noUi-handle-lower").bounding_box(timeout=WIDGET_TIMEOUT_MS)
    upper = explorer.locator(".cl-range-slider .noUi-handle-upper").bounding_box(timeout=WIDGET_TIMEOUT_MS)
    x0, y = lower["x"] + lower["width"] / 2, upper["y"] + upper["height"] / 2
    x1 = upper["x"] + upper["width"] / 2
    page.mouse.move(x1, y)
    page.mouse.down()
    page.mouse.move(x0 + keep * (x1 - x0), y, steps=10)
    page.mouse.up()


FOCUSED = "() => { const e = document.activeElement; return [e.tagName, e.className, e.getAttribute('aria-label'), " \
          "e.innerText || '']; }"


def tab_to(page, css_class: str, key: str = "Tab", most: int = 12) -> list[str]:
    """Press ``key`` until the focused element has ``css_class``; the focused element's (tag, class, name, text)."""
    for _ in range(most):
        page.keyboard.press(key)
        focused = page.evaluate(FOCUSED)
        if css_class in focused[1].split():
            return focused
    raise AssertionError(f"{most} presses of {key} never reached a .{css_class}; last focus: {focused}")


def keyboard_walk(page, explorer, stats) -> str:
    """Lesson 01's explorer by keyboard alone (WCAG 2.1.1, 4.1.2, 4.1.3): from its first preset, Tab to the slider's
    upper handle (named), move it down with PageDown, then Shift+Tab back to a preset and pick it with Space (its
    pressed state exposed); the results change in a polite live region."""
    page.wait_for_function("el => el.querySelectorAll('.noUi-handle[aria-label]').length === 2",
                           arg=explorer.element_handle(), timeout=WIDGET_TIMEOUT_MS)
    live = {k: stats.get_attribute(k) for k in ("role", "aria-live")}
    assert live == {"role": "status", "aria-live": "polite"}, f"the results are not a live region: {live}"
    explorer.locator(".cl-range-presets button").first.focus()  # where a Tab from the cell above lands
    handle = tab_to(page, "noUi-handle-upper")
    assert handle[2] == "highest value of the calibration range", f"the upper handle's name: {handle}"
    before = stats.inner_text().strip()
    for _ in range(20):
        page.keyboard.press("PageDown")
    page.wait_for_function("([el, old]) => el.innerText.trim() !== old", arg=[stats.element_handle(), before],
                           timeout=WIDGET_TIMEOUT_MS)
    moved = stats.inner_text().strip()
    assert clipped_percent(moved) >= clipped_percent(before), f"PageDown on the top handle: {before!r} -> {moved!r}"
    preset = tab_to(page, "widget-toggle-button", key="Shift+Tab")
    page.keyboard.press("Space")
    name = preset[3].strip()
    page.wait_for_function("([el, name]) => el.innerText.trim().startsWith(name + ':')",
                           arg=[stats.element_handle(), name], timeout=WIDGET_TIMEOUT_MS)
    pressed = explorer.locator(".cl-range-presets button[aria-pressed='true']")
    page.wait_for_function("el => el.querySelectorAll(\".cl-range-presets button[aria-pressed='true']\").length === 1",
                           arg=explorer.element_handle(), timeout=WIDGET_TIMEOUT_MS)
    assert pressed.inner_text().strip() == name, f"Space on {name!r} pressed {pressed.inner_text()!r}"
    return f"{before!r} -> PageDown x20 -> {moved!r} -> Space on {name!r} -> {stats.inner_text().strip()!r}"


def clipped_percent(text: str) -> float:
    found = re.search(r"clipped (\d+(?:\.\d+)?)%", text)
    assert found, f"range explorer stats {text!r} have no 'clipped N%'"
    return float(found.group(1))


def wait_until_run(page, timeout_s: float = RUN_TIMEOUT_S) -> list[str]:
    """Wait (bounded) until no cell is queued or running and the kernel is idle; return the prompts."""
    deadline, quiet_since, seen_busy = time.monotonic() + timeout_s, None, False
    state = page.evaluate(CELL_STATE)
    while time.monotonic() < deadline:
        state = page.evaluate(CELL_STATE)
        busy = state["status"] != "idle" or any("*" in p for p in state["prompts"])
        all_ran = all(re.fullmatch(r"\[\d+\]:", p) for p in state["prompts"])
        seen_busy = seen_busy or busy
        if busy or not (seen_busy or all_ran):
            quiet_since = None
        elif quiet_since is None:
            quiet_since = time.monotonic()
        elif time.monotonic() - quiet_since > 2.0:  # idle between two queued cells is brief
            return state["prompts"]
        time.sleep(0.5)
    running = [i for i, p in enumerate(state["prompts"]) if "*" in p]
    raise AssertionError(f"lesson still running after {timeout_s:.0f} s: code cells {running} "
                         f"not finished, kernel {state['status']}")


def save_and_read(page, root: Path, name: str) -> dict:
    """Save the notebook through the UI (Ctrl+S) and read it back from disk."""
    path = root / name
    before = path.stat().st_mtime_ns
    page.locator(f"{PANEL} .jp-Notebook").click(position={"x": 5, "y": 5})
    page.keyboard.press("Control+s")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if path.stat().st_mtime_ns != before:
            try:
                return json.loads(path.read_text(encoding="utf-8"))
            except ValueError:  # the server truncates the file, then writes it: read again once it is whole
                pass
        time.sleep(0.25)
    raise AssertionError(f"{name} was not saved (as whole JSON) within 30 s of Ctrl+S")


def output_problems(page, notebook: dict, name: str) -> list[str]:
    """Error outputs in the saved notebook, and tracebacks shown on the page."""
    problems = []
    for index, cell in enumerate(notebook["cells"]):
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error":
                problems.append(f"{name} cell {index}: {out.get('ename')}: {out.get('evalue')}")
    stderr = page.locator('.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]')
    for text in stderr.all_inner_texts():
        if "Traceback" in text:
            problems.append(f"{name} shows a traceback: {text[:400]}")
    return problems


def unexecuted(notebook: dict) -> list[int]:
    return [i for i, c in enumerate(notebook["cells"]) if c["cell_type"] == "code"
            and c.get("source") and c.get("execution_count") is None]


def widget_errors(errors: list[str]) -> list[str]:
    return [m for m in errors if WIDGET_ERROR.search(m)]


def say(capsys, text: str) -> None:
    """Print to the terminal even when pytest captures output (CI logs keep it)."""
    with capsys.disabled():
        print(f"\n[browser] {text}", flush=True)


# --- the test -------------------------------------------------------------------------------------

@pytest.mark.timeout(1200)  # a backstop: every wait inside is bounded on its own
def test_ruler_explorer_and_start_here_in_jupyterlab(jupyter, lab_root, page, capsys):
    page, errors = page
    start_here = sorted(p.name for p in lab_root.glob("00_*.ipynb"))
    t0 = time.monotonic()
    try:
        drive_lessons(page, errors, jupyter, lab_root, start_here[0], capsys)
    except BaseException:
        failure_png = shot(page, "failure.png")
        say(capsys, f"failed; page screenshot {failure_png}; server log {jupyter.log_path}")
        say(capsys, f"server log tail:\n{jupyter.log_tail(15)}")
        raise
    finally:
        (ARTIFACTS / "console-errors.txt").write_text("\n".join(errors) + "\n", encoding="utf-8")
        say(capsys, f"browser test wall time {time.monotonic() - t0:.0f} s")


def run_without_errors(page, jupyter: JupyterServer, lab_root: Path, name: str) -> dict:
    """Open lesson ``name``, run all its cells through the menu and save it: the saved notebook, once no output
    shows an error and every code cell ran."""
    open_notebook(page, jupyter, name)
    run_all_cells(page)
    wait_until_run(page)
    saved = save_and_read(page, lab_root, name)
    problems = output_problems(page, saved, name)
    assert not problems, "cells show errors:\n" + "\n".join(problems)
    assert not unexecuted(saved), f"{name}: code cells {unexecuted(saved)} did not run"
    return saved


def drive_lessons(page, errors: list[str], jupyter: JupyterServer, lab_root: Path, start_here: str, capsys) -> None:
    t0 = time.monotonic()
    # Lesson 01: run everything through the menu, then use the range explorer.
    saved_ruler = run_without_errors(page, jupyter, lab_root, RULER)
    say(capsys, f"{RULER} ran all cells in {time.monotonic() - t0:.0f} s")
    alts = page.evaluate(FIGURE_ALTS)
    assert len(alts) >= image_outputs(saved_ruler) > 0 and all(len(a) > 40 and re.search(r"\d", a) for a in alts), \
        f"{RULER}: figures on the page and their alt text: {alts}"

    explorer = page.locator(".cl-range-explorer").first
    explorer.wait_for(state="visible", timeout=WIDGET_TIMEOUT_MS)
    stats = explorer.locator(".cl-range-stats")
    before_text = stats.inner_text(timeout=WIDGET_TIMEOUT_MS).strip()
    assert re.search(r"clipped .*%.*steps used \d+/\d+.*max error \d", before_text), \
        f"range explorer stats read {before_text!r}, expected 'clipped …% · steps used …/… · max error …'"
    explorer.scroll_into_view_if_needed()
    before_png = shot(explorer, "01-range-explorer-before.png")

    drag_upper_handle(page, explorer, keep=0.5)  # halve the range from above: the top must clip
    page.wait_for_function("([el, old]) => el.innerText.trim() !== old",
                           arg=[stats.element_handle(), before_text], timeout=WIDGET_TIMEOUT_MS)
    page.wait_for_timeout(500)  # let the figure redraw before the screenshot
    after_text = stats.inner_text().strip()
    after_png = shot(explorer, "01-range-explorer-after.png")
    assert clipped_percent(after_text) > clipped_percent(before_text), \
        f"moving the range's top down should clip more: {before_text!r} -> {after_text!r}"
    say(capsys, f"range explorer: {before_text!r} -> {after_text!r}")
    say(capsys, f"screenshots: {before_png} {after_png}")
    assert not widget_errors(errors), f"console errors from the lab's widgets: {widget_errors(errors)}"
    say(capsys, "keyboard only: " + keyboard_walk(page, explorer, stats))
    assert not widget_errors(errors), f"console errors from the lab's widgets: {widget_errors(errors)}"

    # Lesson 00: every cell runs, and no output holds an error.
    name = start_here
    open_notebook(page, jupyter, name)
    run_all_cells(page)
    wait_until_run(page)
    saved = save_and_read(page, lab_root, name)
    page_png = shot(page, "00-start-here.png")
    problems = output_problems(page, saved, name)
    assert not problems, "cells show errors:\n" + "\n".join(problems)
    assert not unexecuted(saved), f"{name}: code cells {unexecuted(saved)} did not run"
    assert not widget_errors(errors), f"console errors from the lab's widgets: {widget_errors(errors)}"
    # The lessons' WORK_DIR ("../workspace") lands next to the temp copy, never in the repo.
    workspace = lab_root.parent / "workspace"
    assert (workspace / "source.onnx").is_file(), f"the lessons did not write {workspace / 'source.onnx'}"
    # ... and the student sees it in JupyterLab's file browser, beside the lessons.
    listed = {item["name"] for item in json.loads(_api(jupyter, "/api/contents"))["content"]}
    assert {"notebooks", "workspace"} <= listed, f"JupyterLab's root lists {sorted(listed)}"
    say(capsys, f"{name} ran clean; page screenshot {page_png}; "
                f"{len(errors)} console errors in all (none from widgets)")


# --- a student's broken reader: the contract error reads as a message ---------------------------

# A first try many students write: a list of batches read by index (IndexError after the last one),
# kept in float64. Both break the CalibrationDataReader contract that lesson 02 teaches.
BROKEN_READER = '''%%writefile "{WORK}/calibration_reader.py"
"""A first try: a list of batches read by index, left in float64."""
import numpy as np
from onnxruntime.quantization import CalibrationDataReader


class DigitReader(CalibrationDataReader):
    def __init__(self, pixels, batch_size=32, input_name="pixels"):
        pixels = np.asarray(pixels, dtype=np.float64)
        self.batches = [pixels[i:i + batch_size] for i in range(0, len(pixels), batch_size)]
        self.input_name, self.i = input_name, 0

    def get_next(self):
        batch = self.batches[self.i]    # IndexError after the last batch
        self.i += 1
        return {self.input_name: batch}

    def rewind(self):
        self.i = 0
'''
# What a Python traceback shows and a LabError must not: the header, and frame lines of any style.
TRACEBACK_FRAME = re.compile(r"Traceback \(most recent call last\)|File [^\n]*, line \d+|"
                             r"Cell In\[\d+\], line \d+|^-{20,}", re.MULTILINE)


def write_broken_reader_lesson(lab_root: Path) -> Path:
    """Lesson 02 as a student with a broken reader would have it, in its own workspace."""
    lessons = sorted(lab_root.glob("02_*.ipynb"))
    assert lessons, "notebooks/02_*.ipynb (the calibration reader lesson) is missing"
    nb = nbformat.read(lessons[0], as_version=4)
    params = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    readers = [c for c in nb.cells if c.cell_type == "code"
               and c.source.startswith('%%writefile "{WORK}/calibration_reader.py"')]
    assert len(params) == 1 and len(readers) == 1, \
        f"{lessons[0].name}: expected one parameters cell and one %%writefile reader cell"
    params[0].source, n = re.subn(r'^WORK_DIR = "[^"]*"', 'WORK_DIR = "../workspace-broken-reader"',
                                  params[0].source, flags=re.MULTILINE)
    assert n == 1, f"{lessons[0].name}: the parameters cell has no WORK_DIR = \"...\" line"
    readers[0].source = BROKEN_READER
    nbformat.write(nb, lab_root / BROKEN)
    return lab_root / BROKEN


@pytest.mark.timeout(300)
def test_broken_reader_reads_as_a_message(jupyter, lab_root, page, capsys):
    """Lesson 02's check cell stops a broken reader with the rules it broke, and no traceback frames."""
    page, errors = page
    t0 = time.monotonic()
    write_broken_reader_lesson(lab_root)
    try:
        open_notebook(page, jupyter, BROKEN)
        run_all_cells(page)      # stops at the first error, as it does for a student
        wait_until_run(page)
        saved = save_and_read(page, lab_root, BROKEN)
        failed = [(i, o) for i, c in enumerate(saved["cells"]) for o in c.get("outputs", [])
                  if o.get("output_type") == "error"]
        assert len(failed) == 1, f"{BROKEN}: expected one error (the reader check), got {failed}"
        index, error = failed[0]
        assert "raise_for_problems()" in "".join(saved["cells"][index]["source"]), \
            f"{BROKEN}: the error came from cell {index}, not the reader check: {error.get('evalue')}"
        assert error["ename"] == "ReaderContractError", f"{BROKEN}: {error['ename']}: {error['evalue']}"

        shown = page.locator('.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]')
        assert shown.count() == 1, f"{BROKEN}: {shown.count()} error outputs on the page, expected 1"
        shown.scroll_into_view_if_needed()
        text = shown.inner_text(timeout=WIDGET_TIMEOUT_MS)
        png = shot(page.locator(f"{PANEL} .jp-Cell").nth(index), "02-broken-reader-message.png")
        assert text.startswith("ReaderContractError: the calibration reader breaks the contract"), \
            f"the student sees {text[:300]!r}"
        for rule in ("dtype is float64", "must return None", "IndexError"):
            assert rule in text, f"the message does not name the broken rule ({rule!r}): {text[:600]!r}"
        frames = TRACEBACK_FRAME.findall(text)
        assert not frames, f"the student sees a Python traceback ({frames}):\n{text[:1200]}"
        assert not widget_errors(errors), f"console errors from the lab's widgets: {widget_errors(errors)}"
        say(capsys, f"broken reader: the check cell shows {text.splitlines()[0]!r} and "
                    f"{len(text.splitlines()) - 1} rule lines, no traceback; screenshot {png}")
    except BaseException:
        say(capsys, f"failed; page screenshot {shot(page, 'failure-broken-reader.png')}; "
                    f"server log {jupyter.log_path}")
        raise
    finally:
        say(capsys, f"broken-reader check wall time {time.monotonic() - t0:.0f} s")


# --- lesson 10: the camera CNN, run as a student runs it ---------------------------------------

# What lesson 10's visible checks print when they pass, found by the call each check cell makes; each check raises
# (an error output) instead when it fails.
OWN_MODEL_CHECKS = {"camera_path.check_reader(": "reader ok: ",      # exercise 1: the FrameReader
                    "release.refuse(": "\nreleasable: ",              # exercise 2: the release's requirements
                    "release.release(": "released ",                 # the release written, stamped and read back
                    "recovery.check_exclusion(": "exclusion ok: "}   # exercise 3: the node to exclude
IMAGE_MIMES = ("image/png", "image/svg+xml", "image/jpeg")
# JupyterLab shows lab.plots.shown's <figure> with its <img alt> and <figcaption> (in cell outputs and in the explorer)
FIGURE_ALTS = f"""() => [...document.querySelectorAll('{PANEL} figure.lab-figure')]
  .filter(f => f.querySelector('figcaption')).map(f => f.querySelector('img')?.getAttribute('alt') || '')"""
# a figure is lab.plots.shown's HTML <figure> (an <img> with alt text), or a bare image output
RENDERED_IMAGES = f"""() => [...document.querySelectorAll('{PANEL} .jp-OutputArea-output')]
  .filter(o => /^image\\//.test(o.dataset.mimeType || '') || o.querySelector('figure.lab-figure img[alt]'))
  .map(o => {{ const img = o.querySelector('img, svg');
              return img ? (img.naturalWidth ?? img.getBoundingClientRect().width) : 0; }})"""


def cell_text(cell: dict) -> str:
    """Everything a code cell printed (streams and text results), as the student reads it."""
    parts = []
    for out in cell.get("outputs", []):
        text = out.get("text") if out.get("output_type") == "stream" else out.get("data", {}).get("text/plain")
        parts.append("".join(text) if isinstance(text, list) else (text or ""))
    return "".join(parts)


def check_outputs(notebook: dict, checks: dict[str, str], name: str) -> list[str]:
    """For each check call, the one cell that makes it must have printed its pass line."""
    missing = []
    for call, passed in checks.items():
        cells = [c for c in notebook["cells"] if c["cell_type"] == "code" and call in "".join(c["source"])]
        if len(cells) != 1:
            missing.append(f"{name}: {len(cells)} code cells call {call}...), expected 1")
        elif passed not in cell_text(cells[0]):
            missing.append(f"{name}: the cell calling {call}...) did not print {passed.strip()!r}; it printed "
                           f"{cell_text(cells[0])[-300:]!r}")
    return missing


def image_outputs(notebook: dict) -> int:
    return sum(1 for c in notebook["cells"] for o in c.get("outputs", [])
               if any(m in o.get("data", {}) for m in IMAGE_MIMES)
               or '<figure class="lab-figure"' in "".join(o.get("data", {}).get("text/html", "")))


@pytest.mark.timeout(600)
def test_your_own_model_in_jupyterlab(jupyter, lab_root, page, capsys):
    """Lesson 10 through the UI: every cell runs, no error, its checks pass, its figures render, it releases."""
    page, errors = page
    if not (lab_root / OWN_MODEL).is_file():
        skip_unless_ci(f"notebooks/{OWN_MODEL} does not exist yet")
    t0 = time.monotonic()
    try:
        saved = run_without_errors(page, jupyter, lab_root, OWN_MODEL)
        missing = check_outputs(saved, OWN_MODEL_CHECKS, OWN_MODEL)
        assert not missing, "lesson 10's visible checks:\n" + "\n".join(missing)

        figures = image_outputs(saved)
        rendered = page.evaluate(RENDERED_IMAGES)
        assert len(rendered) == figures and all(w > 0 for w in rendered), \
            f"{OWN_MODEL}: {figures} figure outputs saved, the page shows {len(rendered)} with widths {rendered}"
        assert not widget_errors(errors), f"console errors from the lab's widgets: {widget_errors(errors)}"
        # The release lands in the workspace the earlier lessons share, beside the lessons.
        workspace = lab_root.parent / "workspace"
        released = [workspace / "camera-release.onnx", workspace / "camera-release.json"]
        assert all(p.is_file() for p in released), f"lesson 10 did not write {[str(p) for p in released]}"

        release_cell = next(i for i, c in enumerate(saved["cells"]) if "release.refuse(" in "".join(c["source"]))
        target = page.locator(f"{PANEL} .jp-Cell").nth(release_cell)
        target.scroll_into_view_if_needed()
        png = shot(page, "10-your-own-model.png")
        say(capsys, f"{OWN_MODEL} ran clean in {time.monotonic() - t0:.0f} s: checks "
                    f"{[v.strip() for v in OWN_MODEL_CHECKS.values()]} printed, {figures} figure(s) rendered; "
                    f"screenshot {png}")
    except BaseException:
        say(capsys, f"failed; page screenshot {shot(page, 'failure-your-own-model.png')}; "
                    f"server log {jupyter.log_path}")
        raise
    finally:
        say(capsys, f"lesson 10 wall time {time.monotonic() - t0:.0f} s")
