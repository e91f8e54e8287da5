"""The environment check: each rule on plain values, then the real check on this checkout."""
import json
import sys
from pathlib import Path

import pytest
from packaging.specifiers import SpecifierSet

from instructor import kit as kit_builder
from instructor import pins
from lab import environment as env


def test_parse_pins_keeps_exact_pins_only():
    text = "# the stack\nonnx==1.23.2\nNumPy == 2.4.6  # comment\n-e .\nscikit_learn==1.9.1\nloose>=1\n"
    assert env.parse_pins(text) == {"onnx": "1.23.2", "numpy": "2.4.6", "scikit-learn": "1.9.1"}


def test_a_core_mismatch_fails_and_another_mismatch_warns():
    pins = {"onnxruntime": "1.32.0", "tqdm": "4.70.1", "numpy": "2.4.6"}
    installed = {"onnxruntime": "1.31.0", "tqdm": "4.0.0", "numpy": "2.4.6"}
    checks = {c.name: c for c in env.version_checks(pins, installed)}
    assert checks["onnxruntime"].status == "fail"
    assert checks["tqdm"].status == "warn"
    assert checks["numpy"].status == "ok"
    assert "make setup" in checks["onnxruntime"].fix


def test_a_missing_package_is_named():
    [c] = env.version_checks({"onnx": "1.23.2"}, {"onnx": None})
    assert (c.status, c.found) == ("fail", "not installed")


@pytest.mark.parametrize("version, status", [("3.11.7", "ok"), ("3.12.1", "ok"), ("3.10.14", "fail")])
def test_python_against_requires_python(version, status):
    assert env.python_check(version, ">=3.11").status == status


def test_a_changed_fixture_fails_with_a_fix():
    checks = env.fixture_checks({"fp32.onnx": False, "calibration.npz": True})
    report = env.EnvironmentReport(checks)
    assert not report.ok
    assert "fixtures: 1/2 match the manifest" in report.summary()
    with pytest.raises(env.EnvironmentProblem, match="fp32.onnx: found missing or changed"):
        report.raise_for_problems()


def test_kernel_from_the_project_venv_passes():
    checks = env.kernel_checks("/repo/.venv", "/repo/.venv", "/repo/.venv/bin/python")
    assert [c.status for c in checks] == ["ok", "ok"]


def test_another_python_or_an_unregistered_kernel_warns_and_says_what_to_choose():
    other = env.kernel_checks("/usr", "/repo/.venv", "/repo/.venv/bin/python")
    assert [c.status for c in other] == ["warn", "warn"]
    assert "Calibration Lab" in other[0].fix
    missing = env.kernel_checks("/repo/.venv", "/repo/.venv", None)
    assert missing[1].found == "not registered" and "make setup" in missing[1].fix
    # a warning is not a failure: the notebook goes on
    env.EnvironmentReport(other + missing).raise_for_problems()


def test_a_hubs_shared_venv_that_the_kernel_runs_is_the_labs_own():
    """On a JupyterHub the Calibration Lab kernel runs a shared venv outside the student's kit: no warning."""
    shared = env.kernel_checks("/opt/calibration-lab/venv", "/home/s1/calibration-lab/.venv",
                               "/opt/calibration-lab/venv/bin/python")
    assert [c.status for c in shared] == ["ok", "ok"] and "shared" in shared[0].found
    elsewhere = env.kernel_checks("/usr", "/home/s1/calibration-lab/.venv", "/opt/calibration-lab/venv/bin/python")
    assert [c.status for c in elsewhere] == ["warn", "warn"]


def test_table_folds_matching_pins_and_shows_fixes():
    checks = env.version_checks({"onnx": "1", "tqdm": "2", "pytest": "3"}, {"onnx": "0", "tqdm": "2", "pytest": "3"})
    report = env.EnvironmentReport(checks)
    table = report.table()
    assert "2 other pins" in table and "-> run `make setup`" in table
    assert "tqdm" in report.table(every_pin=True)
    assert report.summary() == "versions: 1 of 3 need attention: onnx"


def test_this_checkout_passes_the_real_check():
    report = env.check()
    assert report.ok, report.table()
    assert "fixtures: 10/10 match the manifest" in report.summary()
    python = next(c for c in report.checks if c.topic == "python")
    assert python.found == ".".join(map(str, sys.version_info[:3]))
    pins = [c for c in report.checks if c.topic == "versions"]
    assert {"onnx", "onnxruntime", "numpy"} <= {c.name for c in pins}


