"""foolbox CIFAR-10 on RepVGG: where do LeTCC's losses come from? Split straggler sets by whether an end worker (beta = -1 or 1) is missing."""
import numpy as np, torch
torch.set_num_threads(1)
from letcc.experiments import load_dataset
from letcc.experiments.sweep import prepare_model
from letcc.experiments import evaluation as EV
from letcc.codes import BACC, LeTCC

f, info = prepare_model("repvgg", progress=False)
for dname, K, N, n, Ss in (("foolbox-cifar10", 4, 12, 20, (3, 4, 5)), ("fashion-mnist", 4, 12, 200, (3, 4, 5)), ("fashion-mnist", 8, 24, 256, (8, 10, 12))):
    X, y = load_dataset(dname, "test", limit=n)
    G = EV.group_inputs(X, K)
    exact = EV.exact_outputs(f, G)
    codes = {"letcc": LeTCC(K, N), "bacc": BACC(K, N)}
    outs = {k: EV.coded_outputs(c, f, G) for k, c in codes.items()}
    for S in Ss:
        sets = EV.straggler_sets(N, S, 200, seed=0)
        per = {k: [] for k in codes}
        for s in sets:
            for k, c in codes.items():
                est = np.asarray(c.decode(outs[k][s], s))
                per[k].append(float(((est - exact) ** 2).sum(-1).mean()))
        L, B = np.array(per["letcc"]), np.array(per["bacc"])
        edge = np.array([not (0 in s and N - 1 in s) for s in sets])
        def r(m): return 100 * (1 - L[m].mean() / B[m].mean()) if m.any() else float("nan")
        print(f"{dname} K={K} N={N} S={S}: all {r(np.ones_like(edge)):+.1f}% | end worker missing ({edge.sum()} sets) {r(edge):+.1f}% | both ends answer ({(~edge).sum()}) {r(~edge):+.1f}%"
              f" | mse scale {B.mean():.2e}", flush=True)
