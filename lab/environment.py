"""Is this the environment the lessons expect? Versions against the pins, fixtures against the manifest, the kernel,
and the CPU's INT8 kernel family.

The pins are ``requirements.txt`` in a checkout or a kit; elsewhere the ones the lab ships (``lab/pins.txt``, the
lessons' part of requirements.txt; on Colab ``lab/pins-colab.txt``, the lean install ``lab/tools/colab.py`` makes).
Where the lab runs (``host``) also decides the fix a student is told: ``make setup``, ask the instructor (a hub),
restart the runtime (Colab).

``check()`` gathers the facts; every judgement is a pure function of plain values, so the
rules can be tested without changing the machine.
"""
from __future__ import annotations

import os
import sys
import textwrap
import tomllib
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

from lab import kernels, tables
from lab.data import verify_fixtures
from lab.errors import LabError
from lab.workspace import in_colab

REPO = Path(__file__).resolve().parent.parent  # the checkout, when the lab is imported from one (editable install)
DISTRIBUTION = "calibration-lab"  # pyproject.toml's project name: its metadata holds requires-python once installed
KERNEL_NAME = "calibration-lab"
KERNEL_DISPLAY_NAME = "Calibration Lab"
# A mismatch here changes the bytes of every converted model: the lessons' numbers stop matching.
CORE_PACKAGES = ("onnx", "onnxruntime", "numpy")
NOTE_WIDTH = 96  # a note under a table line wraps at this many characters
SHIPPED_PINS = Path(__file__).resolve().with_name("pins.txt")  # requirements.txt's lesson sections (tests keep it so)
COLAB_PINS = SHIPPED_PINS.with_name("pins-colab.txt")  # the lean install for Colab (lab/tools/colab.py installs it)
HUB_VARIABLES = ("JUPYTERHUB_USER", "JUPYTERHUB_API_TOKEN")  # JupyterHub sets these in every server it spawns


@dataclass(frozen=True)
class Host:
    """Where the lab runs, as far as a wrong version goes: what to do about one, and about a stale import."""

    name: str
    fix: str
    """A pinned package has another version: how to install the pins here."""
    restart: str
    """The pinned version is installed, but this kernel imported another one before the install."""


HOSTS = {host.name: host for host in (
    Host("checkout", "run `make setup` from the repository root, then restart the kernel",
         "restart the kernel (Kernel > Restart Kernel): the pinned version is installed"),
    Host("hub", "ask your instructor: this hub's Python is theirs to set up (send them this table)",
         "restart the kernel (Kernel > Restart Kernel): the pinned version is installed"),
    Host("colab", "run the Colab first cell again (it installs the lab's pins), then restart the runtime "
         "(Runtime > Restart session)",
         "restart the runtime (Runtime > Restart session), then run the Colab first cell again: the pinned "
         "version is installed"),
    Host("installed", "install the pins into this Python (`pip install -r requirements.txt` from the kit's "
         "folder), then restart the kernel",
         "restart the kernel (Kernel > Restart Kernel): the pinned version is installed"))}


class EnvironmentProblem(LabError):
    """The environment cannot reproduce the lessons' numbers."""


@dataclass(frozen=True)
class Check:
    """One line of the environment table. ``status`` is ``ok``, ``warn`` or ``fail``."""

    topic: str
    name: str
    found: str
    expected: str
    status: str
    fix: str = ""
    note: str = ""
    """What the line means for the student, printed under it whatever the status."""


