"""SplineSmoother: a precomputed plan "fit a smoothing spline on knots x, then
evaluate it at the points `at`", applied to many columns at once.

This is the object a production loop keeps and calls many times, so its call
path is short: a C-contiguous float32/float64 numpy array goes straight to the
compiled core (which checks the shape and releases the GIL); anything else
(torch tensors, non-contiguous or read-only views, integer data, an `out` that
is not contiguous) is normalised here first.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from letcc._typing import ArrayLike, Lam

from letcc import _core
from letcc.splines._linear_map import LinearMap
from letcc.splines._validation import as_knots, as_lam, as_nu, as_points, as_weights


class SplineSmoother(LinearMap):
    """Fit-then-evaluate plan: ``plan(y)[j] = s_y(at[j])`` for every column of y.

    Parameters
    ----------
    x : (n,) array_like
        Strictly increasing, finite knots.
    at : (q,) array_like
        Finite points at which the fitted spline is evaluated (any order).
    lam : float, default 0.0
        Smoothing parameter >= 0, with exactly the meaning of
        ``scipy.interpolate.make_smoothing_spline``: the spline minimises
        ``sum_i w_i (y_i - g(x_i))**2 + lam * integral g''(t)**2 dt`` (a plain
        weighted sum, no 1/n). 0 interpolates (natural cubic spline); very
        large lam tends to the weighted least-squares line.
    w : (n,) array_like, optional
        Positive finite weights (default all ones).
    nu : {0, 1, 2}, keyword-only
        Evaluate the fitted spline's value (0, default), first (1) or second
        (2) derivative at `at`.
    method : {"auto", "banded", "dense"}, keyword-only
        How the plan is applied on the CPU. "banded" streams the Reinsch
        factors over the columns (cost ~ n + q per column, float64 arithmetic);
        "dense" multiplies by the precomputed (q, n) operator (cost ~ n * q,
        float32 arithmetic for float32 data, which is accurate for a fixed
        map). "auto" picks dense for small n * q, where it was measured faster.

    Calling ``plan(y, out=None)`` with y of shape (n, ...) returns an array of
    shape (q, ...) of the same dtype (float32 or float64; integers give
    float64). numpy in, numpy out; a CPU torch tensor in, a torch tensor out;
    a CUDA torch tensor or CuPy array in, the same kind out, computed on the
    GPU when letcc was built with CUDA. NaN in a column of y stays in that column.
    """

    __slots__ = ("x", "at", "lam", "w", "nu", "method", "_plan", "_gpu_plan")

    def __init__(self, x: ArrayLike, at: ArrayLike, lam: Lam = 0.0, w: Optional[ArrayLike] = None, *,
                 nu: int = 0, method: str = "auto") -> None:
        self.x = as_knots(x)
        self.at = as_points(at, "at")
        if self.at.size == 0:
            raise ValueError("at is empty; need at least one evaluation point")
        self.lam = as_lam(lam)
        self.w = as_weights(w, self.x.shape[0])
        self.n = self.x.shape[0]
        if method not in ("auto", "banded", "dense"):
            raise ValueError(f"method must be 'auto', 'banded' or 'dense', got {method!r}")
        self.method = method
        self.nu = as_nu(nu)
        self._build()

    def _build(self) -> None:
        """The compiled plan for the checked fields (x, w, lam, at, nu, method)."""
        self.q = self.at.shape[0]
        self._plan = _core.Plan(self.x, self.w, self.lam, self.at, self.nu, self.method)
        self._apply = self._plan.apply
        self._apply_log = self._plan.apply_log
        self._gpu_plan = None

    def _at_points(self, at: np.ndarray) -> "SplineSmoother":
        """The same fit (x, w, lam, nu, method) evaluated at `at` instead, without
        the argument checks: for a caller whose `at` is a non-empty, finite,
        C-contiguous float64 array (a code building its encoder for a subset of
        its workers on a round's critical path, where the checks cost several
        times the plan). Equal to SplineSmoother(x, at, lam, w, nu=nu, method=method)."""
        plan = object.__new__(SplineSmoother)
        plan.x, plan.w, plan.lam, plan.nu, plan.method = self.x, self.w, self.lam, self.nu, self.method
        plan.at, plan.n = at, self.n
        plan._build()
        return plan

    def _gpu_call(self, y, out):
        from letcc.splines.cuda_dispatch import apply_plan_gpu

        return apply_plan_gpu(self, y, out)

    def matrix(self) -> np.ndarray:
        """The equivalent dense (q, n) float64 operator A: ``plan(y) == A @ y``."""
        return self._plan.matrix()

    def trace(self) -> float:
        """Trace of the smoother matrix at the knots (effective degrees of freedom)."""
        return self._plan.trace()

    def __repr__(self) -> str:
        return f"SplineSmoother(n={self.n}, q={self.q}, lam={self.lam!r}, nu={self.nu})"
