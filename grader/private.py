"""What the grader writes is the instructor's: grades, feedback, reports and exports are 0600, and the folders it
makes for them 0700, whatever the umask (a course's TA group is let in afterwards by ``grader.course``, never by a
umask)."""
from __future__ import annotations

from pathlib import Path

from lab.workspace import atomic_write_text

MODE = 0o600
DIR_MODE = 0o700  # a folder the grader makes: other users cannot even list whose feedback is in it


def private_dir(path: str | Path) -> Path:
    """``path`` as a folder; each folder made for it is 0700 (an existing one keeps its mode)."""
    path = Path(path)
    for folder in reversed([path, *path.parents]):
        if not folder.exists():
            folder.mkdir(mode=DIR_MODE, exist_ok=True)
            folder.chmod(DIR_MODE)
    return path


def write_private(path: str | Path, text: str) -> Path:
    """``lab.workspace.atomic_write_text`` with mode 0600, in folders the grader makes 0700."""
    private_dir(Path(path).parent)
    return atomic_write_text(path, text, mode=MODE)
