"""Run a Python script under ONNX Runtime's two real INT8 kernel families, whatever the host CPU.

ORT's U8S8 integer GEMM has two families of kernels (see the field notes, "The CPU decides INT8
results"):

* **saturating**: x86 with AVX2 (or AVX-512BW) and no VNNI adds each pair of u8 x s8 products into a
  saturating int16 (``vpmaddubsw``). :func:`haswell_command` runs this project's own ``.venv``
  Python under ``qemu-x86_64-static -cpu Haswell``, a CPUID with AVX2 and no VNNI (qemu's TCG can
  emulate neither VNNI nor AVX-512), so MLAS picks the AVX2 kernels even on a VNNI host.
* **exact**: VNNI, AMX and ARM's dot-product instructions accumulate in int32.
  :func:`aarch64_command` builds (once, into a cache folder) an arm64 Debian Python 3.11 sysroot
  plus ORT's aarch64 wheel and runs it under ``qemu-aarch64-static -L SYSROOT``.

A probe (:func:`write_probe_model`, one QDQ MatMul) tells the families apart by their answer:
:data:`PROBE_EXACT` (8128) or :data:`PROBE_SATURATING` (4096).

Scripts run under the aarch64 family can import only numpy and onnxruntime (no ``onnx``): build
models on the host, save them to files and pass the paths. ``tests/run_models.py`` is a generic
such script.

Usage::

    prefix = require_haswell()                   # or haswell_command() -> list | None
    prefix = require_aarch64(DEFAULT_AARCH64_CACHE)   # or aarch64_command(cache_dir) -> list | None
    run(prefix, RUN_MODELS, "out.npz", "in.npz", "a.onnx", "b.onnx", timeout=300)
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
TESTS_DIR = Path(__file__).resolve().parent
RUN_MODELS = TESTS_DIR / "run_models.py"
DEFAULT_AARCH64_CACHE = REPO_ROOT / "build" / "aarch64"   # /build/ is gitignored

ORT_VERSION = "1.32.0"
NUMPY_VERSION = "2.4.6"
PYTHON_VERSION = "3.11"
# onnxruntime 1.32.0 imports and runs sessions with numpy alone; its other requirements (flatbuffers,
# packaging, protobuf, sympy) are needed only by tools this runner does not offer (checked on this wheel).
AARCH64_WHEELS = (f"onnxruntime=={ORT_VERSION}", f"numpy=={NUMPY_VERSION}")
WHEEL_PLATFORM_ARGS = ("--platform", "manylinux_2_28_aarch64", "--platform", "manylinux2014_aarch64",
                       "--only-binary=:all:", "--python-version", PYTHON_VERSION)
# Debian (bookworm) arm64 packages that make a working /usr/bin/python3.11 (field notes' list).
ARM64_DEBS = ("python3.11-minimal", "libpython3.11-minimal", "libpython3.11-stdlib", "libc6", "libgcc-s1",
              "libstdc++6", "zlib1g", "libexpat1", "libffi8", "libssl3", "libbz2-1.0", "liblzma5",
              "libsqlite3-0", "libuuid1", "libncursesw6", "libtinfo6", "libreadline8", "libdb5.3", "libgdbm6",
              "libnsl2", "libtirpc3", "libcrypt1")
# ORT's cpuinfo library segfaults at import when it parses the host's x86 /proc/cpuinfo (qemu 7.2
# passes the host file through), so the wrapper bind-mounts this ARM one over it in a private mount
# namespace. Two Neoverse-N1 cores: ARMv8.2 with dot product (asimddp).
_N1_CORE = ("BogoMIPS\t: 50.00\n"
            "Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm lrcpc "
            "dcpop asimddp\n"
            "CPU implementer\t: 0x41\nCPU architecture: 8\nCPU variant\t: 0x3\nCPU part\t: 0xd0c\nCPU revision\t: 1\n")
ARM_CPUINFO = "".join(f"processor\t: {i}\n{_N1_CORE}\n" for i in range(2))

# qemu-x86_64's Haswell model minus the features TCG cannot provide anyway (qemu drops them and warns
# once per feature on every run; naming them keeps stderr clean). The CPUID the guest sees is the same.
HASWELL_CPU = "Haswell,-pcid,-x2apic,-tsc-deadline,-hle,-rtm,-invpcid"

AARCH64_WRAPPER = "python-aarch64"    # the argv prefix aarch64_command returns: [cache_dir / AARCH64_WRAPPER]
_STAMP = "ready"
STEP_TIMEOUT_S = 900

# The probe: 64 inputs of 1.0 at scale 1/255 (u8 255) times 64 weights of 127 at scale 1, output scale
# 64. Exact int32: 64 x 255 x 127 / 255 = 8128. Saturating pairs: 32 x 32767 / 255 = 4112 -> 4096.
PROBE_K = 64
PROBE_EXACT = 8128.0
PROBE_SATURATING = 4096.0


class Unavailable(RuntimeError):
    """A kernel family cannot run on this machine; the message says why (a skip reason)."""


class FamilyRunError(RuntimeError):
    """A script run under a kernel family failed or timed out; the message holds its stderr."""


def in_ci() -> bool:
    """True when CI=true (or 1/yes): the families must run there, so 'unavailable' is a failure."""
    return os.environ.get("CI", "").lower() in {"1", "true", "yes"}


def venv_python() -> Path:
    """The project's venv interpreter (not resolved: its path is how Python finds the venv)."""
    candidate = REPO_ROOT / ".venv" / "bin" / "python"
    return candidate if candidate.exists() else Path(sys.executable)


