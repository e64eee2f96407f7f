"""Ray backend: one actor per worker, for more than one machine (``letcc[ray]``).

Each actor builds its model once (``num_gpus`` when its device is a GPU,
fractional ``num_cpus`` otherwise). A round puts every worker's coded inputs in
the object store and calls ``compute``; the master collects answers with
``ray.wait`` and feeds them to the same waiting rule as the local backend.

Cancellation: ``ray.cancel`` does not stop an actor call that is already queued
or running, so each actor has a ``cancel(round)`` method in its own concurrency
group ("control") that runs while ``compute`` is busy; ``compute`` checks the
cancelled round before starting, between chunks and while sleeping.

Rounds in flight: an actor runs its ``compute`` calls one at a time, in the
order they were made, so several rounds can be queued on it; ``cancel(r)``
cancels round r only (a set of cancelled rounds, pruned as the calls go by).
Answers are kept per (worker, ring slot) and only a newer round replaces one.

Crashes: actors are created with ``max_restarts=-1`` and ``max_task_retries=0``:
a call to a dead actor fails (an erasure for that round), Ray restarts the
actor (re-running the model factory), and a ``ready`` ping tells the master
when it is back.

Ray is imported lazily; ``ray.init()`` is called only if the caller has not
connected yet (connect first to use a cluster).
"""
from __future__ import annotations

import math
import os
import threading
import time
import traceback
from collections import Counter

import numpy as np

from letcc.runtime.backend import Backend, Event
from letcc.runtime.worker_common import (become_worker, limit_threads, prepare_model, run_chunks,
                                         sleep_unless_cancelled)

__all__ = ["RayBackend"]

_ACTOR_CLASS = None


def _import_ray():
    try:
        import ray
    except ImportError as exc:            # pragma: no cover - depends on the environment
        raise ImportError("backend='ray' needs Ray: pip install 'letcc[ray]'") from exc
    return ray


def _nap(left: float) -> None:
    time.sleep(min(left, 0.01))         # cancel() runs meanwhile, in its own concurrency group


class _RayWorker:
    """The actor (decorated with ray.remote lazily, see _actor_class)."""

    def __init__(self, rank, model_factory, device, threads):
        become_worker(rank)
        if device.startswith("cuda"):
            device = "cuda:0"            # Ray sets CUDA_VISIBLE_DEVICES to the GPU it assigned
        limit_threads(threads)
        self.call, _ = prepare_model(model_factory(), device)
        limit_threads(threads)
        self.cancelled = set()          # rounds cancelled before or while they run
        self.lock = threading.Lock()

    def ready(self):
        return os.getpid()

    def compute(self, r, x, sleep_s, chunk_rows):
        def wanted():
            return r not in self.cancelled

        with self.lock:                 # calls come in order: older rounds are over
            self.cancelled = {c for c in self.cancelled if c >= r}

        def call(xs):
            return self.call(xs if xs.flags.writeable else np.array(xs))  # object-store arrays are read-only

        if not wanted():
            return ("cancelled", r)
        try:
            if sleep_s > 0 and not sleep_unless_cancelled(sleep_s, wanted, _nap):
                return ("cancelled", r)
            parts = []
            if run_chunks(call, x, chunk_rows, wanted, lambda start, stop, y: parts.append(y)) is not None:
                return ("cancelled", r)         # the only reply besides None: the store never stops it
            y = parts[0] if len(parts) == 1 else np.concatenate(parts)
            return ("done", r, y)
        except Exception:
            return ("error", r, traceback.format_exc())

    def cancel(self, r):
        with self.lock:
            self.cancelled = self.cancelled | {r}


def _actor_class(ray):
    global _ACTOR_CLASS
    if _ACTOR_CLASS is None:
        cls = type("LetccRayWorker", (_RayWorker,), {
            "cancel": ray.method(concurrency_group="control")(_RayWorker.cancel),
        })
        _ACTOR_CLASS = ray.remote(concurrency_groups={"control": 1})(cls)
    return _ACTOR_CLASS


