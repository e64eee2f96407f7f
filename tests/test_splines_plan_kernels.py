"""The banded plan kernels: the compiler-vectorised one (csrc/kernels.hpp,
"generic"), the AVX2/FMA intrinsics one (csrc/kernels_avx2.hpp) and the
AVX-512 one (csrc/kernels_avx512.hpp, the default where the CPU has its
features). Each is checked against scipy and against the others, on every size
class the tiles meet: fewer columns than one vector, tails that are not a
whole vector, several tiles, and outputs large enough to be written with
non-temporal stores (misaligned, odd widths, one and two threads)."""
import numpy as np
import pytest
from scipy.interpolate import make_smoothing_spline

import letcc


from conftest import plan_kernel_runs
from test_splines_reference import dense_reinsch, natural_spline_eval

HAS_AVX2 = plan_kernel_runs("avx2")
HAS_AVX512 = plan_kernel_runs("avx512")
# The hand-written kernels this CPU runs, besides the generic one.
INTRINSICS = [k for k, ok in (("avx2", HAS_AVX2), ("avx512", HAS_AVX512)) if ok]


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
@pytest.mark.parametrize("n,m", [(1, 5), (2, 7), (3, 9), (4, 1), (4, 13), (5, 6), (64, 1000), (200, 777),
                                 (64, 5003), (300, 600), (17, 8), (17, 9), (17, 15)])
def test_the_kernels_agree(rng, dtype, n, m):
    if not INTRINSICS:
        pytest.skip(f"only one kernel on this CPU/build ({letcc.plan_kernel()})")
    x = knots(rng, n)
    at = rng.uniform(-1.2, 1.2, n + 3)
    y = rng.normal(size=(n, m)).astype(dtype)
    plan = letcc.SplineSmoother(x, at, lam=1e-3, method="banded")
    results = {}
    try:
        for k in ("generic", *INTRINSICS):
            letcc.set_plan_kernel(k)
            results[k] = plan(y)
    finally:
        letcc.set_plan_kernel("auto")
    tol = 1e-13 if dtype == np.float64 else 1.2e-7  # float32: at most a rounding of the last bit
    for k in INTRINSICS:
        if k == "avx512" and dtype == np.float32:
            # float32 evaluation where the query allows it (plan_walk_isa.hpp,
            # f32_eval): the bound against a dense float64 solve
            ref = dense_float64(x, at, y.astype(np.float64), 1e-3)
            np.testing.assert_allclose(results[k], ref, rtol=0,
                                       atol=1e-6 * max(np.abs(y).max(), np.abs(ref).max()), err_msg=k)
            continue
        np.testing.assert_allclose(results[k], results["generic"], rtol=0,
                                   atol=tol * max(np.abs(results["generic"]).max(), 1.0), err_msg=k)
    if len(INTRINSICS) == 2 and dtype == np.float64:
        # The AVX-512 kernel runs the AVX2 kernel's operations in its order on
        # every column (masked tails included): the same bits.
        np.testing.assert_array_equal(results["avx512"], results["avx2"])


def dense_float64(x, at, y, lam, nu=0):
    """The plan's result from a dense float64 Reinsch solve (test_splines_reference.py); one knot: the
    constant, two: the line through both points."""
    n = len(x)
    if n == 1:
        return np.broadcast_to(y[0] if nu == 0 else 0.0 * y[0], (len(at), y.shape[1])).copy()
    if n == 2:
        slope = (y[1] - y[0]) / (x[1] - x[0])
        return (y[0] + np.multiply.outer(at - x[0], slope) if nu == 0 else
                np.broadcast_to(slope if nu == 1 else 0.0 * slope, (len(at), y.shape[1])).copy())
    S, _ = dense_reinsch(x, np.ones(n), lam)
    return natural_spline_eval(x, S @ y, at, nu)


