"""The class report's item analysis (``grader.items``), as HTML sections with inline SVG (``grader.chart``).

Six sections: every check's pass rate, what the class predicted (each question's answers, the ones the grader
judged right marked), every lesson's score distribution, the similar-code groups (a list to look at; no
score depends on it), the hand-ins made for another variant, and those set apart from the learning signals
(whole, or the lessons they did not attempt: ``grader.items.counts``). Every text from a hand-in is escaped here
or by ``grader.chart``.
"""
from __future__ import annotations

import html
import json
import math
import re
import statistics
from types import MappingProxyType

from grader import chart
from grader.items import Items, Prediction, analyse
from grader.results import _part_title

RIGHT, WRONG, MIXED = "#55a868", "#c44e52", "#999999"
# a pass rate's band: (lowest rate, the word every bar and row carries, its colour); the colour never says it alone
BANDS = ((0.8, "pass", RIGHT), (0.5, "partial", MIXED), (0.0, "fail", WRONG))
VERDICTS = MappingProxyType({"right": ("\u2713 right", RIGHT), "wrong": ("\u2717 wrong", WRONG),
                             "mixed": ("partly right", MIXED)})  # a prediction's answer: its words and colour
ROW_PX, LABEL_CHARS = 22, 84
GRID_COLUMNS, CELL = 3, (500, 230)


def _part_short(part: str) -> str:
    """A part's lesson number ("02"), or its id for a part with none ("predictions", "hidden")."""
    number = re.match(r"(\d\d) ", _part_title(part))
    return number.group(1) if number else part


def _short(text: str, width: int = LABEL_CHARS) -> str:
    return text if len(text) <= width else text[:width - 3] + "..."


def _bars_figure(svg_id: str, title: str, xlabel: str, rows: list[tuple[str, int]], colors: list[str],
                 x_top: float | None = None) -> str:
    """Horizontal bars, one row each, in a figure as tall as its rows need (labels on the left third)."""
    height = 90 + ROW_PX * max(len(rows), 1)
    size = (chart.WIDTH, height)
    rect = (0.36, 60 / height, 0.6, ROW_PX * max(len(rows), 1) / height)
    panel = chart.horizontal_bars(rect, title, xlabel, rows, colors, "none", size=size, x_top=x_top)
    return chart.svg([panel], title, svg_id, size) + chart.data_table([panel], svg_id)


def _band(rate: float) -> tuple[str, str]:
    """(the word, the colour) of a pass rate's band."""
    return next((word, color) for low, word, color in BANDS if rate >= low)


def pass_rates(items: Items) -> str:
    e = html.escape
    if not items.checks:
        return '<h2>Every check\'s pass rate</h2><p id="pass-rates">No hand-in had its checks run.</p>'
    bands = [_band(c.rate) for c in items.checks]
    rows = [(f"{_short(f'{_part_short(c.part)}: {c.title}')} ({word})", round(100 * c.rate))
            for c, (word, _) in zip(items.checks, bands)]
    figure = _bars_figure("pass-rate-figure", "Pass rate of every check", "% of graded hand-ins that passed",
                          rows, [color for _, color in bands], 100)
    table = "".join(f"<tr><td>{e(_part_title(c.part))}</td><td>{e(c.title)}</td><td class='n'>{c.passed}</td>"
                    f"<td class='n'>{c.graded}</td><td class='n'>{100 * c.rate:.0f} %</td><td>{word}</td></tr>"
                    for c, (word, _) in zip(items.checks, bands))
    return ("<h2>Every check's pass rate</h2>"
            "<p>Among the hand-ins whose checks ran, made for their own variant, that attempted the check's lesson "
            "(handed in a file it writes; a prediction: answered it); a check passes at full points. Those set apart "
            "are listed under \"Set apart from the learning signals\".</p><p>Each bar and row says its band in words: "
            "pass (green), 80 % or more passed; partial (grey), 50 to 79 %; fail (red), under 50 %.</p>" + figure
            + '<table id="pass-rates"><thead><tr><th>lesson</th><th>check</th><th>passed</th><th>of</th>'
              f"<th>rate</th><th>band</th></tr></thead><tbody>{table}</tbody></table>")


