"""The local runtime's task records and doorbell (csrc/control_words.hpp through
letcc._core.TaskPoster / WorkerPort): what a worker takes, in which order, across
threads and processes, and the errors of the bindings. The C++ side has its own
tests without Python (csrc/test/test_core.cpp: torn records, wake-ups)."""
from __future__ import annotations

import multiprocessing as mp
import threading

import numpy as np
import pytest

from letcc import _core
from letcc.runtime.worker_main import control_layout, control_words, reset_control, spin_seconds

MAIL, STOP, TIMEOUT = 1, 2, 3


def fresh(n, ring):
    ctl = np.zeros(control_words(n, ring), dtype=np.int64)
    reset_control(ctl, ring)
    return ctl


def test_layout_agrees_with_the_compiled_side():
    for n, ring in [(1, 1), (4, 2), (16, 1), (64, 3)]:
        ctl = fresh(n, ring)
        words = control_layout(ctl, ring)
        assert words.n == n and words.wanted.shape == (ring, n) and words.records.shape == (ring, n, 5)
        assert (words.records == -1).all() and (words.wanted == -1).all() and (words.mail == 0).all()
        assert (words.slots == np.arange(n)).all() and (words.done_round == -1).all()
        # a post through the compiled poster lands in the views the Python side reads
        poster = _core.TaskPoster(ctl, n, ring)
        j, k = n - 1, ring - 1
        sleeps = np.zeros(n)
        sleeps[j] = 0.125
        slots = np.full(n, -1, dtype=np.int64)
        slots[j] = 3
        poster.post(k, 77, np.array([j]), 6, sleeps, 2, slots)
        assert words.wanted[k, j] == 77
        assert words.records[k, j, 0] == 77 and words.records[k, j, 1] == 6
        assert words.records[k, j, 2:3].view(np.float64)[0] == 0.125
        assert words.records[k, j, 3] == 2 and words.records[k, j, 4] == 3
        poster.mail(j)
        assert words.mail[j] == 1
        with pytest.raises(ValueError, match="fits no number of workers"):
            control_layout(ctl[:-1], ring)


def test_a_worker_takes_its_own_tasks_oldest_first_and_each_once():
    n, ring = 6, 3
    ctl = fresh(n, ring)
    poster = _core.TaskPoster(ctl, n, ring)
    ports = [_core.WorkerPort(ctl, n, ring, j, -1) for j in range(n)]
    assert ports[2].next(0.0) == TIMEOUT
    rng = np.random.default_rng()
    sent = {j: [] for j in range(n)}
    r = 0
    for _ in range(3):                        # three rounds in flight, one per ring slot
        workers = np.sort(rng.choice(n, size=int(rng.integers(1, n + 1)), replace=False))
        sleeps = rng.random(n)
        poster.post(r % ring, r, workers, r + 1, sleeps, 0, None)
        for j in workers.tolist():
            sent[j].append((r, r + 1, float(sleeps[j]), None, _core.OWN_SLOT, r % ring))
        r += 1
    for j in range(n):
        got = []
        while True:
            t = ports[j].next(0.0)
            if t == TIMEOUT:
                break
            got.append(t)
        assert got == sent[j]
        for t in got:
            assert ports[j].wanted(t[5]) == t[0]


def test_a_replaced_record_is_skipped_and_a_late_port_starts_after_the_posts():
    n = 3
    ctl = fresh(n, 1)
    poster = _core.TaskPoster(ctl, n, 1)
    port = _core.WorkerPort(ctl, n, 1, 1, -1)
    poster.post(0, 4, np.array([1]), 1, None, 5, None)
    poster.post(0, 9, np.array([1]), 2, None, 0, None)
    assert port.next(0.0) == (9, 2, 0.0, None, _core.OWN_SLOT, 0)
    assert port.next(0.0) == TIMEOUT
    assert _core.WorkerPort(ctl, n, 1, 1, -1).next(0.0) == TIMEOUT      # a replacement of worker 1
    poster.post(0, 10, np.array([1]), 1, None, 5, None)
    assert port.next(0.0) == (10, 1, 0.0, 5, _core.OWN_SLOT, 0)


