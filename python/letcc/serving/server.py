"""CodedServer: single requests in, coded rounds on N workers, futures out.

Data flow (the shape of CPython's concurrent/futures/process.py: callers
only ever touch the inbox and their futures; one dispatcher thread owns the
rest)::

    caller threads                 dispatcher thread (letcc.serving.dispatcher)        N workers
    --------------------------     ------------------------------------------------   -------------
    submit(x[, deadline])
      | Request(x, Future)
      | inbox.put (inbox.py):
      |   full? -> QueueFull
      |   wakes the dispatcher when
      |   its rule says so   ---->  queue (FIFO) ---------+
      |                                                 | round due: K waiting, or
      v                                                 |  max_batch_delay after the oldest
    Future                                              v
                                   coded: B groups of K (last one padded) -> encode into a
                                     free ring slot -> submit(round, ring) -------------> task queue
                                   task (Uncoded, Hedged): up to max_groups requests ->    (in order;
                                     least-loaded worker [hedge: a 2nd copy later] ----->  cancelled
                                   poll(): answers, deaths, wake-ups   <-------------- done   ones dropped)
                                   decided (wait_for answers / complete / all) or a
                                     request's deadline -> decode what arrived
                                   -> fut.set_result(estimate) | TimeoutError | error
    fut.result() / await infer()   late workers cancelled; ring slot free; dead workers replaced

Up to ``rounds_in_flight`` rounds (task mode: tasks per worker) are out at
once; each worker works through its tasks in order and drops those no longer
wanted; answers carry their round id, so a late answer of an old round is
never mixed into a newer one (it is counted as stale). ``close()`` drains,
``close(cancel=True)`` cancels what was not dispatched; both stop every worker
process and unlink every shared-memory segment, as does leaving the ``with``
block on an exception (Ctrl-C included: then queued requests are cancelled,
and the rounds in flight get 5 s to finish). Python keeps SIGINT ignored in a
process started with it ignored (a background job of a non-interactive shell,
nohup): there Ctrl-C never reaches the server; ``signal.signal(signal.SIGINT,
signal.default_int_handler)`` in the script brings it back.
"""
from __future__ import annotations

import asyncio
import math
import threading
import time
import weakref
from concurrent.futures import Future

import numpy as np

from letcc._checks import as_int, as_real
from letcc.codes import Replication, Uncoded, check_code
from letcc.runtime._devices import resolve_devices
from letcc.runtime.quarantine import as_quarantine
from letcc.serving.flights import Request, input_copy
from letcc.serving.hedged import Hedged
from letcc.serving.inbox import QueueFull
from letcc.serving.stats import ServerStats
from letcc.stragglers import check_stragglers, delay_sampler

__all__ = ["CodedServer", "QueueFull", "DEFAULT_ROUNDS_IN_FLIGHT"]

# coded rounds: measured in bench/serving.py (bench/results/serving.md, "rounds in
# flight": LeTCC(8, 16), LeNet-5, Pareto, 200 req/s: 1 gave the lowest p50, p99 and
# p99.9, before and after the output-slot fix)
DEFAULT_ROUNDS_IN_FLIGHT = 1
# task mode (Uncoded behind the balancer, Hedged): tasks queued per worker; not
# swept, kept at 2 so a worker has its next task in hand when it answers
DEFAULT_TASKS_IN_FLIGHT = 2


def _is_torch(x) -> bool:
    return type(x).__module__.startswith("torch") and hasattr(x, "detach")


def _default_count(code, stragglers, wait_for):
    if wait_for is not None:
        return as_int(wait_for, "wait_for", 1, code.N)
    count = stragglers.wait_count(code.N) if stragglers is not None else None
    if count is not None:
        return count
    if isinstance(code, Replication):
        return None                 # first copy of every input (is_complete)
    return code.N - code.N // 4     # no recovery threshold: the first 3/4 of the answers


