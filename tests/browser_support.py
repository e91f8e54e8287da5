"""Start and stop a real JupyterLab server for the browser test, with bounded waits and clear errors.

The server runs on a free loopback port with a random token, in its own process group, with
its own settings, workspaces, config and runtime folders, so it neither reads nor writes a
developer's JupyterLab state. Every wait has a timeout; :func:`stop_jupyter` always ends the
server and the kernels it started.
"""
from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"]

# JupyterLab user settings for the test server: no news or update pop-ups over the lesson, and every
# cell kept in the page (no windowing), so the test sees all outputs without scrolling.
LAB_SETTINGS = {
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {
        "fetchNews": "false", "checkForUpdates": False},
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
}


class ServerStartError(RuntimeError):
    """JupyterLab could not be started; the message says why (port, kernel, or the server's log)."""


@dataclass
class JupyterServer:
    """A running JupyterLab: where it listens, its token, the folder it serves, and its log."""

    process: subprocess.Popen
    port: int
    token: str
    root_dir: Path
    log_path: Path

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def lab_url(self, notebook: str) -> str:
        """The URL that opens ``notebook`` (relative to ``root_dir``) in JupyterLab, token included."""
        return f"{self.base_url}/lab/tree/{notebook}?token={self.token}"

    def log_tail(self, lines: int = 30) -> str:
        text = self.log_path.read_text(encoding="utf-8", errors="replace") if self.log_path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])


# axe-core's WCAG 2.1 A/AA rules, run in a page; a violation of these impacts fails a test
WCAG_AA = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"]
BLOCKING = {"serious", "critical"}
AXE_RUN = "tags => axe.run(document, {runOnly: {type: 'tag', values: tags}, resultTypes: ['violations']})"


def axe_script() -> Path:
    """axe-core's browser bundle, as the pinned ``axe-playwright-python`` ships it."""
    import pytest  # deferred: this module is also imported by scripts that do not run under pytest

    axe = pytest.importorskip("axe_playwright_python", reason="axe-playwright-python (requirements.txt) is missing")
    return Path(axe.__file__).parent / "axe.min.js"


def axe_blocking(page) -> list[str]:
    """axe-core's serious and critical WCAG 2.1 A/AA violations on ``page``, one line each."""
    page.add_script_tag(path=str(axe_script()))
    violations = page.evaluate(AXE_RUN, WCAG_AA)["violations"]
    return [f"{v['id']} ({v['impact']}, {len(v['nodes'])} nodes): {v['nodes'][0]['html'][:160]}"
            for v in violations if v["impact"] in BLOCKING]


def chromium_path() -> Path | None:
    """Debian's Chromium if it is installed and executable, else None."""
    return CHROMIUM if CHROMIUM.is_file() and os.access(CHROMIUM, os.X_OK) else None


