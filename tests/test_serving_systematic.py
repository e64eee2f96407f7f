"""CodedServer with a systematic code: exact answers as soon as a request's own
worker answers, a decoded (approximate) answer for the late ones at their
fallback time, late exact answers counted and never delivered twice.

The round-level behaviour runs against the scripted backend (the test says
who answers what, in which order: deterministic); the fault paths and the
non-systematic path against real worker processes.
"""
from __future__ import annotations

import functools
import os

import numpy as np
import pytest

import letcc
from letcc.serving import CodedServer, Hedged, RequestInfo
from letcc.serving.systematic import AfterRule
from test_runtime_faults import D, scripted, touch
from test_serving import wait_until
from test_serving_scripted import WAIT, ScriptedBackend, f_ref, scripted_backend  # noqa: F401 (fixture)


def started_round(be, n_rounds=1):
    """Answer the probe (first round only) and wait until `n_rounds` rounds were submitted."""
    be.wait_for(lambda: be.probes or be.out_ref is not None, "the probe sent")
    if be.out_ref is None:
        be.reply("probe", be.probes[0][0], be.probes[0][1], (1, 3), "<f8")
    be.wait_for(lambda: len(be.submitted) >= n_rounds, "the round submitted")
    return be.submitted[n_rounds - 1][0]


def decoded(code, be, r, answered, K):
    """What the code decodes from `answered`'s outputs of round r (one group): (K, M)."""
    _, _, b, ring, _ = next(s for s in be.submitted if s[0] == r)
    avail = np.asarray(sorted(answered))
    return np.asarray(code.decode(be.out[ring, avail, :b], avail))[:, 0]


@pytest.mark.parametrize("make", [lambda K, N: letcc.LeTCC(K, N, systematic=True),
                                  lambda K, N: letcc.BACC(K, N, systematic=True)], ids=["letcc", "bacc"])
def test_each_request_resolves_exactly_when_its_own_worker_answers(scripted_backend, rng, make):
    K, N = 4, 6
    code = make(K, N)
    X = rng.random((K, D))
    with CodedServer(lambda: None, code, max_batch_delay=1e6, hang_timeout=1e6) as s:
        be = ScriptedBackend.last
        futs = [s.submit(x, info=True) for x in X]
        r = started_round(be)
        for k in (2, 0, 3, 1):                       # in any order, each at once
            w = code.systematic_workers[k]
            be.answer(w, r)
            y, info = futs[k].result(WAIT)
            assert isinstance(info, RequestInfo) and not info.approximate
            assert info.answered == (w,) and info.round_id == r and info.latency >= 0
            np.testing.assert_array_equal(y, f_ref(X[k:k + 1])[0])          # the worker's own answer
            assert sum(f.done() for f in futs) == [2, 0, 3, 1].index(k) + 1
        # every request exact: the round ends, the parity workers (never answered) are cancelled
        be.wait_for(lambda: be.cancelled, "the parity workers cancelled")
        parity = sorted(set(range(N)) - set(code.systematic_workers))
        assert sorted(be.cancelled[-1][0]) == parity
        st = s.stats()
    assert st["completed"] == K and st["approximate"] == 0 and st["errors"] == 0


def test_a_late_request_is_decoded_when_the_waiting_rule_decides_and_its_late_answer_is_only_counted(
        scripted_backend, rng):
    K, N = 4, 6
    code = letcc.LeTCC(K, N, systematic=True)
    X = rng.random((K, D))
    late = code.systematic_workers[2]
    with CodedServer(lambda: None, code, wait_for=N - 1, max_batch_delay=1e6, hang_timeout=1e6) as s:
        be = ScriptedBackend.last
        futs = [s.submit(x, info=True) for x in X]
        r = started_round(be)
        others = [j for j in range(N) if j != late]
        parity = [j for j in others if j not in code.systematic_workers]
        for j in [j for j in others if j != parity[-1]]:
            be.answer(j, r)
        for k in (0, 1, 3):
            assert not futs[k].result(WAIT)[1].approximate
        assert not futs[2].done()                     # 4 of the 5 answers the rule waits for
        be.answer(parity[-1], r)
        y, info = futs[2].result(WAIT)
        assert info.approximate and info.answered == tuple(others)
        np.testing.assert_allclose(y, decoded(code, be, r, others, K)[2], rtol=1e-12, atol=1e-14)
        # the systematic worker's answer, now late: counted, not delivered (the future keeps the estimate)
        be.answer(late, r)
        be.wait_for(lambda: s.stats()["late_exact"] == 1, "the late exact answer counted")
        assert futs[2].result(0)[0] is y
        st = s.stats()
    assert st["approximate"] == 1 and st["completed"] == K and st["stale"] == 0


