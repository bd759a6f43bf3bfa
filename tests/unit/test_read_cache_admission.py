"""The read cache's bound and admission (no Redis): a full cache holds a session from its
second read within the doorkeeper's window, and a one-off read evicts nothing.
"""

from __future__ import annotations

from redis_session._core.cache import DOORKEEPER_MIN, Held, ReadCache


def entry(size: int, token: bytes = b"t") -> Held:
    return Held(token, b"1", 0, [], 0, 0, size)


def held(cache: ReadCache) -> list[str]:
    return list(cache._entries)


def test_a_cache_with_room_holds_at_once_and_evicts_the_least_recently_read() -> None:
    cache = ReadCache(100)
    assert cache.put("a", entry(40)) and cache.put("b", entry(40))
    assert cache.get("a") is not None  # read: "b" is the least recently read now
    assert not cache.put("c", entry(40))  # full: a first read is turned away
    assert held(cache) == ["b", "a"] and cache.size == 80
    assert cache.put("c", entry(40))  # its second read evicts the least recently read
    assert held(cache) == ["a", "c"] and cache.size == 80


def test_a_held_session_read_again_is_held_even_when_it_grew() -> None:
    cache = ReadCache(100)
    cache.put("a", entry(30))
    cache.put("b", entry(30))
    assert cache.put("a", entry(90))  # replaced, not admitted anew: "b" makes room
    assert held(cache) == ["a"] and cache.size == 90


def test_what_passes_the_bound_or_has_no_version_is_never_held() -> None:
    cache = ReadCache(100)
    for _ in range(2):
        assert not cache.put("big", entry(101))
        assert not cache.put("none", entry(10, token=b""))
    assert held(cache) == [] and cache.size == 0
    assert not ReadCache(0).put("a", entry(1))


def test_the_doorkeeper_forgets_the_oldest_keys_it_turned_away() -> None:
    cache = ReadCache(100)
    cache.put("a", entry(100))
    turned = [f"k{i}" for i in range(DOORKEEPER_MIN + 1)]
    for key in turned:
        assert not cache.put(key, entry(50))
    assert len(cache._seen) == DOORKEEPER_MIN
    assert not cache.put(turned[0], entry(50))  # forgotten: a first read again
    assert cache.put(turned[-1], entry(50))  # remembered: held, "a" evicted
    assert held(cache) == [turned[-1]]
    assert turned[-1] not in cache._seen


def test_the_doorkeeper_remembers_as_many_keys_as_the_cache_holds_entries() -> None:
    count = 2 * DOORKEEPER_MIN
    cache = ReadCache(count)
    for i in range(count):
        assert cache.put(f"h{i}", entry(1))
    for i in range(count + 1):
        assert not cache.put(f"k{i}", entry(1))
    assert len(cache._seen) == count and "k0" not in cache._seen


def test_clear_and_discard() -> None:
    cache = ReadCache(100)
    cache.put("a", entry(100))
    assert not cache.put("b", entry(10))
    cache.discard("a")
    assert cache.size == 0 and cache.put("b", entry(10))  # room again: held at once
    cache.put("c", entry(90))
    assert not cache.put("d", entry(10))
    cache.clear()
    assert held(cache) == [] and cache._seen == {} and cache.size == 0
