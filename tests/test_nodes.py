"""letcc.nodes: default Chebyshev nodes, validation of user nodes, gaps."""
import numpy as np
import pytest

from letcc.nodes import as_nodes, chebyshev_first_kind, chebyshev_second_kind, equispaced, gaps, largest_gap


@pytest.mark.parametrize("K", [1, 2, 3, 8, 13, 64])
def test_first_kind_matches_cosine_formula(K):
    k = np.arange(1, K + 1)
    expected = np.sort(np.cos((2 * k - 1) * np.pi / (2 * K)))
    got = chebyshev_first_kind(K)
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-15)
    assert np.all(np.diff(got) > 0)
    assert np.all(np.abs(got) < 1)
    np.testing.assert_array_equal(got, -got[::-1])  # exactly symmetric


@pytest.mark.parametrize("N", [2, 3, 16, 17, 257])
def test_second_kind_matches_cosine_formula(N):
    n = np.arange(1, N + 1)
    expected = np.sort(np.cos((n - 1) * np.pi / (N - 1)))
    got = chebyshev_second_kind(N)
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-15)
    assert got[0] == -1.0 and got[-1] == 1.0
    assert np.all(np.diff(got) > 0)
    if N % 2:
        assert got[N // 2] == 0.0


def test_single_nodes_and_equispaced():
    np.testing.assert_array_equal(chebyshev_second_kind(1), [0.0])
    np.testing.assert_array_equal(equispaced(1), [0.0])
    np.testing.assert_allclose(equispaced(5), [-1, -0.5, 0, 0.5, 1])


@pytest.mark.parametrize("bad, exc, match", [
    (0, ValueError, "K must be >= 1"),
    (2.5, TypeError, "K must be an integer"),
    (True, TypeError, "K must be an integer"),
])
def test_bad_counts(bad, exc, match):
    with pytest.raises(exc, match=match):
        chebyshev_first_kind(bad)


def test_as_nodes_accepts_and_freezes():
    arr = as_nodes([-0.5, 0.0, 1.0], 3, "beta")
    assert arr.dtype == np.float64 and not arr.flags.writeable


@pytest.mark.parametrize("nodes, count, exc, match", [
    ([0.0, 0.5], 3, ValueError, r"beta must hold 3 nodes, got 2"),
    ([0.0, 0.5, 0.5], 3, ValueError, r"strictly increasing.*beta\[2\] = 0.5"),
    ([0.0, -0.5, 0.7], 3, ValueError, r"strictly increasing"),
    ([-1.5, 0.0, 0.5], 3, ValueError, r"beta\[0\] = -1.5 is outside \[-1, 1\]"),
    ([0.0, np.nan, 0.5], 3, ValueError, r"beta\[1\] = nan is not finite"),
    ([[0.0, 0.5]], 2, ValueError, "must be 1-D"),
    ([0.0, 1j], 2, TypeError, "must be real"),
    (["a", "b"], 2, TypeError, "array of real numbers"),
])
def test_as_nodes_errors(nodes, count, exc, match):
    with pytest.raises(exc, match=match):
        as_nodes(nodes, count, "beta")


def test_gaps_with_and_without_ends():
    pts = np.array([-0.5, 0.0, 0.25])
    np.testing.assert_allclose(gaps(pts), [0.5, 0.25])
    np.testing.assert_allclose(gaps(pts, -1.0, 1.0), [0.5, 0.5, 0.25, 0.75])
    assert largest_gap(pts) == 0.5
    assert largest_gap(pts, -1.0, 1.0) == 0.75
    assert largest_gap(np.array([0.3])) == 0.0
