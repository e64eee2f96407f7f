"""Benchmark of letcc's spline plan (issue 2): fit a cubic smoothing spline on
n knots and evaluate it at K = n points, for m columns at once.

One file (~500 lines) on purpose, as every benchmark here: what is measured, the
references it is set beside and the table it writes are read together, and
the shared table/CPU helpers are already out (letcc.bench._report).

Run it with ``letcc bench spline`` (or ``python -m letcc.bench.spline``);
``--quick`` is a seconds-long run on tiny sizes that checks the benchmark works
on this machine (its numbers mean little), ``--out DIR`` says where the table
goes.

Side by side, in the same run, for n in {16, 64, 256}, m in {1, 1000, 10000,
150528}, float32 and float64:

- letcc ``SplineSmoother`` call, ``plan(y)`` (allocates its result) and
  ``plan(y, out=buf)`` (writes into a preallocated buffer);
- the memory floor: numpy copying the same bytes (n*m read, K*m = n*m
  written), ``np.copyto`` into a preallocated buffer and ``y.copy()``;
- numpy GEMM with the precomputed dense (K x n) operator (``plan.matrix()``
  in y's dtype), ``np.matmul(A, y, out=buf)``;
- csaps (``csaps.csaps(x, y, at, smooth=1/(1+lam), axis=0)``: same spline,
  vectorised over columns);
- scipy ``make_smoothing_spline`` looping over the columns (fit + evaluate per
  column); too slow to run every column, so a subset is timed and scaled.

csaps, scipy and threadpoolctl are optional (``pip install "letcc[test]"``
installs all three): a missing one's column says ``-`` and the notes say why.
Then the overhead of a small call (n = 16, m = 1). On the development machine,
run with the BLAS variables unset:

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE letcc bench spline

It prints the tables and writes <out>/spline-<machine kind>.md (the widest
plan kernel this CPU runs and its model, e.g. spline-avx512-amd-epyc.md: results
from different machines never overwrite each other; ``python bench/spline.py``
in a source checkout writes them to bench/results/, where
bench/results/spline.md is the AVX2-only AMD EPYC of earlier sessions). Where
the AVX-512 kernel is the default, the AVX2 kernel runs beside it in the same
run, paired samples of the target case over time show how much the ratio to
the copy floor moves on a shared machine, and a last table measures the
dense/banded crossover. Not a test.
"""
from __future__ import annotations

import argparse
import gc
import os
import time
import timeit
from pathlib import Path

import numpy as np

import letcc
from letcc.bench._report import DEFAULT_OUT_DIR, best_call, best_time, machine_kind, markdown_table, write_report

try:
    import csaps
except ImportError:
    csaps = None
try:
    import scipy
    from scipy.interpolate import make_smoothing_spline
except ImportError:
    scipy = make_smoothing_spline = None
try:
    from threadpoolctl import threadpool_limits
except ImportError:
    threadpool_limits = None

LAM = 1e-3  # the cost of every method is independent of lam
SCIPY_COLUMNS = 100  # columns timed for scipy's per-column loop
CSAPS_COLUMNS = 10000  # csaps is timed on at most this many columns, then scaled
TARGET = (64, 150528)  # the target case: n = K = 64, m = 150528 (a 224 x 224 x 3 image)
# --quick: sizes for a seconds-long run that checks the benchmark works here
QUICK = {"ns": [16], "ms": [1, 100], "repeats": 2, "min_run": 0.001, "runs": 1, "ratio_samples": 2,
         "ratio_pause": 0.0, "target": (16, 1000), "crossover_ns": (8, 16), "crossover_m": 1000,
         "small_calls": 500}
NAN = float("nan")


def missing_notes() -> list:
    """One line per optional comparison that cannot run here, and how to get it."""
    notes = []
    if csaps is None:
        notes.append("csaps is not installed: its column is `-` (`pip install csaps`).")
    if scipy is None:
        notes.append("scipy is not installed: its column is `-` (`pip install scipy`).")
    if threadpool_limits is None:
        notes.append("threadpoolctl is not installed: numpy GEMM ran only with OpenBLAS's default thread count "
                     "(`pip install threadpoolctl`).")
    return notes


