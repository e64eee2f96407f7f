"""The server's dispatcher: the one thread that owns the queue, the flights and the workers.

Everything mutable below is touched by this thread only, except the inbox
(``submit`` appends under ``lock``) and the stats (their own lock). The loop::

    take the inbox -> queue; time out queued requests past their deadline
    dispatch: coded rounds while a ring slot is free and a round is due
              (K waiting, or max_batch_delay after the oldest, or closing);
              tasks (balancer.py) while a worker has room
    sleep in backend.poll() until an answer, a death, wake() (a submit, close)
              or the next due time (batch delay, deadline, hedge, hang)
    events -> flights (by round id; an unknown id is a stale answer: dropped)
    flights: decided -> decode -> futures; deadline -> decode what arrived or
             TimeoutError; hung -> kill; no answer at all -> queued again
    replace dead workers
until closing with nothing queued or in flight. An exception in the loop
fails every pending future (no future is left pending).
"""
from __future__ import annotations

import heapq
import logging
import math
import threading
import time
from collections import deque

import numpy as np

from letcc.runtime.encode_into import encode_into
from letcc.runtime.virtual_time import RoundWaiter
from letcc.runtime.worker_pool import WorkerPool, death_text
from letcc.serving.balancer import Balancer
from letcc.serving.flights import CodedFlight, pad_groups

__all__ = ["Dispatcher"]

log = logging.getLogger("letcc.serving")
_MAX_RETRIES = 2