# --- the saturating family: x86 AVX2 without VNNI ---------------------------------------------------

def require_haswell(python: str | os.PathLike | None = None) -> list[str]:
    """The argv prefix that runs a script with ``python`` (default: the venv's) on AVX2, no VNNI.

    qemu passes the path through as argv[0], from which Python finds ``pyvenv.cfg`` and the venv's
    site-packages, so the path must be the venv's ``bin/python`` itself, not its resolved target.
    Raises :class:`Unavailable` off x86-64 or without qemu-x86_64-static.
    """
    if platform.machine().lower() not in {"x86_64", "amd64"}:
        raise Unavailable(f"the saturating x86 family needs an x86-64 host (this is {platform.machine()})")
    qemu = shutil.which("qemu-x86_64-static")
    if qemu is None:
        raise Unavailable("qemu-x86_64-static is not installed (Debian: apt-get install qemu-user-static)")
    interpreter = Path(python) if python is not None else venv_python()
    if not interpreter.exists():
        raise Unavailable(f"no Python at {interpreter}")
    return [qemu, "-cpu", HASWELL_CPU, str(interpreter.absolute())]


def haswell_command(python: str | os.PathLike | None = None) -> list[str] | None:
    """:func:`require_haswell`, or None when the family is unavailable."""
    try:
        return require_haswell(python)
    except Unavailable:
        return None


# --- the exact family: aarch64 with dot-product kernels ---------------------------------------------

