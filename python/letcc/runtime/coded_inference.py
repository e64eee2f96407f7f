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
      |                            round take the first slots, in order)
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

Each step is a method of CodedInference (``_draw``, ``_encode_round``,
``_dispatch``, ``_gather``, ``_decode``, ``_end_round``), handing one
``_Round`` on.

Messages carry the round id; anything from an older round is counted as stale
and dropped (a late worker's output slot is only read after it reports the
current round, and a worker handles its tasks in order). A process that dies,
raises or hangs past ``hang_timeout`` is an erasure for the round; dead and hung
workers are replaced after the round without waiting for the new process to
load its model. Closing (context exit, ``close()``, garbage collection, interpreter
exit) stops the workers and unlinks every shared-memory segment.

One object owns the round state (this module); ``worker_pool`` keeps the
workers between rounds; the backends only move bytes and report events, behind
``backend``'s contract; ``virtual_time`` holds the waiting rule; ``round_info``
the record.
"""
from __future__ import annotations

import math
import time
from typing import Any, Callable

import numpy as np

from letcc.adversaries import AdversaryModel, as_adversary_model

from letcc._checks import as_int, as_real
from letcc._typing import Array
from letcc.codes._base import Code
from letcc.runtime._devices import resolve_devices
from letcc.runtime.encode_into import encode_into
from letcc.runtime.round_info import RoundInfo
from letcc.runtime.virtual_time import RoundWaiter
from letcc.runtime.worker_pool import WorkerPool, death_text
from letcc.stragglers._base import StragglerModel, delay_sampler

__all__ = ["CodedInference"]

_SIMULATE = ("virtual", "sleep")


def _is_torch(x) -> bool:
    return type(x).__module__.startswith("torch") and hasattr(x, "detach")


def _seconds(value, name: str):
    """A duration argument: a real number > 0 (inf allowed), or None."""
    return None if value is None else as_real(value, name, 0, strict=True, finite=False)


def _check_code(code) -> None:
    for attr in ("K", "N", "adversaries", "encode", "decode", "can_decode", "is_complete"):
        if not hasattr(code, attr):
            raise TypeError(f"code must be a letcc code (LeTCC, BACC, Uncoded, Replication); "
                            f"{type(code).__name__} has no {attr!r}")


def _check_stragglers(model) -> None:
    if model is None:
        return
    for attr in ("sample", "wait_count"):
        if not callable(getattr(model, attr, None)):
            raise TypeError(f"stragglers must be a letcc.stragglers model; {type(model).__name__} has no {attr}()")


class _Round:
    """One round's state, handed from step to step of ``CodedInference.__call__``."""

    __slots__ = ("id", "B", "t_call", "errors", "stale", "delays", "count", "deadline", "never", "virtual",
                 "master_delays", "sleep_s", "workers", "sent", "failed", "waiter", "decision", "decoded",
                 "t_encode", "t0", "t_wait", "t_decode", "adversarial", "flagged")

    def __init__(self, B: int, t_call: float, errors: dict, stale: int):
        self.B, self.t_call, self.errors, self.stale = B, t_call, errors, stale
        self.waiter = self.decision = self.t_decode = None
        self.adversarial = self.flagged = ()

    def to_send(self, ready) -> list:
        """The ready workers that are sent the round (virtual delays: not those
        whose answer could never count)."""
        if self.virtual:
            never = self.never
            return [j for j in ready if not never[j]]
        return list(ready)


