"""letcc.splines against independent references, on fresh random data.

References: scipy ``make_smoothing_spline`` (same lam), scipy ``CubicSpline``
with natural boundary conditions (lam = 0, and as the evaluator of a natural
spline through given values), a dense float64 Reinsch solve written here from
DESIGN.md (independent of the banded factorisation in csrc/), the weighted
least-squares line (lam -> inf), and the dense GCV score.

Knots are a jittered grid (gaps at least 0.3/n of the range): with knots
that nearly coincide every float64 method, the dense one included, loses
digits, and the comparison would measure conditioning, not correctness.
"""
import numpy as np
import pytest
from scipy.interpolate import CubicSpline, make_smoothing_spline

import letcc
from letcc import _core
from letcc.splines.gcv import lam_scale


# ---------------------------------------------------------------- references
def jittered_knots(rng, n, lo=0.0, hi=1.0):
    """n strictly increasing knots in [lo, hi], gaps at least 0.3 of the mean gap."""
    if n == 1:
        return np.array([lo + (hi - lo) * rng.uniform()])
    t = (np.arange(n) + rng.uniform(-0.35, 0.35, n)) / (n - 1)
    t = (t - t[0]) / (t[-1] - t[0])
    return lo + (hi - lo) * t


def dense_reinsch(x, w, lam):
    """Dense float64 Reinsch solve (Green & Silverman ch. 2, as in DESIGN.md).

    Returns (S, G): the smoother matrix, fitted values g = S @ y, and the
    interior second derivatives gamma[1:-1] = G @ y."""
    n = x.shape[0]
    h = np.diff(x)
    Q = np.zeros((n, n - 2))
    R = np.zeros((n - 2, n - 2))
    for j in range(n - 2):
        i = j + 1
        Q[i - 1, j] = 1.0 / h[i - 1]
        Q[i, j] = -1.0 / h[i - 1] - 1.0 / h[i]
        Q[i + 1, j] = 1.0 / h[i]
        R[j, j] = (h[i - 1] + h[i]) / 3.0
        if j + 1 < n - 2:
            R[j, j + 1] = R[j + 1, j] = h[i] / 6.0
    WinvQ = Q / w[:, None]
    G = np.linalg.solve(R + lam * Q.T @ WinvQ, Q.T)
    S = np.eye(n) - lam * WinvQ @ G
    return S, G


def natural_spline_eval(x, g, t, nu=0):
    """The natural cubic spline through (x, g) at t, extended linearly outside
    [x[0], x[-1]] (CubicSpline extrapolates with the cubic, so the extension is
    built here from its end values and slopes)."""
    cs = CubicSpline(x, g, bc_type="natural", axis=0)
    t = np.asarray(t, dtype=float)
    out = np.array(cs(np.clip(t, x[0], x[-1]), nu))
    for end, mask in ((x[0], t < x[0]), (x[-1], t > x[-1])):
        if mask.any():
            slope = cs(end, 1)
            if nu == 0:
                out[mask] = cs(end) + np.multiply.outer(t[mask] - end, slope)
            elif nu == 1:
                out[mask] = slope
            else:
                out[mask] = 0.0
    return out


def wls_line(x, w, y):
    sw = np.sqrt(w)
    V = np.stack([np.ones_like(x), x], axis=1)
    coef, *_ = np.linalg.lstsq(V * sw[:, None], y * sw[:, None] if y.ndim == 2 else y * sw, rcond=None)
    return coef


def dense_gcv(x, w, lam, y2):
    S, _ = dense_reinsch(x, w, lam)
    n = x.shape[0]
    r = y2 - S @ y2
    rss = float(np.sum(w[:, None] * r * r))
    return n * rss / (n - np.trace(S)) ** 2


def rel_err(got, ref):
    got = np.asarray(got, dtype=float)
    ref = np.asarray(ref, dtype=float)
    return float(np.max(np.abs(got - ref)) / max(np.max(np.abs(ref)), 1e-300))


# The CPU core applies a plan either by streaming the banded Reinsch factors
# or by multiplying with the precomputed dense operator ("auto" picks one by
# size): every plan comparison runs through both.
METHODS = ("banded", "dense")


def plan_results(x, at, y, **kw):
    """{method: plan(y)} for each CPU kernel."""
    return {m: letcc.SplineSmoother(x, at, method=m, **kw)(y) for m in METHODS}


def inside_points(rng, x, k=40):
    return np.concatenate([x, rng.uniform(x[0], x[-1], k)])


