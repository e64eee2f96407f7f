"""The one offline evaluator (letcc.evaluate): every number against a direct
computation written here, decode by decode."""
import numpy as np
import pytest

from letcc.codes import BACC, LeTCC, Uncoded
from letcc.evaluate import (coded_outputs, decode_errors, draw_sets, evaluate, exact_outputs, fixed_count_sets,
                            group_inputs, group_labels, lam_grid_errors, paired_difference, sets_by_count,
                            summarize)
from letcc.stragglers import Bernoulli, FixedCount


def f(X):
    return np.stack([np.sin(X).sum(axis=1), np.cos(X).sum(axis=1), X[:, 0]], axis=1)


def _round(code, X_round, F, noise=None):
    """The reference: one round, one set, encode -> f -> (noise) -> decode."""
    Y = f(code.encode(X_round))[F]
    if noise is not None:
        Y = Y + noise
    return code.decode(Y, F)


def test_decode_errors_match_a_direct_round_by_round_computation(rng):
    K, N = 4, 10
    X = rng.standard_normal((9, 3))                 # 2 rounds, one sample dropped
    G = group_inputs(X, K)
    assert G.shape == (4, 2, 3) and np.array_equal(G[:, 1], X[4:8])
    labels = group_labels(rng.integers(0, 3, 9), K, 2)
    sets = [np.array([0, 3, 4, 9]), np.array([1, 2, 5, 6, 9])]
    exact = exact_outputs(f, G)
    for code in (LeTCC(K, N), BACC(K, N)):
        out = coded_outputs(code, f, G)
        assert out.shape == (N, 2, 3)
        e = decode_errors(code, out, exact, sets, labels)
        assert e.mse.shape == e.correct.shape == e.agree.shape == (2, 2)
        for j, F in enumerate(sets):
            for b in range(2):
                est = _round(code, G[:, b], F)
                want = f(G[:, b])
                assert e.mse[j, b] == pytest.approx(np.mean(np.sum((est - want) ** 2, axis=1)), rel=1e-10)
                assert e.correct[j, b] == np.sum(est.argmax(1) == labels[:, b])
                assert e.agree[j, b] == np.sum(est.argmax(1) == want.argmax(1))


def test_noise_is_seeded_per_set_and_shared_by_every_scheme(rng):
    K, N = 4, 12
    G = group_inputs(rng.standard_normal((8, 2)), K)
    sets = [np.arange(N), np.array([0, 2, 5, 7, 11])]
    zero_out, zero_exact = np.zeros((N, 2, 3)), np.zeros((K, 2, 3))
    for code in (LeTCC(K, N, lam_dec=0.0), BACC(K, N)):
        a = decode_errors(code, zero_out, zero_exact, sets, noise_sigma=0.1, noise_seed=5).mse
        b = decode_errors(code, zero_out, zero_exact, sets, noise_sigma=0.1, noise_seed=5).mse
        c = decode_errors(code, zero_out, zero_exact, sets, noise_sigma=0.1, noise_seed=6).mse
        np.testing.assert_array_equal(a, b)
        assert not np.array_equal(a, c) and np.all(a > 0)
        for j, F in enumerate(sets):      # the noise of set j: generator (seed, j), shape (|F|, B, m)
            noise = 0.1 * np.random.default_rng([5, j]).standard_normal((F.size, 2, 3))
            est = code.decode(noise, F)
            np.testing.assert_allclose(a[j], np.einsum("kbm,kbm->b", est, est) / K, rtol=1e-12)
    del G


def test_straggler_sets_draw_through_the_models():
    rng = np.random.default_rng(1)
    sets = draw_sets(FixedCount(3), 10, 5, rng)
    assert len(sets) == 5 and all(s.size == 7 and np.all(np.diff(s) > 0) for s in sets)
    # the same draws as the model's own, in order
    rng2 = np.random.default_rng(1)
    for s in sets:
        np.testing.assert_array_equal(s, FixedCount(3).sample(10, rng2).available)
    # empty draws are dropped, or redrawn
    assert all(s.size for s in draw_sets(Bernoulli(0.9), 3, 30, np.random.default_rng(0)))
    assert len(draw_sets(Bernoulli(0.9), 3, 30, np.random.default_rng(0), redraw_empty=True)) == 30
    with pytest.raises(ValueError, match="leaves no worker answering"):
        draw_sets(Bernoulli(0.999999), 2, 2, np.random.default_rng(0), redraw_empty=True)
    with pytest.raises(TypeError, match="letcc.stragglers model"):
        draw_sets(3, 10, 2, np.random.default_rng(0))
    # fixed_count_sets: seeded by (seed, N, S); one set at S = 0
    a, b = fixed_count_sets(12, 4, 6, seed=3), fixed_count_sets(12, 4, 6, seed=3)
    assert all(np.array_equal(x, y) for x, y in zip(a, b)) and len(a) == 6
    assert len(fixed_count_sets(12, 0, 6, seed=3)) == 1
    with pytest.raises(ValueError, match="S must be <= 11, got 12"):
        fixed_count_sets(12, 12, 3, seed=0)
    by = sets_by_count([0, 2, FixedCount(5)], 10, 3, np.random.default_rng(0))
    assert sorted(by) == [0, 2, 5] and all(len(v) == 3 for v in by.values())
    assert sorted(sets_by_count(None, 8, 2, np.random.default_rng(0))) == [0, 1, 2, 3, 4]
    with pytest.raises(ValueError, match="straggler count must be <= 7, got 8"):
        sets_by_count([8], 8, 2, np.random.default_rng(0))


