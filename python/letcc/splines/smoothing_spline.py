"""SmoothingSpline: a cubic smoothing spline fitted once to data with many
columns, evaluated (values, first and second derivatives) wherever asked."""
from __future__ import annotations

from typing import Optional

import numpy as np

from letcc._typing import Array, ArrayLike

from letcc import _core
from letcc.splines._arrays import is_gpu_array, is_torch_tensor, to_numpy
from letcc.splines._validation import (as_knots, as_lam, as_nu, as_points, as_weights, check_knot_axis,
                                       float_dtype_of)
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

    GPU arrays (torch CUDA tensors, CuPy arrays) stay on their device and the
    evaluations run there (letcc built with CUDA); lam=None copies y to the
    host once for the GCV choice.

    Calling ``s(xq, nu=0)`` returns the nu-th derivative (nu in 0, 1, 2) at
    xq, with shape ``xq.shape + other dims`` and y's dtype. Outside [x_0, x_-1]
    the spline continues as a straight line (natural boundary conditions).
    """

    def __init__(self, x: ArrayLike, y: ArrayLike, lam: Optional[float] = 0.0, w: Optional[ArrayLike] = None,
                 axis: int = 0) -> None:
        self.x = as_knots(x)
        n = self.x.shape[0]
        self.w = as_weights(w, n)
        if not isinstance(axis, (int, np.integer)) or isinstance(axis, bool):
            raise TypeError(f"axis must be an integer, got {axis!r}")
        self._gpu_y = None
        if is_gpu_array(y):
            self._init_gpu(y, lam, axis)
            return
        arr, self._wrap = to_numpy(y)
        dtype = float_dtype_of(arr)
        check_knot_axis(arr.ndim)
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

    def _init_gpu(self, y, lam, axis):
        """GPU arrays (torch CUDA tensors, CuPy arrays) stay on the device: the
        spline is kept as (knots, lam, the data) and every evaluation runs a
        fit-then-evaluate plan on the GPU (letcc.SplineSmoother with nu), which
        reads the data once and writes the result once. Only lam=None copies
        the data to the host, for the GCV choice."""
        n = self.x.shape[0]
        check_knot_axis(y.ndim)
        if not -y.ndim <= axis < y.ndim:
            raise ValueError(f"axis {axis} is out of range for y with {y.ndim} dimensions")
        if is_torch_tensor(y):
            import torch

            if y.dtype in (torch.float16, torch.bfloat16) or y.is_complex():
                raise TypeError(f"y must hold float32 or float64 numbers, got torch dtype {y.dtype}")
            moved = y.detach().movedim(axis, 0)
            if not moved.is_floating_point():
                moved = moved.to(torch.float64)
            self.dtype = np.dtype(str(moved.dtype).replace("torch.", ""))
        else:
            import cupy

            moved = cupy.moveaxis(y, axis, 0)
            self.dtype = float_dtype_of(np.empty(0, dtype=moved.dtype))
            moved = moved.astype(self.dtype, copy=False)
        if moved.shape[0] != n:
            raise ValueError(f"y has {moved.shape[0]} entries along axis {axis} but x has {n} knots")
        self._trailing = tuple(moved.shape[1:])
        self._gpu_y = moved.reshape(n, -1)
        if lam is None:
            host = self._gpu_y.cpu().numpy() if is_torch_tensor(self._gpu_y) else self._gpu_y.get()
            self.lam = select_lam_gcv(self.x, self.w, np.ascontiguousarray(host))
        else:
            self.lam = as_lam(lam)
        self._gpu_plans = {}

    def _gpu_eval(self, pts: np.ndarray, nu: int, shape):
        """The nu-th derivative at pts, on the GPU, cached plans per (pts, nu)."""
        from letcc.splines.smoother import SplineSmoother

        key = (pts.tobytes(), nu)
        plan = self._gpu_plans.get(key)
        if plan is None:
            if len(self._gpu_plans) >= 8:
                self._gpu_plans.pop(next(iter(self._gpu_plans)))
            plan = self._gpu_plans[key] = SplineSmoother(self.x, pts, self.lam, self.w, nu=nu)
        return plan(self._gpu_y).reshape(tuple(shape) + self._trailing)

    @property
    def fitted(self) -> Array:
        """Fitted values g at the knots, shape (n, ...)."""
        if self._gpu_y is not None:
            return self._gpu_eval(self.x, 0, self.x.shape)
        g = self._g.astype(self.dtype, copy=False)
        return self._wrap(g.reshape((self.x.shape[0],) + self._trailing))

    @property
    def second_derivatives(self) -> Array:
        """Second derivatives at the knots (0 at both ends), shape (n, ...)."""
        if self._gpu_y is not None:
            return self._gpu_eval(self.x, 2, self.x.shape)
        gam = self._gamma.astype(self.dtype, copy=False)
        return self._wrap(gam.reshape((self.x.shape[0],) + self._trailing))

    def __call__(self, xq: ArrayLike, nu: int = 0) -> Array:
        nu = as_nu(nu)
        if self._gpu_y is not None:
            return self._gpu_eval(as_points(xq, "xq"), nu, np.shape(xq))
        xq_arr = np.asarray(xq) if not np.iscomplexobj(xq) else xq
        pts = as_points(xq, "xq")
        out = _core.evaluate(self.x, self._g, self._gamma, pts, nu).astype(self.dtype, copy=False)
        return self._wrap(out.reshape(np.shape(xq_arr) + self._trailing))

    def __repr__(self) -> str:
        return f"SmoothingSpline(n={self.x.shape[0]}, lam={self.lam!r}, shape={self._trailing})"
