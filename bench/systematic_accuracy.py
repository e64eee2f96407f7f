"""Degraded-mode accuracy of the systematic codes (issue 27), offline.

    python bench/systematic_accuracy.py [--sets 20] [--models lenet5,cnn_fashion,...] [--quick]
                                        [--out bench/results/systematic_accuracy.md]

A systematic code (``LeTCC(K, N, systematic=True)``, ``BACC(K, N,
systematic=True)``) answers a request exactly when its systematic worker
answers; only the requests whose systematic worker is missing are estimated.
Degraded mode is those requests: RelAcc here is the fraction of them whose
decoded argmax equals the model's own argmax on the input (agreement with
the model, not with the labels), MSE the squared error of their softmax
estimate, both with standard errors over (straggler set, round).

Every scheme decodes the same rounds from the same answering sets through
letcc.evaluate (decode_errors); the answered requests are exact (tested in
tests/test_codes_systematic.py), so a round's K estimates hold exactly
len(missing) errors and the degraded-mode numbers are read off its totals:
agreement (agree - (K - missing)) / missing, MSE K * mse / missing.

The models are bench/accuracy_models.py's (LeNet-5, the demo model, and the
held-out classifiers of bench/results/accuracy.md), trained offline and
cached there. Writes the tables and the CPU name to the report.
"""
from __future__ import annotations

import argparse
import itertools
import math
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import accuracy_models as am  # noqa: E402
from accuracy import cpu_name  # noqa: E402
from letcc import evaluate as ev  # noqa: E402
from letcc.codes import BACC, LeTCC  # noqa: E402
from letcc.codes.bacc import berrut_matrix  # noqa: E402
from letcc.codes.output_space import from_log, to_log  # noqa: E402
from letcc.codes.systematic import parity_nodes  # noqa: E402
from letcc.nodes import chebyshev_first_kind, chebyshev_second_kind  # noqa: E402

MODELS = ("lenet5",) + am.HELD_OUT
CONFIGS = ((4, 5), (4, 6), (4, 8), (8, 10), (8, 12), (8, 16))     # N/K = 1.25, 1.5, 2
SMALL = ((2, 3), (2, 4))
SCENARIOS = ((1, 0), (2, 0), (1, 1), (1, 2))                     # (systematic, parity) answers missing
SEED = 27


class ExactWhereAnswered:
    """A reference decoder made systematic for the comparison: ``inner``'s
    estimates, with the answered systematic workers' rows replaced by their
    answers (as the systematic codes return them). ``space='log'`` decodes
    log(max(Y, 1e-30)) and returns the softmax (for BACC, which has no log
    space of its own)."""

    linear_in_outputs = False
    adversaries = 0

    def __init__(self, inner, systematic_workers, space=None):
        self.inner, self.space = inner, space
        self.K, self.N = inner.K, inner.N
        self.workers = np.asarray(systematic_workers)

    def decode(self, Y, available):
        avail = np.asarray(available)
        est = from_log(np.array(self.inner.decode(to_log(Y), avail))) if self.space == "log" else \
            np.array(self.inner.decode(Y, avail), dtype=np.float64)
        for k, w in enumerate(self.workers):
            hit = np.flatnonzero(avail == w)
            if hit.size:
                est[k] = Y[hit[0]]
        return est


def placement_beta(alpha: np.ndarray, N: int, kind: str) -> np.ndarray:
    """Worker nodes holding alpha: the default (parity_nodes), interval
    middles at every N (pairs), the default's interior nodes moved to a
    quarter of their interval (quarter), or Chebyshev points of the second
    kind with the K nearest the inputs moved onto them."""
    K = alpha.shape[0]
    if kind == "default":
        par = parity_nodes(alpha, N - K)
    elif kind == "pairs":
        # the default's rule for N - K <= K // 2 at every N: interval middles, spread
        P = N - K
        if P > K - 1:
            return placement_beta(alpha, N, "chebyshev")
        par = np.array([(alpha[i] + alpha[i + 1]) / 2 for i in (int((j + 0.5) * (K - 1) / P) for j in range(P))])
    elif kind == "quarter":
        mid = parity_nodes(alpha, N - K)
        lo = np.searchsorted(alpha, mid) - 1
        inside = (lo >= 0) & (lo < K - 1)
        par = mid.copy()
        par[inside] = alpha[lo[inside]] + 0.25 * (alpha[lo[inside] + 1] - alpha[lo[inside]])
    elif kind == "chebyshev":
        c = list(chebyshev_second_kind(N))
        for a in alpha:
            c.remove(min(c, key=lambda t: abs(t - a)))
        par = np.array(c)
    else:
        raise ValueError(kind)
    return np.sort(np.concatenate((alpha, par)))


