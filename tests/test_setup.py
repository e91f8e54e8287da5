"""Set-up on every machine: the preflight names a Python or a system the pins cannot install on before pip runs
(and runs on an old Python), set-up leaves one kernel and no build leftovers, JupyterLab offers only that kernel,
the kit's README has a command without make for every target of the kit's Makefile and a systems table that agrees
with the preflight, and nothing the kit runs is POSIX-only."""
from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import nbformat
import pytest
from browser_support import free_port

from instructor import kit as kit_builder
from lab import environment
from lab.tools import preflight, setup

REPO = Path(__file__).resolve().parents[1]
KIT_README = kit_builder.KIT_FILES / "README.md"
OK = dict(version=(3, 12), system=("linux", "x86_64"), bits=64, libc=("glibc", "2.36"), translated=False,
          has_venv=True, macos="")


def what(**changed) -> str:
    """The problems preflight finds for a machine like OK but for ``changed``, as one text."""
    return " | ".join(f"{a} -> {b}" for a, b in preflight.problems(**{**OK, **changed}))


# --- the preflight ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("changed, words", [
    (dict(version=(3, 10)), ["Python 3.10 is outside", "3.11 to 3.14", "make setup PYTHON=python3.11"]),
    (dict(version=(3, 15)), ["Python 3.15 is outside", "3.11 to 3.14"]),
    (dict(system=("darwin", "x86_64"), macos="14.5"), ["Intel Mac", "no wheel", "1.23.2", "Linux container"]),
    (dict(system=("darwin", "x86_64"), translated=True, macos="14.5"), ["Rosetta", "arm64 (or universal2) Python"]),
    (dict(system=("darwin", "arm64"), macos="13.6"), ["macOS 13.6", "macOS 14.0 or later"]),
    (dict(system=("win32", "x86_64"), bits=32), ["32-bit build", "64-bit Python"]),
    (dict(system=("win32", "arm64"), version=(3, 11)), ["Python 3.11 is outside", "3.12 to 3.14"]),
    (dict(libc=("glibc", "2.27")), ["glibc 2.27", "glibc 2.28 or later"]),
    (dict(libc=("musl", "1.2.4")), ["musl 1.2.4"]),
    (dict(system=("freebsd14", "x86_64")), ["no wheels for this system (freebsd14 on x86_64)"]),
    (dict(has_venv=False), ["ensurepip", "apt-get install python3-venv"]),
])
def test_the_preflight_names_what_cannot_install_and_what_to_do(changed, words):
    found = what(**changed)
    assert found and all(w in found for w in words), found


@pytest.mark.parametrize("system, versions", [
    (("linux", "x86_64"), [(3, 11), (3, 14)]), (("linux", "arm64"), [(3, 13)]),
    (("darwin", "arm64"), [(3, 11), (3, 14)]), (("win32", "x86_64"), [(3, 11), (3, 14)]),
    (("win32", "arm64"), [(3, 12), (3, 14)]),
])
def test_the_preflight_passes_every_supported_python_and_system(system, versions):
    for version in versions:
        assert what(system=system, version=version, macos="15.1" if system[0] == "darwin" else "") == ""


def test_the_preflight_passes_this_machine_and_says_so():
    proc = subprocess.run([sys.executable, "-m", "lab.tools.preflight"], capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"preflight: Python {sys.version.split()[0]} ") and "has wheels here" in proc.stdout


