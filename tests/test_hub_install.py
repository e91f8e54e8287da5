"""The hub admin's command (``python3 -m instructor hub``) on bad input, and the pieces it is made of: each refusal
is one line naming the problem; the shared install is readable by all and writable by root alone."""
from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from instructor import hub, pins

REPO = Path(__file__).resolve().parents[1]


def run_hub(*args: str, user: str | None = None) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "instructor", "hub", *args]
    if user:
        command = ["runuser", "-u", user, "--", *command]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)


def test_not_root_is_refused_in_one_line():
    with pytest.raises(hub.HubError, match=r"run as root \(sudo python3 -m instructor hub"):
        hub.check_root(1000)
    hub.check_root(0)


def test_a_missing_jupyterlab_env_is_named(tmp_path):
    with pytest.raises(hub.HubError, match=rf"--jupyterlab-env {tmp_path}: no {tmp_path}/bin/python3; name the env"):
        hub.jupyterlab_python(tmp_path)


def test_an_env_whose_python_has_no_jupyterlab_is_refused(tmp_path):
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", tmp_path / "env"], check=True)
    with pytest.raises(hub.HubError, match="its Python cannot import jupyterlab"):
        hub.jupyterlab_python(tmp_path / "env")


def test_a_python_other_users_cannot_reach_is_named():
    shared = Path(tempfile.mkdtemp(prefix="calibration-lab-hub-unit-"))  # pytest's own temp folders are root's alone
    try:
        shared.chmod(0o755)
        closed = shared / "closed"
        (closed / "bin").mkdir(parents=True)
        python = closed / "bin" / "python3"
        python.write_text("")
        python.chmod(0o755)
        closed.chmod(0o700)
        assert hub.unreachable(python) == closed
        with pytest.raises(hub.HubError, match=rf"students cannot run this Python .*{closed} is closed to other"):
            hub.check_python_for_everyone(python)
        closed.chmod(0o755)
        assert hub.unreachable(python) is None
        python.chmod(0o700)
        assert hub.unreachable(python) == python
    finally:
        shutil.rmtree(shared)


def test_the_shared_install_becomes_readable_by_all_and_writable_by_the_owner_only(tmp_path):
    (tmp_path / "venv" / "bin").mkdir(parents=True)
    tool, data = tmp_path / "venv" / "bin" / "tool", tmp_path / "venv" / "data.json"
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o770)
    data.write_text("{}")
    data.chmod(0o600)
    (tmp_path / "venv").chmod(0o700)
    (tmp_path / "link").symlink_to(data)
    assert hub.share_read_only(tmp_path) >= 3
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in (tool, data, tmp_path / "venv")}
    assert modes == {"tool": 0o755, "data.json": 0o644, "venv": 0o755}
    assert hub.share_read_only(tmp_path) == 0  # idempotent


def test_the_kernels_venv_gets_the_student_pins_without_the_test_stack_or_the_checkout():
    text = hub.kernel_requirements(REPO)
    lines = [ln for ln in text.splitlines() if ln and not ln.startswith("#")]
    assert "onnxruntime==1.32.0" in lines and pins.pin(text, "jupyterlab_widgets") in lines
    assert not [ln for ln in lines if ln.startswith(("-e", "pytest", "jupyterhub", "playwright"))], lines


def test_pin_names_a_package_the_requirements_do_not_pin():
    with pytest.raises(ValueError, match="requirements.txt pins no jupyterlab_widgets"):
        pins.pin("numpy==2.4.6\n", "jupyterlab_widgets")
    assert pins.pin("jupyterlab_widgets==3.0.17  # why\n", "jupyterlab-widgets") == "jupyterlab_widgets==3.0.17"


def test_the_command_refuses_a_relative_prefix_and_a_missing_env_in_one_line(tmp_path):
    if os.geteuid() != 0:
        proc = run_hub("--jupyterlab-env", str(tmp_path))
        assert proc.returncode == 2 and proc.stderr.strip().startswith("hub: run as root"), proc.stderr
        return
    proc = run_hub("--jupyterlab-env", str(tmp_path), "--prefix", "relative")
    assert proc.returncode == 2 and proc.stderr.strip() == "hub: --prefix and --kernel-prefix must be absolute paths"
    proc = run_hub("--jupyterlab-env", str(tmp_path / "nowhere"), "--prefix", str(tmp_path / "opt"))
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert f"hub: --jupyterlab-env {tmp_path / 'nowhere'}: no " in proc.stderr
    assert not (tmp_path / "opt").exists()  # refused before anything was written
