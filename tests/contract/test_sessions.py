"""The SPEC's store contract, on every backend, in both flavours."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from redis_session import (
    DuplicateSession,
    InvalidArgument,
    Message,
    MessageRole,
    Session,
    SessionError,
    SessionExpired,
    SessionNotFound,
    StaleCompaction,
    StaleExpectation,
    ToolCall,
    estimate_tokens,
)
from redis_session._core.limits import DELETE_RETRY_MS
from tests.conftest import Backend, StoreFactory
from tests.support.clock import wait_gone
from tests.support.tokens import as_stored


def msg(content: str, role: str = "user", **kw: Any) -> Message:
    return Message(role=role, content=content, **kw)


def contents(history: list[Message]) -> list[str]:
    return [m.content for m in history]


ODD_KEYS = [
    "plain",
    "a{b}c",
    "{",
    "}",
    "{}",
    "a:child:b:1",
    ":child:x",
    "ключ-🙂",
    "100%{x}%7B",
    "k" * 2000,
]


async def test_create_then_get_round_trips_everything(store: Any) -> None:
    history = [
        msg("hello 🙂", author="planner"),
        Message(
            role=MessageRole.ASSISTANT,
            content="calling",
            tool_calls=[
                ToolCall(id="c1", name="search", input='{"q": "x"}', output="ok"),
                ToolCall(
                    id="c2", name="think", input="", thought=True, thought_signature=b"\x00\xff"
                ),
            ],
        ),
    ]
    session = Session(
        key="s1", agent_id="a", channel_type="slack", channel_id="C1", model="m",
        history=history, metadata={"lang": "fr", "empty": ""},
    )  # fmt: skip
    stored = await store.create(session)
    assert stored.created_at == stored.updated_at
    assert abs(stored.created_at - datetime.now(UTC)) < timedelta(seconds=5)
    got = await store.get("s1")
    assert got.model_dump() == stored.model_dump()
    assert got.history == as_stored(history)  # each counted (count_tokens' default)
    assert [m.tokens for m in got.history] == [estimate_tokens(m) for m in history]
    assert got.history[1].tool_calls[1].thought_signature == b"\x00\xff"


async def test_create_does_not_change_its_argument(store: Any) -> None:
    session = Session(key="s", created_at=datetime(2000, 1, 1, tzinfo=UTC))
    stored = await store.create(session)
    assert session.created_at.year == 2000
    assert stored.created_at.year > 2000


async def test_create_twice_raises_duplicate(store: Any) -> None:
    await store.create(Session(key="dup"))
    with pytest.raises(DuplicateSession) as info:
        await store.create(Session(key="dup", agent_id="other"))
    assert info.value.key == "dup"
    assert (await store.get("dup")).agent_id == ""


async def test_create_refuses_repeated_message_ids(store: Any) -> None:
    m = msg("x")
    with pytest.raises(InvalidArgument, match=r"session\.history\[1\]"):
        await store.create(Session(key="r", history=[m, m]))
    with pytest.raises(SessionNotFound):
        await store.get("r")


async def test_get_missing_is_not_found_not_expired(store: Any) -> None:
    with pytest.raises(SessionNotFound) as info:
        await store.get("missing")
    assert type(info.value) is SessionNotFound
    assert isinstance(info.value, LookupError)


@pytest.mark.parametrize("key", ODD_KEYS, ids=range(len(ODD_KEYS)))
async def test_any_non_empty_key_works_and_keys_do_not_collide(store: Any, key: str) -> None:
    await store.create(Session(key=key, agent_id="mine"))
    await store.append_message(key, msg("m"))
    for other in ODD_KEYS:
        if other != key:
            with pytest.raises(SessionNotFound):
                await store.get(other)
    got = await store.get(key)
    assert (got.key, got.agent_id, contents(got.history)) == (key, "mine", ["m"])
    assert [s.key for s in await store.list_sessions()] == [key]


async def test_update_writes_non_empty_fields_and_replaces_metadata(store: Any) -> None:
    first = await store.create(
        Session(key="u", agent_id="a", model="m1", metadata={"keep": "no", "x": "1"},
                history=[msg("h")])
    )  # fmt: skip
    await asyncio.sleep(0.002)
    await store.update(Session(key="u", model="m2", channel_id="c", metadata={"y": "2"}))
    got = await store.get("u")
    assert (got.agent_id, got.model, got.channel_id) == ("a", "m2", "c")
    assert got.metadata == {"y": "2"}
    assert contents(got.history) == ["h"]
    assert got.created_at == first.created_at
    assert got.updated_at > first.updated_at


async def test_update_missing_raises_not_found(store: Any) -> None:
    with pytest.raises(SessionNotFound):
        await store.update(Session(key="nope"))


async def test_update_metadata_is_partial(make_store: StoreFactory) -> None:
    one, two = make_store(), make_store()
    await one.create(Session(key="md", metadata={"a": "1", "b": "2", "c": "3"}))
    await one.update_metadata("md", set={"a": "10"})
    await two.update_metadata("md", set={"d": "4"}, delete=["b"])
    assert (await one.get("md")).metadata == {"a": "10", "c": "3", "d": "4"}
    with pytest.raises(InvalidArgument, match="delete"):
        await one.update_metadata("md", delete="b")
    with pytest.raises(SessionNotFound):
        await one.update_metadata("gone", set={"a": "b"})


async def test_delete_is_idempotent_and_unlists(store: Any) -> None:
    await store.create(Session(key="d", history=[msg("x")]))
    assert await store.delete("d") is True
    assert await store.delete("d") is False
    assert await store.delete("never") is False
    with pytest.raises(SessionNotFound) as info:
        await store.get("d")
    assert type(info.value) is SessionNotFound
    assert await store.list_sessions() == []
    await store.create(Session(key="d"))
    assert (await store.get("d")).history == []


async def test_a_delete_without_a_key_keeps_its_token_a_minute_at_most(
    make_store: StoreFactory, backend: Backend
) -> None:
    # Its fresh call token stays in the session's gone: string for redis-py's retry of the
    # same call after a lost reply (tests/reliability/test_lost_replies.py), then goes; never
    # longer than expired_grace, and not kept at all with expired_grace=0.
    raw = backend.sync_client()
    for grace, bound in ((None, DELETE_RETRY_MS), (5, 5_000), (0, None)):
        store = make_store() if grace is None else make_store(expired_grace=grace)
        await store.create(Session(key="d"))
        assert await store.delete("d") is True
        gone = backend.schema.session("d").gone
        if bound is None:
            assert not raw.exists(gone)
        else:
            assert 0 < raw.pttl(gone) <= bound
            raw.delete(gone)
    assert backend.session_keys() == []


async def test_append_keeps_order_and_bumps_updated_at(store: Any) -> None:
    created = await store.create(Session(key="ap"))
    for i in range(5):
        assert await store.append_message("ap", msg(f"m{i}")) is True
    got = await store.get("ap")
    assert contents(got.history) == [f"m{i}" for i in range(5)]
    assert got.updated_at > created.updated_at


async def test_append_same_message_twice_stores_it_once(store: Any) -> None:
    await store.create(Session(key="idem"))
    m = msg("once")
    assert await store.append_message("idem", m) is True
    assert await store.append_message("idem", m) is False
    same_id = Message(id=m.id, role="user", content="different body")
    assert await store.append_message("idem", same_id) is False
    assert contents(await store.get_history("idem")) == ["once"]


async def test_append_messages_batch(store: Any) -> None:
    await store.create(Session(key="b", history=[first := msg("0")]))
    batch = [first, msg("1"), msg("2")]
    assert await store.append_messages("b", batch) == 2
    assert await store.append_messages("b", batch) == 0
    assert await store.append_messages("b", []) == 0
    assert contents(await store.get_history("b")) == ["0", "1", "2"]
    m = msg("x")
    with pytest.raises(InvalidArgument, match=r"messages\[1\]"):
        await store.append_messages("b", [m, m])


async def test_append_sets_metadata_in_the_same_step_only_when_something_is_new(
    store: Any,
) -> None:
    await store.create(Session(key="am", metadata={"keep": "k", "turn": "0"}))
    first = msg("one")
    assert await store.append_message("am", first, metadata={"turn": "1"})
    assert (await store.get("am", last=0)).metadata == {"keep": "k", "turn": "1"}
    # Another writer moves on; a retry of the first append (same id) must not undo it.
    assert await store.append_messages("am", [msg("two")], metadata={"turn": "2"}) == 1
    assert not await store.append_message("am", first, metadata={"turn": "1"})
    assert await store.append_messages("am", [first], metadata={"turn": "1"}) == 0
    session = await store.get("am")
    assert session.metadata == {"keep": "k", "turn": "2"}
    assert contents(session.history) == ["one", "two"]
    # One new message among repeated ones is enough.
    assert await store.append_messages("am", [first, msg("three")], metadata={"turn": "3"}) == 1
    assert (await store.get("am", last=0)).metadata["turn"] == "3"
    assert await store.append_message("am", msg("four"), metadata={})


async def test_append_with_bad_metadata_writes_nothing(store: Any) -> None:
    await store.create(Session(key="bm"))
    for bad, where in (([("a", "b")], "metadata"), ({"a": 1}, r"metadata\['a'\]")):
        with pytest.raises(InvalidArgument, match=where):
            await store.append_message("bm", msg("x"), metadata=bad)
        with pytest.raises(InvalidArgument, match=where):
            await store.append_messages("bm", [msg("y")], metadata=bad)
        with pytest.raises(InvalidArgument, match=where):
            await store.append_messages("bm", [], metadata=bad)
    assert await store.get_history("bm") == []
    with pytest.raises(SessionNotFound):
        await store.append_message("none", msg("x"), metadata={"a": "b"})


async def test_append_to_missing_session_raises(store: Any) -> None:
    with pytest.raises(SessionNotFound):
        await store.append_message("nobody", msg("x"))


async def test_max_history_turns_keeps_newest(make_store: StoreFactory) -> None:
    store = make_store(max_history_turns=3)
    await store.create(Session(key="t"))
    for i in range(7):
        await store.append_message("t", msg(str(i)))
    assert contents(await store.get_history("t")) == ["4", "5", "6"]
    assert await store.append_messages("t", [msg("7"), msg("8"), msg("9"), msg("10")]) == 4
    assert contents(await store.get_history("t")) == ["8", "9", "10"]


async def test_annotate_timeout(store: Any) -> None:
    await store.create(Session(key="to"))
    await store.annotate_timeout("to", "partial text")
    (m,) = await store.get_history("to")
    assert m.role is MessageRole.ASSISTANT
    assert m.content == "[This response was interrupted due to a timeout]"


async def test_get_history_last_n(store: Any) -> None:
    await store.create(Session(key="h", history=[msg(str(i)) for i in range(10)]))
    assert contents(await store.get_history("h", last=3)) == ["7", "8", "9"]
    assert contents(await store.get_history("h", last=50)) == [str(i) for i in range(10)]
    assert len(await store.get_history("h")) == 10
    assert await store.get_history("h", last=0) == []  # as get(key, last=0): no message
    with pytest.raises(InvalidArgument, match="last"):
        await store.get_history("h", last=-1)
    with pytest.raises(SessionNotFound):
        await store.get_history("none", last=2)


async def test_get_last_n_reads_the_session_with_its_newest_messages(store: Any) -> None:
    await store.create(
        Session(
            key="g", agent_id="a", metadata={"k": "v"}, history=[msg(str(i)) for i in range(10)]
        )
    )
    whole = await store.get("g")
    recent = await store.get("g", last=3)
    assert contents(recent.history) == ["7", "8", "9"]
    assert recent.model_copy(update={"history": whole.history}) == whole
    bare = await store.get("g", last=0)
    assert bare.history == [] and bare.metadata == {"k": "v"} and bare.agent_id == "a"
    assert contents((await store.get("g", last=50)).history) == [str(i) for i in range(10)]
    await store.create(Session(key="empty"))
    assert (await store.get("empty", last=5)).history == []
    for bad in (-1, 1.5, "3", True, 2**64):
        with pytest.raises(InvalidArgument, match="last"):
            await store.get("g", last=bad)
        with pytest.raises(InvalidArgument, match="last"):
            await store.get_history("g", last=bad)
    with pytest.raises(SessionNotFound):
        await store.get("none", last=0)


async def test_compact_replaces_head_with_summary(store: Any) -> None:
    await store.create(Session(key="c", history=[msg(str(i)) for i in range(6)]))
    assert await store.compact_messages("c", 3, "the gist") == 4
    history = await store.get_history("c")
    assert contents(history) == ["[Compacted Summary]\nthe gist", "4", "5"]
    assert history[0].role is MessageRole.SYSTEM


async def test_compact_keeps_messages_appended_meanwhile(make_store: StoreFactory) -> None:
    reader, writer = make_store(), make_store()
    await reader.create(Session(key="cm", history=[msg(str(i)) for i in range(5)]))
    seen = await reader.get_history("cm")
    await writer.append_messages("cm", [msg("late1"), msg("late2")])
    await reader.compact_messages("cm", len(seen) - 1, "sum", expect_id=seen[-1].id)
    assert contents(await reader.get_history("cm")) == [
        "[Compacted Summary]\nsum",
        "late1",
        "late2",
    ]


async def test_compact_out_of_range_changes_nothing(store: Any) -> None:
    await store.create(Session(key="o", history=[msg("a"), msg("b")]))
    with pytest.raises(InvalidArgument, match="up_to_index") as info:
        await store.compact_messages("o", 2, "s")
    assert isinstance(info.value, ValueError)
    with pytest.raises(InvalidArgument, match="up_to_index"):
        await store.compact_messages("o", -1, "s")
    assert contents(await store.get_history("o")) == ["a", "b"]


async def test_compact_with_stale_expect_id_changes_nothing(make_store: StoreFactory) -> None:
    store = make_store(max_history_turns=3)
    await store.create(Session(key="st", history=[msg("a"), msg("b"), msg("c")]))
    seen = await store.get_history("st")
    await store.append_message("st", msg("d"))  # trims "a": indices shift
    with pytest.raises(StaleCompaction):
        await store.compact_messages("st", 1, "s", expect_id=seen[1].id)
    assert contents(await store.get_history("st")) == ["b", "c", "d"]


async def test_a_guarded_compaction_past_a_shrunk_history_is_stale_not_out_of_range(
    make_store: StoreFactory,
) -> None:
    store = make_store()
    await store.create(Session(key="sh", history=[msg("a"), msg("b"), msg("c")]))
    seen = await store.get_history("sh")
    await store.compact_messages("sh", 1, "by another worker")  # now 2 messages
    with pytest.raises(StaleExpectation) as info:
        await store.compact_messages("sh", 2, "late", expect_id=seen[2].id)
    assert isinstance(info.value, StaleCompaction) and StaleCompaction is StaleExpectation
    with pytest.raises(InvalidArgument, match="out of range"):  # no guard: a bad argument
        await store.compact_messages("sh", 5, "late")
    assert contents(await store.get_history("sh"))[1:] == ["c"]


async def test_list_sessions_most_recent_first_and_pages(store: Any) -> None:
    for key in ("a", "b", "c", "d"):
        await store.create(Session(key=key))
        await asyncio.sleep(0.003)
    await store.append_message("b", msg("bump"))
    keys = [s.key for s in await store.list_sessions()]
    assert keys == ["b", "d", "c", "a"]
    assert [s.key for s in await store.list_sessions(limit=2)] == ["b", "d"]
    assert [s.key for s in await store.list_sessions(limit=2, offset=2)] == ["c", "a"]
    assert await store.list_sessions(limit=2, offset=10) == []
    rows = await store.list_sessions()
    assert all(r.updated_at >= r.created_at for r in rows)
    with pytest.raises(InvalidArgument, match="limit"):
        await store.list_sessions(limit=-1)


async def test_list_sessions_by_key_prefix(store: Any) -> None:
    keys = ["t1/a", "t1/b", "t2/a", "t1*/x", "t1[x]/y", "t1\\z", "t?/q", "other"]
    for key in keys:
        await store.create(Session(key=key))
        await asyncio.sleep(0.003)
    await store.append_message("t1/a", msg("bump"))
    listed = await store.list_sessions(prefix="t1/")
    assert [s.key for s in listed] == ["t1/a", "t1/b"]  # most recently updated first
    assert listed == [s for s in await store.list_sessions() if s.key.startswith("t1/")]
    # glob characters in the prefix match themselves only
    assert [s.key for s in await store.list_sessions(prefix="t1*")] == ["t1*/x"]
    assert [s.key for s in await store.list_sessions(prefix="t1[x]")] == ["t1[x]/y"]
    assert [s.key for s in await store.list_sessions(prefix="t1\\")] == ["t1\\z"]
    assert [s.key for s in await store.list_sessions(prefix="t?")] == ["t?/q"]
    assert [s.key for s in await store.list_sessions(prefix="t1", limit=2, offset=1)] == [
        "t1\\z", "t1[x]/y"
    ]  # fmt: skip
    assert await store.list_sessions(prefix="none/") == []
    assert len(await store.list_sessions(prefix="")) == len(keys)
    await store.delete("t1/b")
    assert [s.key for s in await store.list_sessions(prefix="t1/")] == ["t1/a"]
    with pytest.raises(InvalidArgument, match="prefix"):
        await store.list_sessions(prefix=b"t1")


async def test_ttl_is_refreshed_by_every_write(backend: Backend, make_store: StoreFactory) -> None:
    store = make_store(ttl=timedelta(seconds=30), expired_grace=10)
    raw = backend.sync_client()

    keys = backend.schema.session("ttl")
    await store.create(Session(key="ttl", history=[msg("a")]))
    # Every key of the tree expires at one deadline: ttl plus a step of ttl/16 (1.875 s).
    for k in (keys.meta, keys.msgs, keys.ids):
        assert 30_000 - 500 < raw.pttl(k) <= 31_875
    assert 40_000 - 500 < raw.pttl(keys.mark) <= 41_875  # the expiry marker: + grace
    # A write that finds the deadline closer than ttl moves it (and every key with it).
    raw.hset(keys.meta, "x", int(time.time() * 1000) + 1000)
    await store.append_message("ttl", msg("b"))
    for k in (keys.meta, keys.msgs, keys.ids):
        assert 30_000 - 500 < raw.pttl(k) <= 31_875, k
    deadline = int(raw.hget(keys.meta, "x"))
    # A write that finds the deadline at least ttl away leaves every TTL alone.
    await store.append_message("ttl", msg("c"))
    assert int(raw.hget(keys.meta, "x")) == deadline


def tree_gone(backend: Backend, key: str) -> None:
    """Wait until session ``key``'s tree expired on the server (its meta hash gone)."""
    wait_gone(backend.sync_client(), backend.schema.session(key).meta)