def test_mail_stop_and_a_sleeping_thread_woken_by_a_post():
    n = 2
    ctl = fresh(n, 1)
    words = control_layout(ctl, 1)
    poster = _core.TaskPoster(ctl, n, 1)
    port = _core.WorkerPort(ctl, n, 1, 0, -1)
    poster.mail(0)
    assert port.next(0.0) == MAIL and port.next(0.0) == TIMEOUT
    got = []
    t = threading.Thread(target=lambda: got.append(port.next(-1.0)))     # no timeout: the GIL is released
    t.start()
    poster.post(0, 3, np.array([0]), 1, None, 0, None)
    t.join(30)
    assert not t.is_alive() and got == [(3, 1, 0.0, None, _core.OWN_SLOT, 0)]
    words.mail[0] = _core.STOP
    poster.ring_all()
    assert port.next(-1.0) == STOP


def _echo_worker(name, n, rank, rounds, queue):
    from multiprocessing import shared_memory

    shm = shared_memory.SharedMemory(name=name)
    try:
        ctl = np.ndarray((control_words(n, 1),), dtype=np.int64, buffer=shm.buf)
        port = _core.WorkerPort(ctl, n, 1, rank, -1)
        queue.put("ready")
        for _ in range(rounds):
            t = port.next(30.0)
            queue.put(t if t == TIMEOUT else t[:2])
        port.release()
        del ctl
    finally:
        shm.close()


def test_tasks_reach_another_process_through_the_futex():
    from multiprocessing import shared_memory

    n, rounds = 4, 50
    shm = shared_memory.SharedMemory(create=True, size=8 * control_words(n, 1))
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    try:
        ctl = np.ndarray((control_words(n, 1),), dtype=np.int64, buffer=shm.buf)
        reset_control(ctl, 1)
        poster = _core.TaskPoster(ctl, n, 1)
        proc = ctx.Process(target=_echo_worker, args=(shm.name, n, 2, rounds, queue))
        proc.start()
        assert queue.get(timeout=60) == "ready"
        b = np.random.default_rng().integers(1, 100, size=rounds)
        for r in range(rounds):
            poster.post(0, r, np.array([1, 2]), int(b[r]), None, 0, None)
            assert queue.get(timeout=60) == (r, int(b[r]))       # one at a time: none replaced
        proc.join(60)
        assert proc.exitcode == 0
        poster.release()
        del ctl
    finally:
        shm.close()
        shm.unlink()


def test_bad_arguments_are_named():
    n, ring = 4, 2
    ctl = fresh(n, ring)
    with pytest.raises(ValueError, match="has 10 words; 4 workers and 2 ring slots need"):
        _core.TaskPoster(np.zeros(10, dtype=np.int64), n, ring)
    with pytest.raises(ValueError, match="n and ring must be >= 1, got n=0"):
        _core.TaskPoster(ctl, 0, ring)
    ro = ctl.copy()
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        _core.WorkerPort(ro, n, ring, 0, -1)
    with pytest.raises(TypeError):
        _core.TaskPoster(ctl.astype(np.int32), n, ring)       # a copy would be useless: no conversion
    with pytest.raises(ValueError, match="rank 4 is outside"):
        _core.WorkerPort(ctl, n, ring, 4, -1)
    poster = _core.TaskPoster(ctl, n, ring)
    with pytest.raises(ValueError, match="worker 7 is outside"):
        poster.post(0, 1, np.array([0, 7]), 1, None, 0, None)
    with pytest.raises(ValueError, match="ring slot 2 is outside"):
        poster.post(2, 1, np.array([0]), 1, None, 0, None)
    with pytest.raises(ValueError, match="round ids are >= 0, got -5"):
        poster.post(0, -5, np.array([0]), 1, None, 0, None)
    with pytest.raises(ValueError, match="sleeps must be None or 4 seconds"):
        poster.post(0, 1, np.array([0]), 1, np.zeros(3), 0, None)
    with pytest.raises(ValueError, match="slots must be None or 4 input slots"):
        poster.post(0, 1, np.array([0]), 1, None, 0, np.zeros(5, dtype=np.int64))
    assert (control_layout(ctl, ring).records[..., 0] == -1).all()         # nothing half-posted
    poster.release()
    with pytest.raises(RuntimeError, match="released"):
        poster.mail(0)
    port = _core.WorkerPort(ctl, n, ring, 0, -1)
    with pytest.raises(ValueError, match="ring slot 3 out of range"):
        port.wanted(3)
    port.release()
    with pytest.raises(RuntimeError, match="released"):
        port.next(0.0)


@pytest.mark.parametrize("raw, expected", [("0", 0.0), ("50", 50e-6), ("2.5", 2.5e-6)])
def test_spin_setting(monkeypatch, raw, expected):
    monkeypatch.setenv("LETCC_WORKER_SPIN_US", raw)
    assert spin_seconds() == pytest.approx(expected)


