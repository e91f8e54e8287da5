"""The class report: ``OUT/report.html`` and ``OUT/report.svg`` from a batch's ``OUT`` folder.

``write_report(out)`` reads what a batch wrote (``gradebook.csv``, ``results/*.json``) and shows what an
instructor looks at first: the score distribution, the checks most students lost (each with one example
feedback line), then the item analysis (``grader.report_items``: every check's pass rate, what the class
predicted, every lesson's scores, similar code), the submissions that were not graded (invalid, timeout, error,
or pending: a batch still running or stopped) with their reasons, and the grading time. The first figure is SVG
drawn by ``grader.chart`` into ``report.svg``; it and the item analysis's figures are inline in the page, so
``report.html`` opens from disk, alone, with no server.
Every text from a hand-in (student ids, reasons, messages) is escaped before it reaches the page.
"""
from __future__ import annotations

import csv
import html
import json
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

from grader import chart, items, report_items
from grader.private import write_private
from grader.results import GRADEBOOK_STATUSES, PENDING, _part_title

TOP_CHECKS = 10
STATUS_COLORS = MappingProxyType({"graded": "#4c72b0", "invalid": "#dd8452", "timeout": "#c44e52", "error": "#8172b3",
                                  PENDING: "#bbbbbb"})  # each bar of a status is labelled with it, in words
FIGURE = "score distribution, checks most students lost, grading time"
LINE_LIMIT = 240
# The figure's three panels (left, bottom, width, height, as fractions of the figure): scores, the most-lost checks
# (their titles, at most 48 characters, fill the space on its left) and the grading time; below each, room for the
# tick numbers, the axis label and a legend
PANELS = ((0.045, 0.2, 0.2, 0.72), (0.445, 0.2, 0.27, 0.72), (0.765, 0.2, 0.225, 0.72))


@dataclass
class LostCheck:
    """A rubric check and the submissions that lost points on it."""

    part: str
    name: str
    title: str
    hidden: bool
    students: list[str] = field(default_factory=list)
    points_lost: float = 0.0
    example: str = ""
    example_student: str = ""


@dataclass
class ClassSummary:
    rows: list[dict]
    results: dict[str, dict]
    lost: list[LostCheck]
    not_graded: list[tuple[str, str, str]]  # (student, status, reason)
    seconds: dict[str, float]

    @property
    def statuses(self) -> dict[str, int]:
        counts = {s: 0 for s in GRADEBOOK_STATUSES}
        for r in self.rows:
            counts[r["status"]] = counts.get(r["status"], 0) + 1
        return counts

    @property
    def scores(self) -> list[tuple[float, float]]:
        """(score, max) of every row; an unreadable number counts as 0."""
        return [(_number(r.get("score")), _number(r.get("max"))) for r in self.rows]


def _number(v) -> float:
    try:
        return float(v)
    except (TypeError, ValueError):
        return 0.0


def _first_line(text: str) -> str:
    line = next((ln.strip() for ln in str(text).splitlines() if ln.strip()), "")
    return line if len(line) <= LINE_LIMIT else line[:LINE_LIMIT - 3] + "..."


def _title(part: str) -> str:
    return _part_title(part)


