"""Quarantine on its own (letcc.runtime.quarantine): who sits out, for how long,
how many at most; and the argument checks. The runtime's use of it is tested in
tests/test_quarantine_runtime.py."""
from __future__ import annotations

import math

import numpy as np
import pytest

import letcc
from letcc.runtime.quarantine import MAX_DOUBLINGS, Quarantine, as_quarantine, binomial_tail


def reference(flags_per_round, answered_per_round, flags, window, rounds, cap):
    """The rule written out plainly: per round, first release whoever served
    their time, then append each answering (not quarantined) worker's flag to
    its record (kept only once it was flagged), then quarantine those with
    >= flags in their last window, most flagged first, up to cap."""
    until, record, times, out = {}, {}, {}, []
    for launched, (answered, bad) in enumerate(zip(answered_per_round, flags_per_round)):
        for j in [j for j, t in until.items() if t <= launched]:
            del until[j]
            record.pop(j, None)
        out.append(sorted(until))                 # excluded at this launch
        cand = []
        for j in sorted(answered):
            if j in until:
                continue
            if j not in record and j not in bad:
                continue
            record.setdefault(j, []).append(j in bad)
            record[j] = record[j][-window:]
            if j in bad and sum(record[j]) >= flags:
                cand.append(j)
        for j in sorted(cand, key=lambda j: (-sum(record[j]), j)):
            if len(until) >= cap:
                break
            n = times.get(j, 0)
            until[j] = launched + 1 + rounds * 2 ** min(n, MAX_DOUBLINGS)
            times[j] = n + 1
    return out


@pytest.mark.parametrize("trial", range(6))
def test_matches_the_rule_written_out_on_random_flag_streams(trial):
    rng = np.random.default_rng()
    N, R = 12, 400
    flags, window, rounds, cap = int(rng.integers(1, 4)), int(rng.integers(3, 12)), int(rng.integers(1, 15)), \
        int(rng.integers(0, 4))
    flags = min(flags, window)
    liars = set(rng.choice(N, size=2, replace=False).tolist())
    q = Quarantine(flags=flags, window=window, rounds=rounds, max_workers=cap)
    got, answered_log, bad_log = [], [], []
    for _ in range(R):
        out = q.excluded()
        got.append(sorted(out))
        q.launch()
        sent = [j for j in range(N) if j not in out]
        answered = sorted(rng.choice(sent, size=max(1, len(sent) - 2), replace=False).tolist())
        # liars flagged most of the time, honest workers now and then
        bad = [j for j in answered if rng.random() < (0.8 if j in liars else 0.03)]
        answered_log.append(answered)
        bad_log.append(set(bad))
        q.observe(answered, bad)
    want = reference(bad_log, answered_log, flags, window, rounds, cap)
    assert got == want


def test_a_persistent_liar_sits_out_then_comes_back_with_a_clean_record_and_longer_next_time():
    q = Quarantine(flags=3, window=5, rounds=10, max_workers=2)
    for r in range(3):
        assert q.excluded() == frozenset()
        q.launch()
        assert q.observe(range(8), [4] if r != 1 else []) == []
    q.launch()
    assert q.observe(range(8), [4]) == [4]          # 3 of its last 4
    assert q.excluded() == {4} and q.left() == {4: 10}
    for _ in range(9):
        q.launch()
        q.observe([j for j in range(8) if j != 4], [])
    assert q.left() == {4: 1}
    q.launch()
    assert q.excluded() == frozenset() and q.left() == {}
    for _ in range(2):                               # back with a clean record: two flags are not three
        q.launch()
        assert q.observe(range(8), [4]) == []
    q.launch()
    assert q.observe(range(8), [4]) == [4]
    assert q.left() == {4: 20} and q.times == {4: 2}
    assert [(j, span) for _, j, span in q.history] == [(4, 10), (4, 20)]


def test_flags_outside_the_window_are_forgotten():
    q = Quarantine(flags=2, window=3, rounds=5, max_workers=1)
    q.observe([0, 1], [1])
    q.observe([0, 1], [])
    q.observe([0, 1], [])
    assert q.observe([0, 1], [1]) == []             # the first flag left the window
    assert q.observe([0, 1], [1]) == [1]


