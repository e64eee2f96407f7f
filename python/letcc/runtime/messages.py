"""The binary form of the local backend's hot replies.

Tasks reach the workers as records in shared memory (csrc/control_words.hpp),
and an answer to the master's current round is counted there too; what still
travels as a message on every round is a worker's "done" for a round the
master has left and its "cancelled". Those two are fixed-size structs, packed
and parsed without pickle; everything else (layouts, probes, errors with their
tracebacks, stop) stays a pickled tuple. A pickled payload starts with the
PROTO opcode 0x80, so the first byte tells them apart. Both kinds travel in
letcc.runtime.frames' framing.

    done     b"D" + <q round>
    cancelled b"C" + <q round>
"""
from __future__ import annotations

import struct

from letcc.runtime.frames import _LEN32

__all__ = ["DONE", "CANCELLED", "reply_frame", "parse_reply"]

DONE, CANCELLED = 0x44, 0x43          # b"D", b"C"
_REPLY = struct.Struct("<cq")
# frames.py's header of this fixed size
_REPLY_HEAD = _LEN32.pack(_REPLY.size)
_KINDS = {DONE: "done", CANCELLED: "cancelled"}
_CODES = {"done": b"D", "cancelled": b"C"}


def reply_frame(kind: str, r: int) -> bytes:
    """The framed "done" / "cancelled" reply for round r."""
    return _REPLY_HEAD + _REPLY.pack(_CODES[kind], r)


def parse_reply(payload: bytes) -> tuple:
    """(kind, round) of a binary reply payload (first byte DONE or CANCELLED)."""
    code, r = _REPLY.unpack(payload)
    return _KINDS[code[0]], r
