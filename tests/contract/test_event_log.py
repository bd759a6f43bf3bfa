"""The durable event log, written by the scripts that make the changes: ids, refusals, trimming,
``end``, and ``expire`` events from the reaper."""

from __future__ import annotations

import asyncio
import inspect
import time
from typing import Any

import pytest

from redis_session import (
    ChildAlreadyMerged,
    DuplicateSession,
    ForeignKey,
    Message,
    Session,
    SessionLifecycleEvent,
    SessionNotFound,
)
from redis_session._core.eventlog import REAP_EVERY, entry_event
from tests.conftest import Backend, StoreFactory
from tests.support.clock import FakeClock, wait_gone

STORY = ["create", "fork", "merge", "fork", "discard", "compact", "delete"]


def log_entries(backend: Backend, key: str = "p") -> list[tuple[bytes, dict[bytes, bytes]]]:
    raw = backend.sync_client()
    return [
        (bytes(i), {bytes(f): bytes(v) for f, v in e.items()})
        for i, e in raw.xrange(backend.schema.log_of(key))
    ]


def logged(backend: Backend, key: str = "p") -> list[SessionLifecycleEvent]:
    events = [entry_event(i, fields) for i, fields in log_entries(backend, key)]
    assert None not in events
    return events  # type: ignore[return-value]


async def story(store: Any) -> None:
    await store.create(Session(key="p", history=[Message(role="user", content="q")]))
    a = await store.fork_child("p", "alpha")
    await store.merge_child(a.key, "summary")
    b = await store.fork_child("p", "beta")
    await store.discard_child(b.key)
    await store.compact_messages("p", 0, "s")
    await store.delete("p")


async def test_every_change_is_logged_with_the_id_the_hook_gets(
    backend: Backend, make_store: StoreFactory
) -> None:
    seen: list[SessionLifecycleEvent] = []
    store = make_store(lifecycle_hook=seen.append)
    await story(store)
    events = logged(backend)
    assert [e.type for e in events] == STORY
    assert [(e.type, e.id, e.key, e.child_key) for e in events] == [
        (e.type, e.id, e.key, e.child_key) for e in seen
    ]
    assert all(e.id for e in seen) and len({e.id for e in seen}) == len(seen)
    # each entry names the one before it: a reader tells a gap from no events
    entries = log_entries(backend)
    assert [f[b"p"] for _, f in entries] == [b"0-0", *(i for i, _ in entries[:-1])]


async def test_delete_logs_a_discard_for_each_live_child_it_removes(
    backend: Backend, make_store: StoreFactory
) -> None:
    seen: list[SessionLifecycleEvent] = []
    store = make_store(lifecycle_hook=seen.append)
    await store.create(Session(key="p"))
    merged = await store.fork_child("p", "merged")
    await store.merge_child(merged.key, "done")
    gone = await store.fork_child("p", "gone")
    await store.discard_child(gone.key)
    live = [await store.fork_child("p", f"live{n}") for n in range(3)]
    before = len(log_entries(backend))
    seen.clear()
    assert await store.delete("p") is True
    events = logged(backend)[before:]
    assert [(e.type, e.key, e.child_key, e.agent_name) for e in events] == [
        *(("discard", "p", c.key, c.agent_name) for c in live),
        ("delete", "p", "", ""),
    ]
    assert [(e.type, e.id, e.child_key) for e in seen] == [
        (e.type, e.id, e.child_key) for e in events
    ]
    assert await store.delete("p") is False  # nothing live left: nothing logged
    assert len(logged(backend)) == before + 4


async def test_a_refused_change_logs_nothing(backend: Backend, store: Any) -> None:
    await store.create(Session(key="p"))
    child = await store.fork_child("p", "a")
    await store.merge_child(child.key, "done")
    before = log_entries(backend)
    with pytest.raises(DuplicateSession):
        await store.create(Session(key="p"))
    with pytest.raises(ChildAlreadyMerged):
        await store.merge_child(child.key, "again")
    with pytest.raises(ChildAlreadyMerged):
        await store.discard_child(child.key)
    assert await store.delete("never-was") is False
    assert log_entries(backend) == before


async def test_end_marks_once_and_logs_once(backend: Backend, make_store: StoreFactory) -> None:
    seen: list[SessionLifecycleEvent] = []
    store = make_store(lifecycle_hook=seen.append)
    await store.create(Session(key="p"))
    assert (await store.get("p")).ended_at is None
    assert await store.end("p") is True
    ended = (await store.get("p")).ended_at
    assert ended is not None and ended.tzinfo is not None
    assert await store.end("p") is False
    assert (await store.get("p")).ended_at == ended
    assert [e.type for e in logged(backend)] == ["create", "end"]
    assert [e.type for e in seen] == ["create", "end"] and seen[1].id == logged(backend)[1].id
    await store.append_message("p", Message(role="user", content="still writable"))
    with pytest.raises(SessionNotFound):
        await store.end("nobody")


