"""Master-side overhead per round of letcc.CodedInference, local vs Ray vs a threads floor.

One file (~530 lines) on purpose, as every benchmark here: the three backends' loops
are timed the same way and read side by side; the shared table/CPU helpers are
already out (letcc.bench._report).

Overhead = (time from submit to the decoded result) - (the (N-S)-th smallest
injected delay), i.e. what the machinery adds on top of waiting for the
(N-S)-th worker. Inputs are 3x224x224 float32 images, K = N/2 per round,
S = N/4 stragglers, N in {4, 16}; the code is LeTCC(K, N) (default lam policy).
The model is deliberately cheap (per-channel global average pool and a 3->10
linear head) so the table shows the runtime, not the model.

Delays: ShiftedExponential(shift=2 ms, mean extra 1 ms, stragglers=S), applied
as real sleeps inside the workers (simulate="sleep"); every backend sees the same
delay draws (same seed). Also "virtual" rows: delays applied on the master as
virtual release times (FixedCount(S): nothing to sleep), where the overhead is
the whole round time.

Backends:
  local   letcc.CodedInference(backend="local"): worker processes, shared memory
  ray     letcc.CodedInference(backend="ray"): one actor per worker
  threads the floor: the same encode, copy into a preallocated buffer, N threads in
          this process (sleep, model, put in a queue), first N - S, decode; no IPC

Run with ``letcc bench runtime`` (or ``python -m letcc.bench.runtime_overhead``; on the
development machine with the BLAS variables unset, as for every benchmark here:
``env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE letcc bench runtime [--rounds R] [--runs K]
[--no-ray]``). It prints each row and writes <out>/runtime_overhead.md (``--out``, default
./letcc-results; ``python bench/runtime_overhead.py`` in a source checkout writes
bench/results/runtime_overhead.md). Ray's rows need the ``ray`` extra (skipped, with a note,
without it). ``--quick``: a few rounds, one run, no Ray: a check that it works here.
"""
from __future__ import annotations

import argparse
import functools
import importlib.util
import os
import queue
import sys
import threading
import time
from pathlib import Path

import numpy as np

import letcc
from letcc.bench._report import DEFAULT_OUT_DIR, blas_summary, write_report
from letcc.stragglers import FixedCount, ShiftedExponential

QUICK = {"rounds": 40, "runs": 1}
SHAPE = (3, 224, 224)
SHIFT, RATE = 0.002, 1000.0          # delays: 2 ms + Exp(mean 1 ms)


class PoolHead:
    """(b, 3, H, W) -> (b, 10): channel means through a fixed linear head."""

    def __init__(self):
        self.W = np.random.default_rng(0).standard_normal((3, 10)).astype(np.float32)

    def __call__(self, x):
        return x.mean(axis=(2, 3)) @ self.W


def pool_head():
    return PoolHead()


class TimedPoolHead(PoolHead):
    """PoolHead that adds its calls and their CPU time (this thread) to its
    worker's row of a shared (N, 2) float64 array: the model's part of the
    workers' CPU, measured where it runs (cold caches, 16 processes)."""

    def __init__(self, spec):
        from letcc.runtime.shm_slots import attach
        from letcc.runtime.worker_main import worker_rank

        super().__init__()
        self._mem = attach(spec)
        self._acc = self._mem.slot(worker_rank(), 1).reshape(2)

    def __call__(self, x):
        c = time.thread_time()
        y = super().__call__(x)
        self._acc[1] += time.thread_time() - c
        self._acc[0] += 1
        return y


class ModelCpu:
    """The shared (N, 2) array [calls, CPU seconds] behind TimedPoolHead."""

    def __init__(self, n_workers):
        from letcc.runtime.shm_slots import SlotArray

        self._arr = SlotArray(f"letcc_bench_{os.getpid()}", n_workers, 1, (2,), np.float64)
        self.view = self._arr.view(1).reshape(n_workers, 2)
        self.view[...] = 0.0

    def factory(self):
        return functools.partial(TimedPoolHead, self._arr.spec)

    def close(self):
        self.view = None
        self._arr.close()


def tiny_head(x):
    """(b, 8) -> (b, 2): next to no compute, for the machinery-only rows."""
    return x[:, :2] * 2.0


def tiny_factory():
    return tiny_head