class RayBackend(Backend):
    """N Ray actors (see the module docstring), behind letcc.runtime.backend's contract."""

    kind = "ray"

    def __init__(self, n_workers: int, model_factory, devices: list[str], *,
                 threads_per_worker: int | None = None, startup_timeout: float = 120.0,
                 chunk_rows: int | None = None, actor_options: dict | None = None, rounds_in_flight: int = 1):
        ray = self._ray = _import_ray()
        from ray.exceptions import ActorUnavailableError, RayActorError

        self._RayActorError = RayActorError
        self._ActorUnavailableError = ActorUnavailableError
        if not ray.is_initialized():
            ray.init(include_dashboard=False)
        self.n = int(n_workers)
        self.ring = int(rounds_in_flight)
        self._ring_round = [-1] * self.ring
        self._wake = threading.Event()
        self._chunk_rows = chunk_rows
        self._buf = None
        self._positions = None          # set_input_slots
        self._round = -1
        self._refs: dict = {}            # ObjectRef -> (worker, round, ring slot, rows b)
        self._pings: dict = {}           # ObjectRef -> worker
        self._results: dict = {}         # (worker, ring slot) -> (round, y)
        self._state = ["starting"] * self.n
        self._pids = [None] * self.n
        self._out_ref = None             # (worker, row shape, dtype) of the first answer
        self._closed = False
        cpus = ray.cluster_resources().get("CPU", 1.0)
        per_gpu = Counter(d for d in devices if d.startswith("cuda"))
        cls = _actor_class(ray)
        self._actors = []
        for j in range(self.n):
            opts = dict(max_restarts=-1, max_task_retries=0,
                        num_cpus=max(0.01, min(1.0, cpus / self.n)))
            if devices[j].startswith("cuda"):
                opts["num_gpus"] = 1.0 / per_gpu[devices[j]]
            opts.update(actor_options or {})
            self._actors.append(cls.options(**opts).remote(j, model_factory, devices[j], threads_per_worker))
        for j in range(self.n):
            self._pings[self._actors[j].ready.remote()] = j
        end = time.monotonic() + startup_timeout
        try:
            while any(s != "ready" for s in self._state):
                left = end - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"Ray actors {[j for j in range(self.n) if self._state[j] != 'ready']} "
                                       f"did not start within {startup_timeout:g} s")
                for ev in self.poll(left):
                    if ev.kind == "died":
                        raise RuntimeError(f"Ray actor {ev.worker} failed to start: {ev.payload[2]}")
        except BaseException:
            self.close()
            raise

    # ---- workers --------------------------------------------------------

    def ready_workers(self) -> list[int]:
        return [j for j in range(self.n) if self._state[j] == "ready"]

    def worker_pids(self) -> list:
        return [p if self._state[j] == "ready" else None for j, p in enumerate(self._pids)]

    def restart_dead(self) -> list[int]:
        """Ray restarts dead actors itself; ping them to learn when they are back."""
        started = []
        for j in range(self.n):
            if self._state[j] == "dead":
                self._state[j] = "starting"
                self._pings[self._actors[j].ready.remote()] = j
                started.append(j)
        return started

    def kill(self, j: int) -> None:
        """Kill a hung actor; Ray restarts it (max_restarts)."""
        self._ray.kill(self._actors[j], no_restart=False)
        self._state[j] = "dead"
        for ref, (w, *_) in list(self._refs.items()):
            if w == j:
                del self._refs[ref]

    # ---- data -----------------------------------------------------------

    def input_view(self, b: int, row_shape, dtype, ring: int = 0):
        # one buffer for every ring slot: submit() copies the rows into the call
        shape = (self.n, b) + tuple(row_shape)
        if self._buf is None or self._buf.shape != shape or self._buf.dtype != np.dtype(dtype):
            self._buf = np.empty(shape, dtype=dtype)
            self._out_ref = None
        return self._buf, False

    def output_reference(self):
        return self._out_ref

    def forget_output_layout(self) -> None:
        self._out_ref = None             # learnt again from the next answer

    def output_spec(self):
        return None

    def input_spec(self):
        return None if self._buf is None else (self._buf.shape[2:], self._buf.dtype.str)

    def outputs(self, workers, b: int, ring: int = 0) -> np.ndarray:
        return np.stack([self._results[(j, ring)][1] for j in workers])

    def probe_send(self, j, r, b) -> bool:           # pragma: no cover - never needs a probe
        return False

    def set_output_layout(self, row_shape, dtype, worker=None) -> None:  # pragma: no cover
        pass

    # ---- messages -------------------------------------------------------

    def set_input_slots(self, positions) -> None:
        """Which row of the input buffer goes to each worker (None: row j to worker j)."""
        self._positions = positions

    def submit(self, r: int, workers, b: int, sleep_s: np.ndarray, ring: int = 0) -> None:
        self._round = r
        self._ring_round[ring] = r
        pos = self._positions
        for j in workers:
            # arguments over 100 KiB go through the object store (copied now: the buffer
            # can be reused next round)
            row = self._buf[j if pos is None else int(pos[j])]
            ref = self._actors[j].compute.remote(r, row, float(sleep_s[j]), self._chunk_rows)
            self._refs[ref] = (j, r, ring, b)

    def arm(self, answers: int) -> bool:
        """(LocalBackend.arm) ray.wait wakes per answer here; nothing to arm."""
        return False

    def cancel(self, workers, ring: int = 0) -> None:
        r = self._ring_round[ring]
        for j in workers:
            if self._state[j] == "ready":
                self._actors[j].cancel.remote(r)

    def wake(self) -> None:
        """Make a poll() in progress return soon (within 5 ms: ray.wait cannot
        be woken, so a poll waits in slices once wake() has been used)."""
        self._woken = True
        self._wake.set()

    def wake_at(self, t: float) -> None:
        """(Backend.wake_at) ray.wait cannot be woken at a time: wake now."""
        if t != math.inf:
            self.wake()

    def poll(self, timeout: float | None) -> list[Event]:
        ray = self._ray
        refs = list(self._refs) + list(self._pings)
        woken = getattr(self, "_woken", False)
        if self._wake.is_set():
            self._wake.clear()
            if not refs:
                return []
            timeout = 0.0
        if not refs:
            if timeout is None or timeout > 0:
                self._wake.wait(0.05 if timeout is None else min(timeout, 0.05))
            return []
        if woken and (timeout is None or timeout > 0.005):
            timeout = 0.005             # a server's wake() is noticed within this
        ready, rest = ray.wait(refs, num_returns=1, timeout=timeout)
        if ready and rest:
            more, _ = ray.wait(rest, num_returns=len(rest), timeout=0)
            ready += more
        t = time.perf_counter()
        events = []
        for ref in ready:
            if ref in self._pings:
                j = self._pings.pop(ref)
                try:
                    self._pids[j] = ray.get(ref)
                    self._state[j] = "ready"
                    events.append(Event("ready", j, -1, (self._pids[j],), t))
                except self._ActorUnavailableError:
                    self._state[j] = "dead"          # still restarting: pinged again later
                except Exception as exc:
                    self._state[j] = "dead"
                    events.append(Event("died", j, -1, (None, self._pids[j], _first_line(exc)), t))
                continue
            j, r, ring, b = self._refs.pop(ref)
            try:
                msg = ray.get(ref)
            except self._RayActorError as exc:
                if self._state[j] == "ready":
                    self._state[j] = "dead"
                    events.append(Event("died", j, -1, (None, self._pids[j], _first_line(exc)), t))
                continue
            except Exception as exc:
                events.append(Event("error", j, r, (f"{type(exc).__name__}: {exc}",), t))
                continue
            kind = msg[0]
            if kind == "done":
                y = np.asarray(msg[2])
                if self._out_ref is None:
                    self._out_ref = (j, tuple(y.shape[1:]), y.dtype.str)
                # the rows of the call this answers (rounds in flight may differ in b: the
                # buffer's b is the latest round's)
                if y.shape[1:] != self._out_ref[1] or y.shape[0] != b or y.dtype.str != self._out_ref[2]:
                    events.append(Event("shape", j, r, (tuple(y.shape), y.dtype.str, b), t))
                    continue
                held = self._results.get((j, ring))
                if held is None or held[0] < r:     # a late older answer never replaces a newer one
                    self._results[(j, ring)] = (r, y)
                events.append(Event("done", j, r, (), t))
            else:
                events.append(Event(kind, j, r, tuple(msg[2:]), t))
        return events

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for actor in getattr(self, "_actors", []):
            try:
                self._ray.kill(actor, no_restart=True)
            except Exception:
                pass
        self._actors = []
        self._refs.clear()
        self._pings.clear()
        self._results.clear()


def _first_line(exc) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"
