"""letcc.policy: the lam policy LeTCC uses to choose lam_dec from the answering set."""
import json

import letcc

import numpy as np
import pytest

from letcc.codes import BACC, LeTCC
from letcc.codes.bacc import berrut_matrix
from letcc._calibration_search import best_path as _best_path, gap_bins as _bins
from letcc.codes.lam_defaults import GapTableLam
from letcc.evaluate import coded_outputs, exact_outputs, group_inputs, group_labels, sets_by_count
from letcc.evaluate import lam_grid_errors as decode_errors
from letcc.nodes import chebyshev_first_kind
from letcc.policy import DEFAULT_C0, END_FACTOR, LOCAL_C0, LOCAL_END_FACTOR, LamPolicy, effective_gap, gap_and_end, local_gaps
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
    """A global policy (one lam per decode: a gap table and an end term)."""
    f = tiny_classifier()
    X = np.random.default_rng(1).standard_normal((60, 6))
    return f, LamPolicy.calibrate(f, X, K, N, n_draws=8, seed=3, lam_grid=GRID, local=False)


@pytest.fixture(scope="module")
def calibrated_local():
    """A local policy (one lam per alpha_k), the default kind."""
    f = tiny_classifier()
    X = np.random.default_rng(1).standard_normal((60, 6))
    return f, LamPolicy.calibrate(f, X, K, N, n_draws=8, seed=3, lam_grid=GRID, local=True)


def lams_of(p, nodes, N, K):
    """p's answer as an array of K lams (a single lam repeated K times)."""
    return np.broadcast_to(np.asarray(p.lam_dec(nodes, N, K), dtype=np.float64), (K,))


# ---------------------------------------------------------------- phi and the default

def test_effective_gap_is_largest_gap_or_scaled_end_distance():
    b = np.array([-1.0, -0.5, 0.1, 0.3, 1.0])  # gaps 0.5, 0.6, 0.2, 0.7; both ends answered
    assert effective_gap(b, 8.0) == pytest.approx(0.7)
    b = np.array([-0.9, -0.5, 0.1, 0.3, 0.95])  # gaps up to 0.65; ends 0.1 and 0.05 from +-1
    assert effective_gap(b, 8.0) == pytest.approx(0.8)
    assert effective_gap(b, 0.0) == pytest.approx(0.65)
    assert gap_and_end(b) == pytest.approx((0.65, 0.1))


def test_global_default_is_c0_phi_cubed_and_small_sets_get_zero():
    p = LamPolicy(local=False)
    beta = LeTCC(K, N).beta
    F = np.array([0, 1, 2, 5, 8, 11])
    assert p.lam_dec(beta[F], N, K) == pytest.approx(DEFAULT_C0 * effective_gap(beta[F], END_FACTOR) ** 3, rel=1e-14)
    assert p.lam_dec(beta[[3, 7]], N, K) == 0.0
    assert p.lam_enc(K, N) == 0.0


def reference_local_gaps(b, alpha, a):
    """phi_k written out point by point: the interval of [-1, b..., 1] holding
    alpha_k, or a times the distance beyond the outermost node if larger."""
    ext = sorted(set([-1.0, 1.0]) | set(b.tolist()))
    out = []
    for x in alpha:
        h = next(hi - lo for lo, hi in zip(ext, ext[1:]) if lo < x <= hi or (x <= ext[0] and lo == ext[0]))
        beyond = max(b[0] - x, x - b[-1], 0.0)
        out.append(max(h, a * beyond))
    return np.array(out)


