"""When is a round over? The waiting rule on a virtual clock.

Straggler simulation applies each worker's injected delay on the master: the
answer of worker j that really arrives ``e_j`` seconds after dispatch is
treated as arriving at the virtual time ``v_j = e_j + delay_j``. Workers with an
infinite delay never count (their answers are computed, then ignored). Nobody
sleeps; the outcome depends on the delays, not on the machine's speed, once the
delays are large against real compute times (and exactly, for delays that are
0 or inf: ``FixedCount`` answers with exactly ``draw.available``).

The master can stop before the virtual times elapse because it knows every
delay up front: a worker j still computing at real elapsed time e can only land
at ``v_j >= e + delay_j``. So an arrived answer with virtual time v is
*confirmed* (nothing pending can still overtake it) once v <= H(e) =
min_pending(e + delay_j), and the waiting rule only ever reads confirmed
answers, in virtual order. The rule (first match wins):

- ``count`` answers confirmed and ``code.can_decode`` them -> done;
- ``code.is_complete`` (waiting longer cannot help: all N, or for the baselines
  every input covered) -> done;
- every pending worker can only land after the deadline -> done with the
  answers whose virtual time is within it;
- nothing pending (the rest failed, crashed, hung or never answer) -> done.

With simulate="sleep" the delays happen for real inside the workers; the
master then uses delay 0 here (only infinite delays are excluded up front).

Two implementations of one rule: ``RoundWaiter`` (Python; any code, asking
can_decode / is_complete where the code states no waiting rule) and
``CountedRoundWaiter`` (compiled, csrc/round_waiter.hpp; codes with a
``waiting_rule``, every code of letcc.codes: the same decisions and times,
number for number, for 2.8x less CPU a round at N = 16 and 4-11x at N = 64
and 256: bench/results/round_waiter.md). ``round_waiter`` picks the one a
code can use.
"""
from __future__ import annotations

import bisect
import functools
import math
from dataclasses import dataclass

import numpy as np

from letcc import _core

__all__ = ["Decision", "RoundWaiter", "CountedRoundWaiter", "round_waiter"]


@dataclass(frozen=True)
class Decision:
    answered: tuple      # workers whose answers count, in virtual arrival order
    at: float            # virtual time (s after dispatch) the round was decided
    rule: str            # count | complete | deadline | all


