"""letcc.policy: the lam policy LeTCC uses to choose lam_dec from the answering set."""
import json

import letcc

import numpy as np
import pytest

from letcc.codes import BACC, LeTCC
from letcc.codes.bacc import berrut_matrix
from letcc.codes.simulate import as_batches, exact_outputs, worker_outputs
from letcc.policy import (DEFAULT_C0, END_FACTOR, LamPolicy, _best_path, _bins, _table_lam, decode_errors,
                          effective_gap, gap_and_end, straggler_sets)
from letcc.splines import select_lam_gcv
from letcc.stragglers import Bernoulli, FixedCount

K, N = 6, 12
GRID = np.concatenate(([0.0], np.logspace(-8, 1, 19)))  # half decades: keeps the tests fast


def tiny_classifier(seed=0):
    """A fixed small softmax classifier R^6 -> 5 classes: outputs nearly
    piecewise constant along the encoder curve, like a trained net's."""
    r = np.random.default_rng(seed)
    W1, W2 = r.standard_normal((6, 16)), 3.0 * r.standard_normal((16, 5))

    def f(X):
        z = np.tanh(np.asarray(X) @ W1) @ W2
        z = z - z.max(axis=-1, keepdims=True)
        e = np.exp(z)
        return e / e.sum(axis=-1, keepdims=True)

    return f


@pytest.fixture(scope="module")
def calibrated():
    f = tiny_classifier()
    X = np.random.default_rng(1).standard_normal((60, 6))
    return f, LamPolicy.calibrate(f, X, K, N, n_draws=8, seed=3, lam_grid=GRID)


# ---------------------------------------------------------------- phi and the default

def test_effective_gap_is_largest_gap_or_scaled_end_distance():
    b = np.array([-1.0, -0.5, 0.1, 0.3, 1.0])  # gaps 0.5, 0.6, 0.2, 0.7; both ends answered
    assert effective_gap(b, 8.0) == pytest.approx(0.7)
    b = np.array([-0.9, -0.5, 0.1, 0.3, 0.95])  # gaps up to 0.65; ends 0.1 and 0.05 from +-1
    assert effective_gap(b, 8.0) == pytest.approx(0.8)
    assert effective_gap(b, 0.0) == pytest.approx(0.65)
    assert gap_and_end(b) == pytest.approx((0.65, 0.1))


def test_default_is_c0_phi_cubed_and_small_sets_get_zero():
    p = LamPolicy()
    beta = LeTCC(K, N).beta
    F = np.array([0, 1, 2, 5, 8, 11])
    assert p.lam_dec(beta[F], N, K) == pytest.approx(DEFAULT_C0 * effective_gap(beta[F], END_FACTOR) ** 3, rel=1e-14)
    assert p.lam_dec(beta[[3, 7]], N, K) == 0.0
    assert p.lam_enc(K, N) == 0.0


@pytest.mark.parametrize("which", ["default", "calibrated"])
def test_more_stragglers_never_less_smoothing(which, calibrated, rng):
    """Removing answering workers (one more straggler at a time, in random
    order) never lowers lam_dec; neither does widening phi."""
    p = LamPolicy() if which == "default" else calibrated[1]
    beta = LeTCC(K, N).beta
    for _ in range(30):
        order = rng.permutation(N)
        lams = []
        for S in range(N - 2):
            F = np.sort(order[S:])
            lams.append(p.lam_dec(beta[F], N, K))
        assert all(b >= a for a, b in zip(lams, lams[1:])), lams
        assert lams[-1] > lams[0]
    gs = np.geomspace(1e-3, 5.0, 200)
    psi = [p.psi(x, K, N) for x in gs]
    assert all(b >= a for a, b in zip(psi, psi[1:]))
    assert p.end_k(K, N) >= 0


# ---------------------------------------------------------------- calibration

