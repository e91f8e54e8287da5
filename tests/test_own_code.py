"""A graded module must be the student's own: the grader refuses one that imports the lab's (or the grader's)
code, names the file, the line and what it imported, and the "import the lab's version" hand-in scores 0."""
from __future__ import annotations

import shutil

import pytest

from grader import own_code

DELEGATING_READER = "from lab.readers import ArrayReader as DigitReader\n"
DELEGATING_METRICS = "from lab.lessons.lesson06_accept_or_reject.acceptance import summarize\n"
# Where summarize's reference lives now: importable where grading runs, so it must be refused too.
DELEGATING_METRICS_GRADER = "from grader.lessons.lesson06_accept_or_reject import summarize\n"


def test_the_delegating_reader_is_refused_by_file_line_and_name():
    message = own_code.refusal(DELEGATING_READER, "calibration_reader.py")
    assert message.startswith("write DigitReader yourself; calibration_reader.py line 1 imports "
                              "lab.readers.ArrayReader")


@pytest.mark.parametrize("source", [DELEGATING_METRICS, DELEGATING_METRICS_GRADER])
def test_the_delegating_metrics_is_refused(source):
    message = own_code.refusal(source, "metrics.py")
    assert message.startswith("write summarize yourself; metrics.py line 1 imports ")
    assert "summarize" in message.split("imports ", 1)[1]


@pytest.mark.parametrize("source, line, what", [
    ("import lab\n", 1, "lab"),
    ("import numpy as np\nimport lab.readers as r\n", 2, "lab.readers"),
    ("from lab import readers\n", 1, "lab.readers"),
    ("from lab.readers import *\n", 1, "lab.readers.*"),
    ("import os, grader.reference\n", 1, "grader.reference"),
    ("import importlib\nm = importlib.import_module('lab.lessons.lesson06_accept_or_reject.acceptance')\n", 2,
     "lab.lessons.lesson06_accept_or_reject.acceptance"),
    ("from importlib import import_module\nm = import_module(name='lab')\n", 2, "lab"),
    ("m = __import__('lab.readers', fromlist=['ArrayReader'])\n", 1, "lab.readers"),
    ("import sys\nm = sys.modules['lab.lessons.lesson06_accept_or_reject.acceptance']\n", 2,
     "lab.lessons.lesson06_accept_or_reject.acceptance"),
    ("import sys\nm = sys.modules.get('lab')\n", 2, "lab"),
    ("def summarize(p, l):\n"
     "    from lab.lessons.lesson06_accept_or_reject.acceptance import top_confusions\n    return p\n", 2,
     "lab.lessons.lesson06_accept_or_reject.acceptance.top_confusions"),
    ("class DigitReader:\n    def get_next(self):\n        import importlib\n"
     "        return importlib.import_module('la' + 'b')\n", 4, own_code.DYNAMIC),
])
def test_every_form_of_import_is_found(source, line, what):
    found = own_code.find(source)
    assert own_code.Delegation(line, what) in found, found


@pytest.mark.parametrize("source", [
    "",
    "import numpy as np\nfrom onnxruntime.quantization import CalibrationDataReader\n",
    "import labels\nimport lab_helpers\nfrom laboratory import x\n",  # only the lab package itself
    "from . import lab\n",  # relative: fails on its own, a graded module is loaded outside any package
    "text = 'import lab'  # a string is not an import\n",
    "def summarize(p, l):\n    return {'count': len(l)}\n",
])
def test_own_code_is_not_refused(source):
    assert own_code.find(source) == []
    assert own_code.refusal(source, "metrics.py") is None


@pytest.mark.parametrize("source", ["def broken(:\n", b"\xff\xfe not utf-8 \x00", "(" * 10_000 + ")" * 10_000])
def test_a_module_that_does_not_parse_is_left_to_the_sandbox(source):
    """Running it says why it fails; the static check neither crashes nor refuses it."""
    assert own_code.find(source) is None
    assert own_code.refusal(source, "metrics.py") is None


def test_the_message_is_safe_to_print_and_short():
    source = "import importlib\n" + "".join(f"m{i} = importlib.import_module('lab.x{i}')\n" for i in range(5)) \
        + "n = __import__('lab.\\udc80\\n' + 'y' * 200)\n"
    message = own_code.refusal(source, "metrics.py")
    message.encode("utf-8")  # no lone surrogate
    assert "(and 3 more)" in message and "\n" not in message


def test_the_encoding_line_decides_how_the_file_reads(tmp_path):
    path = tmp_path / "metrics.py"
    path.write_bytes(b"# -*- coding: latin-1 -*-\n# caf\xe9\n"
                     b"from lab.lessons.lesson06_accept_or_reject.acceptance import summarize\n")
    assert own_code.refusal_for(path).startswith("write summarize yourself; metrics.py line 3 imports")


# --- the "import the lab's version" hand-in, graded ----------------------------------------------

@pytest.fixture(scope="module")
def delegating_grade(tmp_path_factory, reference_workspace):
    """The reference workspace with the two graded modules replaced by imports of the lab's versions."""
    from grader import core
    from lab.tools.submit import submit

    work = reference_workspace(tmp_path_factory.mktemp("delegating") / "workspace")
    (work / "calibration_reader.py").write_text(DELEGATING_READER)
    (work / "metrics.py").write_text(DELEGATING_METRICS)
    zipped = submit("reference", work, tmp_path_factory.mktemp("handed-in"))
    shutil.rmtree(work)
    return core.grade(zipped)


def _checks(result, *names):
    return {c.name: c for c in result.checks if c.name in names}


def test_the_delegating_hand_in_scores_0_on_summarize(delegating_grade):
    assert delegating_grade.status == "graded", delegating_grade.reason
    checks = _checks(delegating_grade, "summarize_code", "secret_summarize")
    assert set(checks) == {"summarize_code", "secret_summarize"}
    for c in checks.values():
        assert c.points == 0, (c.name, c.points, c.message)
        assert c.message.startswith("write summarize yourself; metrics.py line 1 imports "
                                    "lab.lessons.lesson06_accept_or_reject.acceptance.summarize")


def test_the_delegating_hand_in_scores_0_on_the_reader(delegating_grade):
    checks = _checks(delegating_grade, "contract", "range_from_reader")
    assert set(checks) == {"contract", "range_from_reader"}
    assert all(c.points == 0 for c in checks.values()), [(c.name, c.points) for c in checks.values()]
    assert checks["contract"].message.startswith("write DigitReader yourself; calibration_reader.py line 1 imports "
                                                 "lab.readers.ArrayReader")
