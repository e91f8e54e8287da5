"""The grade of one submission: checks with points, a dict, Markdown feedback and Gradescope JSON.

A crash is a value here, not an exception: ``GradeResult.without_results(student, status, reason)``
is a result with no checks and a reason, and a check that crashed is a failed ``Check``.
"""
from __future__ import annotations

import json
import math
import unicodedata
from dataclasses import asdict, dataclass, field
from typing import SupportsFloat, SupportsIndex

from grader.rubric import HIDDEN, part_title, rubric, title
from lab import __version__ as lab_version

STATUSES = ("graded", "invalid", "timeout", "error")
# A gradebook row's status is one of a result's, or ``pending``: written by a batch that has not graded that
# hand-in yet (never a result's status; ``--resume`` grades it)
PENDING = "pending"
GRADEBOOK_STATUSES = (*STATUSES, PENDING)

# Text from a hand-in (file names, JSON keys and strings, exception messages, a child's output) reaches the
# results JSON, the Markdown feedback, the gradebook and Gradescope. Each is bounded and made printable here.
TEXT_LIMIT = 4000       # a message or a note
VALUE_TEXT_LIMIT = 300  # a reported string inside evidence
LIST_LIMIT = 1000       # items of a reported list or dict kept in evidence
DEPTH_LIMIT = 8         # nesting of a reported value kept in evidence


def _escape(ch: str) -> str:
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def _needs_escape(ch: str) -> bool:
    if ch in "\n\t":
        return False
    cat = unicodedata.category(ch)
    # Cc: control characters (ESC, NUL, CR, ...); Cs: lone surrogates; Cf: bidi overrides and other invisible formatting
    return cat in ("Cc", "Cs", "Cf") and ch not in "\u200d"  # keep the zero-width joiner of emoji sequences


def safe_text(text: object, limit: int = TEXT_LIMIT) -> str:
    """``text`` made safe to write and print: valid UTF-8, no control characters but newline and tab, bounded.

    Lone surrogates and control or invisible formatting characters become visible escapes (``\\udc80``,
    ``\\x1b``); past ``limit`` characters the text is cut and says how much was cut.
    """
    if not isinstance(text, str):
        try:
            text = str(text)
        except Exception as e:  # noqa: BLE001 - an object whose str() fails still gets a name
            text = f"<{type(text).__name__} that cannot be shown: {type(e).__name__}>"
    cut = len(text) - limit
    if cut > 0:
        text = text[:limit]
    if not text.isprintable():  # newline and tab count as unprintable here: look at each character
        text = "".join(_escape(ch) if _needs_escape(ch) else ch for ch in text)
    if cut > 0:
        text += f" ... ({cut} more characters cut)"
    return text