def test_evaluate_names_any_schemes_and_pairs_their_differences(rng):
    K, N = 3, 9
    X = rng.standard_normal((7 * K, 2))
    G = group_inputs(X, K)
    labels = group_labels(rng.integers(0, 3, X.shape[0]), K, 7)
    exact = exact_outputs(f, G)
    schemes = {"letcc": LeTCC(K, N), "bacc": BACC(K, N), "letcc-0": LeTCC(K, N, lam_dec=0.0)}
    outputs = {name: coded_outputs(c, f, G) for name, c in schemes.items()}
    sets = {0: [np.arange(N)], 3: fixed_count_sets(N, 3, 5, seed=2)}
    res = evaluate(schemes, outputs, exact, sets, labels, reference="bacc")
    assert sorted(res) == [0, 3]
    for S, entry in res.items():
        assert set(entry["schemes"]) == set(schemes) and set(entry["vs_reference"]) == {"letcc", "letcc-0"}
        for name, m in entry["schemes"].items():
            e = decode_errors(schemes[name], outputs[name], exact, sets[S], labels)
            assert m.mse == pytest.approx(e.mse.mean(), rel=1e-12) and m.draws == len(sets[S]) and m.rounds == 7
            n = e.mse.size
            assert m.mse_se == pytest.approx(e.mse.std(ddof=1) / np.sqrt(n) if n > 1 else 0.0, rel=1e-12)
            base = np.mean(exact.argmax(-1) == labels)
            assert m.rel_acc == pytest.approx(e.correct.sum() / (n * K) / base, rel=1e-12)
        ref = entry["errors"]["bacc"]
        for name, d in entry["vs_reference"].items():
            e = entry["errors"][name]
            diff = e.mse - ref.mse
            assert d["mse_reduction_pct"] == pytest.approx(100 * (1 - e.mse.mean() / ref.mse.mean()), rel=1e-9)
            if diff.size > 1:      # paired: the standard error of the per-(set, round) differences
                assert d["mse_reduction_se"] == pytest.approx(
                    100 * diff.std(ddof=1) / np.sqrt(diff.size) / ref.mse.mean(), rel=1e-9)
    # a plain list of sets is grouped by S; one code and one output array work too
    flat = evaluate(LeTCC(K, N), outputs["letcc"], exact, sets[3] + sets[0])
    assert sorted(flat) == [0, 3] and flat[3]["schemes"]["scheme"].mse == res[3]["schemes"]["letcc"].mse
    with pytest.raises(ValueError, match="reference 'nope' is not one of the schemes"):
        evaluate(schemes, outputs, exact, sets, reference="nope")
    with pytest.raises(ValueError, match=r"no worker outputs for scheme\(s\) \['bacc'\]"):
        evaluate(schemes, {"letcc": outputs["letcc"], "letcc-0": outputs["letcc"]}, exact, sets)


def test_paired_difference_flags_what_is_within_noise(rng):
    K, N = 4, 8
    G = group_inputs(rng.standard_normal((40 * K, 2)), K)
    exact = exact_outputs(f, G)
    code = Uncoded(K)
    out = coded_outputs(code, f, G)
    e = decode_errors(code, out, exact, [np.arange(K)], group_labels(np.zeros(40 * K, dtype=int), K, 40))
    d = paired_difference(e, e, exact, group_labels(np.zeros(40 * K, dtype=int), K, 40))
    assert d["mse_reduction_pct"] is None          # zero reference MSE: no relative reduction
    assert d["rel_acc_gain_pts"] == 0.0 and d["within_noise"]["rel_acc"]
    s = summarize("u", e, exact)
    assert s.mse == 0.0 and s.rel_acc is None and s.agreement == 1.0
    del N


