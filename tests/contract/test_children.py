"""Child sessions on the Redis stores, every backend, both flavours."""

from __future__ import annotations

import re
from typing import Any

import pytest
from redis.crc import key_slot

from redis_session import (
    ChildAlreadyMerged,
    ChildNotFound,
    ChildSessionConfig,
    InvalidArgument,
    Message,
    MessageRole,
    Session,
    SessionNotFound,
)
from redis_session.keys import KeySchema
from tests.conftest import Backend, StoreFactory


def msg(content: str, role: str = "user") -> Message:
    return Message(role=role, content=content)


def contents(history: list[Message]) -> list[str]:
    return [m.content for m in history]


async def parent(store: Any, key: str = "p", n: int = 3) -> None:
    await store.create(Session(key=key, history=[msg(f"p{i}") for i in range(n)]))


async def test_fork_inherits_the_last_n_and_leaves_the_parent(store: Any) -> None:
    await parent(store)
    child = await store.fork_child("p", "researcher", ChildSessionConfig(inherit_history=2))
    assert re.fullmatch(r"p:child:researcher:\d+", child.key)
    assert (child.parent_key, child.agent_name, child.merged_at) == ("p", "researcher", None)
    assert contents(child.history) == ["p1", "p2"]
    assert (await store.get_child(child.key)).model_dump() == child.model_dump()
    assert contents(await store.get_history("p")) == ["p0", "p1", "p2"]
    plain = await store.fork_child("p", "coder")
    assert plain.history == [] and plain.config == ChildSessionConfig()


async def test_fork_needs_a_live_parent_and_a_plain_agent_name(store: Any) -> None:
    with pytest.raises(SessionNotFound) as info:
        await store.fork_child("nobody", "a")
    assert info.value.key == "nobody"
    await parent(store)
    for bad in ("", "a:b", None):
        with pytest.raises(InvalidArgument, match="agent_name"):
            await store.fork_child("p", bad)
    with pytest.raises(InvalidArgument, match="config"):
        await store.fork_child("p", "a", {"max_messages": 1})


async def test_child_appends_stay_in_the_child(store: Any) -> None:
    await parent(store)
    child = await store.fork_child("p", "a", ChildSessionConfig(max_messages=2))
    m = msg("c0")
    assert await store.append_child_message(child.key, m) is True
    assert await store.append_child_message(child.key, m) is False
    await store.append_child_message(child.key, msg("c1"))
    await store.append_child_message(child.key, msg("c2"))
    assert contents((await store.get_child(child.key)).history) == ["c1", "c2"]
    assert contents(await store.get_history("p")) == ["p0", "p1", "p2"]


async def test_merge_with_summary(store: Any) -> None:
    await parent(store)
    child = await store.fork_child("p", "researcher")
    await store.append_child_message(child.key, msg("work"))
    assert await store.merge_child(child.key, "found it") == 1
    last = (await store.get_history("p"))[-1]
    assert (last.role, last.content, last.author) == (
        MessageRole.ASSISTANT,
        "found it",
        "researcher",
    )
    merged = await store.get_child(child.key)
    assert merged.is_merged() and contents(merged.history) == ["work"]
    assert [c.key for c in await store.children_of("p")] == [child.key]


async def test_merge_as_author(store: Any) -> None:
    await parent(store)
    child = await store.fork_child("p", "researcher")
    await store.merge_child_as_author(child.key, "done", "router")
    assert (await store.get_history("p"))[-1].author == "router"


async def test_merge_without_summary_appends_own_messages_in_order(store: Any) -> None:
    await parent(store)
    child = await store.fork_child("p", "a", ChildSessionConfig(inherit_history=2))
    for i in range(3):
        await store.append_child_message(child.key, msg(f"c{i}"))
    assert await store.merge_child(child.key, "") == 3
    assert contents(await store.get_history("p")) == ["p0", "p1", "p2", "c0", "c1", "c2"]


