"""Preallocated shared-memory slots: the only path coded inputs and outputs take.

A ``SlotArray`` is one POSIX shared-memory segment holding ``n_slots`` equal
slots of up to ``rows_cap`` rows of ``row_shape`` items each (slot j belongs to
worker j). A round with b rows per worker uses the first ``n_slots * b`` rows of
the segment as one C-contiguous array of shape (n_slots, b, *row_shape), so the
master can encode straight into it with one write and each worker's slot is a
contiguous block for any b <= rows_cap.

Regions (rounds in flight): a SlotArray may hold ``regions`` such blocks of
n_slots x rows_cap rows one after the other; region k is laid out like a
one-region array (``view(b, k)``, ``slot(j, b, k)``) and starts at the same
place for every b, so rounds with different b can be in flight in different
regions at once. One region (the default) is the layout above exactly.

Fixed slots (``fixed=True``, the output segments): slot j starts at row
j * rows_cap of its region whatever b is, and ``view(b, k)`` is the strided
(n_slots, b, *row_shape) view of those rows. Outputs need it: a worker cannot
be stopped inside a model call, so the answer of a round the master has left
may still be written after the master reused the region for a round with
another b. With slot j at row j * b, the late rows of worker j (written at
j * b_old) landed in other workers' slots of the new round (a silent wrong
answer); with a fixed start they land in worker j's own slot only, which its
answer to the new round (queued behind the old task) overwrites before the
master reads it. Inputs keep the contiguous layout the encoder writes in one
go: a late task reading inputs of another layout only spoils its own,
discarded, answer.

Ownership: the master process creates and unlinks every segment (so a killed
worker can never leak one). Workers only attach, and attach *untracked*: on
Python < 3.13 attaching registers the name with the resource tracker, which
would later double-unregister or unlink under the master's feet.

Names start with ``letcc_`` so a leak is easy to spot in /dev/shm.
"""
from __future__ import annotations

import math
import os
import secrets
import sys
from multiprocessing import resource_tracker, shared_memory
from typing import NamedTuple

import numpy as np

__all__ = ["SlotSpec", "SlotArray", "attach", "new_prefix", "SHM_PREFIX"]

SHM_PREFIX = "letcc_"


def new_prefix() -> str:
    """A short unique name prefix for one runtime's segments (macOS allows 31 chars)."""
    return f"{SHM_PREFIX}{os.getpid() % 100000}{secrets.token_hex(3)}"


class SlotSpec(NamedTuple):
    """What a worker needs to attach a SlotArray (a few dozen bytes, picklable)."""

    name: str
    n_slots: int
    rows_cap: int
    row_shape: tuple
    dtype: str          # numpy dtype string, e.g. '<f4'
    regions: int = 1    # blocks of n_slots x rows_cap rows (one per round in flight)
    fixed: bool = False  # slot j at row j * rows_cap for every b (else j * b): module docstring

    @property
    def row_items(self) -> int:
        return math.prod(self.row_shape)

    @property
    def region_items(self) -> int:
        return self.n_slots * self.rows_cap * self.row_items

    @property
    def nbytes(self) -> int:
        return self.regions * self.region_items * np.dtype(self.dtype).itemsize


def _views(buf, spec: SlotSpec) -> np.ndarray:
    flat = np.ndarray((spec.regions * spec.region_items,), dtype=np.dtype(spec.dtype), buffer=buf)
    return flat


class SlotArray:
    """Master side: creates the segment; ``view(b)`` is the (n_slots, b, *row_shape) array."""

    def __init__(self, name: str, n_slots: int, rows_cap: int, row_shape, dtype, regions: int = 1,
                 fixed: bool = False):
        row_shape = tuple(int(s) for s in row_shape)
        dtype = np.dtype(dtype)
        self.spec = SlotSpec(name, int(n_slots), int(rows_cap), row_shape, dtype.str, int(regions), bool(fixed))
        # size 0 is not allowed by shm_open/ftruncate users; keep at least one byte
        self._shm = shared_memory.SharedMemory(name=name, create=True, size=max(1, self.spec.nbytes))
        self._flat = _views(self._shm.buf, self.spec)
        self._cache: dict = {}          # (b, region) -> view: asked for several times a round
        self._fit = None                # the last (row_shape, dtype) that fits() matched

    @property
    def name(self) -> str:
        return self.spec.name

    def view(self, b: int, region: int = 0) -> np.ndarray:
        """Rows 0..b-1 of every slot of `region` as one (n_slots, b, *row_shape)
        array: contiguous, or for fixed slots a strided view."""
        hit = self._cache.get((b, region))
        if hit is not None:
            return hit
        s = self.spec
        if not 0 < b <= s.rows_cap:
            raise ValueError(f"b = {b} rows per slot does not fit the capacity {s.rows_cap}")
        if not 0 <= region < s.regions:
            raise ValueError(f"region {region} out of range ({s.regions} regions)")
        start = region * s.region_items
        if s.fixed:
            block = self._flat[start:start + s.region_items].reshape((s.n_slots, s.rows_cap) + s.row_shape)
            view = block[:, :b]
        else:
            view = self._flat[start:start + s.n_slots * b * s.row_items].reshape((s.n_slots, b) + s.row_shape)
        self._cache[(b, region)] = view
        return view

    def fits(self, b: int, row_shape, dtype) -> bool:
        s = self.spec
        if b > s.rows_cap:
            return False
        if self._fit is not None and self._fit == (row_shape, dtype):
            return True
        ok = tuple(row_shape) == s.row_shape and np.dtype(dtype).str == s.dtype
        if ok:
            self._fit = (row_shape, dtype)
        return ok

    def close(self) -> None:
        """Unmap and unlink (idempotent). Views handed out before must not be used after."""
        shm, self._shm = self._shm, None
        self._flat = None
        self._cache.clear()
        _release(shm, unlink=True)


class Attached:
    """Worker side: an attached segment and its flat array (never unlinks)."""

    def __init__(self, spec: SlotSpec):
        self.spec = spec
        self._shm = _attach_untracked(spec.name)
        self._flat = _views(self._shm.buf, spec)

    def slot(self, j: int, b: int, region: int = 0) -> np.ndarray:
        """Slot j's (b, *row_shape) block of `region` for a round with b rows per slot."""
        s = self.spec
        n = b * s.row_items
        start = region * s.region_items + j * (s.rows_cap * s.row_items if s.fixed else n)
        return self._flat[start:start + n].reshape((b,) + s.row_shape)

    def close(self) -> None:
        shm, self._shm = self._shm, None
        self._flat = None
        _release(shm, unlink=False)


def _release(shm, unlink: bool) -> None:
    """Unmap a segment (None: already released) and, for its owner, unlink it."""
    if shm is None:
        return
    try:
        shm.close()
    except BufferError:
        # a numpy view still references the buffer; the mapping goes when it is collected
        pass
    if unlink:
        try:
            shm.unlink()
        except FileNotFoundError:
            pass


def attach(spec: SlotSpec) -> Attached:
    return Attached(spec)


def _attach_untracked(name: str) -> shared_memory.SharedMemory:
    if sys.version_info >= (3, 13):
        return shared_memory.SharedMemory(name=name, track=False)
    # Python < 3.13 registers attached segments with the resource tracker; a worker
    # is single-threaded here, so swapping the hook out for this call is safe.
    original = resource_tracker.register
    resource_tracker.register = lambda *args, **kwargs: None
    try:
        return shared_memory.SharedMemory(name=name)
    finally:
        resource_tracker.register = original