# ---------------------------------------------------------------- scipy agreement
# On knots in [0, 1] every float64 method (scipy, the dense solve, ours) loses
# about eps * lam * n**3 to conditioning (measured against an extended-precision
# solve), so the 1e-9 comparison stops at lam * n**3 ~ 3e5.
SCIPY_CASES = [(n, lam) for n in (5, 17, 64) for lam in (1e-8, 1e-5, 1e-3, 1e-1)] + [
    (300, lam) for lam in (1e-8, 1e-5, 1e-3, 1e-2)
]


@pytest.mark.parametrize("n,lam", SCIPY_CASES)
@pytest.mark.parametrize("weighted", [False, True])
def test_matches_scipy_make_smoothing_spline(rng, n, lam, weighted, kernel):
    x = jittered_knots(rng, n)
    w = rng.uniform(0.3, 3.0, n) if weighted else None
    y = rng.normal(size=(n, 3))
    t = inside_points(rng, x)
    s = letcc.SmoothingSpline(x, y, lam=lam, w=w)
    plans = {m: letcc.SplineSmoother(x, t, lam=lam, w=w, method=m) for m in METHODS}
    for col in range(3):
        ref = make_smoothing_spline(x, y[:, col], w=w, lam=lam)
        for nu in (0, 1, 2):
            assert rel_err(s(t, nu=nu)[:, col], ref(t, nu=nu)) < 1e-9, (col, nu)
        for method, plan in plans.items():
            assert rel_err(plan(y)[:, col], ref(t)) < 1e-9, method
            assert rel_err(plan(np.ascontiguousarray(y[:, col])), ref(t)) < 1e-9, method


@pytest.mark.parametrize("lam", [1e3, 1e6, 1e9])
@pytest.mark.parametrize("n", [5, 40, 80])
def test_large_lam_matches_dense_reinsch(rng, n, lam):
    # scipy itself drifts here (1e-6 .. 1e-1 at lam >= 1e6 on [0, 1]), so the
    # reference is the dense float64 solve.
    x = jittered_knots(rng, n)
    w = rng.uniform(0.3, 3.0, n)
    y = rng.normal(size=(n, 4))
    S, G = dense_reinsch(x, w, lam)
    g_ref = S @ y
    s = letcc.SmoothingSpline(x, y, lam=lam, w=w)
    assert rel_err(s.fitted, g_ref) < 1e-9
    assert rel_err(s.second_derivatives[1:-1], G @ y) < 1e-9
    t = inside_points(rng, x)
    assert rel_err(s(t), natural_spline_eval(x, g_ref, t)) < 1e-9
    for method, got in plan_results(x, t, y, lam=lam, w=w).items():
        assert rel_err(got, natural_spline_eval(x, g_ref, t)) < 1e-9, method


def test_very_large_lam_is_the_weighted_least_squares_line(rng):
    n = 30
    x = jittered_knots(rng, n)
    w = rng.uniform(0.3, 3.0, n)
    y = rng.normal(size=(n, 2))
    t = np.concatenate([x, rng.uniform(-1.0, 2.0, 30)])  # inside and outside
    coef = wls_line(x, w, y)
    line = coef[0] + np.multiply.outer(t, coef[1])
    # the distance to the line shrinks like 1/lam
    errs = [rel_err(letcc.SmoothingSpline(x, y, lam=lam, w=w)(t), line) for lam in (1e4, 1e8, 1e12)]
    assert errs[0] > errs[1] > errs[2]
    assert errs[2] < 1e-9
    for method, got in plan_results(x, t, y, lam=1e12, w=w).items():
        assert rel_err(got, line) < 1e-9, method
    s = letcc.SmoothingSpline(x, y, lam=1e12, w=w)
    assert rel_err(s(t, nu=1), np.broadcast_to(coef[1], (t.size, 2))) < 1e-8
    assert np.max(np.abs(s(t, nu=2))) < 1e-8 * np.max(np.abs(y)) / np.min(np.diff(x)) ** 2


