"""Lam policies for LeTCC: the decoder's smoothing chosen from what it sees.

A lam policy answers, on every decode, "which lam_dec for this answering set?"
from what the decoder knows without looking at the outputs: the nodes of the
workers that answered (their number |F| and their largest gap g), N and K. It
also fixes lam_enc once per code. `LamPolicy` is the calibrated one:

    lam_dec = c(S) * g**3,        S = N - |F| (how many did not answer)

with c(S) a small table per (K, N), non-decreasing in S, so lam grows both
with the number of stragglers and with the holes they leave (monotone in both,
by construction). Why g**3: the Reinsch system R + lam Q^T Q balances its two
parts at lam ~ h^3 (letcc.codes.lam_defaults explains the rate argument). Why
c depends on S as well: on classifier outputs (softmax, nearly piecewise
constant along the encoder curve) the best c grows with S; a single c either
over-smooths with few stragglers or under-smooths with many (measured in
bench/results/lambda.md).

Three ways to get one:

- ``LamPolicy()`` - the uncalibrated default: c(S) from a formula in the
  fraction of missing workers S / N, fitted to the per-S optima of three
  trained models (LeNet-5/MNIST, RepVGG, a small ViT; bench/lambda_policy.py);
- ``LamPolicy.calibrate(f, X_calib, K, N, target="mse" | "relacc")`` - c(S)
  chosen per straggler count on a small calibration batch by the scheme's own
  end-to-end error (grid of c, same straggler sets for every c, a
  non-decreasing path through the grid found by dynamic programming); a few
  seconds plus N * len(X_calib) / K forward passes of f per lam_enc tried;
- ``LamPolicy.load(path)`` - a calibration saved with ``save(path)`` (JSON).

target="mse" minimises the mean squared error of the decoded outputs;
target="relacc" maximises the accuracy of their argmax (needs labels), with
the MSE breaking ties. The two disagree at large S (the MSE-best lam smooths
the outputs towards a line and blurs the argmax there; see lambda.md).

``noise="gcv"`` makes lam_dec return None: GCV on every decode's outputs
(letcc.select_lam_gcv). That is the right choice when worker outputs carry
noise of unknown size (GCV estimates it), and the wrong one for pure coding
error, where it picks lam poorly (lambda.md, "GCV"). With noise of a known
size, calibrate with ``noise_sigma``.

Per decode the policy costs one pass over the |F| nodes (largest gap) and a
table lookup; no search. lam is scipy's ``make_smoothing_spline`` lam (plain
sum in the data term, no 1/n), on nodes in [-1, 1].
"""
from __future__ import annotations

import json
import math
import numbers
import time
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from letcc.codes import LeTCC
from letcc.codes.simulate import as_batches, exact_outputs, worker_outputs
from letcc.splines import SplineSmoother
from letcc.splines._validation import as_lam
from letcc.stragglers import FixedCount, StragglerModel

__all__ = ["LamPolicy", "DEFAULT_C_GRID", "decode_scores", "straggler_sets"]

FORMAT = "letcc.LamPolicy/1"
TARGETS = ("mse", "relacc")
NOISE_MODES = ("ignore", "gcv")

# c on a quarter-decade grid, and 0 (interpolation). lam = c g^3 with g the
# largest gap on [-1, 1]; the optima measured on trained classifiers lie in
# 1e-5 .. 1e0, the grid leaves room on both sides.
DEFAULT_C_GRID = np.concatenate(([0.0], 10.0 ** np.arange(-7.0, 2.01, 0.25)))

# The uncalibrated default: log10 c = DEFAULT_LOG10_C0 + DEFAULT_SLOPE * S / N,
# capped at DEFAULT_LOG10_C_MAX. Fitted in bench/lambda_policy.py (see lambda.md).
DEFAULT_LOG10_C0 = -3.5
DEFAULT_SLOPE = 4.0
DEFAULT_LOG10_C_MAX = -1.0


# ---------------------------------------------------------------- validation

def _count(v, name: str, minimum: int = 1) -> int:
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (numbers.Integral,)):
        raise TypeError(f"{name} must be an integer, got {type(v).__name__} {v!r}")
    if v < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {v!r}")
    return int(v)


