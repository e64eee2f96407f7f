"""The dispatcher against a scripted backend: the output-layout probe takes the
first worker to answer and its late replies are never read as answers (or
failures) of a round; submit() wakes the dispatcher only for a request that
changes what it would do before its planned wake-up.

Deterministic with events: a scripted backend (ScriptedBackend, in place of the
local one) hands the dispatcher exactly the events the test puts in, in that
order; the test waits for what the dispatcher did (probes sent, a round
submitted, a sleep begun), never for a time to pass.
"""
from __future__ import annotations

import math
import queue
import threading
import time

import numpy as np
import pytest

import letcc
from letcc.runtime.backend import Backend, Event
from letcc.serving import CodedServer
from test_runtime_faults import D, Scripted

WAIT = 120.0
RETIME = object()                         # ScriptedBackend: wake_at changed the time a poll waits for


def f_ref(x):
    return Scripted(".").f(x)


class ScriptedBackend(Backend):
    """N workers that are always ready and do nothing by themselves: the test
    says who answers what (answer(), reply()); poll() returns those events."""

    kind = "local"
    last = None

    def __init__(self, n_workers, model_factory, devices, *, rounds_in_flight=1, **_):
        self.n, self.ring = n_workers, rounds_in_flight
        self.events: queue.Queue = queue.Queue()
        self.probes: list = []            # (worker, probe id)
        self.submitted: list = []         # (round, workers, b, ring, sleeps before it)
        self.cancelled: list = []
        self.wakes = 0
        self.timed: list = []             # every wake_at setting, in order
        self.timer_at = math.inf
        self.timer_fired = 0
        self.sleeps: list = []            # the timeout of every poll() that found nothing to return
        self.changed = threading.Condition()
        self.inp = self.out = None
        self.positions = None
        self.out_ref = None
        ScriptedBackend.last = self

    # what the test does
    def wait_for(self, cond, what):
        with self.changed:
            if not self.changed.wait_for(cond, WAIT):
                raise AssertionError(f"never happened: {what}")

    def reply(self, kind, j, r, *payload):
        self.events.put(Event(kind, j, r, tuple(payload), time.perf_counter()))

    def answer(self, j, r):
        """Worker j computes round r from its input slot (the round's ring slot) and answers."""
        _, workers, b, ring, _ = next(s for s in self.submitted if s[0] == r)
        slot = j if self.positions is None else int(self.positions[j])
        self.out[ring, j, :b] = f_ref(self.inp[ring, slot, :b])
        self.reply("done", j, r)

    def _note(self, log, item):
        with self.changed:
            log.append(item)
            self.changed.notify_all()

    # the contract
    def ready_workers(self):
        return list(range(self.n))

    def worker_pids(self):
        return [None] * self.n

    def restart_dead(self):
        return []

    def kill(self, j):
        raise AssertionError(f"worker {j} killed: nothing hangs here")

    def input_view(self, b, row_shape, dtype, ring=0):
        if self.inp is None:
            self.inp = np.zeros((self.ring, self.n, b) + tuple(row_shape), dtype=dtype)
        return self.inp[ring, :, :b], self.out is None

    def set_input_slots(self, positions):
        self.positions = None if positions is None else np.asarray(positions).copy()

    def outputs(self, workers, b, ring=0):
        return self.out[ring, np.asarray(workers, dtype=np.int64), :b].copy()

    def output_reference(self):
        return self.out_ref

    def input_spec(self):
        return None if self.inp is None else self.inp.shape[2:]

    def probe_send(self, j, r, b):
        self._note(self.probes, (j, r))
        return True

    def set_output_layout(self, row_shape, dtype, worker=None):
        self.out_ref = (worker, tuple(row_shape), np.dtype(dtype).str)
        self.out = np.zeros((self.ring, self.n, self.inp.shape[2]) + tuple(row_shape), dtype=dtype)

    def forget_output_layout(self):
        self.out_ref = self.out = None

    def submit(self, r, workers, b, sleep_s, ring=0):
        self._note(self.submitted, (r, list(workers), b, ring, len(self.sleeps)))

    def cancel(self, workers, ring=0):
        self.cancelled.append((list(workers), ring))

    def wake(self):
        self.wakes += 1
        self.events.put(None)

    def wake_at(self, t):
        self._note(self.timed, t)
        self.timer_at = t
        self.events.put(RETIME)          # a poll in progress waits on with the new time

    def arm(self, answers):
        return False

    def poll(self, timeout):
        if self.events.empty():
            self._note(self.sleeps, timeout)
        end = math.inf if timeout is None else time.perf_counter() + max(timeout, 0.0)
        while True:
            limit = min(end, self.timer_at)
            left = limit - time.perf_counter()
            try:
                first = self.events.get(timeout=None if limit == math.inf else max(left, 0.0))
            except queue.Empty:
                if self.timer_at <= time.perf_counter():    # the timer fired (one-shot)
                    self.timer_at = math.inf
                    self.timer_fired += 1
                return []
            if first is not RETIME:
                break
        out = [first]
        while True:
            try:
                out.append(self.events.get_nowait())
            except queue.Empty:
                break
        return [ev for ev in out if ev is not None and ev is not RETIME]

    def close(self):
        pass