# ---------------------------------------------------------------- lam = 0
@pytest.mark.parametrize("n", [2, 3, 4, 5, 33, 257])
@pytest.mark.parametrize("nu", [0, 1, 2])
def test_lam0_is_the_natural_interpolating_spline(rng, n, nu):
    x = jittered_knots(rng, n, -1.0, 1.0)
    y = rng.normal(size=(n, 2))
    t = inside_points(rng, x)
    ref = CubicSpline(x, y, bc_type="natural", axis=0)(t, nu)
    s = letcc.SmoothingSpline(x, y, lam=0.0, w=rng.uniform(0.5, 2.0, n))  # weights do not matter at lam 0
    tol = 1e-9 if nu == 0 else 1e-8
    if nu == 2 and n == 2:
        assert np.all(s(t, nu=2) == 0.0) and np.allclose(ref, 0.0)
    else:
        assert rel_err(s(t, nu=nu), ref) < tol
    if nu == 0:
        for method, got in plan_results(x, t, y).items():
            assert rel_err(got, ref) < tol, method
        np.testing.assert_allclose(s(x), y, rtol=0, atol=1e-12 * np.abs(y).max())


# ---------------------------------------------------------------- outside the knots
@pytest.mark.parametrize("lam", [0.0, 1e-4, 1e-1])
@pytest.mark.parametrize("n", [3, 4, 12])
def test_linear_extension_outside_the_knots(rng, n, lam):
    x = jittered_knots(rng, n)
    w = rng.uniform(0.3, 3.0, n)
    y = rng.normal(size=(n, 3))
    g_ref = dense_reinsch(x, w, lam)[0] @ y
    t = np.concatenate([rng.uniform(-3.0, 0.0, 10), rng.uniform(1.0, 4.0, 10)])
    t = t[(t < x[0]) | (t > x[-1])]
    s = letcc.SmoothingSpline(x, y, lam=lam, w=w)
    for nu in (0, 1, 2):
        got = s(t, nu=nu)
        ref = natural_spline_eval(x, g_ref, t, nu=nu)
        if nu == 2:
            assert np.all(got == 0.0)
        else:
            assert rel_err(got, ref) < 1e-9, nu
    for method, got in plan_results(x, t, y, lam=lam, w=w).items():
        assert rel_err(got, natural_spline_eval(x, g_ref, t)) < 1e-9, method
    # continuity of value and slope at both ends
    eps = 1e-7
    for end in (x[0], x[-1]):
        below, above = s(np.array([end - eps, end + eps]))
        assert np.max(np.abs(above - below)) < 1e-5 * np.abs(y).max() / np.min(np.diff(x))


# ---------------------------------------------------------------- derivatives
@pytest.mark.parametrize("lam", [0.0, 1e-5, 1e-2])
def test_derivatives_match_finite_differences_of_scipy(rng, lam):
    n = 24
    x = jittered_knots(rng, n)
    y = rng.normal(size=(n, 2))
    s = letcc.SmoothingSpline(x, y, lam=lam)
    t = rng.uniform(x[0], x[-1], 80)
    # keep away from the knots: there the third derivative jumps and the
    # difference quotients would measure that jump, not the spline
    t = t[np.min(np.abs(t[:, None] - x[None, :]), axis=1) > 1e-3][:50]
    ref = make_smoothing_spline(x, y, lam=lam, axis=0) if lam > 0 else CubicSpline(x, y, bc_type="natural")
    h1, h2 = 1e-6, 1e-4
    d1 = (ref(t + h1) - ref(t - h1)) / (2 * h1)
    d2 = (ref(t + h2) - 2 * ref(t) + ref(t - h2)) / h2**2
    assert rel_err(s(t, nu=1), d1) < 1e-6
    assert rel_err(s(t, nu=2), d2) < 1e-4


# ---------------------------------------------------------------- float32
def chebyshev_second_kind(n):
    return np.sort(np.cos(np.arange(n) * np.pi / (n - 1)))


