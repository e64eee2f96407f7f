"""Baselines without coding: every worker computes one of the raw inputs.

Uncoded(K): N = K workers, worker k gets input k; decoding needs all of them.
Replication(K, r): N = K * r workers, worker i gets input i % K (so workers
0..K-1 hold one full copy, K..2K-1 the next, ...); decoding needs at least one
copy of every input, and the first copy listed in `available` wins (pass
`available` in arrival order to keep the earliest answer).
"""
from __future__ import annotations

import numpy as np

from letcc._typing import Array, Indices

from letcc.codes._arrays import take_rows
from letcc.codes._base import Code, as_count
from letcc.codes.waiting_rule import Coverage, WaitingRule

__all__ = ["Uncoded", "Replication"]


class Replication(Code):
    """r-fold replication of K inputs on N = K * r workers (worker i computes input i % K)."""

    decodes_exactly = True                  # decode() copies a worker's answer for every input

    def __init__(self, K: int, r: int) -> None:
        self.K = as_count(K, "K")
        self.r = as_count(r, "r")
        self.N = self.K * self.r
        self.assignment = np.arange(self.N, dtype=np.int64) % self.K  # input each worker computes
        covered = Coverage(self.assignment.tolist(), (1,) * self.K)   # a copy of every input
        self.waiting_rule = WaitingRule(covered, covered)

    def encode(self, X: Array, out: Array | None = None, rows: Indices | None = None) -> Array:
        """X (K, ...) -> (N, ...) with row i = X[i % K] (a copy; Uncoded returns
        X itself unless `out` is given, which is written and returned). With
        `rows` (worker indices): only those workers' rows, in that order."""
        X = self._inputs(X)
        if rows is not None:
            return take_rows(X, self.assignment[self._rows(rows)], out)
        if self.r == 1 and out is None:
            return X
        return take_rows(X, self.assignment, out)

    def _first_copies(self, avail: np.ndarray) -> np.ndarray:
        """Position in `avail` of the first worker holding each input (-1: none)."""
        first = np.full(self.K, -1, dtype=np.int64)
        inputs = self.assignment[avail]
        # np.unique returns the first occurrence of each value.
        vals, pos = np.unique(inputs, return_index=True)
        first[vals] = pos
        return first

    def decode(self, Y: Array, available: Indices) -> Array:
        """Y (len(available), ...) -> (K, ...): row k = the first listed copy of input k."""
        avail = self._available(available)
        Y = self._outputs(Y, avail)
        first = self._first_copies(avail)
        missing = np.flatnonzero(first < 0)
        if missing.size:
            raise ValueError(f"cannot decode: no answering worker holds input(s) {missing.tolist()}")
        if np.array_equal(first, np.arange(self.K)) and avail.shape[0] == self.K:
            return Y
        return take_rows(Y, first)

    def can_decode(self, available) -> bool:
        avail = self._available(available, allow_empty=True)
        return avail.size > 0 and bool(np.all(self._first_copies(avail) >= 0))

    def is_complete(self, available) -> bool:
        return self.can_decode(available)

    def __repr__(self) -> str:
        return f"Replication(K={self.K}, r={self.r})"


class Uncoded(Replication):
    """No redundancy: N = K workers, worker k computes input k, all are needed."""

    complete_needs_every_worker = True      # each worker holds the only copy of its input

    def __init__(self, K: int) -> None:
        super().__init__(K, 1)

    def __repr__(self) -> str:
        return f"Uncoded(K={self.K})"
