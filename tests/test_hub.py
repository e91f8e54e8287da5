"""The course on a real JupyterHub: the admin's one command, two system users working at once, a widget in the hub's
JupyterLab, and a hand-in from a cell.

The lab is installed by ``python3 -m instructor hub`` (the system's python3, from this checkout) into a temporary
prefix; the hub (this venv's ``jupyterhub``, npm's ``configurable-http-proxy``) runs on 127.0.0.1 with
``LocalProcessSpawner`` and a shared password; the students are system users made here and removed after. Through
the hub's REST API both servers start at once; each student copies the kit as the README says, then lessons 00 and 01
run in their own kernels over their servers' REST and websocket APIs (the exercises filled in as a student would, the
notebooks saved through the server), the environment check passes, and ``lab.hand_in()`` in a cell writes the zip in
the student's own folder. Chromium logs in as one student and runs lesson 01 in the hub's JupyterLab: the range
explorer renders. ``LAB_HUB_COST=1`` also times lesson 10 for one student alone, then for both at once, and each
kernel's peak memory (the README's class cost). Skipped without root, useradd, npm's proxy or Chromium; in CI
(CI=true) that is a failure.
"""
from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import time
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import nbformat
import pytest
from browser_support import CHROMIUM_ARGS, LAB_SETTINGS, chromium_path
from hub_support import (
    PATH,
    REPO,
    SYSTEM_PYTHON,
    Hub,
    RemoteKernel,
    jupyterlab_env,
    needs_a_hub,
    shared_dir,
    start_hub,
    stop_hub,
    system_users,
)

from instructor import hub as hub_install
from instructor.kit import CODE_STUB
from lab.tools import run

pytestmark = [pytest.mark.slow, pytest.mark.browser]

USERS = ("hubstudent1", "hubstudent2")
LESSONS = ("00_start_here.ipynb", "01_the_ruler.ipynb")
COST_LESSON = "10_your_own_model.ipynb"
HOME_KIT = "calibration-lab"  # ~/calibration-lab: the student's copy of the kit, the workspace inside it


def say(capsys, text: str) -> None:
    with capsys.disabled():
        print(f"\n[hub] {text}", flush=True)


def admin_install(prefix: Path, lab_env: Path, kernel_prefix: Path) -> subprocess.CompletedProcess:
    """The README's one command, as root, with the system's python3 from this checkout."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.run([SYSTEM_PYTHON, "-m", "instructor", "hub", "--prefix", prefix, "--jupyterlab-env",
                           lab_env, "--kernel-prefix", kernel_prefix], cwd=REPO, env=dict(env, PATH=PATH),
                          capture_output=True, text=True, timeout=900)


def assert_read_only_for_students(*roots: Path) -> None:
    """Root's, readable by all, writable by none but root."""
    for root in roots:
        for path in (root, *root.rglob("*")):
            if path.is_symlink():
                continue
            st = path.stat()
            assert st.st_uid == 0 and not st.st_mode & 0o022 and st.st_mode & stat.S_IROTH, \
                f"{path}: owner {st.st_uid}, mode {stat.filemode(st.st_mode)}"


def solved(kit_notebook: Path) -> dict:
    """The kit's copy of a lesson with each exercise stub replaced by the instructor's solution cell (the same
    cell id): what a student saves after doing the exercises."""
    nb = nbformat.read(kit_notebook, as_version=4)
    theirs = {c.id: c.source for c in nbformat.read(REPO / "notebooks" / kit_notebook.name, as_version=4).cells}
    for cell in nb.cells:
        if CODE_STUB in cell.source:
            cell.source = theirs[cell.id]
    return nb


def run_lesson(hub: Hub, user: str, kit_notebook: Path, overrides: dict, keep: bool = False):
    """Save the solved lesson into the student's copy through their server, then run its code cells in a kernel of
    that notebook (the parameters cell followed by ``overrides``, as papermill injects them). Returns (seconds,
    the kernel if ``keep``)."""
    nb = solved(kit_notebook)
    path = f"{HOME_KIT}/notebooks/{kit_notebook.name}"
    hub.request("PUT", f"/user/{user}/api/contents/{path}", {"type": "notebook", "format": "json", "content": nb})
    params = run.lesson_parameters(run.declared_parameters(nb), Path("unused"), overrides)
    params.pop("WORK_DIR", None)  # the lessons' own "../workspace": LAB_WORK_DIR decides on a hub
    kernel = RemoteKernel(hub, user, path)
    t0 = time.monotonic()
    for cell in nb.cells:
        if cell.cell_type == "code":
            kernel.run(cell.source)
            if "parameters" in cell.metadata.get("tags", []):
                kernel.run("\n".join(f"{k} = {v!r}" for k, v in params.items()))
    seconds = time.monotonic() - t0
    if keep:
        return seconds, kernel
    kernel.close()
    return seconds, None


