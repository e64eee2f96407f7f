"""The clean-round test calibrated on the model's own honest rounds against the synthetic calibration (issue 28).

LeTCC(K, N, adversaries=E)'s clean-round test takes its thresholds from synthetic honest rounds
through the code's own encoder (letcc.codes.clean_round). bench/results/adversarial.md found a
held-out classifier (cnn_fashion, as trained on that machine) whose honest rounds raise an alarm in
1.6% of them at the threshold for 0.1%. ``LeTCC.calibrate_clean_round(outputs)`` takes the same
quantiles over the model's own honest rounds instead. On bench/adversarial.py's models and rounds
(K = 8, N = 24, S = 2, 22 answers, the same straggler sets and adversary draws), two arms decode:

* synthetic        LeTCC(8, 24, adversaries=E), the default
* own rounds       the same code after calibrate_clean_round on 400 honest rounds the evaluation
                   never sees, each of K images drawn from a pool of images not evaluated
                   (cnn_fashion's 240 calibration images, its Bundle's X_calib; the other models'
                   test images after the 800 evaluated: 200 of MNIST's, 1600 of Fashion-MNIST's),
                   each round scored from 100 answering sets: 40,000 statistics (the pair test's
                   quantile at false_alarm / 2 = 5e-4 wants 20 exceedances)

E = 0 rows: no adversary (adversaries = 2); E = 1, 2: the adversaries the probability check leaves
to the locator on classifiers (relabelled classes, one-hot colluders) and, on the smooth f, every one.

Run:  env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python bench/model_calibration.py
Writes bench/results/model_calibration.md (``--out DIR`` elsewhere).
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

import letcc
from _report import markdown_table, write_report
from adversarial import ADVERSARIES, HELD_OUT, K, N, S, SEED, SMOOTH, VALID_ONES, load
from letcc.codes import LeTCC
from letcc.evaluate import coded_outputs, evaluate, exact_outputs, fixed_count_sets, group_inputs, group_labels

MODELS = ("lenet5", "repvgg_a0", "vit_small", "cnn_fashion", SMOOTH)
EVAL_IMAGES, CALIB_IMAGES, ROUNDS, SETS = 800, 1600, 400, 100


def calibration_inputs(name: str, f_images: int):
    """(K, ROUNDS, ...) inputs of honest calibration rounds: each round K
    images drawn from a pool the evaluation never sees (so a small pool
    still gives many distinct rounds), and the pool's size."""
    if name in HELD_OUT:
        import accuracy_models
        pool = accuracy_models.load(name).X_calib
    else:
        _, x, _, _ = load(name, f_images + CALIB_IMAGES)
        pool = x[f_images:]
    return pool[np.random.default_rng(SEED).integers(0, len(pool), (K, ROUNDS))], len(pool)


def run_model(name: str, draws: int):
    f, x, y, desc = load(name, EVAL_IMAGES)
    G = group_inputs(x, K)
    labels = None if y is None else group_labels(y, K, G.shape[1])
    exact = exact_outputs(f, G)
    plain = LeTCC(K, N)
    out = coded_outputs(plain, f, G)
    calib_x, pool = calibration_inputs(name, len(x))
    calib = coded_outputs(plain, f, calib_x)
    sets = {S: fixed_count_sets(N, S, draws, SEED)}
    adversaries = [a for a in ADVERSARIES if name == SMOOTH or a in VALID_ONES]
    space = "linear" if name == SMOOTH else "log"        # the classifiers answer probabilities
    own, info = {}, None
    for budget in (1, 2):                                 # one calibrated code per budget, reused by its cells
        own[budget] = LeTCC(K, N, adversaries=budget)
        t0 = time.perf_counter()
        th = own[budget].calibrate_clean_round(calib, sizes=[N - S], sets=SETS, space=space)[N - S]
        if budget == 2:
            syn = LeTCC(K, N, adversaries=2)
            info = (pool, time.perf_counter() - t0, space, syn.clean_round_threshold(N - S, space),
                    th.single, syn.clean_round_threshold(N - S, space, pair=True), th.pair)
    rows = []
    for E in (0, 1, 2):
        for adv in (adversaries if E else ["none"]):
            schemes = {"synthetic": LeTCC(K, N, adversaries=E or 2), "own rounds": own[E or 2], "plain": plain,
                       "adversary-free": plain}
            adv_models = {k: (ADVERSARIES[adv](E) if E else None) for k in schemes}
            adv_models["adversary-free"] = None
            res = evaluate(schemes, out, exact, sets, labels, adversaries=adv_models, adversary_seed=SEED)[S]
            for sch in ("synthetic", "own rounds"):
                m, err = res["schemes"][sch], res["errors"][sch]
                rows.append(dict(E=E, adversary=adv, scheme=sch, mse=m.mse, rel_acc=m.rel_acc,
                                 recall=m.flag_recall, precision=m.flag_precision,
                                 plain=res["schemes"]["plain"].mse, free=res["schemes"]["adversary-free"].mse,
                                 false_alarm=float(np.mean(err.flagged > err.flagged_true))))
        print(f"{name}: E = {E} done", flush=True)
    return rows, desc, info


def fmt(v, spec):
    return "-" if v is None else format(v, spec)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--draws", type=int, default=16, help="straggler sets per cell")
    ap.add_argument("--out", type=Path, default=None, help="folder for model_calibration.md (default bench/results)")
    args = ap.parse_args()
    letcc.set_num_threads(1)
    t0 = time.time()
    cal_rows, sections = [], []
    for name in MODELS:
        rows, desc, (rounds, secs, space, s1, o1, s2, o2) = run_model(name, args.draws)
        cal_rows.append([name, rounds, space, f"{s1:.1f}", f"{o1:.1f}", f"{s2:.1f}", f"{o2:.1f}", f"{secs:.1f}"])
        table = []
        for r in rows:
            table.append([r["adversary"], r["E"], r["scheme"], f"{100 * r['false_alarm']:.2f}%",
                          f"{100 * (r['mse'] / r['plain'] - 1):+.2f}%" if r["E"] == 0 else "-",
                          f"{r['mse'] / r['free']:.2f}x", fmt(r["recall"], ".3f"), fmt(r["precision"], ".3f"),
                          fmt(r["rel_acc"], ".4f")])
        sections.append(f"## {name}\n\n{desc}\n\n" + markdown_table(
            ["adversary", "E", "calibration", "rounds with an honest answer erased", "MSE vs plain (E = 0)",
             "MSE / adversary-free", "recall", "precision", "RelAcc"], table))
        print(sections[-1], flush=True)
    head = markdown_table(["model", "calibration image pool", "space", "synthetic threshold T (n = 22)",
                           "own-rounds threshold T", "synthetic pair threshold", "own-rounds pair threshold",
                           "calibration (s)"], cal_rows)
    write_report("model_calibration", "The clean-round test calibrated on the model's own rounds (issue 28)",
                 ["## Thresholds (false_alarm = 1e-3, 22 answers)\n\n" + head] + sections,
                 notes=f"Run time {time.time() - t0:.0f} s.\n\n" + __doc__.split("\n\n", 1)[1].rsplit("\n\nRun:", 1)[0],
                 out_dir=args.out)


if __name__ == "__main__":
    main()
