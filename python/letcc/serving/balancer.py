"""Uncoded behind a load balancer, and hedged requests: the server's task mode.

A collaborator of the dispatcher (its thread, the state it is handed; the
dispatcher's mode protocol, letcc.serving.dispatcher.Mode). A task is up to ``max_groups`` queued requests (the rows a coded round gives
each worker) sent to the least-loaded ready worker, i.e. the one with the
fewest tasks on its hands, while it has fewer than ``rounds_in_flight``; no
batch delay (a load balancer forwards at once). With ``Hedged``, a task that
has not answered ``LatencyWindow.threshold()`` seconds after dispatch gets a
second copy on the least-loaded other worker; the first answer wins and the
other copy is cancelled. A task whose copies all died or hung is queued
again (at the front); one whose model raised fails its requests.
"""
from __future__ import annotations

import heapq
import math
import time

import numpy as np

from letcc.runtime.backend import answer_count
from letcc.runtime.worker_pool import death_text
from letcc.serving.flights import Copy, TaskFlight, copy_inputs
from letcc.serving.hedged import Hedged, LatencyWindow

__all__ = ["Balancer"]


class Balancer:
    batch_answers = False       # a task's copy answers alone

    def __init__(self, ctx, scheme, *, draw, rng, max_groups: int, tasks_per_worker: int):
        self.ctx = ctx
        self.N = int(scheme.N)
        self.R = tasks_per_worker
        self.max_groups = max_groups
        self._draw, self._rng = draw, rng
        self._hedged = isinstance(scheme, Hedged)
        self._window = (LatencyWindow(scheme.window, scheme.percentile, scheme.min_samples)
                        if self._hedged else None)
        self._last_used = np.zeros(self.N)     # ties between equally loaded workers: least recently used
        self._zeros = np.zeros(self.N)

    # ---- when tasks leave -------------------------------------------------------

    def _candidates(self, exclude=()):
        """Ready workers with room, least loaded (then least recently used) first."""
        out, outstanding = [], self.ctx.pool.outstanding
        for j in self.ctx.pool.backend.ready_workers():
            load = len(outstanding[j])
            if j not in exclude and load < self.R:
                out.append((load, self._last_used[j], j))
        out.sort()
        return [j for _, _, j in out]

    def dispatch(self, now: float) -> None:
        # the candidates once, then a heap: the worker a task went to is pushed back
        # with one more task and its new last use, as _candidates() would order it
        ctx = self.ctx
        heap = None
        while ctx.ring.free and ctx.requests.live():
            if heap is None:
                outstanding = ctx.pool.outstanding
                heap = [(len(outstanding[j]), self._last_used[j], j) for j in self._candidates()]
                heapq.heapify(heap)
            if not heap:
                if not ctx.pool.backend.ready_workers():
                    ctx.pool.backend.restart_dead()
                return
            reqs = ctx.requests.pop(self.max_groups)
            if not reqs:
                continue
            fl = TaskFlight(reqs, [])
            load, _, j = heapq.heappop(heap)
            if self._send_copy(fl, j) is None:
                heap = None                 # it may have died: ask the backend again
                continue
            if load + 1 < self.R:
                heapq.heappush(heap, (load + 1, self._last_used[j], j))
            if self._hedged:
                fl.hedge_at = fl.copies[0].t0 + self._window.threshold()
            st = ctx.stats
            with st.lock:               # one lock per task
                st.counts["rounds"] += 1
                st.real_positions += len(reqs)
                st.positions += len(reqs)

    def wake_rule(self) -> tuple[float, float]:
        """(requests in the inbox that wake the dispatcher, batch delay that does)."""
        if self.ctx.ring.free and any(len(q) < self.R for q in self.ctx.pool.outstanding.values()):
            return 1, math.inf
        return math.inf, math.inf

    def answers_wanted(self) -> int:
        """One answer of the latest task to sleep for; 0 when it is over."""
        return 1 if self.ctx.flights.get(self.ctx.engine.last_id) is not None else 0

    def due(self, now: float) -> float:
        t = math.inf
        for fl in self.ctx.flights.values():
            t = min(t, fl.deadline_at, min((c.hang_at for c in fl.pending()), default=math.inf))
            if self._hedged and len(fl.copies) == 1:
                t = min(t, fl.hedge_at)
        return t

    def _send_copy(self, fl, j: int):
        """Put the flight's requests on worker j in a free ring slot; the Copy (None: failed)."""
        ctx = self.ctx
        backend, b = ctx.pool.backend, fl.B
        shape, dtype = layout = ctx.inbox.layout
        ctx.ring.size(layout)
        ring = ctx.ring.take()
        try:
            buf, unknown = backend.input_view(b, shape, dtype, ring)
            copy_inputs(buf[j], fl.requests)
            backend.set_input_slots(None)
            if unknown:                     # the probe: whoever answers first
                ctx.pool.probe(b, backend.ready_workers())
            r = ctx.engine.next_id()
        except Exception as exc:
            ctx.ring.give(ring)
            if not fl.copies:
                for req in fl.requests:
                    ctx.requests.fail(req, exc)
            return None
        if self._draw is None:
            sleep = self._zeros
        else:
            sleep = np.zeros(self.N)
            sleep[j] = float(np.asarray(self._draw(self.N, self._rng), dtype=np.float64)[j])
        t0 = time.perf_counter()
        backend.submit(r, [j], b, sleep, ring)
        hang_at = ctx.pool.sent(r, [j], t0, sleep.tolist())[j]
        c = Copy(r, j, ring, t0, hang_at=t0 + hang_at)
        fl.copies.append(c)
        ctx.flights[r] = fl
        self._last_used[j] = t0
        return c

    # ---- events -----------------------------------------------------------------

    def on_event(self, fl, ev) -> None:
        """An event of one of the task's copies (acked by the dispatcher)."""
        ctx = self.ctx
        c = fl.copy(ev.round)
        if c is None or c.state != "pending":
            return
        if ev.kind == "done":
            c.state = "done"
            if self._window is not None:
                self._window.add(ev.t - c.t0)
            try:
                Y = ctx.pool.backend.outputs([c.worker], fl.B, c.ring)[0]
            except Exception as exc:
                self._end(fl, exc=exc)
                return
            ctx.requests.resolve_rows(fl.requests, Y, approximate=False, answered=(c.worker,), round_id=c.round)
            self._end(fl)
            return
        if ev.kind == "error":
            fl.raised[c.worker] = ev.payload[0]
            ctx.pool.report(None, c.worker, ev.payload[0])
        elif ev.kind == "shape":
            fl.raised[c.worker] = ctx.engine.shape_message(c.worker, ev.payload, fl.B)
        c.state = "failed"
        self._lost_copy(fl)

    def on_stale(self, ev) -> None:
        self.ctx.stats.add(stale=answer_count(ev))

    def on_died(self, ev) -> None:
        ctx = self.ctx
        ctx.pool.lost(ev.worker)
        ctx.pool.report(None, ev.worker, f"{death_text(ev)}; it is being replaced")
        for fl in ctx.each_flight():
            self._worker_failed(fl, ev.worker)

    def _worker_failed(self, fl, j: int) -> None:
        for c in fl.pending():
            if c.worker == j:
                c.state = "failed"
        self._lost_copy(fl)

    def _lost_copy(self, fl) -> None:
        if fl.pending():
            return
        if fl.raised:
            j, tb = next(iter(fl.raised.items()))
            self._end(fl, exc=RuntimeError(f"the model raised on worker {j}:\n{tb}"))
        else:
            self._end(fl, retry=True)

    # ---- hangs, hedges, deadlines --------------------------------------------------

    def check(self, now: float) -> None:
        for fl in self.ctx.each_flight():
            self._check(fl, now)

    def _check(self, fl, now: float) -> None:
        ctx = self.ctx
        if not fl.copies or fl.copies[0].round not in ctx.flights:
            return
        for c in fl.pending():
            if now >= c.hang_at:
                ctx.pool.kill_hung(c.worker, None)
                self._worker_failed(fl, c.worker)
                if fl.copies[0].round not in ctx.flights:
                    return
        if self._hedged and len(fl.copies) == 1 and now >= fl.hedge_at and fl.pending() and ctx.ring.free:
            first = fl.copies[0].worker
            others = [j for j in ctx.pool.backend.ready_workers() if j != first]
            if others:
                outstanding = ctx.pool.outstanding
                others.sort(key=lambda j: (len(outstanding[j]), self._last_used[j]))
                if self._send_copy(fl, others[0]) is not None:
                    ctx.stats.add(hedges=1)
        if now >= fl.deadline_at:
            for i, req in enumerate(fl.requests):
                if req is not None and req.deadline_at <= now:
                    fl.drop(i)
                    ctx.requests.timeout(req, "(task)")
            if all(r is None for r in fl.requests):
                self._end(fl)

    def _end(self, fl, exc=None, retry=False) -> None:
        ctx = self.ctx
        for c in fl.copies:
            if ctx.flights.pop(c.round, None) is not None:
                ctx.ring.give(c.ring)
            if c.state == "pending":
                c.state = "failed"
                ctx.pool.backend.cancel([c.worker], c.ring)
        left = [r for r in fl.requests if r is not None and r.state == "flight"]
        if retry:
            ctx.requests.requeue(left, "every worker the task went to died or hung")
        else:
            for req in left:
                ctx.requests.fail(req, exc or RuntimeError("the task ended without an answer"))
