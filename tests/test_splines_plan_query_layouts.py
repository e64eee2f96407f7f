"""The banded plan kernels on every way the query points can fall among the
knots. The AVX-512 kernel evaluates the first query of each interval inside
its back substitution's loop and the interval's other queries on their own
(csrc/plan_walk_isa.hpp, back_two_fused), and runs its forward substitution
four knots per loop with the remainder two and one at a time (forward_four):
so intervals holding no query, one, or several, on either side of each back
substitution step, and knot counts of every remainder, each take another path.
Every kernel this CPU runs is checked on each against a dense float64 Reinsch
solve and natural-spline evaluation written in the tests
(test_splines_reference.py), every element, and the hand-written kernels
against each other bit for bit on float64 data. On float32 data the AVX-512
kernel evaluates in float32 where a query allows it (plan_walk_isa.hpp,
f32_eval), so there it is held to the float32 bound against the dense solve
(every element, lam from 1e-8 to 1), as every kernel is."""
import numpy as np
import pytest

import letcc
from conftest import plan_kernel_runs
from test_splines_reference import dense_reinsch, natural_spline_eval

KERNELS = ["generic"] + [k for k in ("avx2", "avx512") if plan_kernel_runs(k)]
HAS_BOTH = "avx2" in KERNELS and "avx512" in KERNELS


def layout(rng, x, name):
    """Query points for one layout, in a shuffled order (the plan groups them by interval)."""
    n = len(x)
    mid = (x[:-1] + x[1:]) / 2
    if name == "one per interval":
        at = mid
    elif name == "clustered":
        # five in one interval, three in its neighbour, none elsewhere but the ends
        k = n // 2
        at = np.concatenate([rng.uniform(x[k], x[k + 1], 5), rng.uniform(x[k - 1], x[k], 3), [x[0], x[-1]]])
    elif name == "every third interval":
        at = mid[::3]
    elif name == "two per interval, every other":
        at = np.concatenate([rng.uniform(x[:-1:2], x[1::2]), rng.uniform(x[:-1:2], x[1::2])])
    elif name == "outside and at knots":
        at = np.concatenate([x, [x[0] - 0.3, x[0] - 0.01, x[-1] + 0.01, x[-1] + 0.5]])
    else:  # "uniform, three per knot"
        at = rng.uniform(x[0] - 0.2, x[-1] + 0.2, 3 * n)
    return rng.permutation(at)


LAYOUTS = ["one per interval", "clustered", "every third interval", "two per interval, every other",
           "outside and at knots", "uniform, three per knot"]


def dense_reference(x, at, y, lam):
    S, _ = dense_reinsch(x, np.ones(len(x)), lam)
    return natural_spline_eval(x, S @ y.astype(np.float64), at)


def results_by_kernel(plan, y, out=None):
    got = {}
    try:
        for k in KERNELS:
            letcc.set_plan_kernel(k)
            if out is None:
                got[k] = plan(y)
            else:
                out[...] = np.nan
                assert plan(y, out=out) is out
                got[k] = out.copy()
    finally:
        letcc.set_plan_kernel("auto")
    return got


def check(got, ref, y, dtype):
    scale = max(np.abs(ref).max(), np.abs(y).max(), 1.0)
    # float32: input and output rounded, float64 arithmetic in between (the
    # issue's bound, 1e-6 of max |y|)
    tol = 1e-10 if dtype == np.float64 else 1e-6
    for k, v in got.items():
        assert v.dtype == dtype and not np.isnan(v).any(), k
        np.testing.assert_allclose(v, ref, rtol=0, atol=tol * scale, err_msg=k)
    if HAS_BOTH and dtype == np.float64:
        np.testing.assert_array_equal(got["avx512"], got["avx2"])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", LAYOUTS)
# n - 2 knots of forward substitution: every remainder mod 4 (n = 5 .. 8), both
# parities of the back substitution, several four-knot loops (13, 64)
@pytest.mark.parametrize("n", [4, 5, 6, 7, 8, 9, 13, 64])
# one partial vector; whole vectors of 4 and 8 lanes; 8 + 1; several tiles with a tail
@pytest.mark.parametrize("m", [3, 8, 9, 37, 1000])
def test_every_query_layout_matches_the_dense_solve(rng, dtype, name, n, m):
    x = np.sort(np.linspace(-1, 1, n) + rng.uniform(-0.3, 0.3, n) / n)
    at = layout(rng, x, name)
    lam = 10.0 ** rng.uniform(-8, 0)
    y = rng.normal(size=(n, m)).astype(dtype)
    plan = letcc.SplineSmoother(x, at, lam=lam, method="banded")
    check(results_by_kernel(plan, y), dense_reference(x, at, y, lam), y, dtype)


# Outputs of 16 MiB or more are streamed; an output 64 bytes ahead of the input
# modulo 4 KiB (rows of 4 KiB) makes the walk run its rows downwards. Both,
# with every layout, on one and two threads.
@pytest.mark.parametrize("name", LAYOUTS)
@pytest.mark.parametrize("m,lead", [(1024, 16), (1024, 0), (65536, 16), (65541, 1)])
@pytest.mark.parametrize("nthreads", [1, 2])
def test_streamed_and_downward_rows_match_the_dense_solve(rng, threads, nthreads, name, m, lead):
    n = 64
    x = np.sort(np.linspace(-1, 1, n) + rng.uniform(-0.3, 0.3, n) / n)
    at = layout(rng, x, name)
    q = len(at)
    plan = letcc.SplineSmoother(x, at, lam=1e-3, method="banded")
    # y and the output in one float32 block: the output starts `lead` elements
    # past a whole number of 4 KiB rows after y (in the last case, rows of
    # 65541 elements misalign every row by another 20 bytes)
    block = np.empty(n * m + lead + q * m, dtype=np.float32)
    y = block[: n * m].reshape(n, m)
    y[...] = rng.normal(size=(n, m))
    out = block[n * m + lead:].reshape(q, m)
    letcc.set_num_threads(nthreads)
    check(results_by_kernel(plan, y, out=out), dense_reference(x, at, y, 1e-3), y, np.float32)