def test_local_default_is_c0_local_gap_cubed_per_alpha(rng):
    p = LamPolicy()
    assert p.local and p.c0 == LOCAL_C0 and p.end_factor == LOCAL_END_FACTOR
    beta, alpha = LeTCC(K, N).beta, chebyshev_first_kind(K)
    for _ in range(30):
        F = np.sort(rng.choice(N, rng.integers(3, N + 1), replace=False))
        want = LOCAL_C0 * reference_local_gaps(beta[F], alpha, LOCAL_END_FACTOR) ** 3
        np.testing.assert_allclose(p.lam_dec(beta[F], N, K), want, rtol=1e-14)
        np.testing.assert_allclose(local_gaps(beta[F], alpha, 3.0), reference_local_gaps(beta[F], alpha, 3.0),
                                   rtol=1e-15)
    # the middle of Chebyshev nodes is sparser than their ends: more smoothing there
    lam = p.lam_dec(beta, N, K)
    assert lam[K // 2] > 10 * lam[0] and lam[K // 2] > 10 * lam[-1]
    assert p.lam_dec(beta[[3, 7]], N, K) == 0.0
    assert p.is_local(K, N) and not LamPolicy(local=False).is_local(K, N)
    # custom alpha: lam_dec_at uses the points it is given
    a2 = np.array([-0.5, 0.0, 0.5])
    np.testing.assert_allclose(p.lam_dec_at(beta, a2, N, 3), LOCAL_C0 * reference_local_gaps(beta, a2, 16.0) ** 3)
    with pytest.raises(ValueError, match="read-only"):
        p.lam_dec(beta, N, K)[0] = 1.0  # memoised answers cannot be changed by a caller


@pytest.mark.parametrize("which", ["default", "calibrated", "global default", "global calibrated"])
def test_more_stragglers_never_less_smoothing(which, calibrated, calibrated_local, rng):
    """Removing answering workers (one more straggler at a time, in random
    order) never lowers lam_dec (at any alpha_k); neither does widening phi."""
    p = {"default": LamPolicy(), "calibrated": calibrated_local[1], "global default": LamPolicy(local=False),
         "global calibrated": calibrated[1]}[which]
    beta = LeTCC(K, N).beta
    for _ in range(30):
        order = rng.permutation(N)
        lams = []
        for S in range(N - 2):
            F = np.sort(order[S:])
            lams.append(lams_of(p, beta[F], N, K))
        assert all(np.all(b >= a) for a, b in zip(lams, lams[1:])), lams
        assert np.all(lams[-1] >= lams[0]) and np.any(lams[-1] > lams[0])
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
        assert p.lam_dec(beta[F], N, K) == pytest.approx(max(GapTableLam(t["edges"], t["lam"], t["end_k"]).psi(g), t["end_k"] * d ** 3), rel=1e-14)
    code = LeTCC(K, N, lam_dec=p)
    F = np.array([0, 2, 3, 4, 6, 7, 9, 11])
    Y = f(code.encode(np.random.default_rng(5).standard_normal((K, 6))))[F]
    code.decode(Y, F)
    assert code.last_lam_dec == p.lam_dec(code.beta[F], N, K)
    # pairs without a table fall back to the default formula (the local one)
    b4 = LeTCC(4, 10).beta[[0, 3, 5, 9]]
    np.testing.assert_array_equal(p.lam_dec(b4, 10, 4), LamPolicy().lam_dec(b4, 10, 4))


def test_local_calibration_picks_from_its_grids_and_letcc_uses_it(calibrated_local, rng):
    f, p = calibrated_local
    t = p.tables[(K, N)]
    assert t["local"] and p.is_local(K, N)
    assert any(t["c"] == pytest.approx(c) for c in 10.0 ** np.arange(-4.0, 0.01, 0.25))
    assert t["end_factor"] in (0.0, 4.0, 8.0, 16.0, 32.0)
    code = p.code(K, N)
    F = np.array([0, 2, 3, 4, 6, 7, 9, 11])
    Y = f(code.encode(rng.standard_normal((K, 6))))[F]
    est = code.decode(Y, F)
    want_lam = t["c"] * reference_local_gaps(code.beta[F], code.alpha, t["end_factor"]) ** 3
    np.testing.assert_allclose(code.last_lam_dec, want_lam, rtol=1e-14)
    assert p.end_k(K, N) == pytest.approx(t["c"] * t["end_factor"] ** 3)
    assert p.psi(0.3, K, N) == pytest.approx(t["c"] * 0.027)
    # independent reference: scipy's smoothing spline per alpha_k with its own lam
    from scipy.interpolate import make_smoothing_spline
    for k in range(K):
        s = make_smoothing_spline(code.beta[F], Y, lam=want_lam[k])
        np.testing.assert_allclose(est[k], s(code.alpha[k]), rtol=1e-6, atol=1e-9)


def test_local_calibration_is_reproducible_and_uses_the_grids_given(calibrated_local, rng):
    f, p = calibrated_local
    X = np.random.default_rng(1).standard_normal((60, 6))
    assert LamPolicy.calibrate(f, X, K, N, n_draws=8, seed=3, lam_grid=GRID, local=True).tables == p.tables
    q = LamPolicy.calibrate(f, X, K, N, n_draws=4, seed=3, lam_grid=GRID, c_grid=[1e-3], end_factor_grid=[4.0],
                            lam_enc_grid=[0.0, 1e-3], local=True)
    t = q.tables[(K, N)]
    assert (t["c"], t["end_factor"]) == (1e-3, 4.0) and t["lam_enc"] in (0.0, 1e-3)
    rep = q.report["6,12"]
    assert rep["local"] and rep["c_grid"] == [1e-3] and rep["end_factor_grid"] == [4.0]


def test_calibration_is_reproducible_from_its_seed(calibrated):
    f, p = calibrated
    X = np.random.default_rng(1).standard_normal((60, 6))
    again = LamPolicy.calibrate(f, X, K, N, n_draws=8, seed=3, lam_grid=GRID, local=False)
    assert again.tables == p.tables
    other = LamPolicy.calibrate(f, X, K, N, n_draws=8, seed=4, lam_grid=GRID, local=False)
    assert other.report["6,12"]["sets"] == p.report["6,12"]["sets"]
    sets3 = sets_by_count(None, N, 8, np.random.default_rng(3))
    sets4 = sets_by_count(None, N, 8, np.random.default_rng(4))
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
    assert json.loads(path.read_text())["format"] == "letcc.LamPolicy/2"


def test_default_calibration_keeps_the_kind_with_the_lower_cost(calibrated, calibrated_local):
    f = tiny_classifier()
    X = np.random.default_rng(1).standard_normal((60, 6))
    both = LamPolicy.calibrate(f, X, K, N, n_draws=8, seed=3, lam_grid=GRID)
    scores = {"local": calibrated_local[1].report["6,12"]["score"], "global": calibrated[1].report["6,12"]["score"]}
    assert both.report["6,12"]["chosen_from"] == pytest.approx(scores)
    winner = calibrated_local[1] if scores["local"] <= scores["global"] else calibrated[1]
    assert both.tables == winner.tables
    assert both.report["6,12"]["score"] == min(scores.values())


def test_local_policy_save_load_round_trip_and_format_1_loads_as_global(calibrated_local, tmp_path, rng):
    _, p = calibrated_local
    path = tmp_path / "local.json"
    p.save(path)
    q = LamPolicy.load(path)
    assert q == p and q.tables == p.tables and q.local
    beta = LeTCC(K, N).beta
    for _ in range(30):
        F = np.sort(rng.choice(N, rng.integers(3, N + 1), replace=False))
        np.testing.assert_array_equal(q.lam_dec(beta[F], N, K), p.lam_dec(beta[F], N, K))
    # a policy saved before local lams existed keeps meaning what it meant
    old = {"format": "letcc.LamPolicy/1", "target": "mse", "noise": "ignore",
           "default": {"c0": DEFAULT_C0, "end_factor": END_FACTOR, "lam_enc": 0.0},
           "tables": [{"K": K, "N": N, "edges": [-1.0, 0.0], "lam": [1e-3], "end_k": 0.3, "lam_enc": 0.0}]}
    o = LamPolicy.from_dict(old)
    assert not o.local and not o.is_local(K, N)
    F = np.array([0, 3, 5, 9, 11])
    assert o.lam_dec(beta[F], N, K) == pytest.approx(1e-3)
    assert o.lam_dec(LeTCC(4, 10).beta, 10, 4) == LamPolicy(local=False).lam_dec(LeTCC(4, 10).beta, 10, 4)


@pytest.mark.parametrize("which", ["local", "global"])
def test_calibrated_policy_beats_interpolation_and_bacc_at_the_largest_S(which, calibrated, calibrated_local):
    """On held-out inputs and fresh straggler sets, S = N / 2."""
    f, p = calibrated_local if which == "local" else calibrated
    X = np.random.default_rng(11).standard_normal((240, 6))
    batches = group_inputs(X, K)
    exact = exact_outputs(f, batches)
    let, bacc = LeTCC(K, N, lam_dec=0.0), BACC(K, N)
    out_l, out_b = coded_outputs(let, f, batches), coded_outputs(bacc, f, batches)
    r = np.random.default_rng(12)
    sets = [np.sort(r.choice(N, N - N // 2, replace=False)) for _ in range(30)]
    mse = decode_errors(let.beta, let.alpha, out_l, exact, sets,
                        lambda nodes: [p.lam_dec(nodes, N, K), 0.0])["mse"].mean(axis=0)
    mse_bacc = decode_errors(bacc.beta, bacc.alpha, out_b, exact, sets, lambda nodes: [0.0],
                             operator=lambda nodes, lam: berrut_matrix(nodes, bacc.alpha))["mse"].mean()
    assert mse[0] < mse[1]
    assert mse[0] < mse_bacc


@pytest.mark.parametrize("local", [False, True])
def test_relacc_target_needs_labels_and_favours_accuracy(local):
    f = tiny_classifier(2)
    X = np.random.default_rng(6).standard_normal((60, 6))
    with pytest.raises(ValueError, match="labels"):
        LamPolicy.calibrate(f, X, K, N, target="relacc", n_draws=4)
    labels = f(X).argmax(axis=1)
    grid = [0.0, 1e-4, 1e-1, 10.0]
    # local: few enough candidates that all of them are decoded exactly (the shortlist)
    kw = dict(local=local, lam_grid=grid, n_draws=6, seed=1, c_grid=[1e-3, 1e-2, 1e-1], end_factor_grid=[4.0, 16.0])
    pa = LamPolicy.calibrate(f, X, K, N, target="relacc", labels=labels, **kw)
    pm = LamPolicy.calibrate(f, X, K, N, target="mse", **kw)
    assert pa.target == "relacc" and pm.target == "mse"
    # each target is at least as good as the other on its own calibration score
    batches = group_inputs(X, K)
    exact = exact_outputs(f, batches)
    code = LeTCC(K, N, lam_dec=0.0)
    out = coded_outputs(code, f, batches)
    sets = [F for S, Fs in sorted(sets_by_count(None, N, 6, np.random.default_rng(1)).items()) for F in Fs]
    lab = group_labels(labels, K, batches.shape[1])
    e = decode_errors(code.beta, code.alpha, out, exact, sets,
                      lambda nd: [pa.lam_dec(nd, N, K), pm.lam_dec(nd, N, K)], labels=lab)
    assert e["acc"][:, 0].mean() >= e["acc"][:, 1].mean()


def test_straggler_models_and_lam_enc_grid(rng):
    f = tiny_classifier()
    X = rng.standard_normal((36, 6))
    p = LamPolicy.calibrate(f, X, K, N, stragglers=[FixedCount(3, worst_case=True), Bernoulli(0.3), 1],
                            n_draws=4, seed=0, lam_enc_grid=[0.0, 1e-3], end_k_grid=[0.0, 0.3], lam_grid=GRID,
                            local=False)
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
    batches = group_inputs(X, K)
    code = LeTCC(K, N, lam_dec=0.0)
    out, exact = coded_outputs(code, f, batches), exact_outputs(f, batches)
    labels = rng.integers(0, 5, size=(K, 3))
    sets = [np.sort(rng.choice(N, 8, replace=False)) for _ in range(3)]
    lams = [0.0, 1e-4, 0.3]
    got = decode_errors(code.beta, code.alpha, out, exact, sets, lambda nd: lams, labels=labels)
    for j, F in enumerate(sets):
        for i, lam in enumerate(lams):
            c = LeTCC(K, N, lam_dec=lam)
            est = np.stack([c.decode(out[F, b], F) for b in range(3)], axis=1)
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
    assert GapTableLam(t["edges"], t["lam"], t["end_k"]).psi(20.0) == pytest.approx(t["lam"][-1] * scale[0])
    _, merged, ones = _bins(phis, extrapolate=False)
    assert sum(m.sum() for m in merged) == 200 and np.all(ones == 1.0)


def test_calibrated_policy_is_near_the_per_S_optimum_on_its_calibration_sets(calibrated):
    """Replayed through the finished policy (table lookups and the phi^3
    rule beyond its edges), the calibration sets decode about as well as with
    the best constant lam per straggler count."""
    f, p = calibrated
    X = np.random.default_rng(1).standard_normal((60, 6))
    batches = group_inputs(X, K)
    exact = exact_outputs(f, batches)
    code = LeTCC(K, N, lam_dec=0.0)
    out = coded_outputs(code, f, batches)
    by_count = sets_by_count(None, N, 8, np.random.default_rng(3))
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
    from letcc.codes.lam_defaults import LocalGapLam, _MemoLam
    monkeypatch.setattr(_MemoLam, "MEMO_SIZE", 5)
    _, p = calibrated
    q = LamPolicy.from_dict(p.to_dict())
    beta = LeTCC(K, N).beta
    rule = q.rule(K, N)
    for _ in range(40):
        F = np.sort(rng.choice(N, rng.integers(1, N + 1), replace=False))
        first = q.lam_dec(beta[F], N, K)
        assert first == q.lam_dec(beta[F], N, K) == rule._rule(beta[F], chebyshev_first_kind(K))
        assert len(rule._memo) <= 5
    d = LamPolicy()
    for _ in range(40):
        F = np.sort(rng.choice(N, rng.integers(3, N + 1), replace=False))
        a = chebyshev_first_kind(K) * rng.uniform(0.5, 1.0)
        np.testing.assert_array_equal(d.lam_dec_at(beta[F], a, N, K), d.rule(K, N)._rule(beta[F], a))
        # the one formula: the same lams as the default policy's, from another class
        np.testing.assert_array_equal(d.lam_dec_at(beta[F], a, N, K), LocalGapLam().lam_dec_at(beta[F], a, N, K))


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
    with pytest.raises(ValueError, match="stragglers must be <= 11, got 12"):
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
    with pytest.raises(TypeError, match="local"):
        LamPolicy(local="yes")
    with pytest.raises(TypeError, match="local must be True, False or None"):
        LamPolicy.calibrate(f, X, K, N, local=1)
    with pytest.raises(ValueError, match="'c' and 'end_factor'"):
        LamPolicy({(K, N): {"local": True, "c": 1e-3}})
    with pytest.raises(ValueError, match="end_factor"):
        LamPolicy({(K, N): {"local": True, "c": 1e-3, "end_factor": -2.0}})
    with pytest.raises(ValueError, match="'local' must be"):
        LamPolicy({(K, N): {"local": "yes", "c": 1e-3, "end_factor": 2.0}})
    with pytest.raises(ValueError, match="c_grid"):
        LamPolicy.calibrate(f, X, K, N, c_grid=[], local=True)
    with pytest.raises(ValueError, match="c_grid\\[0\\]"):
        LamPolicy.calibrate(f, X, K, N, c_grid=[-1.0], local=True)
    with pytest.raises(ValueError, match="two lams > 0"):
        LamPolicy.calibrate(f, X, K, N, lam_grid=[0.0, 1e-3], local=True)


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
            np.testing.assert_allclose(DEFAULT_POLICY.lam_dec(b, N, 8), policy.lam_dec(b, N, 8), rtol=1e-12, atol=0)
            alpha = chebyshev_first_kind(8)
            np.testing.assert_allclose(DEFAULT_POLICY.lam_dec_at(b, alpha, N, 8), policy.lam_dec_at(b, alpha, N, 8),
                                       rtol=1e-12, atol=0)
    assert DEFAULT_POLICY.lam_enc(8, 16) == policy.lam_enc(8, 16)
