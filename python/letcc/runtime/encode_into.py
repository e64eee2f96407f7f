"""Encode straight into the input slots (no intermediate (N, ...) array).

The slots hold N x B coded inputs (9.6 MB for N = 16 images of 3x224x224
float32); copying a freshly encoded array into them costs about as much as a
third of the encode itself. So, in order of preference:

1. ``code.encode(X, out=slots)`` when the code's encode takes ``out``;
2. for LeTCC (whose encode is its public ``encoder`` plan applied to X, a
   ``letcc.SplineSmoother`` that accepts ``out``): ``code.encoder(X, out=slots)``;
3. otherwise ``slots[...] = code.encode(X)``.
"""
from __future__ import annotations

import inspect

import numpy as np

from letcc.splines import SplineSmoother

__all__ = ["encoder_into"]


def encoder_into(code):
    """A function (X, dtype, get_slots) -> slots: encodes X (K, B, ...) into the
    array get_slots(dtype) returns and returns that array."""
    try:
        takes_out = "out" in inspect.signature(code.encode).parameters
    except (TypeError, ValueError):
        takes_out = False
    plan = getattr(code, "encoder", None)
    float_kinds = (np.dtype(np.float32), np.dtype(np.float64))

    def via_copy(X, get_slots):
        coded = np.asarray(code.encode(np.ascontiguousarray(X)))
        slots = get_slots(coded.dtype)
        slots[...] = coded
        return slots

    if takes_out:
        def via_out(X, get_slots):
            if X.dtype not in float_kinds:
                return via_copy(X, get_slots)
            slots = get_slots(X.dtype)
            code.encode(X, out=slots)
            return slots
        return via_out

    if isinstance(plan, SplineSmoother) and type(code).__name__ == "LeTCC":
        def via_plan(X, get_slots):
            if X.dtype not in float_kinds or X.shape[0] != code.K:
                return via_copy(X, get_slots)      # let the code's own checks speak
            slots = get_slots(X.dtype)
            plan(X, out=slots)
            return slots
        return via_plan

    return via_copy
