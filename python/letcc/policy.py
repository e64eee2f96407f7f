"""Lam policies for LeTCC: the decoder's smoothing chosen from what it sees.

A lam policy answers, on every decode, "which lam_dec for this answering
set?" from what the decoder knows before looking at the outputs: the nodes of
the workers that answered b_1 < ... < b_m (on [-1, 1]), the points alpha_k
where the decoder is evaluated, N and K.

Local lams (the default): one lam per alpha_k,

    h_k = length of the interval of [-1, b_1, ..., b_m, 1] that holds alpha_k
    x_k = how far alpha_k lies beyond [b_1, b_m] (0 inside)
    lam_k = c * max(h_k, a * x_k)^3

and the estimate of f(x_k) is the smoothing spline with lam_k, evaluated at
alpha_k (LeTCC applies the K rows as one dense operator, cached per set).

Global lams (local=False; the default before): one lam for the whole decode,

    g = max_i (b_{i+1} - b_i)          the largest hole stragglers left inside
    d = max(b_1 + 1, 1 - b_m)          how far the outermost answer is from the end
    lam_dec = max(psi(g), k_end * d^3)

with psi non-decreasing and k_end >= 0. In both, removing workers only widens
the intervals (and g, d, x_k), so more stragglers never give less smoothing
(monotone by construction, whatever the calibration found).

Why ^3: the Reinsch system R + lam Q^T Q balances its two parts at lam ~ h^3
for spacing h, and a smoothing spline is locally a kernel smoother of
bandwidth ~ (lam * local spacing)^(1/4): lam = c h^3 keeps the bandwidth a
fixed multiple of the spacing (letcc.codes.lam_defaults has the rate
argument). Why local: that holds only where the spacing is h. Chebyshev
worker nodes are dense near the ends and sparse in the middle, and
stragglers open holes anywhere; one lam is a compromise between them. Per
output point the best lam differs by ~3 orders of magnitude between the
middle and the outermost alphas, and the local rule gains 5-10 points of
improvement over BACC on every model and pair measured (lambda.md). Why the
end term: a missing *end* worker makes the decoder extrapolate linearly to
the outer alphas, which sit where the inputs along the encoder curve are
densest; those points want far more smoothing than an interior hole as wide.

Three ways to get a policy:

- ``LamPolicy()``, the uncalibrated default: lam_k = c0 * max(h_k, a x_k)^3
  with c0 = LOCAL_C0, a = LOCAL_END_FACTOR (``LamPolicy(local=False)``: the
  global c0 * max(g, a d)^3, DEFAULT_C0 and END_FACTOR), fitted to three
  trained models (LeNet-5/MNIST, RepVGG, a small ViT) and two (K, N) pairs
  (bench/lambda_policy.py --fit-default, lambda.md); the same rule as
  LeTCC's lam_dec='auto' (letcc.codes.lam_defaults.LocalGapLam);
- ``LamPolicy.calibrate(f, X_calib, K, N, target="mse" | "relacc")``: decode
  a small calibration batch from many straggler sets (the same sets for every
  lam) and score the errors on a grid of lam. Local: each output point's
  error depends on its own lam only, so every (c, a, lam_enc) of a grid is
  scored from the per-point errors (interpolated in log lam), the best few
  are decoded exactly, the best of those wins. Global: bin the sets by g,
  pick one lam per bin, non-decreasing across bins (dynamic programming over
  the grid), for each candidate k_end (and lam_enc); keep the best. A few
  seconds, plus one pass of f over the coded calibration batch per lam_enc
  tried;
- ``LamPolicy.load(path)``: a policy saved with ``save(path)`` (JSON).

target="mse" minimises the decoded outputs' mean squared error (each straggler
count weighted equally); target="relacc" maximises their argmax accuracy
against labels (MSE breaks ties). They disagree at large S: smoothing pulls an
estimate towards its neighbours' outputs, which lowers the MSE but moves the
argmax (measured in lambda.md).

``noise="gcv"`` makes lam_dec return None, i.e. GCV on each decode's outputs
(letcc.select_lam_gcv): right when worker outputs carry noise of unknown size
(GCV estimates it), wrong for pure coding error, where it picks lam poorly
(lambda.md, "GCV"). With noise of a known size, calibrate with ``noise_sigma``.

Per decode the policy costs a dict lookup for an answering set it has seen
before, else one pass over the |F| nodes (and a bisection per alpha_k, or in
a short table): no search. Policies calibrated with custom alpha/beta assume the code uses the
same nodes (tables are keyed by (K, N) only). lam is scipy's ``make_smoothing_spline`` lam (plain sum
in the data term, no 1/n), on nodes in [-1, 1].
"""
from __future__ import annotations

import bisect
import functools
import json
import math
import numbers
import time
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from letcc.codes import LeTCC
from letcc.codes.lam_defaults import local_gaps
from letcc.codes.letcc_code import spline_decoder_matrix
from letcc.codes.simulate import as_batches, exact_outputs, worker_outputs
from letcc.nodes import chebyshev_first_kind
from letcc.splines._validation import as_lam, as_lams
from letcc.stragglers import FixedCount, StragglerModel

__all__ = ["LamPolicy", "gap_and_end", "effective_gap", "local_gaps", "DEFAULT_C0", "END_FACTOR",
           "LOCAL_C0", "LOCAL_END_FACTOR", "DEFAULT_LAM_GRID", "decode_errors", "straggler_sets"]

FORMAT = "letcc.LamPolicy/2"
OLD_FORMATS = ("letcc.LamPolicy/1",)  # one lam per decode only (local = False)
TARGETS = ("mse", "relacc")
NOISE_MODES = ("ignore", "gcv")

