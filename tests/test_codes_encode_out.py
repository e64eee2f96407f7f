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