# The AVX-512 kernel's float32 evaluation (csrc/plan_walk_isa.hpp, f32_eval):
# a query's gamma terms summed in float64 and narrowed once, its y terms (cy0,
# cy1 with |cy0| + |cy1| <= 1) added by two float32 FMAs. Four float32
# roundings, each within 2^-24 (|result| + max |y| of the column): every
# element within 3 x 2^-24 (|result| + max |y|) of a dense float64 solve
# (the float64 evaluation: 2^-24 |result|), at the study's worst cases (n up
# to 1024, lam up to 1, Chebyshev knots; bench/float32_arithmetic.py). The
# error is relative to max |y|, not to |result|: under heavy smoothing (lam = 1,
# n = 1024: results ~15x smaller than y) it is that much above the float64
# evaluation's rounding of the result, as the bound allows. Queries
# whose y terms cancel (first derivatives, extrapolation) keep the float64
# evaluation: there the AVX-512 kernel gives the AVX2 kernel's bits.
@pytest.mark.skipif(not (HAS_AVX2 and HAS_AVX512), reason="needs the AVX2 and AVX-512 kernels")
@pytest.mark.parametrize("n", [3, 4, 5, 9, 64, 256, 1024])
@pytest.mark.parametrize("lam", [1e-8, 1e-4, 1e-2, 1.0])
@pytest.mark.parametrize("chebyshev", [False, True])
def test_avx512_float32_evaluation_error_bound(rng, n, lam, chebyshev):
    x = np.sort(np.cos(np.arange(n) * np.pi / (n - 1))) if chebyshev else knots(rng, n)
    m = 203  # 25 vectors of 8 and a masked tail
    y32 = (rng.normal(size=(n, m)) * 10.0).astype(np.float32)
    y64 = y32.astype(np.float64)
    colmax = np.abs(y64).max(axis=0)
    inside = rng.permutation(np.concatenate([x, rng.uniform(x[0], x[-1], 2 * n)]))
    outside = rng.permutation(np.concatenate([x[0] - rng.uniform(0.01, 0.5, 5), x[-1] + rng.uniform(0.01, 0.5, 5)]))
    for where, at, nus in (("inside", inside, (0, 1, 2)), ("outside", outside, (0,))):
        for nu in nus:
            plan = letcc.SplineSmoother(x, at, lam=lam, nu=nu, method="banded")
            got = {}
            try:
                for k in ("avx2", "avx512"):
                    letcc.set_plan_kernel(k)
                    got[k] = plan(y32)
            finally:
                letcc.set_plan_kernel("auto")
            assert got["avx512"].dtype == np.float32
            if nu == 1 or where == "outside":
                np.testing.assert_array_equal(got["avx512"], got["avx2"], err_msg=f"{where}, nu = {nu}")
                continue
            ref = dense_float64(x, at, y64, lam, nu)
            # + the float64 arithmetic's own distance from the dense solve, that of the float64 plan on
            # the same numbers (second derivatives at n = 1024, lam = 1: up to ~4e-7 of the largest)
            plan64 = plan(y64)
            bound = 3 * 2.0 ** -24 * (np.abs(ref) + colmax) + np.abs(plan64 - ref) + 1e-12 * np.abs(ref).max()
            err = np.abs(got["avx512"].astype(np.float64) - ref)
            assert np.all(err <= bound), (where, nu, float(np.max(err / bound)))
            # the bound (relative to max |y|) where the values are the data's size
            if nu == 0:
                assert err.max() / np.abs(y64).max() < 1e-6


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_misaligned_and_strided_inputs(rng, kernel, dtype):
    # y starting off any vector boundary (one element past an aligned start),
    # and a non-contiguous view (converted by the Python side): results as for
    # a fresh contiguous copy, within the accuracy bound of the float64 map.
    n, m, q = 37, 1043, 41
    x = knots(rng, n)
    plan = letcc.SplineSmoother(x, rng.uniform(-1.1, 1.1, q), lam=1e-3, method="banded")
    base = rng.normal(size=n * m + 1).astype(dtype)
    y = base[1:].reshape(n, m)
    assert y.ctypes.data % 8 != 0 or dtype == np.float64
    ref = plan.matrix() @ y.astype(np.float64)
    tol = 1e-12 if dtype == np.float64 else 1e-6
    np.testing.assert_allclose(plan(y), ref, rtol=0, atol=tol * np.abs(y).max())
    np.testing.assert_array_equal(plan(y), plan(y.copy()))
    wide = rng.normal(size=(n, 2 * m + 1)).astype(dtype)
    strided = wide[:, 1::2]
    assert not strided.flags.c_contiguous
    np.testing.assert_array_equal(plan(strided), plan(np.ascontiguousarray(strided)))
    out = np.full((q, m), np.nan, dtype=dtype)
    plan(y, out=out)
    assert not np.isnan(out).any()


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
    # auto: the widest hand-written kernel this CPU runs
    assert default == (INTRINSICS[-1] if INTRINSICS else f"generic-{letcc.kernel_isa()}")
    try:
        letcc.set_plan_kernel("generic")
        assert letcc.plan_kernel() == f"generic-{letcc.kernel_isa()}"
        for k in INTRINSICS:
            letcc.set_plan_kernel(k)
            assert letcc.plan_kernel() == k
    finally:
        letcc.set_plan_kernel("auto")
    assert letcc.plan_kernel() == default


