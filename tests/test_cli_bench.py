"""`letcc bench` end to end: runs a real benchmark script from a copy of
bench/ (so the repository's results are not overwritten) and that copy's
results file appears with its table."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO_BENCH = Path(__file__).resolve().parents[1] / "bench"


@pytest.mark.skipif(not (REPO_BENCH / "spline.py").exists(), reason="needs the source checkout's bench/")
def test_letcc_bench_runs_the_spline_benchmark(tmp_path):
    bench = tmp_path / "bench"
    bench.mkdir()
    for name in ("spline.py", "_report.py", "runtime_overhead.py"):
        shutil.copy(REPO_BENCH / name, bench / name)
    env = dict(os.environ, PYTHONPATH=str(bench))
    listed = subprocess.run([sys.executable, "-m", "letcc.cli", "bench", "--list", "--bench-dir", str(bench)],
                            capture_output=True, text=True, env=env, timeout=120)
    assert listed.returncode == 0, listed.stderr
    assert "spline" in listed.stdout and "runtime" in listed.stdout
    run = subprocess.run(
        [sys.executable, "-m", "letcc.cli", "bench", "spline", "--bench-dir", str(bench), "--no-progress",
         "--bench-args", "--ns", "16", "--ms", "1", "100", "--repeats", "2", "--min-run", "0.001",
         "--ratio-samples", "2", "--ratio-pause", "0", "--name", "spline_cli_test"],
        capture_output=True, text=True, env=env, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    report = bench / "results" / "spline_cli_test.md"
    assert report.exists()
    text = report.read_text()
    assert "| 16 |" in text and "float32" in text and "float64" in text
    assert "## The target case over time" in text and "paired over time (2 samples" in text


def test_letcc_bench_without_a_bench_folder_fails_clearly(tmp_path):
    run = subprocess.run([sys.executable, "-m", "letcc.cli", "bench", "--bench-dir", str(tmp_path / "nope")],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode != 0
    assert "nope" in run.stderr
