"""letcc runtime, local backend: rounds decode what the code decodes from the
answering workers, the waiting rule follows the straggler model exactly, and
the baselines run through the same call.

References are independent of the runtime: f applied in this process to
code.encode(...) of the same groups, then code.decode on the answering set.
Straggler delays are virtual (0 / inf or far apart), so nothing here depends
on how fast the machine is.
"""
from __future__ import annotations

import functools
import os
import time

import numpy as np
import pytest

import letcc
from letcc.runtime.coded_inference import CodedInference
from letcc.runtime.backend import answer_count, each_answer
from letcc.runtime.virtual_time import CountedRoundWaiter, RoundWaiter
from letcc.stragglers import Bernoulli, Empirical, FixedCount, ShiftedExponential

try:        # imported before the first workers start: the fork server then preloads it
    import torch  # noqa: F401
except ImportError:
    pass


# ---- tiny picklable models (built inside the workers) ------------------------

class TanhLinear:
    """f(x) = tanh(x.reshape(b, -1) @ W + c): nonlinear, different per input."""

    def __init__(self, d, m, seed=0):
        rng = np.random.default_rng(seed)
        self.W = rng.standard_normal((d, m)) / np.sqrt(d)
        self.c = rng.standard_normal(m)

    def __call__(self, x):
        x2 = x.reshape(x.shape[0], -1)
        return np.tanh(x2 @ self.W.astype(x.dtype) + self.c.astype(x.dtype))


def tanh_linear(d, m, seed=0):
    return TanhLinear(d, m, seed)


def torch_linear(d, m):
    import torch

    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(d, m), torch.nn.Tanh())


def reference(code, f, X, answered):
    """What a round must return: decode of f(coded inputs) on the answering set."""
    K = code.K
    B = X.shape[0] // K
    groups = np.ascontiguousarray(X.reshape((B, K) + X.shape[1:]).swapaxes(0, 1))
    coded = np.asarray(code.encode(groups))                          # (N, B, ...)
    Y = np.stack([f(coded[j]) for j in range(code.N)])               # (N, B, m)
    avail = np.asarray(sorted(answered))
    est = np.asarray(code.decode(Y[avail], avail))                   # (K, B, m)
    return est.swapaxes(0, 1).reshape((B * K,) + est.shape[2:])


def assert_close(out, ref, dtype):
    tol = 2e-5 if dtype == np.float32 else 1e-11
    np.testing.assert_allclose(out, ref, rtol=tol, atol=tol)


# ---- the waiting rule alone (no processes) -------------------------------------

@pytest.fixture(params=[RoundWaiter, CountedRoundWaiter], ids=["python", "compiled"])
def Waiter(request):
    """Both implementations of the waiting rule (letcc.runtime.virtual_time)."""
    return request.param


def test_waiter_fixed_count_answers_exactly_the_finite_delays(Waiter):
    code = letcc.LeTCC(3, 6)
    delays = np.array([0.0, np.inf, 0.0, 0.0, np.inf, 0.0])
    never = np.isinf(delays)
    w = Waiter(code, range(6), np.where(never, 0, delays), never, count=4)
    for j, e in [(4, 0.001), (0, 0.002), (1, 0.003), (2, 0.004)]:   # 4 and 1 never count
        w.result(j, e)
        assert w.decide(e) is None
    w.result(5, 0.005)
    assert w.decide(0.005) is None                # worker 3 still pending, delay 0
    w.result(3, 0.006)
    d = w.decide(0.006)
    assert d.rule == "count" and sorted(d.answered) == [0, 2, 3, 5]


