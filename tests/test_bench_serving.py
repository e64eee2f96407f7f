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


def _synthetic_record(rng, p50_sys):
    """A record with one target group (4x6, three rates) and made-up cells: uncoded, Hedged(p95),
    a systematic scheme whose latencies have median `p50_sys` (s) and 10% approximate answers."""
    import numpy as np

    cells = {}
    for rate in (20, 50, 100):
        n = 200
        for name, med, frac in (("Uncoded+LB", 0.016, 0.0), ("Hedged(p95)", 0.017, 0.0),
                                ("LeTCC-sys(4,6)", p50_sys, 0.1)):
            lat = med * np.exp(rng.normal(0, 0.3, n))
            approx = rng.random(n) < frac
            correct = ~approx | (rng.random(n) < 0.5)
            cells[f"{name}@{rate}"] = dict(
                summary=dict(n=n, answered=n, throughput=rate, mse=0.0, rejected=0, timeouts=0, errors=0, hedges=0,
                             late_exact=0, cpu_us=0.0, loadavg=1.0),
                lat=[round(float(v), 7) for v in lat], correct=correct.astype(int).tolist(),
                approx=approx.astype(int).tolist(), worker=[-1 if a else 0 for a in approx])
    group = dict(part="target", workers="dedicated", size="4x6", K=4, N=6, delay="pareto", caps={"Uncoded+LB": 300.0},
                 rates=[20, 50, 100], cells=cells, loads=[[0.1, 200], [0.25, 200], [0.5, 200]], title="Pareto",
                 cap_rule=200.0, cap=200.0, n_min={"20": 200, "50": 200, "100": 200})
    return dict(groups={"target/4x6/pareto": group}, loadavg=[1.0, 2.0],
                args=dict(fallback="p99", hedge_after="p90", sys_batch_delay=0.002, sys_rounds=2))


@pytest.mark.skipif(not HAS_BENCH, reason="needs the source checkout's bench/")
def test_serving_report_after_fixes(tmp_path):
    """--report-only with serving_after_fixes.json.gz beside serving.json.gz: the old tables stay,
    and the re-run gets its own section, each target's new value beside the old cell's."""
    import numpy as np

    bench = tmp_path / "bench"
    bench.mkdir()
    for name in ("serving.py", "_report.py"):
        shutil.copy(REPO / "bench" / name, bench / name)
    out = tmp_path / "results"
    out.mkdir()
    rng = np.random.default_rng(0)
    for fname, p50 in (("serving.json.gz", 0.050), ("serving_after_fixes.json.gz", 0.017)):
        with gzip.open(out / fname, "wt") as f:
            json.dump(_synthetic_record(rng, p50), f)
    before = (out / "serving.json.gz").read_bytes()
    env = dict(os.environ)       # the letcc this interpreter imports (installed, or the caller's PYTHONPATH)
    notes = tmp_path / "after_notes.md"
    notes.write_text("THE AFTER NOTES\n")
    run = subprocess.run([sys.executable, str(bench / "serving.py"), "--report-only", "--out", str(out),
                          "--after-notes", str(notes)], capture_output=True, text=True, timeout=300, env=env)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    text = (out / "serving.md").read_text()
    assert "## Targets (Pareto, dedicated workers" in text          # the old record's tables are kept
    head, after = text.split("## After the fixes (systematic rounds race padded copies; censored percentile)")
    assert "| LeTCC-sys(4,6)" in head and "| LeTCC-sys(4,6)" in after
    assert "### Targets after the fixes, [before] in brackets" in after and "THE AFTER NOTES" in after
    row = next(line for line in after.splitlines() if "LeTCC-sys(4,6) | 0.10 |" in line)
    # the p50 target: new near uncoded's (met), the old one 3x (missed), both printed
    import re

    new, old = (float(v) for v in re.findall(r"\(([0-9.]+)x\)", row.split("|")[4]))
    assert new < 1.1 < 2 < old, row
    assert row.split("|")[-2].strip().startswith("met (was missed)"), row
    assert (out / "serving.json.gz").read_bytes() == before         # the report writes no record
