"""Choosing lam by generalised cross-validation (GCV).

    V(lam) = n * RSS_w(lam) / (n - tr S(lam))^2,   RSS_w = sum_cols sum_i w_i (y_i - g_i)^2

with one lam shared by all columns (their residuals summed), the trace of the
smoother S from the banded factors in O(n) (Hutchinson & de Hoog, 1985), and
the minimum searched over log lam: a coarse grid, then golden-section search
inside the best grid bracket. lam has the meaning of
scipy.interpolate.make_smoothing_spline (plain weighted sum, no 1/n).
"""
from __future__ import annotations

import math

import numpy as np

from letcc import _core


def lam_scale(x: np.ndarray, w: np.ndarray) -> float:
    """The lam at which the roughness penalty and the data term of the Reinsch
    system weigh about the same: tr(R) / tr(Q^T W^-1 Q). GCV searches around it,
    so the search is invariant to rescaling x or w."""
    n = x.shape[0]
    if n < 3:
        return 1.0
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        h = np.diff(x)
        r_trace = np.sum(h[:-1] + h[1:]) / 3.0
        a = 1.0 / h[:-1]
        c = 1.0 / h[1:]
        b = -a - c
        b_trace = np.sum(a * a / w[:-2] + b * b / w[1:-1] + c * c / w[2:])
        scale = float(r_trace / b_trace)
        min_gap = float(np.min(h))
    if not (math.isfinite(scale) and scale > 0.0):
        # e.g. knots spanning more than the float64 range, or gaps so small that
        # 1/h^2 overflows: there is no lam scale to search around
        raise ValueError(f"lam=None (GCV) cannot choose lam for knots x[0] = {x[0]:g} .. x[-1] = {x[-1]:g} "
                         f"(smallest gap {min_gap:g}): lam's scale is not a finite "
                         "float64 there; rescale x or pass lam explicitly")
    return scale


def gcv_score(x, w, lam: float, y2: np.ndarray) -> float:
    """GCV score V(lam) for y2 of shape (n, m), C-contiguous float32/float64."""
    score, _, _ = _core.gcv(x, w, float(lam), y2)
    return score


def select_lam_gcv(x: np.ndarray, w: np.ndarray, y2: np.ndarray, decades_below: float = 12.0,
                   decades_above: float = 8.0, grid: int = 41, refine_iters: int = 30) -> float:
    """The lam minimising the GCV score for knots x, weights w and data y2 (n, m).

    For n <= 2 every lam gives the same fit (a constant or the line through both
    points) and 0.0 is returned. A column of NaN makes every score NaN: that is
    refused with a ValueError rather than answered with an arbitrary lam.
    """
    n = x.shape[0]
    if n <= 2:
        return 0.0
    if not np.isfinite(y2).all():
        raise ValueError("lam=None (GCV) needs finite y; y contains NaN or inf")
    centre = math.log10(lam_scale(x, w))
    logs = np.linspace(centre - decades_below, centre + decades_above, grid)
    scores = np.array([gcv_score(x, w, 10.0 ** t, y2) for t in logs])
    if not np.isfinite(scores).any():
        return float(10.0 ** logs[-1])
    scores = np.where(np.isfinite(scores), scores, np.inf)
    i = int(np.argmin(scores))
    lo = logs[max(i - 1, 0)]
    hi = logs[min(i + 1, grid - 1)]
    # Golden-section search on log10(lam) inside [lo, hi].
    g = (math.sqrt(5.0) - 1.0) / 2.0
    a, b = lo, hi
    c = b - g * (b - a)
    d = a + g * (b - a)
    fc = gcv_score(x, w, 10.0 ** c, y2)
    fd = gcv_score(x, w, 10.0 ** d, y2)
    for _ in range(refine_iters):
        if fc <= fd:
            b, d, fd = d, c, fc
            c = b - g * (b - a)
            fc = gcv_score(x, w, 10.0 ** c, y2)
        else:
            a, c, fc = c, d, fd
            d = a + g * (b - a)
            fd = gcv_score(x, w, 10.0 ** d, y2)
    best_log, best = (c, fc) if fc <= fd else (d, fd)
    if scores[i] < best:
        best_log = logs[i]
    return float(10.0 ** best_log)