def test_waiter_virtual_order_and_when_an_answer_is_confirmed(Waiter):
    code = letcc.LeTCC(2, 4)
    delays = np.array([5.0, 1.0, 3.0, 9.0])
    w = Waiter(code, range(4), delays, np.zeros(4, bool), count=2)
    w.result(3, 0.01)             # virtual 9.01
    w.result(0, 0.02)             # virtual 5.02
    # pending 1 (>= e+1) and 2 (>= e+3) may still come first: undecided
    assert w.decide(0.03) is None
    w.result(2, 0.04)             # virtual 3.04; pending 1 lands at >= 1.04
    assert w.decide(0.04) is None
    # without a new answer: 3.04 is confirmed once e + 1 >= 3.04 -> wake then
    assert w.next_change(0.04) == pytest.approx(2.04)
    w.result(1, 0.05)             # virtual 1.05: first; nothing pending
    d = w.decide(0.05)
    assert d.answered == (1, 2) and d.at == pytest.approx(3.04) and d.rule == "count"


def test_waiter_deadline_decides_without_waiting_for_late_workers(Waiter):
    code = letcc.BACC(2, 4)
    delays = np.array([0.0, 10.0, 0.5, 20.0])
    w = Waiter(code, range(4), delays, np.zeros(4, bool), deadline=2.0)
    w.result(0, 0.01)
    assert w.decide(0.01) is None                  # worker 2 may land at 0.51 <= 2
    assert w.next_change(0.01) == pytest.approx(1.5)   # after that it cannot make it
    d = w.decide(1.6)
    assert d.rule == "deadline" and d.answered == (0,) and d.at == 2.0
    all_late = Waiter(code, range(4), np.full(4, 30.0), np.zeros(4, bool), deadline=2.0)
    assert all_late.decide(0.0).answered == ()


def test_waiter_replication_first_copy_completes_the_round(Waiter):
    code = letcc.Replication(2, 2)            # worker i holds input i % 2
    w = Waiter(code, range(4), np.zeros(4), np.zeros(4, bool))
    w.result(2, 0.01)                          # input 0
    assert w.decide(0.01) is None
    w.result(3, 0.02)                          # input 1: every input covered
    d = w.decide(0.02)
    assert d.rule == "complete" and d.answered == (2, 3)


def test_waiter_hang_and_failures(Waiter):
    code = letcc.LeTCC(2, 3)
    w = Waiter(code, range(3), np.zeros(3), np.zeros(3, bool), hang_at={0: 1.0, 1: 1.0, 2: 1.0})
    w.result(0, 0.1)
    w.fail(1, "died")
    assert w.next_change(0.1) == 1.0 and w.hung(0.5) == []
    assert w.hung(1.0) == [2]
    w.fail(2, "hung")
    d = w.decide(1.0)
    assert d.rule == "all" and d.answered == (0,) and w.failed == {1: "died", 2: "hung"}


def test_waiter_answers_needed_is_a_lower_bound_for_every_rule(Waiter):
    # The master sleeps until this many more answers are in: it must never
    # exceed what the rule that ends the round actually needs.
    never = np.zeros(6, bool)
    w = Waiter(letcc.LeTCC(3, 6), range(6), np.zeros(6), never, count=4)     # first 4 of 6
    assert w.answers_needed() == 4
    for k, j in enumerate((5, 0, 3)):
        w.result(j, 0.01 * (k + 1))
        assert w.answers_needed() == 3 - k and w.decide(0.05) is None
    w.result(1, 0.05)
    assert w.answers_needed() == 1 and w.decide(0.05).rule == "count"
    # no count: LeTCC completes with every worker only; "all" when the rest fail
    w = Waiter(letcc.LeTCC(2, 4), range(4), np.zeros(4), np.zeros(4, bool))
    assert w.answers_needed() == 4
    w.result(2, 0.01)
    w.fail(0, "died")
    assert w.answers_needed() == 2
    w.result(1, 0.02)
    w.result(3, 0.03)
    assert w.decide(0.03).rule == "all"
    # Replication can complete with any one copy of each input: one at a time
    w = Waiter(letcc.Replication(2, 2), range(4), np.zeros(4), np.zeros(4, bool))
    assert w.answers_needed() == 1
    # a worker that can never count is not waited for
    never = np.array([False, True, False, False])
    w = Waiter(letcc.LeTCC(2, 4), range(4), np.zeros(4), never, count=3)
    assert w.answers_needed() == 3 and w.pending == {0, 2, 3}