# The uncalibrated default lam = DEFAULT_C0 * max(g, END_FACTOR * d)^3: the best pair of a grid (c0 in quarter decades, a in
# 0, 4, 8, 12) scored on the calibration images of LeNet-5, RepVGG and the
# small ViT at (K, N) = (8, 16) and (12, 36), S = 0 .. N/2 (bench/lambda_policy.py
# --fit-default; lambda.md, "Fitting the uncalibrated default"). Each model
# alone picked c0 = 5.6e-4 (LeNet-5: 5.6e-4 and 1e-3 tie) and a = 8.
DEFAULT_C0 = 5.6e-4
END_FACTOR = 8.0
# The local default lam_k = LOCAL_C0 * max(h_k, LOCAL_END_FACTOR * x_k)^3 (one lam
# per alpha_k, letcc.codes.lam_defaults.local_gaps): the best pair of a grid
# scored the same way (lambda.md, "Fitting the uncalibrated default").
LOCAL_C0 = 5.6e-3
LOCAL_END_FACTOR = 16.0
# Calibration candidates for the local formula: c in quarter decades, a in
# octaves (measured optima: c 3e-3 .. 1e-2, a 8 .. 32).
LOCAL_C_GRID = 10.0 ** np.arange(-4.0, 0.01, 0.25)
LOCAL_END_GRID = (0.0, 4.0, 8.0, 16.0, 32.0)
# How many of the candidates ranked by interpolated errors are decoded exactly.
LOCAL_SHORTLIST = 6

# Candidate lam_dec for calibration: 0 (interpolation) and 1e-10 .. 1e1 in
# quarter decades. Measured optima on trained classifiers lie in 1e-7 .. 1e-1.
DEFAULT_LAM_GRID = np.concatenate(([0.0], 10.0 ** np.arange(-10.0, 1.01, 0.25)))
# Width of a calibration bin in log10(g) (a factor 1.26), and the fewest
# straggler sets a bin must hold (sparse inner bins join a neighbour, sparse
# outer ones are left to the g^3 rule beyond the table's edges).
BIN_WIDTH = 0.1
MIN_SETS_PER_BIN = 6
MEMO_SIZE = 4096
# Candidate k_end for calibration: 0 (no end term) and the default's c0 * 8^3
# times 10^-1.5 .. 10^1 in half decades.
END_K_GRID = np.concatenate(([0.0], DEFAULT_C0 * END_FACTOR ** 3 * 10.0 ** np.arange(-1.5, 1.01, 0.5)))


# ---------------------------------------------------------------- validation

def _count(v, name: str, minimum: int = 1) -> int:
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, numbers.Integral):
        raise TypeError(f"{name} must be an integer, got {type(v).__name__} {v!r}")
    if v < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {v!r}")
    return int(v)


def _real(v, name: str, minimum: float = 0.0) -> float:
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, numbers.Real) or not math.isfinite(v):
        raise ValueError(f"{name} must be a finite real number, got {v!r}")
    if v < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {v!r}")
    return float(v)


def _choice(v, allowed, name: str) -> str:
    if v not in allowed:
        raise ValueError(f"{name} must be one of {allowed}, got {v!r}")
    return v


def gap_and_end(beta_available) -> tuple[float, float]:
    """(g, d): the largest gap between consecutive nodes (ascending), and the
    distance from the outermost node to its end of [-1, 1] (the larger of the two)."""
    b = beta_available
    m = b.shape[0]
    g = float((b[1:] - b[:-1]).max()) if m > 1 else 0.0
    d = max(float(b[0]) + 1.0, 1.0 - float(b[m - 1]), 0.0)
    return g, d


def effective_gap(beta_available, end_factor: float = END_FACTOR) -> float:
    """phi = max(g, end_factor * d) (see gap_and_end): the default's lam is c0 phi^3."""
    g, d = gap_and_end(beta_available)
    return max(g, end_factor * d)


# ---------------------------------------------------------------- the policy

