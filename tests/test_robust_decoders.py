"""Decoders that survive wrong answers (letcc.codes.robust): ApproxIFER's
Berlekamp-Welch BACC and LeTCC's spline locator, each against references
written here (dense float64 linear algebra, the formulas themselves)."""
import numpy as np
import pytest

from letcc.codes import BACC, LeTCC, berrut_matrix
from letcc.codes.robust import DetectionSplines, bw_locator_values, invalid_rows, locator_scores
from letcc.splines.gcv import lam_scale


def smooth(z):
    return np.stack([np.cos(2 * z), 1.0 / (2.0 - z), z ** 3 - z, np.exp(z)], axis=1)


# ------------------------------------------------------------ Berlekamp-Welch

def _direct_bw(z, y, K, E):
    """The real Berlekamp-Welch system solved directly: unknowns P_0..P_{d-1},
    Q_1..Q_{d-1} (Q_0 = 1), d = K + E, equations P(z_i) - y_i Q(z_i) = 0,
    dense least squares (numpy lstsq on the unscaled system)."""
    d = K + E
    A = np.hstack([z[:, None] ** np.arange(d), -y[:, None] * z[:, None] ** np.arange(1, d)])
    coef = np.linalg.lstsq(A, y, rcond=None)[0]
    q = np.concatenate([[1.0], coef[d:]])
    return np.abs(np.polynomial.polynomial.polyval(z, q))


@pytest.mark.parametrize("E", [1, 2, 3])
def test_bw_locator_finds_planted_errors_exactly_on_a_rational_function(E, rng):
    K = 4
    n = 2 * K + 2 * E - 1
    z = np.sort(rng.uniform(-1, 1, n))
    # a ratio of degree-(K-1) polynomials: what the BW system models exactly
    p = rng.standard_normal(K)
    q = np.concatenate([[2.0], 0.3 * rng.standard_normal(K - 1)])
    y = np.polynomial.polynomial.polyval(z, p) / np.polynomial.polynomial.polyval(z, q)
    bad = np.sort(rng.choice(n, E, replace=False))
    yc = y.copy()
    yc[bad] += rng.choice([-1.0, 1.0], E) * (1.0 + rng.random(E))
    mine = bw_locator_values(z, yc[:, None], K, E)[0]
    ref = _direct_bw(z, yc, K, E)
    np.testing.assert_allclose(mine, ref, rtol=1e-6, atol=1e-7 * ref.max())
    # Q = q * Lambda vanishes at the planted errors and nowhere else
    np.testing.assert_array_equal(np.sort(np.argsort(mine)[:E]), bad)
    assert mine[bad].max() < 1e-8 * mine.max()


@pytest.mark.parametrize("E", [1, 2])
def test_bw_bacc_flags_planted_errors_on_a_smooth_function_and_berrut_decodes_the_rest(E, rng):
    K, N = 4, 30
    code = BACC(K, N, adversaries=E)
    F = np.sort(rng.choice(N, 26, replace=False))
    Y = smooth(code.beta[F])
    bad = np.sort(rng.choice(F, E, replace=False))
    Yc = Y.copy()
    Yc[np.isin(F, bad)] = -Yc[np.isin(F, bad)] + 3.0
    est, flagged = code.decode(Yc, F, return_flagged=True)
    np.testing.assert_array_equal(flagged, bad)
    keep = np.setdiff1d(F, bad)
    ref = berrut_matrix(code.beta[keep], code.alpha) @ smooth(code.beta[keep])
    np.testing.assert_allclose(est, ref, rtol=1e-12, atol=1e-12)
    # listed out of order: the same flags and estimate
    perm = rng.permutation(F.size)
    est2, flagged2 = code.decode(Yc[perm], F[perm], return_flagged=True)
    np.testing.assert_array_equal(flagged2, bad)
    np.testing.assert_allclose(est2, est, rtol=1e-12, atol=1e-14)


def test_bw_bacc_needs_2K_plus_2E_minus_1_answers():
    code = BACC(4, 12, adversaries=2)
    assert code.can_decode(range(11)) and not code.can_decode(range(10))
    with pytest.raises(ValueError, match="needs 2K \\+ 2E - 1 = 11 answers.*got 10"):
        code.decode(np.zeros((10, 3)), np.arange(10))
    with pytest.raises(ValueError, match="adversaries = 3"):
        BACC(4, 12, adversaries=3)        # 2K + 2E - 1 = 13 > N


# ------------------------------------------------------------ spline locator