async def test_the_log_keeps_about_its_limit(backend: Backend, make_store: StoreFactory) -> None:
    store = make_store(event_log_max=10)
    await store.create(Session(key="p"))
    for i in range(250):  # one tree: one log, on a cluster too
        await store.fork_child("p", f"a{i}")
    length = backend.sync_client().xlen(backend.schema.log_of("p"))
    # MAXLEN ~ trims whole blocks of entries (100 per block by default): about the limit
    assert 10 <= length <= 10 + 200, length


async def test_no_log_and_no_publishing_when_events_are_off(
    backend: Backend, make_store: StoreFactory
) -> None:
    seen: list[SessionLifecycleEvent] = []
    store = make_store(publish_events=False, lifecycle_hook=seen.append)
    await story(store)
    assert log_entries(backend) == []
    assert [e.type for e in seen] == STORY and all(e.id == "" for e in seen)
    store = make_store(event_log_max=0)
    await store.create(Session(key="q"))
    assert log_entries(backend, "q") == []


async def test_another_programs_value_at_the_log_refuses_the_change(
    backend: Backend, store: Any
) -> None:
    backend.sync_client().set(backend.schema.log_of("p"), "not a stream")
    with pytest.raises(ForeignKey, match="log"):
        await store.create(Session(key="p"))
    with pytest.raises(SessionNotFound):
        await store.get("p")


# -- expire ------------------------------------------------------------------------------------


def tree_gone(backend: Backend, *keys: str) -> None:
    """Wait until the trees of ``keys`` expired on the server (their meta hashes gone)."""
    wait_gone(backend.sync_client(), *(backend.schema.session(k).meta for k in keys))


async def test_a_tree_left_to_expire_yields_one_expire_event(
    backend: Backend, make_store: StoreFactory
) -> None:
    seen: list[SessionLifecycleEvent] = []
    store = make_store(ttl=0.4, lifecycle_hook=seen.append)
    other = make_store(ttl=0.4, lifecycle_hook=seen.append)
    # "kept" is written by a store of a TTL no stall of a busy VM reaches (with 0.4 s, one
    # loop of two reaps on a cluster once took longer, and its append found it expired).
    keeper = make_store(ttl=30)
    # The store pays its set-up (connections, a cluster's slots, the scripts' first loads) on
    # a tree it deletes, not within the 0.4 s in which the fork must follow the create.
    await store.create(Session(key="warm"))
    await store.fork_child("warm", "kid")
    await store.delete("warm")
    await store.create(Session(key="gone"))
    await store.fork_child("gone", "kid")
    await keeper.create(Session(key="kept"))
    reaped: list[SessionLifecycleEvent] = []
    rounds_after = 0
    deadline = time.monotonic() + 10  # bounded: the reap comes once the server expired "gone"
    while rounds_after < 5 and time.monotonic() < deadline:  # two reapers race 5 rounds after
        await keeper.append_message("kept", Message(role="user", content="tick"))
        reaped += await store.reap_expired()
        reaped += await other.reap_expired()
        rounds_after += bool(reaped)
        await asyncio.sleep(0.02)
    assert [(e.type, e.key) for e in reaped] == [("expire", "gone")]
    assert [e.key for e in await store.list_sessions()] == ["kept"]
    expires = [e for e in logged(backend, "gone") if e.type == "expire"]
    assert [(e.key, e.id) for e in expires] == [("gone", reaped[0].id)]
    assert [e.id for e in seen if e.type == "expire"] == [reaped[0].id]  # the reaper's hook only
    assert await store.reap_expired() == []  # "gone" is reaped once, "kept" lives


async def test_creates_reap_what_expired_in_their_shard_at_most_once_a_pause(
    backend: Backend, make_store: StoreFactory, clock: FakeClock
) -> None:
    clock.freeze()  # the store's pause between two reaps of a shard runs on this clock only
    store = make_store(ttl=0.3)
    shard = backend.schema.index_of("first")
    beside = (f"new-{i}" for i in range(100_000) if backend.schema.index_of(f"new-{i}") == shard)
    second = next(
        k for k in (f"second-{i}" for i in range(100_000)) if backend.schema.index_of(k) == shard
    )

    def expired() -> list[str]:  # "first" and second among the expire events logged
        watched = ("first", second)
        logs = {backend.schema.log_of(k): k for k in watched}  # one log per slot
        found = (e for k in logs.values() for e in logged(backend, k) if e.type == "expire")
        return sorted(e.key for e in found if e.key in watched)

    await store.create(Session(key="first"))
    tree_gone(backend, "first")
    await store.create(Session(key=next(beside)))  # a create in the same index shard (slot)
    assert expired() == ["first"]  # reaped by that create, which starts the pause
    await store.create(Session(key=second))
    tree_gone(backend, second)
    await store.create(Session(key=next(beside)))
    assert expired() == ["first"]  # within the pause: this store does not reap the shard again
    clock.advance(REAP_EVERY)
    await store.create(Session(key=next(beside)))
    assert expired() == ["first", second]  # the pause over: the next create reaps it


