"""Systematic coded serving: exact answers on time, decoded answers for the late ones.

With a systematic code (``code.systematic_workers``: LeTCC or BACC built with
``systematic=True``), worker ``systematic_workers[k]`` of a round computes
f(x) of the round's k-th input itself, and the other N - K workers compute f
between the inputs. A round here::

    launch (as CodedRounds: B groups of K requests, padded, encoded, submitted)
    a systematic worker answers -> its requests resolve at once, exact
        (RequestInfo.approximate False); every real request exact -> the round
        ends, its parity workers are cancelled
    fallback time of a request still pending (``fallback_after`` seconds after
        dispatch, or a percentile of recent systematic answer times, or its
        deadline; with none of them, when the round's waiting rule decides)
        -> decode from every answer in so far; the pending requests resolve
        with the estimate (approximate True)
    its systematic worker died, raised or hung -> an erasure: decoded as soon
        as the waiting rule decides (or at the fallback time), flagged approximate
    a systematic answer arriving after its requests were decoded is counted
        (stats()["late_exact"]) and never replaces what was delivered
    a partly filled round: its padded positions hold copies of its last request
        (pad_groups), so every systematic worker of a padded position computes
        that request too, and the first of them to answer resolves it (a lone
        request races K copies)

The "pNN" times learn, per request, how long its exact answer took after
dispatch (the first of its copies); a request that was decoded instead counts
with the time it was decoded at, a lower bound of what its exact answer would
have taken. The percentile then settles where (100 - NN)% of requests are
decoded: below that time more of them are cut short, and the cut-short times
pull the percentile back up to it. (Measured before: learnt only from the
answers that beat the fallback, a "p99" sank to the service time's p93-p97;
with a cut-short answer counted as infinitely late it rose until the fallback
was gone whenever more than 1% were cut short, and the tail with it.)

Everything else (deadlines with nothing decodable, retries of a round with no
answer at all, the model raising, shape errors) is CodedRounds'.
"""
from __future__ import annotations

import math
import time
from collections import OrderedDict

import numpy as np

from letcc._checks import as_real
from letcc.serving.coded_rounds import CodedRounds
from letcc.serving.flights import copy_inputs
from letcc.serving.hedged import LatencyWindow

__all__ = ["SystematicRounds", "AfterRule"]

_KEEP_ENDED = 256       # ended rounds remembered for counting late exact answers


class AfterRule:
    """A time after dispatch, as ``fallback_after`` / ``hedge_after`` are given to
    CodedServer: None (none), seconds (> 0), or "pNN": the NN-th percentile
    (0-100) of recent systematic answer times (as Hedged's; inf until
    ``min_samples`` were seen)."""

    def __init__(self, value, name: str = "fallback_after", window: int = 1000, min_samples: int = 20):
        self.name = name
        self.seconds = self.percentile = None
        if value is None:
            pass
        elif isinstance(value, str):
            if not (value.startswith("p") and value[1:].replace(".", "", 1).isdigit()):
                raise ValueError(f"{name} must be seconds, 'pNN' (a percentile of recent answer "
                                 f"times, e.g. 'p95') or None, got {value!r}")
            self.percentile = as_real(float(value[1:]), f"{name}'s percentile", 0, 100)
        else:
            self.seconds = as_real(value, name, 0, strict=True, finite=False)
        self.window = (LatencyWindow(window, self.percentile, min_samples)
                       if self.percentile is not None else None)

    @property
    def given(self) -> bool:
        return self.seconds is not None or self.percentile is not None

    def after(self) -> float:
        """Seconds after dispatch (inf: none yet)."""
        if self.seconds is not None:
            return self.seconds
        return self.window.threshold() if self.window is not None else math.inf

    def observe(self, seconds: float) -> None:
        if self.window is not None:
            self.window.add(seconds)


    def __repr__(self) -> str:
        what = (f"{self.seconds:g} s" if self.seconds is not None else
                f"p{self.percentile:g}" if self.percentile is not None else "none")
        return f"AfterRule({self.name}: {what})"


