"""The hedged-request baseline (Dean & Barroso, "The Tail at Scale", CACM 2013).

Each request goes to one worker (the least loaded, as a load balancer would
send it); when it has not answered after the p-th percentile of recently
observed task latencies, a second copy goes to another worker, and the first
answer wins (the other copy is cancelled). ``Hedged`` is passed to
``CodedServer`` where a code would be; it is not a code (nothing is encoded).
"""
from __future__ import annotations

from collections import deque

import numpy as np

from letcc._checks import as_int, as_real

__all__ = ["Hedged", "LatencyWindow"]


class Hedged:
    """Hedged requests on N workers.

    Parameters
    ----------
    N : workers
    percentile : the second copy is sent once a task has been out this
        percentile (0-100) of the recent task latencies (default 95: about 5%
        extra load, as in the paper)
    window : how many recent task latencies the percentile is taken over
    min_samples : no hedging before this many latencies were observed
    """

    K = 1

    def __init__(self, N, percentile: float = 95.0, window: int = 1000, min_samples: int = 20):
        self.N = as_int(N, "N", 1)
        self.percentile = as_real(percentile, "percentile", 0, 100)
        self.window = as_int(window, "window", 1)
        self.min_samples = as_int(min_samples, "min_samples", 1)
        if self.N < 2:
            raise ValueError("Hedged needs N >= 2 workers (the second copy goes to another worker)")

    def __repr__(self) -> str:
        return f"Hedged(N={self.N}, percentile={self.percentile:g})"


class LatencyWindow:
    """The last `size` task latencies and their percentile (recomputed every
    `every` new samples: a sort of 1000 numbers per request would cost more
    than the rest of the dispatcher's work)."""

    def __init__(self, size: int, percentile: float, min_samples: int, every: int = 16):
        self._values: deque = deque(maxlen=size)
        self._percentile = percentile
        self._min = min_samples
        self._every = every
        self._since = 0
        self._cached = float("inf")

    def add(self, seconds: float) -> None:
        self._values.append(seconds)
        self._since += 1
        if self._since >= self._every or len(self._values) == self._min:
            self._since = 0
            self._cached = (float(np.percentile(np.fromiter(self._values, float), self._percentile))
                            if len(self._values) >= self._min else float("inf"))

    def threshold(self) -> float:
        """Seconds after which a task is hedged (inf: not enough samples yet)."""
        return self._cached
