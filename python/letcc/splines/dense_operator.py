"""DenseOperator: a fixed (q, n) linear map applied to many columns with the
compiled dense kernel (packed, register-blocked, float32 arithmetic for
float32 data), with the same call conventions as SplineSmoother. BACC's
Berrut operators use it: numpy's GEMM with a short inner dimension (n = K or
the number of answers) is far from the memory floor."""
from __future__ import annotations

import numpy as np

from letcc import _core
from letcc.splines._linear_map import LinearMap
from letcc.splines._validation import check_rows


class DenseOperator(LinearMap):
    """``op(y, out=None) == A @ y`` along the first axis of y, for a finite
    float64 matrix A of shape (q, n). numpy in, numpy out; CPU torch in, torch
    out; GPU arrays (torch CUDA, CuPy) are multiplied with their own library
    on their device."""

    __slots__ = ("_op", "_a", "_device_copies")

    def __init__(self, a):
        a = np.asarray(a, dtype=np.float64)
        if a.ndim != 2 or a.shape[0] < 1 or a.shape[1] < 1:
            raise ValueError(f"the operator must be a non-empty 2-D array (q, n), got shape {a.shape}")
        bad = ~np.isfinite(a)
        if bad.any():
            i, j = np.argwhere(bad)[0]
            raise ValueError(f"the operator has a non-finite entry a[{i}, {j}] = {a[i, j]}")
        self._setup(np.ascontiguousarray(a))

    def _setup(self, a: np.ndarray) -> None:
        self._a = a
        self._op = _core.DenseOperator(a)
        self.q, self.n = a.shape
        self._apply = self._op.apply
        self._apply_log = self._op.apply_log
        self._device_copies: dict = {}

    @classmethod
    def _from_checked(cls, a: np.ndarray) -> "DenseOperator":
        """An operator on `a` without the argument checks, for a caller that
        built `a` itself: a C-contiguous float64 (q, n) array, q, n >= 1. Only
        finiteness is checked, by the compiled operator as it copies `a`; a
        non-finite `a` goes through the constructor for its message (which
        names the entry). A decoder whose answering set changes every round
        builds one of these per decode, where the checks cost more than the
        operator."""
        op = cls.__new__(cls)
        try:
            op._setup(a)
        except ValueError:
            return cls(a)
        return op

    def _with_columns(self, perm: np.ndarray) -> "DenseOperator":
        """The operator whose column i is this one's column perm[i] (checked:
        its entries are this operator's)."""
        op = type(self).__new__(type(self))
        op._setup(np.ascontiguousarray(self._a[:, perm]))
        return op

    def _apply_rows(self, y: np.ndarray, rows: np.ndarray):
        """This map on the rows `rows` of y (any order, repeats allowed; one
        per column of the operator) without gathering them: the numbers
        ``self(y[rows])`` gives, bit for bit. None where y is not a
        C-contiguous float32/float64 numpy array (the caller gathers the rows
        then); ValueError/TypeError for rows of the wrong length, type or range."""
        return self._op.apply_rows(y, rows)

    def matrix(self) -> np.ndarray:
        """The (q, n) float64 matrix (a copy)."""
        return self._a.copy()

    def _gpu_call(self, y, out):
        from letcc.splines._arrays import is_torch_tensor

        check_rows(tuple(y.shape), self.n)
        n, trailing = self.n, tuple(y.shape[1:])
        if is_torch_tensor(y):
            import torch

            dtype = y.dtype if y.dtype in (torch.float32, torch.float64) else torch.float64
            if y.dtype.is_complex or y.dtype in (torch.float16, torch.bfloat16):
                raise TypeError(f"y must hold float32 or float64 numbers, got torch dtype {y.dtype}")
            key = ("torch", str(y.device), str(dtype))
            a = self._device_copies.get(key)
            if a is None:
                a = self._device_copies[key] = torch.from_numpy(self._a).to(device=y.device, dtype=dtype)
            res = (a @ y.detach().reshape(n, -1).to(dtype)).reshape((self.q,) + trailing)
        else:
            import cupy

            dtype = y.dtype if y.dtype in (np.float32, np.float64) else np.float64
            key = ("cupy", int(cupy.cuda.Device().id), str(dtype))
            a = self._device_copies.get(key)
            if a is None:
                a = self._device_copies[key] = cupy.asarray(self._a, dtype=dtype)
            res = (a @ y.reshape(n, -1).astype(dtype, copy=False)).reshape((self.q,) + trailing)
        if out is None:
            return res
        if tuple(out.shape) != tuple(res.shape):
            raise ValueError(f"out has shape {tuple(out.shape)} but the result has shape {tuple(res.shape)}")
        out[...] = res
        return out

    def __repr__(self) -> str:
        return f"DenseOperator(q={self.q}, n={self.n})"