@pytest.mark.skipif(not os.path.exists("/proc/self/timerslack_ns"), reason="Linux >= 4.6 only")
def test_workers_sleep_with_precise_timers():
    # simulate="sleep" delays end on time: the workers' timer slack is 1 ns
    with CodedInference(functools.partial(tanh_linear, 3, 2), letcc.LeTCC(2, 3)) as ci:
        for pid in ci.worker_pids():
            with open(f"/proc/{pid}/timerslack_ns") as fh:
                assert int(fh.read()) == 1


def test_timed_waits_keep_microseconds(monkeypatch):
    # epoll's timeout is whole milliseconds, rounded up (a deadline overshot by
    # 0.6 ms); the backend waits on the epoll descriptor with select() instead
    import letcc.runtime.local_backend as lb

    with CodedInference(functools.partial(tanh_linear, 3, 2), letcc.LeTCC(2, 3)) as ci:
        backend, seen = ci.backend, []
        real = lb.select.select
        monkeypatch.setattr(lb.select, "select", lambda r, w, x, t: seen.append((r, t)) or real(r, w, x, t))
        t0 = time.perf_counter()
        assert backend.poll(0.0025) == []                 # nothing is running: the timeout
        assert time.perf_counter() - t0 >= 0.0025
        assert seen == [([backend._sel.fileno()], 0.0025)]
        out = ci(np.ones((2, 3)))                          # events still come through
        assert out.shape == (2, 2)


def test_the_master_wakes_once_per_round_when_it_needs_every_answer(rng):
    # Answers to the current round are counted in shared memory and the one
    # that completes what the master waits for rings it awake: one wake-up in
    # the wait, not one per answer (the other poll is the round's opening
    # non-blocking look at older messages).
    N, K, d, m = 8, 4, 12, 5
    f = tanh_linear(d, m)
    with CodedInference(functools.partial(tanh_linear, d, m), letcc.LeTCC(K, N), stragglers=FixedCount(2),
                        seed=3) as ci:
        ci(rng.standard_normal((K, d)))                    # the layout's first round also probes
        backend, calls, got = ci.backend, [], []
        poll = backend.poll

        def logged(timeout):
            calls.append(timeout)
            events = poll(timeout)
            got.extend(events)
            return events

        backend.poll = logged
        for _ in range(20):
            X = rng.standard_normal((K, d))
            calls.clear()
            got.clear()
            out = ci(X)
            assert len(calls) == 2 and calls[0] == 0.0, calls
            assert len(ci.last_round.answered) == N - 2
            # and they come as one "answers" event, in the order the workers finished
            (ev,) = got
            workers, times = ev.payload
            assert ev.kind == "answers" and ev.round == ci.last_round.round_id and ev.worker == -1
            assert sorted(workers) == sorted(ci.last_round.answered) and list(times) == sorted(times)
            assert ev.t == times[-1]
            assert [e.worker for e in each_answer(ev)] == list(workers) and answer_count(ev) == N - 2
            assert_close(out, reference(ci.code, f, X, ci.last_round.answered), np.float64)
            lat = ci.last_round.latencies[list(ci.last_round.answered)]
            assert np.all((lat > 0) & (lat <= ci.last_round.t_total))     # each worker's own finishing time


