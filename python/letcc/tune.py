"""Choosing lam on a calibration batch: the one home of calibration.

- ``tune``: grid search of (lam_enc, lam_dec), as the paper did: the scheme's
  own end-to-end MSE averaged over straggler draws (and over noise, when the
  workers are noisy), for every pair of the grid;
- ``calibrate_policy`` (what ``LamPolicy.calibrate`` runs): a lam *rule*
  (letcc.codes.lam_defaults) fitted for (K, N), scored on a grid of lam per
  answering set, the search itself in letcc._calibration_search.

Both decode through letcc.evaluate (tune through ``code.decode``, the policy
calibration through its batched equivalent ``lam_grid_errors``, tested equal),
with the same rounds, straggler draws and noise for every candidate (common
random numbers), so differences between candidates are differences between
lam, not between draws.

The lam grids are here too: DEFAULT_LAM_GRID (tune's: decades, since tune
decodes every (lam_enc, lam_dec) pair) and CALIBRATION_LAM_GRID (quarter
decades: the policy calibration scores every lam of it from one operator per
set, and the local rule's candidates are interpolated on it).
"""
from __future__ import annotations

import sys
import time
import types
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from letcc._calibration_search import best_path, gap_bins
from letcc._checks import as_choice, as_int, as_real
from letcc.codes import LeTCC
from letcc.codes.lam_defaults import GLOBAL_C0, GLOBAL_END_FACTOR, gap_and_end, local_gap_lams
from letcc.evaluate import (coded_outputs, decode_errors, draw_sets, exact_outputs, group_inputs, group_labels,
                            host64, lam_grid_errors, sets_by_count)
from letcc.metrics import TARGETS
from letcc.splines._validation import as_lams
from letcc.stragglers import FixedCount, StragglerModel
from letcc._typing import ArrayLike

if TYPE_CHECKING:                 # policy.py calls this module (LamPolicy.calibrate): no import back
    from letcc.policy import LamPolicy

__all__ = ["tune", "TuneResult", "calibrate_policy", "DEFAULT_LAM_GRID", "CALIBRATION_LAM_GRID",
           "LOCAL_C_GRID", "LOCAL_END_GRID", "END_K_GRID"]

# tune's grid. lam on nodes in [-1, 1]: 0 (interpolation) and 1e-10 .. 1 cover
# the useful range for N up to a few hundred (the natural scale is gap^3, see
# letcc.codes.lam_defaults).
DEFAULT_LAM_GRID = np.concatenate(([0.0], np.logspace(-10, 0, 11)))
# Candidate lam_dec for the policy calibration: 0 (interpolation) and 1e-10 ..
# 1e1 in quarter decades. Measured optima on trained classifiers lie in 1e-7 .. 1e-1.
CALIBRATION_LAM_GRID = np.concatenate(([0.0], 10.0 ** np.arange(-10.0, 1.01, 0.25)))
# Candidates for the local rule: c in quarter decades, a in octaves (measured
# optima: c 3e-3 .. 1e-2, a 8 .. 32).
LOCAL_C_GRID = 10.0 ** np.arange(-4.0, 0.01, 0.25)
LOCAL_END_GRID = (0.0, 4.0, 8.0, 16.0, 32.0)
# How many of the local candidates ranked by interpolated errors are decoded exactly.
LOCAL_SHORTLIST = 6
# Candidate k_end of the global rule: 0 (no end term) and the global default's
# c0 * a^3 times 10^-1.5 .. 10^1 in half decades.
END_K_GRID = np.concatenate(([0.0], GLOBAL_C0 * GLOBAL_END_FACTOR ** 3 * 10.0 ** np.arange(-1.5, 1.01, 0.5)))


@dataclass(frozen=True)
class TuneResult:
    """lam_enc, lam_dec: the best pair; mse: its score; scores[i, j]: the score
    of (lam_enc_grid[i], lam_dec_grid[j]); default_mse: the score of
    LeTCC's default lam policy on the same rounds and draws, for comparison."""

    lam_enc: float
    lam_dec: float
    mse: float
    lam_enc_grid: np.ndarray = field(repr=False)
    lam_dec_grid: np.ndarray = field(repr=False)
    scores: np.ndarray = field(repr=False)
    default_mse: float = float("nan")
    n_rounds: int = 0
    n_draws: int = 0

    def code(self, K: int, N: int, **kwargs) -> LeTCC:
        """A LeTCC with the chosen pair."""
        return LeTCC(K, N, lam_enc=self.lam_enc, lam_dec=self.lam_dec, **kwargs)