@pytest.mark.parametrize("raw", ["fast", "-1", "nan", "inf"])
def test_spin_setting_rejects(monkeypatch, raw):
    monkeypatch.setenv("LETCC_WORKER_SPIN_US", raw)
    with pytest.raises(ValueError, match=f"LETCC_WORKER_SPIN_US .*{raw}"):
        spin_seconds()


def _process_cpu(pids) -> float:
    """User + system CPU seconds of these processes (/proc, 10 ms ticks)."""
    import os
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total / tick


def _double(x):
    return x * 2.0


def _double_factory():
    return _double


@pytest.mark.parametrize("spin_us", [0, 10_000_000])
def test_spin_set_after_the_forkserver_started_reaches_the_workers(monkeypatch, spin_us):
    """The master reads LETCC_WORKER_SPIN_US when it builds its workers and hands
    it to them: a forkserver started earlier (another CodedInference, another
    test) would otherwise give them its own environment. Seen from outside: a
    worker told to spin 10 s burns CPU while idle, one told 0 sleeps at once
    (CPU time, not wall time: counted only while the worker runs)."""
    import time

    import letcc
    with letcc.CodedInference(_double_factory, letcc.Uncoded(1), simulate="virtual"):
        pass                                        # the forkserver is up, with the environment of now
    monkeypatch.setenv("LETCC_WORKER_SPIN_US", str(spin_us))
    with letcc.CodedInference(_double_factory, letcc.Uncoded(1), simulate="virtual") as ci:
        np.testing.assert_array_equal(ci(np.ones((1, 3))), 2.0 * np.ones((1, 3)))
        pid = [p for p in ci.worker_pids() if p]
        time.sleep(0.5)                             # past the CPU a new worker spends after its first task
        c0 = _process_cpu(pid)
        # idle: spinning (its first 10 s) or asleep; the spinner is given up to
        # 3 s to show 0.1 s (on a busy machine it gets a share of a core)
        for waited in range(1, 6 if spin_us else 2):
            time.sleep(0.6)
            burnt = _process_cpu(pid) - c0
            if spin_us and burnt >= 0.1:
                break
    if spin_us:
        assert burnt >= 0.1, f"a worker told to spin burnt {burnt} s CPU in {0.6 * waited:g} s idle"
    else:
        assert burnt <= 0.05, f"a worker told not to spin burnt {burnt} s CPU in 0.6 s idle"


def test_the_poster_collects_the_answers_the_workers_counted():
    """TaskPoster.answers against the done words written here (the numpy steps
    the local backend took before it): the round's answers not yet reported,
    in the order they finished (ties by worker), each once, nothing while the
    round's count is not past what was reported, and answers to another
    round left out."""
    rng = np.random.default_rng(3)
    for n in (1, 5, 16, 64):
        ctl = fresh(n, 1)
        words = control_layout(ctl, 1)
        poster = _core.TaskPoster(ctl, n, 1)
        r = 9
        _core.round_counter_start(ctl, words.counter_word, r)
        reported = np.zeros(n, dtype=bool)
        assert poster.answers(r, reported, 0) is None              # nobody counted yet
        done = rng.permutation(n)[:max(1, n - 2)].tolist()
        times = np.round(rng.uniform(0, 1, len(done)), 1)            # ties
        for k, (j, t) in enumerate(zip(done, times)):
            words.done_time[j] = t
            words.done_round[j] = r if k % 7 != 3 else r - 1          # one in seven answers an older round
        counted = [j for k, j in enumerate(done) if k % 7 != 3]
        for _ in counted:
            _core.round_counter_add(ctl, words.counter_word, r)
        want = sorted(((float(words.done_time[j]), j) for j in counted), key=lambda p: p[0])
        want = sorted(want, key=lambda p: (p[0], p[1]))               # stable over ascending workers
        assert poster.answers(r, reported, len(counted)) is None    # count not past what was reported
        got = poster.answers(r, reported, 0)
        assert got == (tuple(j for _, j in want), tuple(t for t, _ in want))
        assert reported.tolist() == [j in counted for j in range(n)]
        _core.round_counter_add(ctl, words.counter_word, r)         # counted again: nothing new to report
        assert poster.answers(r, reported, 0) is None
    with pytest.raises(ValueError, match="reported must be a writeable bool array of 64 flags"):
        poster.answers(r, np.zeros(3, dtype=bool), 0)
    with pytest.raises(TypeError):
        poster.answers(r, np.zeros(64, dtype=np.int64), 0)          # no conversion: the marks would be lost
