"""The grade of one submission: checks with points, a dict, Markdown feedback and Gradescope JSON.

A crash is a value here, not an exception: ``GradeResult.without_results(student, status, reason)``
is a result with no checks and a reason, and a check that crashed is a failed ``Check``.
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field

STATUSES = ("graded", "invalid", "timeout", "error")


@dataclass
class Evidence:
    """One recomputed number beside what the student reported, with the tolerance and why."""

    what: str
    reported: object
    recomputed: object
    tolerance: object = None
    why: str = ""

    @property
    def difference(self) -> float | None:
        try:
            return abs(float(self.reported) - float(self.recomputed))
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

    @property
    def passed(self) -> bool:
        return self.points >= self.max_points

    def to_dict(self) -> dict:
        return {"part": self.part, "name": self.name, "points": round(self.points, 4),
                "max_points": self.max_points, "passed": self.passed, "message": self.message,
                "hidden": self.hidden, "evidence": [e.to_dict() for e in self.evidence]}


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

    def __post_init__(self):
        if self.status not in STATUSES:
            raise ValueError(f"status {self.status!r}; expected one of {STATUSES}")

    @classmethod
    def without_results(cls, student: str, status: str, reason: str, **kw) -> "GradeResult":
        """A result that holds no checks: the submission was refused, timed out or the grader failed."""
        return cls(student=student, status=status, reason=reason, **kw)

    @property
    def score(self) -> float:
        return round(sum(c.points for c in self.checks), 4)

    @property
    def max_score(self) -> float:
        return round(sum(c.max_points for c in self.checks), 4)

    def parts(self) -> dict[str, tuple[float, float]]:
        """Rubric part -> (points, max points)."""
        out: dict[str, tuple[float, float]] = {}
        for c in self.checks:
            p, m = out.get(c.part, (0.0, 0.0))
            out[c.part] = (round(p + c.points, 4), round(m + c.max_points, 4))
        return out

    def to_dict(self) -> dict:
        from lab import __version__ as lab_version

        return {"schema": "grade/1", "student": self.student, "status": self.status,
                "score": self.score, "max_score": self.max_score, "reason": self.reason,
                "notes": list(self.notes), "grader_version": self.grader_version,
                "lab_version": lab_version, "submission_sha256": self.submission_sha256,
                "seconds": round(self.seconds, 3),
                "parts": {k: {"points": p, "max_points": m} for k, (p, m) in self.parts().items()},
                "checks": [c.to_dict() for c in self.checks]}

    @classmethod
    def from_dict(cls, d: dict) -> "GradeResult":
        checks = [Check(c["part"], c["name"], c["points"], c["max_points"], c["message"],
                        [Evidence(e["what"], e["reported"], e["recomputed"], e.get("tolerance"), e.get("why", ""))
                         for e in c.get("evidence", [])], c.get("hidden", False)) for c in d.get("checks", [])]
        return cls(d["student"], d["status"], checks, d.get("reason", ""), d.get("notes", []),
                   d.get("grader_version", ""), d.get("submission_sha256", ""), d.get("seconds", 0.0))

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=False, allow_nan=False)

    def to_markdown(self, show_hidden: bool = True) -> str:
        """Feedback a student can act on: every point lost, with the numbers behind it."""
        return render_markdown(self, show_hidden)

    def to_gradescope(self) -> dict:
        """Gradescope's ``results.json``: score, execution_time, output, tests[]."""
        tests = [{"name": f"{c.part}: {c.name}", "score": round(c.points, 4), "max_score": c.max_points,
                  "output": _check_text(c), "visibility": "after_published" if c.hidden else "visible"}
                 for c in self.checks]
        out = self.reason or f"{self.status}: {self.score:g} / {self.max_score:g}"
        result = {"score": self.score, "execution_time": round(self.seconds, 3), "output": out,
                  "visibility": "visible", "stdout_visibility": "hidden", "tests": tests}
        if self.status != "graded":
            result["output"] = f"{self.status}: {self.reason}"
        return result


def _part_title(part: str) -> str:
    try:
        from grader.context import rubric

        return rubric()[part].get("title", part)
    except Exception:  # noqa: BLE001 - a title is cosmetic
        return part


def _fmt(v: object) -> str:
    if isinstance(v, float):
        return f"{v:.6g}"
    if isinstance(v, (list, dict)):
        text = json.dumps(v)
        return text if len(text) <= 80 else text[:77] + "..."
    return "-" if v is None else str(v)


def _check_text(c: Check) -> str:
    lines = [c.message]
    for e in c.evidence:
        diff = e.difference
        lines.append(f"{e.what}: reported {_fmt(e.reported)}, recomputed {_fmt(e.recomputed)}"
                     + (f", difference {diff:.3g}" if diff is not None else "")
                     + (f", tolerance {_fmt(e.tolerance)}" if e.tolerance is not None else "")
                     + (f" ({e.why})" if e.why else ""))
    return "\n".join(lines)


def render_markdown(result: GradeResult, show_hidden: bool = True) -> str:
    lines = [f"# Calibration Lab feedback: {result.student}", ""]
    if result.status != "graded":
        lines += [f"**Status: {result.status}.** {result.reason}", ""]
    lines += [f"**Score: {result.score:g} / {result.max_score:g}**"
              + (f" (status {result.status})" if result.status != "graded" else ""), ""]
    for note in result.notes:
        lines.append(f"> {note}")
    if result.notes:
        lines.append("")
    if result.checks:
        lines += ["| part | points |", "|---|---|"]
        lines += [f"| {k} | {p:g} / {m:g} |" for k, (p, m) in result.parts().items()]
        lines.append("")
    current = None
    for c in result.checks:
        if c.hidden and not show_hidden:
            continue
        if c.part != current:
            current = c.part
            if lines[-1] != "":
                lines.append("")
            title = _part_title(c.part)
            lines += [f"## {title}", ""]
        mark = "PASS" if c.passed else ("PARTIAL" if c.points > 0 else "FAIL")
        lines.append(f"- **{mark}** `{c.name}` {c.points:g}/{c.max_points:g}: {c.message}")
        if c.evidence:
            lines += ["", "  | what | reported | recomputed | difference | tolerance | why |",
                      "  |---|---|---|---|---|---|"]
            for e in c.evidence:
                diff = e.difference
                lines.append(f"  | {e.what} | {_fmt(e.reported)} | {_fmt(e.recomputed)} | "
                             f"{'-' if diff is None else f'{diff:.3g}'} | {_fmt(e.tolerance)} | {e.why} |")
            lines.append("")
    lines += ["", f"_grader {result.grader_version}, {result.seconds:.1f} s_", ""]
    return "\n".join(lines)