@pytest.fixture
def scripted_backend(monkeypatch):
    from letcc.runtime import local_backend

    monkeypatch.setattr(local_backend, "LocalBackend", ScriptedBackend)
    return ScriptedBackend


def test_the_probe_takes_the_first_answer_and_late_probe_replies_are_no_round_answers(scripted_backend, rng):
    K, N = 4, 8
    code = letcc.LeTCC(K, N)
    X = rng.random((2 * K, D))
    # wait_for = N: the round waits for every worker, so a late probe reply taken
    # for a failure (or an answer) of the round would change who answered it
    with CodedServer(lambda: None, code, wait_for=N, max_batch_delay=1e6, hang_timeout=1e6) as s:
        be = ScriptedBackend.last
        futs = [s.submit(x) for x in X[:K]]
        be.wait_for(lambda: len(be.probes) == N, "every worker asked for the output shape")
        pid = be.probes[0][1]
        assert sorted(j for j, _ in be.probes) == list(range(N)) and {r for _, r in be.probes} == {pid}
        # worker 5 answers the probe first; worker 0 (asked first) has not: the round goes anyway
        be.reply("probe", 5, pid, (1, 3), "<f8")
        be.wait_for(lambda: len(be.submitted) == 1, "the round submitted without waiting for worker 0")
        r, workers, b, _, _ = be.submitted[0]
        assert workers == list(range(N)) and b == 1 and r != pid and be.out_ref == (5, (3,), "<f8")
        # the other workers' late probe replies, of every kind, interleaved with the answers
        be.reply("probe", 0, pid, (1, 3), "<f8")
        be.reply("error", 1, pid, "Traceback: the probe raised here")
        be.reply("cancelled", 2, pid)
        for j in range(N - 1):
            be.answer(j, r)
        be.reply("probe", 7, pid, (1, 3), "<f8")
        assert not any(f.done() for f in futs)     # every worker counts: 7 is still to answer
        be.answer(N - 1, r)
        got = np.stack([f.result(WAIT) for f in futs])
        st = s.stats()
    coded = np.asarray(code.encode(X[:K].reshape(1, K, D).swapaxes(0, 1)))
    Y = np.stack([f_ref(coded[j]) for j in range(N)])
    want = np.asarray(code.decode(Y, np.arange(N))).swapaxes(0, 1).reshape(K, -1)
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
    assert st["erasures"] == 0 and st["errors"] == 0 and st["stale"] == 0 and st["completed"] == K
    assert s.stats()["last_errors"] == []      # the late probe error is nobody's round error


def test_replies_to_a_round_that_ended_are_counted_stale_each_once(scripted_backend, rng):
    # a round decided on the first N - 1 answers; its last answer, then a batch of
    # repeated answers ("answers": three workers at once), a late error and a
    # cancelled reply all come after it ended: each reply counts once as stale, an
    # "answers" event as many as it carries, and none of them is an error
    K, N = 2, 4
    code = letcc.LeTCC(K, N)
    X = rng.random((K, D))
    with CodedServer(lambda: None, code, wait_for=N - 1, max_batch_delay=1e6, hang_timeout=1e6) as s:
        be = ScriptedBackend.last
        futs = [s.submit(x) for x in X]
        be.wait_for(lambda: len(be.probes) == N, "every worker asked for the output shape")
        be.reply("probe", 0, be.probes[0][1], (1, 3), "<f8")
        be.wait_for(lambda: len(be.submitted) == 1, "the round submitted")
        r = be.submitted[0][0]
        for j in range(N - 1):
            be.answer(j, r)
        got = np.stack([f.result(WAIT) for f in futs])
        assert s.stats()["stale"] == 0
        be.answer(N - 1, r)
        t = time.perf_counter()
        be.events.put(Event("answers", -1, r, ((0, 1, 2), (t, t, t)), t))
        be.reply("error", 3, r, "Traceback: raised after the round")
        be.reply("cancelled", 2, r)
        deadline = time.monotonic() + WAIT
        while s.stats()["stale"] < 6 and time.monotonic() < deadline:
            time.sleep(0.005)
        st = s.stats()
    assert st["stale"] == 6 and st["errors"] == 0 and st["completed"] == K and st["rounds"] == 1
    coded = np.asarray(code.encode(X.reshape(1, K, D).swapaxes(0, 1)))
    Y = np.stack([f_ref(coded[j]) for j in range(N)])
    want = np.asarray(code.decode(Y[:N - 1], np.arange(N - 1))).swapaxes(0, 1).reshape(K, -1)
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


