"""A delete of a session with more children than one script takes (``DELETE_BATCH``, made 3
here): its children go a batch at a time (``discard_children``), then the session, with the
events one delete script would log, on every backend and both flavours; a delete stopped
between batches leaves a consistent session with fewer children, which a delete finishes."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from redis_session import (
    ChildNotFound,
    ConcurrentChange,
    ForeignKey,
    RedisStore,
    Session,
    SessionLifecycleEvent,
    SessionNotFound,
)
from redis_session._core import sessions as _sessions
from tests.conftest import Backend, StoreFactory
from tests.contract.test_children import msg, parent
from tests.contract.test_event_log import logged

BATCH = 3


@pytest.fixture(autouse=True)
def small_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_sessions, "DELETE_BATCH", BATCH)


def scripts_sent(store: RedisStore, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the scripts ``store`` sends from now on."""
    names: list[str] = []
    execute = store._execute

    def spy(request: Any) -> Any:
        name = getattr(request, "name", None)
        if name is not None:
            names.append(name)
        return execute(request)

    monkeypatch.setattr(store, "_execute", spy)
    return names


async def test_children_go_in_batches_with_the_events_of_one_delete(
    backend: Backend, make_store: StoreFactory
) -> None:
    seen: list[SessionLifecycleEvent] = []
    store = make_store(lifecycle_hook=seen.append)
    await parent(store)
    merged = await store.fork_child("p", "merged")
    await store.merge_child(merged.key, "done")
    gone = await store.fork_child("p", "gone")
    await store.discard_child(gone.key)
    live = [await store.fork_child("p", f"live{n}") for n in range(8)]
    await store.append_child_message(live[0].key, msg("work"))
    in_order = [c.key for c in await store.children_of("p")]  # the kids zset's order
    assert sorted(in_order) == sorted([merged.key, *(c.key for c in live)])
    before = len(logged(backend))
    seen.clear()
    assert await store.delete("p") is True
    events = logged(backend)[before:]
    assert [(e.type, e.child_key) for e in events] == [
        *(("discard", k) for k in in_order if k != merged.key),
        ("delete", ""),
    ]
    assert [(e.type, e.id) for e in seen] == [(e.type, e.id) for e in events]
    assert backend.session_keys() == []
    for child in (merged, *live):
        with pytest.raises(ChildNotFound):
            await store.get_child(child.key)
    with pytest.raises(SessionNotFound):
        await store.get("p")
    assert await store.delete("p") is False
    assert len(logged(backend)) == before + len(live) + 1


@pytest.mark.parametrize("children", [BATCH, BATCH + 1, 3 * BATCH + 2])
def test_a_delete_sends_a_batch_per_full_batch_then_one_delete(
    backend: Backend, monkeypatch: pytest.MonkeyPatch, children: int
) -> None:
    store = backend.sync_store()
    store.create(Session(key="p"))
    for n in range(children):
        store.fork_child("p", f"a{n}")
    sent = scripts_sent(store, monkeypatch)
    assert store.delete("p") is True
    batches = (children - 1) // BATCH  # the last (up to a whole batch) goes with the session
    assert sent == ["discard_children"] * batches + ["delete"]
    assert backend.session_keys() == []


