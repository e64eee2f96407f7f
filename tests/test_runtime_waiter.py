"""RoundWaiter against the waiting rule written out here by brute force: every
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
from letcc.runtime.virtual_time import RoundWaiter



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


@pytest.mark.parametrize("make", CODES)
def test_waiter_decides_as_the_rule_written_out(make, rng):
    code = make()
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
        w = RoundWaiter(code, range(N), delays, never, count, None if math.isinf(deadline) else deadline, hang_at,
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
