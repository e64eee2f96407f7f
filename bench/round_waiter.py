"""The waiting rule's master CPU per round: the Python RoundWaiter against the
compiled CountedRoundWaiter (letcc.runtime.virtual_time, csrc/round_waiter.hpp).

One round as the round engine drives it: the waiter built for N workers
(LeTCC(N/2, N), every worker sent the round, a hang limit each, the first
N - N/4 answers decide), the questions a driver asks before it sleeps
(hung, decide, next_change, answers_needed), then the answers in `wake-ups`
batches (an "answers" event each: backend.arm lets the master sleep until a
batch is in), each followed by hung and decide (and, while undecided,
next_change and answers_needed). 2 wake-ups is the usual local-backend round;
N wake-ups (one answer each) is a backend without the answer count (Ray) or
answers that trickle in. Both waiters' decisions are checked equal.

Pure master-side logic, no processes: what the waiter itself costs, apart from
the scheduling noise of a real round (bench/master_overhead_ab.py measures
whole rounds). Best of 5 runs of many rounds (_report.best_time), one waiter after the other.

Run:  python bench/round_waiter.py   (writes bench/results/round_waiter.md; --out DIR elsewhere)
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from _report import best_time, markdown_table, write_report
from letcc.codes import LeTCC
from letcc.runtime.virtual_time import CountedRoundWaiter, RoundWaiter

SIZES = (16, 64, 256)


def one_round(cls, code, N: int, wakeups: int):
    sent = list(range(N))
    w = cls(code, sent, np.zeros(N), np.zeros(N, bool), N - N // 4, None, {j: 5.0 for j in sent},
            may_complete=True)
    w.answers_needed(), w.hung(1e-5), w.decide(1e-5), w.next_change(1e-5)
    per, t, d = N // wakeups, 1e-4, None
    for b in range(wakeups):
        w.results(list(range(b * per, (b + 1) * per)), [100.0 + t + k * 1e-6 for k in range(per)], 100.0)
        t += 1e-4
        w.hung(t)
        d = w.decide(t)
        if d is None:
            w.next_change(t), w.answers_needed()
    return d


def main(argv=None) -> Path:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=None, help="folder for round_waiter.md (default bench/results)")
    ap.add_argument("--sizes", type=int, nargs="+", default=list(SIZES), help="numbers of workers N (even)")
    args = ap.parse_args(argv)
    rows = []
    for N in args.sizes:
        code = LeTCC(N // 2, N)
        for wakeups in (2, N):
            assert one_round(RoundWaiter, code, N, wakeups) == one_round(CountedRoundWaiter, code, N, wakeups)
            py, c = (best_time(lambda: one_round(cls, code, N, wakeups)) * 1e6
                     for cls in (RoundWaiter, CountedRoundWaiter))
            rows.append([N, wakeups, f"{py:.1f}", f"{c:.1f}", f"{py / c:.1f}x"])
            print(rows[-1], flush=True)
    table = markdown_table(["N", "wake-ups", "RoundWaiter (us/round)", "CountedRoundWaiter (us/round)",
                            "Python / compiled"], rows)
    notes = ("The Python waiter's cost grows faster than N: after each answer it forgets the minimum delay and "
             "hang limit over the pending workers and rebuilds them with a generator at the next question, and "
             "each answer goes through a sorted-list insert and two sets. The compiled waiter's answer is an "
             "insert into a sorted array and each question one scan of N flags; what is left of its time is the "
             "Python calls into it (about 0.15 us each), building it (about 2.7 us at N = 16: the hang limits "
             "come as a dict) and the Decision.")
    return write_report("round_waiter", "The waiting rule's CPU per round: Python RoundWaiter vs compiled",
                        ["## One round, best of 5 repeats\n\n" + table], notes, out_dir=args.out)


if __name__ == "__main__":
    print(main())
