"""The local backend's processes: how they are started, and the shutdown that
releases everything (run by close() and by the backend's finalizer).

Processes are started with ``forkserver`` (Linux default here) or ``spawn``,
never ``fork``: a forked child of a process that initialised CUDA, or that holds
threads mid-lock, is unsafe. The forkserver preloads the worker module (and
torch when the master already imported it), so a replacement worker starts in
tens of milliseconds, not seconds.
"""
from __future__ import annotations

import functools
import multiprocessing as mp
import os
import sys
import time
from dataclasses import dataclass, field

from letcc.runtime.worker_main import STOP

__all__ = ["Resources", "shutdown", "context"]


@dataclass
class Resources:
    """Everything that must be released; shared with the finalizer (not the backend)."""

    handles: list
    lifeline: object = None
    bell: tuple = ()                 # the master's wake-ups: doorbell and wake pipes (both ends), timer
    poster: object = None            # letcc._core.TaskPoster over the control words
    segments: list = field(default_factory=list)
    closed: bool = False


def shutdown(res: Resources, ctl, join_timeout: float = 2.0) -> None:
    if res.closed:
        return
    res.closed = True
    try:
        if ctl is not None and ctl._flat is not None:
            ctl.view(1)[...] = STOP         # chunked or sleeping workers stop at once
            if res.poster is not None:
                res.poster.ring_all()       # and idle ones wake to see it
    except Exception:
        pass
    live = [h for h in res.handles if h is not None and h.state != "dead"]
    for h in live:
        try:
            h.conn.send(("stop",))
        except Exception:
            pass
    end = time.monotonic() + join_timeout
    for h in live:
        h.process.join(max(0.0, end - time.monotonic()))
    for h in res.handles:
        if h is None:
            continue
        if h.process.is_alive():
            h.process.terminate()
            h.process.join(0.5)
        if h.process.is_alive():
            h.process.kill()
            h.process.join()
        try:
            h.conn.close()
        except Exception:
            pass
        try:
            h.process.close()
        except Exception:
            pass
    if res.lifeline is not None:
        res.lifeline.close()
    for end in res.bell:
        end.close()
    for seg in res.segments:
        seg.close()
    res.segments.clear()
    if res.poster is not None:
        res.poster.release()            # its reference to the control words, before they are unmapped
    if ctl is not None:
        ctl.close()


def _factory_module(factory) -> str | None:
    """The module that defines model_factory (unwrapping functools.partial)."""
    while isinstance(factory, functools.partial):
        factory = factory.func
    mod = getattr(factory, "__module__", None) or type(factory).__module__
    return mod if mod and mod != "__main__" and mod in sys.modules else None


def context(start_method: str | None, model_factory):
    methods = mp.get_all_start_methods()
    if start_method is None:
        start_method = "forkserver" if "forkserver" in methods else "spawn"
    if start_method == "fork":
        raise ValueError("start_method='fork' is not allowed: fork is unsafe with CUDA and threads; "
                         "use 'forkserver' or 'spawn'")
    if start_method not in methods:
        raise ValueError(f"start_method {start_method!r} is not available here (have {methods})")
    ctx = mp.get_context(start_method)
    if start_method == "forkserver":
        # Modules imported once in the fork server instead of in every worker. This
        # takes effect only when this process starts its fork server (the first time).
        # "__main__" is the stdlib default (a script is then not re-run per worker).
        preload = ["__main__", "letcc.runtime._forkserver_path", "letcc.runtime.worker_main"]
        if "torch" in sys.modules:
            preload.append("torch")
        mod = _factory_module(model_factory)
        if mod is not None:
            preload.append(mod)
        ctx.set_forkserver_preload(preload)
        _start_forkserver()
    return ctx


def _start_forkserver() -> None:
    """Start the fork server now (no-op when running), with our sys.path (see
    letcc.runtime._forkserver_path)."""
    from multiprocessing import forkserver

    key = "LETCC_FORKSERVER_SYS_PATH"
    old = os.environ.get(key)
    os.environ[key] = os.pathsep.join(p for p in sys.path if isinstance(p, str))
    try:
        forkserver.ensure_running()
    finally:
        if old is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = old
