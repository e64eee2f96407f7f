"""Shared pytest fixtures (kept generic: every test module may use them)."""
import os
import zlib

import numpy as np
import pytest


@pytest.fixture
def rng(request):
    """A numpy Generator seeded per test: different data for every test (and
    every parametrisation), the same data on every run (reproducible failures).
    Set LETCC_TEST_SEED to draw a different data set everywhere."""
    base = int(os.environ.get("LETCC_TEST_SEED", "20240601"))
    return np.random.default_rng([base, zlib.crc32(request.node.nodeid.encode())])


@pytest.fixture
def threads():
    """Restores the compiled core's thread count after a test changes it."""
    import letcc

    before = letcc.get_num_threads()
    yield
    letcc.set_num_threads(before)


def plan_kernel_runs(name) -> bool:
    """Whether this CPU/build runs the banded plan kernel `name` (letcc.plan_kernel_runs)."""
    import letcc

    before = letcc.plan_kernel()
    runs = letcc.plan_kernel_runs(name)
    assert letcc.plan_kernel() == before
    return runs


def _plan_kernels():
    return ["generic"] + [pytest.param(k, marks=pytest.mark.skipif(not plan_kernel_runs(k), reason=f"no {k} kernel here"))
                          for k in ("avx2", "avx512")]


@pytest.fixture(params=_plan_kernels())
def kernel(request):
    """Runs the test once per banded plan kernel this CPU has (letcc.set_plan_kernel):
    the generic one (any CPU), the AVX2 and the AVX-512 ones where the CPU has
    their features; then restores the default."""
    import letcc

    letcc.set_plan_kernel(request.param)
    assert letcc.plan_kernel() == (request.param if request.param != "generic"
                                   else f"generic-{letcc.kernel_isa()}")
    yield request.param
    letcc.set_plan_kernel("auto")


@pytest.fixture(params=["baseline", "avx2", "avx512"])
def kernel_isa(request):
    """Runs the test once per instruction-set build of the compiled kernels this
    CPU runs (letcc._core.set_kernel_isa; others skipped), then restores 'auto'."""
    from letcc import _core

    try:
        _core.set_kernel_isa(request.param)
    except ValueError:
        pytest.skip(f"this CPU or build has no {request.param} kernels")
    yield request.param
    _core.set_kernel_isa("auto")
