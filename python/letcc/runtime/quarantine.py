"""Quarantine: workers the code keeps flagging are left out of later rounds.

A code built with ``adversaries=E`` judges each round's answers and names the
ones it left out as wrong (``Round.flagged``). A worker that lies round after
round (a faulty accelerator, a corrupted model copy, a compromised host) then
costs every round the same: one answer computed for nothing, a detection
spline that has to erase it (an exact extra pass over the answers kept,
``bench/results/robust_decode.md``), and one of the E wrong answers the code
can absorb spent on a worker already known. Quarantine is outlier ejection as
service meshes do it (Envoy's outlier detection): a worker flagged in
``flags`` of its last ``window`` answered rounds is not sent the next
``rounds`` rounds, twice as many each time it is quarantined again (at most
``MAX_DOUBLINGS`` doublings); then it is sent rounds again with a clean record,
so a worker that was wrong for a while comes back. At most ``max_workers``
are out at once (default: the code's E, the wrong answers it was built to
absorb), so false alarms can never starve the rounds.

The round engine owns one (``RoundEngine(pool, code, quarantine=...)``): it
leaves the quarantined workers out of every launch (not sent, no coded input
computed, the waiting rule never waits for them; their nodes are the ones
the decode misses least, ``code.idle_nodes``) and tells the quarantine
each decoded round's answering set and flags. ``CodedInference`` and
``CodedServer`` take ``quarantine=True`` (these defaults) or a ``Quarantine``.
Pure bookkeeping: no I/O, no clock (rounds are counted).

Evidence over rounds (``top_alpha``). A wrong answer that stays valid (a
softmax vector with its classes relabelled) looks, in one round, like the
honest answers that change class between neighbouring nodes, so no per-round
test flags it at a false-alarm rate that keeps clean rounds clean
(bench/results/adversarial.md). It is still the round's top-scored answer
(``code.last_clean_round``) far more often than an honest one. Which worker
computes which node is a fixed choice, and some nodes are top-scored more
often than others on honest rounds, so the engine draws a fresh random
assignment of nodes to workers every round (``assign_nodes``; the quarantined
workers take the nodes the decode misses least, ``code.idle_nodes``, and the
others a uniform random order of the rest): then, given
the workers that answered a round, each of them is its top-scored answer with
probability exactly 1/n when all are honest (the nodes are exchangeable
under a uniform random assignment, whatever f and the data are), independently
from round to round. A worker top-scored in t of its last ``top_window``
answered rounds is quarantined when the binomial tail P(X >= t), X ~
Binomial(a, mean 1/n), is below ``top_alpha`` (the sum of independent
Bernoullis with those means is no more spread out than that binomial, Hoeffding
1956, so the test is conservative). It is tested each round it is top-scored:
over R rounds and N workers at most about ``top_alpha * N * R`` honest
quarantines (each a straggler more for its span). Unlike the flag record,
this record is kept across a quarantine: it ages only as the worker answers.
A worker back from a quarantine is on probation: its record is tested every
round it answers, not only when it is top-scored, until the record no longer
condemns it. A liar whose record still does is sent back after its first
round instead of after its next top-scored one (a relabelling liar is
top-scored in about a third of its rounds: bench/results/quarantine.md); an
honest worker quarantined by chance was quarantined the round its tail
crossed ``top_alpha``, so one round back without being top-scored clears it.
"""
from __future__ import annotations

import math
from collections import deque

import numpy as np

from letcc._checks import as_int, as_real

__all__ = ["Quarantine", "MAX_DOUBLINGS", "as_quarantine", "binomial_tail"]

MAX_DOUBLINGS = 4        # the 5th quarantine and later last 16x `rounds`


def binomial_tail(t: int, a: int, p: float) -> float:
    """P(X >= t) for X ~ Binomial(a, p), summed in log space (a is a window: small)."""
    if t <= 0:
        return 1.0
    if t > a:
        return 0.0
    if p <= 0.0:
        return 0.0
    if p >= 1.0:
        return 1.0
    lp, lq = math.log(p), math.log1p(-p)
    la = math.lgamma(a + 1)
    terms = [la - math.lgamma(k + 1) - math.lgamma(a - k + 1) + k * lp + (a - k) * lq for k in range(t, a + 1)]
    top = max(terms)
    return min(1.0, math.exp(top) * sum(math.exp(x - top) for x in terms))


