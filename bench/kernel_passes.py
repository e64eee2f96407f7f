"""Where the banded plan kernel's time goes (issue 2's "record what you reach
and what limits it"), for float32 input at n = K (default 64) and m = 150528.

Compiles ``bench/kernel_passes.cpp`` with the repository's ``csrc/`` (the
AVX2 kernel and the dispatcher, exactly as the extension builds them, without
Python around them) and runs it: the three passes on tiles that stay in
cache, the whole plan on m columns on one and two threads, and the same walk
with the input or the output kept in cache (see the .cpp for each
measurement), and the evaluation pass taken apart in the same walk. Beside
it, in the same run: letcc's ``plan(y, out=buf)`` from
Python and numpy's ``np.copyto`` of the same bytes (the issue's floor).

Times are per *knot-vector*: one knot row of one 4-column vector, the unit the
kernel's float64 arithmetic works in (float32 rows are widened 4 at a time).
The arithmetic floor is 14 floating-point operations per knot-vector at K = n
(forward 5, back 3, evaluation 6), two per cycle on this core's two FMA
pipes. Run with

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python bench/kernel_passes.py

It prints the tables and writes bench/results/kernel_passes.md. Needs a C++17
compiler (``$CXX`` or ``c++``) and an x86-64 CPU with AVX2 and FMA. Not a test.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import best_call, markdown_table, write_report  # noqa: E402

import letcc  # noqa: E402

HERE = Path(__file__).resolve().parent
FLOPS_PER_KNOT_VECTOR = {"forward": 5, "back": 3, "evaluation": 6}  # at K = n


def build(csrc: Path, out_dir: Path) -> Path:
    """Compile kernel_passes.cpp with csrc/dispatch.cpp, as CMakeLists.txt compiles the kernels."""
    cxx = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")
    if not cxx:
        raise SystemExit("kernel_passes: no C++ compiler found (set CXX)")
    exe = out_dir / "kernel_passes"
    cmd = [cxx, "-O3", "-fno-math-errno", "-std=c++17", "-pthread", f"-I{csrc}",
           str(HERE / "kernel_passes.cpp"), str(csrc / "dispatch.cpp"), "-o", str(exe)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"kernel_passes: compiling failed ({' '.join(cmd)}):\n{done.stderr[-3000:]}")
    return exe


def run_harness(exe: Path, n: int, m: int, rounds: int) -> dict:
    done = subprocess.run([str(exe), str(n), str(m), str(rounds)], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"kernel_passes: the harness failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout)


def python_side(n: int, m: int, rounds: int) -> dict:
    """letcc's out= call and numpy's copy of the same bytes, from Python, same plan as the harness:
    per round five calls of each back to back, each call timed alone; the best call is kept."""
    x = np.sort(np.cos(np.arange(n) * np.pi / (n - 1)))
    at = np.sort(np.cos((2 * np.arange(1, n + 1) - 1) * np.pi / (2 * n)))
    plan = letcc.SplineSmoother(x, at, lam=1e-3)
    y = np.random.default_rng(1).standard_normal((n, m)).astype(np.float32)
    out = np.empty_like(y)
    dst = np.empty_like(y)
    calls = {"plan_out": lambda: plan(y, out=out), "copyto": lambda: np.copyto(dst, y)}
    best = dict.fromkeys(calls, float("inf"))
    for _ in range(rounds):
        for name, fn in calls.items():
            best[name] = min(best[name], best_call(fn, 5))
    return best


def report(h: dict, py: dict) -> list[str]:
    n, m, ghz = h["n"], h["m"], h["clock_ghz"]
    kv_cache = n * h["cache_columns"] / 4
    kv_full = n * m / 4
    fwd = h["cache_forward_s"] / kv_cache * 1e9
    back = (h["cache_forward_back_s"] - h["cache_forward_s"]) / kv_cache * 1e9
    ev = (h["cache_tile_s"] - h["cache_forward_back_s"]) / kv_cache * 1e9
    tile = h["cache_tile_s"] / kv_cache * 1e9
    rows = []
    for name, ns in (("forward", fwd), ("back", back), ("evaluation", ev)):
        ops = FLOPS_PER_KNOT_VECTOR[name]
        rows.append([name, f"{ns:.2f}", f"{ns * ghz:.1f}", ops, f"{ops / 2:.1f}", f"{ns * ghz / (ops / 2):.2f}"])
    ops = sum(FLOPS_PER_KNOT_VECTOR.values())
    rows.append(["whole tile", f"{tile:.2f}", f"{tile * ghz:.1f}", ops, f"{ops / 2:.1f}",
                 f"{tile * ghz / (ops / 2):.2f}"])
    passes = markdown_table(["pass (in cache, 1 thread)", "ns / knot-vector", "cycles", "FP ops", "FMA-bound cycles",
                             "cycles / bound"], rows)

    fb = h["cache_forward_back_s"]
    parts = [("the kernel's evaluation (all of it)", h["cache_tile_s"]),
             ("its arithmetic only (operands in registers)", h["cache_eval_arith_s"]),
             ("its arithmetic, converted to float32 and stored", h["cache_eval_arith_store_s"]),
             ("its loads (input widened to float64) and store, no arithmetic", h["cache_eval_loads_store_s"])]
    ev_bound = FLOPS_PER_KNOT_VECTOR["evaluation"] / 2
    part_ns = {label: (seconds - fb) / kv_cache * 1e9 for label, seconds in parts}
    eval_parts = markdown_table(
        ["evaluation pass (in cache, 1 thread)", "ns / query-vector", "cycles", "cycles / FMA bound"],
        [[label, f"{ns:.2f}", f"{ns * ghz:.1f}", f"{ns * ghz / ev_bound:.2f}"] for label, ns in part_ns.items()])
    ns_all, ns_arith, ns_store, ns_loads = part_ns.values()

    def line(label, seconds, threads):
        ns = seconds * threads / kv_full * 1e9
        return [label, f"{seconds * 1e3:.2f}", threads, f"{ns:.2f}", f"{ns / tile:.2f}",
                f"{seconds / py['copyto']:.2f}"]

    full = markdown_table(
        ["full size (m = %d)" % m, "ms", "threads", "ns / knot-vector / thread", "vs in cache", "vs copyto floor"],
        [line("input from memory, output streamed (the real case)", h["full_1t_s"], 1),
         line("input kept in cache, output streamed", h["in_cached_1t_s"], 1),
         line("input from memory, output kept in cache", h["out_cached_1t_s"], 1),
         line("the real case", h["full_2t_s"], 2),
         line("letcc plan(y, out=buf) from Python", py["plan_out"], 2),
         ["numpy np.copyto of the same bytes (the floor)", f"{py['copyto'] * 1e3:.2f}", 1, "-", "-", "1.00"]])
    in_cost = h["full_1t_s"] - h["in_cached_1t_s"]
    out_cost = h["full_1t_s"] - h["out_cached_1t_s"]
    summary = "\n".join([
        "## What limits it",
        "",
        f"- In cache the kernel runs at {tile:.2f} ns per knot-vector ({tile * ghz:.1f} cycles at "
        f"{ghz:.2f} GHz) against {ops / 2:.0f} cycles for its {ops} FMAs on two pipes: "
        f"{tile * ghz / (ops / 2):.2f}x the arithmetic floor.",
        f"- At full size one thread spends {h['full_1t_s'] / kv_full * 1e9:.2f} ns per knot-vector: "
        f"{h['full_1t_s'] / h['cache_tile_s'] * kv_cache / kv_full:.2f}x the in-cache rate. Reading the "
        f"input from memory costs {in_cost * 1e3:.2f} ms of the {h['full_1t_s'] * 1e3:.2f} ms (the input "
        f"kept in cache instead), writing the output {out_cost * 1e3:.2f} ms.",
        f"- Two threads take {h['full_2t_s'] * 1e3:.2f} ms, {h['full_1t_s'] / h['full_2t_s']:.2f}x faster "
        f"than one. From Python the call takes {py['plan_out'] * 1e3:.2f} ms, "
        f"{py['plan_out'] / py['copyto']:.2f}x numpy's single-threaded copy of the same bytes "
        f"({py['copyto'] * 1e3:.2f} ms).",
        f"- The evaluation is the pass furthest from its floor: {ns_all * ghz:.1f} cycles per query-vector "
        f"for {ev_bound:.0f} cycles of FMAs. Its arithmetic alone runs at {ns_arith * ghz / ev_bound:.2f}x "
        f"that bound; converting the result to float32 and storing it adds {(ns_store - ns_arith) * ghz:.1f} "
        f"cycles per vector; its loads and store alone take {ns_loads * ghz:.1f} cycles. Together they "
        f"take more than either part alone: the two overlap only in part.",
    ])
    return [passes, eval_parts, full, summary]


NOTES = """The AVX2 plan kernel on float32 input, one plan: n Chebyshev knots, K = n query points, lam = 1e-3
(bench/spline.py's case). The passes and the full-size walks come from the C++ harness
`bench/kernel_passes.cpp` (compiled with csrc/, best of interleaved rounds); the Python rows from the
installed letcc in the same run (rounds of five back-to-back calls of each, every call timed alone as
the harness times them, the best kept; bench/spline.py keeps the best average over runs of at least
20 ms, a little higher). A *knot-vector* is one knot row of one
4-column vector (the kernel widens float32 to float64, 4 lanes per AVX2 register). FP ops: floating-point
operations per knot-vector (forward 5: Q^T y and the forward substitution; back 3; evaluation 6 per
query, K = n queries); FMA-bound cycles: those ops on two FMA pipes. The back pass's in-cache time is
(forward + back) minus forward, the evaluation's the whole tile minus (forward + back): differences of
two timings, so they carry the error of both (a pass shown under its FMA bound is such an error; the
whole tile is measured directly). "vs in cache": the full-size time per knot-vector and thread over
the in-cache whole tile. The evaluation pass taken apart: the same in-cache walk with every query's
loop replaced by one part of its work (see EvalPart in the .cpp), minus (forward + back); a
*query-vector* is one query row of one 4-column vector, and at K = n there is one per knot-vector."""


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=64, help="knots (and query points)")
    ap.add_argument("--m", type=int, default=150528, help="columns")
    ap.add_argument("--rounds", type=int, default=30, help="interleaved rounds in the harness (best is kept)")
    ap.add_argument("--repeats", type=int, default=10, help="Python rounds of 5 + 5 timed calls (best is kept)")
    ap.add_argument("--csrc", type=Path, default=HERE.parent / "csrc", help="the C++ sources (csrc/)")
    ap.add_argument("--name", default="kernel_passes", help="results file bench/results/<name>.md")
    args = ap.parse_args(argv)
    if not (args.csrc / "dispatch.cpp").exists():
        raise SystemExit(f"kernel_passes: {args.csrc} has no dispatch.cpp (pass --csrc)")
    with tempfile.TemporaryDirectory() as tmp:
        exe = build(args.csrc, Path(tmp))
        h = run_harness(exe, args.n, args.m, args.rounds)
    if not h.get("avx2"):
        raise SystemExit("kernel_passes: this CPU has no AVX2+FMA, so letcc runs its generic kernel; "
                         "this benchmark measures the AVX2 one")
    py = python_side(args.n, args.m, args.repeats)
    sections = report(h, py)
    for s in sections:
        print(s, "\n")
    extra = [("harness", f"n = K = {h['n']}, m = {h['m']}, tile width {h['tile_width']}, "
                         f"clock {h['clock_ghz']:.2f} GHz (dependent integer adds)")]
    write_report(args.name, "Where the plan kernel's time goes (float32, AVX2)", sections, notes=NOTES,
                 extra_info=extra)


if __name__ == "__main__":
    main()
