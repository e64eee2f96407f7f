"""The round engine: one coded round from encode to decode, for every driver.

``CodedInference`` drives one round at a time and blocks in its caller's
thread; the server's dispatcher (letcc.serving) drives many in flight from
its own thread. Both hand each step to a ``RoundEngine``, so a round behaves
(and fails, and is reported) the same way under both::

    engine.launch(groups, workers, ...)      encode into a ring slot's input rows,
      |                                      (the quarantine's random node assignment),
      |                                      probe the output layout when unknown,
      |                                      a new round id, submit, hang limits,
      v                                      the round's RoundWaiter -> Round
    driver: backend.arm / poll -> events
      | engine.on_event(rnd, ev)             done -> waiter; error -> raised + report;
      |                                      shape -> rnd.error (ValueError), layout
      |                                      to be learnt again; cancelled -> waiter
      | engine.worker_died(rounds, j)        an erasure in every round it was in
      | engine.decision(rnd, now)            hung workers killed; the waiting rule
      v
    engine.decode(rnd, answered)             outputs (node order) -> (adversary
      |                                      simulation) -> code.decode at the nodes
      |                                      (flagged, top-scored -> quarantine)
      |                                      -> (B*K, ...) rows
    engine.end(rnd, answered)                late workers cancelled
    engine.relearn_layout(idle)              after a shape error, once no round is
                                             in flight: the next launch probes again

The engine holds no round of its own (a ``Round`` carries its state) and no
requests, futures or deadlines: what a round's answers are *for* is the
driver's. It owns the round ids and whether the output layout must be learnt
again; the workers' bookkeeping is the ``WorkerPool``'s.
"""
from __future__ import annotations

import time

import numpy as np

from letcc.runtime.encode_into import encode_into
from letcc.runtime.virtual_time import round_waiter
from letcc.runtime.worker_pool import WorkerPool, death_text

__all__ = ["Round", "RoundEngine", "no_delays", "ungroup"]


def _worker_of(nodes):
    """node -> the worker that computed it (nodes: a round's assignment, None: the same)."""
    if nodes is None:
        return int
    inverse = np.empty_like(nodes)
    inverse[nodes] = np.arange(nodes.size)
    return lambda n: int(inverse[n])


def no_delays(N: int) -> tuple[np.ndarray, np.ndarray]:
    """(delays, never) of a round whose N workers have no injected delay: (N,)
    zeros and (N,) False, read-only, made once by a driver and passed to every
    such launch (sleep_s, master_delays, never)."""
    zeros, nowhere = np.zeros(N), np.zeros(N, dtype=bool)
    zeros.flags.writeable = nowhere.flags.writeable = False
    return zeros, nowhere


def ungroup(est, B: int, K: int) -> np.ndarray:
    """Estimates (K, B, ...) as the callers' rows (B*K, ...): group b's input k at row b*K + k."""
    est = np.asarray(est)
    return np.ascontiguousarray(est.swapaxes(0, 1)).reshape((B * K,) + est.shape[2:])


class Round:
    """One launched round: what the engine and its driver know of it."""

    __slots__ = ("id", "ring", "B", "t0", "workers", "sent", "waiter", "errors", "raised", "error",
                 "flagged", "adversarial", "quarantined", "newly_quarantined", "nodes", "top")

    def __init__(self, rid, ring, B, t0, workers, sent, waiter, errors):
        self.id, self.ring, self.B, self.t0 = rid, ring, B, t0
        self.workers = workers      # the ready workers when it was launched
        self.sent = sent            # those it went to
        self.waiter = waiter        # round_waiter's: who answered, the waiting rule
        self.errors = errors        # {worker: text}: what the pool reported during the round
        self.raised: dict = {}      # {worker: traceback}: the model raised
        self.error = None           # an exception that ends the round (a shape mismatch)
        self.flagged = self.adversarial = ()
        self.quarantined = ()       # ready workers left out: quarantined (letcc.runtime.quarantine)
        self.newly_quarantined = () # those its decode's flags quarantined
        self.nodes = None           # (N,) int64: worker j computed node nodes[j] (None: node j)
        self.top = None             # the worker whose answer the code scored highest (None: no score)


