"""The master's side of its N workers, between rounds.

Starts the backend (letcc.runtime.backend's contract: local processes or Ray),
keeps which tasks each worker still has on its hands (for its hang limit),
handles the events that arrive outside a round (late replies, deaths,
replacements becoming ready), learns the model's output layout by a probe,
and closes everything. The rounds themselves are letcc.runtime.round's
(RoundEngine), driven by CodedInference (one at a time) and by the server's
dispatcher (many in flight); both hold a WorkerPool.
"""
from __future__ import annotations

import math
import os
import sys
import time
import warnings

from letcc.runtime.backend import answer_count

__all__ = ["WorkerPool", "death_text", "warn_report"]

# warnings point at the first frame outside letcc.runtime (the caller's line)
_HERE = os.path.dirname(os.path.abspath(__file__))


def death_text(ev) -> str:
    """Text for a 'died' event: (exit code, pid[, detail])."""
    code, pid = ev.payload[0], ev.payload[1]
    if len(ev.payload) > 2:
        return f"worker {pid} died ({ev.payload[2]})"
    return f"worker process {pid} exited with code {code}"


def warn_report(errors: dict | None, j: int, text: str) -> None:
    """CodedInference's reporter: record what went wrong with worker j in the
    round's ``errors`` and warn, pointing at the caller's line (the caller's
    own thread runs the round)."""
    if errors is not None:
        errors[j] = text
    first = text.strip().splitlines()
    level, frame = 1, sys._getframe(0)
    while frame is not None and frame.f_code.co_filename.startswith(_HERE):
        frame, level = frame.f_back, level + 1
    warnings.warn(f"letcc worker {j}: {first[-1] if first else text}", RuntimeWarning, stacklevel=level)