class CodedServer:
    """Serve ``model_factory()`` on N workers through ``code``, one request at a time.

    Parameters
    ----------
    model_factory, backend, devices : as for ``letcc.CodedInference``
    code : LeTCC, BACC, Replication (coded rounds of K requests on N workers),
        Uncoded (each request to one of N = K workers, least loaded first: a
        load balancer) or ``letcc.serving.Hedged`` (the same, plus a second copy
        after a percentile of recent latencies)
    stragglers : letcc.stragglers model or None. Its delays are real sleeps in
        the workers, drawn per round (per task in task mode); its ``wait_count``
        is the waiting rule unless ``wait_for`` is given.
    max_batch_delay : seconds a partly filled round waits for more requests
    max_queue : requests that may wait undispatched; one more raises ``QueueFull``
    deadline : default per-request budget in seconds after submit (None: none)
    rounds_in_flight : rounds dispatched and not yet decided (task mode: tasks per
        worker); default ``DEFAULT_ROUNDS_IN_FLIGHT`` = 1 for coded rounds
        (measured), ``DEFAULT_TASKS_IN_FLIGHT`` = 2 in task mode
    max_groups : at most this many groups of K in one round (rows per worker)
    wait_for : decode once this many workers answered (and the code can decode
        them); default the straggler model's count, else every input covered
        for Replication, else N - N // 4
    seed : the straggler draws' randomness
    fallback_after : systematic codes only (``LeTCC(K, N, systematic=True)``,
        ``BACC(K, N, systematic=True)``): a request resolves exactly as soon as its
        own worker answers; one still pending at its fallback time resolves with
        the decode of what has arrived (flagged approximate: ``submit(x,
        info=True)``). The fallback time: ``fallback_after`` seconds after
        dispatch, or ``"pNN"``, the NN-th percentile of recent answer times (as
        ``Hedged`` does), and never later than the request's deadline; None (the
        default): the deadline, or when the round's waiting rule (``wait_for``)
        decides. See letcc.serving.systematic.
    hedge_after : systematic codes only: seconds after dispatch, or ``"pNN"`` (a
        percentile of recent answer times), after which the systematic task of a
        request still pending gets a second copy, uncoded, on a worker with
        nothing on its hands; the first of its answers wins (exact), the
        fallback decode still comes at the fallback time. None: no hedging.
    quarantine : None (default), True or a ``letcc.runtime.Quarantine``, for a
        code with adversaries >= 1: workers the code keeps flagging sit out later
        rounds (as for ``CodedInference``); ``stats()["quarantined"]`` is {worker:
        rounds it still sits out}, ``stats()["quarantines"]`` how many were imposed
    hang_timeout, startup_timeout, chunk_rows, threads_per_worker, start_method,
    ray_options : as for ``CodedInference``
    """

    def __init__(self, model_factory, code, backend: str = "local", devices=None, stragglers=None,
                 max_batch_delay: float = 0.002, max_queue: int = 4096, deadline=None, *,
                 rounds_in_flight: int | None = None, max_groups: int = 4, wait_for=None, seed=None,
                 hang_timeout: float = 60.0, startup_timeout: float = 120.0, chunk_rows: int | None = None,
                 threads_per_worker: int | None = None, start_method: str | None = None,
                 ray_options: dict | None = None, fallback_after=None, hedge_after=None, quarantine=None):
        if not callable(model_factory):
            raise TypeError(f"model_factory must be a callable that builds the model, got {model_factory!r}")
        if isinstance(code, Hedged):
            mode = "hedge"
        else:
            check_code(code)
            mode = "balance" if isinstance(code, Uncoded) else "coded"
        if backend not in ("local", "ray"):
            raise ValueError(f"backend must be 'local' or 'ray', got {backend!r}")
        check_stragglers(stragglers)
        self.code, self.mode = code, mode
        self.max_queue = as_int(max_queue, "max_queue", 1)
        self.deadline = None if deadline is None else as_real(deadline, "deadline", 0, strict=True, finite=False)
        if rounds_in_flight is None:
            R = DEFAULT_ROUNDS_IN_FLIGHT if mode == "coded" else DEFAULT_TASKS_IN_FLIGHT
        else:
            R = as_int(rounds_in_flight, "rounds_in_flight", 1)
        self.rounds_in_flight = R
        self._stats = ServerStats()
        from letcc.serving.dispatcher import Dispatcher

        self._d = Dispatcher(
            model_factory, code, mode, backend=backend, devices=resolve_devices(devices, code.N),
            threads_per_worker=threads_per_worker, start_method=start_method,
            chunk_rows=None if chunk_rows is None else as_int(chunk_rows, "chunk_rows", 1),
            ray_options=ray_options, draw_delays=None if stragglers is None else delay_sampler(stragglers),
            count=None if mode != "coded" else _default_count(code, stragglers, wait_for),
            max_batch_delay=as_real(max_batch_delay, "max_batch_delay", 0),
            max_groups=as_int(max_groups, "max_groups", 1), rounds_in_flight=R,
            hang_timeout=as_real(hang_timeout, "hang_timeout", 0, strict=True, finite=False),
            startup_timeout=as_real(startup_timeout, "startup_timeout", 0, strict=True, finite=False),
            rng=np.random.default_rng(seed), stats=self._stats, max_queue=self.max_queue,
            fallback_after=self._systematic_only(code, mode, "fallback_after", fallback_after),
            hedge_after=self._systematic_only(code, mode, "hedge_after", hedge_after),
            quarantine=self._quarantine(code, mode, quarantine))
        self._inbox = self._d.inbox
        self._thread = threading.Thread(target=self._run, name="letcc-server-dispatcher", daemon=True)
        self._thread.start()
        self._finalizer = weakref.finalize(self, _shutdown, self._d, self._thread)

    @staticmethod
    def _quarantine(code, mode, value):
        if mode != "coded" and value is not None and value is not False:
            raise ValueError(f"quarantine={value!r} needs coded rounds of a code with adversaries >= 1; "
                             f"{code!r} runs tasks")
        return None if mode != "coded" else as_quarantine(value, code)

    @staticmethod
    def _systematic_only(code, mode, name, value):
        if value is not None and (mode != "coded" or code.systematic_workers is None):
            raise ValueError(f"{name}={value!r} needs a systematic code (LeTCC(K, N, systematic=True) "
                             f"or BACC(K, N, systematic=True)); {code!r} has no systematic workers")
        return value

    def _run(self) -> None:
        try:
            self._d.run()
        except BaseException as exc:
            self._inbox.fail(exc)

    # ---- requests -----------------------------------------------------------

    def submit(self, x, deadline=None, info: bool = False) -> Future:
        """Queue ONE input (no leading K axis); a Future of its estimate f(x).

        deadline: seconds after now (default: the server's ``deadline``). When it
        passes, the request's round decodes from the answers in so far; with none,
        the future raises ``TimeoutError``. info=True: the Future gives ``(y,
        info)``, a ``letcc.serving.RequestInfo`` (approximate, latency, the
        answering workers, the round). Raises ``QueueFull`` at once when
        ``max_queue`` requests are waiting. Safe from any thread."""
        if not isinstance(info, bool):
            raise TypeError(f"info must be True or False, got {info!r}")
        t = time.perf_counter()
        xa = self._as_input(x)
        budget = self.deadline if deadline is None else as_real(deadline, "deadline", 0, strict=True, finite=False)
        fut: Future = Future()
        self._inbox.put(Request(xa, fut, t, t + budget if budget is not None else math.inf, want_info=info))
        return fut

    def _as_input(self, x) -> np.ndarray:
        if _is_torch(x):
            x = x.detach().cpu().numpy()
        xa = np.asarray(x)
        dtype = xa.dtype
        if self.mode == "coded" and dtype not in (np.float32, np.float64):
            dtype = np.dtype(np.float64)      # what the codes encode other dtypes into
        shape, dtype = self._inbox.fix_layout(xa.shape, dtype)
        if xa.shape != shape:
            raise ValueError(f"input of shape {xa.shape}: this server serves inputs of shape {shape} "
                             "(one input, no leading batch axis; the first request fixed the shape)")
        return input_copy(xa, dtype)

    def map(self, xs, deadline=None, timeout=None) -> list:
        """The estimates of many inputs, in order (each submitted as a request)."""
        futs = [self.submit(x, deadline) for x in xs]
        end = None if timeout is None else time.monotonic() + timeout
        return [f.result(None if end is None else max(0.0, end - time.monotonic())) for f in futs]

    async def infer(self, x, deadline=None, info: bool = False):
        """``await server.infer(x)`` from a running event loop: the estimate of f(x)
        (with info=True: ``(y, RequestInfo)``)."""
        return await asyncio.wrap_future(self.submit(x, deadline, info))

    # ---- state --------------------------------------------------------------

    def stats(self) -> dict:
        """Request latency quantiles (seconds, submit -> result; recent 200k
        requests), counters (accepted, completed, timeouts, rejections,
        cancelled, errors, rounds, padded_rounds, erasures, stale answers,
        hedges, retried, replaced workers; approximate: answers that were a
        decode's estimate; late_exact: systematic answers that came after their
        request was decoded; flagged: answers a code with adversaries > 0 left
        out, and ``suspected``: {worker: rounds flagged} for workers flagged
        often; with ``quarantine``: ``quarantines`` imposed and ``quarantined``,
        {worker: rounds it still sits out}), batch fill, queue depth, rounds in flight, master CPU per
        request, the last worker errors."""
        out = self._stats.snapshot(self.rounds_in_flight, self.code.N)
        out["queue_depth"] = self._inbox.waiting
        out["accepted"] = self._inbox.accepted
        out["rejections"] = self._inbox.rejected
        out["last_errors"] = list(self._d.errors)[-5:]
        return out

    def worker_pids(self) -> list:
        return self._d.pool.worker_pids()

    @property
    def backend(self):
        return self._d.backend

    # ---- close --------------------------------------------------------------

    def close(self, cancel: bool = False, timeout: float | None = None) -> None:
        """Stop accepting requests; drain (finish every accepted request) or, with
        cancel=True, cancel those not dispatched yet; then stop the workers and
        release shared memory. timeout: seconds to wait for the rounds in
        flight; what is left then fails with RuntimeError. Idempotent."""
        first = self._inbox.close(cancel)
        if not first and not self._thread.is_alive():
            self._finalizer()
            return
        try:
            self._thread.join(timeout)
        finally:
            self._finalizer()

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        self.close(cancel=exc_type is not None, timeout=None if exc_type is None else 5.0)
        return False


def _shutdown(d, thread) -> None:
    """Stop the dispatcher (what it still holds fails with RuntimeError) and the workers."""
    if thread.is_alive() and thread is not threading.current_thread():
        d.inbox.abort()
        thread.join(5.0)
    d.close()
