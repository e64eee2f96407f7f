"""Coded inference on N workers: encode, dispatch, gather the first answers, decode.

Data flow of one round with the local backend (the Ray backend swaps the
slots and pipes for the object store and ``ray.wait``)::

    master process                                         worker process j (x N)
    ----------------------------------------------------   ---------------------------
    ci(X) X: (B*K, ...)
      | groups of K -> (K, B, ...)
    draw: delays of this round (straggler model), its count and deadline
    encode: code.encode(out=, rows=sent) -> input slots (shared memory, one
      |                            segment, (N, B, ...); the workers sent the
      |                            round take the first slots, in order; small
      |                            inputs: every node, worker j's in slot j)
      | [new input layout: one worker probed for the output row shape]
    dispatch:
      | ctl: round wanted from j, j's input slot, a fresh answer count for the round
      | pipe j: task (round, B, sleep, chunk) -------->  recv
      |                                                  [sleep, if simulate="sleep"]
      |                                                  for each chunk of rows:
      |                                                      stop if ctl[j] != round
      |                                                      y = model(its input slot)
      |                                                      output slot j <- y
      |                                                  ctl: j done round, at time t
      |                                                  count += 1 (compare-and-swap)
    gather:
      | sleep until `needed` answers are in  <---------  doorbell, by the one whose
      |   (doorbell pipe; also any message or death)      answer reaches the target
      | v_j = t_j + injected delay (virtual time)
      | RoundWaiter: first N-S confirmed answers, complete, deadline, or all
      | can the answering set be decoded? (asked once)
    decode: code.decode(output slots of the answering set, ascending)
    end (also when a step raised):
      | ctl[late] = -1   (late workers abandon the round at their next check)
      | dead and hung workers' replacements started; last_round recorded
      v
    estimates (B*K, ...)

The steps are CodedInference's (``_draw``, ``_launch``, ``_gather``,
``_decode``, ``_end_round``) on top of the round engine
(letcc.runtime.round.RoundEngine), which the server's dispatcher drives too:
encoding, the probe, submitting, events, hang kills, decoding and their
messages have one home there.

Messages carry the round id; anything from an older round is counted as stale
and dropped (a late worker's output slot is only read after it reports the
current round, and a worker handles its tasks in order). A process that dies,
raises or hangs past ``hang_timeout`` is an erasure for the round; dead and hung
workers are replaced after the round without waiting for the new process to
load its model. Closing (context exit, ``close()``, garbage collection, interpreter
exit) stops the workers and unlinks every shared-memory segment.

One object owns the round state (this module, one round at a time);
``round`` holds the steps of a round; ``worker_pool`` keeps the workers
between rounds; the backends only move bytes and report events, behind
``backend``'s contract; ``virtual_time`` holds the waiting rule;
``round_info`` the record.
"""
from __future__ import annotations

import math
import time
from typing import Any, Callable

import numpy as np

from letcc.adversaries import AdversaryModel, as_adversary_model

from letcc._checks import as_int, as_real
from letcc._typing import Array
from letcc.codes import check_code
from letcc.codes._base import Code
from letcc.runtime._devices import resolve_devices
from letcc.runtime.backend import answer_count
from letcc.runtime.quarantine import as_quarantine
from letcc.runtime.round import Round, RoundEngine, no_delays
from letcc.runtime.round_info import RoundInfo
from letcc.runtime.worker_pool import WorkerPool
from letcc.stragglers import check_stragglers, delay_sampler
from letcc.stragglers._base import StragglerModel

__all__ = ["CodedInference"]

_SIMULATE = ("virtual", "sleep")


def _is_torch(x) -> bool:
    return type(x).__module__.startswith("torch") and hasattr(x, "detach")


def _seconds(value, name: str):
    """A duration argument: a real number > 0 (inf allowed), or None."""
    return None if value is None else as_real(value, name, 0, strict=True, finite=False)


class _Draw:
    """One round's injected delays and waiting rule (CodedInference._draw)."""

    __slots__ = ("delays", "count", "deadline", "never", "virtual", "master_delays", "sleep_s")


