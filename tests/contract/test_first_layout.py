"""Sessions written by the first layout keep working, and move to this one on first write."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from redis_session import ChildAlreadyMerged, ChildNotFound, Message, SessionExpired
from tests.conftest import Backend, StoreFactory
from tests.support.first_layout import write_child, write_session


def msg(content: str, role: str = "user") -> Message:
    return Message(role=role, content=content)


def contents(messages: list[Message]) -> list[str]:
    return [m.content for m in messages]


async def test_a_first_layout_session_reads_and_keeps_its_ids(
    backend: Backend, make_store: StoreFactory
) -> None:
    raw = backend.sync_client()
    old = [msg(f"old {i}") for i in range(3)]
    write_session(raw, backend.schema, "s", old, metadata={"lang": "en"}, ttl_ms=60_000,
                  grace_ms=10_000)  # fmt: skip
    store = make_store(ttl=60)
    got = await store.get("s")
    assert contents(got.history) == ["old 0", "old 1", "old 2"] and got.metadata == {"lang": "en"}
    assert [s.key for s in await store.list_sessions()] == ["s"]
    assert await store.append_message("s", old[1]) is False  # its id is in the old buckets
    assert await store.append_message("s", msg("new")) is True
    assert contents(await store.get_history("s")) == ["old 0", "old 1", "old 2", "new"]
    sk = backend.schema.session("s")
    deadline = int(raw.hget(sk.meta, "x"))  # the first write gave the tree its deadline
    for name in (sk.meta, sk.msgs, sk.ids):
        assert raw.pexpiretime(name) == deadline
    assert raw.pexpiretime(sk.mark) > deadline
    await store.update_metadata("s", set={"tier": "gold"})
    assert (await store.get("s")).metadata == {"lang": "en", "tier": "gold"}


async def test_old_children_keep_working(backend: Backend, make_store: StoreFactory) -> None:
    raw = backend.sync_client()
    parent = [msg("q0"), msg("q1")]
    write_session(raw, backend.schema, "p", parent, ttl_ms=60_000, grace_ms=1000)
    work = [msg("w0", "assistant")]
    live = write_child(raw, backend.schema, "p", "live", parent[-1:], work, ttl_ms=60_000)
    done = write_child(raw, backend.schema, "p", "done", [], [msg("d0")], merged=True, seq=2,
                       ttl_ms=60_000)  # fmt: skip
    gone = write_child(raw, backend.schema, "p", "gone", [], [], discarded=True, seq=3)
    store = make_store(ttl=60)
    assert [c.key for c in await store.children_of("p")] == [live, done]
    child = await store.get_child(live)
    assert contents(child.history) == ["q1", "w0"] and child.merged_at is None
    assert (await store.get_child(done)).is_merged()
    with pytest.raises(ChildNotFound):
        await store.get_child(gone)
    assert await store.append_child_message(live, work[0]) is False  # old cids digests
    assert await store.append_child_message(live, msg("w1", "assistant")) is True
    with pytest.raises(ChildAlreadyMerged):
        await store.merge_child(done, "again")
    assert await store.merge_child(live, "") == 2  # its own messages, not the inherited one
    assert contents(await store.get_history("p")) == ["q0", "q1", "w0", "w1"]
    new = await store.fork_child("p", "new")
    assert {c.key for c in await store.children_of("p")} == {live, done, new.key}


async def test_an_old_pop_record_leaves_with_the_next_pop(
    backend: Backend, make_store: StoreFactory
) -> None:
    raw = backend.sync_client()
    write_session(raw, backend.schema, "s", [msg("a"), msg("b")], popped=msg("old pop"))
    store = make_store()
    popped = await store.pop_message("s")
    assert popped is not None and popped.content == "b"
    meta = raw.hgetall(backend.schema.session("s").meta)
    assert b"popped" not in meta and b"pop_token" not in meta


async def test_an_expired_first_layout_session_is_expired(
    backend: Backend, make_store: StoreFactory
) -> None:
    raw = backend.sync_client()
    write_session(raw, backend.schema, "e", [msg("a")], ttl_ms=100, grace_ms=60_000)
    await asyncio.sleep(0.25)  # meta and msgs are gone; the old marker (ids 'c') is left
    store: Any = make_store(ttl=60)
    with pytest.raises(SessionExpired):
        await store.get("e")
    with pytest.raises(SessionExpired):
        await store.append_message("e", msg("late"))
