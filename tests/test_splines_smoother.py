"""SplineSmoother and SmoothingSpline as objects: columns, shapes, the dense
operator, threads, NaN, memory layouts, torch tensors and ``out=``.

Numerical agreement with independent references is in
test_splines_reference.py; here the references are the objects themselves
(a loop over single columns, ``plan.matrix()``, one thread)."""
import numpy as np
import pytest

import letcc


def knots(rng, n):
    return np.sort(rng.uniform(-1.0, 1.0, n)) if n < 3 else np.linspace(-1, 1, n) + rng.uniform(-0.3, 0.3, n) / n


@pytest.fixture(params=["auto", "banded", "dense"])
def method(request):
    """The CPU kernel a plan uses (auto picks banded or dense by size)."""
    return request.param


def close(a, b, tol=1e-12):
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    assert a.shape == b.shape
    np.testing.assert_allclose(a, b, rtol=0, atol=tol * max(np.abs(b).max(initial=0.0), 1.0))


# ---------------------------------------------------------------- columns
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n,m", [(1, 5), (2, 7), (3, 9), (4, 3), (17, 100), (64, 1000)])
def test_many_columns_equal_a_loop_over_single_columns(rng, dtype, n, m, method):
    x = knots(rng, n)
    at = rng.uniform(-1.2, 1.2, 13)
    plan = letcc.SplineSmoother(x, at, lam=1e-3, w=rng.uniform(0.5, 2.0, n), method=method)
    y = rng.normal(size=(n, m)).astype(dtype)
    together = plan(y)
    assert together.shape == (13, m) and together.dtype == dtype
    one_by_one = np.stack([plan(np.ascontiguousarray(y[:, j])) for j in range(m)], axis=1)
    close(together, one_by_one, 1e-12 if dtype == np.float64 else 1e-6)
    s = letcc.SmoothingSpline(x, y, lam=1e-3)
    loop = np.stack([letcc.SmoothingSpline(x, y[:, j], lam=1e-3)(at) for j in range(m)], axis=1)
    close(s(at), loop, 1e-12 if dtype == np.float64 else 1e-6)


def test_trailing_dimensions_are_columns(rng):
    n = 9
    x = knots(rng, n)
    y = rng.normal(size=(n, 3, 4, 2))
    at = rng.uniform(-1, 1, 5)
    plan = letcc.SplineSmoother(x, at, lam=0.01)
    out = plan(y)
    assert out.shape == (5, 3, 4, 2)
    np.testing.assert_array_equal(out, plan(y.reshape(n, -1)).reshape(5, 3, 4, 2))
    s = letcc.SmoothingSpline(x, y, lam=0.01)
    assert s(at).shape == (5, 3, 4, 2)
    close(s(at), out)
    assert s(0.25).shape == (3, 4, 2)  # a scalar point drops its axis


@pytest.mark.parametrize("axis", [0, 1, 2, -1, -2])
def test_smoothing_spline_axis(rng, axis):
    n = 7
    x = knots(rng, n)
    shape = [3, 4, 5]
    shape[axis] = n
    y = rng.normal(size=shape)
    at = rng.uniform(-1, 1, 6)
    s = letcc.SmoothingSpline(x, y, lam=0.1, axis=axis)
    moved = np.moveaxis(y, axis, 0)
    ref = letcc.SmoothingSpline(x, np.ascontiguousarray(moved), lam=0.1)(at)
    got = s(at)
    assert got.shape == (6,) + moved.shape[1:]
    close(got, ref)


def test_empty_columns_give_empty_results(rng):
    x = knots(rng, 6)
    plan = letcc.SplineSmoother(x, [0.0, 0.5], lam=1.0)
    assert plan(np.zeros((6, 0))).shape == (2, 0)
    assert plan(np.zeros((6, 0, 3), np.float32)).shape == (2, 0, 3)
    assert letcc.SmoothingSpline(x, np.zeros((6, 0)), lam=1.0)([0.0, 0.5, 0.7]).shape == (3, 0)


def test_one_dimensional_y_and_scalar_points(rng):
    x = knots(rng, 8)
    y = rng.normal(size=8)
    plan = letcc.SplineSmoother(x, 0.3, lam=1e-2)
    assert plan.q == 1 and plan(y).shape == (1,)
    s = letcc.SmoothingSpline(x, y, lam=1e-2)
    assert np.ndim(s(0.3)) == 0
    close(plan(y)[0], s(0.3))


