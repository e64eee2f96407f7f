"""encode(X, out=...) for every code: the result is written into the caller's
buffer (the runtime passes shared-memory slots) and equals encode(X)."""
import numpy as np
import pytest

import letcc


def _codes():
    return [letcc.LeTCC(4, 9), letcc.BACC(4, 9), letcc.Uncoded(4), letcc.Replication(4, 3)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("code", _codes(), ids=repr)
def test_encode_into_out_equals_encode(rng, code, dtype):
    X = rng.standard_normal((code.K, 3, 5)).astype(dtype)
    ref = code.encode(X)
    out = np.full((code.N, 3, 5), np.nan, dtype=dtype)
    assert code.encode(X, out=out) is out
    np.testing.assert_array_equal(out, ref)


@pytest.mark.parametrize("code", _codes(), ids=repr)
def test_encode_into_torch_out(rng, code):
    torch = pytest.importorskip("torch")
    X = torch.from_numpy(rng.standard_normal((code.K, 6)).astype(np.float32))
    out = torch.full((code.N, 6), float("nan"))
    assert code.encode(X, out=out) is out
    np.testing.assert_array_equal(out.numpy(), np.asarray(code.encode(X)))


def test_bacc_encode_is_the_berrut_operator(rng):
    code = letcc.BACC(5, 11)
    X = rng.standard_normal((5, 200))
    np.testing.assert_allclose(code.encode(X), code.encoder_matrix @ X, rtol=0, atol=1e-13)
    X32 = X.astype(np.float32)
    np.testing.assert_allclose(code.encode(X32), code.encoder_matrix @ X, rtol=0, atol=2e-6 * np.abs(X).max() * 3)


@pytest.mark.parametrize("code", _codes(), ids=repr)
def test_encode_out_of_wrong_shape_is_refused(rng, code):
    X = rng.standard_normal((code.K, 4))
    with pytest.raises(ValueError, match="out has shape"):
        code.encode(X, out=np.empty((code.N + 1, 4)))


# ---- encode(X, rows=...): the coded inputs of some workers only ---------------------

@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("code", _codes() + [letcc.LeTCC(40, 100), letcc.LeTCC(8, 16, lam_enc=1e-3)], ids=repr)
def test_encode_rows_are_the_full_encodes_rows(rng, code, dtype):
    # Bit for bit where the subset's plan uses the same kernel as the full one
    # (each coded input is computed on its own). A LeTCC plan picks the dense
    # or the banded kernel by its size, so a small subset of a large code may
    # take the other one: equal to rounding then.
    X = rng.standard_normal((code.K, 3, 70)).astype(dtype)
    full = code.encode(X)
    same_kernel = (not isinstance(code, letcc.LeTCC)
                   or code.K * code.N <= letcc._core.dense_max_work(dtype == np.float64))
    tol = (2e-6 if dtype == np.float32 else 1e-13) * np.abs(full).max()
    for size in sorted({1, code.N // 2, code.N - 1, code.N}):
        rows = rng.permutation(code.N)[:size]               # any order
        part = code.encode(X, rows=rows)
        assert part.shape == (size, 3, 70) and part.dtype == dtype
        out = np.full((size, 3, 70), np.nan, dtype=dtype)
        assert code.encode(X, out=out, rows=list(rows)) is out
        for got in (part, out):
            if same_kernel:
                np.testing.assert_array_equal(got, full[rows])
            else:
                np.testing.assert_allclose(got, full[rows], rtol=0, atol=tol)


@pytest.mark.parametrize("code", [letcc.LeTCC(4, 9), letcc.BACC(4, 9)], ids=repr)
def test_encode_rows_reuses_its_plan_per_set(rng, code):
    X = rng.standard_normal((code.K, 8))
    code.encode(X, rows=[1, 5, 7])
    misses = code._row_encoders.misses
    code.encode(X, rows=np.array([1, 5, 7]))
    assert code._row_encoders.misses == misses and code._row_encoders.hits >= 1


def test_encode_rows_of_torch_inputs(rng):
    torch = pytest.importorskip("torch")
    code = letcc.LeTCC(4, 9)
    X = torch.from_numpy(rng.standard_normal((4, 6)).astype(np.float32))
    part = code.encode(X, rows=[8, 0, 3])
    assert isinstance(part, torch.Tensor)
    np.testing.assert_array_equal(part.numpy(), np.asarray(code.encode(X))[[8, 0, 3]])


@pytest.mark.parametrize("code", _codes(), ids=repr)
@pytest.mark.parametrize("rows, exc, match", [
    ([0, 0], ValueError, "rows lists worker 0 more than once"),
    ([-1], ValueError, r"rows\[0\] = -1 is not a worker index"),
    ([], ValueError, "rows is empty"),
    ([0.5], TypeError, "rows must hold integer worker indices"),
    ([[0, 1]], ValueError, "rows must be 1-D"),
])
def test_encode_rows_errors(rng, code, rows, exc, match):
    X = rng.standard_normal((code.K, 4))
    with pytest.raises(exc, match=match):
        code.encode(X, rows=rows)


@pytest.mark.parametrize("code", _codes(), ids=repr)
def test_encode_rows_out_of_wrong_shape_is_refused(rng, code):
    X = rng.standard_normal((code.K, 4))
    with pytest.raises(ValueError, match="out has shape"):
        code.encode(X, out=np.empty((code.N, 4)), rows=[0, 1])


@pytest.mark.parametrize("lam_enc", [0.0, 1e-3])
def test_subset_encoders_are_the_encoders_fit_at_the_subsets_nodes(rng, lam_enc):
    # encoder_for builds them without re-checking the nodes: the same plan as
    # SplineSmoother(alpha, beta[rows], lam_enc) built from scratch
    code = letcc.LeTCC(5, 13, lam_enc=lam_enc)
    for dtype in (np.float32, np.float64):
        X = rng.standard_normal((5, 40)).astype(dtype)
        for rows in ([12, 0, 4], [7], list(range(13))[::-1]):
            plan = code.encoder_for(rows)
            ref = letcc.SplineSmoother(code.alpha, code.beta[rows], lam=code.lam_enc)
            assert (plan.n, plan.q, plan.lam, plan.method) == (5, len(rows), ref.lam, ref.method)
            np.testing.assert_array_equal(plan.at, ref.at)
            np.testing.assert_array_equal(plan(X), ref(X))
    assert code.encoder_for(list(range(13))) is code.encoder