class LamPolicy:
    """lam_dec from the answering nodes (see the module docstring) and a fixed lam_enc.

    Parameters
    ----------
    tables : dict, optional
        {(K, N): table}, calibrated for (K, N); (K, N) pairs without a table
        use the default formula. Normally made by `calibrate` or `load`. Two
        kinds:

        - local (``{"local": True, "c": c, "end_factor": a, "lam_enc": float}``):
          one lam per alpha_k, lam_k = c * max(h_k, a x_k)^3 (local_gaps);
        - global (``{"edges": [e_0 < ... < e_n] (log10 g bin edges),
          "lam": [l_1 <= ... <= l_n] (psi per bin), "end_k": k_end,
          "lam_enc": float}``): one lam per decode, max(psi(g), k_end d^3);
          inside bin i psi = l_i, below e_0 and above e_n psi scales like g^3
          from the nearest edge.
    local : bool, default True
        The uncalibrated formula: local (lam_k = c0 max(h_k, a x_k)^3 per
        alpha_k) or global (lam = c0 max(g, a d)^3 for the whole decode).
    c0, end_factor : float, optional
        The uncalibrated formula's constants (default LOCAL_C0 and
        LOCAL_END_FACTOR when local, DEFAULT_C0 and END_FACTOR when not).
    lam_enc : float
        Encoder lam for (K, N) pairs without a table (default 0: every encoder
        smoothing tried moved the coded inputs off the inputs and cost MSE).
    noise : 'ignore' or 'gcv'
        'gcv': lam_dec returns None, i.e. GCV per decode (noisy workers).
    target : 'mse' or 'relacc'
        What the tables were calibrated for (recorded by save()).
    report : dict
        Calibration record (scores, timings); saved with the policy.

    LeTCC calls ``lam_dec_at(beta_available, alpha, N, K)`` (a float, or a
    read-only (K,) array of lams, one per alpha_k); ``lam_dec(beta_available,
    N, K)`` answers the same for Chebyshev points of the first kind as alpha.
    Answers are remembered per answering set (a dict lookup on later calls),
    so treat a policy's tables as read-only once it is in use.
    """

    def __init__(self, tables=None, *, local: bool = True, c0: float | None = None,
                 end_factor: float | None = None, lam_enc: float = 0.0, noise: str = "ignore",
                 target: str = "mse", report: dict | None = None):
        if not isinstance(local, (bool, np.bool_)):
            raise TypeError(f"local must be True or False, got {local!r}")
        self.local = bool(local)
        self.c0 = _real((LOCAL_C0 if self.local else DEFAULT_C0) if c0 is None else c0, "c0")
        self.end_factor = _real((LOCAL_END_FACTOR if self.local else END_FACTOR) if end_factor is None
                                else end_factor, "end_factor")
        self._lam_enc = as_lam(lam_enc)
        self.noise = _choice(noise, NOISE_MODES, "noise")
        self.target = _choice(target, TARGETS, "target")
        self.tables: dict[tuple[int, int], dict] = {}
        for key, table in (tables or {}).items():
            self.tables[_key(key)] = _checked_table(key, table)
        self.report = dict(report or {})
        # answering set -> lam: the per-decode cost becomes one dict lookup
        # (sets recur: at most 2^N of them, and few in practice). Cleared when full.
        self._memo: dict = {}

    # -- the protocol LeTCC calls --------------------------------------------

    def lam_dec_at(self, beta_available: np.ndarray, alpha: np.ndarray, N: int, K: int):
        """lam for the decoder of the workers at nodes ``beta_available``
        (ascending float64) evaluated at ``alpha``: a float (one lam), a
        read-only (K,) array (one lam per alpha_k), or None (GCV) when
        noise='gcv'."""
        if self.noise == "gcv":
            return None
        key = (K, N, beta_available.tobytes(), alpha.tobytes())
        lam = self._memo.get(key)
        if lam is None:
            lam = self._lam_dec_at(beta_available, alpha, N, K)
            if isinstance(lam, np.ndarray):
                lam.flags.writeable = False  # handed out again from the memo
            if len(self._memo) >= MEMO_SIZE:
                self._memo.clear()
            self._memo[key] = lam
        return lam

    def lam_dec(self, beta_available: np.ndarray, N: int, K: int):
        """lam_dec_at with alpha = Chebyshev points of the first kind (the
        codes' default alpha)."""
        return self.lam_dec_at(beta_available, _default_alpha(K), N, K)

    def _lam_dec_at(self, beta_available: np.ndarray, alpha: np.ndarray, N: int, K: int):
        if beta_available.shape[0] < 3:
            return 0.0  # one node: a constant, two: a line; lam changes nothing
        t = self.tables.get((K, N))
        if t is None:
            if self.local:
                phi = local_gaps(beta_available, alpha, self.end_factor)
                return self.c0 * phi * phi * phi
            g, d = gap_and_end(beta_available)
            phi = max(g, self.end_factor * d)
            return self.c0 * phi * phi * phi
        if t["local"]:
            phi = local_gaps(beta_available, alpha, t["end_factor"])
            return t["c"] * phi * phi * phi
        g, d = gap_and_end(beta_available)
        return max(_table_lam(t, g), t["end_k"] * d * d * d)

    def lam_enc(self, K: int, N: int) -> float:
        t = self.tables.get((K, N))
        return self._lam_enc if t is None else t["lam_enc"]

    def is_local(self, K: int, N: int) -> bool:
        """Whether (K, N) gets one lam per alpha_k (else one per decode)."""
        t = self.tables.get((K, N))
        return self.local if t is None else t["local"]

    def psi(self, g: float, K: int, N: int) -> float:
        """The lam for an interval (local) or largest gap (global) of width g
        with no end term: c0 g^3, c g^3, or the calibrated table's psi(g)."""
        t = self.tables.get((K, N))
        if t is None:
            return self.c0 * g ** 3
        return t["c"] * g ** 3 if t["local"] else _table_lam(t, float(g))

    def end_k(self, K: int, N: int) -> float:
        """k in the end term k * d^3 (global: d the end distance; local: d the
        distance of alpha_k beyond the outermost answering node)."""
        t = self.tables.get((K, N))
        if t is None:
            return self.c0 * self.end_factor ** 3
        return t["c"] * t["end_factor"] ** 3 if t["local"] else t["end_k"]

    def code(self, K: int, N: int, **kwargs) -> LeTCC:
        """A LeTCC(K, N) that uses this policy for both lams."""
        return LeTCC(K, N, lam_enc=self.lam_enc(K, N), lam_dec=self, **kwargs)

    # -- persistence ---------------------------------------------------------

    def to_dict(self) -> dict:
        tables = []
        for (K, N), t in sorted(self.tables.items()):
            keys = ("local", "c", "end_factor", "lam_enc") if t["local"] else ("local", "edges", "lam", "end_k", "lam_enc")
            tables.append({"K": K, "N": N, **{k: t[k] for k in keys}})
        return {
            "format": FORMAT,
            "target": self.target,
            "noise": self.noise,
            "default": {"local": self.local, "c0": self.c0, "end_factor": self.end_factor, "lam_enc": self._lam_enc},
            "tables": tables,
            "report": self.report,
        }

    @classmethod
    def from_dict(cls, d: dict) -> "LamPolicy":
        fmt = d.get("format") if isinstance(d, dict) else type(d).__name__
        if fmt != FORMAT and fmt not in OLD_FORMATS:
            raise ValueError(f"not a saved LamPolicy: expected format {FORMAT!r}, got {fmt!r}")
        dflt = d.get("default", {})
        try:
            tables = {(t["K"], t["N"]): t for t in d.get("tables", [])}
        except (TypeError, KeyError):
            raise ValueError(f"saved LamPolicy tables must each have K and N, got {d.get('tables')!r}") from None
        local = bool(dflt.get("local", False))  # format /1 had only the global formula
        return cls(tables, local=local, c0=dflt.get("c0"), end_factor=dflt.get("end_factor"),
                   lam_enc=dflt.get("lam_enc", 0.0), noise=d.get("noise", "ignore"),
                   target=d.get("target", "mse"), report=d.get("report", {}))

    def save(self, path) -> None:
        """Write the policy as JSON (tables, default formula, calibration report)."""
        Path(path).write_text(json.dumps(self.to_dict(), indent=1, allow_nan=False))

    @classmethod
    def load(cls, path) -> "LamPolicy":
        """A policy written by save()."""
        return cls.from_dict(json.loads(Path(path).read_text()))

    def __eq__(self, other) -> bool:
        return isinstance(other, LamPolicy) and self.to_dict() == other.to_dict()

    def __repr__(self) -> str:
        cal = ", ".join(f"(K={K}, N={N})" for K, N in sorted(self.tables)) or "nothing"
        form = (f"c0 * max(h_k, {self.end_factor:g} x_k)^3 per alpha_k" if self.local
                else f"c0 * max(g, {self.end_factor:g} d)^3")
        return (f"LamPolicy(calibrated for {cal}; default lam = {form}, c0 = {self.c0:g}; "
                f"target={self.target!r}, noise={self.noise!r})")

    # -- calibration ---------------------------------------------------------

    @classmethod
    def calibrate(cls, f: Callable, X_calib, K: int, N: int, *, target: str = "mse", labels=None,
                  stragglers=None, n_draws: int = 16, seed=0, lam_grid=None, lam_enc_grid=(0.0,),
                  end_k_grid=None, noise_sigma: float = 0.0, into: "LamPolicy | None" = None,
                  alpha=None, beta=None, local: bool | None = None, c_grid=None,
                  end_factor_grid=None) -> "LamPolicy":
        """Calibrate the lam_dec rule (and lam_enc) for (K, N) on a calibration batch.

        local=True: lam_k = c * max(h_k, a x_k)^3 per alpha_k, with (c, a,
        lam_enc) the best of c_grid x end_factor_grid x lam_enc_grid.
        local=False: one lam per decode, max(psi(g), k_end d^3), psi a
        monotone table over g bins, k_end from end_k_grid.
        local=None (default): both, and the one with the lower calibration
        cost wins (measured: local for target='mse', where it gains most;
        global, with its per-gap-bin freedom, for target='relacc').

        Parameters
        ----------
        f : callable
            The workers' function, batched: (n, ...) -> (n, ...), e.g. a
            letcc.experiments LoadedModel (softmax outputs).
        X_calib : array (n, ...)
            Calibration samples, n // K rounds of K (a remainder is dropped).
            Keep them apart from the data you evaluate on.
        target : 'mse' or 'relacc'
            Minimise the decoded outputs' MSE (relative to the best lam at each
            straggler count, so every count weighs the same), or maximise their
            argmax accuracy against ``labels`` (MSE breaks ties).
        labels : (n,) integer classes, needed for target='relacc'.
        stragglers : None, int, sequence of ints and/or StragglerModels
            The answering sets to calibrate on. None: every S = 0 .. N // 2
            (uniformly random sets); an int S_max: 0 .. S_max; counts and
            letcc.stragglers models (e.g. FixedCount(S, worst_case=True),
            Bernoulli(p)). ``n_draws`` sets per count / model.
        seed : seeds the straggler sets (and the noise): same seed, same policy.
        lam_grid : candidate lam_dec (default DEFAULT_LAM_GRID: 0 and 1e-10 .. 10).
        lam_enc_grid : encoder lams to try; each costs one pass of f over the
            coded calibration batch. Default (0.0,).
        end_k_grid : candidate k_end (default END_K_GRID: 0 and the default's
            c0 * 8^3 times 10^-1.5 .. 10^1 by half decades); local=False only.
        c_grid, end_factor_grid : candidate c and a of the local rule (default
            LOCAL_C_GRID: 1e-4 .. 1 by quarter decades; LOCAL_END_GRID:
            0, 4, 8, 16, 32); local=True only. Each candidate is scored from
            the errors on lam_grid, interpolated in log lam per output point
            (the error of one alpha_k's estimate depends on its own lam only).
        noise_sigma : standard deviation of Gaussian noise to add to the worker
            outputs, when the workers are known to be that noisy.
        into : add this (K, N) table to a copy of an existing policy (one
            policy for several (K, N) pairs) instead of the default one.
        alpha, beta : the code's nodes, when not the defaults.
        """
        if local is None:
            kw = dict(target=target, labels=labels, stragglers=stragglers, n_draws=n_draws, seed=seed,
                      lam_grid=lam_grid, lam_enc_grid=lam_enc_grid, end_k_grid=end_k_grid,
                      noise_sigma=noise_sigma, into=into, alpha=alpha, beta=beta, c_grid=c_grid,
                      end_factor_grid=end_factor_grid)
            pl = cls.calibrate(f, X_calib, K, N, local=True, **kw)
            pg = cls.calibrate(f, X_calib, K, N, local=False, **kw)
            key = f"{_count(K, 'K')},{_count(N, 'N')}"
            rl, rg = pl.report[key], pg.report[key]
            best = pl if rl["score"] <= rg["score"] else pg
            best.report[key] = {**best.report[key], "chosen_from": {"local": rl["score"], "global": rg["score"]},
                                "seconds_both": round(rl["seconds"] + rg["seconds"], 3)}
            return best
        t0 = time.perf_counter()
        K, N = _count(K, "K"), _count(N, "N")
        target = _choice(target, TARGETS, "target")
        n_draws = _count(n_draws, "n_draws")
        grid = np.array(as_lams(DEFAULT_LAM_GRID if lam_grid is None else lam_grid, "lam_grid"))
        enc_grid = as_lams(lam_enc_grid, "lam_enc_grid")
        end_grid = as_lams(END_K_GRID if end_k_grid is None else end_k_grid, "end_k_grid")
        if grid.size == 0 or not enc_grid or not end_grid:
            raise ValueError("lam_grid, lam_enc_grid and end_k_grid must not be empty")
        if np.any(np.diff(grid) <= 0):
            raise ValueError("lam_grid must be strictly increasing")
        if not isinstance(local, (bool, np.bool_)):
            raise TypeError(f"local must be True, False or None, got {local!r}")
        c_cands = as_lams(LOCAL_C_GRID if c_grid is None else c_grid, "c_grid")
        a_cands = as_lams(LOCAL_END_GRID if end_factor_grid is None else end_factor_grid, "end_factor_grid")
        if local and (not c_cands or not a_cands):
            raise ValueError("c_grid and end_factor_grid must not be empty")
        if local and np.count_nonzero(grid) < 2:
            raise ValueError("local calibration interpolates on lam_grid: it needs at least two lams > 0")
        noise_sigma = _real(noise_sigma, "noise_sigma")
        if into is not None and not isinstance(into, LamPolicy):
            raise TypeError(f"into must be a LamPolicy, got {type(into).__name__}")
        batches = as_batches(X_calib, K)
        lab = None
        if target == "relacc":
            if labels is None:
                raise ValueError("target='relacc' needs the calibration labels (labels=...)")
            lab = _round_labels(labels, batches.shape[0], K)
        rng = np.random.default_rng(seed)
        by_count = straggler_sets(stragglers, N, n_draws, rng)
        noise_seed = int(rng.integers(2**31))
        sets = [F for S in sorted(by_count) for F in by_count[S]]
        counts = np.array([N - F.size for F in sets])

        forward = 0.0
        t1 = time.perf_counter()
        exact = exact_outputs(f, batches)
        forward += time.perf_counter() - t1
        runs = []  # per lam_enc: (code, outputs, errors on the lam grid)
        for le in enc_grid:
            code = LeTCC(K, N, lam_enc=le, lam_dec=0.0, alpha=alpha, beta=beta)
            t1 = time.perf_counter()
            outputs = worker_outputs(code, f, batches)
            forward += time.perf_counter() - t1
            err = decode_errors(code.beta, code.alpha, outputs, exact, sets, lambda nodes: grid, labels=lab,
                                noise_sigma=noise_sigma, noise_seed=noise_seed, per_row=local)
            if local:  # per-set errors too, for the references
                err = {"rows": err, "mse": err["mse"].mean(axis=2),
                       "acc": None if lab is None else err["acc"].mean(axis=2)}
            runs.append((le, code, outputs, err))
        # The reference MSE of a straggler count is the best over every lam_enc
        # and lam on the grid: one yardstick for all candidates, so that an
        # encoder that loses everywhere cannot look good relative to itself.
        ref = None
        if target == "mse":
            ref = np.empty(len(sets))
            for S in np.unique(counts):
                m = counts == S
                ref[m] = max(min(r[3]["mse"][m].mean(axis=0).min() for r in runs), 1e-300)
        base = {"mse": np.array([min(r[3]["mse"].min() for r in runs)])}
        best = None
        if local:
            best = _best_local(runs, sets, grid, c_cands, a_cands, target, ref, base,
                               exact, lab, noise_sigma, noise_seed)
        for le, code, outputs, err in ([] if local else runs):
            cost = _cost(err, target, ref, base)
            gd = np.array([gap_and_end(code.beta[F]) for F in sets])
            edges, members, scale = _bins(gd[:, 0])
            lam_gap = grid[None, :] * scale[:, None]  # psi the table gives set s with l = grid[j]
            out = np.flatnonzero(scale != 1.0)
            if out.size:  # sets beyond the table's edges: score them at the lam they will get
                e2 = decode_errors(code.beta, code.alpha, outputs, exact, [sets[i] for i in out],
                                   [lam_gap[i] for i in out], labels=lab, noise_sigma=noise_sigma,
                                   noise_seed=noise_seed, set_ids=out)
                cost = cost.copy()
                cost[out] = _cost(e2, target, None if ref is None else ref[out], base)
            for k in end_grid:
                lam_end = k * gd[:, 1] ** 3
                cost_k = cost
                hit = np.flatnonzero(lam_end > lam_gap[:, 0])  # sets where the end term can win
                if hit.size:
                    e3 = decode_errors(code.beta, code.alpha, outputs, exact, [sets[i] for i in hit],
                                       [[lam_end[i]] for i in hit], labels=lab, noise_sigma=noise_sigma,
                                       noise_seed=noise_seed, set_ids=hit)
                    c3 = _cost(e3, target, None if ref is None else ref[hit], base)[:, 0]
                    cost_k = cost.copy()
                    # lam = max(psi, end term): where the end term is larger it decides
                    cost_k[hit] = np.where(lam_end[hit, None] > lam_gap[hit], c3[:, None], cost[hit])
                bin_cost = np.array([cost_k[m].sum(axis=0) for m in members])
                path, total = _best_path(bin_cost, monotone=True)
                if best is None or total < best["total"] - 1e-9 * abs(total):
                    best = {"total": total, "lam_enc": le, "end_k": k, "edges": edges,
                            "lam": [float(grid[j]) for j in path]}
        if local:
            table = {"local": True, "c": best["c"], "end_factor": best["end_factor"], "lam_enc": best["lam_enc"]}
        else:
            table = {"edges": best["edges"], "lam": best["lam"], "end_k": best["end_k"], "lam_enc": best["lam_enc"]}
        seconds = time.perf_counter() - t0
        report = {
            "K": K, "N": N, "target": target, "seed": seed if isinstance(seed, int) else None,
            "rounds": int(batches.shape[0]), "sets": len(sets), "draws_per_count": n_draws,
            "counts": sorted(int(S) for S in by_count), "noise_sigma": noise_sigma,
            "local": bool(local), "lam_enc_grid": enc_grid, "lam_grid_size": int(grid.size),
            **({"c_grid": c_cands, "end_factor_grid": a_cands} if local else {"end_k_grid": end_grid}),
            "seconds": round(seconds, 3), "forward_seconds": round(forward, 3),
            "score": best["total"],  # the summed calibration cost of the choice
        }
        policy = cls.from_dict(into.to_dict() if into is not None else cls(target=target).to_dict())
        policy.tables[(K, N)] = _checked_table((K, N), table)
        policy._memo.clear()
        policy.target = target
        policy.report[f"{K},{N}"] = report
        return policy


