"""The instructor's secret: what lesson 06's hidden checks are seeded with. Read here only; ``grader.sandbox.bwrap``
hides its file from student code, ``grader.preflight`` checks it is set before a batch starts."""
from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

SECRET_ENV = "GRADER_SECRET"
SECRET_FILE_ENV = "GRADER_SECRET_FILE"


def secret(env: Mapping[str, str] = os.environ) -> str | None:
    """The instructor's secret: ``GRADER_SECRET`` or the file named by ``GRADER_SECRET_FILE``."""
    if env.get(SECRET_ENV):
        return env[SECRET_ENV]
    path = env.get(SECRET_FILE_ENV)
    if path and os.path.isfile(path):
        return Path(path).read_text(encoding="utf-8").strip() or None
    return None
