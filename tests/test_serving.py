"""letcc.CodedServer: micro-batching, futures, rounds in flight, deadlines,
backpressure, asyncio, threads, the baselines' dispatch.

Deterministic by construction: straggler delays are 0 or effectively
infinite (1e6 s, real sleeps the workers drop when cancelled), and slowness is
a file the model blocks on (Scripted, from test_runtime_faults) until the test
removes it. No assertion reads a wall clock against a threshold; where a time
matters it is an ordering (a future that must not resolve yet, a deadline
that must pass first), and result(timeout=...) bounds are minutes.
"""
from __future__ import annotations

import asyncio
import functools
import itertools
import os
import threading
import time

import numpy as np
import pytest

import letcc
from letcc.runtime.worker_main import control_layout
from letcc.serving import CodedServer, Hedged, QueueFull
from letcc.serving.flights import Request, pad_groups
from letcc.stragglers._base import StragglerModel
from test_runtime_faults import D, Scripted, scripted, shm_segments, touch

WAIT = 120.0          # result() bound: only a hang would reach it


class Fixed(StragglerModel):
    """The same delays every round: `slow` workers sleep `delay` s (cancellable), the others 0."""

    def __init__(self, slow=(), delay=1e6, wait_for=None):
        self.slow, self.delay, self.wait_for = set(slow), delay, wait_for

    def sample(self, N, rng):
        raise NotImplementedError

    def sample_delays(self, N, rng):
        d = np.zeros(N)
        d[sorted(self.slow)] = self.delay
        return d

    def wait_count(self, N):
        return self.wait_for


def f_ref(x):
    return Scripted(".").f(x)


def round_reference(code, X, answered):
    """The round API's answer for the K*B inputs X from the answering set."""
    K = code.K
    B = X.shape[0] // K
    groups = np.ascontiguousarray(X.reshape((B, K) + X.shape[1:]).swapaxes(0, 1))
    coded = np.asarray(code.encode(groups))
    Y = np.stack([f_ref(coded[j]) for j in range(code.N)])
    avail = np.asarray(sorted(answered))
    est = np.asarray(code.decode(Y[avail], avail))
    return est.swapaxes(0, 1).reshape((B * K,) + est.shape[2:])


@pytest.fixture
def script_dir(tmp_path):
    d = tmp_path / "script"
    d.mkdir()
    return d


def server(script_dir, code, **kw):
    kw.setdefault("threads_per_worker", 1)
    return CodedServer(functools.partial(scripted, str(script_dir)), code, **kw)


def warm(s, X):
    """One full round first: the output layout is probed on it (a probe is a
    model call, which would block like the rest in the tests that block).
    Then wait until the dispatcher has every worker's reply to its probe and
    its task of that round (answer or cancelled): a round is decided before its slowest workers finish,
    and a warm-up call still to come would take the place of a gated call of
    the test that follows (on a loaded machine it did: the gates then never
    opened in order)."""
    for f in [s.submit(x) for x in X[:s.code.K]]:
        f.result(WAIT)
    outstanding = s._d.pool.outstanding          # the dispatcher's per-worker task lists (read only)

    def settled():
        s.backend.wake()                     # an idle dispatcher reads late replies only when woken
        return not any(outstanding.values())
    wait_until(settled, "every worker done with the warm-up round")
    return s.stats()["rounds"]


def wait_until(cond, what, timeout=WAIT):
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise AssertionError(f"never happened: {what}")
        time.sleep(0.005)


def test_futures_equal_the_round_api_for_the_same_inputs_and_answering_set(script_dir, rng):
    code = letcc.LeTCC(4, 8)
    slow = {1, 6}
    X = rng.random((12, D))
    with server(script_dir, code, stragglers=Fixed(slow, wait_for=6), max_batch_delay=1e6) as s:
        for r in range(3):           # one full group at a time: the round is exactly these K
            futs = [s.submit(x) for x in X[4 * r:4 * r + 4]]
            got = np.stack([f.result(WAIT) for f in futs])
            want = round_reference(code, X[4 * r:4 * r + 4], sorted(set(range(8)) - slow))
            np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
        st = s.stats()
    assert st["completed"] == 12 and st["rounds"] == 3 and st["padded_rounds"] == 0
    assert st["batch_fill"] == 1.0 and st["erasures"] == 3 * 2