class WorkerPool:
    """N workers on a backend, between rounds: who has which tasks on its hands,
    events outside a round, the output-layout probe, closing.

    ``report(errors, j, text)`` is told every fault of a worker (``errors``: the
    round's record of them, or None): ``warn_report`` for CodedInference (the
    caller's thread), a logger for the server's dispatcher thread."""

    def __init__(self, N: int, backend: str, model_factory, devices: list[str], threads_per_worker: int | None, *,
                 start_method: str | None, chunk_rows: int | None, ray_options: dict | None,
                 hang_timeout: float, startup_timeout: float, report=warn_report, rounds_in_flight: int = 1,
                 owner: str = "CodedInference"):
        self.N = N
        self.hang_timeout, self.startup_timeout = hang_timeout, startup_timeout
        self.report = report
        self._owner = owner
        if threads_per_worker is None:
            threads_per_worker = max(1, (os.cpu_count() or 1) // N)
        # worker -> [(round id, dispatch time)] of the tasks it has not replied to (hang limits)
        self.outstanding: dict[int, list] = {j: [] for j in range(N)}
        self.carry_errors: dict[int, str] = {}     # faults seen between rounds, for the next round's record
        self.carry_stale = 0
        self._probe_id = -1                 # the last probe's id (probe: -2, -3, ...)
        self._closed = False
        if backend == "local":
            from letcc.runtime.local_backend import LocalBackend

            self.backend = LocalBackend(N, model_factory, devices,
                                        threads_per_worker=threads_per_worker, start_method=start_method,
                                        startup_timeout=startup_timeout, chunk_rows=chunk_rows,
                                        rounds_in_flight=rounds_in_flight)
        else:
            from letcc.runtime.ray_backend import RayBackend

            self.backend = RayBackend(N, model_factory, devices,
                                      threads_per_worker=threads_per_worker,
                                      startup_timeout=startup_timeout, chunk_rows=chunk_rows,
                                      actor_options=ray_options, rounds_in_flight=rounds_in_flight)

    # ---- lifecycle ------------------------------------------------------

    def close(self) -> None:
        """Stop the workers and release shared memory (idempotent)."""
        if not self._closed:
            self._closed = True
            self.backend.close()

    @property
    def closed(self) -> bool:
        return self._closed

    def worker_pids(self) -> list:
        """Process id of each worker (None while it is being replaced); local backend only."""
        return self.backend.worker_pids()

    def ready_workers(self) -> list[int]:
        """Workers that would receive the next round."""
        self.check_open()
        self.pump(0.0)
        return self.backend.ready_workers()

    def wait_ready(self, timeout: float | None = None) -> None:
        """Block until every worker (including replacements) is ready."""
        self.check_open()
        timeout = self.startup_timeout if timeout is None else timeout
        end = time.monotonic() + timeout
        while True:
            self.pump(0.0)
            self.backend.restart_dead()
            if len(self.backend.ready_workers()) == self.N:
                return
            left = end - time.monotonic()
            if left <= 0:
                missing = sorted(set(range(self.N)) - set(self.backend.ready_workers()))
                raise TimeoutError(f"workers {missing} not ready after {timeout:g} s")
            self.pump(min(left, 0.1))

    def check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"this {self._owner} is closed")

    # ---- tasks on the workers' hands ---------------------------------------

    def sent(self, r: int, workers, t0: float, extra) -> dict:
        """Round r went to `workers` at t0: their hang limits (seconds after t0),
        silent for hang_timeout past their injected sleep extra[j], counted from
        the oldest task each still has unanswered."""
        hang_at, outstanding, hang, task = {}, self.outstanding, self.hang_timeout, (r, t0)
        inf = math.inf
        for j in workers:
            queue = outstanding[j]
            queue.append(task)
            e = extra[j]
            hang_at[j] = (queue[0][1] - t0) + (e if -inf < e < inf else 0.0) + hang    # e finite (not NaN)
        return hang_at

    def ack(self, workers, r: int) -> None:
        """Each of `workers` replied for round r: every task up to r is off its hands."""
        outstanding = self.outstanding
        for j in workers:
            queue = outstanding[j]
            if queue and queue[-1][0] <= r:
                queue.clear()               # the usual case: its one task
            else:
                while queue and queue[0][0] <= r:
                    queue.pop(0)

    def ack_event(self, ev) -> None:
        """The replies of a round event (ev.round >= 0): its worker's, or each of an
        "answers" event's workers (letcc.runtime.backend)."""
        self.ack(ev.payload[0] if ev.kind == "answers" else (ev.worker,), ev.round)

    def lost(self, j: int) -> None:
        """Worker j died or was killed: nothing is on its hands any more."""
        self.outstanding[j] = []

    def kill_hung(self, j: int, errors: dict | None) -> None:
        """Worker j stayed silent past its hang limit: killed (replaced at restart_dead)."""
        self.backend.kill(j)
        self.lost(j)
        self.report(errors, j, f"no answer within hang_timeout = {self.hang_timeout:g} s; killed and replaced")

    # ---- events outside a round ------------------------------------------

    def pump(self, timeout: float) -> None:
        """Handle events between rounds (replies to old rounds, deaths, readiness)."""
        for ev in self.backend.poll(timeout):
            self.background_event(ev)

    def background_event(self, ev) -> None:
        if ev.round >= 0:
            self.ack_event(ev)
            self.carry_stale += answer_count(ev)
        elif ev.kind == "died":
            self.lost(ev.worker)
            self.report(self.carry_errors, ev.worker, f"{death_text(ev)} between rounds; it is being replaced")
        elif ev.kind == "init_error":
            self.report(self.carry_errors, ev.worker, "replacement failed to build its model:\n" + ev.payload[0])

    def await_any_ready(self) -> list[int]:
        end = time.monotonic() + self.startup_timeout
        while True:
            self.backend.restart_dead()
            workers = self.backend.ready_workers()
            if workers:
                return workers
            left = end - time.monotonic()
            if left <= 0:
                raise RuntimeError(f"no worker is alive and none restarted within {self.startup_timeout:g} s; "
                                   f"last errors: {self.carry_errors}")
            self.pump(min(left, 0.1))

    def probe(self, B: int, workers: list[int]) -> None:
        """Learn the model's output row shape (first round of a new input layout):
        every worker in `workers` is asked for one row and the first to answer
        sizes the output slots (a slow or hung worker delays nothing). The probe
        has an id of its own, negative (-2, -3, ...: no round's, and not the -1
        of events tied to no round): the other workers' replies come later with
        it, so a late reply (probe, error or cancelled) is never taken for an
        answer or a failure of a round; every handler of round events reads
        ids >= 0 only, and drops these."""
        self._probe_id -= 1
        r = self._probe_id
        errors = {}
        waiting = {j for j in workers if self.backend.probe_send(j, r, B)}
        end = time.perf_counter() + self.hang_timeout
        found = None
        while waiting and found is None:
            left = end - time.perf_counter()
            if left <= 0:
                for j in sorted(waiting):
                    self.backend.kill(j)
                    self.lost(j)
                    errors[j] = f"no answer within hang_timeout = {self.hang_timeout:g} s"
                break
            for ev in self.backend.poll(left):
                j = ev.worker
                if found is None and j in waiting and ev.round == r and ev.kind in ("probe", "error", "cancelled"):
                    self.ack((j,), r)
                    waiting.discard(j)
                    if ev.kind == "probe":
                        found = ev
                    else:
                        errors[j] = ev.payload[0] if ev.kind == "error" else "cancelled (no input)"
                elif found is None and j in waiting and ev.kind == "died":
                    self.lost(j)
                    waiting.discard(j)
                    errors[j] = death_text(ev)
                else:                           # later replies of this batch included
                    self.background_event(ev)
        if found is not None:
            j, shape, dtype = found.worker, tuple(found.payload[0]), found.payload[1]
            if not shape or shape[0] != 1:
                raise ValueError(f"the model returned shape {shape} for a batch of 1 input on worker {j}: "
                                 "it must return one output row per input row")
            self.backend.set_output_layout(shape[1:], dtype, worker=j)
            return
        detail = "\n".join(f"worker {j}: {e}" for j, e in sorted(errors.items()))
        raise RuntimeError(f"the model failed on every worker for inputs of shape {self.backend.input_spec()}:\n"
                           f"{detail}")
