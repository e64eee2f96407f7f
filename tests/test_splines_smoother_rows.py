"""letcc.splines.smoother_rows: one lam per evaluation point, against scipy and
against one SplineSmoother per row."""
import numpy as np
import pytest
from scipy.interpolate import CubicSpline, make_smoothing_spline

from letcc.splines import SplineSmoother, smoother_rows


def knots(rng, n):
    return np.sort(rng.uniform(-1.0, 1.0, n)) if n > 1 else np.array([0.25])


def scipy_row(x, w, lam, t, nu):
    """Row of the operator y -> s_y^(nu)(t) from scipy, one unit vector at a time."""
    n = len(x)
    row = np.empty(n)
    for j in range(n):
        e = np.zeros(n)
        e[j] = 1.0
        s = make_smoothing_spline(x, e, w=w, lam=lam) if lam > 0 else CubicSpline(x, e, bc_type="natural")
        row[j] = s(t, nu)
    return row


@pytest.mark.parametrize("n", [5, 12, 40])
@pytest.mark.parametrize("nu", [0, 1, 2])
def test_rows_match_scipy_with_a_lam_per_point(rng, n, nu):
    x = knots(rng, n)
    w = rng.uniform(0.5, 2.0, n)
    at = rng.uniform(x[0], x[-1], 6)            # inside: scipy extrapolates differently outside
    lams = 10.0 ** rng.uniform(-6, 0, 6)
    lams[1] = 0.0                                # interpolation row
    lams[3] = lams[4]                            # a repeated lam shares its factorisation
    A = smoother_rows(x, at, lams, w, nu=nu)
    assert A.shape == (6, n) and A.dtype == np.float64
    for k in range(6):
        ref = scipy_row(x, w, lams[k], at[k], nu)
        np.testing.assert_allclose(A[k], ref, rtol=0, atol=1e-9 * max(1.0, np.abs(ref).max()))


@pytest.mark.parametrize("n", [1, 2, 3, 4, 30])
@pytest.mark.parametrize("nu", [0, 1, 2])
def test_rows_equal_one_plan_per_row_also_outside_the_knots(rng, n, nu):
    x = knots(rng, n)
    at = rng.uniform(-1.5, 1.5, 9)
    lams = 10.0 ** rng.uniform(-8, 1, 9)
    A = smoother_rows(x, at, lams, nu=nu)
    for k in range(9):
        ref = SplineSmoother(x, [at[k]], lam=lams[k], nu=nu).matrix()[0]
        np.testing.assert_allclose(A[k], ref, rtol=0, atol=1e-12 * max(1.0, np.abs(ref).max()))


def test_a_scalar_lam_is_the_plan_matrix(rng):
    x = knots(rng, 17)
    at = rng.uniform(-1.1, 1.1, 5)
    np.testing.assert_allclose(smoother_rows(x, at, 1e-3), SplineSmoother(x, at, lam=1e-3).matrix(),
                               rtol=0, atol=1e-13)
    np.testing.assert_allclose(smoother_rows(x, at, np.float32(0.5)), SplineSmoother(x, at, lam=0.5).matrix(),
                               rtol=0, atol=1e-13)


def test_rows_apply_like_the_fits(rng):
    # A @ y equals each row's own fit evaluated at its point, for data columns
    x = knots(rng, 25)
    at = np.linspace(-0.9, 0.9, 4)
    lams = np.array([1e-5, 1e-3, 1e-1, 10.0])
    y = rng.normal(size=(25, 3))
    got = smoother_rows(x, at, lams) @ y
    for k in range(4):
        np.testing.assert_allclose(got[k], make_smoothing_spline(x, y, lam=lams[k], axis=0)(at[k]), rtol=1e-9,
                                   atol=1e-9)


def test_bad_input_is_refused_clearly():
    x = np.linspace(0.0, 1.0, 6)
    at = np.array([0.2, 0.5])
    with pytest.raises(ValueError, match=r"lam must be finite and >= 0, got lam\[1\] = -1\.0"):
        smoother_rows(x, at, [0.1, -1.0])
    with pytest.raises(ValueError, match=r"lam must be finite and >= 0, got lam\[0\] = nan"):
        smoother_rows(x, at, [np.nan, 1.0])
    with pytest.raises(ValueError, match=r"lam must be a number or have shape \(2,\) to match at, got shape \(3,\)"):
        smoother_rows(x, at, [0.1, 0.2, 0.3])
    with pytest.raises(ValueError, match=r"lam must be finite and >= 0, got -2"):
        smoother_rows(x, at, -2)
    with pytest.raises(TypeError, match=r"lam must be real, got complex values"):
        smoother_rows(x, at, [1j, 0.1])
    with pytest.raises(TypeError, match=r"lam must be a number or an array of numbers >= 0, got str"):
        smoother_rows(x, at, "big")
    with pytest.raises(ValueError, match=r"x must be strictly increasing"):
        smoother_rows([0.0, 0.0, 1.0], at, 0.1)
    with pytest.raises(ValueError, match=r"at is empty"):
        smoother_rows(x, [], [])
    with pytest.raises(ValueError, match=r"nu must be 0, 1 or 2, got 3"):
        smoother_rows(x, at, 0.1, nu=3)
    with pytest.raises(ValueError, match=r"weights must be positive and finite, got w\[2\] = 0\.0"):
        smoother_rows(x, at, 0.1, w=[1, 1, 0, 1, 1, 1])


@pytest.mark.parametrize("n", [1, 2, 3, 4, 30])
def test_each_row_is_the_row_computed_alone(rng, n):
    """The rows share the lam-free part of the factorisation and refactor in
    place where lam changes: every row is bit for bit the row computed on its
    own, whatever came before it (lam 0 first, repeats apart and side by side)."""
    x = knots(rng, n)
    w = rng.uniform(0.5, 2.0, n)
    at = rng.uniform(-1.2, 1.2, 8)
    lams = 10.0 ** rng.uniform(-6, 1, 8)
    lams[0] = 0.0
    lams[5] = lams[2]
    lams[6] = lams[5]
    for nu in (0, 1, 2):
        A = smoother_rows(x, at, lams, w, nu=nu)
        for k in range(8):
            np.testing.assert_array_equal(A[k], smoother_rows(x, at[k:k + 1], lams[k:k + 1], w, nu=nu)[0])
