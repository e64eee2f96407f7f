"""Straggler models: their frequencies match their parameters, their rules
pick the right workers, and they are reproducible from a seed.

Frequency checks allow 5 standard errors (the data are fixed by the seed, so
a pass is reproducible; 5 sigma keeps a correct model passing for any seed)."""
import itertools

import numpy as np
import pytest

from letcc.nodes import chebyshev_second_kind, largest_gap
from letcc.stragglers import (Bernoulli, Empirical, FixedCount, Pareto, ShiftedExponential, StragglerDraw,
                              worst_case_stragglers)
from letcc.stragglers._base import delay_sampler


def within(freq, p, n):
    return abs(freq - p) <= 5 * np.sqrt(p * (1 - p) / n) + 1e-12


def test_fixed_count_random_sets(rng):
    N, S, R = 12, 3, 2000
    model = FixedCount(S)
    counts = np.zeros(N)
    for _ in range(R):
        d = model.sample(N, rng)
        assert isinstance(d, StragglerDraw)
        assert d.available.dtype == np.int64 and np.all(np.diff(d.available) > 0)
        assert d.available.size == N - S
        np.testing.assert_array_equal(np.isinf(d.delays), ~np.isin(np.arange(N), d.available))
        assert np.all(d.delays[d.available] == 0.0)
        counts[d.stragglers] += 1
    for c in counts:  # every worker straggles with probability S / N
        assert within(c / R, S / N, R)
    assert model.wait_count(N) == N - S and model.deadline is None


@pytest.mark.parametrize("N, S", [(7, 1), (9, 2), (10, 3), (12, 4)])
def test_worst_case_leaves_the_largest_gap(N, S):
    beta = chebyshev_second_kind(N)
    late = worst_case_stragglers(beta, S)
    assert late.size == S

    def gap_without(stragglers):
        kept = np.setdiff1d(np.arange(N), stragglers)
        return largest_gap(beta[kept], -1.0, 1.0)

    best = max(gap_without(np.array(c)) for c in itertools.combinations(range(N), S))
    assert gap_without(late) == pytest.approx(best, abs=1e-12)
    d = FixedCount(S, worst_case=True).sample(N, np.random.default_rng(0))
    np.testing.assert_array_equal(d.stragglers, late)


def test_worst_case_with_custom_nodes_prefers_the_wide_region():
    beta = np.array([-1.0, -0.9, -0.8, -0.7, 0.0, 0.5, 1.0])
    np.testing.assert_array_equal(worst_case_stragglers(beta, 1), [4])
    d = FixedCount(1, worst_case=True, beta=beta).sample(7, np.random.default_rng(1))
    np.testing.assert_array_equal(d.available, [0, 1, 2, 3, 5, 6])


def test_bernoulli_frequency(rng):
    for p in (0.1, 0.35):
        model = Bernoulli(p)
        N, R = 40, 500
        late = sum(N - model.sample(N, rng).available.size for _ in range(R))
        assert within(late / (N * R), p, N * R)
    assert Bernoulli(0.0).sample(5, rng).available.size == 5


def test_shifted_exponential_distribution(rng):
    shift, rate, N = 0.5, 4.0, 20000
    d = ShiftedExponential(shift, rate).sample(N, rng)
    assert d.delays.min() >= shift and d.available.size == N
    for t in (0.1, 0.25, 0.5):
        assert within(np.mean(d.delays - shift > t), np.exp(-rate * t), N)
    assert abs(d.delays.mean() - (shift + 1 / rate)) < 5 * (1 / rate) / np.sqrt(N)


def test_pareto_tail(rng):
    scale, shape, N = 0.2, 2.5, 20000
    d = Pareto(scale, shape).sample(N, rng)
    assert d.delays.min() >= scale
    for t in (0.25, 0.4, 1.0):
        assert within(np.mean(d.delays > t), (scale / t) ** shape, N)


def test_empirical_resamples_the_trace(rng):
    trace = [0.1, 0.2, 0.2, 0.9, np.inf]
    N = 20000
    d = Empirical(trace).sample(N, rng)
    for value, p in ((0.1, 0.2), (0.2, 0.4), (0.9, 0.2), (np.inf, 0.2)):
        assert within(np.mean(d.delays == value), p, N)
    assert np.all(np.isfinite(d.delays[d.available]))
    assert d.available.size == np.isfinite(d.delays).sum()


def test_wait_for_first_n_keeps_the_fastest(rng):
    model = ShiftedExponential(0.0, 1.0, stragglers=3)
    assert model.wait_count(10) == 7
    for _ in range(50):
        d = model.sample(10, rng)
        assert d.available.size == 7
        assert d.delays[d.available].max() <= np.delete(d.delays, d.available).min()
    d = Pareto(1.0, 2.0, wait_for=4).sample(9, rng)
    np.testing.assert_array_equal(d.available, np.sort(np.argsort(d.delays, kind="stable")[:4]))


def test_deadline_and_combined_rules(rng):
    d = ShiftedExponential(0.0, 1.0, deadline=0.7).sample(500, rng)
    np.testing.assert_array_equal(d.available, np.flatnonzero(d.delays <= 0.7))
    both = ShiftedExponential(0.0, 1.0, wait_for=50, deadline=0.7)
    assert both.deadline == 0.7
    for _ in range(20):
        d = both.sample(100, rng)
        fastest = np.argsort(d.delays, kind="stable")[:50]
        np.testing.assert_array_equal(d.available, np.sort(fastest[d.delays[fastest] <= 0.7]))


def test_ties_in_an_empirical_trace_are_broken_by_index(rng):
    d = Empirical([1.0], wait_for=3).sample(6, rng)
    np.testing.assert_array_equal(d.available, [0, 1, 2])