def _answer_text(text: str) -> str:
    """A JSON answer as a line: objects as key=value pairs (nested in braces), strings bare, the rest as JSON."""
    try:
        return _value_text(json.loads(text))
    except ValueError:
        return text  # "N other answer(s)"


def _value_text(value) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k}={_nested(v)}" for k, v in value.items())
    return value if isinstance(value, str) else json.dumps(value)


def _nested(value) -> str:
    return "{" + _value_text(value) + "}" if isinstance(value, dict) else _value_text(value)


def _prediction(p: Prediction) -> str:
    e = html.escape
    verdict = [("right" if a.right == a.count else "wrong" if a.right == 0 else "mixed") for a in p.answers]
    rows = [(f"{VERDICTS[v][0]}: {_short(_answer_text(a.text))}", a.count) for a, v in zip(p.answers, verdict)]
    colors = [VERDICTS[v][1] for v in verdict]
    figure = _bars_figure(f"prediction-{p.name}", f"{p.title}: {p.total} answer(s)", "hand-ins", rows, colors)
    body = "".join(f"<tr class='{v}'><td><code>{e(_answer_text(a.text))}</code></td><td class='n'>{a.count}</td>"
                   f"<td>{VERDICTS[v][0] if v != 'mixed' else f'{VERDICTS[v][0]}: {a.right} judged right'}"
                   "</td></tr>" for a, v in zip(p.answers, verdict))
    said = (f'<p class="muted" id="wrong-feedback-{e(p.name)}">What the grader told one wrong answer: '
            f"{e(p.wrong_feedback)}</p>" if p.wrong_feedback else "")
    return (f"<h3>{e(p.title)} <span class='muted'>({e(p.name)})</span></h3>" + figure
            + f'<table id="answers-{e(p.name)}" class="answers"><thead><tr><th>answer</th><th>hand-ins</th>'
              f"<th>the grader's verdict</th></tr></thead><tbody>{body}</tbody></table>" + said)


def predictions(items: Items) -> str:
    head = ("<h2>What the class predicted</h2><p>Each prediction's first answer (predictions.json), the most common "
            "first. Each bar and row says the grader's verdict in words: &#10003; right (green), judged right against "
            "the lesson's truth, which it recomputes from the fixtures; &#10007; wrong (red); partly right (grey). "
            "Under a question with a wrong answer, the grader's message to one of them says what it measured.</p>")
    if not items.predictions:
        return head + '<p id="no-predictions">No hand-in\'s answers were recorded.</p>'
    return head + "".join(_prediction(p) for p in items.predictions)


def lesson_scores(items: Items) -> str:
    e = html.escape
    if not items.parts:
        return "<h2>Scores by lesson</h2><p id=\"lesson-scores\">No hand-in had its checks run.</p>"
    parts = list(items.parts.items())
    rows = math.ceil(len(parts) / GRID_COLUMNS)
    size = (CELL[0] * GRID_COLUMNS, CELL[1] * rows)
    panels = []
    for k, (part, (top, got)) in enumerate(parts):
        col, row = k % GRID_COLUMNS, k // GRID_COLUMNS
        rect = ((col * CELL[0] + 60) / size[0], 1 - ((row + 1) * CELL[1] - 50) / size[1],
                (CELL[0] - 90) / size[0], (CELL[1] - 90) / size[1])
        bins = max(1, min(20, int(round(top * 2))))  # half a point per bin up to 10 points
        panels.append(chart.stacked_histogram(rect, f"{_short(_part_title(part), 36)} (out of {top:g})", "points",
                                              top, [(part, "#4c72b0", got)], bins, size, legend=False))
    figure = (chart.svg(panels, "score distribution of every lesson", "lesson-score-figure", size)
              + chart.data_table(panels, "lesson-score-figure"))
    table = "".join(f"<tr><td>{e(_part_title(p))}</td><td class='n'>{top:g}</td><td class='n'>{len(got)}</td>"
                    f"<td class='n'>{statistics.median(got):g}</td><td class='n'>{statistics.mean(got):.2f}</td>"
                    f"<td class='n'>{sum(g >= top for g in got)}</td></tr>" for p, (top, got) in parts)
    return ("<h2>Scores by lesson</h2>" + figure + '<table id="lesson-scores"><thead><tr><th>lesson</th>'
            "<th>points</th><th>hand-ins</th><th>median</th><th>mean</th><th>full marks</th></tr></thead>"
            f"<tbody>{table}</tbody></table>" + SCALED_NOTE)


