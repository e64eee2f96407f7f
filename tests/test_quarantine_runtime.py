"""Quarantine in the runtime: CodedInference and CodedServer leave a worker the
code keeps flagging out of later rounds (not sent, not waited for), bring it
back after its rounds, and decode what the others answered exactly as the code
decodes those answers; a clean run never quarantines anybody."""
from __future__ import annotations

import numpy as np
import pytest

import letcc
from letcc.adversaries import ConstantShift
from letcc.runtime import Quarantine
from letcc.serving import CodedServer, Hedged
from test_runtime_faults import reference

D = 40
W = np.random.default_rng(11).standard_normal((5, D))
LIAR = 3                     # the worker whose model negates its outputs (server test)


def smooth_f(x):
    """tanh(W x / sqrt(D)): a smooth f the spline locator checks well."""
    x = np.asarray(x, dtype=np.float64)
    return np.tanh(x.reshape(len(x), -1) @ W.T / np.sqrt(D))


def smooth_factory():
    return smooth_f


class Liar:
    """smooth_f, shifted by 5 on worker LIAR: a real wrong worker."""

    def __call__(self, x):
        from letcc.runtime.worker_main import worker_rank

        y = smooth_f(x)
        return y + 5.0 if worker_rank() == LIAR else y


def liar_factory():
    return Liar()


def test_coded_inference_quarantines_a_persistent_liar_and_brings_it_back(rng):
    K, N = 4, 12
    code = letcc.LeTCC(K, N, adversaries=1)
    q = Quarantine(flags=2, window=4, rounds=3, seed=5)
    log = []
    with letcc.CodedInference(smooth_factory, code, adversaries=ConstantShift(workers=[5], shift=5.0), seed=3, quarantine=q) as ci:
        assert ci.quarantine is q and q.max_workers == 1
        for _ in range(14):
            X = rng.random((2 * K, D))
            out = ci(X)
            lr = ci.last_round
            log.append((lr.flagged, lr.failed.get(5), lr.answered))
            # the nodes are assigned at random each round (the evidence over rounds): decoded at theirs
            assert sorted(lr.nodes.tolist()) == list(range(N))
            np.testing.assert_allclose(out, reference(code, smooth_f, X, lr.nodes[[j for j in lr.answered
                                                                                     if j not in lr.flagged]]),
                                       rtol=1e-10, atol=1e-12)
            if lr.failed.get(5) == "quarantined":        # not sent: the others, decoded as the code does
                assert 5 not in lr.answered and lr.adversarial == ()
                # its node is the hole the decode misses least
                assert lr.nodes[5] == code.idle_nodes(1)[0]
            else:
                assert 5 in lr.answered and lr.flagged == (5,)
    # flagged twice -> out 3 rounds -> back, a clean record: flagged twice -> out 6 rounds
    state = ["out" if failed == "quarantined" else "in" for _, failed, _ in log]
    assert state == ["in", "in"] + ["out"] * 3 + ["in", "in"] + ["out"] * 6 + ["in"]
    assert [(j, span) for _, j, span in q.history] == [(5, 3), (5, 6)]


def test_a_clean_run_quarantines_nobody_and_decodes_as_without(rng):
    K, N = 4, 12
    code = letcc.LeTCC(K, N, adversaries=2)
    X = rng.random((30, K, D))
    with letcc.CodedInference(smooth_factory, code, quarantine=True) as ci:
        got, flagged = [], []
        for x in X:
            got.append(ci(x))
            flagged.append(ci.last_round.flagged)
        assert flagged == [()] * len(X) and ci.quarantine.history == [] and ci.quarantine.left() == {}
    for x, y in zip(X, got):
        np.testing.assert_allclose(y, reference(code, smooth_f, x, range(N)), rtol=1e-10, atol=1e-12)


def submit_round(server, X):
    """All K requests first, then their results: one round of exactly these K inputs."""
    futures = [server.submit(x, info=True) for x in X]
    return [f.result(120) for f in futures]


