"""letcc runtime, local backend, when things go wrong: workers killed mid-round,
raising, hanging, returning the wrong shape; stale answers of cancelled rounds;
cancellation of late workers; 200 rounds with random kills; Ctrl-C and a killed
master leave no process or shared-memory segment behind.

Faults are scripted through files in a per-test directory that the model of
each worker checks on every call (worker rank from letcc.runtime.worker_rank):
the test decides exactly which worker misbehaves in which round, so nothing
depends on timing.
"""
from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import warnings

import numpy as np
import pytest

import letcc
from letcc.runtime.coded_inference import CodedInference
from letcc.runtime.worker_main import worker_rank
from letcc.stragglers import FixedCount, StragglerDraw


class SlowStragglers(FixedCount):
    """FixedCount whose stragglers are very late (1e6 s of virtual delay) instead
    of never answering. With simulate="virtual" a never-answering worker is not
    even sent the round; these are, so the tests can watch a late worker that is
    still computing be cancelled."""

    def sample(self, N, rng):
        d = super().sample(N, rng)
        return StragglerDraw(np.where(np.isinf(d.delays), 1e6, d.delays), d.available)

D, M = 6, 3            # model input / output sizes


class Scripted:
    """tanh(x @ W + c), misbehaving on worker `rank` while the file <action><rank> exists:

    kill    delete the file, SIGKILL itself (a crash in the middle of a round)
    raise   raise ValueError
    hang    block until the file is removed (checked per call: per chunk)
    block   copy the input, create held<rank>, block until the file is removed, answer
            for the copy
    await   before computing, wait until some worker holds a blocked input (a held* file)
    release delete the file and every block* file (lets another worker go on)
    shape   return one column too many
    log     append one line per call to calls<rank>.txt
    """

    def __init__(self, script_dir: str, seed: int = 0):
        rng = np.random.default_rng(seed)
        self.W = rng.standard_normal((D, M)) / np.sqrt(D)
        self.c = rng.standard_normal(M)
        self.dir = script_dir

    def f(self, x):
        return np.tanh(x.reshape(x.shape[0], -1) @ self.W.astype(x.dtype) + self.c.astype(x.dtype))

    def _wait_gone(self, name):
        while os.path.exists(os.path.join(self.dir, name)):
            time.sleep(0.005)

    def __call__(self, x):
        rank = worker_rank()
        names = set(os.listdir(self.dir))
        if f"log{rank}" in names:
            with open(os.path.join(self.dir, f"calls{rank}.txt"), "a") as fh:
                fh.write(" ".join(f"{v:.17g}" for v in x.reshape(x.shape[0], -1)[:, 0]) + "\n")
        if f"release{rank}" in names:
            for n in names:
                if n.startswith("block") or n == f"release{rank}":
                    os.unlink(os.path.join(self.dir, n))
        if f"kill{rank}" in names:
            os.unlink(os.path.join(self.dir, f"kill{rank}"))
            os.kill(os.getpid(), signal.SIGKILL)
        if f"raise{rank}" in names:
            raise ValueError(f"boom from the model on worker {rank}")
        if f"hang{rank}" in names:
            self._wait_gone(f"hang{rank}")
        if f"await{rank}" in names:
            while not any(n.startswith("held") for n in os.listdir(self.dir)):
                time.sleep(0.005)
        if f"block{rank}" in names:
            x = x.copy()
            touch(os.path.join(self.dir, f"held{rank}"))
            self._wait_gone(f"block{rank}")
        y = self.f(x)
        if f"shape{rank}" in names:
            y = np.concatenate([y, y[:, :1]], axis=1)
        return y


def scripted(script_dir, seed=0):
    return Scripted(str(script_dir), seed)


def reference(code, f, X, answered):
    K = code.K
    B = X.shape[0] // K
    groups = np.ascontiguousarray(X.reshape((B, K) + X.shape[1:]).swapaxes(0, 1))
    coded = np.asarray(code.encode(groups))
    Y = np.stack([f(coded[j]) for j in range(code.N)])
    avail = np.asarray(sorted(answered))
    est = np.asarray(code.decode(Y[avail], avail))
    return est.swapaxes(0, 1).reshape((B * K,) + est.shape[2:])