def _best_local(runs, sets, grid, c_cands, a_cands, target, ref, base, exact, lab, noise_sigma,
                noise_seed) -> dict:
    """The (lam_enc, a, c) of the local rule with the lowest summed cost over
    the calibration sets. Each output point's error depends only on its own
    lam, so a candidate's error is first read off the per-row errors on the
    lam grid (linear in log lam between grid points, clamped at the grid's
    ends); the LOCAL_SHORTLIST best are then decoded with their exact lams and
    the best of those wins."""
    scored = []
    pos = grid > 0
    lg = np.log10(grid[pos])
    best = None
    for le, code, outputs, err in runs:
        rows_mse = err["rows"]["mse"][:, pos, :]  # (n, L+, K)
        rows_acc = None if err["rows"]["acc"] is None else err["rows"]["acc"][:, pos, :]
        n, _, Kr = rows_mse.shape
        for a in a_cands:
            phi = np.array([local_gaps(code.beta[F], code.alpha, a) if F.size >= 3 else np.zeros(Kr)
                            for F in sets])
            for c in c_cands:
                lam = c * phi ** 3
                x = np.log10(np.maximum(lam, grid[pos][0]))
                j = np.clip(np.searchsorted(lg, x) - 1, 0, lg.size - 2) if lg.size > 1 else np.zeros_like(x, int)
                t = np.clip((x - lg[j]) / (lg[j + 1] - lg[j]), 0.0, 1.0)
                si, ki = np.arange(n)[:, None], np.arange(Kr)[None, :]

                def at(E):
                    return (1 - t) * E[si, j, ki] + t * E[si, j + 1, ki]
                e = {"mse": at(rows_mse).mean(axis=1)[:, None],
                     "acc": None if rows_acc is None else at(rows_acc).mean(axis=1)[:, None]}
                scored.append((float(_cost(e, target, ref, base).sum()), len(scored), le, float(c), float(a)))
    by_lam_enc = {r[0]: r for r in runs}
    best = None
    for _, _, le, c, a in sorted(scored)[:LOCAL_SHORTLIST]:
        _, code, outputs, _ = by_lam_enc[le]
        e = decode_errors(code.beta, code.alpha, outputs, exact, sets,
                          lambda nodes: [c * local_gaps(nodes, code.alpha, a) ** 3 if nodes.size >= 3 else 0.0],
                          labels=lab, noise_sigma=noise_sigma, noise_seed=noise_seed)
        total = float(_cost(e, target, ref, base).sum())
        if best is None or total < best["total"] - 1e-9 * abs(total):
            best = {"total": total, "lam_enc": le, "c": c, "end_factor": a}
    return best


