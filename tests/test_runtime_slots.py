"""The local backend's shared-memory slots when rounds of different b share a
ring slot: a late answer of an older round never overwrites the outputs of the
round now in that slot (letcc.runtime.backend's contract).

The late answer is scripted (test_runtime_faults' Scripted: worker 1 copies
its input and blocks in the model call until the test removes a file), so the
order of events is fixed: round 1 (b = 2 rows per worker) is answered by
workers 0, 2, 3 and left; round 2 (b = 1) goes to the same ring slot and is
answered by 0, 2, 3; then worker 1 finishes round 1 (a stale answer: nothing
can stop a model call once it runs) and then answers round 2. Before the fix
the slot of worker j started at row j * b, so worker 1's two stale rows
landed on rows 2 and 3, the round-2 slots of workers 2 and 3 (a silent wrong
answer in CodedServer under a deep queue, and in CodedInference when
consecutive calls have different batch sizes).
"""
from __future__ import annotations

import functools
import os
import time

import numpy as np
import pytest

from letcc.runtime.backend import each_answer
from letcc.runtime.local_backend import LocalBackend
from test_runtime_faults import D, Scripted, scripted, touch

WAIT = 120.0


def _poll_until(backend, want, seen, what):
    """Poll until every (kind, worker, round) in `want` was seen."""
    end = time.monotonic() + WAIT
    while not want <= seen:
        if time.monotonic() > end:
            raise AssertionError(f"never happened: {what} (seen {sorted(seen)})")
        for batch in backend.poll(0.05):
            for ev in each_answer(batch):
                seen.add((ev.kind, ev.worker, ev.round))


@pytest.mark.parametrize("ring", [1, 2])
@pytest.mark.parametrize("b_old,b_new", [(2, 1), (1, 3), (3, 2)])
def test_a_late_answer_of_an_older_round_never_overwrites_a_newer_round_with_another_b(
        tmp_path, rng, ring, b_old, b_new):
    N = 4
    f = Scripted(str(tmp_path)).f
    backend = LocalBackend(N, functools.partial(scripted, str(tmp_path)), ["cpu"] * N,
                           threads_per_worker=1, rounds_in_flight=ring)
    try:
        cap = max(b_old, b_new)
        backend.input_view(cap, (D,), np.float64)          # sized for the largest round
        view, need_probe = backend.input_view(1, (D,), np.float64)
        view[...] = rng.standard_normal(view.shape)
        backend.set_input_slots(None)
        assert need_probe and backend.probe_send(0, 0, 1)
        seen: set = set()
        end = time.monotonic() + WAIT
        reply = None
        while reply is None and time.monotonic() < end:
            reply = next((ev for ev in backend.poll(0.05) if ev.kind == "probe"), None)
        backend.set_output_layout(reply.payload[0][1:], reply.payload[1], worker=0)

        # round 1, b_old rows per worker, in ring slot 0: worker 1 blocks in the model call
        touch(tmp_path / "block1")
        X1 = rng.standard_normal((N, b_old, D))
        backend.input_view(b_old, (D,), np.float64, 0)[0][...] = X1
        backend.submit(1, list(range(N)), b_old, np.zeros(N), 0)
        _poll_until(backend, {("done", j, 1) for j in (0, 2, 3)}, seen, "round 1 answered by 0, 2, 3")
        # worker 1 holds round 1's input before round 2 replaces its task record (a task
        # not yet taken then would never run, and there would be no late answer to test)
        end = time.monotonic() + WAIT
        while not (tmp_path / "held1").exists():
            assert time.monotonic() < end, "worker 1 never took round 1"
            time.sleep(0.005)
        backend.cancel([1], 0)                               # round 1 is over; worker 1 is late

        # round 2, b_new rows per worker, in the same ring slot (the master reuses it)
        X2 = rng.standard_normal((N, b_new, D))
        backend.input_view(b_new, (D,), np.float64, 0)[0][...] = X2
        backend.submit(2, list(range(N)), b_new, np.zeros(N), 0)
        _poll_until(backend, {("done", j, 2) for j in (0, 2, 3)}, seen, "round 2 answered by 0, 2, 3")
        os.unlink(tmp_path / "block1")                       # worker 1: round 1 (stale), then round 2
        _poll_until(backend, {("done", 1, 2)}, seen, "round 2 answered by worker 1")

        Y = backend.outputs(list(range(N)), b_new, 0)
        for j in range(N):
            np.testing.assert_allclose(Y[j], f(X2[j]), rtol=0, atol=1e-12,
                                       err_msg=f"worker {j}'s round-2 output")
    finally:
        backend.close()
