"""A delete of a session with more children than one script takes (``DELETE_BATCH``, made 3
here): its children go a batch at a time (``discard_children``), then the session, with the
events one delete script would log, on every backend and both flavours; a delete stopped
between batches leaves a consistent session with fewer children, which a delete finishes."""

from __future__ import annotations

from typing import Any

import pytest

from redis_session import (
    ChildNotFound,
    ConcurrentChange,
    ForeignKey,
    RedisStore,
    Session,
    SessionLifecycleEvent,
    SessionNotFound,
    _sessions,
)
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


async def test_a_delete_stopped_between_batches_leaves_a_consistent_session(
    backend: Backend, make_store: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = make_store()
    await parent(store)
    kids = [await store.fork_child("p", f"a{n}") for n in range(2 * BATCH + 1)]
    in_order = [c.key for c in await store.children_of("p")]
    monkeypatch.setattr(_sessions, "MAX_DELETE_BATCHES", 1)
    with pytest.raises(ConcurrentChange):
        await store.delete("p")
    # The first batch was discarded as discard_child would: the rest is a session as before.
    left = [c.key for c in await store.children_of("p")]
    assert left == in_order[BATCH:]
    assert [m.content for m in (await store.get("p")).history] == ["p0", "p1", "p2"]
    for key in in_order[:BATCH]:
        with pytest.raises(ChildNotFound):
            await store.get_child(key)
    late = await store.fork_child("p", "late")  # the tree's generation moved on: known again
    await store.append_child_message(late.key, msg("x"))
    await store.append_message("p", msg("p3"))
    assert [e.type for e in logged(backend)].count("discard") == BATCH
    monkeypatch.setattr(_sessions, "MAX_DELETE_BATCHES", 10)
    assert await store.delete("p") is True
    assert backend.session_keys() == []
    assert [e.type for e in logged(backend)].count("discard") == len(kids) + 1


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
    assert await store.delete("p", idempotency_key="del-1") is True  # the caller's retry
    assert sorted(c.key for c in await store.children_of("p")) == sorted(c.key for c in kept)
    assert await store.delete("p") is True


async def test_a_batch_removes_a_damaged_member_and_refuses_a_foreign_child_whole(
    backend: Backend, make_store: StoreFactory
) -> None:
    store = make_store()
    raw = backend.sync_client()
    keys = backend.schema
    await parent(store)
    kids = [await store.fork_child("p", f"a{n}") for n in range(BATCH + 1)]
    bad = b"p:child:\xff:1"
    raw.zadd(keys.session("p").kids, {bad: 0})  # first in the kids zset: in the first batch
    raw.hset(b"".join([keys.prefix.encode(), b"child:{p}:child:\xff:1"]), "v", "1")
    # Another program's hash under a child's key (no schema version): nothing is removed.
    foreign = keys.child(kids[0].key).meta
    saved = raw.hgetall(foreign)
    raw.delete(foreign)
    raw.hset(foreign, "theirs", "1")
    before = sorted(raw.keys(f"{keys.prefix}*"))
    with pytest.raises(ForeignKey):
        await store.delete("p")
    assert sorted(raw.keys(f"{keys.prefix}*")) == before
    raw.delete(foreign)
    raw.hset(foreign, mapping=saved)
    assert await store.delete("p") is True
    assert backend.session_keys() == []  # the damaged member's keys went too
    assert [e.child_key for e in logged(backend) if e.type == "discard"] == [c.key for c in kids]
