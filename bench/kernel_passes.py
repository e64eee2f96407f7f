"""Where the banded plan kernel's time goes (issue 2's "record what you reach
and what limits it"), for float32 input at n = K (default 64) and m = 150528.

Compiles ``bench/kernel_passes.cpp`` with the repository's ``csrc/`` (the
AVX2 and AVX-512 kernels and the dispatcher, exactly as the extension builds them, without
Python around them) and runs it: the three passes on tiles that stay in
cache, the whole plan on m columns on one and two threads, and the same walk
with the input or the output kept in cache (see the .cpp for each
measurement), and the evaluation pass taken apart in the same walk. Beside
it, in the same run: letcc's ``plan(y, out=buf)`` from
Python and numpy's ``np.copyto`` of the same bytes (the issue's floor). Both
hand-written kernels this CPU runs are measured side by side, interleaved.

Times are per *knot-vector*: one knot row of one 4-column vector, the unit the
AVX2 kernel's float64 arithmetic works in (float32 rows are widened 4 at a
time; the AVX-512 kernel works on two such vectors at once). The arithmetic
floor is 14 floating-point operations per knot-vector at K = n (forward 5,
back 3, evaluation 6), on the FMA pipes the harness measures (independent
FMAs per cycle of each width): AMD Zen 4 has two 256-bit pipes and runs a
512-bit FMA as two halves on them, so both kernels have the same floor there;
an AVX-512 Xeon has two 512-bit pipes, so the AVX-512 kernel's floor is half
the AVX2 kernel's. Run with

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python bench/kernel_passes.py

It prints the tables and writes bench/results/kernel_passes-<machine kind>.md
(the CPU model and the widest kernel it runs, e.g. kernel_passes-avx512-amd-epyc.md;
bench/results/kernel_passes.md is the AVX2-only AMD EPYC of earlier sessions). Needs a C++17
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
from _report import best_call, machine_kind, markdown_table, write_report  # noqa: E402

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


def run_harness(exe: Path, n: int, m: int, rounds: int, kernels: str) -> dict:
    done = subprocess.run([str(exe), str(n), str(m), str(rounds), kernels], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"kernel_passes: the harness failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout)


def python_side(n: int, m: int, rounds: int, kernels: list[str]) -> dict:
    """letcc's out= call with each kernel and numpy's copy of the same bytes, from Python, same plan as
    the harness: per round five calls of each back to back, each call timed alone; the best call is kept."""
    x = np.sort(np.cos(np.arange(n) * np.pi / (n - 1)))
    at = np.sort(np.cos((2 * np.arange(1, n + 1) - 1) * np.pi / (2 * n)))
    plan = letcc.SplineSmoother(x, at, lam=1e-3)
    y = np.random.default_rng(1).standard_normal((n, m)).astype(np.float32)
    out = np.empty_like(y)
    dst = np.empty_like(y)

    def with_kernel(k):
        def call():
            plan(y, out=out)
        return lambda: (letcc.set_plan_kernel(k), best_call(call, 5))[1]

    calls = {f"plan_out_{k}": with_kernel(k) for k in kernels}
    calls["copyto"] = lambda: best_call(lambda: np.copyto(dst, y), 5)
    best = dict.fromkeys(calls, float("inf"))
    try:
        for _ in range(rounds):
            for name, fn in calls.items():
                best[name] = min(best[name], fn())
    finally:
        letcc.set_plan_kernel("auto")
    return best


def fma_pipes(h: dict, kernel: str) -> tuple[int, int]:
    """A kernel's columns per FMA (float64 lanes) and the core's FMA pipes of that width, the harness's
    measured FMAs per cycle rounded (at least 1): AVX2 4 lanes, AVX-512 8."""
    lanes = 8 if kernel == "avx512" else 4
    return lanes, max(1, round(h[f"fma{lanes * 64}_per_cycle"]))


def kernel_sections(kernel: str, h: dict, k: dict, py: dict) -> tuple[list[str], list[list[object]], list[str]]:
    """One kernel's tables (passes in cache, the evaluation taken apart), its full-size rows and its
    summary lines."""
    n, m, ghz = h["n"], h["m"], h["clock_ghz"]
    lanes, pipes = fma_pipes(h, kernel)
    per_cycle = pipes * lanes / 4  # knot-vectors' worth of FMAs per cycle
    kv_cache = n * h["cache_columns"] / 4
    kv_full = n * m / 4
    fwd = k["cache_forward_s"] / kv_cache * 1e9
    back = (k["cache_forward_back_s"] - k["cache_forward_s"]) / kv_cache * 1e9
    ev = (k["cache_tile_s"] - k["cache_forward_back_s"]) / kv_cache * 1e9
    tile = k["cache_tile_s"] / kv_cache * 1e9
    rows = []
    for name, ns in (("forward", fwd), ("back", back), ("evaluation", ev)):
        ops = FLOPS_PER_KNOT_VECTOR[name]
        rows.append([name, f"{ns:.2f}", f"{ns * ghz:.1f}", ops, f"{ops / per_cycle:.2f}",
                     f"{ns * ghz / (ops / per_cycle):.2f}"])
    ops = sum(FLOPS_PER_KNOT_VECTOR.values())
    bound = ops / per_cycle
    rows.append(["whole tile", f"{tile:.2f}", f"{tile * ghz:.1f}", ops, f"{bound:.2f}", f"{tile * ghz / bound:.2f}"])
    unfused = k.get("cache_tile_unfused_s")
    if unfused:
        ns = unfused / kv_cache * 1e9
        rows.append(["whole tile, the walk before its wide-register loops", f"{ns:.2f}", f"{ns * ghz:.1f}", ops,
                     f"{bound:.2f}", f"{ns * ghz / bound:.2f}"])
    f64eval = k.get("cache_tile_f64eval_s")
    if f64eval:
        ns = f64eval / kv_cache * 1e9
        rows.append(["whole tile, float64 evaluation (the walk before the float32 one)", f"{ns:.2f}",
                     f"{ns * ghz:.1f}", ops, f"{bound:.2f}", f"{ns * ghz / bound:.2f}"])
    passes = f"### {kernel} kernel\n\n" + markdown_table(
        [f"pass ({kernel}, in cache, 1 thread)", "ns / knot-vector", "cycles", "FP ops", "FMA-bound cycles",
         "cycles / bound"], rows)

    fb = k["cache_forward_back_s"]
    parts = [("the kernel's evaluation (all of it)", k["cache_tile_s"]),
             ("its arithmetic only (operands in registers)", k["cache_eval_arith_s"]),
             ("its arithmetic, converted to float32 and stored", k["cache_eval_arith_store_s"]),
             ("its loads (input widened to float64, or float32 as it is in the float32 evaluation) and store, "
              "no arithmetic", k["cache_eval_loads_store_s"])]
    ev_bound = FLOPS_PER_KNOT_VECTOR["evaluation"] / per_cycle
    part_ns = {label: (seconds - fb) / kv_cache * 1e9 for label, seconds in parts}
    eval_parts = markdown_table(
        [f"evaluation pass ({kernel}, in cache, 1 thread)", "ns / query-vector", "cycles", "cycles / FMA bound"],
        [[label, f"{ns:.2f}", f"{ns * ghz:.1f}", f"{ns * ghz / ev_bound:.2f}"] for label, ns in part_ns.items()])
    ns_all, ns_arith, ns_store, ns_loads = part_ns.values()

    def line(label, seconds, threads):
        ns = seconds * threads / kv_full * 1e9
        return [kernel, label, f"{seconds * 1e3:.2f}", threads, f"{ns:.2f}", f"{ns / tile:.2f}",
                f"{seconds / py['copyto']:.2f}"]

    full_rows = [line("input from memory, output streamed (the real case)", k["full_1t_s"], 1),
                 line("input kept in cache, output streamed", k["in_cached_1t_s"], 1),
                 line("input from memory, output kept in cache", k["out_cached_1t_s"], 1),
                 line("the real case", k["full_2t_s"], 2),
                 *([line("the real case, the walk before its wide-register loops", k["full_2t_unfused_s"], 2)]
                   if "full_2t_unfused_s" in k else []),
                 *([line("the real case, float64 evaluation (the walk before the float32 one)",
                         k["full_2t_f64eval_s"], 2)] if "full_2t_f64eval_s" in k else []),
                 line("letcc plan(y, out=buf) from Python", py[f"plan_out_{kernel}"], 2)]
    in_cost = k["full_1t_s"] - k["in_cached_1t_s"]
    out_cost = k["full_1t_s"] - k["out_cached_1t_s"]
    plan_out = py[f"plan_out_{kernel}"]
    summary = [
        f"- **{kernel}**: in cache the kernel runs at {tile:.2f} ns per knot-vector ({tile * ghz:.1f} cycles at "
        f"{ghz:.2f} GHz) against {bound:.2f} cycles for its {ops} FMAs on {pipes} {lanes * 64}-bit "
        f"pipe{'s' if pipes > 1 else ''} ({lanes} columns each; measured: {h[f'fma{lanes * 64}_per_cycle']:.2f} "
        f"independent FMAs per cycle): {tile * ghz / bound:.2f}x the arithmetic floor.",
        f"- {kernel}: at full size one thread spends {k['full_1t_s'] / kv_full * 1e9:.2f} ns per knot-vector: "
        f"{k['full_1t_s'] / k['cache_tile_s'] * kv_cache / kv_full:.2f}x the in-cache rate. Reading the "
        f"input from memory costs {in_cost * 1e3:.2f} ms of the {k['full_1t_s'] * 1e3:.2f} ms (the input "
        f"kept in cache instead), writing the output {out_cost * 1e3:.2f} ms.",
        f"- {kernel}: two threads take {k['full_2t_s'] * 1e3:.2f} ms, {k['full_1t_s'] / k['full_2t_s']:.2f}x "
        f"faster than one. From Python the call takes {plan_out * 1e3:.2f} ms, "
        f"{plan_out / py['copyto']:.2f}x numpy's single-threaded copy of the same bytes "
        f"({py['copyto'] * 1e3:.2f} ms).",
        f"- {kernel}: the evaluation is the pass furthest from its floor: {ns_all * ghz:.1f} cycles per "
        f"query-vector for {ev_bound:.0f} cycles of FMAs. Its arithmetic alone runs at "
        f"{ns_arith * ghz / ev_bound:.2f}x that bound; converting the result to float32 and storing it adds "
        f"{(ns_store - ns_arith) * ghz:.1f} cycles per vector; its loads and store alone take "
        f"{ns_loads * ghz:.1f} cycles. Together they take more than either part alone: the two overlap only "
        f"in part.",
    ]
    if kernel == "avx512" and h.get("clock_ghz_512"):
        g5 = h["clock_ghz_512"]
        summary.append(
            f"- {kernel}: with 512-bit FMAs running the core clocks at {g5:.2f} GHz ({g5 / ghz:.2f}x the "
            f"{ghz:.2f} GHz above; dependent adds beside independent 512-bit FMAs): at that clock the tile's "
            f"{tile:.2f} ns per knot-vector are {tile * g5:.1f} cycles, {tile * g5 / bound:.2f}x the floor.")
    if unfused:
        summary.append(
            f"- {kernel}: the walk before its wide-register loops (forward two knots per loop, every query in a "
            f"loop of its own) takes {unfused / k['cache_tile_s']:.2f}x this walk's time in cache and "
            f"{k['full_2t_unfused_s'] / k['full_2t_s']:.2f}x at full size on two threads.")
    if f64eval:
        summary.append(
            f"- {kernel}: the same walk with the float64 evaluation (float32 rows widened, the result narrowed; "
            f"the walk before the float32 evaluation) takes {f64eval / k['cache_tile_s']:.2f}x this walk's time "
            f"in cache and {k['full_2t_f64eval_s'] / k['full_2t_s']:.2f}x at full size on two threads.")
    return [passes, eval_parts], full_rows, summary


def report(h: dict, py: dict) -> list[str]:
    sections, full_rows, summary = [], [], []
    for kernel, k in h["kernels"].items():
        s, f, lines = kernel_sections(kernel, h, k, py)
        sections += s
        full_rows += f
        summary += lines
    full_rows.append(["-", "numpy np.copyto of the same bytes (the floor)", f"{py['copyto'] * 1e3:.2f}", 1, "-",
                      "-", "1.00"])
    full = markdown_table(
        ["kernel", "full size (m = %d)" % h["m"], "ms", "threads", "ns / knot-vector / thread", "vs in cache",
         "vs copyto floor"], full_rows)
    if len(h["kernels"]) == 2:
        a, b = (py[f"plan_out_{k}"] for k in h["kernels"])
        ta, tb = (k["cache_tile_s"] for k in h["kernels"].values())
        fa, fb = (k["full_2t_s"] for k in h["kernels"].values())
        summary.append(f"- Side by side (avx512 over avx2): in cache {tb / ta:.2f}x the time, full size on two "
                       f"threads {fb / fa:.2f}x, from Python {b / a:.2f}x.")
    return sections + [full, "\n".join(["## What limits it", "", *summary])]


NOTES = """The hand-written plan kernels (AVX2 and, where the CPU has it, AVX-512) on float32 input, one plan: n Chebyshev knots, K = n query points, lam = 1e-3
(bench/spline.py's case). The passes and the full-size walks come from the C++ harness
`bench/kernel_passes.cpp` (compiled with csrc/, best of interleaved rounds); the Python rows from the
installed letcc in the same run (rounds of five back-to-back calls of each, every call timed alone as
the harness times them, the best kept; bench/spline.py keeps the best average over runs of at least
20 ms, a little higher). A *knot-vector* is one knot row of one
4-column vector (the kernel widens float32 to float64, 4 lanes per AVX2 register). FP ops: floating-point
operations per knot-vector (forward 5: Q^T y and the forward substitution; back 3; evaluation 6 per
query, K = n queries); FMA-bound cycles: those ops on the core's FMA pipes of the kernel's width, as the
harness measures them (independent FMAs per cycle, rounded; the AVX-512 kernel's FMA covers two
knot-vectors). The back pass's in-cache time is
(forward + back) minus forward, the evaluation's the whole tile minus (forward + back): differences of
two timings, so they carry the error of both (a pass shown under its FMA bound is such an error; the
whole tile is measured directly). "vs in cache": the full-size time per knot-vector and thread over
the in-cache whole tile. The evaluation pass taken apart: the same in-cache walk with every query's
loop replaced by one part of its work (see EvalWork in csrc/plan_walk.hpp), minus (forward + back); a
*query-vector* is one query row of one 4-column vector, and at K = n there is one per knot-vector. Where
a kernel has wide-register loops (AVX-512: forward four knots per loop, the first query of each interval
evaluated inside the back substitution's loop), its evaluation row is the whole tile minus forward + back
alone (what the evaluation adds), its parts are those of the separate evaluation loop that the interval's
other queries still run, and the walk before those loops (EvalWork::kFullUnfused) is timed beside it.
Where a kernel has the float32 evaluation for float32 data (AVX-512: a query's gamma terms summed in
float64 and narrowed once, its y terms added in float32 on the float32 rows; csrc/plan_walk_isa.hpp,
f32_eval), the evaluation's 6 FP ops per query-vector are 4 float64 and 2 float32 ones, its parts are
those of that evaluation, and the same walk with the float64 evaluation (EvalWork::kFullF64Eval) is
timed beside it."""


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=64, help="knots (and query points)")
    ap.add_argument("--m", type=int, default=150528, help="columns")
    ap.add_argument("--rounds", type=int, default=30, help="interleaved rounds in the harness (best is kept)")
    ap.add_argument("--repeats", type=int, default=10, help="Python rounds of 5 + 5 timed calls (best is kept)")
    ap.add_argument("--csrc", type=Path, default=HERE.parent / "csrc", help="the C++ sources (csrc/)")
    ap.add_argument("--name", default=None,
                    help="results file bench/results/<name>.md (default kernel_passes-<machine kind>, e.g. "
                         "kernel_passes-avx512-amd-epyc: results from different machines never overwrite each other)")
    ap.add_argument("--kernels", default="avx2,avx512",
                    help="comma-separated hand-written kernels to measure side by side (those this CPU runs)")
    args = ap.parse_args(argv)
    if not (args.csrc / "dispatch.cpp").exists():
        raise SystemExit(f"kernel_passes: {args.csrc} has no dispatch.cpp (pass --csrc)")
    with tempfile.TemporaryDirectory() as tmp:
        exe = build(args.csrc, Path(tmp))
        h = run_harness(exe, args.n, args.m, args.rounds, args.kernels)
    if not h.get("avx2"):
        raise SystemExit("kernel_passes: this CPU has no AVX2+FMA, so letcc runs its generic kernel; "
                         "this benchmark measures the hand-written ones")
    py = python_side(args.n, args.m, args.repeats, list(h["kernels"]))
    sections = report(h, py)
    for s in sections:
        print(s, "\n")
    extra = [("harness", f"n = K = {h['n']}, m = {h['m']}, tile width {h['tile_width']}, "
                         f"clock {h['clock_ghz']:.2f} GHz (dependent integer adds; "
                         f"{h.get('clock_ghz_512', 0):.2f} GHz beside 512-bit FMAs), independent float64 FMAs "
                         f"per cycle {h['fma256_per_cycle']:.2f} (256-bit), {h['fma512_per_cycle']:.2f} (512-bit), "
                         f"kernels "
                         f"{', '.join(h['kernels'])}")]
    name = args.name or f"kernel_passes-{machine_kind()}"
    kernels = " and ".join(k.upper().replace("AVX512", "AVX-512") for k in h["kernels"])
    write_report(name, f"Where the plan kernel's time goes (float32, {kernels})", sections, notes=NOTES,
                 extra_info=extra)


if __name__ == "__main__":
    main()
