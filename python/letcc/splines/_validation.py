"""Argument checks shared by the spline objects.

Every check names the offending value, so that a bad call fails with a message
a user can act on rather than inside the compiled core.
"""
from __future__ import annotations

import numbers

import numpy as np

_FLOAT_KINDS = (np.float32, np.float64)


def as_knots(x, name: str = "x") -> np.ndarray:
    """Strictly increasing, finite, 1-D float64 knots."""
    if np.iscomplexobj(x):
        raise TypeError(f"{name} must be real, got complex values")
    try:
        arr = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{name} must be a 1-D array of real numbers, got {type(x).__name__}") from exc
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {arr.shape}")
    if arr.size == 0:
        raise ValueError(f"{name} is empty; need at least one knot")
    bad = ~np.isfinite(arr)
    if bad.any():
        i = int(np.argmax(bad))
        raise ValueError(f"{name}[{i}] = {arr[i]} is not finite")
    not_increasing = arr[1:] <= arr[:-1]  # a comparison: np.diff can overflow for huge knots
    if not_increasing.any():
        i = int(np.argmax(not_increasing))
        raise ValueError(
            f"{name} must be strictly increasing, but {name}[{i + 1}] = {arr[i + 1]} <= {name}[{i}] = {arr[i]}"
        )
    return np.ascontiguousarray(arr)


def as_points(at, name: str = "at") -> np.ndarray:
    """Finite 1-D float64 evaluation points (any order, repeats allowed)."""
    if np.iscomplexobj(at):
        raise TypeError(f"{name} must be real, got complex values")
    try:
        arr = np.asarray(at, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{name} must be an array of real numbers, got {type(at).__name__}") from exc
    if arr.ndim > 1:
        raise ValueError(f"{name} must be a scalar or 1-D, got shape {arr.shape}")
    arr = np.atleast_1d(arr)
    bad = ~np.isfinite(arr)
    if bad.any():
        i = int(np.argmax(bad))
        raise ValueError(f"{name}[{i}] = {arr[i]} is not finite")
    return np.ascontiguousarray(arr)


def as_weights(w, n: int) -> np.ndarray:
    """Positive finite weights of length n (all ones when w is None)."""
    if w is None:
        return np.ones(n)
    if np.iscomplexobj(w):
        raise TypeError("w must be real, got complex values")
    try:
        arr = np.asarray(w, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"w must be an array of real numbers, got {type(w).__name__}") from exc
    if arr.ndim != 1 or arr.shape[0] != n:
        raise ValueError(f"w must have shape ({n},) to match x, got shape {arr.shape}")
    bad = ~(np.isfinite(arr) & (arr > 0))
    if bad.any():
        i = int(np.argmax(bad))
        raise ValueError(f"weights must be positive and finite, got w[{i}] = {arr[i]}")
    return np.ascontiguousarray(arr)


def as_lam(lam) -> float:
    """A finite lam >= 0."""
    if isinstance(lam, (bool, np.bool_)) or not isinstance(lam, (numbers.Real, np.floating, np.integer)):
        raise TypeError(f"lam must be a real number >= 0 or None, got {lam!r}")
    value = float(lam)
    if not np.isfinite(value) or value < 0:
        raise ValueError(f"lam must be finite and >= 0, got {lam!r}")
    return value


def as_lams(values, name: str) -> list[float]:
    """Each of `values` through as_lam; an error names the entry, name[i]."""
    out = []
    for i, v in enumerate(values):
        try:
            out.append(as_lam(v))
        except (TypeError, ValueError) as exc:
            raise type(exc)(f"{name}[{i}]: {exc}") from None
    return out


def as_nu(nu) -> int:
    if isinstance(nu, (bool, np.bool_)) or not isinstance(nu, (numbers.Integral, np.integer)):
        raise TypeError(f"nu must be an integer 0, 1 or 2, got {nu!r}")
    if not 0 <= int(nu) <= 2:
        raise ValueError(f"nu must be 0, 1 or 2, got {nu!r}")
    return int(nu)


def check_knot_axis(ndim: int, name: str = "y") -> None:
    """`name` has a first axis for the knots (ndim >= 1)."""
    if ndim < 1:
        raise ValueError(f"{name} must have at least one dimension (the knot axis), got a scalar")


def check_rows(shape, n: int) -> None:
    """y of this shape can go through a plan (a linear map) on n knots: its
    first axis, the knot axis, holds n rows. The one home of this check and
    its message for the CPU, dense and GPU routes (the compiled core only
    refuses such a y, letting its caller say why)."""
    check_knot_axis(len(shape))
    if shape[0] != n:
        raise ValueError(f"y has {shape[0]} rows along the knot axis but the plan has n = {n} knots")


def float_dtype_of(arr: np.ndarray, name: str = "y") -> np.dtype:
    """float32 stays float32, float64 stays float64, integers and bools become
    float64; anything else (complex, object, strings, float16) is refused."""
    dt = arr.dtype
    if dt in _FLOAT_KINDS:
        return dt
    if dt.kind in "iub":
        return np.dtype(np.float64)
    raise TypeError(f"{name} must hold float32 or float64 numbers, got dtype {dt}")