def draw(workers, parity, n_sys: int, n_par: int, n_sets: int, rng) -> list:
    """Answering sets with n_sys systematic and n_par parity answers missing:
    every such set when there are at most n_sets of them (one systematic
    answer missing: each input once), else n_sets drawn at random."""
    N = len(workers) + len(parity)
    combos = [np.array(s + p) for s in itertools.combinations(list(workers), n_sys)
              for p in itertools.combinations(list(parity), n_par)] if math.comb(len(workers), n_sys) * \
        math.comb(len(parity), n_par) <= n_sets else None
    if combos is not None:
        return [np.setdiff1d(np.arange(N), gone) for gone in combos]
    out = []
    for _ in range(n_sets):
        gone = np.concatenate((rng.choice(workers, n_sys, replace=False),
                               rng.choice(parity, min(n_par, len(parity)), replace=False)))
        out.append(np.setdiff1d(np.arange(N), gone))
    return out


def degraded(errors: ev.SetErrors, K: int, missing: int) -> dict:
    """Degraded-mode agreement and MSE (means and standard errors over set x round)."""
    agree = (errors.agree - (K - missing)) / missing
    mse = errors.mse * K / missing
    se = lambda x: float(x.std(ddof=1) / np.sqrt(x.size)) if x.size > 1 else 0.0  # noqa: E731
    return dict(acc=float(agree.mean()), acc_se=se(agree), mse=float(mse.mean()), mse_se=se(mse))


def schemes(K: int, N: int, beta_kind: str = "default", lams=None, only_default: bool = False) -> dict:
    alpha = chebyshev_first_kind(K)
    beta = placement_beta(alpha, N, beta_kind)
    code = LeTCC(K, N, systematic=True, beta=beta)
    w = code.systematic_workers
    out = {"letcc": code}
    if only_default:
        return out
    if lams is not None:
        # output_space='log': a lam of the caller's decodes linearly under 'auto'
        return {f"lam={lam:g}": LeTCC(K, N, systematic=True, beta=beta, lam_dec=lam, output_space="log")
                for lam in lams}
    out["letcc linear"] = LeTCC(K, N, systematic=True, beta=beta, output_space="linear")
    # the non-systematic decoder (smoothing spline through the answering nodes, local lam rule) on the same nodes
    out["spline log"] = ExactWhereAnswered(LeTCC(K, N, alpha=alpha, beta=beta, lam_enc=0.0), w)
    out["bacc"] = BACC(K, N, systematic=True, beta=beta)
    out["bacc log"] = ExactWhereAnswered(BACC(K, N, beta=beta), w, space="log")
    return out


def study(b: am.Bundle, K: int, N: int, codes: dict, scenarios, n_sets: int) -> dict:
    G = ev.group_inputs(b.X_eval, K)
    exact = ev.exact_outputs(b.f, G)
    ref = next(c for c in codes.values() if isinstance(c, (LeTCC, BACC)))
    outputs = ev.coded_outputs(ref, b.f, G)      # every scheme here shares the nodes and the interpolating encoder
    workers = np.array(ref.systematic_workers)
    parity = np.setdiff1d(np.arange(N), workers)
    res = {}
    for n_sys, n_par in scenarios:
        if n_sys > K or n_par > len(parity):
            continue
        sets = draw(workers, parity, n_sys, n_par, n_sets, np.random.default_rng([SEED, K, N, n_sys, n_par]))
        res[(n_sys, n_par)] = {name: degraded(ev.decode_errors(c, outputs, exact, sets), K, n_sys)
                               for name, c in codes.items()}
    return res


def cell(r) -> str:
    return f"{r['acc']:.3f} ± {r['acc_se']:.3f}"


