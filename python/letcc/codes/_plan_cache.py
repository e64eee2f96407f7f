"""A small thread-safe LRU cache of decoder operators.

A decoder's operator depends on which workers answered. A production loop sees
the same few available sets again and again (usually "everyone", or everyone
but one slow machine), so building the operator once per set and keeping the
most recent ones turns most decodes into a plain apply.
"""
from __future__ import annotations

from letcc._checks import as_int

import threading
from collections import OrderedDict
from typing import Callable, Hashable, TypeVar

T = TypeVar("T")


class PlanCache:
    """Least-recently-used map key -> plan, holding at most `maxsize` plans.

    `get(key, build)` returns the cached plan or calls `build()` and keeps its
    result. The build runs outside the lock: two threads missing on the same
    key may both build (the plans are equal; one is kept), but no thread waits
    on another's build. maxsize = 0 disables caching.
    """

    def __init__(self, maxsize: int = 128):
        self.maxsize = as_int(maxsize, "plan cache size", 0)
        self._plans: OrderedDict = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get(self, key: Hashable, build: Callable[[], T]) -> T:
        with self._lock:
            plan = self._plans.get(key)
            if plan is not None:
                self._plans.move_to_end(key)
                self.hits += 1
                return plan
            self.misses += 1
        plan = build()
        if self.maxsize:
            with self._lock:
                self._plans[key] = plan
                self._plans.move_to_end(key)
                while len(self._plans) > self.maxsize:
                    self._plans.popitem(last=False)
        return plan

    def __len__(self) -> int:
        return len(self._plans)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._plans

    def clear(self) -> None:
        with self._lock:
            self._plans.clear()
            self.hits = self.misses = 0
