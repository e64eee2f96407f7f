"""What a worker does whatever the backend: become worker `rank`, build its
model, sleep a simulated delay, run a task's rows through the model in chunks.

The local backend's worker process (letcc.runtime.worker_main) and the Ray
actor (letcc.runtime.ray_backend) differ only in how a task reaches them, how
they learn that a round is cancelled and where the outputs go; they pass those
in as callables.
"""
from __future__ import annotations

import os
import sys
import time

import numpy as np

__all__ = ["worker_rank", "become_worker", "limit_threads", "prepare_model", "sleep_unless_cancelled",
           "run_chunks"]

_RANK: int | None = None


def worker_rank() -> int | None:
    """Index of the worker this process is (0..N-1), or None outside a worker."""
    return _RANK


def become_worker(rank: int) -> None:
    """Mark this process as worker `rank` (worker_rank(), $LETCC_WORKER_RANK)."""
    global _RANK
    _RANK = rank
    os.environ["LETCC_WORKER_RANK"] = str(rank)


def limit_threads(threads: int | None) -> None:
    """At most `threads` intra-op threads for torch and the BLAS pools (None: as they are)."""
    if not threads:
        return
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(threads)
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return
    threadpool_limits(threads)


def prepare_model(model, device: str):
    """(callable on numpy batches -> numpy, is_torch). nn.Modules move to `device`,
    switch to eval and run under torch.inference_mode; anything else gets numpy."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(model, torch.nn.Module):
        dev = torch.device(device)
        model = model.to(dev).eval()

        def call(x: np.ndarray) -> np.ndarray:
            with torch.inference_mode():
                xt = torch.from_numpy(x)
                if dev.type != "cpu":
                    xt = xt.to(dev, non_blocking=True)
                y = model(xt)
                return y.detach().cpu().numpy() if isinstance(y, torch.Tensor) else np.asarray(y)

        return call, True
    if not callable(model):
        raise TypeError(f"model_factory() returned {type(model).__name__}, which is not callable")

    def call(x: np.ndarray) -> np.ndarray:
        y = model(x)
        if torch is not None and isinstance(y, torch.Tensor):
            return y.detach().cpu().numpy()
        return np.asarray(y)

    return call, False


def sleep_unless_cancelled(seconds: float, wanted, nap) -> bool:
    """Sleep `seconds` (inf: until cancelled), asking ``wanted()`` after every
    ``nap(seconds left)`` (which sleeps a little, or less when woken); False
    when the round was cancelled meanwhile."""
    end = time.monotonic() + seconds
    while True:
        if not wanted():
            return False
        left = end - time.monotonic()
        if left <= 0:
            return True
        nap(left)


def run_chunks(call, x, chunk_rows: int | None, wanted, store):
    """Run ``call`` over the rows of `x`, `chunk_rows` at a time (None or 0: all
    in one call), asking ``wanted()`` between chunks; ``store(start, stop, y)``
    takes each chunk's output and returns None, or a reply that ends the task
    (e.g. a shape error). Returns None when every chunk was stored, "cancelled"
    when the round was cancelled between chunks, else store's reply."""
    b = x.shape[0]
    step = b if not chunk_rows else int(chunk_rows)
    for start in range(0, b, step):
        if start and not wanted():
            return "cancelled"
        stop = min(b, start + step)
        reply = store(start, stop, call(x[start:stop]))
        if reply is not None:
            return reply
    return None
