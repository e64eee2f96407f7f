"""bench/serving.py --quick end to end on a tiny size (from a copy of bench/, so the
repository's results are not overwritten): the dedicated-worker emulation (LeNet-5
outputs looked up, coded blends run for real), the systematic scheme with its
approximate answers, SLO goodput, the targets table, and --report-only from the
raw record."""
import gzip
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
HAS_BENCH = (REPO / "bench" / "serving.py").exists()


def _lenet5_cached() -> bool:
    try:
        from letcc.experiments.factory import make_factory

        make_factory("lenet5", progress=False)
        return True
    except Exception:
        return False


@pytest.mark.skipif(not HAS_BENCH, reason="needs the source checkout's bench/")
@pytest.mark.skipif(not _lenet5_cached(), reason="needs LeNet-5's weights (trained offline, cached)")
def test_serving_bench_quick(tmp_path):
    bench = tmp_path / "bench"
    bench.mkdir()
    for name in ("serving.py", "_report.py"):
        shutil.copy(REPO / "bench" / name, bench / name)
    out = tmp_path / "results"
    env = dict(os.environ)       # the letcc this interpreter imports (installed, or the caller's PYTHONPATH)
    cmd = [sys.executable, str(bench / "serving.py"), "--quick", "--plan", "target",
           "--schemes", "LeTCC-sys,Hedged(p95)", "--out", str(out)]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    text = (out / "serving.md").read_text()
    for row in ("## Method: the dedicated-worker emulation", "| Uncoded+LB", "| Hedged(p95)", "| LeTCC-sys(4,6)",
                "goodput @ D=p99u", "## Targets (Pareto, dedicated workers", "samples beyond p99 / p99.9"):
        assert row in text, row
    with gzip.open(out / "serving.json.gz", "rt") as f:
        db = json.load(f)
    (g,) = db["groups"].values()
    cells = g["cells"]
    assert {k.rsplit("@", 1)[0] for k in cells} == {"Uncoded+LB", "Hedged(p95)", "LeTCC-sys(4,6)",
                                                    "LeTCC-sys(4,6)+hedge"}
    for name, c in cells.items():
        answered = [v for v in c["lat"] if v is not None]
        assert len(answered) == c["summary"]["answered"] > 0, name
        if not name.startswith("LeTCC"):
            assert not any(c["approx"]) and all(c["correct"][i] for i, v in enumerate(c["lat"]) if v is not None)
        else:   # an exact answer is one systematic worker's, an approximate one nobody's
            assert all((w >= 0) == (not a) for w, a, v in zip(c["worker"], c["approx"], c["lat"]) if v is not None)
    assert (out / "serving.png").exists()
    (out / "serving.md").unlink()
    run = subprocess.run(cmd + ["--report-only"], capture_output=True, text=True, timeout=300, env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "| LeTCC-sys(4,6)" in (out / "serving.md").read_text()
