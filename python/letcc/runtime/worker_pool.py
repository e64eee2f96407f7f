"""The master's side of its N workers, between rounds (base of CodedInference).

Starts the backend (letcc.runtime.backend's contract: local processes or Ray),
keeps which tasks each worker still has on its hands (for its hang limit),
handles the events that arrive outside a round (late replies, deaths,
replacements becoming ready), learns the model's output layout by a probe,
and closes everything. The rounds themselves are
letcc.runtime.coded_inference's.
"""
from __future__ import annotations

import os
import sys
import time
import warnings

__all__ = ["WorkerPool", "death_text"]

_HERE = os.path.dirname(os.path.abspath(__file__))


def death_text(ev) -> str:
    """Text for a 'died' event: (exit code, pid[, detail])."""
    code, pid = ev.payload[0], ev.payload[1]
    if len(ev.payload) > 2:
        return f"worker {pid} died ({ev.payload[2]})"
    return f"worker process {pid} exited with code {code}"


class WorkerPool:
    """N workers on a backend; CodedInference adds the code and the rounds.

    Subclasses set ``N``, ``hang_timeout`` and ``startup_timeout`` before
    calling ``__init__``."""

    def __init__(self, backend: str, model_factory, devices: list[str], threads_per_worker: int | None, *,
                 start_method: str | None, chunk_rows: int | None, ray_options: dict | None,
                 rounds_in_flight: int = 1):
        if threads_per_worker is None:
            threads_per_worker = max(1, (os.cpu_count() or 1) // self.N)
        self._outstanding: dict[int, list] = {j: [] for j in range(self.N)}
        self._carry_errors: dict[int, str] = {}
        self._carry_stale = 0
        self._probe_id = -1                 # the last probe's id (_probe: -2, -3, ...)
        self._closed = False
        if backend == "local":
            from letcc.runtime.local_backend import LocalBackend

            self._backend = LocalBackend(self.N, model_factory, devices,
                                         threads_per_worker=threads_per_worker, start_method=start_method,
                                         startup_timeout=self.startup_timeout, chunk_rows=chunk_rows,
                                         rounds_in_flight=rounds_in_flight)
        else:
            from letcc.runtime.ray_backend import RayBackend

            self._backend = RayBackend(self.N, model_factory, devices,
                                       threads_per_worker=threads_per_worker,
                                       startup_timeout=self.startup_timeout, chunk_rows=chunk_rows,
                                       actor_options=ray_options, rounds_in_flight=rounds_in_flight)

    # ---- lifecycle ------------------------------------------------------

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def close(self) -> None:
        """Stop the workers and release shared memory (idempotent)."""
        if not self._closed:
            self._closed = True
            self._backend.close()

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def backend(self):
        return self._backend

    def worker_pids(self) -> list:
        """Process id of each worker (None while it is being replaced); local backend only."""
        return self._backend.worker_pids()

    def ready_workers(self) -> list[int]:
        """Workers that would receive the next round."""
        self._check_open()
        self._pump(0.0)
        return self._backend.ready_workers()

    def wait_ready(self, timeout: float | None = None) -> None:
        """Block until every worker (including replacements) is ready."""
        self._check_open()
        timeout = self.startup_timeout if timeout is None else timeout
        end = time.monotonic() + timeout
        while True:
            self._pump(0.0)
            self._backend.restart_dead()
            if len(self._backend.ready_workers()) == self.N:
                return
            left = end - time.monotonic()
            if left <= 0:
                missing = sorted(set(range(self.N)) - set(self._backend.ready_workers()))
                raise TimeoutError(f"workers {missing} not ready after {timeout:g} s")
            self._pump(min(left, 0.1))

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("this CodedInference is closed")

    # ---- events outside a round ------------------------------------------

    def _ack(self, j: int, r: int) -> None:
        """Worker j replied for round r: every task up to r is off its hands."""
        queue = self._outstanding[j]
        while queue and queue[0][0] <= r:
            queue.pop(0)

    def _pump(self, timeout: float) -> None:
        """Handle events between rounds (replies to old rounds, deaths, readiness)."""
        for ev in self._backend.poll(timeout):
            self._background_event(ev)

    def _background_event(self, ev) -> None:
        if ev.round >= 0:
            self._ack(ev.worker, ev.round)
            self._carry_stale += 1
        elif ev.kind == "died":
            self._outstanding[ev.worker] = []
            self._report(self._carry_errors, ev.worker, f"{death_text(ev)} between rounds; it is being replaced")
        elif ev.kind == "init_error":
            self._report(self._carry_errors, ev.worker, "replacement failed to build its model:\n" + ev.payload[0])

    @staticmethod
    def _report(errors: dict, j: int, text: str) -> None:
        """Record what went wrong with worker j and warn, pointing at the caller's line."""
        errors[j] = text
        first = text.strip().splitlines()
        level, frame = 1, sys._getframe(0)
        while frame is not None and frame.f_code.co_filename.startswith(_HERE):
            frame, level = frame.f_back, level + 1
        warnings.warn(f"letcc worker {j}: {first[-1] if first else text}", RuntimeWarning, stacklevel=level)

    def _await_any_ready(self) -> list[int]:
        end = time.monotonic() + self.startup_timeout
        while True:
            self._backend.restart_dead()
            workers = self._backend.ready_workers()
            if workers:
                return workers
            left = end - time.monotonic()
            if left <= 0:
                raise RuntimeError(f"no worker is alive and none restarted within {self.startup_timeout:g} s; "
                                   f"last errors: {self._carry_errors}")
            self._pump(min(left, 0.1))

    def _probe(self, B: int, workers: list[int]) -> None:
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
        waiting = {j for j in workers if self._backend.probe_send(j, r, B)}
        end = time.perf_counter() + self.hang_timeout
        found = None
        while waiting and found is None:
            left = end - time.perf_counter()
            if left <= 0:
                for j in sorted(waiting):
                    self._backend.kill(j)
                    self._outstanding[j] = []
                    errors[j] = f"no answer within hang_timeout = {self.hang_timeout:g} s"
                break
            for ev in self._backend.poll(left):
                j = ev.worker
                if found is None and j in waiting and ev.round == r and ev.kind in ("probe", "error", "cancelled"):
                    self._ack(j, r)
                    waiting.discard(j)
                    if ev.kind == "probe":
                        found = ev
                    else:
                        errors[j] = ev.payload[0] if ev.kind == "error" else "cancelled (no input)"
                elif found is None and j in waiting and ev.kind == "died":
                    self._outstanding[j] = []
                    waiting.discard(j)
                    errors[j] = death_text(ev)
                else:                           # later replies of this batch included
                    self._background_event(ev)
        if found is not None:
            j, shape, dtype = found.worker, tuple(found.payload[0]), found.payload[1]
            if not shape or shape[0] != 1:
                raise ValueError(f"the model returned shape {shape} for a batch of 1 input on worker {j}: "
                                 "it must return one output row per input row")
            self._backend.set_output_layout(shape[1:], dtype, worker=j)
            return
        detail = "\n".join(f"worker {j}: {e}" for j, e in sorted(errors.items()))
        raise RuntimeError(f"the model failed on every worker for inputs of shape {self._backend.input_spec()}:\n"
                           f"{detail}")