def assert_exact_round(ci, code, X, out):
    f = Scripted(".", 0).f          # the same weights, no scripted faults
    np.testing.assert_allclose(out, reference(code, f, X, ci.last_round.answered), rtol=1e-11, atol=1e-11)


def touch(path):
    open(path, "w").close()


def alive(pid) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(") ")[1][0] not in "ZX"
    except (FileNotFoundError, ProcessLookupError):   # gone before or while reading
        return False


def shm_segments(prefix):
    return [n for n in os.listdir("/dev/shm") if n.startswith(prefix)] if os.path.isdir("/dev/shm") else []


@pytest.fixture
def script_dir(tmp_path):
    d = tmp_path / "script"
    d.mkdir()
    return d


# ---- single faults -----------------------------------------------------------

def test_worker_killed_mid_round_is_an_erasure_and_comes_back(script_dir, rng):
    code = letcc.LeTCC(3, 6)
    with CodedInference(functools.partial(scripted, script_dir), code) as ci:
        X = rng.standard_normal((3, D))
        assert_exact_round(ci, code, X, ci(X))             # warm-up: output layout known
        old = ci.worker_pids()
        touch(script_dir / "kill2")
        with pytest.warns(RuntimeWarning, match=r"worker 2: .*exited with code -9 during round 2"):
            out = ci(X)
        info = ci.last_round
        assert info.failed == {2: "died"} and sorted(info.answered) == [0, 1, 3, 4, 5]
        assert info.replaced == (2,) and "-9" in info.errors[2]
        assert_exact_round(ci, code, X, out)
        # the ready list (kept between changes of state) leaves the replacement out until its
        # "ready" message is read (no poll since the round's end)
        assert ci.backend.ready_workers() == [0, 1, 3, 4, 5]
        assert ci.backend.restart_dead() == []             # started already: nothing dead is left
        ci.wait_ready()
        assert ci.ready_workers() == list(range(6))
        new = ci.worker_pids()
        assert new[2] != old[2] and new[:2] == old[:2] and not alive(old[2])
        for _ in range(3):
            X = rng.standard_normal((6, D))
            out = ci(X)
            assert sorted(ci.last_round.answered) == list(range(6)) and ci.last_round.failed == {}
            assert_exact_round(ci, code, X, out)


def rebuilds_until_told(script_dir):
    """scripted, except that a worker whose initfail<rank> file exists fails to build its model."""
    if os.path.exists(os.path.join(script_dir, f"initfail{worker_rank()}")):
        raise RuntimeError(f"no model for worker {worker_rank()} this time")
    return Scripted(str(script_dir), 0)


def test_a_replacement_that_never_builds_is_given_up_and_the_rest_go_on(script_dir, rng):
    # Worker 2 dies and each replacement fails to build its model: after
    # MAX_FAILED_STARTS failed starts it is left dead and never started again
    # (restart_dead's set of workers to restart is empty once more), and the
    # rounds go on with the others.
    from letcc.runtime.local_backend import MAX_FAILED_STARTS
    code = letcc.LeTCC(3, 6)
    with CodedInference(functools.partial(rebuilds_until_told, str(script_dir)), code) as ci:
        X = rng.standard_normal((3, D))
        assert_exact_round(ci, code, X, ci(X))
        touch(script_dir / "initfail2")
        touch(script_dir / "kill2")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)     # the death and each failed build
            out = ci(X)
            assert 2 in ci.last_round.failed
            assert_exact_round(ci, code, X, out)
            for _ in range(400):
                out = ci(X)
                assert 2 not in ci.last_round.answered and len(ci.last_round.answered) == 5
                assert_exact_round(ci, code, X, out)
                if not ci.backend._dead and ci.backend._res.handles[2].state == "dead":
                    break       # given up on
                time.sleep(0.01)
        assert ci.backend._res.handles[2].failed_starts == MAX_FAILED_STARTS
        assert ci.backend.restart_dead() == [] and ci.backend.ready_workers() == [0, 1, 3, 4, 5]


