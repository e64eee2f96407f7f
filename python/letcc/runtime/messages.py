"""The binary form of the local backend's two hot messages.

Every round sends each worker a task and gets back "done" (or "cancelled"):
two messages per worker per round, on 16 processes sharing 2 cores. Those
two are fixed-size structs, packed and parsed without pickle; everything else
(layouts, probes, errors with their tracebacks, stop) stays a pickled tuple.
A pickled payload starts with the PROTO opcode 0x80, so the first byte tells
them apart. Both kinds travel in letcc.runtime.frames' framing.

    task     b"T" + <q round, q rows per slot, d sleep seconds, q chunk rows (0: none),
                     q input slot (OWN_SLOT: the worker's rank), q ring slot (the region of
                     the segments, rounds in flight)>
    done     b"D" + <q round>
    cancelled b"C" + <q round>
"""
from __future__ import annotations

import struct

from letcc.runtime.frames import _LEN32

__all__ = ["TASK", "DONE", "CANCELLED", "OWN_SLOT", "task_frame", "parse_task", "reply_frame", "parse_reply"]

TASK, DONE, CANCELLED = 0x54, 0x44, 0x43          # b"T", b"D", b"C"
# a task's input slot meaning "the slot of your own rank": one message then serves every
# worker of a round (the usual case: every worker encoded, no per-worker sleep), framed once
OWN_SLOT = -2
_TASK = struct.Struct("<cqqdqqq")
_REPLY = struct.Struct("<cq")
# frames.py's header of these fixed sizes
_TASK_HEAD = _LEN32.pack(_TASK.size)
_REPLY_HEAD = _LEN32.pack(_REPLY.size)
_KINDS = {DONE: "done", CANCELLED: "cancelled"}
_CODES = {"done": b"D", "cancelled": b"C"}


def task_frame(r: int, b: int, sleep_s: float, chunk_rows: int | None, slot: int = 0, ring: int = 0) -> bytes:
    """The framed task message (chunk_rows None or 0: the whole batch in one call;
    slot: the input slot in region `ring` of the segments)."""
    return _TASK_HEAD + _TASK.pack(b"T", r, b, sleep_s, chunk_rows or 0, slot, ring)


def parse_task(payload: bytes) -> tuple:
    """(round, b, sleep_s, chunk_rows or None, slot, ring) of a task payload."""
    _, r, b, sleep_s, chunk, slot, ring = _TASK.unpack(payload)
    return r, b, sleep_s, (chunk or None), slot, ring


def reply_frame(kind: str, r: int) -> bytes:
    """The framed "done" / "cancelled" reply for round r."""
    return _REPLY_HEAD + _REPLY.pack(_CODES[kind], r)


def parse_reply(payload: bytes) -> tuple:
    """(kind, round) of a binary reply payload (first byte DONE or CANCELLED)."""
    code, r = _REPLY.unpack(payload)
    return _KINDS[code[0]], r