class RoundWaiter:
    """Bookkeeping and the waiting rule of one round (pure logic, no I/O).

    Parameters
    ----------
    code : a letcc code (the contract of letcc.codes._base). With a
        ``waiting_rule`` (every code of letcc.codes) the rule counts answers
        and the code is not called; else can_decode(available) /
        is_complete(available), both monotone (a superset of a decodable /
        complete set is one too), are called a handful of times per round, not
        per answer: only on answer sets that grew, with memoisation, and
        is_complete not at all when even every worker still in the race could
        not complete.
    dispatched : workers that were sent the round
    delays : (N,) float64 virtual delays applied on the master (0 where none)
    never : (N,) bool, workers whose answers never count (infinite delay)
    count : int or None, "the first `count` answers" (None: no count rule)
    deadline : float or None, seconds after dispatch
    hang_at : {worker: elapsed seconds after which a silent worker is hung}
    may_complete : whether ``code.is_complete`` holds for the workers that can
        count (dispatched, not never), if the caller knows it (None: asked here)
    """

    def __init__(self, code, dispatched, delays, never, count=None, deadline=None, hang_at=None,
                 may_complete=None):
        self.code = code
        self.delays = np.asarray(delays, dtype=np.float64)
        self._dlist = self.delays.tolist()      # per-worker reads without numpy scalars
        self.count = count
        self.deadline = math.inf if deadline is None else float(deadline)
        self.pending = {int(j) for j in dispatched if not never[j]}
        self.hang_at = dict(hang_at or {})
        self.arrived: dict[int, float] = {}     # worker -> virtual time
        self.real: dict[int, float] = {}        # worker -> real elapsed time of its answer
        self.failed: dict[int, str] = {}        # worker -> reason
        self._order: list = []                  # (virtual time, worker), ascending
        self._memo: dict = {}
        self._failed: dict = {}                 # rule -> the largest set seen failing it
        rule = code.waiting_rule                # None: ask the code (memoised, _holds)
        self._rules = None if rule is None else {"count": rule.decodable, "complete": rule.complete}
        # min delay / hang time over pending (None: recompute); asked several
        # times per event, pending only changes in _leave()
        self._dmin: float | None = None
        self._hmin: float | None = None
        # is_complete is monotone: if all workers still in the race cannot complete, no subset
        # can; may_complete: that answer for these pending workers, known to the caller
        if may_complete is None:
            may_complete = bool(self.pending) and self._holds("complete", sorted(self.pending))
        self._may_complete = bool(may_complete)
        # a code whose is_complete holds for all N workers only (LeTCC, BACC,
        # Uncoded) can complete only once every pending worker has answered
        self._complete_needs_all = bool(getattr(code, "complete_needs_every_worker", False))

    def result(self, j: int, elapsed: float) -> bool:
        """Worker j answered `elapsed` s after dispatch; True when it counts."""
        self.real[j] = elapsed
        if j not in self.pending:
            return False
        self._leave(j)
        v = elapsed + self._dlist[j]
        self.arrived[j] = v
        bisect.insort(self._order, (v, j))
        return True

    def results(self, workers, times, t0: float) -> None:
        """result(j, t - t0) for each worker j and its time t (perf_counter)."""
        for j, t in zip(workers, times):
            self.result(j, t - t0)

    def fail(self, j: int, reason: str) -> None:
        """Worker j will not answer this round (crashed, raised, hung)."""
        if j in self.pending or j not in self.arrived:
            if j in self.pending and self._may_complete:
                self.pending.discard(j)
                self._may_complete = self._holds("complete", sorted(self.pending | set(self.arrived)))
            self._leave(j)
            self.failed.setdefault(j, reason)

    def _leave(self, j: int) -> None:
        """Worker j is no longer pending: forget the minima cached over the pending
        set that j may have held (a larger value leaves the minimum as it was)."""
        self.pending.discard(j)
        if self._dmin is not None and self._dlist[j] <= self._dmin:
            self._dmin = None
        if self._hmin is not None and self.hang_at.get(j, math.inf) <= self._hmin:
            self._hmin = None

    def answers_needed(self) -> int:
        """At least how many more answers decide() needs before it can end the
        round other than by time passing (deadline, confirmation, hang: see
        next_change) or by a failure: the master may sleep until they are in.
        Always >= 1."""
        need = len(self.pending)                          # rule "all": nothing pending
        if self.count is not None:
            need = min(need, self.count - len(self.arrived))
        if self._may_complete and not self._complete_needs_all:
            need = 1
        return max(1, need)

    def _min_pending_delay(self) -> float:
        if self._dmin is None:
            self._dmin = float(min((self._dlist[j] for j in self.pending), default=math.inf))
        return self._dmin

    def horizon(self, elapsed: float) -> float:
        """Earliest virtual time any pending answer can still have."""
        return elapsed + self._min_pending_delay()

    def _holds(self, rule, workers) -> bool:
        if self._rules is not None:
            return self._rules[rule].first_prefix(workers) is not None
        members = frozenset(workers)
        key = (rule, members)
        hit = self._memo.get(key)
        if hit is None:
            # monotone rules: a subset of a set that failed fails too (the prefix
            # search asks mostly subsets of the last decide's failing prefix)
            failed = self._failed.get(rule)
            if failed is not None and members <= failed:
                hit = False
            else:
                fn = self.code.can_decode if rule == "count" else self.code.is_complete
                hit = bool(fn(list(workers)))
                if not hit and (failed is None or len(members) >= len(failed)):
                    self._failed[rule] = members
            self._memo[key] = hit
        return hit

    def decodable(self, workers) -> bool:
        """``code.can_decode(workers)``, asked of the code once per set of workers
        (the count rule has usually asked it of the decided set already)."""
        return self._holds("count", workers)

    def _first_prefix(self, rule, js, lo: int, hi: int):
        """Smallest p in [lo, hi] with rule(js[:p]) (monotone in p), or None."""
        if hi < lo:
            return None
        if self._rules is not None:     # counted: the smallest such prefix overall, then clipped
            p = self._rules[rule].first_prefix(js[:hi])
            return None if p is None else max(p, lo)
        if rule == "complete" and self._complete_needs_all and hi < self.code.N:
            return None                 # complete needs all N answers: no prefix of fewer is
        if self._holds(rule, js[:lo]):  # the usual case (the count's first answers decode): one ask
            return lo
        if hi == lo or not self._holds(rule, js[:hi]):
            return None
        lo += 1
        while lo < hi:
            mid = (lo + hi) // 2
            if self._holds(rule, js[:mid]):
                hi = mid
            else:
                lo = mid + 1
        return lo

    def decide(self, elapsed: float) -> Decision | None:
        """The round's answering set if it is final at real elapsed time `elapsed`.

        Reads confirmed answers (virtual time <= horizon and <= deadline) in
        virtual order; the first prefix that meets the count rule or is complete
        ends the round (count first on a tie)."""
        horizon = self.horizon(elapsed)
        limit = min(horizon, self.deadline)
        n = bisect.bisect_right(self._order, (limit, math.inf))
        js = [j for _, j in self._order[:n]]
        best = None
        if n and self.count is not None and n >= self.count:
            p = self._first_prefix("count", js, self.count, n)
            if p is not None:
                best = (p, "count")
        if n and self._may_complete:
            p = self._first_prefix("complete", js, 1, n if best is None else best[0] - 1)
            if p is not None:
                best = (p, "complete")
        if best is not None:
            p, rule = best
            return Decision(tuple(js[:p]), self._order[p - 1][0], rule)
        if horizon > self.deadline:
            return Decision(tuple(js), self.deadline, "deadline")
        if not self.pending:
            return Decision(tuple(js), self._order[n - 1][0] if n else 0.0, "all")
        return None

    def next_change(self, elapsed: float) -> float:
        """Real elapsed time at which decide() may change without a new answer
        (an answer gets confirmed, the deadline passes, a worker hangs); inf if never."""
        dmin = self._min_pending_delay()
        if self._min_pending_hang() > elapsed:       # the usual case: nobody hung, the earliest counts
            times = [self._hmin] if math.isfinite(self._hmin) else []
        else:
            times = [self.hang_at[j] for j in self.pending if j in self.hang_at]
        if math.isfinite(dmin):
            horizon = elapsed + dmin
            unconfirmed = [v for v in self.arrived.values() if horizon < v <= self.deadline]
            if unconfirmed:
                times.append(min(unconfirmed) - dmin)
            if math.isfinite(self.deadline):
                times.append(self.deadline - dmin)
        later = [t for t in times if t > elapsed]
        return min(later) if later else (elapsed if times else math.inf)

    def _min_pending_hang(self) -> float:
        if self._hmin is None:
            self._hmin = min((self.hang_at.get(j, math.inf) for j in self.pending), default=math.inf)
        return self._hmin

    def hung(self, elapsed: float) -> list[int]:
        """Pending workers past their hang limit."""
        if elapsed < self._min_pending_hang():
            return []
        return sorted(j for j in self.pending if self.hang_at.get(j, math.inf) <= elapsed)