@pytest.mark.parametrize("n", [5, 64, 1024])
@pytest.mark.parametrize("lam", [1e-8, 1e-6, 1e-4, 1e-2, 1.0])
@pytest.mark.parametrize("knots", ["jittered", "chebyshev"])
def test_float32_within_1e6_of_float64(rng, n, lam, knots, kernel):
    x = jittered_knots(rng, n, -1.0, 1.0) if knots == "jittered" else chebyshev_second_kind(n)
    y32 = (rng.normal(size=(n, 6)) * 10.0).astype(np.float32)
    y64 = y32.astype(np.float64)  # same numbers: what is compared is the arithmetic
    scale = np.abs(y64).max()
    inside = np.concatenate([x, rng.uniform(-1.0, 1.0, 64)])
    # Inside the knots: within 1e-6 of max|y| (the bound).
    for method in METHODS:
        plan = letcc.SplineSmoother(x, inside, lam=lam, method=method)
        got = plan(y32)
        assert got.dtype == np.float32
        assert np.max(np.abs(got - plan(y64))) / scale < 1e-6, method
    s32, s64 = letcc.SmoothingSpline(x, y32, lam=lam), letcc.SmoothingSpline(x, y64, lam=lam)
    v32 = s32(inside)
    assert v32.dtype == np.float32
    assert np.max(np.abs(v32 - s64(inside))) / scale < 1e-6
    # Outside the knots and for derivatives the values can be far larger than
    # max|y| (slopes of 1/gap with Chebyshev knots): there the bound is
    # relative to the larger of max|y| and max|float64 result|.
    outside = np.concatenate([rng.uniform(-1.3, -1.0, 8), rng.uniform(1.0, 1.3, 8)])
    ref = letcc.SplineSmoother(x, outside, lam=lam, method="banded")(y64)
    bound = 1e-6 * max(scale, np.abs(ref).max())
    # (a forced dense float32 product over n = 1024 terms accumulates ~1e-6
    # outside the knots; "auto" uses it only for n * q <= 1024)
    for method in METHODS if n <= 64 else ("banded",):
        got = letcc.SplineSmoother(x, outside, lam=lam, method=method)(y32)
        assert np.max(np.abs(got - ref)) < bound, method
    assert np.max(np.abs(s32(outside) - ref)) < bound
    for nu in (1, 2):
        assert rel_err(s32(inside, nu=nu), s64(inside, nu=nu)) < 1e-6, nu


# ---------------------------------------------------------------- small n
def test_one_knot_is_a_constant(rng):
    y = rng.normal(size=(1, 3))
    t = rng.uniform(-5, 5, 7)
    for lam in (0.0, 1.0, None):
        s = letcc.SmoothingSpline([0.3], y, lam=lam)
        np.testing.assert_array_equal(s(t), np.broadcast_to(y, (7, 3)))
        assert np.all(s(t, nu=1) == 0.0) and np.all(s(t, nu=2) == 0.0)
        for got in plan_results([0.3], t, y, lam=lam or 0.0).values():
            np.testing.assert_array_equal(got, np.broadcast_to(y, (7, 3)))


def test_two_knots_are_the_line_through_both_points(rng):
    x = np.sort(rng.uniform(-1, 1, 2))
    y = rng.normal(size=(2, 3))
    t = rng.uniform(-3, 3, 9)
    slope = (y[1] - y[0]) / (x[1] - x[0])
    line = y[0] + np.multiply.outer(t - x[0], slope)
    for lam in (0.0, 1e-3, 1e6, None):
        s = letcc.SmoothingSpline(x, y, lam=lam, w=rng.uniform(0.5, 2.0, 2))
        assert rel_err(s(t), line) < 1e-12
        assert rel_err(s(t, nu=1), np.broadcast_to(slope, (9, 3))) < 1e-12
        assert np.all(s(t, nu=2) == 0.0)
        for method, got in plan_results(x, t, y, lam=lam or 0.0).items():
            assert rel_err(got, line) < 1e-12, method


@pytest.mark.parametrize("n", [3, 4])
@pytest.mark.parametrize("lam", [0.0, 1e-3, 1.0, 1e6])
def test_three_and_four_knots_are_real_splines(rng, n, lam):
    x = jittered_knots(rng, n, -1.0, 1.0)
    w = rng.uniform(0.3, 3.0, n)
    y = rng.normal(size=(n, 2))
    g_ref = dense_reinsch(x, w, lam)[0] @ y
    t = np.concatenate([inside_points(rng, x, 20), [-2.0, 2.0]])
    s = letcc.SmoothingSpline(x, y, lam=lam, w=w)
    for nu in (0, 1, 2):
        # derivatives on the scale of the data: at large lam they are tiny
        # and the reference's own rounding (eps |y| / gap**nu) dominates
        err = np.max(np.abs(s(t, nu=nu) - natural_spline_eval(x, g_ref, t, nu=nu)))
        assert err < 1e-9 * np.abs(y).max() / np.min(np.diff(x)) ** nu, nu
    for method, got in plan_results(x, t, y, lam=lam, w=w).items():
        assert rel_err(got, natural_spline_eval(x, g_ref, t)) < 1e-9, method


