"""LeTCC against independent references (scipy's make_smoothing_spline, one
column at a time), its lam choices, and end-to-end behaviour."""
import numpy as np
import pytest
from scipy.interpolate import make_smoothing_spline

import letcc
from letcc.codes import BACC, GapScaledLam, LeTCC
from letcc.codes.lam_defaults import LocalGapLam, local_gaps
from letcc.evaluate import coded_outputs, decode_errors, exact_outputs, group_inputs
from letcc.splines import select_lam_gcv
from letcc.stragglers import FixedCount

TOL = {np.float64: 1e-9, np.float32: 2e-4}


def scipy_fit_eval(x, y, at, lam):
    """Column-by-column scipy reference for y of shape (n, ...). The smoothing
    spline is the natural spline: outside [x_0, x_-1] it continues as a
    straight line (scipy's BSpline would continue the end cubics instead)."""
    y2 = np.asarray(y, dtype=np.float64).reshape(y.shape[0], -1)
    at = np.asarray(at, dtype=np.float64)
    out = np.empty((len(at), y2.shape[1]))
    lo, hi = at < x[0], at > x[-1]
    for j in range(y2.shape[1]):
        s = make_smoothing_spline(x, y2[:, j], lam=lam)
        d = s.derivative()
        out[:, j] = s(at)
        out[lo, j] = s(x[0]) + d(x[0]) * (at[lo] - x[0])
        out[hi, j] = s(x[-1]) + d(x[-1]) * (at[hi] - x[-1])
    return out.reshape((len(at),) + y.shape[1:])


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("lam_enc", [0.0, 1e-4, 0.3])
def test_encode_matches_scipy(rng, dtype, lam_enc):
    K, N = 7, 19
    code = LeTCC(K, N, lam_enc=lam_enc)
    X = rng.standard_normal((K, 2, 3)).astype(dtype)
    got = code.encode(X)
    assert got.shape == (N, 2, 3) and got.dtype == dtype
    ref = scipy_fit_eval(code.alpha, X, code.beta, lam_enc)
    np.testing.assert_allclose(got, ref, rtol=TOL[dtype], atol=TOL[dtype])


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("lam_dec", [0.0, 2e-5, 0.05])
def test_decode_matches_scipy_for_shuffled_available(rng, dtype, lam_dec):
    K, N = 6, 20
    code = LeTCC(K, N, lam_dec=lam_dec)
    avail = rng.permutation(N)[:13]  # arrival order, not sorted
    Y = rng.standard_normal((avail.size, 4)).astype(dtype)
    got = code.decode(Y, avail)
    assert got.shape == (K, 4) and got.dtype == dtype
    order = np.argsort(avail)
    ref = scipy_fit_eval(code.beta[avail[order]], Y[order], code.alpha, lam_dec)
    np.testing.assert_allclose(got, ref, rtol=TOL[dtype], atol=TOL[dtype])
    assert code.last_lam_dec == lam_dec


def test_custom_nodes_are_used(rng):
    alpha = np.array([-0.9, -0.2, 0.1, 0.4, 0.8])
    beta = np.linspace(-1, 1, 11)
    code = LeTCC(5, 11, lam_enc=0.0, lam_dec=0.0, alpha=alpha, beta=beta)
    X = rng.standard_normal((5, 3))
    np.testing.assert_allclose(code.encode(X), scipy_fit_eval(alpha, X, beta, 0.0), atol=1e-10)
    np.testing.assert_array_equal(code.alpha, alpha)


def test_identity_decoding_recovers_inputs_better_as_n_grows(rng):
    K = 8
    X = rng.standard_normal((K, 5))
    errors = []
    for N in (16, 64, 256):
        code = LeTCC(K, N)
        errors.append(np.abs(code.decode(code.encode(X), np.arange(N)) - X).max())
    assert errors[0] < 0.2
    assert errors[1] < errors[0] / 20
    assert errors[2] < errors[1] / 20


def _mlp(rng):
    W1 = rng.standard_normal((3, 8))
    W2 = rng.standard_normal((8, 2)) / 3
    return lambda X: np.tanh(np.tanh(X @ W1) @ W2)


@pytest.mark.parametrize("K, N, S", [(5, 15, 2), (8, 24, 3), (8, 48, 6), (12, 36, 4), (6, 30, 10)])
def test_letcc_beats_bacc_on_a_smooth_function(rng, K, N, S):
    f = _mlp(rng)
    groups = group_inputs(rng.standard_normal((4 * K, 3)), K)
    exact = exact_outputs(f, groups)
    sets = FixedCount(S).draws(N, 8, seed=rng.integers(2**31))
    mse_letcc, mse_bacc = (decode_errors(c, coded_outputs(c, f, groups), exact, sets).mse.mean()
                           for c in (LeTCC(K, N), BACC(K, N)))
    assert mse_letcc < mse_bacc


