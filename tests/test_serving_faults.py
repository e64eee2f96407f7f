"""letcc.CodedServer under faults: random SIGKILLs under sustained load lose
no accepted request; a raising model is a clear error; nothing is left
behind after close or Ctrl-C. Event-driven: no assertion on wall-clock time.
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

import numpy as np
import pytest

import letcc
from letcc.serving import CodedServer, Hedged
from test_runtime_faults import D, scripted, shm_segments, touch
from test_serving import WAIT, _assert_gone, f_ref, wait_until

TESTS = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture
def script_dir(tmp_path):
    d = tmp_path / "script"
    d.mkdir()
    return d


@pytest.mark.parametrize("code", [letcc.LeTCC(4, 8), Hedged(8)], ids=["letcc", "hedged"])
def test_random_sigkills_under_load_lose_no_accepted_request(script_dir, rng, code):
    X = rng.random((400, D))
    s = CodedServer(functools.partial(scripted, str(script_dir)), code, threads_per_worker=1,
                    max_batch_delay=0.002, rounds_in_flight=2, seed=3)
    prefix = s.backend.shm_prefix
    futs, stop, killed = [], threading.Event(), []

    def killer():
        kr = np.random.default_rng(7)
        while not stop.is_set() and len(killed) < 8:
            pids = [p for p in s.worker_pids() if p]
            if pids:
                pid = int(kr.choice(pids))
                try:
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
                except ProcessLookupError:
                    pass
            stop.wait(0.15)

    th = threading.Thread(target=killer)
    th.start()
    try:
        for i, x in enumerate(X):
            futs.append(s.submit(x))
            if i % 20 == 19:
                time.sleep(0.01)           # sustained, not one burst
        for f in futs:
            f.exception(WAIT)              # resolves: an estimate or a clear error, never pending
    finally:
        stop.set()
        th.join()
        pids = s.worker_pids()
        s.close()
    assert killed and all(f.done() for f in futs)
    ok = [i for i, f in enumerate(futs) if f.exception() is None]
    for f in futs:
        if f.exception() is not None:
            assert isinstance(f.exception(), (RuntimeError, TimeoutError)) and str(f.exception())
    assert len(ok) >= len(futs) // 2
    got = np.stack([futs[i].result() for i in ok])
    assert np.all(np.isfinite(got)) and got.shape == (len(ok), 3)
    if isinstance(code, Hedged):            # uncoded copies: exact whenever they answer
        np.testing.assert_allclose(got, f_ref(X[ok]), rtol=1e-12)
    _assert_gone([p for p in pids if p], prefix)
    for pid in killed:
        assert not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split()[2] == "Z"


def test_a_raising_model_fails_the_requests_with_its_traceback(script_dir, rng):
    X = rng.random((4, D))
    with CodedServer(functools.partial(scripted, str(script_dir)), letcc.LeTCC(4, 8), threads_per_worker=1,
                     max_batch_delay=1e6) as s:
        for f in [s.submit(x) for x in X]:
            f.result(WAIT)
        for j in range(8):
            touch(script_dir / f"raise{j}")
        futs = [s.submit(x) for x in X]
        for f in futs:
            with pytest.raises(RuntimeError, match="boom from the model"):
                f.result(WAIT)
        for j in range(8):
            os.unlink(script_dir / f"raise{j}")
        assert s.stats()["errors"] == 4


def test_ctrl_c_leaves_no_process_or_segment_behind(script_dir, tmp_path):
    touch(script_dir / "block0")
    code = f"""
        import faulthandler, functools, json, signal, sys, numpy as np
        faulthandler.register(signal.SIGUSR1, all_threads=True)   # the test asks for stacks if this hangs
        # An interactive user's process: Ctrl-C raises KeyboardInterrupt. A process started with
        # SIGINT ignored (a background job of a non-interactive shell, nohup: how CI may run this
        # suite) keeps it ignored, and the Ctrl-C sent below would never reach the master: it then
        # waited out worker 0's hang limit (60 s), answered every request and exited 0.
        signal.signal(signal.SIGINT, signal.default_int_handler)
        sys.path.insert(0, {TESTS!r})
        import letcc
        from letcc.serving import CodedServer
        from test_runtime_faults import scripted
        if __name__ == "__main__":
            with CodedServer(functools.partial(scripted, {str(script_dir)!r}), letcc.Uncoded(2),
                             threads_per_worker=1) as s:
                print(json.dumps(dict(pids=s.worker_pids(), prefix=s.backend.shm_prefix)), flush=True)
                futs = [s.submit(np.zeros({D})) for _ in range(4)]
                [f.result() for f in futs]      # worker 0 blocks: waits here until Ctrl-C
    """
    path = tmp_path / "master.py"
    path.write_text(textwrap.dedent(code))
    proc = subprocess.Popen([sys.executable, str(path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    info = json.loads(proc.stdout.readline())
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    try:                                     # communicate: the workers share the stderr pipe
        _, err = proc.communicate(timeout=WAIT)
    except subprocess.TimeoutExpired:
        os.kill(proc.pid, signal.SIGUSR1)    # faulthandler: where is it stuck?
        time.sleep(1.0)
        proc.kill()
        _, err = proc.communicate()
        pytest.fail(f"the master did not exit within {WAIT:g} s of Ctrl-C; its stacks:\n{err}")
    assert proc.returncode != 0, err
    assert "KeyboardInterrupt" in err
    _assert_gone(info["pids"], info["prefix"])


def test_a_layout_learnt_from_the_odd_worker_is_learnt_again_once_the_rounds_in_flight_drained(script_dir, rng):
    """The server's probe sizes the outputs from the first worker to answer; when
    that is the one worker whose model returns another shape, the rounds in
    flight fail with a clear error, and once they have drained the layout is
    forgotten, so after the model is mended the next round probes again and is
    exact (it used to fail every round after, until the server was restarted)."""
    from test_runtime_faults import M, reference, Scripted

    code = letcc.LeTCC(2, 4)
    for name in ("shape2", "block0", "block1", "block3"):
        touch(script_dir / name)
    with CodedServer(functools.partial(scripted, str(script_dir)), code, threads_per_worker=1, wait_for=4,
                     rounds_in_flight=2, max_groups=1, max_batch_delay=0.001) as s:
        def release_once_learnt():             # workers 0, 1, 3 are held in their probe call
            while s.backend.output_reference() is None:
                time.sleep(0.005)
            for j in (0, 1, 3):
                os.unlink(script_dir / f"block{j}")

        helper = threading.Thread(target=release_once_learnt)
        helper.start()
        X = rng.standard_normal((4, D))
        futs = [s.submit(x) for x in X]        # two rounds of K = 2: both in flight at once
        helper.join(WAIT)
        for fut in futs:
            with pytest.raises(ValueError, match=r"worker [013] returned an output of shape \(\d, 3\) float64 for a "
                                                 r"batch of \d inputs, but worker 2's output for one input was "
                                                 r"\(4,\)"):
                fut.result(WAIT)
        assert s.stats()["rounds"] == 2
        os.unlink(script_dir / "shape2")
        X = rng.standard_normal((2, D))
        out = np.stack([f.result(WAIT) for f in [s.submit(x) for x in X]])
        assert s.backend.output_reference()[1] == (M,)
        np.testing.assert_allclose(out, reference(code, Scripted(".").f, X, [0, 1, 2, 3]), rtol=1e-11, atol=1e-11)
