"""The server's dispatcher: the one thread that owns the queue, the flights and the workers.

Everything mutable below is touched by this thread only, except the inbox
(letcc.serving.inbox: the callers' side, behind its lock) and the stats
(their own lock). The loop::

    inbox.take() -> queue (letcc.serving.requests); queued requests past their
        deadline time out
    mode.dispatch: coded rounds (coded_rounds.py: K waiting, or max_batch_delay
        after the oldest, or closing) or tasks (balancer.py: while a worker has room)
    inbox.wake_when(the mode's rule) and sleep in backend.poll() until an
        answer, a death, a wake-up (a submit, close) or the next due time
    events -> the mode, by round id (an unknown id is a stale answer: dropped)
    mode.check: decided -> decode -> futures; deadline -> decode what arrived or
        TimeoutError; hung -> kill; no answer at all -> queued again
    replace dead workers
until closing with nothing queued or in flight. An exception in the loop
fails every pending future (no future is left pending).

A mode (``Mode``) is a collaborator handed the ``Context``: the state the
dispatcher owns, named. The coded rounds themselves are the round engine's
(letcc.runtime.round), the same steps CodedInference takes.
"""
from __future__ import annotations

import logging
import math
import time
from collections import deque
from typing import Protocol

from letcc.runtime.backend import each_answer
from letcc.runtime.round import RoundEngine
from letcc.runtime.worker_pool import WorkerPool
from letcc.serving.balancer import Balancer
from letcc.serving.coded_rounds import CodedRounds
from letcc.serving.inbox import Inbox
from letcc.serving.requests import RequestQueue
from letcc.serving.ring import Ring
from letcc.serving.systematic import AfterRule, SystematicRounds

__all__ = ["Dispatcher", "Mode", "Context"]

log = logging.getLogger("letcc.serving")


class Mode(Protocol):
    """What the dispatcher asks of a mode (CodedRounds, Balancer); all on its thread."""

    def dispatch(self, now: float) -> None:
        """Launch what is due from the queue while ring slots and workers allow."""

    def wake_rule(self) -> tuple[float, float]:
        """(inbox size that wakes the dispatcher, batch delay after a request that does)."""

    def answers_wanted(self) -> int:
        """Answers of the latest flight to sleep for (0: none; backend.arm)."""

    def due(self, now: float) -> float:
        """The earliest perf_counter time the mode must act without an event (inf: none)."""

    batch_answers: bool
    """Whether on_event takes "answers" events (several workers' answers at
    once, letcc.runtime.backend); else the dispatcher hands it each answer as
    a "done" event."""

    def on_event(self, flight, ev) -> None:
        """An event of one of the mode's flights (ev.round is one of its ids)."""

    def on_died(self, ev) -> None:
        """A worker died: an erasure in every flight it was in."""

    def on_stale(self, ev) -> None:
        """Replies of no flight in flight (a round that ended): counted, each
        answer of an "answers" event (backend.answer_count)."""

    def check(self, now: float) -> None:
        """End what is decided, past its deadline or hung."""


class Context:
    """The state the dispatcher thread owns and its mode works on."""

    def __init__(self, pool, engine, inbox, requests, ring, stats):
        self.pool, self.engine, self.inbox = pool, engine, inbox
        self.requests, self.ring, self.stats = requests, ring, stats
        self.flights: dict = {}               # round id -> flight (a task: one id per copy)

    def each_flight(self) -> list:
        """The flights in flight, each once (a flight may hold several round ids;
        flights hash by identity)."""
        return list(dict.fromkeys(self.flights.values()))


def _log_report(errors, j: int, text: str) -> None:
    """The dispatcher's reporter: the 'letcc.serving' logger (stats()['last_errors']
    are kept by the Dispatcher); no warning, this is not the caller's thread."""
    lines = text.strip().splitlines()
    log.warning("letcc worker %d: %s", j, lines[-1] if lines else text)


