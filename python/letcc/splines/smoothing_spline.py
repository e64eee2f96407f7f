"""SmoothingSpline: a cubic smoothing spline fitted once to data with many
columns, evaluated (values, first and second derivatives) wherever asked."""
from __future__ import annotations

import numpy as np

from letcc import _core
from letcc.splines._arrays import is_gpu_array, to_numpy
from letcc.splines._validation import as_knots, as_lam, as_nu, as_points, as_weights, float_dtype_of
from letcc.splines.gcv import select_lam_gcv


class SmoothingSpline:
    """Cubic smoothing spline through (x_i, y_i), one per column of y.

    Minimises ``sum_i w_i (y_i - g(x_i))**2 + lam * integral g''(t)**2 dt``
    for every column independently, all columns sharing x, w and lam. lam has
    exactly the meaning of ``scipy.interpolate.make_smoothing_spline`` (a
    plain weighted sum, no 1/n; the LeTCC paper's lam is this one divided by n).

    Parameters
    ----------
    x : (n,) array_like
        Strictly increasing, finite knots. n = 1 gives a constant, n = 2 the
        line through both points.
    y : array_like
        Data with the knots along ``axis`` (any other shape). numpy arrays and
        CPU torch tensors; float32 stays float32, integers become float64.
    lam : float or None, default 0.0
        Smoothing parameter >= 0 (0 interpolates). None chooses it by
        generalised cross-validation, one lam for all columns; the chosen value
        is ``.lam``.
    w : (n,) array_like, optional
        Positive weights.
    axis : int
        Axis of y along which the knots lie.

    Calling ``s(xq, nu=0)`` returns the nu-th derivative (nu in 0, 1, 2) at
    xq, with shape ``xq.shape + other dims`` and y's dtype. Outside [x_0, x_-1]
    the spline continues as a straight line (natural boundary conditions).
    """

    def __init__(self, x, y, lam=0.0, w=None, axis=0):
        self.x = as_knots(x)
        n = self.x.shape[0]
        self.w = as_weights(w, n)
        if is_gpu_array(y):
            raise TypeError("SmoothingSpline takes CPU arrays; use SplineSmoother for GPU arrays")
        arr, self._wrap = to_numpy(y)
        dtype = float_dtype_of(arr)
        if arr.ndim == 0:
            raise ValueError("y must have at least one dimension (the knot axis)")
        if not isinstance(axis, (int, np.integer)) or isinstance(axis, bool):
            raise TypeError(f"axis must be an integer, got {axis!r}")
        if not -arr.ndim <= axis < arr.ndim:
            raise ValueError(f"axis {axis} is out of range for y with {arr.ndim} dimensions")
        arr = np.moveaxis(arr, axis, 0)
        if arr.shape[0] != n:
            raise ValueError(f"y has {arr.shape[0]} entries along axis {axis} but x has {n} knots")
        self._trailing = arr.shape[1:]
        y2 = np.ascontiguousarray(arr.reshape(n, -1) if arr.size else arr.reshape(n, 0), dtype=dtype)
        if lam is None:
            self.lam = select_lam_gcv(self.x, self.w, y2)
        else:
            self.lam = as_lam(lam)
        self.dtype = dtype
        # g and gamma are kept in float64 whatever y's dtype: evaluating a
        # derivative or outside the knots divides differences of g by the knot
        # gaps, and float32 storage would lose up to 1e-3 there (measured,
        # Chebyshev knots, n = 1024). Results are cast back to y's dtype.
        self._g, self._gamma = _core.fit(self.x, self.w, self.lam, y2.astype(np.float64, copy=False))

    @property
    def fitted(self):
        """Fitted values g at the knots, shape (n, ...)."""
        g = self._g.astype(self.dtype, copy=False)
        return self._wrap(g.reshape((self.x.shape[0],) + self._trailing))

    @property
    def second_derivatives(self):
        """Second derivatives at the knots (0 at both ends), shape (n, ...)."""
        gam = self._gamma.astype(self.dtype, copy=False)
        return self._wrap(gam.reshape((self.x.shape[0],) + self._trailing))

    def __call__(self, xq, nu=0):
        nu = as_nu(nu)
        xq_arr = np.asarray(xq) if not np.iscomplexobj(xq) else xq
        pts = as_points(xq, "xq")
        out = _core.evaluate(self.x, self._g, self._gamma, pts, nu).astype(self.dtype, copy=False)
        return self._wrap(out.reshape(np.shape(xq_arr) + self._trailing))

    def __repr__(self) -> str:
        return f"SmoothingSpline(n={self.x.shape[0]}, lam={self.lam!r}, shape={self._trailing})"