@pytest.mark.parametrize("family", ["exact", "saturating"])
def test_either_kernel_family_is_ok_and_says_what_it_means(family):
    check = env.kernel_family_check(family)
    assert (check.topic, check.status, check.found) == ("int8", "ok", family)
    assert check.note.startswith(f"{family}:")
    assert "the grader recomputes under the family your hand-in records" in check.note
    table = env.EnvironmentReport([check]).table()
    assert family in table and "hand-in records" in " ".join(table.split())  # the meaning, under the line


def test_the_exact_family_warns_about_avx2_classmates_and_the_saturating_one_about_per_channel():
    assert "AVX2" in env.kernel_family_check("exact").note
    assert "Per-channel" in env.kernel_family_check("saturating").note


@pytest.mark.parametrize("machine, requested", [("exact", "saturating"), ("saturating", "exact")])
def test_computing_as_the_other_family_is_said(machine, requested):
    check = env.kernel_family_check(machine, requested)
    assert check.status == "ok" and check.found == f"computing as {requested} (emulated)"
    assert f"this CPU computes as {machine}" in check.note and "LAB_KERNEL_FAMILY" in check.note
    assert env.kernel_family_check(machine, machine).found == machine  # asking for this CPU's own is not emulation


def test_an_unknown_family_name_fails_and_an_unknown_probe_answer_warns():
    bad = env.kernel_family_check("exact", "avx2")
    assert bad.status == "fail" and "unset LAB_KERNEL_FAMILY" in bad.fix
    unknown = env.kernel_family_check(None, None, "the kernel probe answered 17.0")
    assert unknown.status == "warn" and "17.0" in unknown.note


def test_the_summary_is_the_same_text_on_both_families():
    summaries = {env.EnvironmentReport([env.kernel_family_check(m, r)]).summary()
                 for m in ("exact", "saturating") for r in (None, "exact", "saturating")}
    assert summaries == {"int8:     kernel family known (the table names it)"}


def test_this_checkout_names_its_kernel_family(monkeypatch):
    from lab import kernels

    monkeypatch.delenv(kernels.ENV_VAR, raising=False)
    check = next(c for c in env.check().checks if c.topic == "int8")
    assert check.found == kernels.machine_family() and check.status == "ok"


