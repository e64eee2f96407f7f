"""Regression points (nodes) of the coded computing schemes.

The encoder places the K inputs at nodes alpha_1 < ... < alpha_K and the N
workers at nodes beta_1 < ... < beta_N, all in [-1, 1]. The defaults are those
of the LeTCC and BACC papers: alpha = Chebyshev points of the first kind,
beta = Chebyshev points of the second kind, both sorted ascending.

The points are computed as sines of symmetric angles rather than as cosines,
so that they come out exactly symmetric about 0, the middle point (odd counts)
is exactly 0 and the end points of the second kind are exactly -1 and 1.
"""
from __future__ import annotations


import numpy as np

from letcc._checks import as_int

from letcc.splines._validation import as_knots

__all__ = [
    "chebyshev_first_kind",
    "chebyshev_second_kind",
    "equispaced",
    "as_nodes",
    "gaps",
    "largest_gap",
]


def chebyshev_first_kind(K: int) -> np.ndarray:
    """The K points cos((2k-1) pi / (2K)), k = 1..K, ascending (all strictly inside (-1, 1))."""
    K = as_int(K, "K", 1)
    k = np.arange(1, K + 1, dtype=np.float64)
    # -cos((2k-1)pi/(2K)) = sin(pi (2k-1-K) / (2K)): ascending in k.
    return np.sin(np.pi * (2.0 * k - 1.0 - K) / (2.0 * K))


def chebyshev_second_kind(N: int) -> np.ndarray:
    """The N points cos((n-1) pi / (N-1)), n = 1..N, ascending (ends at -1 and 1).

    N = 1 has no such points (0/0); the single node is then 0, the centre.
    """
    N = as_int(N, "N", 1)
    if N == 1:
        return np.zeros(1)
    n = np.arange(N, dtype=np.float64)
    # -cos(n pi/(N-1)) = sin(pi (2n - (N-1)) / (2(N-1))): ascending in n.
    return np.sin(np.pi * (2.0 * n - (N - 1)) / (2.0 * (N - 1)))


def equispaced(n: int) -> np.ndarray:
    """n equally spaced points from -1 to 1 (the single point 0 when n = 1)."""
    n = as_int(n, "n", 1)
    if n == 1:
        return np.zeros(1)
    return np.linspace(-1.0, 1.0, n)


def as_nodes(nodes, count: int, name: str) -> np.ndarray:
    """Validate user-given nodes: `count` finite, strictly increasing float64 values in [-1, 1]."""
    # The spline layer's knot checks, then what nodes need beyond knots; a copy,
    # because as_knots may hand back the caller's own array and this one is frozen.
    arr = np.array(as_knots(nodes, name))
    if arr.shape[0] != count:
        raise ValueError(f"{name} must hold {count} nodes, got {arr.shape[0]}")
    outside = (arr < -1.0) | (arr > 1.0)
    if outside.any():
        i = int(np.argmax(outside))
        raise ValueError(f"{name}[{i}] = {arr[i]} is outside [-1, 1]")
    arr.setflags(write=False)
    return arr


def gaps(sorted_nodes: np.ndarray, lo: float | None = None, hi: float | None = None) -> np.ndarray:
    """Distances between consecutive nodes; with lo / hi given, the distances
    from lo to the first node and from the last node to hi are included too
    (the paper's convention beta_0 = -1, beta_{N+1} = 1)."""
    pts = np.asarray(sorted_nodes, dtype=np.float64)
    if lo is not None:
        pts = np.concatenate(([lo], pts))
    if hi is not None:
        pts = np.concatenate((pts, [hi]))
    return np.diff(pts)


def largest_gap(sorted_nodes: np.ndarray, lo: float | None = None, hi: float | None = None) -> float:
    """The largest of `gaps(...)`; 0.0 when there is no gap (one node and no lo / hi)."""
    g = gaps(sorted_nodes, lo, hi)
    return float(g.max()) if g.size else 0.0