def nodes(n: int):
    """Knots: Chebyshev points of the second kind; query points: of the first
    kind (the LeTCC encoder's beta and alpha, DESIGN.md)."""
    x = np.sort(np.cos(np.arange(n) * np.pi / (n - 1)))
    at = np.sort(np.cos((2 * np.arange(1, n + 1) - 1) * np.pi / (2 * n)))
    return x, at


def scipy_loop(x, at, y, cols):
    for j in range(cols):
        make_smoothing_spline(x, y[:, j], lam=LAM)(at)


def measure(n: int, m: int, dtype, rng, repeats: int, min_run: float) -> dict:
    x, at = nodes(n)
    y = rng.standard_normal((n, m)).astype(dtype)
    plan = letcc.SplineSmoother(x, at, lam=LAM)
    A = plan.matrix().astype(dtype)
    out = np.empty((n, m), dtype)
    out2 = np.empty((n, m), dtype)
    dst = np.empty_like(y)
    r = {"n": n, "m": m, "dtype": np.dtype(dtype).name}
    # which CPU kernel "auto" chose for this plan and dtype
    r["kernel"] = plan._plan.method(np.dtype(dtype) == np.float64) if hasattr(plan._plan, "method") else "?"
    bt = lambda f: best_time(f, repeats=repeats, min_run=min_run)  # noqa: E731

    r["plan"] = bt(lambda: plan(y))
    r["plan_out"] = bt(lambda: plan(y, out=out))
    threads = letcc.get_num_threads()
    letcc.set_num_threads(1)
    r["plan_out_1t"] = bt(lambda: plan(y, out=out))
    letcc.set_num_threads(threads)
    # the same call with the compiler-vectorised kernel (banded plans on a CPU
    # where the AVX2 kernel is the default), side by side in this run
    r["plan_out_generic"] = float("nan")
    r["plan_out_avx2"] = float("nan")
    if r["kernel"] == "banded" and letcc.plan_kernel() in ("avx2", "avx512"):
        others = ["generic"] + (["avx2"] if letcc.plan_kernel() == "avx512" else [])
        try:
            for k in others:
                letcc.set_plan_kernel(k)
                r[f"plan_out_{k}"] = bt(lambda: plan(y, out=out))
        finally:
            letcc.set_plan_kernel("auto")
    r["copyto"] = bt(lambda: np.copyto(dst, y))
    r["copy"] = bt(lambda: y.copy())
    # GEMM gets its best thread count: OpenBLAS's default (all cores) and one
    # thread (spinning BLAS threads lose badly when the machine is shared)
    r["gemm_all"] = bt(lambda: np.matmul(A, y, out=out2))
    r["gemm_1t"] = NAN
    if threadpool_limits is not None:
        with threadpool_limits(limits=1, user_api="blas"):
            r["gemm_1t"] = bt(lambda: np.matmul(A, y, out=out2))
    r["gemm"] = float(np.fmin(r["gemm_all"], r["gemm_1t"]))
    # agreement, so that every column is known to compute the same thing
    ref = plan(y)
    scale = float(np.abs(ref).max())
    r["gemm_err"] = float(np.abs(out2.astype(np.float64) - ref).max()) / scale

    csaps_cols = min(m, CSAPS_COLUMNS)
    r["csaps_scaled"] = csaps_cols < m
    r["csaps"] = r["csaps_err"] = NAN
    if csaps is not None:
        ys = np.ascontiguousarray(y[:, :csaps_cols])
        p = 1.0 / (1.0 + LAM)  # csaps: p * sum (y - f)^2 + (1 - p) * int f''^2
        r["csaps"] = bt(lambda: csaps.csaps(x, ys, at, smooth=p, axis=0)) * (m / csaps_cols)
        r["csaps_err"] = float(np.abs(csaps.csaps(x, ys, at, smooth=p, axis=0) - ref[:, :csaps_cols]).max()) / scale

    cols = min(m, SCIPY_COLUMNS)
    r["scipy_cols"] = cols
    r["scipy"] = r["scipy_err"] = NAN
    if make_smoothing_spline is not None:
        r["scipy"] = best_time(lambda: scipy_loop(x, at, y, cols), repeats=max(2, repeats // 2),
                               min_run=0.0) * (m / cols)
        r["scipy_err"] = float(np.abs(make_smoothing_spline(x, y[:, :cols], lam=LAM, axis=0)(at)
                                      - ref[:, :cols]).max()) / scale
    del y, out, out2, dst, ref
    gc.collect()
    return r


TIMINGS = ("plan", "plan_out", "plan_out_1t", "plan_out_generic", "plan_out_avx2", "copyto", "copy", "gemm_all", "gemm_1t", "csaps", "scipy")


def table_row(r: dict) -> list:
    n, m = r["n"], r["m"]
    return [
        n, m, r["dtype"], r["kernel"], fmt_t(r["plan"]), fmt_t(r["plan_out"]), fmt_t(r["plan_out_1t"]),
        "-" if np.isnan(r["plan_out_generic"]) else fmt_t(r["plan_out_generic"]),
        "-" if np.isnan(r["plan_out_avx2"]) else fmt_t(r["plan_out_avx2"]),
        fmt_t(r["copyto"]), fmt_t(r["copy"]),
        fmt_t(r["gemm"]) + ("" if r["gemm"] == r["gemm_all"] else " (1t)"),
        "-" if np.isnan(r["csaps"]) else fmt_t(r["csaps"]) + ("*" if r["csaps_scaled"] else ""),
        "-" if np.isnan(r["scipy"]) else fmt_t(r["scipy"]) + ("*" if r["scipy_cols"] < m else ""),
        f"{r['plan'] / r['copy']:.2f}", f"{r['plan_out'] / r['copyto']:.2f}",
        f"{r['gemm'] / r['plan_out']:.2f}", _ratio(r["csaps"], r["plan"]), _ratio(r["scipy"], r["plan"]),
    ]


def _ratio(a: float, b: float) -> str:
    return "-" if np.isnan(a) else f"{a / b:.0f}"


def fmt_t(seconds: float) -> str:
    """Time with a unit that keeps 3-4 significant digits readable."""
    if np.isnan(seconds):
        return "-"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.1f} us"
    if seconds < 1.0:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds:.2f} s"


