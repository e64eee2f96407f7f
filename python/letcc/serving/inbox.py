"""The server's inbox: where caller threads hand requests to the dispatcher.

The only state both sides touch, behind one lock (everything else is the
dispatcher thread's)::

    caller threads                         dispatcher thread
    put(req) -- full? QueueFull            take() -> the whole inbox, cancel flag
             -- closed/broken? RuntimeError    (a timed wake-up set by put: cancelled)
             -- the wake rule says so:     wake_when(count, batch_delay, before)
                wake() the dispatcher,         before it sleeps: which new request
                or wake_at(its due time)       changes what it would do
    close(cancel) / abort()                dispatched(n) / requeued(n): backpressure

``put`` wakes the dispatcher only for a request that changes what it would do
before its planned wake-up: the one that brings the waiting requests to
``count`` (a round of K can leave, a worker has room) wakes it now; one whose
deadline or batch delay ends before the planned wake-up sets a timed wake-up
for then (``wake_at``: the dispatcher sleeps on until that time, where it used
to wake now only to compute the time and sleep again: one trip round its loop
less for every round that leaves on its batch delay). After a wake, later puts
do not wake again until the dispatcher states a new rule (it takes the whole
inbox); a timed wake-up moves only earlier. The timer is set under the lock,
so two callers' settings cannot land out of order.
"""
from __future__ import annotations

import math
import threading
from collections import deque

import numpy as np

__all__ = ["Inbox", "QueueFull"]


class QueueFull(RuntimeError):
    """``submit`` found ``max_queue`` requests waiting: the request was not accepted.

    Raised at once (submit never blocks); nothing was queued, so retrying later
    or shedding the request is the caller's choice."""


class Inbox:
    """Requests accepted and not yet dispatched; the dispatcher's wake-up rule.

    Parameters
    ----------
    max_queue : requests that may wait undispatched (``waiting``); one more is QueueFull
    wake : callable waking the dispatcher (the backend's ``wake``), thread-safe
    wake_at : callable(t) waking it at perf_counter time t, replacing the previous
        setting (inf: cancel; the backend's ``wake_at``), thread-safe
    """

    def __init__(self, max_queue: int, wake, wake_at):
        self.lock = threading.Lock()
        self.max_queue = max_queue
        self._wake, self._wake_at = wake, wake_at
        self._items: deque = deque()
        self.waiting = 0                 # accepted, not dispatched (backpressure)
        self.accepted = 0                # requests put() accepted (stats()['accepted'])
        self.rejected = 0                # QueueFull raised
        self.closing = False             # close(): accept nothing more, drain
        self.cancel_queued = False       # close(cancel=True): cancel what was not dispatched
        self.aborted = False             # the dispatcher must fail what it holds and stop
        self.broken: BaseException | None = None   # the dispatcher died of this
        self.layout = None               # (row shape, dtype): fixed by the first request
        # the wake rule (wake_when): a put wakes the dispatcher when the inbox
        # reaches `count` requests, or for a request whose deadline, or batch
        # delay after its arrival, ends before `before`
        self._count = 1
        self._before = math.inf
        self._batch_delay = math.inf
        self._timer_at = math.inf        # the timed wake-up put set (inf: none)

    # ---- caller threads ---------------------------------------------------

    def fix_layout(self, shape: tuple, dtype) -> tuple:
        """The (shape, dtype) every request must have: the first caller's."""
        layout = self.layout
        if layout is None:
            with self.lock:
                if self.layout is None:
                    self.layout = (tuple(shape), np.dtype(dtype))
                layout = self.layout
        return layout

    def put(self, req) -> None:
        """Accept ``req`` (its ``t_submit`` and ``deadline_at`` are read) or raise."""
        with self.lock:
            if self.closing:
                raise RuntimeError("this CodedServer is closed")
            if self.broken is not None:
                raise RuntimeError(f"this CodedServer's dispatcher failed: {self.broken!r}")
            if self.waiting >= self.max_queue:
                self.rejected += 1
                raise QueueFull(f"{self.waiting} requests are waiting (max_queue = {self.max_queue})")
            self.waiting += 1
            self.accepted += 1
            self._items.append(req)
            wake = len(self._items) >= self._count
            if wake:                     # the next one needs none: the dispatcher takes the whole inbox
                self._count, self._before = math.inf, -math.inf
            else:
                due = min(req.deadline_at, req.t_submit + self._batch_delay)
                if due < self._before:   # this one changes the planned wake-up: to its due time
                    self._before = self._timer_at = due
                    self._wake_at(due)
        if wake:
            self._wake()

    def close(self, cancel: bool) -> bool:
        """Accept nothing more; with cancel, what is not dispatched is cancelled.
        True the first time. Wakes the dispatcher."""
        with self.lock:
            first = not self.closing
            self.closing = True
            self.cancel_queued = self.cancel_queued or cancel
        self._wake()
        return first

    def abort(self) -> None:
        """The dispatcher must fail everything it holds and stop (close's timeout passed)."""
        with self.lock:
            self.closing = self.cancel_queued = self.aborted = True
        try:
            self._wake()
        except Exception:                # the backend may be gone already
            pass

    def fail(self, exc: BaseException) -> None:
        """The dispatcher died of ``exc``: later puts raise."""
        with self.lock:
            self.broken = exc

    # ---- the dispatcher thread ----------------------------------------------

    def take(self) -> tuple[deque, bool]:
        """(every request put since the last take, whether queued ones are to be cancelled)."""
        with self.lock:
            items, self._items = self._items, deque()
            if self._timer_at != math.inf:   # the requests it was for are the dispatcher's now
                self._timer_at = math.inf
                self._wake_at(math.inf)
            return items, self.cancel_queued

    def wake_when(self, count: float, batch_delay: float, before: float) -> bool:
        """Before the dispatcher sleeps until ``before`` (perf_counter; inf: no
        planned wake-up): wake it at ``count`` requests in the inbox, or for one
        whose deadline, or ``batch_delay`` after its arrival, ends before then.
        False when requests came in since the last take (they woke nobody: the
        rule was spent): do not sleep, take them."""
        with self.lock:
            if self._items:
                self._count, self._before = math.inf, -math.inf
                return False
            self._count, self._batch_delay, self._before = count, batch_delay, before
            return True

    def dispatched(self, n: int) -> None:
        """n accepted requests left the queue (dispatched, expired, cancelled)."""
        if n:
            with self.lock:
                self.waiting -= n

    def requeued(self, n: int) -> None:
        """n requests are waiting again (their round had no answer)."""
        if n:
            with self.lock:
                self.waiting += n

    def drain(self) -> list:
        """Everything in the inbox, now counted as gone (the dispatcher fails it)."""
        with self.lock:
            items, self._items = list(self._items), deque()
            self.waiting = 0
        return items