@pytest.mark.parametrize("how", ["fallback_after", "deadline"])
def test_a_late_request_is_decoded_at_its_fallback_time(scripted_backend, rng, how):
    K, N = 4, 6
    code = letcc.LeTCC(K, N, systematic=True)
    X = rng.random((K, D))
    late = code.systematic_workers[1]
    kw = dict(fallback_after=0.05) if how == "fallback_after" else dict(deadline=0.05)
    # wait_for = N: the waiting rule never decides while `late` is out; only the time does
    with CodedServer(lambda: None, code, wait_for=N, max_batch_delay=1e6, hang_timeout=1e6, **kw) as s:
        be = ScriptedBackend.last
        futs = [s.submit(x, info=True) for x in X]
        r = started_round(be)
        others = [j for j in range(N) if j != late]
        for j in others:
            be.answer(j, r)
        y, info = futs[1].result(WAIT)
        assert info.approximate and info.answered == tuple(others)
        np.testing.assert_allclose(y, decoded(code, be, r, others, K)[1], rtol=1e-12, atol=1e-14)
        assert [f.result(0)[1].approximate for f in futs] == [False, True, False, False]


def test_a_systematic_worker_that_dies_is_an_erasure_decoded_at_once(scripted_backend, rng):
    """Its own answer can never come: decoded as soon as the waiting rule decides,
    without waiting for the fallback time."""
    K, N = 4, 6
    code = letcc.LeTCC(K, N, systematic=True)
    X = rng.random((K, D))
    dead = code.systematic_workers[3]
    with CodedServer(lambda: None, code, wait_for=N - 1, fallback_after=1e6, max_batch_delay=1e6,
                     hang_timeout=1e6) as s:
        be = ScriptedBackend.last
        futs = [s.submit(x, info=True) for x in X]
        r = started_round(be)
        be.reply("died", dead, -1, -9, 12345)
        others = [j for j in range(N) if j != dead]
        for j in others:
            be.answer(j, r)
        y, info = futs[3].result(WAIT)
        assert info.approximate and info.answered == tuple(others)
        np.testing.assert_allclose(y, decoded(code, be, r, others, K)[3], rtol=1e-12, atol=1e-14)


def test_the_non_systematic_path_flags_its_decodes_approximate(scripted_backend, rng):
    K, N = 2, 4
    code = letcc.LeTCC(K, N)
    with CodedServer(lambda: None, code, wait_for=N, max_batch_delay=1e6, hang_timeout=1e6) as s:
        be = ScriptedBackend.last
        futs = [s.submit(x, info=True) for x in rng.random((K, D))]
        r = started_round(be)
        for j in range(N):
            be.answer(j, r)
        infos = [f.result(WAIT)[1] for f in futs]
    assert all(i.approximate and i.answered == (0, 1, 2, 3) for i in infos)


def test_systematic_serving_on_real_workers_replaces_a_dead_systematic_worker(tmp_path, rng):
    script = tmp_path / "script"
    script.mkdir()
    K, N = 2, 4
    code = letcc.LeTCC(K, N, systematic=True)
    w = code.systematic_workers[0]
    with CodedServer(functools.partial(scripted, str(script)), code, threads_per_worker=1, wait_for=N,
                     max_groups=1, max_batch_delay=1e6) as s:
        X = rng.random((K, D))
        first = [f.result(WAIT) for f in [s.submit(x, info=True) for x in X]]
        assert not any(i.approximate for _, i in first)
        np.testing.assert_allclose(np.stack([y for y, _ in first]), f_ref(X), rtol=1e-12, atol=1e-14)
        pid = s.worker_pids()[w]
        touch(script / f"kill{w}")                 # input 0's worker dies inside its next call
        second = [f.result(WAIT) for f in [s.submit(x, info=True) for x in X]]
        assert [i.approximate for _, i in second] == [True, False]
        assert w not in second[0][1].answered
        # replaced: a new process; once it is ready, rounds are exact again
        wait_until(lambda: s.worker_pids()[w] not in (None, pid), "worker replaced")
        wait_until(lambda: w in s.backend.ready_workers(), "the replacement ready")
        third = [f.result(WAIT) for f in [s.submit(x, info=True) for x in X]]
        assert not any(i.approximate for _, i in third)
        np.testing.assert_allclose(np.stack([y for y, _ in third]), f_ref(X), rtol=1e-12, atol=1e-14)
        assert s.stats()["replaced"] >= 1