def delay_model(S):
    return ShiftedExponential(shift=SHIFT, rate=RATE, stragglers=S)


def kth_delay(delays, k):
    return float(np.sort(delays)[k - 1])


# ---- the threads floor -----------------------------------------------------

class ThreadsFloor:
    """The same gather with N threads in this process (no processes, no IPC)."""

    def __init__(self, N, K, S, code, model):
        self.N, self.K, self.S, self.code, self.model = N, K, S, code, model
        self.inputs = np.empty((N, 1) + SHAPE, np.float32)
        self.outputs = np.empty((N, 1, 10), np.float32)
        self.answers = queue.Queue()
        self.tasks = [queue.SimpleQueue() for _ in range(N)]
        self.over = threading.Condition()      # notified when a round is over
        self.cancelled = -1                    # rounds <= this are over
        self.threads = [threading.Thread(target=self._worker, args=(j,), daemon=True) for j in range(N)]
        for t in self.threads:
            t.start()

    def _worker(self, j):
        while True:
            task = self.tasks[j].get()
            if task is None:
                return
            r, delay = task
            with self.over:                    # sleep the delay unless the round ends first
                self.over.wait_for(lambda: self.cancelled >= r, timeout=delay)
            if self.cancelled >= r:
                continue
            self.outputs[j] = self.model(self.inputs[j])
            self.answers.put((r, j))

    def round(self, r, X, delays):
        coded = self.code.encode(np.ascontiguousarray(X.reshape((1, self.K) + SHAPE).swapaxes(0, 1)))
        self.inputs[...] = coded
        for j in range(self.N):
            self.tasks[j].put((r, float(delays[j])))
        got = []
        while len(got) < self.N - self.S:
            rr, j = self.answers.get()
            if rr == r:
                got.append(j)
        with self.over:
            self.cancelled = r
            self.over.notify_all()
        est = self.code.decode(self.outputs[got], got)
        return est.swapaxes(0, 1).reshape(self.K, 10)

    def close(self):
        with self.over:
            self.cancelled = 1 << 60
            self.over.notify_all()
        for q in self.tasks:
            q.put(None)


# ---- measurement --------------------------------------------------------------

def stats(xs):
    xs = np.asarray(xs) * 1e3
    return float(np.median(xs)), float(np.percentile(xs, 99))


def run_runtime(backend, N, K, S, rounds, simulate, X, factory=pool_head):
    """Per-round overhead (s), the mean breakdown of CodedInference and CPU per
    round (master, workers, and the model calls inside the workers: local
    backend with the default model only, else nan)."""
    code = letcc.LeTCC(K, N)
    straggle = delay_model(S) if simulate == "sleep" else FixedCount(S)
    over, enc, wait, dec = [], [], [], []
    timed = ModelCpu(N) if backend == "local" and factory is pool_head else None
    try:
        with letcc.CodedInference(timed.factory() if timed else factory, code, backend=backend,
                                  stragglers=straggle, simulate=simulate, seed=0) as ci:
            return _rounds(ci, backend, N, S, rounds, simulate, X, timed, over, enc, wait, dec)
    finally:
        if timed is not None:
            timed.close()


def _rounds(ci, backend, N, S, rounds, simulate, X, timed, over, enc, wait, dec):
    for _ in range(20):                         # warm-up: probe, page faults, plan caches
        ci(X)
    workers = [p for p in ci.worker_pids() if p] if backend == "local" else []
    model0 = timed.view[:, 1].sum() if timed else float("nan")
    cpu0 = (time.process_time(), cpu_seconds(workers))
    for _ in range(rounds):
        t = time.perf_counter()
        ci(X)
        total = time.perf_counter() - t
        info = ci.last_round
        k = N - S
        base = kth_delay(info.delays, k) if simulate == "sleep" else 0.0
        over.append(total - base)
        enc.append(info.t_encode)
        wait.append(info.t_wait - base)
        dec.append(info.t_decode)
    cpu = ((time.process_time() - cpu0[0]) / rounds,
           (cpu_seconds(workers) - cpu0[1]) / rounds if workers else float("nan"),
           (timed.view[:, 1].sum() - model0) / rounds if timed else float("nan"))
    return over, enc, wait, dec, cpu