def test_at_most_max_workers_out_the_most_flagged_first():
    q = Quarantine(flags=1, window=4, rounds=50, max_workers=1)
    q.observe(range(6), [2])
    q.launch()
    assert q.excluded() == {2}
    assert q.observe([0, 1, 3, 4, 5], [3, 5]) == []  # the cap: nobody more
    q = Quarantine(flags=2, window=4, rounds=50, max_workers=1)
    q.observe(range(6), [1, 3])
    q.observe(range(6), [3])
    q.observe(range(6), [3])
    assert q.left() == {3: 50}
    zero = Quarantine(max_workers=0)
    for _ in range(5):
        zero.observe(range(4), [0])
    assert zero.excluded() == frozenset()


def test_a_quarantined_worker_that_still_answers_gains_no_record():
    q = Quarantine(flags=1, window=2, rounds=3, max_workers=1)
    assert q.observe([0, 1], [1]) == [1]
    assert q.observe([0, 1], [1]) == []             # already out: not counted again
    assert q.times == {1: 1}


def test_as_quarantine_defaults_binding_and_refusals():
    code = letcc.LeTCC(4, 12, adversaries=2)
    assert as_quarantine(None, code) is None and as_quarantine(False, code) is None
    q = as_quarantine(True, code)
    assert isinstance(q, Quarantine) and q.max_workers == 2 and (q.flags, q.window, q.rounds) == (3, 20, 100)
    mine = Quarantine(max_workers=1)
    assert as_quarantine(mine, code) is mine and mine.max_workers == 1
    with pytest.raises(ValueError, match=r"quarantine needs a code that flags wrong answers \(adversaries >= 1\)"):
        as_quarantine(True, letcc.LeTCC(4, 12))
    with pytest.raises(TypeError, match=r"quarantine must be None, True or a letcc.runtime.Quarantine, got 3"):
        as_quarantine(3, code)
    with pytest.raises(ValueError, match=r"flags = 5 must be <= window = 4"):
        Quarantine(flags=5, window=4)
    with pytest.raises(ValueError, match="rounds"):
        Quarantine(rounds=0)
    with pytest.raises(ValueError, match="max_workers"):
        Quarantine(max_workers=-1)
    with pytest.raises(TypeError, match="flags"):
        Quarantine(flags=2.5)
    with pytest.raises(ValueError, match=r"top_alpha must be > 0, got 0"):
        Quarantine(top_alpha=0)
    with pytest.raises(ValueError, match=r"top_alpha must be <= 1, got 2"):
        Quarantine(top_alpha=2)
    with pytest.raises(ValueError, match=r"top_window must be >= 2, got 1"):
        Quarantine(top_window=1)
    assert ("Quarantine(flags=3, window=20, rounds=100, max_workers=None, top_alpha=1e-06, top_window=100)"
            == repr(Quarantine()))
    assert Quarantine().assigns_nodes and not Quarantine(top_alpha=None).assigns_nodes


def _binomial_tail_exact(t: int, a: int, p: float) -> float:
    """P(X >= t), X ~ Binomial(a, p), in exact rational arithmetic (p as the float it is)."""
    from fractions import Fraction
    P = Fraction(p)
    return float(sum(math.comb(a, k) * P ** k * (1 - P) ** (a - k) for k in range(max(t, 0), a + 1)))


def test_binomial_tail_against_exact_sums_and_scipy():
    # exact sums as the reference: scipy's binom.sf is off by ~3e-4 relative far out
    # in the tail (a = 118, t = 86, p = 2.1e-4: 3.6161e-288 against the exact
    # 3.6173e-288, which binomial_tail matches to 2e-13); scipy where it is exact enough
    from scipy.stats import binom
    rng = np.random.default_rng()
    for _ in range(200):
        a = int(rng.integers(1, 120))
        t = int(rng.integers(-1, a + 3))
        p = float(rng.choice([rng.random(), rng.random() * 0.05, 0.0, 1.0]))
        got = binomial_tail(t, a, p)
        assert got == pytest.approx(_binomial_tail_exact(t, a, p), rel=1e-9, abs=1e-300), (t, a, p)
        want = 1.0 if t <= 0 else float(binom.sf(t - 1, a, p))
        if want > 1e-200:
            assert got == pytest.approx(want, rel=1e-9), (t, a, p)
    assert binomial_tail(86, 118, 0.00020991128562407036) == pytest.approx(3.617315287769943e-288, rel=1e-12)


