"""The LRU cache of decoder plans."""
import threading

import pytest

from letcc.codes._plan_cache import PlanCache


def test_lru_eviction_and_counts():
    cache = PlanCache(2)
    built = []

    def build(k):
        return lambda: built.append(k) or f"plan-{k}"

    assert cache.get("a", build("a")) == "plan-a"
    assert cache.get("b", build("b")) == "plan-b"
    assert cache.get("a", build("a")) == "plan-a"  # hit; "b" is now least recent
    cache.get("c", build("c"))                      # evicts "b"
    assert "a" in cache and "c" in cache and "b" not in cache
    assert built == ["a", "b", "c"] and (cache.hits, cache.misses) == (1, 3)
    cache.clear()
    assert len(cache) == 0 and cache.hits == 0


def test_size_zero_disables_caching():
    cache = PlanCache(0)
    calls = []
    for _ in range(3):
        cache.get("k", lambda: calls.append(1) or 1)
    assert len(calls) == 3 and len(cache) == 0


@pytest.mark.parametrize("bad, exc, message", [(-1, ValueError, "plan cache size must be >= 0, got -1"),
                                                (2.5, TypeError, "plan cache size must be an integer, got float 2.5"),
                                                (True, TypeError, "plan cache size must be an integer, got bool True")])
def test_bad_size(bad, exc, message):
    with pytest.raises(exc, match=message):
        PlanCache(bad)


def test_threads_share_one_cache():
    cache = PlanCache(8)
    results = []

    def work(i):
        for j in range(200):
            results.append(cache.get(j % 16, lambda j=j: j % 16))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 800 and len(cache) <= 8
    assert cache.hits + cache.misses == 800