def test_calibrated_table_is_monotone_and_used_by_letcc(calibrated):
    f, p = calibrated
    t = p.tables[(K, N)]
    assert all(b >= a for a, b in zip(t["lam"], t["lam"][1:]))
    assert len(t["edges"]) == len(t["lam"]) + 1
    beta = LeTCC(K, N).beta
    for F in ([0, 2, 3, 4, 6, 7, 9, 11], [3, 4, 5, 6, 7, 8, 9], [0, 1, 2, 3, 11]):
        g, d = gap_and_end(beta[F])
        assert p.lam_dec(beta[F], N, K) == pytest.approx(max(_table_lam(t, g), t["end_k"] * d ** 3), rel=1e-14)
    code = LeTCC(K, N, lam_dec=p)
    F = np.array([0, 2, 3, 4, 6, 7, 9, 11])
    Y = f(code.encode(np.random.default_rng(5).standard_normal((K, 6))))[F]
    code.decode(Y, F)
    assert code.last_lam_dec == p.lam_dec(code.beta[F], N, K)
    # pairs without a table fall back to the default formula
    assert p.lam_dec(LeTCC(4, 10).beta[[0, 3, 5, 9]], 10, 4) == LamPolicy().lam_dec(LeTCC(4, 10).beta[[0, 3, 5, 9]], 10, 4)


def test_calibration_is_reproducible_from_its_seed(calibrated):
    f, p = calibrated
    X = np.random.default_rng(1).standard_normal((60, 6))
    again = LamPolicy.calibrate(f, X, K, N, n_draws=8, seed=3, lam_grid=GRID)
    assert again.tables == p.tables
    other = LamPolicy.calibrate(f, X, K, N, n_draws=8, seed=4, lam_grid=GRID)
    assert other.report["6,12"]["sets"] == p.report["6,12"]["sets"]
    sets3 = straggler_sets(None, N, 8, np.random.default_rng(3))
    sets4 = straggler_sets(None, N, 8, np.random.default_rng(4))
    assert any(not np.array_equal(a, b) for S in sets3 for a, b in zip(sets3[S], sets4[S]))


def test_save_load_round_trip(calibrated, tmp_path, rng):
    _, p = calibrated
    path = tmp_path / "policy.json"
    p.save(path)
    q = LamPolicy.load(path)
    assert q == p and q.tables == p.tables and q.report == p.report
    beta = LeTCC(K, N).beta
    for _ in range(50):
        F = np.sort(rng.choice(N, rng.integers(3, N + 1), replace=False))
        assert q.lam_dec(beta[F], N, K) == p.lam_dec(beta[F], N, K)
    assert json.loads(path.read_text())["format"] == "letcc.LamPolicy/1"