def cpu_seconds(pids):
    """User + system CPU seconds of these processes (all their threads) from
    /proc; nan where /proc is missing. Clock ticks are 10 ms: meaningful over
    hundreds of rounds, not per round."""
    total = 0
    try:
        for pid in pids:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
    except (OSError, IndexError, ValueError):
        return float("nan")
    return total / os.sysconf("SC_CLK_TCK")


# ---- the bare pipes floor ----------------------------------------------------

_ECHO = "import os, sys\nr, w = int(sys.argv[1]), int(sys.argv[2])\nwhile os.read(r, 1) == b'x':\n    os.write(w, b'd')\n"


def bare_pipes(n_workers, rounds):
    """One byte to each of n_workers processes and one byte back, through pipes,
    with no Python framework around it (os.write / os.read in a loop): the
    kernel's and the hypervisor's part of a round's wake-ups. Returns the median
    round (s) and the master's and the workers' CPU seconds per round."""
    import selectors
    import subprocess

    procs, to_w, from_w = [], [], []
    sel = selectors.DefaultSelector()
    try:
        for _ in range(n_workers):
            r1, w1 = os.pipe()
            r2, w2 = os.pipe()
            procs.append(subprocess.Popen([sys.executable, "-c", _ECHO, str(r1), str(w2)], pass_fds=(r1, w2)))
            os.close(r1)
            os.close(w2)
            to_w.append(w1)
            from_w.append(r2)
            sel.register(r2, selectors.EVENT_READ)

        def one_round():
            for fd in to_w:
                os.write(fd, b"x")
            got = 0
            while got < n_workers:
                for key, _ in sel.select():
                    got += len(os.read(key.fd, 64))

        for _ in range(50):
            one_round()
        pids = [p.pid for p in procs]
        c0 = (cpu_seconds([os.getpid()]), cpu_seconds(pids))
        times = []
        for _ in range(rounds):
            t = time.perf_counter()
            one_round()
            times.append(time.perf_counter() - t)
        cpu = ((cpu_seconds([os.getpid()]) - c0[0]) / rounds, (cpu_seconds(pids) - c0[1]) / rounds)
        return float(np.median(times)), cpu
    finally:
        for fd in to_w:
            os.close(fd)                    # EOF: the echo loops end
        for p in procs:
            p.wait(timeout=10)
        for fd in from_w:
            sel.unregister(fd)
            os.close(fd)


def run_threads(N, K, S, rounds, simulate, X):
    code = letcc.LeTCC(K, N)
    floor = ThreadsFloor(N, K, S, code, pool_head())
    rng = np.random.default_rng(0)
    model = delay_model(S) if simulate == "sleep" else FixedCount(S)
    over = []
    try:
        for r in range(rounds + 20):
            draw = model.sample(N, rng)
            delays = np.where(np.isinf(draw.delays), 3600.0, draw.delays) if simulate == "sleep" else \
                np.where(np.isinf(draw.delays), 3600.0, 0.0)
            t = time.perf_counter()
            floor.round(r, X, delays)
            total = time.perf_counter() - t
            if r >= 20:
                over.append(total - (kth_delay(delays, N - S) if simulate == "sleep" else 0.0))
    finally:
        floor.close()
    return over


def build_parser(default_out: Path = DEFAULT_OUT_DIR) -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="letcc bench runtime", description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=300)
    ap.add_argument("--ray-rounds", type=int, default=100)
    ap.add_argument("--no-ray", action="store_true")
    ap.add_argument("--runs", type=int, default=3,
                    help="measure the local and threads rows this many times, taking turns (the table shows the "
                         "median over the runs; the machine is shared, one run can fall on a busy minute)")
    ap.add_argument("--quick", action="store_true",
                    help=f"{QUICK['rounds']} rounds, one run, no Ray: checks that the benchmark works here, "
                         "not how fast letcc is")
    ap.add_argument("--out", type=Path, default=default_out,
                    help=f"folder for the results file (default ./{default_out}, created)")
    ap.add_argument("--name", default="runtime_overhead",
                    help="results file <out>/<name>.md (default runtime_overhead)")
    return ap


