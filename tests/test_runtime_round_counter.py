"""The lock-free words the local runtime's workers count their answers in
(csrc/round_counter.hpp through letcc._core): exact counts under concurrent
processes, no count for another round, and clear errors for arrays that would
only be a copy of the shared words."""
import multiprocessing as mp

import numpy as np
import pytest

from letcc import _core
from letcc.runtime.shm_slots import SlotArray, attach, new_prefix


def test_a_round_counts_its_own_answers_only():
    a = np.zeros(3, dtype=np.int64)
    _core.round_counter_start(a, 1, 41)
    assert _core.round_counter_count(a, 1, 41) == 0
    assert [_core.round_counter_add(a, 1, 41) for _ in range(5)] == [1, 2, 3, 4, 5]
    assert _core.round_counter_add(a, 1, 40) == -1          # an older round is not counted
    assert _core.round_counter_count(a, 1, 40) == 0
    assert _core.round_counter_count(a, 1, 41) == 5
    _core.round_counter_start(a, 1, 42)                      # the next round starts from 0
    assert _core.round_counter_add(a, 1, 41) == -1 and _core.round_counter_count(a, 1, 42) == 0
    assert a[0] == 0 and a[2] == 0                           # its neighbours untouched
    _core.atomic_store(a, 2, -7)
    assert _core.atomic_load(a, 2) == -7 and a[2] == -7


def _hammer(spec, round_id, times, out_index):
    mem = attach(spec)
    words = mem.slot(0, 1).reshape(-1)
    seen = [_core.round_counter_add(words, 0, round_id) for _ in range(times)]
    # every value this process got is unique across processes: sum them up there
    words[out_index] = sum(seen)
    del words
    mem.close()


def test_concurrent_processes_count_exactly():
    P, T = 4, 3000
    arr = SlotArray(new_prefix() + "t", 1, 1, (1 + P,), np.int64)
    try:
        words = arr.view(1).reshape(-1)
        _core.round_counter_start(words, 0, 9)
        ctx = mp.get_context("spawn")
        procs = [ctx.Process(target=_hammer, args=(arr.spec, 9, T, 1 + p)) for p in range(P)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(120)
            assert p.exitcode == 0
        assert _core.round_counter_count(words, 0, 9) == P * T
        # each add returned a distinct count 1..P*T: their sum is fixed
        assert int(words[1:].sum()) == P * T * (P * T + 1) // 2
        del words
    finally:
        arr.close()


@pytest.mark.parametrize("fn, args", [
    (_core.round_counter_start, (1,)), (_core.round_counter_add, (1,)), (_core.round_counter_count, (1,)),
    (_core.atomic_store, (5,)), (_core.atomic_load, ()),
])
def test_arrays_that_are_not_the_shared_words_are_refused(fn, args):
    a = np.zeros(4, dtype=np.int64)
    for bad in (a[::2], a.astype(np.int32), a.astype(np.float64)):      # a copy would be counted in
        with pytest.raises(TypeError, match="incompatible function arguments"):
            fn(bad, 0, *args)
    with pytest.raises(IndexError, match="word 4 is outside the 4-word control array"):
        fn(a, 4, *args)
    with pytest.raises(IndexError, match="word -1 is outside"):
        fn(a, -1, *args)
    a.flags.writeable = False
    with pytest.raises(ValueError, match="the control array is read-only"):
        fn(a, 0, *args)