def test_bad_systematic_serving_arguments_are_clear_errors(scripted_backend):
    with pytest.raises(ValueError, match=r"fallback_after=0.1 needs a systematic code .*LeTCC\(K=2, N=4"):
        CodedServer(lambda: None, letcc.LeTCC(2, 4), fallback_after=0.1)
    with pytest.raises(ValueError, match=r"fallback_after=0.1 needs a systematic code .*Hedged"):
        CodedServer(lambda: None, Hedged(4), fallback_after=0.1)
    with pytest.raises(ValueError, match=r"fallback_after must be seconds, 'pNN' .* got 'q95'"):
        CodedServer(lambda: None, letcc.LeTCC(2, 4, systematic=True), fallback_after="q95")
    with pytest.raises(ValueError, match=r"fallback_after"):
        CodedServer(lambda: None, letcc.LeTCC(2, 4, systematic=True), fallback_after=-1.0)
    with pytest.raises(ValueError, match=r"percentile"):
        CodedServer(lambda: None, letcc.LeTCC(2, 4, systematic=True), fallback_after="p101")
    with CodedServer(lambda: None, letcc.LeTCC(2, 4, systematic=True)) as s:
        with pytest.raises(TypeError, match=r"info must be True or False, got 'yes'"):
            s.submit(np.zeros(D), info="yes")


def test_fallback_rule_percentile_of_recent_answer_times():
    rule = AfterRule("p50", min_samples=20)
    assert rule.given and rule.after() == float("inf")          # not enough samples yet
    for t in np.linspace(0.01, 0.20, 20):
        rule.observe(float(t))
    assert rule.after() == pytest.approx(np.percentile(np.linspace(0.01, 0.20, 20), 50))
    assert AfterRule(0.25).after() == 0.25 and not AfterRule(None).given


@pytest.mark.parametrize("first", ["copy", "original"])
def test_a_late_systematic_task_is_hedged_on_an_idle_worker_and_the_first_answer_wins(scripted_backend, rng,
                                                                                      first):
    K, N = 4, 6
    code = letcc.LeTCC(K, N, systematic=True)
    X = rng.random((K, D))
    late = code.systematic_workers[1]
    # no fallback within the test, every worker counted: only the hedge or the original can answer input 1
    with CodedServer(lambda: None, code, wait_for=N, fallback_after=1e6, hedge_after=0.01, max_batch_delay=1e6,
                     hang_timeout=1e6) as s:
        be = ScriptedBackend.last
        futs = [s.submit(x, info=True) for x in X]
        r = started_round(be)
        for j in range(N):
            if j != late:
                be.answer(j, r)
        r2 = started_round(be, 2)                    # the second copy, once the hedge time passed
        _, copy_workers, b, ring, _ = be.submitted[1]
        assert len(copy_workers) == 1 and copy_workers[0] != late and ring == 1 and b == 1
        if first == "copy":
            be.answer(copy_workers[0], r2)
            y, info = futs[1].result(WAIT)
            assert info.answered == (copy_workers[0],) and info.round_id == r2
            be.wait_for(lambda: any(late in w for w, _ in be.cancelled), "the original cancelled")
        else:
            be.answer(late, r)
            y, info = futs[1].result(WAIT)
            assert info.answered == (late,) and info.round_id == r
            be.wait_for(lambda: any(w == copy_workers and k == 1 for w, k in be.cancelled), "the copy cancelled")
        assert not info.approximate
        np.testing.assert_array_equal(y, f_ref(X[1:2])[0])
        st = s.stats()
    assert st["hedges"] == 1 and st["approximate"] == 0 and st["completed"] == K


