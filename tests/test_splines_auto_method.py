"""method="auto": a plan takes the dense operator exactly when n * q is at most
_core.dense_max_work for its dtype, a limit that follows the banded kernel in
use when the plan is built (csrc/driver/linear_maps.hpp: the AVX-512 kernel's crossover
with the dense operator is lower than the AVX2 one's). The rule itself, not
its timing: timings belong to bench/spline.py."""
import numpy as np
import pytest

import letcc
from letcc import _core
from conftest import plan_kernel_runs

KERNELS = ["generic"] + [k for k in ("avx2", "avx512") if plan_kernel_runs(k)]


@pytest.fixture(params=KERNELS)
def forced_kernel(request):
    letcc.set_plan_kernel(request.param)
    yield request.param
    letcc.set_plan_kernel("auto")


def test_the_limit_follows_the_kernel(forced_kernel):
    f32, f64 = _core.dense_max_work(False), _core.dense_max_work(True)
    if forced_kernel == "avx512":
        assert (f32, f64) == (24 * 24, 12 * 12)
    else:
        assert (f32, f64) == (32 * 32, 24 * 24)


@pytest.mark.parametrize("float64", [False, True])
def test_auto_is_dense_exactly_up_to_the_limit(rng, forced_kernel, float64):
    limit = _core.dense_max_work(float64)
    for n in (4, 9, 12, 16, 20, 24, 32):
        for q in sorted({1, limit // n, limit // n + 1, 2 * n}):
            x = np.sort(rng.uniform(-1, 1, n))
            plan = letcc.SplineSmoother(x, rng.uniform(-1, 1, q), lam=1e-3)
            want = "dense" if n * q <= limit else "banded"
            assert plan._plan.method(float64) == want, (n, q, limit)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_auto_gives_the_chosen_methods_result(rng, forced_kernel, dtype):
    float64 = dtype == np.float64
    limit = _core.dense_max_work(float64)
    n = 12
    for q in (limit // n, limit // n + 1):
        x = np.sort(rng.uniform(-1, 1, n))
        at = rng.uniform(-1.1, 1.1, q)
        y = rng.normal(size=(n, 301)).astype(dtype)
        auto = letcc.SplineSmoother(x, at, lam=1e-3)
        chosen = letcc.SplineSmoother(x, at, lam=1e-3, method=auto._plan.method(float64))
        np.testing.assert_array_equal(auto(y), chosen(y))


def test_dense_max_work_wants_a_bool():
    with pytest.raises(TypeError, match="float64"):
        _core.dense_max_work("float32")
