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


def _plan_kernels():
    import letcc

    avx2 = letcc.plan_kernel() == "avx2"
    return ["generic", pytest.param("avx2", marks=pytest.mark.skipif(
        not avx2, reason=f"this CPU/build runs {letcc.plan_kernel()}, not the AVX2 kernel"))]


@pytest.fixture(params=_plan_kernels())
def kernel(request):
    """Runs the test once per banded plan kernel (letcc.set_plan_kernel), then
    restores the default: the generic one (any CPU) and the AVX2 one (where the
    CPU has it)."""
    import letcc

    letcc.set_plan_kernel(request.param)
    yield request.param
    letcc.set_plan_kernel("auto")