def test_worker_that_raises_is_erased_and_reported(script_dir, rng):
    code = letcc.BACC(2, 5)
    with CodedInference(functools.partial(scripted, script_dir), code) as ci:
        pids = ci.worker_pids()
        touch(script_dir / "raise3")
        X = rng.standard_normal((2, D))
        with pytest.warns(RuntimeWarning, match=r"worker 3: ValueError: boom from the model on worker 3"):
            out = ci(X)
        info = ci.last_round
        assert info.failed == {3: "raised"} and 3 not in info.answered and info.replaced == ()
        assert "Traceback" in info.errors[3] and "boom from the model on worker 3" in info.errors[3]
        assert_exact_round(ci, code, X, out)
        os.unlink(script_dir / "raise3")
        out = ci(X)
        assert ci.worker_pids() == pids and sorted(ci.last_round.answered) == list(range(5))
        assert_exact_round(ci, code, X, out)


def test_hanging_worker_is_killed_after_the_hang_limit_and_replaced(script_dir, rng):
    code = letcc.LeTCC(2, 4)
    with CodedInference(functools.partial(scripted, script_dir), code, hang_timeout=1.0) as ci:
        X = rng.standard_normal((2, D))
        ci(X)
        old = ci.worker_pids()
        touch(script_dir / "hang1")
        with pytest.warns(RuntimeWarning, match=r"worker 1: no answer within hang_timeout = 1 s"):
            out = ci(X)
        info = ci.last_round
        assert info.failed == {1: "hung"} and info.replaced == (1,) and not alive(old[1])
        assert_exact_round(ci, code, X, out)
        os.unlink(script_dir / "hang1")
        ci.wait_ready()
        out = ci(X)
        assert sorted(ci.last_round.answered) == [0, 1, 2, 3]
        assert_exact_round(ci, code, X, out)


def test_every_worker_hanging_raises_timeout(script_dir, rng):
    code = letcc.LeTCC(2, 3)
    with CodedInference(functools.partial(scripted, script_dir), code, hang_timeout=0.5) as ci:
        X = rng.standard_normal((2, D))
        ci(X)
        for j in range(3):
            touch(script_dir / f"hang{j}")
        with pytest.warns(RuntimeWarning, match="hang_timeout"):
            with pytest.raises(TimeoutError, match=r"round 2: no worker answered at all; failures: .*hung"):
                ci(X)
        assert ci.last_round.answered == () and set(ci.last_round.failed.values()) == {"hung"}
        for j in range(3):
            os.unlink(script_dir / f"hang{j}")
        ci.wait_ready()
        assert_exact_round(ci, code, X, ci(X))


def test_output_shape_differing_between_workers_is_a_clear_error(script_dir, rng):
    code = letcc.LeTCC(2, 4)
    with CodedInference(functools.partial(scripted, script_dir), code) as ci:
        touch(script_dir / "shape2")
        X = rng.standard_normal((2, D))
        # the layout is learnt from the first worker to answer the probe: worker 2
        # (one column too many) is the odd one out, or, when it answered first, the rest
        with pytest.raises(ValueError, match=r"worker 2 returned an output of shape \(1, 4\) float64 for a batch "
                                             r"of 1 inputs, but worker [013]'s output for one input was \(3,\)"
                                             r"|worker [013] returned an output of shape \(1, 3\) float64 for a "
                                             r"batch of 1 inputs, but worker 2's output for one input was \(4,\)"):
            ci(X)
        os.unlink(script_dir / "shape2")
        X = rng.standard_normal((4, D))
        out = ci(X)                      # the runtime is still usable; old answers are stale
        assert sorted(ci.last_round.answered) == [0, 1, 2, 3]
        assert_exact_round(ci, code, X, out)