def main(argv=None, *, default_out: Path = DEFAULT_OUT_DIR) -> Path:
    """Run the benchmark, print its rows, write ``<out>/<name>.md`` and return its path."""
    args = build_parser(default_out).parse_args(argv)
    if args.quick:
        args.rounds, args.runs, args.no_ray = QUICK["rounds"], QUICK["runs"], True
    ray_note = None
    if not args.no_ray and importlib.util.find_spec("ray") is None:
        args.no_ray = True
        ray_note = 'Ray\'s rows skipped: ray is not installed (pip install "letcc[ray]").'
    print(f"BLAS: {blas_summary()}; letcc kernels: {letcc.kernel_isa()}, {letcc.get_num_threads()} threads")
    load_before = os.getloadavg()
    rows = []
    backends = ["local", "threads"]

    def measure(backends, rounds):
        for N in (4, 16):
            K, S = N // 2, N // 4
            X = np.random.default_rng(1).standard_normal((K,) + SHAPE).astype(np.float32)
            for simulate in ("sleep", "virtual"):
                for backend in backends:
                    t0 = time.perf_counter()
                    if backend == "threads":
                        c0 = cpu_seconds([os.getpid()])
                        over = run_threads(N, K, S, rounds, simulate, X)
                        cpu = ((cpu_seconds([os.getpid()]) - c0) / (rounds + 20), float("nan"), float("nan"))
                        enc = wait = dec = None
                    else:
                        over, enc, wait, dec, cpu = run_runtime(backend, N, K, S, rounds, simulate, X)
                    med, p99 = stats(over)
                    row = dict(N=N, K=K, S=S, simulate=simulate, backend=backend, rounds=rounds, median=med,
                               p99=p99, enc=np.median(enc) * 1e3 if enc else float("nan"),
                               wait=np.median(wait) * 1e3 if wait else float("nan"),
                               dec=np.median(dec) * 1e3 if dec else float("nan"),
                               cpu_master=cpu[0] * 1e3, cpu_workers=cpu[1] * 1e3, cpu_model=cpu[2] * 1e3)
                    rows.append(row)
                    print(f"N={N:2d} {simulate:7s} {backend:7s} overhead median {med:7.2f} ms  p99 {p99:7.2f} ms   "
                          f"(encode {row['enc']:.2f}, wait-beyond-delay {row['wait']:.2f}, decode {row['dec']:.2f}; "
                          f"CPU master {row['cpu_master']:.2f}, workers {row['cpu_workers']:.2f}, of which the "
                          f"model {row['cpu_model']:.2f}) [{time.perf_counter() - t0:.0f} s]", flush=True)

    # The local backend and the threads floor first, with no Ray daemons
    # (GCS, raylet, idle actors) running beside them on the 2 cores; Ray's
    # rows last, between ray.init and ray.shutdown.
    for _ in range(max(1, args.runs)):
        measure(backends, args.rounds)
    rows[:] = combine_runs(rows)
    # the machinery alone: 8-float inputs and a trivial model, so encode, decode
    # and the model cost next to nothing and what is left is processes, pipes,
    # wake-ups and the master's own Python; N = 64 for the scaling with N
    machinery = []
    for N in (4, 16, 64):
        row = machinery_row(N, args.rounds)
        machinery.append(row)
        print(f"N={N:2d} virtual local, 8-float inputs, trivial model: median {row['median']:.2f} ms  p99 "
              f"{row['p99']:.2f} ms (wait {row['wait']:.2f}; CPU per round: master {row['cpu_master']:.2f}, workers "
              f"{row['cpu_workers']:.2f} ms); bare pipes to {row['sent']} processes: {row['bare']:.3f} ms (CPU "
              f"master {row['bare_master']:.3f}, workers {row['bare_workers']:.3f} ms)", flush=True)
    # idle workers spinning before they sleep (LETCC_WORKER_SPIN_US) against
    # sleeping at once: the round's wall and CPU, and what 16 waiting workers burn
    spin = []
    for us in SPIN_US:
        row = spin_row(16, us, args.rounds, IDLE_S if not args.quick else 1.0)
        spin.append(row)
        print(f"N=16 spin {us:3d} us: median {row['median']:.2f} ms  p99 {row['p99']:.2f} ms (CPU per round: master "
              f"{row['cpu_master']:.2f}, workers {row['cpu_workers']:.2f} ms); 16 idle workers: "
              f"{row['idle_pct']:.2f}% of one core", flush=True)
    # encode alone: into a new array, the copy of that into the slots, straight
    # into a preallocated buffer (what CodedInference does when every worker
    # is sent the round) and the 12 rows of the workers a virtual round is sent
    # to (encode(rows=...), what it does with S = 4 never-answering workers)
    code = letcc.LeTCC(8, 16)
    X = np.random.default_rng(1).standard_normal((8, 1) + SHAPE).astype(np.float32)
    buf = np.empty((16, 1) + SHAPE, np.float32)
    sent = [0, 1, 2, 4, 5, 6, 8, 9, 11, 12, 13, 15]
    t_enc, t_copy, t_into, t_rows = [], [], [], []
    cpu_into = cpu_rows = 0.0
    for _ in range(100):
        t = time.perf_counter()
        coded = code.encode(X)
        t_enc.append(time.perf_counter() - t)
        t = time.perf_counter()
        buf[...] = coded
        t_copy.append(time.perf_counter() - t)
        t, c = time.perf_counter(), time.process_time()
        code.encode(X, out=buf)
        t_into.append(time.perf_counter() - t)
        cpu_into += time.process_time() - c
        t, c = time.perf_counter(), time.process_time()
        code.encode(X, out=buf[:12], rows=sent)
        t_rows.append(time.perf_counter() - t)
        cpu_rows += time.process_time() - c
    enc_line = (f"LeTCC(8, 16) encode of 8 x 3x224x224 float32: {np.median(t_enc) * 1e3:.2f} ms; copying the "
                f"9.6 MB result into the slots: {np.median(t_copy) * 1e3:.2f} ms; writing straight into a "
                f"preallocated buffer (out=, what CodedInference does when it sends every worker the round): "
                f"{np.median(t_into) * 1e3:.2f} ms, {cpu_into / 100 * 1e3:.2f} ms CPU; the 12 workers of a round "
                f"with 4 never-answering ones only (rows=, the virtual rows above): {np.median(t_rows) * 1e3:.2f} "
                f"ms, {cpu_rows / 100 * 1e3:.2f} ms CPU (medians; CPU: {letcc.get_num_threads()} threads, mean)")
    print(enc_line)
    load_after = os.getloadavg()
    if not args.no_ray:
        import ray

        os.environ.setdefault("RAY_AUTH_MODE", "disabled")
        ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False)
        try:
            measure(["ray"], args.ray_rounds)
        finally:
            ray.shutdown()
    order = {"local": 0, "threads": 1, "ray": 2}
    rows.sort(key=lambda r: (r["N"], r["simulate"], order[r["backend"]]))
    return write_results(rows, args, load_before, load_after, enc_line, machinery, ray_note, spin)