def small_call_overhead(repeats: int, number: int = 20000) -> tuple[str, list]:
    """n = 16, m = 1: the cost of a prebuilt plan's call when there is nearly no work."""
    n = 16
    x, at = nodes(n)
    plan = letcc.SplineSmoother(x, at, lam=LAM)
    rows = []
    for dtype in (np.float32, np.float64):
        y = np.random.default_rng(0).standard_normal(n).astype(dtype)
        y2 = y.reshape(n, 1).copy()
        out = np.empty(n, dtype)
        A = plan.matrix().astype(dtype)
        core = plan._plan.apply  # the compiled entry point, without the Python wrapper
        cases = [
            ("plan(y), y shape (16,)", lambda: plan(y)),
            ("plan(y), y shape (16, 1)", lambda: plan(y2)),
            ("plan(y, out=buf)", lambda: plan(y, out=out)),
            ("compiled core alone (plan._plan.apply)", lambda: core(y, None, 0)),
            ("numpy A @ y (precomputed A, GEMV)", lambda: A @ y),
            ("numpy y.copy() (floor of any call returning an array)", lambda: y.copy()),
        ]
        for label, fn in cases:
            best = min(timeit.repeat(fn, number=number, repeat=repeats)) / number
            rows.append([np.dtype(dtype).name, label, f"{best * 1e6:.2f}"])
    table = markdown_table(["dtype", "call (n = 16, K = 16, m = 1)", "time (us)"], rows, align="llr")
    return table, rows


