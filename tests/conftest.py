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
