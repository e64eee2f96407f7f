"""The spline locator's compiled scores (letcc._core.locator_scores, csrc/locator.hpp)
and spline_locate on them, against references written here: the detection
spline's dense hat matrix H (SplineSmoother(...).matrix(), checked against
scipy's make_smoothing_spline below), residuals R = Y - H Y, the scores'
formulas on dense float64 arrays, and the locator's steps (score, test,
erase the top answer, rescore the rest with the spline of the answers kept)
written out with them."""
from __future__ import annotations

import numpy as np
import pytest

from letcc import _core
from letcc.codes import LeTCC
from letcc.codes.clean_round import calibrate
from letcc.codes.robust import DetectionSplines, detection_knots, locator_scores, spline_locate
from letcc.splines import SplineSmoother
from letcc.splines.gcv import lam_scale


# ------------------------------------------------------------------ the reference

_HATS: dict = {}


def dense_hat(knots, lam=None):
    """The detection spline's hat matrix at its knots (lam None: lam_scale of the knots)."""
    key = (knots.tobytes(), lam)
    if key not in _HATS:
        lam_k = lam_scale(knots, np.ones(knots.shape[0])) if lam is None else lam
        _HATS[key] = SplineSmoother(knots, knots, lam=lam_k, method="dense").matrix()
    return _HATS[key]


def ref_scores(knots, Y, lam=None):
    """(s, loo, d1, d2) from dense float64 formulas: loo_i = ||(Y - H Y)_i||^2 /
    (1 - H_ii)^2; agreement_i = max(nn_i, side_i / 4) with nn the nearest of
    the 2 answers on either side and side the better side's farther answer
    (a side with fewer than 2 answers does not count, none: nn alone);
    s = min(loo, agreement)."""
    n = knots.shape[0]
    Y = np.asarray(Y, dtype=np.float64)
    H = dense_hat(knots, lam)
    R = Y - H @ Y
    loo = (R * R).sum(axis=1) / (1.0 - np.diag(H)) ** 2

    def d(i, j):
        return float(((Y[i] - Y[j]) ** 2).sum())

    agree = np.empty(n)
    for i in range(n):
        nn = min([d(i, j) for j in range(max(0, i - 2), min(n, i + 3)) if j != i], default=np.inf)
        sides = [max(d(i, i - 1), d(i, i - 2))] if i >= 2 else []
        sides += [max(d(i, i + 1), d(i, i + 2))] if i + 2 < n else []
        agree[i] = max(nn, 0.25 * min(sides)) if sides else nn
    d1 = np.array([d(i, i + 1) for i in range(n - 1)])
    d2 = np.array([d(i, i + 2) for i in range(n - 2)])
    return np.minimum(loo, agree), loo, d1, d2


def ref_locate(knots, Y, E, ratio=None):
    """spline_locate's steps on the dense reference: (erased positions,
    first step's report). Every step refits the answers kept with the
    first step's lam (the round's detection spline)."""
    n = knots.shape[0]
    keep = list(range(n))
    erased, report = [], {}
    lam = lam_scale(knots, np.ones(n))
    suspect = False
    for _ in range(min(E, n - 3)):
        t = knots[keep]
        s, loo, _, _ = ref_scores(t, Y[keep], lam)
        if ratio is not None:
            s = np.where(near_enough(t), s, 0.0)
        i = int(np.argmax(s))
        stat = 0.0 if s.max() <= 0 else (s.max() / np.median(loo) if np.median(loo) > 0 else np.inf)
        r = None if ratio is None else (ratio(len(keep)) if callable(ratio) else ratio)
        if not erased:
            report = {"top": keep[i], "statistic": stat, "threshold": r}
        if r is not None and not stat > r:
            break
        if r is not None and len(erased) + 1 == min(E, n - 3):     # the last erasure: another one above r?
            others = np.delete(s, i)
            suspect = others.max() > 0 and others.max() / np.median(loo) > r
        erased.append(keep.pop(i))
    if ratio is not None and erased and len(erased) == min(E, n - 3) and suspect:
        erased = ref_swap(knots, Y, erased, ratio, lam, near_enough)
    return erased, report


def near_enough(t):
    """The erasable answers, written out: a neighbour within 2.5 median gaps."""
    gaps = np.diff(t)
    near = np.minimum(np.r_[np.inf, gaps], np.r_[gaps, np.inf])
    return near <= 2.5 * np.median(gaps)