def test_points_in_any_order_with_repeats(rng):
    x = knots(rng, 10)
    y = rng.normal(size=(10, 4))
    at = rng.uniform(-1.5, 1.5, 12)
    at = np.concatenate([at, at[:3]])
    perm = rng.permutation(at.size)
    plan = letcc.SplineSmoother(x, at, lam=0.05)
    np.testing.assert_array_equal(letcc.SplineSmoother(x, at[perm], lam=0.05)(y), plan(y)[perm])
    np.testing.assert_array_equal(plan(y)[-3:], plan(y)[:3])


def test_integer_and_bool_data_become_float64(rng):
    x = knots(rng, 5)
    plan = letcc.SplineSmoother(x, [0.0, 0.2], lam=0.1)
    yi = rng.integers(-5, 5, size=(5, 3))
    got = plan(yi)
    assert got.dtype == np.float64
    np.testing.assert_array_equal(got, plan(yi.astype(np.float64)))
    assert plan(yi.astype(bool)).dtype == np.float64
    assert letcc.SmoothingSpline(x, yi.astype(np.int32))(0.1).dtype == np.float64
    got_list = plan([[1.0], [2.0], [3.0], [2.0], [1.0]])
    assert got_list.shape == (2, 1)


# ---------------------------------------------------------------- dense operator
@pytest.mark.parametrize("n", [1, 2, 3, 4, 30])
@pytest.mark.parametrize("lam", [0.0, 1e-3, 10.0])
def test_matrix_times_y_equals_the_plan(rng, n, lam, method):
    x = knots(rng, n)
    at = rng.uniform(-1.3, 1.3, 11)
    plan = letcc.SplineSmoother(x, at, lam=lam, w=rng.uniform(0.5, 2.0, n), method=method)
    A = plan.matrix()
    assert A.shape == (11, n) and A.dtype == np.float64
    y = rng.normal(size=(n, 6))
    close(A @ y, plan(y))
    y32 = y.astype(np.float32)
    close(A @ y32.astype(np.float64), plan(y32), 1e-6)
    # a smoother reproduces lines exactly: the rows of A sum to one and A x = at
    close(A.sum(axis=1), np.ones(11))
    if n >= 2:
        close(A @ x, at)


def test_matrix_at_the_knots_has_the_smoother_trace(rng):
    n = 20
    x = knots(rng, n)
    for lam in (0.0, 1e-4, 1e-1, 1e2):
        plan = letcc.SplineSmoother(x, x, lam=lam)
        assert abs(np.trace(plan.matrix()) - plan.trace()) < 1e-9 * n


# ---------------------------------------------------------------- threads
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_one_and_two_threads_give_identical_results(rng, threads, dtype, method):
    # enough work for both kernels to split column tiles over threads (the dense
    # one needs m * (n + q) >= 2**19, the banded one 2**16)
    n, m = 32, 10000
    x = knots(rng, n)
    at = rng.uniform(-1.1, 1.1, n)
    y = rng.normal(size=(n, m)).astype(dtype)
    plan = letcc.SplineSmoother(x, at, lam=1e-3, method=method)
    results = {}
    for k in (1, 2):
        letcc.set_num_threads(k)
        assert letcc.get_num_threads() == k
        s = letcc.SmoothingSpline(x, y, lam=1e-3)
        results[k] = (plan(y), s(at), s(at, nu=2), letcc.SmoothingSpline(x, y[:, :200], lam=None).lam)
    for a, b in zip(results[1], results[2]):
        np.testing.assert_array_equal(a, b)


def test_set_num_threads_zero_means_all_cores(threads):
    letcc.set_num_threads(0)
    assert letcc.get_num_threads() >= 1


# ---------------------------------------------------------------- NaN
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_nan_stays_in_its_column(rng, dtype, bad, method):
    n, m = 12, 40
    x = knots(rng, n)
    at = rng.uniform(-1.2, 1.2, 9)
    y = rng.normal(size=(n, m)).astype(dtype)
    clean = y.copy()
    y[5, 7] = bad
    plan = letcc.SplineSmoother(x, at, lam=1e-2, method=method)
    got, ref = plan(y), plan(clean)
    assert not np.isfinite(got[:, 7]).all()
    others = np.arange(m) != 7
    np.testing.assert_array_equal(got[:, others], ref[:, others])
    s = letcc.SmoothingSpline(x, y, lam=1e-2)
    for nu in (0, 1, 2):
        val = s(at, nu=nu)
        assert not np.isfinite(val[:, 7]).all()
        np.testing.assert_array_equal(val[:, others], letcc.SmoothingSpline(x, clean, lam=1e-2)(at, nu=nu)[:, others])