def _target(target) -> str:
    if target not in TARGETS:
        raise ValueError(f"target must be one of {TARGETS}, got {target!r}")
    return target


def _noise_mode(noise) -> str:
    if noise not in NOISE_MODES:
        raise ValueError(f"noise must be one of {NOISE_MODES}, got {noise!r}")
    return noise


def _c_values(values, name: str) -> list[float]:
    out = []
    for i, v in enumerate(values):
        try:
            out.append(as_lam(v))
        except (TypeError, ValueError) as exc:
            raise type(exc)(f"{name}[{i}]: {exc}") from None
    return out


# ---------------------------------------------------------------- the policy

class LamPolicy:
    """lam_dec = c(S) * g**3 (S = N - |F| missing workers, g the largest gap
    between answering nodes) and a fixed lam_enc; see the module docstring.

    Parameters
    ----------
    tables : dict, optional
        {(K, N): {"S": [S_0 < S_1 < ...], "c": [c_0 <= c_1 <= ...], "lam_enc": float}}:
        calibrated c per straggler count. A count between two calibrated ones
        takes the lower one's c, a count above the last the last c, below the
        first the first c. (K, N) pairs not in the table use the default
        formula. Normally made by `calibrate` or `load`.
    log10_c0, slope, log10_c_max : float
        The uncalibrated formula log10 c = min(log10_c0 + slope * S / N, log10_c_max).
    lam_enc : float
        Encoder lam for (K, N) pairs without a table (default 0: any encoder
        smoothing moved the coded inputs off the inputs and cost MSE in every
        measurement, DESIGN.md / rates.md).
    noise : 'ignore' or 'gcv'
        'gcv': lam_dec returns None, i.e. GCV per decode (noisy workers).
    target : 'mse' or 'relacc'
        What the tables were calibrated for (informational; recorded in save()).
    """

    def __init__(self, tables=None, *, log10_c0: float = DEFAULT_LOG10_C0, slope: float = DEFAULT_SLOPE,
                 log10_c_max: float = DEFAULT_LOG10_C_MAX, lam_enc: float = 0.0, noise: str = "ignore",
                 target: str = "mse", report: dict | None = None):
        for name, v in (("log10_c0", log10_c0), ("slope", slope), ("log10_c_max", log10_c_max)):
            if not isinstance(v, numbers.Real) or isinstance(v, bool) or not math.isfinite(v):
                raise ValueError(f"{name} must be a finite real number, got {v!r}")
        if slope < 0:
            raise ValueError(f"slope must be >= 0 (more stragglers, more smoothing), got {slope!r}")
        self.log10_c0, self.slope, self.log10_c_max = float(log10_c0), float(slope), float(log10_c_max)
        self._lam_enc = as_lam(lam_enc)
        self.noise = _noise_mode(noise)
        self.target = _target(target)
        self.tables: dict[tuple[int, int], dict] = {}
        for key, table in (tables or {}).items():
            self.tables[self._key(key)] = self._checked_table(key, table)
        # (K, N) -> list indexed by S of c (filled lazily; the per-decode lookup)
        self._lookup: dict[tuple[int, int], list[float]] = {}
        self.report = report or {}

    # -- construction helpers ------------------------------------------------

    @staticmethod
    def _key(key) -> tuple[int, int]:
        try:
            K, N = key
        except (TypeError, ValueError):
            raise TypeError(f"table keys must be (K, N) pairs, got {key!r}") from None
        return _count(K, "K"), _count(N, "N")

    @staticmethod
    def _checked_table(key, table) -> dict:
        try:
            S, c = list(table["S"]), table["c"]
        except (TypeError, KeyError):
            raise ValueError(f"table {key!r} must be a dict with 'S' and 'c' lists, got {table!r}") from None
        S = [_count(s, f"table {key!r} S", 0) for s in S]
        c = _c_values(c, f"table {key!r} c")
        if not S or len(S) != len(c):
            raise ValueError(f"table {key!r}: 'S' and 'c' must be non-empty and of equal length, "
                             f"got {len(S)} and {len(c)}")
        if any(b <= a for a, b in zip(S, S[1:])):
            raise ValueError(f"table {key!r}: 'S' must be strictly increasing, got {S}")
        if any(b < a for a, b in zip(c, c[1:])):
            raise ValueError(f"table {key!r}: 'c' must be non-decreasing in S (more stragglers, "
                             f"more smoothing), got {c}")
        lam_enc = as_lam(table.get("lam_enc", 0.0))
        return {"S": S, "c": c, "lam_enc": lam_enc}

    # -- the protocol LeTCC calls --------------------------------------------

    def c(self, S: int, N: int, K: int) -> float:
        """The factor c in lam_dec = c * g**3 with S of N workers missing."""
        table = self._lookup.get((K, N))
        if table is None:
            table = self._lookup[(K, N)] = self._build_lookup(K, N)
        return table[S] if S < len(table) else table[-1]

    def _build_lookup(self, K: int, N: int) -> list[float]:
        t = self.tables.get((K, N))
        if t is None:
            return [self.default_c(S, N) for S in range(N)]
        out = []
        for S in range(N):
            i = int(np.searchsorted(t["S"], S, side="right")) - 1
            out.append(t["c"][max(i, 0)])
        return out

    def default_c(self, S: int, N: int) -> float:
        """The uncalibrated formula: 10 ** min(log10_c0 + slope * S / N, log10_c_max)."""
        return 10.0 ** min(self.log10_c0 + self.slope * S / N, self.log10_c_max)

    def lam_dec(self, beta_available: np.ndarray, N: int, K: int) -> float | None:
        """lam for the decoder of the workers at nodes ``beta_available``
        (ascending), or None (GCV) when noise='gcv'."""
        if self.noise == "gcv":
            return None
        n = beta_available.shape[0]
        if n < 3:
            return 0.0  # a constant or a line: lam changes nothing
        g = float((beta_available[1:] - beta_available[:-1]).max())
        return self.c(N - n, N, K) * g * g * g

    def lam_enc(self, K: int, N: int) -> float:
        t = self.tables.get((K, N))
        return self._lam_enc if t is None else t["lam_enc"]

    def code(self, K: int, N: int, **kwargs) -> LeTCC:
        """A LeTCC(K, N) that uses this policy for both lams."""
        return LeTCC(K, N, lam_enc=self.lam_enc(K, N), lam_dec=self, **kwargs)

    # -- persistence ---------------------------------------------------------

    def to_dict(self) -> dict:
        return {
            "format": FORMAT,
            "target": self.target,
            "noise": self.noise,
            "default": {"log10_c0": self.log10_c0, "slope": self.slope, "log10_c_max": self.log10_c_max,
                        "lam_enc": self._lam_enc},
            "tables": [{"K": K, "N": N, "S": t["S"], "c": t["c"], "lam_enc": t["lam_enc"]}
                       for (K, N), t in sorted(self.tables.items())],
            "report": self.report,
        }

    @classmethod
    def from_dict(cls, d: dict) -> "LamPolicy":
        if not isinstance(d, dict) or d.get("format") != FORMAT:
            got = d.get("format") if isinstance(d, dict) else type(d).__name__
            raise ValueError(f"not a saved LamPolicy (expected format {FORMAT!r}, got {got!r})")
        dflt = d.get("default", {})
        tables = {(t["K"], t["N"]): t for t in d.get("tables", [])}
        return cls(tables, log10_c0=dflt.get("log10_c0", DEFAULT_LOG10_C0),
                   slope=dflt.get("slope", DEFAULT_SLOPE), log10_c_max=dflt.get("log10_c_max", DEFAULT_LOG10_C_MAX),
                   lam_enc=dflt.get("lam_enc", 0.0), noise=d.get("noise", "ignore"),
                   target=d.get("target", "mse"), report=d.get("report", {}))

    def save(self, path) -> None:
        """Write the policy as JSON (tables, default formula, calibration report)."""
        Path(path).write_text(json.dumps(self.to_dict(), indent=1, allow_nan=False))

    @classmethod
    def load(cls, path) -> "LamPolicy":
        return cls.from_dict(json.loads(Path(path).read_text()))

    def __eq__(self, other) -> bool:
        return isinstance(other, LamPolicy) and self.to_dict() == other.to_dict()

    def __repr__(self) -> str:
        cal = ", ".join(f"(K={K}, N={N})" for K, N in sorted(self.tables)) or "none"
        return (f"LamPolicy(calibrated for {cal}; default log10 c = min({self.log10_c0:g} + "
                f"{self.slope:g} S/N, {self.log10_c_max:g}); target={self.target!r}, noise={self.noise!r})")

    # -- calibration ---------------------------------------------------------

    @classmethod
    def calibrate(cls, f: Callable, X_calib, K: int, N: int, *, target: str = "mse", labels=None,
                  stragglers=None, n_draws: int = 16, seed=0, c_grid=None, lam_enc_grid=(0.0,),
                  noise_sigma: float = 0.0, monotone: bool = True, into: "LamPolicy | None" = None,
                  alpha=None, beta=None) -> "LamPolicy":
        """Calibrate c(S) (and lam_enc) for (K, N) on a calibration batch.

        Parameters
        ----------
        f : callable
            The workers' function, batched: (n, ...) -> (n, ...) (e.g. a
            letcc.experiments LoadedModel giving softmax outputs).
        X_calib : array (n, ...)
            Calibration samples, n // K rounds of K (a remainder is dropped).
            Keep them apart from the data you evaluate on.
        target : 'mse' or 'relacc'
            Minimise the decoded outputs' MSE, or maximise their argmax
            accuracy against ``labels`` (MSE breaks ties).
        labels : (n,) ints, needed for target='relacc'.
        stragglers : None, int, sequence of ints or StragglerModel(s)
            Which answering sets to calibrate on. None: every S = 0 .. N // 2
            (random sets); an int S_max: 0 .. S_max; a sequence of counts; a
            letcc.stragglers model (or several), whose draws are grouped by
            their number of stragglers. ``n_draws`` sets per count / model.
        seed : seeds the straggler sets (and the noise). Same seed, same policy.
        c_grid : candidate c values (default DEFAULT_C_GRID: 0 and 1e-7 .. 1e2).
        lam_enc_grid : encoder lams to try (each costs one pass of f over the
            coded calibration batch); default (0.0,).
        noise_sigma : Gaussian noise added to the worker outputs (known noise).
        monotone : force c(S) non-decreasing (default; the best path through
            the grid under that constraint, by dynamic programming).
        into : add this (K, N) table to a copy of an existing policy instead of
            a new default one (one policy for several (K, N) pairs).
        """
        t0 = time.perf_counter()
        K, N = _count(K, "K"), _count(N, "N")
        target = _target(target)
        n_draws = _count(n_draws, "n_draws")
        grid = np.array(_c_values(DEFAULT_C_GRID if c_grid is None else c_grid, "c_grid"))
        enc_grid = _c_values(lam_enc_grid, "lam_enc_grid")
        if grid.size == 0 or len(enc_grid) == 0:
            raise ValueError("c_grid and lam_enc_grid must not be empty")
        noise_sigma = float(noise_sigma)
        if not math.isfinite(noise_sigma) or noise_sigma < 0:
            raise ValueError(f"noise_sigma must be finite and >= 0, got {noise_sigma!r}")
        batches = as_batches(X_calib, K)
        lab = None
        if target == "relacc":
            if labels is None:
                raise ValueError("target='relacc' needs the calibration labels (labels=...)")
            lab = _round_labels(labels, batches.shape[0], K)
        rng = np.random.default_rng(seed)
        by_count = straggler_sets(stragglers, N, n_draws, rng)
        noise_seed = int(rng.integers(2**31))
        counts = sorted(by_count)
        exact = exact_outputs(f, batches)
        t_fwd = time.perf_counter() - t0

        results = []  # per lam_enc: (mse (S, C), err_rate (S, C) or None)
        fwd_seconds = t_fwd
        for le in enc_grid:
            code = LeTCC(K, N, lam_enc=le, lam_dec=0.0, alpha=alpha, beta=beta)
            t1 = time.perf_counter()
            outputs = worker_outputs(code, f, batches)
            fwd_seconds += time.perf_counter() - t1
            mse = np.empty((len(counts), grid.size))
            err = np.empty_like(mse) if lab is not None else None
            for i, S in enumerate(counts):
                sc = decode_scores(code.beta, code.alpha, outputs, exact, by_count[S],
                                   lambda g: grid * g ** 3, labels=lab, noise_sigma=noise_sigma,
                                   noise_seed=noise_seed)
                mse[i] = sc["mse"]
                if err is not None:
                    err[i] = 1.0 - sc["acc"]
            results.append((mse, err))

        # Score each (S, c): the MSE relative to the best at that S (every count
        # weighs the same); for relacc the error rate, with the relative MSE as
        # a tie-breaker far below one image's worth of accuracy.
        best_mse = np.min([m for m, _ in results], axis=0).min(axis=1, keepdims=True)
        best_mse = np.where(best_mse > 0, best_mse, 1.0)
        choice = None
        for e, (mse, err) in enumerate(results):
            cost = mse / best_mse if err is None else err + 1e-6 * mse / best_mse
            path, total = _best_path(cost, monotone)
            if choice is None or total < choice[2] - 1e-12:
                choice = (e, path, total)
        e, path, _ = choice
        mse, err = results[e]
        table = {"S": counts, "c": [float(grid[j]) for j in path], "lam_enc": enc_grid[e]}
        seconds = time.perf_counter() - t0
        report = {
            "K": K, "N": N, "target": target, "seed": seed if isinstance(seed, int) else None,
            "rounds": int(batches.shape[0]), "draws_per_count": n_draws, "noise_sigma": noise_sigma,
            "c_grid": [float(c) for c in grid], "lam_enc_grid": enc_grid, "counts": counts,
            "mse": mse.tolist(), "err_rate": None if err is None else err.tolist(),
            "per_count_best_c": [float(grid[j]) for j in np.argmin(mse if err is None else
                                                                    err + 1e-6 * mse / best_mse, axis=1)],
            "seconds": round(seconds, 3), "forward_seconds": round(fwd_seconds, 3),
        }
        base = into.to_dict() if into is not None else cls(target=target).to_dict()
        policy = cls.from_dict(base)
        policy.tables[(K, N)] = cls._checked_table((K, N), table)
        policy._lookup.clear()
        policy.target = target
        policy.report = dict(policy.report)
        policy.report[f"{K},{N}"] = report
        return policy