def ref_swap(knots, Y, erased, ratio, lam, erasable_at):
    """spline_locate's swap step on the dense references: while the answers
    kept fail the test, give back the erased answer whose return (for the
    top-scored one kept) leaves the smallest statistic, if that rest passes."""
    n = knots.shape[0]

    def rest_stat(out):
        keep = [k for k in range(n) if k not in out]
        s, loo, _, _ = ref_scores(knots[keep], Y[keep], lam)
        s = np.where(erasable_at(knots[keep]), s, 0.0)
        med = np.median(loo)
        return (0.0 if s.max() <= 0 else (s.max() / med if med > 0 else np.inf)), keep[int(np.argmax(s))]

    for _ in range(len(erased)):
        stat, k = rest_stat(erased)
        r = ratio(n - len(erased)) if callable(ratio) else ratio
        if not stat > r:
            break
        options = [[x for x in erased if x != e] + [k] for e in erased]
        stats = [rest_stat(o)[0] for o in options]
        best = int(np.argmin(stats))
        if not (stats[best] < stat and stats[best] <= r):
            break
        erased = options[best]
    return erased


def random_knots(rng, n):
    return np.sort(rng.uniform(-np.pi, 0.0, n)) if n > 1 else np.array([-1.0])


def answers(rng, knots, m, noise=0.05, bad=()):
    """Smooth answers along the knots plus noise; rows `bad` replaced."""
    f = rng.standard_normal((3, m))
    Y = np.cos(np.outer(knots, [1.0, 2.0, 3.0])) @ f + noise * rng.standard_normal((knots.shape[0], m))
    for i in bad:
        Y[i] = rng.standard_normal(m) * 3.0
    return Y


# ------------------------------------------------------------------ the compiled scores