def test_a_layout_learnt_from_the_odd_worker_is_learnt_again_after_the_shape_error(script_dir, rng):
    """Every worker is probed and the first answer sizes the outputs: when that
    is the one worker whose model returns another shape, the round fails with a
    clear error and the layout is forgotten, so once the model is mended the
    next round probes again and works (it used to fail every round after)."""
    code = letcc.LeTCC(2, 4)
    with CodedInference(functools.partial(scripted, script_dir), code) as ci:
        for name in ("shape2", "block0", "block1", "block3"):
            touch(script_dir / name)

        def release_once_learnt():             # workers 0, 1, 3 are held in their probe call
            while ci.backend.output_reference() is None:
                time.sleep(0.005)
            for j in (0, 1, 3):
                os.unlink(script_dir / f"block{j}")

        helper = threading.Thread(target=release_once_learnt)
        helper.start()
        with pytest.raises(ValueError, match=r"worker [013] returned an output of shape \(1, 3\) float64 for a "
                                             r"batch of 1 inputs, but worker 2's output for one input was \(4,\)"):
            ci(rng.standard_normal((2, D)))
        helper.join()
        assert ci.backend.output_reference() is None
        os.unlink(script_dir / "shape2")
        X = rng.standard_normal((4, D))
        out = ci(X)
        assert sorted(ci.last_round.answered) == [0, 1, 2, 3]
        assert ci.backend.output_reference()[1] == (M,)
        assert_exact_round(ci, code, X, out)


def test_model_factory_failing_to_build_is_reported_at_start(script_dir):
    with pytest.raises(RuntimeError, match=r"worker \d failed to start: model_factory\(\) raised"):
        CodedInference(functools.partial(scripted, script_dir / "missing", "not a seed"), letcc.LeTCC(1, 2))


# ---- cancellation and stale answers ---------------------------------------------

def test_late_worker_abandons_a_cancelled_round_between_chunks(script_dir, rng):
    N = 5
    code = letcc.LeTCC(2, N)
    model = SlowStragglers(1, worst_case=True)
    late = int(model.sample(N, np.random.default_rng(0)).stragglers[0])
    with CodedInference(functools.partial(scripted, script_dir), code, chunk_rows=1) as ci:
        ci(rng.standard_normal((8, D)))          # warm-up, every worker answers (none still busy)
        ci.stragglers = model
        touch(script_dir / f"log{late}")
        touch(script_dir / f"hang{late}")                     # its first chunk blocks
        # the others wait until `late` is inside that chunk (its call removes the
        # block files), so the round is never over before `late` starts it
        for j in range(N):
            if j != late:
                touch(script_dir / f"block{j}")
        touch(script_dir / f"release{late}")
        X = rng.standard_normal((8, D))                       # B = 4 rows per worker
        out = ci(X)
        assert late not in ci.last_round.answered
        assert_exact_round(ci, code, X, out)
        os.unlink(script_dir / f"hang{late}")                 # round over: its chunk returns
        ci.stragglers = None
        X2 = rng.standard_normal((8, D))
        out = ci(X2)                                          # it must answer this one
        assert sorted(ci.last_round.answered) == list(range(N))
        assert ci.last_round.stale >= 1                       # its "cancelled" for the old round
        assert_exact_round(ci, code, X2, out)
    calls = (script_dir / f"calls{late}.txt").read_text().splitlines()
    assert len(calls) == 1 + 4                                # 1 chunk of the cancelled round, 4 of the next


def test_virtual_never_answering_workers_are_not_sent_the_round(script_dir, rng):
    # With simulate="virtual" an infinite injected delay means the answer could
    # never count: the worker is not made to compute (no wasted CPU next to the
    # workers that do count), and it takes the next round normally.
    N = 6
    code = letcc.LeTCC(3, N)
    model = FixedCount(2, worst_case=True)
    never = set(int(j) for j in model.sample(N, np.random.default_rng(0)).stragglers)
    for j in range(N):
        touch(script_dir / f"log{j}")
    with CodedInference(functools.partial(scripted, script_dir), code, stragglers=model) as ci:
        X = rng.standard_normal((3, D))
        out = ci(X)
        assert set(ci.last_round.answered) == set(range(N)) - never
        assert set(ci.last_round.dispatched) == set(range(N))
        assert_exact_round(ci, code, X, out)
        ci.stragglers = None
        X2 = rng.standard_normal((3, D))
        out = ci(X2)
        assert sorted(ci.last_round.answered) == list(range(N))
        assert ci.last_round.stale == 0
        assert_exact_round(ci, code, X2, out)
    calls = {j: (script_dir / f"calls{j}.txt").read_text().splitlines() for j in range(N)}
    for j in range(N):
        # one call per round it was sent, plus the first round's output-layout
        # probe (every worker sent the round is asked; the first answer is taken)
        expected = 1 if j in never else 2 + 1
        assert len(calls[j]) == expected, (j, never, calls[j])


