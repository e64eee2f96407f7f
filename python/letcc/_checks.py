"""Scalar argument checks shared by every layer (the one home for "an integer
>= m" and "a finite real number >= m").

Both reject bools (``True`` is an int to Python, never a count to a user),
raise TypeError for a value of the wrong kind and ValueError for one out of
range, and name the argument and the offending value, so a bad call fails
with a message the user can act on. This module imports nothing from letcc:
the spline layer, the codes, the straggler models and the runtime all use it.
"""
from __future__ import annotations

import math
import numbers

import numpy as np

__all__ = ["as_int", "as_real", "as_choice"]


def as_int(v, name: str, minimum: int | None = None, maximum: int | None = None) -> int:
    """``v`` as a Python int, checked to lie in [minimum, maximum] (either end
    may be None: unbounded)."""
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, numbers.Integral):
        raise TypeError(f"{name} must be an integer, got {type(v).__name__} {v!r}")
    value = int(v)
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {v!r}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{name} must be <= {maximum}, got {v!r}")
    return value


def as_real(v, name: str, minimum: float | None = None, maximum: float | None = None, *,
            strict: bool = False, strict_max: bool = False, finite: bool = True) -> float:
    """``v`` as a Python float, finite unless ``finite=False``, in [minimum,
    maximum] (either end None: unbounded; ``strict`` / ``strict_max`` make
    that end open)."""
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(v).__name__} {v!r}")
    value = float(v)
    if math.isnan(value) or (finite and math.isinf(value)):
        raise ValueError(f"{name} must be a finite real number, got {v!r}")
    if minimum is not None and (value <= minimum if strict else value < minimum):
        raise ValueError(f"{name} must be {'>' if strict else '>='} {minimum}, got {v!r}")
    if maximum is not None and (value >= maximum if strict_max else value > maximum):
        raise ValueError(f"{name} must be {'<' if strict_max else '<='} {maximum}, got {v!r}")
    return value


def as_choice(v, allowed, name: str):
    """``v`` if it is one of ``allowed``, else ValueError naming both."""
    if v not in allowed:
        raise ValueError(f"{name} must be one of {tuple(allowed)}, got {v!r}")
    return v