async def test_expired_session(backend: Backend, make_store: StoreFactory) -> None:
    store = make_store(ttl=0.25)
    await store.create(Session(key="e", history=[msg("a")]))
    tree_gone(backend, "e")
    with pytest.raises(SessionExpired) as info:
        await store.get("e")
    assert isinstance(info.value, SessionNotFound)
    with pytest.raises(SessionExpired):
        await store.append_message("e", msg("b"))
    with pytest.raises(SessionExpired):
        await store.get_history("e")
    assert await store.list_sessions() == []
    assert await store.delete("e") is False
    with pytest.raises(SessionNotFound) as info2:
        await store.get("e")
    assert type(info2.value) is SessionNotFound


async def test_create_after_expiry_is_fresh(backend: Backend, make_store: StoreFactory) -> None:
    store = make_store(ttl=0.2)
    m = msg("old")
    await store.create(Session(key="f", history=[m], metadata={"a": "1"}))
    tree_gone(backend, "f")
    await store.create(Session(key="f"))
    got = await store.get("f")
    assert got.history == [] and got.metadata == {}
    assert await store.append_message("f", m) is True  # old ids are forgotten too


async def test_listing_drops_expired_but_keeps_live(
    backend: Backend, make_store: StoreFactory
) -> None:
    store = make_store(ttl=0.3)
    await store.create(Session(key="old"))
    await make_store(ttl=60).create(Session(key="new"))  # a TTL no stall reaches
    tree_gone(backend, "old")
    assert [s.key for s in await store.list_sessions()] == ["new"]


