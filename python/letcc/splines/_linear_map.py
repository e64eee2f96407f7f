"""The call path shared by the compiled linear maps (SplineSmoother and
DenseOperator): ``op(y, out=None)`` maps y of shape (n, ...) to (q, ...).

A C-contiguous float32/float64 numpy array (and a C-contiguous numpy `out`)
goes straight to the compiled core, which releases the GIL (and hands a y
of the wrong length back, as None, for the general path to say why): that is the production-loop path, a few microseconds of overhead. Anything
else (torch tensors, strided or read-only views, integer data, an `out` of
another layout) is normalised here first; GPU arrays go to the subclass's
`_gpu_call`.
"""
from __future__ import annotations

from typing import Any, Callable, Optional

import numpy as np

from letcc._typing import Array, ArrayLike

from letcc.splines._arrays import is_gpu_array, is_torch_tensor, to_numpy
from letcc.splines._validation import check_rows, float_dtype_of


class LinearMap:
    """Base of the compiled maps; subclasses set n, q, _apply (the core's
    apply(y, out, threads)), _apply_log (the core's apply_log(y, check_sums,
    tol, floor): the map in LeTCC's log output space, letcc.codes.output_space)
    and implement _gpu_call(y, out)."""

    n: int
    q: int
    _apply: Callable[..., Any]
    _apply_log: Callable[..., Any]

    __slots__ = ("n", "q", "_apply", "_apply_log")

    def __call__(self, y: ArrayLike, out: Optional[Array] = None) -> Array:
        # The compiled fast path takes only a C-contiguous numpy `out`; any
        # other `out` (strided view, torch tensor) goes through the general path.
        if out is None or (type(out) is np.ndarray and out.flags.c_contiguous):
            res = self._apply(y, out, 0)
            if res is not None:
                return res
        return self._call_general(y, out)

    def _call_general(self, y, out):
        if is_gpu_array(y):
            return self._gpu_call(y, out)
        arr, wrap = to_numpy(y)
        dtype = float_dtype_of(arr)
        check_rows(arr.shape, self.n)
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

    def _gpu_call(self, y, out):  # pragma: no cover - overridden
        raise TypeError(f"{type(self).__name__} has no GPU route")