@pytest.mark.parametrize("lam_dec", ["auto", 0.0, 1e-3, None])
def test_decode_from_one_two_three_workers(rng, lam_dec):
    K, N = 8, 16
    code = LeTCC(K, N, lam_dec=lam_dec)
    Y_all = rng.standard_normal((N, 3))
    for n in (1, 2, 3):
        avail = rng.choice(N, size=n, replace=False)
        est = code.decode(Y_all[avail], avail)
        assert est.shape == (K, 3) and np.isfinite(est).all()
        if n == 1:  # a constant through the only answer
            np.testing.assert_allclose(est, np.broadcast_to(Y_all[avail[0]], (K, 3)), atol=1e-12)
        if n == 2:  # the line through both answers
            b = code.beta[avail]
            slope = (Y_all[avail[1]] - Y_all[avail[0]]) / (b[1] - b[0])
            line = Y_all[avail[0]] + (code.alpha[:, None] - b[0]) * slope
            np.testing.assert_allclose(est, line, atol=1e-10)


def test_torch_in_torch_out(rng):
    torch = pytest.importorskip("torch")
    K, N = 6, 14
    code = LeTCC(K, N)
    for dtype in (torch.float32, torch.float64):
        X = torch.from_numpy(rng.standard_normal((K, 3, 4))).to(dtype)
        X_before = X.clone()
        Z = code.encode(X)
        assert isinstance(Z, torch.Tensor) and Z.dtype == dtype and Z.shape == (N, 3, 4)
        np.testing.assert_allclose(Z.numpy(), code.encode(X.numpy()), rtol=1e-6, atol=1e-6)
        assert torch.equal(X, X_before)
        avail = torch.tensor([9, 0, 4, 13, 7, 2, 11])
        Y = torch.sin(Z)[avail]
        est = code.decode(Y, avail)
        assert isinstance(est, torch.Tensor) and est.dtype == dtype and est.shape == (K, 3, 4)
        np.testing.assert_allclose(est.numpy(), code.decode(Y.numpy(), avail.numpy()), rtol=1e-6, atol=1e-6)


def test_integer_inputs_give_float64():
    code = LeTCC(5, 9)
    out = code.encode(np.arange(10).reshape(5, 2))
    assert out.dtype == np.float64


def test_default_lam_dec_is_local_gap_cubed():
    """One lam per alpha_k: 5.6e-3 * (the answering interval around alpha_k)^3."""
    code = LeTCC(8, 24)
    avail = np.array([0, 1, 2, 3, 8, 9, 10, 15, 20, 23])  # both end workers answer
    code.decode(np.zeros((avail.size, 2)), avail)
    b = code.beta[avail]
    h = [next(hi - lo for lo, hi in zip(b, b[1:]) if lo < a <= hi) for a in code.alpha]
    np.testing.assert_allclose(code.last_lam_dec, 5.6e-3 * np.array(h) ** 3, rtol=1e-12)
    assert code.lam_enc == 0.0
    assert repr(letcc.codes.lam_defaults.DEFAULT_POLICY) == "LocalGapLam(c_dec=0.0056, lam_enc=0.0, end_factor=16.0)"


def test_default_lam_dec_grows_near_a_missing_end():
    code = LeTCC(8, 24)
    code.decode(np.zeros((24, 2)), np.arange(24))
    full = code.last_lam_dec.copy()
    avail = np.arange(4, 24)  # workers 0..3 (the left end of [-1, 1]) are missing
    code.decode(np.zeros((avail.size, 2)), avail)
    b = code.beta[avail]
    lam = code.last_lam_dec
    # alpha_0 lies beyond the outermost answer: 16 times that distance, or the interval [-1, b_0]
    assert code.alpha[0] < b[0]
    assert lam[0] == pytest.approx(5.6e-3 * max(b[0] + 1.0, 16 * (b[0] - code.alpha[0])) ** 3, rel=1e-12)
    assert lam[0] > 100 * full[0]
    assert np.all(lam >= full) and np.array_equal(lam[4:], full[4:])  # far from the hole nothing changes