class CodedInference(WorkerPool):
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
                 ray_options: dict | None = None, adversaries: AdversaryModel | None = None) -> None:
        if not callable(model_factory):
            raise TypeError(f"model_factory must be a callable that builds the model, got {model_factory!r}")
        _check_code(code)
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
        self.adversaries = as_adversary_model(adversaries)
        self.adversary_rng = np.random.default_rng(self.rng.integers(2 ** 63)) if self.adversaries else None
        self._round = 0
        self.last_round: RoundInfo | None = None
        super().__init__(backend, model_factory, resolve_devices(devices, self.N), threads_per_worker,
                         start_method=start_method, chunk_rows=chunk_rows, ray_options=ray_options)

    # ---- settings that may change between rounds -------------------------

    @property
    def stragglers(self):
        """The straggler model (or None) the next rounds draw their delays from."""
        return self._stragglers

    @stragglers.setter
    def stragglers(self, model) -> None:
        _check_stragglers(model)
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
        self._check_open()
        t_call = time.perf_counter()
        groups, as_torch = self._groups(X)                  # (K, B, ...)
        rnd = self._start_round(groups.shape[1], t_call)
        self._draw(rnd)
        self._encode_round(rnd, groups)
        try:
            self._dispatch(rnd)
            Y = self._gather(rnd)
            out = self._decode(rnd, Y)
        finally:
            self._end_round(rnd)
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

    def _start_round(self, B: int, t_call: float) -> _Round:
        """Take in what happened since the last round; replace dead workers."""
        self._pump(0.0)
        self._backend.restart_dead()
        rnd = _Round(B, t_call, self._carry_errors, self._carry_stale)
        self._carry_errors, self._carry_stale = {}, 0
        return rnd

    def _draw(self, rnd: _Round) -> None:
        """draw: this round's straggler delays and waiting rule (count, deadline)."""
        N = self.N
        if self.stragglers is not None:
            delays = np.asarray(self._draw_delays(N, self.rng), dtype=np.float64)
            if delays.size != N:
                raise ValueError(f"{self.stragglers!r} drew delays of shape {delays.shape} for N = {N} workers")
            rnd.delays = delays.reshape(N)
            rnd.count = self.stragglers.wait_count(N)
            limits = [d for d in (getattr(self.stragglers, "deadline", None), self.deadline) if d is not None]
            rnd.deadline = min(limits) if limits else None
        else:
            rnd.delays = np.zeros(N)
            rnd.count, rnd.deadline = None, self.deadline
        rnd.never = never = np.isinf(rnd.delays)
        rnd.virtual = self.simulate == "virtual"
        if rnd.virtual:
            rnd.master_delays, rnd.sleep_s = np.where(never, 0.0, rnd.delays), np.zeros(N)
        else:
            rnd.master_delays, rnd.sleep_s = np.zeros(N), rnd.delays

    def _encode_round(self, rnd: _Round, groups) -> None:
        """encode: the coded inputs of the workers sent the round, straight into
        the input slots; the round's id; the output layout, probed when unknown."""
        # Who gets the round. With virtual delays, a worker whose delay is
        # infinite could never count: it is not sent the round (so its compute
        # does not slow the others down on a shared machine) and its coded input
        # is not computed; with real sleeps it is sent the round and sleeps.
        workers = self._backend.ready_workers() or self._await_any_ready()
        sent = rnd.to_send(workers)
        B, row_shape = rnd.B, groups.shape[2:]
        probe = []

        def slots(dtype):
            buf, need_probe = self._backend.input_view(B, row_shape, dtype)
            probe.append(need_probe)
            return buf

        positions = encode_into(self.code, groups, slots, sent if len(sent) < self.N else None)
        self._backend.set_input_slots(positions)
        rnd.t_encode = time.perf_counter()
        if probe[0]:                        # every worker asked, the first answer taken
            self._probe(B, workers if positions is None else sent)
            before, workers = set(workers), self._backend.ready_workers()
            if positions is not None:       # a worker ready since the encode has no input
                workers = [j for j in workers if j in before]
            sent = rnd.to_send(workers)
        self._round += 1
        rnd.id = self._round
        rnd.workers, rnd.sent = workers, sent
        ready = set(workers)
        rnd.failed = {j: "not ready" for j in range(self.N) if j not in ready}

    def _dispatch(self, rnd: _Round) -> None:
        """dispatch: hand the round to its workers; the waiting rule's state."""
        rnd.t0 = t0 = time.perf_counter()
        sent, sleep_s = rnd.sent, rnd.sleep_s
        self._backend.submit(rnd.id, sent, rnd.B, sleep_s)
        hang_at = {}
        for j in sent:
            queue = self._outstanding[j]
            queue.append((rnd.id, t0))
            extra = sleep_s[j] if math.isfinite(sleep_s[j]) else 0.0
            # silent for hang_timeout past its sleep, counted from its oldest unanswered task
            hang_at[j] = (queue[0][1] - t0) + extra + self.hang_timeout
        rnd.waiter = RoundWaiter(self.code, sent, rnd.master_delays, rnd.never, rnd.count, rnd.deadline, hang_at)

    def _gather(self, rnd: _Round) -> np.ndarray:
        """gather: wait for the answering set, check it once, read its outputs in
        ascending worker order (the decoders want their columns that way, so
        decode() uses these rows as they are: no second copy)."""
        rnd.decision = decision = self._wait(rnd)
        rnd.t_wait = time.perf_counter()
        answered = decision.answered
        if not answered:
            raise TimeoutError(self._nothing_message(rnd))
        if not rnd.waiter.decodable(answered):
            missing = sorted(set(rnd.workers) - set(answered))
            raise TimeoutError(f"round {rnd.id}: {self.code!r} cannot decode from workers {list(answered)} "
                               f"(missing {missing}; failures {rnd.waiter.failed or 'none'})")
        rnd.decoded = sorted(answered)
        return self._backend.outputs(rnd.decoded, rnd.B)

    def _decode(self, rnd: _Round, Y) -> np.ndarray:
        """decode: the estimates, back in the caller's row order (B*K, ...)."""
        if self.adversaries is not None:
            Y, adv = self.adversaries.corrupt(Y, rnd.decoded, self.adversary_rng)
            rnd.adversarial = tuple(int(j) for j in adv)
        if self.code.adversaries:
            est, flagged = self.code.decode(Y, rnd.decoded, return_flagged=True)
            rnd.flagged = tuple(int(j) for j in flagged)
            est = np.asarray(est)
        else:
            est = np.asarray(self.code.decode(Y, rnd.decoded))
        out = np.ascontiguousarray(est.swapaxes(0, 1)).reshape((rnd.B * self.K,) + est.shape[2:])
        rnd.t_decode = time.perf_counter()
        return out

    def _end_round(self, rnd: _Round) -> None:
        """Cancel the late workers, start replacements, record ``last_round``
        (also when the round raised)."""
        decision, waiter = rnd.decision, rnd.waiter
        answered = decision.answered if decision else ()
        counted = set(answered)
        self._backend.cancel([j for j in rnd.sent if j not in counted])
        replaced = tuple(self._backend.restart_dead())
        lat = np.full(self.N, np.nan)
        extra = {}
        if waiter is not None:
            rnd.failed.update(waiter.failed)
            for j, v in waiter.arrived.items():
                lat[j] = v
        if rnd.t_decode is not None:
            extra = dict(t_wait=rnd.t_wait - rnd.t0, t_decode=rnd.t_decode - rnd.t_wait,
                         t_total=rnd.t_decode - rnd.t_call,
                         virtual_latency=(rnd.t_encode - rnd.t_call) + decision.at + (rnd.t_decode - rnd.t_wait))
        self.last_round = RoundInfo(
            round_id=rnd.id, groups=rnd.B, dispatched=tuple(rnd.workers), answered=tuple(answered),
            failed=rnd.failed, errors=rnd.errors, delays=rnd.delays, latencies=lat,
            decided_at=decision.at if decision else float("nan"), rule=decision.rule if decision else "",
            t_encode=rnd.t_encode - rnd.t_call, stale=rnd.stale, replaced=replaced,
            adversarial=rnd.adversarial, flagged=rnd.flagged, **extra)

    def _wait(self, rnd: _Round):
        """Feed events to the round's waiter until it decides; the Decision."""
        backend, waiter, r, t0, errors = self._backend, rnd.waiter, rnd.id, rnd.t0, rnd.errors
        while True:
            elapsed = time.perf_counter() - t0
            for j in waiter.hung(elapsed):
                backend.kill(j)
                self._outstanding[j] = []
                waiter.fail(j, "hung")
                self._report(errors, j, f"no answer within hang_timeout = {self.hang_timeout:g} s; "
                             "killed and replaced")
            decision = waiter.decide(elapsed)
            if decision is not None:
                return decision
            wake = waiter.next_change(elapsed)
            timeout = None if math.isinf(wake) else max(0.0, wake - elapsed)
            # sleep until as many answers are in as the rule needs (local backend)
            if backend.arm(waiter.answers_needed()):
                timeout = 0.0
            for ev in backend.poll(timeout):
                j = ev.worker
                if ev.round >= 0:
                    self._ack(j, ev.round)
                    if ev.round != r:
                        rnd.stale += 1
                        continue
                    if ev.kind == "done":
                        waiter.result(j, ev.t - t0)
                    elif ev.kind == "error":
                        waiter.fail(j, "raised")
                        self._report(errors, j, ev.payload[0])
                    elif ev.kind == "shape":
                        message = self._shape_message(j, ev.payload, rnd.B)
                        # the layout may have come from the odd worker out: learn it again
                        # next round rather than fail every round after this one
                        backend.forget_output_layout()
                        raise ValueError(message)
                    else:                       # cancelled: not an answer
                        waiter.fail(j, ev.kind)
                elif ev.kind == "died":
                    self._outstanding[j] = []
                    waiter.fail(j, "died")
                    self._report(errors, j, f"{death_text(ev)} during round {r}; it is being replaced")
                elif ev.kind == "init_error":
                    self._report(errors, j, "replacement failed to build its model:\n" + ev.payload[0])

    def _shape_message(self, j, payload, B) -> str:
        shape, dtype = tuple(payload[0]), np.dtype(payload[1])
        rows = payload[2] if len(payload) > 2 else B
        ref = self._backend.output_reference()
        where = (f"worker {ref[0]}'s output for one input was {tuple(ref[1])} {np.dtype(ref[2])}"
                 if ref else "the first answer had another shape")
        return (f"worker {j} returned an output of shape {shape} {dtype} for a batch of {rows} inputs, "
                f"but {where}: the model must return the same shape (batch, ...) on every worker "
                "and for every input")

    @staticmethod
    def _nothing_message(rnd: _Round) -> str:
        deadline = rnd.deadline
        why = {"deadline": f"by the deadline of {deadline:g} s (virtual time after dispatch)"
               if deadline is not None else "by the deadline",
               "all": "at all"}.get(rnd.decision.rule, "")
        parts = [f"round {rnd.id}: no worker answered {why}".rstrip()]
        failures = {**rnd.failed, **rnd.waiter.failed}
        if failures:
            parts.append(f"failures: {failures}")
        return "; ".join(parts)
