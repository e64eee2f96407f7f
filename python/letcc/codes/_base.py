"""The interface every code implements, and the argument checks they share.

    code.K, code.N            number of inputs, number of workers
    code.alpha, code.beta     float64 nodes (None where a code has none)
    code.encode(X, out=None, rows=None)
                              (K, ...) -> (N, ...) coded inputs, same kind and dtype;
                              with `out` (an (N, ...) array of the same kind and
                              dtype, e.g. shared-memory slots) written in place;
                              with `rows` (worker indices) only those workers'
                              coded inputs, (len(rows), ...), in that order
    code.decode(Y, available) (len(available), ...) worker outputs -> (K, ...) estimates
    code.can_decode(available)  whether decode() accepts this set of workers
    code.is_complete(available) whether waiting for more workers cannot improve the estimate
    code.complete_needs_every_worker  True when is_complete holds for all N workers
                              only (a runtime may then sleep until all have answered)
    code.waiting_rule         None, or a letcc.codes.waiting_rule.WaitingRule stating
                              can_decode and is_complete as answer counts per group
                              of workers, which must agree with them on every set;
                              a runtime then counts answers instead of asking the
                              code (every code here states one; None: ask)
    code.linear_in_outputs    True when decode(Y, F) is a linear map of Y fixed by F
                              (no look at the data: no GCV, no outlier tests, no
                              output space chosen from Y), so that decoding many rounds
                              stacked along Y's trailing axes equals decoding each (an
                              offline evaluator may then decode them in one call).
                              False for LeTCC's default output_space='auto' (it decodes
                              probability rows in log space) and for 'log'
    code.adversaries          int E >= 0, the wrong answers per decode the code
                              tolerates (0: none). Every code states it (the base class
                              says 0; LeTCC and BACC take it as an argument), so callers
                              read it directly. Codes with E > 0 take
                              decode(Y, available, return_flagged=True) -> (estimates,
                              flagged worker indices) and are not linear_in_outputs
    code.decodes_exactly      True when decode() returns workers' own answers and never
                              an estimate (Uncoded, Replication); False for the codes
                              that estimate (LeTCC, BACC): a server flags their
                              decoded answers approximate
    code.systematic_workers   None, or (systematic codes: LeTCC / BACC with
                              systematic=True) the tuple of the K workers whose
                              coded inputs are the inputs themselves, in input
                              order: worker systematic_workers[k] computes f(x_k),
                              encode(X)[systematic_workers[k]] equals X[k] bit for
                              bit, and decode() returns its answer bit for bit as
                              estimate k whenever it answered (the others are
                              estimated). None for every other code, the
                              baselines included (Uncoded and Replication run
                              the inputs unchanged, but their decode needs a copy
                              of every input and never estimates one), so a
                              caller reads it directly
    code.idle_nodes(q)        (q,) int64, the q nodes whose answers the decode misses
                              least, cheapest first: where a runtime puts the workers it
                              leaves out of a round on purpose (letcc.codes.idle_nodes;
                              LeTCC, BACC); None where the code has no such order (the
                              baselines, whose decode needs coverage, and systematic codes,
                              whose workers are tied to their nodes)
    code.last_clean_round     None, or (a code that scores each answer of a decode
                              with adversaries > 0: LeTCC) after each decode a dict
                              whose "worker" is the top-scored entry of `available`
                              (with "statistic" and "threshold"): evidence a runtime
                              pools over rounds (letcc.runtime.quarantine). None
                              where the decode scored nothing

`available` holds worker indices 0..N-1 in any order (e.g. arrival order); row
i of Y is the output of worker available[i].
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import numpy as np

from letcc._typing import Array, Indices

from letcc._checks import as_int
from letcc.codes._arrays import as_array, is_torch_tensor, take_rows
from letcc.codes.idle_nodes import IdleNodes
from letcc.codes.waiting_rule import Coverage, WaitingRule
from letcc.splines import DenseOperator

# Items per output row from which decoding answers listed out of order permutes
# a dense decoder's columns instead of copying the rows (bench/decode_overhead.py:
# at 10000 items a row the copy was about a third of a cached decode).
PERMUTE_MIN_ROW_ITEMS = 256


# The members a runtime or server reads (the interface above); check_code names the missing one.
CODE_MEMBERS = ("K", "N", "adversaries", "systematic_workers", "decodes_exactly", "encode", "decode", "can_decode",
                "is_complete", "waiting_rule", "last_clean_round", "idle_nodes")


def check_code(code) -> None:
    """TypeError unless ``code`` has every member of the interface a runtime uses
    (CodedInference, CodedServer): any object that states them is a code."""
    for attr in CODE_MEMBERS:
        if not hasattr(code, attr):
            raise TypeError(f"code must be a letcc code (LeTCC, BACC, Uncoded, Replication); "
                            f"{type(code).__name__} has no {attr!r}")


def as_count(n, name: str, minimum: int = 1) -> int:
    """An integer count >= minimum (letcc._checks.as_int)."""
    return as_int(n, name, minimum)


class Code(ABC):
    """Base class of the codes (see the module docstring for the interface)."""

    K: int
    N: int
    alpha: np.ndarray | None = None
    beta: np.ndarray | None = None
    complete_needs_every_worker: bool = False
    linear_in_outputs: bool = True
    decodes_exactly: bool = False
    adversaries: int = 0
    systematic_workers: tuple | None = None
    waiting_rule: WaitingRule | None = None
    last_clean_round: dict | None = None
    _idle: IdleNodes | None = None      # idle_nodes' order, found on first use

    @abstractmethod
    def encode(self, X: Array, out: Array | None = None, rows: Indices | None = None) -> Array:
        """X (K, ...) -> coded inputs (N, ...), same kind and dtype as X;
        written into `out` (and `out` returned) when given. `rows` (distinct
        worker indices, any order): only the coded inputs of those workers,
        shape (len(rows), ...), equal to ``encode(X)[rows]`` (what a runtime
        computes when some workers will not be sent the round)."""

    @abstractmethod
    def decode(self, Y: Array, available: Indices) -> Any:
        """Y (len(available), ...) outputs of workers `available` -> (K, ...) estimates."""

    @abstractmethod
    def can_decode(self, available) -> bool:
        """Whether decode() can produce estimates from this set of workers."""

    @abstractmethod
    def is_complete(self, available) -> bool:
        """Whether waiting for more workers cannot improve the estimate."""

    def idle_nodes(self, q) -> np.ndarray | None:
        """(q,) int64: the q nodes whose answers the decode misses least,
        cheapest first (letcc.codes.idle_nodes), found once per code; None
        where the code has no such order (``_idle_decoder`` says None)."""
        decode = self._idle_decoder()
        if decode is None:
            return None
        if self._idle is None:
            self._idle = IdleNodes(self.K, self.N, min_answers=1)
        return self._idle(q, self.encode, decode)

    def _idle_decoder(self):
        """The plain linear-space decode ``(ascending avail, Y) -> estimates``
        that idle_nodes orders the nodes for; None (the default): no order."""
        return None

    # ---- shared checks -------------------------------------------------

    def _available(self, available, allow_empty: bool = False) -> np.ndarray:
        """`available` as an int64 array of distinct indices in 0..N-1 (order kept)."""
        # Fast path for what the runtime passes on every round, a list or tuple
        # of plain ints: checks in C loops (set, map, min, max) cost about 1 us
        # for a dozen ints and 3 us for 48, the numpy checks below about 10 us
        # (a generator over the items: 25 us for 48). Anything that fails them
        # takes the general path, which finds and names the offending entry.
        if type(available) in (list, tuple) and available:
            if (set(map(type, available)) == {int} and min(available) >= 0 and max(available) < self.N
                    and len(set(available)) == len(available)):
                return np.array(available, dtype=np.int64)
        # The same for a 1-D integer ndarray (np.flatnonzero of a mask, a
        # sorted set): its list of Python ints through the same C loops, about
        # 1.5 us for 22 workers where np.unique and the comparisons took 6 us
        # (a third of a plain decode of 10 outputs).
        elif (type(available) is np.ndarray and available.ndim == 1 and 0 < available.size <= 4096
              and available.dtype.kind in "iu"):
            lst = available.tolist()
            if min(lst) >= 0 and max(lst) < self.N and len(set(lst)) == len(lst):
                return available.astype(np.int64, copy=False)
        if is_torch_tensor(available):
            available = available.detach().cpu().numpy()
        arr = np.asarray(available)
        if arr.ndim == 0:
            raise ValueError(f"available must be a 1-D sequence of worker indices, got the scalar {available!r}")
        if arr.ndim != 1:
            raise ValueError(f"available must be 1-D, got shape {arr.shape}")
        if arr.size == 0:
            if allow_empty:
                return np.zeros(0, dtype=np.int64)
            raise ValueError("available is empty: at least one worker must have answered to decode")
        if arr.dtype.kind not in "iu":
            if arr.dtype.kind == "f" and np.all(np.isfinite(arr)) and np.all(arr == np.round(arr)):
                arr = arr.astype(np.int64)
            else:
                raise TypeError(f"available must hold integer worker indices, got dtype {arr.dtype}")
        arr = arr.astype(np.int64, copy=False)
        bad = (arr < 0) | (arr >= self.N)
        if bad.any():
            i = int(np.argmax(bad))
            raise ValueError(f"available[{i}] = {arr[i]} is not a worker index in 0..{self.N - 1}")
        if np.unique(arr).size != arr.size:
            vals, counts = np.unique(arr, return_counts=True)
            raise ValueError(f"available lists worker {int(vals[np.argmax(counts > 1)])} more than once")
        return arr

    def _rows(self, rows):
        """`rows` of encode() as an int64 array of distinct worker indices (order kept)."""
        try:
            return self._available(rows)
        except (TypeError, ValueError) as exc:
            raise type(exc)(str(exc).replace("available", "rows")) from None

    def _inputs(self, X):
        X = as_array(X, "X")
        if X.shape[0] != self.K:
            raise ValueError(f"X has {X.shape[0]} rows but the code encodes K = {self.K} inputs")
        return X

    def _decode_rows(self, avail: np.ndarray, Y, plan, permutable: bool = True, rows=None):
        """Decode Y, whose row i is worker avail[i]'s output (rows given: Y's
        row rows[i] is, and the rows of Y not listed are left out).

        ``plan(sorted_idx, Y_sorted)`` gives the decoder of the ascending set,
        whose columns follow ascending worker order (Y_sorted is passed as
        None when the decoder is wanted without data; `permutable` says that
        is allowed). Rows listed in ascending order are used as they are.
        Otherwise Y's rows are copied into that order, unless the decoder is a
        DenseOperator and Y a numpy array with wide rows: then the decoder's
        columns are put into Y's order instead, which copies a (K, F) matrix
        rather than F rows of Y. Rows left out (the robust decoders'
        erasures): the decoder is applied to the rows kept where they lie
        when it is a DenseOperator and Y a C-contiguous float numpy array
        (DenseOperator._apply_rows: the numbers of the decode of those rows
        gathered, bit for bit); otherwise they are copied first."""
        order = avail.argsort(kind="stable")
        srt = avail[order]
        if rows is not None:
            rows = np.asarray(rows, dtype=np.int64)
            if permutable and type(Y) is np.ndarray:
                op = plan(srt, None)
                if isinstance(op, DenseOperator):
                    est = op._apply_rows(Y, rows[order])
                    if est is not None:
                        return est
            Y = take_rows(Y, rows)
        # already ascending? (comparing the bytes: about 0.1 us, where the
        # elementwise != and .any() took 1-1.7 us of a 7-10 us decode)
        if srt.tobytes() == avail.tobytes():
            return plan(srt, Y)(Y)
        if permutable and type(Y) is np.ndarray and Y.size >= PERMUTE_MIN_ROW_ITEMS * Y.shape[0]:
            op = plan(srt, None)
            if isinstance(op, DenseOperator):
                inverse = np.empty_like(order)
                inverse[order] = np.arange(order.shape[0])
                return op._with_columns(inverse)(Y)
        Y = take_rows(Y, order)
        return plan(srt, Y)(Y)

    def _outputs(self, Y, avail: np.ndarray):
        Y = as_array(Y, "Y")
        if Y.shape[0] != avail.shape[0]:
            raise ValueError(
                f"Y has {Y.shape[0]} rows but available lists {avail.shape[0]} workers; "
                "row i of Y must be the output of worker available[i]"
            )
        return Y

    def __repr__(self) -> str:
        return f"{type(self).__name__}(K={self.K}, N={self.N})"


def any_answer_rule(code, at_least: int = 1) -> WaitingRule:
    """The waiting rule of a code that decodes any `at_least` answers and is
    complete with every worker, or, systematic, once its systematic workers
    answered (LeTCC, BACC)."""
    complete = (Coverage.each(range(code.N), code.N) if code.systematic_workers is None
                else Coverage.each(code.systematic_workers, code.N))
    return WaitingRule(Coverage.count(code.N, at_least), complete)