READ_ONLY_PROBE = """
import lab, os, pathlib
from jupyter_client.kernelspec import KernelSpecManager
places = {{"the lab": pathlib.Path(lab.__file__).parent, "the kit": pathlib.Path({kit!r}),
          "the kernel": pathlib.Path(KernelSpecManager().get_kernel_spec("calibration-lab").resource_dir)}}
for name, folder in places.items():
    try:
        (folder / "written-by-a-student").write_text("x")
        print(name, "writable", folder)
    except PermissionError:
        print(name, "read-only", folder)
print("lab from", lab.__file__)
"""


def student_session(hub: Hub, user: str, kit: Path, prefix: Path) -> dict:
    """One student's whole session on their server: copy the kit, probe the shared install, lessons 00 and 01, the
    environment check, hand in. Returns what the student saw."""
    got: dict = {}
    setup = RemoteKernel(hub, user, "Untitled.ipynb")
    copy = hub_install.STUDENT_COPY.format(kit=kit)
    got["copy"] = setup.run(f"import subprocess\nprint(subprocess.run({copy!r}, shell=True, executable='/bin/bash', "
                            "capture_output=True, text=True))")
    got["probe"] = setup.run(READ_ONLY_PROBE.format(kit=str(kit)))
    settings = json.dumps(LAB_SETTINGS)  # no news pop-up, every cell in the page: for the browser's run
    setup.run(f"import json, pathlib\nfor rel, value in json.loads({settings!r}).items():\n"
              "    p = pathlib.Path.home() / '.jupyter/lab/user-settings' / rel\n"
              "    p.parent.mkdir(parents=True, exist_ok=True); p.write_text(json.dumps(value))")
    setup.close()
    notebooks = kit / "notebooks"
    got["00"], start = run_lesson(hub, user, notebooks / LESSONS[0], {"STUDENT_ID": user, "INTERACTIVE": False},
                                  keep=True)
    got["environment"] = start.run("print([(c.name, c.status) for c in report.checks if c.status != 'ok'])")
    start.close()
    got["01"], ruler = run_lesson(hub, user, notebooks / LESSONS[1], {"INTERACTIVE": False}, keep=True)
    got["hand_in"] = ruler.run(f"import lab\nlab.hand_in(student={user!r})")
    ruler.close()
    return got


def lesson10_cost(hub: Hub, users: tuple[str, ...], kit: Path) -> tuple[list[float], list[float]]:
    """Lesson 10 in each of ``users``' kernels at once: (seconds each, kernel peak RSS in GB each)."""
    def one(user):
        seconds, kernel = run_lesson(hub, user, kit / "notebooks" / COST_LESSON, {"INTERACTIVE": False}, keep=True)
        rss = kernel.run("import resource\nprint(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)")
        kernel.close()
        return seconds, int(rss) / 2**20
    with ThreadPoolExecutor(len(users)) as pool:
        results = list(pool.map(one, users))
    return [s for s, _ in results], [r for _, r in results]


