"""The runtime's contracts: the backend ABC, the worker side both backends share,
and encoding into the slots through Code.encode(X, out=, rows=) alone."""
from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

import letcc
from letcc.runtime.backend import Backend, Event
from letcc.runtime.encode_into import encode_into
from letcc.runtime.worker_common import run_chunks, sleep_unless_cancelled

RUNTIME = Path(letcc.__file__).parent / "runtime"


def _imports(path: Path) -> set:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
    return names


def test_the_backends_share_a_contract_and_do_not_import_each_other():
    from letcc.runtime.local_backend import LocalBackend
    from letcc.runtime.ray_backend import RayBackend

    assert issubclass(LocalBackend, Backend) and issubclass(RayBackend, Backend)
    assert not LocalBackend.__abstractmethods__ and not RayBackend.__abstractmethods__
    assert "letcc.runtime.local_backend" not in _imports(RUNTIME / "ray_backend.py")
    assert "letcc.runtime.ray_backend" not in _imports(RUNTIME / "local_backend.py")
    from letcc.runtime import local_backend

    assert local_backend.Event is Event        # still importable where it was


def test_run_chunks_stores_every_chunk_in_order():
    x = np.arange(10.0).reshape(5, 2)
    seen = []
    assert run_chunks(lambda a: a * 2, x, 2, lambda: True, lambda s, e, y: seen.append((s, e, y.copy()))) is None
    assert [(s, e) for s, e, _ in seen] == [(0, 2), (2, 4), (4, 5)]
    np.testing.assert_array_equal(np.concatenate([y for *_, y in seen]), x * 2)
    seen.clear()
    assert run_chunks(lambda a: a, x, None, lambda: False, lambda s, e, y: seen.append((s, e))) is None
    assert seen == [(0, 5)]                     # one call, no check before the first chunk


def test_run_chunks_stops_when_cancelled_or_when_the_store_says_so():
    x = np.zeros((6, 1))
    calls = []
    wanted = iter([True, False])
    assert run_chunks(lambda a: calls.append(len(a)) or a, x, 2, lambda: next(wanted),
                      lambda s, e, y: None) == "cancelled"
    assert calls == [2, 2]
    assert run_chunks(lambda a: a, x, 2, lambda: True, lambda s, e, y: ("shape", s)) == ("shape", 0)


def test_sleep_unless_cancelled():
    naps = []
    assert sleep_unless_cancelled(0.01, lambda: True, lambda left: naps.append(left) or __import__("time").sleep(left))
    assert naps and all(0 < v <= 0.01 for v in naps)
    state = {"n": 0}

    def wanted():
        state["n"] += 1
        return state["n"] < 3

    assert not sleep_unless_cancelled(float("inf"), wanted, lambda left: None)


class _Slots:
    def __init__(self, n, b, row_shape):
        self.n, self.b, self.row_shape, self.buf = n, b, row_shape, None

    def __call__(self, dtype):
        self.buf = np.full((self.n, self.b) + self.row_shape, np.nan, dtype=dtype)
        return self.buf