def test_a_machine_the_pins_cannot_install_on_stops_set_up_before_the_venv(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(preflight, "problems", lambda: [("this is an Intel Mac", "use another machine")])
    with pytest.raises(SystemExit):
        setup.setup(tmp_path / ".venv", "requirements.txt")
    err = capsys.readouterr().err
    assert "set-up stops here, before pip" in err and "What to do: use another machine." in err
    assert not (tmp_path / ".venv").exists()


@pytest.mark.parametrize("module", [preflight, setup])
def test_set_up_parses_on_python_38_and_imports_only_the_standard_library(module):
    """An old Python must reach the preflight's message, not a SyntaxError or an ImportError."""
    source = Path(module.__file__).read_text(encoding="utf-8")
    tree = ast.parse(source, feature_version=(3, 8))
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert imported - {"lab"} <= set(sys.stdlib_module_names), imported
    assert "from __future__ import annotations" not in source  # would hide 3.9+ annotations from the check
    assert all(node.module == "lab.tools" for node in ast.walk(tree)
               if isinstance(node, ast.ImportFrom) and node.module.startswith("lab"))


# --- one kernel, no leftovers ---------------------------------------------------------------------------------------

def test_set_up_names_the_kernel_lab_environment_checks():
    assert setup.KERNEL == environment.KERNEL_NAME


def test_tidy_leaves_one_kernel_and_no_egg_info_and_writes_the_jupyter_configuration(tmp_path):
    kernels = tmp_path / ".venv" / "share" / "jupyter" / "kernels"
    for name in ("python3", setup.KERNEL):
        (kernels / name).mkdir(parents=True)
        (kernels / name / "kernel.json").write_text("{}")
    (tmp_path / "calibration_lab.egg-info").mkdir()
    (tmp_path / "calibration_lab.egg-info" / "PKG-INFO").write_text("x")
    removed = setup.tidy(tmp_path / ".venv", tmp_path)
    assert sorted(p.name for p in removed) == ["calibration_lab.egg-info", "python3"]
    assert [p.name for p in kernels.iterdir()] == [setup.KERNEL]
    config = json.loads((tmp_path / ".venv" / "etc" / "jupyter" / "jupyter_server_config.json").read_text())
    assert config["KernelSpecManager"]["allowed_kernelspecs"] == [setup.KERNEL]


def test_jupyterlab_with_set_ups_configuration_offers_the_calibration_lab_kernel_only(tmp_path):
    """The configuration set-up writes, read by a real JupyterLab: one kernel, and it is the default. (Set-up writes
    it into the venv's etc/jupyter, which is on Jupyter's configuration path of a JupyterLab run from that venv.)"""
    from jupyter_core.paths import jupyter_config_path

    assert str(Path(sys.prefix) / "etc" / "jupyter") in jupyter_config_path()
    config = tmp_path / "config"
    config.mkdir()
    (config / "jupyter_server_config.json").write_text(json.dumps(setup.JUPYTER_CONFIG))
    port, token = free_port(), "t0ken"
    env = {**os.environ, "JUPYTER_CONFIG_DIR": str(config), "JUPYTER_RUNTIME_DIR": str(tmp_path / "rt"),
           "JUPYTER_DATA_DIR": str(tmp_path / "data")}
    server = subprocess.Popen([sys.executable, "-m", "jupyter", "lab", "--no-browser", f"--port={port}",
                               "--ip=127.0.0.1", "--allow-root", f"--ServerApp.token={token}",
                               f"--ServerApp.root_dir={tmp_path}"], env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        specs, deadline = None, time.monotonic() + 60
        while specs is None and time.monotonic() < deadline:
            try:
                request = urllib.request.Request(f"http://127.0.0.1:{port}/api/kernelspecs",
                                                 headers={"Authorization": f"token {token}"})
                with urllib.request.urlopen(request, timeout=5) as answer:
                    specs = json.load(answer)
            except OSError:
                time.sleep(0.5)
    finally:
        server.terminate()
        server.wait(timeout=30)
    assert specs is not None, "JupyterLab did not answer within 60 s"
    assert list(specs["kernelspecs"]) == [setup.KERNEL] and specs["default"] == setup.KERNEL


# --- the kit's README: systems, and a command without make for every target --------------------------------------

def readme_table(text: str, header: str) -> list[list[str]]:
    """The rows (cells stripped) of the Markdown table whose header line starts with ``header``."""
    lines = text.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith(header))
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows


def test_the_kits_systems_table_agrees_with_the_preflight():
    rows = readme_table(KIT_README.read_text(encoding="utf-8"), "| system | 3.11")
    first, last = preflight.PYTHONS
    columns = [(3, minor) for minor in range(first[1], last[1] + 1)]
    supported = {" ".join(name.split()[:2]): span for name, span in preflight.SYSTEMS.values()}
    seen = set()
    for name, *cells in rows:
        key = " ".join(name.split()[:2]).rstrip(",")
        span = supported.get(key)
        yes = [v for v, cell in zip(columns, cells) if cell.startswith("yes")]
        expected = [v for v in columns if span and span[0] <= v <= span[1]]
        assert yes == expected, f"{name}: the README says yes for {yes}, the preflight passes {expected}"
        seen.add(key)
    assert set(supported) <= seen, f"the README's table has no row for {set(supported) - seen}"
    assert "macOS x86-64" in seen  # the Intel Mac row says no, as the preflight does


def test_every_kit_make_target_has_a_command_without_make_on_windows_and_elsewhere():
    rows = readme_table(KIT_README.read_text(encoding="utf-8"), "| `make` target")
    makefile = kit_builder.STUDENT_MAKEFILE
    targets = {t for t in re.findall(r"^([a-z][\w-]*):", makefile, re.M)} - {"help", "student-id"}
    listed = {re.match(r"`make ([a-z-]+)", row[0]).group(1) for row in rows}
    assert listed == targets
    for target, windows, posix in rows:
        if "clean" in target:
            continue
        assert windows.startswith(("`py -3.", "`.venv\\Scripts\\python.exe -m ")), (target, windows)
        assert posix.startswith(("`python3 -m ", "`.venv/bin/python -m ")), (target, posix)
        assert windows.split(" -m ", 1)[1] == posix.split(" -m ", 1)[1], target
        words = " ".join(w for w in posix.strip("`").split(" -m ", 1)[1].split()[:2] if not w.startswith("-"))
        module = words.split()[0]
        assert module == "jupyter" or (REPO / module.replace(".", "/")).with_suffix(".py").exists() or \
            (REPO / module.replace(".", "/") / "__main__.py").exists(), module
        assert f"-m {words}" in makefile, f"{target}: the README runs `-m {words}`, the kit's Makefile does not"


def test_both_makefiles_set_up_through_the_preflight():
    for makefile in ((REPO / "Makefile").read_text(), kit_builder.STUDENT_MAKEFILE):
        assert "$(PYTHON) -m lab.tools.setup" in makefile and "--quiet" not in makefile


# --- nothing POSIX-only in what the kit runs -----------------------------------------------------------------------

POSIX_MODULES = {"posix", "pwd", "grp", "termios", "tty", "pty", "fcntl", "resource", "syslog", "crypt", "spwd",
                 "nis", "curses", "readline", "ossaudiodev"}
"""Standard-library modules Python documents as Unix only (none of them exists on Windows)."""
POSIX_CALLS = {
    "os": {"fork", "forkpty", "getuid", "geteuid", "getgid", "getegid", "getgroups", "setuid", "setgid", "getpgid",
           "getpgrp", "setpgrp", "setsid", "killpg", "getloadavg", "sysconf", "statvfs", "fchown", "chown", "lchown",
           "mkfifo", "mknod", "nice", "wait3", "wait4", "uname", "openpty", "pipe2", "WNOHANG", "sync"},
    "signal": {"SIGKILL", "SIGALRM", "SIGCHLD", "SIGHUP", "SIGUSR1", "SIGUSR2", "SIGQUIT", "SIGTSTP", "SIGCONT",
               "SIGSTOP", "SIGPIPE", "alarm", "setitimer", "pause", "sigwait", "pthread_kill"},
}
"""Functions and constants of os and signal documented as Unix only."""
POSIX_KEYWORDS = {"preexec_fn", "start_new_session", "pass_fds", "process_group"}  # subprocess's POSIX-only options
POSIX_PATH = re.compile(r"^/(tmp|dev|proc|usr|etc|bin|var)(/|$)")


def posix_only(source: str, where: str) -> list[str]:
    """Every POSIX-only thing ``source`` uses: imports, os and signal names, subprocess options, POSIX paths."""
    found = []
    for node in ast.walk(ast.parse(source)):
        names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                 [node.module] if isinstance(node, ast.ImportFrom) and node.module else [])
        found += [f"{where}:{node.lineno}: imports {n}" for n in names if n.split(".")[0] in POSIX_MODULES]
        if isinstance(node, ast.ImportFrom) and node.module in POSIX_CALLS:
            found += [f"{where}:{node.lineno}: {node.module}.{a.name}" for a in node.names
                      if a.name in POSIX_CALLS[node.module]]
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and \
                node.attr in POSIX_CALLS.get(node.value.id, ()):
            found.append(f"{where}:{node.lineno}: {node.value.id}.{node.attr}")
        if isinstance(node, ast.keyword) and node.arg in POSIX_KEYWORDS:
            found.append(f"{where}:{node.value.lineno}: {node.arg}=")
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and POSIX_PATH.match(node.value):
            found.append(f"{where}:{node.lineno}: the path {node.value!r}")
    return found


