"""A real JupyterHub for tests/test_hub.py: system users, the hub's JupyterLab environment, the hub and its proxy on
127.0.0.1, its REST API, and a kernel driven over a student's server (REST and the kernel's websocket), each wait
bounded.

The hub runs from this project's venv (``jupyterhub`` is pinned in requirements.txt's test block); the students'
servers run JupyterLab from a separate environment made with the system's ``python3`` (every user can run it: this
venv's Python may live under /root), as a hub's single-user environment does. Its environment is built from scratch:
nothing of the test's (``PYTHONPATH`` pointing at the checkout, ``VIRTUAL_ENV``) reaches the students' kernels.
"""
from __future__ import annotations

import json
import os
import pwd
import secrets
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from browser_support import chromium_path, free_port

REPO = Path(__file__).resolve().parents[1]
SYSTEM_PYTHON = Path("/usr/bin/python3")
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
KERNEL = "calibration-lab"


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in {"1", "true", "yes"}


def needs_a_hub() -> None:
    """Skip (fail in CI) where a hub with system users cannot run: not root on Linux, no useradd, no
    configurable-http-proxy (npm), no system python3 with venv, no Chromium."""
    tools = {"useradd": "passwd", "userdel": "passwd", "configurable-http-proxy": "npm (.ci/run installs it)"}
    missing = [f"{name} ({where})" for name, where in tools.items() if shutil.which(name, path=PATH) is None]
    if not SYSTEM_PYTHON.exists() or subprocess.run([SYSTEM_PYTHON, "-c", "import venv, ensurepip"],
                                                    capture_output=True).returncode:
        missing.append(f"{SYSTEM_PYTHON} with venv (python3-venv)")
    if chromium_path() is None:
        missing.append("chromium")
    why = ("not root on Linux" if sys.platform != "linux" or os.geteuid() != 0 else
           f"missing: {', '.join(missing)}" if missing else None)
    if why and in_ci():
        pytest.fail(f"CI cannot run a JupyterHub with system users: {why}", pytrace=False)
    if why:
        pytest.skip(f"a real JupyterHub needs root, system users and npm's configurable-http-proxy: {why}")


RAM_DIR = Path("/dev/shm")
RAM_NEEDED = 3 << 30  # two venvs and a kit: about 0.75 GB; removing their 30,000 files took 2-3 minutes on disk


def shared_dir(prefix: str) -> Path:
    """A new folder that every user can enter (pytest's own are root's alone): in memory (``/dev/shm``) where it
    has room and allows programs, else under the system's temp folder."""
    import tempfile

    where = None
    if RAM_DIR.is_dir():
        fs = os.statvfs(RAM_DIR)
        if fs.f_bavail * fs.f_frsize >= RAM_NEEDED and not fs.f_flag & os.ST_NOEXEC:
            where = RAM_DIR
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=where))
    path.chmod(0o755)
    return path


