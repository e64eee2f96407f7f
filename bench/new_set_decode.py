"""The decode of a round whose answering set is new: LeTCC's default decoder
built for the set (letcc.codes.lam_defaults' local-gap rows: one lam per
output point, csrc/smoother_rows.hpp) and applied, against the same decode
with the decoder cached.

Where workers straggle at random, nearly every round has an answering set
the decoder cache has not seen (K = 8, N = 16, the first 12 answers: 1820
sets), so this build is on the master's critical path each round. Sizes
(K, N) with N - N/4 answers, m = 10 outputs of probabilities (the default
decodes them in log space), float32; distinct random sets cycled with the
plan cache off ("new set") and one set again and again ("cached"); best of 7
runs (_report.best_time). letcc one thread.

Run:  python bench/new_set_decode.py   (writes bench/results/new_set_decode.md; --out DIR elsewhere)
"""
from __future__ import annotations

import argparse
import itertools
from pathlib import Path

import numpy as np

import letcc
from _report import best_time, markdown_table, write_report
from letcc.codes import LeTCC

SIZES = ((8, 16), (32, 64), (128, 256))


def measure(K: int, N: int, rng) -> list:
    n = N - N // 4
    sets = [np.sort(rng.choice(N, n, replace=False)).tolist() for _ in range(max(20, 4000 // K))]
    Y = rng.random((n, 1, 10)).astype(np.float32)
    Y /= Y.sum(-1, keepdims=True)
    fresh, cached = LeTCC(K, N, plan_cache_size=0), LeTCC(K, N)
    cycle = itertools.cycle(sets)
    new = best_time(lambda: fresh.decode(Y, next(cycle)), repeats=7) * 1e6
    hit = best_time(lambda: cached.decode(Y, sets[0]), repeats=7) * 1e6
    return [f"({K}, {N}), {n} answers", f"{new:.1f}", f"{hit:.1f}", f"{new - hit:.1f}"]


def main(argv=None) -> Path:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=None, help="folder for new_set_decode.md (default bench/results)")
    ap.add_argument("--sizes", type=int, nargs="+", default=None, help="K values (N = 2K)")
    args = ap.parse_args(argv)
    letcc.set_num_threads(1)
    rng = np.random.default_rng(0)
    sizes = SIZES if args.sizes is None else [(k, 2 * k) for k in args.sizes]
    rows = []
    for K, N in sizes:
        rows.append(measure(K, N, rng))
        print(rows[-1], flush=True)
    table = markdown_table(["(K, N), answers", "new set (us)", "cached (us)", "building the decoder (us)"], rows)
    return write_report("new_set_decode", "LeTCC's decode of a new answering set: building its decoder",
                        ["## One decode, m = 10 probabilities, best of 7\n\n" + table], out_dir=args.out)


if __name__ == "__main__":
    print(main())