def test_lam_grid_errors_equal_letcc_decode_for_every_lam(rng):
    K, N = 5, 13
    G = group_inputs(rng.standard_normal((6 * K, 3)), K)
    labels = group_labels(rng.integers(0, 3, 6 * K), K, 6)
    exact = exact_outputs(f, G)
    code = LeTCC(K, N, lam_enc=0.0, lam_dec=0.0)
    out = coded_outputs(code, f, G)
    sets = fixed_count_sets(N, 4, 3, seed=1)
    grid = [0.0, 1e-4, 1e-2, np.linspace(1e-4, 1e-1, K)]
    got = lam_grid_errors(code.beta, code.alpha, out, exact, sets, lambda nodes: grid, labels=labels,
                          noise_sigma=0.01, noise_seed=3)
    rows = lam_grid_errors(code.beta, code.alpha, out, exact, sets, lambda nodes: grid, labels=labels,
                           noise_sigma=0.01, noise_seed=3, per_row=True)
    for i, lam in enumerate(grid):
        c = LeTCC(K, N, lam_enc=0.0, lam_dec=(lambda lam: lambda b, n, k: lam)(lam))
        e = decode_errors(c, out, exact, sets, labels, noise_sigma=0.01, noise_seed=3)
        np.testing.assert_allclose(got["mse"][:, i], e.mse.mean(axis=1), rtol=1e-9)
        np.testing.assert_allclose(got["acc"][:, i], e.correct.sum(axis=1) / (K * 6), rtol=1e-12)
        np.testing.assert_allclose(rows["mse"][:, i].mean(axis=1), got["mse"][:, i], rtol=1e-9)


def test_too_few_inputs_and_bad_labels():
    with pytest.raises(ValueError, match="need at least K = 4 inputs, got 3"):
        group_inputs(np.zeros((3, 2)), 4)
    with pytest.raises(TypeError, match="labels must be a 1-D array of integer classes"):
        group_labels(np.zeros(8), 4, 2)
    with pytest.raises(ValueError, match="labels has 7 entries, fewer than the 8"):
        group_labels(np.zeros(7, dtype=int), 4, 2)


def test_decoders_that_look_at_the_data_are_decoded_round_by_round(rng):
    # GCV chooses lam from one decode's outputs: the evaluator must not pool rounds
    K, N = 4, 12
    G = group_inputs(rng.standard_normal((5 * K, 2)), K)
    exact = exact_outputs(f, G)
    gcv = LeTCC(K, N, lam_dec=None)
    assert not gcv.linear_in_outputs and LeTCC(K, N, output_space="linear").linear_in_outputs
    assert LeTCC(K, N, lam_dec=1e-3).linear_in_outputs
    # the default space ('auto') looks at the outputs (probability rows -> log space)
    assert not LeTCC(K, N).linear_in_outputs
    assert not LeTCC(K, N, lam_dec=lambda b, n, k: 1e-3).linear_in_outputs and BACC(K, N).linear_in_outputs
    out = coded_outputs(gcv, f, G) + 0.05 * rng.standard_normal((N, 5, 3))
    F = np.array([0, 1, 3, 4, 6, 8, 9, 11])
    e = decode_errors(gcv, out, exact, [F])
    for b in range(5):
        est = gcv.decode(out[F, b], F)
        assert e.mse[0, b] == pytest.approx(np.mean(np.sum((est - exact[:, b]) ** 2, axis=1)), rel=1e-12)


def test_every_code_states_adversaries_and_evaluate_reads_it(rng):
    # part of the Code contract (letcc.codes._base), read without probing
    from letcc.codes import Replication, Uncoded
    codes = [LeTCC(4, 12), LeTCC(4, 12, adversaries=2), BACC(4, 12), BACC(4, 12, adversaries=1), Uncoded(4),
             Replication(4, 2)]
    assert [c.adversaries for c in codes] == [0, 2, 0, 1, 0, 0]
    assert all(type(c.adversaries) is int for c in codes)

    class NoAdversaries:          # an object that is not a Code: evaluate says so by failing
        K, N, linear_in_outputs = 4, 12, True

        def decode(self, Y, available):
            return Y[:4]
    G = group_inputs(rng.standard_normal((8, 3)), 4)
    with pytest.raises(AttributeError, match="adversaries"):
        decode_errors(NoAdversaries(), np.zeros((12, 2, 3)), exact_outputs(f, G), [np.arange(12)])
