"""``CodedInference.last_round``: what happened in the latest round."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

__all__ = ["RoundInfo"]


@dataclass(frozen=True)
class RoundInfo:
    """One round, as the master saw it. Times in seconds.

    Attributes
    ----------
    round_id : the id every message of this round carried
    groups : B, the number of K-input groups sent in this round
    dispatched : the ready workers that took part in the round (with
        simulate="virtual", those with an infinite injected delay are not sent
        the coded inputs: their answer could never count)
    answered : workers whose outputs were decoded, in virtual arrival order
    failed : {worker: reason} for erasures that are not plain lateness:
        "not ready" (being replaced), "died", "raised", "hung"
    errors : {worker: text} what went wrong (tracebacks, exit codes)
    delays : (N,) injected straggler delays (0 without a straggler model, then
        one read-only array shared by the rounds; inf: never answers)
    latencies : (N,) virtual answer time after dispatch (real + injected delay;
        nan: no answer this round)
    decided_at : virtual time after dispatch at which the answering set was final
    rule : which rule ended the wait: count | complete | deadline | all
    t_encode, t_wait, t_decode : real time spent encoding, waiting, decoding
    t_total : real time from the call to the returned result
    virtual_latency : t_encode + decided_at + t_decode, the round's latency had
        the injected delays been real (equals t_total with simulate="sleep",
        up to the master's own overhead)
    stale : messages of older rounds dropped during this round
    replaced : workers whose replacement process was started after this round
    adversarial : workers whose outputs the simulated adversary model
        (CodedInference(adversaries=...)) replaced this round
    flagged : workers the code (adversaries=E) judged wrong and left out
    top : the worker whose answer the code scored highest (None: the code
        scored nothing this round), the evidence the quarantine pools
    nodes : (N,) int64, the node each worker computed this round (the
        quarantine's random assignment, ``Quarantine(top_alpha=...)``, and
        the quarantined workers at ``code.idle_nodes``); None: worker j
        computed node j. ``code.decode(Y, nodes[answered])`` is the
        decode of the answers of ``answered``
    """

    round_id: int
    groups: int
    dispatched: tuple
    answered: tuple
    failed: dict = field(default_factory=dict)
    errors: dict = field(default_factory=dict)
    delays: np.ndarray | None = None
    latencies: np.ndarray | None = None
    decided_at: float = float("nan")
    rule: str = ""
    t_encode: float = 0.0
    t_wait: float = 0.0
    t_decode: float = 0.0
    t_total: float = 0.0
    virtual_latency: float = float("nan")
    stale: int = 0
    replaced: tuple = ()
    adversarial: tuple = ()
    flagged: tuple = ()
    top: int | None = None
    nodes: np.ndarray | None = None

    @property
    def late(self) -> tuple:
        """Dispatched workers that neither answered in time nor failed."""
        return tuple(j for j in self.dispatched if j not in self.answered and j not in self.failed)
