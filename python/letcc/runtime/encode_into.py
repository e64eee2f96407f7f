"""Encode straight into the input slots (no intermediate (N, ...) array).

The slots hold N x B coded inputs (9.6 MB for N = 16 images of 3x224x224
float32); copying a freshly encoded array into them costs about as much as a
third of the encode itself. So, in order of preference:

1. ``code.encode(X, out=slots)`` when the code's encode takes ``out``;
2. for LeTCC (whose encode is its public ``encoder`` plan applied to X, a
   ``letcc.SplineSmoother`` that accepts ``out``): ``code.encoder(X, out=slots)``;
3. otherwise ``slots[...] = code.encode(X)``.

When a round goes to some workers only (the others are dead, not ready, or,
with virtual straggler delays, could never count), only their coded inputs
are computed: ``code.encode(X, out=slots[:len(rows)], rows=rows)`` where the
code's encode takes ``rows``, into the first slots in the order of ``rows``.
A quarter less encoding at N = 16, S = 4, where the encode is the largest
part of the master's round. The caller tells each worker which slot is its.
"""
from __future__ import annotations

import inspect

import numpy as np

from letcc.splines import SplineSmoother

__all__ = ["encoder_into"]


def _params(fn) -> set:
    try:
        return set(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return set()


def encoder_into(code):
    """A function (X, get_slots, rows=None) -> (slots, positions): encodes X
    (K, B, ...) into the (N, B, ...) array get_slots(dtype) returns. rows:
    the workers that need their coded input (None: all). positions is None
    when worker j's input is slot j (everything encoded), else an (N,) int64
    array: the slot of each worker in rows, -1 for the others."""
    params = _params(code.encode)
    takes_out, takes_rows = "out" in params, "rows" in params
    plan = getattr(code, "encoder", None)
    float_kinds = (np.dtype(np.float32), np.dtype(np.float64))
    n_workers = int(code.N)

    def via_copy(X, get_slots, rows=None):
        coded = np.asarray(code.encode(np.ascontiguousarray(X)))
        slots = get_slots(coded.dtype)
        slots[...] = coded
        return slots, None

    if takes_out:
        def via_out(X, get_slots, rows=None):
            if X.dtype not in float_kinds:
                return via_copy(X, get_slots)
            slots = get_slots(X.dtype)
            if rows is None or not takes_rows or len(rows) in (0, n_workers):
                code.encode(X, out=slots)
                return slots, None
            code.encode(X, out=slots[:len(rows)], rows=rows)
            positions = np.full(n_workers, -1, dtype=np.int64)
            positions[np.asarray(rows, dtype=np.int64)] = np.arange(len(rows))
            return slots, positions
        return via_out

    if isinstance(plan, SplineSmoother) and type(code).__name__ == "LeTCC":
        def via_plan(X, get_slots, rows=None):
            if X.dtype not in float_kinds or X.shape[0] != code.K:
                return via_copy(X, get_slots)      # let the code's own checks speak
            slots = get_slots(X.dtype)
            plan(X, out=slots)
            return slots, None
        return via_plan

    return via_copy
