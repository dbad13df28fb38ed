import pytest

from tinycache import LRUCache, memoize


def test_put_and_get():
    cache = LRUCache(2)
    cache.put("a", 1)
    assert cache.get("a") == 1
    assert cache.get("zzz") is None
    assert cache.get("zzz", 0) == 0
    assert (cache.hits, cache.misses) == (1, 2)


def test_evicts_oldest_insert():
    cache = LRUCache(2)
    cache.put("a", 1)
    cache.put("b", 2)
    cache.put("c", 3)
    assert "a" not in cache
    assert cache.keys() == ["b", "c"]
    assert cache.evictions == 1


def test_update_keeps_size():
    cache = LRUCache(2)
    cache.put("a", 1)
    cache.put("a", 2)
    assert len(cache) == 1
    assert cache.get("a") == 2


def test_invalid_capacity():
    with pytest.raises(ValueError):
        LRUCache(0)


def test_memoize_calls_once():
    calls = []

    @memoize(capacity=4)
    def square(n):
        calls.append(n)
        return n * n

    assert square(3) == 9
    assert square(3) == 9
    assert calls == [3]
