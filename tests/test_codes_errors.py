"""Every code refuses bad calls with a clear error that names the value."""
import numpy as np
import pytest

from letcc.codes import BACC, LeTCC, Replication, Uncoded

CODES = [lambda: LeTCC(4, 8), lambda: BACC(4, 8), lambda: Replication(4, 2)]


@pytest.mark.parametrize("make", CODES)
@pytest.mark.parametrize("available, exc, match", [
    ([], ValueError, "available is empty"),
    ([1, 3, 1], ValueError, "lists worker 1 more than once"),
    ([0, 8], ValueError, r"available\[1\] = 8 is not a worker index in 0..7"),
    ([-1, 2], ValueError, r"available\[0\] = -1 is not a worker index"),
    ([0.5, 2], TypeError, "integer worker indices"),
    ([[0, 1]], ValueError, "must be 1-D"),
    (3, ValueError, "1-D sequence of worker indices"),
])
def test_bad_available(make, available, exc, match):
    code = make()
    n = len(np.atleast_1d(np.asarray(available).ravel()))
    with pytest.raises(exc, match=match):
        code.decode(np.zeros((max(n, 1), 2)), available)


@pytest.mark.parametrize("make", CODES)
def test_y_length_must_match_available(make):
    with pytest.raises(ValueError, match="Y has 3 rows but available lists 2 workers"):
        make().decode(np.zeros((3, 2)), [0, 1])


@pytest.mark.parametrize("make", CODES)
def test_x_must_have_k_rows(make):
    with pytest.raises(ValueError, match="X has 5 rows but the code encodes K = 4 inputs"):
        make().encode(np.zeros((5, 2)))
    with pytest.raises(ValueError, match="X must have a leading axis"):
        make().encode(3.0)


def test_float_indices_that_are_integers_are_accepted():
    code = BACC(3, 5)
    np.testing.assert_allclose(code.decode(np.ones((2, 1)), np.array([0.0, 4.0])), 1.0)


def test_bad_dtypes():
    with pytest.raises(TypeError, match="float32 or float64"):
        BACC(3, 5).encode(np.zeros((3, 2), dtype=np.complex128))
    with pytest.raises(TypeError, match="float32 or float64"):
        LeTCC(3, 5).encode(np.zeros((3, 2), dtype=np.float16))
    torch = pytest.importorskip("torch")
    with pytest.raises(TypeError, match="float32 or float64"):
        BACC(3, 5).encode(torch.zeros(3, 2, dtype=torch.float16))


@pytest.mark.parametrize("kwargs, exc, match", [
    (dict(lam_dec=-1.0), ValueError, "lam must be finite and >= 0"),
    (dict(lam_dec="fast"), ValueError, "lam_dec must be a number >= 0, None, 'auto'"),
    (dict(lam_dec=[1e-3]), TypeError, "lam_dec must be a number >= 0, None"),
    (dict(lam_enc=None), TypeError, "lam_enc cannot be None"),
    (dict(lam_enc="gcv"), ValueError, "lam_enc must be a number >= 0, 'auto'"),
    (dict(lam_enc=lambda K, N: -1.0), ValueError, "lam_enc callable returned -1.0"),
    (dict(alpha=[0.0, 0.1, 0.2]), ValueError, "alpha must hold 4 nodes, got 3"),
    (dict(beta=np.linspace(-2, 2, 8)), ValueError, r"beta\[0\] = -2.0 is outside \[-1, 1\]"),
    (dict(beta=np.linspace(1, -1, 8)), ValueError, "beta must be strictly increasing"),
])
def test_bad_letcc_parameters(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        LeTCC(4, 8, **kwargs)


def test_bad_policy_answer_at_decode():
    code = LeTCC(4, 8, lam_dec=lambda b, N, K: float("nan"))
    with pytest.raises(ValueError, match="the lam_dec policy returned nan"):
        code.decode(np.zeros((8, 1)), np.arange(8))


@pytest.mark.parametrize("cls, args, exc, match", [
    (LeTCC, (0, 8), ValueError, "K must be >= 1"),
    (LeTCC, (4, 2.0), TypeError, "N must be an integer"),
    (BACC, (4, 0), ValueError, "N must be >= 1"),
    (BACC, (True, 4), TypeError, "K must be an integer"),
    (Uncoded, (-1,), ValueError, "K must be >= 1"),
])
def test_bad_sizes(cls, args, exc, match):
    with pytest.raises(exc, match=match):
        cls(*args)