class SystematicRounds(CodedRounds):
    batch_answers = False       # each answer may resolve requests: one "done" at a time

    def __init__(self, ctx, *, fallback: AfterRule, hedge: AfterRule, **kwargs):
        super().__init__(ctx, **kwargs)
        self.systematic = tuple(int(w) for w in self.code.systematic_workers)
        self.input_of = {w: k for k, w in enumerate(self.systematic)}
        self.fallback, self.hedge = fallback, hedge
        # round id -> systematic workers whose requests were decoded (their answer came too late)
        self._decoded: OrderedDict = OrderedDict()

    # ---- the mode protocol, where it differs from CodedRounds --------------------

    def answers_wanted(self) -> int:
        """Every answer may be a systematic one that resolves requests at once:
        wake on each (not once the waiting rule's count is in)."""
        return 1 if self.ctx.flights.get(self.engine.last_id) is not None else 0

    def due(self, now: float) -> float:
        t = super().due(now)
        for fl in self.ctx.each_flight():
            if fl.fallback_at > now:          # a fallback that found nothing to decode is not due again
                t = min(t, fl.fallback_at)
            if fl.hedge_id is None and fl.hedge_at > now:
                t = min(t, fl.hedge_at)
        return t

    def on_event(self, fl, ev) -> None:
        if ev.round == fl.hedge_id:
            self._hedge_event(fl, ev)
            return
        super().on_event(fl, ev)
        j = ev.worker
        if ev.kind != "done" or j not in self.input_of or fl.id not in self.ctx.flights:
            return
        self._exact(fl, self.input_of[j], j, fl.rnd.ring, fl.id)

    def _exact(self, fl, k: int, j: int, ring: int, round_id: int) -> None:
        """Worker j's answer in ring slot `ring` is input k's own, for every group
        of the round: the pending requests at those positions resolve, exact. A
        padded position holds a copy of the round's last request (pad_groups), so
        its answer is that request's too: a partly filled round races the copies
        of its last request on the idle systematic workers."""
        K, reqs = self.K, fl.requests
        n = len(reqs)
        rows, targets = [], []
        for b in range(fl.rnd.B):
            t = min(b * K + k, n - 1)
            if _pending(reqs[t]) and reqs[t] not in targets:
                targets.append(reqs[t])
                rows.append(b)
        if targets:
            self._learn(fl, len(targets))
            Y = self.ctx.pool.backend.outputs([j], fl.rnd.B, ring)[0]      # (B, ...): row b is group b's
            self.ctx.requests.resolve_rows(targets, [Y[b] for b in rows], approximate=False, answered=(j,),
                                           round_id=round_id)
        if not any(_pending(r) for r in reqs):
            self._end(fl, sorted(fl.waiter.arrived))          # every request exact: the parity work is moot

    def _learn(self, fl, n: int) -> None:
        """n requests of round fl got their answer now (exact, or decoded: then a lower
        bound of their exact answer's time): the fallback and hedge times' samples."""
        seconds = time.perf_counter() - fl.t0
        for _ in range(n):
            self.fallback.observe(seconds)
            self.hedge.observe(seconds)

    def _inputs_of(self, fl, t: int) -> list:
        """The inputs (positions mod K) whose systematic worker computes request t of the
        round: its own, and for the last request every padded position's."""
        K, n = self.K, len(fl.requests)
        last = fl.rnd.B * K if t == n - 1 else t + 1
        return sorted({i % K for i in range(t, last)})

    def _hedge_event(self, fl, ev) -> None:
        """A second copy answered (or gave up: then the first copy and the fallback remain)."""
        k = fl.hedge.pop(ev.worker, None)
        if ev.kind == "done" and k is not None:
            self._exact(fl, k, ev.worker, fl.hedge_ring, fl.hedge_id)

    def on_stale(self, ev) -> None:
        late = self._decoded.get(ev.round)
        if ev.kind == "done" and late is not None and ev.worker in late:
            late.discard(ev.worker)
            self.ctx.stats.add(late_exact=1)
        else:
            self.ctx.stats.add(stale=1)

    def check(self, now: float) -> None:
        flights = self.ctx.flights
        for fl in list(flights.values()):
            if fl.id not in flights:
                continue
            decision = self.engine.decision(fl.rnd, now)
            pending = [r for r in fl.requests if _pending(r)]
            if not pending:
                self._end(fl, sorted(fl.waiter.arrived))
                continue
            if fl.hedge_id is None and now >= fl.hedge_at:
                self._send_hedge(fl)
            if now >= fl.fallback_at or (decision is not None and (
                    not self.fallback.given or decision.rule == "all" or self._orphaned(fl))):
                arrived = sorted(fl.waiter.arrived)
                if arrived and fl.waiter.decodable(arrived):
                    self._finish(fl, arrived)         # CodedRounds: decode, resolve the pending ones
                    continue
                if decision is not None:
                    self._finish(fl, decision.answered)    # nothing decodable and nothing more to come
                    continue
                fl.fallback_at = math.inf             # wait for more answers, or the deadline
            if now >= fl.deadline_at:
                self._deadline(fl, now)

    # ---- launch and end ---------------------------------------------------------------

    def _launch(self, reqs: list, workers: list) -> None:
        super()._launch(reqs, workers)
        fl = self.ctx.flights.get(self.engine.last_id)
        if fl is not None and fl.requests is reqs:
            fl.fallback_at = min(fl.t0 + self.fallback.after(), fl.deadline_at)
            fl.hedge_at = fl.t0 + self.hedge.after()

    def _send_hedge(self, fl) -> None:
        """Second copies of the late systematic tasks: input k's requests, as they
        are (no coding), on a worker with nothing on its hands (one that answered
        this round, or was not in it), in a spare ring slot; the first answer
        wins. None idle or no spare slot: tried again at the next check."""
        ctx, K = self.ctx, self.K
        failed, arrived = fl.waiter.failed, fl.waiter.arrived
        late = []
        for t, r in enumerate(fl.requests):
            ks = [k for k in self._inputs_of(fl, t) if self.systematic[k] not in arrived]
            if _pending(r) and ks and ks[0] not in late:
                late.append(ks[0])                # one copy per late request is enough
        outstanding = ctx.pool.outstanding
        idle = [j for j in ctx.pool.backend.ready_workers() if not outstanding[j] and j not in failed]
        if not late or not idle:
            return
        slot = ctx.ring.take_spare()
        if slot is None:
            return
        backend, B = ctx.pool.backend, fl.rnd.B
        shape, dtype = ctx.inbox.layout
        buf = backend.input_view(B, shape, dtype, slot)[0]
        pairs = list(zip(idle, late))
        reqs = fl.requests
        for j, k in pairs:
            copy_inputs(buf[j], [reqs[i if i < len(reqs) else -1] for i in range(k, B * K, K)])
        backend.set_input_slots(None)
        r = self.engine.next_id()
        workers = [j for j, _ in pairs]
        t0 = time.perf_counter()
        backend.submit(r, workers, B, self._zeros if self._draw is None else self._hedge_sleeps(workers), slot)
        ctx.pool.sent(r, workers, t0, [0.0] * self.N)
        fl.hedge_id, fl.hedge_ring, fl.hedge = r, slot, dict(pairs)
        ctx.flights[r] = fl
        ctx.stats.add(hedges=len(pairs))

    def _hedge_sleeps(self, workers):
        """A second copy's injected service time: a fresh draw for its worker."""
        sleeps = np.zeros(self.N)
        draw = np.asarray(self._draw(self.N, self._rng), dtype=np.float64)
        sleeps[workers] = draw[workers]
        return sleeps

    def _orphaned(self, fl) -> bool:
        """Every pending request's own worker failed (died, raised, hung): waiting cannot make one exact."""
        failed = fl.waiter.failed
        return all(all(self.systematic[k] in failed for k in self._inputs_of(fl, t))
                   for t, r in enumerate(fl.requests) if _pending(r))

    def _end(self, fl, answered, exc=None, retry=False, rows=None) -> None:
        decoded = {self.systematic[k] for t, r in enumerate(fl.requests) if _pending(r)
                   for k in self._inputs_of(fl, t)}
        if rows is not None:
            self._learn(fl, sum(1 for r in fl.requests if _pending(r)))   # cut short: decoded now
        if fl.hedge_id is not None and self.ctx.flights.pop(fl.hedge_id, None) is not None:
            self.ctx.pool.backend.cancel(list(fl.hedge), fl.hedge_ring)
            self.ctx.ring.give_spare(fl.hedge_ring)
        super()._end(fl, answered, exc=exc, retry=retry, rows=rows)
        if rows is not None and decoded:
            self._decoded[fl.id] = decoded
            while len(self._decoded) > _KEEP_ENDED:
                self._decoded.popitem(last=False)


def _pending(req) -> bool:
    return req is not None and req.state == "flight"