@pytest.mark.parametrize(
    ("option", "value"),
    [("ttl", 0), ("ttl", -1), ("ttl", "5"), ("max_history_turns", -1),
     ("max_history_turns", 1.5), ("prefix", "a{b"), ("expired_grace", -1)],
)  # fmt: skip
async def test_bad_options_raise_value_error_naming_them(
    make_store: StoreFactory, option: str, value: object
) -> None:
    with pytest.raises(InvalidArgument, match=option) as info:
        make_store(**{option: value})
    assert isinstance(info.value, ValueError) and isinstance(info.value, SessionError)


@pytest.mark.parametrize("key", ["", None, 3, b"bytes", "\udc80"])
async def test_bad_keys_raise_value_error(store: Any, key: object) -> None:
    for call in (
        store.get(key),
        store.delete(key),
        store.append_message(key, msg("x")),
        store.get_history(key),
        store.create(Session.model_construct(key=key, history=[], metadata={})),  # type: ignore[arg-type]
    ):
        with pytest.raises(InvalidArgument, match="key"):
            await call


async def test_wrong_argument_types(store: Any) -> None:
    await store.create(Session(key="w"))
    with pytest.raises(InvalidArgument, match="msg"):
        await store.append_message("w", {"role": "user"})
    with pytest.raises(InvalidArgument, match="session"):
        await store.create({"key": "w"})
    with pytest.raises(InvalidArgument, match="summary"):
        await store.compact_messages("w", 0, None)
    with pytest.raises(InvalidArgument, match="set"):
        await store.update_metadata("w", set={"a": 1})