def test_set_plan_kernel_rejects_bad_names():
    with pytest.raises(ValueError, match="'auto', 'generic', 'avx2' or 'avx512', got 'avx9'"):
        letcc.set_plan_kernel("avx9")
    with pytest.raises(TypeError, match="must be a str, got int"):
        letcc.set_plan_kernel(2)
    assert letcc.plan_kernel() in ("avx2", "avx512", f"generic-{letcc.kernel_isa()}")


@pytest.mark.skipif(HAS_AVX512, reason="this CPU has the AVX-512 kernel's features")
def test_set_plan_kernel_names_the_missing_avx512_feature():
    before = letcc.plan_kernel()
    with pytest.raises(ValueError, match=r"plan kernel 'avx512' needs .* lacks (avx512f|avx512vl|avx2|fma|an x86-64)"):
        letcc.set_plan_kernel("avx512")
    assert letcc.plan_kernel() == before


@pytest.mark.skipif(not HAS_AVX512, reason="no AVX-512 kernel here")
def test_auto_follows_the_forced_isa():
    # a forced avx2 build runs the AVX2 kernel under "auto", baseline the generic one
    try:
        letcc.set_kernel_isa("avx2")
        assert letcc.plan_kernel() == "avx2"
        letcc.set_kernel_isa("baseline")
        assert letcc.plan_kernel() == "generic-baseline"
    finally:
        letcc.set_kernel_isa("auto")
    assert letcc.plan_kernel() == "avx512"


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


# The float32 accuracy bound for every kernel (tests/test_splines_reference.py
# checks it through conftest's fixture, which covers generic and AVX2 only):
# float32 in and out within 1e-6 of the float64 result, relative to max |y|,
# for n <= 1024, with the float64 reference from the generic kernel.
@pytest.mark.parametrize("n", [5, 64, 1024])
@pytest.mark.parametrize("lam", [1e-8, 1e-4, 1.0])
@pytest.mark.parametrize("chebyshev", [False, True])
def test_float32_within_1e6_of_float64(rng, kernel, n, lam, chebyshev):
    x = np.sort(np.cos(np.arange(n) * np.pi / (n - 1))) if chebyshev else knots(rng, n)
    y32 = (rng.normal(size=(n, 203)) * 10.0).astype(np.float32)
    y64 = y32.astype(np.float64)
    inside = np.concatenate([x, rng.uniform(-1.0, 1.0, 64)])
    plan = letcc.SplineSmoother(x, inside, lam=lam, method="banded")
    got = plan(y32)
    assert got.dtype == np.float32
    try:
        letcc.set_plan_kernel("generic")
        ref = plan(y64)
    finally:
        letcc.set_plan_kernel(kernel)
    assert np.max(np.abs(got - ref)) / np.abs(y64).max() < 1e-6
    # float64 against float64: FMA against separate rounding, amplified by the
    # conditioning of the n = 1024 solves (up to ~1e-11 of max|result| here)
    np.testing.assert_allclose(plan(y64), ref, rtol=0, atol=1e-10 * max(np.abs(ref).max(), 1.0))
