"""``python -m lab.tools.preflight``: can this Python install the lab's pinned stack? Said before pip runs.

pip, on a machine the pins have no wheel for, says only "No matching distribution found for onnxruntime==1.32.0".
This check says which Python and system it found, the ones the pins have wheels for, and what to do instead.
It runs on Python 3.8 and later (the standard library only, no newer syntax), so an old Python hears it too.
"""
import importlib.util
import platform
import struct
import subprocess
import sys

PYTHONS = ((3, 11), (3, 14))
"""The first and last Python with a wheel of every pin (``pip install --dry-run --only-binary=:all:``, README)."""
SYSTEMS = {
    ("linux", "x86_64"): ("Linux x86-64", PYTHONS),
    ("linux", "arm64"): ("Linux aarch64", PYTHONS),
    ("darwin", "arm64"): ("macOS arm64 (Apple silicon)", PYTHONS),
    ("win32", "x86_64"): ("Windows x64", PYTHONS),
    ("win32", "arm64"): ("Windows on Arm", ((3, 12), PYTHONS[1])),  # PyYAML has no win_arm64 wheel for 3.11
}
"""(sys.platform, machine) of each system with a wheel of every pin: its name, its first and last Python."""
GLIBC = (2, 28)
"""onnxruntime 1.32.0's Linux wheels are manylinux_2_28: glibc 2.28 or later."""
MACOS = (14, 0)
"""onnxruntime 1.32.0's macOS wheels are macosx_14_0_arm64: macOS 14 (Sonoma) or later."""
MACHINES = {"amd64": "x86_64", "x86_64": "x86_64", "x64": "x86_64", "aarch64": "arm64", "arm64": "arm64"}
GET_PYTHON = ("install Python {first} to {last} (python.org, or the system's packages: Ubuntu 22.04 has "
              "`apt-get install python3.11 python3.11-venv`; on Windows `py -3.12` picks one) and run set-up with it, "
              "e.g. `make setup PYTHON=python3.11` or `python3.11 -m lab.tools.setup`")
OTHER_MACHINE = ("work on a machine the kit supports ({systems}), or in a Linux container or virtual machine on this "
                 "one (Docker Desktop's python:3.12 image, for example)")


def _version(v):
    return ".".join(str(n) for n in v)


def _numbers(release):
    """``"2.36"`` -> ``(2, 36)``; the first two numbers of a release string."""
    return tuple(int(p) for p in release.split(".")[:2] if p.isdigit())


def found_system():
    """``(sys.platform, machine)`` of this Python, the machine normalised (AMD64 -> x86_64, aarch64 -> arm64)."""
    machine = platform.machine().lower()
    return sys.platform, MACHINES.get(machine, machine)


def rosetta():
    """True for an x86-64 Python run by Rosetta on an Apple silicon Mac."""
    if sys.platform != "darwin":
        return False
    try:
        out = subprocess.run(["sysctl", "-n", "sysctl.proc_translated"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return False
    return out.stdout.strip() == "1"


def problems(version=None, system=None, bits=None, libc=None, translated=None, has_venv=None, macos=None):
    """What keeps this Python from installing the pins: a list of (what was found, what to do), empty when none.

    Each argument defaults to this interpreter's; tests pass others.
    """
    version = tuple(sys.version_info[:2]) if version is None else tuple(version)
    system = found_system() if system is None else system
    bits = struct.calcsize("P") * 8 if bits is None else bits
    libc = platform.libc_ver() if libc is None and system[0] == "linux" else libc
    translated = rosetta() if translated is None else translated
    has_venv = _has_venv() if has_venv is None else has_venv
    macos = platform.mac_ver()[0] if macos is None and system[0] == "darwin" else macos
    first, last = SYSTEMS.get(system, (None, PYTHONS))[1]
    found = []
    if not first <= version <= last:
        found.append((f"Python {_version(version)} is outside the range the pins have wheels for here, "
                      f"{_version(first)} to {_version(last)}",
                      GET_PYTHON.format(first=_version(first), last=_version(last))))
    found += _system_problems(system, bits, libc, translated, macos)
    if not has_venv and not found:
        found.append(("this Python has no `venv` with pip (`ensurepip` is missing)",
                      "on Debian or Ubuntu `apt-get install python3-venv` (as root, or with sudo); elsewhere install "
                      "Python from python.org"))
    return found


def _system_problems(system, bits, libc, translated, macos):
    """What keeps this system (not its Python's version) from the pins' wheels: a list of (found, what to do)."""
    elsewhere = OTHER_MACHINE.format(systems=", ".join(name for name, _ in SYSTEMS.values()))
    if system == ("darwin", "x86_64") and translated:
        return [("this is an Intel (x86-64) Python that Rosetta runs on an Apple silicon Mac, and onnxruntime 1.32.0 "
                 "has no wheel for Intel Macs", "install an arm64 (or universal2) Python, from python.org or "
                 "Homebrew in /opt/homebrew, and run set-up with it")]
    if system == ("darwin", "x86_64"):
        return [("this is an Intel Mac, and onnxruntime 1.32.0, which the lessons are pinned to, has no wheel for "
                 "Intel Macs (its last one is 1.23.2)", elsewhere)]
    if system not in SYSTEMS:
        return [(f"the pins have no wheels for this system ({system[0]} on {system[1]})", elsewhere)]
    if bits != 64:
        return [("this Python is a 32-bit build, and the pins have 64-bit wheels only",
                 "install the 64-bit Python of the same version and run set-up with it")]
    if system[0] == "darwin" and macos and _numbers(macos) < MACOS:
        return [(f"this Mac runs macOS {macos}, and onnxruntime 1.32.0's wheels need macOS {_version(MACOS)} or "
                 "later", "update macOS, or " + elsewhere)]
    if system[0] == "linux" and libc and libc[0]:  # ("", "") when Python cannot tell: then pip decides
        name, release = libc
        if name != "glibc" or _numbers(release) < GLIBC:
            return [(f"this Linux's C library is {name} {release}, and onnxruntime's wheels need glibc "
                     f"{_version(GLIBC)} or later", elsewhere)]
    return []


def _has_venv():
    """``venv`` can make an environment with pip: Debian and Ubuntu ship ``ensurepip`` apart, in python3-venv."""
    return all(importlib.util.find_spec(name) is not None for name in ("ensurepip", "venv"))


def describe():
    """One line: this Python's version and system, as the checks see them."""
    name = SYSTEMS.get(found_system(), ("{} {}".format(*found_system()),))[0]
    return f"Python {platform.python_version()} ({sys.executable}) on {name}"


def main(argv=None):
    """Print what was found; 0 when the pins can install here, 1 (with what to do) when they cannot."""
    found = problems()
    if not found:
        print(f"preflight: {describe()}: the pinned stack has wheels here")
        return 0
    print(f"preflight: {describe()}: set-up stops here, before pip.", file=sys.stderr)
    for what, todo in found:
        print(f"  - {what[0].upper() + what[1:]}.\n    What to do: {todo}.", file=sys.stderr)
    print("  (The kit's README lists the Pythons and systems it supports, and how that was measured.)",
          file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