def test_loo_scores_equal_refits_without_each_point(rng):
    """(y_i - (Hy)_i) / (1 - H_ii) is the residual of the spline fitted
    without point i (scipy's make_smoothing_spline as the reference).
    tests/test_robust_locator_scores.py checks the rest of the scores."""
    from scipy.interpolate import make_smoothing_spline

    b = np.sort(rng.uniform(-1, 1, 15))
    Y = smooth(b) + 0.05 * rng.standard_normal((15, 4))
    lam = lam_scale(b, np.ones(15))
    _, s = locator_scores(DetectionSplines(), b, Y)
    ref = np.zeros(15)
    for i in range(15):
        keep = np.delete(np.arange(15), i)
        for j in range(4):
            g = make_smoothing_spline(b[keep], Y[keep, j], lam=lam)
            # the minimiser continues linearly beyond its outermost knots (scipy's BSpline would not)
            edge = min(max(b[i], b[keep][0]), b[keep][-1])
            pred = g(edge) + g.derivative()(edge) * (b[i] - edge)
            ref[i] += (Y[i, j] - pred) ** 2
    np.testing.assert_allclose(s, ref, rtol=1e-7)


def _classifier_like(beta, rng, classes=4):
    """One-hot outputs that change class every few nodes, with blends at the
    changes: what a classifier's coded outputs look like."""
    n = beta.shape[0]
    labels = np.repeat(rng.permutation(np.tile(np.arange(classes), 10))[: n // 3 + 1], 3)[:n]
    P = np.eye(classes)[labels]
    for i in range(2, n - 1, 3):                      # a blend at every other class change
        P[i] = 0.5 * (P[i - 1] + P[i + 1])
    return P


def test_spline_locator_does_not_take_an_honest_class_change_for_a_wrong_answer(rng):
    """An honest answer at a class change agrees with one of its neighbours,
    a sign-flipped one with none of them (the agreement score); the plain
    leave-one-out score alone flags class changes too (kept as the reason)."""
    K, N = 6, 30
    code = LeTCC(K, N, adversaries=1)
    hits = loo_hits = 0
    for trial in range(40):
        P = _classifier_like(code.beta, rng)
        bad = int(rng.integers(N))
        Pc = P.copy()
        Pc[bad] = -Pc[bad]
        _, flagged = code.decode(Pc, np.arange(N), return_flagged=True)
        hits += flagged.tolist() == [bad]
        loo = locator_scores(DetectionSplines(), -np.arccos(code.beta), Pc)[1]
        loo_hits += int(np.argmax(loo)) == bad
    assert hits == 40
    assert loo_hits < 40


@pytest.mark.parametrize("E", [1, 2, 3])
def test_robust_letcc_flags_planted_wrong_answers_and_stays_close_to_the_honest_estimate(E, rng):
    K, N = 6, 40
    code = LeTCC(K, N, adversaries=E)
    plain = LeTCC(K, N)
    F = np.sort(rng.choice(N, 36, replace=False))
    Y = smooth(code.beta[F])
    bad = np.sort(rng.choice(F, E, replace=False))
    Yc = Y.copy()
    Yc[np.isin(F, bad)] = -Yc[np.isin(F, bad)]
    est, flagged = code.decode(Yc, F, return_flagged=True)
    np.testing.assert_array_equal(flagged, bad)
    # after erasing: exactly the plain decoder on the honest rest
    keep = np.setdiff1d(F, bad)
    np.testing.assert_array_equal(est, plain.decode(Y[np.isin(F, keep)], keep))
    honest = plain.decode(Y, F)
    truth = smooth(code.alpha)
    assert np.abs(est - honest).max() < 1e-3
    assert np.abs(plain.decode(Yc, F) - truth).max() > 100 * np.abs(est - truth).max()


def test_robust_letcc_with_separated_colluders(rng):
    K, N = 6, 40
    code = LeTCC(K, N, adversaries=2)
    Y = smooth(code.beta)
    Yc = Y.copy()
    Yc[[8, 25]] = np.array([0.5, -0.5, 1.0, 0.0])
    _, flagged = code.decode(Yc, np.arange(N), return_flagged=True)
    np.testing.assert_array_equal(flagged, [8, 25])


def test_robust_letcc_with_adjacent_colluders(rng):
    """Two equal wrong answers side by side: each is the other's nearest
    answer, but neither has a whole side that agrees with it (the side test)."""
    K, N = 6, 40
    code = LeTCC(K, N, adversaries=2)
    F = np.arange(N)
    Y = smooth(code.beta)
    Yc = Y.copy()
    Yc[[17, 18]] = np.array([0.5, -0.5, 1.0, 0.0])
    _, flagged = code.decode(Yc, F, return_flagged=True)
    np.testing.assert_array_equal(flagged, [17, 18])


def test_adversaries_zero_is_todays_decoder_bit_for_bit(rng):
    for kw in ({}, {"lam_dec": 1e-4}, {"lam_dec": "gcv"}):
        a, b = LeTCC(5, 14, **kw), LeTCC(5, 14, adversaries=0, **kw)
        assert b.linear_in_outputs == a.linear_in_outputs
        Y = rng.standard_normal((11, 3, 7))
        F = rng.permutation(14)[:11]
        est, flagged = b.decode(Y, F, return_flagged=True)
        np.testing.assert_array_equal(est, a.decode(Y, F))
        assert flagged.size == 0 and flagged.dtype == np.int64
    a, b = BACC(5, 14), BACC(5, 14, adversaries=0)
    Y = rng.standard_normal((9, 4))
    np.testing.assert_array_equal(a.decode(Y, range(9)), b.decode(Y, range(9)))
    assert LeTCC(5, 14, adversaries=1).linear_in_outputs is False and BACC(5, 14, adversaries=1).linear_in_outputs is False


def test_flag_threshold_keeps_every_answer_of_a_clean_round(rng):
    K, N = 6, 40
    code = LeTCC(K, N, adversaries=2, flag_threshold=10.0)
    Y = smooth(code.beta) + 0.01 * rng.standard_normal((N, 4))     # noise: scores alike everywhere
    est, flagged = code.decode(Y, np.arange(N), return_flagged=True)
    assert flagged.size == 0
    np.testing.assert_array_equal(est, LeTCC(K, N).decode(Y, np.arange(N)))
    Yc = Y.copy()
    Yc[9] = -Yc[9]
    _, flagged = code.decode(Yc, np.arange(N), return_flagged=True)
    np.testing.assert_array_equal(flagged, [9])


def test_flag_threshold_inf_turns_the_spline_locator_off(rng):
    code = LeTCC(6, 30, adversaries=2, flag_threshold=float("inf"))
    Y = smooth(code.beta)
    Y[4] = -Y[4]
    est, flagged = code.decode(Y, np.arange(30), return_flagged=True)
    assert flagged.size == 0
    np.testing.assert_array_equal(est, LeTCC(6, 30).decode(Y, np.arange(30)))


# ------------------------------------------------------------ answers that cannot be right

def _probabilities(n, rng, classes=5, vectors=2):
    return rng.dirichlet(np.ones(classes), size=(n, vectors))


def test_invalid_rows_simplex_against_the_definition(rng):
    P = _probabilities(10, rng)
    P[1, 0] = -P[1, 0]                                    # a negative class vector
    P[3, 1, 2] += 0.01                                    # sums to 1.01
    P[5, 0, 0] = np.nan
    P[7, 1, 1] += 5e-4                                    # within the 1e-3 tolerance
    P[7, 1, 2] -= 5e-4
    ref = np.array([not (np.all(np.isfinite(p)) and p.min() >= -1e-3 and np.abs(p.sum(-1) - 1).max() <= 1e-3)
                    for p in P])
    np.testing.assert_array_equal(ref, np.isin(np.arange(10), [1, 3, 5]))
    np.testing.assert_array_equal(invalid_rows(P, P.reshape(10, -1), "simplex"), ref)
    P32 = P.astype(np.float32)
    np.testing.assert_array_equal(invalid_rows(P32, P32.reshape(10, -1), "simplex"), ref)
    flat = rng.dirichlet(np.ones(4), size=6)              # 2-D: each row one class vector
    flat[2] *= 2
    np.testing.assert_array_equal(invalid_rows(flat, flat, "simplex"), np.arange(6) == 2)


@pytest.mark.parametrize("cls", [LeTCC, BACC])
def test_valid_simplex_erases_every_invalid_answer_then_locates_the_rest(cls, rng):
    K, N = 4, 30
    # the robust decoder's plain decode is the plain default's (for LeTCC: the log space of probabilities)
    code, plain = cls(K, N, adversaries=3, valid="simplex"), cls(K, N)
    F = np.sort(rng.choice(N, 27, replace=False))
    P = _probabilities(27, rng)
    bad = np.sort(rng.choice(27, 2, replace=False))
    Pc = P.copy()
    Pc[bad] = -Pc[bad]
    est, flagged = code.decode(Pc, F, return_flagged=True)
    # both flagged; the locator then erases at most one more answer (3 - 2)
    assert np.isin(F[bad], flagged).all() and flagged.size <= 3 and np.all(np.diff(flagged) > 0)
    keep = np.setdiff1d(F, flagged)
    np.testing.assert_array_equal(est, plain.decode(P[np.isin(F, keep)], keep))
    # locator off: exactly the invalid ones
    if cls is LeTCC:
        off = LeTCC(K, N, adversaries=3, valid="simplex", flag_threshold=float("inf"))
        est, flagged = off.decode(Pc, F, return_flagged=True)
        np.testing.assert_array_equal(flagged, F[bad])
        keep = np.delete(F, bad)
        np.testing.assert_array_equal(est, plain.decode(np.delete(P, bad, axis=0), keep))
    # more invalid answers than E: all of them erased
    Pc[:5] = 2.0
    _, flagged = code.decode(Pc, F, return_flagged=True)
    assert np.isin(F[:5], flagged).all()
    with pytest.raises(ValueError, match="every answer .* fails valid='simplex'"):
        code.decode(-P, F)


def test_valid_callable_and_bad_values(rng):
    code = LeTCC(4, 20, adversaries=2, valid=lambda Y: np.asarray(Y)[:, 0] < 10, flag_threshold=float("inf"))
    Y = smooth(code.beta)
    Y[[3, 11], 0] = 50.0
    _, flagged = code.decode(Y, np.arange(20), return_flagged=True)
    np.testing.assert_array_equal(flagged, [3, 11])
    with pytest.raises(ValueError, match="one boolean per answer"):
        LeTCC(4, 20, adversaries=1, valid=lambda Y: np.ones(3, bool)).decode(Y, np.arange(20))
    for cls in (LeTCC, BACC):
        with pytest.raises(ValueError, match="'probabilities'"):
            cls(4, 20, adversaries=1, valid="probabilities")


def test_log_space_with_adversaries_rejects_what_is_not_a_probability(rng):
    code = LeTCC(4, 20, adversaries=2, output_space="log")
    assert code.valid == "auto"          # the default: the probability check on probability answers
    P = rng.dirichlet(np.ones(5), size=20)
    Pc = P.copy()
    Pc[[2, 9]] = -Pc[[2, 9]]                              # to_log alone would raise on these
    est, flagged = code.decode(Pc, np.arange(20), return_flagged=True)
    np.testing.assert_array_equal(flagged, [2, 9])
    keep = np.setdiff1d(np.arange(20), [2, 9])
    np.testing.assert_allclose(est, LeTCC(4, 20, output_space="log").decode(P[keep], keep), rtol=1e-12, atol=1e-15)


def test_few_answers_degrade_as_documented(rng):
    code = LeTCC(4, 10, adversaries=2, false_alarm=None)     # no clean-round test: E erasures when it can
    plain = LeTCC(4, 10)
    Y = rng.standard_normal((4, 3))
    est, flagged = code.decode(Y, [0, 3, 5, 9], return_flagged=True)     # 4 answers: at most 1 erased
    assert flagged.size == 1
    Y = rng.standard_normal((3, 3))
    est, flagged = code.decode(Y, [0, 5, 9], return_flagged=True)        # 3 answers: none erased
    assert flagged.size == 0
    np.testing.assert_array_equal(est, plain.decode(Y, [0, 5, 9]))


def test_torch_in_torch_out(rng):
    torch = pytest.importorskip("torch")
    for code in (LeTCC(4, 20, adversaries=1), BACC(4, 20, adversaries=1)):
        Y = smooth(code.beta)
        Y[7] = -Y[7]
        est_np, fl_np = code.decode(Y, np.arange(20), return_flagged=True)
        est, fl = code.decode(torch.as_tensor(Y), torch.arange(20), return_flagged=True)
        assert isinstance(est, torch.Tensor) and est.dtype == torch.float64
        np.testing.assert_array_equal(fl, fl_np)
        np.testing.assert_allclose(est.numpy(), est_np, rtol=1e-12, atol=1e-14)
        est32, _ = code.decode(torch.as_tensor(Y, dtype=torch.float32), list(range(20)), return_flagged=True)
        assert est32.dtype == torch.float32


@pytest.mark.parametrize("bad", [-1, 2.5, "two", True, 99])
def test_bad_adversaries_values_raise_value_error_naming_the_value(bad):
    for cls in (LeTCC, BACC):
        with pytest.raises(ValueError, match=repr(bad).replace("(", "\\(")):
            cls(4, 20, adversaries=bad)
    with pytest.raises(ValueError, match="flag_threshold"):
        LeTCC(4, 20, adversaries=1, flag_threshold=0.0)
