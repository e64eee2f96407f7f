import numpy as np, torch
torch.set_num_threads(2)
from letcc.experiments import load_dataset
from letcc.experiments.sweep import prepare_model
from letcc.experiments import evaluation as EV
from letcc.codes import BACC, LeTCC
f, info = prepare_model("vit_b_16", progress=False)
X, _ = load_dataset("foolbox-imagenet", "test")
K, N = 4, 8
G = EV.group_inputs(X, K)
exact = EV.exact_outputs(f, G)                       # (K, B, 1000)
p = exact.reshape(-1, 1000)
top = np.sort(p, 1)
margin = top[:, -1] - top[:, -2]
print("max prob: median %.4f; top1-top2 margin: median %.2e min %.2e max %.2e" % (np.median(top[:, -1]), np.median(margin), margin.min(), margin.max()))
print("per-coordinate spread of outputs across images: std %.2e" % p.std(0).mean())
for name, code in (("letcc", LeTCC(K, N)), ("bacc", BACC(K, N))):
    Y = EV.coded_outputs(code, f, G)
    est = np.asarray(code.decode(Y, np.arange(N))).reshape(-1, 1000)
    e = est - p
    agree = (est.argmax(1) == p.argmax(1)).mean()
    print(f"{name}: mse {np.mean((e**2).sum(1)):.2e}, max|err| median {np.median(np.abs(e).max(1)):.2e}, "
          f"agreement {agree:.2f}, err on top1-top2 difference median "
          f"{np.median(np.abs(e[np.arange(20), p.argmax(1)] - e[np.arange(20), np.argsort(p,1)[:,-2]])):.2e}, "
          f"corr(err, exact-mean) {np.corrcoef(e.ravel(), (p - p.mean(0)).ravel())[0,1]:+.2f}")