def _cost(err: dict, target: str, ref, base: dict) -> np.ndarray:
    """Per-set, per-lam calibration cost: MSE relative to ``ref`` (the best
    mean MSE at the set's straggler count, target mse), or the error rate with
    the MSE (relative to the smallest in ``base``) as a tie-breaker (relacc)."""
    if target == "mse":
        return err["mse"] / ref[:, None]
    return (1.0 - err["acc"]) + 1e-6 * err["mse"] / max(base["mse"].min(), 1e-300)


# ---------------------------------------------------------------- tables

def _key(key) -> tuple[int, int]:
    try:
        K, N = key
    except (TypeError, ValueError):
        raise TypeError(f"table keys must be (K, N) pairs, got {key!r}") from None
    return _count(K, "K"), _count(N, "N")


def _checked_table(key, table) -> dict:
    if not isinstance(table, dict):
        raise ValueError(f"table {key!r} must be a dict, got {table!r}")
    local = table.get("local", False)
    if not isinstance(local, (bool, np.bool_)):
        raise ValueError(f"table {key!r}: 'local' must be true or false, got {local!r}")
    if local:
        try:
            c, a = table["c"], table["end_factor"]
        except KeyError:
            raise ValueError(f"local table {key!r} must have 'c' and 'end_factor', got {table!r}") from None
        return {"local": True, "c": _real(c, f"table {key!r} c"),
                "end_factor": _real(a, f"table {key!r} end_factor"), "lam_enc": as_lam(table.get("lam_enc", 0.0))}
    try:
        edges = [float(e) for e in table["edges"]]
        lam = as_lams(table["lam"], f"table {key!r} lam")
    except (TypeError, KeyError):
        raise ValueError(f"table {key!r} must be a dict with 'edges' and 'lam' lists, got {table!r}") from None
    if len(lam) < 1 or len(edges) != len(lam) + 1:
        raise ValueError(f"table {key!r}: need n >= 1 lams and n + 1 edges, got {len(lam)} and {len(edges)}")
    if not all(math.isfinite(e) for e in edges) or any(b <= a for a, b in zip(edges, edges[1:])):
        raise ValueError(f"table {key!r}: 'edges' must be finite and strictly increasing, got {edges}")
    if any(b < a for a, b in zip(lam, lam[1:])):
        raise ValueError(f"table {key!r}: 'lam' must be non-decreasing (larger gaps, more smoothing), got {lam}")
    return {"local": False, "edges": edges, "lam": lam, "end_k": _real(table.get("end_k", DEFAULT_C0 * END_FACTOR ** 3), "end_k"),
            "lam_enc": as_lam(table.get("lam_enc", 0.0))}


