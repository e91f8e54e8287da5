"""Whose variant of the lab's data a hand-in was made for (``lab.variant``), and what a foreign one costs.

The grader recomputes every check under the hand-in's own variant: the one selected by the id the grade is credited
to (``credited``: in a batch or ``grader grade`` the file or folder name, on Gradescope the roster's student id),
not the id ``submission.json`` names: its ``student`` and ``variant`` fields are the copier's to write, so they are
a claim. Files made for the claimed variant when it is not the credited id's are another student's. Where no
credited id is known (Gradescope without a roster id; a file name that is no student id) or the credited id is
reserved (``lab.variant.RESERVED``: the instructor's own file), ``submission.json``'s student stands, as the
instructor-only field says. A hand-in made for another variant (a classmate's workspace handed in under one's own
id) is told apart by its own files, not by what ``submission.json`` claims: the reports the lessons write carry the
SHA-256 of the calibration sets they were calibrated on (lesson 03's ``results.json``, lesson 05's ``formats.json``,
...), and each variant's sets have their own. The variants tried are the hand-in's own, the one ``submission.json``
names (``variant``, from the workspace's ``variant.json``) and the reference; the own wins when its sets are named
at all (a report with an honest mistake beside it is the student's own). A hand-in whose reports give calibration
hashes (``calibration_sha256``) none of which is a set of those variants was made for another student's: given the
class's ids (``classmates``), the grader tries each of them and names the one whose sets they are; else, or when
none is, it cannot say whose (``UNKNOWN``: a copy whose ``variant.json`` was deleted or edited, from outside the
class). One whose reports give none is taken at ``submission.json``'s word.

Every check that reads one of a foreign hand-in's models or reports scores 0 (``foreign``), with feedback that says
the files were made for another student's variant; whose is for the instructor only (``GradeResult.instructor``).
The reference variant is the instructor's (no id, or a reserved one: ``lab.variant.RESERVED``). A hand-in made with
it under a student's id is foreign too: every honest student who forgot the id writes the same bytes, so a copy of
one cannot be told from the original, and grading them as made would leave copying one open. Its checks that read a
model or report score 0 with feedback that names the fix (``REFERENCE_MESSAGE``: STUDENT_ID in lesson 00 of a new
workspace, the lessons again, hand in again); the instructor sees ``reference`` as ``made_for``. A hand-in under a
reserved id (the instructor's own runs) is graded as made.
"""
from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, replace

from grader.results import Check
from grader.submission import Submission
from lab import data, variant
from lab.schemas import loads

UNKNOWN = "unknown"  # made for a variant none of those tried: another student's, whose the grader cannot say
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
ARTIFACT_SUFFIXES = (".onnx", ".json")  # what a lesson writes from the data; the student's modules are code

FOREIGN_MESSAGE = ("0 points: the files this check reads ({files}) were made for another student's variant of the "
                   "lab's data, not for yours: every model and report is recomputed from your own id's calibration "
                   "images. Run the lessons in your own workspace (lesson 00 with STUDENT_ID = {student!r}), "
                   "then hand in again")
REFERENCE_FIX = ("in lesson 00 of a new WORK_DIR set STUDENT_ID = {student!r}, run the lessons again (each writes its "
                 "files for your own variant), then hand in again")
REFERENCE_MESSAGE = ("0 points: the files this check reads ({files}) were made with the instructor's reference data "
                     "(lesson 00 ran with STUDENT_ID empty), not your own variant: every model and report is "
                     "recomputed from your own id's calibration images. To fix it, " + REFERENCE_FIX)
REFERENCE_NOTE = ("your hand-in's files were made with the instructor's reference data (lesson 00 ran with STUDENT_ID "
                  "empty), not your own variant of the lab's data: every check that reads one of its models or "
                  "reports scores 0, as a hand-in made for another student's variant does (every hand-in made with "
                  "the reference data is the same bytes). To fix it, " + REFERENCE_FIX)


@dataclass(frozen=True)
class Finding:
    """Whose variant the hand-in's files were made for, and the variant its checks are recomputed under."""

    own: variant.Variant | None  # the hand-in's own (its student id's; None: the reference)
    made_for: variant.Variant | str | None  # None: the reference; UNKNOWN: another student's the grader cannot name
    evidence: str  # how it was told, for the instructor
    student: str = ""  # the id the checks are graded for (the credited one, else submission.json's): the feedback's
    own_from: str = ""  # where the own variant's id came from, for the instructor

    @property
    def foreign(self) -> bool:
        """Made for another variant than the hand-in's own: another student's, or the reference under a student's id."""
        return self.made_for != self.own

    @property
    def reference(self) -> bool:
        """Made with the instructor's reference data under a student's id (foreign, with its own feedback)."""
        return self.made_for is None and self.own is not None

    @property
    def grade_under(self) -> tuple:
        """``variant.using``'s arguments for the checks: the hand-in's own variant (the reference for a reserved id)."""
        return (None,) if self.own is None else self.own

    def instructor(self) -> dict:
        """The result's instructor-only fields (never in the student's feedback)."""
        def name(v) -> str:
            return variant.REFERENCE if v is None else v if isinstance(v, str) else f"{v[0]}" + (
                f" (draw {v[1]})" if v[1] else "")

        return {"variant": {"own": name(self.own), "made_for": name(self.made_for), "evidence": self.evidence,
                            "own_from": self.own_from}}