def ratio_over_time(samples: int, pause: float, size: tuple = TARGET) -> tuple[str, str]:
    """The issue's target case, plan(y, out=) against np.copyto, paired in time:
    `samples` samples `pause` seconds apart, each the best of three back-to-back
    calls of each (after one untimed call). On a shared machine the kernel's
    compute speed moves with other tenants' load more than the copy's memory
    speed does, so the ratio moves too; the table shows by how much. Where the
    default kernel is the AVX-512 one, the AVX2 kernel is sampled beside it."""
    n, m = size
    x, at = nodes(n)
    plan = letcc.SplineSmoother(x, at, lam=LAM)
    y = np.random.default_rng(7).standard_normal((n, m)).astype(np.float32)
    out, dst = np.empty_like(y), np.empty_like(y)
    default = letcc.plan_kernel()
    kernels = [default] + (["avx2"] if default == "avx512" else [])

    rows, ratios = [], {k: [] for k in kernels}
    try:
        for s in range(samples):
            if s:
                time.sleep(pause)
            tp = {}
            for k in kernels:
                letcc.set_plan_kernel(k if k in ("avx2", "avx512") else "auto")
                tp[k] = best_call(lambda: plan(y, out=out))
            tc = best_call(lambda: np.copyto(dst, y))
            row = [s + 1]
            for k in kernels:
                ratios[k].append(tp[k] / tc)
                row += [fmt_t(tp[k])]
            row += [fmt_t(tc)] + [f"{tp[k] / tc:.2f}" for k in kernels]
            if len(kernels) == 2:
                row.append(f"{tp[kernels[0]] / tp[kernels[1]]:.2f}")
            rows.append(row)
    finally:
        letcc.set_plan_kernel("auto")
    headers = (["sample"] + [f"letcc out= ({k})" for k in kernels] + ["copyto floor"]
               + [f"out=/copyto ({k})" for k in kernels] + (["avx512/avx2"] if len(kernels) == 2 else []))
    table = markdown_table(headers, rows)
    lines = []
    for k in kernels:
        r = np.array(ratios[k])
        lines.append(f"- same case, paired over time ({samples} samples {pause:g} s apart), {k} kernel: out=/copyto "
                     f"median {np.median(r):.2f}x, best {r.min():.2f}x, worst {r.max():.2f}x; "
                     f"{int((r <= 1.25).sum())} of {samples} samples at or under 1.25x.")
    if len(kernels) == 2:
        q = np.array(ratios[kernels[0]]) / np.array(ratios[kernels[1]])
        lines.append(f"- avx512 over avx2 in the same samples: median {np.median(q):.2f}x the time, best "
                     f"{q.min():.2f}x, worst {q.max():.2f}x.")
    return table, "\n".join(lines)


def dense_crossover(repeats: int, min_run: float, m: int = 150528, ns=(8, 16, 24, 32, 48, 64)) -> str:
    """Dense operator against the banded passes at small n = K (both forced,
    out=, float32 and float64, each banded hand-written kernel this CPU runs):
    where the plan's "auto" should switch (csrc/driver/linear_maps.hpp kDenseMaxWork*)."""
    kernels = [k for k in ("avx2", "avx512") if letcc.plan_kernel_runs(k)]
    rng = np.random.default_rng(3)
    rows = []
    try:
        for dtype in (np.float32, np.float64):
            for n in ns:
                x, at = nodes(n)
                y = rng.standard_normal((n, m)).astype(dtype)
                out = np.empty_like(y)
                dense = letcc.SplineSmoother(x, at, lam=LAM, method="dense")
                banded = letcc.SplineSmoother(x, at, lam=LAM, method="banded")
                auto = letcc.SplineSmoother(x, at, lam=LAM)
                td = best_time(lambda: dense(y, out=out), repeats=repeats, min_run=min_run)
                tb = {}
                for k in kernels:
                    letcc.set_plan_kernel(k)
                    tb[k] = best_time(lambda: banded(y, out=out), repeats=repeats, min_run=min_run)
                letcc.set_plan_kernel("auto")
                chosen = auto._plan.method(np.dtype(dtype) == np.float64)
                rows.append([np.dtype(dtype).name, n, fmt_t(td)] + [fmt_t(tb[k]) for k in kernels]
                            + [f"{tb[k] / td:.2f}" for k in kernels] + [chosen])
    finally:
        letcc.set_plan_kernel("auto")
    return markdown_table(["dtype", "n = K", "dense out="] + [f"banded out= ({k})" for k in kernels]
                          + [f"banded/dense ({k})" for k in kernels] + ["auto chooses"], rows)