class RoundEngine:
    """The steps of a coded round on ``pool``'s workers through ``code`` (module docstring)."""

    def __init__(self, pool: WorkerPool, code, quarantine=None):
        self.pool = pool
        self.code = code
        # a letcc.runtime.quarantine.Quarantine (checked by as_quarantine) or None:
        # workers flagged round after round sit out later launches
        self.quarantine = quarantine
        self.K, self.N = int(code.K), int(code.N)
        self.last_id = 0            # round ids increase (a backend drops older answers by id)
        self.relearn = False        # a shape error: learn the output layout again when idle

    # ---- launch --------------------------------------------------------------

    def launch(self, groups: np.ndarray, workers: list, *, ring: int = 0, skip=None, sleep_s, master_delays,
               never, count=None, deadline=None, may_complete=None, errors=None) -> Round:
        """Encode ``groups`` (K, B, ...) for the workers sent the round (small
        inputs: for every node, encode_into), probe the output layout if it is
        unknown (the workers sent the round; nobody when none is), submit, and
        start the waiting rule.

        workers : the ready workers; skip : (N,) bool or None, those not sent the
        round (virtual time: they could never count); sleep_s : (N,) injected
        sleeps in the workers; master_delays, never, count, deadline,
        may_complete : the RoundWaiter's (letcc.runtime.virtual_time)."""
        pool, backend = self.pool, self.pool.backend
        B, row_shape = groups.shape[1], groups.shape[2:]
        out = ()
        if self.quarantine is not None:
            excluded = self.quarantine.excluded()
            self.quarantine.launch()
            out = tuple(sorted(j for j in workers if j in excluded))
            if out:                     # not sent: like a worker that could never count
                skip = np.zeros(self.N, dtype=bool) if skip is None else np.array(skip, dtype=bool)
                skip[list(out)] = True
                may_complete = None     # the caller's answer was for every worker: ask again
        sent = list(workers) if skip is None else [j for j in workers if not skip[j]]
        probe = []

        def slots(dtype):
            buf, unknown = backend.input_view(B, row_shape, dtype, ring)
            probe.append(unknown)
            return buf

        nodes = None
        if self.quarantine is not None and (self.quarantine.assigns_nodes or out):
            # the workers left out take the nodes the decode misses least (a node
            # midway between two inputs can cost ~45x the MSE of an end node:
            # letcc.codes.idle_nodes); None: the code has no such order
            idle = self.code.idle_nodes(len(out)) if out else None
            nodes = self.quarantine.assign_nodes(self.N, out, idle)
            positions = encode_into(self.code, groups, slots, nodes[sent], workers=sent)
        else:
            positions = encode_into(self.code, groups, slots, sent if len(sent) < self.N else None)
        backend.set_input_slots(positions)
        # every worker sent the round asked, the first answer taken; a round sent to nobody
        # (every worker skipped) has no output to lay out: the next round probes
        if probe[0] and sent:
            pool.probe(B, sent)
            before, workers = set(workers), backend.ready_workers()
            if positions is not None:   # a worker ready since the encode has no input
                workers = [j for j in workers if j in before]
            probed = sent
            sent = list(workers) if skip is None else [j for j in workers if not skip[j]]
            if sent != probed:
                may_complete = None     # the caller's answer was for other workers: ask again
        self.last_id += 1
        r = self.last_id
        t0 = time.perf_counter()
        backend.submit(r, sent, B, sleep_s, ring)
        hang_at = pool.sent(r, sent, t0, sleep_s.tolist())
        waiter = round_waiter(self.code, sent, master_delays, never, count, deadline, hang_at,
                             may_complete=may_complete)
        rnd = Round(r, ring, B, t0, workers, sent, waiter, {} if errors is None else errors)
        rnd.quarantined, rnd.nodes = out, nodes
        return rnd

    def next_id(self) -> int:
        """A round id for work that is not a coded round (the server's tasks)."""
        self.last_id += 1
        return self.last_id

    # ---- events ----------------------------------------------------------------

    def on_event(self, rnd: Round, ev) -> None:
        """An event of round ``rnd`` (ev.round == rnd.id; the driver acked it)."""
        j, waiter = ev.worker, rnd.waiter
        kind = ev.kind
        if kind == "done":
            waiter.result(j, ev.t - rnd.t0)
        elif kind == "answers":         # several at once (letcc.runtime.backend)
            waiter.results(*ev.payload, rnd.t0)
        elif kind == "error":
            waiter.fail(j, "raised")
            rnd.raised[j] = ev.payload[0]
            self.pool.report(rnd.errors, j, ev.payload[0])
        elif kind == "shape":
            waiter.fail(j, "shape")
            rnd.error = ValueError(self.shape_message(j, ev.payload, rnd.B))
            # the layout may have come from the odd worker out: learn it again (relearn_layout)
            # rather than fail every round after this one
            self.relearn = True
        else:                           # cancelled: not an answer
            waiter.fail(j, kind)

    def worker_died(self, rounds, ev) -> None:
        """Worker ev.worker died: an erasure in each of ``rounds``, reported once."""
        j = ev.worker
        self.pool.lost(j)
        rounds = list(rounds)
        one = rounds[0] if len(rounds) == 1 else None
        where = f" during round {one.id}" if one is not None else ""
        self.pool.report(None if one is None else one.errors, j, f"{death_text(ev)}{where}; it is being replaced")
        for rnd in rounds:
            rnd.waiter.fail(j, "died")

    def decision(self, rnd: Round, now: float):
        """Kill the round's hung workers (an erasure each); its Decision at
        ``now`` (perf_counter), or None while it is undecided."""
        waiter = rnd.waiter
        elapsed = now - rnd.t0
        for j in waiter.hung(elapsed):
            self.pool.kill_hung(j, rnd.errors)
            waiter.fail(j, "hung")
        return waiter.decide(elapsed)

    def shape_message(self, j: int, payload, B: int) -> str:
        shape, dtype = tuple(payload[0]), np.dtype(payload[1])
        rows = payload[2] if len(payload) > 2 else B
        ref = self.pool.backend.output_reference()
        where = (f"worker {ref[0]}'s output for one input was {tuple(ref[1])} {np.dtype(ref[2])}"
                 if ref else "the first answer had another shape")
        return (f"worker {j} returned an output of shape {shape} {dtype} for a batch of {rows} inputs, "
                f"but {where}: the model must return the same shape (batch, ...) on every worker "
                "and for every input")

    # ---- decode and end ------------------------------------------------------------

    def decode(self, rnd: Round, answered: list, adversaries=None, adversary_rng=None) -> np.ndarray:
        """The estimates of the round from the outputs of ``answered`` (ascending:
        the decoders take their rows in that order, no second copy), as (B*K, ...)
        rows. ``adversaries`` (a letcc.adversaries model, simulation) corrupts
        them first; a code with adversaries > 0 reports whom it flagged
        (``rnd.flagged``) and whose answer it scored highest (``rnd.top``).
        With nodes assigned (``rnd.nodes``) the answers are taken in node
        order and decoded at their nodes; everything reported names workers."""
        nodes = rnd.nodes
        if nodes is not None:
            answered = sorted(answered, key=nodes.__getitem__)
        Y = self.pool.backend.outputs(answered, rnd.B, rnd.ring)
        if adversaries is not None:
            Y, adv = adversaries.corrupt(Y, answered, adversary_rng)
            rnd.adversarial = tuple(sorted(int(j) for j in adv))
        at = answered if nodes is None else nodes[answered].tolist()
        if self.code.adversaries:
            code = self.code
            est, flagged = code.decode(Y, at, return_flagged=True)
            worker = _worker_of(nodes)
            rnd.flagged = tuple(sorted(worker(int(n)) for n in flagged))
            scored = code.last_clean_round
            rnd.top = None if scored is None else worker(int(scored["worker"]))
            if self.quarantine is not None:
                rnd.newly_quarantined = tuple(self.quarantine.observe(answered, rnd.flagged, rnd.top))
        else:
            est = self.code.decode(Y, at)
        return ungroup(est, rnd.B, self.K)

    def end(self, rnd: Round, answered) -> None:
        """The round is over: the workers it went to that did not count drop it."""
        counted = set(answered)
        self.pool.backend.cancel([j for j in rnd.sent if j not in counted], rnd.ring)

    def relearn_layout(self, idle: bool) -> bool:
        """After a shape error, once no round is in flight (``idle``): forget the
        learnt output layout, so the next launch probes it again. True while a
        relearn is still waiting for the rounds in flight to end (launch
        nothing meanwhile: forgetting replaces the slots they use)."""
        if self.relearn and idle:
            self.pool.backend.forget_output_layout()
            self.relearn = False
        return self.relearn