def safe_value(value: object, depth: int = 0) -> object:
    """A reported value (anything JSON can hold, from a hand-in) bounded and made safe for the results JSON."""
    if value is None or isinstance(value, (bool, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)  # "nan", "inf": JSON has no such numbers
    if isinstance(value, str):
        return safe_text(value, VALUE_TEXT_LIMIT)
    if isinstance(value, (list, tuple, dict)) and depth >= DEPTH_LIMIT:
        return f"<{type(value).__name__} nested deeper than {DEPTH_LIMIT} levels>"
    if isinstance(value, (list, tuple)):
        return [safe_value(v, depth + 1) for v in value[:LIST_LIMIT]]
    if isinstance(value, dict):
        return {safe_text(k, VALUE_TEXT_LIMIT): safe_value(v, depth + 1)
                for k, v in list(value.items())[:LIST_LIMIT]}
    try:
        # deferred: numpy (about 0.2 s at import) only for a numpy scalar in evidence; the instructor's report and
        # the command line read results without it
        import numpy as np

        if isinstance(value, np.generic):
            return safe_value(value.item(), depth)
    except ImportError:  # pragma: no cover
        pass
    return safe_text(value, VALUE_TEXT_LIMIT)


def _as_float(value: object) -> float:
    """``float(value)``: a TypeError for what float() does not take, a ValueError for text that is no number."""
    if not isinstance(value, (str, bytes, SupportsFloat, SupportsIndex)):
        raise TypeError(f"float() does not take {type(value).__name__}")
    return float(value)


@dataclass
class Evidence:
    """One recomputed number beside what the student reported, with the tolerance and why."""

    what: str
    reported: object
    recomputed: object
    tolerance: object = None
    why: str = ""

    def __post_init__(self):
        self.what, self.why = safe_text(self.what, VALUE_TEXT_LIMIT), safe_text(self.why)
        self.reported, self.recomputed = safe_value(self.reported), safe_value(self.recomputed)
        self.tolerance = safe_value(self.tolerance)

    @property
    def difference(self) -> float | None:
        if isinstance(self.reported, bool) or isinstance(self.recomputed, bool):
            return None  # a decision is right or wrong, not some distance off
        try:
            return abs(_as_float(self.reported) - _as_float(self.recomputed))
        except (TypeError, ValueError):
            return None

    def to_dict(self) -> dict:
        d = asdict(self)
        diff = self.difference
        d["difference"] = diff if diff is None or math.isfinite(diff) else None
        return d


@dataclass
class Check:
    """One rubric line: points earned out of ``max_points``, and a message that says how to fix it."""

    part: str
    name: str
    points: float
    max_points: float
    message: str
    evidence: list[Evidence] = field(default_factory=list)
    hidden: bool = False
    assessed: bool = True  # False: nothing of the student's could be judged here (the cause is charged elsewhere)

    def __post_init__(self):
        self.message = safe_text(self.message)

    @property
    def passed(self) -> bool:
        return self.points >= self.max_points

    def to_dict(self) -> dict:
        return {"part": self.part, "name": self.name, "points": round(self.points, 4),
                "max_points": self.max_points, "passed": self.passed, "message": self.message,
                "hidden": self.hidden, "evidence": [e.to_dict() for e in self.evidence]} | \
            ({} if self.assessed else {"assessed": False})


@dataclass
class GradeResult:
    """Everything the grader concluded about one submission."""

    student: str
    status: str
    checks: list[Check] = field(default_factory=list)
    reason: str = ""
    notes: list[str] = field(default_factory=list)
    grader_version: str = ""
    submission_sha256: str = ""
    seconds: float = 0.0
    possible: float = 0.0  # the points on offer, for a result that holds no checks (refused, grader failed)
    # For the instructor only, never in the feedback: whose variant of the lab's data the files were made for
    # (grader.variants), ...
    instructor: dict = field(default_factory=dict)

    def __post_init__(self):
        if self.status not in STATUSES:
            raise ValueError(f"status {self.status!r}; expected one of {STATUSES}")
        self.reason = safe_text(self.reason)
        self.notes = [safe_text(n) for n in self.notes]
        # ``student`` stays as given: the batch files results under it (it is the hand-in's file name)

    @classmethod
    def without_results(cls, student: str, status: str, reason: str, **kw) -> GradeResult:
        """A result that holds no checks: the submission was refused, timed out or the grader failed."""
        return cls(student=student, status=status, reason=reason, **kw)

    @property
    def score(self) -> float:
        return round(sum(c.points for c in self.checks), 4)

    @property
    def max_score(self) -> float:
        """The points on offer: a refused submission is 0 out of the rubric's total, not 0 / 0."""
        if not self.checks:
            return round(self.possible, 4)
        return round(sum(c.max_points for c in self.checks), 4)

    def parts(self) -> dict[str, tuple[float, float]]:
        """Rubric part -> (points, max points)."""
        out: dict[str, tuple[float, float]] = {}
        for c in self.checks:
            p, m = out.get(c.part, (0.0, 0.0))
            out[c.part] = (round(p + c.points, 4), round(m + c.max_points, 4))
        return out

    def to_dict(self) -> dict:
        return {"schema": "grade/1", "student": self.student, "status": self.status,
                "score": self.score, "max_score": self.max_score, "reason": self.reason,
                "notes": list(self.notes), "grader_version": self.grader_version,
                "lab_version": lab_version, "submission_sha256": self.submission_sha256,
                "seconds": round(self.seconds, 3),
                "parts": {k: {"points": p, "max_points": m} for k, (p, m) in self.parts().items()},
                "checks": [c.to_dict() for c in self.checks],
                **({"instructor": self.instructor} if self.instructor else {})}

    @classmethod
    def from_dict(cls, d: dict) -> GradeResult:
        checks = [Check(c["part"], c["name"], c["points"], c["max_points"], c["message"],
                        [Evidence(e["what"], e["reported"], e["recomputed"], e.get("tolerance"), e.get("why", ""))
                         for e in c.get("evidence", [])], c.get("hidden", False), c.get("assessed", True))
                  for c in d.get("checks", [])]
        return cls(d["student"], d["status"], checks, d.get("reason", ""), d.get("notes", []),
                   d.get("grader_version", ""), d.get("submission_sha256", ""), d.get("seconds", 0.0),
                   0.0 if checks else d.get("max_score", 0.0), d.get("instructor", {}))

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=False, allow_nan=False)

    def to_markdown(self, show_hidden: bool = True) -> str:
        """Feedback a student can act on: every point lost, with the numbers behind it."""
        return render_markdown(self, show_hidden)

    def to_gradescope(self) -> dict:
        """Gradescope's ``results.json``: score, execution_time, output, tests[] (name, number, status, ...)."""
        tests = []
        for i, c in enumerate(self.checks, 1):
            tests.append({"name": f"{_part_title(c.part)}: {_check_title(c)}", "number": str(i),
                          "score": round(c.points, 4), "max_score": c.max_points,
                          "status": "passed" if c.passed and c.assessed else "failed", "output": _check_text(c),
                          "visibility": "after_published" if c.hidden else "visible"})
        if self.status == "graded":
            out = f"Score {self.score:g} / {self.max_score:g}."
        else:
            score = f" Score {self.score:g} / {self.max_score:g}." if self.checks else ""
            out = f"{self.status}: {self.reason}{score}"
        out += "".join(f"\n{note}" for note in self.notes)
        if self.status == "error":  # the grader's failure is no grade: none of its checks' points count
            out = f"error: {self.reason}\nThis is the autograder's failure, not yours: your instructor will grade " \
                "this hand-in again."
            tests = []
        return {"score": self.score if self.status != "error" else 0.0, "execution_time": round(self.seconds, 3),
                "output": out,
                "visibility": "visible", "stdout_visibility": "hidden",
                "extra_data": {"status": self.status, "max_score": self.max_score,
                               "grader_version": self.grader_version},
                "tests": tests}