@functools.lru_cache(maxsize=64)
def _default_alpha(K: int) -> np.ndarray:
    a = chebyshev_first_kind(K)
    a.flags.writeable = False
    return a


def _table_lam(t: dict, g: float) -> float:
    """psi(g) from a table: the bin's lam inside, g^3 scaling beyond the edges."""
    edges, lam = t["edges"], t["lam"]
    if g <= 0.0:
        return 0.0
    x = math.log10(g)
    if x < edges[0]:  # below the calibrated range: scale like g^3 down from the edge
        return lam[0] * 10.0 ** (3.0 * (x - edges[0]))
    if x >= edges[-1]:  # above: like g^3 up from the last edge
        return lam[-1] * 10.0 ** (3.0 * (x - edges[-1]))
    return lam[bisect.bisect_right(edges, x) - 1]


def _bins(phis: np.ndarray, extrapolate: bool = True) -> tuple[list[float], list[np.ndarray], np.ndarray]:
    """Calibration bins of width BIN_WIDTH in log10(phi): (edges, per-bin
    boolean member masks, per-set lam scale).

    The table covers the core from the first to the last bin holding at least
    MIN_SETS_PER_BIN sets (sparse inner bins join their fuller neighbour).
    With extrapolate=True, the sets outside the core belong to the first / last
    bin but their lam is that bin's times (phi / edge)^3, the rule _table_lam
    applies there (scale holds that factor, 1 inside the core): a few sets with
    very wide gaps (missing end workers) must not pin one lam on a bin that is
    mostly narrower gaps. With extrapolate=False sparse end bins are merged
    inwards instead and every scale is 1."""
    x = np.log10(np.maximum(phis, 1e-300))
    lo = math.floor(x.min() / BIN_WIDTH + 1e-9) * BIN_WIDTH
    n = max(1, int(math.floor((x.max() - lo) / BIN_WIDTH + 1e-9)) + 1)
    edges = [lo + i * BIN_WIDTH for i in range(n + 1)]
    idx = np.clip(np.floor((x - lo) / BIN_WIDTH + 1e-9).astype(int), 0, n - 1)
    counts = [int(np.sum(idx == i)) for i in range(n)]
    dense = [i for i in range(n) if counts[i] >= MIN_SETS_PER_BIN]
    if extrapolate and dense:
        first, last = dense[0], dense[-1]
    else:
        first, last = 0, n - 1
    groups = [[i] for i in range(first, last + 1)]
    while len(groups) > 1:
        sizes = [sum(counts[i] for i in g) for g in groups]
        sparse = [j for j, c in enumerate(sizes) if c < MIN_SETS_PER_BIN]
        if not sparse:
            break
        j = sparse[0]
        if j == 0:
            k = 1
        elif j == len(groups) - 1:
            k = j - 1
        else:
            k = j - 1 if sizes[j - 1] >= sizes[j + 1] else j + 1
        a, b = min(j, k), max(j, k)
        groups[a:b + 1] = [groups[a] + groups[b]]
    out_edges = [round(edges[g[0]], 12) for g in groups] + [round(edges[groups[-1][-1] + 1], 12)]
    members = [np.isin(idx, g) for g in groups]
    scale = np.ones(x.shape[0])
    below, above = idx < first, idx > last
    members[0] |= below
    members[-1] |= above
    scale[below] = 10.0 ** (3.0 * (x[below] - out_edges[0]))
    scale[above] = 10.0 ** (3.0 * (x[above] - out_edges[-1]))
    return out_edges, members, scale


