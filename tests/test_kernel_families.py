"""The two INT8 kernel families run for real, whatever this machine's CPU: the probe tells them apart.

Under ``qemu-x86_64-static -cpu Haswell`` (AVX2, no VNNI) ORT's U8S8 kernels saturate: the probe gives
4096. Under ``qemu-aarch64-static`` (ORT's aarch64 wheel, dot-product kernels) it gives the exact 8128.
Skipped when qemu or the aarch64 sysroot cannot be set up, except in CI (CI=true), where that is a
failure: .ci/run installs qemu-user-static and adds the arm64 architecture.
"""
from __future__ import annotations

import subprocess
import sys

import kernel_families as kf
import numpy as np
import pytest


@pytest.fixture(scope="module")
def probe(tmp_path_factory):
    """The probe model and an input batch of ones (3 rows, so batching is exercised too)."""
    folder = tmp_path_factory.mktemp("probe")
    model = kf.write_probe_model(folder / "probe.onnx")
    inputs = folder / "ones.npz"
    np.savez(inputs, x=np.ones((3, kf.PROBE_K), np.float32))
    return model, inputs


def probe_answer(prefix: list[str], probe, out) -> np.ndarray:
    model, inputs = probe
    kf.run(prefix, kf.RUN_MODELS, out, inputs, model, timeout=300)
    with np.load(out) as saved:
        assert saved.files == ["probe"]
        return saved["probe"]


# --- fast: the runner and the probe on this machine's own CPU ----------------------------------------

def test_native_probe_is_one_of_the_two_answers(probe, tmp_path):
    """Natively the answer depends on the CPU (8128 with VNNI, 4096 on AVX2 alone); never anything else."""
    answer = probe_answer([sys.executable], probe, tmp_path / "out.npz")
    assert answer.shape == (3, 1)
    assert len(set(answer.ravel().tolist())) == 1
    assert kf.probe_family(float(answer[0, 0])) in {"exact", "saturating"}


def test_probe_family_names_the_answers():
    assert kf.probe_family(8128.0) == "exact"
    assert kf.probe_family(4096.0) == "saturating"
    with pytest.raises(ValueError, match="neither"):
        kf.probe_family(4112.0)


def test_run_reports_stderr_and_exit_status(tmp_path):
    script = tmp_path / "boom.py"
    script.write_text("import sys\nprint('to stdout')\nsys.exit('the reason it failed')\n")
    with pytest.raises(kf.FamilyRunError, match=r"(?s)failed \(exit 1\).*the reason it failed.*to stdout"):
        kf.run([sys.executable], script)


def test_run_kills_a_script_that_overruns(tmp_path):
    script = tmp_path / "sleepy.py"
    script.write_text("import time\ntime.sleep(60)\n")
    with pytest.raises(kf.FamilyRunError, match="timed out after 2 s"):
        kf.run([sys.executable], script, timeout=2)


def test_run_models_names_a_wrong_input(probe, tmp_path):
    model, _ = probe
    bad = tmp_path / "bad.npz"
    np.savez(bad, pixels=np.ones((1, kf.PROBE_K), np.float32))
    with pytest.raises(kf.FamilyRunError, match="no array 'x'"):
        kf.run([sys.executable], kf.RUN_MODELS, tmp_path / "out.npz", bad, model)


def test_aarch64_wrapper_has_no_machine_paths():
    """The wrapper finds its sysroot relative to itself, so the cache folder can move."""
    text = kf._wrapper_text()
    assert str(kf.REPO_ROOT) not in text and str(kf.DEFAULT_AARCH64_CACHE) not in text
    subprocess.run(["sh", "-n"], input=text, text=True, check=True)


# --- slow: the two families under qemu -----------------------------------------------------------------

@pytest.mark.slow
def test_haswell_saturates(probe, tmp_path):
    """AVX2 without VNNI: vpmaddubsw's int16 pair sums clip, 32 x 32767 / 255 -> 4096."""
    prefix = kf.family_prefix(kf.require_haswell)
    answer = probe_answer(prefix, probe, tmp_path / "haswell.npz")
    assert answer.ravel().tolist() == [kf.PROBE_SATURATING] * 3


@pytest.mark.slow
def test_aarch64_is_exact(probe, tmp_path):
    """ARM64 dot-product kernels accumulate in int32: 64 x 255 x 127 / 255 = 8128."""
    prefix = kf.family_prefix(kf.require_aarch64, kf.DEFAULT_AARCH64_CACHE)
    done = kf.run(prefix, "-c", "import platform, onnxruntime; print(platform.machine(), onnxruntime.__version__)")
    assert done.stdout.split() == ["aarch64", kf.ORT_VERSION]
    answer = probe_answer(prefix, probe, tmp_path / "aarch64.npz")
    assert answer.ravel().tolist() == [kf.PROBE_EXACT] * 3
