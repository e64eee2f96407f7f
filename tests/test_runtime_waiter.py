"""RoundWaiter and the compiled CountedRoundWaiter (round_waiter's pick for a
code with a waiting rule) against the waiting rule written out here by brute force: every
prefix of the confirmed answers in virtual order, count rule before complete,
then deadline, then nothing pending. Random delays, arrival orders, failures,
hang limits and deadlines, over each kind of code (LeTCC and BACC complete only
with all N, or systematic with the K systematic workers; Replication and Uncoded
when every input is covered), each with its waiting rule and asked."""
from __future__ import annotations

import math

import numpy as np
import pytest

import letcc
from letcc.runtime.virtual_time import CountedRoundWaiter, RoundWaiter, round_waiter



class Asked:
    """A code without a waiting rule: the waiter asks can_decode / is_complete."""

    waiting_rule = None

    def __init__(self, code):
        self._code = code

    def __getattr__(self, name):
        return getattr(self._code, name)


# with waiting rules (counted), and the same codes asked (memoised calls)
CODES = [lambda: letcc.LeTCC(4, 8), lambda: letcc.BACC(3, 6), lambda: letcc.Replication(3, 2),
         lambda: letcc.Uncoded(5), lambda: letcc.LeTCC(3, 7, systematic=True),
         lambda: letcc.BACC(2, 9, adversaries=1), lambda: Asked(letcc.LeTCC(4, 8)),
         lambda: Asked(letcc.Replication(3, 2)), lambda: Asked(letcc.LeTCC(3, 7, systematic=True))]


def reference_decide(code, arrived, pending, delays, elapsed, count, deadline):
    horizon = elapsed + min((delays[j] for j in pending), default=math.inf)
    limit = min(horizon, deadline)
    order = sorted((v, j) for j, v in arrived.items() if v <= limit)
    js = [j for _, j in order]
    for p in range(1, len(js) + 1):
        if count is not None and p >= count and code.can_decode(js[:p]):
            return tuple(js[:p]), "count"
        if code.is_complete(js[:p]):
            return tuple(js[:p]), "complete"
    if horizon > deadline:
        return tuple(js), "deadline"
    if not pending:
        return tuple(js), "all"
    return None


def reference_next_change(arrived, pending, delays, hang_at, elapsed, deadline):
    dmin = min((delays[j] for j in pending), default=math.inf)
    times = [hang_at[j] for j in pending if j in hang_at]
    if math.isfinite(dmin):
        unconfirmed = [v for v in arrived.values() if elapsed + dmin < v <= deadline]
        if unconfirmed:
            times.append(min(unconfirmed) - dmin)
        if math.isfinite(deadline):
            times.append(deadline - dmin)
    later = [t for t in times if t > elapsed]
    return min(later) if later else (elapsed if times else math.inf)


@pytest.mark.parametrize("Waiter", [RoundWaiter, round_waiter])
@pytest.mark.parametrize("make", CODES)
def test_waiter_decides_as_the_rule_written_out(make, Waiter, rng):
    code = make()
    if Waiter is round_waiter:          # the compiled waiter wherever the code states its rule
        kind = RoundWaiter if code.waiting_rule is None else CountedRoundWaiter
        assert type(Waiter(code, range(code.N), np.zeros(code.N), np.zeros(code.N, bool))) is kind
    N = code.N
    for trial in range(60):
        delays = np.where(rng.random(N) < 0.5, 0.0, rng.exponential(0.01, N)) * (trial % 3 > 0)  # 1 in 3: none
        never = rng.random(N) < 0.15
        count = None if rng.random() < 0.25 else int(rng.integers(1, N + 1))
        deadline = math.inf if rng.random() < 0.5 else float(rng.uniform(0.005, 0.05))
        hang_at = {j: float(rng.uniform(0.0, 0.08)) for j in range(N) if rng.random() < 0.7}
        if trial % 4 == 1:              # one hang limit for all (the runtime's usual case): ties everywhere
            h = float(rng.uniform(0.0, 0.08))
            hang_at = {j: h for j in hang_at}
        cand = sorted(j for j in range(N) if not never[j])
        known = None if trial % 2 else (bool(cand) and code.is_complete(cand))   # as CodedServer passes it
        w = Waiter(code, range(N), delays, never, count, None if math.isinf(deadline) else deadline, hang_at,
                   may_complete=known)
        pending = {j for j in range(N) if not never[j]}
        arrived = {}
        elapsed = 0.0
        for j in rng.permutation(N).tolist():
            elapsed += float(rng.exponential(0.004))
            if rng.random() < 0.2:
                w.fail(j, "died")
                pending.discard(j)
            else:
                counts = w.result(j, elapsed)
                assert counts == (j in pending)
                if j in pending:
                    pending.discard(j)
                    arrived[j] = elapsed + float(delays[j])
            for e in (elapsed, elapsed + float(rng.uniform(0, 0.02))):
                d = w.decide(e)
                want = reference_decide(code, arrived, pending, delays, e, count, deadline)
                if want is None:
                    assert d is None, (trial, e, d)
                else:
                    assert d is not None and (d.answered, d.rule) == want, (trial, e, d, want)
                assert w.next_change(e) == reference_next_change(arrived, pending, delays, hang_at, e, deadline)
                assert w.hung(e) == sorted(j for j in pending if hang_at.get(j, math.inf) <= e)