def test_stale_answer_of_a_cancelled_round_never_reaches_the_next(script_dir, rng):
    N = 6
    code = letcc.LeTCC(3, N)
    model = SlowStragglers(1, worst_case=True)
    late = int(model.sample(N, np.random.default_rng(0)).stragglers[0])
    other = (late + 1) % N
    with CodedInference(functools.partial(scripted, script_dir), code) as ci:
        ci(rng.standard_normal((3, D)))          # warm-up, every worker answers (none still busy)
        ci.stragglers = model
        touch(script_dir / f"block{late}")     # holds round 2's input, answers it late
        # the others answer round 2 only once `late` holds its input: a task not yet
        # taken when round 3 replaces its record would never run (worker_main)
        for j in range(N):
            if j != late:
                touch(script_dir / f"await{j}")
        X1 = rng.standard_normal((3, D))
        out1 = ci(X1)
        assert late not in ci.last_round.answered
        for j in range(N):
            if j != late:
                os.unlink(script_dir / f"await{j}")
        assert_exact_round(ci, code, X1, out1)
        # round 3: once `other` computes it (round 3 dispatched), `late` is released and
        # answers round 2 with f(round 2 input) into its slot, then computes round 3
        touch(script_dir / f"release{other}")
        ci.stragglers = None
        X2 = rng.standard_normal((3, D))
        out2 = ci(X2)
        info = ci.last_round
        assert sorted(info.answered) == list(range(N)) and info.stale >= 1
        assert_exact_round(ci, code, X2, out2)


# ---- many rounds, random kills, nothing left behind --------------------------------

@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_200_rounds_with_random_kills_all_decode_and_leave_nothing(script_dir, rng):
    N = 6
    code = letcc.LeTCC(3, N)
    ci = CodedInference(functools.partial(scripted, script_dir), code, stragglers=FixedCount(1),
                        seed=int(rng.integers(1 << 30)))
    prefix = ci.backend.shm_prefix
    seen = set()
    deaths = 0
    kills = 0
    try:
        assert len(shm_segments(prefix)) >= 1
        for i in range(200):
            seen.update(p for p in ci.worker_pids() if p is not None)
            # A kill on every 7th round and another 3 rounds later, at random
            # workers; before each, wait for replacements if fewer than 4 are up
            # (on a loaded machine a replacement takes longer than many rounds).
            if i % 7 in (0, 3):
                if len(ci.ready_workers()) < 4:
                    ci.wait_ready()
                    seen.update(p for p in ci.worker_pids() if p is not None)
                ready = ci.ready_workers()
                if i % 7 == 0:                                   # dies in the middle of the round
                    touch(script_dir / f"kill{rng.choice(ready)}")
                else:                                            # killed from outside between rounds
                    os.kill(ci.worker_pids()[rng.choice(ready)], signal.SIGKILL)
                kills += 1
            X = rng.standard_normal((3 * int(rng.integers(1, 3)), D))
            out = ci(X)
            info = ci.last_round
            assert len(info.answered) >= 1
            assert_exact_round(ci, code, X, out)
            deaths += sum(1 for r in info.failed.values() if r == "died")
        # A death shows up as an erasure in the round it interrupts, unless the
        # master learns of it between rounds (then the worker is not dispatched):
        # how many of each is a matter of timing, so only some are required here;
        # that every kill was replaced is checked through the pids below.
        assert kills == 58 and deaths >= 1
        ci.wait_ready()
        X = rng.standard_normal((3, D))
        ci.stragglers = None
        assert_exact_round(ci, code, X, ci(X))
        assert sorted(ci.last_round.answered) == list(range(N))
        seen.update(ci.worker_pids())
        # every killed worker was replaced by a new process (pids are not reused
        # this quickly: Linux hands them out in increasing order)
        assert len(seen) >= N + kills
    finally:
        ci.close()
    assert not [p for p in seen if alive(p)]
    assert shm_segments(prefix) == []


