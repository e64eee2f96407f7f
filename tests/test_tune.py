"""letcc.tune: grid search of (lam_enc, lam_dec) over end-to-end MSE."""
import numpy as np
import pytest

import letcc
from letcc.codes import LeTCC
from letcc.stragglers import Bernoulli, FixedCount
from letcc.tune import DEFAULT_LAM_GRID, TuneResult


def make_f(rng):
    W = rng.standard_normal((3, 2))
    return lambda X: np.tanh(X @ W)


def test_scores_are_end_to_end_mse_and_the_best_is_chosen(rng):
    K, N = 5, 12
    f = make_f(rng)
    X = rng.standard_normal((3 * K + 2, 3))
    enc, dec = [0.0, 1e-3], [0.0, 1e-4, 1e-1]
    res = letcc.tune(f, X, K, N, stragglers=3, lam_enc_grid=enc, lam_dec_grid=dec, n_draws=4, seed=7)
    assert res.scores.shape == (2, 3) and res.n_rounds == 3 and res.n_draws == 4
    i, j = np.unravel_index(np.argmin(res.scores), res.scores.shape)
    assert (res.lam_enc, res.lam_dec, res.mse) == (enc[i], dec[j], res.scores[i, j])

    # Recompute one cell independently: same draws (FixedCount(3) from the same seed).
    sets = [d.available for d in FixedCount(3).draws(N, 4, seed=np.random.default_rng(7))]
    code = LeTCC(K, N, lam_enc=1e-3, lam_dec=1e-1)
    errs = []
    for b in range(3):
        Xb = X[b * K:(b + 1) * K]
        Y = f(code.encode(Xb))
        for s in sets:
            errs.append(np.mean(np.sum((code.decode(Y[s], s) - f(Xb)) ** 2, axis=1)))
    assert res.scores[1, 2] == pytest.approx(np.mean(errs), rel=1e-10)
    assert np.isfinite(res.default_mse)
    assert res.code(K, N).lam_dec == res.lam_dec


def test_reproducible_and_seed_dependent(rng):
    f = make_f(rng)
    X = rng.standard_normal((12, 3))
    a = letcc.tune(f, X, 4, 10, stragglers=Bernoulli(0.3), lam_enc_grid=[0.0], n_draws=3, seed=1)
    b = letcc.tune(f, X, 4, 10, stragglers=Bernoulli(0.3), lam_enc_grid=[0.0], n_draws=3, seed=1)
    c = letcc.tune(f, X, 4, 10, stragglers=Bernoulli(0.3), lam_enc_grid=[0.0], n_draws=3, seed=2)
    np.testing.assert_array_equal(a.scores, b.scores)
    assert not np.array_equal(a.scores, c.scores)
    assert a.scores.shape == (1, len(DEFAULT_LAM_GRID))


def test_noise_calls_for_more_smoothing(rng):
    K, N = 4, 40
    f = make_f(rng)
    X = rng.standard_normal((4 * K, 3))
    grid = [0.0, 1e-6, 1e-4, 1e-2, 1.0]
    clean = letcc.tune(f, X, K, N, lam_enc_grid=[0.0], lam_dec_grid=grid, n_draws=2, seed=3)
    noisy = letcc.tune(f, X, K, N, lam_enc_grid=[0.0], lam_dec_grid=grid, n_draws=2, seed=3, noise_sigma=0.3)
    assert noisy.lam_dec > clean.lam_dec
    assert noisy.mse > clean.mse


@pytest.mark.parametrize("kwargs, exc, match", [
    (dict(lam_dec_grid=[]), ValueError, "lam_dec_grid must be a non-empty"),
    (dict(lam_enc_grid=[0.0, -1.0]), ValueError, r"lam_enc_grid\[1\]: lam must be finite and >= 0"),
    (dict(n_draws=0), ValueError, "n_draws must be >= 1, got 0"),
    (dict(noise_sigma=-0.1), ValueError, "noise_sigma must be >= 0.0, got -0.1"),
    (dict(stragglers="two"), TypeError, "stragglers must be a count S or a letcc.stragglers model"),
    (dict(stragglers=6), ValueError, "S = 6 stragglers leave no worker out of N = 6"),
])
def test_errors(rng, kwargs, exc, match):
    f = make_f(rng)
    with pytest.raises(exc, match=match):
        letcc.tune(f, rng.standard_normal((8, 3)), 4, 6, **kwargs)


def test_too_few_calibration_samples(rng):
    with pytest.raises(ValueError, match="need at least K = 4 inputs, got 3"):
        letcc.tune(make_f(rng), rng.standard_normal((3, 3)), 4, 6)


def test_letcc_tune_is_callable_after_importing_the_module(rng):
    import letcc.tune as tune_module

    res = letcc.tune(make_f(rng), rng.standard_normal((8, 3)), 4, 6, lam_enc_grid=[0.0], lam_dec_grid=[0.0],
                     n_draws=1)
    assert isinstance(res, TuneResult)
    assert tune_module(make_f(rng), rng.standard_normal((8, 3)), 4, 6, lam_enc_grid=[0.0], lam_dec_grid=[0.0],
                       n_draws=1).lam_dec == 0.0