def test_default_lam_dec_shrinks_with_n():
    lams = []
    for N in (16, 64, 256):
        code = LeTCC(8, N)
        code.decode(np.zeros((N, 1)), np.arange(N))
        lams.append(code.last_lam_dec.max())
    assert lams[0] > 30 * lams[1] > 900 * lams[2] > 0


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_per_alpha_lams_match_scipy_row_by_row(rng, dtype):
    """A policy giving one lam per alpha_k: row k of the estimate is scipy's
    smoothing spline with lam_k, evaluated at alpha_k; numpy and torch alike."""
    torch = pytest.importorskip("torch")

    K, N = 7, 18
    lams = np.array([0.0, 1e-6, 1e-4, 1e-2, 1e-4, 1e-6, 0.3])
    code = LeTCC(K, N, lam_dec=lambda b, N_, K_: lams)
    avail = rng.permutation(N)[:12]
    Y = rng.standard_normal((avail.size, 3, 2)).astype(dtype)
    got = code.decode(Y, avail)
    assert got.shape == (K, 3, 2) and got.dtype == dtype
    order = np.argsort(avail)
    ref = np.stack([scipy_fit_eval(code.beta[avail[order]], Y[order], code.alpha[k:k + 1], lams[k])[0]
                    for k in range(K)])
    np.testing.assert_allclose(got, ref, rtol=TOL[dtype], atol=TOL[dtype])
    np.testing.assert_array_equal(code.last_lam_dec, lams)
    t = code.decode(torch.from_numpy(Y), torch.from_numpy(avail))
    assert isinstance(t, torch.Tensor) and t.dtype == torch.from_numpy(Y).dtype
    np.testing.assert_allclose(t.numpy(), got, rtol=TOL[dtype], atol=TOL[dtype])
    plan = code.decoder_plan(avail)
    assert isinstance(plan, letcc.splines.DenseOperator)
    np.testing.assert_allclose(plan.matrix() @ Y[order].reshape(12, -1).astype(np.float64),
                               ref.reshape(K, -1), rtol=1e-8, atol=1e-8)


def test_equal_per_alpha_lams_use_the_spline_plan_and_policies_see_alpha(rng):
    seen = []

    class AtPolicy:
        def lam_dec_at(self, b, alpha, N, K):
            seen.append(alpha.copy())
            return [2e-3] * K

        def lam_dec(self, b, N, K):  # not called: lam_dec_at is preferred
            raise AssertionError("lam_dec called")

    alpha = np.array([-0.7, -0.1, 0.4, 0.9])
    code = LeTCC(4, 9, lam_dec=AtPolicy(), alpha=alpha)
    Y = rng.standard_normal((9, 2))
    est = code.decode(Y, np.arange(9))
    np.testing.assert_array_equal(seen[-1], alpha)
    assert code.last_lam_dec == 2e-3 and isinstance(code.decoder_plan(np.arange(9)), letcc.SplineSmoother)
    np.testing.assert_allclose(est, LeTCC(4, 9, lam_dec=2e-3, alpha=alpha).decode(Y, np.arange(9)), atol=1e-12)


def test_local_gap_lam_is_monotone_in_stragglers(rng):
    p = LocalGapLam()
    beta, alpha = LeTCC(8, 20).beta, LeTCC(8, 20).alpha
    for _ in range(20):
        order = rng.permutation(20)
        prev = None
        for S in range(17):
            lam = np.asarray(p.lam_dec_at(beta[np.sort(order[S:])], alpha, 20, 8))
            assert prev is None or np.all(lam >= prev)
            prev = lam
    assert p.lam_dec_at(beta[[2, 9]], alpha, 20, 8) == 0.0
    np.testing.assert_array_equal(p.lam_dec(beta, 20, 8), p.lam_dec_at(beta, alpha, 20, 8))
    np.testing.assert_allclose(local_gaps(np.array([-0.5, 0.0, 0.5]), np.array([-0.9, -0.2, 0.2, 0.6]), 2.0),
                               [max(0.5, 0.8), 0.5, 0.5, max(0.5, 0.2)])


def test_bad_per_alpha_lams_raise():
    Y = np.zeros((6, 1))
    with pytest.raises(ValueError, match="one lam per alpha"):
        LeTCC(5, 10, lam_dec=lambda b, N, K: [1e-3, 1e-3]).decode(Y, np.arange(6))
    with pytest.raises(ValueError, match="policy returned"):
        LeTCC(5, 10, lam_dec=lambda b, N, K: [1e-3, -1.0, 0.0, 0.0, 0.0]).decode(Y, np.arange(6))
    with pytest.raises(ValueError, match="policy returned"):
        LeTCC(5, 10, lam_dec=lambda b, N, K: np.array([1e-3, np.nan, 0.0, 0.0, 0.0])).decode(Y, np.arange(6))