def _recipe_key() -> str:
    """What the cache was built from; a change rebuilds it."""
    parts = [ORT_VERSION, NUMPY_VERSION, PYTHON_VERSION, *AARCH64_WHEELS, *WHEEL_PLATFORM_ARGS, *ARM64_DEBS,
             ARM_CPUINFO, _wrapper_text()]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def _wrapper_text() -> str:
    # Paths are relative to the wrapper's folder, so the cache can move. unshare runs the command in
    # the same process (no fork for a mount namespace), so killing the wrapper's pid kills qemu.
    # -s and PYTHONNOUSERSITE keep the host's ~/.local out; the sysroot's own prefix (found from
    # argv[0]) keeps the host's x86 /usr/lib/python3/dist-packages out. -cpu neoverse-n1 makes the
    # CPU the guest sees (HWCAPs) agree with the cpuinfo: dot product, no SVE or i8mm. (qemu's default
    # "max" CPU gave bit-identical outputs here; N1 only makes the kernel choice definite.)
    return (
        "#!/bin/sh\n"
        "# arm64 Python 3.11 + onnxruntime (aarch64 wheel) under qemu-aarch64-static; built by\n"
        "# tests/kernel_families.py. Needs root (a private mount namespace for an ARM /proc/cpuinfo).\n"
        'here=$(cd "$(dirname "$0")" && pwd)\n'
        "exec unshare --mount --propagation private sh -c '"
        'mount --bind "$0/cpuinfo" /proc/cpuinfo && '
        'exec env -u PYTHONHOME -u PYTHONSTARTUP PYTHONPATH="$0/site" PYTHONNOUSERSITE=1 '
        'qemu-aarch64-static -cpu neoverse-n1 -L "$0/sysroot" "$0/sysroot/usr/bin/python3.11" -s "$@"'
        "' \"$here\" \"$@\"\n")


def _step(argv: list[str], what: str, cwd: Path | None = None) -> str:
    """Run one build step; :class:`Unavailable` with its output if it fails."""
    try:
        done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=STEP_TIMEOUT_S,
                              env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"))
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise Unavailable(f"aarch64 build: {what} failed: {exc}") from exc
    if done.returncode != 0:
        tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-15:])
        raise Unavailable(f"aarch64 build: {what} failed (exit {done.returncode}): {' '.join(argv)}\n{tail}")
    return done.stdout


def _check_build_tools() -> None:
    if platform.machine().lower() not in {"x86_64", "amd64", "aarch64", "arm64"}:
        raise Unavailable(f"the aarch64 build is only set up for x86-64 hosts (this is {platform.machine()})")
    missing = [tool for tool in ("qemu-aarch64-static", "unshare", "mount", "dpkg", "apt-get")
               if shutil.which(tool) is None]
    if missing:
        raise Unavailable(f"missing {', '.join(missing)} (Debian: apt-get install qemu-user-static)")
    if os.geteuid() != 0:
        raise Unavailable("the aarch64 family needs root (dpkg --add-architecture, and unshare + mount --bind "
                          "of an ARM /proc/cpuinfo)")


def _build(cache_dir: Path) -> None:
    """Download and unpack everything into ``cache_dir`` (the caller holds the lock)."""
    for sub in ("debs", "sysroot", "wheels", "site"):
        shutil.rmtree(cache_dir / sub, ignore_errors=True)
    debs, sysroot, wheels, site = (cache_dir / sub for sub in ("debs", "sysroot", "wheels", "site"))
    for folder in (debs, sysroot, wheels):
        folder.mkdir(parents=True)
    # apt's download sandbox user (_apt) must be able to write here, or apt warns and downloads as root.
    debs.chmod(0o777)

    if "arm64" not in _step(["dpkg", "--print-foreign-architectures"], "dpkg").split():
        _step(["dpkg", "--add-architecture", "arm64"], "dpkg --add-architecture arm64")
        _step(["apt-get", "update", "-qq"], "apt-get update")
    download = ["apt-get", "download", "-qq", *(f"{name}:arm64" for name in ARM64_DEBS)]
    try:
        _step(download, "apt-get download of the arm64 packages", cwd=debs)
    except Unavailable:        # stale package lists (a security update replaced a version): refresh once
        _step(["apt-get", "update", "-qq"], "apt-get update")
        _step(download, "apt-get download of the arm64 packages", cwd=debs)
    for deb in sorted(debs.glob("*.deb")):
        _step(["dpkg", "-x", str(deb), str(sysroot)], f"dpkg -x {deb.name}")
    if not (sysroot / "usr" / "bin" / "python3.11").exists():
        raise Unavailable("aarch64 build: the sysroot has no usr/bin/python3.11 after unpacking")

    pip = [str(venv_python()), "-m", "pip", "--disable-pip-version-check"]
    _step([*pip, "download", "--quiet", "--no-deps", "--dest", str(wheels), *WHEEL_PLATFORM_ARGS,
           *AARCH64_WHEELS], "pip download of the aarch64 wheels")
    _step([*pip, "install", "--quiet", "--no-deps", "--no-index", "--find-links", str(wheels),
           "--target", str(site), *WHEEL_PLATFORM_ARGS, *AARCH64_WHEELS], "pip install --target of the wheels")

    (cache_dir / "cpuinfo").write_text(ARM_CPUINFO)
    wrapper = cache_dir / AARCH64_WRAPPER
    wrapper.write_text(_wrapper_text())
    wrapper.chmod(0o755)
    check = ("import platform, numpy, onnxruntime; "
             "print(platform.machine(), onnxruntime.__version__, numpy.__version__)")
    out = _step([str(wrapper), "-c", check], "importing onnxruntime under qemu-aarch64-static").split()
    if out != ["aarch64", ORT_VERSION, NUMPY_VERSION]:
        raise Unavailable(f"aarch64 build: expected aarch64 {ORT_VERSION} {NUMPY_VERSION}, the check printed {out}")
    # The downloads are no longer needed (pip keeps its own cache of the wheels).
    shutil.rmtree(debs, ignore_errors=True)
    shutil.rmtree(wheels, ignore_errors=True)


