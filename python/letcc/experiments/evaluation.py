"""The shared evaluation loop of the experiments: LeTCC against BACC on a real model.

Every experiment (``letcc sweep``, ``letcc table``, the demo's reference numbers) goes
through :func:`compare`, which guarantees the paper's protocol:

* the **same inputs** for every scheme: X (n, ...) is cut into B rounds of K inputs,
  arranged like the runtime does it, ``groups[k, b] = X[b * K + k]``;
* the **same straggler sets** for every scheme: for each S, ``n_draws`` sets of N - S
  answering workers are drawn once (``FixedCount(S)``, seeded by ``(seed, S)``) and
  every scheme decodes every round from each of them;
* **metrics on softmax outputs**, both reported: ``mse`` is the paper's MSE, the mean
  over rounds and straggler sets of (1/K) sum_k ||f(x_k) - f^(x_k)||^2 (the squared
  error of the whole probability vector); ``rel_acc`` is the accuracy of argmax f^
  against the labels divided by the base model's accuracy (argmax f) on the same
  images (letcc.metrics's definition; 1 = coding lost nothing). Also ``agreement``: the
  fraction of estimates whose argmax is the base model's own prediction (defined without
  labels, and not helped by coding errors that happen to fix a wrong prediction).

The coded round is evaluated directly in this process (encode -> f on the N coded
inputs of all B rounds -> decode from each answering set), which is what
``CodedInference`` computes with the same code objects, minus the processes. f runs
once per scheme (and per distinct LeTCC encoder), not once per straggler set:
decoding is linear in the worker outputs, so all sets reuse them.

LeTCC's smoothing parameters (``lam``):

* ``"tuned"`` (the paper's protocol: "cross-validation and grid search"): for each
  (K, N, S), :func:`letcc.tune` grid-searches (lam_enc, lam_dec) for the lowest MSE on
  *calibration* images that are disjoint from the evaluation images, with their own
  straggler draws; the pair is then fixed for the evaluation;
* ``"auto"``: LeTCC's default policy (lam_dec from the gaps of each answering set);
* a number: lam_enc = 0 and that lam_dec for every decode.
"""
from __future__ import annotations

import math
import numbers
import time
from dataclasses import asdict, dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, Union

import numpy as np

from letcc.codes import BACC, LeTCC
from letcc.stragglers import FixedCount

__all__ = [
    "SchemeMetrics", "group_inputs", "ungroup", "straggler_sets", "coded_outputs", "exact_outputs",
    "decode_metrics", "letcc_code_for", "compare", "parse_lam", "TUNE_LAM_ENC_GRID",
    "TUNE_LAM_DEC_GRID", "improvement",
]

# Grids for lam="tuned". lam_enc > 0 blurs the coded inputs at the alphas; measured to
# cost MSE on image classifiers (DESIGN.md), so only a few small values are tried.
TUNE_LAM_ENC_GRID = (0.0, 1e-8, 1e-6, 1e-4)
TUNE_LAM_DEC_GRID = tuple([0.0] + [float(v) for v in np.logspace(-10, 0, 21)])


# ---------------------------------------------------------------- arranging rounds

def group_inputs(X, K: int) -> np.ndarray:
    """X (n, ...) -> (K, B, ...) rounds of K consecutive inputs (the runtime's layout).

    A remainder of n mod K images is dropped. Returns float32 numpy.
    """
    X = _numpy(X)
    K = _positive_int(K, "K")
    if X.ndim < 1 or X.shape[0] < K:
        raise ValueError(f"need at least K = {K} inputs, got {0 if X.ndim < 1 else X.shape[0]}")
    B = X.shape[0] // K
    return np.ascontiguousarray(X[: B * K].reshape((B, K) + X.shape[1:]).swapaxes(0, 1))


def ungroup(G: np.ndarray) -> np.ndarray:
    """(K, B, ...) -> (B * K, ...), the inverse of :func:`group_inputs`."""
    return np.ascontiguousarray(G.swapaxes(0, 1)).reshape((G.shape[0] * G.shape[1],) + G.shape[2:])


