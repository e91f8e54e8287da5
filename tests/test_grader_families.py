"""The grader is fair across CPUs: a hand-in is recomputed under the INT8 kernel family it was made on.

The reference workspace is built twice, once as each kernel family computes (this machine's kernels,
and ``lab.kernels``' emulation of the other family), and each hand-in records its family. Both must
grade full marks here; a hand-in that claims the wrong family loses the points whose numbers depend on
it; and (slow) the grader itself running on the other family's real kernels, under qemu, gives this
machine's hand-in full marks.
"""
from __future__ import annotations

import io
import json
import subprocess
import zipfile
from pathlib import Path

import kernel_families as kf
import pytest
from test_grader import not_handed_in_by_reference, not_in_reference

from grader import core, reference
from lab import kernels
from lab.tools.submit import submit

REPO = Path(__file__).resolve().parent.parent
MINE = kernels.machine_family()
OTHER = next(f for f in kernels.FAMILIES if f != MINE)


def handed_in(tmp_path_factory, family: str, student: str) -> Path:
    with kernels.computing_as(family):
        work = reference.build(tmp_path_factory.mktemp(f"reference-{family}") / "workspace")
        return submit(student, work, tmp_path_factory.mktemp(f"handed-in-{family}"))


@pytest.fixture(scope="module")
def mine_zip(tmp_path_factory) -> Path:
    return handed_in(tmp_path_factory, MINE, "reference")


@pytest.fixture(scope="module")
def other_zip(tmp_path_factory) -> Path:
    return handed_in(tmp_path_factory, OTHER, "reference")


def manifest(zip_path: Path) -> dict:
    with zipfile.ZipFile(zip_path) as z:
        return json.loads(z.read("submission.json"))


def relabelled(zip_path: Path, family: str, out: Path) -> Path:
    """The same hand-in with another kernel family written into submission.json."""
    buf = io.BytesIO()
    with zipfile.ZipFile(zip_path) as src, zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as dst:
        for item in src.infolist():
            data = src.read(item)
            if item.filename == "submission.json":
                doc = json.loads(data)
                doc["kernel_family"] = family
                data = json.dumps(doc, indent=2).encode()
            dst.writestr(item, data)
    out.write_bytes(buf.getvalue())
    return out


def lost(result) -> list[str]:
    return [f"{c.part}.{c.name}: {c.message}" for c in result.checks
            if not c.passed and not not_handed_in_by_reference(c.message)]


def test_each_hand_in_records_the_family_it_was_made_with(mine_zip, other_zip):
    assert manifest(mine_zip)["kernel_family"] == MINE
    assert manifest(other_zip)["kernel_family"] == OTHER


def test_the_two_families_report_different_numbers(mine_zip, other_zip):
    """Otherwise the cross-family tests below would prove nothing: lesson 06's per-channel candidate differs."""
    def candidate(z):
        with zipfile.ZipFile(z) as f:
            doc = json.loads(f.read("regression.json"))
        return json.dumps(doc, sort_keys=True)
    assert candidate(mine_zip) != candidate(other_zip)


@pytest.mark.parametrize("which", ["mine", "other"])
def test_an_honest_hand_in_of_either_family_grades_full_marks_here(which, mine_zip, other_zip):
    result = core.grade(mine_zip if which == "mine" else other_zip)
    assert result.status == "graded", result.reason
    assert not lost(result), lost(result)
    assert result.score == result.max_score - not_in_reference()
    family = MINE if which == "mine" else OTHER
    note = next(n for n in result.notes if "INT8 kernel family" in n)
    assert f"the {family} INT8 kernel family" in note
    assert ("emulated" in note) == (which == "other"), note


def test_a_hand_in_that_claims_the_wrong_family_loses_the_dependent_points(other_zip, tmp_path):
    result = core.grade(relabelled(other_zip, MINE, tmp_path / "made-elsewhere.zip"))
    names = {f"{c.part}.{c.name}" for c in result.checks if not c.passed}
    assert result.status == "graded"
    assert names & {"acceptance.summaries", "acceptance.candidate", "acceptance.decisions"}, lost(result)


@pytest.mark.slow
def test_a_grader_on_the_other_familys_real_kernels_gives_this_hand_in_full_marks(mine_zip):
    """The whole grader under qemu Haswell: real saturating AVX2 kernels, this machine's hand-in emulated."""
    if MINE != kernels.EXACT:
        pytest.skip("this machine's kernels saturate; a grader on exact kernels needs an ARM or VNNI machine "
                    "(the emulation side is covered by the fast tests)")
    prefix = kf.family_prefix(kf.require_haswell)
    proc = subprocess.run(prefix + ["-m", "grader", "grade", "--json", str(mine_zip)], cwd=REPO,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-2000:]
    doc = json.loads(proc.stdout[proc.stdout.index("{"):])
    lost_here = [f"{c['part']}.{c['name']}" for c in doc["checks"] if not c["passed"]
                 and not not_handed_in_by_reference(c.get("message", ""))]
    assert not lost_here, lost_here
    assert any("emulated on this grader's CPU of the saturating family" in n for n in doc["notes"]), doc["notes"]
