"""Fresh Debian roots for the tests that run the project on a new machine (``test_fresh_machine``,
``test_colab_root``): ``debootstrap`` makes one, ``in_root`` runs a command in it as a container would.

A made root is kept as a tarball under ``build/roots/`` (keyed by suite and packages, reused for ``CACHE_DAYS``),
so the second test of a run, and the next run, unpack it in seconds instead of minutes of debootstrap.
"""
from __future__ import annotations

import hashlib
import io
import os
import shlex
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
INCLUDE = "python3,python3-venv,make,ca-certificates"  # what a fresh Debian machine with Python has; no bubblewrap
HOST_CA = "/etc/ssl/certs/host-pip-ca.crt"  # the host's CA bundle for pip (PIP_CERT), copied into the root
ROOT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
CACHE = REPO / "build" / "roots"
CACHE_DAYS = 7  # a cached root older than this is made again (Debian's security updates)


def tool(name: str) -> str | None:
    return shutil.which(name, path=os.environ.get("PATH", "") + os.pathsep + "/usr/sbin:/sbin")


def needs_a_root_maker() -> None:
    """Skip (fail in CI) where no Debian root can be made and entered: not root, not Linux, no debootstrap."""
    missing = [name for name in ("debootstrap", "unshare", "chroot", "mount") if tool(name) is None]
    why = ("not root" if sys.platform != "linux" or os.geteuid() != 0 else
           f"{', '.join(missing)} not installed" if missing else None)
    if why and os.environ.get("CI"):
        pytest.fail(f"CI cannot make a fresh Debian root: {why} (.ci/run installs debootstrap)")
    if why:
        pytest.skip(f"a fresh Debian root needs root and debootstrap: {why}")


def debootstrap(suite: str, dest: Path, log: Path, include: str = INCLUDE) -> None:
    """``debootstrap --variant=minbase`` of ``suite`` into ``dest`` (Debian's default mirror)."""
    with log.open("w", encoding="utf-8") as out:
        proc = subprocess.run([tool("debootstrap"), "--variant=minbase", f"--include={include}", suite, str(dest)],
                              stdout=out, stderr=subprocess.STDOUT, timeout=1200)
    assert proc.returncode == 0, f"debootstrap {suite} failed:\n{log.read_text(encoding='utf-8')[-3000:]}"


def make_root(suite: str, dest: Path, log: Path, include: str = INCLUDE) -> float:
    """A fresh ``suite`` root in ``dest``: unpacked from the cache when one younger than ``CACHE_DAYS`` is there,
    else made by ``debootstrap`` and cached; its seconds."""
    start = time.monotonic()
    key = hashlib.sha256(f"{suite} {include}".encode()).hexdigest()[:12]
    cached = CACHE / f"{suite}-{key}.tar"
    if not cached.is_file() or time.time() - cached.stat().st_mtime > CACHE_DAYS * 86400:
        debootstrap(suite, dest, log, include)
        CACHE.mkdir(parents=True, exist_ok=True)
        part = cached.with_name(f".{cached.name}.{os.getpid()}")  # two workers may make it at once: last one wins
        subprocess.run(["tar", "-C", str(dest), "--numeric-owner", "-cf", str(part), "."], check=True)
        part.replace(cached)
    else:
        dest.mkdir(parents=True)
        subprocess.run(["tar", "-C", str(dest), "--numeric-owner", "-xpf", str(cached)], check=True)
    return time.monotonic() - start


def give_host_network(root: Path) -> dict[str, str]:
    """What a fresh root needs from the host to reach the registries: its resolv.conf, pip.conf and pip's CA bundle
    (copied to ``HOST_CA``: PIP_CERT points there). Returns the pip variables for the root's environment."""
    for name in ("/etc/resolv.conf", "/etc/pip.conf"):
        if Path(name).is_file():
            shutil.copyfile(name, root / name.lstrip("/"))
    env = {k: v for k, v in os.environ.items() if k in ("PIP_DEFAULT_TIMEOUT", "PIP_INDEX_URL")}
    bundle = os.environ.get("PIP_CERT") or "/etc/ssl/certs/ca-certificates.crt"
    if Path(bundle).is_file():
        shutil.copyfile(bundle, root / HOST_CA.lstrip("/"))
        env["PIP_CERT"] = HOST_CA
    return env


def export_project(dest: Path) -> Path:
    """The project's committed files (``git archive HEAD``) in ``dest``: what the root gets, and what this machine's
    run compares against (not the working tree, which may hold uncommitted edits)."""
    archive = subprocess.run(["git", "-C", str(REPO), "archive", "--format=tar", "HEAD"], capture_output=True,
                             check=True).stdout
    dest.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(dest, filter="data")
    return dest


def in_root(root: Path, command: str, env: dict[str, str], log: Path, timeout: float) -> tuple[int, str]:
    """``command`` as root inside ``root``, as a container runs it: a private mount namespace in which the root is a
    mount point (bubblewrap refuses a plain chroot) with its own /proc; a clean environment. (exit code, output)."""
    variables = {"PATH": ROOT_PATH, "HOME": "/root", "LANG": "C.UTF-8", "DEBIAN_FRONTEND": "noninteractive",
                 "PIP_DISABLE_PIP_VERSION_CHECK": "1", **env}
    inner = "env -i " + " ".join(shlex.quote(f"{k}={v}") for k, v in variables.items()) + " sh -c " + \
        shlex.quote(command)
    r = shlex.quote(str(root))
    outer = f"mount --bind {r} {r} && mount -t proc proc {r}/proc && exec chroot {r} {inner}"
    with log.open("w", encoding="utf-8") as out:
        proc = subprocess.run([tool("unshare"), "--mount", "--fork", "--", "sh", "-c", outer], stdout=out,
                              stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, timeout=timeout)
    return proc.returncode, log.read_text(encoding="utf-8", errors="replace")