def _grid(values, name: str) -> np.ndarray:
    arr = np.atleast_1d(np.asarray(DEFAULT_LAM_GRID if values is None else values, dtype=object))
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"{name} must be a non-empty 1-D sequence of lam values")
    return np.array(as_lams(arr, name))


def tune(f: Callable, X_calib: ArrayLike, K: int, N: int, stragglers: int | StragglerModel = 0,
         lam_enc_grid: Sequence[float] | None = None, lam_dec_grid: Sequence[float] | None = None,
         n_draws: int = 20, seed: int | Sequence[int] | None = 0, noise_sigma: float = 0.0,
         alpha: ArrayLike | None = None, beta: ArrayLike | None = None) -> TuneResult:
    """Grid search of (lam_enc, lam_dec) minimising LeTCC's end-to-end MSE.

    Parameters
    ----------
    f : callable
        The function the workers compute, batched: (n, ...) -> (n, ...).
    X_calib : array (n, ...)
        Calibration samples, split into n // K rounds of K (a remainder is dropped).
    K, N : int
        Inputs per round and workers.
    stragglers : int or StragglerModel
        A count S (S random stragglers per round) or any letcc.stragglers model;
        rounds in which nobody answers are redrawn.
    lam_enc_grid, lam_dec_grid : sequences of lam >= 0
        Default: 0 and 1e-10 .. 1 (DEFAULT_LAM_GRID), scipy's lam on [-1, 1].
    n_draws : int
        Straggler sets per round (the same sets for every grid point).
    seed : int
        Seeds the straggler sets and the noise.
    noise_sigma : float
        Standard deviation of Gaussian noise added to every worker output.
    """
    enc_grid = _grid(lam_enc_grid, "lam_enc_grid")
    dec_grid = _grid(lam_dec_grid, "lam_dec_grid")
    n_draws = as_int(n_draws, "n_draws", 1)
    noise_sigma = as_real(noise_sigma, "noise_sigma", 0.0)
    groups = group_inputs(host64(X_calib), K)
    rng = np.random.default_rng(seed)
    if not isinstance(stragglers, StragglerModel):
        try:
            stragglers = FixedCount(as_int(stragglers, "stragglers", 0))
        except TypeError:
            raise TypeError(f"stragglers must be a count S or a letcc.stragglers model, got {stragglers!r}") from None
    sets = draw_sets(stragglers, N, n_draws, rng, redraw_empty=True)
    noise_seed = int(rng.integers(2**31))
    exact = exact_outputs(f, groups)

    def mse(code, outputs):
        return decode_errors(code, outputs, exact, sets, noise_sigma=noise_sigma, noise_seed=noise_seed).mse.mean()

    scores = np.empty((enc_grid.size, dec_grid.size))
    for i, le in enumerate(enc_grid):
        outputs = coded_outputs(LeTCC(K, N, lam_enc=le, lam_dec=0.0, alpha=alpha, beta=beta), f, groups)
        for j, ld in enumerate(dec_grid):
            scores[i, j] = mse(LeTCC(K, N, lam_enc=le, lam_dec=ld, alpha=alpha, beta=beta), outputs)
    bi, bj = (int(v) for v in np.unravel_index(np.nanargmin(scores), scores.shape))

    default = LeTCC(K, N, alpha=alpha, beta=beta)
    default_mse = mse(default, coded_outputs(default, f, groups))
    return TuneResult(lam_enc=float(enc_grid[bi]), lam_dec=float(dec_grid[bj]), mse=float(scores[bi, bj]),
                      lam_enc_grid=enc_grid, lam_dec_grid=dec_grid, scores=scores,
                      default_mse=float(default_mse), n_rounds=groups.shape[1], n_draws=len(sets))



