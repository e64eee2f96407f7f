"""Why LeTCC loses to BACC where it does: RepVGG RelAcc at S=0, RepVGG on foolbox CIFAR-10."""
import sys, json, time
import numpy as np, torch
torch.set_num_threads(1)
from letcc.experiments import load_dataset
from letcc.experiments.sweep import prepare_model
from letcc.experiments.evaluation import compare

f, info = prepare_model("repvgg", progress=False)
out = {}
# 1. RepVGG on Fashion-MNIST: RelAcc vs agreement, more images (1000 = 125 rounds of K=8)
Xc, _ = load_dataset("fashion-mnist", "train", limit=64)
for n in (256, 1000):
    X, y = load_dataset("fashion-mnist", "test", limit=n)
    res = compare(f, X, y, 8, 24, [0, 2, 8], lam="tuned", calib=Xc, n_draws=20, seed=0, progress=False)
    for r in res:
        L, B = r.schemes["letcc"], r.schemes["bacc"]
        print(f"fashion n={n} S={r.S}: mse {L.mse:.4e} {B.mse:.4e} relacc {L.rel_acc:.4f} {B.rel_acc:.4f} "
              f"agree {L.agreement:.4f} {B.agreement:.4f} lam {r.letcc_lam['lam_enc']}/{r.letcc_lam['lam_dec']}", flush=True)
# 2. RepVGG on foolbox CIFAR-10 (20 images, K=4, N=12): which lam?
X, y = load_dataset("foolbox-cifar10", "test")
Xfm, _ = load_dataset("fashion-mnist", "train", limit=32)
for name, lam, calib in [("tuned on fashion-mnist", "tuned", Xfm), ("ORACLE tuned on the 20 test images", "tuned", X),
                         ("auto", "auto", None), ("lam 0", 0.0, None), ("lam 1e-6", 1e-6, None)]:
    res = compare(f, X, y, 4, 12, list(range(7)), lam=lam, calib=calib, n_draws=20, seed=0, progress=False)
    red = [r.improvement["mse_reduction_pct"] for r in res]
    print(f"cifar {name}: mse reduction per S {[round(v, 1) for v in red]} mean {np.mean(red):.1f}; "
          f"agree L {[round(r.schemes['letcc'].agreement, 3) for r in res]} B {[round(r.schemes['bacc'].agreement, 3) for r in res]}; "
          f"lam_dec {[r.letcc_lam['lam_dec'] for r in res]}", flush=True)
# softmax statistics: how peaked are the outputs? (a model trained on grey Fashion-MNIST, shown CIFAR)
for dname in ("fashion-mnist", "foolbox-cifar10"):
    Xd, _ = load_dataset(dname, "test", limit=20)
    p = f(Xd.numpy())
    print(f"{dname}: mean max prob {p.max(1).mean():.3f}, mean entropy {(-(p*np.log(p+1e-12)).sum(1)).mean():.3f}, "
          f"distinct argmax {len(set(p.argmax(1).tolist()))}")
