"""Array kinds in and out of the codes: numpy (float32/float64), torch
tensors (CPU, and CUDA through their own operations), CuPy arrays.

The codes never convert an array to another kind on the hot path: rows are
reordered with the array's own indexing, and the spline and Berrut operators
go through letcc.SplineSmoother / letcc.splines.DenseOperator, which handle
every kind (GPU arrays stay on their device, CPU torch tensors come back as
torch tensors).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from letcc.splines._arrays import is_gpu_array, is_torch_tensor

__all__ = ["is_gpu_array", "is_torch_tensor", "as_array", "take_rows", "put_rows", "to_host_2d"]


def _is_cupy(obj: Any) -> bool:
    return type(obj).__module__.startswith("cupy")


def as_array(obj: Any, name: str):
    """obj unchanged when it is a numpy array, torch tensor or GPU array;
    otherwise (lists, scalars) a numpy array. Shape must have a leading axis."""
    if not (isinstance(obj, np.ndarray) or is_torch_tensor(obj) or is_gpu_array(obj)):
        if np.iscomplexobj(obj):
            raise TypeError(f"{name} must hold float32 or float64 numbers, got complex values")
        try:
            obj = np.asarray(obj)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"{name} must be an array, got {type(obj).__name__}") from exc
    if len(obj.shape) == 0:
        raise ValueError(f"{name} must have a leading axis, got a scalar")
    return obj


def _float_torch_dtype(t, name: str):
    import torch

    if t.dtype in (torch.float32, torch.float64):
        return t.dtype
    if not t.dtype.is_floating_point and not t.dtype.is_complex:
        return torch.float64
    raise TypeError(f"{name} must hold float32 or float64 numbers, got torch dtype {t.dtype}")


def _float_np_dtype(dt: np.dtype, name: str) -> np.dtype:
    if dt in (np.float32, np.float64):
        return dt
    if dt.kind in "iub":
        return np.dtype(np.float64)
    raise TypeError(f"{name} must hold float32 or float64 numbers, got dtype {dt}")


def take_rows(arr, idx: np.ndarray, out=None):
    """arr[idx] along the first axis, with arr's own indexing (stays on its
    device); written into `out` (same kind) when given."""
    if out is not None:
        if tuple(out.shape) != (idx.shape[0],) + tuple(arr.shape[1:]):
            raise ValueError(
                f"out has shape {tuple(out.shape)} but the result has shape {(idx.shape[0],) + tuple(arr.shape[1:])}"
            )
        if isinstance(arr, np.ndarray) and isinstance(out, np.ndarray):
            if out.dtype != arr.dtype:
                raise TypeError(f"out has dtype {out.dtype} but the result has dtype {arr.dtype}")
            np.take(arr, idx, axis=0, out=out)
        else:
            out[...] = take_rows(arr, idx)
        return out
    if is_torch_tensor(arr):
        import torch

        return arr.index_select(0, torch.as_tensor(idx, dtype=torch.int64, device=arr.device))
    if _is_cupy(arr):
        import cupy

        return arr[cupy.asarray(idx)]
    return arr[idx]


def put_rows(dst, idx: np.ndarray, src):
    """dst[idx] = src along the first axis, in place with dst's own indexing
    (stays on its device; src converted to dst's dtype); returns dst."""
    if is_torch_tensor(dst):
        import torch

        if not is_torch_tensor(src):
            src = torch.as_tensor(np.asarray(src))
        dst[torch.as_tensor(idx, dtype=torch.int64, device=dst.device)] = src.to(device=dst.device, dtype=dst.dtype)
        return dst
    if _is_cupy(dst):
        import cupy

        dst[cupy.asarray(idx)] = cupy.asarray(src, dtype=dst.dtype)
        return dst
    dst[idx] = src
    return dst


def to_host_2d(Y, name: str = "Y") -> np.ndarray:
    """A C-contiguous float numpy (n, m) copy or view of Y (copied to the host
    if on a GPU); a TypeError naming `name` for a dtype that is not real."""
    if type(Y) is np.ndarray and Y.dtype in (np.float32, np.float64) and Y.flags.c_contiguous and Y.ndim:
        return Y.reshape(Y.shape[0], -1)      # the decoders' every call: a view, as below
    if is_torch_tensor(Y):
        dtype = _float_torch_dtype(Y, name)
        Y = Y.detach().to(dtype).cpu().numpy()
    elif _is_cupy(Y):
        Y = Y.get()
    arr = np.asarray(Y)
    dtype = _float_np_dtype(arr.dtype, name)
    return np.ascontiguousarray(arr.reshape(arr.shape[0], -1), dtype=dtype)
