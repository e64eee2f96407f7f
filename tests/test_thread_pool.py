"""The compiled core's thread pool (csrc/thread_pool.hpp): every tile runs
exactly once, and a thread that finishes its own run of tiles helps with the
others' (so a thread slowed down on a shared machine does not hold up a call).
The plan-level consequences (results identical for any thread count, every
output element written) are tested in test_splines_smoother.py and
test_splines_plan_kernels.py."""
import pytest

import letcc
from letcc import _core


# the caller's run (the first ntiles // threads tiles) must hold at least two
# tiles, so that there is one left for a helper to take
@pytest.mark.parametrize("ntiles,threads", [(4, 2), (10, 2), (7, 3), (64, 2), (17, 8)])
def test_every_tile_runs_once_and_idle_threads_help(ntiles, threads):
    counts, helped = _core._thread_pool_check(ntiles, threads)
    assert counts == [1] * ntiles
    # the caller's first tile waits until another thread has run a tile of the
    # caller's run: only helping can end that wait (it gives up after 10 s)
    assert helped


def test_one_tile_runs_on_the_caller():
    counts, helped = _core._thread_pool_check(1, 2, wait_s=0.05)
    assert counts == [1]
    assert not helped  # nobody else to help: the wait gave up


def test_the_pool_still_works_after_the_thread_count_changes(threads):
    for k in (2, 1, 3, 2):
        letcc.set_num_threads(k)
        counts, _ = _core._thread_pool_check(9, 0, wait_s=0.0)  # 0: the pool's thread count
        assert counts == [1] * 9
