import os
import sys

from harness_checks import plain  # before the tested code: its own, whatever that imports

sys.path.append(os.environ.get("WORKSPACE", "."))  # after the standard library: never shadows it

import random

from tinycache import LRUCache, memoize


def test_get_refreshes_recency():
    cache = LRUCache(2)
    cache.put("a", 1)
    cache.put("b", 2)
    assert plain(cache.get("a")) == 1
    cache.put("c", 3)
    assert plain(cache.keys()) == ["a", "c"]
    assert "b" not in cache
    assert plain(cache.get("a")) == 1
    assert plain(cache.evictions) == 1


def test_keys_order_after_gets():
    cache = LRUCache(3)
    for k in "abc":
        cache.put(k, k.upper())
    cache.get("a")
    assert plain(cache.keys()) == ["b", "c", "a"]
    cache.get("b")
    assert plain(cache.keys()) == ["c", "a", "b"]
    cache.get("b")
    assert plain(cache.keys()) == ["c", "a", "b"]
    cache.put("d", "D")
    assert plain(cache.keys()) == ["a", "b", "d"]


def test_falsy_values_are_refreshed_too():
    cache = LRUCache(2)
    cache.put("zero", 0)
    cache.put("none", None)
    assert plain(cache.get("zero", "missing")) == 0
    cache.put("new", 1)
    assert "zero" in cache and "none" not in cache


def test_put_existing_key_refreshes():
    cache = LRUCache(2)
    cache.put("a", 1)
    cache.put("b", 2)
    cache.put("a", 10)
    cache.put("c", 3)
    assert plain(cache.keys()) == ["a", "c"]
    assert plain(cache.get("a")) == 10


def test_miss_and_contains_do_not_refresh():
    cache = LRUCache(2)
    cache.put("a", 1)
    cache.put("b", 2)
    assert cache.get("x") is None
    assert "a" in cache
    cache.put("c", 3)
    assert plain(cache.keys()) == ["b", "c"]
    assert plain((cache.hits, cache.misses)) == (0, 1)


def test_capacity_one():
    cache = LRUCache(1)
    cache.put("a", 1)
    assert plain(cache.get("a")) == 1
    cache.put("b", 2)
    assert plain(cache.keys()) == ["b"]
    assert cache.get("a") is None


def test_memoize_keeps_hot_keys():
    calls = []

    @memoize(capacity=2)
    def square(n):
        calls.append(n)
        return n * n

    square(1)
    square(2)
    square(1)          # hit: 1 becomes most recently used
    square(3)          # evicts 2
    square(1)          # still cached
    square(2)          # recomputed
    assert plain(calls) == [1, 2, 3, 2]
    assert plain(square.cache.hits) == 2


def test_matches_reference_model():
    rng = random.Random(1234)
    cache = LRUCache(5)
    model = []  # least recently used first
    values = {}
    for _ in range(2000):
        key = rng.randrange(12)
        if rng.random() < 0.5:
            got = cache.get(key, "MISSING")
            if key in model:
                assert plain(got) == plain(values[key])
                model.remove(key)
                model.append(key)
            else:
                assert plain(got) == "MISSING"
        else:
            value = rng.random()
            cache.put(key, value)
            if key in model:
                model.remove(key)
            elif len(model) == 5:
                del values[model.pop(0)]
            model.append(key)
            values[key] = value
        assert plain(cache.keys()) == plain(model)