def test_hedge_after_needs_a_systematic_code(scripted_backend):
    with pytest.raises(ValueError, match=r"hedge_after='p90' needs a systematic code"):
        CodedServer(lambda: None, letcc.BACC(2, 4), hedge_after="p90")
    with pytest.raises(ValueError, match=r"hedge_after must be seconds, 'pNN'"):
        CodedServer(lambda: None, letcc.BACC(2, 4, systematic=True), hedge_after="90")


def test_systematic_rounds_keep_deadlines_backpressure_and_close(scripted_backend, rng):
    """Nothing answers: at its deadline a request with nothing to decode times out (as
    today); a full queue raises QueueFull; close(cancel=True) cancels what was not dispatched."""
    from concurrent.futures import CancelledError

    from letcc.serving import QueueFull

    K, N = 2, 4
    code = letcc.LeTCC(K, N, systematic=True)
    s = CodedServer(lambda: None, code, max_batch_delay=1e6, hang_timeout=1e6, max_queue=3, rounds_in_flight=1,
                    max_groups=1)
    try:
        be = ScriptedBackend.last
        futs = [s.submit(x, deadline=0.05) for x in rng.random((K, D))]
        started_round(be)
        for f in futs:
            with pytest.raises(TimeoutError, match=r"deadline of 0.05 s \(round \d+: answers from no worker\)"):
                f.result(WAIT)
        inflight = [s.submit(x) for x in rng.random((K, D))]        # round 2: in flight, the ring is full
        wait_until(lambda: len(be.submitted) == 2, "the next round submitted")
        queued = [s.submit(x) for x in rng.random((3, D))]
        with pytest.raises(QueueFull, match=r"3 requests are waiting \(max_queue = 3\)"):
            s.submit(np.zeros(D))
    finally:
        s.close(cancel=True, timeout=0.5)
    for f in queued:
        with pytest.raises(CancelledError):
            f.result(WAIT)
    for f in inflight:                      # unanswered when close's timeout ran out
        with pytest.raises(RuntimeError, match="closed before this request was answered"):
            f.result(WAIT)


def test_a_partly_filled_round_races_the_copies_of_its_last_request(scripted_backend, rng):
    """A lone request is padded with copies of itself (pad_groups): every systematic
    worker computes it, and the first to answer resolves it, exactly."""
    K, N = 4, 6
    code = letcc.LeTCC(K, N, systematic=True)
    x = rng.random(D)
    with CodedServer(lambda: None, code, wait_for=N, max_batch_delay=0.001, hang_timeout=1e6) as s:
        be = ScriptedBackend.last
        fut = s.submit(x, info=True)
        r = started_round(be)
        w = code.systematic_workers[2]               # a padded position's worker answers first
        be.answer(w, r)
        y, info = fut.result(WAIT)
        assert not info.approximate and info.answered == (w,)
        np.testing.assert_array_equal(y, f_ref(x[None])[0])
        be.wait_for(lambda: be.cancelled, "the other copies cancelled")
        assert w not in be.cancelled[-1][0]


def test_fallback_percentile_settles_where_its_share_of_requests_is_decoded(rng):
    """Fed what a server feeds it — a request's exact answer time, or the time it was
    decoded at when that came first — the p90 fallback converges to the p90 of the
    exact answer times: it neither sinks (cut-short times dropped) nor runs away
    (cut-short times counted as infinite)."""
    truth = np.sort(rng.pareto(1.5, 200_000) + 1.0)          # Pareto(1, 1.5) answer times
    p90 = float(np.quantile(truth, 0.9))
    rule = AfterRule("p90", window=2000, min_samples=20)
    for t in rng.pareto(1.5, 20) + 1.0:
        rule.observe(float(t))
    decoded = 0
    for i, t in enumerate(rng.pareto(1.5, 20_000) + 1.0):
        at = rule.after()
        rule.observe(float(min(t, at)))                        # decoded at the fallback time
        decoded += t > at
    assert 0.8 * p90 < rule.after() < 1.25 * p90
    assert 0.07 < decoded / 20_000 < 0.13