# ---------------------------------------------------------------- scoring

def _round_labels(labels, B: int, K: int) -> np.ndarray:
    if hasattr(labels, "detach"):
        labels = labels.detach().cpu().numpy()
    lab = np.asarray(labels)
    if lab.ndim != 1 or lab.dtype.kind not in "iu":
        raise TypeError(f"labels must be a 1-D array of integer classes, got {lab.dtype} {lab.shape}")
    if lab.shape[0] < B * K:
        raise ValueError(f"labels has {lab.shape[0]} entries, fewer than the {B * K} calibration samples")
    return lab[: B * K].reshape(B, K)


def straggler_sets(stragglers, N: int, n_draws: int, rng: np.random.Generator) -> dict[int, list[np.ndarray]]:
    """{S: [sorted answering index arrays]} for the calibration (see LamPolicy.calibrate).
    Sets with nobody answering are dropped (no estimate to score)."""
    if stragglers is None:
        stragglers = N // 2
    if isinstance(stragglers, (numbers.Integral,)) and not isinstance(stragglers, bool):
        if not 0 <= stragglers < N:
            raise ValueError(f"stragglers = {stragglers} must be in 0 .. N - 1 = {N - 1}")
        stragglers = list(range(int(stragglers) + 1))
    if isinstance(stragglers, StragglerModel):
        stragglers = [stragglers]
    if isinstance(stragglers, (str, bytes)) or not isinstance(stragglers, Sequence) or len(stragglers) == 0:
        raise TypeError(f"stragglers must be None, a count, a non-empty sequence of counts or "
                        f"letcc.stragglers models, got {stragglers!r}")
    out: dict[int, list[np.ndarray]] = {}
    for item in stragglers:
        if isinstance(item, numbers.Integral) and not isinstance(item, bool):
            if not 0 <= item < N:
                raise ValueError(f"straggler count {item} must be in 0 .. N - 1 = {N - 1}")
            item = FixedCount(int(item))
        if not isinstance(item, StragglerModel):
            raise TypeError(f"stragglers entries must be counts or letcc.stragglers models, got {item!r}")
        for _ in range(n_draws):
            avail = np.sort(np.asarray(item.sample(N, rng).available, dtype=np.int64))
            if avail.size:
                out.setdefault(N - int(avail.size), []).append(avail)
    if not out:
        raise ValueError(f"{stragglers!r} left nobody answering in every draw")
    return out


