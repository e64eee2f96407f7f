"""What an idle gap costs the master's CPU: fixed Python work after a sleep, and partial rounds by max_batch_delay.

Issue 29's partial-round row (letcc.bench.serving_overhead's partial-1: one caller with one request
out, so every round carries 1 request and leaves ``max_batch_delay`` = 2 ms after it) measures a
master that sleeps between requests. Code that runs right after a sleep runs slower than the same
code run back to back (caches and branch predictors refilled after other processes ran, the core's
idle state), so part of that row's CPU is the gap, not the work. Two measurements, in interleaved
turns:

1. the machine alone: a fixed piece of Python (300 calls of a one-line function, 10-18 us when
   hot here), its thread CPU when run back to back and right after sleeping 0.2, 2 and 10 ms (no letcc
   running);
2. CodedServer(LeTCC(8, 16)) serving one caller with one request out (16 worker processes, a
   784 -> 10 linear model, as serving_overhead's partial-1), at max_batch_delay = 0, 0.5 ms and
   2 ms: the dispatcher thread's CPU per request, the caller's (its ``submit`` alone, and submit +
   result), and the wall time per request. With max_batch_delay = 0 a round leaves as soon as its
   request is taken, so the master sleeps only while the workers compute.

    python bench/idle_gap.py [--turns 4] [--requests 600] [--out DIR]

Results: bench/results/idle_gap.md. Quote the ratios: the machine is shared.
"""
from __future__ import annotations

import argparse
import threading
import time

import numpy as np

from _report import markdown_table, write_report

GAPS_MS = (0.0, 0.2, 2.0, 10.0)
DELAYS_MS = (0.0, 0.5, 2.0)


def _step(x):
    return x + 1


def fixed_work() -> int:
    s = 0
    for _ in range(300):
        s = _step(s)
    return s


def work_after_gap(gap_s: float, runs: int) -> float:
    """Median thread CPU (s) of fixed_work() run `runs` times, each right after sleeping gap_s."""
    ts = []
    for _ in range(runs):
        if gap_s:
            time.sleep(gap_s)
        t0 = time.thread_time_ns()
        fixed_work()
        ts.append(time.thread_time_ns() - t0)
    return float(np.median(ts)) * 1e-9


def partial_rounds(max_batch_delay: float, n_requests: int) -> dict:
    """One caller, one request out, on CodedServer(LeTCC(8, 16)): CPU per request (s)."""
    import letcc
    from letcc.bench.serving_overhead import SHAPE, linear_factory
    from letcc.serving import CodedServer

    X = np.random.default_rng(0).standard_normal((64,) + SHAPE).astype(np.float32)
    with CodedServer(linear_factory, letcc.LeTCC(8, 16), threads_per_worker=1, max_batch_delay=max_batch_delay,
                     seed=1) as server:
        for i in range(100):                        # warm-up: layout, probe, decoders
            server.submit(X[i % 64]).result(60)
        clock = time.pthread_getcpuclockid(server._thread.ident)
        d0, t0 = time.clock_gettime(clock), time.perf_counter()
        submit = total = 0.0
        for i in range(n_requests):
            c0 = time.thread_time()
            fut = server.submit(X[i % 64])
            c1 = time.thread_time()
            fut.result(60)
            submit += c1 - c0
            total += time.thread_time() - c0
        wall = time.perf_counter() - t0
        disp = time.clock_gettime(clock) - d0
    n = n_requests
    return dict(dispatcher=disp / n, caller=total / n, submit=submit / n, wall=wall / n)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--turns", type=int, default=4, help="interleaved turns (medians over them)")
    ap.add_argument("--runs", type=int, default=1000, help="runs of the fixed work per gap and turn")
    ap.add_argument("--requests", type=int, default=600, help="requests per max_batch_delay and turn")
    ap.add_argument("--out", default=None, help="folder for idle_gap.md (default bench/results)")
    args = ap.parse_args()
    work = {g: [] for g in GAPS_MS}
    served = {d: [] for d in DELAYS_MS}
    for turn in range(args.turns):
        order = GAPS_MS if turn % 2 == 0 else GAPS_MS[::-1]
        for g in order:
            work[g].append(work_after_gap(g * 1e-3, args.runs))
        for d in (DELAYS_MS if turn % 2 == 0 else DELAYS_MS[::-1]):
            served[d].append(partial_rounds(d * 1e-3, args.requests))
        print(f"turn {turn + 1}/{args.turns}: "
              + ", ".join(f"gap {g:g} ms {work[g][-1] * 1e6:.1f} us" for g in GAPS_MS) + "; "
              + ", ".join(f"delay {d:g} ms dispatcher {served[d][-1]['dispatcher'] * 1e6:.0f} us"
                          for d in DELAYS_MS), flush=True)
    hot = float(np.median(work[0.0]))
    rows1 = [[f"{g:g}", f"{np.median(work[g]) * 1e6:.1f}", f"{np.median(work[g]) / hot:.2f}x",
              ", ".join(f"{v * 1e6:.1f}" for v in work[g])] for g in GAPS_MS]
    t1 = markdown_table(["sleep before (ms)", "thread CPU, median (us)", "/ back to back", "each turn (us)"], rows1)

    def med(d, key):
        return float(np.median([r[key] for r in served[d]]))

    base = med(0.0, "dispatcher")
    rows2 = [[f"{d:g}", f"{med(d, 'dispatcher') * 1e6:.0f}", f"{med(d, 'dispatcher') / base:.2f}x",
              f"{med(d, 'caller') * 1e6:.0f}", f"{med(d, 'submit') * 1e6:.1f}", f"{med(d, 'wall') * 1e6:.0f}",
              ", ".join(f"{r['dispatcher'] * 1e6:.0f}" for r in served[d])] for d in DELAYS_MS]
    t2 = markdown_table(["max_batch_delay (ms)", "dispatcher CPU / request (us)", "/ at 0 ms",
                         "caller CPU / request (us)", "of which submit (us)", "wall / request (us)",
                         "dispatcher, each turn (us)"], rows2)
    sections = [f"## 1. Fixed Python work (300 calls) after a sleep, {args.runs} runs a turn, {args.turns} turns\n\n"
                + t1,
                f"## 2. CodedServer(LeTCC(8, 16)), one caller with one request out, {args.requests} requests a "
                f"turn, {args.turns} turns (medians)\n\n" + t2]
    print("\n\n".join(sections))
    write_report("idle_gap", "What an idle gap costs the master's CPU (issue 29's partial rounds)", sections,
                 notes=__doc__.split("\n\n", 1)[1].rsplit("\n\n    python", 1)[0], out_dir=args.out)


if __name__ == "__main__":
    main()