def test_coded_server_quarantines_a_real_wrong_worker(rng):
    K, N = 4, 12
    code = letcc.LeTCC(K, N, adversaries=1)
    with CodedServer(liar_factory, code, max_batch_delay=30.0, wait_for=N,   # rounds of K exactly
                     quarantine=Quarantine(flags=2, window=4, rounds=10_000, top_alpha=None)) as s:
        first = submit_round(s, rng.random((K, D)))
        while s.stats()["quarantines"] == 0 and s.stats()["rounds"] < 20:
            submit_round(s, rng.random((K, D)))
        stats = s.stats()
        assert stats["quarantines"] == 1 and list(stats["quarantined"]) == [LIAR]
        X = rng.random((K, D))
        after = submit_round(s, X)
    assert LIAR in first[0][1].answered
    info = after[0][1]
    answered = info.answered
    assert LIAR not in answered and len(answered) == N - 1
    # the liar's hole is where the decode misses it least; the others keep their order (no top rule)
    idle = code.idle_nodes(1)[0]
    assert idle not in info.nodes and len(info.nodes) == N - 1
    assert list(info.nodes) == [j for j in range(N) if j != idle]
    want = reference(code, smooth_f, X, info.nodes)
    np.testing.assert_allclose(np.stack([y for y, _ in after]), want, rtol=1e-10, atol=1e-12)


def test_quarantine_needs_a_code_that_flags():
    with pytest.raises(ValueError, match=r"quarantine needs a code that flags wrong answers"):
        letcc.CodedInference(smooth_factory, letcc.LeTCC(4, 8), quarantine=True)
    with pytest.raises(ValueError, match=r"quarantine=True needs coded rounds of a code with adversaries >= 1; "
                                         r"Hedged"):
        CodedServer(smooth_factory, Hedged(4), quarantine=True)
    with pytest.raises(TypeError, match=r"quarantine must be None, True or a letcc.runtime.Quarantine, got 'yes'"):
        CodedServer(smooth_factory, letcc.LeTCC(4, 8, adversaries=1), quarantine="yes")


def test_evidence_over_rounds_finds_a_liar_through_the_random_node_assignment(rng):
    # flags=20 of 20: the flag rule cannot act in these rounds; the top-scored test does
    K, N = 4, 12
    code = letcc.LeTCC(K, N, adversaries=1)
    q = Quarantine(flags=20, window=20, rounds=50, top_alpha=1e-3, top_window=30, seed=1)
    tops, nodes = [], set()
    with letcc.CodedInference(smooth_factory, code, adversaries=ConstantShift(workers=[5], shift=5.0), seed=3,
                              quarantine=q) as ci:
        for _ in range(8):
            ci(rng.random((K, D)))
            lr = ci.last_round
            tops.append(lr.top)
            nodes.add(tuple(lr.nodes.tolist()))
    # the liar's answer is top-scored (and flagged) wherever its node falls, until the
    # binomial tail of 3 tops in 3 rounds at 1/12 (5.8e-4) is below 1e-3; then it sits out
    assert tops[:3] == [5, 5, 5] and q.history == [(3, 5, 50)]
    assert all(t != 5 for t in tops[3:]) and len(nodes) == 8


def test_coded_server_finds_a_liar_by_evidence_over_rounds(rng):
    K, N = 4, 12
    code = letcc.LeTCC(K, N, adversaries=1)
    q = Quarantine(flags=20, window=20, rounds=10_000, top_alpha=1e-3, top_window=30)
    with CodedServer(liar_factory, code, max_batch_delay=30.0, wait_for=N, quarantine=q) as s:
        while s.stats()["quarantines"] == 0 and s.stats()["rounds"] < 20:
            submit_round(s, rng.random((K, D)))
        stats = s.stats()
        assert stats["quarantines"] == 1 and list(stats["quarantined"]) == [LIAR] and stats["rounds"] == 3
        X = rng.random((K, D))
        after = submit_round(s, X)
    assert all(LIAR not in info.answered and len(info.answered) == N - 1 for _, info in after)
    # decoded from 11 honest answers at nodes drawn for the round: close to f, nowhere near +5
    np.testing.assert_allclose(np.stack([y for y, _ in after]), smooth_f(X), atol=0.05)
