"""The straggler-model interface shared by simulation and the runtime.

A model, given the number of workers N and a numpy Generator, draws one round:
per-worker extra latencies (np.inf = never answers) and the set of workers
whose answers count under the model's own waiting rule. The runtime uses the
same objects: `wait_count(N)` ("wait for the first this many answers") and
`deadline` (seconds after the round starts) say when it stops waiting.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import numpy as np

from letcc._checks import as_int


@dataclass(frozen=True)
class StragglerDraw:
    """One round: delays (N,) float64 seconds of extra latency (np.inf = never
    answers); available: sorted int64 indices whose answers count."""

    delays: np.ndarray
    available: np.ndarray

    @property
    def stragglers(self) -> np.ndarray:
        """Sorted indices of the workers that do not count this round."""
        return np.setdiff1d(np.arange(self.delays.shape[0]), self.available)


class StragglerModel(ABC):
    """Abstract model of who is late and by how much."""

    deadline: float | None = None

    @abstractmethod
    def sample(self, N: int, rng: np.random.Generator) -> StragglerDraw:
        """Draw one round for N workers."""

    def sample_delays(self, N: int, rng: np.random.Generator) -> np.ndarray:
        """Only the (N,) float64 delays of ``sample(N, rng)``: the same values
        from the same use of ``rng``, without working out the answering set
        (what the runtime needs on every round; the built-in models skip that
        work, a subclass that only defines ``sample`` gets this default)."""
        return self.sample(N, rng).delays

    def wait_count(self, N: int) -> int | None:
        """'Wait for the first this many answers' rule, or None (no such rule)."""
        return None

    def draws(self, N: int, n: int, seed=None) -> list[StragglerDraw]:
        """n independent rounds, reproducible from `seed` (anything
        np.random.default_rng accepts, or a Generator)."""
        rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
        return [self.sample(N, rng) for _ in range(as_int(n, "n", 0))]


def check_stragglers(model) -> None:
    """TypeError unless ``model`` is None or has what a runtime calls of a
    straggler model: ``sample(N, rng)`` and ``wait_count(N)``."""
    if model is None:
        return
    for attr in ("sample", "wait_count"):
        if not callable(getattr(model, attr, None)):
            raise TypeError(f"stragglers must be a letcc.stragglers model; {type(model).__name__} has no {attr}()")


def delay_sampler(model):
    """A function (N, rng) -> the delays of ``model.sample(N, rng)``.

    That is ``model.sample_delays`` where it is defined no higher in the
    class tree than ``sample`` (so it draws what ``sample`` draws), otherwise
    ``sample(N, rng).delays``: a subclass that overrides only ``sample`` (of
    FixedCount, say) keeps its own draws. Works for any object with ``sample``."""
    def owner(name):
        if name in getattr(model, "__dict__", {}):
            return -1                       # set on the instance itself
        for i, cls in enumerate(type(model).__mro__):
            if name in cls.__dict__:
                return i
        return None

    fast, full = owner("sample_delays"), owner("sample")
    if fast is not None and (full is None or fast <= full):
        return model.sample_delays
    return lambda N, rng: model.sample(N, rng).delays


def check_generator(rng) -> np.random.Generator:
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy Generator (np.random.default_rng(seed)), got {type(rng).__name__}")
    return rng


def draw_from_set(delays: np.ndarray, available) -> StragglerDraw:
    avail = np.asarray(available, dtype=np.int64)
    avail = np.sort(avail)
    delays = np.asarray(delays, dtype=np.float64)
    delays.setflags(write=False)
    avail.setflags(write=False)
    return StragglerDraw(delays=delays, available=avail)
