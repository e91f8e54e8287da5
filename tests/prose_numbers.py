"""Every measured number a lesson's prose states must come from that lesson's own run, on both kernel families.

A number in a markdown cell is *measured* when it has a decimal point (``0.975``), is a percentage (``9 %``), is
an integer of 100 or more (``2,554``), or is a count of what a run measures, in digits or words (``15 times``,
``two frames``, ``3 confident answers``); it must then appear among the numbers the executed lesson printed (stream
output, ``text/plain`` and ``text/markdown`` results) in every run given, one per kernel family. A decimal matches an
output that rounds to it at the prose's precision; a percentage also matches an output fraction (``0.092`` for
``9 %``); a big integer matches exactly.

Not measured, so not checked: numbers inside backticks (code, settings, file names), in link targets, in version
strings (``1.32``, ``3.11``), the grid's structural constants (``STRUCTURAL``), and every number of a true equation
written in prose (``255 x 64 x 2 = 32,640``: the arithmetic proves itself).

    .venv/bin/python tests/prose_numbers.py EXACT_DIR SATURATING_DIR [NN ...]

compares the lessons' sources with the executed copies in the two folders (``python -m lab run --out DIR``, the
second with ``LAB_KERNEL_FAMILY=saturating``) and lists every number the runs do not back.
"""
from __future__ import annotations

import math
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import nbformat

REPO = Path(__file__).resolve().parent.parent
NOTEBOOKS = REPO / "notebooks"

# The grid and the data set's fixed sizes: true by construction, not by measurement.
STRUCTURAL = {127, 128, 255, 256, 254, 512, 1024, 32767, 32768, 65536, 360, 400, 1797, 8128, 4096, 2**24, 2**31,
              100, 200, 300}
# Numbers a lesson derives or quotes rather than measures, per lesson: number as written -> why it is not a measurement.
# Keep this short: a number a run can print belongs in the run.
NOT_MEASURED = {
    "01": {"127.5": "0.5 x 255, the grid arithmetic of the example"},
    "03": {"4080": "16 x 255, the grid arithmetic of the wide ruler", "three times": "the lesson's three conversions",
           "16 times": "raw 0..16 pixels against the deployed 0..1: the wide set's recipe"},
    "04": {"16 images": "two batches of 8, the lesson's setting", "Eight images": "one batch of 8"},
    "05": {"two digits": "an FP32 output unsure between its top two"},
    "07": {"two answers": "FP32's top two answers"},
    "06": {"250": "254 - 4 roundings, arithmetic", "258": "254 + 4 roundings, arithmetic",
           "five answers": "the exercise's five test answers"},
    "08": {"99.999 %": "ORT's default Percentile setting", "0.001 %": "100 % - ORT's default Percentile setting",
           "1000": "the course's reading guide's suggested sample count (100-1000), quoted"},
}

CODE_SPAN = re.compile(r"`[^`]*`")
LINK_TARGET = re.compile(r"\]\([^)]*\)")
ISSUE = re.compile(r"#\d+")
VERSION = re.compile(r"\b\d+\.\d+\.\d+\b|\b(?:ORT|ONNX Runtime|onnxruntime|Python|opset|version|v)\s*\d+(?:\.\d+)*",
                     re.IGNORECASE)
NUMBER = re.compile(r"(?<![\w.])(\d{1,3}(?:,\d{3})+|\d+(?:\.\d+)?)(\s*%)?(?![\w])")
OPERATOR = r"\s*(?:x|×|\*|/|\+|-|−)\s*"
EQUATION = re.compile(rf"(?<![\w.])(?:\d[\d,.]*{OPERATOR})+\d[\d,.]*\s*=\s*\d[\d,.]*")
OUTPUT_NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")
NUMBER_WORDS = {"two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9, "ten": 10,
                "eleven": 11, "twelve": 12, "fifteen": 15, "twenty": 20}
# a small count of what a run measures: "15 times the right ruler's", "two frames", "3 confident answers"
COUNT = re.compile(r"(?<![\w.])(\d{1,2}|" + "|".join(NUMBER_WORDS) + r")\s+(?:more\s+|fewer\s+)?"
                   r"(times|frames?|images?|confident|answers?|digits?)\b", re.IGNORECASE)


