"""BACC against a direct implementation of Berrut's first-form interpolant."""
import numpy as np
import pytest

from letcc.codes import BACC, berrut_matrix


def berrut_direct(nodes, values, z):
    """r(z) = sum_i w_i(z) y_i, w_i = ((-1)^i / (z - z_i)) / sum_j ((-1)^j / (z - z_j)),
    nodes ascending; r(z_i) = y_i. Plain loops, one query point at a time."""
    values = np.asarray(values, dtype=np.float64)
    out = []
    for zz in z:
        hit = [i for i, zi in enumerate(nodes) if zz == zi]
        if hit:
            out.append(values[hit[0]])
            continue
        num = sum(((-1) ** i / (zz - zi)) * values[i] for i, zi in enumerate(nodes))
        den = sum((-1) ** i / (zz - zi) for i, zi in enumerate(nodes))
        out.append(num / den)
    return np.array(out)


@pytest.mark.parametrize("dtype, tol", [(np.float64, 1e-11), (np.float32, 2e-4)])
@pytest.mark.parametrize("K, N", [(4, 9), (8, 20), (5, 5)])
def test_encode_matches_direct_formula(rng, dtype, tol, K, N):
    code = BACC(K, N)
    X = rng.standard_normal((K, 2, 3)).astype(dtype)
    got = code.encode(X)
    assert got.shape == (N, 2, 3) and got.dtype == dtype
    ref = berrut_direct(code.alpha, X.astype(np.float64), code.beta)
    np.testing.assert_allclose(got, ref, rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype, tol", [(np.float64, 1e-11), (np.float32, 2e-4)])
def test_decode_alternates_signs_over_the_answering_nodes_only(rng, dtype, tol):
    K, N = 6, 17
    code = BACC(K, N)
    avail = rng.permutation(N)[:9]  # arrival order
    Y = rng.standard_normal((9, 4)).astype(dtype)
    got = code.decode(Y, avail)
    assert got.shape == (K, 4) and got.dtype == dtype
    order = np.argsort(avail)
    ref = berrut_direct(code.beta[avail[order]], Y[order].astype(np.float64), code.alpha)
    np.testing.assert_allclose(got, ref, rtol=tol, atol=tol)


def test_signs_of_stragglers_are_skipped(rng):
    # Workers 0, 2, 3, 5: alternating over these four (+ - + -) differs from
    # the signs they would have among all N nodes (+ + - -).
    code = BACC(3, 8)
    avail = np.array([0, 2, 3, 5])
    Y = rng.standard_normal((4, 2))
    nodes = code.beta[avail]
    ref = berrut_direct(nodes, Y, code.alpha)
    np.testing.assert_allclose(code.decode(Y, avail), ref, atol=1e-12)
    global_signs = np.array([1.0, 1.0, -1.0, -1.0])
    terms = global_signs / (code.alpha[:, None] - nodes[None, :])
    wrong = (terms / terms.sum(axis=1, keepdims=True)) @ Y
    assert np.abs(wrong - ref).max() > 1e-3


def test_exact_at_nodes(rng):
    # Worker nodes that contain every input node: the coded input there is the input.
    alpha = np.array([-0.5, 0.0, 0.25, 0.75])
    beta = np.array([-1.0, -0.5, -0.2, 0.0, 0.25, 0.5, 0.75, 1.0])
    code = BACC(4, 8, alpha=alpha, beta=beta)
    X = rng.standard_normal((4, 3))
    Z = code.encode(X)
    np.testing.assert_array_equal(Z[[1, 3, 4, 6]], X)
    # Decoding from those workers gives the outputs back exactly.
    avail = np.array([6, 1, 4, 3, 0])
    est = code.decode(Z[avail] ** 2, avail)
    np.testing.assert_array_equal(est, X**2)
    M = berrut_matrix(beta, [0.0, 0.1])
    np.testing.assert_array_equal(M[0], np.eye(8)[3])
    assert M[1].sum() == pytest.approx(1.0)


def test_decoder_matrix_follows_the_callers_order(rng):
    code = BACC(5, 12)
    avail = np.array([7, 0, 11, 3, 5])
    M = code.decoder_matrix(avail)
    assert M.shape == (5, 5)
    np.testing.assert_allclose(M.sum(axis=1), 1.0)
    Y = rng.standard_normal((5, 2))
    np.testing.assert_allclose(code.decode(Y, avail), M @ Y)
    np.testing.assert_allclose(code.decode(Y, avail), code.decode(Y[np.argsort(avail)], np.sort(avail)))


def test_one_two_three_workers_are_finite(rng):
    code = BACC(8, 16)
    Y = rng.standard_normal((16, 3))
    for n in (1, 2, 3):
        avail = rng.choice(16, size=n, replace=False)
        est = code.decode(Y[avail], avail)
        assert est.shape == (8, 3) and np.isfinite(est).all()
    np.testing.assert_allclose(code.decode(Y[[4]], [4]), np.broadcast_to(Y[4], (8, 3)))


def test_torch_in_torch_out(rng):
    torch = pytest.importorskip("torch")
    code = BACC(6, 14)
    for dtype, tol in ((torch.float32, 1e-5), (torch.float64, 1e-12)):
        X = torch.from_numpy(rng.standard_normal((6, 3, 2))).to(dtype)
        Z = code.encode(X)
        assert isinstance(Z, torch.Tensor) and Z.dtype == dtype and Z.shape == (14, 3, 2)
        np.testing.assert_allclose(Z.numpy(), code.encode(X.numpy()), rtol=tol, atol=tol)
        avail = [3, 0, 9, 12]
        est = code.decode(Z[avail], avail)
        assert isinstance(est, torch.Tensor) and est.dtype == dtype and est.shape == (6, 3, 2)


def test_decoders_are_cached_per_set(rng):
    code = BACC(4, 10)
    Y = rng.standard_normal((10, 1))
    code.decode(Y[[1, 5, 7]], [1, 5, 7])
    code.decode(Y[[7, 1, 5]], [7, 1, 5])
    assert code._decoders.hits == 1 and code._decoders.misses == 1
