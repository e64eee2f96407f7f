"""SplineSmoother: a precomputed plan "fit a smoothing spline on knots x, then
evaluate it at the points `at`", applied to many columns at once.

This is the object a production loop keeps and calls many times, so its call
path is short: a C-contiguous float32/float64 numpy array goes straight to the
compiled core (which checks the shape and releases the GIL); anything else
(torch tensors, non-contiguous or read-only views, integer data, an `out` that
is not contiguous) is normalised here first.
"""
from __future__ import annotations

import numpy as np

from letcc import _core
from letcc.splines._arrays import is_gpu_array, is_torch_tensor, to_numpy
from letcc.splines._validation import as_knots, as_lam, as_nu, as_points, as_weights, float_dtype_of


class SplineSmoother:
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

    __slots__ = ("x", "at", "lam", "w", "n", "q", "nu", "method", "_plan", "_apply", "_gpu_plan")

    def __init__(self, x, at, lam=0.0, w=None, *, nu=0, method="auto"):
        self.x = as_knots(x)
        self.at = as_points(at, "at")
        if self.at.size == 0:
            raise ValueError("at is empty; need at least one evaluation point")
        self.lam = as_lam(lam)
        self.w = as_weights(w, self.x.shape[0])
        self.n = self.x.shape[0]
        self.q = self.at.shape[0]
        if method not in ("auto", "banded", "dense"):
            raise ValueError(f"method must be 'auto', 'banded' or 'dense', got {method!r}")
        self.method = method
        self.nu = as_nu(nu)
        self._plan = _core.Plan(self.x, self.w, self.lam, self.at, self.nu, method)
        self._apply = self._plan.apply
        self._gpu_plan = None

    def __call__(self, y, out=None):
        # The compiled fast path takes only a C-contiguous numpy `out`; any
        # other `out` (strided view, torch tensor) goes through the general path.
        if out is None or (type(out) is np.ndarray and out.flags.c_contiguous):
            res = self._apply(y, out, 0)
            if res is not None:
                return res
        return self._call_general(y, out)

    def _call_general(self, y, out):
        if is_gpu_array(y):
            from letcc.splines.cuda_dispatch import apply_plan_gpu

            return apply_plan_gpu(self, y, out)
        arr, wrap = to_numpy(y)
        dtype = float_dtype_of(arr)
        if arr.ndim < 1:
            raise ValueError(f"y must have at least one dimension (the knot axis), got a scalar")
        if arr.shape[0] != self.n:
            raise ValueError(
                f"y has {arr.shape[0]} rows along the knot axis but the plan has n = {self.n} knots"
            )
        arr = np.ascontiguousarray(arr, dtype=dtype)
        if out is None:
            return wrap(self._apply(arr, None, 0))
        if not (isinstance(out, np.ndarray) or is_torch_tensor(out)):
            # anything else would be copied by np.asarray and the result lost
            raise TypeError(f"out must be a numpy array or a torch tensor, got {type(out).__name__}")
        out_arr, _ = to_numpy(out)
        expected = (self.q,) + arr.shape[1:]
        if out_arr.shape != expected:
            raise ValueError(f"out has shape {out_arr.shape} but the result has shape {expected}")
        if out_arr.dtype != dtype:
            raise TypeError(f"out has dtype {out_arr.dtype} but the result has dtype {dtype}")
        if not out_arr.flags.writeable:
            raise ValueError("out is read-only")
        if out_arr.flags.c_contiguous and not np.shares_memory(out_arr, arr):
            self._apply(arr, out_arr, 0)
        else:
            out_arr[...] = self._apply(arr, None, 0)
        return out

    def matrix(self) -> np.ndarray:
        """The equivalent dense (q, n) float64 operator A: ``plan(y) == A @ y``."""
        return self._plan.matrix()

    def trace(self) -> float:
        """Trace of the smoother matrix at the knots (effective degrees of freedom)."""
        return self._plan.trace()

    def __repr__(self) -> str:
        return f"SplineSmoother(n={self.n}, q={self.q}, lam={self.lam!r}, nu={self.nu})"
