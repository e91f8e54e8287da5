"""What the grader writes is the instructor's: grades, feedback, reports and exports are 0600 whatever the umask
(a course's TA group is let in afterwards by ``grader.course``, never by a umask)."""
from __future__ import annotations

from pathlib import Path

from lab.workspace import atomic_write_text

MODE = 0o600


def write_private(path: str | Path, text: str) -> Path:
    """``lab.workspace.atomic_write_text`` with mode 0600."""
    return atomic_write_text(path, text, mode=MODE)