def calibrate_policy(cls, f: Callable, X_calib, K: int, N: int, *, target: str = "mse", labels=None,
              stragglers=None, n_draws: int = 16, seed=0, lam_grid=None, lam_enc_grid=(0.0,),
              end_k_grid=None, noise_sigma: float = 0.0, into=None,
              alpha=None, beta=None, local: bool | None = None, c_grid=None,
              end_factor_grid=None) -> LamPolicy:
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
    lam_grid : candidate lam_dec (default CALIBRATION_LAM_GRID: 0 and 1e-10 .. 10).
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
        pl = calibrate_policy(cls, f, X_calib, K, N, local=True, **kw)
        pg = calibrate_policy(cls, f, X_calib, K, N, local=False, **kw)
        key = f"{as_int(K, 'K', 1)},{as_int(N, 'N', 1)}"
        rl, rg = pl.report[key], pg.report[key]
        chosen = pl if rl["score"] <= rg["score"] else pg
        chosen.report[key] = {**chosen.report[key], "chosen_from": {"local": rl["score"], "global": rg["score"]},
                              "seconds_both": round(rl["seconds"] + rg["seconds"], 3)}
        return chosen
    t0 = time.perf_counter()
    K, N = as_int(K, "K", 1), as_int(N, "N", 1)
    target = as_choice(target, TARGETS, "target")
    n_draws = as_int(n_draws, "n_draws", 1)
    grid = np.array(as_lams(CALIBRATION_LAM_GRID if lam_grid is None else lam_grid, "lam_grid"))
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
    noise_sigma = as_real(noise_sigma, "noise_sigma", 0.0)
    if into is not None and not isinstance(into, cls):
        raise TypeError(f"into must be a LamPolicy, got {type(into).__name__}")
    groups = group_inputs(host64(X_calib), K)
    B = groups.shape[1]
    lab = None
    if target == "relacc":
        if labels is None:
            raise ValueError("target='relacc' needs the calibration labels (labels=...)")
        lab = group_labels(labels, K, B)
    rng = np.random.default_rng(seed)
    by_count = sets_by_count(stragglers, N, n_draws, rng)
    noise_seed = int(rng.integers(2**31))
    sets = [F for S in sorted(by_count) for F in by_count[S]]
    counts = np.array([N - F.size for F in sets])

    forward = 0.0
    t1 = time.perf_counter()
    exact = exact_outputs(f, groups)
    forward += time.perf_counter() - t1
    runs = []  # per lam_enc: (code, outputs, errors on the lam grid)
    for le in enc_grid:
        code = LeTCC(K, N, lam_enc=le, lam_dec=0.0, alpha=alpha, beta=beta)
        t1 = time.perf_counter()
        outputs = coded_outputs(code, f, groups)
        forward += time.perf_counter() - t1
        err = lam_grid_errors(*_nodes(code), outputs, exact, sets, lambda nodes: grid, labels=lab,
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
    best: Any = None
    if local:
        best = _best_local(runs, sets, grid, c_cands, a_cands, target, ref, base,
                           exact, lab, noise_sigma, noise_seed)
    for le, code, outputs, err in ([] if local else runs):
        cost = _cost(err, target, ref, base)
        gd = np.array([gap_and_end(_nodes(code)[0][F]) for F in sets])
        edges, members, scale = gap_bins(gd[:, 0])
        lam_gap = grid[None, :] * scale[:, None]  # psi the table gives set s with l = grid[j]
        out = np.flatnonzero(scale != 1.0)
        if out.size:  # sets beyond the table's edges: score them at the lam they will get
            e2 = lam_grid_errors(*_nodes(code), outputs, exact, [sets[i] for i in out],
                               [lam_gap[i] for i in out], labels=lab, noise_sigma=noise_sigma,
                               noise_seed=noise_seed, set_ids=out.tolist())
            cost = cost.copy()
            cost[out] = _cost(e2, target, None if ref is None else ref[out], base)
        for k in end_grid:
            lam_end = k * gd[:, 1] ** 3
            cost_k = cost
            hit = np.flatnonzero(lam_end > lam_gap[:, 0])  # sets where the end term can win
            if hit.size:
                e3 = lam_grid_errors(*_nodes(code), outputs, exact, [sets[i] for i in hit],
                                   [[lam_end[i]] for i in hit], labels=lab, noise_sigma=noise_sigma,
                                   noise_seed=noise_seed, set_ids=hit.tolist())
                c3 = _cost(e3, target, None if ref is None else ref[hit], base)[:, 0]
                cost_k = cost.copy()
                # lam = max(psi, end term): where the end term is larger it decides
                cost_k[hit] = np.where(lam_end[hit, None] > lam_gap[hit], c3[:, None], cost[hit])
            bin_cost = np.array([cost_k[m].sum(axis=0) for m in members])
            path, total = best_path(bin_cost, monotone=True)
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
        "rounds": int(B), "sets": len(sets), "draws_per_count": n_draws,
        "counts": sorted(int(S) for S in by_count), "noise_sigma": noise_sigma,
        "local": bool(local), "lam_enc_grid": enc_grid, "lam_grid_size": int(grid.size),
        **({"c_grid": c_cands, "end_factor_grid": a_cands} if local else {"end_k_grid": end_grid}),
        "seconds": round(seconds, 3), "forward_seconds": round(forward, 3),
        "score": best["total"],  # the summed calibration cost of the choice
    }
    policy = into if into is not None else cls(target=target)
    return policy.with_table(K, N, table, target, report)