# spins compared (microseconds; 0 is the default) and the idle stretch measured
SPIN_US = (0, 20, 100)
IDLE_S = 5.0


def machinery_row(N, rounds):
    """One machinery row: LeTCC(N/2, N), N/4 virtual stragglers, the trivial
    model on 8-float inputs, and the bare-pipes floor for the same N - S processes."""
    K, S = N // 2, N // 4
    Xt = np.random.default_rng(1).standard_normal((K, 8)).astype(np.float32)
    over, enc, wait, dec, cpu = run_runtime("local", N, K, S, rounds, "virtual", Xt, factory=tiny_factory)
    med, p99 = stats(over)
    bare, bare_cpu = bare_pipes(N - S, max(rounds, 3000))   # cheap: enough rounds for 10 ms CPU ticks
    return dict(N=N, sent=N - S, median=med, p99=p99, wait=np.median(wait) * 1e3, cpu_master=cpu[0] * 1e3,
                cpu_workers=cpu[1] * 1e3, bare=bare * 1e3, bare_master=bare_cpu[0] * 1e3,
                bare_workers=bare_cpu[1] * 1e3)


def plain_row(N, rounds):
    """The trivial round without a straggler model: LeTCC(N/2, N), every worker
    sent the round and all N answers awaited, the same answering set (and so
    the same cached decoder) every round: what a round costs when nothing is
    simulated. Round wall (median, p99, ms) and master CPU per round (ms)."""
    K = N // 2
    Xt = np.random.default_rng(1).standard_normal((K, 8)).astype(np.float32)
    ts = []
    with letcc.CodedInference(tiny_factory, letcc.LeTCC(K, N), backend="local", seed=0) as ci:
        for _ in range(20):
            ci(Xt)
        c0 = time.process_time()
        for _ in range(rounds):
            t = time.perf_counter()
            ci(Xt)
            ts.append(time.perf_counter() - t)
        cpu = (time.process_time() - c0) / rounds
    med, p99 = stats(ts)
    return dict(N=N, median=med, p99=p99, cpu_master=cpu * 1e3)


