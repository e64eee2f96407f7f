"""Encode straight into the input slots (no intermediate (N, ...) array).

The slots hold N x B coded inputs (9.6 MB for N = 16 images of 3x224x224
float32); copying a freshly encoded array into them costs about as much as a
third of the encode itself. Every code takes ``out`` and ``rows``
(letcc.codes._base.Code.encode), so float32 / float64 inputs are encoded with
``code.encode(X, out=slots)``; other dtypes (which a code turns into float64,
or keeps, as Uncoded does) are encoded first and copied into slots of the
result's dtype.

When a round goes to some workers only (the others are dead, not ready, or,
with virtual straggler delays, could never count), only their coded inputs
are computed: ``code.encode(X, out=slots[:len(rows)], rows=rows)``, into the
first slots in the order of ``rows``. A quarter less encoding at N = 16,
S = 4, where the encode is the largest part of the master's round. The caller
tells each worker which slot is its. Small inputs are the exception: up to
FULL_ENCODE_MAX_ITEMS coded numbers in all, every node is encoded (below).

Rows are nodes: worker j computes node j unless the caller assigns nodes to
workers itself (``workers``: worker workers[i] computes node rows[i]; the
quarantine's evidence over rounds draws a random assignment every round).
"""
from __future__ import annotations

import numpy as np

__all__ = ["encode_into"]

_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))

# Up to this many coded numbers for all N workers (N x B x d) every node is
# encoded, whoever was sent the round: a subset's encoder is another plan (one
# per set of workers, and random stragglers make a new set nearly every
# round), and below this size building it costs more than encoding every row.
# Measured (LeTCC, float32, N - N/4 rows of N, one core): N = 16, d = 8 / 256 /
# 784: every row 1.2 / 1.8 / 3.6 us against a new subset's 9.4 / 12.0 / 9.5 us
# (a cached subset's 3.5-5.5 us); N = 64, d = 256: 8.8 against 16.9 us. The
# two meet near N x d = 200000 (N = 16, d = 3072: 11.2 vs 15.7 us; d = 12288:
# 45.6 vs 46.2 us), and beyond it the subset is cheaper (d = 49152: 191 vs
# 157 us); 2^15 stays well on the side where every row wins.
FULL_ENCODE_MAX_ITEMS = 1 << 15


def encode_into(code, X: np.ndarray, get_slots, rows=None, workers=None):
    """Encode X (K, B, ...) into the (N, B, ...) array ``get_slots(dtype)``
    returns. rows: the nodes whose coded inputs are needed (None: all);
    workers: who computes each of them (None: worker j computes node j).
    Returns None when worker j's input is slot j (everything encoded, no
    assignment), else an (N,) int64 array: the slot of each worker that
    computes a node, -1 for the others."""
    if workers is not None:
        return _encode_assigned(code, X, get_slots, np.asarray(rows, dtype=np.int64),
                                np.asarray(workers, dtype=np.int64))
    if X.dtype not in _FLOATS:
        coded = np.asarray(code.encode(np.ascontiguousarray(X)))
        get_slots(coded.dtype)[...] = coded
        return None
    slots = get_slots(X.dtype)
    if _every_node(code, X, rows):
        code.encode(X, out=slots)
        return None
    code.encode(X, out=slots[:len(rows)], rows=rows)
    positions = np.full(code.N, -1, dtype=np.int64)
    positions[np.asarray(rows, dtype=np.int64)] = np.arange(len(rows))
    return positions


def _encode_assigned(code, X, get_slots, rows, workers):
    """encode_into with worker workers[i] computing node rows[i]."""
    positions = np.full(code.N, -1, dtype=np.int64)
    if X.dtype in _FLOATS and not _every_node(code, X, rows):
        code.encode(X, out=get_slots(X.dtype)[:len(rows)], rows=rows)
        positions[workers] = np.arange(len(rows))
        return positions
    encode_into(code, X, get_slots)         # every node, in its own slot
    positions[workers] = rows
    return positions


def _every_node(code, X: np.ndarray, rows) -> bool:
    """Whether every node is encoded: all of them asked for (or none: rows
    empty), or inputs of FULL_ENCODE_MAX_ITEMS coded numbers or fewer for the
    N workers (X (K, B, ...): N x B x ... of them)."""
    return (rows is None or len(rows) in (0, code.N)
            or code.N * (X.size // X.shape[0]) <= FULL_ENCODE_MAX_ITEMS)
