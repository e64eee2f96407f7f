"""The server's inbox and request queue on their own: no processes, no threads
but the test's. The inbox is the only state caller threads and the dispatcher
share; its wake rule decides which submit wakes the dispatcher."""
from __future__ import annotations

import math
import threading
from concurrent.futures import CancelledError, Future

import numpy as np
import pytest

from letcc.serving.flights import Request
from letcc.serving.inbox import Inbox, QueueFull
from letcc.serving.requests import MAX_RETRIES, RequestQueue
from letcc.serving.stats import SUSPECT_MIN_ROUNDS, ServerStats


class Bell:
    def __init__(self):
        self.rings = 0

    def __call__(self):
        self.rings += 1


class Timer:
    """The backend's wake_at: every setting, in order."""

    def __init__(self):
        self.settings: list = []

    def __call__(self, t):
        self.settings.append(t)


def req(t=0.0, deadline=math.inf):
    return Request(np.zeros(2), Future(), t, deadline)


def test_put_wakes_only_when_the_rule_says_so():
    bell, timer = Bell(), Timer()
    box = Inbox(100, bell, timer)
    box.put(req())                        # the initial rule: the first request wakes
    assert bell.rings == 1
    box.put(req())                        # spent: the dispatcher takes the whole inbox
    assert bell.rings == 1
    items, cancel = box.take()
    assert len(items) == 2 and not cancel and box.waiting == 2
    # wake at 3 in the inbox, or a deadline / batch delay before t = 10
    assert box.wake_when(3, 0.5, 10.0)
    box.put(req(t=20.0))                  # 1 in, its batch delay ends at 20.5 > 10
    box.put(req(t=20.0, deadline=30.0))
    assert bell.rings == 1 and timer.settings == []
    box.put(req(t=20.0))                  # the third
    assert bell.rings == 2 and timer.settings == []
    box.take()
    assert box.wake_when(math.inf, math.inf, 10.0)


def test_a_request_due_before_the_planned_wake_up_sets_a_timed_one():
    """Nothing to do before its deadline or batch delay ends: a timed wake-up
    then, not a wake-up now; it only moves earlier, and the dispatcher's
    take() cancels it (the requests are the dispatcher's from then on)."""
    bell, timer = Bell(), Timer()
    box = Inbox(100, bell, timer)
    assert box.wake_when(math.inf, math.inf, 10.0)
    box.put(req(t=0.0, deadline=9.0))     # its deadline comes before the planned wake-up
    assert bell.rings == 0 and timer.settings == [9.0]
    box.put(req(t=0.0, deadline=9.5))     # after the timed wake-up: nothing
    box.put(req(t=0.0, deadline=8.0))     # before it: moved
    assert bell.rings == 0 and timer.settings == [9.0, 8.0]
    items, _ = box.take()
    assert len(items) == 3 and timer.settings == [9.0, 8.0, math.inf]
    box.take()                            # none set: no call
    assert len(timer.settings) == 3
    assert box.wake_when(math.inf, 1.0, 10.0)
    box.put(req(t=8.5))                   # its batch delay ends at 9.5 < 10
    assert bell.rings == 0 and timer.settings[-1] == 9.5
    box.put(req(t=8.0))                   # 9.0: earlier still
    assert timer.settings[-1] == 9.0
    assert not box.wake_when(math.inf, 1.0, 10.0)    # taken first: the rule is spent
    box.take()
    assert timer.settings[-1] == math.inf
    assert box.wake_when(2, 1.0, 10.0)
    box.put(req(t=1.0))                   # timed: 2.0
    box.put(req(t=1.5))                   # the count: wakes now
    assert bell.rings == 1 and timer.settings[-1] == 2.0


def test_timed_wake_ups_from_many_threads_end_at_the_earliest():
    """Set under the inbox's lock: the last setting is the earliest due time,
    whatever order the callers ran in."""
    rng = np.random.default_rng()
    timer = Timer()
    box = Inbox(10_000, Bell(), timer)
    assert box.wake_when(math.inf, 0.25, 100.0)
    times = rng.uniform(0.0, 50.0, size=(8, 200))

    def caller(row):
        for t in row:
            box.put(req(t=float(t)))

    threads = [threading.Thread(target=caller, args=(row,)) for row in times]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert timer.settings[-1] == times.min() + 0.25
    assert timer.settings == sorted(timer.settings, reverse=True)   # only ever earlier


def test_a_request_put_while_the_dispatcher_was_busy_keeps_it_awake():
    """Put after take() but before wake_when() woke nobody (the rule was spent):
    wake_when says not to sleep."""
    bell = Bell()
    box = Inbox(10, bell, Timer())
    box.put(req())
    box.take()
    box.put(req())                        # no ring: spent
    assert bell.rings == 1
    assert not box.wake_when(5, 1.0, math.inf)
    items, _ = box.take()
    assert len(items) == 1
    assert box.wake_when(5, 1.0, math.inf)