def kill_processes_of(uid: int) -> None:
    """End every process of ``uid`` by its pid (the test's own users: whatever outlived the hub)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        pids = [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit() and _owner(p) == uid]
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        if pids:
            time.sleep(1)


def _owner(proc: Path) -> int | None:
    try:
        return proc.stat().st_uid
    except FileNotFoundError:
        return None


@contextmanager
def system_users(names: tuple[str, ...]) -> Iterator[dict[str, pwd.struct_passwd]]:
    """Create ``names`` with ``useradd -m`` (refusing names that exist: never someone else's account), yield their
    passwd entries, then end their processes and ``userdel -r`` them."""
    taken = [n for n in names if _exists(n)]
    if taken:
        pytest.fail(f"system users {taken} exist already (a crashed run? `userdel -r NAME`); the test makes its own")
    made = []
    try:
        for name in names:
            subprocess.run(["useradd", "-m", "-s", "/bin/bash", name], check=True, env={"PATH": PATH})
            made.append(name)
        yield {n: pwd.getpwnam(n) for n in names}
    finally:
        for name in made:
            kill_processes_of(pwd.getpwnam(name).pw_uid)
            subprocess.run(["userdel", "-r", name], capture_output=True, env={"PATH": PATH})


def _exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


def jupyterlab_env(dest: Path, requirements: str) -> Path:
    """The hub's single-user environment: the system's python3, ``jupyterhub`` and ``jupyterlab`` at the project's
    pins, and nothing of the lab (the admin's command adds ``jupyterlab_widgets``)."""
    from instructor import pins

    subprocess.run([SYSTEM_PYTHON, "-m", "venv", dest], check=True)
    wanted = [pins.pin(requirements, name) for name in ("jupyterhub", "jupyterlab")]
    proc = subprocess.run([dest / "bin" / "python", "-m", "pip", "install", "-q", *wanted], capture_output=True,
                          text=True)
    assert proc.returncode == 0, f"pip install {wanted} into the hub's JupyterLab env failed:\n{proc.stderr[-3000:]}"
    return dest


@dataclass
class Hub:
    """A running JupyterHub: its URL, the API token of the test's service, its log, and the user password."""

    process: subprocess.Popen
    url: str
    token: str
    password: str
    log_path: Path
    users: tuple[str, ...] = field(default_factory=tuple)

    def request(self, method: str, path: str, body: dict | None = None, timeout: float = 30.0):
        """``method path`` on the hub's URL with the service token: (status, parsed JSON or None)."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, method=method, data=data,
                                     headers={"Authorization": f"token {self.token}",
                                              "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                raw = resp.read()
                return resp.status, (json.loads(raw) if raw else None)
        except urllib.error.HTTPError as e:
            raise AssertionError(f"{method} {path}: HTTP {e.code}: {e.read()[:500]!r}\n"
                                 f"hub log:\n{self.log_tail()}") from None

    def log_tail(self, lines: int = 40) -> str:
        text = self.log_path.read_text(encoding="utf-8", errors="replace") if self.log_path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def start_servers(self, timeout: float = 180.0) -> float:
        """Ask the hub to start every user's server at once; wait until each is ready. Returns the seconds."""
        t0 = time.monotonic()
        for user in self.users:
            status, _ = self.request("POST", f"/hub/api/users/{user}/server")
            assert status in (201, 202), f"starting {user}'s server: HTTP {status}"
        waiting = set(self.users)
        while waiting and time.monotonic() - t0 < timeout:
            for user in sorted(waiting):
                _, model = self.request("GET", f"/hub/api/users/{user}")
                if model["servers"].get("", {}).get("ready"):
                    waiting.discard(user)
            time.sleep(1)
        assert not waiting, f"servers of {sorted(waiting)} not ready in {timeout:.0f} s\nhub log:\n{self.log_tail()}"
        return time.monotonic() - t0


HUB_CONFIG = """\
c = get_config()
c.JupyterHub.bind_url = "http://127.0.0.1:{port}"
c.JupyterHub.hub_bind_url = "http://127.0.0.1:{hub_port}"
c.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:{proxy_port}"
c.ConfigurableHTTPProxy.command = [{chp!r}]
c.JupyterHub.db_url = "sqlite:///{state}/jupyterhub.sqlite"
c.JupyterHub.cookie_secret_file = "{state}/jupyterhub_cookie_secret"
c.JupyterHub.authenticator_class = "shared-password"
c.SharedPasswordAuthenticator.user_password = {password!r}
c.Authenticator.allowed_users = set({users!r})
c.JupyterHub.spawner_class = "localprocess"
c.Spawner.cmd = [{singleuser!r}]
c.Spawner.default_url = "/lab"
c.Spawner.start_timeout = 180
c.Spawner.http_timeout = 180
c.Spawner.environment = {environment!r}
c.JupyterHub.services = [{{"name": "course-test", "api_token": {token!r}}}]
c.JupyterHub.load_roles = [{{"name": "course-test", "services": ["course-test"],
                             "scopes": ["admin:users", "admin:servers", "access:servers"]}}]
"""


def start_hub(state: Path, users: tuple[str, ...], lab_env: Path, environment: dict[str, str],
              timeout: float = 90.0) -> Hub:
    """Start JupyterHub (this venv's) with LocalProcessSpawner, a shared password and a service token, on free
    loopback ports, its state in ``state``; ``users`` are its allowed users (the hub adds them at start).
    ``environment`` goes to each user's server."""
    token, password = secrets.token_hex(24), secrets.token_hex(12)
    port = free_port()
    config = state / "jupyterhub_config.py"
    config.write_text(HUB_CONFIG.format(
        port=port, hub_port=free_port(), proxy_port=free_port(), chp=shutil.which("configurable-http-proxy", path=PATH),
        state=state, password=password, users=sorted(users), singleuser=str(lab_env / "bin" / "jupyterhub-singleuser"),
        environment={"PATH": f"{lab_env / 'bin'}:{PATH}", **environment}, token=token), encoding="utf-8")
    log_path = state / "jupyterhub.log"
    env = {"PATH": PATH, "LANG": "C.UTF-8", "HOME": str(state)}
    with open(log_path, "wb") as log:
        process = subprocess.Popen([sys.executable, "-m", "jupyterhub", "-f", str(config)], cwd=state, env=env,
                                   stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                   start_new_session=True)
    hub = Hub(process, f"http://127.0.0.1:{port}", token, password, log_path, users)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            stop_hub(hub)  # its proxy may outlive it
            raise AssertionError(f"JupyterHub exited with {process.returncode}:\n{hub.log_tail()}")
        try:
            with urllib.request.urlopen(f"{hub.url}/hub/api/", timeout=2):
                return hub
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            time.sleep(0.5)
    stop_hub(hub)
    raise AssertionError(f"JupyterHub did not answer in {timeout:.0f} s:\n{hub.log_tail()}")


def stop_hub(hub: Hub, timeout: float = 30.0) -> None:
    """SIGINT the hub (it stops the users' servers and its proxy), then its process group and its proxy (in a
    session of its own, its pid in ``jupyterhub-proxy.pid``) if anything is left."""
    if hub.process.poll() is None:
        hub.process.send_signal(signal.SIGINT)
        try:
            hub.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pass
    proxy_pid = hub.log_path.with_name("jupyterhub-proxy.pid")
    groups = [hub.process.pid] + ([int(proxy_pid.read_text())] if proxy_pid.exists() else [])
    for pgid in groups:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(pgid, sig)
            except ProcessLookupError:
                break
            time.sleep(1)



class KernelError(AssertionError):
    """A cell raised in a student's kernel."""


class RemoteKernel:
    """A session on ``user``'s server through the hub's proxy (``/user/NAME/api/sessions``), a notebook's kernel;
    ``run`` executes code over the kernel's websocket and returns what it printed."""

    def __init__(self, hub: Hub, user: str, path: str, timeout: float = 120.0):
        import websocket  # deferred: jupyter_server's dependency, needed by the hub test only

        self.hub, self.user = hub, user
        _, model = hub.request("POST", f"/user/{user}/api/sessions", {
            "path": path, "name": Path(path).name, "type": "notebook", "kernel": {"name": KERNEL}}, timeout=timeout)
        self.session_id, self.kernel_id = model["id"], model["kernel"]["id"]
        ws_url = hub.url.replace("http", "ws", 1) + f"/user/{user}/api/kernels/{self.kernel_id}/channels"
        self.ws = websocket.create_connection(ws_url, header=[f"Authorization: token {hub.token}"], timeout=timeout)
        self.session = uuid.uuid4().hex

    def run(self, code: str, timeout: float = 600.0) -> str:
        """Execute ``code``; its stdout and text results. KernelError with the traceback if it raised."""
        msg_id = uuid.uuid4().hex
        self.ws.send(json.dumps({
            "header": {"msg_id": msg_id, "username": self.user, "session": self.session,
                       "msg_type": "execute_request", "version": "5.3"},
            "parent_header": {}, "metadata": {}, "channel": "shell", "buffers": [],
            "content": {"code": code, "silent": False, "store_history": True, "user_expressions": {},
                        "allow_stdin": False, "stop_on_error": True}}))
        out: list[str] = []
        error, replied, idle = None, False, False
        deadline = time.monotonic() + timeout
        while not (replied and idle):
            self.ws.settimeout(max(1.0, deadline - time.monotonic()))
            frame = self.ws.recv()
            if time.monotonic() > deadline:
                raise KernelError(f"{self.user}: no reply in {timeout:.0f} s to:\n{code[:300]}")
            if not isinstance(frame, str):
                continue  # a binary frame: a widget's buffers
            msg = json.loads(frame)
            if msg.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            kind, content = msg["header"]["msg_type"], msg["content"]
            if kind == "stream":
                out.append(content["text"])
            elif kind in ("execute_result", "display_data"):
                out.append(content["data"].get("text/plain", "") + "\n")
            elif kind == "error":
                error = "\n".join(content["traceback"])
            elif kind == "status" and content["execution_state"] == "idle":
                idle = True
            elif kind == "execute_reply":
                replied = True
        if error:
            raise KernelError(f"{self.user}: the cell raised:\n{code[:300]}\n{error[-3000:]}")
        return "".join(out)

    def close(self) -> None:
        self.ws.close()
        self.hub.request("DELETE", f"/user/{self.user}/api/sessions/{self.session_id}")
