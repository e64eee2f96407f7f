"""Uncoded behind a load balancer, and hedged requests: the server's task mode.

Part of the dispatcher (a mixin of ``Dispatcher``: same thread, same state).
A task is up to ``max_groups`` queued requests (the rows a coded round gives
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

from letcc.serving.flights import Copy, TaskFlight
from letcc.serving.hedged import Hedged, LatencyWindow

__all__ = ["Balancer"]


class Balancer:
    def _init_balancer(self, scheme) -> None:
        self._hedged = isinstance(scheme, Hedged)
        self._window = (LatencyWindow(scheme.window, scheme.percentile, scheme.min_samples)
                        if self._hedged else None)
        self._last_used = np.zeros(self.N)     # ties between equally loaded workers: least recently used

    def _candidates(self, exclude=()):
        """Ready workers with room, least loaded (then least recently used) first."""
        out = []
        for j in self._backend.ready_workers():
            load = len(self._outstanding[j])
            if j not in exclude and load < self.R:
                out.append((load, self._last_used[j], j))
        out.sort()
        return [j for _, _, j in out]

    def _dispatch_tasks(self, now: float) -> None:
        # the candidates once, then a heap: the worker a task went to is pushed back
        # with one more task and its new last use, as _candidates() would order it
        heap = None
        while self._free and self._live_queue():
            if heap is None:
                heap = [(len(self._outstanding[j]), self._last_used[j], j) for j in self._candidates()]
                heapq.heapify(heap)
            if not heap:
                if not self._backend.ready_workers():
                    self._backend.restart_dead()
                return
            reqs = self._pop_requests(self.max_groups)
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
            st = self.stats
            with st.lock:               # one lock per task
                st.counts["rounds"] += 1
                st.real_positions += len(reqs)
                st.positions += len(reqs)

    def _send_copy(self, fl, j: int):
        """Put the flight's requests on worker j in a free ring slot; the Copy (None: failed)."""
        shape, dtype = self._layout
        b = fl.B
        self._prepare_layout(b)
        ring = self._free.popleft()
        try:
            buf = self._backend.input_view(b, shape, dtype, ring)[0]
            for i, req in enumerate(fl.requests):
                buf[j, i] = req.x
            self._backend.set_input_slots(None)
            r = self._new_round_id(b, self._backend.ready_workers())   # the probe: whoever answers first
        except Exception as exc:
            self._free.append(ring)
            if not fl.copies:
                for req in fl.requests:
                    self._resolve(req, exc=exc)
            return None
        if self._draw is None:
            sleep = self._zeros
        else:
            sleep = np.zeros(self.N)
            sleep[j] = float(np.asarray(self._draw(self.N, self._rng), dtype=np.float64)[j])
        t0 = time.perf_counter()
        self._backend.submit(r, [j], b, sleep, ring)
        queue = self._outstanding[j]
        queue.append((r, t0))
        extra = sleep[j] if math.isfinite(sleep[j]) else 0.0
        c = Copy(r, j, ring, t0, hang_at=queue[0][1] + extra + self.hang_timeout)
        fl.copies.append(c)
        self._flights[r] = fl
        self._last_used[j] = t0
        return c

    def _task_due(self, fl) -> float:
        t = min((c.hang_at for c in fl.pending()), default=math.inf)
        if self._hedged and len(fl.copies) == 1:
            t = min(t, fl.hedge_at)
        return t

    def _task_event(self, fl, ev) -> None:
        c = fl.copy(ev.round)
        if c is None or c.state != "pending":
            return
        if ev.kind == "done":
            c.state = "done"
            if self._window is not None:
                self._window.add(ev.t - c.t0)
            try:
                Y = self._backend.outputs([c.worker], fl.B, c.ring)[0]
            except Exception as exc:
                self._end_task(fl, exc=exc)
                return
            self._resolve_rows(fl.requests, Y)
            self._end_task(fl)
            return
        if ev.kind == "error":
            fl.raised[c.worker] = ev.payload[0]
            self._report(None, c.worker, ev.payload[0])
        elif ev.kind == "shape":
            fl.raised[c.worker] = self._shape_text(c.worker, ev.payload, fl.B)
        c.state = "failed"
        self._task_lost_copy(fl)

    def _task_worker_failed(self, fl, j: int, why: str) -> None:
        for c in fl.pending():
            if c.worker == j:
                c.state = "failed"
        self._task_lost_copy(fl)

    def _task_lost_copy(self, fl) -> None:
        if fl.pending():
            return
        if fl.raised:
            j, tb = next(iter(fl.raised.items()))
            self._end_task(fl, exc=RuntimeError(f"the model raised on worker {j}:\n{tb}"))
        else:
            self._end_task(fl, retry=True)

    def _check_task(self, fl, now: float) -> None:
        if not fl.copies or fl.copies[0].round not in self._flights:
            return
        for c in fl.pending():
            if now >= c.hang_at:
                self._backend.kill(c.worker)
                self._outstanding[c.worker] = []
                self._report(None, c.worker, f"no answer within hang_timeout = {self.hang_timeout:g} s; killed")
                self._task_worker_failed(fl, c.worker, "hung")
                if fl.copies[0].round not in self._flights:
                    return
        if self._hedged and len(fl.copies) == 1 and now >= fl.hedge_at and fl.pending() and self._free:
            first = fl.copies[0].worker
            others = [j for j in self._backend.ready_workers() if j != first]
            if others:
                others.sort(key=lambda j: (len(self._outstanding[j]), self._last_used[j]))
                if self._send_copy(fl, others[0]) is not None:
                    self.stats.add(hedges=1)
        if now >= fl.deadline_at:
            for i, req in enumerate(fl.requests):
                if req is not None and req.deadline_at <= now:
                    fl.drop(i)
                    self._timeout(req, "(task)")
            if all(r is None for r in fl.requests):
                self._end_task(fl)

    def _end_task(self, fl, exc=None, retry=False) -> None:
        for c in fl.copies:
            if self._flights.pop(c.round, None) is not None:
                self._free.append(c.ring)
            if c.state == "pending":
                c.state = "failed"
                self._backend.cancel([c.worker], c.ring)
        left = [r for r in fl.requests if r is not None and r.state == "flight"]
        if retry:
            self._requeue(left, "every worker the task went to died or hung")
        else:
            for req in left:
                self._resolve(req, exc=exc or RuntimeError("the task ended without an answer"))