def test_a_delete_stopped_between_batches_leaves_a_consistent_session(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = backend.sync_store(ttl=600)
    other = backend.sync_store(ttl=600)  # another worker, which knew the tree before
    raw = backend.sync_client()
    sk = backend.schema.session("p")
    store.create(Session(key="p", history=[msg(f"p{i}") for i in range(3)]))
    merged = store.fork_child("p", "merged")  # first in the kids zset: in the first batch
    first = store.merge_child(merged.key, "done", idempotency_key="m-1")
    kids = [store.fork_child("p", f"a{n}") for n in range(2 * BATCH)]
    other.append_message("p", msg("from the other worker"))
    in_order = [c.key for c in store.children_of("p")]
    assert in_order[0] == merged.key
    tg = int(raw.hget(sk.meta, "tg") or 0)
    sent = scripts_sent(store, monkeypatch)
    execute = store._execute

    def outage_after_one_batch(request: Any) -> Any:
        if sent and getattr(request, "name", None) is not None:  # the second script
            raise redis.ConnectionError("the network went away")
        return execute(request)

    monkeypatch.setattr(store, "_execute", outage_after_one_batch)
    with pytest.raises(redis.ConnectionError):
        store.delete("p")
    monkeypatch.setattr(store, "_execute", execute)
    # The first batch went as discard_child (and a merge that prunes) would have it go: the
    # rest is a session as before, with fewer children.
    assert sent == ["discard_children"]
    assert [c.key for c in store.children_of("p")] == in_order[BATCH:]
    assert raw.hget(sk.meta, "tg") == b"%d" % (tg + 1)
    done = {bytes(m) for m in raw.zrange(sk.done, 0, -1)}
    assert done == {b"m" + merged.key.encode()} | {b"d" + k.encode() for k in in_order[1:BATCH]}
    assert 0 < raw.pttl(sk.done) <= 600 * 1000 * 17 // 16  # it expires with the tree
    assert first == 1
    # The merge's retry finds its success (0 appended: the count went with the child's record,
    # as after a merge that prunes it), not ChildNotFound.
    assert store.merge_child(merged.key, "done", idempotency_key="m-1") == 0
    for key in in_order[1:BATCH]:
        with pytest.raises(ChildNotFound):
            store.get_child(key)
    assert [m.content for m in store.get("p").history][-1] == "from the other worker"
    late = other.fork_child("p", "late")  # the worker that knew the tree learns it again
    other.append_child_message(late.key, msg("x"))
    other.append_message("p", msg("p4"))
    assert [e.type for e in logged(backend)].count("discard") == BATCH - 1
    assert store.delete("p") is True
    assert backend.session_keys() == []
    assert [e.type for e in logged(backend)].count("discard") == len(kids) + 1


def test_a_delete_gives_up_on_children_forked_as_fast_as_it_removes_them(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = backend.sync_store()
    store.create(Session(key="p"))
    for n in range(BATCH + 1):
        store.fork_child("p", f"a{n}")
    execute = store._execute
    storm = backend.sync_store()
    forked = [0]

    def forker(request: Any) -> Any:
        if getattr(request, "name", None) == "discard_children":  # a fork storm meanwhile
            for _ in range(BATCH):
                forked[0] += 1
                storm.fork_child("p", f"b{forked[0]}")
        return execute(request)

    monkeypatch.setattr(store, "_execute", forker)
    with pytest.raises(ConcurrentChange):
        store.delete("p")
    # Bounded: the batches the first count filled (1) plus DELETE_ATTEMPTS.
    assert forked[0] == BATCH * ((BATCH + 1) // BATCH + _sessions.DELETE_ATTEMPTS)
    monkeypatch.setattr(store, "_execute", execute)
    assert store.delete("p") is True
    assert backend.session_keys() == []


async def test_a_retried_batched_delete_leaves_a_session_made_again_alone(
    backend: Backend, make_store: StoreFactory
) -> None:
    store = make_store()
    await parent(store)
    for n in range(2 * BATCH):
        await store.fork_child("p", f"a{n}")
    assert await store.delete("p", idempotency_key="del-1") is True
    await parent(store)  # made again, with more children than a batch
    kept = [await store.fork_child("p", f"b{n}") for n in range(2 * BATCH)]
    before = len(logged(backend))
    assert await store.delete("p", idempotency_key="del-1") is True  # the caller's retry
    assert sorted(c.key for c in await store.children_of("p")) == sorted(c.key for c in kept)
    assert len(logged(backend)) == before  # nothing discarded, nothing logged
    assert await store.delete("p") is True


@pytest.mark.parametrize("foreign", [0, BATCH], ids=["first-batch", "second-batch"])
async def test_a_foreign_child_stops_the_delete_at_its_batch_with_nothing_of_it_removed(
    backend: Backend, make_store: StoreFactory, foreign: int
) -> None:
    store = make_store()
    raw = backend.sync_client()
    keys = backend.schema
    await parent(store)
    kids = [await store.fork_child("p", f"a{n}") for n in range(3 * BATCH)]
    bad = b"p:child:\xff:1"
    raw.zadd(keys.session("p").kids, {bad: 0})  # first in the kids zset: in the first batch
    raw.hset(keys.session("p").meta, "kc", len(kids) + 1)  # the child count it would write
    raw.hset(b"".join([keys.prefix.encode(), b"child:{p}:child:\xff:1"]), "v", "1")
    # Another program's hash under a child's key (no schema version): its batch removes
    # nothing, the batches before it are done.
    at = keys.child(kids[foreign].key).meta
    saved = raw.hgetall(at)
    raw.delete(at)
    raw.hset(at, "theirs", "1")
    with pytest.raises(ForeignKey):
        await store.delete("p")
    left = [c.key for c in await store.children_of("p")]  # the foreign one skipped, logged
    done_before = [] if foreign < BATCH else [c.key for c in kids[: BATCH - 1]]
    assert left == [c.key for c in kids if c.key not in done_before and c != kids[foreign]]
    discards = [e.child_key for e in logged(backend) if e.type == "discard"]
    assert discards == done_before  # the damaged member went without an event
    raw.delete(at)
    raw.hset(at, mapping=saved)
    assert await store.delete("p") is True
    assert backend.session_keys() == []  # the damaged member's keys went too
    discards = [e.child_key for e in logged(backend) if e.type == "discard"]
    assert discards == [c.key for c in kids]