# ---------------------------------------------------------------- layouts
def test_read_only_inputs_are_accepted(rng):
    n = 10
    x, at, w = knots(rng, n), rng.uniform(-1, 1, 7), rng.uniform(0.5, 2, n)
    y = rng.normal(size=(n, 3))
    ref_plan = letcc.SplineSmoother(x, at, lam=0.1, w=w)(y)
    ref_s = letcc.SmoothingSpline(x, y, lam=0.1, w=w)(at)
    for arr in (x, at, w, y):
        arr.flags.writeable = False
    np.testing.assert_array_equal(letcc.SplineSmoother(x, at, lam=0.1, w=w)(y), ref_plan)
    np.testing.assert_array_equal(letcc.SmoothingSpline(x, y, lam=0.1, w=w)(at), ref_s)
    # a read-only broadcast view (stride 0)
    yb = np.broadcast_to(y[:, :1], (n, 5))
    np.testing.assert_array_equal(letcc.SplineSmoother(x, at, lam=0.1, w=w)(yb), np.repeat(ref_plan[:, :1], 5, 1))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_non_contiguous_inputs_are_accepted(rng, dtype, method):
    n = 11
    x = knots(rng, n)
    at = rng.uniform(-1.2, 1.2, 8)
    big = rng.normal(size=(n, 12)).astype(dtype)
    plan = letcc.SplineSmoother(x, at, lam=0.02, method=method)
    views = {
        "every other column": big[:, ::2],
        "reversed columns": big[:, ::-1],
        "Fortran order": np.asfortranarray(big),
        "transposed": np.ascontiguousarray(big.T).T,
        "1-D strided": big[:, 3],
    }
    for name, view in views.items():
        got = plan(view)
        assert got.dtype == dtype, name
        np.testing.assert_array_equal(got, plan(np.ascontiguousarray(view)), err_msg=name)
        s = letcc.SmoothingSpline(x, view, lam=0.02)
        np.testing.assert_array_equal(s(at), letcc.SmoothingSpline(x, np.ascontiguousarray(view), lam=0.02)(at))
    # strided knots, points and weights
    xs = np.repeat(x, 2)[::2]
    ats = np.repeat(at, 3)[::3]
    ws = np.ones(2 * n)[::2]
    assert not (xs.flags.c_contiguous or ats.flags.c_contiguous or ws.flags.c_contiguous)
    np.testing.assert_array_equal(letcc.SplineSmoother(xs, ats, lam=0.02, w=ws, method=method)(big), plan(big))


def test_lists_are_accepted(rng):
    x = [0.0, 0.5, 1.0, 2.0]
    y = [1.0, 2.0, 0.0, 1.0]
    got = letcc.SplineSmoother(x, [0.25, 1.5], lam=0.0)(y)
    close(got, letcc.SmoothingSpline(x, y)([0.25, 1.5]))


# ---------------------------------------------------------------- torch
torch = pytest.importorskip("torch")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_torch_cpu_in_torch_out(rng, dtype):
    n = 9
    x = knots(rng, n)
    at = rng.uniform(-1, 1, 5)
    y = torch.from_numpy(rng.normal(size=(n, 4))).to(dtype)
    plan = letcc.SplineSmoother(x, at, lam=0.1)
    got = plan(y)
    assert isinstance(got, torch.Tensor) and got.dtype == dtype and got.device.type == "cpu"
    np.testing.assert_array_equal(got.numpy(), plan(y.numpy()))
    # non-contiguous and requires_grad tensors too
    yt = y.T.contiguous().T
    assert not yt.is_contiguous()
    np.testing.assert_array_equal(plan(yt).numpy(), got.numpy())
    yg = y.clone().requires_grad_(True)
    np.testing.assert_array_equal(plan(yg).numpy(), got.numpy())
    s = letcc.SmoothingSpline(x, y, lam=0.1)
    val = s(at)
    assert isinstance(val, torch.Tensor) and val.dtype == dtype
    close(val.numpy(), got.numpy(), 1e-12 if dtype == torch.float64 else 1e-6)
    assert isinstance(s.fitted, torch.Tensor)


def test_torch_out_is_written_in_place(rng):
    n = 8
    x = knots(rng, n)
    plan = letcc.SplineSmoother(x, [0.1, 0.2, 0.3], lam=0.1)
    y = torch.from_numpy(rng.normal(size=(n, 6)).astype(np.float32))
    out = torch.empty((3, 6), dtype=torch.float32)
    ptr = out.data_ptr()
    res = plan(y, out=out)
    assert res is out and out.data_ptr() == ptr
    np.testing.assert_array_equal(out.numpy(), plan(y.numpy()))
    # a numpy y with a torch out, and a strided torch out
    out.zero_()
    assert plan(y.numpy(), out=out) is out
    np.testing.assert_array_equal(out.numpy(), plan(y.numpy()))
    wide = torch.zeros((3, 12), dtype=torch.float32)
    plan(y.numpy(), out=wide[:, ::2])
    np.testing.assert_array_equal(wide[:, ::2].numpy(), plan(y.numpy()))
    assert (wide[:, 1::2] == 0).all()