def mse_cell(r) -> str:
    return f"{r['mse']:.3f}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sets", type=int, default=20)
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--quick", action="store_true", help="LeNet-5 only, K = 4, 4 sets (a smoke run)")
    ap.add_argument("--out", default=str(HERE / "results" / "systematic_accuracy.md"))
    args = ap.parse_args(argv)
    import torch
    torch.set_num_threads(1)
    models = ["lenet5"] if args.quick else args.models.split(",")
    configs = CONFIGS[:3] if args.quick else CONFIGS
    n_sets = 4 if args.quick else args.sets
    t0 = time.perf_counter()
    bundles = {m: am.load(m) for m in models}
    lines = ["# Degraded-mode accuracy of the systematic codes (issue 27)", "",
             f"Generated by `python bench/systematic_accuracy.py{' --quick' if args.quick else ''} --sets {n_sets}` "
             f"on {cpu_name()} (torch on 1 thread). Degraded mode: the requests whose systematic worker did not "
             "answer (every other request is answered exactly). RelAcc = the fraction of them whose decoded argmax "
             "is the model's own argmax, ± its standard error over (straggler set, round); MSE = the squared error "
             f"of their softmax estimate. Answering sets: every set with the given answers missing when there are at "
             f"most {n_sets} (one systematic answer missing: each input once), else {n_sets} drawn at random; every "
             "scheme on the same rounds and sets (letcc.evaluate).", ""]
    for name, b in bundles.items():
        lines.append(f"- `{name}`: {b.description}")
    lines.append("")

    # ---- 1. decoder and space, one systematic answer missing
    names = ["letcc", "letcc linear", "spline log", "bacc", "bacc log"]
    lines += ["## Decoder and space: one systematic answer missing", "",
              "Default nodes (alpha Chebyshev of the first kind, letcc.codes.systematic.parity_nodes). `letcc`: "
              "LeTCC(K, N, systematic=True), the default (pinned decoder, output_space='auto' = log space here); "
              "`letcc linear`: the same with output_space='linear'; `spline log`: the non-systematic decoder "
              "(smoothing spline through the answering nodes, local lam rule, log space) on the same nodes; "
              "`bacc`: BACC(K, N, systematic=True) (linear, the baseline); `bacc log`: Berrut in the log space.", "",
              "| model | K | N | N/K | " + " | ".join(f"{n} RelAcc" for n in names) + " | " +
              " | ".join(f"{n} MSE" for n in names) + " |",
              "|---|---|---|---|" + "---|" * (2 * len(names))]
    one = {}
    for name, b in bundles.items():
        for K, N in (SMALL + configs):
            r = study(b, K, N, schemes(K, N), [(1, 0)], n_sets)[(1, 0)]
            one[(name, K, N)] = r
            lines.append(f"| {name} | {K} | {N} | {N / K:g} | " + " | ".join(cell(r[n]) for n in names) + " | " +
                         " | ".join(mse_cell(r[n]) for n in names) + " |")
            print(lines[-1], flush=True)
    lines.append("")

    # ---- 2. where the parity nodes sit
    kinds = ["default", "pairs", "quarter", "chebyshev"]
    lines += ["## Where the parity nodes sit: one systematic answer missing, default decoder", "",
              "`default`: the default (letcc.codes.systematic.parity_nodes: interval middles up to K // 2 "
              "parity nodes, Chebyshev points beyond); `pairs`: interval middles at every N (where N - K > K - 1: "
              "Chebyshev); `quarter`: each interior parity node of the default a quarter of its interval from the "
              "input on its left; `chebyshev`: Chebyshev points of the second kind for N with the K nearest the "
              "inputs moved onto them (the default beyond K // 2).", "",
              "| model | K | N | " + " | ".join(kinds) + " |", "|---|---|---|" + "---|" * len(kinds)]
    for name, b in bundles.items():
        for K, N in configs:
            row = []
            for kind in kinds:
                r = study(b, K, N, schemes(K, N, kind, only_default=True), [(1, 0)], n_sets)
                row.append(cell(r[(1, 0)]["letcc"]))
            lines.append(f"| {name} | {K} | {N} | " + " | ".join(row) + " |")
            print(lines[-1], flush=True)
    lines.append("")

    # ---- 3. the pinned decoder's lam (LeNet-5)
    lams = [0.0, 1e-9, 1e-6, 1e-4, 1e-2]
    lines += ["## The pinned decoder's lam_dec: LeNet-5, one systematic answer missing", "",
              "| K | N | " + " | ".join(f"lam {v:g}" for v in lams) + " |", "|---|---|" + "---|" * len(lams)]
    b = bundles.get("lenet5") or next(iter(bundles.values()))
    for K, N in configs:
        r = study(b, K, N, schemes(K, N, lams=lams), [(1, 0)], n_sets)[(1, 0)]
        lines.append(f"| {K} | {N} | " + " | ".join(cell(r[f'lam={v:g}']) for v in lams) + " |")
        print(lines[-1], flush=True)
    lines.append("")

    # ---- 4. more answers missing
    lines += ["## More answers missing: systematic LeTCC (default) against systematic BACC", "",
              "Columns: (systematic, parity) answers missing, drawn at random; RelAcc on the missing systematic "
              "requests, LeTCC / BACC.", "",
              "| model | K | N | " + " | ".join(f"{s}+{p}" for s, p in SCENARIOS) + " |",
              "|---|---|---|" + "---|" * len(SCENARIOS)]
    for name, b in bundles.items():
        for K, N in configs:
            codes = {"letcc": LeTCC(K, N, systematic=True), "bacc": BACC(K, N, systematic=True)}
            r = study(b, K, N, codes, SCENARIOS, n_sets)
            lines.append(f"| {name} | {K} | {N} | " + " | ".join(
                f"{r[s]['letcc']['acc']:.3f} / {r[s]['bacc']['acc']:.3f}" if s in r else "-" for s in SCENARIOS) + " |")
            print(lines[-1], flush=True)
    lines += ["", f"Total {time.perf_counter() - t0:.0f} s.", ""]
    Path(args.out).write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