def _numpy(a) -> np.ndarray:
    if hasattr(a, "detach") and hasattr(a, "cpu"):
        a = a.detach().cpu().numpy()
    return np.asarray(a)


def _positive_int(v, name: str) -> int:
    if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 1:
        raise ValueError(f"{name} must be a positive integer, got {v!r}")
    return int(v)


def _apply(f: Callable, rows: np.ndarray, chunk: int) -> np.ndarray:
    """f over rows (n, ...) in chunks -> float64 (n, m)."""
    outs = [np.asarray(f(np.ascontiguousarray(rows[i:i + chunk], dtype=np.float32)), dtype=np.float64)
            for i in range(0, rows.shape[0], chunk)]
    out = np.concatenate(outs)
    return out.reshape(rows.shape[0], -1)


def exact_outputs(f: Callable, groups: np.ndarray, chunk: int = 256) -> np.ndarray:
    """f on the uncoded inputs: (K, B, m) float64."""
    K, B = groups.shape[:2]
    return _apply(f, groups.reshape((K * B,) + groups.shape[2:]), chunk).reshape(K, B, -1)


def coded_outputs(code, f: Callable, groups: np.ndarray, chunk: int = 256) -> np.ndarray:
    """What every worker returns: f(code.encode(groups)) as (N, B, m) float64.

    The coded inputs are made in float32 like the runtime makes them from float32 images.
    """
    coded = np.asarray(code.encode(groups.astype(np.float32, copy=False)))
    N, B = coded.shape[:2]
    return _apply(f, coded.reshape((N * B,) + coded.shape[2:]), chunk).reshape(N, B, -1)


def straggler_sets(N: int, S: int, n_draws: int, seed, worst_case: bool = False) -> List[np.ndarray]:
    """``n_draws`` sorted index arrays of the N - S workers that answer (FixedCount(S)).

    Seeded by ``(seed, N, S)`` so that every scheme and every command asking for the same
    (seed, N, S) gets the same sets. With ``worst_case`` the one deterministic set that
    leaves the largest gap (repeated once).
    """
    N = _positive_int(N, "N")
    n_draws = _positive_int(n_draws, "n_draws")
    if isinstance(S, bool) or not isinstance(S, numbers.Integral) or not 0 <= S < N:
        raise ValueError(f"S must be an integer in [0, N - 1] = [0, {N - 1}], got {S!r}")
    model = FixedCount(int(S), worst_case=worst_case)
    rng = np.random.default_rng([int(seed), N, int(S)])
    if S == 0 or worst_case:
        return [model.sample(N, rng).available]
    return [model.sample(N, rng).available for _ in range(n_draws)]


# ---------------------------------------------------------------- metrics

@dataclass
class SchemeMetrics:
    """One scheme at one (K, N, S). ``mse`` on softmax outputs; ``rel_acc`` = acc / base acc."""
    scheme: str
    mse: float                      # mean over rounds and straggler sets
    mse_se: float                   # standard error of that mean (over rounds x sets)
    accuracy: Optional[float]       # accuracy of argmax f^ (None without labels)
    base_accuracy: Optional[float]  # accuracy of argmax f on the same images
    rel_acc: Optional[float]        # accuracy / base_accuracy (None when undefined)
    rounds: int                     # B
    draws: int                      # straggler sets
    agreement: Optional[float] = None  # fraction of estimates whose argmax is the base model's argmax
    lam_enc: Optional[float] = None
    lam_dec: Optional[Union[float, str]] = None

    def to_dict(self) -> dict:
        return asdict(self)