def top_reference(stream, alpha, W, rounds):
    """The evidence rule written out: each round appends (top?, 1/n) to every
    answering worker's record (its last W answered rounds, while not out); the
    round's top-scored worker is quarantined when P(Bin(a, mean 1/n) >= its
    tops) <= alpha, by scipy, for `rounds` launches doubled per earlier
    quarantine (cap N); a worker back from one is tested every round it
    answers until its record no longer condemns it."""
    from scipy.stats import binom
    record, until, times, probation, got = {}, {}, {}, set(), []

    def condemned(j):
        r = record[j]
        t, p = sum(h for h, _ in r), np.mean([q for _, q in r])
        return binom.sf(t - 1, len(r), p) <= alpha

    for r, (answered, top) in enumerate(stream):
        for j in [j for j, t in until.items() if t <= r]:       # released at launch r
            del until[j]
            probation.add(j)
        answered = [j for j in sorted(answered) if j not in until]
        for j in answered:
            record.setdefault(j, []).append((j == top, 1 / len(answered)))
            record[j] = record[j][-W:]
        new = [top] if top in answered and condemned(top) else []
        for j in sorted(probation.intersection(answered)):
            if j not in new:
                if condemned(j):
                    new.append(j)
                else:
                    probation.discard(j)
        for j in sorted(new):
            until[j] = r + 1 + (rounds << min(times.get(j, 0), 4))
            times[j] = times.get(j, 0) + 1
            probation.discard(j)
        got.append(sorted(new))
    return got


@pytest.mark.parametrize("trial", range(4))
def test_the_top_scored_rule_matches_it_written_out(trial):
    rng = np.random.default_rng()
    N, R, W, alpha = 10, 400, int(rng.integers(5, 40)), float(10 ** -rng.uniform(2, 6))
    rounds = int(rng.integers(3, 30))
    liars = set(rng.choice(N, size=2, replace=False).tolist())
    q = Quarantine(rounds=rounds, max_workers=N, top_alpha=alpha, top_window=W)
    stream, got = [], []
    for _ in range(R):
        answered = sorted(rng.choice(N, size=int(rng.integers(6, N + 1)), replace=False).tolist())
        sent = [j for j in answered if j not in q.excluded()]
        q.launch()
        cand = [j for j in sent if j in liars]
        top = int(rng.choice(cand)) if cand and rng.random() < 0.5 else int(rng.choice(sent))
        stream.append((answered, top))
        got.append(q.observe(sent, [], top))
    assert got == top_reference(stream, alpha, W, rounds)
    assert {j for _, j, _ in q.history} <= set(range(N))


def test_a_liar_back_from_quarantine_is_sent_back_after_one_round_and_a_cleared_worker_is_not():
    N, liar, other = 10, 3, 7
    q = Quarantine(flags=1, window=1, rounds=5, max_workers=1, top_alpha=1e-2, top_window=50)

    def round_(flagged, top):
        """One round as the engine runs it: who is out, then launch, then the decode's report."""
        out = q.excluded()
        q.launch()
        return out, q.observe([j for j in range(N) if j not in out], flagged, top)

    # worker 7, flagged once, takes the one place; the liar is top-scored meanwhile (cap full)
    assert round_([other], liar) == (frozenset(), [other])
    for _ in range(5):
        assert round_([], liar) == ({other}, [])
    assert round_([], liar) == (frozenset(), [liar])   # 7 back; the liar 7 of 7 rounds top-scored
    for top in (0, 1, 2, 4, 5):                      # honest tops, spread as chance spreads them
        assert round_([], top) == ({liar}, [])
    # back, not top-scored this round: 7 of 8 rounds still condemn it -> out again at once
    assert round_([], 6) == (frozenset(), [liar])
    assert [(j, span) for _, j, span in q.history] == [(other, 5), (liar, 5), (liar, 10)]
    # worker 7 came back with an innocent top record: cleared by its first round, never re-tested
    assert other not in q._probation and liar not in q._probation
    for top in (8, 9, 0):
        assert round_([], top) == ({liar}, [])


