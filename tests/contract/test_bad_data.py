"""Foreign or damaged data in Redis: a SessionError naming the key, never a bare parse error."""

from __future__ import annotations

from typing import Any

import pytest

from redis_session import CorruptData, ForeignKey, Message, Session, SessionError
from redis_session.keys import KeySchema
from tests.conftest import Backend


@pytest.fixture
def raw(backend: Backend) -> Any:
    return backend.sync_client()


@pytest.fixture
def keys(backend: Backend) -> KeySchema:
    return backend.schema


@pytest.mark.parametrize(
    "element",
    [b"not json", b'{"id":"x","role":"user"', b'{"id":"x","role":"nobody"}', b"\xff\xfe",
     b"[]", b'{"id":"x","role":"user","unknown_field":1}'],
)  # fmt: skip
async def test_foreign_list_element(store: Any, raw: Any, keys: KeySchema, element: bytes) -> None:
    await store.create(Session(key="k", history=[Message(role="user", content="ok")]))
    raw.rpush(keys.session("k").msgs, element)
    for read in (store.get("k"), store.get_history("k"), store.get_history("k", last=1)):
        with pytest.raises(CorruptData, match="'k'.*message 1|'k'.*message 0") as info:
            await read
        assert info.value.key == "k"


async def test_meta_missing_fields(store: Any, raw: Any, keys: KeySchema) -> None:
    await store.create(Session(key="k"))
    raw.hdel(keys.session("k").meta, "created_at")
    with pytest.raises(CorruptData, match="created_at"):
        await store.get("k")


def foreign_wording(key: str, name: str, held: str) -> str:
    what = f"Redis key {name!r} holds a {held} this store did not write"
    return f"corrupt data for session {key!r}: {what}"


@pytest.mark.parametrize("held", ["string", "hash", "list", "set"])
async def test_a_foreign_key_at_a_sessions_hash_is_worded_alike_by_every_call(
    store: Any, raw: Any, keys: KeySchema, held: str
) -> None:
    """Another program's key where a session's hash would be: every call raises the same
    ForeignKey, the listing skips it, and nothing removes or changes it."""
    await store.create(Session(key="good"))
    name = keys.session("k").meta
    {"string": lambda: raw.set(name, "x"), "hash": lambda: raw.hset(name, "foo", "bar"),
     "list": lambda: raw.rpush(name, "x"), "set": lambda: raw.sadd(name, "x")}[held]()  # fmt: skip
    before = raw.dump(name)
    for call in (
        store.get("k"),
        store.get_history("k"),
        store.get_history("k", last=1),
        store.create(Session(key="k")),
        store.append_message("k", Message(role="user")),
        store.update_metadata("k", set={"a": "b"}),
        store.delete("k"),
    ):
        with pytest.raises(ForeignKey) as info:
            await call
        assert str(info.value) == foreign_wording("k", name, held)
        assert (info.value.key, info.value.redis_key, info.value.held) == ("k", name, held)
    assert raw.dump(name) == before
    assert [s.key for s in await store.list_sessions()] == ["good"]


async def test_meta_not_utf8(store: Any, raw: Any, keys: KeySchema) -> None:
    await store.create(Session(key="k"))
    raw.hset(keys.session("k").meta, "m:bad", b"\xff")
    with pytest.raises(CorruptData, match="UTF-8"):
        await store.get("k")


@pytest.mark.parametrize("which", ["meta", "msgs", "ids"])
async def test_key_of_wrong_type(store: Any, raw: Any, keys: KeySchema, which: str) -> None:
    await store.create(Session(key="k", history=[Message(role="user")]))
    name = getattr(keys.session("k"), which)
    raw.delete(name)
    raw.set(name, "foreign")
    for call in (
        store.get("k"),
        store.append_message("k", Message(role="user")),
        store.create(Session(key="k")),
        store.compact_messages("k", 0, "s"),
        store.update_metadata("k", set={"a": "b"}),
    ):
        with pytest.raises(ForeignKey) as info:
            await call
        assert str(info.value) == foreign_wording("k", name, "string")
    with pytest.raises(ForeignKey):
        await store.delete("k")
    assert raw.get(name) == b"foreign"


async def test_other_sessions_unaffected(store: Any, raw: Any, keys: KeySchema) -> None:
    await store.create(Session(key="bad"))
    await store.create(Session(key="good", history=[Message(role="user", content="fine")]))
    raw.rpush(keys.session("bad").msgs, b"garbage")
    with pytest.raises(SessionError):
        await store.get("bad")
    assert (await store.get("good")).history[0].content == "fine"


async def test_one_bad_index_member_does_not_break_listing(
    store: Any, raw: Any, keys: KeySchema, caplog: pytest.LogCaptureFixture
) -> None:
    await store.create(Session(key="good"))
    raw.zadd(keys.index_of("good"), {b"\xff\xfe-not-utf8": 1})
    with caplog.at_level("WARNING", logger="redis_session"):
        assert [s.key for s in await store.list_sessions()] == ["good"]
    assert "list_sessions skipped a damaged record" in caplog.text


async def test_a_damaged_kids_member_neither_hides_children_nor_blocks_delete(
    store: Any, raw: Any, keys: KeySchema, backend: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    await store.create(Session(key="p"))
    a = await store.fork_child("p", "a")
    b = await store.fork_child("p", "b")
    await store.append_child_message(b.key, Message(role="user", content="b's"))
    sk = keys.session("p")
    bad = b"p:child:\xff:1"
    raw.zadd(sk.kids, {bad: 99})
    raw.hset(sk.meta, "kc", 3)
    raw.hset(b"".join([keys.prefix.encode(), b"child:{p}:child:\xff:1"]), "v", "1")
    with caplog.at_level("WARNING", logger="redis_session"):
        got = await store.children_of("p")
    assert [c.key for c in got] == [a.key, b.key]
    assert "children_of skipped a damaged record" in caplog.text
    assert await store.delete("p") is True
    left = backend.session_keys()
    assert left == [], left  # the damaged child's keys went too


async def test_a_session_of_another_schema_version_is_refused_naming_it(
    store: Any, raw: Any, keys: KeySchema
) -> None:
    """A session written by another layout (here: version 9) is neither read nor written."""
    await store.create(Session(key="k", history=[Message(role="user", content="hi")]))
    raw.hset(keys.session("k").meta, "v", "9")
    for call in (
        store.get("k"),
        store.get_history("k"),
        store.append_message("k", Message(role="user")),
        store.update_metadata("k", set={"a": "b"}),
        store.compact_messages("k", 0, "s"),
        store.fork_child("k", "sub"),
    ):
        with pytest.raises(CorruptData, match="schema version .*9") as info:
            await call
        assert info.value.key == "k" and not isinstance(info.value, ForeignKey)
    assert raw.hget(keys.session("k").meta, "v") == b"9"