def test_every_place_that_names_the_kernel_names_lab_environments():
    """The Makefiles and the notebooks cannot import the lab: they spell the name, and must spell this one."""
    repo = Path(__file__).resolve().parents[1]
    for makefile in ((repo / "Makefile").read_text(), kit_builder.STUDENT_MAKEFILE):
        assert [ln.split(":=")[1].strip() for ln in makefile.splitlines()
                if ln.startswith("KERNEL ") or ln.startswith("KERNEL\t")] == [env.KERNEL_NAME]
    notebooks = sorted((repo / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    assert notebooks
    names = {nb.name: json.loads(nb.read_text())["metadata"]["kernelspec"]["name"] for nb in notebooks}
    assert set(names.values()) == {env.KERNEL_NAME}, names


# --- the pins the lab ships, and each host's fix ------------------------------------------------------------------

REPO = Path(__file__).resolve().parents[1]


def test_the_shipped_pins_are_requirements_txts_lesson_part():
    requirements = (REPO / "requirements.txt").read_text(encoding="utf-8")
    assert env.SHIPPED_PINS.read_text(encoding="utf-8") == pins.lab_pins(requirements), (
        "lab/pins.txt differs from requirements.txt; write it again: python -c \"from instructor.pins import lab_pins; "
        "open('lab/pins.txt', 'w').write(lab_pins(open('requirements.txt').read()))\"")
    shipped = env.parse_pins(env.SHIPPED_PINS.read_text(encoding="utf-8"))
    assert set(env.CORE_PACKAGES) <= set(shipped) and "pytest" not in shipped and "calibration-lab" not in shipped


def test_colabs_pins_keep_the_core_exact_and_hold_both_the_lock_and_colabs_own_versions():
    from test_colab_root import COLAB_PREINSTALLED

    lock = env.parse_pins((REPO / "requirements.txt").read_text(encoding="utf-8"))
    colab = env.parse_specifiers(env.COLAB_PINS.read_text(encoding="utf-8"))
    assert {name: colab[name] for name in env.CORE_PACKAGES} == {name: f"=={lock[name]}" for name in env.CORE_PACKAGES}
    preinstalled = env.parse_pins("\n".join(COLAB_PREINSTALLED))
    for name, spec in colab.items():
        if name in lock:
            assert SpecifierSet(spec).contains(lock[name]), f"{name}{spec} leaves out requirements.txt's {lock[name]}"
        if name not in env.CORE_PACKAGES and name != "protobuf":  # protobuf: onnx needs >= 6, Colab has 5.29
            assert SpecifierSet(spec).contains(preinstalled[name]), f"{name}{spec}: Colab has {preinstalled[name]}"
    assert not {"jupyterlab", "papermill", "pytest", "playwright", "ipykernel"} & set(colab), "not lean"


@pytest.mark.parametrize("environ, colab, checkout, name, words", [
    ({}, False, True, "checkout", "make setup"),
    ({"JUPYTERHUB_USER": "ada"}, False, True, "hub", "ask your instructor"),
    ({}, True, False, "colab", "Runtime > Restart session"),
    ({}, False, False, "installed", "pip install -r requirements.txt"),
])
def test_each_host_tells_its_own_fix(environ, colab, checkout, name, words):
    where = env.host(environ, colab=colab, checkout=checkout)
    assert where.name == name and words in where.fix
    [c] = env.version_checks({"numpy": "2.4.6"}, {"numpy": "2.1.3"}, host=where)
    assert c.status == "fail" and c.fix == where.fix


def test_an_install_under_a_running_kernel_says_restart_not_reinstall():
    colab = env.HOSTS["colab"]
    [stale] = env.version_checks({"numpy": "==2.4.6"}, {"numpy": "2.1.3"}, host=colab, on_disk={"numpy": "2.4.6"})
    assert stale.found == "2.1.3" and stale.fix.startswith("restart the runtime (Runtime > Restart session)")
    [old] = env.version_checks({"numpy": "==2.4.6"}, {"numpy": "2.1.3"}, host=colab, on_disk={"numpy": "2.1.3"})
    assert old.fix == colab.fix
    [ranged] = env.version_checks({"matplotlib": ">=3.9"}, {"matplotlib": "3.10.0"})
    assert (ranged.status, ranged.expected) == ("ok", ">=3.9")


def test_the_running_version_is_the_imported_modules():
    import numpy

    assert env.running_versions({"numpy": "0.0.1", "tqdm": "1"}) == {"numpy": numpy.__version__, "tqdm": "1"}


def test_with_no_checkout_the_check_reads_the_pins_the_lab_ships(tmp_path, monkeypatch):
    for variable in (*env.HUB_VARIABLES, "COLAB_RELEASE_TAG"):
        monkeypatch.delenv(variable, raising=False)
    report = env.check(tmp_path)  # a folder with no requirements.txt: a pip-installed lab
    assert report.pins_source == "lab/pins.txt"
    assert {"onnx", "onnxruntime", "numpy"} <= {c.name for c in report.checks if c.topic == "versions"}
    assert not [c for c in report.checks if c.name in env.CORE_PACKAGES and c.status != "ok"], report.table()
    assert env.pins_for(env.HOSTS["colab"], REPO / "requirements.txt")[0] == "lab/pins-colab.txt"


def test_the_colab_installer_names_each_package_imported_at_another_version():
    from types import SimpleNamespace

    from lab.tools import colab

    names = colab.requirement_names(colab.PINS.read_text(encoding="utf-8"))
    assert names[:4] == ["onnx", "onnxruntime", "numpy", "protobuf"] and set(env.parse_specifiers(
        colab.PINS.read_text(encoding="utf-8"))) == {env.normalize(n) for n in names}
    import numpy

    imported = {"numpy": SimpleNamespace(__version__="2.1.3"), "google.protobuf": SimpleNamespace(__version__="5.29.6")}
    changed = colab.stale(["numpy", "protobuf", "onnx"], imported)
    assert changed["numpy"] == ("2.1.3", numpy.__version__) and "onnx" not in changed
    assert colab.restart_line({"numpy": ("2.1.3", "2.4.6")}) == (
        "restart the runtime now (Runtime > Restart session), then run this cell again: numpy 2.1.3 -> 2.4.6 was "
        "already imported in this runtime")
    assert colab.stale(["numpy"]) == {}, "this kernel runs the numpy it has installed"