def _best_path(cost: np.ndarray, monotone: bool = True) -> tuple[list[int], float]:
    """A grid index per row minimising the summed cost; with monotone=True the
    indices must be non-decreasing along the rows (dynamic programming)."""
    rows, cols = cost.shape
    if not monotone:
        path = [int(j) for j in np.argmin(cost, axis=1)]
        return path, float(cost[np.arange(rows), path].sum())
    total = cost[0].astype(np.float64).copy()
    back = np.zeros((rows, cols), dtype=np.int64)
    for i in range(1, rows):
        # best predecessor with index <= j: a running argmin of `total`
        run = np.zeros(cols, dtype=np.int64)
        best = 0
        for j in range(1, cols):
            if total[j] < total[best]:
                best = j
            run[j] = best
        back[i] = run
        total = cost[i] + total[run]
    j = int(np.argmin(total))
    value = float(total[j])
    path = [j]
    for i in range(rows - 1, 0, -1):
        j = int(back[i, j])
        path.append(j)
    return path[::-1], value


# ---------------------------------------------------------------- scoring

def _round_labels(labels, B: int, K: int) -> np.ndarray:
    if hasattr(labels, "detach"):
        labels = labels.detach().cpu().numpy()
    lab = np.asarray(labels)
    if lab.ndim != 1 or lab.dtype.kind not in "iu":
        raise TypeError(f"labels must be a 1-D array of integer classes, got dtype {lab.dtype} shape {lab.shape}")
    if lab.shape[0] < B * K:
        raise ValueError(f"labels has {lab.shape[0]} entries, fewer than the {B * K} calibration samples")
    return lab[: B * K].reshape(B, K)


