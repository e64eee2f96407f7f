"""The server's counters and latency record (``CodedServer.stats()``).

Written by the dispatcher thread under one lock (the inbox counts accepted
and rejected requests itself); ``snapshot()`` copies what it needs under the lock and computes the
quantiles outside it.
"""
from __future__ import annotations

import threading
from collections import deque

import numpy as np

__all__ = ["ServerStats"]

_QUANTILES = {"p50": 50.0, "p90": 90.0, "p99": 99.0, "p999": 99.9}

# a worker is listed in stats()["suspected"] once the code (adversaries=E) has
# flagged it in at least this many rounds and in at least this share of them
SUSPECT_MIN_ROUNDS = 3
SUSPECT_MIN_SHARE = 0.05


class ServerStats:
    def __init__(self, keep: int = 200_000):
        self.lock = threading.Lock()
        self.latencies: deque = deque(maxlen=keep)     # seconds, submit -> result, recent requests
        self.counts = dict(completed=0, timeouts=0, cancelled=0, errors=0, rounds=0, padded_rounds=0,
                           erasures=0, stale=0, hedges=0, retried=0, replaced=0, flagged=0,
                           approximate=0, late_exact=0, quarantines=0)
        self.flagged_by_worker: dict = {}    # worker -> rounds in which the code flagged it
        self.quarantined: dict = {}          # worker -> rounds it still sits out (quarantine=...)
        self.real_positions = 0      # real requests dispatched in coded rounds / tasks
        self.positions = 0           # positions they took (B * K; b for tasks)
        self.master_cpu = 0.0        # dispatcher thread CPU seconds
        self.queue_depth = 0
        self.in_flight = 0
        self.max_in_flight_seen = 0

    def add(self, **counts) -> None:
        with self.lock:
            for k, v in counts.items():
                self.counts[k] += v

    def note_flagged(self, workers) -> None:
        """The code flagged ``workers`` in a round (the caller holds ``lock``)."""
        by = self.flagged_by_worker
        for j in workers:
            by[j] = by.get(j, 0) + 1
        self.counts["flagged"] += len(workers)

    def snapshot(self, rounds_in_flight: int, workers: int) -> dict:
        with self.lock:
            lat = np.fromiter(self.latencies, float, len(self.latencies))
            out = dict(self.counts)
            rounds = out["rounds"]
            out["quarantined"] = dict(self.quarantined)
            out["suspected"] = {j: n for j, n in sorted(self.flagged_by_worker.items(), key=lambda t: (-t[1], t[0]))
                                if n >= SUSPECT_MIN_ROUNDS and n >= SUSPECT_MIN_SHARE * rounds}
            real, pos, cpu = self.real_positions, self.positions, self.master_cpu
            out.update(queue_depth=self.queue_depth, rounds_in_flight=self.in_flight,
                       max_rounds_in_flight=rounds_in_flight, peak_rounds_in_flight=self.max_in_flight_seen,
                       workers=workers)
        out["batch_fill"] = real / pos if pos else float("nan")
        out["latency_mean"] = float(lat.mean()) if lat.size else float("nan")
        for name, q in _QUANTILES.items():
            out[f"latency_{name}"] = float(np.percentile(lat, q)) if lat.size else float("nan")
        out["latency_samples"] = int(lat.size)
        done = out["completed"]
        out["master_cpu_per_request"] = cpu / done if done else float("nan")
        return out
