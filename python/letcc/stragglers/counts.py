"""Models that say only who answers: a fixed count S (random or worst case)
and independent failures with probability p."""
from __future__ import annotations

import numpy as np

from letcc.nodes import chebyshev_second_kind
from letcc._checks import as_int, as_real
from letcc.stragglers._base import StragglerDraw, StragglerModel, check_generator, draw_from_set

__all__ = ["FixedCount", "Bernoulli", "worst_case_stragglers"]


def worst_case_stragglers(beta: np.ndarray, S: int) -> np.ndarray:
    """The S consecutive workers whose absence leaves the largest gap between
    answering nodes in beta (ascending), the ends -1 and 1 counting as nodes
    (the paper's beta_0 = -1, beta_{N+1} = 1). Ties go to the run nearest the
    middle, then the lower one. Returns sorted int64 indices."""
    N = beta.shape[0]
    if S == 0:
        return np.zeros(0, dtype=np.int64)
    if S >= N:
        return np.arange(N, dtype=np.int64)
    padded = np.concatenate(([-1.0], beta, [1.0]))
    # Removing workers i..i+S-1 leaves the gap padded[i+S+1] - padded[i].
    starts = np.arange(N - S + 1)
    gap = padded[starts + S + 1] - padded[starts]
    centre_dist = np.abs(starts + (S - 1) / 2.0 - (N - 1) / 2.0)
    best = np.lexsort((starts, centre_dist, -np.round(gap, 12)))[0]
    return np.arange(best, best + S, dtype=np.int64)


class FixedCount(StragglerModel):
    """Exactly S workers never answer (delay inf), the others answer at once.

    worst_case=False: the S are drawn uniformly at random.
    worst_case=True: the S consecutive workers whose absence leaves the largest
    gap in beta (what drives the spline error); deterministic. beta defaults to
    Chebyshev points of the second kind (the codes' default worker nodes).
    """

    def __init__(self, S: int, worst_case: bool = False, beta=None):
        self.S = as_int(S, "S", 0)
        self.worst_case = bool(worst_case)
        self.beta = None if beta is None else np.asarray(beta, dtype=np.float64)

    def wait_count(self, N: int) -> int:
        return N - self.S

    def _check(self, N: int) -> int:
        N = as_int(N, "N", 1)
        if self.S >= N:
            raise ValueError(f"S = {self.S} stragglers leave no worker out of N = {N}")
        return N

    def sample(self, N: int, rng: np.random.Generator) -> StragglerDraw:
        delays = self.sample_delays(N, rng)
        return draw_from_set(delays, np.flatnonzero(np.isfinite(delays)))

    def sample_delays(self, N: int, rng: np.random.Generator) -> np.ndarray:
        N = self._check(N)
        check_generator(rng)
        if self.worst_case:
            beta = chebyshev_second_kind(N) if self.beta is None else self.beta
            if beta.shape[0] != N:
                raise ValueError(f"beta has {beta.shape[0]} nodes but N = {N}")
            late = worst_case_stragglers(beta, self.S)
        else:
            late = rng.choice(N, size=self.S, replace=False)
        delays = np.zeros(N)
        delays[late] = np.inf
        return delays

    def __repr__(self) -> str:
        return f"FixedCount(S={self.S}, worst_case={self.worst_case})"


class Bernoulli(StragglerModel):
    """Each worker independently never answers with probability p.

    The set of answering workers may be empty (probability p^N); the runtime
    and the simulation decide what an empty round means.
    """

    def __init__(self, p: float):
        self.p = as_real(p, "p", 0.0, 1.0, strict_max=True)

    def sample(self, N: int, rng: np.random.Generator) -> StragglerDraw:
        delays = self.sample_delays(N, rng)
        return draw_from_set(delays, np.flatnonzero(np.isfinite(delays)))

    def sample_delays(self, N: int, rng: np.random.Generator) -> np.ndarray:
        N = as_int(N, "N", 1)
        check_generator(rng)
        return np.where(rng.random(N) < self.p, np.inf, 0.0)

    def __repr__(self) -> str:
        return f"Bernoulli(p={self.p})"
