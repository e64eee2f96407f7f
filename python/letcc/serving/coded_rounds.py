"""The server's coded mode: queued requests in coded rounds of K on N workers.

A collaborator of the dispatcher (its thread, the state it is handed): it
decides when a round leaves (K requests waiting, or ``max_batch_delay`` after
the oldest, or closing), pads and launches it through the round engine
(letcc.runtime.round: encode, probe, submit, hang limits, events, decode, one
home for all of them), and ends it: decided -> decode -> futures; a request's
deadline -> decode what arrived or TimeoutError; no answer at all -> queued
again; the model raised or a shape mismatch -> the requests fail. After a
shape error the output layout is learnt again once the rounds in flight have
drained (no round leaves meanwhile).

It implements the dispatcher's mode protocol (letcc.serving.dispatcher.Mode).
"""
from __future__ import annotations

import math

import numpy as np

from letcc.runtime.backend import answer_count
from letcc.runtime.round import no_delays
from letcc.serving.flights import CodedFlight, pad_groups

__all__ = ["CodedRounds"]


class CodedRounds:
    batch_answers = True        # on_event takes "answers" events (RoundEngine.on_event does)

    def __init__(self, ctx, *, draw, count, rng, max_batch_delay: float, max_groups: int):
        self.ctx = ctx
        self.engine, self.code = ctx.engine, ctx.engine.code
        self.K, self.N = self.engine.K, self.engine.N
        self._draw, self._count, self._rng = draw, count, rng
        self.max_batch_delay, self.max_groups = max_batch_delay, max_groups
        # master-side delays of every round (the injected ones are real sleeps): read-only
        self._zeros, self._nowhere = no_delays(self.N)
        self._complete_sets: dict = {}        # workers (a tuple) -> code.is_complete (_may_complete)

    # ---- when rounds leave ------------------------------------------------------

    def dispatch(self, now: float) -> None:
        ctx, K = self.ctx, self.K
        queue = ctx.requests
        while ctx.ring.free:
            if self.engine.relearn_layout(idle=not ctx.flights):
                return                          # a shape error: drain the rounds in flight first
            n = queue.live()
            if not n or (n < K and not ctx.inbox.closing and now - queue.oldest_submit() < self.max_batch_delay):
                return
            workers = ctx.pool.backend.ready_workers()
            if not workers:
                ctx.pool.backend.restart_dead()
                return
            take = min(self.max_groups, n // K) * K if n >= K else n
            reqs = queue.pop(take)
            if reqs:
                self._launch(reqs, workers)

    def wake_rule(self) -> tuple[float, float]:
        """(requests in the inbox that wake the dispatcher, batch delay that does)."""
        if not self.ctx.ring.free:
            return math.inf, math.inf
        return max(1, self.K - self.ctx.requests.live()), self.max_batch_delay

    def due(self, now: float) -> float:
        """The earliest perf_counter time something must be done without an event."""
        ctx = self.ctx
        t = math.inf
        if ctx.ring.free and ctx.requests.live():
            t = ctx.requests.oldest_submit() + self.max_batch_delay
        for fl in self.ctx.each_flight():
            t = min(t, fl.deadline_at, fl.t0 + fl.waiter.next_change(now - fl.t0))
        return t

    def answers_wanted(self) -> int:
        """Answers of the latest round to sleep for (LocalBackend.arm: one
        wake-up when they are in, not one per answer); 0 when it is over (no
        arm: its late answers, still counted, must not ring)."""
        fl = self.ctx.flights.get(self.engine.last_id)
        return 0 if fl is None else fl.waiter.answers_needed()

    def _may_complete(self, sent, never) -> bool:
        """code.is_complete of the workers of a round that can count, asked of the
        code once per such set (the same set, usually all N, round after round)."""
        key = tuple(sent) if never is self._nowhere else tuple(j for j in sent if not never[j])
        hit = self._complete_sets.get(key)
        if hit is None:
            if len(self._complete_sets) > 256:
                self._complete_sets.clear()
            hit = self._complete_sets[key] = bool(key) and bool(self.code.is_complete(sorted(set(key))))
        return hit

    def _launch(self, reqs: list, workers: list) -> None:
        ctx, N = self.ctx, self.N
        layout = ctx.inbox.layout
        ctx.ring.size(layout)
        k = ctx.ring.take()
        groups = pad_groups(reqs, self.K, *layout)
        if self._draw is None:
            delays, never = self._zeros, self._nowhere
        else:
            delays = np.asarray(self._draw(N, self._rng), dtype=np.float64)
            never = np.isinf(delays)
        try:
            rnd = self.engine.launch(groups, workers, ring=k, sleep_s=delays, master_delays=self._zeros,
                                     never=never, count=self._count,
                                     may_complete=self._may_complete(workers, never))
        except Exception as exc:
            ctx.ring.give(k)
            for req in reqs:
                ctx.requests.fail(req, exc)
            return
        ctx.flights[rnd.id] = CodedFlight(reqs, rnd)
        st = ctx.stats
        B = rnd.B
        with st.lock:                   # one lock per round
            st.counts["rounds"] += 1
            st.counts["padded_rounds"] += len(reqs) < B * self.K
            st.real_positions += len(reqs)
            st.positions += B * self.K

    # ---- events -----------------------------------------------------------------

    def on_event(self, fl, ev) -> None:
        """An event of round fl (acked by the dispatcher)."""
        self.engine.on_event(fl.rnd, ev)
        if fl.rnd.error is not None:
            self._end(fl, (), exc=fl.rnd.error)

    def on_stale(self, ev) -> None:
        self.ctx.stats.add(stale=answer_count(ev))

    def on_died(self, ev) -> None:
        self.engine.worker_died([fl.rnd for fl in self.ctx.each_flight()], ev)

    # ---- ends of rounds ------------------------------------------------------------

    def check(self, now: float) -> None:
        for fl in self.ctx.each_flight():
            if fl.id not in self.ctx.flights:
                continue
            decision = self.engine.decision(fl.rnd, now)
            if decision is not None:
                self._finish(fl, decision.answered)
            elif now >= fl.deadline_at:
                self._deadline(fl, now)

    def _finish(self, fl, answered) -> None:
        answered = sorted(answered)
        if answered and fl.waiter.decodable(answered):
            try:
                rows = self.engine.decode(fl.rnd, answered)
            except Exception as exc:
                self._end(fl, answered, exc=exc)
                return
            self._end(fl, answered, rows=rows)
            return
        if fl.rnd.raised:
            j, tb = next(iter(fl.rnd.raised.items()))
            exc = RuntimeError(f"round {fl.id}: the model raised on worker {j}:\n{tb}")
        else:
            exc = None
        self._end(fl, answered, exc=exc, retry=exc is None)

    def _deadline(self, fl, now: float) -> None:
        arrived = sorted(fl.waiter.arrived)
        if arrived and fl.waiter.decodable(arrived):
            self._finish(fl, arrived)
            return
        for i, req in enumerate(fl.requests):
            if req is not None and req.deadline_at <= now:
                fl.drop(i)
                self.ctx.requests.timeout(req, f"(round {fl.id}: answers from {arrived or 'no worker'})")
        if all(r is None for r in fl.requests):
            self._end(fl, arrived)

    def _end(self, fl, answered, exc=None, retry=False, rows=None) -> None:
        """The round is over: its late workers cancelled, its ring slot free,
        what is left of its requests failed with `exc` or queued again."""
        ctx = self.ctx
        if ctx.flights.pop(fl.id, None) is None:
            return
        self.engine.end(fl.rnd, answered)
        ctx.ring.give(fl.rnd.ring)
        st = ctx.stats
        quarantine = self.engine.quarantine
        with st.lock:
            st.counts["erasures"] += self.N - len(set(answered))
            st.note_flagged(fl.rnd.flagged)
            if quarantine is not None:
                st.counts["quarantines"] += len(fl.rnd.newly_quarantined)
                st.quarantined = quarantine.left()
        if rows is not None:                  # after the bookkeeping: stats() agrees with the futures
            ctx.requests.resolve_rows(fl.requests, rows, approximate=not self.code.decodes_exactly,
                                      answered=sorted(answered), round_id=fl.id, nodes=fl.rnd.nodes)
        left = [r for r in fl.requests if r is not None and r.state == "flight"]
        if retry:
            ctx.requests.requeue(left, f"round {fl.id}: no worker answered ({fl.waiter.failed or 'none'})")
        else:
            for req in left:
                ctx.requests.fail(req, exc or RuntimeError(f"round {fl.id} ended without an answer"))