def test_rounds_leave_when_full_and_not_before(script_dir, rng):
    code = letcc.LeTCC(4, 8)
    X = rng.random((9, D))
    with server(script_dir, code, max_batch_delay=1e6, max_groups=2) as s:
        futs = [s.submit(x) for x in X[:3]]
        time.sleep(0.3)               # whatever the machine's speed: 3 < K never leaves by size
        assert not any(f.done() for f in futs) and s.stats()["rounds"] == 0
        futs += [s.submit(x) for x in X[3:8]]
        for f in futs:
            f.result(WAIT)
        st = s.stats()
        assert st["padded_rounds"] == 0 and st["batch_fill"] == 1.0 and st["completed"] == 8
        last = s.submit(X[8])         # alone, never full: leaves on close (drain)
    assert last.result(WAIT).shape == (3,)


def test_a_lone_request_leaves_after_max_batch_delay_padded_and_exact(script_dir, rng):
    code = letcc.LeTCC(8, 16)
    x = rng.random(D)
    with server(script_dir, code, max_batch_delay=0.05) as s:
        t0 = time.perf_counter()
        y = s.submit(x).result(WAIT)
        assert time.perf_counter() - t0 >= 0.05            # ordering: it waited for the delay first
        st = s.stats()
    assert st["padded_rounds"] == 1 and st["batch_fill"] == 1 / 8
    # padded with copies of itself: a constant function, decoded exactly
    np.testing.assert_allclose(y, f_ref(x[None])[0], rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("n_real", [2, 3, 5, 7])
def test_padding_never_worse_than_the_same_round_with_real_inputs(rng, n_real):
    """A real request's error in a padded round is within what the round gives it
    when the empty positions hold other real inputs (over many such fillings)."""
    K, N = 8, 16
    code = letcc.LeTCC(K, N)
    pool = rng.random((400, D))
    answered = np.sort(rng.choice(N, 12, replace=False))
    for trial in range(5):
        real = pool[rng.choice(len(pool), n_real, replace=False)]
        reqs = [Request(x, None, 0.0, np.inf) for x in real]
        padded = pad_groups(reqs, K, (D,), np.float64)[:, 0]
        err_pad = _errors(code, padded, answered)[:n_real]
        worst = np.zeros(n_real)
        for _ in range(30):
            filled = np.concatenate([real, pool[rng.choice(len(pool), K - n_real, replace=False)]])
            worst = np.maximum(worst, _errors(code, filled, answered)[:n_real])
        assert np.all(err_pad <= worst), (trial, err_pad, worst)


def _errors(code, X, answered):
    est = np.asarray(code.decode(np.stack([f_ref(c[None])[0] for c in code.encode(X)])[answered], answered))
    return ((est - f_ref(X)) ** 2).sum(axis=1)


def test_padded_round_in_the_server_is_the_round_api_on_the_padded_inputs(script_dir, rng):
    code = letcc.LeTCC(4, 8)
    X = rng.random((3, D))
    with server(script_dir, code, stragglers=Fixed({2}, wait_for=7), max_batch_delay=0.02) as s:
        futs = [s.submit(x) for x in X]
        got = np.stack([f.result(WAIT) for f in futs])
    want = round_reference(code, np.concatenate([X, X[-1:]]), [0, 1, 3, 4, 5, 6, 7])[:3]
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


def test_several_rounds_in_flight_then_all_decode(script_dir, rng):
    code = letcc.LeTCC(4, 8)
    X = rng.random((12, D))
    with server(script_dir, code, rounds_in_flight=3, max_groups=1, max_batch_delay=1e6,
                stragglers=Fixed((), wait_for=8)) as s:
        r0 = warm(s, X)
        for j in range(8):
            touch(script_dir / f"block{j}")
        futs = [s.submit(x) for x in X]
        wait_until(lambda: s.stats()["rounds_in_flight"] == 3, "three rounds out at once")
        assert not any(f.done() for f in futs)
        for j in range(8):
            os.unlink(script_dir / f"block{j}")
        got = np.stack([f.result(WAIT) for f in futs])
        st = s.stats()
    for r in range(3):
        np.testing.assert_allclose(got[4 * r:4 * r + 4], round_reference(code, X[4 * r:4 * r + 4], range(8)),
                                   rtol=1e-10, atol=1e-12)
    assert st["peak_rounds_in_flight"] == 3 and st["rounds"] == r0 + 3


def test_late_answers_of_an_old_round_are_never_mixed_into_a_newer_one(script_dir, rng):
    code = letcc.LeTCC(4, 8)
    X = rng.random((12, D))
    with server(script_dir, code, rounds_in_flight=2, max_batch_delay=1e6, stragglers=Fixed((), wait_for=7)) as s:
        warm(s, X)
        touch(script_dir / "block0")      # worker 0 holds round 1's (copied) input and waits
        first = np.stack([f.result(WAIT) for f in [s.submit(x) for x in X[:4]]])
        np.testing.assert_allclose(first, round_reference(code, X[:4], range(1, 8)), rtol=1e-10, atol=1e-12)
        later = [s.submit(x) for x in X[4:]]
        os.unlink(script_dir / "block0")  # its answer to round 1 now arrives, stale
        got = np.stack([f.result(WAIT) for f in later])
        wait_until(lambda: s.stats()["stale"] >= 1, "the stale answer reached the master")
    for r, part in enumerate((got[:4], got[4:])):
        Xr = X[4 + 4 * r:8 + 4 * r]
        # decoded from 7 of this round's own answers: equal to one 7-subset's reference
        refs = [round_reference(code, Xr, sub) for sub in itertools.combinations(range(8), 7)]
        assert any(np.allclose(part, ref, rtol=1e-10, atol=1e-12) for ref in refs)


class Gated(Scripted):
    """Scripted's f; once the file ``arm`` exists, worker j's c-th call from then on
    creates ``started-j-c``, copies its input and waits for ``go-j-c``: the test
    lets each call through, one at a time."""

    calls = 0

    def __call__(self, x):
        from letcc.runtime.worker_main import worker_rank

        if not os.path.exists(os.path.join(self.dir, "arm")):
            return self.f(x)
        Gated.calls += 1
        tag = f"{worker_rank()}-{Gated.calls}"
        x = x.copy()
        touch(os.path.join(self.dir, f"started-{tag}"))
        while not os.path.exists(os.path.join(self.dir, f"go-{tag}")):
            time.sleep(0.002)
        return self.f(x)


def gated(script_dir):
    return Gated(str(script_dir))


def test_a_late_answer_never_lands_in_a_reused_ring_slot_of_a_round_with_another_b(script_dir, rng):
    """The high-load mix-up (bench/results/serving.md): a worker still inside the
    model call of a round the master has left (B = 2 groups) writes its answer
    after the ring slot went to a round of B = 1. With a worker's output slot at
    row j * B, worker 1's late rows landed in worker 2's slot of the new round,
    which was then decoded (wrong, silently). Each model call is let through by
    the test (Gated), so the late write always lands after worker 2's answer to
    the new round and before that round is decoded."""
    code = letcc.LeTCC(2, 4)
    X = rng.random((10, D))
    started = lambda j, c: (script_dir / f"started-{j}-{c}").exists()    # noqa: E731
    go = lambda j, c: touch(script_dir / f"go-{j}-{c}")                   # noqa: E731
    with CodedServer(functools.partial(gated, str(script_dir)), code, threads_per_worker=1, rounds_in_flight=1,
                     max_groups=2, max_batch_delay=1e6, stragglers=Fixed((), wait_for=3)) as s:
        r0 = warm(s, X)
        touch(script_dir / "arm")
        hold = [s.submit(x) for x in X[:2]]                  # round W (call 1): holds the ring slot
        wait_until(lambda: s.stats()["rounds"] == r0 + 1, "round W left")
        futs_a = [s.submit(x) for x in X[2:6]]              # queued behind it: round A, B = 2
        wait_until(lambda: all(started(j, 1) for j in range(4)), "every worker inside round W's call")
        for j in range(4):
            go(j, 1)
        for f in hold:
            f.result(WAIT)
        wait_until(lambda: all(started(j, 2) for j in range(4)), "every worker inside round A's call")
        futs_c = [s.submit(x) for x in X[6:8]]              # round C, B = 1: next in the same ring slot
        for j in (0, 2, 3):
            go(j, 2)                                         # round A: decided by 0, 2, 3; 1 left inside
        got_a = np.stack([f.result(WAIT) for f in futs_a])
        np.testing.assert_allclose(got_a, round_reference(code, X[2:6], (0, 2, 3)), rtol=1e-10, atol=1e-12)
        rc = r0 + 3
        done = control_layout(s.backend._ctl_view, s.backend.ring).done_round    # the workers' done words
        go(0, 3)
        go(2, 3)
        wait_until(lambda: s.stats()["rounds"] == rc and done[0] == rc and done[2] == rc,
                   "workers 0 and 2 answered round C")
        assert not any(f.done() for f in futs_c)             # it waits for a third answer
        go(1, 3)
        go(1, 2)                                             # worker 1: round A's late answer, then C
        got_c = np.stack([f.result(WAIT) for f in futs_c])
        go(3, 3)
    np.testing.assert_allclose(got_c, round_reference(code, X[6:8], (0, 1, 2)), rtol=1e-10, atol=1e-12)


class Twice:
    """f(x) = 2 x exactly, row by row, after a sleep inside the call (not
    cancellable, as a slow machine is): `slow` s on workers 1 and 3 (noisy
    neighbours), `fast` s on the others."""

    def __init__(self, slow, fast):
        self.slow, self.fast = slow, fast

    def __call__(self, x):
        from letcc.runtime.worker_main import worker_rank

        time.sleep(self.slow if worker_rank() in (1, 3) else self.fast)
        return 2.0 * x.reshape(x.shape[0], -1)


def twice(slow, fast):
    return Twice(slow, fast)


@pytest.mark.parametrize("scheme", ["replication", "uncoded", "hedged"])
def test_every_request_gets_its_own_answer_under_a_deep_queue_from_threads(scheme, rng):
    """Threads submitting bursts of random sizes (some waiting for their burst,
    some not): rounds of B = 1..4 groups in flight over reused ring slots, a slow
    worker's late answers, padded groups. The exact decoders must return exactly
    2 x for every request (LeTCC: the ordered test above, whose rounds are known)."""
    code = {"replication": letcc.Replication(4, 2), "uncoded": letcc.Uncoded(8), "hedged": Hedged(8, 90)}[scheme]
    n, T = 1200, 4
    X = rng.random((n, 3)) + np.arange(n)[:, None]          # every request its own input
    sizes = rng.integers(1, 14, size=n)
    futs = [None] * n
    with CodedServer(functools.partial(twice, 0.006, 0.001), code, threads_per_worker=1, rounds_in_flight=3,
                     max_groups=4, max_batch_delay=0.001) as s:
        def client(t):
            mine = list(range(t, n, T))
            while mine:
                k = int(sizes[mine[0]])
                burst, mine = mine[:k], mine[k:]
                for i in burst:
                    futs[i] = s.submit(X[i])
                if burst[0] % 3 == 0:
                    for i in burst:
                        futs[i].result(WAIT)
        threads = [threading.Thread(target=client, args=(t,)) for t in range(T)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        got = np.stack([f.result(WAIT) for f in futs])
        st = s.stats()
    np.testing.assert_array_equal(got, 2 * X)
    assert st["completed"] == n and st["errors"] == 0


def test_deadline_decodes_what_arrived_and_times_out_with_nothing(script_dir, rng):
    code = letcc.LeTCC(4, 8)
    X = rng.random((4, D))
    touch(script_dir / "block6")
    touch(script_dir / "block7")
    with server(script_dir, code, max_batch_delay=1e6, stragglers=Fixed((), wait_for=8), deadline=0.5) as s:
        t0 = time.perf_counter()
        futs = [s.submit(x) for x in X]
        got = np.stack([f.result(WAIT) for f in futs])
        assert time.perf_counter() - t0 >= 0.5                 # decided by the deadline, not before
        np.testing.assert_allclose(got, round_reference(code, X, range(6)), rtol=1e-10, atol=1e-12)
        for j in range(6):
            touch(script_dir / f"block{j}")                     # now nobody answers
        short, longer = s.submit(X[0], deadline=0.2), s.submit(X[1], deadline=0.6)
        s.submit(X[2], deadline=0.6)
        s.submit(X[3], deadline=0.6)
        with pytest.raises(TimeoutError):
            short.result(WAIT)
        assert not longer.done()                                # its own deadline is later
        with pytest.raises(TimeoutError):
            longer.result(WAIT)
        assert s.stats()["timeouts"] == 4
        for j in range(8):
            os.unlink(script_dir / f"block{j}")


def test_backpressure_raises_queue_full_at_once_and_loses_nothing(script_dir, rng):
    code = letcc.LeTCC(4, 8)
    X = rng.random((10, D))
    with server(script_dir, code, rounds_in_flight=1, max_groups=1, max_queue=4, max_batch_delay=1e6,
                stragglers=Fixed((), wait_for=8)) as s:
        r0 = warm(s, X)
        for j in range(8):
            touch(script_dir / f"block{j}")
        futs = [s.submit(x) for x in X[:4]]
        wait_until(lambda: s.stats()["rounds"] == r0 + 1, "the first round left")
        futs += [s.submit(x) for x in X[4:8]]
        with pytest.raises(QueueFull, match="max_queue = 4"):
            s.submit(X[8])
        assert s.stats()["rejections"] == 1 and s.stats()["queue_depth"] == 4
        for j in range(8):
            os.unlink(script_dir / f"block{j}")
        assert all(f.result(WAIT).shape == (3,) for f in futs)


def test_close_drains_and_close_cancel_cancels_the_undispatched(script_dir, rng):
    code = letcc.LeTCC(4, 8)
    X = rng.random((12, D))
    s = server(script_dir, code, rounds_in_flight=1, max_groups=1, max_batch_delay=1e6,
               stragglers=Fixed((), wait_for=8))
    prefix, pids = s.backend.shm_prefix, s.worker_pids()
    r0 = warm(s, X)
    for j in range(8):
        touch(script_dir / f"block{j}")
    futs = [s.submit(x) for x in X]
    wait_until(lambda: s.stats()["rounds"] == r0 + 1, "the first round left")
    closer = threading.Thread(target=s.close, kwargs=dict(cancel=True))
    closer.start()
    wait_until(lambda: all(f.cancelled() for f in futs[4:]), "the undispatched were cancelled")
    for j in range(8):
        os.unlink(script_dir / f"block{j}")
    closer.join(WAIT)
    assert all(f.result(0).shape == (3,) for f in futs[:4])        # dispatched: finished
    with pytest.raises(RuntimeError, match="closed"):
        s.submit(X[0])
    _assert_gone(pids, prefix)
    with server(script_dir, code, max_batch_delay=1e6) as s2:           # drain: the partial group too
        futs = [s2.submit(x) for x in X[:6]]
    assert all(f.result(0).shape == (3,) for f in futs)


def _assert_gone(pids, prefix):
    for pid in pids:
        wait_until(lambda: not os.path.exists(f"/proc/{pid}") or _zombie(pid), f"worker {pid} gone", 30)
    assert shm_segments(prefix) == []


def _zombie(pid):
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split()[2] == "Z"
    except OSError:
        return True


def test_asyncio_infer_and_map(script_dir, rng):
    code = letcc.Replication(4, 2)
    X = rng.random((10, D))

    async def main(s):
        return await asyncio.gather(*(s.infer(x) for x in X))

    with server(script_dir, code, max_batch_delay=0.005) as s:
        got = np.stack(asyncio.run(main(s)))
        again = np.stack(s.map(X, timeout=WAIT))
    np.testing.assert_allclose(got, f_ref(X), rtol=1e-12)
    np.testing.assert_allclose(again, f_ref(X), rtol=1e-12)


def test_submit_from_many_threads_each_gets_its_own_estimate(script_dir, rng):
    code = letcc.Replication(4, 2)          # exact per request: any mix-up would show
    X = rng.random((8, 40, D))
    out = [None] * 8

    def client(t):
        out[t] = [s.submit(x) for x in X[t]]

    with server(script_dir, code, max_batch_delay=0.002, rounds_in_flight=3) as s:
        threads = [threading.Thread(target=client, args=(t,)) for t in range(8)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        for t in range(8):
            np.testing.assert_allclose(np.stack([f.result(WAIT) for f in out[t]]), f_ref(X[t]), rtol=1e-12)
        assert s.stats()["completed"] == 320


def test_uncoded_is_a_least_loaded_balancer_over_all_n_workers(script_dir, rng):
    X = rng.random((24, D))
    with server(script_dir, letcc.Uncoded(4), rounds_in_flight=2, max_groups=1) as s:
        got = np.stack(s.map(X, timeout=WAIT))
        st = s.stats()
    np.testing.assert_allclose(got, f_ref(X), rtol=1e-12)
    assert st["rounds"] == 24 and st["workers"] == 4


def test_hedged_second_copy_fires_and_the_first_answer_wins(script_dir, rng):
    X = rng.random((12, D))
    model = Fixed()
    with server(script_dir, Hedged(2, percentile=50, min_samples=4), stragglers=model, rounds_in_flight=2) as s:
        warm = [s.submit(x).result(WAIT) for x in X[:4]]           # latencies observed, no delays
        assert s.stats()["hedges"] == 0
        model.slow = {0}                   # worker 0 now sleeps 1e6 s per task: only a hedge answers
        got = [s.submit(x).result(WAIT) for x in X[4:]]
        st = s.stats()
    np.testing.assert_allclose(np.stack(warm + got), f_ref(X), rtol=1e-12)
    assert st["hedges"] >= 1 and st["completed"] == 12


class LiesOnWorker:
    """Scripted's smooth model, shifted by 5 on worker `liar` (a wrong answer every round, far
    outside the honest outputs' range (-1, 1): flagged whatever the round's inputs)."""

    def __init__(self, liar: int):
        self.liar = liar
        self.f = Scripted(".").f

    def __call__(self, x):
        y = self.f(x)
        return y + 5.0 if letcc.runtime.worker_rank() == self.liar else y


def test_the_workers_a_robust_code_flags_are_counted_and_a_repeat_offender_is_suspected(rng):
    code = letcc.LeTCC(4, 12, adversaries=1)
    rounds = 12
    # max_batch_delay: every round holds the 4 requests submitted together (a round that left
    # with fewer, padded, would decode other inputs than the reference below)
    with CodedServer(functools.partial(LiesOnWorker, 5), code, threads_per_worker=1, wait_for=12,
                     max_groups=1, max_batch_delay=1e6) as s:
        for _ in range(rounds):              # one round at a time: every round has the liar in it
            X = rng.standard_normal((4, D))
            est = np.stack([f.result(WAIT) for f in [s.submit(x) for x in X]])
            # the server decodes what the code decodes from the same answers, the liar's included
            groups = X.reshape((1, 4) + X.shape[1:]).swapaxes(0, 1)
            Y = np.stack([f_ref(c) for c in np.asarray(code.encode(groups))])
            Y[5] += 5.0
            ref, flagged = code.decode(Y, np.arange(12), return_flagged=True)
            assert list(flagged) == [5]
            np.testing.assert_allclose(est, np.asarray(ref)[:, 0], rtol=1e-9, atol=1e-9)
        st = s.stats()
    assert st["rounds"] == rounds
    assert st["flagged"] == rounds
    assert st["suspected"] == {5: rounds}