class CountedRoundWaiter(_core.CountedWaiter):
    """RoundWaiter for a code with a ``waiting_rule`` (its Coverage rules'
    groups and needs), compiled: csrc/round_waiter.hpp. The same parameters,
    methods and decisions (tests/test_runtime_waiter.py runs both against
    the rule written out); ``failed`` is kept here, the rest in the core."""

    def __init__(self, code, dispatched, delays, never, count=None, deadline=None, hang_at=None,
                 may_complete=None):
        decodable, complete = _compiled_rule(code.waiting_rule)
        super().__init__(dispatched if type(dispatched) is list else [int(j) for j in dispatched], delays, never,
                         None if count is None else int(count), math.inf if deadline is None else float(deadline),
                         {} if hang_at is None else hang_at, decodable, complete, may_complete,
                         bool(getattr(code, "complete_needs_every_worker", False)))
        self.failed: dict[int, str] = {}        # worker -> reason

    def fail(self, j: int, reason: str) -> None:
        """Worker j will not answer this round (crashed, raised, hung)."""
        if self._fail(j):
            self.failed.setdefault(j, reason)

    def decide(self, elapsed: float) -> Decision | None:
        """The round's answering set if it is final at real elapsed time `elapsed`
        (RoundWaiter.decide)."""
        d = self._decide(elapsed)
        return None if d is None else Decision(*d)


@functools.lru_cache(maxsize=64)
def _compiled_rule(rule) -> tuple:
    """A WaitingRule's two Coverage rules in the core's form, converted once
    per rule (a code's rule is made once; a WaitingRule hashes by its rules'
    identities; a code that made a new rule on every read would only miss)."""
    return tuple(_core.CoverageRule(c.group, c.need) for c in (rule.decodable, rule.complete))


def round_waiter(code, dispatched, delays, never, count=None, deadline=None, hang_at=None, may_complete=None):
    """The waiter of one round: CountedRoundWaiter where the code states its
    waiting rule as counts, else RoundWaiter (which asks the code)."""
    cls = RoundWaiter if code.waiting_rule is None else CountedRoundWaiter
    return cls(code, dispatched, delays, never, count, deadline, hang_at, may_complete=may_complete)