@pytest.mark.parametrize("make", [lambda: letcc.LeTCC(3, 7), lambda: letcc.BACC(3, 7), lambda: letcc.Uncoded(3)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_encode_into_all_and_some_rows(rng, make, dtype, monkeypatch):
    import letcc.runtime.encode_into as encode_mod
    code = make()
    X = rng.standard_normal((code.K, 2, 4)).astype(dtype)
    full = np.asarray(code.encode(X))
    slots = _Slots(code.N, 2, (4,))
    assert encode_into(code, X, slots) is None
    np.testing.assert_array_equal(slots.buf, full)
    rows = [code.N - 1, 0] if code.N > 2 else [1]
    # small inputs (up to FULL_ENCODE_MAX_ITEMS coded numbers): every node, each in its own slot
    slots.buf[...] = np.nan
    assert encode_mod.FULL_ENCODE_MAX_ITEMS >= slots.buf.size
    assert encode_into(code, X, slots, rows) is None
    np.testing.assert_array_equal(slots.buf, full)
    # larger ones: only the rows asked for, into the first slots
    monkeypatch.setattr(encode_mod, "FULL_ENCODE_MAX_ITEMS", slots.buf.size - 1)
    pos = encode_into(code, X, slots, rows)
    assert pos.dtype == np.int64 and pos.shape == (code.N,)
    for slot, j in enumerate(rows):
        assert pos[j] == slot
        np.testing.assert_allclose(slots.buf[slot], full[j], rtol=1e-6, atol=1e-6)
    assert all(pos[j] == -1 for j in range(code.N) if j not in rows)


@pytest.mark.parametrize("small", [True, False])
def test_encode_into_with_nodes_assigned_to_workers(rng, monkeypatch, small):
    # worker workers[i] computes node rows[i] (the quarantine's assignment): its
    # slot holds that node's coded input, whether every node was encoded (small
    # inputs: node r in slot r) or only the rows asked for (first slots)
    import letcc.runtime.encode_into as encode_mod
    if not small:
        monkeypatch.setattr(encode_mod, "FULL_ENCODE_MAX_ITEMS", 0)
    code = letcc.LeTCC(3, 7)
    X = rng.standard_normal((code.K, 2, 4))
    full = np.asarray(code.encode(X))
    slots = _Slots(code.N, 2, (4,))
    rows, workers = np.array([5, 0, 3]), np.array([1, 6, 2])
    pos = encode_into(code, X, slots, rows, workers)
    assert pos.dtype == np.int64 and pos.shape == (code.N,)
    assert all(pos[j] == -1 for j in range(code.N) if j not in workers)
    for node, j in zip(rows, workers):
        np.testing.assert_allclose(slots.buf[pos[j]], full[node], rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(pos[workers], rows if small else np.arange(3))


def test_encode_into_integer_inputs_goes_through_a_copy(rng):
    code = letcc.LeTCC(3, 5)
    X = rng.integers(0, 9, size=(3, 2, 4))
    slots = _Slots(code.N, 2, (4,))
    assert encode_into(code, X, slots, [0, 1]) is None       # every slot, in the encode's dtype
    np.testing.assert_array_equal(slots.buf, np.asarray(code.encode(X)))


class _LateReadyBackend:
    """A backend stand-in for RoundEngine.launch: workers 0..2 ready when the
    round is encoded, worker 3 ready too once the output layout was probed."""

    def __init__(self, n):
        self.n, self.ready, self.known, self.buf = n, [0, 1, 2], False, None
        self.submitted = None

    def input_view(self, b, row_shape, dtype, ring=0):
        if self.buf is None:
            self.buf = np.zeros((self.n, b) + tuple(row_shape), dtype=dtype)
        return self.buf, not self.known

    def set_input_slots(self, positions):
        self.positions = positions

    def ready_workers(self):
        return list(self.ready)

    def submit(self, r, workers, b, sleep_s, ring=0):
        self.submitted = list(workers)


class _ProbePool:
    def __init__(self, backend):
        self.backend, self.probed = backend, []

    def probe(self, b, workers):
        self.probed.append(list(workers))
        self.backend.known = True
        self.backend.ready = [0, 1, 2, 3]       # worker 3 became ready meanwhile

    def sent(self, r, workers, t0, extra):
        return {j: np.inf for j in workers}


def test_a_worker_ready_during_the_probe_joins_the_round_and_the_complete_rule_is_asked_again():
    # small inputs: every node encoded, so worker 3 (ready only after the probe) has
    # its input and is sent the round; the caller's may_complete was for workers
    # 0-2 (False: LeTCC(2, 4) is complete only with all four), so the waiter asks
    # the code again, and the round of all four ends by "complete", not "all"
    from letcc.runtime.round import RoundEngine

    backend = _LateReadyBackend(4)
    pool = _ProbePool(backend)
    engine = RoundEngine(pool, letcc.LeTCC(2, 4))
    zeros, nowhere = np.zeros(4), np.zeros(4, dtype=bool)
    rnd = engine.launch(np.ones((2, 1, 3)), [0, 1, 2], sleep_s=zeros, master_delays=zeros, never=nowhere,
                        may_complete=False)
    assert pool.probed == [[0, 1, 2]] and backend.submitted == [0, 1, 2, 3] == rnd.sent
    for j in range(4):
        rnd.waiter.result(j, 0.001 * (j + 1))
    decision = rnd.waiter.decide(1.0)
    assert decision is not None and decision.rule == "complete" and sorted(decision.answered) == [0, 1, 2, 3]