async def test_messages_changed_after_they_were_built_are_validated_before_storing(
    store: Any,
) -> None:
    # Messages are frozen, but object.__setattr__ goes past that: what such a message stores
    # must still read back.
    await store.create(Session(key="m"))
    naive = msg("naive clock")
    object.__setattr__(naive, "timestamp", datetime(2024, 5, 1, 12, 30))
    paris = msg("paris clock")
    object.__setattr__(
        paris, "timestamp", datetime(2024, 5, 1, 14, 30, tzinfo=timezone(timedelta(hours=2)))
    )
    as_str = msg("role as a plain string")
    object.__setattr__(as_str, "role", "assistant")
    assert await store.append_message("m", naive)
    assert await store.append_messages("m", [paris, as_str]) == 2
    back = await store.get_history("m")
    assert back[0].timestamp == datetime(2024, 5, 1, 12, 30, tzinfo=UTC)
    assert back[1].timestamp == back[0].timestamp and back[1].timestamp.utcoffset() == timedelta(0)
    assert back[2].role is MessageRole.ASSISTANT and back[2].id == as_str.id
    broken = msg("x")
    object.__setattr__(broken, "content", None)
    with pytest.raises(InvalidArgument, match=r"msg.*content"):
        await store.append_message("m", broken)
    with pytest.raises(InvalidArgument, match=r"messages\[1\].*content"):
        await store.append_messages("m", [msg("fine"), broken])
    call = ToolCall(id="c1", name="search", input="{}")
    with_call = msg("calls", role="assistant", tool_calls=[call])
    object.__setattr__(call, "output", 42)
    with pytest.raises(InvalidArgument, match=r"msg.*tool_calls\.0\.output"):
        await store.append_message("m", with_call)
    object.__setattr__(call, "output", "found")
    assert await store.append_message("m", with_call)
    assert contents(await store.get_history("m")) == [
        "naive clock", "paris clock", "role as a plain string", "calls"
    ]  # fmt: skip


async def test_index_repair(backend: Backend, store: Any) -> None:
    for key in ("a", "b", "c"):
        await store.create(Session(key=key))
    assert await store.repair_index() == 0
    if backend.cluster is None:
        return
    raw = backend.sync_client()
    copies = backend.schema.index_registries
    shards = raw.smembers(copies[0])
    assert len(copies) == 3 and all(raw.smembers(c) == shards for c in copies)
    # One copy lost (its node came back empty): listing reads the others and repairs it.
    raw.delete(copies[1])
    assert sorted(s.key for s in await store.list_sessions()) == ["a", "b", "c"]
    assert raw.smembers(copies[1]) == shards
    # A worker that died between the create script and the shard registration:
    for copy in copies:
        raw.delete(copy)
    assert await store.list_sessions() == []
    assert await store.repair_index() == 3
    assert all(raw.smembers(c) == shards for c in copies)
    assert sorted(s.key for s in await store.list_sessions()) == ["a", "b", "c"]