def test_backpressure_counts_and_queue_full():
    box = Inbox(2, Bell(), Timer())
    box.put(req())
    box.put(req())
    with pytest.raises(QueueFull, match=r"2 requests are waiting \(max_queue = 2\)"):
        box.put(req())
    assert (box.accepted, box.rejected, box.waiting) == (2, 1, 2)
    box.take()
    assert box.waiting == 2               # taken is not dispatched
    box.dispatched(1)
    box.put(req())
    assert (box.accepted, box.waiting) == (3, 2)
    box.requeued(2)
    assert box.waiting == 4
    assert len(box.drain()) == 1 and box.waiting == 0


def test_closed_and_broken_inbox_refuse_with_a_clear_error():
    bell = Bell()
    box = Inbox(5, bell, Timer())
    box.fail(ValueError("boom"))
    with pytest.raises(RuntimeError, match=r"dispatcher failed: ValueError\('boom'\)"):
        box.put(req())
    box = Inbox(5, bell, Timer())
    assert box.close(cancel=False) is True and bell.rings == 1
    assert box.close(cancel=True) is False and box.cancel_queued
    with pytest.raises(RuntimeError, match="this CodedServer is closed"):
        box.put(req())
    box.abort()
    assert box.aborted and box.closing


def test_the_first_layout_is_fixed_once_across_threads():
    box = Inbox(5, Bell(), Timer())
    seen = []
    threads = [threading.Thread(target=lambda i=i: seen.append(box.fix_layout((i,), np.float32))) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(seen)) == 1 and seen[0][1] == np.dtype(np.float32)


def test_request_queue_pops_oldest_expires_requeues_and_resolves():
    box, stats = Inbox(100, Bell(), Timer()), ServerStats()
    q = RequestQueue(box, stats)
    reqs = [req(t=float(i), deadline=100.0 + i) for i in range(5)]
    for r in reqs:
        box.put(r)
    q.add(box.take()[0])
    reqs[1].future.cancel()               # cancelled by its caller before dispatch
    assert q.live() == 5 and q.oldest_submit() == 0.0 and q.next_deadline() == 100.0
    got = q.pop(3)
    assert got == [reqs[0], reqs[2], reqs[3]] and box.waiting == 1
    assert stats.counts["cancelled"] == 1 and all(r.state == "flight" for r in got)
    q.expire(104.5)                       # reqs[4] (deadline 104) times out in the queue
    with pytest.raises(TimeoutError, match=r"deadline of 100 s before it was dispatched"):
        reqs[4].future.result(0)
    assert stats.counts["timeouts"] == 1 and box.waiting == 0
    q.requeue(got[:2], "round 1: no worker answered")
    assert q.live() == 2 and box.waiting == 2 and stats.counts["retried"] == 2
    again = q.pop(2)
    assert again == got[:2]
    got[0].retries = MAX_RETRIES
    q.requeue([got[0]], "round 2: no worker answered")
    with pytest.raises(RuntimeError, match=r"round 2: no worker answered; gave up after 2 retries"):
        got[0].future.result(0)
    got[2].want_info = True
    assert q.resolve_rows([None, got[1], got[2]], [None, np.ones(2), 2 * np.ones(2)], approximate=True,
                          answered=[4, 1], round_id=7) == 2
    np.testing.assert_array_equal(got[1].future.result(0), np.ones(2))
    y, info = got[2].future.result(0)
    np.testing.assert_array_equal(y, 2 * np.ones(2))
    assert info.approximate and info.answered == (4, 1) and info.round_id == 7 and info.latency >= 0
    assert stats.counts["completed"] == 2 and stats.counts["approximate"] == 2 and len(stats.latencies) == 2
    q.fail(got[1], RuntimeError("late"))                 # ends once: a second end is ignored
    np.testing.assert_array_equal(got[1].future.result(0), np.ones(2))
    assert stats.counts["errors"] == 1                   # got[0]'s give-up


def test_cancel_all_cancels_every_queued_request():
    box, stats = Inbox(100, Bell(), Timer()), ServerStats()
    q = RequestQueue(box, stats)
    reqs = [req() for _ in range(3)]
    for r in reqs:
        box.put(r)
    q.add(box.take()[0])
    q.cancel_all()
    assert box.waiting == 0 and stats.counts["cancelled"] == 3 and q.live() == 0
    for r in reqs:
        with pytest.raises(CancelledError):
            r.future.result(0)


def test_stats_list_a_worker_flagged_in_many_rounds_as_suspected():
    st = ServerStats()
    st.counts["rounds"] = 20
    with st.lock:
        for _ in range(SUSPECT_MIN_ROUNDS):
            st.note_flagged((3,))
        st.note_flagged((5,))             # once: noise, not a suspect
    out = st.snapshot(1, 8)
    assert out["flagged"] == SUSPECT_MIN_ROUNDS + 1
    assert out["suspected"] == {3: SUSPECT_MIN_ROUNDS}
