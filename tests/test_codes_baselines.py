"""Uncoded and Replication: who computes what, first copy wins, decodability."""
import numpy as np
import pytest

from letcc.codes import Replication, Uncoded


def test_uncoded_is_the_identity(rng):
    code = Uncoded(5)
    assert (code.K, code.N) == (5, 5) and code.alpha is None and code.beta is None
    X = rng.standard_normal((5, 2))
    assert code.encode(X) is X
    np.testing.assert_array_equal(code.decode(X[[3, 0, 4, 1, 2]], [3, 0, 4, 1, 2]), X)
    assert code.can_decode(range(5)) and code.is_complete(range(5))
    assert not code.can_decode([0, 1, 2, 3]) and not code.is_complete([0, 1, 2, 3])


def test_replication_assigns_input_i_mod_k(rng):
    code = Replication(3, 2)
    assert code.N == 6
    X = rng.standard_normal((3, 4))
    np.testing.assert_array_equal(code.encode(X), X[[0, 1, 2, 0, 1, 2]])


def test_replication_first_listed_copy_wins():
    code = Replication(3, 3)  # workers i and i+3, i+6 hold input i % 3
    Y_all = np.arange(9, dtype=float)[:, None] * np.ones((1, 2))
    avail = np.array([4, 6, 1, 0, 8, 5])  # inputs 1, 0, 1, 0, 2, 2
    est = code.decode(Y_all[avail], avail)
    np.testing.assert_array_equal(est[:, 0], [6.0, 4.0, 8.0])
    assert code.can_decode(avail) and code.is_complete(avail)


def test_replication_missing_input_is_refused():
    code = Replication(3, 2)
    avail = [0, 3, 1, 4]  # nobody holds input 2
    assert not code.can_decode(avail)
    with pytest.raises(ValueError, match=r"no answering worker holds input\(s\) \[2\]"):
        code.decode(np.zeros((4, 1)), avail)
    assert not code.can_decode([])


def test_torch_replication(rng):
    torch = pytest.importorskip("torch")
    code = Replication(2, 2)
    X = torch.from_numpy(rng.standard_normal((2, 3)))
    Z = code.encode(X)
    assert isinstance(Z, torch.Tensor) and torch.equal(Z, X[[0, 1, 0, 1]])
    est = code.decode(Z[[3, 2]], [3, 2])
    assert torch.equal(est, X[[0, 1]])


@pytest.mark.parametrize("args, exc, match", [((0, 2), ValueError, "K must be >= 1"),
                                              ((2, 0), ValueError, "r must be >= 1"),
                                              ((2, 1.5), TypeError, "r must be an integer")])
def test_bad_parameters(args, exc, match):
    with pytest.raises(exc, match=match):
        Replication(*args)