def _part_title(part: str) -> str:
    try:
        return part_title(part)
    except Exception:  # noqa: BLE001 - a title is cosmetic
        return part


def _check_title(c: Check) -> str:
    """What the check asks (rubric.toml [titles]), as the student reads it."""
    try:
        return title(c.part, c.name)
    except Exception:  # noqa: BLE001 - a title is cosmetic
        return c.name


def _fmt(v: object) -> str:
    if isinstance(v, float):
        return f"{v:.6g}"
    if isinstance(v, (list, dict)):
        text = json.dumps(v)
        return text if len(text) <= 80 else text[:77] + "..."
    return "-" if v is None else str(v)


def _cell(v: object) -> str:
    """A value as a Markdown table cell: no pipes or newlines to break the row."""
    return _fmt(v).replace("|", "\\|").replace("\n", " ")


def agrees(e: Evidence) -> bool | None:
    """Does the reported value agree with the recomputed one within its tolerance? None if it cannot say."""
    if e.reported is None:
        return None
    diff, tol = e.difference, e.tolerance
    numeric_tol = tol if isinstance(tol, (int, float)) and not isinstance(tol, bool) else None
    if diff is not None and numeric_tol is not None:
        return diff <= float(numeric_tol) * (1 + 1e-9) + 1e-12
    if tol is None or numeric_tol is not None:
        return _fmt(e.reported) == _fmt(e.recomputed)
    return None


def _check_text(c: Check) -> str:
    lines = [c.message]
    for e in c.evidence:
        diff = e.difference
        lines.append(f"{e.what}: reported {_fmt(e.reported)}, recomputed {_fmt(e.recomputed)}"
                     + (f", difference {diff:.3g}" if diff is not None else "")
                     + (f", tolerance {_fmt(e.tolerance)}" if e.tolerance is not None else "")
                     + (f" ({e.why})" if e.why else ""))
    return "\n".join(lines)


