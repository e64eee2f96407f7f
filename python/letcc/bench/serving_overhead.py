"""Master-side CPU per request of letcc.CodedServer, the master isolated.

The issue's target: master-side cost per request (batching + encode + decode +
bookkeeping, CPU time on the master) under 100 us at K = 8, N = 16 on LeNet-5
inputs (1x28x28 float32, 10 classes). The workers here run a trivial model (a
fixed 784 -> 10 linear map and a softmax in numpy) with no injected delay, so
what is measured is the master: the dispatcher thread's CPU (its own CPU
clock, ``time.pthread_getcpuclockid``) plus the CPU the callers' ``submit`` and
``result`` calls spend (``time.thread_time`` in each calling thread), divided
by the requests answered.

Schemes at N = 16: LeTCC(8, 16), Uncoded(16) behind the balancer,
Replication(8, 2), Hedged(16). Loads:

- full: closed loop, ``--threads`` callers each keeping ``--chunk`` requests
  out (submit a chunk, wait for it, again), so rounds are always full: B groups
  of K with ``max_groups`` = 4 (the server's default) and with 1 (one group of
  K per round: the most rounds per request);
- partial: one caller with one request out (each coded round carries 1
  request, padded to K, and leaves ``max_batch_delay`` after it), and two
  callers (1-2 requests a round).

Breakdown: a second run of each row with the dispatcher's phases wrapped in
``time.thread_time`` deltas (exclusive of the wrapped calls they make), which
adds its own cost (the "instrumented total" column says how much); the phases:
batching/padding (inbox, queue, pad_groups, a task's copy-in), encode, backend
submit (input view, slots, task messages), poll (the wait and the events'
making), event handling (the dispatcher's per-answer work), RoundWaiter
(construction and every call), decode (outputs copy + code.decode), futures
(resolution), stats (counters, the per-loop publish), loop/other (the rest:
the loop itself, dispatch decisions, due times).

    letcc bench serving_overhead        (or python -m letcc.bench.serving_overhead)
    python bench/serving_overhead.py    (a source checkout: bench/results/serving_overhead.md)
    --requests N --schemes letcc,uncoded --profile (cProfile of the dispatcher, top functions)

No torch needed. ``--quick``: few requests, a check that it works here.
"""
from __future__ import annotations

import argparse
import os
import threading
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

from letcc.bench._report import DEFAULT_OUT_DIR, markdown_table, write_report

K, N = 8, 16
SHAPE = (1, 28, 28)
QUICK = {"requests": 400, "partial_requests": 60}
PHASES = ("batching/padding", "encode", "backend submit", "poll", "event handling", "RoundWaiter", "decode",
          "futures", "stats", "loop/other")


class Linear784:
    """(b, 1, 28, 28) -> (b, 10): a fixed linear map and a softmax (a model that costs next to nothing)."""

    def __init__(self):
        rng = np.random.default_rng(0)
        self.W = (rng.standard_normal((784, 10)) * 0.05).astype(np.float32)
        self.c = (rng.standard_normal(10) * 0.1).astype(np.float32)

    def __call__(self, x):
        z = np.asarray(x, dtype=np.float32).reshape(len(x), -1) @ self.W + self.c
        z -= z.max(axis=1, keepdims=True)
        e = np.exp(z)
        return e / e.sum(axis=1, keepdims=True)


def linear_factory():
    return Linear784()