def _best_local(runs, sets, grid, c_cands, a_cands, target, ref, base, exact, lab, noise_sigma,
                noise_seed) -> Any:
    """The (lam_enc, a, c) of the local rule with the lowest summed cost over
    the calibration sets. Each output point's error depends only on its own
    lam, so a candidate's error is first read off the per-row errors on the
    lam grid (linear in log lam between grid points, clamped at the grid's
    ends); the LOCAL_SHORTLIST best are then decoded with their exact lams and
    the best of those wins."""
    scored: list = []
    pos = grid > 0
    lg = np.log10(grid[pos])
    for le, code, outputs, err in runs:
        rows_mse = err["rows"]["mse"][:, pos, :]  # (n, L+, K)
        rows_acc = None if err["rows"]["acc"] is None else err["rows"]["acc"][:, pos, :]
        n, _, Kr = rows_mse.shape
        for a in a_cands:
            # the rule at c = 1 for every set (it is linear in c)
            unit = np.array([np.broadcast_to(local_gap_lams(code.beta[F], code.alpha, 1.0, a), (Kr,))
                             for F in sets])
            for c in c_cands:
                lam = c * unit
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
    best: Any = None
    for _, _, le, c, a in sorted(scored)[:LOCAL_SHORTLIST]:
        _, code, outputs, _ = by_lam_enc[le]
        e = lam_grid_errors(*_nodes(code), outputs, exact, sets,
                          lambda nodes: [local_gap_lams(nodes, code.alpha, c, a)],
                          labels=lab, noise_sigma=noise_sigma, noise_seed=noise_seed)
        total = float(_cost(e, target, ref, base).sum())
        if best is None or total < best["total"] - 1e-9 * abs(total):
            best = {"total": total, "lam_enc": le, "c": c, "end_factor": a}
    return best


def _nodes(code: LeTCC) -> tuple[np.ndarray, np.ndarray]:
    """(beta, alpha) of a constructed code (set by LeTCC.__init__)."""
    return np.asarray(code.beta), np.asarray(code.alpha)


def _cost(err: dict, target: str, ref, base: dict) -> np.ndarray:
    """Per-set, per-lam calibration cost: MSE relative to ``ref`` (the best
    mean MSE at the set's straggler count, target mse), or the error rate with
    the MSE (relative to the smallest in ``base``) as a tie-breaker (relacc)."""
    if target == "mse":
        return err["mse"] / ref[:, None]
    return (1.0 - err["acc"]) + 1e-6 * err["mse"] / max(base["mse"].min(), 1e-300)


# `letcc.tune` is both this module and (through letcc's lazy exports) the
# function above. Importing the module (`from letcc.tune import TuneResult`)
# binds the package attribute to the module, so make the module callable too:
# `letcc.tune(...)` then works whichever of the two it holds.
class _CallableModule(types.ModuleType):
    def __call__(self, *args, **kwargs):
        return tune(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
