"""The serving master's copies of its requests' inputs (letcc._core.copy_rows,
letcc.serving.flights.input_copy / copy_inputs / pad_groups): every element
against numpy's copies, the padding rule, the GIL held below the size bound,
and every error."""
import threading
import time

import numpy as np
import pytest

from letcc import _core
from letcc.serving.flights import Request, copy_inputs, input_copy, pad_groups


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64, np.uint8, np.complex128])
@pytest.mark.parametrize("rows, parts", [(1, 1), (5, 5), (8, 3), (8, 1), (3, 2)])
def test_copy_rows_against_numpy(rng, dtype, rows, parts):
    shape = (rows, 2, 7)
    src = [(rng.standard_normal(shape[1:]) * 100).astype(dtype) for _ in range(parts)]
    out = np.full(shape, 123, dtype=dtype)
    _core.copy_rows(out, src)
    want = np.stack(src + [src[-1]] * (rows - parts))
    np.testing.assert_array_equal(out, want)
    assert out.tobytes() == want.tobytes()          # bit for bit (NaN payloads, -0.0 included)


def test_copy_rows_keeps_bits(rng):
    """A copy, not a conversion: NaN payloads and -0.0 come through as they are."""
    bits = rng.integers(0, 2**63, size=(3, 5), dtype=np.int64)
    parts = [b.view(np.float64) for b in bits]
    out = np.empty((3, 5))
    _core.copy_rows(out, parts)
    assert out.view(np.int64).tolist() == bits.tolist()


def test_copy_rows_large_copy_releases_the_gil(rng):
    """From 1 MiB the copy runs with the GIL released: another thread runs
    Python meanwhile; below it, the copy is one uninterrupted call."""
    big = [rng.standard_normal(1 << 18) for _ in range(8)]    # 16 MiB of float64
    out = np.empty((8, 1 << 18))
    ticks = []
    stop = threading.Event()

    def count():
        while not stop.is_set():
            ticks.append(time.perf_counter())

    t = threading.Thread(target=count)
    t.start()
    try:
        time.sleep(0.01)
        for _ in range(20):
            t0 = time.perf_counter()
            _core.copy_rows(out, big)
            t1 = time.perf_counter()
            if any(t0 < x < t1 for x in ticks[-2000:]):
                break
        else:
            pytest.fail("no other thread ran during 20 copies of 16 MiB")
    finally:
        stop.set()
        t.join()
    np.testing.assert_array_equal(out, np.stack(big))


def test_copy_rows_errors():
    out = np.zeros((3, 4))
    x = np.ones(4)
    with pytest.raises(TypeError, match="out must be a numpy array, got <class 'list'>"):
        _core.copy_rows([[0.0] * 4], [x])
    with pytest.raises(ValueError, match="out must be a writeable C-contiguous array"):
        _core.copy_rows(np.zeros((4, 3)).T, [x])
    ro = np.zeros((3, 4))
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="out must be a writeable C-contiguous array"):
        _core.copy_rows(ro, [x])
    with pytest.raises(ValueError, match="0-d"):
        _core.copy_rows(np.zeros(()), [np.ones(())])
    with pytest.raises(ValueError, match="at least one part"):
        _core.copy_rows(out, [])
    with pytest.raises(ValueError, match="got 4 parts for 3 rows"):
        _core.copy_rows(out, [x] * 4)
    with pytest.raises(TypeError, match="part 1 must be a numpy array, got <class 'list'>"):
        _core.copy_rows(out, [x, [1.0] * 4])
    with pytest.raises(TypeError, match="part 0 has dtype float32 but out has float64"):
        _core.copy_rows(out, [x.astype(np.float32)])
    with pytest.raises(ValueError, match="part 0 must be C-contiguous"):
        _core.copy_rows(out, [np.ones(8)[::2]])
    with pytest.raises(ValueError, match="part 1 has 5 elements but a row of out has 4"):
        _core.copy_rows(out, [x, np.ones(5)])
    with pytest.raises(ValueError, match="part 0 overlaps out"):
        _core.copy_rows(out, [out[2]])
    with pytest.raises(TypeError):
        _core.copy_rows(out, 3)
    assert not out.any()                    # nothing was written by a call that raised


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_input_copy_is_an_own_copy(rng, dtype):
    x = rng.standard_normal((1, 28, 28)).astype(dtype)
    y = input_copy(x, np.dtype(dtype))
    assert y.dtype == dtype and y.shape == x.shape and y.flags.c_contiguous and y.flags.writeable
    np.testing.assert_array_equal(y, x)
    x[...] = 0                              # the caller reuses its buffer: the request keeps its input
    assert y.any() and not np.shares_memory(x, y)


def test_input_copy_converts_and_handles_views(rng):
    x = rng.standard_normal((6, 6))
    y = input_copy(x[:, ::2], np.dtype(np.float64))       # not contiguous: numpy's copy
    np.testing.assert_array_equal(y, x[:, ::2])
    z = input_copy(x.astype(np.float32), np.dtype(np.float64))   # another dtype: converted
    assert z.dtype == np.float64
    np.testing.assert_array_equal(z, x.astype(np.float32).astype(np.float64))
    i = input_copy(np.arange(4), np.dtype(np.float64))
    assert i.dtype == np.float64 and i.tolist() == [0.0, 1.0, 2.0, 3.0]


def _requests(xs):
    return [Request(x, None, 0.0, np.inf) for x in xs]


@pytest.mark.parametrize("n, K", [(1, 4), (3, 4), (4, 4), (5, 4), (9, 4), (8, 8)])
def test_pad_groups_against_its_rule(rng, n, K):
    """Request i at (i % K, i // K); the empty positions of the last group hold
    its last real input."""
    xs = [rng.standard_normal((2, 3)) for _ in range(n)]
    X = pad_groups(_requests(xs), K, (2, 3), np.float64)
    B = -(-n // K)
    assert X.shape == (K, B, 2, 3)
    for b in range(B):
        for k in range(K):
            i = b * K + k
            np.testing.assert_array_equal(X[k, b], xs[min(i, n - 1)])


def test_copy_inputs_into_a_slot_row(rng):
    xs = [rng.standard_normal(5).astype(np.float32) for _ in range(3)]
    buf = np.zeros((4, 3, 5), dtype=np.float32)
    copy_inputs(buf[2], _requests(xs))
    np.testing.assert_array_equal(buf[2], np.stack(xs))
    assert not buf[[0, 1, 3]].any()
