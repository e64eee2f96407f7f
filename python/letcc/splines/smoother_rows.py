"""smoother_rows: the dense operator of "smooth with lam_k, evaluate at at[k]",
with a smoothing parameter per evaluation point.

One SplineSmoother fits one spline (one lam) and evaluates it everywhere. A
decoder that smooths more in some places than in others (one lam per output
point, however its caller chose them) needs row k to come from its own fit
with lam[k]. This builds those
rows in O(n) each from the Reinsch factors (csrc/smoother_rows.hpp: one banded
solve per row), without a plan and an n x n apply per row, so a decoder for a
new answering set costs microseconds.
"""
from __future__ import annotations

import numbers

import numpy as np

from letcc import _core
from letcc.splines._validation import as_knots, as_lam, as_nu, as_points, as_weights

__all__ = ["smoother_rows", "smoother_rows_checked"]


def _as_lams(lam, q: int) -> np.ndarray:
    if isinstance(lam, (numbers.Real, np.floating, np.integer)) and not isinstance(lam, (bool, np.bool_)):
        return np.full(q, as_lam(lam))
    if np.iscomplexobj(lam):
        raise TypeError("lam must be real, got complex values")
    try:
        arr = np.asarray(lam, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"lam must be a number or an array of numbers >= 0, got {type(lam).__name__}") from exc
    if arr.ndim == 0:
        return np.full(q, as_lam(float(arr)))
    if arr.shape != (q,):
        raise ValueError(f"lam must be a number or have shape ({q},) to match at, got shape {arr.shape}")
    bad = ~(np.isfinite(arr) & (arr >= 0))
    if bad.any():
        i = int(np.argmax(bad))
        raise ValueError(f"lam must be finite and >= 0, got lam[{i}] = {arr[i]}")
    return np.ascontiguousarray(arr)


def smoother_rows(x, at, lam, w=None, *, nu: int = 0) -> np.ndarray:
    """The (len(at), len(x)) float64 matrix A whose row k maps values y at the
    knots x to s_k(at[k]), s_k the smoothing spline of (x, y, w) with lam[k]
    (scipy ``make_smoothing_spline``'s lam; nu = 1, 2: its derivative).

    ``lam`` is a number (then ``A == SplineSmoother(x, at, lam, w, nu=nu).matrix()``)
    or an array with one entry per point in ``at``.
    """
    xv = as_knots(x)
    av = as_points(at, "at")
    if av.size == 0:
        raise ValueError("at is empty; need at least one evaluation point")
    wv = as_weights(w, xv.shape[0])
    lams = _as_lams(lam, av.shape[0])
    return _core.smoother_rows(xv, wv, lams, av, as_nu(nu))


def smoother_rows_checked(x: np.ndarray, at: np.ndarray, lams: np.ndarray) -> np.ndarray:
    """smoother_rows(x, at, lams) with unit weights and nu = 0, without the
    argument checks: for callers whose x is already a strictly increasing
    C-contiguous float64 array, `at` a finite C-contiguous float64 array and
    `lams` a C-contiguous float64 array of finite values >= 0, one per point
    (a decoder building its operator for a new answering set on every round:
    the checks cost several times the O(n) rows)."""
    return _core.smoother_rows(x, np.ones(x.shape[0]), lams, at, 0)