def decode_metrics(name: str, code, worker_out: np.ndarray, exact: np.ndarray, labels: Optional[np.ndarray],
                   sets: Sequence[np.ndarray]) -> SchemeMetrics:
    """Decode every round from every set; MSE and RelAcc against ``exact`` (K, B, m) and labels (K, B)."""
    K, B = exact.shape[:2]
    round_mse = np.empty((len(sets), B))
    correct = agree = 0
    base_pred = exact.argmax(-1)
    for j, avail in enumerate(sets):
        avail = np.asarray(avail, dtype=np.int64)
        est = np.asarray(code.decode(worker_out[avail], avail), dtype=np.float64)   # (K, B, m)
        d = est - exact
        round_mse[j] = np.einsum("kbm,kbm->b", d, d) / K
        pred = est.argmax(-1)
        agree += int(np.count_nonzero(pred == base_pred))
        if labels is not None:
            correct += int(np.count_nonzero(pred == labels))
    n = round_mse.size
    se = float(round_mse.std(ddof=1) / math.sqrt(n)) if n > 1 else 0.0
    acc = base = rel = None
    if labels is not None:
        acc = correct / (len(sets) * K * B)
        base = float(np.mean(exact.argmax(-1) == labels))
        rel = acc / base if base > 0 else None
    return SchemeMetrics(name, float(round_mse.mean()), se, acc, base, rel, B, len(sets),
                         agreement=agree / (len(sets) * K * B))


def improvement(letcc: SchemeMetrics, bacc: SchemeMetrics) -> dict:
    """LeTCC vs BACC: MSE reduction in % of BACC's MSE (positive = LeTCC better) and RelAcc
    difference in percentage points (positive = LeTCC better)."""
    out = {"mse_reduction_pct": None, "rel_acc_gain_pts": None}
    if bacc.mse > 0:
        out["mse_reduction_pct"] = 100.0 * (1.0 - letcc.mse / bacc.mse)
    if letcc.rel_acc is not None and bacc.rel_acc is not None:
        out["rel_acc_gain_pts"] = 100.0 * (letcc.rel_acc - bacc.rel_acc)
    return out


# ---------------------------------------------------------------- LeTCC's lam

def parse_lam(value) -> Union[str, float]:
    """'tuned' | 'auto' | a number >= 0 (lam_dec, with lam_enc = 0)."""
    if isinstance(value, str):
        v = value.strip().lower()
        if v in ("tuned", "auto"):
            return v
        try:
            value = float(v)
        except ValueError:
            raise ValueError(f"lam must be 'tuned', 'auto' or a number >= 0, got {value!r}") from None
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not (value >= 0) or math.isinf(value):
        raise ValueError(f"lam must be 'tuned', 'auto' or a finite number >= 0, got {value!r}")
    return float(value)


def letcc_code_for(lam, K: int, N: int, S: int, *, f: Optional[Callable] = None, calib=None,
                   n_draws: int = 20, seed: int = 0) -> tuple:
    """(LeTCC code, description dict) for lam 'tuned' / 'auto' / number at (K, N, S).

    'tuned' needs ``f`` and calibration images ``calib`` (n >= K, disjoint from the
    evaluation images); the straggler draws of the grid search are its own.
    """
    lam = parse_lam(lam)
    if lam == "auto":
        from letcc.codes import lam_defaults

        code = LeTCC(K, N)
        return code, {"lam": "auto", "lam_enc": code.lam_enc, "lam_dec": f"auto: {lam_defaults.DEFAULT_POLICY!r}"}
    if lam == "tuned":
        if f is None or calib is None:
            raise ValueError("lam='tuned' needs the model f and calibration images")
        from letcc.tune import tune

        calib = _numpy(calib).astype(np.float32, copy=False)
        res = tune(f, calib, K, N, stragglers=int(S), lam_enc_grid=TUNE_LAM_ENC_GRID,
                   lam_dec_grid=TUNE_LAM_DEC_GRID, n_draws=n_draws, seed=int(seed) * 7919 + 104729 + int(S))
        code = LeTCC(K, N, lam_enc=res.lam_enc, lam_dec=res.lam_dec)
        return code, {"lam": "tuned", "lam_enc": res.lam_enc, "lam_dec": res.lam_dec,
                      "calib_mse": res.mse, "calib_default_mse": res.default_mse,
                      "calib_rounds": res.n_rounds, "calib_draws": res.n_draws}
    code = LeTCC(K, N, lam_enc=0.0, lam_dec=lam)
    return code, {"lam": "fixed", "lam_enc": 0.0, "lam_dec": lam}