def test_reproducible_from_a_seed():
    for model in (FixedCount(2), Bernoulli(0.3), ShiftedExponential(1.0, 2.0, stragglers=1),
                  Pareto(1.0, 3.0), Empirical([0.5, 1.5, np.inf])):
        a = model.draws(9, 5, seed=42)
        b = model.draws(9, 5, seed=42)
        assert len(a) == 5
        for x, y in zip(a, b):
            np.testing.assert_array_equal(x.delays, y.delays)
            np.testing.assert_array_equal(x.available, y.available)
        c = model.draws(9, 5, seed=43)
        assert any(not np.array_equal(x.delays, y.delays) for x, y in zip(a, c))


def test_draws_are_read_only(rng):
    d = FixedCount(1).sample(4, rng)
    with pytest.raises(ValueError):
        d.available[0] = 3


@pytest.mark.parametrize("make, exc, match", [
    (lambda: FixedCount(-1), ValueError, "S must be >= 0"),
    (lambda: FixedCount(4).sample(4, np.random.default_rng()), ValueError, "S = 4 stragglers leave no worker out of N = 4"),
    (lambda: FixedCount(1).sample(4, 123), TypeError, "rng must be a numpy Generator"),
    (lambda: Bernoulli(1.0), ValueError, "p must be < 1.0"),
    (lambda: Bernoulli(-0.1), ValueError, "p must be >= 0.0"),
    (lambda: Bernoulli("x"), TypeError, "p must be a real number"),
    (lambda: ShiftedExponential(0.0, 0.0), ValueError, "rate must be > 0.0"),
    (lambda: ShiftedExponential(-1.0, 1.0), ValueError, "shift must be >= 0.0"),
    (lambda: ShiftedExponential(0.0, 1.0, wait_for=2, stragglers=1), ValueError, "either wait_for"),
    (lambda: ShiftedExponential(0.0, 1.0, wait_for=5).sample(4, np.random.default_rng()), ValueError,
     "wait_for = 5 exceeds the N = 4 workers"),
    (lambda: Pareto(1.0, 2.0, deadline=-1), ValueError, "deadline must be >= 0.0"),
    (lambda: Pareto(0.0, 2.0), ValueError, "scale must be > 0.0"),
    (lambda: Empirical([]), ValueError, "samples is empty"),
    (lambda: Empirical([0.1, -0.2]), ValueError, r"samples\[1\] = -0.2 is not a latency"),
    (lambda: Bernoulli(0.1).sample(0, np.random.default_rng()), ValueError, "N must be >= 1"),
])
def test_bad_parameters(make, exc, match):
    with pytest.raises(exc, match=match):
        make()


# ---- sample_delays: what the runtime draws every round ---------------------------

MODELS = [FixedCount(3), FixedCount(2, worst_case=True), Bernoulli(0.3),
          ShiftedExponential(0.5, 2.0, stragglers=2), ShiftedExponential(0.5, 2.0, wait_for=4, deadline=1.0),
          Pareto(1.0, 1.5), Empirical([0.5, 1.5, np.inf])]


@pytest.mark.parametrize("model", MODELS, ids=repr)
def test_sample_delays_draws_what_sample_draws(model):
    # the same delays from the same use of the generator, round after round
    seed = int(np.random.default_rng().integers(2**32))
    a, b = np.random.default_rng(seed), np.random.default_rng(seed)
    for _ in range(20):
        d = model.sample_delays(11, a)
        assert d.dtype == np.float64 and d.shape == (11,)
        np.testing.assert_array_equal(d, model.sample(11, b).delays)
    assert a.random() == b.random()
    assert delay_sampler(model) == model.sample_delays


@pytest.mark.parametrize("make, exc, match", [
    (lambda: FixedCount(4).sample_delays(4, np.random.default_rng()), ValueError, "S = 4 stragglers leave no worker"),
    (lambda: FixedCount(1).sample_delays(4, 123), TypeError, "rng must be a numpy Generator"),
    (lambda: Bernoulli(0.1).sample_delays(0, np.random.default_rng()), ValueError, "N must be >= 1"),
    (lambda: ShiftedExponential(0.0, 1.0, wait_for=5).sample_delays(4, np.random.default_rng()), ValueError,
     "wait_for = 5 exceeds the N = 4 workers"),
    (lambda: Pareto(1.0, 2.0).sample_delays(3, None), TypeError, "rng must be a numpy Generator"),
])
def test_sample_delays_rejects_what_sample_rejects(make, exc, match):
    with pytest.raises(exc, match=match):
        make()


class _LateNotNever(FixedCount):
    """Overrides sample only: its draws must not be replaced by FixedCount's."""

    def sample(self, N, rng):
        d = super().sample(N, rng)
        return StragglerDraw(np.where(np.isinf(d.delays), 7.0, d.delays), d.available)


class _OnlySample:
    """Not a StragglerModel at all: anything with sample() and wait_count() is accepted."""

    def sample(self, N, rng):
        return StragglerDraw(rng.random(N), np.arange(N))

    def wait_count(self, N):
        return None


def test_delay_sampler_keeps_a_subclass_override_of_sample(rng):
    model = _LateNotNever(2)
    d = delay_sampler(model)(6, rng)
    assert sorted(d.tolist()) == [0.0] * 4 + [7.0] * 2
    other = _OnlySample()
    seed = int(rng.integers(2**32))
    np.testing.assert_array_equal(delay_sampler(other)(5, np.random.default_rng(seed)),
                                  np.random.default_rng(seed).random(5))
    patched = FixedCount(1)
    patched.sample = lambda N, rng: StragglerDraw(np.full(N, 3.0), np.arange(N))
    np.testing.assert_array_equal(delay_sampler(patched)(4, rng), [3.0] * 4)
