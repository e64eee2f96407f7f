"""SplineSmoother(nu=1, 2): derivative plans equal SmoothingSpline's
derivatives and the dense operator, in both kernels (banded and dense)."""
import numpy as np
import pytest

import letcc


@pytest.mark.parametrize("method", ["banded", "dense"])
@pytest.mark.parametrize("nu", [0, 1, 2])
@pytest.mark.parametrize("n", [1, 2, 3, 5, 40])
def test_derivative_plan_matches_spline(rng, method, nu, n):
    x = np.sort(rng.uniform(-1, 1, n))
    while n > 1 and np.min(np.diff(x)) < 1e-3:
        x = np.sort(rng.uniform(-1, 1, n))
    at = rng.uniform(-1.3, 1.3, 17)  # inside and outside the knots
    y = rng.standard_normal((n, 7))
    lam = 1e-3
    plan = letcc.SplineSmoother(x, at, lam=lam, nu=nu, method=method)
    ref = letcc.SmoothingSpline(x, y, lam=lam)(at, nu=nu)
    scale = max(1.0, float(np.abs(ref).max()))
    np.testing.assert_allclose(plan(y), ref, rtol=0, atol=1e-10 * scale)
    np.testing.assert_allclose(plan.matrix() @ y, ref, rtol=0, atol=1e-10 * scale)


def test_second_derivative_is_zero_outside_the_knots(rng):
    x = np.linspace(-1, 1, 9)
    plan = letcc.SplineSmoother(x, [-2.0, -1.5, 1.5, 3.0], lam=1e-2, nu=2)
    assert np.all(plan(rng.standard_normal((9, 4))) == 0.0)


@pytest.mark.parametrize("bad", [3, -1])
def test_bad_nu_is_refused(bad):
    with pytest.raises(ValueError, match=f"nu must be 0, 1 or 2, got {bad}"):
        letcc.SplineSmoother([0.0, 1.0, 2.0], [0.5], nu=bad)


def test_non_integer_nu_is_refused():
    with pytest.raises(TypeError, match="nu must be an integer"):
        letcc.SplineSmoother([0.0, 1.0, 2.0], [0.5], nu=1.5)