def test_last_round_made_when_asked_reads_what_the_round_kept(rng):
    # last_round is made when first asked for (CodedInference.last_round): asked
    # once per round or only after several rounds, each RoundInfo holds its own
    # round's facts, is made once, and the round without stragglers shares its
    # delays read-only
    N, K, d, m = 8, 4, 6, 3
    f = tanh_linear(d, m)
    with CodedInference(functools.partial(tanh_linear, d, m), letcc.LeTCC(K, N), stragglers=FixedCount(2),
                        seed=5) as ci:
        assert ci.last_round is None
        seen = []
        for _ in range(3):
            X = rng.standard_normal((K, d))
            out = ci(X)
            info = ci.last_round
            assert ci.last_round is info
            seen.append(info)
            assert info.round_id == ci._engine.last_id and len(info.answered) == N - 2
            assert_close(out, reference(ci.code, f, X, info.answered), np.float64)
            late = [j for j in range(N) if j not in info.answered]
            assert np.isinf(info.delays[late]).all() and np.isnan(info.latencies[late]).all()
            assert (info.latencies[list(info.answered)] >= 0).all()
        assert len({i.round_id for i in seen}) == 3
        ci(rng.standard_normal((K, d)))
        X = rng.standard_normal((K, d))
        out = ci(X)                               # not asked between these two rounds
        assert ci._last_info is None              # made when read, not at the round's end
        ci.ready_workers()                        # events between rounds (a pump) change nothing of it
        ci.wait_ready()
        info = ci.last_round
        assert info.round_id == seen[-1].round_id + 2 and len(info.answered) == N - 2
        assert_close(out, reference(ci.code, f, X, info.answered), np.float64)
        assert np.isnan(info.latencies[[j for j in range(N) if j not in info.answered]]).all()
        ci.stragglers = None
        ci(rng.standard_normal((K, d)))
        info = ci.last_round
        assert sorted(info.answered) == list(range(N)) and not info.delays.any()
        with pytest.raises(ValueError, match="read-only"):
            info.delays[0] = 1.0


# ---- rounds through worker processes ----------------------------------------

class _EncodeLog(letcc.LeTCC):
    """LeTCC that records the rows argument of every encode (the master's side)."""

    def __init__(self, *args):
        super().__init__(*args)
        self.rows_seen = []

    def encode(self, X, out=None, rows=None):
        self.rows_seen.append(None if rows is None else list(rows))
        return super().encode(X, out=out, rows=rows)


@pytest.mark.parametrize("small", [False, True], ids=["large inputs: subset encoded", "small: every node encoded"])
def test_the_workers_sent_the_round_read_their_own_coded_inputs(rng, monkeypatch, small):
    # Virtual delays: a worker that could never count is not sent the round,
    # and its coded input is not computed; each worker sent the round reads
    # its own coded input from whichever slot the master put it in. Inputs up
    # to FULL_ENCODE_MAX_ITEMS coded numbers are encoded for every node (one
    # cached plan rather than one per set of workers), each worker reading
    # its own slot.
    import letcc.runtime.encode_into as encode_mod
    if not small:
        monkeypatch.setattr(encode_mod, "FULL_ENCODE_MAX_ITEMS", 0)
    N, K, d, m = 7, 3, 12, 5
    code = _EncodeLog(K, N)
    f = tanh_linear(d, m)
    with CodedInference(functools.partial(tanh_linear, d, m), code, stragglers=FixedCount(3), seed=5) as ci:
        for dtype in (np.float64, np.float32, np.float64):    # a new layout, then the same again
            X = rng.standard_normal((2 * K, d)).astype(dtype)
            out = ci(X)
            info = ci.last_round
            assert code.rows_seen[-1] == (None if small else sorted(info.answered)) and len(info.answered) == N - 3
            assert ci.backend._positions is None if small else ci.backend._positions is not None
            assert_close(out, reference(code, f, X, info.answered), dtype)
        ci.stragglers = None                                  # every worker: one full encode
        X = rng.standard_normal((K, d))
        out = ci(X)
        assert code.rows_seen[-1] is None and sorted(ci.last_round.answered) == list(range(N))
        assert_close(out, reference(code, f, X, range(N)), np.float64)



