"""A lesson group: what a grader lesson module declares, so the core runs it without knowing any check by name.

Each module in ``grader/lessons/`` holds ``GROUPS``, a tuple of ``Group``. A group names its lesson, its rubric
part, its visible checks and, apart, its hidden ones (scored under the rubric's ``[hidden]`` part), the
files of the hand-in it needs, the function that checks, the mistakes (``grader.mistakes``) it charges and
reads, and the student-code runs it asks for. Points come from ``rubric.toml``, never from here: a group that
fails, or cannot run, scores 0 on every check it declares.

Which lesson writes a file, and whether it is handed in at all, is the workspace contract's (``lab.contract``):
a group reads it, never repeats it (tests/test_grader.py holds every file a group needs to the contract).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from grader.context import HIDDEN, Context, check
from grader.mistakes import Mistake
from grader.results import Check
from grader.sandbox.plan import Request
from lab import contract


@dataclass(frozen=True)
class Group:
    """One lesson group: its rubric checks, the files it needs, and the function that checks them."""

    lesson: str                 # the lesson the checks grade, "06" (a file's writer is the contract's)
    part: str                   # the rubric part of its visible checks, "acceptance"
    checks: tuple[str, ...]     # the visible checks it produces, in order
    run: Callable[[Context], list[Check]]
    needs: tuple[str, ...] = ()     # files of the hand-in; one missing zeroes every check of the group
    hidden: tuple[str, ...] = ()    # the hidden checks it produces (rubric part [hidden]), after the visible ones
    charges: tuple[Mistake, ...] = ()  # mistakes its checks charge (each under one of its own checks)
    reads: tuple[Mistake, ...] = ()    # mistakes its checks name without a charge: charged by an earlier group
    # the student-code runs its checks ask for, in order, from the function the checks take them from: the grade
    # starts them ahead (``grader.sandbox.plan``); [] when they will run none
    request: Callable[[Context], list[Request]] | None = None

    @property
    def label(self) -> str:
        """The group as an error names it: "lesson 06 acceptance (summarize_code, secret_summarize)"."""
        return f"lesson {self.lesson} {self.part} ({', '.join(self.checks + self.hidden)})"

    def writer(self, rel: str) -> str:
        """The lesson a message tells the student to re-run for ``rel``: the contract's, else the group's own."""
        return contract.lesson_of(rel) or self.lesson

    def declared(self) -> tuple[tuple[str, str], ...]:
        """Every (rubric part, check) this group produces, hidden ones included, in the order it produces them."""
        return tuple((self.part, name) for name in self.checks) + tuple((HIDDEN, name) for name in self.hidden)

    def failed(self, message: str) -> list[Check]:
        """Every check of the group at 0, with ``message``: a group that cannot run names all it would have scored."""
        return [check(part, name, 0, message, hidden=part == HIDDEN) for part, name in self.declared()]
