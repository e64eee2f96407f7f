"""letcc.splines.DenseOperator: the compiled dense kernel against numpy's
float64 product, every element, float32 and float64, all layouts."""
import numpy as np
import pytest

from letcc.splines import DenseOperator


@pytest.mark.parametrize("dtype,tol", [(np.float64, 1e-13), (np.float32, 2e-6)])
@pytest.mark.parametrize("q,n", [(1, 1), (3, 1), (1, 5), (7, 3), (16, 8), (9, 40)])
@pytest.mark.parametrize("m", [1, 15, 16, 17, 300, 1000])
def test_matches_float64_product(rng, dtype, tol, q, n, m):
    a = rng.standard_normal((q, n))
    y = rng.standard_normal((n, m)).astype(dtype)
    got = DenseOperator(a)(y)
    assert got.dtype == dtype and got.shape == (q, m)
    ref = a @ y.astype(np.float64)
    scale = np.abs(a).sum(axis=1, keepdims=True) * np.abs(y).max()
    assert np.all(np.abs(got - ref) <= tol * scale)


def test_trailing_shape_torch_and_out(rng):
    torch = pytest.importorskip("torch")
    a = rng.standard_normal((5, 4))
    op = DenseOperator(a)
    y = rng.standard_normal((4, 3, 2)).astype(np.float32)
    ref = np.einsum("qn,nij->qij", a, y.astype(np.float64))
    np.testing.assert_allclose(op(y), ref, rtol=0, atol=1e-5)
    t = torch.from_numpy(y)
    res = op(t)
    assert isinstance(res, torch.Tensor) and res.shape == (5, 3, 2)
    np.testing.assert_allclose(res.numpy(), ref, rtol=0, atol=1e-5)
    out = np.full((5, 3, 2), np.nan, dtype=np.float32)
    assert op(y, out) is out
    np.testing.assert_allclose(out, ref, rtol=0, atol=1e-5)
    strided = np.full((5, 3, 4), np.nan, dtype=np.float32)[:, :, ::2]
    op(y, strided)
    np.testing.assert_allclose(strided, ref, rtol=0, atol=1e-5)
    ints = rng.integers(-5, 5, (4, 6))
    np.testing.assert_allclose(op(ints), a @ ints, rtol=0, atol=1e-12)


def test_nan_stays_in_its_column(rng):
    y = rng.standard_normal((6, 40))
    y[2, 7] = np.nan
    res = DenseOperator(rng.standard_normal((3, 6)))(y)
    assert np.isnan(res[:, 7]).all()
    assert np.isfinite(np.delete(res, 7, axis=1)).all()


def test_matrix_round_trip(rng):
    a = rng.standard_normal((3, 2))
    op = DenseOperator(a)
    np.testing.assert_array_equal(op.matrix(), a)
    assert (op.q, op.n) == (3, 2)


@pytest.mark.parametrize(
    "a,exc,msg",
    [
        (np.ones(3), ValueError, r"non-empty 2-D array \(q, n\), got shape \(3,\)"),
        (np.ones((0, 3)), ValueError, r"got shape \(0, 3\)"),
        (np.array([[1.0, np.inf]]), ValueError, r"non-finite entry a\[0, 1\] = inf"),
    ],
)
def test_bad_operator(a, exc, msg):
    with pytest.raises(exc, match=msg):
        DenseOperator(a)


def test_bad_inputs(rng):
    op = DenseOperator(rng.standard_normal((2, 3)))
    with pytest.raises(ValueError, match="y has 4 rows along the knot axis but the plan has n = 3"):
        op(np.ones((4, 2)))
    with pytest.raises(TypeError, match="complex"):
        op(np.ones((3, 2), dtype=complex))
    with pytest.raises(ValueError, match=r"out has shape \(2, 5\) but the result has shape \(2, 2\)"):
        op(np.ones((3, 2)), np.empty((2, 5)))
    with pytest.raises(TypeError, match="out has dtype float32 but y has dtype float64"):
        op(np.ones((3, 2)), np.empty((2, 2), dtype=np.float32))


@pytest.mark.parametrize("dtype,tol", [(np.float64, 1e-13), (np.float32, 2e-6)])
@pytest.mark.parametrize("m", [20000, 30000, 60001])  # m * (n + q) = 4e5 (one thread), 6e5, 1.2e6
def test_one_and_two_threads_agree_around_the_parallel_threshold(rng, threads, dtype, tol, m):
    import letcc

    a = rng.standard_normal((8, 12))
    y = rng.standard_normal((12, m)).astype(dtype)
    op = DenseOperator(a)
    got = {}
    for k in (1, 2):
        letcc.set_num_threads(k)
        got[k] = op(y)
    np.testing.assert_array_equal(got[1], got[2])
    ref = a @ y.astype(np.float64)
    scale = np.abs(a).sum(axis=1, keepdims=True) * np.abs(y).max()
    assert np.all(np.abs(got[2] - ref) <= tol * scale)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_every_column_is_computed_alike_wherever_the_tile_starts(rng, kernel_isa, dtype):
    """A column's result does not depend on which tile or block it falls in:
    the leftover columns of a tile go through the same vector code (zero
    padded) as the full blocks. The spline locator's pass decodes in tiles of
    its own (driver::PassDecode) and relies on it, bit for bit."""
    a = rng.standard_normal((8, 22))
    op = DenseOperator(a)
    y = rng.standard_normal((22, 600)).astype(dtype)
    whole = op(y)
    for lo, hi in [(0, 1), (0, 7), (3, 20), (5, 261), (255, 600), (17, 18), (100, 599), (1, 600)]:
        np.testing.assert_array_equal(op(np.ascontiguousarray(y[:, lo:hi])), whole[:, lo:hi])
