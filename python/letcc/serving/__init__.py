"""Request-level serving on top of the runtime: ``CodedServer``.

Single requests in, micro-batched into coded rounds of K, several rounds in
flight, per-request deadlines, backpressure (``QueueFull``), futures and
asyncio out; the baselines at equal resources with the same call: Uncoded
behind a load balancer, Replication, and ``Hedged`` requests. The data flow
is drawn at the top of letcc.serving.server.
"""
from letcc.serving.flights import RequestInfo
from letcc.serving.hedged import Hedged
from letcc.serving.server import DEFAULT_ROUNDS_IN_FLIGHT, CodedServer, QueueFull

__all__ = ["CodedServer", "Hedged", "QueueFull", "RequestInfo", "DEFAULT_ROUNDS_IN_FLIGHT"]
