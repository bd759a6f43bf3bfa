"""At ``maxmemory`` with ``noeviction``: writes are refused before they write anything and say
so (redis-py's ``OutOfMemoryError``, never ``CorruptData``), the limit holds, reads keep
working, and writes resume once memory frees (issue #14, points 1 and 2).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
import redis

from redis_session import (
    AsyncRedisStore,
    ChildSessionConfig,
    Message,
    RedisStore,
    Session,
    SessionError,
    Usage,
)
from tests.resources.conftest import PrivateServer
from tests.support.figures import Recorder
from tests.support.stepping import in_steps, recording

LIMIT = 12 * 1024 * 1024
SLACK = 1536 * 1024  # the bound: used_memory <= maxmemory + 1.5 MB


def msg(content: str, role: str = "user") -> Message:
    return Message(role=role, content=content)


def fill(raw: Any, prefix: str) -> int:
    """Filler keys until Redis refuses a write, then the limit lowered to 512 KB under what is
    used, so that memory is firmly over it (a freed client buffer would otherwise dip it under
    the limit now and then); returns how many fillers.
    """
    n = 0
    while True:
        try:
            raw.set(f"{prefix}filler:{n}", b"x" * 50_000)
        except redis.exceptions.OutOfMemoryError:
            raw.config_set("maxmemory", used(raw) - 512 * 1024)
            return n
        n += 1


def used(raw: Any) -> int:
    return int(raw.info("memory")["used_memory"])


def test_at_maxmemory_writes_are_refused_as_oom_and_reads_work(
    private_server: PrivateServer, figures: Recorder
) -> None:
    server = private_server(maxmemory=LIMIT, maxmemory_policy="noeviction")
    raw = server.client()
    store = RedisStore.from_url(server.url, prefix="m:", ttl=3600)
    sealed = RedisStore.from_url(server.url, prefix="e:", passphrase="pw", kdf_work=10)
    history = [msg(f"h{i} " + "y" * 200) for i in range(50)]
    store.create(Session(key="s", history=history, metadata={"a": "1"}))
    child = store.fork_child("s", "sub", ChildSessionConfig(inherit_history=5))
    store.append_child_message(child.key, msg("work", "assistant"))
    sealed.create(Session(key="secret", history=history[:3]))
    paid = Message(role="assistant", usage=Usage(input_tokens=9, output_tokens=1, requests=1))
    store.create(Session(key="u", history=[paid]))
    spent = (store.get("u").usage, store.usage())
    fillers = fill(raw, "m:")

    refused: dict[str, str] = {}
    calls: list[tuple[str, Callable[[], Any]]] = [
        ("append_message", lambda: store.append_message("s", msg("late"))),
        (
            "append_message with usage",
            lambda: store.append_message("u", paid.model_copy(update={"id": "p2"})),
        ),
        ("append_child_message with usage", lambda: store.append_child_message(child.key, paid)),
        ("append_messages", lambda: store.append_messages("s", [msg("a"), msg("b")])),
        ("create", lambda: store.create(Session(key="new", history=history))),
        (
            "fork_child",
            lambda: store.fork_child("s", "another", ChildSessionConfig(inherit_history=5)),
        ),
        ("compact_messages", lambda: store.compact_messages("s", 10, "summary")),
        ("update", lambda: store.update(Session(key="s", model="m", metadata={"b": "2"}))),
        ("update_metadata", lambda: store.update_metadata("s", set={"c": "3"})),
        ("append_child_message", lambda: store.append_child_message(child.key, msg("x"))),
        ("merge_child", lambda: store.merge_child(child.key, "summary")),
        ("pop_message", lambda: store.pop_message("s")),
        ("sealed append", lambda: sealed.append_message("secret", msg("late"))),
    ]
    for name, call in calls:
        with pytest.raises(redis.exceptions.OutOfMemoryError) as info:
            call()
        assert not isinstance(info.value, SessionError)
        refused[name] = type(info.value).__name__
    # A burst of writes over the limit: none lands, memory stays where it was.
    landed = 0
    for i in range(200):
        for call in (
            lambda: store.create(Session(key=f"burst{i}", history=history)),
            lambda: store.fork_child("s", f"b{i}", ChildSessionConfig(inherit_history=50)),
            lambda: store.compact_messages("s", 5, "summary " * 100),
        ):
            try:
                call()
                landed += 1
            except redis.exceptions.OutOfMemoryError:
                pass
    limit = int(str(raw.config_get("maxmemory")["maxmemory"]))
    after_burst = used(raw)
    assert after_burst <= limit + SLACK, (after_burst, limit)
    assert landed == 0, landed

    # Reads need no memory: every one works (the encrypted store opens its keyring too).
    assert [m.content for m in store.get("s").history] == [m.content for m in history]
    assert len(store.get_history("s", last=5)) == 5
    cold = RedisStore.from_url(server.url, prefix="m:", read_cache_bytes=0)
    cold.get("s")  # learns the element size: its next reads take the elements by LRANGE
    assert (
        cold._core.reader.cold_span(-1) is not None and cold._core.reader.cold_span(30) is not None
    )
    lranges = raw.info("commandstats").get("cmdstat_lrange", {}).get("calls", 0)
    with recording(cold) as sent:
        assert cold.get("s").history == store.get("s").history
    assert raw.info("commandstats")["cmdstat_lrange"]["calls"] == lranges + 1  # not refused
    assert sent["LRANGE+after"] == 1 and sent["get"] == 1  # not read again by the script
    assert [m.content for m in cold.get_history("s", last=30)] == [m.content for m in history][-30:]
    for kind in ("plain", "script"):  # a read in steps: read-only commands, not refused
        in_steps(cold, 5, kind)
        with recording(cold) as sent:
            assert cold.get("s").history == store.get("s").history
        steps = sent["LRANGE"] if kind == "plain" else sent["read_range"]
        assert steps >= 9 and sent["get"] == 1, (kind, sent)  # 50 messages, ~5 a step
    cold.close()
    assert "s" in [s.key for s in store.list_sessions()]
    assert store.get_child(child.key).history[-1].content == "work"
    assert child.key in [c.key for c in store.children_of("s")]
    fresh_sealed = RedisStore.from_url(server.url, prefix="e:", passphrase="pw", kdf_work=10)
    assert len(fresh_sealed.get("secret").history) == 3
    assert (store.get("u").usage, store.usage()) == spent  # nothing counted by a refused write
    assert store.delete("s") is True  # deleting frees memory: allowed

    raw.config_set("maxmemory", LIMIT)
    for n in range(fillers):  # memory frees: writes resume, nothing was half written
        raw.delete(f"m:filler:{n}")
    store.create(Session(key="s", history=history))
    assert store.append_message("s", msg("after")) is True
    assert len(store.get_history("s")) == 51
    for i in range(200):
        store.delete(f"burst{i}")
    assert sealed.append_message("secret", msg("after")) is True
    figures.record_resource(
        case="maxmemory 12 MB, noeviction: writes at the limit",
        outcome=f"{len(refused)} kinds of write, then a burst of 600 creates, forks and "
        "compactions, refused with OutOfMemoryError before writing; every read worked (the "
        "encrypted store's keyring too); writes resumed once memory was freed",
        memory_over_limit_bytes=max(0, after_burst - limit),
        errors={"OutOfMemoryError": len(refused) + 600 - landed},
        damaged=0,
        lost=0,
        duplicated=0,
    )
    for client in (store, sealed, fresh_sealed):
        client.close()
    raw.close()


async def test_the_asyncio_store_at_maxmemory_too(private_server: PrivateServer) -> None:
    server = private_server(maxmemory=LIMIT, maxmemory_policy="noeviction")
    raw = server.client()
    store = AsyncRedisStore.from_url(server.url, prefix="a:")
    await store.create(Session(key="s", history=[msg("h")]))
    await asyncio.to_thread(fill, raw, "a:")
    with pytest.raises(redis.exceptions.OutOfMemoryError):
        await store.append_message("s", msg("late"))
    assert [m.content for m in await store.get_history("s")] == ["h"]
    assert (await store.get("s")).history[0].content == "h"
    await store.close()
    raw.close()