def test_calibrated_policy_beats_interpolation_and_bacc_at_the_largest_S(calibrated):
    """On held-out inputs and fresh straggler sets, S = N / 2."""
    f, p = calibrated
    X = np.random.default_rng(11).standard_normal((240, 6))
    batches = as_batches(X, K)
    exact = exact_outputs(f, batches)
    let, bacc = LeTCC(K, N, lam_dec=0.0), BACC(K, N)
    out_l, out_b = worker_outputs(let, f, batches), worker_outputs(bacc, f, batches)
    r = np.random.default_rng(12)
    sets = [np.sort(r.choice(N, N - N // 2, replace=False)) for _ in range(30)]
    mse = decode_errors(let.beta, let.alpha, out_l, exact, sets,
                        lambda nodes: [p.lam_dec(nodes, N, K), 0.0])["mse"].mean(axis=0)
    mse_bacc = decode_errors(bacc.beta, bacc.alpha, out_b, exact, sets, lambda nodes: [0.0],
                             operator=lambda nodes, lam: berrut_matrix(nodes, bacc.alpha))["mse"].mean()
    assert mse[0] < mse[1]
    assert mse[0] < mse_bacc


def test_relacc_target_needs_labels_and_favours_accuracy():
    f = tiny_classifier(2)
    X = np.random.default_rng(6).standard_normal((60, 6))
    with pytest.raises(ValueError, match="labels"):
        LamPolicy.calibrate(f, X, K, N, target="relacc", n_draws=4)
    labels = f(X).argmax(axis=1)
    grid = [0.0, 1e-4, 1e-1, 10.0]
    pa = LamPolicy.calibrate(f, X, K, N, target="relacc", labels=labels, n_draws=6, seed=1, lam_grid=grid)
    pm = LamPolicy.calibrate(f, X, K, N, target="mse", n_draws=6, seed=1, lam_grid=grid)
    assert pa.target == "relacc" and pm.target == "mse"
    # each target is at least as good as the other on its own calibration score
    batches = as_batches(X, K)
    exact = exact_outputs(f, batches)
    code = LeTCC(K, N, lam_dec=0.0)
    out = worker_outputs(code, f, batches)
    sets = [F for S, Fs in sorted(straggler_sets(None, N, 6, np.random.default_rng(1)).items()) for F in Fs]
    lab = labels[: batches.shape[0] * K].reshape(-1, K)
    e = decode_errors(code.beta, code.alpha, out, exact, sets,
                      lambda nd: [pa.lam_dec(nd, N, K), pm.lam_dec(nd, N, K)], labels=lab)
    assert e["acc"][:, 0].mean() >= e["acc"][:, 1].mean()


def test_straggler_models_and_lam_enc_grid(rng):
    f = tiny_classifier()
    X = rng.standard_normal((36, 6))
    p = LamPolicy.calibrate(f, X, K, N, stragglers=[FixedCount(3, worst_case=True), Bernoulli(0.3), 1],
                            n_draws=4, seed=0, lam_enc_grid=[0.0, 1e-3], end_k_grid=[0.0, 0.3], lam_grid=GRID)
    t = p.tables[(K, N)]
    assert t["lam_enc"] in (0.0, 1e-3) and t["end_k"] in (0.0, 0.3)
    assert p.lam_enc(K, N) == t["lam_enc"]
    assert p.code(K, N).lam_enc == t["lam_enc"]
    assert 3 in p.report["6,12"]["counts"] and 1 in p.report["6,12"]["counts"]


def test_an_encoder_smoothing_that_loses_everywhere_is_not_picked():
    """lam_enc = 10 flattens the coded inputs to a line: every decode is worse;
    calibration must compare the lam_enc candidates on one yardstick."""
    f = tiny_classifier()
    X = np.random.default_rng(8).standard_normal((48, 6))
    for target, labels in (("mse", None), ("relacc", f(X).argmax(axis=1))):
        p = LamPolicy.calibrate(f, X, K, N, n_draws=4, seed=2, lam_grid=GRID, lam_enc_grid=[10.0, 0.0],
                                target=target, labels=labels)
        assert p.lam_enc(K, N) == 0.0


def test_into_keeps_other_pairs():
    f = tiny_classifier()
    X = np.random.default_rng(0).standard_normal((40, 6))
    a = LamPolicy.calibrate(f, X, 4, 8, n_draws=3, lam_grid=GRID)
    b = LamPolicy.calibrate(f, X, K, N, n_draws=3, into=a, lam_grid=GRID)
    assert set(b.tables) == {(4, 8), (K, N)} and b.tables[(4, 8)] == a.tables[(4, 8)]
    assert set(a.tables) == {(4, 8)}


# ---------------------------------------------------------------- pieces, checked independently

def test_decode_errors_matches_letcc_decode(rng):
    f = tiny_classifier()
    X = rng.standard_normal((3 * K, 6))
    batches = as_batches(X, K)
    code = LeTCC(K, N, lam_dec=0.0)
    out, exact = worker_outputs(code, f, batches), exact_outputs(f, batches)
    labels = rng.integers(0, 5, size=(3, K))
    sets = [np.sort(rng.choice(N, 8, replace=False)) for _ in range(3)]
    lams = [0.0, 1e-4, 0.3]
    got = decode_errors(code.beta, code.alpha, out, exact, sets, lambda nd: lams, labels=labels)
    for j, F in enumerate(sets):
        for i, lam in enumerate(lams):
            c = LeTCC(K, N, lam_dec=lam)
            est = np.stack([c.decode(out[b][F], F) for b in range(3)])
            want = np.mean(np.sum((est - exact) ** 2, axis=-1))
            assert got["mse"][j, i] == pytest.approx(want, rel=1e-10)
            assert got["acc"][j, i] == np.mean(est.argmax(-1) == labels)


def test_best_path_matches_brute_force(rng):
    import itertools
    for _ in range(20):
        cost = rng.random((4, 5))
        path, total = _best_path(cost, monotone=True)
        brute = min((sum(cost[i, j] for i, j in enumerate(p)), p)
                    for p in itertools.product(range(5), repeat=4) if all(b >= a for a, b in zip(p, p[1:])))
        assert total == pytest.approx(brute[0]) and tuple(path) == brute[1]
        free, _ = _best_path(cost, monotone=False)
        assert free == list(np.argmin(cost, axis=1))


def test_bins_cover_every_set_and_scale_the_sets_beyond_the_table(rng):
    phis = np.exp(rng.uniform(-3, 1, 200))
    phis[:3] = [20.0, 30.0, 1e-3]  # isolated very wide / very narrow gaps
    edges, members, scale = _bins(phis)
    assert sum(m.sum() for m in members) == 200
    assert all(m.sum() >= 6 for m in members)
    assert all(b > a for a, b in zip(edges, edges[1:]))
    x = np.log10(phis)
    inside = (x >= edges[0]) & (x < edges[-1])
    np.testing.assert_array_equal(scale[inside], 1.0)
    np.testing.assert_allclose(scale[~inside], (phis[~inside] / 10.0 ** np.where(x[~inside] < edges[0], edges[0],
                                                                                    edges[-1])) ** 3)
    assert scale[0] > 1 and scale[2] < 1
    for lo, hi, m in zip(edges, edges[1:], members):
        assert np.all(x[m & inside] >= lo - 1e-9) and np.all(x[m & inside] < hi + 1e-9)
    # the table rule applies the same factor outside its edges
    t = {"edges": edges, "lam": list(np.linspace(1e-5, 1e-3, len(edges) - 1)), "end_k": 0.3, "lam_enc": 0.0}
    assert _table_lam(t, 20.0) == pytest.approx(t["lam"][-1] * scale[0])
    _, merged, ones = _bins(phis, extrapolate=False)
    assert sum(m.sum() for m in merged) == 200 and np.all(ones == 1.0)


def test_calibrated_policy_is_near_the_per_S_optimum_on_its_calibration_sets(calibrated):
    """Replayed through the finished policy (table lookups and the phi^3
    rule beyond its edges), the calibration sets decode about as well as with
    the best constant lam per straggler count."""
    f, p = calibrated
    X = np.random.default_rng(1).standard_normal((60, 6))
    batches = as_batches(X, K)
    exact = exact_outputs(f, batches)
    code = LeTCC(K, N, lam_dec=0.0)
    out = worker_outputs(code, f, batches)
    by_count = straggler_sets(None, N, 8, np.random.default_rng(3))
    sets = [F for S in sorted(by_count) for F in by_count[S]]
    counts = np.array([N - F.size for F in sets])
    used = decode_errors(code.beta, code.alpha, out, exact, sets, lambda nd: [p.lam_dec(nd, N, K)])["mse"][:, 0]
    grid = decode_errors(code.beta, code.alpha, out, exact, sets, lambda nd: GRID)["mse"]
    # per-S best constant lam from the grid vs the policy: the policy is at most a little worse on average
    rel = [used[counts == S].mean() / grid[counts == S].mean(axis=0).min() for S in np.unique(counts)]
    assert np.mean(rel) < 1.05


def test_gcv_mode_returns_none_and_letcc_runs_gcv(rng):
    p = LamPolicy(noise="gcv")
    code = LeTCC(K, N, lam_dec=p)
    F = np.array([0, 1, 3, 4, 6, 8, 9, 11])
    Y = rng.standard_normal((F.size, 4))
    assert p.lam_dec(code.beta[F], N, K) is None
    code.decode(Y, F)
    assert code.last_lam_dec == pytest.approx(select_lam_gcv(code.beta[F], np.ones(F.size), Y))


def test_memoised_answers_equal_fresh_ones(calibrated, rng, monkeypatch):
    import letcc.policy as policy_module
    monkeypatch.setattr(policy_module, "MEMO_SIZE", 5)
    _, p = calibrated
    q = LamPolicy.from_dict(p.to_dict())
    beta = LeTCC(K, N).beta
    for _ in range(40):
        F = np.sort(rng.choice(N, rng.integers(1, N + 1), replace=False))
        first = q.lam_dec(beta[F], N, K)
        assert first == q.lam_dec(beta[F], N, K) == q._lam_dec(beta[F], N, K)
        assert len(q._memo) <= 5


# ---------------------------------------------------------------- bad input

def test_bad_arguments_raise_clear_errors():
    f = tiny_classifier()
    X = np.zeros((12, 6))
    with pytest.raises(ValueError, match="target"):
        LamPolicy(target="accuracy")
    with pytest.raises(ValueError, match="noise"):
        LamPolicy(noise="auto")
    with pytest.raises(ValueError, match="c0"):
        LamPolicy(c0=-1.0)
    with pytest.raises(ValueError, match="non-decreasing"):
        LamPolicy({(K, N): {"edges": [-1.0, -0.5, 0.0], "lam": [1e-3, 1e-4]}})
    with pytest.raises(ValueError, match="edges"):
        LamPolicy({(K, N): {"edges": [-1.0], "lam": [1e-3]}})
    with pytest.raises(TypeError, match="K, N"):
        LamPolicy({"6x12": {"edges": [-1.0, 0.0], "lam": [1e-3]}})
    with pytest.raises(ValueError, match="format"):
        LamPolicy.from_dict({"format": "something else"})
    with pytest.raises(ValueError, match="stragglers = 12"):
        LamPolicy.calibrate(f, X, K, N, stragglers=12)
    with pytest.raises(TypeError, match="stragglers"):
        LamPolicy.calibrate(f, X, K, N, stragglers="many")
    with pytest.raises(ValueError, match="noise_sigma"):
        LamPolicy.calibrate(f, X, K, N, noise_sigma=-0.1)
    with pytest.raises(ValueError, match="lam_grid"):
        LamPolicy.calibrate(f, X, K, N, lam_grid=[1e-3, 1e-4])
    with pytest.raises(ValueError, match="lam_grid\\[0\\]"):
        LamPolicy.calibrate(f, X, K, N, lam_grid=[-1.0])
    with pytest.raises(TypeError, match="n_draws"):
        LamPolicy.calibrate(f, X, K, N, n_draws=2.5)
    with pytest.raises(ValueError, match="at least K"):
        LamPolicy.calibrate(f, X[:3], K, N)
    with pytest.raises(TypeError, match="into"):
        LamPolicy.calibrate(f, X, K, N, into={"tables": []})


def test_library_default_is_the_uncalibrated_lam_policy():
    """LeTCC's default lam (letcc.codes.lam_defaults.DEFAULT_POLICY, a formula kept
    in the codes layer) is the same rule as an uncalibrated letcc.LamPolicy()."""
    from letcc.codes.lam_defaults import DEFAULT_POLICY

    policy = letcc.LamPolicy()
    rng = np.random.default_rng(3)
    for N in (5, 16, 36):
        beta = letcc.nodes.chebyshev_second_kind(N)
        for S in range(0, N - 2):
            avail = np.sort(rng.choice(N, N - S, replace=False))
            b = beta[avail]
            assert DEFAULT_POLICY.lam_dec(b, N, 8) == pytest.approx(policy.lam_dec(b, N, 8), rel=1e-12, abs=0)
    assert DEFAULT_POLICY.lam_enc(8, 16) == policy.lam_enc(8, 16)