async def test_merge_respects_the_parents_max_history(make_store: StoreFactory) -> None:
    store = make_store(max_history_turns=4)
    await parent(store)
    child = await store.fork_child("p", "a")
    for i in range(3):
        await store.append_child_message(child.key, msg(f"c{i}"))
    await store.merge_child(child.key, "")
    assert contents(await store.get_history("p")) == ["p2", "c0", "c1", "c2"]


async def test_merged_children_take_no_more_merges_appends_or_discards(store: Any) -> None:
    await parent(store)
    child = await store.fork_child("p", "a")
    await store.merge_child(child.key, "s")
    with pytest.raises(ChildAlreadyMerged):
        await store.merge_child(child.key, "again")
    with pytest.raises(ChildAlreadyMerged):
        await store.append_child_message(child.key, msg("late"))
    with pytest.raises(ChildAlreadyMerged):
        await store.discard_child(child.key)
    assert contents(await store.get_history("p")) == ["p0", "p1", "p2", "s"]


async def test_discard(store: Any) -> None:
    await parent(store)
    a = await store.fork_child("p", "a")
    b = await store.fork_child("p", "b")
    c = await store.fork_child("p", "c")
    await store.discard_child(b.key)
    assert [x.key for x in await store.children_of("p")] == [a.key, c.key]
    for call in (store.get_child(b.key), store.merge_child(b.key, "s"), store.discard_child(b.key),
                 store.append_child_message(b.key, msg("x"))):  # fmt: skip
        with pytest.raises(ChildNotFound):
            await call
    assert contents(await store.get_history("p")) == ["p0", "p1", "p2"]


async def test_unknown_children(store: Any) -> None:
    await parent(store)
    for key in ("p:child:a:1", "not-a-child", "p"):
        with pytest.raises(ChildNotFound) as info:
            await store.get_child(key)
        assert isinstance(info.value, SessionNotFound) and info.value.key == key
    assert await store.children_of("p") == []
    assert await store.children_of("nobody") == []


async def test_delete_parent_removes_children(backend: Backend, store: Any) -> None:
    await parent(store)
    kids = [await store.fork_child("p", f"a{i}") for i in range(3)]
    await store.append_child_message(kids[0].key, msg("x"))
    await store.merge_child(kids[1].key, "s")
    assert await store.delete("p") is True
    for kid in kids:
        with pytest.raises(ChildNotFound):
            await store.get_child(kid.key)
    with pytest.raises(ChildNotFound):
        await store.merge_child(kids[2].key, "late")
    with pytest.raises(SessionNotFound):
        await store.get("p")
    assert backend.session_keys() == []  # the registry and the event log stay


async def test_children_share_the_parents_ttl(backend: Backend, make_store: StoreFactory) -> None:
    store = make_store(ttl=60)
    await parent(store, key="t")
    child = await store.fork_child("t", "a")
    await store.append_child_message(child.key, msg("work"))
    raw = backend.sync_client()
    schema = backend.schema
    ck, pk = schema.child(child.key), schema.session("t")
    names = (ck.meta, ck.msgs, ck.ids, pk.meta, pk.msgs, pk.ids, pk.kids)
    deadline = int(raw.hget(pk.meta, "x"))
    for name in names:
        assert raw.pexpiretime(name) == deadline, name  # one deadline for the whole tree
    # A write to the child that finds the deadline near moves every key of the tree.
    raw.hset(pk.meta, "x", deadline - 59_000)
    await store.append_child_message(child.key, msg("keeps the parent alive"))
    moved = int(raw.hget(pk.meta, "x"))
    assert moved > deadline - 2_000
    for name in names:
        assert raw.pexpiretime(name) == moved, name


def test_child_keys_live_in_the_parents_slot() -> None:
    schema = KeySchema("rs:")
    for parent_key in ("p", "a{b}", "x:child:y:1", "🙂"):
        child = f"{parent_key}:child:agent:123"
        slots = {key_slot(n.encode()) for n in vars_of(schema, parent_key, child)}
        assert len(slots) == 1


def vars_of(schema: KeySchema, parent_key: str, child: str) -> list[str]:
    s, c = schema.session(parent_key), schema.child(child)
    return [s.meta, s.msgs, s.ids, s.kids, c.meta, c.msgs, c.ids]