def widget_in_the_hubs_jupyterlab(hub: Hub, user: str) -> str:
    """Log in as ``user`` in Chromium, run lesson 01 in the hub's JupyterLab; the range explorer's stats text."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(chromium_path()), headless=True, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(f"{hub.url}/hub/login", timeout=60_000)
            page.fill("#username_input", user)
            page.fill("#password_input", hub.password)
            page.click("#login_submit")
            page.wait_for_url(re.compile(rf"/user/{user}/lab"), timeout=120_000)
            page.goto(f"{hub.url}/user/{user}/lab/tree/{HOME_KIT}/notebooks/{LESSONS[1]}?reset", timeout=60_000)
            page.locator("#jp-main-dock-panel .lm-TabBar-tab.lm-mod-current", has_text=LESSONS[1]).wait_for(
                timeout=120_000)
            page.wait_for_function(
                "() => document.querySelector('#jp-main-statusbar')?.innerText.includes('Idle')", timeout=120_000)
            page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(r"^Run$")).click(timeout=15_000)
            page.locator(".lm-Menu-itemLabel", has_text=re.compile(r"^Run All Cells$")).click(timeout=15_000)
            explorer = page.locator(".cl-range-explorer").first
            explorer.wait_for(timeout=300_000)
            stats = explorer.locator(".cl-range-stats").inner_text(timeout=30_000)
            failed = page.get_by_text("Error displaying widget").count()
            assert not failed, f"the hub's JupyterLab shows 'Error displaying widget' ({failed}x): " \
                               "jupyterlab_widgets is not where JupyterLab runs"
            return stats
        finally:
            browser.close()


@pytest.mark.timeout(1500)  # a backstop: every wait inside is bounded on its own
def test_two_students_work_and_hand_in_on_a_real_jupyterhub(capsys):
    needs_a_hub()
    base = shared_dir("calibration-lab-hub-test-")
    try:
        with system_users(USERS) as users:
            t0 = time.monotonic()
            requirements = (REPO / "requirements.txt").read_text(encoding="utf-8")
            lab_env = jupyterlab_env(base / "jupyterlab-env", requirements)
            say(capsys, f"the hub's JupyterLab env (jupyterhub, jupyterlab) in {time.monotonic() - t0:.0f} s")
            prefix, kernel_prefix = base / "opt", base / "kernels"
            t0 = time.monotonic()
            install = admin_install(prefix, lab_env, kernel_prefix)
            assert install.returncode == 0, f"the admin's command failed:\n{install.stdout[-3000:]}{install.stderr}"
            t1 = time.monotonic()
            again = admin_install(prefix, lab_env, kernel_prefix)
            assert again.returncode == 0 and "exists: kept" in again.stdout, f"not idempotent:\n{again.stderr}"
            say(capsys, f"the admin's command in {t1 - t0:.0f} s, again in {time.monotonic() - t1:.0f} s")
            check_the_install(prefix, kernel_prefix, lab_env)
            hub = start_hub(base, USERS, lab_env, {"JUPYTER_PATH": str(kernel_prefix / "share" / "jupyter")})
            try:
                on_the_hub(hub, users, prefix, capsys)
            finally:
                t0 = time.monotonic()
                stop_hub(hub)
                say(capsys, f"hub stopped in {time.monotonic() - t0:.0f} s")
            t0 = time.monotonic()
        say(capsys, f"users removed in {time.monotonic() - t0:.0f} s")
    finally:
        t0 = time.monotonic()
        subprocess.run(["rm", "-rf", str(base)], check=False)
        say(capsys, f"temp folder removed in {time.monotonic() - t0:.0f} s")


def check_the_install(prefix: Path, kernel_prefix: Path, lab_env: Path) -> None:
    """Root's and read-only; the kernel for every user, its workspace in each one's home."""
    spec_dir = kernel_prefix / "share" / "jupyter" / "kernels" / "calibration-lab"
    assert_read_only_for_students(prefix, spec_dir)
    spec = json.loads((spec_dir / "kernel.json").read_text())
    assert spec["env"] == {"LAB_WORK_DIR": hub_install.WORK_DIR}
    assert spec["argv"][0] == str(prefix / "venv" / "bin" / "python")
    system_path = subprocess.run([lab_env / "bin" / "python", "-c", "import jupyter_core.paths as p; "
                                  "print(p.SYSTEM_JUPYTER_PATH)"], capture_output=True, text=True).stdout
    assert f"{hub_install.KERNEL_PREFIX}/share/jupyter" in system_path, \
        f"the default kernel prefix is not on the hub JupyterLab's system path: {system_path}"


def on_the_hub(hub: Hub, users: dict, prefix: Path, capsys) -> None:
    """Both servers at once, both students' sessions at once, their files; one student's browser."""
    kit = prefix / "kit"
    say(capsys, f"both servers ready {hub.start_servers():.1f} s after the API asked for them at once")
    t1 = time.monotonic()
    with ThreadPoolExecutor(len(USERS)) as pool:
        sessions = dict(zip(USERS, pool.map(lambda u: student_session(hub, u, kit, prefix), USERS)))
    say(capsys, f"both students' sessions at once in {time.monotonic() - t1:.0f} s: " + ", ".join(
        f"{u} lessons 00 {s['00']:.1f} s and 01 {s['01']:.1f} s" for u, s in sessions.items()))

    for user, got in sessions.items():
        home = Path(users[user].pw_dir)
        uid = users[user].pw_uid
        assert "returncode=0" in got["copy"], got["copy"]
        assert got["probe"].count("read-only") == 3, f"{user} can write into the shared lab:\n{got['probe']}"
        assert f"lab from {prefix}/venv/" in got["probe"], got["probe"]
        assert got["environment"].strip() == "[]", f"{user}'s environment check: {got['environment']}"
        work = home / HOME_KIT / "workspace"
        variant = json.loads((work / "variant.json").read_text())
        assert variant["student"] == user
        made = [p for p in work.rglob("*") if p.is_file()]
        assert {"variant.json", "source.onnx", "predictions.json"} <= {p.name for p in made}, made
        assert all(p.stat().st_uid == uid for p in made), f"{user}'s workspace holds files not theirs: {made}"
        zipped = home / HOME_KIT / f"{user}.zip"
        assert f"wrote {zipped}" in got["hand_in"], got["hand_in"]
        assert zipped.stat().st_uid == uid
        with zipfile.ZipFile(zipped) as zf:
            manifest = json.loads(zf.read("submission.json"))
        assert manifest["student"] == user and manifest["variant"] == user
        assert "predictions.json" in manifest["files"], sorted(manifest["files"])
    assert not list(prefix.rglob("*.zip")) and not list(prefix.rglob("variant.json"))

    t2 = time.monotonic()
    stats = widget_in_the_hubs_jupyterlab(hub, USERS[0])
    assert "clipped" in stats, stats
    say(capsys, f"range explorer in the hub's JupyterLab ({time.monotonic() - t2:.0f} s): {stats!r}")

    if os.environ.get("LAB_HUB_COST"):
        for group in (USERS[:1], USERS):
            seconds, rss = lesson10_cost(hub, group, kit)
            say(capsys, f"lesson 10, {len(group)} student(s) at once: " + ", ".join(
                f"{s:.1f} s, kernel peak {r:.2f} GB" for s, r in zip(seconds, rss)))