def launched_chromium(skip):
    """Yield a headless Debian Chromium under Playwright, closed afterwards; ``skip(reason)`` when Playwright is
    missing."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        skip("Playwright for Python is not installed (it is in requirements.txt: run `make setup`)")
    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=str(chromium_path()), headless=True, args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_in_use(port: int) -> bool:
    """True if ``port`` on 127.0.0.1 cannot be bound (something else holds it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def check_kernel(name: str) -> Path:
    """The folder of the kernel spec ``name``; ServerStartError if it is missing or its Python is gone."""
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

    manager = KernelSpecManager()
    try:
        spec = manager.get_kernel_spec(name)
    except NoSuchKernel:
        known = ", ".join(sorted(manager.find_kernel_specs())) or "none"
        raise ServerStartError(f"kernel {name!r} is not registered (registered: {known}); "
                               "run `make setup` to register it") from None
    exe = Path(spec.argv[0])
    if exe.is_absolute() and not exe.exists():
        raise ServerStartError(f"kernel {name!r} ({spec.resource_dir}/kernel.json) runs {exe}, "
                               "which does not exist; run `make setup` again")
    return Path(spec.resource_dir)


def copy_notebooks(src: Path, dest_root: Path) -> Path:
    """Copy the lesson notebooks into ``dest_root/notebooks`` (outputs then land there, not in the repo)."""
    dest = dest_root / "notebooks"
    shutil.copytree(src, dest, ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__"))
    return dest


def _write_settings(settings_dir: Path) -> None:
    for rel, value in LAB_SETTINGS.items():
        path = settings_dir / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(value), encoding="utf-8")


def _api(server: JupyterServer, path: str, method: str = "GET", timeout: float = 5.0) -> bytes:
    request = urllib.request.Request(f"{server.base_url}{path}", method=method,
                                     headers={"Authorization": f"token {server.token}"},
                                     data=b"" if method == "POST" else None)
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return response.read()


def start_jupyter(root_dir: Path, state_dir: Path, *, kernel: str = "calibration-lab",
                  port: int | None = None, timeout: float = 90.0) -> JupyterServer:
    """Start ``jupyter lab`` serving ``root_dir`` and wait (at most ``timeout`` s) until its API answers.

    ``state_dir`` receives the server's log and its private settings/config/runtime folders.
    Raises ServerStartError naming the cause: the port is in use, the kernel is missing, the
    server exited, or it did not answer in time (with the tail of its log).
    """
    if not Path(root_dir).is_dir():
        raise ServerStartError(f"root_dir {root_dir} is not a folder; JupyterLab has nothing to serve")
    check_kernel(kernel)
    port = free_port() if port is None else port
    if port_in_use(port):
        raise ServerStartError(f"port {port} on 127.0.0.1 is already in use; stop what listens there "
                               "or pick another port")
    state_dir.mkdir(parents=True, exist_ok=True)
    _write_settings(state_dir / "lab-settings")
    env = dict(os.environ,
               JUPYTERLAB_SETTINGS_DIR=str(state_dir / "lab-settings"),
               JUPYTERLAB_WORKSPACES_DIR=str(state_dir / "lab-workspaces"),
               JUPYTER_CONFIG_DIR=str(state_dir / "config"),
               JUPYTER_RUNTIME_DIR=str(state_dir / "runtime"),
               PYTHONUNBUFFERED="1")
    token = secrets.token_hex(16)
    command = [sys.executable, "-m", "jupyterlab", "--no-browser", "--allow-root",
               "--ip=127.0.0.1", f"--port={port}", "--ServerApp.port_retries=0",
               f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root_dir}",
               f"--MultiKernelManager.default_kernel_name={kernel}",
               "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"]
    log_path = state_dir / "jupyter.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(command, cwd=root_dir, env=env, stdin=subprocess.DEVNULL,
                                   stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    server = JupyterServer(process, port, token, Path(root_dir), log_path)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            tail = server.log_tail()
            cause = (f"port {port} is already in use" if "already in use" in tail
                     else f"it exited with code {process.returncode}")
            raise ServerStartError(f"JupyterLab did not start: {cause}. Its log ({log_path}) ends with:\n{tail}")
        try:
            json.loads(_api(server, "/api/status", timeout=2.0))
            return server
        except (urllib.error.URLError, ConnectionError, TimeoutError, ValueError):
            time.sleep(0.5)
    stop_jupyter(server)
    raise ServerStartError(f"JupyterLab did not answer on {server.base_url} within {timeout:.0f} s. "
                           f"Its log ({log_path}) ends with:\n{server.log_tail()}")


def stop_jupyter(server: JupyterServer, timeout: float = 20.0) -> int | None:
    """Shut the server down through its API, then by signal to its process group; return its exit code.

    Never waits longer than about ``timeout`` + 10 seconds in total.
    """
    process = server.process
    if process.poll() is None:
        try:
            _api(server, "/api/shutdown", method="POST", timeout=5.0)
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pass
    for sig in (signal.SIGTERM, signal.SIGKILL):  # the server's own group: its kernels too, nothing else
        if not _group_alive(process.pid):
            break
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + 5.0
        while _group_alive(process.pid) and time.monotonic() < deadline:
            if process.poll() is None:
                try:
                    process.wait(timeout=0.2)
                except subprocess.TimeoutExpired:
                    pass
            else:
                time.sleep(0.2)
    return process.poll()


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True