# ---------------------------------------------------------------- the comparison

@dataclass
class Comparison:
    """Results at one (K, N, S): metrics per scheme and LeTCC's improvement over BACC."""
    K: int
    N: int
    S: int
    schemes: Dict[str, SchemeMetrics]
    letcc_lam: dict
    improvement: dict = field(default_factory=dict)
    seconds: float = 0.0

    def to_dict(self) -> dict:
        return {"K": self.K, "N": self.N, "S": self.S,
                "schemes": {k: v.to_dict() for k, v in self.schemes.items()},
                "letcc_lam": self.letcc_lam, "improvement": self.improvement,
                "seconds": round(self.seconds, 3)}


def compare(f: Callable, X, labels, K: int, N: int, S_values: Sequence[int], *, lam="tuned",
            calib=None, n_draws: int = 20, seed: int = 0, progress: bool = True,
            desc: str = "evaluating", chunk: int = 256, worst_case: bool = False) -> List[Comparison]:
    """LeTCC vs BACC on model ``f`` (numpy (n, C, H, W) float32 -> (n, classes) softmax).

    ``X`` (n, ...) evaluation images (n // K rounds), ``labels`` (n,) or None (MSE only).
    For every S in ``S_values`` both schemes decode every round from the same ``n_draws``
    straggler sets. See the module docstring for ``lam``.
    """
    K, N = _positive_int(K, "K"), _positive_int(N, "N")
    if N < 2:
        raise ValueError(f"N must be at least 2 workers, got {N}")
    S_values = [int(s) for s in S_values]
    for s in S_values:
        if not 0 <= s < N:
            raise ValueError(f"straggler count S = {s} must be in [0, N - 1] = [0, {N - 1}]")
    lam = parse_lam(lam)
    groups = group_inputs(X, K)
    B = groups.shape[1]
    lab = None
    if labels is not None:
        lab = _numpy(labels).astype(np.int64)[: B * K].reshape(B, K).T       # (K, B) like groups
    from tqdm.auto import tqdm

    bar = tqdm(total=2 + len(S_values), desc=desc, unit="step", disable=not progress, leave=False)
    try:
        exact = exact_outputs(f, groups, chunk)
        bacc = BACC(K, N)
        bacc_out = coded_outputs(bacc, f, groups, chunk)
        bar.update(2)
        letcc_out_by_enc: Dict[float, np.ndarray] = {}
        results = []
        for S in S_values:
            t0 = time.perf_counter()
            sets = straggler_sets(N, S, n_draws, seed, worst_case=worst_case)
            code, lam_info = letcc_code_for(lam, K, N, S, f=f, calib=calib, n_draws=n_draws, seed=seed)
            if code.lam_enc not in letcc_out_by_enc:
                letcc_out_by_enc[code.lam_enc] = coded_outputs(code, f, groups, chunk)
            m_letcc = decode_metrics("letcc", code, letcc_out_by_enc[code.lam_enc], exact, lab, sets)
            m_letcc.lam_enc, m_letcc.lam_dec = lam_info["lam_enc"], lam_info["lam_dec"]
            m_bacc = decode_metrics("bacc", bacc, bacc_out, exact, lab, sets)
            results.append(Comparison(K, N, S, {"letcc": m_letcc, "bacc": m_bacc}, lam_info,
                                      improvement(m_letcc, m_bacc), time.perf_counter() - t0))
            bar.update(1)
            bar.set_postfix(S=S)
    finally:
        bar.close()
    return results