class Dispatcher:
    """The dispatcher (module docstring); ``CodedServer`` is its front."""

    def __init__(self, model_factory, scheme, mode: str, *, backend, devices, threads_per_worker, start_method,
                 chunk_rows, ray_options, draw_delays, count, max_batch_delay, max_groups, rounds_in_flight,
                 hang_timeout, startup_timeout, rng, stats, max_queue, fallback_after=None, hedge_after=None,
                 quarantine=None):
        N = int(scheme.N)
        slots = rounds_in_flight if mode == "coded" else N * (rounds_in_flight + 1)
        hedge = AfterRule(hedge_after, "hedge_after")
        spare = rounds_in_flight if hedge.given else 0      # systematic hedging: a slot per round
        self.errors: deque = deque(maxlen=100)   # (worker, text), most recent last

        def report(errors, j, text):
            self.errors.append((j, text))
            _log_report(errors, j, text)

        self.pool = WorkerPool(N, backend, model_factory, devices, threads_per_worker, start_method=start_method,
                               chunk_rows=chunk_rows, ray_options=ray_options, hang_timeout=hang_timeout,
                               startup_timeout=startup_timeout, report=report, rounds_in_flight=slots + spare,
                               owner="CodedServer")
        self.backend = self.pool.backend
        self.inbox = Inbox(max_queue, self.backend.wake, self.backend.wake_at)
        self.stats = stats
        self.requests = RequestQueue(self.inbox, stats)
        # task mode asks the engine for round ids and shape messages only (K and N of Uncoded / Hedged)
        engine = RoundEngine(self.pool, scheme, quarantine=quarantine)
        self.ctx = Context(self.pool, engine, self.inbox, self.requests, Ring(self.backend, slots, max_groups, spare),
                           stats)
        coded = dict(draw=draw_delays, count=count, rng=rng, max_batch_delay=max_batch_delay, max_groups=max_groups)
        if mode == "coded" and scheme.systematic_workers is not None:
            self.mode: Mode = SystematicRounds(self.ctx, fallback=AfterRule(fallback_after), hedge=hedge,
                                                       **coded)
        elif mode == "coded":
            self.mode = CodedRounds(self.ctx, **coded)
        else:
            self.mode = Balancer(self.ctx, scheme, draw=draw_delays, rng=rng, max_groups=max_groups,
                                 tasks_per_worker=rounds_in_flight)

    # ---- the loop ----------------------------------------------------------

    def run(self) -> None:
        cpu = time.thread_time()
        inbox, mode, ctx, backend = self.inbox, self.mode, self.ctx, self.backend
        try:
            while True:
                now = time.perf_counter()
                if inbox.aborted:
                    self.fail_everything(RuntimeError("the CodedServer was closed before this request "
                                                      "was answered"))
                    return
                self._take_inbox()
                self.requests.expire(now)
                mode.dispatch(now)
                if inbox.closing and not self.requests.live() and not ctx.flights:
                    return
                now = time.perf_counter()
                due = min(mode.due(now), self.requests.next_deadline())
                timeout = None if math.isinf(due) else max(0.0, due - now)
                need = mode.answers_wanted()
                if need and backend.arm(need):    # they are in already
                    timeout = 0.0
                cpu = self._publish(cpu)          # before sleeping: stats() sees what is out
                count, batch_delay = mode.wake_rule()
                if not inbox.wake_when(count, batch_delay, math.inf if timeout is None else now + timeout):
                    timeout = 0.0                 # requests came in meanwhile: take them now
                self._events(backend.poll(timeout))
                mode.check(time.perf_counter())
                started = backend.restart_dead()
                if started:
                    self.stats.add(replaced=len(started))
        except BaseException as exc:          # never leave a future pending
            log.exception("letcc server: the dispatcher failed")
            self.fail_everything(RuntimeError(f"the letcc server's dispatcher failed: {exc!r}"))
            raise

    def _take_inbox(self) -> None:
        new, cancel = self.inbox.take()
        self.requests.add(new)
        if cancel:
            self.requests.cancel_all()

    def _events(self, events) -> None:
        """Handle what poll() returned: events of a flight to the mode (by round
        id), deaths to the mode, the rest to the pool."""
        flights, pool, mode = self.ctx.flights, self.pool, self.mode
        for ev in events:
            if ev.round >= 0:
                pool.ack_event(ev)
                fl = flights.get(ev.round)
                if fl is None:              # a round that ended: every reply of it, at once
                    mode.on_stale(ev)
                    continue
                if mode.batch_answers or ev.kind != "answers":
                    mode.on_event(fl, ev)
                    continue
                for e in each_answer(ev):    # one by one (an answer may end the flight)
                    fl = flights.get(e.round)
                    if fl is None:
                        mode.on_stale(e)
                    else:
                        mode.on_event(fl, e)
            elif ev.kind == "died":
                mode.on_died(ev)
            elif ev.kind == "init_error":
                pool.report(None, ev.worker, "replacement failed to build its model:\n" + ev.payload[0])

    def _publish(self, cpu: float) -> float:
        """Queue depth, flights and this thread's CPU time into the stats."""
        t = time.thread_time()
        n = len(self.ctx.each_flight())
        with self.stats.lock:
            self.stats.master_cpu += t - cpu
            self.stats.queue_depth = self.inbox.waiting
            self.stats.in_flight = n
            self.stats.max_in_flight_seen = max(self.stats.max_in_flight_seen, n)
        return t

    def fail_everything(self, exc: BaseException) -> None:
        pending = self.inbox.drain() + self.requests.drain()
        flights = self.ctx.flights
        for fl in self.ctx.each_flight():
            pending += [r for r in fl.requests if r is not None]
        flights.clear()
        for req in pending:
            self.requests.fail(req, exc)

    def close(self) -> None:
        self.pool.close()