@pytest.mark.parametrize("make", [c for c in CODES if c().waiting_rule is not None])
def test_compiled_waiter_is_the_python_waiter_step_for_step(make, rng):
    """CountedRoundWaiter against RoundWaiter on the same random rounds: every
    method's answer after every event (answers one by one and in batches,
    failures of pending, arrived and unknown workers, answers that do not
    count), and the state a report reads (arrived in its order, failed,
    pending)."""
    code = make()
    N = code.N
    for trial in range(80):
        delays = np.where(rng.random(N) < 0.5, 0.0, rng.exponential(0.01, N)) * (trial % 3 > 0)
        never = rng.random(N) < 0.15
        count = None if rng.random() < 0.25 else int(rng.integers(1, N + 1))
        deadline = None if rng.random() < 0.5 else float(rng.uniform(0.005, 0.05))
        hang_at = {j: float(rng.uniform(0.0, 0.08)) for j in range(N) if rng.random() < 0.7}
        sent = sorted(rng.choice(N, int(rng.integers(1, N + 1)), replace=False).tolist())
        known = None if trial % 2 else bool(code.is_complete(sent))
        a = RoundWaiter(code, sent, delays, never, count, deadline, hang_at, may_complete=known)
        b = CountedRoundWaiter(code, sent, delays, never, count, deadline, hang_at, may_complete=known)
        elapsed, t0 = 0.0, 100.0

        def same(e):
            assert a.decide(e) == b.decide(e)
            assert a.next_change(e) == b.next_change(e)
            assert a.hung(e) == b.hung(e)
            assert a.answers_needed() == b.answers_needed()
            assert a.horizon(e) == b.horizon(e)
            assert list(a.arrived.items()) == list(b.arrived.items())
            assert a.failed == b.failed and a.pending == b.pending and a.real == b.real
            some = rng.permutation(N)[:int(rng.integers(0, N + 1))].tolist()
            assert a.decodable(some) == b.decodable(some)

        same(0.0)
        for j in rng.permutation(N).tolist() + rng.integers(0, N, 3).tolist():   # some twice
            elapsed += float(rng.exponential(0.004))
            u = rng.random()
            if u < 0.15:
                a.fail(j, "died")
                b.fail(j, "died")
            elif u < 0.3:                    # a batch of answers, as a backend's "answers" event
                js = [j] + rng.integers(0, N, 2).tolist()
                js = list(dict.fromkeys(js))
                ts = [t0 + elapsed + 1e-4 * k for k in range(len(js))]
                a.results(js, ts, t0)
                b.results(js, ts, t0)
            else:
                assert a.result(j, elapsed) == b.result(j, elapsed)
            for e in (elapsed, elapsed + float(rng.uniform(0, 0.02))):
                same(e)


def test_compiled_waiter_errors():
    code = letcc.LeTCC(2, 4)
    w = CountedRoundWaiter(code, range(4), np.zeros(4), np.zeros(4, bool))
    with pytest.raises(IndexError, match="worker 4 is not one of the round's 4 workers"):
        w.result(4, 0.1)
    with pytest.raises(IndexError, match="worker -1 is not one of the round's 4 workers"):
        w.fail(-1, "died")
    with pytest.raises(ValueError, match="never has 3 entries for 4 workers"):
        CountedRoundWaiter(code, range(4), np.zeros(4), np.zeros(3, bool))
    with pytest.raises(ValueError, match="delays must be 1-D with one entry per worker"):
        CountedRoundWaiter(code, range(4), np.zeros((2, 2)), np.zeros(4, bool))
    with pytest.raises(IndexError, match="worker 7 is not one of the round's 4 workers"):
        CountedRoundWaiter(code, [0, 7], np.zeros(4), np.zeros(4, bool))
    with pytest.raises(ValueError, match="2 workers but 1 times"):
        w.results([0, 1], [1.0], 0.0)
    from letcc import _core
    with pytest.raises(ValueError, match="group 3 is not -1 or one of the 2 groups"):
        _core.CoverageRule([0, 3], [1, 1])
    with pytest.raises(ValueError, match="every group needs >= 1 answer, got 0"):
        _core.CoverageRule([0, 1], [1, 0])
    with pytest.raises(ValueError, match="a coverage rule needs at least one group"):
        _core.CoverageRule([0], [])
    # the core's rule against the Python Coverage it was made from
    from letcc.codes.waiting_rule import Coverage
    rng = np.random.default_rng(5)
    for cov in (Coverage.count(6, 4), Coverage.each([1, 3, 4], 6), Coverage((0, 1, 1, -1, 0, 2), (2, 1, 1))):
        core = _core.CoverageRule(cov.group, cov.need)
        for _ in range(200):
            js = rng.permutation(6)[:int(rng.integers(0, 7))].tolist()
            assert core.first_prefix(js) == cov.first_prefix(js)