def test_honest_tops_at_chance_quarantine_nobody_and_a_liar_top_a_third_of_the_time_is_found():
    rng = np.random.default_rng()
    N, S = 24, 2
    honest = Quarantine(top_alpha=1e-9)
    for _ in range(3000):                    # at most 1e-9 * 24 * 3000 = 7e-5 chance of a false one
        answered = np.sort(rng.choice(N, N - S, replace=False))
        honest.launch()
        assert honest.observe(answered, [], int(rng.choice(answered))) == []
    assert honest.history == []
    liar, found = 7, None
    q = Quarantine(max_workers=1)            # top_alpha=1e-6, top_window=100: the defaults
    for r in range(200):
        answered = np.sort(rng.choice(N, N - S, replace=False))
        q.launch()
        top = liar if liar in answered and rng.random() < 1 / 3 else int(rng.choice(answered))
        if q.observe(answered, [], top):
            found = r
            break
    assert found is not None and found < 150, found
    assert q.excluded() == {liar} and q.top_counts()[liar][0] >= 5


def test_an_unbound_quarantine_has_no_cap():
    q = Quarantine(flags=1, window=2, rounds=50)     # max_workers None: not bound to a code
    assert q.observe(range(6), [2]) == [2]
    assert q.observe([0, 1, 3, 4, 5], [4]) == [4]
    assert q.left() == {2: 50, 4: 50}


def test_assign_nodes_gives_the_left_out_the_idle_nodes_and_the_rest_a_uniform_order():
    N, out, idle = 8, [2, 6], np.array([7, 0])
    q = Quarantine()                                     # top_alpha set: nodes drawn each round
    assert q.assigns_nodes
    rest = [1, 2, 3, 4, 5, 6]
    sent = [0, 1, 3, 4, 5, 7]
    counts = np.zeros((N, N), dtype=np.int64)            # counts[worker, node]
    draws = 6000
    for _ in range(draws):
        nodes = q.assign_nodes(N, out, idle)
        assert nodes.dtype == np.int64 and sorted(nodes.tolist()) == list(range(N))
        assert nodes[2] == 7 and nodes[6] == 0
        counts[np.arange(N), nodes] += 1
    # each sent worker is equally likely at each of the other nodes (the top rule's 1/n null):
    # Binomial(6000, 1/6) has sd 29; 6 sd either way
    sub = counts[np.ix_(sent, rest)]
    assert np.all(np.abs(sub - draws / 6) < 6 * np.sqrt(draws * (1 / 6) * (5 / 6))), sub
    assert counts[np.ix_(sent, [0, 7])].sum() == 0
    # with nobody left out every node is drawn for every worker
    assert sorted(q.assign_nodes(N).tolist()) == list(range(N))


def test_assign_nodes_without_random_order_keeps_the_rest_ascending():
    q = Quarantine(top_alpha=None)
    assert not q.assigns_nodes
    np.testing.assert_array_equal(q.assign_nodes(6), np.arange(6))
    np.testing.assert_array_equal(q.assign_nodes(6, [1], None), np.arange(6))     # no order: where they are
    np.testing.assert_array_equal(q.assign_nodes(6, [1, 4], [5, 0]), [1, 5, 2, 3, 0, 4])


def test_assign_nodes_refuses_idle_nodes_that_do_not_match_the_left_out():
    q = Quarantine()
    with pytest.raises(ValueError, match=r"one node per worker left out \(2\), got \[3\]"):
        q.assign_nodes(6, [1, 4], [3])