def test_gcv_per_call(rng):
    K, N = 6, 30
    code = LeTCC(K, N, lam_dec=None)
    avail = rng.permutation(N)[:25]
    Y = np.sin(3 * code.beta[avail])[:, None] + 0.1 * rng.standard_normal((25, 2))
    est = code.decode(Y, avail)
    order = np.argsort(avail)
    lam = select_lam_gcv(code.beta[avail[order]], np.ones(25), np.ascontiguousarray(Y[order]))
    assert code.last_lam_dec == pytest.approx(lam, rel=1e-12) and lam > 0
    np.testing.assert_allclose(est, LeTCC(K, N, lam_dec=lam).decode(Y, avail), atol=1e-12)
    assert LeTCC(K, N, lam_dec="gcv").decode(Y, avail) == pytest.approx(est)


class RecordingPolicy:
    def __init__(self, dec=1e-3, enc=2e-4):
        self.dec, self.enc, self.calls = dec, enc, []

    def lam_dec(self, beta_available, N, K):
        self.calls.append((beta_available.copy(), N, K))
        return self.dec

    def lam_enc(self, K, N):
        return self.enc


def test_policy_object_sets_both_lams(rng):
    pol = RecordingPolicy()
    code = LeTCC(6, 12, lam_dec=pol)
    assert code.lam_enc == 2e-4
    avail = np.array([5, 1, 9, 3, 11])
    Y = rng.standard_normal((5, 2))
    est = code.decode(Y, avail)
    b, N, K = pol.calls[-1]
    np.testing.assert_array_equal(b, code.beta[np.sort(avail)])
    assert (N, K) == (12, 6)
    np.testing.assert_allclose(est, LeTCC(6, 12, lam_dec=1e-3).decode(Y, avail), atol=1e-12)
    # An explicit lam_enc wins over the policy's.
    assert LeTCC(6, 12, lam_enc=0.0, lam_dec=pol).lam_enc == 0.0


def test_callables_and_a_policy_returning_none(rng):
    code = LeTCC(5, 10, lam_enc=lambda K, N: 1e-5 * K / N, lam_dec=lambda b, N, K: 0.01)
    assert code.lam_enc == pytest.approx(5e-6)
    code.decode(rng.standard_normal((6, 1)), np.arange(6))
    assert code.last_lam_dec == 0.01
    gcv = LeTCC(5, 10, lam_dec=lambda b, N, K: None)
    Y = rng.standard_normal((10, 2))
    np.testing.assert_allclose(gcv.decode(Y, np.arange(10)), LeTCC(5, 10, lam_dec=None).decode(Y, np.arange(10)))


def test_policy_whose_answer_changes_gets_a_fresh_plan(rng):
    pol = RecordingPolicy(dec=0.0)
    code = LeTCC(5, 10, lam_dec=pol)
    Y = rng.standard_normal((10, 1))
    a = code.decode(Y, np.arange(10))
    pol.dec = 1.0
    b = code.decode(Y, np.arange(10))
    np.testing.assert_allclose(b, LeTCC(5, 10, lam_dec=1.0).decode(Y, np.arange(10)))
    assert not np.allclose(a, b)


def test_plans_are_cached_per_available_set(rng):
    code = LeTCC(5, 12, plan_cache_size=2)
    Y = rng.standard_normal((12, 3))
    sets = [np.array([0, 2, 5, 7, 11]), np.array([11, 7, 5, 2, 0]), np.array([1, 2, 3]), np.arange(12)]
    for s in sets:
        code.decode(Y[s], s)
    cache = code._decoders
    assert cache.hits == 1 and cache.misses == 3 and len(cache) == 2
    code.decoder_plan(sets[3])
    assert cache.hits == 2


def test_lam_values_follow_the_protocol():
    assert GapScaledLam().lam_dec(np.array([0.0, 1.0]), 2, 2) == 0.0
    assert GapScaledLam(c_dec=1.0, end_factor=0.0).lam_dec(np.array([-1.0, 0.0, 0.5]), 3, 2) == 1.0
    # the right end is 0.5 away from 1: phi = max(1, 8 * 0.5) = 4
    assert GapScaledLam(c_dec=1.0).lam_dec(np.array([-1.0, 0.0, 0.5]), 3, 2) == 64.0
    assert letcc.LeTCC is LeTCC


def test_can_decode_and_is_complete():
    code = LeTCC(4, 6)
    assert code.can_decode([3]) and not code.can_decode([])
    assert code.is_complete(range(6)) and not code.is_complete([0, 1, 2, 3, 4])