def schemes(names):
    import letcc
    from letcc.serving import Hedged

    make = {"letcc": lambda: letcc.LeTCC(K, N), "uncoded": lambda: letcc.Uncoded(N),
            "replication": lambda: letcc.Replication(K, N // K), "hedged": lambda: Hedged(N)}
    for name in names:
        if name not in make:
            raise ValueError(f"unknown scheme {name!r}: choose from {sorted(make)}")
    return [(name, make[name]) for name in names]


# ---- the phase timer ---------------------------------------------------------

class PhaseTimer:
    """Exclusive thread CPU per phase of the dispatcher thread: each wrapped
    call's thread_time delta minus that of the wrapped calls it makes. Calls
    from other threads pass straight through."""

    def __init__(self):
        self.ident = None
        self.cpu = defaultdict(float)
        self.calls = defaultdict(int)
        self._stack = []
        self._undo = []

    def wrap(self, owner, name, label):
        fn = getattr(owner, name)
        raw = owner.__dict__.get(name, fn) if isinstance(owner, type) else fn
        clock, stack, cpu, calls = time.thread_time, self._stack, self.cpu, self.calls
        get_ident = threading.get_ident
        timer = self

        def timed(*args, **kwargs):
            if get_ident() != timer.ident:
                return fn_call(*args, **kwargs)
            t = clock()
            stack.append(0.0)
            try:
                return fn_call(*args, **kwargs)
            finally:
                spent = clock() - t
                inner = stack.pop()
                cpu[label] += spent - inner
                calls[label] += 1
                if stack:
                    stack[-1] += spent

        fn_call = raw if isinstance(owner, type) else fn
        had = name in owner.__dict__     # a class's inherited method: deleted again by undo
        setattr(owner, name, timed)
        self._undo.append((owner, name, raw, had))

    def undo(self):
        for owner, name, raw, had in reversed(self._undo):
            if had:
                setattr(owner, name, raw)
            else:
                delattr(owner, name)
        self._undo.clear()

    def reset(self):
        self.cpu.clear()
        self.calls.clear()


def instrument(server, timer: PhaseTimer) -> None:
    import letcc.runtime.round as round_mod
    import letcc.serving.coded_rounds as cmod
    from letcc.runtime.virtual_time import CountedRoundWaiter, RoundWaiter

    d, be = server._d, server._d.backend
    timer.wrap(d, "_take_inbox", "batching/padding")
    for name in ("pop", "live", "expire"):
        timer.wrap(d.requests, name, "batching/padding")
    timer.wrap(cmod, "pad_groups", "batching/padding")
    timer.wrap(round_mod, "encode_into", "encode")
    for name in ("submit", "set_input_slots", "input_view", "cancel"):
        timer.wrap(be, name, "backend submit")
    for name in ("poll", "arm"):
        timer.wrap(be, name, "poll")
    timer.wrap(d, "_events", "event handling")
    for cls in (RoundWaiter, CountedRoundWaiter):     # the Python waiter, the compiled one
        for name in ("__init__", "result", "results", "fail", "decide", "next_change", "hung", "decodable",
                     "answers_needed"):
            if hasattr(cls, name):
                timer.wrap(cls, name, "RoundWaiter")
    code = d.ctx.engine.code
    if hasattr(code, "decode"):          # Hedged is no code: nothing to decode
        timer.wrap(code, "decode", "decode")
    timer.wrap(be, "outputs", "decode")
    timer.wrap(d.requests, "fail", "futures")
    timer.wrap(d.requests, "resolve_rows", "futures")
    timer.wrap(d.stats, "add", "stats")
    # once per loop iteration (its own time stays in loop/other): the iterations a round takes
    timer.wrap(d.mode, "check", "loop/other")
    timer.wrap(d, "_publish", "stats")


# ---- the loads ---------------------------------------------------------------

def dispatcher_clock(server):
    return time.pthread_getcpuclockid(server._thread.ident)


def drive(server, X, n_requests, threads, chunk):
    """Closed loop: `threads` callers, each with up to `chunk` requests out,
    until n_requests were answered. (wall s, callers' CPU s, answers)."""
    per = [n_requests // threads + (i < n_requests % threads) for i in range(threads)]
    cpu = [0.0] * threads
    errors = []
    start = threading.Barrier(threads + 1)

    def caller(i):
        rng = np.random.default_rng(100 + i)
        start.wait()
        c0 = time.thread_time()
        left = per[i]
        try:
            while left > 0:
                m = min(chunk, left)
                idx = rng.integers(0, len(X), m)
                futs = [server.submit(X[k]) for k in idx]
                for f in futs:
                    f.result(300)
                left -= m
        except BaseException as exc:       # reported after the join
            errors.append(exc)
        cpu[i] = time.thread_time() - c0

    ts = [threading.Thread(target=caller, args=(i,), daemon=True) for i in range(threads)]
    for t in ts:
        t.start()
    start.wait()
    t0 = time.perf_counter()
    for t in ts:
        t.join()
    wall = time.perf_counter() - t0
    if errors:
        raise errors[0]
    return wall, sum(cpu)


def measure(server, X, n_requests, threads, chunk):
    """One measured stretch: per-request master CPU (dispatcher + callers), per round, fill."""
    clock = dispatcher_clock(server)
    s0 = server.stats()
    d0 = time.clock_gettime(clock)
    wall, callers = drive(server, X, n_requests, threads, chunk)
    d1 = time.clock_gettime(clock)
    s1 = server.stats()
    done = s1["completed"] - s0["completed"]
    rounds = s1["rounds"] - s0["rounds"]
    disp = d1 - d0
    return dict(requests=done, rounds=rounds, wall=wall, dispatcher=disp, callers=callers,
                per_request=(disp + callers) / done, per_round=(disp + callers) / max(rounds, 1),
                dispatcher_per_request=disp / done, callers_per_request=callers / done,
                per_round_requests=done / max(rounds, 1))


LOADS = {
    # name: (threads, chunk, max_groups)
    "full-B4": (4, 64, 4),        # full rounds of up to 4 groups of K
    "full-B1": (4, 64, 1),        # full rounds of one group of K
    "partial-1": (1, 1, 4),       # one request out: 1 per round
    "partial-2": (2, 1, 4),       # two callers: 1-2 per round
}


def run_row(make_code, load, n_requests, X, *, breakdown, profile=False):
    from letcc.serving import CodedServer

    threads, chunk, groups = LOADS[load]
    code = make_code()
    out = {}
    with CodedServer(linear_factory, code, threads_per_worker=1, max_batch_delay=0.002, max_groups=groups,
                     seed=1) as server:
        for f in [server.submit(x) for x in X[:64]]:            # warm-up: probe, caches
            f.result(300)
        drive(server, X, min(n_requests, 200), threads, chunk)
        out["plain"] = measure(server, X, n_requests, threads, chunk)
        if breakdown:
            timer = PhaseTimer()
            timer.ident = server._thread.ident
            instrument(server, timer)
            try:
                m = measure(server, X, n_requests, threads, chunk)
            finally:
                timer.undo()
            m["phases"] = {p: timer.cpu.get(p, 0.0) / m["requests"] for p in PHASES[:-1]}
            m["phases"]["loop/other"] = m["dispatcher_per_request"] - sum(m["phases"].values())
            m["loops_per_round"] = timer.calls.get("loop/other", 0) / max(m["rounds"], 1)
            out["timed"] = m
        if profile:
            out["profile"] = profile_dispatcher(server, X, n_requests, threads, chunk)
    return out


def profile_dispatcher(server, X, n_requests, threads, chunk, top=30):
    """cProfile of the dispatcher thread over one stretch of the load (top functions by own time)."""
    import cProfile
    import io
    import pstats

    prof = cProfile.Profile(time.thread_time)     # CPU, not wall: the workers preempt this thread
    # the profiler is switched on and off by the dispatcher thread itself, in
    # its next poll (cProfile profiles the thread that enables it)
    be = server._d.backend
    poll = be.poll
    state = {"on": False}

    def poll_profiled(timeout):
        if not state["on"] and threading.get_ident() == server._thread.ident:
            state["on"] = True
            prof.enable()
        return poll(timeout)

    be.poll = poll_profiled
    try:
        drive(server, X, n_requests, threads, chunk)
    finally:
        be.poll = poll
        done = threading.Event()

        def poll_off(timeout):
            if threading.get_ident() == server._thread.ident:
                prof.disable()
                be.poll = poll
                done.set()
            return poll(timeout)
        be.poll = poll_off
        be.wake()
        done.wait(10)
    s = io.StringIO()
    pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(top)
    return s.getvalue()


# ---- the report --------------------------------------------------------------

def build_parser(default_out: Path = DEFAULT_OUT_DIR) -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="letcc bench serving_overhead", description=__doc__.split("\n")[0])
    ap.add_argument("--requests", type=int, default=4000, help="requests per full-round row (default 4000)")
    ap.add_argument("--partial-requests", type=int, default=400, help="requests per partial-round row")
    ap.add_argument("--schemes", default="letcc,uncoded,replication,hedged")
    ap.add_argument("--loads", default=",".join(LOADS), help="comma-separated, from: " + ", ".join(LOADS))
    ap.add_argument("--no-breakdown", action="store_true", help="skip the instrumented run of each row")
    ap.add_argument("--profile", action="store_true", help="print a cProfile of the dispatcher per row")
    ap.add_argument("--quick", action="store_true", help="few requests: a check that it works here")
    ap.add_argument("--out", type=Path, default=default_out,
                    help=f"folder for the results file (default ./{default_out}, created)")
    ap.add_argument("--name", default="serving_overhead", help="results file <out>/<name>.md")
    return ap


def main(argv=None, *, default_out: Path = DEFAULT_OUT_DIR) -> Path:
    args = build_parser(default_out).parse_args(argv)
    if args.quick:
        args.requests, args.partial_requests = QUICK["requests"], QUICK["partial_requests"]
    loads = [s.strip() for s in args.loads.split(",") if s.strip()]
    for load in loads:
        if load not in LOADS:
            raise ValueError(f"unknown load {load!r}: choose from {list(LOADS)}")
    X = np.random.default_rng(7).random((512,) + SHAPE, dtype=np.float32)
    load_before = os.getloadavg()
    rows = []
    for name, make in schemes([s.strip() for s in args.schemes.split(",") if s.strip()]):
        for load in loads:
            n = args.requests if load.startswith("full") else args.partial_requests
            t = time.perf_counter()
            res = run_row(make, load, n, X, breakdown=not args.no_breakdown, profile=args.profile)
            p = res["plain"]
            rows.append((name, load, res))
            print(f"{name:12s} {load:15s} master CPU {p['per_request'] * 1e6:7.1f} us/req "
                  f"(dispatcher {p['dispatcher_per_request'] * 1e6:6.1f}, callers {p['callers_per_request'] * 1e6:5.1f}),"
                  f" {p['per_round'] * 1e6:7.1f} us/round, {p['per_round_requests']:.1f} req/round, "
                  f"{p['requests'] / p['wall']:.0f} req/s [{time.perf_counter() - t:.0f} s]", flush=True)
            if "timed" in res:
                m = res["timed"]
                print("    " + ", ".join(f"{ph} {v * 1e6:.1f}" for ph, v in m["phases"].items())
                      + f"  (instrumented dispatcher {m['dispatcher_per_request'] * 1e6:.1f} us/req; "
                  f"{m['loops_per_round']:.1f} loop iterations per round)", flush=True)
            if "profile" in res:
                print(res["profile"])
    return write_results(rows, args, load_before, os.getloadavg())


def write_results(rows, args, load_before, load_after) -> Path:
    head = ["scheme", "load", "req/round", "req/s", "master CPU us/req", "dispatcher", "callers",
            "us/round"]
    table = markdown_table(head, [
        [name, load, f"{r['plain']['per_round_requests']:.1f}", f"{r['plain']['requests'] / r['plain']['wall']:.0f}",
         f"{r['plain']['per_request'] * 1e6:.1f}", f"{r['plain']['dispatcher_per_request'] * 1e6:.1f}",
         f"{r['plain']['callers_per_request'] * 1e6:.1f}", f"{r['plain']['per_round'] * 1e6:.0f}"]
        for name, load, r in rows], align="ll" + "r" * (len(head) - 2))
    sections = [
        f"Generated by `letcc bench serving_overhead` (`--requests {args.requests} --partial-requests "
        f"{args.partial_requests}{' --quick' if args.quick else ''}`). Load average before / after: "
        f"{load_before[0]:.1f} / {load_after[0]:.1f} (the machine is shared).",
        *(["**`--quick` run**: few requests, a check that the benchmark works here; noisy numbers."]
          if args.quick else []),
        "K = 8, N = 16, inputs 1x28x28 float32, the workers' model a 784 -> 10 linear map + softmax "
        "(numpy, 1 thread), no injected delay. Master CPU per request = (dispatcher thread CPU + the callers' "
        "submit/result CPU) / requests answered. Target (issue 18): under 100 us at full rounds.",
        "## Master CPU", table,
    ]
    timed = [(n, load, r["timed"]) for n, load, r in rows if "timed" in r]
    if timed:
        sections += [
            "## Dispatcher breakdown (us per request, exclusive thread CPU per phase; instrumented run)",
            "Each phase's wrapped calls add their own cost (two clock reads and a Python call each): "
            "compare 'instrumented' with the dispatcher column above.",
            markdown_table(["scheme", "load", *PHASES, "instrumented", "plain", "loops/round"], [
                [n, load, *(f"{m['phases'][p] * 1e6:.1f}" for p in PHASES),
                 f"{m['dispatcher_per_request'] * 1e6:.1f}",
                 f"{next(r for nn, ll, r in rows if nn == n and ll == load)['plain']['dispatcher_per_request'] * 1e6:.1f}",
                 f"{m['loops_per_round']:.1f}"]
                for n, load, m in timed], align="ll" + "r" * (len(PHASES) + 3)),
        ]
    return write_report(args.name, "Serving: master CPU per request", sections, out_dir=args.out)


if __name__ == "__main__":
    main()