class Dispatcher(Balancer, WorkerPool):
    """The dispatcher (module docstring); ``CodedServer`` is its front."""

    def __init__(self, model_factory, scheme, mode: str, *, backend, devices, threads_per_worker, start_method,
                 chunk_rows, ray_options, draw_delays, count, max_batch_delay, max_groups, rounds_in_flight,
                 hang_timeout, startup_timeout, rng, stats):
        self.code, self.mode = scheme, mode
        self.N, self.K = int(scheme.N), int(scheme.K)
        self.hang_timeout, self.startup_timeout = hang_timeout, startup_timeout
        self.R = rounds_in_flight
        ring = rounds_in_flight if mode == "coded" else self.N * (rounds_in_flight + 1)
        self._draw, self._count, self._rng = draw_delays, count, rng
        self.max_batch_delay, self.max_groups = max_batch_delay, max_groups
        self.stats = stats
        self.lock = threading.Lock()
        self.inbox: deque = deque()
        self.waiting = 0                      # accepted, not dispatched (backpressure)
        self.accepted = 0                     # requests submit() accepted (stats()['accepted'])
        # set by this thread before it sleeps, read by submit() under `lock` (_wake_rule): wake it
        # when the inbox reaches wake_count requests (a round can leave, a worker has room), or
        # for a request whose deadline, or batch delay (wake_batch_delay: inf when no round can
        # leave), ends before wake_before, the planned wake-up; the submit that wakes it clears
        # them (one wake-up is enough: the whole inbox is taken)
        self.wake_count = 1
        self.wake_before = math.inf
        self.wake_batch_delay = math.inf
        self.closing = self.cancel_queued = False
        self.abort = False                    # close()'s timeout passed: fail what is left and stop
        self.errors: deque = deque(maxlen=100)   # (worker, text), most recent last
        self._queue: deque = deque()
        self._deadlines: list = []            # heap (deadline_at, seq, request) of queued requests
        self._seq = 0
        self._flights: dict = {}              # round id -> flight
        self._free = deque(range(ring))
        # master-side delays of every round (the injected ones are real sleeps): read-only
        self._zeros = np.zeros(self.N)
        self._nowhere = np.zeros(self.N, dtype=bool)
        self._zeros.flags.writeable = self._nowhere.flags.writeable = False
        self._layout = None                   # (row shape, dtype) of the requests
        self._probed = False
        self._sized = False
        self._round = 0                       # the last round id used (ids increase)
        self._complete_sets: dict = {}        # frozenset of workers -> code.is_complete (_may_complete)
        super().__init__(backend, model_factory, devices, threads_per_worker, start_method=start_method,
                         chunk_rows=chunk_rows, ray_options=ray_options, rounds_in_flight=ring)
        self._init_balancer(scheme)

    # ---- the loop ----------------------------------------------------------

    def run(self) -> None:
        cpu = time.thread_time()
        try:
            while True:
                now = time.perf_counter()
                if self.abort:
                    self.fail_everything(RuntimeError("the CodedServer was closed before this request "
                                                      "was answered"))
                    return
                self._take_inbox(now)
                self._expire_queued(now)
                self._dispatch(now)
                if self.closing and not self._queue and not self._flights:
                    return
                now = time.perf_counter()
                timeout = self._next_due(now)
                need = self._answers_wanted()
                if need and self._backend.arm(need):   # they are in already
                    timeout = 0.0
                cpu = self._publish(cpu)          # before sleeping: stats() sees what is out
                self._wake_rule(now, timeout)
                self._events(self._backend.poll(timeout))
                self._check_flights(time.perf_counter())
                self._restart()
        except BaseException as exc:          # never leave a future pending
            log.exception("letcc server: the dispatcher failed")
            self.fail_everything(RuntimeError(f"the letcc server's dispatcher failed: {exc!r}"))
            raise

    def _answers_wanted(self) -> int:
        """Answers of the latest round to sleep for (LocalBackend.arm: one
        wake-up when they are in, not one per answer): its waiter's
        answers_needed; 1 for a task (one worker); 0 when it is over (no arm:
        its late answers, still counted, must not ring)."""
        fl = self._flights.get(self._round)
        if fl is None:
            return 0
        if fl.kind == "task":
            return 1
        return fl.waiter.answers_needed()

    def _wake_rule(self, now: float, timeout) -> None:
        """Before sleeping: which new requests a submit must wake this thread
        for (those that change what it would do before its planned wake-up).
        Coded rounds: the one that makes a round of K (with a ring slot free),
        and the first one's batch delay; tasks: the first, while a worker has
        room; any request whose deadline comes before the planned wake-up."""
        if not self._free:
            count, delay = math.inf, math.inf
        elif self.mode == "coded":
            count, delay = max(1, self.K - self._live_queue()), self.max_batch_delay
        elif any(len(q) < self.R for q in self._outstanding.values()):
            count, delay = 1, math.inf
        else:
            count, delay = math.inf, math.inf
        with self.lock:
            if self.inbox:
                timeout = 0.0
            self.wake_count, self.wake_batch_delay = count, delay
            self.wake_before = math.inf if timeout is None else now + timeout

    def _publish(self, cpu: float) -> float:
        """Queue depth, flights and this thread's CPU time into the stats."""
        t = time.thread_time()
        n = len({id(fl) for fl in self._flights.values()})
        with self.stats.lock:
            self.stats.master_cpu += t - cpu
            self.stats.queue_depth = self.waiting
            self.stats.in_flight = n
            self.stats.max_in_flight_seen = max(self.stats.max_in_flight_seen, n)
        return t

    def fail_everything(self, exc: BaseException) -> None:
        with self.lock:
            pending, self.inbox = list(self.inbox), deque()
            self.waiting = 0
        pending += list(self._queue)
        for fl in set(self._flights.values()):
            pending += [r for r in fl.requests if r is not None]
        self._queue.clear()
        self._flights.clear()
        for req in pending:
            self._resolve(req, exc=exc)

    def _take_inbox(self, now: float) -> None:
        with self.lock:
            new, self.inbox = self.inbox, deque()
            cancel = self.cancel_queued
        for req in new:
            self._queue.append(req)
            if math.isfinite(req.deadline_at):
                self._seq += 1
                heapq.heappush(self._deadlines, (req.deadline_at, self._seq, req))
        if cancel:
            self._cancel_queue()

    def _cancel_queue(self) -> None:
        with self.lock:
            self.waiting -= sum(1 for r in self._queue if r.state == "queued")
        for req in self._queue:
            if req.state == "queued":
                req.state = "done"
                if not req.future.cancel():
                    req.future.set_exception(RuntimeError("the server was closed with cancel=True"))
                self.stats.add(cancelled=1)
        self._queue.clear()

    def _expire_queued(self, now: float) -> None:
        heap = self._deadlines
        while heap and heap[0][0] <= now:
            req = heapq.heappop(heap)[2]
            if req.state == "queued":
                with self.lock:
                    self.waiting -= 1
                self._timeout(req, "before it was dispatched")

    def _pop_requests(self, n: int) -> list:
        """Up to n queued requests (oldest first) now running; cancelled ones dropped."""
        out = []
        queue = self._queue
        taken = 0
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
        if taken:
            with self.lock:                    # once per round, not per request
                self.waiting -= taken
        return out

    def _live_queue(self) -> int:
        while self._queue and self._queue[0].state != "queued":
            self._queue.popleft()
        return len(self._queue)

    def _next_due(self, now: float):
        t = math.inf
        if self._queue and self._free and self.mode == "coded":
            t = self._queue[0].t_submit + self.max_batch_delay
        if self._deadlines:
            t = min(t, self._deadlines[0][0])
        for r, fl in self._flights.items():
            t = min(t, fl.deadline_at, self._flight_due(fl, now))
        if math.isinf(t):
            return None
        return max(0.0, t - now)

    def _flight_due(self, fl, now: float) -> float:
        if fl.kind == "task":
            return self._task_due(fl)
        nxt = fl.waiter.next_change(now - fl.t0)
        return fl.t0 + nxt

    # ---- dispatch ----------------------------------------------------------

    def _dispatch(self, now: float) -> None:
        if self.mode != "coded":
            self._dispatch_tasks(now)
            return
        K = self.K
        while self._free:
            n = self._live_queue()
            if not n or (n < K and not self.closing and now - self._queue[0].t_submit < self.max_batch_delay):
                return
            workers = self._backend.ready_workers()
            if not workers:
                self._backend.restart_dead()
                return
            take = min(self.max_groups, n // K) * K if n >= K else n
            reqs = self._pop_requests(take)
            if reqs:
                self._launch_coded(reqs, workers, now)

    def _prepare_layout(self, b: int) -> None:
        """Size every ring slot for the largest round before rounds are in flight."""
        if not self._probed and not self._sized:
            shape, dtype = self._layout
            _, need_probe = self._backend.input_view(max(b, self.max_groups), shape, dtype)
            self._sized = True
            self._probed = not need_probe       # the Ray backend learns the layout from the answers

    def _may_complete(self, sent, never) -> bool:
        """code.is_complete of the workers of a round that can count, asked of the
        code once per such set (the same set, usually all N, round after round)."""
        key = frozenset(j for j in sent if not never[j])
        hit = self._complete_sets.get(key)
        if hit is None:
            if len(self._complete_sets) > 256:
                self._complete_sets.clear()
            hit = self._complete_sets[key] = bool(key) and bool(self.code.is_complete(sorted(key)))
        return hit

    def _new_round_id(self, b: int, workers) -> int:
        """The next round's id, after probing the output layout if it is still
        unknown (WorkerPool._probe: every worker asked, the first answer taken)."""
        if not self._probed:
            self._probe(b, workers)
            self._probed = True
        self._round += 1
        return self._round

    def _launch_coded(self, reqs: list, workers: list, now: float) -> None:
        K, N = self.K, self.N
        shape, dtype = self._layout
        self._prepare_layout(self.max_groups)
        ring = self._free.popleft()
        groups = pad_groups(reqs, K, shape, dtype)
        B = groups.shape[1]
        if self._draw is None:
            delays, never = self._zeros, self._nowhere
        else:
            delays = np.asarray(self._draw(N, self._rng), dtype=np.float64)
            never = np.isinf(delays)
        sent = list(workers)
        try:
            positions = encode_into(self.code, groups,
                                    lambda dt: self._backend.input_view(B, shape, dt, ring)[0],
                                    sent if len(sent) < N else None)
            self._backend.set_input_slots(positions)
            r = self._new_round_id(B, sent)
            ready = set(self._backend.ready_workers())      # the probe may have lost one
            sent = [j for j in sent if j in ready]
        except Exception as exc:
            self._free.append(ring)
            for req in reqs:
                self._resolve(req, exc=exc)
            return
        t0 = time.perf_counter()
        self._backend.submit(r, sent, B, delays, ring)
        hang_at = {}
        outstanding, hang = self._outstanding, self.hang_timeout
        extra = delays.tolist()
        for j in sent:
            queue = outstanding[j]
            queue.append((r, t0))
            e = extra[j]
            hang_at[j] = (queue[0][1] - t0) + (e if math.isfinite(e) else 0.0) + hang
        waiter = RoundWaiter(self.code, sent, self._zeros, never, self._count, None, hang_at,
                             may_complete=self._may_complete(sent, never))
        self._flights[r] = CodedFlight(r, ring, reqs, B, t0, sent, waiter, retry_ok=True)
        st = self.stats
        with st.lock:                   # one lock per round
            st.counts["rounds"] += 1
            st.counts["padded_rounds"] += len(reqs) < B * K
            st.real_positions += len(reqs)
            st.positions += B * K

    # ---- events ------------------------------------------------------------

    def _events(self, events) -> None:
        """Handle what poll() returned: answers to a coded round in flight (most
        of them: N a round) straight into its waiter, the rest by _event."""
        flights = self._flights
        for ev in events:
            if ev.kind == "done":
                fl = flights.get(ev.round)
                if fl is not None and fl.kind == "coded":
                    self._ack(ev.worker, ev.round)
                    fl.waiter.result(ev.worker, ev.t - fl.t0)
                    continue
            self._event(ev)

    def _event(self, ev) -> None:
        j = ev.worker
        if ev.round >= 0:
            self._ack(j, ev.round)
            fl = self._flights.get(ev.round)
            if fl is None:
                self.stats.add(stale=1)
                return
            if fl.kind == "task":
                self._task_event(fl, ev)
                return
            waiter = fl.waiter
            if ev.kind == "done":
                waiter.result(j, ev.t - fl.t0)
            elif ev.kind == "error":
                waiter.fail(j, "raised")
                fl.raised[j] = ev.payload[0]
                self._report(None, j, ev.payload[0])
            elif ev.kind == "shape":
                self._end_coded(fl, (), exc=ValueError(self._shape_text(j, ev.payload, fl.B)))
            else:                               # cancelled: not an answer
                waiter.fail(j, ev.kind)
        elif ev.kind == "died":
            self._outstanding[j] = []
            self._report(None, j, f"{death_text(ev)}; it is being replaced")
            for fl in list(set(self._flights.values())):
                if fl.kind == "task":
                    self._task_worker_failed(fl, j, "died")
                else:
                    fl.waiter.fail(j, "died")
        elif ev.kind == "init_error":
            self._report(None, j, "replacement failed to build its model:\n" + ev.payload[0])

    def _report(self, errors, j: int, text: str) -> None:
        """Record what went wrong with worker j (stats()['last_errors'], the
        'letcc.serving' logger); no warning: this is not the caller's thread."""
        self.errors.append((j, text))
        lines = text.strip().splitlines()
        log.warning("letcc worker %d: %s", j, lines[-1] if lines else text)

    def _shape_text(self, j, payload, b) -> str:
        return (f"worker {j} returned an output of shape {tuple(payload[0])} {payload[1]} for a batch of "
                f"{payload[2] if len(payload) > 2 else b} inputs: the model must return the same shape "
                "(batch, ...) on every worker and for every input")

    # ---- flights -----------------------------------------------------------

    def _check_flights(self, now: float) -> None:
        for fl in list(set(self._flights.values())):
            if fl.kind == "task":
                self._check_task(fl, now)
                continue
            if fl.id not in self._flights:
                continue
            waiter, elapsed = fl.waiter, now - fl.t0
            for j in waiter.hung(elapsed):
                self._backend.kill(j)
                self._outstanding[j] = []
                waiter.fail(j, "hung")
                self._report(None, j, f"no answer within hang_timeout = {self.hang_timeout:g} s; killed")
            decision = waiter.decide(elapsed)
            if decision is not None:
                self._finish_coded(fl, decision.answered, now)
            elif now >= fl.deadline_at:
                self._coded_deadline(fl, now)

    def _finish_coded(self, fl, answered, now: float) -> None:
        answered = sorted(answered)
        if answered and fl.waiter.decodable(answered):
            try:
                Y = self._backend.outputs(answered, fl.B, fl.ring)
                est = np.asarray(self.code.decode(Y, answered))
                rows = np.ascontiguousarray(est.swapaxes(0, 1)).reshape((fl.B * self.K,) + est.shape[2:])
            except Exception as exc:
                self._end_coded(fl, answered, exc=exc)
                return
            self._end_coded(fl, answered, rows=rows)
            return
        if fl.raised:
            j, tb = next(iter(fl.raised.items()))
            exc = RuntimeError(f"round {fl.id}: the model raised on worker {j}:\n{tb}")
        else:
            exc = None
        self._end_coded(fl, answered, exc=exc, retry=exc is None)

    def _coded_deadline(self, fl, now: float) -> None:
        arrived = sorted(fl.waiter.arrived)
        if arrived and fl.waiter.decodable(arrived):
            self._finish_coded(fl, arrived, now)
            return
        for i, req in enumerate(fl.requests):
            if req is not None and req.deadline_at <= now:
                fl.drop(i)
                self._timeout(req, f"(round {fl.id}: answers from {arrived or 'no worker'})")
        if all(r is None for r in fl.requests):
            self._end_coded(fl, arrived)

    def _end_coded(self, fl, answered, exc=None, retry=False, rows=None) -> None:
        """The round is over: its late workers cancelled, its ring slot free,
        what is left of its requests failed with `exc` or queued again."""
        if self._flights.pop(fl.id, None) is None:
            return
        counted = set(answered)
        late = [j for j in fl.sent if j not in counted]
        self._backend.cancel(late, fl.ring)
        self._free.append(fl.ring)
        self.stats.add(erasures=self.N - len(counted))
        if rows is not None:                  # after the bookkeeping: stats() agrees with the futures
            self._resolve_rows(fl.requests, rows)
        left = [r for r in fl.requests if r is not None and r.state == "flight"]
        if retry:
            self._requeue(left, f"round {fl.id}: no worker answered ({fl.waiter.failed or 'none'})")
        else:
            for req in left:
                self._resolve(req, exc=exc or RuntimeError(f"round {fl.id} ended without an answer"))

    def _requeue(self, reqs: list, why: str) -> None:
        back = []
        for req in reqs:
            if req.retries >= _MAX_RETRIES:
                self._resolve(req, exc=RuntimeError(f"{why}; gave up after {req.retries} retries"))
            else:
                req.retries += 1
                req.state = "queued"
                back.append(req)
        if back:
            self.stats.add(retried=len(back))
            with self.lock:
                self.waiting += len(back)
            self._queue.extendleft(reversed(back))

    def _restart(self) -> None:
        started = self._backend.restart_dead()
        if started:
            self.stats.add(replaced=len(started))

    # ---- futures -----------------------------------------------------------

    def _timeout(self, req, where: str) -> None:
        budget = req.deadline_at - req.t_submit
        if req.state != "done":
            self.stats.add(timeouts=1)
        self._resolve(req, exc=TimeoutError(f"no estimate within the request's deadline of {budget:g} s {where}"),
                      counted=False)

    def _resolve_rows(self, reqs, rows) -> None:
        """Request i's estimate is rows[i] (None: not a request any more): the
        futures resolved, their latencies recorded under one stats lock."""
        live = []
        for i, req in enumerate(reqs):
            if req is None or req.state == "done":
                continue
            if not req.running:                # never the case in flight: _pop_requests ran it
                self._resolve(req, rows[i])
                continue
            req.state = "done"
            live.append((req, i))
        if not live:
            return
        now = time.perf_counter()
        st = self.stats
        with st.lock:                          # first: stats() agrees with what a caller sees resolved
            st.counts["completed"] += len(live)
            st.latencies.extend([now - req.t_submit for req, _ in live])
        for req, i in live:
            try:
                req.future.set_result(rows[i])
            except Exception:                  # InvalidStateError: resolved already
                pass

    def _resolve(self, req, y=None, exc=None, counted=True) -> None:
        if req.state == "done":
            return
        req.state = "done"
        fut = req.future
        if not req.running and not fut.set_running_or_notify_cancel():
            return
        req.running = True
        latency = time.perf_counter() - req.t_submit
        with self.stats.lock:                  # first: stats() agrees with what a caller sees resolved
            if exc is None:
                self.stats.counts["completed"] += 1
                self.stats.latencies.append(latency)
            elif counted:
                self.stats.counts["errors"] += 1
        try:
            if exc is None:
                fut.set_result(y)
            else:
                fut.set_exception(exc)
        except Exception:                      # InvalidStateError: resolved already
            pass
