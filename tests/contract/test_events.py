"""Lifecycle events: the in-process hook, raw subscribers and the store's listener."""

from __future__ import annotations

import asyncio
import gc
import inspect
import json
from typing import Any

import pytest

from redis_session import (
    AsyncRedisStore,
    ChildAlreadyMerged,
    ChildNotFound,
    DuplicateSession,
    InvalidArgument,
    LifecycleEventType,
    Message,
    RedisStore,
    Session,
    SessionLifecycleEvent,
)
from redis_session._transport.url import async_close, sync_close
from tests.conftest import Backend, StoreFactory

EVENT_FIELDS = {"type", "id", "key", "child_key", "parent_key", "agent_name", "timestamp"}


async def next_event(listener: Any, timeout: float = 5.0) -> SessionLifecycleEvent | None:
    got = listener.get(timeout=timeout)
    return (await got) if inspect.isawaitable(got) else got  # type: ignore[no-any-return]


async def close(listener: Any) -> None:
    closing = listener.aclose() if hasattr(listener, "aclose") else listener.close()
    if inspect.isawaitable(closing):
        await closing


async def story(store: Any) -> str:
    """create, fork, merge, fork, discard, compact, delete; returns the merged child's key."""
    await store.create(Session(key="p", history=[Message(role="user", content="q")]))
    a = await store.fork_child("p", "alpha")
    await store.merge_child(a.key, "summary")
    b = await store.fork_child("p", "beta")
    await store.discard_child(b.key)
    await store.compact_messages("p", 0, "s")
    await store.delete("p")
    return str(a.key)


STORY = ["create", "fork", "merge", "fork", "discard", "compact", "delete"]


async def test_hook_sees_every_change_in_order(make_store: StoreFactory) -> None:
    seen: list[SessionLifecycleEvent] = []
    store = make_store(lifecycle_hook=seen.append)
    merged = await story(store)
    assert [e.type for e in seen] == STORY
    merge = seen[2]
    assert (merge.key, merge.parent_key, merge.child_key, merge.agent_name) == (
        "p", "p", merged, "alpha",
    )  # fmt: skip
    assert seen[0].child_key == "" and seen[0].key == "p"


async def test_async_store_awaits_a_coroutine_hook(backend: Backend) -> None:
    seen: list[str] = []

    async def hook(event: SessionLifecycleEvent) -> None:
        await asyncio.sleep(0)
        seen.append(event.type)

    store = backend.async_store(lifecycle_hook=hook)
    await story(store)
    assert seen == STORY
    await store.close()


async def test_a_failing_hook_does_not_undo_or_fail_the_change(make_store: StoreFactory) -> None:
    def hook(event: SessionLifecycleEvent) -> None:
        raise RuntimeError("observer broke")

    store = make_store(lifecycle_hook=hook)
    await store.create(Session(key="h"))
    assert (await store.get("h")).key == "h"


async def test_no_event_for_refused_operations(make_store: StoreFactory) -> None:
    seen: list[str] = []
    store = make_store(lifecycle_hook=lambda e: seen.append(e.type))
    await store.create(Session(key="p", history=[Message(role="user")]))
    child = await store.fork_child("p", "a")
    await store.merge_child(child.key, "s")
    seen.clear()
    refused = [
        (store.create(Session(key="p")), DuplicateSession),
        (store.merge_child(child.key, "again"), ChildAlreadyMerged),
        (store.discard_child(child.key), ChildAlreadyMerged),
        (store.discard_child("p:child:x:1"), ChildNotFound),
        (store.compact_messages("p", 99, "s"), InvalidArgument),
    ]
    for call, error in refused:
        with pytest.raises(error):
            await call
    assert await store.delete("never-existed") is False
    assert seen == []


async def test_raw_subscriber_gets_json_and_nothing_for_refusals(
    backend: Backend, store: Any
) -> None:
    raw = backend.sync_client()
    pubsub: Any = raw.pubsub(ignore_subscribe_messages=True)
    pubsub.subscribe(store.events_channel)
    await story(store)
    with pytest.raises(DuplicateSession):
        await store.create(Session(key="q"))
        await store.create(Session(key="q"))
    received: list[dict[str, str]] = []
    for _ in range(200):
        message = pubsub.get_message(timeout=0.05)
        if message is None and len(received) >= len(STORY) + 1:
            break
        if message is not None:
            received.append(json.loads(message["data"]))
    pubsub.close()
    assert [e["type"] for e in received] == [*STORY, "create"]
    compacted = EVENT_FIELDS | {"summary_tokens", "reclaimed_tokens"}  # a compaction's counts
    assert all(set(e) == (compacted if e["type"] == "compact" else EVENT_FIELDS) for e in received)
    for key in ("p", "q"):  # their places in the key's log (one per slot on a cluster)
        ids = [tuple(map(int, e["id"].split("-"))) for e in received if e["key"] == key]
        assert ids == sorted(ids) and len(set(ids)) == len(ids)


async def test_listener_yields_events_and_skips_garbage(backend: Backend, store: Any) -> None:
    listener = await store.listen()
    raw = backend.sync_client()
    raw.publish(store.events_channel, b"not json")
    raw.publish(store.events_channel, json.dumps({"type": "future-kind", "key": "k"}))
    await store.create(Session(key="l"))
    first = await next_event(listener)
    assert first is not None and first.type == "future-kind"  # unknown types still parse
    second = await next_event(listener)
    assert second is not None and second.type == LifecycleEventType.CREATE and second.key == "l"
    assert await next_event(listener, timeout=0.2) is None
    await close(listener)


@pytest.mark.parametrize("flavour", ["sync", "async"])
async def test_a_listener_outlives_the_store_and_client_that_made_it(
    backend: Backend, flavour: str
) -> None:
    """From redis 8.2 a client that is dropped closes its pool, and with it any subscriber's
    connection, and a dropped asyncio store closes its clients of the running loop (its loop
    watcher's finalizer): the listener keeps its client and its store alive itself."""
    listener: Any
    if flavour == "sync":
        listener = RedisStore(backend.sync_client(kept=False), prefix=backend.prefix).listen()
    else:
        made = AsyncRedisStore(backend.async_client(), prefix=backend.prefix)
        listener = await made.listen()
        del made
    gc.collect()
    for _ in range(5):  # the loop turns in which a dropped store's finalizers run
        await asyncio.sleep(0)
    backend.sync_store().create(Session(key="heard"))
    got = await next_event(listener)
    assert got is not None and (got.type, got.key) == (LifecycleEventType.CREATE, "heard")
    await close(listener)
    if flavour == "sync":
        sync_close(listener._client)
    else:
        await async_close(listener._client)  # with a Sentinel-managed client's sentinels


async def test_stores_with_other_prefixes_do_not_hear_each_other(
    backend: Backend, store: Any
) -> None:
    other = backend.sync_store(prefix=backend.prefix + "other:")
    listener = await store.listen()
    other.create(Session(key="x"))
    assert await next_event(listener, timeout=0.3) is None
    await close(listener)


async def test_publish_events_false_publishes_nothing(make_store: StoreFactory) -> None:
    quiet = make_store(publish_events=False)
    loud = make_store()
    listener = await loud.listen()
    await quiet.create(Session(key="x"))
    assert await next_event(listener, timeout=0.3) is None
    await close(listener)
