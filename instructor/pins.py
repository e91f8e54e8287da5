"""The project's pins as students and a hub get them: ``requirements.txt`` without its test block (standard library
only, so a bare ``python3`` can read them before any venv exists)."""
from __future__ import annotations

TESTS_HEADER = "# tests"  # the block from this comment line to the next comment line holds the test stack
PROJECT_LINE = "-e "  # the line that installs this folder itself, editable


def student_requirements(requirements: str) -> str:
    """The project's pins without the test-only block (students run no test suite)."""
    out, skipping = [], False
    for line in requirements.splitlines():
        if line.startswith("#"):
            skipping = line.strip().lower() == TESTS_HEADER
        if not skipping:
            out.append(line)
    return "\n".join(out) + "\n"


def without_project(requirements: str) -> str:
    """``requirements`` without the editable install of the project itself (a hub installs the kit, not a checkout)."""
    return "\n".join(line for line in requirements.splitlines() if not line.startswith(PROJECT_LINE)) + "\n"


def pin(requirements: str, name: str) -> str:
    """The ``name==version`` line of ``requirements`` (comments dropped); ValueError naming ``name`` if none."""
    for line in requirements.splitlines():
        spec = line.split("#", 1)[0].strip()
        if spec.lower().replace("_", "-").startswith(name.lower().replace("_", "-") + "=="):
            return spec
    raise ValueError(f"requirements.txt pins no {name}")