def spin_row(N, spin_us, rounds, idle_s):
    """The machinery row's round at N with LETCC_WORKER_SPIN_US = spin_us (read
    when the workers start), then the CPU the N workers burn while
    nothing is submitted for idle_s seconds (% of one core, all of them)."""
    K, S = N // 2, N // 4
    Xt = np.random.default_rng(1).standard_normal((K, 8)).astype(np.float32)
    old = os.environ.get("LETCC_WORKER_SPIN_US")
    os.environ["LETCC_WORKER_SPIN_US"] = str(spin_us)
    try:
        over, enc, wait, dec = [], [], [], []
        with letcc.CodedInference(tiny_factory, letcc.LeTCC(K, N), backend="local", stragglers=FixedCount(S),
                                  simulate="virtual", seed=0) as ci:
            _, _, _, _, cpu = _rounds(ci, "local", N, S, rounds, "virtual", Xt, None, over, enc, wait, dec)
            workers = [p for p in ci.worker_pids() if p]
            time.sleep(0.2)                     # past any spin after the last round
            c0 = cpu_seconds(workers)
            time.sleep(idle_s)
            idle = (cpu_seconds(workers) - c0) / idle_s
    finally:
        if old is None:
            os.environ.pop("LETCC_WORKER_SPIN_US", None)
        else:
            os.environ["LETCC_WORKER_SPIN_US"] = old
    med, p99 = stats(over)
    return dict(spin=spin_us, median=med, p99=p99, cpu_master=cpu[0] * 1e3, cpu_workers=cpu[1] * 1e3,
                idle_pct=idle * 100.0)


def combine_runs(rows):
    """One row per (N, delays, backend): the median over the runs of each
    column; `runs` keeps every run's median and p99."""
    keyed = {}
    for r in rows:
        keyed.setdefault((r["N"], r["simulate"], r["backend"]), []).append(r)
    out = []
    for same in keyed.values():
        row = dict(same[0])
        for col in ("median", "p99", "enc", "wait", "dec", "cpu_master", "cpu_workers", "cpu_model"):
            row[col] = float(np.median([r[col] for r in same]))
        row["runs"] = [(r["median"], r["p99"]) for r in same]
        out.append(row)
    return out


