"""GIL handoffs on the serving master: numpy's input copies against letcc._core.copy_rows.

numpy releases the GIL around a copy whose inner loop is longer than 500
elements (one 1x28x28 input is 784). In a CodedServer the callers' threads
(submit) and the dispatcher thread (a round's padding, a task's slot) copy
inputs while the other threads wait for the GIL, so each such copy can hand
the GIL over, and taking it back waits for the other thread to block or for
the interpreter's switch interval. letcc copies them with ``_core.copy_rows``,
which holds the GIL below 1 MiB (letcc.serving.flights.input_copy).

Two measurements, each arm in turn (interleaved, fresh servers):

1. the copy alone: one 784-float32 input copied by ``np.array(x, copy=True)``
   and by ``input_copy``, in one thread, and with a second Python thread busy
   (what a server's other threads are): CPU per copy of the copying thread;
2. CodedServer's master CPU per request (letcc.bench.serving_overhead's rows:
   LeTCC(8, 16), a 784 -> 10 linear model, 4 callers x 64 requests out, rounds
   of up to 4 groups of K (full-B4) and of 1 (full-B1); one caller with one
   request out (partial-1)), with the server's copies made by numpy (the code
   before) and by copy_rows (now): the same build, the numpy arm patching
   input_copy and pad_groups back to numpy's copies.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python bench/gil_handoffs.py [--turns 6]

Results: bench/results/gil_handoffs.md.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

from _report import markdown_table, write_report

HERE = Path(__file__).resolve().parent
LOADS = ("full-B4", "full-B1", "partial-1")
ARMS = ("numpy copies", "copy_rows")
READING = """\
## How to read it

'another thread busy' is a second Python thread counting in a loop, what a server's other threads
are while one of them copies: numpy's copy releases the GIL, the busy thread takes it, and the
copying thread waits for it back (the switch interval, 5 ms by default, bounds the wait): its wall
time per copy is that wait, its CPU the context switches around it. copy_rows keeps the GIL, so
the copy costs what it costs alone. Alone, input_copy (the empty array, the call and its checks)
costs about 0.5-0.7 us more than numpy's copy.