def build_parser(default_out: Path = DEFAULT_OUT_DIR) -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="letcc bench spline", description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true",
                    help="a seconds-long run on tiny sizes (n = 16, m in {1, 100}; target case n = K = 16, "
                         "m = 1000): checks that the benchmark works here, not how fast letcc is")
    ap.add_argument("--out", type=Path, default=default_out,
                    help=f"folder for the results file (default ./{default_out}, created)")
    ap.add_argument("--ns", type=int, nargs="+", default=[16, 64, 256])
    ap.add_argument("--ms", type=int, nargs="+", default=[1, 1000, 10000, 150528])
    ap.add_argument("--repeats", type=int, default=5, help="timed runs per measurement (best is kept)")
    ap.add_argument("--min-run", type=float, default=0.1, help="seconds each timed run lasts at least")
    ap.add_argument("--runs", type=int, default=1, help="sweeps over all sizes; each timing keeps its best")
    ap.add_argument("--name", default=None,
                    help="results file <out>/<name>.md (default spline-<machine kind>, e.g. "
                         "spline-avx512-amd-epyc: results from different machines never overwrite each other)")
    ap.add_argument("--crossover", action=argparse.BooleanOptionalAction, default=True,
                    help="measure the dense/banded crossover at small n (m = 150528)")
    ap.add_argument("--ratio-samples", type=int, default=30,
                    help="paired out=/copyto samples of the target case over time (0: skip)")
    ap.add_argument("--ratio-pause", type=float, default=2.0, help="seconds between those samples")
    return ap