def write_results(rows, args, load_before, load_after, enc_line, machinery=(), ray_note=None,
                  spin=()) -> Path:
    lines = [
        "Generated by `letcc bench runtime` "
        f"(`--rounds {args.rounds} --ray-rounds {args.ray_rounds} --runs {args.runs}"
        f"{' --no-ray' if args.no_ray else ''}{' --quick' if args.quick else ''}`). "
        f"Load average before / after: "
        f"{load_before[0]:.1f} / {load_after[0]:.1f} around the local and threads rows (the machine is shared). "
        "Ray's daemons were started only after those rows, for its own, and shut down after them.",
        "",
        *([ray_note, ""] if ray_note else []),
        *(["**`--quick` run**: few rounds, one run, no Ray: a check that the benchmark works on this machine; "
           "its numbers are noisier than a full run's.", ""] if args.quick else []),
        "Overhead = submit-to-decoded time minus the (N-S)-th smallest injected delay; 3x224x224 float32 inputs, "
        "K = N/2, S = N/4, LeTCC(K, N), a cheap model (channel means + 3x10 head). `sleep`: ShiftedExponential "
        "delays (2 ms + Exp(1 ms)) slept inside the workers; `virtual`: FixedCount(S) on the master (no delay "
        "to subtract). Breakdown columns (medians, CodedInference's `last_round`): encode (straight into "
        "the slots, the rows of the workers sent the round only), wait beyond the (N-S)-th delay (dispatch, worker compute, gather), decode.",
        "",
        "Target for the local backend at N = 16: median < 2 ms, p99 < 5 ms.",
        "",
        "CPU columns: CPU time per round (user + system, all threads, over all the rounds) of the master "
        "process (time.process_time; the threads floor: the whole process, from /proc) and of the worker "
        "processes together (/proc, 10 ms ticks); on 2 cores "
        "a round cannot take less wall time than (master + workers) / 2. **CPU model**: the part of the "
        "workers' CPU spent inside the model calls (thread CPU time around each call, local backend), i.e. "
        "not the runtime's. With the encode's CPU (last line below the table) it is what a round would cost "
        "on these cores with a runtime that cost nothing.",
        "",
        "| N | delays | backend | median (ms) | p99 (ms) | encode (ms) | wait - delay (ms) | decode (ms) "
        "| CPU master (ms) | CPU workers (ms) | CPU model (ms) | rounds |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]

    def f(v):
        return "-" if not np.isfinite(v) else f"{v:.2f}"
    for r in rows:
        lines.append(f"| {r['N']} | {r['simulate']} | {r['backend']} | {r['median']:.2f} | {r['p99']:.2f} | "
                     f"{f(r['enc'])} | {f(r['wait'])} | {f(r['dec'])} | {f(r['cpu_master'])} | "
                     f"{f(r['cpu_workers'])} | {f(r['cpu_model'])} | {r['rounds']} |")
    lines += [""]
    multi = [r for r in rows if len(r.get("runs", ())) > 1]
    if multi:
        lines += [f"Local and threads rows: the median over {len(multi[0]['runs'])} runs taken in turns (all rows "
                  "of a run, then the next run); each run's median / p99 (ms):", ""]
        for r in multi:
            runs = ", ".join(f"{m:.2f} / {p:.2f}" for m, p in r["runs"])
            lines.append(f"- N = {r['N']}, {r['simulate']}, {r['backend']}: {runs}")
        lines += [""]
    for N in sorted({r["N"] for r in rows}):
        for sim in ("sleep", "virtual"):
            by = {r["backend"]: r for r in rows if r["N"] == N and r["simulate"] == sim}
            if "local" in by and "threads" in by:
                lines.append(f"- N = {N}, {sim}: local minus the threads floor = "
                             f"{by['local']['median'] - by['threads']['median']:+.2f} ms median "
                             "(the cost of processes, pipes and shared memory over the same gather in one process)")
    lines += ["", enc_line, ""]
    if machinery:
        lines += ["The machinery alone (local backend, virtual delays, 8-float inputs and a trivial model, so "
                  "encode, decode and the model cost next to nothing): what processes, pipes, wake-ups and the "
                  "master's Python cost per round. Next to it, the bare pipes floor: one byte to each of the N - S "
                  "processes a round is sent to and one byte back, os.write / os.read in a loop with no Python "
                  "framework (the kernel's and the hypervisor's part of the same wake-ups).", "",
                  "| N | median (ms) | p99 (ms) | wait (ms) | CPU master (ms) | CPU workers (ms) "
                  "| bare pipes round (ms) | bare CPU master (ms) | bare CPU workers (ms) |",
                  "|---|---|---|---|---|---|---|---|---|"]
        lines += [f"| {r['N']} | {r['median']:.2f} | {r['p99']:.2f} | {r['wait']:.2f} | {f(r['cpu_master'])} | "
                  f"{f(r['cpu_workers'])} | {r['bare']:.3f} | {r['bare_master']:.3f} | {r['bare_workers']:.3f} |"
                  for r in machinery]
        lines += [""]
    if spin:
        lines += ["Idle workers spinning before they sleep (`LETCC_WORKER_SPIN_US`, read when the workers "
                  "start; default 0) against sleeping at once: the machinery round at N = 16, and the CPU the 16 "
                  "workers burn together while nothing is submitted (% of one core, over "
                  f"{IDLE_S if not args.quick else 1.0:g} s from /proc, 10 ms ticks). On a machine with fewer cores "
                  "than workers a spinning worker holds a core the master or a busy worker needs.", "",
                  "| spin (us) | median (ms) | p99 (ms) | CPU master (ms) | CPU workers (ms) | idle CPU, 16 workers |",
                  "|---|---|---|---|---|---|"]
        lines += [f"| {r['spin']} | {r['median']:.2f} | {r['p99']:.2f} | {f(r['cpu_master'])} | "
                  f"{f(r['cpu_workers'])} | {r['idle_pct']:.2f}% |" for r in spin]
        lines += [""]
    return write_report(args.name, "Runtime overhead per round", ["\n".join(lines)], out_dir=args.out)


if __name__ == "__main__":
    main()