@pytest.mark.parametrize("N", [4, 5, 6, 7, 8])
def test_rounds_decode_like_the_code_for_every_straggler_count(N, rng):
    K = N // 2
    code = letcc.LeTCC(K, N)
    d, m = 12, 5
    f = tanh_linear(d, m)
    seed = int(rng.integers(1 << 30))
    with CodedInference(functools.partial(tanh_linear, d, m), code, seed=seed) as ci:
        draws = np.random.default_rng(seed)
        for S in (0, 1, 2):
            ci.stragglers = FixedCount(S)
            for dtype in (np.float64, np.float32):
                X = rng.standard_normal((2 * K, 3, 4)).astype(dtype)   # B = 2 groups
                out = ci(X)
                draw = ci.stragglers.sample(N, draws)                 # the same draw, replayed
                info = ci.last_round
                assert sorted(info.answered) == draw.available.tolist()
                assert info.rule == "count"            # first N - S answers
                assert out.dtype == dtype and out.shape == (2 * K, m)
                assert_close(out, reference(code, f, X, info.answered), dtype)
                assert np.all(np.isinf(info.delays[draw.stragglers]))
                assert np.all(np.isnan(info.latencies[draw.stragglers]))


def test_bacc_torch_module_and_torch_inputs(rng):
    torch = pytest.importorskip("torch")
    code = letcc.BACC(3, 7)
    with CodedInference(functools.partial(torch_linear, 6, 4), code, stragglers=FixedCount(2, worst_case=True)) as ci:
        X = torch.from_numpy(rng.standard_normal((3, 2, 3)).astype(np.float32))
        out = ci(X)
        assert isinstance(out, torch.Tensor) and out.dtype == torch.float32 and out.shape == (3, 4)
        model = torch_linear(6, 4)

        def f(x):
            with torch.inference_mode():
                return model(torch.from_numpy(np.ascontiguousarray(x))).numpy()

        late = FixedCount(2, worst_case=True).sample(7, np.random.default_rng(0)).stragglers
        assert sorted(set(range(7)) - set(ci.last_round.answered)) == late.tolist()
        assert_close(out.numpy(), reference(code, f, X.numpy(), ci.last_round.answered), np.float32)


def test_uncoded_and_replication_are_exact_with_the_same_call(rng):
    d, m = 8, 3
    f = tanh_linear(d, m)
    X = rng.standard_normal((6, 8))
    with CodedInference(functools.partial(tanh_linear, d, m), letcc.Uncoded(3)) as ci:
        out = ci(X)
        assert ci.last_round.rule == "complete" and sorted(ci.last_round.answered) == [0, 1, 2]
        np.testing.assert_allclose(out, f(X), rtol=1e-12, atol=1e-12)
    # replication: 6 workers, one straggler; the round ends at the first copy of each input
    with CodedInference(functools.partial(tanh_linear, d, m), letcc.Replication(3, 2),
                        stragglers=FixedCount(1), seed=1) as ci:
        for _ in range(3):
            out = ci(X)
            info = ci.last_round
            assert letcc.Replication(3, 2).can_decode(info.answered)
            assert info.rule in ("complete", "count")
            np.testing.assert_allclose(out, f(X), rtol=1e-12, atol=1e-12)


def test_uncoded_cannot_finish_without_its_straggler(rng):
    with CodedInference(functools.partial(tanh_linear, 4, 2), letcc.Uncoded(3), stragglers=FixedCount(1)) as ci:
        with pytest.raises(TimeoutError, match=r"cannot decode from workers"):
            ci(rng.standard_normal((3, 4)))