def straggler_sets(stragglers, N: int, n_draws: int, rng: np.random.Generator) -> dict[int, list[np.ndarray]]:
    """{S: [sorted answering-index arrays]} to calibrate on (see
    LamPolicy.calibrate). Draws in which nobody answers are dropped."""
    if stragglers is None:
        stragglers = N // 2
    if isinstance(stragglers, numbers.Integral) and not isinstance(stragglers, (bool, np.bool_)):
        if not 0 <= stragglers < N:
            raise ValueError(f"stragglers = {stragglers} must be in 0 .. N - 1 = {N - 1}")
        stragglers = list(range(int(stragglers) + 1))
    if isinstance(stragglers, StragglerModel):
        stragglers = [stragglers]
    if isinstance(stragglers, (str, bytes)) or not isinstance(stragglers, Sequence) or len(stragglers) == 0:
        raise TypeError(f"stragglers must be None, a count, or a non-empty sequence of counts and "
                        f"letcc.stragglers models, got {stragglers!r}")
    out: dict[int, list[np.ndarray]] = {}
    for item in stragglers:
        if isinstance(item, numbers.Integral) and not isinstance(item, (bool, np.bool_)):
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


def decode_errors(beta: np.ndarray, alpha: np.ndarray, outputs: np.ndarray, exact: np.ndarray,
                  sets: Sequence[np.ndarray], lams: Callable[[np.ndarray], Sequence[float]] | Sequence,
                  labels: np.ndarray | None = None, noise_sigma: float = 0.0, noise_seed: int = 0,
                  operator: Callable[[np.ndarray, float], np.ndarray] | None = None,
                  set_ids: Sequence[int] | None = None, per_row: bool = False) -> dict:
    """Errors of the spline decoder on every answering set, for several lam each.

    outputs (B, N, ...): worker outputs of B rounds; exact (B, K, ...): f on
    the inputs; sets: sorted answering-index arrays; ``lams(nodes)`` -> the lam
    values to score for a set with these (ascending) nodes (or a sequence
    holding each set's lam values); a value may be a float or a (K,) array
    (one lam per alpha_k, as LeTCC applies it). All B rounds are
    decoded at once with one (K, |F|) operator per set and lam (the same linear
    map LeTCC.decode applies); ``operator(nodes, lam)`` replaces it with any
    other (K, |F|) matrix (e.g. BACC's). Noise: Gaussian, seeded by
    (noise_seed, set_ids[j]) (default set_ids: 0, 1, ...), so a set decoded
    again in another call sees the same noise.

    Returns {"mse": (n_sets, L), "acc": (n_sets, L) or None}: the mean over
    rounds and the K inputs of the squared norm of the error, and the fraction
    of decoded argmaxes equal to labels (B, K). per_row=True keeps the K
    inputs apart: (n_sets, L, K) each (means over rounds only).
    """
    B = outputs.shape[0]
    Y = outputs.reshape(B, outputs.shape[1], -1)
    E = exact.reshape(B, exact.shape[1], -1)
    mse_rows, acc_rows = [], []
    for j, F in enumerate(sets):
        nodes = beta[F]
        YF = Y[:, F, :]
        if noise_sigma > 0:
            sid = j if set_ids is None else int(set_ids[j])
            YF = YF + noise_sigma * np.random.default_rng([noise_seed, sid]).standard_normal(YF.shape)
        lam_values = lams(nodes) if callable(lams) else lams[j]
        A = np.stack([operator(nodes, lam) if operator is not None
                      else spline_decoder_matrix(nodes, alpha, lam) for lam in lam_values])
        est = np.matmul(A[:, None], YF[None])  # (L, B, K, m): every lam, every round
        d = est - E
        if per_row:
            mse_rows.append(np.einsum("lbkc,lbkc->lk", d, d) / B)
        else:
            d = d.reshape(A.shape[0], -1)
            mse_rows.append(np.einsum("lx,lx->l", d, d) / (B * E.shape[1]))
        if labels is not None:
            acc_rows.append(np.mean(est.argmax(-1) == labels, axis=1 if per_row else (1, 2)))
    return {"mse": np.array(mse_rows), "acc": np.array(acc_rows) if labels is not None else None}