# ---------------------------------------------------------------- GCV
@pytest.mark.parametrize("n", [1, 2, 3, 4, 10, 80])
@pytest.mark.parametrize("lam", [0.0, 1e-6, 1e-3, 1.0, 1e3])
def test_gcv_trace_is_the_trace_of_the_dense_smoother(rng, n, lam):
    x = jittered_knots(rng, n)
    w = rng.uniform(0.3, 3.0, n)
    ref = float(n) if n < 3 else np.trace(dense_reinsch(x, w, lam)[0])
    assert abs(_core.smoother_trace(x, w, lam) - ref) < 1e-9 * n
    assert abs(letcc.SplineSmoother(x, x, lam=lam, w=w).trace() - ref) < 1e-9 * n
    if n >= 3:
        y2 = rng.normal(size=(n, 3))
        score, trace, _ = _core.gcv(x, w, lam, y2)
        assert abs(trace - ref) < 1e-9 * n
        if lam > 0:
            assert abs(score - dense_gcv(x, w, lam, y2)) <= 1e-8 * abs(score)


@pytest.mark.parametrize("n,m", [(20, 1), (40, 1), (40, 5), (100, 2)])
def test_gcv_lam_minimises_the_dense_gcv_score(rng, n, m):
    x = jittered_knots(rng, n)
    w = rng.uniform(0.5, 2.0, n)
    truth = np.sin(2 * np.pi * x)[:, None] * rng.uniform(0.5, 2.0, m)
    y = truth + 0.5 * rng.normal(size=(n, m)) / np.sqrt(w)[:, None]
    s = letcc.SmoothingSpline(x, y, lam=None, w=w)
    assert s.lam == letcc.select_lam_gcv(x, w, np.ascontiguousarray(y))
    # the whole range select_lam_gcv searches, in steps of 0.1 decades
    centre = np.log10(lam_scale(x, w))
    grid = 10.0 ** np.arange(centre - 12, centre + 8 + 1e-9, 0.1)
    scores = np.array([dense_gcv(x, w, lam, y) for lam in grid])
    best = int(np.argmin(scores))
    # The chosen lam scores as well as the best grid point. On the lam -> 0
    # plateau (GCV preferring interpolation) n - tr S vanishes and both
    # scores carry rounding noise of ~1e-5 relative, hence the 1e-4.
    assert dense_gcv(x, w, s.lam, y) <= scores[best] * (1 + 1e-4)
    if n - np.trace(dense_reinsch(x, w, grid[best])[0]) > 1e-3:
        # a real amount of smoothing: the chosen lam lies next to the grid's best
        assert abs(np.log10(s.lam) - np.log10(grid[best])) < 0.15
    else:
        # on the plateau any lam gives the same (interpolating) fit
        assert rel_err(s(x), dense_reinsch(x, w, grid[best])[0] @ y) < 1e-6
    # the fit is the one for that lam
    assert rel_err(s(x), dense_reinsch(x, w, s.lam)[0] @ y) < 1e-9


def test_gcv_shares_one_lam_across_columns(rng):
    n = 30
    x = jittered_knots(rng, n)
    w = np.ones(n)
    y = np.sin(3 * x)[:, None] + 0.2 * rng.normal(size=(n, 4))
    lam = letcc.SmoothingSpline(x, y, lam=None).lam
    centre = np.log10(lam_scale(x, w))
    grid = 10.0 ** np.arange(centre - 12, centre + 8 + 1e-9, 0.1)
    summed = np.array([dense_gcv(x, w, g, y) for g in grid])  # residuals summed over all columns
    best = int(np.argmin(summed))
    assert 0 < best < grid.size - 1
    assert dense_gcv(x, w, lam, y) <= summed[best] * (1 + 1e-6)
    # a single column's own GCV lam is not what is returned
    own = [letcc.SmoothingSpline(x, y[:, j], lam=None).lam for j in range(4)]
    assert any(abs(np.log10(o) - np.log10(lam)) > 0.01 for o in own)
    # same lam for the column-stacked data with axis=1
    assert letcc.SmoothingSpline(x, y.T, lam=None, axis=1).lam == lam


# ---------------------------------------------------------------- fitted values
def test_fitted_and_second_derivatives_match_dense(rng):
    n = 25
    x = jittered_knots(rng, n)
    w = rng.uniform(0.3, 3.0, n)
    y = rng.normal(size=(n, 2, 3))
    S, G = dense_reinsch(x, w, 1e-3)
    s = letcc.SmoothingSpline(x, y, lam=1e-3, w=w)
    assert s.fitted.shape == y.shape
    assert rel_err(s.fitted, np.einsum("ij,jab->iab", S, y)) < 1e-9
    gam = s.second_derivatives
    assert np.all(gam[0] == 0.0) and np.all(gam[-1] == 0.0)
    assert rel_err(gam[1:-1], np.einsum("ij,jab->iab", G, y)) < 1e-9