class Quarantine:
    """Which workers sit out, from the flags of the rounds decoded so far.

    Parameters
    ----------
    flags : a worker flagged in this many of ...
    window : ... its last ``window`` rounds in which it answered is quarantined
        (``flags <= window``)
    rounds : rounds it then sits out (launches of the engine), doubled for
        each earlier quarantine of the same worker (at most ``MAX_DOUBLINGS``
        times)
    max_workers : at most this many out at once (None: the code's
        ``adversaries``, set when the engine takes it)
    top_alpha : the evidence-over-rounds test (module docstring): a worker
        top-scored too often for chance at this level is quarantined; the
        engine then assigns nodes to workers at random every round. None: off
        (node j stays worker j's)
    top_window : the answered rounds of each worker that test looks at
    seed : the node assignments' random generator (None: fresh entropy)
    """

    def __init__(self, flags: int = 3, window: int = 20, rounds: int = 100, max_workers: int | None = None,
                 top_alpha: float | None = 1e-6, top_window: int = 100, seed=None):
        self.flags = as_int(flags, "flags", 1)
        self.window = as_int(window, "window", 1)
        if self.flags > self.window:
            raise ValueError(f"flags = {self.flags} must be <= window = {self.window}: a worker is quarantined "
                             "when flagged in `flags` of its last `window` answered rounds")
        self.rounds = as_int(rounds, "rounds", 1)
        self.max_workers = None if max_workers is None else as_int(max_workers, "max_workers", 0)
        self.top_alpha = None if top_alpha is None else as_real(top_alpha, "top_alpha", 0, 1, strict=True)
        self.top_window = as_int(top_window, "top_window", 2)
        self._rng = np.random.default_rng(seed)
        self._tops: dict = {}                   # worker -> deque of (top-scored?, 1/n), its answered rounds
        self.launched = 0                       # rounds launched (the clock of the quarantines)
        self._record: dict = {}                 # worker -> deque of bool (flagged), its answered rounds
        self._until: dict = {}                  # worker -> launch count at which it is back
        self._probation: set = set()            # back from a quarantine, its top record not yet cleared
        self.times: dict = {}                   # worker -> how often it was quarantined
        self.history: list = []                 # (launch count, worker, rounds): every quarantine

    def bind(self, adversaries: int) -> None:
        """The code's E: the default ``max_workers``."""
        if self.max_workers is None:
            self.max_workers = int(adversaries)

    def excluded(self) -> frozenset:
        """The workers quarantined now (not to be sent a round)."""
        if not self._until:
            return frozenset()
        back = [j for j, t in self._until.items() if t <= self.launched]
        for j in back:                          # served its time: back with a clean flag record
            del self._until[j]
            self._record.pop(j, None)
            if self.top_alpha is not None:      # and its top record on probation
                self._probation.add(j)
        return frozenset(self._until)

    def left(self) -> dict:
        """{worker: rounds it still sits out}."""
        self.excluded()
        return {j: t - self.launched for j, t in sorted(self._until.items())}

    @property
    def assigns_nodes(self) -> bool:
        """Whether the engine must draw each round's nodes with ``assign_nodes``."""
        return self.top_alpha is not None

    def assign_nodes(self, N: int, out=(), idle=None) -> np.ndarray:
        """One round's nodes: (N,) int64, worker j computes node [j].

        out : the workers left out of the round (quarantined, not sent);
        idle : None, or the nodes to give them, cheapest first
        (``code.idle_nodes``): the holes they leave fall where the decode
        misses them least. The other workers get the other nodes in a uniform
        random order when ``assigns_nodes`` (each still equally likely at each
        of them: the 1/n null holds), else in ascending order. Without idle
        nodes every worker's node is drawn (or node j is worker j's)."""
        out = [int(j) for j in out]
        if idle is None or not out:
            return self._rng.permutation(N) if self.assigns_nodes else np.arange(N)
        idle = np.asarray(idle, dtype=np.int64)
        if idle.shape != (len(out),):
            raise ValueError(f"idle must hold one node per worker left out ({len(out)}), got {idle.tolist()}")
        nodes = np.empty(N, dtype=np.int64)
        rest = np.setdiff1d(np.arange(N), idle)
        sent = np.setdiff1d(np.arange(N), out)
        nodes[out] = idle
        nodes[sent] = self._rng.permutation(rest) if self.assigns_nodes else rest
        return nodes

    def launch(self) -> None:
        """A round was launched (the quarantines count these)."""
        self.launched += 1

    def observe(self, answered, flagged, top=None) -> list:
        """A decoded round: the workers whose answers it took (``answered``),
        those of them the code flagged, and its top-scored worker (``top``;
        None: the code scored nothing this round). The workers it quarantines
        now, in worker order."""
        bad = {int(j) for j in flagged}
        record, window = self._record, self.window
        answered = sorted({int(j) for j in answered})
        new = []
        if top is not None and self.top_alpha is not None:
            top = int(top)
            self._add_top_round(answered, top)
            if top in answered and top not in self._until and self._top_tail(top) <= self.top_alpha:
                new.append(top)
            for j in sorted(self._probation.intersection(answered)):
                if j in new or j in self._until:
                    continue
                if self._top_tail(j) <= self.top_alpha:
                    new.append(j)               # its record still condemns it: back out
                else:
                    self._probation.discard(j)  # cleared
        for j in answered:
            if j in self._until:
                continue
            seen = record.get(j)
            if seen is None:
                if j not in bad:
                    continue                    # never flagged: nothing to keep
                seen = record[j] = deque(maxlen=window)
            seen.append(j in bad)
            if j in bad and sum(seen) >= self.flags and j not in new:
                new.append(j)
        cap = self.max_workers if self.max_workers is not None else math.inf     # unbound: no cap
        out = []
        for j in sorted(new, key=lambda j: (-sum(record.get(j, ())), j)):   # the most flagged first
            if len(self._until) >= cap:
                break
            n = self.times.get(j, 0)
            span = self.rounds << min(n, MAX_DOUBLINGS)
            self._until[j] = self.launched + span
            self.times[j] = n + 1
            self.history.append((self.launched, j, span))
            self._probation.discard(j)
            out.append(j)
        return sorted(out)

    def _add_top_round(self, answered, top: int) -> None:
        """Append this round to the top-scored records of the answering workers
        (not quarantined)."""
        tops, p, W = self._tops, 1.0 / len(answered), self.top_window
        for j in answered:
            if j in self._until:
                continue
            seen = tops.get(j)
            if seen is None:
                seen = tops[j] = deque(maxlen=W)
            seen.append((j == top, p))

    def _top_tail(self, j: int) -> float:
        """The binomial tail of worker j's top-scored record (1: no record)."""
        seen = self._tops.get(j)
        if seen is None:                        # never answered: nothing to test
            return 1.0
        t = sum(1 for hit, _ in seen if hit)
        return binomial_tail(t, len(seen), sum(q for _, q in seen) / len(seen))

    def top_counts(self) -> dict:
        """{worker: (rounds top-scored, answered rounds)} in each worker's window."""
        return {j: (sum(1 for hit, _ in seen if hit), len(seen)) for j, seen in sorted(self._tops.items())}

    def __repr__(self) -> str:
        return (f"Quarantine(flags={self.flags}, window={self.window}, rounds={self.rounds}, "
                f"max_workers={self.max_workers}, top_alpha={self.top_alpha}, top_window={self.top_window})")


def as_quarantine(value, code) -> Quarantine | None:
    """None / False: none; True: a ``Quarantine()``; a Quarantine: itself. Bound to
    the code's E; a code that flags nobody (adversaries = 0) is refused."""
    if value is None or value is False:
        return None
    if value is True:
        value = Quarantine()
    if not isinstance(value, Quarantine):
        raise TypeError(f"quarantine must be None, True or a letcc.runtime.Quarantine, got {value!r}")
    E = int(code.adversaries)
    if E < 1:
        raise ValueError(f"quarantine needs a code that flags wrong answers (adversaries >= 1); {code!r} has "
                         "adversaries = 0")
    value.bind(E)
    return value