def test_the_scanner_finds_what_windows_lacks():
    planted = ("import fcntl\nimport os, signal, subprocess\nfrom os import getuid\nos.fork()\n"
               "os.kill(1, signal.SIGKILL)\nsubprocess.run(['x'], start_new_session=True)\nopen('/tmp/x')\n")
    found = {f.split(": ", 1)[1] for f in posix_only(planted, "planted.py")}
    assert found == {"imports fcntl", "os.getuid", "os.fork", "signal.SIGKILL", "start_new_session=",
                     "the path '/tmp/x'"}
    assert posix_only("import os\nos.path.join('a', 'b')\nos.kill(1, 9)\n", "fine.py") == []


def kit_python() -> dict[str, str]:
    """Every piece of Python the kit holds, by where: lab/ and fixtures/ modules (not the instructor's fixture
    builder) and the lessons' code cells (IPython magics and shell lines left out)."""
    sources = {}
    for folder in ("lab", "fixtures"):
        for path in sorted((REPO / folder).rglob("*.py")):
            rel = path.relative_to(REPO).as_posix()
            if rel not in kit_builder.INSTRUCTOR_TOOLS:
                sources[rel] = path.read_text(encoding="utf-8")
    for path in sorted((REPO / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        for index, cell in enumerate(nbformat.read(path, as_version=4).cells):
            if cell.cell_type == "code":
                lines = cell.source.splitlines()
                code = "\n".join("" if ln.lstrip().startswith(("%", "!")) else ln for ln in lines)
                sources[f"notebooks/{path.name}, cell {index}"] = code
    return sources


def test_lab_the_fixtures_and_the_lessons_use_nothing_posix_only():
    found = [f for where, source in kit_python().items() for f in posix_only(source, where)]
    assert len(kit_python()) > 50
    assert not found, "POSIX-only (a student on Windows would fail here):\n  " + "\n  ".join(found)


# --- make lab's one line where the sandbox cannot run ---------------------------------------------------------------

@pytest.mark.skipif(not shutil.which("make"), reason="make is not installed")
def test_make_lab_says_in_one_line_that_the_sandbox_cannot_run_and_nothing_when_it_can():
    notice = subprocess.run(["make", "-s", "--eval", "notice: ; @: $(info $(ISOLATION_NOTICE))", "notice"], cwd=REPO,
                            capture_output=True, text=True, check=True).stdout.strip()
    env = {k: v for k, v in os.environ.items() if k not in ("GRADER_NO_BWRAP", "GRADER_UNSAFE_NO_SANDBOX")}
    refused = subprocess.run([sys.executable, "-c", notice], cwd=REPO, capture_output=True, text=True,
                             env={**env, "GRADER_NO_BWRAP": "1"})
    assert refused.returncode == 0 and refused.stdout == ""
    assert refused.stderr.startswith("make lab: GRADER_NO_BWRAP is set, so the grade below runs no student code")
    assert len(refused.stderr.splitlines()) == 1
    from grader import sandbox

    quiet = subprocess.run([sys.executable, "-c", notice], cwd=REPO, capture_output=True, text=True, env=env)
    assert quiet.returncode == 0 and quiet.stdout == ""
    assert (quiet.stderr == "") == sandbox.bwrap_available(), quiet.stderr


AS_A_USER = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]  # nobody, from root


@pytest.mark.skipif(not (shutil.which("make") and shutil.which("dpkg-query") and shutil.which("setpriv")
                         and getattr(os, "geteuid", lambda: 1)() == 0), reason="needs make, dpkg-query, root")
def test_make_setup_as_a_user_stops_with_the_one_command_for_the_missing_system_packages():
    proc = subprocess.run([*AS_A_USER, "make", "-s", "system", "SYSTEM_PACKAGES=bubblewrap no-such-package-x"],
                          cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0
    assert proc.stdout.splitlines() == ["setup: these system packages are missing; install them, then run make setup "
                                        "again:", "  sudo apt-get install -y --no-install-recommends no-such-package-x"]
    installed = subprocess.run([*AS_A_USER, "make", "-s", "system", "SYSTEM_PACKAGES=bubblewrap"], cwd=REPO,
                               capture_output=True, text=True, timeout=60)
    assert (installed.returncode, installed.stdout) == (0, "")  # nothing to install: silent


def old_pythons() -> list[str]:
    """Interpreters older than the range that run here: python3.8-3.10 on PATH, or pyenv's."""
    found = [shutil.which(f"python3.{minor}") for minor in (8, 9, 10)]
    pyenv = shutil.which("pyenv")
    if pyenv:
        root = subprocess.run([pyenv, "root"], capture_output=True, text=True).stdout.strip()
        found += [str(p) for minor in (8, 9, 10) for p in sorted(Path(root).glob(f"versions/3.{minor}.*/bin/python"))]
    return [p for p in found if p and subprocess.run([p, "-c", "pass"], capture_output=True).returncode == 0]


@pytest.mark.skipif(not old_pythons(), reason="no Python 3.8-3.10 here")
def test_an_old_python_hears_why_set_up_stops_before_any_venv(tmp_path):
    """A real Python outside the range runs set-up in a folder holding only what set-up imports: it stops at the
    preflight, names its version and the range, and makes no venv."""
    for rel in ("lab/__init__.py", "lab/version.py", "lab/tools/__init__.py", "lab/tools/preflight.py",
                "lab/tools/setup.py"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes((REPO / rel).read_bytes())
    for python in old_pythons():
        proc = subprocess.run([python, "-m", "lab.tools.setup", "--venv", "venv", "--requirements", "none.txt"],
                              cwd=tmp_path, capture_output=True, text=True, timeout=60)
        version = subprocess.run([python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                                 capture_output=True, text=True).stdout.strip()
        assert proc.returncode == 1, (python, proc.stdout, proc.stderr)
        assert f"Python {version} is outside the range the pins have wheels for here, 3.11 to 3.14" in proc.stderr
        assert "What to do: install Python 3.11 to 3.14" in proc.stderr and "Traceback" not in proc.stderr
        assert not (tmp_path / "venv").exists()
