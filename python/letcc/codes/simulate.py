"""End-to-end simulation of a coded round without processes: encode, run f on
every coded input, optionally add Gaussian noise to the worker outputs (the
paper's noisy regime), decode from given straggler sets, measure the error.

Used by letcc.tune and bench/rates.py. Straggler sets are passed in as index
arrays (or objects with an ``.available`` attribute, such as
letcc.stragglers.StragglerDraw), so that every scheme compared sees the same
sets; the noise of round (batch b, draw j) comes from the generator seeded
with (seed, b, j), so every scheme with the same N sees the same noise too.
Everything is computed in float64 numpy (a simulation, not the hot path).
"""
from __future__ import annotations

from typing import Callable, Iterable, Sequence

import numpy as np

from letcc.codes._arrays import is_torch_tensor

__all__ = ["as_batches", "exact_outputs", "worker_outputs", "round_errors", "end_to_end_mse"]


def _np64(a) -> np.ndarray:
    if is_torch_tensor(a):
        a = a.detach().cpu().numpy()
    elif type(a).__module__.startswith("cupy"):
        a = a.get()
    return np.asarray(a, dtype=np.float64)


def as_batches(X, K: int) -> np.ndarray:
    """Samples X (n, ...) -> (n // K, K, ...) rounds of K (a remainder is dropped)."""
    X = _np64(X)
    if X.ndim == 0 or X.shape[0] < K:
        raise ValueError(f"need at least K = {K} samples, got {0 if X.ndim == 0 else X.shape[0]}")
    B = X.shape[0] // K
    return X[: B * K].reshape((B, K) + X.shape[1:])


def exact_outputs(f: Callable, X_batches) -> np.ndarray:
    """f on the raw inputs of every round: (B, K, ...)."""
    return np.stack([_np64(f(X)) for X in X_batches])


def worker_outputs(code, f: Callable, X_batches) -> np.ndarray:
    """f on the coded inputs of every round (every worker answers): (B, N, ...)."""
    return np.stack([_np64(f(code.encode(X))) for X in X_batches])


def _available(a) -> np.ndarray:
    return np.asarray(getattr(a, "available", a), dtype=np.int64)


def round_errors(code, outputs: np.ndarray, exact: np.ndarray, availables: Sequence,
                 noise_sigma: float = 0.0, seed: int = 0) -> np.ndarray:
    """(B, D) MSE of every round: (1/K) sum_k ||f(x_k) - f^(x_k)||^2 for batch b
    decoded from the workers availables[j] (outputs from worker_outputs with
    the same code's encoder, exact from exact_outputs)."""
    B = outputs.shape[0]
    sets = [_available(a) for a in availables]
    errs = np.empty((B, len(sets)))
    for b in range(B):
        for j, avail in enumerate(sets):
            Y = outputs[b]
            if noise_sigma > 0:
                rng = np.random.default_rng([seed, b, j])
                Y = Y + noise_sigma * rng.standard_normal(Y.shape)
            est = code.decode(Y[avail], avail)
            d = (est - exact[b]).reshape(code.K, -1)
            errs[b, j] = np.einsum("ij,ij->", d, d) / code.K
    return errs


def end_to_end_mse(code, f: Callable, X_batches, availables: Iterable, noise_sigma: float = 0.0,
                   seed: int = 0, exact: np.ndarray | None = None) -> float:
    """Mean over rounds and straggler sets of the per-round MSE."""
    X_batches = [np.asarray(X) for X in X_batches]
    if exact is None:
        exact = exact_outputs(f, X_batches)
    out = worker_outputs(code, f, X_batches)
    return float(round_errors(code, out, exact, list(availables), noise_sigma, seed).mean())
