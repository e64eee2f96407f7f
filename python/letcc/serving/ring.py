"""The backend's ring slots as the dispatcher hands them out.

A backend built with ``rounds_in_flight=R`` has R ring slots, each with input
and output rows for every worker (letcc.runtime.backend). A coded round or a
task copy takes one while it is in flight. A new batch size, shape or dtype
would replace every slot's storage, so the slots are sized once, for the
largest unit of work, before the first one leaves.
"""
from __future__ import annotations

from collections import deque

__all__ = ["Ring"]


class Ring:
    """``slots`` slots for rounds (``free``), and ``spare`` more for second
    copies (systematic hedging: ``spare_free``), all of the backend's ring."""

    def __init__(self, backend, slots: int, max_rows: int, spare: int = 0):
        self.backend = backend
        self.free: deque = deque(range(slots))
        self.spare_free: deque = deque(range(slots, slots + spare))
        self.max_rows = max_rows
        self._sized = False

    def size(self, layout) -> None:
        """Size every slot for max_rows rows of ``layout`` (row shape, dtype), once."""
        if not self._sized:
            shape, dtype = layout
            self.backend.input_view(self.max_rows, shape, dtype)
            self._sized = True

    def take(self) -> int:
        return self.free.popleft()

    def give(self, k: int) -> None:
        self.free.append(k)

    def take_spare(self):
        """A spare slot, or None when every one is in use."""
        return self.spare_free.popleft() if self.spare_free else None

    def give_spare(self, k: int) -> None:
        self.spare_free.append(k)