@dataclass(frozen=True)
class Claim:
    """One measured number in a lesson's prose: where it is and how it reads."""

    lesson: str
    cell: int
    text: str
    value: float
    decimals: int
    percent: bool

    def __str__(self) -> str:
        return f"lesson {self.lesson}, markdown cell {self.cell}: {self.text!r}"


def _value(token: str) -> float:
    return float(token.replace(",", ""))


def _true_equation(expr: str) -> bool:
    left, right = expr.rsplit("=", 1)
    py = re.sub(r"(?<=\d),(?=\d{3})", "", left)
    py = re.sub(r"\s*(?:x|×)\s*", "*", py).replace("−", "-")
    try:
        # eval sees digits and + - * / only: EQUATION matches nothing else
        return math.isclose(eval(py, {"__builtins__": {}}), _value(right.strip()), rel_tol=1e-9)
    except (SyntaxError, ValueError, ZeroDivisionError):
        return False


def prose(markdown: str) -> str:
    """The markdown with what is never a measurement blanked: code spans, link targets, versions, true equations."""
    text = LINK_TARGET.sub("]()", CODE_SPAN.sub(" ", markdown))
    text = VERSION.sub(" ", ISSUE.sub(" ", text))
    return EQUATION.sub(lambda m: " " if _true_equation(m.group(0)) else m.group(0), text)


def claims(lesson: str, nb: nbformat.NotebookNode) -> list[Claim]:
    """Every measured number in ``nb``'s markdown cells."""
    found = []
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "markdown":
            continue
        for m in NUMBER.finditer(prose(cell.source)):
            token, percent = m.group(1), bool(m.group(2))
            value = _value(token)
            decimals = len(token.split(".")[1]) if "." in token else 0
            if m.group(0).strip() in NOT_MEASURED.get(lesson, {}):
                continue
            if decimals or percent or (value >= 100 and value not in STRUCTURAL):
                found.append(Claim(lesson, index, m.group(0).strip(), value, decimals, percent))
        text = prose(cell.source)
        for m in COUNT.finditer(text):
            if m.group(0).strip() in NOT_MEASURED.get(lesson, {}) or text[:m.start()].endswith("lesson "):
                continue  # quoted, or "lesson 09 times both": a lesson's number and a verb
            token = m.group(1).lower()
            found.append(Claim(lesson, index, m.group(0).strip(), float(NUMBER_WORDS.get(token) or token), 0, False))
    return found


def printed_numbers(nb: nbformat.NotebookNode) -> list[float]:
    """Every number an executed notebook printed."""
    texts = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            if out.get("output_type") == "stream":
                texts.append(out.get("text", ""))
            for kind in ("text/plain", "text/markdown"):
                texts.append(out.get("data", {}).get(kind, ""))
    joined = re.sub(r"(?<=\d),(?=\d{3})", "", "\n".join(t if isinstance(t, str) else "".join(t) for t in texts))
    return [float(x) for x in OUTPUT_NUMBER.findall(joined)]


def backed(claim: Claim, printed: list[float]) -> bool:
    """Does any printed number read as ``claim`` at its precision?"""
    half = 0.5 * 10 ** -claim.decimals + 1e-9
    if claim.decimals == 0 and not claim.percent:
        return claim.value in printed
    candidates = printed + ([100 * p for p in printed] if claim.percent else [])
    return any(abs(abs(p) - claim.value) <= half for p in candidates)


def unbacked(source: Path, executed_runs: list[Path]) -> list[str]:
    """The measured numbers of lesson ``source`` that some run in ``executed_runs`` (one folder per family) did not
    print, each named with the run that lacks it."""
    lesson = source.name[:2]
    nb = nbformat.read(source, as_version=4)
    problems = []
    for run_dir in executed_runs:
        executed = run_dir / source.name
        if not executed.exists():
            problems.append(f"lesson {lesson}: no executed copy in {run_dir.name}")
            continue
        printed = printed_numbers(nbformat.read(executed, as_version=4))
        problems += [f"{claim} is not printed by the run in {run_dir.name}" for claim in claims(lesson, nb)
                     if not backed(claim, printed)]
    return problems


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__)
        return 2
    runs, only = [Path(argv[0]), Path(argv[1])], set(argv[2:])
    problems = [p for source in sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")) if not only or source.name[:2] in only
                for p in unbacked(source, runs)]
    print("\n".join(problems) or "every measured number in the prose is printed by both runs")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
