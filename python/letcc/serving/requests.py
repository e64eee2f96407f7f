"""The dispatcher's queue of accepted requests, and how a request ends.

Dispatcher thread only. ``RequestQueue`` holds the requests taken from the
inbox in arrival order (a heap of their deadlines beside), hands out the
oldest for a round or task, takes back those of a round with no answer
(at the front, a bounded number of times), and resolves futures: an estimate,
a ``TimeoutError`` at the request's deadline, or an error. Every request
ends exactly once (``Request.state`` "done"); the stats are written before the
future, so ``stats()`` agrees with what a caller sees resolved.
"""
from __future__ import annotations

import heapq
import math
import time
from collections import deque

from letcc.serving.flights import RequestInfo

__all__ = ["RequestQueue", "MAX_RETRIES"]

# a request whose round had no answer at all (every worker died or hung) is queued again this often
MAX_RETRIES = 2


class RequestQueue:
    def __init__(self, inbox, stats):
        self.inbox, self.stats = inbox, stats
        self._queue: deque = deque()
        self._deadlines: list = []            # heap (deadline_at, seq, request) of queued requests
        self._seq = 0
        self._n = 0                           # requests in the queue still in state "queued"

    # ---- the queue -----------------------------------------------------------

    def add(self, reqs) -> None:
        for req in reqs:
            self._queue.append(req)
            self._n += 1
            if math.isfinite(req.deadline_at):
                self._seq += 1
                heapq.heappush(self._deadlines, (req.deadline_at, self._seq, req))

    def live(self) -> int:
        """Requests still queued (those that timed out or left are not counted;
        a future its caller cancelled is, until pop() drops it)."""
        queue = self._queue
        while queue and queue[0].state != "queued":
            queue.popleft()
        return self._n

    def oldest_submit(self) -> float:
        """t_submit of the oldest queued request (call after live() > 0)."""
        return self._queue[0].t_submit

    def next_deadline(self) -> float:
        return self._deadlines[0][0] if self._deadlines else math.inf

    def pop(self, n: int) -> list:
        """Up to n queued requests (oldest first), now running; cancelled ones dropped."""
        out, queue, taken = [], self._queue, 0
        while queue and len(out) < n:
            req = queue.popleft()
            if req.state != "queued":
                continue
            taken += 1
            if not req.running and not req.future.set_running_or_notify_cancel():
                req.state = "done"
                self.stats.add(cancelled=1)
                continue
            req.running, req.state = True, "flight"
            out.append(req)
        self._n -= taken
        self.inbox.dispatched(taken)           # once per round, not per request
        return out

    def expire(self, now: float) -> None:
        """Queued requests past their deadline time out."""
        heap = self._deadlines
        while heap and heap[0][0] <= now:
            req = heapq.heappop(heap)[2]
            if req.state == "queued":
                self._n -= 1
                self.inbox.dispatched(1)
                self.timeout(req, "before it was dispatched")

    def requeue(self, reqs: list, why: str) -> None:
        """Requests of a round that got no answer: queued again at the front,
        or failed after MAX_RETRIES."""
        back = []
        for req in reqs:
            if req.retries >= MAX_RETRIES:
                self.fail(req, RuntimeError(f"{why}; gave up after {req.retries} retries"))
            else:
                req.retries += 1
                req.state = "queued"
                back.append(req)
        if back:
            self.stats.add(retried=len(back))
            self._n += len(back)
            self.inbox.requeued(len(back))
            self._queue.extendleft(reversed(back))

    def cancel_all(self) -> None:
        """close(cancel=True): every queued request cancelled."""
        queued = [r for r in self._queue if r.state == "queued"]
        self.inbox.dispatched(len(queued))
        for req in queued:
            req.state = "done"
            if not req.future.cancel():
                req.future.set_exception(RuntimeError("the server was closed with cancel=True"))
            self.stats.add(cancelled=1)
        self._queue.clear()
        self._n = 0

    def drain(self) -> list:
        """Every queued request, taken out (the dispatcher fails them)."""
        out = list(self._queue)
        self._queue.clear()
        self._n = 0
        return out

    # ---- how a request ends -----------------------------------------------------

    def timeout(self, req, where: str) -> None:
        budget = req.deadline_at - req.t_submit
        if req.state != "done":
            self.stats.add(timeouts=1)
        self.fail(req, TimeoutError(f"no estimate within the request's deadline of {budget:g} s {where}"),
                  counted=False)

    def resolve_rows(self, reqs, rows, *, approximate: bool, answered, round_id: int, nodes=None) -> int:
        """Request i's result is rows[i] (None: not a request any more): the
        futures resolved, their latencies recorded under one stats lock (and
        the approximate ones counted). A request submitted with info=True gets
        (rows[i], RequestInfo); nodes: the round's (N,) assignment of nodes
        to workers, or None. The number resolved."""
        live = []
        for i, req in enumerate(reqs):
            if req is None or req.state == "done":
                continue
            req.state = "done"
            if not req.running and not req.future.set_running_or_notify_cancel():
                continue                       # never the case in flight: pop() ran it
            req.running = True
            live.append((req, i))
        if not live:
            return 0
        now = time.perf_counter()
        st = self.stats
        with st.lock:                          # first: stats() agrees with what a caller sees resolved
            st.counts["completed"] += len(live)
            if approximate:
                st.counts["approximate"] += len(live)
            st.latencies.extend([now - req.t_submit for req, _ in live])
        info = None
        for req, i in live:
            value = rows[i]
            if req.want_info:
                if info is None:            # made for the first request that asked for it
                    answered = tuple(int(j) for j in answered)
                    info = answered, None if nodes is None else tuple(int(nodes[j]) for j in answered)
                value = (value, RequestInfo(approximate, now - req.t_submit, info[0], round_id, info[1]))
            try:
                req.future.set_result(value)
            except Exception:                  # InvalidStateError: resolved already
                pass
        return len(live)

    def fail(self, req, exc: BaseException, counted: bool = True) -> None:
        """The request ends with ``exc`` (counted among the errors unless told
        otherwise: a timeout is counted as one)."""
        if req.state == "done":
            return
        req.state = "done"
        fut = req.future
        if not req.running and not fut.set_running_or_notify_cancel():
            return
        req.running = True
        if counted:
            self.stats.add(errors=1)
        try:
            fut.set_exception(exc)
        except Exception:                      # InvalidStateError: resolved already
            pass
