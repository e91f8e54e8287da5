"""The project's pins as students and a hub get them: ``requirements.txt`` without its test block (standard library
only, so a bare ``python3`` can read them before any venv exists)."""
from __future__ import annotations

TESTS_HEADER = "# tests"  # the block from this comment line to the next comment line holds the test stack


def student_requirements(requirements: str) -> str:
    """The project's pins without the test-only block (students run no test suite)."""
    out, skipping = [], False
    for line in requirements.splitlines():
        if line.startswith("#"):
            skipping = line.strip().lower() == TESTS_HEADER
        if not skipping:
            out.append(line)
    return "\n".join(out) + "\n"


PINS_HEADER = ("# The lessons' pins, shipped with the lab: lab.environment checks them where it finds no\n"
               "# requirements.txt. requirements.txt without its test stack and the project itself, written by\n"
               "# instructor.pins.lab_pins; tests/test_environment.py keeps the two equal.\n")


def lab_pins(requirements: str) -> str:
    """``lab/pins.txt``: the student's pins (``student_requirements``) without the project's own line (a hub's
    shared venv installs exactly these, then the lab from the kit)."""
    lines = [ln for ln in student_requirements(requirements).splitlines()
             if not ln.startswith("-") and ln.strip().lower() != "# this project (lab, grader, fixtures)"]
    return PINS_HEADER + "\n".join(lines) + "\n"


def pin(requirements: str, name: str) -> str:
    """The ``name==version`` line of ``requirements`` (comments dropped); ValueError naming ``name`` if none."""
    for line in requirements.splitlines():
        spec = line.split("#", 1)[0].strip()
        if spec.lower().replace("_", "-").startswith(name.lower().replace("_", "-") + "=="):
            return spec
    raise ValueError(f"requirements.txt pins no {name}")
