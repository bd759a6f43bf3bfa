"""A caller's own retry: ``create``, ``fork_child``, ``merge_child``/``merge_child_as_author``,
``discard_child`` and ``delete`` take an ``idempotency_key``; the same call again with the same
key (the caller retrying after a lost reply or a crash) returns the first call's result: one
session,
one child, one merge, one logged event each, never ``DuplicateSession`` or
``ChildAlreadyMerged`` for the caller's own success. Another key, or none, is another call.
"""

from __future__ import annotations

from typing import Any

import pytest

from redis_session import (
    ChildAlreadyMerged,
    ChildNotFound,
    ChildSessionConfig,
    DuplicateSession,
    InvalidArgument,
    Message,
    Session,
    SessionLifecycleEvent,
)
from tests.conftest import Backend, StoreFactory


async def test_create_again_with_its_key_returns_the_first_result(
    make_store: StoreFactory,
) -> None:
    seen: list[SessionLifecycleEvent] = []
    store = make_store(lifecycle_hook=seen.append)
    session = Session(key="s", history=[Message(role="user", content="hi")])
    first = await store.create(session, idempotency_key="req-1")
    again = await store.create(session, idempotency_key="req-1")
    assert again.created_at == first.created_at and again.key == "s"
    with pytest.raises(DuplicateSession):
        await store.create(session, idempotency_key="req-2")
    with pytest.raises(DuplicateSession):
        await store.create(session)
    # logged once; the in-process hook hears every successful call, a retry's with no id
    assert [(e.type, bool(e.id)) for e in seen] == [("create", True), ("create", False)]
    assert len(await store.get_history("s")) == 1


async def test_fork_again_with_its_key_is_the_same_child(make_store: StoreFactory) -> None:
    seen: list[SessionLifecycleEvent] = []
    store = make_store(lifecycle_hook=seen.append)
    await store.create(Session(key="p", history=[Message(role="user", content="q")]))
    first = await store.fork_child("p", "helper", idempotency_key="fork-1")
    again = await store.fork_child("p", "helper", idempotency_key="fork-1")
    assert again.key == first.key and first.key.startswith("p:child:helper:")
    other = await store.fork_child("p", "helper", idempotency_key="fork-2")
    assert other.key != first.key
    assert [c.key for c in await store.children_of("p")] == [first.key, other.key]
    assert [e.type for e in seen if e.id] == ["create", "fork", "fork"]


async def test_merge_again_with_its_key_returns_the_first_result(
    make_store: StoreFactory,
) -> None:
    seen: list[SessionLifecycleEvent] = []
    store = make_store(lifecycle_hook=seen.append)
    await store.create(Session(key="p"))
    child = await store.fork_child("p", "helper")
    await store.append_child_message(child.key, Message(role="assistant", content="found it"))
    assert await store.merge_child(child.key, "", idempotency_key="merge-1") == 1
    assert await store.merge_child(child.key, "", idempotency_key="merge-1") == 1
    with pytest.raises(ChildAlreadyMerged):
        await store.merge_child(child.key, "", idempotency_key="merge-2")
    second = await store.fork_child("p", "critic")
    assert await store.merge_child_as_author(second.key, "ok", "lead", idempotency_key="m") == 1
    assert await store.merge_child_as_author(second.key, "ok", "lead", idempotency_key="m") == 1
    assert [m.content for m in await store.get_history("p")] == ["found it", "ok"]
    assert [e.type for e in seen if e.id].count("merge") == 2


async def test_discard_again_with_its_key_succeeds(make_store: StoreFactory) -> None:
    store = make_store()
    await store.create(Session(key="p"))
    child = await store.fork_child("p", "helper")
    await store.discard_child(child.key, idempotency_key="d-1")
    await store.discard_child(child.key, idempotency_key="d-1")
    with pytest.raises(ChildNotFound):
        await store.discard_child(child.key, idempotency_key="d-2")
    assert await store.children_of("p") == []


@pytest.mark.parametrize("bad", ["", "x" * 129, 7])
async def test_a_bad_idempotency_key_is_invalid(store: Any, bad: Any) -> None:
    with pytest.raises(InvalidArgument, match="idempotency_key"):
        await store.create(Session(key="s"), idempotency_key=bad)
    assert await store.delete("s") is False  # nothing written


async def test_delete_again_with_its_key_returns_the_first_result(
    backend: Backend, make_store: StoreFactory
) -> None:
    seen: list[SessionLifecycleEvent] = []
    store = make_store(lifecycle_hook=seen.append)
    await store.create(Session(key="d"))
    await store.fork_child("d", "helper")
    assert await store.delete("d", idempotency_key="del-1") is True
    assert await store.delete("d", idempotency_key="del-1") is True  # the caller's retry
    assert await store.delete("d", idempotency_key="del-2") is False  # another call
    assert await store.delete("d") is False
    assert [e.type for e in seen if e.id] == ["create", "fork", "discard", "delete"]
    # A session made again under the key is not removed by the first delete's retry.
    await store.create(Session(key="d"))
    assert await store.delete("d", idempotency_key="del-1") is True
    assert (await store.get("d")).key == "d"
    assert await store.delete("d") is True
    # Without a grace period the key is not kept: a retry answers as a second delete.
    quick = make_store(expired_grace=0)
    await quick.create(Session(key="q"))
    assert await quick.delete("q", idempotency_key="del-q") is True
    assert await quick.delete("q", idempotency_key="del-q") is False
    gone = backend.schema.session("d").gone
    assert 0 < backend.sync_client().pttl(gone) <= 86_400_000


async def test_a_session_made_again_by_a_create_of_the_same_key_is_read_anew(
    make_store: StoreFactory,
) -> None:
    # Each creation has its own token (readers compare it to know the session they hold), so
    # a store that holds the first session reads the second, not the first one's messages
    # under the second one's positions.
    writer, reader = make_store(), make_store()

    async def made(word: str) -> None:
        history = [Message(role="user", content=f"{word}{i}") for i in range(40)]
        session = Session(key="s", metadata={"who": word}, history=history)
        await writer.create(session, idempotency_key="same")

    await made("old")
    assert (await reader.get("s")).history[-1].content == "old39"  # held now
    assert await writer.delete("s") is True
    await made("new")
    got = await reader.get("s")
    assert got.metadata == {"who": "new"}
    assert [m.content for m in got.history] == [f"new{i}" for i in range(40)]
    # the first call's retry still finds the session it made (here: the second's)
    again = await writer.create(Session(key="s"), idempotency_key="same")
    assert again.created_at == got.created_at


async def test_a_child_forked_again_by_the_same_key_is_read_anew(make_store: StoreFactory) -> None:
    writer, reader = make_store(), make_store()
    await writer.create(Session(key="p", history=[Message(role="user", content="a")]))
    config = ChildSessionConfig(inherit_history=1)
    child = await writer.fork_child("p", "helper", config, idempotency_key="fork-1")
    assert [m.content for m in (await reader.get_child(child.key)).history] == ["a"]  # held
    await writer.discard_child(child.key)
    await writer.append_message("p", Message(role="user", content="b"))
    again = await writer.fork_child("p", "helper", config, idempotency_key="fork-1")
    assert again.key == child.key  # the same call's key: a child of the same key, made again
    assert [m.content for m in (await reader.get_child(child.key)).history] == ["b"]