def test_latency_model_deadline_and_first_n_follow_the_draw(rng):
    code = letcc.LeTCC(3, 6)
    f = tanh_linear(5, 2)
    # delays 0 or 1000 s, deadline 500 s: exactly the zero-delay workers count
    model = Empirical([0.0, 1000.0], deadline=500.0)
    with CodedInference(functools.partial(tanh_linear, 5, 2), code, stragglers=model, seed=7) as ci:
        draws = np.random.default_rng(7)
        for _ in range(4):
            X = rng.standard_normal((3, 5))
            draw = model.sample(6, draws)
            if draw.available.size == 0:
                with pytest.raises(TimeoutError, match="no worker answered"):
                    ci(X)
                continue
            out = ci(X)
            assert sorted(ci.last_round.answered) == draw.available.tolist()
            assert ci.last_round.rule in ("deadline", "complete")
            assert_close(out, reference(code, f, X, draw.available), np.float64)
        # first N - S of well separated delays: the S largest never count
        ci.stragglers = ShiftedExponential(shift=1.0, rate=0.01, stragglers=2)
        X = rng.standard_normal((3, 5))
        draw = ci.stragglers.sample(6, np.random.default_rng(99))
        ranked = np.sort(draw.delays)
        assert ranked[4] - ranked[3] > 1.0      # this draw's 4th and 5th are seconds apart
        ci.rng = np.random.default_rng(99)
        out = ci(X)
        assert sorted(ci.last_round.answered) == draw.available.tolist()
        lat = ci.last_round.latencies
        assert np.all(lat[list(ci.last_round.answered)] >= draw.delays[list(ci.last_round.answered)])
        assert_close(out, reference(code, f, X, draw.available), np.float64)


def test_bernoulli_and_all_late_raise_timeout(rng):
    code = letcc.LeTCC(2, 4)
    with CodedInference(functools.partial(tanh_linear, 3, 2), code,
                        stragglers=ShiftedExponential(shift=100.0, rate=1.0, deadline=1.0)) as ci:
        with pytest.raises(TimeoutError, match=r"no worker answered by the deadline of 1 s"):
            ci(rng.standard_normal((2, 3)))
        assert ci.last_round.answered == () and ci.last_round.rule == "deadline"
        ci.stragglers = Bernoulli(0.5)
        draws = np.random.default_rng(3)
        ci.rng = np.random.default_rng(3)
        for _ in range(5):
            draw = ci.stragglers.sample(4, draws)
            X = rng.standard_normal((2, 3))
            if draw.available.size == 0:
                with pytest.raises(TimeoutError):
                    ci(X)
            else:
                ci(X)
                assert sorted(ci.last_round.answered) == draw.available.tolist()


@pytest.mark.parametrize("small", [True, False], ids=["every node encoded", "subset encoded"])
def test_a_first_round_sent_to_nobody_times_out_and_the_next_learns_the_layout(rng, monkeypatch, small):
    # Every worker drawn never to answer (virtual time) on the round that would
    # learn the output layout: nobody is sent the round, so nobody is probed;
    # it ends at its deadline like any round without answers, and the next
    # round with workers probes and decodes.
    import letcc.runtime.encode_into as encode_mod
    if not small:
        monkeypatch.setattr(encode_mod, "FULL_ENCODE_MAX_ITEMS", 0)
    code = letcc.LeTCC(2, 4)
    never = Empirical([np.inf])                 # every worker, every round
    with CodedInference(functools.partial(tanh_linear, 3, 2), code, stragglers=never, deadline=0.05) as ci:
        with pytest.raises(TimeoutError, match=r"no worker answered by the deadline of 0.05 s"):
            ci(rng.standard_normal((2, 3)))
        assert ci.last_round.answered == () and ci.last_round.rule == "deadline"
        assert ci.last_round.dispatched == (0, 1, 2, 3) and ci.backend.output_spec() is None
        ci.stragglers = FixedCount(1)
        X = rng.standard_normal((2, 3))
        out = ci(X)
        assert len(ci.last_round.answered) == 3
        assert_close(out, reference(code, tanh_linear(3, 2), X, ci.last_round.answered), np.float64)


def test_sleep_mode_waits_for_real_and_answers_the_same_set(rng):
    code = letcc.LeTCC(2, 4)
    f = tanh_linear(3, 2)
    with CodedInference(functools.partial(tanh_linear, 3, 2), code, stragglers=FixedCount(1),
                        simulate="sleep", seed=5) as ci:
        draws = np.random.default_rng(5)
        for _ in range(3):
            X = rng.standard_normal((2, 3))
            out = ci(X)
            draw = ci.stragglers.sample(4, draws)
            assert sorted(ci.last_round.answered) == draw.available.tolist()
            assert_close(out, reference(code, f, X, draw.available), np.float64)