def _evidence_table(c: Check) -> list[str]:
    """The numbers behind a lost point: the ones outside their tolerance (or, failing that, the ones not judged)."""
    verdicts = [(e, agrees(e)) for e in c.evidence]
    shown = ([e for e, ok in verdicts if ok is False]
             or [e for e, ok in verdicts if ok is None and e.reported is not None])
    if not shown:
        return []
    lines = ["| what | reported | recomputed | difference | tolerance | within it? |", "|---|---|---|---|---|---|"]
    for e in shown:
        diff = e.difference
        ok = agrees(e)
        lines.append(f"| {e.what} | {_cell(e.reported)} | {_cell(e.recomputed)} | "
                     f"{'-' if diff is None else f'{diff:.3g}'} | {_cell(e.tolerance)} | "
                     f"{'-' if ok is None else ('yes' if ok else '**no**')} |")
    agreeing = sum(ok is True for _, ok in verdicts)
    if agreeing:
        lines.append("")
        lines.append(f"{agreeing} other reported number(s) of this check agree with the recomputed ones.")
    whys = list(dict.fromkeys(e.why.rstrip(".") for e in shown if e.why))
    if len(whys) == 1:
        lines += ["", f"Why this tolerance: {whys[0]}."]
    elif whys:
        lines += ["", "Why:"] + [f"- {w}" for w in whys]
    return lines


def _ordered_parts(result: GradeResult) -> list[str]:
    """Rubric order, the hidden checks last."""
    try:
        order = [p for p in rubric() if p != HIDDEN] + [HIDDEN]
    except Exception:  # noqa: BLE001 - order is cosmetic
        order = []
    parts = list(result.parts())
    return sorted(parts, key=lambda p: order.index(p) if p in order else len(order))


def render_markdown(result: GradeResult, show_hidden: bool = True) -> str:
    """A summary table first, then one entry per lost point with the numbers behind it; full marks stay short."""
    lines = [f"# Calibration Lab feedback: {safe_text(result.student, 200)}", ""]
    lines += [f"**Score: {result.score:g} / {result.max_score:g}**", ""]
    if result.status != "graded":
        lines += [f"**Status: {result.status}.** {result.reason}", ""]
        if result.status == "invalid":
            lines += ["Nothing was graded. Fix what is named above, then hand in again with "
                      "`python -m lab submit --student YOUR_ID` (do not re-zip or edit the zip it writes).", ""]
        elif result.status == "error":
            lines += ["This is the grader's failure, not yours: tell your instructor.", ""]
    for note in result.notes:
        lines += [f"> {note}", ""]
    checks = [c for c in result.checks if show_hidden or not c.hidden]
    if not checks:
        lines += [f"_grader {result.grader_version}_", ""]
        return "\n".join(lines)
    parts = result.parts()
    lines += ["| lesson | points | checks not met (points lost) |", "|---|---|---|"]
    for part in _ordered_parts(result):
        p, m = parts[part]
        lost_on = [f"{_check_title(c)} (-{c.max_points - c.points:g})"
                   for c in checks if c.part == part and not c.passed]
        lines.append(f"| {_part_title(part)} | {p:g} / {m:g} | {', '.join(lost_on) or 'full marks'} |")
    lines.append("")
    lost = [c for c in checks if not c.passed]
    if not lost:
        lines += ["Full marks: every number you reported was recomputed from your files and agrees.", ""]
    else:
        lines += ["## Where you lost points", "",
                  "Each entry says what was expected and what the grader found. The grader recomputes every "
                  "number from your models and modules; a tolerance comes from the quantization grid.", ""]
        # checks that failed for one reason (a missing file: one message, no evidence) are one entry, across parts
        entries: list[list[Check]] = []
        by_message: dict[str, list[Check]] = {}
        for part in _ordered_parts(result):
            for c in (c for c in lost if c.part == part):
                if c.evidence or c.message not in by_message:
                    entries.append([c])
                    if not c.evidence:
                        by_message[c.message] = entries[-1]
                else:
                    by_message[c.message].append(c)
        for same in entries:
            first = same[0]
            spans = list(dict.fromkeys(c.part for c in same))
            names = "; ".join(f"{_part_title(part)}: " + "; ".join(_check_title(c) for c in same if c.part == part)
                              for part in spans)
            got, top = sum(c.points for c in same), sum(c.max_points for c in same)
            lines += [f"### {names} ({got:g} / {top:g})", "", first.message, ""]
            table = _evidence_table(first) if len(same) == 1 else []
            if table:
                lines += table + [""]
    lines += [f"_grader {result.grader_version}, {result.seconds:.1f} s_", ""]
    return "\n".join(lines)