async def test_an_expired_tree_deleted_or_created_again_before_a_reaper_logs_expire(
    backend: Backend, make_store: StoreFactory
) -> None:
    seen: list[SessionLifecycleEvent] = []
    store = make_store(ttl=0.2, lifecycle_hook=seen.append)
    await store.create(Session(key="a"))
    await store.create(Session(key="b"))
    tree_gone(backend, "a", "b")
    assert await store.delete("a") is False
    # The new b outlives the reap below however late that runs: created with ttl=0.2, it
    # expired too when the reap came over 212 ms later (a busy machine), and was reaped.
    lasting = make_store(ttl=60, lifecycle_hook=seen.append)
    await lasting.create(Session(key="b"))
    a = [(e.type, e.key) for e in logged(backend, "a") if e.key == "a"]
    b = [(e.type, e.key) for e in logged(backend, "b") if e.key == "b"]
    assert a == [("create", "a"), ("expire", "a")]
    assert b == [("create", "b"), ("expire", "b"), ("create", "b")]
    assert [(e.type, e.key) for e in seen[-3:]] == [a[1], *b[1:]]
    assert await store.reap_expired() == []  # each tree once


def _under_prefix(backend: Backend) -> dict[bytes, int]:
    """Every key under the test's prefix, with its time to live (ms; -1: none)."""
    raw = backend.sync_client()
    keys: list[bytes] = []
    if backend.cluster is not None:
        for node in raw.get_primaries():
            keys += raw.get_redis_connection(node).keys(backend.prefix + "*")
    else:
        keys = list(raw.scan_iter(match=backend.prefix + "*", count=1000))
    return {bytes(k): int(raw.pttl(k)) for k in keys}


async def test_a_prefix_emptied_leaves_no_key_for_ever(
    backend: Backend, make_store: StoreFactory
) -> None:
    # The last session deleted: the event log (no group reads it) and the delete's retry token
    # go within a minute; nothing under the prefix is kept for ever.
    store = make_store()
    await store.create(Session(key="a", history=[Message(role="user", content="q")]))
    await store.create(Session(key="b"))
    await store.delete("a")
    log = backend.schema.log_of("b")
    assert _under_prefix(backend)[log.encode()] == -1  # a session left: no TTL on the log
    await store.delete("b")
    left = _under_prefix(backend)
    if backend.cluster is not None:  # the registry of index shards (three copies) stays
        registry = [k for k in left if b"index-shards" in k]
        assert 0 < len(registry) <= 3 and all(left.pop(k) == -1 for k in registry)
    assert left and all(0 < ms <= 60_000 for ms in left.values()), left


async def test_a_log_a_group_reads_stays_when_the_last_session_goes(
    backend: Backend, make_store: StoreFactory
) -> None:
    store = make_store()
    await store.create(Session(key="a"))
    listener = store.listen(group="audit", since="earliest")
    listener = (await listener) if inspect.isawaitable(listener) else listener
    assert (await _get(listener)).type == "create"
    await store.delete("a")
    log = backend.schema.log_of("a").encode()
    assert _under_prefix(backend)[log] == -1  # the group still reads it
    await _close(listener)


async def test_the_next_event_takes_the_logs_expiry_off(
    backend: Backend, make_store: StoreFactory
) -> None:
    # The log has no TTL (out of volatile-* eviction's reach), whatever its retention; the
    # expiry the last delete gave it goes with the next event, which a listener must not lose.
    store = make_store(event_log_age=2.0)
    await store.create(Session(key="a"))
    log = backend.schema.log_of("a").encode()
    assert _under_prefix(backend)[log] == -1
    await store.delete("a")
    assert 0 < _under_prefix(backend)[log] <= 60_000
    await store.create(Session(key="a"))
    assert _under_prefix(backend)[log] == -1
    assert [e.type for e in logged(backend, "a")] == ["create", "delete", "create"]


async def _get(listener: Any) -> Any:
    got = listener.get(timeout=5)
    return (await got) if inspect.isawaitable(got) else got


async def _close(listener: Any) -> None:
    done = listener.aclose() if hasattr(listener, "aclose") else listener.close()
    if inspect.isawaitable(done):
        await done