SCALED_NOTE = ("<p>A part that spans lessons (the predictions, the hidden checks) counts, for each hand-in, the checks "
               "of the lessons it attempted, scaled to the part's points: a class not asked for lessons 08 and 09 is "
               "not marked down here for them, though the gradebook's column counts every check.</p>")


def table(header: list[str], rows: list[list[str]], table_id: str, numeric: frozenset[int] = frozenset()) -> str:
    """A table whose cells are HTML already (escaped by the caller); the columns in ``numeric`` align right."""
    head = "".join(f"<th>{h}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td class='n'>{c}</td>" if k in numeric else f"<td>{c}</td>"
                                    for k, c in enumerate(row)) + "</tr>" for row in rows)
    return f'<table id="{table_id}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _listing(head: str, table_id: str, none: str, header: list[str], rows: list[list[str]],
             numeric: frozenset[int] = frozenset()) -> str:
    """A section that lists hand-ins: ``head``, then the rows' table, or the sentence ``none`` when there is none."""
    return head + (table(header, rows, table_id, numeric) if rows else f'<p id="{table_id}">{none}</p>')


def similar_code(items: Items, scores: dict[str, str]) -> str:
    e = html.escape
    head = ("<h2>Similar code</h2><p>Hand-ins whose calibration_reader.py and metrics.py are the same once names, "
            "comments, docstrings, strings and layout are normalised. A list to look at, not a verdict: no score "
            "depends on it, and honest students who kept the lesson's own code can meet here too.</p>")
    rows = [[str(k), str(len(g)), e(", ".join(g)), e(", ".join(scores.get(s, "") for s in g))]
            for k, g in enumerate(items.similar, 1)]
    return _listing(head, "similar-code", "No two hand-ins share both modules.",
                    ["group", "hand-ins", "students", "their scores"], rows, frozenset({0, 1}))


def variants(results: dict[str, dict], scores: dict[str, str]) -> str:
    """The hand-ins whose files were not made for their own variant (``grader.variants``; the result's instructor-only
    field): another student's (whose, when the grader could tell), or the instructor's reference data."""
    e = html.escape
    head = ("<h2>Variants</h2><p>Hand-ins whose models and reports were not made with the student's own variant of "
            "the calibration data: another student's (named when the class's ids tell whose) or the instructor's "
            "reference data (lesson 00 run without a STUDENT_ID); each loses every check that reads them.</p>")
    made = {student: (r.get("instructor") or {}).get("variant") or {} for student, r in sorted(results.items())}
    rows = [[e(student), e(str(v.get("made_for"))), e(str(v.get("evidence", ""))), e(scores.get(student, ""))]
            for student, v in made.items() if v and v.get("made_for") != v.get("own")]
    return _listing(head, "variants", "Every graded hand-in was made with its own variant.",
                    ["student", "made for", "how the grader told", "score"], rows)


def set_apart(items: Items, scores: dict[str, str]) -> str:
    """The hand-ins the learning signals leave out, whole or in part (``grader.items.set_apart``), and why."""
    e = html.escape
    head = ("<h2>Set apart from the learning signals</h2><p>The pass rates, lesson scores and most-lost checks count "
            "a check only for hand-ins made for their own variant that attempted its lesson: a copy, another "
            "variant's files or a lesson not handed in says nothing about what the class learned.</p>")
    rows = [[e(a.student), e(a.why), e(scores.get(a.student, ""))] for a in items.apart]
    return _listing(head, "set-apart", "None: every graded hand-in counts in every lesson.",
                    ["student", "why", "score"], rows, frozenset({2}))


def _score(v) -> str:
    try:
        return f"{float(v):g}"
    except (TypeError, ValueError):
        return ""


def sections(results: dict[str, dict], rows: list[dict]) -> str:
    """The six sections' HTML for a class's results (``OUT/results/*.json``) and gradebook rows."""
    items = analyse(results)
    scores = {r["student"]: _score(r.get("score")) for r in rows}
    return "\n".join([pass_rates(items), predictions(items), lesson_scores(items), similar_code(items, scores),
                      variants(results, scores), set_apart(items, scores)])