def test_the_probe_fails_only_when_every_worker_failed_it(scripted_backend, rng):
    K, N = 2, 4
    code = letcc.LeTCC(K, N)
    with CodedServer(lambda: None, code, max_batch_delay=1e6, hang_timeout=1e6) as s:
        be = ScriptedBackend.last
        futs = [s.submit(x) for x in rng.random((K, D))]
        be.wait_for(lambda: len(be.probes) == N, "every worker asked")
        pid = be.probes[0][1]
        for j in range(N - 1):
            be.reply("error", j, pid, f"ValueError: bad input on {j}")
        assert not any(f.done() for f in futs)     # one worker is still to reply
        be.reply("cancelled", N - 1, pid)
        for f in futs:
            with pytest.raises(RuntimeError, match=r"the model failed on every worker(.|\n)*worker 0: ValueError: "
                                                   r"bad input on 0(.|\n)*worker 3: cancelled"):
                f.result(WAIT)
        assert be.submitted == []


def test_submit_wakes_the_dispatcher_only_when_the_request_changes_what_it_does(scripted_backend, rng):
    K, N = 4, 8
    code = letcc.LeTCC(K, N)
    X = rng.random((K + 2, D))
    with CodedServer(lambda: None, code, max_batch_delay=1e6, hang_timeout=1e6, wait_for=N) as s:
        be = ScriptedBackend.last

        def asleep_after(n, what):
            be.wait_for(lambda: len(be.sleeps) > n, what)
            return len(be.sleeps)

        n = asleep_after(0, "the dispatcher idle")
        assert be.sleeps[-1] is None
        futs = [s.submit(X[0])]              # the first: a timed wake-up when its batch delay ends
        assert be.wakes == 0 and len(be.timed) == 1 and 1e6 - 1 < be.timed[0] - time.perf_counter() <= 1e6
        futs += [s.submit(x) for x in X[1:K - 1]]
        assert be.wakes == 0 and len(be.timed) == 1   # nothing to do before the batch delay: nothing
        assert len(be.sleeps) == n           # the dispatcher slept on throughout
        futs.append(s.submit(X[K - 1]))      # the K-th: a round can leave
        assert be.wakes == 1
        be.wait_for(lambda: len(be.probes) == N, "the round's probe")
        be.reply("probe", 3, be.probes[0][1], (1, 3), "<f8")
        be.wait_for(lambda: len(be.submitted) == 1, "the round submitted")
        r = be.submitted[0][0]
        asleep_after(be.submitted[0][4], "asleep with the round in flight")
        assert be.timed[-1] == math.inf     # the dispatcher took the requests: the timer cancelled
        extra = s.submit(X[K])               # no ring slot free (one round in flight): no wake-up
        assert be.wakes == 1 and len(be.timed) == 2
        late = s.submit(X[K + 1], deadline=1e3)   # its deadline comes before the planned wake-up
        assert be.wakes == 1 and len(be.timed) == 3 and 1e3 - 1 < be.timed[-1] - time.perf_counter() <= 1e3
        for j in range(N):
            be.answer(j, r)
        got = np.stack([f.result(WAIT) for f in futs])
        more = [s.submit(x) for x in X[:K - 2]]   # with the two waiting: a round of K
        be.wait_for(lambda: len(be.submitted) == 2, "the second round")
        r2 = be.submitted[1][0]
        for j in range(N):
            be.answer(j, r2)
        rest = [f.result(WAIT) for f in [extra, late] + more]
    coded = np.asarray(code.encode(X[:K].reshape(1, K, D).swapaxes(0, 1)))
    Y = np.stack([f_ref(coded[j]) for j in range(N)])
    want = np.asarray(code.decode(Y, np.arange(N))).swapaxes(0, 1).reshape(K, -1)
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
    assert all(y.shape == (3,) for y in rest)


def test_a_partial_round_leaves_on_the_timed_wake_up_alone(scripted_backend, rng):
    """One request, nothing else: the dispatcher is never woken by the submit; the
    timer it set wakes it when max_batch_delay has passed, and the round (1 request
    padded to K) leaves then, not earlier."""
    K, N = 4, 8
    code = letcc.LeTCC(K, N)
    x = rng.random(D)
    delay = 0.05
    with CodedServer(lambda: None, code, max_batch_delay=delay, hang_timeout=1e6, wait_for=N) as s:
        be = ScriptedBackend.last
        be.wait_for(lambda: len(be.sleeps) >= 1, "the dispatcher idle")
        t0 = time.perf_counter()
        fut = s.submit(x)
        be.wait_for(lambda: len(be.probes) == N, "the round's probe")
        assert be.wakes == 0 and be.timer_fired == 1
        assert time.perf_counter() - t0 >= delay
        be.reply("probe", 0, be.probes[0][1], (1, 3), "<f8")
        be.wait_for(lambda: len(be.submitted) == 1, "the round submitted")
        r = be.submitted[0][0]
        for j in range(N):
            be.answer(j, r)
        got = fut.result(WAIT)
    coded = np.asarray(code.encode(np.repeat(x[None, None], K, axis=0)))    # padded with x itself
    Y = np.stack([f_ref(coded[j]) for j in range(N)])
    want = np.asarray(code.decode(Y, np.arange(N)))[0, 0]
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
