"""The two banded plan kernels: the compiler-vectorised one (csrc/kernels.hpp,
"generic") and the AVX2/FMA intrinsics one (csrc/kernels_avx2.hpp, the default
where the CPU has it). Each is checked against scipy and against the other,
on every size class the tiles meet: fewer columns than one vector, tails that
are not a whole vector, several tiles, and outputs large enough to be written
with non-temporal stores (misaligned, odd widths, one and two threads)."""
import numpy as np
import pytest
from scipy.interpolate import make_smoothing_spline

import letcc

HAS_AVX2 = letcc.plan_kernel() == "avx2"


def knots(rng, n):
    return np.sort(rng.uniform(-1.0, 1.0, n)) if n < 3 else np.linspace(-1, 1, n) + rng.uniform(-0.3, 0.3, n) / n


def scipy_reference(x, at, y, lam, nu):
    out = np.empty((len(at), y.shape[1]))
    for j in range(y.shape[1]):
        out[:, j] = make_smoothing_spline(x, y[:, j], lam=lam)(at, nu)
    return out


@pytest.mark.parametrize("n", [5, 17, 64])
@pytest.mark.parametrize("m", [1, 3, 4, 37, 300])
@pytest.mark.parametrize("nu", [0, 1, 2])
def test_each_kernel_matches_scipy(rng, kernel, n, m, nu):
    x = knots(rng, n)
    # inside and at knots (outside, letcc extrapolates linearly and scipy
    # cubically; the agreement test below covers extrapolation)
    at = np.concatenate([rng.uniform(x[0], x[-1], n - 2), x[:2], x[-1:]])
    lam = 10.0 ** rng.uniform(-6, -1)
    y = rng.normal(size=(n, m))
    plan = letcc.SplineSmoother(x, at, lam=lam, nu=nu, method="banded")
    ref = scipy_reference(x, at, y, lam, nu)
    scale = max(np.abs(ref).max(), 1.0)
    np.testing.assert_allclose(plan(y), ref, rtol=0, atol=1e-9 * scale)
    # float32 in and out: within 1e-6 (relative to max |y|) of the float64 result
    got32 = plan(y.astype(np.float32))
    assert got32.dtype == np.float32
    np.testing.assert_allclose(got32, plan(y.astype(np.float32).astype(np.float64)), rtol=0,
                               atol=1e-6 * max(np.abs(y).max(), np.abs(ref).max()))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n,m", [(1, 5), (2, 7), (3, 9), (4, 1), (5, 6), (64, 1000), (200, 777), (64, 5003), (300, 600)])
def test_the_two_kernels_agree(rng, dtype, n, m):
    if not HAS_AVX2:
        pytest.skip(f"only one kernel on this CPU/build ({letcc.plan_kernel()})")
    x = knots(rng, n)
    at = rng.uniform(-1.2, 1.2, n + 3)
    y = rng.normal(size=(n, m)).astype(dtype)
    plan = letcc.SplineSmoother(x, at, lam=1e-3, method="banded")
    results = {}
    try:
        for k in ("generic", "avx2"):
            letcc.set_plan_kernel(k)
            results[k] = plan(y)
    finally:
        letcc.set_plan_kernel("auto")
    tol = 1e-13 if dtype == np.float64 else 1.2e-7  # float32: at most a rounding of the last bit
    np.testing.assert_allclose(results["avx2"], results["generic"], rtol=0,
                               atol=tol * max(np.abs(results["generic"]).max(), 1.0))


# Outputs of 16 MiB or more are written with non-temporal stores (both dtypes
# in the AVX2 kernel, float64 in the generic one). Every element must still be
# written: misaligned rows (streamed or not), tails that are not a whole
# store, tiles split over threads.
@pytest.mark.parametrize("dtype,m", [(np.float64, 32768), (np.float64, 32771),
                                     (np.float32, 65536), (np.float32, 65541)])
@pytest.mark.parametrize("misaligned", [False, True])
def test_large_outputs_are_written_completely(rng, kernel, threads, dtype, m, misaligned):
    n = q = 64  # q * m * itemsize >= 16 MiB
    x = knots(rng, n)
    at = np.sort(rng.uniform(-1.0, 1.0, q))
    plan = letcc.SplineSmoother(x, at, lam=1e-3, method="banded")
    y = rng.normal(size=(n, m)).astype(dtype)
    ref = plan.matrix() @ y.astype(np.float64)
    base = np.full(q * m + 1, np.nan, dtype=dtype)
    out = (base[1:] if misaligned else base[:-1]).reshape(q, m)
    assert (out.ctypes.data % 16 != 0) == misaligned
    tol = 1e-12 if dtype == np.float64 else 1e-6
    for k in (1, 2):
        letcc.set_num_threads(k)
        out[...] = np.nan
        assert plan(y, out=out) is out
        assert not np.isnan(out).any()
        np.testing.assert_allclose(out, ref, rtol=0, atol=tol * np.abs(y).max())
        np.testing.assert_array_equal(plan(y), out)  # a fresh result is also a large output


# Streamed outputs are split into tiles that start on the output's 64-byte
# lines, so where the tiles fall depends on the output's address. A column's
# result must not: the same bits wherever the output starts.
@pytest.mark.parametrize("dtype,m", [(np.float32, 65536), (np.float64, 32768), (np.float64, 32776)])
def test_streamed_results_do_not_depend_on_where_the_output_starts(rng, kernel, dtype, m):
    n = q = 64
    x = knots(rng, n)
    plan = letcc.SplineSmoother(x, np.sort(rng.uniform(-1.0, 1.0, q)), lam=1e-3, method="banded")
    y = rng.normal(size=(n, m)).astype(dtype)
    first = None
    base = np.empty(q * m + 64, dtype=dtype)
    lead = (-base.ctypes.data % 64) // base.itemsize      # elements to the first line boundary
    for shift in range(0, 64 // base.itemsize):           # every place in a cache line
        out = base[lead + shift: lead + shift + q * m].reshape(q, m)
        out[...] = np.nan
        plan(y, out=out)
        if first is None:
            first = out.copy()
        else:
            np.testing.assert_array_equal(out, first, err_msg=f"output {shift} elements past a line")


def test_plan_kernel_reports_the_choice():
    default = letcc.plan_kernel()
    assert default == "avx2" or default.startswith("generic-")
    try:
        letcc.set_plan_kernel("generic")
        assert letcc.plan_kernel() == f"generic-{letcc.kernel_isa()}"
    finally:
        letcc.set_plan_kernel("auto")
    assert letcc.plan_kernel() == default


def test_set_plan_kernel_rejects_bad_names():
    with pytest.raises(ValueError, match="'auto', 'generic' or 'avx2', got 'avx9'"):
        letcc.set_plan_kernel("avx9")
    with pytest.raises(TypeError, match="must be a str, got int"):
        letcc.set_plan_kernel(2)
    assert letcc.plan_kernel() in ("avx2", f"generic-{letcc.kernel_isa()}")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n,m", [(64, 3000), (300, 600), (1030, 300)])
def test_each_kernel_gives_identical_results_on_one_and_two_threads(rng, kernel, threads, dtype, n, m):
    # several tiles with a tail (tile widths depend on the kernel and n, never
    # on the thread count)
    x = knots(rng, n)
    plan = letcc.SplineSmoother(x, rng.uniform(-1.0, 1.0, 50), lam=1e-4, method="banded")
    y = rng.normal(size=(n, m)).astype(dtype)
    letcc.set_num_threads(1)
    one = plan(y)
    letcc.set_num_threads(2)
    np.testing.assert_array_equal(plan(y), one)