def summarize(out: str | Path) -> ClassSummary:
    """Everything the report shows, from ``out/gradebook.csv`` and ``out/results/*.json``."""
    out = Path(out)
    with open(out / "gradebook.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    results: dict[str, dict] = {}
    for row in rows:
        try:
            results[row["student"]] = json.loads((out / "results" / f"{row['student']}.json").read_text("utf-8"))
        except (OSError, ValueError):
            pass  # the gradebook says error; the report shows the row without checks
    lost: dict[tuple[str, str], LostCheck] = {}
    for student in sorted(results):
        for c in results[student].get("checks", []):
            if c.get("passed", True) or not items.counts(results[student], c["part"], c["name"]):
                continue  # a check lost for another variant's files, or of a lesson not attempted: no learning signal
            key = (c["part"], c["name"])
            entry = lost.setdefault(key, LostCheck(c["part"], c["name"], f"{_title(c['part'])}: {c['name']}",
                                                   bool(c.get("hidden"))))
            entry.students.append(student)
            entry.points_lost += _number(c.get("max_points")) - _number(c.get("points"))
            if not entry.example:
                entry.example, entry.example_student = _first_line(c.get("message", "")), student
    ranked = sorted(lost.values(), key=lambda e: (-len(e.students), -e.points_lost, e.part, e.name))
    not_graded = []
    for row in rows:
        if row["status"] != "graded":
            reason = results.get(row["student"], {}).get("reason") or row.get("note") or (
                "not graded yet: the batch has not reached it (`--resume` grades it)" if row["status"] == PENDING
                else "no result file was written for it")  # a note: files credited to no one (--roster)
            not_graded.append((row["student"], row["status"], _first_line(reason)))
    seconds = {s: _number(d.get("seconds")) for s, d in results.items()}
    return ClassSummary(rows, results, ranked, not_graded, seconds)


def panels(summary: ClassSummary) -> list[chart.Panel]:
    """Score distribution (a stack per status, each bar named by its status), the most-lost checks and the grading
    time, side by side (``grader.chart``)."""
    top = max((m for _, m in summary.scores), default=0) or 1
    stacks = [(st, color, [s for (s, _), r in zip(summary.scores, summary.rows) if r["status"] == st])
              for st, color in STATUS_COLORS.items()]
    scores = chart.stacked_histogram(PANELS[0], f"Scores of {len(summary.rows)} submission(s)",
                                     f"score (out of {top:g})", top, stacks)
    lost = chart.horizontal_bars(PANELS[1], "Checks most students lost", "students who lost points",
                                 [(_short(e.title), len(e.students)) for e in summary.lost[:TOP_CHECKS]], "#c44e52",
                                 "no check lost")
    times = list(summary.seconds.values())
    slowest = max(times, default=0) or 1
    timing = chart.stacked_histogram(PANELS[2], f"Grading time: {sum(times):.1f} s in all", "seconds per submission",
                                     slowest, [("results", "#55a868", times)])
    return [scores, lost, timing]


def _short(text: str, width: int = 48) -> str:
    return text if len(text) <= width else text[:width - 3] + "..."


CSS = """body{font-family:system-ui,sans-serif;margin:2em;max-width:1500px;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em}td,th{border:1px solid #ccc;padding:.3em .6em;text-align:left;
vertical-align:top}th{background:#f3f3f3}td.n{text-align:right}.muted{color:#666}
code{background:#f5f5f5;padding:0 .2em}"""


def render(summary: ClassSummary, svg: str) -> str:
    """The page; ``svg``: the first figure and its data table."""
    e = html.escape
    n = len(summary.rows)
    graded = [s for (s, _), r in zip(summary.scores, summary.rows) if r["status"] == "graded"]
    top = max((m for _, m in summary.scores), default=0)
    counts = ", ".join(f"{v} {k}" for k, v in summary.statuses.items() if v)
    parts = [f"<h1>Class report: {n} submission(s)</h1>",
             f'<p id="statuses">{e(counts) or "no submissions"}.'
             + (f" Graded: median score {statistics.median(graded):g} / {top:g}, mean {statistics.mean(graded):.2f},"
                f" lowest {min(graded):g}, highest {max(graded):g}." if graded else "") + "</p>",
             svg,
             '<p class="muted">The same figure is <a href="report.svg">report.svg</a>, beside this page.</p>']
    parts.append("<h2>Checks most students lost</h2>")
    if summary.lost:
        first = summary.lost[0]
        checked = sum(bool(d.get("checks")) and items.counts(d, first.part, first.name)
                      for d in summary.results.values())
        parts.append(f'<p>Most lost: <strong id="top-lost">{e(first.title)}</strong> '
                     f"({len(first.students)} of {checked} submission(s) whose checks ran, made for their own "
                     "variant, that attempted its lesson; those set apart are listed below).</p>")
        rows = [[e(c.title) + (" <span class='muted'>(hidden)</span>" if c.hidden else ""),
                 f'<span class="n">{len(c.students)}</span>', f"{c.points_lost:g}",
                 f"{e(c.example)} <span class='muted'>({e(c.example_student)})</span>"]
                for c in summary.lost[:TOP_CHECKS]]
        parts.append(report_items.table(["check", "students", "points lost in all", "example feedback (student)"],
                                        rows, "lost-checks"))
    else:
        parts.append('<p id="top-lost">No check was lost.</p>')
    parts.append(report_items.sections(summary.results, summary.rows))
    parts.append("<h2>Not graded</h2>")
    if summary.not_graded:
        parts.append(report_items.table(["student", "status", "reason"],
                                        [[e(s), e(st), e(r)] for s, st, r in summary.not_graded], "not-graded"))
    else:
        parts.append("<p>Every submission was graded.</p>")
    times = summary.seconds
    parts.append("<h2>Grading time</h2>")
    if times:
        slow = sorted(times.items(), key=lambda kv: -kv[1])[:5]
        values = list(times.values())
        parts.append(f'<p id="timing">{len(values)} result(s): {sum(values):.1f} s of grading in all, median '
                     f"{statistics.median(values):.2f} s, slowest {max(values):.2f} s per submission "
                     "(each submission's own time in its worker; a batch with N workers takes about 1/N of the "
                     "total).</p>")
        parts.append(report_items.table(["slowest", "seconds"], [[e(s), f"{v:.2f}"] for s, v in slow], "slowest"))
    isolation: dict[str, int] = {}
    for r in summary.rows:
        isolation[r.get("isolation") or "no student code run"] = isolation.get(r.get("isolation") or
                                                                              "no student code run", 0) + 1
    parts.append("<h2>Student code</h2>")
    parts.append(report_items.table(["isolation", "submissions"],
                                    [[e(k), str(v)] for k, v in sorted(isolation.items())], "isolation"))
    versions = sorted({r.get("grader_version", "") for r in summary.rows} - {""})
    parts.append(f'<p class="muted">grader {e(", ".join(versions))}; from gradebook.csv and results/*.json</p>')
    body = "\n".join(parts)
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>Class report</title>'
            f"<style>{CSS}</style></head><body>\n{body}\n</body></html>\n")


def write_report(out_dir: str | Path) -> Path:
    """Write ``out_dir/report.html`` and ``out_dir/report.svg`` for a finished (or partial) batch; the HTML path."""
    out = Path(out_dir)
    summary = summarize(out)
    drawn = panels(summary)
    svg = chart.svg(drawn, FIGURE)
    write_private(out / "report.svg", svg + "\n")
    target = out / "report.html"
    write_private(target, render(summary, svg + chart.data_table(drawn, "figure")))
    return target
