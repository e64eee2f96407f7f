"""The searches inside the global lam rule's calibration (letcc.tune.calibrate_policy):
bins of answering sets by their largest gap, and the best non-decreasing lam
per bin by dynamic programming. Pure numpy on arrays of costs; no codes."""
from __future__ import annotations

import math

import numpy as np

__all__ = ["gap_bins", "best_path", "BIN_WIDTH", "MIN_SETS_PER_BIN"]

# Width of a calibration bin in log10(g) (a factor 1.26), and the fewest
# straggler sets a bin must hold (sparse inner bins join a neighbour, sparse
# outer ones are left to the g^3 rule beyond the table's edges).
BIN_WIDTH = 0.1
MIN_SETS_PER_BIN = 6


def gap_bins(phis: np.ndarray, extrapolate: bool = True) -> tuple[list[float], list[np.ndarray], np.ndarray]:
    """Calibration bins of width BIN_WIDTH in log10(phi): (edges, per-bin
    boolean member masks, per-set lam scale).

    The table covers the core from the first to the last bin holding at least
    MIN_SETS_PER_BIN sets (sparse inner bins join their fuller neighbour).
    With extrapolate=True, the sets outside the core belong to the first / last
    bin but their lam is that bin's times (phi / edge)^3, the rule _table_lam
    applies there (scale holds that factor, 1 inside the core): a few sets with
    very wide gaps (missing end workers) must not pin one lam on a bin that is
    mostly narrower gaps. With extrapolate=False sparse end bins are merged
    inwards instead and every scale is 1."""
    x = np.log10(np.maximum(phis, 1e-300))
    lo = math.floor(x.min() / BIN_WIDTH + 1e-9) * BIN_WIDTH
    n = max(1, int(math.floor((x.max() - lo) / BIN_WIDTH + 1e-9)) + 1)
    edges = [lo + i * BIN_WIDTH for i in range(n + 1)]
    idx = np.clip(np.floor((x - lo) / BIN_WIDTH + 1e-9).astype(int), 0, n - 1)
    counts = [int(np.sum(idx == i)) for i in range(n)]
    dense = [i for i in range(n) if counts[i] >= MIN_SETS_PER_BIN]
    if extrapolate and dense:
        first, last = dense[0], dense[-1]
    else:
        first, last = 0, n - 1
    groups = [[i] for i in range(first, last + 1)]
    while len(groups) > 1:
        sizes = [sum(counts[i] for i in g) for g in groups]
        sparse = [j for j, c in enumerate(sizes) if c < MIN_SETS_PER_BIN]
        if not sparse:
            break
        j = sparse[0]
        if j == 0:
            k = 1
        elif j == len(groups) - 1:
            k = j - 1
        else:
            k = j - 1 if sizes[j - 1] >= sizes[j + 1] else j + 1
        a, b = min(j, k), max(j, k)
        groups[a:b + 1] = [groups[a] + groups[b]]
    out_edges = [round(edges[g[0]], 12) for g in groups] + [round(edges[groups[-1][-1] + 1], 12)]
    members = [np.isin(idx, g) for g in groups]
    scale = np.ones(x.shape[0])
    below, above = idx < first, idx > last
    members[0] |= below
    members[-1] |= above
    scale[below] = 10.0 ** (3.0 * (x[below] - out_edges[0]))
    scale[above] = 10.0 ** (3.0 * (x[above] - out_edges[-1]))
    return out_edges, members, scale


def best_path(cost: np.ndarray, monotone: bool = True) -> tuple[list[int], float]:
    """A grid index per row minimising the summed cost; with monotone=True the
    indices must be non-decreasing along the rows (dynamic programming)."""
    rows, cols = cost.shape
    if not monotone:
        path = [int(j) for j in np.argmin(cost, axis=1)]
        return path, float(cost[np.arange(rows), path].sum())
    total = cost[0].astype(np.float64).copy()
    back = np.zeros((rows, cols), dtype=np.int64)
    for i in range(1, rows):
        # best predecessor with index <= j: a running argmin of `total`
        run = np.zeros(cols, dtype=np.int64)
        best = 0
        for j in range(1, cols):
            if total[j] < total[best]:
                best = j
            run[j] = best
        back[i] = run
        total = cost[i] + total[run]
    j = int(np.argmin(total))
    value = float(total[j])
    path = [j]
    for i in range(rows - 1, 0, -1):
        j = int(back[i, j])
        path.append(j)
    return path[::-1], value
