"""bench/kernel_passes.py end to end on a small size: it compiles the C++
harness against the repository's csrc/, runs it, and writes its report (from
a copy of bench/, so the repository's results are not overwritten)."""
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import letcc

REPO = Path(__file__).resolve().parents[1]
HAS_SOURCES = (REPO / "bench" / "kernel_passes.cpp").exists() and (REPO / "csrc" / "dispatch.cpp").exists()
HAS_CXX = any(shutil.which(c) for c in ("c++", "g++"))


def copy_bench(tmp_path):
    bench = tmp_path / "bench"
    bench.mkdir()
    for name in ("kernel_passes.py", "kernel_passes.cpp", "_report.py"):
        shutil.copy(REPO / "bench" / name, bench / name)
    return bench


HAS_AVX2 = letcc.plan_kernel_runs("avx2")
KERNELS = ["avx2"] + (["avx512"] if letcc.plan_kernel_runs("avx512") else [])


@pytest.mark.skipif(not HAS_SOURCES, reason="needs the source checkout's bench/ and csrc/")
@pytest.mark.skipif(not HAS_CXX, reason="needs a C++ compiler")
@pytest.mark.skipif(not HAS_AVX2, reason="measures the hand-written kernels, which this CPU does not run")
def test_kernel_passes_writes_its_report(tmp_path):
    bench = copy_bench(tmp_path)
    run = subprocess.run(
        [sys.executable, str(bench / "kernel_passes.py"), "--n", "16", "--m", "2048", "--rounds", "2",
         "--repeats", "2", "--csrc", str(REPO / "csrc"), "--name", "kp_test"],
        capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    text = (bench / "results" / "kp_test.md").read_text()
    for row in ("| forward", "| back", "| evaluation", "| whole tile", "the real case", "input kept in cache",
                "output kept in cache", "np.copyto", "## What limits it", "n = K = 16, m = 2048",
                "| its arithmetic only", "| its arithmetic, converted to float32 and stored",
                "| its loads (input widened to float64", "the evaluation is the pass furthest",
                "- cpu: ", "plan kernel "):
        assert row in text, row
    for kernel in KERNELS:
        assert f"### {kernel} kernel" in text and f"- **{kernel}**: in cache" in text, kernel
    if len(KERNELS) == 2:
        assert "Side by side (avx512 over avx2)" in text
    # every timing in the full-size table is a positive number of milliseconds, four walks and the
    # Python call per kernel
    full = [line for line in text.splitlines()
            if line.split("|")[1:2] and line.split("|")[1].strip() in KERNELS]
    # (+2: the AVX-512 kernel's walk before its wide-register loops and its walk with the float64
    # evaluation, beside it)
    wide = 1 if "avx512" in KERNELS else 0
    assert len(full) == 5 * len(KERNELS) + 2 * wide
    if wide:
        assert "| whole tile, the walk before its wide-register loops" in text
        assert "the real case, the walk before its wide-register loops" in text
        assert "| whole tile, float64 evaluation (the walk before the float32 one)" in text
        assert "the real case, float64 evaluation (the walk before the float32 one)" in text
    # the FMA bound from the pipes the harness measured, and a clock no core runs at is not reported
    assert "independent float64 FMAs per cycle" in text
    ghz = float(text.split("clock ")[1].split(" GHz")[0])
    assert 0.5 < ghz < 7.0, ghz
    if wide:
        assert "with 512-bit FMAs running the core clocks at" in text
    assert all(float(line.split("|")[3]) > 0 for line in full)
    # the evaluation's parts: four rows of positive times per kernel (differences of two timings, so only
    # on a size big enough for them to beat the timer's noise would they be ordered)
    parts = [line for line in text.splitlines() if line.startswith("| its ") or line.startswith("| the kernel's eval")]
    assert len(parts) == 4 * len(KERNELS)
    assert all(float(line.split("|")[2]) > 0 for line in parts)


def test_default_results_file_names_the_machine_kind(tmp_path):
    from letcc.bench import _report     # the helpers' one home (bench/_report.py re-exports them)

    kind = _report.machine_kind()
    assert kind.startswith(letcc.plan_kernel() + "-")
    assert kind == kind.lower() and " " not in kind and "/" not in kind


@pytest.mark.skipif(not HAS_SOURCES, reason="needs the source checkout's bench/")
def test_kernel_passes_without_sources_fails_clearly(tmp_path):
    bench = copy_bench(tmp_path)
    run = subprocess.run([sys.executable, str(bench / "kernel_passes.py"), "--csrc", str(tmp_path / "nowhere")],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode != 0
    assert "nowhere" in run.stderr and "dispatch.cpp" in run.stderr