class CodedInference:
    """Serve ``model_factory()`` on N workers through ``code``; ``ci(X)`` runs one round.

    Parameters
    ----------
    model_factory : picklable callable
        Called once inside each worker to build its model: a torch ``nn.Module``
        (moved to the worker's device, run under ``torch.inference_mode`` on torch
        tensors) or any callable mapping a numpy batch (b, ...) to (b, ...).
    code : LeTCC, BACC, Uncoded or Replication
        ``code.N`` workers are started. The baselines use the same call: the
        round waits until ``code.is_complete`` (all K for Uncoded, one copy of
        every input for Replication; the first copy wins).
    backend : "local" (worker processes, shared memory) or "ray"
    devices : None (cpu), a device string ("cuda" = round-robin over GPUs), or
        one device string per worker
    stragglers : letcc.stragglers model or None
        Samples each round's delays; its ``wait_count(N)`` (first N - S answers)
        and ``deadline`` set the waiting rule. None: no delays, wait for every
        worker (until ``code.is_complete``) or the deadline.
    deadline : seconds after dispatch, or None
        Decode with whatever arrived by then (the earlier of this and the
        straggler model's deadline). Nothing by then: ``TimeoutError``.
    simulate : "virtual" (default) or "sleep"
        Apply the injected delays on the master as virtual release times
        (deterministic, no sleeping) or as real sleeps inside the workers.
    seed : int, np.random.Generator or None — the straggler draws' randomness
    adversaries : letcc.adversaries model or None (simulation)
        Corrupts the answering workers' outputs of every round before the
        decode (its draws from ``adversary_rng``, a Generator derived from
        ``seed`` at construction); ``last_round.adversarial`` names them. A
        code built with ``adversaries=E`` reports the workers it judged wrong
        in ``last_round.flagged`` (with or without this simulation).
    quarantine : None (default), True or a ``letcc.runtime.Quarantine``: a code
        with adversaries >= 1 only. Workers the code flags in ``flags`` of their
        last ``window`` answered rounds (True: 3 of 20) are not sent the next
        ``rounds`` rounds (True: 100, doubled each time again), and so are
        workers the code scores highest in too many rounds for chance (valid
        wrong answers no single round can tell: ``top_alpha``; the nodes are
        then assigned to the workers at random every round,
        ``last_round.nodes``); at most the code's E at once
        (letcc.runtime.quarantine). ``last_round.failed`` names them
        ("quarantined") and ``quarantine`` is the object (its ``left()``: who
        sits out for how many more rounds).
    hang_timeout : seconds a worker may stay silent on a task (beyond its injected
        sleep) before it counts as hung: erased, killed and replaced
    startup_timeout : seconds to wait for the workers to build their models
    chunk_rows : rows per model call inside a worker (None: the whole batch);
        a cancelled round is noticed between chunks
    threads_per_worker : intra-op threads per worker (default: cores // N, >= 1)
    start_method : "forkserver" (default where available) or "spawn"
    ray_options : dict of extra ``.options()`` for the Ray actors

    Attributes ``stragglers``, ``deadline`` and ``rng`` (the Generator the straggler
    draws come from) may be reassigned between rounds.

    ``ci.last_round`` is a ``RoundInfo`` (answering set, virtual latencies, time
    spent encoding / waiting / decoding, errors). Use as a context manager, or
    call ``close()``.
    """

    def __init__(self, model_factory: Callable[[], Callable[[Any], Any]], code: Code, backend: str = "local",
                 devices: Any = None, stragglers: StragglerModel | None = None, deadline: float | None = None, *,
                 simulate: str = "virtual", seed: int | None = None, hang_timeout: float = 60.0,
                 startup_timeout: float = 120.0, chunk_rows: int | None = None,
                 threads_per_worker: int | None = None, start_method: str | None = None,
                 ray_options: dict | None = None, adversaries: AdversaryModel | None = None,
                 quarantine: Any = None) -> None:
        if not callable(model_factory):
            raise TypeError(f"model_factory must be a callable that builds the model, got {model_factory!r}")
        check_code(code)
        if backend not in ("local", "ray"):
            raise ValueError(f"backend must be 'local' or 'ray', got {backend!r}")
        chunk_rows = None if chunk_rows is None else as_int(chunk_rows, "chunk_rows", 1)
        self.code = code
        self.N = int(code.N)
        self.K = int(code.K)
        self.stragglers = stragglers        # validated by the property setters
        self.deadline = deadline
        self.simulate = simulate
        self.hang_timeout = as_real(hang_timeout, "hang_timeout", 0, strict=True, finite=False)
        self.startup_timeout = as_real(startup_timeout, "startup_timeout", 0, strict=True, finite=False)
        self.rng = np.random.default_rng(seed)
        quarantine = as_quarantine(quarantine, code)      # checked before any worker starts
        self.adversaries = as_adversary_model(adversaries)
        self.adversary_rng = np.random.default_rng(self.rng.integers(2 ** 63)) if self.adversaries else None
        self._zeros, self._nowhere = no_delays(self.N)     # delays, never: a round without stragglers
        self._last: tuple | None = None           # (record, replaced) of the latest round
        self._last_info: RoundInfo | None = None  # last_round, made when first asked for
        self._pool = WorkerPool(self.N, backend, model_factory, resolve_devices(devices, self.N), threads_per_worker,
                                start_method=start_method, chunk_rows=chunk_rows, ray_options=ray_options,
                                hang_timeout=self.hang_timeout, startup_timeout=self.startup_timeout)
        self._engine = RoundEngine(self._pool, code, quarantine=quarantine)

    # ---- the workers (letcc.runtime.worker_pool) --------------------------

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def close(self) -> None:
        """Stop the workers and release shared memory (idempotent)."""
        self._pool.close()

    @property
    def closed(self) -> bool:
        return self._pool.closed

    @property
    def quarantine(self):
        """The ``letcc.runtime.Quarantine`` given (None: none): ``left()``, ``history``."""
        return self._engine.quarantine

    @property
    def backend(self):
        """The backend (letcc.runtime.backend.Backend) moving the rounds."""
        return self._pool.backend

    def worker_pids(self) -> list:
        """Process id of each worker (None while it is being replaced); local backend only."""
        return self._pool.worker_pids()

    def ready_workers(self) -> list[int]:
        """Workers that would receive the next round."""
        return self._pool.ready_workers()

    def wait_ready(self, timeout: float | None = None) -> None:
        """Block until every worker (including replacements) is ready."""
        self._pool.wait_ready(timeout)

    # ---- settings that may change between rounds -------------------------

    @property
    def stragglers(self):
        """The straggler model (or None) the next rounds draw their delays from."""
        return self._stragglers

    @stragglers.setter
    def stragglers(self, model) -> None:
        check_stragglers(model)
        self._stragglers = model
        # a round needs only the delays: the built-in models can skip working
        # out their own answering set (StragglerModel.sample_delays)
        self._draw_delays = None if model is None else delay_sampler(model)

    @property
    def deadline(self):
        """Seconds after dispatch (or None) after which a round decodes what it has."""
        return self._deadline

    @deadline.setter
    def deadline(self, value) -> None:
        self._deadline = _seconds(value, "deadline")

    @property
    def simulate(self) -> str:
        """'virtual' (delays on the master's clock) or 'sleep' (real sleeps in the workers)."""
        return self._simulate

    @simulate.setter
    def simulate(self, value) -> None:
        if value not in _SIMULATE:
            raise ValueError(f"simulate must be one of {_SIMULATE}, got {value!r}")
        self._simulate = value

    # ---- one round: the steps of the data-flow diagram ----------------------

    def __call__(self, X: Array) -> Array:
        """Estimates of model(X) for X of shape (B*K, ...): B groups of K inputs, one round."""
        self._pool.check_open()
        t_call = time.perf_counter()
        groups, as_torch = self._groups(X)                  # (K, B, ...)
        errors, stale = self._between_rounds()
        draw = self._draw()
        rnd = self._launch(groups, draw, errors)
        rec = _Record(t_call, draw, stale, rnd)
        try:
            Y = self._gather(rec)
            out = self._decode(rec, Y)
        finally:
            self._end_round(rec)
        if as_torch is not None:
            import torch

            return torch.from_numpy(out).to(as_torch)
        return out

    def _groups(self, X):
        """X (B*K, ...) as numpy groups (K, B, ...), and the torch device to return
        the estimates on (None: return numpy)."""
        device = None
        if _is_torch(X):
            device = X.device
            Xn = X.detach().cpu().numpy()
        else:
            Xn = np.asarray(X)
        if Xn.ndim < 1 or Xn.shape[0] == 0 or Xn.shape[0] % self.K:
            raise ValueError(f"X has shape {Xn.shape}: CodedInference needs a positive multiple of "
                             f"K = {self.K} rows (groups of K inputs)")
        B = Xn.shape[0] // self.K
        return Xn.reshape((B, self.K) + Xn.shape[1:]).swapaxes(0, 1), device

    def _between_rounds(self):
        """Take in what happened since the last round (its faults and stale
        answers go into this round's record); replace dead workers."""
        pool = self._pool
        pool.pump(0.0)
        pool.backend.restart_dead()
        errors, stale = pool.carry_errors, pool.carry_stale
        pool.carry_errors, pool.carry_stale = {}, 0
        return errors, stale

    def _draw(self) -> _Draw:
        """draw: this round's straggler delays and waiting rule (count, deadline)."""
        N, d = self.N, _Draw()
        d.virtual = self.simulate == "virtual"
        if self.stragglers is None:         # no delays: the same read-only arrays every round
            d.delays = d.master_delays = d.sleep_s = self._zeros
            d.never = self._nowhere
            d.count, d.deadline = None, self.deadline
            return d
        delays = np.asarray(self._draw_delays(N, self.rng), dtype=np.float64)
        if delays.size != N:
            raise ValueError(f"{self.stragglers!r} drew delays of shape {delays.shape} for N = {N} workers")
        d.delays = delays.reshape(N)
        d.count = self.stragglers.wait_count(N)
        limits = [x for x in (getattr(self.stragglers, "deadline", None), self.deadline) if x is not None]
        d.deadline = min(limits) if limits else None
        d.never = never = np.isinf(d.delays)
        if d.virtual:
            d.master_delays, d.sleep_s = np.where(never, 0.0, d.delays), np.zeros(N)
        else:
            d.master_delays, d.sleep_s = np.zeros(N), d.delays
        return d

    def _launch(self, groups, d: _Draw, errors: dict) -> Round:
        """encode + dispatch (RoundEngine.launch). With virtual delays, a worker
        whose delay is infinite could never count: it is not sent the round (so
        its compute does not slow the others down on a shared machine) and its
        coded input is not computed (unless the inputs are small enough that
        encoding every node is cheaper: encode_into); with real sleeps it is
        sent the round and sleeps."""
        workers = self._pool.backend.ready_workers() or self._pool.await_any_ready()
        skip = d.never if d.virtual and d.never is not self._nowhere else None    # None: all sent
        return self._engine.launch(groups, workers, skip=skip, sleep_s=d.sleep_s,
                                   master_delays=d.master_delays, never=d.never, count=d.count,
                                   deadline=d.deadline, errors=errors)

    def _gather(self, rec: _Record) -> np.ndarray:
        """gather: wait for the answering set, check it once, read its outputs in
        ascending worker order (the decoders want their columns that way, so
        decode() uses these rows as they are: no second copy)."""
        rnd = rec.rnd
        rec.decision = decision = self._wait(rec)
        rec.t_wait = time.perf_counter()
        answered = decision.answered
        if not answered:
            raise TimeoutError(self._nothing_message(rec))
        if not rnd.waiter.decodable(answered):
            missing = sorted(set(rnd.workers) - set(answered))
            raise TimeoutError(f"round {rnd.id}: {self.code!r} cannot decode from workers {list(answered)} "
                               f"(missing {missing}; failures {rnd.waiter.failed or 'none'})")
        rec.decoded = sorted(answered)
        return rec.decoded

    def _decode(self, rec: _Record, answered) -> np.ndarray:
        """decode: the estimates, back in the caller's row order (B*K, ...)."""
        out = self._engine.decode(rec.rnd, answered, self.adversaries, self.adversary_rng)
        rec.t_decode = time.perf_counter()
        return out

    def _end_round(self, rec: _Record) -> None:
        """Cancel the late workers, start replacements, record ``last_round``
        (also when the round raised)."""
        rnd, decision = rec.rnd, rec.decision
        self._engine.end(rnd, decision.answered if decision else ())
        self._engine.relearn_layout(idle=True)
        self._last, self._last_info = (rec, tuple(self._pool.backend.restart_dead())), None

    @property
    def last_round(self) -> RoundInfo | None:
        """The latest round's ``RoundInfo`` (None before the first round). Made
        when first asked for, from what the round kept (nothing of it changes
        once it has ended): most callers of a serving loop never ask, and
        making it cost ~10% of a trivial round's master CPU."""
        if self._last_info is None and self._last is not None:
            self._last_info = self._round_info(*self._last)
        return self._last_info

    def _round_info(self, rec: _Record, replaced: tuple) -> RoundInfo:
        rnd, decision = rec.rnd, rec.decision
        waiter = rnd.waiter
        answered = decision.answered if decision else ()
        lat = np.full(self.N, np.nan)
        ready = set(rnd.workers)
        failed = {j: "not ready" for j in range(self.N) if j not in ready}
        failed.update((j, "quarantined") for j in rnd.quarantined)
        failed.update(waiter.failed)
        for j, v in waiter.arrived.items():
            lat[j] = v
        extra = {}
        if rec.t_decode is not None:
            extra = dict(t_wait=rec.t_wait - rnd.t0, t_decode=rec.t_decode - rec.t_wait,
                         t_total=rec.t_decode - rec.t_call,
                         virtual_latency=(rec.t_encode - rec.t_call) + decision.at + (rec.t_decode - rec.t_wait))
        return RoundInfo(
            round_id=rnd.id, groups=rnd.B, dispatched=tuple(rnd.workers), answered=tuple(answered),
            failed=failed, errors=rnd.errors, delays=rec.draw.delays, latencies=lat,
            decided_at=decision.at if decision else float("nan"), rule=decision.rule if decision else "",
            t_encode=rec.t_encode - rec.t_call, stale=rec.stale, replaced=replaced,
            adversarial=rnd.adversarial, flagged=rnd.flagged, top=rnd.top, nodes=rnd.nodes, **extra)

    def _wait(self, rec: _Record):
        """Feed events to the round's waiter until it decides; the Decision."""
        rnd = rec.rnd
        pool, engine, backend, waiter, r = self._pool, self._engine, self._pool.backend, rnd.waiter, rnd.id
        while True:
            now = time.perf_counter()
            decision = engine.decision(rnd, now)
            if decision is not None:
                return decision
            elapsed = now - rnd.t0
            wake = waiter.next_change(elapsed)
            timeout = None if math.isinf(wake) else max(0.0, wake - elapsed)
            # sleep until as many answers are in as the rule needs (local backend)
            if backend.arm(waiter.answers_needed()):
                timeout = 0.0
            for ev in backend.poll(timeout):
                if ev.round >= 0:
                    pool.ack_event(ev)
                    if ev.round != r:
                        rec.stale += answer_count(ev)
                        continue
                    engine.on_event(rnd, ev)
                    if rnd.error is not None:
                        raise rnd.error
                elif ev.kind == "died":
                    engine.worker_died([rnd], ev)
                elif ev.kind == "init_error":
                    pool.report(rnd.errors, ev.worker, "replacement failed to build its model:\n" + ev.payload[0])

    def _nothing_message(self, rec: _Record) -> str:
        deadline, rnd = rec.draw.deadline, rec.rnd
        why = {"deadline": f"by the deadline of {deadline:g} s (virtual time after dispatch)"
               if deadline is not None else "by the deadline",
               "all": "at all"}.get(rec.decision.rule, "")
        parts = [f"round {rnd.id}: no worker answered {why}".rstrip()]
        ready = set(rnd.workers)
        failures = {**{j: "not ready" for j in range(self.N) if j not in ready},
                    **rnd.waiter.failed}
        if failures:
            parts.append(f"failures: {failures}")
        return "; ".join(parts)


class _Record:
    """What CodedInference keeps of its round beyond the engine's Round: times,
    the draw, the decision (for ``last_round``)."""

    __slots__ = ("t_call", "draw", "stale", "rnd", "t_encode", "decision", "t_wait", "decoded", "t_decode")

    def __init__(self, t_call: float, draw: _Draw, stale: int, rnd: Round):
        self.t_call, self.draw, self.stale, self.rnd = t_call, draw, stale, rnd
        self.t_encode = rnd.t0          # encoded (and probed) right before dispatch
        self.decision = self.t_wait = self.decoded = self.t_decode = None
