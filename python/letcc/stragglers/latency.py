"""Latency models: every worker draws an extra latency; which answers count
follows a waiting rule.

Rules (combinable):
- wait_for=n: wait for the first n answers (ties broken by worker index);
- stragglers=S: the same with n = N - S ("wait for the first N - S");
- deadline=t: answers later than t seconds after the round start do not count.
With both a count and a deadline, the master stops at whichever comes first.
With neither, every worker with a finite latency counts.
"""
from __future__ import annotations

import numpy as np

from letcc._checks import as_int, as_real
from letcc.stragglers._base import StragglerDraw, StragglerModel, check_generator, draw_from_set

__all__ = ["LatencyModel", "ShiftedExponential", "Pareto", "Empirical"]


class LatencyModel(StragglerModel):
    """Base of the latency models: subclasses draw delays, this applies the rule."""

    def __init__(self, wait_for=None, stragglers=None, deadline=None):
        if wait_for is not None and stragglers is not None:
            raise ValueError("give either wait_for (answers to wait for) or stragglers (S, wait for N - S), not both")
        self.wait_for = None if wait_for is None else as_int(wait_for, "wait_for", 1)
        self.stragglers = None if stragglers is None else as_int(stragglers, "stragglers", 0)
        self.deadline = None if deadline is None else as_real(deadline, "deadline", 0.0)

    def wait_count(self, N: int) -> int | None:
        if self.wait_for is not None:
            if self.wait_for > N:
                raise ValueError(f"wait_for = {self.wait_for} exceeds the N = {N} workers")
            return self.wait_for
        if self.stragglers is not None:
            if self.stragglers >= N:
                raise ValueError(f"stragglers = {self.stragglers} leave no worker out of N = {N}")
            return N - self.stragglers
        return None

    def _delays(self, N: int, rng: np.random.Generator) -> np.ndarray:
        raise NotImplementedError

    def sample_delays(self, N: int, rng: np.random.Generator) -> np.ndarray:
        N = as_int(N, "N", 1)
        check_generator(rng)
        self.wait_count(N)          # the same errors as sample() for a rule N cannot meet
        return self._delays(N, rng)

    def sample(self, N: int, rng: np.random.Generator) -> StragglerDraw:
        delays = self.sample_delays(N, rng)
        N = delays.shape[0]
        n_wait = self.wait_count(N)
        counts = np.isfinite(delays)
        if self.deadline is not None:
            counts &= delays <= self.deadline
        if n_wait is not None:
            first = np.argsort(delays, kind="stable")[:n_wait]
            in_first = np.zeros(N, dtype=bool)
            in_first[first] = True
            counts &= in_first
        return draw_from_set(delays, np.flatnonzero(counts))

    def _rule_repr(self) -> str:
        parts = []
        if self.wait_for is not None:
            parts.append(f"wait_for={self.wait_for}")
        if self.stragglers is not None:
            parts.append(f"stragglers={self.stragglers}")
        if self.deadline is not None:
            parts.append(f"deadline={self.deadline}")
        return "".join(", " + p for p in parts)


class ShiftedExponential(LatencyModel):
    """delay = shift + Exponential(rate): mean shift + 1/rate seconds."""

    def __init__(self, shift: float, rate: float, wait_for=None, stragglers=None, deadline=None):
        super().__init__(wait_for, stragglers, deadline)
        self.shift = as_real(shift, "shift", 0.0)
        self.rate = as_real(rate, "rate", 0.0, strict=True)

    def _delays(self, N, rng):
        return self.shift + rng.exponential(1.0 / self.rate, size=N)

    def __repr__(self) -> str:
        return f"ShiftedExponential(shift={self.shift}, rate={self.rate}{self._rule_repr()})"


class Pareto(LatencyModel):
    """Classical Pareto latency: P(delay > t) = (scale / t)^shape for t >= scale."""

    def __init__(self, scale: float, shape: float, wait_for=None, stragglers=None, deadline=None):
        super().__init__(wait_for, stragglers, deadline)
        self.scale = as_real(scale, "scale", 0.0, strict=True)
        self.shape = as_real(shape, "shape", 0.0, strict=True)

    def _delays(self, N, rng):
        # numpy's pareto is the Lomax distribution: 1 + Lomax is Pareto with minimum 1.
        return self.scale * (1.0 + rng.pareto(self.shape, size=N))

    def __repr__(self) -> str:
        return f"Pareto(scale={self.scale}, shape={self.shape}{self._rule_repr()})"


class Empirical(LatencyModel):
    """Delays drawn with replacement from measured samples (e.g. a trace of
    worker latencies in seconds; np.inf entries = workers that never answered)."""

    def __init__(self, samples, wait_for=None, stragglers=None, deadline=None):
        super().__init__(wait_for, stragglers, deadline)
        arr = np.asarray(samples, dtype=np.float64).ravel()
        if arr.size == 0:
            raise ValueError("samples is empty: need at least one measured latency")
        bad = np.isnan(arr) | (arr < 0)
        if bad.any():
            i = int(np.argmax(bad))
            raise ValueError(f"samples[{i}] = {arr[i]} is not a latency (must be >= 0 or inf)")
        self.samples = arr

    def _delays(self, N, rng):
        return self.samples[rng.integers(0, self.samples.size, size=N)]

    def __repr__(self) -> str:
        return f"Empirical({self.samples.size} samples{self._rule_repr()})"