def main(argv=None, *, default_out: Path = DEFAULT_OUT_DIR) -> Path:
    """Run the benchmark (command-line arguments ``argv``), print its tables, write
    ``<out>/<name>.md`` and return its path."""
    ap = build_parser(default_out)
    args = ap.parse_args(argv)
    target, crossover_ns, crossover_m, small_calls = TARGET, (8, 16, 24, 32, 48, 64), 150528, 20000
    if args.quick:
        defaults = {a.dest: a.default for a in ap._actions}
        for k in ("ns", "ms", "repeats", "min_run", "runs", "ratio_samples", "ratio_pause"):
            if getattr(args, k) == defaults[k]:      # an explicit option wins over --quick
                setattr(args, k, QUICK[k])
        target, crossover_ns, crossover_m = QUICK["target"], QUICK["crossover_ns"], QUICK["crossover_m"]
        small_calls = QUICK["small_calls"]

    load_start = os.getloadavg()
    rng = np.random.default_rng(12345)
    headers = ["n", "m", "dtype", "kernel", "letcc plan(y)", "letcc out=", "out= 1 thread", "out= generic kernel",
               "out= avx2 kernel",
               "copyto floor", "y.copy()",
               "numpy GEMM", "csaps", "scipy loop", "plan/copy", "out=/copyto", "GEMM/out=", "csaps/plan",
               "scipy/plan"]
    # The whole sweep runs `--runs` times, spread over time, and every timing
    # keeps its minimum over all runs: on a shared machine a load burst then
    # spoils one run of a measurement, not the table.
    best: dict = {}
    for run in range(args.runs):
        print(f"run {run + 1} of {args.runs}", flush=True)
        print("| " + " | ".join(headers) + " |")
        for n in args.ns:
            for dtype in (np.float32, np.float64):
                for m in args.ms:
                    r = measure(n, m, dtype, rng, args.repeats, args.min_run)
                    key = (n, r["dtype"], m)
                    if key in best:
                        old = best[key]
                        for k in TIMINGS:
                            r[k] = np.fmin(r[k], old[k])
                        r["gemm"] = float(np.fmin(r["gemm_all"], r["gemm_1t"]))
                    best[key] = r
                    print("| " + " | ".join(str(c) for c in table_row(r)) + " |", flush=True)
    results = list(best.values())
    rows = [table_row(r) for r in results]
    main_table = markdown_table(headers, rows, align="rrll" + "r" * (len(headers) - 4))
    print()
    print(main_table)

    worst = max(np.nanmax([r["gemm_err"], r["csaps_err"], r["scipy_err"]]) for r in results)
    small_table, small_rows = small_call_overhead(args.repeats * args.runs, number=small_calls)
    print()
    print(small_table)

    targets = target_summary(results)
    ratio_sections = []
    if args.ratio_samples > 0:
        ratio_table, ratio_summary = ratio_over_time(args.ratio_samples, args.ratio_pause, target)
        print()
        print(ratio_table)
        targets += "\n" + ratio_summary
        ratio_sections = [f"## The target case over time (n = K = {target[0]}, m = {target[1]}, float32)",
                          ratio_table]
    crossover_sections = []
    if args.crossover:
        cross = dense_crossover(args.repeats, args.min_run, m=crossover_m, ns=crossover_ns)
        print()
        print(cross)
        crossover_sections = [f"## Dense operator against the banded kernels (out=, m = {crossover_m}, "
                              "both forced)", cross]
    calls = [f"{r[2]} us ({r[0]})" for r in small_rows if r[1].startswith("plan(y), y shape (16,)")]
    targets += f"\n- prebuilt plan's call at n = 16, m = 1: {', '.join(calls)} (target < 3 us)."
    missing = missing_notes()
    if missing:
        targets += "".join(f"\n- {line}" for line in missing)
    print()
    print(targets)
    quick_note = ("**`--quick` run**: tiny sizes that check the benchmark works on this machine; its times are "
                  "dominated by call overheads and say little about letcc's speed on real sizes.\n\n"
                  if args.quick else "")
    missing_note = "".join(f"**Not measured**: {line}\n\n" for line in missing)
    notes = quick_note + missing_note + f"""Fit a cubic smoothing spline (lam = {LAM}) on n Chebyshev knots in [-1, 1] and evaluate it at
K = n points, for every column of y (n x m, C order). Times are the best of {args.repeats} timed runs (each
at least {args.min_run} s, a single call for the slow ones) in each of {args.runs} sweeps over the whole table,
spread over time (best over all). Columns:

- **kernel**: the CPU kernel `method="auto"` chose for this size and dtype (banded Reinsch passes or the
  dense precomputed operator).
- **letcc plan(y)**: `SplineSmoother(x, at, lam)(y)`, result allocated by the call;
  **letcc out=**: `plan(y, out=buf)` into a preallocated buffer. letcc uses {letcc.get_num_threads()} threads;
  **out= 1 thread**: the same with `letcc.set_num_threads(1)`. Banded plans run letcc's
  `{letcc.plan_kernel()}` kernel; **out= generic kernel**: the same `out=` call with
  `letcc.set_plan_kernel("generic")`, the compiler-vectorised kernel it replaced on AVX2 CPUs (`-`: dense
  plans, or no hand-written kernel on this CPU); **out= avx2 kernel**: the same with
  `letcc.set_plan_kernel("avx2")` where the default is the AVX-512 kernel (`-` elsewhere).
- **copyto floor**: `np.copyto(buf, y)`, the same bytes read and written, preallocated (compare with
  `out=`); **y.copy()**: the same with a freshly allocated result (compare with `plan(y)`: both pay
  for fresh pages).
- **numpy GEMM**: `np.matmul(A, y, out=buf)`, A = `plan.matrix()` precomputed in y's dtype (OpenBLAS), the
  better of OpenBLAS's default thread count and one thread (`(1t)`: one thread was faster).
- **csaps**: `csaps.csaps(x, y, at, smooth=1/(1+lam), axis=0)` (same spline; vectorised). `*`: timed on
  {CSAPS_COLUMNS} columns and scaled linearly to m.
- **scipy loop**: `make_smoothing_spline(x, y[:, j], lam=lam)(at)` for every column j. `*`: timed on the
  first {SCIPY_COLUMNS} columns and scaled linearly to m (the full loop would take minutes).
- Ratios: **plan/copy** = plan(y) / y.copy(); **out=/copyto** = plan(y, out=) / copyto;
  **GEMM/out=** = GEMM time / letcc out= time (> 1: letcc faster); **csaps/plan**, **scipy/plan**: how many
  times slower than letcc's plan(y).

**The target case over time**: plan(y, out=) and np.copyto at n = K = {target[0]}, m = {target[1]}, float32, sampled
{args.ratio_samples} times {args.ratio_pause:g} s apart, each the best of three back-to-back calls of each: on this
shared machine the kernel's compute speed moves with other tenants' load more than the copy does.

All methods compute the same numbers: largest difference from letcc relative to max |result| over
every row: {worst:.1e} (float32 rows are limited by float32 rounding).
"""
    name = args.name or f"spline-{machine_kind()}"
    return write_report(name, f"Spline plan benchmark (issues 2 and 20; plan kernel {letcc.plan_kernel()})",
                 ["## Plan call vs alternatives", main_table,
                  "## Small-call overhead", small_table,
                  *ratio_sections, *crossover_sections, "## Against the issue's targets", targets],
                 notes=notes,
                 extra_info=[("load average (1, 5, 15 min) at start", ", ".join(f"{v:.2f}" for v in load_start))],
                 out_dir=args.out)