@contextlib.contextmanager
def _locked(cache_dir: Path):
    cache_dir.mkdir(parents=True, exist_ok=True)
    with open(cache_dir / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def require_aarch64(cache_dir: str | os.PathLike = DEFAULT_AARCH64_CACHE) -> list[str]:
    """The argv prefix that runs a script with arm64 Python 3.11 + ORT's aarch64 wheel under qemu.

    The first call builds ``cache_dir`` (about 200 MB; 15-20 s with a fast network); later
    calls find its stamp and return at once. Builds are serialized by a file lock, and the stamp (the
    recipe's hash) is written last, so an interrupted build is redone and a changed recipe rebuilds.
    Raises :class:`Unavailable` (with the reason) when it cannot be built here.
    """
    cache_dir = Path(cache_dir).absolute()
    prefix = [str(cache_dir / AARCH64_WRAPPER)]
    stamp = cache_dir / _STAMP
    key = _recipe_key()
    _check_build_tools()
    with _locked(cache_dir):
        if stamp.exists() and stamp.read_text().strip() == key:
            return prefix
        stamp.unlink(missing_ok=True)
        _build(cache_dir)
        fd, tmp = tempfile.mkstemp(dir=cache_dir, prefix=".stamp-")
        with os.fdopen(fd, "w") as f:
            f.write(key + "\n")
        os.replace(tmp, stamp)
    return prefix


def aarch64_command(cache_dir: str | os.PathLike = DEFAULT_AARCH64_CACHE) -> list[str] | None:
    """:func:`require_aarch64`, or None when the family cannot be built here."""
    try:
        return require_aarch64(cache_dir)
    except Unavailable:
        return None


# --- running scripts ---------------------------------------------------------------------------------

def run(prefix: list[str], script_path: str | os.PathLike, *args: str | os.PathLike, timeout: float = 600,
        cwd: str | os.PathLike | None = None) -> subprocess.CompletedProcess:
    """Run ``prefix + [script_path, *args]``; return the CompletedProcess (text stdout / stderr).

    Raises :class:`FamilyRunError` naming the command, the exit status and the stderr tail if the
    script fails, or if it is still running after ``timeout`` seconds (then its process group is
    killed). Under qemu, count about 3 s (x86 Haswell) and 4-6 s (aarch64) of start-up per run, mostly
    numpy and onnxruntime importing under emulation; the kernels themselves run 10-50x slower than native.
    """
    argv = [*map(str, prefix), str(script_path), *map(str, args)]
    proc = subprocess.Popen(argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        stdout, stderr = proc.communicate()
        raise FamilyRunError(f"timed out after {timeout:g} s: {' '.join(argv)}\n{_tail(stderr)}") from None
    done = subprocess.CompletedProcess(argv, proc.returncode, stdout, stderr)
    if done.returncode != 0:
        status = (f"signal {-done.returncode}" if done.returncode < 0 else f"exit {done.returncode}")
        raise FamilyRunError(f"failed ({status}): {' '.join(argv)}\n--- stderr ---\n{_tail(stderr)}"
                             f"\n--- stdout ---\n{_tail(stdout)}")
    return done


def _tail(text: str | None, lines: int = 40) -> str:
    return "\n".join((text or "").rstrip().splitlines()[-lines:]) or "(empty)"


# --- the probe -------------------------------------------------------------------------------------------

def write_probe_model(path: str | os.PathLike) -> Path:
    """Write the one-MatMul QDQ probe (input ``pixels`` float [N, 64] -> output ``probe`` [N, 1]).

    Feed ones: the answer is :data:`PROBE_EXACT` on int32-accumulating kernels and
    :data:`PROBE_SATURATING` on x86 AVX2 without VNNI. Needs ``onnx`` (host only).
    """
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    def scalar(name, value, dtype):
        return numpy_helper.from_array(np.array(value, dtype=dtype), name)

    inits = [
        scalar("x_scale", 1 / 255, np.float32), scalar("x_zero_point", 0, np.uint8),
        numpy_helper.from_array(np.full((PROBE_K, 1), 127, np.int8), "w_quantized"),
        scalar("w_scale", 1.0, np.float32), scalar("w_zero_point", 0, np.int8),
        scalar("y_scale", 64.0, np.float32), scalar("y_zero_point", 0, np.uint8),
    ]
    nodes = [
        helper.make_node("QuantizeLinear", ["pixels", "x_scale", "x_zero_point"], ["x_q"]),
        helper.make_node("DequantizeLinear", ["x_q", "x_scale", "x_zero_point"], ["x_dq"]),
        helper.make_node("DequantizeLinear", ["w_quantized", "w_scale", "w_zero_point"], ["w_dq"]),
        helper.make_node("MatMul", ["x_dq", "w_dq"], ["y"]),
        helper.make_node("QuantizeLinear", ["y", "y_scale", "y_zero_point"], ["y_q"]),
        helper.make_node("DequantizeLinear", ["y_q", "y_scale", "y_zero_point"], ["probe"]),
    ]
    graph = helper.make_graph(
        nodes, "kernel_family_probe",
        [helper.make_tensor_value_info("pixels", TensorProto.FLOAT, ["N", PROBE_K])],
        [helper.make_tensor_value_info("probe", TensorProto.FLOAT, ["N", 1])], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], producer_name="kernel_families")
    model.ir_version = 8
    onnx.checker.check_model(model)
    path = Path(path)
    onnx.save(model, path)
    return path


def probe_family(value: float) -> str:
    """'exact' or 'saturating' from the probe's answer; ValueError for anything else."""
    if value == PROBE_EXACT:
        return "exact"
    if value == PROBE_SATURATING:
        return "saturating"
    raise ValueError(f"probe answer {value!r} is neither {PROBE_EXACT:g} (exact) nor {PROBE_SATURATING:g} "
                     "(saturating)")


def skip_unless_ci(reason: str) -> None:
    """Skip locally; in CI both families must run, so the same reason is a failure."""
    import pytest

    if in_ci():
        pytest.fail(f"CI=true but a kernel family cannot run: {reason}", pytrace=False)
    pytest.skip(reason)


def family_prefix(require, *args) -> list[str]:
    """``require(*args)``'s argv prefix, or a skip (a failure in CI) naming why the family cannot run."""
    try:
        return require(*args)
    except Unavailable as exc:
        reason = str(exc)
    skip_unless_ci(reason)
