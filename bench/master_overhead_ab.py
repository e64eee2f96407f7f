"""Master-side overhead, interleaved A/B: this checkout against a baseline letcc (issue 29).

Runs the same measurements under two interpreters taking turns (A, B, A, B,
...: a busy minute on the shared machine hits both alike), each in a fresh
process, and writes one table with both sides and their ratios:

- the machinery round (letcc.bench.runtime_overhead.machinery_row): the local
  backend, LeTCC(N/2, N), N/4 virtual stragglers, 8-float inputs and a trivial
  model, N in {4, 16, 64}: round wall (median, p99) and CPU per round; and the
  same round at N = 16 with no straggler model (runtime_overhead.plain_row);
- idle CPU of 16 workers waiting for work (runtime_overhead.spin_row, no spin);
- CodedServer's master CPU per request (letcc.bench.serving_overhead.run_row,
  LeTCC(8, 16), full rounds of 4 and of 1 group, partial rounds of 1 request).

The measuring code is this checkout's (python/letcc/bench/, loaded by path in
both children), so both sides run the same benchmark and differ only in the
letcc they import. The baseline is an interpreter command that imports another
letcc, e.g. a venv with ``pip install .`` of the baseline commit::

    git worktree add /tmp/base acd9bab && python -m venv --system-site-packages /tmp/vb
    LETCC_CUDA=OFF /tmp/vb/bin/pip install --no-build-isolation --no-deps /tmp/base
    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python bench/master_overhead_ab.py \\
        --baseline "/tmp/vb/bin/python" --baseline-name acd9bab --runs 3

(where this interpreter has an editable install, which a --system-site-packages
venv would see first, run the baseline as ``env PYTHONPATH=<vb site-packages>:<system
site-packages> /tmp/vb/bin/python -S``). Results: bench/results/master_overhead-<machine>.md.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import shlex
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
BENCH_SRC = HERE.parent / "python" / "letcc" / "bench"
MACHINERY_N = (4, 16, 64)
SERVING_LOADS = ("full-B4", "full-B1", "partial-1")


def _load(name: str):
    """This checkout's bench module `name` (the baseline's installed letcc.bench
    may lack what is measured here), imported by its file name from
    python/letcc/bench put first on sys.path: the worker processes, which get
    this sys.path, unpickle its model factories from there."""
    sys.path.insert(0, str(BENCH_SRC))
    return importlib.import_module(name)


def child(what: str, rounds: int, requests: int, partial_requests: int) -> dict:
    import numpy as np

    import letcc
    out = {"letcc": str(Path(letcc.__file__).parent)}
    if what == "machinery":
        rt = _load("runtime_overhead")
        out["rows"] = [rt.machinery_row(N, rounds) for N in MACHINERY_N]
        out["plain"] = rt.plain_row(16, rounds)
        out["idle"] = rt.spin_row(16, 0, 100, rt.IDLE_S)["idle_pct"]
    else:
        so = _load("serving_overhead")
        X = np.random.default_rng(7).random((512,) + so.SHAPE, dtype=np.float32)
        make = dict(so.schemes(["letcc"]))["letcc"]
        out["rows"] = {}
        for load in SERVING_LOADS:
            n = requests if load.startswith("full") else partial_requests
            p = so.run_row(make, load, n, X, breakdown=False)["plain"]
            out["rows"][load] = dict(per_request=p["per_request"] * 1e6, per_round=p["per_round"] * 1e6,
                                     dispatcher=p["dispatcher_per_request"] * 1e6,
                                     callers=p["callers_per_request"] * 1e6)
    return out


def run_side(cmd: list[str], what: str, args) -> dict:
    argv = [*cmd, str(Path(__file__).resolve()), "--child", what, "--rounds", str(args.rounds),
            "--requests", str(args.requests), "--partial-requests", str(args.partial_requests)]
    res = subprocess.run(argv, capture_output=True, text=True, timeout=1800)
    if res.returncode:
        raise RuntimeError(f"{' '.join(argv)} failed ({res.returncode}):\n{res.stderr[-3000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def main(argv=None) -> Path | None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--baseline", help="interpreter command (shell words) importing the baseline letcc")
    ap.add_argument("--baseline-name", default="baseline", help="what to call it in the table (e.g. a commit)")
    ap.add_argument("--runs", type=int, default=3, help="A/B turns per measurement")
    ap.add_argument("--rounds", type=int, default=400, help="rounds per machinery row")
    ap.add_argument("--requests", type=int, default=2000, help="requests per full-round serving row")
    ap.add_argument("--partial-requests", type=int, default=300, help="requests per partial-round serving row")
    ap.add_argument("--out", type=Path, default=HERE / "results")
    ap.add_argument("--child", choices=("machinery", "serving"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.rounds, args.requests, args.partial_requests)))
        return None
    if not args.baseline:
        ap.error("--baseline is required")
    sides = {"this": [sys.executable], args.baseline_name: shlex.split(args.baseline)}
    got: dict = {name: {"machinery": [], "serving": []} for name in sides}
    t0 = time.perf_counter()
    for run in range(args.runs):
        for what in ("machinery", "serving"):
            order = list(sides) if run % 2 == 0 else list(sides)[::-1]
            for name in order:
                res = run_side(sides[name], what, args)
                got[name][what].append(res)
                print(f"run {run + 1}/{args.runs} {what:9s} {name:10s} ({res['letcc']}) done "
                      f"[{time.perf_counter() - t0:.0f} s]", flush=True)
    return write(got, sides, args)


def _median(xs):
    import numpy as np
    return float(np.median(xs))


def write(got, sides, args) -> Path:
    from letcc.bench._report import machine_kind, markdown_table, write_report

    this, base = list(sides)
    rows = []
    for i, N in enumerate(MACHINERY_N):
        for col, label in (("median", "round wall median (ms)"), ("p99", "round wall p99 (ms)"),
                           ("cpu_master", "master CPU per round (ms)"), ("cpu_workers", "workers' CPU per round (ms)")):
            a = _median([r["rows"][i][col] for r in got[this]["machinery"]])
            b = _median([r["rows"][i][col] for r in got[base]["machinery"]])
            rows.append([f"machinery N = {N}", label, f"{b:.3f}", f"{a:.3f}", f"{b / a:.2f}x" if a else "-"])
    for col, label in (("median", "round wall median (ms)"), ("p99", "round wall p99 (ms)"),
                       ("cpu_master", "master CPU per round (ms)")):
        a = _median([r["plain"][col] for r in got[this]["machinery"]])
        b = _median([r["plain"][col] for r in got[base]["machinery"]])
        rows.append(["no stragglers N = 16", label, f"{b:.3f}", f"{a:.3f}", f"{b / a:.2f}x" if a else "-"])
    a = _median([r["idle"] for r in got[this]["machinery"]])
    b = _median([r["idle"] for r in got[base]["machinery"]])
    rows.append(["16 idle workers", "CPU (% of one core)", f"{b:.2f}%", f"{a:.2f}%", "-"])
    for load in SERVING_LOADS:
        for col, label in (("per_request", "master CPU per request (us)"), ("per_round", "master CPU per round (us)"),
                           ("dispatcher", "of which the dispatcher (us/req)"),
                           ("callers", "of which the callers (us/req)")):
            a = _median([r["rows"][load][col] for r in got[this]["serving"]])
            b = _median([r["rows"][load][col] for r in got[base]["serving"]])
            rows.append([f"serving {load}", label, f"{b:.1f}", f"{a:.1f}", f"{b / a:.2f}x" if a else "-"])
    table = markdown_table(["measurement", "quantity", base, "this checkout", f"{base} / this"], rows,
                           align="llrrr")
    runs = []
    for name in sides:
        for what in ("machinery", "serving"):
            for k, r in enumerate(got[name][what]):
                if what == "machinery":
                    vals = ", ".join(f"N={N}: {row['median']:.3f}/{row['p99']:.3f} ms" for N, row in
                                     zip(MACHINERY_N, r["rows"]))
                    vals += f", no stragglers N=16: {r['plain']['median']:.3f}/{r['plain']['p99']:.3f} ms"
                else:
                    vals = ", ".join(f"{load}: {row['per_request']:.1f} us/req" for load, row in r["rows"].items())
                runs.append(f"- {name}, {what}, run {k + 1}: {vals}")
    sections = [
        f"Interleaved A/B, {args.runs} turns (A, B, then B, A, ...), each side in a fresh process; the table "
        f"gives the median over the turns. `{base}`: `{' '.join(sides[base])}`; `this checkout`: "
        f"`{sys.executable}`. Both run this checkout's benchmark code (python/letcc/bench, loaded by path).",
        "Machinery rows: the local backend, LeTCC(N/2, N), N/4 virtual stragglers (FixedCount), 8-float inputs "
        f"and a trivial model, {args.rounds} rounds after 20 warm-up; master CPU from process_time, workers' from "
        "/proc (10 ms ticks). 'No stragglers': LeTCC(8, 16) with no straggler model, every worker sent the round "
        "and all 16 answers awaited (one answering set, its decoder cached: nothing simulated). Serving rows: "
        f"CodedServer, LeTCC(8, 16), a 784 -> 10 linear model, {args.requests} requests per full row (4 callers x "
        f"64 out; B4: up to 4 groups of K per round, B1: one), {args.partial_requests} per partial row (one "
        "caller, one request out: each round carries 1 request padded to K, leaving 2 ms after it).",
        "## Side by side", table,
        "## Every turn (median / p99 round wall; master CPU per request)", "\n".join(runs),
    ]
    name = f"master_overhead-{machine_kind()}"
    return write_report(name, "Master-side overhead, interleaved A/B (issue 29)", sections, out_dir=args.out)


if __name__ == "__main__":
    main()
