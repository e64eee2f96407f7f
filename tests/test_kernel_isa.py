"""Every build of the compiler-vectorised kernels (dense maps, spline fits, the
generic plan kernel) that this CPU can run: baseline x86-64, AVX2 with FMA,
AVX-512. letcc.set_kernel_isa forces one, so a machine with AVX2 also checks
the baseline build a wheel falls back to on older CPUs. Each build is checked
against independent float64 references (numpy products, scipy's spline), and
the builds against each other."""
import numpy as np
import pytest
from scipy.interpolate import make_smoothing_spline

import letcc
from letcc.splines import DenseOperator

BEST = letcc.kernel_isa()
ORDER = ["baseline", "avx2", "avx512"]
RUNNABLE = ORDER[: ORDER.index(BEST) + 1] if BEST in ORDER else []


def _isa_params():
    return [pytest.param(name, marks=pytest.mark.skipif(
        name not in RUNNABLE, reason=f"this CPU/build runs at most {BEST!r}")) for name in ORDER]


@pytest.fixture(params=_isa_params())
def isa(request):
    letcc.set_kernel_isa(request.param)
    yield request.param
    letcc.set_kernel_isa("auto")


@pytest.mark.parametrize("dtype,tol", [(np.float64, 1e-13), (np.float32, 2e-6)])
@pytest.mark.parametrize("q,n,m", [(16, 8, 3001), (7, 3, 45), (1, 40, 260), (33, 17, 17)])
def test_dense_map_matches_the_float64_product(rng, isa, dtype, tol, q, n, m):
    assert letcc.kernel_isa() == isa
    a = rng.standard_normal((q, n))
    y = rng.standard_normal((n, m)).astype(dtype)
    got = DenseOperator(a)(y)
    ref = a @ y.astype(np.float64)
    scale = np.abs(a).sum(axis=1, keepdims=True) * np.abs(y).max()
    assert got.dtype == dtype
    assert np.all(np.abs(got - ref) <= tol * scale)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_generic_plan_kernel_matches_the_dense_operator(rng, isa, dtype):
    n, m = 40, 1037
    x = np.sort(rng.uniform(-1.0, 1.0, n))
    at = rng.uniform(-1.1, 1.1, 29)
    plan = letcc.SplineSmoother(x, at, lam=1e-3, method="banded")
    y = rng.standard_normal((n, m)).astype(dtype)
    try:
        letcc.set_plan_kernel("generic")
        assert letcc.plan_kernel() == f"generic-{isa}"
        got = plan(y)
    finally:
        letcc.set_plan_kernel("auto")
    ref = plan.matrix() @ y.astype(np.float64)
    tol = 1e-11 if dtype == np.float64 else 1e-6
    np.testing.assert_allclose(got, ref, rtol=0, atol=tol * np.abs(y).max())


def test_spline_fit_matches_scipy(rng, isa):
    n, m = 30, 9
    x = np.sort(rng.uniform(-1.0, 1.0, n))
    y = rng.standard_normal((n, m))
    lam = 1e-3
    s = letcc.SmoothingSpline(x, y, lam=lam)
    t = rng.uniform(x[0], x[-1], 50)  # inside: letcc extrapolates linearly, scipy cubically
    ref = np.stack([make_smoothing_spline(x, y[:, j], lam=lam)(t) for j in range(m)], axis=1)
    np.testing.assert_allclose(s(t), ref, rtol=0, atol=1e-9 * np.abs(ref).max())


@pytest.mark.skipif(not RUNNABLE, reason=f"this build has one kernel build only ({BEST!r})")
def test_every_runnable_build_gives_the_same_operators(rng):
    a = rng.standard_normal((16, 8))
    y32 = rng.standard_normal((8, 5003)).astype(np.float32)
    y64 = rng.standard_normal((40, 777))
    x = np.sort(rng.uniform(-1.0, 1.0, 40))
    plan = letcc.SplineSmoother(x, x, lam=1e-2, method="banded")
    results = {}
    try:
        letcc.set_plan_kernel("generic")
        for name in RUNNABLE:
            letcc.set_kernel_isa(name)
            results[name] = (DenseOperator(a)(y32), plan(y64), letcc.SmoothingSpline(x, y64, lam=1e-2)(x))
    finally:
        letcc.set_kernel_isa("auto")
        letcc.set_plan_kernel("auto")
    base = results["baseline"]
    for name, got in results.items():
        # FMA against separate multiply and add: a rounding of the last bits
        np.testing.assert_allclose(got[0], base[0], rtol=0, atol=2e-6 * np.abs(base[0]).max())
        np.testing.assert_allclose(got[1], base[1], rtol=0, atol=1e-12 * np.abs(base[1]).max())
        np.testing.assert_allclose(got[2], base[2], rtol=0, atol=1e-12 * np.abs(base[2]).max())


@pytest.mark.skipif(not RUNNABLE, reason=f"this build has one kernel build only ({BEST!r})")
def test_forcing_baseline_makes_the_auto_plan_kernel_generic():
    default_plan = letcc.plan_kernel()
    try:
        letcc.set_kernel_isa("baseline")
        assert letcc.kernel_isa() == "baseline"
        assert letcc.plan_kernel() == "generic-baseline"
    finally:
        letcc.set_kernel_isa("auto")
    assert letcc.kernel_isa() == BEST
    assert letcc.plan_kernel() == default_plan


def test_set_kernel_isa_rejects_bad_names():
    with pytest.raises(ValueError, match="got 'sse9'"):
        letcc.set_kernel_isa("sse9")
    with pytest.raises(TypeError, match="must be a str, got int"):
        letcc.set_kernel_isa(2)
    assert letcc.kernel_isa() == BEST


@pytest.mark.skipif(BEST not in ("baseline", "avx2"), reason=f"this CPU runs {BEST!r}: every build is available")
def test_set_kernel_isa_rejects_a_build_the_cpu_cannot_run():
    with pytest.raises(ValueError, match=f"'avx512' is not available on this CPU, which runs at most '{BEST}'"):
        letcc.set_kernel_isa("avx512")
    assert letcc.kernel_isa() == BEST