def target_summary(results) -> str:
    lines = []

    def get(n, m, dtype):
        for r in results:
            if r["n"] == n and r["m"] == m and r["dtype"] == dtype:
                return r
        return None

    r = get(64, 150528, "float32")
    if r:
        lines.append(f"- float32, n = K = 64, m = 150528: plan(y, out=) = {fmt_t(r['plan_out'])}, "
                     f"{r['plan_out'] / r['copyto']:.2f}x the copyto floor; plan(y) = {fmt_t(r['plan'])}, "
                     f"{r['plan'] / r['copy']:.2f}x y.copy() (target <= 1.25x).")
        if not np.isnan(r["plan_out_generic"]):
            lines.append(f"- same case, the generic (compiler-vectorised) kernel: {fmt_t(r['plan_out_generic'])}, "
                         f"{r['plan_out_generic'] / r['copyto']:.2f}x the floor; the {letcc.plan_kernel()} kernel is "
                         f"{r['plan_out_generic'] / r['plan_out']:.2f}x faster.")
        if not np.isnan(r["plan_out_avx2"]):
            lines.append(f"- same case, the AVX2 kernel: {fmt_t(r['plan_out_avx2'])}, "
                         f"{r['plan_out_avx2'] / r['copyto']:.2f}x the floor; AVX-512 / AVX2 time "
                         f"{r['plan_out'] / r['plan_out_avx2']:.2f}x; GEMM / AVX2 out= "
                         f"{r['gemm'] / r['plan_out_avx2']:.2f}x.")
        lines.append(f"- same case: numpy float32 GEMM with the precomputed operator takes {fmt_t(r['gemm'])}, "
                     f"{r['gemm'] / r['plan_out']:.2f}x letcc's out= call and {r['gemm'] / r['plan']:.2f}x "
                     f"plan(y) (target >= 2x).")
    worst = [x for x in results if x["m"] >= 1000 and not np.isnan(x["scipy"])]
    if worst:
        lo = min(worst, key=lambda x: x["scipy"] / x["plan"])
        lines.append(f"- scipy loop / letcc plan(y) at m >= 1000: at least {lo['scipy'] / lo['plan']:.0f}x "
                     f"(n = {lo['n']}, m = {lo['m']}, {lo['dtype']}) (target >= 100x).")
    return "\n".join(lines) if lines else "(target cases not in this run)"


if __name__ == "__main__":
    main()