In CodedServer the callers submit (one copy each) while the dispatcher pads the round (a copy per
request and one for the padding) and the other callers wait in result(): with numpy's copies each
of those copies could hand the GIL to another thread. Full rounds (4 callers) gain the most: every
round has 8-32 copies on the dispatcher and as many submits. One caller with one request out
(partial-1) has no other thread running Python while a copy is made (the caller waits in
result()): no change there, as expected. Both arms use the same build and the same code otherwise;
CPU contention with the 16 worker processes on the 2 cores is the same in both.
"""


def _numpy_pad_groups(requests, K, row_shape, dtype):
    """pad_groups as it was: numpy's copies, one per request and one for the padding."""
    n = len(requests)
    B = -(-n // K)
    X = np.empty((B, K) + tuple(row_shape), dtype=dtype)
    flat = X.reshape((B * K,) + tuple(row_shape))
    for i, req in enumerate(requests):
        flat[i] = req.x
    if n < B * K:
        flat[n:] = flat[n - 1]
    return X.swapaxes(0, 1)


def _numpy_input_copy(x, dtype):
    return np.array(x, dtype=dtype, copy=True)


def copy_alone(turns: int, calls: int = 20000) -> dict:
    """CPU us per copy of one 1x28x28 float32 input: {(arm, busy): [per turn]}."""
    from letcc.serving.flights import input_copy
    x = np.random.default_rng(0).random((1, 28, 28), dtype=np.float32)
    dt = np.dtype(np.float32)
    fns = {"numpy copies": lambda: _numpy_input_copy(x, dt), "copy_rows": lambda: input_copy(x, dt)}
    out: dict = {}
    for busy in (False, True):
        stop = threading.Event()
        spinner = None
        if busy:
            def spin():
                k = 0
                while not stop.is_set():
                    k += 1
            spinner = threading.Thread(target=spin, daemon=True)
            spinner.start()
        try:
            for _ in range(turns):
                for arm, fn in fns.items():
                    c0 = time.thread_time()
                    w0 = time.perf_counter()
                    for _ in range(calls):
                        fn()
                    out.setdefault((arm, busy), []).append(((time.thread_time() - c0) / calls * 1e6,
                                                            (time.perf_counter() - w0) / calls * 1e6))
        finally:
            stop.set()
            if spinner is not None:
                spinner.join()
    return out


def child(arm: str, load: str, requests: int) -> dict:
    """One serving row in this process (the arm's copies), as JSON-able numbers."""
    import letcc.serving.coded_rounds as coded_rounds
    import letcc.serving.server as server
    if arm == "numpy copies":
        server.input_copy = _numpy_input_copy
        coded_rounds.pad_groups = _numpy_pad_groups
    import letcc
    from letcc.bench import serving_overhead as so
    from letcc.serving import CodedServer
    X = np.random.default_rng(7).random((512,) + so.SHAPE, dtype=np.float32)
    threads, chunk, groups = so.LOADS[load]
    with CodedServer(so.linear_factory, letcc.LeTCC(so.K, so.N), threads_per_worker=1, max_batch_delay=0.002,
                     max_groups=groups, seed=1) as srv:
        for f in [srv.submit(x) for x in X[:64]]:
            f.result(300)
        so.drive(srv, X, min(requests, 400), threads, chunk)
        m = so.measure(srv, X, requests, threads, chunk)
    return {k: m[k] * 1e6 for k in ("per_request", "dispatcher_per_request", "callers_per_request")}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--turns", type=int, default=6, help="turns of each arm per row")
    ap.add_argument("--requests", type=int, default=8000, help="requests per full-round row")
    ap.add_argument("--partial-requests", type=int, default=1000, help="requests per partial-round row")
    ap.add_argument("--out", type=Path, default=None, help="folder for gil_handoffs.md (default bench/results)")
    ap.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        arm, load, n = args.child
        print(json.dumps(child(arm, load, int(n))))
        return
    alone = copy_alone(args.turns)
    rows = []
    for (arm, busy), vals in sorted(alone.items(), key=lambda kv: (kv[0][1], ARMS.index(kv[0][0]))):
        cpu = [v[0] for v in vals]
        wall = [v[1] for v in vals]
        rows.append(["another thread busy" if busy else "alone", arm, f"{np.median(cpu):.2f}",
                     f"{min(cpu):.2f}-{max(cpu):.2f}", f"{np.median(wall):.2f}"])
        print(" | ".join(rows[-1]), flush=True)
    copy_table = markdown_table(["threads", "copy", "CPU us per copy (median)", "turns", "wall us per copy"],
                                rows, align="llrrr")
    got: dict = {}
    for load in LOADS:
        n = args.partial_requests if load.startswith("partial") else args.requests
        for turn in range(args.turns):
            arms = ARMS if turn % 2 == 0 else ARMS[::-1]
            for arm in arms:
                res = subprocess.run([sys.executable, __file__, "--child", arm, load, str(n)], capture_output=True,
                                     text=True, check=True)
                got.setdefault((load, arm), []).append(json.loads(res.stdout.strip().splitlines()[-1]))
                r = got[(load, arm)][-1]
                print(f"{load} {arm} turn {turn + 1}: {r['per_request']:.1f} us/req", flush=True)
    rows = []
    for load in LOADS:
        med = {arm: {k: float(np.median([r[k] for r in got[(load, arm)]])) for k in got[(load, arm)][0]}
               for arm in ARMS}
        a, b = med["numpy copies"], med["copy_rows"]
        turns = {arm: ", ".join(f"{r['per_request']:.1f}" for r in got[(load, arm)]) for arm in ARMS}
        rows.append([load, f"{a['per_request']:.1f}", f"{b['per_request']:.1f}",
                     f"{b['per_request'] / a['per_request']:.2f}x",
                     f"{a['dispatcher_per_request']:.1f} / {a['callers_per_request']:.1f}",
                     f"{b['dispatcher_per_request']:.1f} / {b['callers_per_request']:.1f}",
                     turns["numpy copies"], turns["copy_rows"]])
    serving_table = markdown_table(
        ["load", "numpy copies: master CPU us/req", "copy_rows: us/req", "copy_rows / numpy",
         "numpy: dispatcher / callers", "copy_rows: dispatcher / callers", "numpy, each turn", "copy_rows, each turn"],
        rows, align="lrrrrrll")
    sections = [
        "What is compared: the serving master's input copies made by numpy (which releases the GIL around each "
        "copy of more than 500 elements) and by letcc._core.copy_rows (GIL held below 1 MiB), the same build; "
        f"{args.turns} turns per row, the arms taking turns (A, B, then B, A, ...), each serving row a fresh "
        "process and server; medians over the turns. The machine is shared: read the ratios and the turns.",
        "## One input copy (1x28x28 float32), CPU of the copying thread", copy_table,
        "## CodedServer master CPU per request (LeTCC(8, 16), 784 -> 10 linear model)", serving_table,
        READING,
    ]
    write_report("gil_handoffs", "GIL handoffs on the serving master: numpy's copies vs copy_rows",
                 sections, out_dir=args.out)


if __name__ == "__main__":
    main()
