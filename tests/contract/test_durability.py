"""The durability knob: WAIT for replicas on the connection that wrote."""

from __future__ import annotations

from typing import Any

import pytest

from redis_session import DurabilityNotReached, InvalidArgument, Message, Session
from tests.conftest import AwaitableStore, Backend, StoreFactory

REPLICAS = {"redis": 0, "valkey": 0, "cluster": 1, "sentinel": 1}


@pytest.mark.parametrize("flavour_name", ["sync", "async"])
async def test_writes_wait_for_the_replicas_there_are(
    server_backend: Backend, flavour_name: str
) -> None:
    """On real servers only: fakeredis has no replication."""
    backend = server_backend
    stores: list[Any] = []

    def make_store(**options: Any) -> Any:
        store: Any
        if flavour_name == "sync":
            store = AwaitableStore(backend.sync_store(**options))
        else:
            store = backend.async_store(**options)
        stores.append(store)
        return store

    try:
        await _durability_story(backend, make_store)
    finally:
        for s in stores:
            await s.close()


async def _durability_story(backend: Backend, make_store: StoreFactory) -> None:
    replicas = REPLICAS[backend.name]
    # One replica more than there are: WAIT returns at its timeout. Without replicas nothing
    # acks, so a short one; with one, long enough for it to ack on a loaded machine.
    store = make_store(wait_replicas=replicas + 1, wait_timeout=1.5 if replicas else 0.1)
    with pytest.raises(DurabilityNotReached) as info:
        await store.create(Session(key="d"))
    assert (info.value.acked, info.value.wanted) == (replicas, replicas + 1)
    assert (await store.get("d")).key == "d"  # applied on the primary all the same
    if replicas:
        durable = make_store(wait_replicas=replicas, wait_timeout=5)
        assert await durable.append_message("d", Message(role="user", content="safe")) is True
        child = await durable.fork_child("d", "a")
        assert await durable.merge_child(child.key, "s") == 1
        assert [m.content for m in await durable.get_history("d")] == ["safe", "s"]


async def test_durability_options_are_validated(make_store: StoreFactory) -> None:
    with pytest.raises(InvalidArgument, match="wait_replicas"):
        make_store(wait_replicas=-1)
    with pytest.raises(InvalidArgument, match="wait_timeout"):
        make_store(wait_replicas=1, wait_timeout=0)
