"""The simulation helper: per-round MSE, shared noise, batching."""
import numpy as np
import pytest

from letcc.codes import BACC, LeTCC
from letcc.codes.simulate import as_batches, end_to_end_mse, exact_outputs, round_errors, worker_outputs


def f(X):
    return np.stack([np.sin(X).sum(axis=1), np.cos(X).sum(axis=1)], axis=1)


def test_round_errors_match_a_direct_computation(rng):
    K, N = 4, 10
    code = LeTCC(K, N)
    batches = as_batches(rng.standard_normal((9, 3)), K)  # 2 rounds, one sample dropped
    assert batches.shape == (2, 4, 3)
    sets = [np.array([0, 3, 4, 9]), np.array([9, 1, 2, 5, 6])]
    exact = exact_outputs(f, batches)
    out = worker_outputs(code, f, batches)
    errs = round_errors(code, out, exact, sets)
    for b in range(2):
        for j, s in enumerate(sets):
            est = code.decode(f(code.encode(batches[b]))[s], s)
            assert errs[b, j] == pytest.approx(np.mean(np.sum((est - f(batches[b])) ** 2, axis=1)), rel=1e-12)
    assert end_to_end_mse(code, f, batches, sets) == pytest.approx(errs.mean(), rel=1e-12)


def test_noise_is_shared_across_codes_and_seeded(rng):
    K, N = 4, 12
    batches = as_batches(rng.standard_normal((8, 2)), K)
    exact = exact_outputs(f, batches)
    sets = [np.arange(N)]
    # With identity 'outputs' equal to zero, the decoded error is the decoded noise.
    zero = np.zeros((2, N, 2))
    a = round_errors(LeTCC(K, N, lam_dec=0.0), zero, np.zeros_like(exact), sets, noise_sigma=0.1, seed=5)
    b = round_errors(LeTCC(K, N, lam_dec=0.0), zero, np.zeros_like(exact), sets, noise_sigma=0.1, seed=5)
    c = round_errors(LeTCC(K, N, lam_dec=0.0), zero, np.zeros_like(exact), sets, noise_sigma=0.1, seed=6)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c) and np.all(a > 0)
    # Same noise for BACC: its decode of the same noisy rows.
    code = BACC(K, N)
    noise = 0.1 * np.random.default_rng([5, 0, 0]).standard_normal((N, 2))
    direct = np.mean(np.sum(code.decode(noise, np.arange(N)) ** 2, axis=1))
    assert round_errors(code, zero, np.zeros_like(exact), sets, 0.1, 5)[0, 0] == pytest.approx(direct, rel=1e-12)


def test_straggler_draw_objects_are_accepted(rng):
    from letcc.stragglers import FixedCount

    K, N = 4, 10
    batches = as_batches(rng.standard_normal((4, 2)), K)
    draws = FixedCount(2).draws(N, 3, seed=1)
    code = BACC(K, N)
    val = end_to_end_mse(code, f, batches, draws)
    assert val == pytest.approx(end_to_end_mse(code, f, batches, [d.available for d in draws]), rel=1e-12)


def test_too_few_samples():
    with pytest.raises(ValueError, match="need at least K = 4 samples, got 3"):
        as_batches(np.zeros((3, 2)), 4)