def test_torch_result_shares_memory_with_the_computed_array(rng):
    # the result tensor wraps the core's output (torch.from_numpy, no copy):
    # writing through it is visible in its numpy view
    x = knots(rng, 6)
    got = letcc.SplineSmoother(x, [0.0], lam=0.0)(torch.zeros((6, 3), dtype=torch.float64))
    view = got.numpy()
    got[0, 0] = 7.0
    assert view[0, 0] == 7.0


# ---------------------------------------------------------------- out=
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_out_parameter(rng, dtype, method):
    n, m = 10, 7
    x = knots(rng, n)
    at = rng.uniform(-1, 1, 4)
    plan = letcc.SplineSmoother(x, at, lam=0.3, method=method)
    y = rng.normal(size=(n, m)).astype(dtype)
    ref = plan(y)
    out = np.full((4, m), np.nan, dtype=dtype)
    assert plan(y, out=out) is out
    np.testing.assert_array_equal(out, ref)
    # a strided out (a column slice of a bigger array), with contiguous and strided y
    big = np.full((4, 2 * m), np.nan, dtype=dtype)
    for yy in (y, np.asfortranarray(y)):
        big[...] = np.nan
        assert plan(yy, out=big[:, ::2]) is not None
        np.testing.assert_array_equal(big[:, ::2], ref)
        assert np.isnan(big[:, 1::2]).all()
    # out reused many times (the production loop)
    for _ in range(3):
        plan(y, out=out)
    np.testing.assert_array_equal(out, ref)


# ---------------------------------------------------------------- large outputs
# Outputs written with non-temporal stores (16 MiB or more): see
# test_splines_plan_kernels.py, which runs them on both plan kernels.


# ---------------------------------------------------------------- attributes
def test_plan_attributes_and_repr(rng):
    x = knots(rng, 5)
    w = rng.uniform(0.5, 2, 5)
    plan = letcc.SplineSmoother(list(x), [0.0, 1.0, 2.0], lam=2, w=w)
    assert plan.n == 5 and plan.q == 3 and plan.lam == 2.0 and isinstance(plan.lam, float)
    np.testing.assert_array_equal(plan.x, x)
    np.testing.assert_array_equal(plan.at, [0.0, 1.0, 2.0])
    np.testing.assert_array_equal(plan.w, w)
    np.testing.assert_array_equal(letcc.SplineSmoother(x, [0.0]).w, np.ones(5))
    assert "n=5" in repr(plan) and "q=3" in repr(plan)
    s = letcc.SmoothingSpline(x, np.zeros((5, 2, 3)), lam=1.0)
    assert s.lam == 1.0 and "shape=(2, 3)" in repr(s)


def test_gcv_with_few_knots_returns_zero(rng):
    for n in (1, 2):
        s = letcc.SmoothingSpline(knots(rng, n), rng.normal(size=(n, 3)), lam=None)
        assert s.lam == 0.0


def test_gcv_lam_is_used_by_the_fit(rng):
    n = 25
    x = knots(rng, n)
    y = np.sin(3 * x)[:, None] + 0.1 * rng.normal(size=(n, 3))
    s = letcc.SmoothingSpline(x, y, lam=None)
    assert s.lam > 0
    at = rng.uniform(-1, 1, 9)
    np.testing.assert_array_equal(s(at), letcc.SmoothingSpline(x, y, lam=s.lam)(at))


# ---------------------------------------------------------------- derivative plans
@pytest.mark.parametrize("nu", [0, 1, 2])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_plan_derivatives_equal_the_smoothing_spline(rng, nu, dtype, method):
    n = 14
    x = knots(rng, n)
    at = rng.uniform(-1.3, 1.3, 10)  # inside and outside
    y = rng.normal(size=(n, 5)).astype(dtype)
    plan = letcc.SplineSmoother(x, at, lam=1e-2, nu=nu, method=method)
    assert plan.nu == nu
    got = plan(y)
    assert got.dtype == dtype
    close(got, letcc.SmoothingSpline(x, y, lam=1e-2)(at, nu=nu), 1e-12 if dtype == np.float64 else 1e-6)
    close(plan.matrix() @ y.astype(np.float64), got, 1e-12 if dtype == np.float64 else 1e-6)
