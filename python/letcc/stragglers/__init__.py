"""Layer 3: straggler models, who is late and by how much.

Every model has ``sample(N, rng) -> StragglerDraw(delays, available)``,
``wait_count(N)`` and ``deadline``; reproducible from np.random.default_rng(seed).

- FixedCount(S, worst_case=False): S workers never answer (random, or the run
  leaving the largest gap in beta);
- Bernoulli(p): each worker independently never answers with probability p;
- ShiftedExponential(shift, rate, ...), Pareto(scale, shape, ...),
  Empirical(samples, ...): latency distributions with a "wait for the first n"
  (wait_for=n or stragglers=S) and / or deadline rule.
"""
from letcc.stragglers._base import StragglerDraw, StragglerModel, check_stragglers, delay_sampler
from letcc.stragglers.counts import Bernoulli, FixedCount, worst_case_stragglers
from letcc.stragglers.latency import Empirical, LatencyModel, Pareto, ShiftedExponential

__all__ = [
    "StragglerDraw", "StragglerModel", "check_stragglers", "delay_sampler", "FixedCount", "Bernoulli", "worst_case_stragglers",
    "LatencyModel", "ShiftedExponential", "Pareto", "Empirical",
]