def test_the_dense_reference_hat_matrix_is_scipys_smoothing_spline(rng):
    from scipy.interpolate import make_smoothing_spline

    t = random_knots(rng, 9)
    y = rng.standard_normal(9)
    lam = lam_scale(t, np.ones(9))
    np.testing.assert_allclose(dense_hat(t) @ y, make_smoothing_spline(t, y, lam=lam)(t), rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("n", [4, 5, 9, 22, 64])
@pytest.mark.parametrize("m", [1, 7, 1000, 4099])
def test_scores_against_the_dense_reference_every_element(n, m, rng):
    t = random_knots(rng, n)
    Y = answers(rng, t, m, bad=[n // 3])
    s_ref, loo_ref, _, _ = ref_scores(t, Y)
    s, loo = locator_scores(DetectionSplines(), t, Y)
    assert s.shape == loo.shape == (n,) and s.dtype == loo.dtype == np.float64
    np.testing.assert_allclose(loo, loo_ref, rtol=1e-9, atol=1e-12 * loo_ref.max())
    np.testing.assert_allclose(s, s_ref, rtol=1e-9, atol=1e-12 * loo_ref.max())
    # float32 answers: scored in float64 from the float32 values
    Y32 = Y.astype(np.float32)
    s_ref32, loo_ref32, _, _ = ref_scores(t, Y32.astype(np.float64))
    s32, loo32 = locator_scores(DetectionSplines(), t, Y32)
    np.testing.assert_allclose(loo32, loo_ref32, rtol=1e-9, atol=1e-12 * loo_ref32.max())
    np.testing.assert_allclose(s32, s_ref32, rtol=1e-9, atol=1e-12 * loo_ref32.max())


def test_every_kernel_build_gives_the_reference_scores(kernel_isa, rng):
    """The compiled pass in each instruction-set build this CPU runs
    (letcc._core.set_kernel_isa), float32 and float64."""
    for n, m in ((5, 13), (22, 1000), (64, 4099)):
        t = random_knots(rng, n)
        Y = answers(rng, t, m, bad=[1])
        for dtype in (np.float64, np.float32):
            Yd = Y.astype(dtype)
            s_ref, loo_ref, _, _ = ref_scores(t, Yd.astype(np.float64))
            s, loo = locator_scores(DetectionSplines(), t, Yd)
            np.testing.assert_allclose(loo, loo_ref, rtol=1e-9, atol=1e-12 * loo_ref.max())
            np.testing.assert_allclose(s, s_ref, rtol=1e-9, atol=1e-12 * loo_ref.max())


@pytest.mark.parametrize("n", [2, 3, 4, 9])
def test_neighbour_distances_against_the_direct_formulas(n, rng):
    """With 1 - H_ii tiny, loo is huge and s is the agreement score alone:
    nearest of the 2 answers on either side, the better side's farther one / 4."""
    t = random_knots(rng, n)
    Y = rng.standard_normal((n, 6))
    Y[n // 2] = Y[n // 2 - 1]                      # two equal answers side by side
    plan = DetectionSplines().get(t)[0]
    s, loo = _core.locator_scores(plan, Y, np.full(n, 1e-100))     # loo huge (but 0 where H fits exactly)
    d1 = [((Y[i] - Y[i + 1]) ** 2).sum() for i in range(n - 1)]
    d2 = [((Y[i] - Y[i + 2]) ** 2).sum() for i in range(n - 2)]
    agree = [min(((Y[i] - Y[j]) ** 2).sum() for j in range(max(0, i - 2), min(n, i + 3)) if j != i)
             for i in range(n)]
    for i in range(n):
        sides = [max(d1[i - 1], d2[i - 2])] if i >= 2 else []
        sides += [max(d1[i], d2[i])] if i + 2 < n else []
        if sides:
            agree[i] = max(agree[i], 0.25 * min(sides))
    np.testing.assert_allclose(s, np.minimum(loo, agree), rtol=1e-13, atol=0)
    assert (loo > 1e100).all() if n >= 3 else (loo == 0).all()   # n = 2: the line through both answers


def test_rows_pick_and_order_the_answers_without_a_copy(rng):
    n, m = 11, 300
    t = random_knots(rng, n)
    Y = answers(rng, t, m)
    extra = np.vstack([rng.standard_normal((3, m)), Y])            # the answers in rows 3 .. 13, shuffled
    perm = rng.permutation(n)
    shuffled = extra.copy()
    shuffled[3 + perm] = Y
    plan, omd = DetectionSplines().get(t)[:2]
    want = _core.locator_scores(plan, Y, omd)
    got = _core.locator_scores(plan, shuffled, omd, 3 + perm)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])


def test_deterministic_bitwise_and_independent_of_the_thread_count(rng):
    import letcc

    n, m = 22, 100003
    t = random_knots(rng, n)
    Y = answers(rng, t, m, bad=[4])
    plan, omd = DetectionSplines().get(t)[:2]
    first = _core.locator_scores(plan, Y, omd)
    again = _core.locator_scores(plan, Y, omd)
    one = _core.locator_scores(plan, Y, omd, None, 1)
    two = _core.locator_scores(plan, Y, omd, None, 2)
    before = letcc.get_num_threads()
    try:
        letcc.set_num_threads(3)
        three = _core.locator_scores(plan, Y, omd)
    finally:
        letcc.set_num_threads(before)
    for other in (again, one, two, three):
        assert first[0].tobytes() == other[0].tobytes() and first[1].tobytes() == other[1].tobytes()


def test_nan_answers_score_as_numpys_minimum_and_maximum_would(rng):
    t = random_knots(rng, 8)
    Y = answers(rng, t, 5)
    Y[3, 2] = np.nan
    s, loo = locator_scores(DetectionSplines(), t, Y)
    assert np.isnan(loo).all() and np.isnan(s).all()       # the spline spreads a NaN to every residual


def test_bad_input_names_the_offending_value(rng):
    t = random_knots(rng, 6)
    plan, omd = DetectionSplines().get(t)[:2]
    Y = rng.standard_normal((6, 4))
    with pytest.raises(ValueError, match=r"y must be 2-D \(answers, outputs\), got ndim = 3, shape \(6, 2, 2\)"):
        _core.locator_scores(plan, Y.reshape(6, 2, 2), omd)
    with pytest.raises(ValueError, match="got ndim = 1"):
        _core.locator_scores(plan, Y[:, 0].copy(), omd)
    with pytest.raises(ValueError, match="y has 5 rows but the plan has 6 knots"):
        _core.locator_scores(plan, Y[:5], omd)
    with pytest.raises(TypeError, match="y must be float32 or float64, got int64"):
        _core.locator_scores(plan, np.zeros((6, 4), dtype=np.int64), omd)
    with pytest.raises(TypeError, match="y must be a numpy array .*got list"):
        _core.locator_scores(plan, Y.tolist(), omd)
    with pytest.raises(ValueError, match="y must be C-contiguous"):
        _core.locator_scores(plan, np.asfortranarray(Y), omd)
    with pytest.raises(ValueError, match="one_minus_diag has 5 entries but the plan has 6 knots"):
        _core.locator_scores(plan, Y, omd[:5])
    with pytest.raises(ValueError, match=r"rows\[2\] = 9 is out of range for y with 6 rows"):
        _core.locator_scores(plan, Y, omd, np.array([0, 1, 9, 2, 3, 4]))
    with pytest.raises(ValueError, match=r"rows\[0\] = -1 is out of range"):
        _core.locator_scores(plan, Y, omd, np.array([-1, 1, 2, 3, 4, 5]))
    with pytest.raises(ValueError, match=r"rows must be 1-D with one entry per knot \(6\), got shape \(5,\)"):
        _core.locator_scores(plan, Y, omd, np.arange(5))
    with pytest.raises(TypeError, match="rows must be an integer array, got float64"):
        _core.locator_scores(plan, Y, omd, np.arange(6.0))


# ------------------------------------------------------------------ spline_locate on them

@pytest.mark.parametrize("trial", range(12))
def test_spline_locate_erases_as_the_dense_reference_does(trial, rng):
    n = int(rng.integers(5, 25))
    m = int(rng.choice([1, 3, 10, 200]))
    t = random_knots(rng, n)
    bad = rng.choice(n, int(rng.integers(0, 3)), replace=False)
    Y = answers(rng, t, m, noise=float(rng.choice([0.0, 0.01, 0.2])), bad=bad)
    nodes = np.cos(t)                                    # detection_knots(nodes) == t
    np.testing.assert_allclose(detection_knots(nodes), t, rtol=1e-12)
    for E in (1, 2, 3):
        for ratio in (None, 30.0, lambda k: 10.0 + k):      # tested: some rounds stop early
            want, want_report = ref_locate(t, Y, E, ratio)
            report: dict = {}
            got = spline_locate(nodes, Y, E, DetectionSplines(), knots=t, ratio=ratio, report=report)
            assert got.tolist() == want, (E, ratio)
            assert report["top"] == want_report["top"] and report["threshold"] == want_report["threshold"]
            np.testing.assert_allclose(report["statistic"], want_report["statistic"], rtol=1e-9)
            # the same with the answers in another order, named by rows=
            perm = rng.permutation(n)
            Yp = np.empty_like(Y)
            Yp[perm] = Y
            got_p = spline_locate(nodes, Yp, E, DetectionSplines(), knots=t, ratio=ratio, rows=perm)
            assert got_p.tolist() == want


def test_calibrated_thresholds_are_the_quantile_of_the_dense_reference_statistic():
    """calibrate()'s thresholds, from the compiled scores, equal the ones
    computed here from the dense reference on the same synthetic rounds:
    the first step's and the later steps' (LATER_FACTOR times the rate)."""
    from letcc.codes import clean_round as cr

    code = LeTCC(4, 12, adversaries=1)
    n, fa = 10, 0.1
    got = calibrate(code.encoder, code.beta, 4, n, "linear", fa)
    rng = np.random.default_rng([cr.SEED, 4, 12, n, False])
    rounds = cr.calibration_rounds(fa)
    O = cr.synthetic_outputs(code.encoder, 4, rounds, "linear", rng)
    knots = detection_knots(code.beta)
    stats = np.empty(rounds)
    per_set = -(-rounds // cr.SETS)
    for j in range(cr.SETS):
        lo, hi = j * per_set, min((j + 1) * per_set, rounds)
        if lo >= hi:
            break
        avail = np.sort(rng.choice(12, n, replace=False))
        for r in range(lo, hi):
            stats[r] = ref_locate(knots[avail], O[avail, r], 1, ratio=np.inf)[1]["statistic"]
    want = float(np.quantile(stats, 1.0 - fa, method="higher"))
    assert abs(got.single / want - 1.0) < 1e-10
    later = float(np.quantile(stats, 1.0 - cr.LATER_FACTOR * fa, method="higher"))
    assert abs(got.later / later - 1.0) < 1e-10 and got.later < got.single


def test_letcc_decode_flags_what_the_reference_erases(rng):
    """LeTCC(adversaries=2) with the caller's flag_threshold: the workers it
    flags are those the dense reference erases (answers given out of order)."""
    K, N, E = 6, 24, 2
    code = LeTCC(K, N, adversaries=E, flag_threshold=3.0)
    for _ in range(5):
        F = np.sort(rng.choice(N, 21, replace=False))
        t = detection_knots(code.beta[F])
        Y = answers(rng, t, 40, noise=0.01, bad=rng.choice(21, 2, replace=False))
        want = sorted(F[ref_locate(t, Y, E, ratio=9.0)[0]].tolist())
        perm = rng.permutation(21)
        _, flagged = code.decode(Y[perm], F[perm], return_flagged=True)
        assert flagged.tolist() == want
