"""What the dispatcher keeps per request and per dispatched unit of work.

A ``Request`` is one accepted input and its future. A *flight* is work that
has left the queue and not yet ended:

- ``CodedFlight``: one coded round of B groups of K requests on the N
  workers, in one ring slot: the round engine's ``Round`` (letcc.runtime.round),
  whose ``RoundWaiter`` holds its waiting rule on real time (the injected
  delays are real sleeps in the workers, so the master's virtual delays are 0);
- ``TaskFlight``: up to b requests on one worker (uncoded behind a load
  balancer), and for the hedged baseline a second copy on another worker; the
  first answer wins. Each copy is its own round id in its own ring slot.

Padding a partly filled coded round: the empty positions of a group are
filled with copies of its last real input (inputs sit at positions 0..n-1 of
the group, in the order alpha_1 < ... < alpha_K of the code's nodes, so a
pad repeats its nearest real neighbour). A group with one request thus
encodes a constant function and decodes f(x) exactly; with more, the
encoding spline is flattened over the padded tail, never given the jumps a
foreign input would put there. Padded positions are decoded and discarded.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from letcc import _core

__all__ = ["Request", "RequestInfo", "CodedFlight", "TaskFlight", "copy_inputs", "input_copy", "pad_groups"]


@dataclass(eq=False)
class Request:
    x: np.ndarray
    future: object
    t_submit: float          # perf_counter
    deadline_at: float       # perf_counter; inf: none
    retries: int = 0
    state: str = "queued"    # queued | flight | done
    running: bool = False    # future.set_running_or_notify_cancel() called
    want_info: bool = False  # submit(info=True): the future gets (y, RequestInfo)


@dataclass(frozen=True)
class RequestInfo:
    """How a request was answered (``CodedServer.submit(x, info=True)``).

    Attributes
    ----------
    approximate : bool
        True when the answer is a decoder's estimate (a coded round's decode;
        with a systematic code, a request whose own worker was late or failed);
        False when it is a worker's own answer for this input.
    latency : float
        Seconds from submit to the result.
    answered : tuple
        The workers whose answers it was made from, ascending (one worker for
        an exact answer).
    round_id : int
        The round (or task) it came from.
    nodes : tuple or None
        The code's node each worker of ``answered`` computed, in that order,
        where the round assigned nodes to workers (a quarantine:
        ``letcc.runtime.Quarantine``); None where worker j computed node j.
    """
    approximate: bool
    latency: float
    answered: tuple
    round_id: int
    nodes: tuple | None = None


def input_copy(x: np.ndarray, dtype) -> np.ndarray:
    """A request's own copy of its input x, in dtype. An input already of that
    dtype and C-contiguous is copied with the GIL held (letcc._core.copy_rows:
    numpy releases it around a copy of more than 500 elements, and each
    release lets another thread of the server take it, at the price of a
    context switch or two: bench/results/gil_handoffs.md)."""
    if x.dtype == dtype and x.flags.c_contiguous:
        out = np.empty((1,) + x.shape, dtype=dtype)
        _core.copy_rows(out, (x,))
        return out[0]
    return np.array(x, dtype=dtype, copy=True)


def copy_inputs(out: np.ndarray, requests) -> None:
    """out[i] = requests[i].x, and the rows of out after them the last one's
    (out C-contiguous, of the inputs' layout): one compiled copy with the
    GIL held (input_copy says why)."""
    _core.copy_rows(out, [req.x for req in requests])


def pad_groups(requests: list, K: int, row_shape: tuple, dtype) -> np.ndarray:
    """The (K, B, *row_shape) inputs of a round: request i at (i % K, i // K),
    the empty positions of the last group padded with its last real input
    (copy_inputs)."""
    n = len(requests)
    B = -(-n // K)
    X = np.empty((B, K) + tuple(row_shape), dtype=dtype)
    copy_inputs(X.reshape((B * K,) + tuple(row_shape)), requests)
    return X.swapaxes(0, 1)


class _Flight:
    """What every flight does with its requests (both kinds hold ``requests``,
    None where a request left early, and a ``_deadline`` cache field)."""

    requests: list
    _deadline: float | None

    @property
    def deadline_at(self) -> float:
        """The earliest deadline of its requests (inf: none); cached, it is read every loop."""
        d = self._deadline
        if d is None:
            d = self._deadline = min((r.deadline_at for r in self.requests if r is not None), default=math.inf)
        return d

    def drop(self, i: int) -> None:
        """Request i is no longer the flight's (it timed out)."""
        self.requests[i] = None
        self._deadline = None


@dataclass(eq=False)
class CodedFlight(_Flight):
    """A coded round of requests: the engine's Round (letcc.runtime.round) and what it is for."""
    requests: list           # Request, position i -> (group i // K, input i % K)
    rnd: object              # letcc.runtime.round.Round
    fallback_at: float = math.inf    # systematic rounds: when the pending requests are decoded
    hedge_at: float = math.inf       # systematic rounds: when late systematic tasks get a second copy
    hedge_id: int | None = None      # the second copies' round id (their own ring slot: hedge_ring)
    hedge_ring: int | None = None
    hedge: dict = field(default_factory=dict)   # worker running a second copy -> the input it computes
    _deadline: float | None = field(default=None, repr=False)

    kind = "coded"

    @property
    def id(self) -> int:
        return self.rnd.id

    @property
    def waiter(self):
        return self.rnd.waiter

    @property
    def t0(self) -> float:
        return self.rnd.t0

    def round_ids(self):
        return (self.rnd.id,) if self.hedge_id is None else (self.rnd.id, self.hedge_id)


@dataclass(eq=False)
class Copy:
    """One copy of a task: a round id on one worker, in one ring slot."""
    round: int
    worker: int
    ring: int
    t0: float
    hang_at: float = math.inf    # perf_counter after which it counts as hung
    state: str = "pending"   # pending | done | failed


@dataclass(eq=False)
class TaskFlight(_Flight):
    requests: list           # b requests, all on one worker (plus a hedge)
    copies: list             # Copy
    hedge_at: float = math.inf     # perf_counter when a second copy goes out
    raised: dict = field(default_factory=dict)
    _deadline: float | None = field(default=None, repr=False)

    kind = "task"

    @property
    def B(self) -> int:
        return len(self.requests)

    def round_ids(self):
        return tuple(c.round for c in self.copies)

    def copy(self, r: int):
        for c in self.copies:
            if c.round == r:
                return c
        return None

    def pending(self) -> list:
        return [c for c in self.copies if c.state == "pending"]