def test_batch_size_and_input_shape_may_change_between_rounds(rng):
    code = letcc.LeTCC(2, 4)
    with CodedInference(functools.partial(tanh_linear, 6, 3), code) as ci:
        f = tanh_linear(6, 3)
        # revisits a batch size within one layout, and a row shape after others
        # (workers keep views of their slots per batch size and layout)
        for B, shape in [(1, (6,)), (3, (6,)), (2, (6,)), (3, (6,)), (2, (2, 3)), (1, (3, 2)), (1, (6,)), (3, (6,))]:
            X = rng.standard_normal((2 * B,) + shape)
            out = ci(X)
            assert out.shape == (2 * B, 3)
            assert_close(out, reference(code, f, X, range(4)), np.float64)


class _ShortDraws:
    """A hand-written straggler model whose draws have one delay too few."""

    def sample(self, N, rng):
        return letcc.stragglers.StragglerDraw(np.zeros(N - 1), np.arange(N - 1))

    def wait_count(self, N):
        return None

    def __repr__(self):
        return "_ShortDraws"


def test_bad_arguments_are_rejected_clearly(rng):
    code = letcc.LeTCC(2, 4)
    with pytest.raises(TypeError, match="model_factory must be a callable"):
        CodedInference(42, code)
    with pytest.raises(TypeError, match="code must be a letcc code"):
        CodedInference(functools.partial(tanh_linear, 3, 2), object())
    with pytest.raises(ValueError, match="simulate must be one of"):
        CodedInference(functools.partial(tanh_linear, 3, 2), code, simulate="later")
    with pytest.raises(ValueError, match="backend must be 'local' or 'ray'"):
        CodedInference(functools.partial(tanh_linear, 3, 2), code, backend="mpi")
    with pytest.raises(ValueError, match="deadline must be > 0"):
        CodedInference(functools.partial(tanh_linear, 3, 2), code, deadline=0)
    with pytest.raises(ValueError, match="start_method='fork' is not allowed"):
        CodedInference(functools.partial(tanh_linear, 3, 2), code, start_method="fork")
    with pytest.raises(ValueError, match="devices lists 2 devices but the code has N = 4"):
        CodedInference(functools.partial(tanh_linear, 3, 2), code, devices=["cpu", "cpu"])
    with pytest.raises(TypeError, match="stragglers must be a letcc.stragglers model"):
        CodedInference(functools.partial(tanh_linear, 3, 2), code, stragglers=0.1)
    with CodedInference(functools.partial(tanh_linear, 3, 2), code) as ci:
        with pytest.raises(ValueError, match=r"shape \(3, 3\): CodedInference needs a positive multiple of K = 2"):
            ci(rng.standard_normal((3, 3)))
        with pytest.raises(TypeError, match="stragglers must be a letcc.stragglers model; float has no sample"):
            ci.stragglers = 0.5
        with pytest.raises(ValueError, match="deadline must be > 0, got -1"):
            ci.deadline = -1
        with pytest.raises(ValueError, match="simulate must be one of"):
            ci.simulate = "real"
        assert ci.stragglers is None and ci.deadline is None and ci.simulate == "virtual"
        ci.stragglers = _ShortDraws()
        with pytest.raises(ValueError, match=r"_ShortDraws drew delays of shape \(3,\) for N = 4 workers"):
            ci(rng.standard_normal((2, 3)))
        ci.stragglers = None
        assert ci(rng.standard_normal((2, 3))).shape == (2, 2)     # still usable
    with pytest.raises(RuntimeError, match="closed"):
        ci(rng.standard_normal((2, 3)))


def test_top_level_name():
    assert letcc.CodedInference is CodedInference