@dataclass
class EnvironmentReport:
    """Every check, a readable table, and a short summary with no machine-specific text."""

    checks: list[Check] = field(default_factory=list)
    pins_source: str = "requirements.txt"
    """Where the pins came from (``pins_for``)."""

    @property
    def failures(self) -> list[Check]:
        return [c for c in self.checks if c.status == "fail"]

    @property
    def ok(self) -> bool:
        return not self.failures

    def table(self, every_pin: bool = False) -> str:
        """The checks as a fixed-width table, with a fix under each line that is not ok.

        Pins outside the core packages are folded into one line while they all match,
        unless ``every_pin``.
        """
        quiet = [] if every_pin else [c for c in self.checks if c.topic == "versions"
                                      and c.name not in CORE_PACKAGES and c.status == "ok"]
        listed = [c for c in self.checks if c not in quiet]
        rows = [(c.status.upper(), c.topic, c.name, c.found, c.expected) for c in listed]
        shown: list[Check | None] = list(listed)  # None: the line of folded pins
        if quiet:
            at = max(i for i, c in enumerate(listed) if c.topic == "versions") + 1
            shown.insert(at, None)
            rows.insert(at, ("OK", "versions", f"{len(quiet)} other pins", "all match", self.pins_source))
        head = ("", "topic", "name", "found", "expected")
        widths = [max(len(str(r[i])) for r in rows + [head]) for i in range(4)]
        columns = [(h, f"<{w}") for h, w in zip(head, widths)] + [(head[4], "")]
        lines = [tables.header(columns, "  ")]
        for c, r in zip(shown, rows):
            lines.append(tables.row([str(v) for v in r], columns, "  "))
            if c is not None and c.status != "ok" and c.fix:
                lines.append(" " * (widths[0] + 2) + "-> " + c.fix)
            if c is not None and c.note:
                lines.extend(" " * (widths[0] + 2) + "   " + part
                             for part in textwrap.wrap(c.note, NOTE_WIDTH, break_on_hyphens=False))
        return "\n".join(lines)

    def summary(self) -> str:
        """One line per topic, worded to be the same text on every machine where all is well."""
        lines = []
        for topic in dict.fromkeys(c.topic for c in self.checks):
            cs = [c for c in self.checks if c.topic == topic]
            bad = [c for c in cs if c.status != "ok"]
            if topic == "fixtures":
                text = f"{len(cs) - len(bad)}/{len(cs)} match the manifest"
            elif not bad:
                text = {"python": f"ok ({cs[0].expected})", "versions": f"every pin in {self.pins_source} matches",
                        "kernel": "the project's kernel and virtualenv",
                        # the same words on both families: the family itself is in the table, not here
                        INT8_TOPIC: "kernel family known (the table names it)"}.get(topic, "ok")
            else:
                text = f"{len(bad)} of {len(cs)} need attention: " + ", ".join(c.name for c in bad)
            lines.append(f"{topic + ':':<10}{text}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()

    def _repr_pretty_(self, p, cycle):
        p.text(self.table())

    def raise_for_problems(self) -> None:
        """Raise ``EnvironmentProblem`` naming every failed check and its fix, or return quietly."""
        if self.failures:
            raise EnvironmentProblem("the environment cannot reproduce the lessons:\n  - " + "\n  - ".join(
                f"{c.name}: found {c.found}, expected {c.expected}. {c.fix}" for c in self.failures))


def parse_pins(text: str) -> dict[str, str]:
    """``name==version`` lines of a requirements file -> {normalized name: version}; other lines are skipped."""
    pins = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if "==" in line and not line.startswith("-"):
            name, version = (s.strip() for s in line.split("==", 1))
            pins[normalize(name)] = version
    return pins


def parse_specifiers(text: str) -> dict[str, str]:
    """Requirement lines (exact pins and ranges) -> {normalized name: specifier}; options and comments are skipped."""
    specs = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if line and not line.startswith("-"):
            req = Requirement(line)
            specs[normalize(req.name)] = str(req.specifier)
    return specs


def expected(pin: str) -> str:
    """A pin as the table shows it: a bare version is ``==version``; a specifier stays as it is."""
    return pin if pin[:1] in "<>=!~" else f"=={pin}"


def normalize(name: str) -> str:
    """Package names compare case-insensitively, with ``-``, ``_`` and ``.`` alike (PEP 503)."""
    return name.lower().replace("_", "-").replace(".", "-")


def version_checks(pins: dict[str, str], installed: dict[str, str | None],
                   core: tuple[str, ...] = CORE_PACKAGES, host: Host = HOSTS["checkout"],
                   on_disk: dict[str, str | None] | None = None) -> list[Check]:
    """The version this kernel runs (``installed``) against each pin (a version, or a specifier). A core package
    that differs fails; any other warns. ``on_disk``: the installed versions, where a package was imported before
    an install changed it; when that one matches, the fix is the host's restart."""
    checks = []
    for name in sorted(pins, key=lambda n: (n not in core, n)):
        want, have = expected(pins[name]), installed.get(name)
        if have is not None and SpecifierSet(want).contains(have, prereleases=True):
            checks.append(Check("versions", name, have, want, "ok"))
            continue
        disk = (on_disk or {}).get(name)
        stale = disk is not None and disk != have and SpecifierSet(want).contains(disk, prereleases=True)
        checks.append(Check("versions", name, have or "not installed", want, "fail" if name in core else "warn",
                            host.restart if stale else host.fix))
    return checks


def python_check(version: str, requires: str | None) -> Check:
    """The running Python against ``requires-python`` (e.g. ``>=3.11``)."""
    if not requires:
        return Check("python", "python", version, "(no requirement found)", "warn",
                     "pyproject.toml has no requires-python")
    ok = SpecifierSet(requires).contains(version)
    return Check("python", "python", version, requires, "ok" if ok else "fail",
                 "" if ok else f"install a Python {requires} and run `make setup` with it")


def fixture_checks(matches: dict[str, bool]) -> list[Check]:
    """One check per fixture file: its SHA-256 against the committed manifest."""
    return [Check("fixtures", name, "sha256 matches" if ok else "missing or changed", "manifest sha256",
                  "ok" if ok else "fail",
                  "" if ok else "restore the file: `git checkout -- fixtures/` in a checkout, or reinstall the "
                  "lab (lessons never write there)")
            for name, ok in sorted(matches.items())]


def kernel_checks(prefix: str, project_venv: str, kernel_python: str | None,
                  kernel_name: str = KERNEL_NAME) -> list[Check]:
    """Is this Python the project's virtualenv (or the shared one a hub registered the kernel for), and does the
    project's kernel launch it?

    ``kernel_python`` is the interpreter the ``kernel_name`` kernelspec starts (None when the
    kernel is not registered). Paths are compared without resolving symlinks: a virtualenv's
    ``python`` is usually a link to the system interpreter. On a JupyterHub the kernel is registered for every user
    and runs a shared virtualenv outside the student's folder: that one is the lab's too.
    """
    here = os.path.normpath(os.path.abspath(prefix))
    venv = os.path.normpath(os.path.abspath(project_venv))
    kernel_prefix = (None if kernel_python is None else
                     os.path.normpath(os.path.dirname(os.path.dirname(os.path.abspath(kernel_python)))))
    found = ("the project's .venv" if here == venv else
             f"the {KERNEL_DISPLAY_NAME} kernel's (shared)" if here == kernel_prefix else "another one")
    choose = f"choose the kernel '{KERNEL_DISPLAY_NAME}' (Kernel > Change Kernel)"
    ours = found != "another one"
    checks = [Check("kernel", "python environment", found, "the project's .venv", "ok" if ours else "warn",
                    "" if ours else f"this kernel runs Python from outside the project's .venv; {choose}")]
    if kernel_python is None:
        checks.append(Check("kernel", f"kernel '{kernel_name}'", "not registered", "registered", "warn",
                            "run `make setup`: it registers the kernel"))
    else:
        same = kernel_prefix == here
        checks.append(Check("kernel", f"kernel '{kernel_name}'",
                            "runs this Python" if same else "runs another Python",
                            "runs this Python", "ok" if same else "warn", "" if same else choose))
    return checks


INT8_TOPIC = "int8"
FAMILY_MEANING = {
    "exact": ("exact: int32 sums (x86 VNNI, AVX-VNNI or AMX; ARM). Your INT8 numbers may differ from a "
              "classmate's on an AVX2 laptop without VNNI; the grader recomputes under the family your "
              "hand-in records."),
    "saturating": ("saturating: u8 x s8 products added in pairs into an int16 that clips (x86 AVX2 without VNNI). "
                   "Per-channel INT8 models can lose accuracy here that they keep on VNNI or ARM CPUs "
                   "(lesson 06 shows it); the grader recomputes under the family your hand-in records."),
}


def kernel_family_check(machine: str | None, requested: str | None = None, problem: str = "",
                        env_var: str = "LAB_KERNEL_FAMILY") -> Check:
    """The CPU's INT8 kernel family, and the family the lessons compute as.

    ``machine``: what the kernel probe answered (``lab.kernels.machine_family()``), None when the
    probe gave an answer neither family gives (``problem`` says what). ``requested``: the value of
    ``$LAB_KERNEL_FAMILY`` (None or empty when unset). Both families are fine (status ok); computing
    as the other family through the variable is fine too, and said. An unknown family name fails:
    every INT8 number would raise.
    """
    families = tuple(FAMILY_MEANING)
    if requested and requested not in families:
        return Check(INT8_TOPIC, "kernel family", f"{env_var}={requested}", " or ".join(families), "fail",
                     f"unset {env_var}, or set it to one of: {', '.join(families)}")
    if machine is None:
        return Check(INT8_TOPIC, "kernel family", "unknown (the probe gave neither answer)",
                     " or ".join(families), "warn",
                     "INT8 numbers may match neither family; tell your instructor and send them this table",
                     problem)
    target = requested or machine
    if target == machine:
        return Check(INT8_TOPIC, "kernel family", machine, " or ".join(families), "ok",
                     note=FAMILY_MEANING[machine])
    return Check(INT8_TOPIC, "kernel family", f"computing as {target} (emulated)", " or ".join(families), "ok",
                 note=(f"{env_var}={target}: quantized models run in lab.kernels' numpy emulation of the {target} "
                       f"family; this CPU computes as {machine}. " + FAMILY_MEANING[target]))


def running_versions(installed: dict[str, str | None], core: tuple[str, ...] = CORE_PACKAGES) -> dict[str, str | None]:
    """``installed`` with each core package this kernel has imported at the version it imported: an install after
    the import (Colab's first cell) changes the files, not the running module."""
    running = dict(installed)
    for name in core:
        version = getattr(sys.modules.get(name.replace("-", "_")), "__version__", None)
        if name in running and isinstance(version, str):
            running[name] = version
    return running


def host(environ=os.environ, colab: bool | None = None, checkout: bool = False) -> Host:
    """Where the lab runs: Colab, a JupyterHub, a checkout or kit (``requirements.txt`` found), or anywhere else."""
    if in_colab() if colab is None else colab:
        return HOSTS["colab"]
    if any(environ.get(v) for v in HUB_VARIABLES):
        return HOSTS["hub"]
    return HOSTS["checkout" if checkout else "installed"]


def installed_versions(names) -> dict[str, str | None]:
    """Installed distribution versions (None when a package is missing)."""
    found: dict[str, str | None] = {}
    for name in names:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    return found


def kernelspec_python(kernel_name: str = KERNEL_NAME) -> str | None:
    """The interpreter the named kernelspec launches, or None if it is not registered."""
    try:
        # deferred: the grader imports this module in an image without Jupyter; 0.3 s (python -X importtime)
        from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel
    except ImportError:
        return None
    try:
        return KernelSpecManager().get_kernel_spec(kernel_name).argv[0]
    except (NoSuchKernel, IndexError):
        return None


def requires_python(pyproject: Path) -> str | None:
    """``project.requires-python`` from a pyproject.toml; without one (a non-editable install), the installed
    distribution's ``Requires-Python``; None when neither says."""
    if pyproject.exists():
        return tomllib.loads(pyproject.read_text()).get("project", {}).get("requires-python")
    try:
        meta = metadata.metadata(DISTRIBUTION)
        return meta["Requires-Python"] if "Requires-Python" in meta else None
    except metadata.PackageNotFoundError:
        return None


def project_root(repo: Path = REPO, cwd: Path | None = None) -> Path:
    """The project folder whose ``requirements.txt`` and ``.venv`` the check compares against.

    The checkout the lab is imported from, when it is one; after ``pip install .`` (the lab in
    site-packages) the current folder or its parent, whichever holds ``requirements.txt`` (lessons run
    in ``notebooks/``); else ``repo`` unchanged, and the check says the pins were not found.
    """
    if (repo / "requirements.txt").exists():
        return repo
    cwd = Path.cwd() if cwd is None else cwd
    return next((d for d in (cwd, cwd.parent) if (d / "requirements.txt").exists()), repo)


def pins_for(where: Host, requirements: Path) -> tuple[str, dict[str, str]]:
    """(where the pins come from, the pins): Colab's lean install there; else ``requirements`` when it exists (a
    checkout or a kit), else the lessons' pins the lab ships."""
    if where.name == "colab":
        return "lab/pins-colab.txt", parse_specifiers(COLAB_PINS.read_text(encoding="utf-8"))
    if requirements.exists():
        return "requirements.txt", parse_pins(requirements.read_text(encoding="utf-8"))
    return "lab/pins.txt", parse_pins(SHIPPED_PINS.read_text(encoding="utf-8"))


def check(repo: Path | None = None) -> EnvironmentReport:
    """Check this machine: Python, pinned versions, fixture checksums, and the kernel (not on a hub or Colab,
    whose kernel is theirs)."""
    repo = project_root() if repo is None else repo
    where = host(checkout=(repo / "requirements.txt").exists())
    source, pins = pins_for(where, repo / "requirements.txt")
    checks = [python_check(".".join(map(str, sys.version_info[:3])), requires_python(repo / "pyproject.toml"))]
    on_disk = installed_versions(pins)
    checks += version_checks(pins, running_versions(on_disk), host=where, on_disk=on_disk)
    checks += fixture_checks(verify_fixtures())
    if where.name in ("checkout", "installed"):
        checks += kernel_checks(sys.prefix, str(repo / ".venv"), kernelspec_python())
    checks.append(probe_kernel_family())
    return EnvironmentReport(checks, pins_source=source)


def probe_kernel_family() -> Check:
    """``kernel_family_check`` on this machine: the probe's answer and ``$LAB_KERNEL_FAMILY``."""
    try:
        machine, problem = kernels.machine_family(), ""
    except kernels.EmulationError as e:
        machine, problem = None, str(e)
    return kernel_family_check(machine, os.environ.get(kernels.ENV_VAR) or None, problem, kernels.ENV_VAR)
