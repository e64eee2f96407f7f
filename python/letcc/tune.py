"""Choosing (lam_enc, lam_dec) by grid search, as the paper did: on a
calibration batch, the scheme's own end-to-end MSE averaged over straggler
draws (and over noise, when the workers are noisy), for every pair of the grid.

The straggler draws, the calibration rounds and the noise are the same for
every grid point (common random numbers), so differences between grid points
are differences between lam, not between draws.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass, field

import numpy as np

from letcc.codes import LeTCC
from letcc.codes.simulate import as_batches, exact_outputs, round_errors, worker_outputs
from letcc.splines._validation import as_lams
from letcc.stragglers import FixedCount, StragglerModel

__all__ = ["tune", "TuneResult", "DEFAULT_LAM_GRID"]

# lam on nodes in [-1, 1]: 0 (interpolation) and 1e-10 .. 1 cover the useful
# range for N up to a few hundred (the natural scale is gap^3, see lam_defaults).
DEFAULT_LAM_GRID = np.concatenate(([0.0], np.logspace(-10, 0, 11)))


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


def _straggler_sets(stragglers, N: int, n_draws: int, rng: np.random.Generator) -> list:
    if isinstance(stragglers, (int, np.integer)) and not isinstance(stragglers, bool):
        stragglers = FixedCount(int(stragglers))
    if not isinstance(stragglers, StragglerModel):
        raise TypeError(f"stragglers must be a count S or a letcc.stragglers model, got {stragglers!r}")
    sets = []
    tries = 0
    while len(sets) < n_draws:
        tries += 1
        if tries > 100 * n_draws:
            raise ValueError(f"{stragglers!r} leaves no worker answering in almost every round for N = {N}")
        avail = stragglers.sample(N, rng).available
        if avail.size:  # a round nobody answered has no estimate: redraw
            sets.append(avail)
    return sets


def tune(f, X_calib, K: int, N: int, stragglers=0, lam_enc_grid=None, lam_dec_grid=None,
         n_draws: int = 20, seed=0, noise_sigma: float = 0.0, alpha=None, beta=None) -> TuneResult:
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
    if isinstance(n_draws, bool) or not isinstance(n_draws, (int, np.integer)) or n_draws < 1:
        raise ValueError(f"n_draws must be an integer >= 1, got {n_draws!r}")
    noise_sigma = float(noise_sigma)
    if not np.isfinite(noise_sigma) or noise_sigma < 0:
        raise ValueError(f"noise_sigma must be finite and >= 0, got {noise_sigma!r}")
    batches = as_batches(X_calib, K)
    rng = np.random.default_rng(seed)
    sets = _straggler_sets(stragglers, N, int(n_draws), rng)
    noise_seed = int(rng.integers(2**31))
    exact = exact_outputs(f, batches)

    scores = np.empty((enc_grid.size, dec_grid.size))
    for i, le in enumerate(enc_grid):
        outputs = worker_outputs(LeTCC(K, N, lam_enc=le, lam_dec=0.0, alpha=alpha, beta=beta), f, batches)
        for j, ld in enumerate(dec_grid):
            code = LeTCC(K, N, lam_enc=le, lam_dec=ld, alpha=alpha, beta=beta)
            scores[i, j] = round_errors(code, outputs, exact, sets, noise_sigma, noise_seed).mean()
    i, j = np.unravel_index(np.nanargmin(scores), scores.shape)

    default = LeTCC(K, N, alpha=alpha, beta=beta)
    default_mse = round_errors(default, worker_outputs(default, f, batches), exact, sets,
                               noise_sigma, noise_seed).mean()
    return TuneResult(lam_enc=float(enc_grid[i]), lam_dec=float(dec_grid[j]), mse=float(scores[i, j]),
                      lam_enc_grid=enc_grid, lam_dec_grid=dec_grid, scores=scores,
                      default_mse=float(default_mse), n_rounds=batches.shape[0], n_draws=len(sets))


# `letcc.tune` is both this module and (through letcc's lazy exports) the
# function above. Importing the module (`from letcc.tune import TuneResult`)
# binds the package attribute to the module, so make the module callable too:
# `letcc.tune(...)` then works whichever of the two it holds.
class _CallableModule(type(sys.modules[__name__])):
    def __call__(self, *args, **kwargs):
        return tune(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
