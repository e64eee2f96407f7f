"""The contract between ``CodedInference`` and a backend (local processes, Ray).

A backend is transport only: it starts, watches, restarts and stops N
workers, moves coded inputs to them and their outputs back, and reports what
happened as ``Event`` records. Every round decision (who is sent what, who
counts, when to stop, what to decode) is ``CodedInference``'s
(letcc.runtime.coded_inference). Both backends derive from ``Backend``; neither
imports the other.

One round, as the master drives it::

    buf, need_probe = backend.input_view(b, row_shape, dtype)   # encode into buf
    backend.set_input_slots(positions)        # which row of buf is whose
    [backend.probe_send(j, r, b) ... poll ... backend.set_output_layout(...)]
    backend.submit(r, workers, b, sleep_s)
    while undecided:
        backend.arm(answers_needed); events = backend.poll(timeout)
    Y = backend.outputs(answered, b)
    backend.cancel(late workers); backend.restart_dead()

Rounds in flight (letcc.serving's CodedServer): a backend built with
``rounds_in_flight=R`` keeps R ring slots, each with its own input and output
rows for every worker. ``input_view``, ``submit``, ``outputs`` and ``cancel``
take the ring slot (``ring=``, 0 by default: CodedInference uses one slot).
The contract, for any R:

- a worker works through its tasks in the order they were submitted; a task
  whose round was cancelled (``cancel(workers, ring)``) is dropped before it
  starts, between chunks and while sleeping, and the worker goes on with the
  next one (the answer is "cancelled" or nothing);
- every "done" carries its round id; the output rows of ring slot k read by
  ``outputs(workers, b, k)`` are those of the latest round submitted to slot k,
  once that round's "done" arrived from each of `workers`: a late answer of an
  older round never overwrites them (the master reuses slot k only after the
  round in it is over; its answers are then stale, and dropped by round id).
  That holds also when the rounds differ in b: a late worker still inside the
  model call of the old round writes into its own output rows only (the local
  backend's output slots start at a fixed row: shm_slots, fixed=True), which
  its answer to the new round, queued behind, overwrites before they are read;
- an answer may be reported twice (a "done" counted in shared memory just as
  the next round is submitted): the master ignores the second;
- ``wake()`` (any thread) makes a ``poll()`` in progress return soon, with or
  without events: the server's submit() wakes its dispatcher this way.

Events (``Event.kind``; ``round`` is -1 for those not tied to a round, and a
probe's own id, -2 or below, for the replies to ``probe_send``: never a round's,
so a late probe reply is never read as an answer to a round):

    ready       worker is up (payload: (pid,))
    init_error  model_factory() raised in a (re)started worker (payload: (traceback,))
    died        the worker is gone (payload: (exit code or None, pid[, detail]))
    done        worker answered round r; its output is ready for outputs()
    answers     several workers answered round r (worker -1; payload: (workers,
                finish times), in the order they finished): the same as a "done"
                of each (``each_answer`` turns it into those), one event instead of
                one per answer for a driver that takes them at once
    cancelled   worker dropped round r (cancelled, or no input for it)
    error       the model raised on round r (payload: (traceback,))
    shape       the output does not fit the layout (payload: (shape, dtype str, rows))
    probe       reply to probe_send (payload: (shape, dtype str))
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import NamedTuple

import numpy as np

__all__ = ["Backend", "Event", "each_answer", "answer_count"]


class Event(NamedTuple):
    kind: str          # ready | init_error | done | answers | cancelled | error | shape | probe | died
    worker: int
    round: int         # -1 for events not tied to a round (ready, init_error, died); <= -2: a probe's
    payload: tuple
    t: float           # time.perf_counter() when the master saw it (done: when the worker finished)


def each_answer(ev: Event) -> list[Event]:
    """An "answers" event as the "done" event of each of its workers; any other event alone."""
    if ev.kind != "answers":
        return [ev]
    return [Event("done", j, ev.round, (), t) for j, t in zip(*ev.payload)]


def answer_count(ev: Event) -> int:
    """How many replies to a round an event carries (an "answers" event: one per worker)."""
    return len(ev.payload[0]) if ev.kind == "answers" else 1


class Backend(ABC):
    """What every backend does for ``CodedInference`` (see the module docstring).

    Workers are numbered 0..n-1; ``kind`` names the backend ("local", "ray")."""

    kind: str
    n: int

    # ---- workers ----------------------------------------------------------

    @abstractmethod
    def ready_workers(self) -> list[int]:
        """Workers that can be sent a round now, ascending."""

    @abstractmethod
    def worker_pids(self) -> list:
        """Process id of each worker (None while it is not up)."""

    @abstractmethod
    def restart_dead(self) -> list[int]:
        """Start replacing every dead worker (without waiting for it); the workers started."""

    @abstractmethod
    def kill(self, j: int) -> None:
        """Stop worker j at once (it hung); it is replaced at restart_dead()."""

    # ---- inputs and outputs ----------------------------------------------

    ring: int = 1      # ring slots: rounds that may be in flight at once

    @abstractmethod
    def input_view(self, b: int, row_shape, dtype, ring: int = 0) -> tuple[np.ndarray, bool]:
        """(an (n, b, *row_shape) array of ring slot `ring` to encode this round's
        inputs into, whether the output layout is unknown: then probe_send() a
        worker first). A new b, shape or dtype may replace every slot's storage:
        size it for the largest round before rounds are in flight."""

    @abstractmethod
    def set_input_slots(self, positions) -> None:
        """Which row of the input array each worker reads in the next submit()
        or probe_send(): None = row j for worker j, else an (n,) int array (-1: none)."""

    @abstractmethod
    def outputs(self, workers, b: int, ring: int = 0) -> np.ndarray:
        """The (len(workers), b, ...) outputs of workers that reported "done" for
        the round in ring slot `ring`, rows in the order of `workers` (a copy)."""

    @abstractmethod
    def output_reference(self):
        """(worker, output row shape, dtype str) the output layout was learnt from, or None."""

    @abstractmethod
    def input_spec(self):
        """A description of the current input layout (for error messages), or None."""

    @abstractmethod
    def probe_send(self, j: int, r: int, b: int) -> bool:
        """Ask worker j for the output shape of one input row (a "probe" event
        answers); False when it could not be sent."""

    @abstractmethod
    def set_output_layout(self, row_shape, dtype, worker=None) -> None:
        """Size the outputs from a probe's answer (learnt from `worker`)."""

    @abstractmethod
    def forget_output_layout(self) -> None:
        """Drop the learnt output layout (between rounds, none in flight): the next
        input_view() says it is unknown and the caller probes again. For a shape
        error: the layout may have been learnt from the odd worker out."""

    # ---- rounds -----------------------------------------------------------

    @abstractmethod
    def submit(self, r: int, workers, b: int, sleep_s: np.ndarray, ring: int = 0) -> None:
        """Send round r (ids increase) to `workers`, into ring slot `ring` (their
        inputs are in place); worker j first sleeps sleep_s[j] seconds (simulated
        stragglers), then computes. Queued behind the worker's earlier tasks."""

    @abstractmethod
    def cancel(self, workers, ring: int = 0) -> None:
        """The round in ring slot `ring` is no longer wanted from `workers` (they
        drop it at their next check)."""

    @abstractmethod
    def wake(self) -> None:
        """Make a poll() in progress (or the next one) return soon; thread-safe."""

    @abstractmethod
    def wake_at(self, t: float) -> None:
        """Make a poll() in progress (or the next one) return by perf_counter
        time ``t``, replacing the previous wake_at (``math.inf``: cancel it);
        thread-safe. It may return earlier: a backend that cannot time a
        wake-up wakes at once (the caller then finds it early and sleeps again)."""

    @abstractmethod
    def arm(self, answers: int) -> bool:
        """Let the next poll() sleep until `answers` more workers answered the
        latest round submitted (or anything else happens); True when that many already
        have (poll(0) then). A backend that wakes on every answer returns False."""

    @abstractmethod
    def poll(self, timeout: float | None) -> list[Event]:
        """The events that arrived, waiting up to `timeout` seconds (None:
        without limit) for the first one."""

    @abstractmethod
    def close(self) -> None:
        """Stop every worker and release every resource (idempotent)."""