def fingerprints(v: variant.Variant | None) -> frozenset[str]:
    """The SHA-256 of the calibration split's pixels and of each calibration set in variant ``v``."""
    with variant.using(*(v or (None,))):
        sets = [data.calibration_set(kind) for kind in data.KINDS] + [data.load_split("calibration").pixels]
        return frozenset(data.data_sha256(x) for x in sets)


def same_for_all() -> frozenset[str]:
    """The SHA-256 of the splits every variant shares (evaluation, held-out): calibrating on one is an honest
    mistake lesson 03's checks name, and says nothing about whose variant the hand-in is."""
    return frozenset(data.data_sha256(data.load_split(name).pixels) for name in ("evaluation", "heldout"))


def reported_hashes(sub: Submission) -> tuple[set[str], set[str]]:
    """Every SHA-256 string anywhere in the hand-in's JSON files (already validated at intake), and those of them
    given as a ``calibration_sha256``."""
    found: set[str] = set()
    calibration: set[str] = set()

    def walk(node: object, name: str = "") -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                walk(v, str(k))
        elif isinstance(node, list):
            for v in node:
                walk(v, name)
        elif isinstance(node, str) and _SHA256.match(node):
            found.add(node)
            if name.endswith("calibration_sha256"):
                calibration.add(node)

    for rel in sub.files:
        if rel.endswith(".json"):
            walk(loads(sub.path(rel).read_text(encoding="utf-8")))
    return found, calibration


def graded_as(sub: Submission, credited: str | None) -> tuple[str, str]:
    """The id whose variant ``sub``'s checks are recomputed under, and where it came from (for the instructor).

    ``credited``: the id the grade is credited to (the file name, the roster's id), None when none is known. It wins
    over ``submission.json``'s ``student`` (the copier's claim) unless it is reserved (the instructor's own file: the
    manifest's student stands, as before ids were credited) or no student id at all (a file name such as
    ``Ann Lee.zip``: no variant can be drawn for it)."""
    if credited is None:
        return sub.student, ("submission.json's student (no credited id known: Gradescope gave no roster id, or "
                             "the grader was told --ids-from-submission-json)")
    try:
        key = variant.key(credited)
    except ValueError:
        return sub.student, f"submission.json's student (the credited name {credited!r} is no student id)"
    if key is None:
        return sub.student, (f"submission.json's student (the credited id {credited!r} is reserved: the "
                             "instructor's own file, graded as made)")
    return credited, "the credited id (file name or roster), not submission.json's claim"


def made_for(sub: Submission, classmates: Iterable[str] = (), credited: str | None = None) -> Finding:
    """Whose variant ``sub``'s files were made for (see the module docstring), graded for ``credited`` (the id the
    grade is credited to; None: none known, ``submission.json``'s student stands).

    The variants tried first are three: the hand-in's own, the one ``submission.json`` names and the reference.
    When none of them made the files, each id of ``classmates`` (the class's roster or batch, draw as
    ``lab.variant.key`` gives it) is tried too, so the instructor learns whose files they are; each try hashes one
    variant's four calibration sets (``fingerprints``, through ``lab.cache``), milliseconds apiece."""
    student, own_from = graded_as(sub, credited)
    claimed = variant.key(sub.variant, sub.variant_draw or 0) if sub.variant else None
    own = claimed if claimed is not None and claimed[0] == student else variant.key(student)
    tried = list(dict.fromkeys([own, claimed, None]))
    hashes, calibration = reported_hashes(sub)
    hits = [v for v in tried if hashes & fingerprints(v)]

    def found(who: variant.Variant | str | None, evidence: str) -> Finding:
        return Finding(own, who, evidence, student, own_from)

    if not hits and calibration - same_for_all():  # an evaluation split's hash is a mistake, not a variant
        for sid in dict.fromkeys(classmates):
            v = variant.key(sid)
            if v not in tried and hashes & fingerprints(v):
                return found(v, f"{variant.describe(v)}, by its reports' calibration hashes (found among the "
                                "class's ids)")
        return found(UNKNOWN, "another student's variant: its reports' calibration hashes are no set of "
                              + ", ".join(variant.describe(v) for v in tried)
                              + (" nor of the class's other ids" if classmates else ""))
    who = own if own in hits else hits[0] if hits else claimed
    how = ("its reports' calibration hashes" if hits else
           "submission.json's variant field (no report gives a calibration hash)")
    return found(who, f"{variant.describe(who)}, by {how}")


def is_artifact(rel: str) -> bool:
    """A model or report (what the data made), not the student's code."""
    return rel.endswith(ARTIFACT_SUFFIXES)


def foreign(checks: list[Check], files: list[str], student: str, reference: bool = False) -> list[Check]:
    """A group's checks when the hand-in is foreign: each scores 0 if the group read a model or report (``reference``:
    made with the reference data, and the feedback says so and how to fix it)."""
    read = list(dict.fromkeys(f for f in files if is_artifact(f)))
    if not read:
        return checks
    shown = ", ".join(read[:4]) + (" ..." if len(read) > 4 else "")
    message = (REFERENCE_MESSAGE if reference else FOREIGN_MESSAGE).format(files=shown, student=student)
    return [replace(c, points=0.0, message=message, evidence=[]) for c in checks]
