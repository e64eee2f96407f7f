"""Which nodes to leave without a worker: the ones the decode misses least.

A runtime that sends a round to fewer than N workers on purpose (a
quarantine, letcc.runtime.quarantine) chooses which nodes go unanswered, and
the choice matters far more than the count. On LeTCC(8, 24) with a smooth f
and every other worker answering, one unanswered node costs from 1.01x the
full decode's MSE (the end nodes, and the nodes next to them) to 45x (a node
midway between two input nodes, where the decode leans on it): a node drawn
at random costs about 9x on average (bench/results/quarantine.md, part 3). A code
states its order with ``code.idle_nodes(q)``; the stragglers, which nobody
chooses, fall where they fall.

``IdleNodes`` finds the order greedily: the node whose absence costs the
decode least, then the node that costs least next to it, and so on. The cost
of a set of unanswered nodes is the squared error of the K estimates summed
over ``ROUNDS`` honest synthetic rounds of the code's own encode and its plain
decode in the linear space, through the random smooth networks the
clean-round test calibrates on (letcc.codes.clean_round.synthetic_network;
why they stand for a real model is said there): with every other worker
answering, plus its mean over one of the holes' neighbours (the nearest
answered node on either side) missing too. The second term is the stragglers
nobody chooses: a hole beside a straggler is a gap twice as wide, and
without it the order prefers middle nodes that are cheap alone and costly
beside a straggler. Deterministic (a fixed seed), computed on first use per
code and kept: O(q^2 N) decodes of ROUNDS stacked rounds. Greedy is not
exhaustive: on LeTCC(8, 24) its pair's cost above the full decode's is within
7% of the exhaustive best pair's (tests/test_idle_nodes.py allows 25%).
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from letcc._checks import as_int
from letcc.codes.clean_round import DIM_IN, SEED, synthetic_network

__all__ = ["IdleNodes", "ROUNDS"]

ROUNDS = 256     # synthetic rounds behind the order (stacked: one decode per candidate set)


class IdleNodes:
    """One code's greedy order, found as far as asked. ``idle(q, encode,
    decode)``: (q,) int64, the q nodes whose answers the decode misses least,
    cheapest first (a prefix of the one order).

    encode : X (K, ...) -> (N, ...) coded inputs (the code's encode);
    decode : (avail, Y) -> (K, ...) the plain linear-space decode of the
    answers Y of the ascending int64 nodes avail; min_answers : the fewest
    answers ``decode`` takes (q may leave no fewer). Holds plain data only
    (the order and the synthetic rounds), no reference to its code."""

    def __init__(self, K: int, N: int, min_answers: int) -> None:
        self.K, self.N, self.min_answers = int(K), int(N), int(min_answers)
        self._order: list[int] = []
        # (coded outputs (N, R, m), exact outputs (K, R, m)), made on first use
        self._rounds: tuple[np.ndarray, np.ndarray] | None = None

    def __call__(self, q, encode: Callable, decode: Callable) -> np.ndarray:
        most = self.N - self.min_answers
        q = as_int(q, "q", 0)
        if q > most:
            raise ValueError(f"q = {q} idle nodes leave fewer than the {self.min_answers} answers the decode "
                             f"takes (N = {self.N}: at most {most})")
        while len(self._order) < q:
            left = [j for j in range(self.N) if j not in self._order]
            costs = [self.cost(self._order + [j], encode, decode) for j in left]
            self._order.append(left[int(np.argmin(costs))])       # ties: the lower node
        return np.asarray(self._order[:q], dtype=np.int64)

    def cost(self, idle, encode: Callable, decode: Callable) -> float:
        """The squared error of the plain decode over the synthetic rounds
        with the nodes ``idle`` unanswered and every other one answered, plus
        its mean over one of their neighbours unanswered too."""
        idle = [int(j) for j in idle]
        err = self.error(idle, encode, decode)
        beside = self.neighbours(idle)
        if not beside or self.N - len(idle) <= self.min_answers:
            return err
        return err + float(np.mean([self.error(idle + [j], encode, decode) for j in beside]))

    def neighbours(self, idle) -> list:
        """The answered nodes next to the unanswered ones (the nearest on
        each side, in node order): where one more missing node widens a gap."""
        answered = [j for j in range(self.N) if j not in idle]
        out = set()
        for h in idle:
            left = [j for j in answered if j < h]
            right = [j for j in answered if j > h]
            out.update(([left[-1]] if left else []) + ([right[0]] if right else []))
        return sorted(out)

    def error(self, missing, encode: Callable, decode: Callable) -> float:
        """The squared error of the plain decode over the synthetic rounds,
        the nodes ``missing`` unanswered."""
        if self._rounds is None:
            rng = np.random.default_rng([SEED, self.K, self.N, 1])
            X = rng.standard_normal((self.K, ROUNDS, DIM_IN))
            f = synthetic_network(rng, ROUNDS)
            self._rounds = (f(np.asarray(encode(X), dtype=np.float64)), f(X))
        Y, exact = self._rounds
        avail = np.setdiff1d(np.arange(self.N), np.asarray(missing, dtype=np.int64))
        est = np.asarray(decode(avail, np.ascontiguousarray(Y[avail])), dtype=np.float64)
        return float(np.sum((est - exact) ** 2))
