"""A code's can_decode / is_complete stated as counts (``code.waiting_rule``).

A runtime decides a round on every wake-up: which prefix of the answers, in
arrival order, is the first that the code can decode, or that is complete.
Asking ``can_decode`` / ``is_complete`` for that (numpy index checks, a few
microseconds each, several asks a round) was the largest Python cost of the
master's round loop after the task messages. Every code of this package
decides both from how many answers cover each of its groups of workers, so it
states that instead, and the runtime counts (letcc.runtime.virtual_time):

    Coverage(group, need) holds for a set F of workers when, for every g,
    at least need[g] workers j of F have group[j] == g (group[j] = -1: worker
    j counts for no group).

LeTCC / BACC decode any answer (one group of all N, need 1; BACC with E
adversaries needs its Berlekamp-Welch count), are complete with all N (a group
per worker), or, systematic, once the K systematic workers answered;
Replication / Uncoded decode and complete once every input is covered (the
group of worker i is input i % K). A code without a waiting rule
(``waiting_rule = None``) is asked through can_decode / is_complete.
"""
from __future__ import annotations

from typing import NamedTuple, Sequence

__all__ = ["Coverage", "WaitingRule"]


class Coverage:
    """A monotone rule on sets of workers: at least ``need[g]`` answers of each
    group g, ``group[j]`` the group of worker j (-1: none)."""

    __slots__ = ("group", "need", "_single")

    def __init__(self, group: Sequence[int], need: Sequence[int]):
        self.group = tuple(int(g) for g in group)
        self.need = tuple(int(m) for m in need)
        if not self.need:
            raise ValueError("a coverage rule needs at least one group")
        bad = [g for g in self.group if not -1 <= g < len(self.need)]
        if bad:
            raise ValueError(f"group {bad[0]} is not -1 or one of the {len(self.need)} groups")
        if min(self.need) < 1:
            raise ValueError(f"every group needs >= 1 answer, got need {list(self.need)}")
        # one group holding every worker: a plain count (LeTCC, BACC), no loop
        self._single = self.need[0] if len(self.need) == 1 and all(g == 0 for g in self.group) else None

    @classmethod
    def count(cls, n_workers: int, at_least: int) -> "Coverage":
        """Any `at_least` of the n_workers workers."""
        return cls((0,) * n_workers, (at_least,))

    @classmethod
    def each(cls, workers: Sequence[int], n_workers: int) -> "Coverage":
        """Every worker of `workers` (the others count for nothing)."""
        group = [-1] * n_workers
        for k, j in enumerate(workers):
            group[j] = k
        return cls(group, (1,) * len(workers))

    def first_prefix(self, workers: Sequence[int]) -> int | None:
        """The smallest p with the rule holding for workers[:p] (distinct
        workers), or None when it does not hold for all of them."""
        if self._single is not None:
            return self._single if len(workers) >= self._single else None
        group, need = self.group, self.need
        counts = [0] * len(need)
        left = len(need)
        for i, j in enumerate(workers):
            g = group[j]
            if g >= 0:
                counts[g] += 1
                if counts[g] == need[g]:
                    left -= 1
                    if not left:
                        return i + 1
        return None

    def holds(self, workers: Sequence[int]) -> bool:
        """Whether the rule holds for this set of distinct workers."""
        return self.first_prefix(list(workers)) is not None

    def __repr__(self) -> str:
        return f"Coverage(group={list(self.group)}, need={list(self.need)})"


class WaitingRule(NamedTuple):
    """``decodable`` is can_decode and ``complete`` is is_complete, as Coverage rules."""

    decodable: Coverage
    complete: Coverage