# ---- Ctrl-C and a killed master ----------------------------------------------------

_SCRIPT = """
import faulthandler, functools, json, os, signal, sys
faulthandler.register(signal.SIGUSR1, all_threads=True)   # the test asks for stacks if this hangs
# An interactive user's process: Ctrl-C raises KeyboardInterrupt. (Started from a
# background job, e.g. `cmd &` in a script, SIGINT arrives ignored and Python then
# keeps it ignored: the Ctrl-C this test sends would never reach the master.)
signal.signal(signal.SIGINT, signal.default_int_handler)
sys.path.insert(0, {tests!r})
from test_runtime_faults import scripted, D
import numpy as np
import letcc
from letcc.runtime.coded_inference import CodedInference

if __name__ == "__main__":
    script_dir = {script_dir!r}
    with CodedInference(functools.partial(scripted, script_dir), letcc.LeTCC(2, 3)) as ci:
        X = np.ones((2, D))
        ci(X)
        for j in range(3):
            open(os.path.join(script_dir, "hang%d" % j), "w").close()
            open(os.path.join(script_dir, "log%d" % j), "w").close()   # calls<j>.txt: one line per call
        print(json.dumps(dict(pids=ci.worker_pids(), prefix=ci.backend.shm_prefix)), flush=True)
        ci(X)                                       # every worker hangs: blocks here
"""


def _run_blocking_master(script_dir, tmp_path):
    path = tmp_path / "master.py"
    path.write_text(textwrap.dedent(_SCRIPT.format(tests=os.path.dirname(__file__), script_dir=str(script_dir))))
    proc = subprocess.Popen([sys.executable, str(path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    line = proc.stdout.readline()
    if not line:
        proc.wait(30)
        raise AssertionError(f"master script failed:\n{proc.stderr.read()}")
    return proc, json.loads(line)


def _wait_until(cond, timeout=60.0):
    end = time.monotonic() + timeout
    while not cond() and time.monotonic() < end:
        time.sleep(0.05)
    return cond()


def _all_inside_the_hanging_call(script_dir, n=3):
    """Every worker has started its call of the blocked round (so the master waits)."""
    paths = [script_dir / f"calls{j}.txt" for j in range(n)]
    return all(p.exists() and len(p.read_text().splitlines()) >= 1 for p in paths)


def test_ctrl_c_in_the_master_stops_workers_and_unlinks_shared_memory(script_dir, tmp_path):
    proc, state = _run_blocking_master(script_dir, tmp_path)
    assert all(alive(p) for p in state["pids"]) and shm_segments(state["prefix"])
    # Ctrl-C while the master waits on its workers (the case a user hits)
    assert _wait_until(lambda: _all_inside_the_hanging_call(script_dir))
    os.killpg(proc.pid, signal.SIGINT)          # Ctrl-C reaches the whole process group
    # communicate, not wait: the master and its workers share the stderr pipe,
    # and a full pipe would block them
    try:
        _, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.kill(proc.pid, signal.SIGUSR1)       # faulthandler: where is it stuck?
        time.sleep(1.0)
        os.killpg(proc.pid, signal.SIGKILL)
        _, err = proc.communicate()
        pytest.fail(f"the master did not exit within 60 s of Ctrl-C; its stacks:\n{err}")
    assert "KeyboardInterrupt" in err
    assert not [p for p in state["pids"] if alive(p)]
    assert shm_segments(state["prefix"]) == []
    assert "leaked shared_memory" not in err


def test_killed_master_leaves_no_worker_or_segment_behind(script_dir, tmp_path):
    proc, state = _run_blocking_master(script_dir, tmp_path)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(60)
    # workers stuck in the model notice the orphaning; the resource tracker unlinks
    assert _wait_until(lambda: not [p for p in state["pids"] if alive(p)])
    assert _wait_until(lambda: shm_segments(state["prefix"]) == [])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        proc.stderr.close()
        proc.stdout.close()