def decode_scores(beta: np.ndarray, alpha: np.ndarray, outputs: np.ndarray, exact: np.ndarray,
                  sets: Sequence[np.ndarray], lams: Callable[[float], np.ndarray] | Callable,
                  labels: np.ndarray | None = None, noise_sigma: float = 0.0, noise_seed: int = 0,
                  operator: Callable | None = None) -> dict:
    """Mean end-to-end error of LeTCC's decoder over rounds and answering sets,
    for several lam per set at once.

    outputs (B, N, ...) worker outputs of every round, exact (B, K, ...) f on
    the inputs; ``lams(g)`` -> array of lam values to score for a set whose
    largest gap is g (all rounds are decoded together: one (K, |F|) operator per
    set and lam). ``operator(F_nodes, lam)`` replaces the spline decoder by any
    (K, |F|) matrix (e.g. BACC's). Returns {"mse": (L,), "acc": (L,) or None}:
    MSE = mean over rounds, sets and the K inputs of the squared norm of the
    error; acc = fraction of argmax matches with labels (B, K).
    """
    B = outputs.shape[0]
    Y = outputs.reshape(B, outputs.shape[1], -1)
    E = exact.reshape(B, exact.shape[1], -1)
    total_mse, total_acc = None, None
    for j, F in enumerate(sets):
        bF = beta[F]
        YF = Y[:, F, :]
        if noise_sigma > 0:
            YF = YF + noise_sigma * np.random.default_rng([noise_seed, j]).standard_normal(YF.shape)
        g = float(np.max(np.diff(bF))) if bF.size > 1 else 2.0
        lam_values = np.atleast_1d(lams(g))
        mse = np.empty(lam_values.size)
        acc = np.empty(lam_values.size) if labels is not None else None
        for i, lam in enumerate(lam_values):
            A = operator(bF, lam) if operator is not None else SplineSmoother(bF, alpha, lam=float(lam)).matrix()
            est = np.einsum("kf,bfm->bkm", A, YF)
            d = est - E
            mse[i] = np.einsum("bkm,bkm->", d, d) / (B * E.shape[1])
            if acc is not None:
                acc[i] = float(np.mean(est.argmax(-1) == labels))
        total_mse = mse if total_mse is None else total_mse + mse
        if acc is not None:
            total_acc = acc if total_acc is None else total_acc + acc
    n = len(sets)
    return {"mse": total_mse / n, "acc": None if total_acc is None else total_acc / n}


def _best_path(cost: np.ndarray, monotone: bool) -> tuple[list[int], float]:
    """Grid index per row minimising the summed cost; with monotone=True the
    indices must be non-decreasing along the rows (dynamic programming)."""
    if not monotone:
        path = [int(j) for j in np.argmin(cost, axis=1)]
        return path, float(cost[np.arange(len(path)), path].sum())
    S, C = cost.shape
    acc = cost[0].copy()
    back = np.zeros((S, C), dtype=np.int64)
    for i in range(1, S):
        # best predecessor with index <= j: running minimum of acc
        run_idx = np.zeros(C, dtype=np.int64)
        best = 0
        for j in range(1, C):
            if acc[j] < acc[best]:
                best = j
            run_idx[j] = best
        back[i] = run_idx
        acc = cost[i] + acc[run_idx]
    j = int(np.argmin(acc))
    total = float(acc[j])
    path = [j]
    for i in range(S - 1, 0, -1):
        j = int(back[i, j])
        path.append(j)
    return path[::-1], total
