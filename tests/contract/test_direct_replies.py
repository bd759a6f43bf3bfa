"""The store's own clients send its plain reads and its scripts on a pooled connection directly
(``_url.sync_replies`` / ``async_replies``), not through redis-py's pipeline or
``execute_command``: the same replies, each error in its place, a failed connection's request
sent again under the connection's own retry policy; anything else (a caller's own client, a
cluster, fakeredis) goes through redis-py.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import fakeredis
import pytest
import redis
import redis.asyncio

from redis_session import AsyncRedisStore, Message, RedisStore, Session
from redis_session._transport import url as _url
from redis_session._transport.url import async_client, sync_client
from tests.conftest import Backend
from tests.support.proxy import LossyProxy


def msg(text: str) -> Message:
    return Message(role="user", content=text)


@contextmanager
def counted() -> Iterator[dict[str, int]]:
    """How many requests the direct path answered ("direct") and left to redis-py ("redis"),
    both flavours."""
    counts = {"direct": 0, "redis": 0}
    sync_replies, async_replies = _url.sync_replies, _url.async_replies

    def sync_counted(client: Any, commands: Sequence[tuple[Any, ...]]) -> list[Any] | None:
        replies = sync_replies(client, commands)
        counts["redis" if replies is None else "direct"] += 1
        return replies

    async def async_counted(client: Any, commands: Sequence[tuple[Any, ...]]) -> list[Any] | None:
        replies = await async_replies(client, commands)
        counts["redis" if replies is None else "direct"] += 1
        return replies

    _url.sync_replies, _url.async_replies = sync_counted, async_counted
    try:
        yield counts
    finally:
        _url.sync_replies, _url.async_replies = sync_replies, async_replies


def test_the_store_s_own_clients_take_the_direct_path_and_no_other(
    server_backend: Backend,
) -> None:
    own = sync_client(server_backend.url)
    callers = redis.Redis.from_url(server_backend.url) if server_backend.server else None
    try:
        replies = _url.sync_replies(own, [("PING",), ("GET", "{x}"), ("LLEN", "{x}")])
        if server_backend.cluster is not None:
            assert replies is None  # a cluster's client routes by slot: redis-py's path
        else:
            assert replies == [True, None, 0] or replies == [b"PONG", None, 0]
        if callers is not None:  # a caller's own client: its metrics see every command
            assert _url.sync_replies(callers, [("PING",)]) is None
        assert _url.sync_replies(fakeredis.FakeRedis(), [("PING",)]) is None
    finally:
        own.close()
        if callers is not None:
            callers.close()


def test_an_error_reply_is_its_exception_in_its_place(real_backend: Backend) -> None:
    client = sync_client(real_backend.url)
    key = f"{real_backend.prefix}{{x}}:s"
    try:
        client.set(key, "v")
        replies = _url.sync_replies(client, [("LLEN", key), ("GET", key), ("NOSUCHCOMMAND",)])
        assert replies is not None
        wrong, value, unknown = replies
        assert isinstance(wrong, redis.ResponseError) and "WRONGTYPE" in str(wrong)
        assert value == b"v" and isinstance(unknown, redis.ResponseError)
        assert client.ping()  # nothing left unread on the connection
        assert _url.sync_replies(client, [("GET", key)]) == [b"v"]
    finally:
        client.close()


def _as_compared(reply: Any) -> Any:
    """A reply with each exception as its type and text (exceptions do not compare equal)."""
    if isinstance(reply, Exception):
        return (type(reply), str(reply))
    if isinstance(reply, list):
        return [_as_compared(r) for r in reply]
    return reply


@pytest.mark.parametrize("protocol", [2, 3])
def test_a_direct_request_s_replies_are_redis_py_s_replies(
    real_backend: Backend, protocol: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    if protocol == 3 and real_backend.server is None:
        pytest.skip("the backend's URL is not a plain server's")
    client = sync_client(real_backend.url, protocol=protocol)
    assert isinstance(client, redis.Redis)
    key, other, nothing = (f"{real_backend.prefix}{{x}}:{n}" for n in ("s", "h", "none"))
    script = (
        "return {1, {2, 'two', {}}, false, redis.error_reply('ERR boom'), "
        "redis.status_reply('fine'), -7}"
    )
    commands = [
        ("SET", key, "v"),
        ("GET", key),
        ("GET", nothing),
        ("HGETALL", other),  # a map in RESP3
        ("EVAL", script, 0),
        ("EVAL", "return redis.error_reply('NOSCRIPT not here')", 0),
        ("NOSUCHCOMMAND",),
    ]
    try:
        client.hset(other, "f", "é")  # connected: the handshake's replies are redis-py's
        calls = []
        read_response = redis.connection.AbstractConnection.read_response

        def spied(self: Any, *args: Any, **kwargs: Any) -> Any:
            calls.append(1)
            return read_response(self, *args, **kwargs)

        with monkeypatch.context() as patched:
            patched.setattr(redis.connection.AbstractConnection, "read_response", spied)
            direct = _url.sync_replies(client, commands)
        assert direct is not None
        assert len(calls) == len(commands)  # each reply read by redis-py's connection
        connection: Any = client.connection_pool.get_connection()
        try:
            expected: list[Any] = []
            for command in commands:
                connection.send_command(*command)
                try:
                    expected.append(connection.read_response())
                except redis.ResponseError as exc:
                    expected.append(exc)
        finally:
            client.connection_pool.release(connection)
        assert _as_compared(direct) == _as_compared(expected)
        assert isinstance(direct[5], redis.exceptions.NoScriptError)  # redis-py's classes
    finally:
        client.delete(key, other)
        client.close()


def test_a_store_from_a_url_reads_and_appends_on_the_direct_path(real_backend: Backend) -> None:
    store = RedisStore(sync_client(real_backend.url), prefix=real_backend.prefix)
    other = RedisStore(sync_client(real_backend.url), prefix=real_backend.prefix)
    own = RedisStore(redis.Redis.from_url(real_backend.url), prefix=real_backend.prefix)
    try:
        store.create(Session(key="s", metadata={"m": "1"}))
        store.append_message("s", msg("first"))  # the scripts loaded: no NOSCRIPT below
        store.get("s")
        with counted() as counts:
            store.append_messages("s", [msg(f"m{i}") for i in range(40)])
            got = other.get("s")  # a first read: the script with LRANGE behind it
        assert counts == {"direct": 2, "redis": 0}
        assert [m.content for m in got.history] == ["first"] + [f"m{i}" for i in range(40)]
        with counted() as counts:
            assert own.get("s") == got  # the caller's client: redis-py, the same answer
        assert counts["direct"] == 0 and counts["redis"] >= 1
    finally:
        for s in (store, other, own):
            s.close()


@pytest.mark.parametrize("lost", ["EVALSHA", "LRANGE"])
def test_a_reply_lost_on_the_direct_path_is_sent_again_by_the_retry_policy(
    real_backend: Backend, lost: str
) -> None:
    # The connection is cut after the server ran the request (an append's script, a first
    # read's pipeline): it is sent again on a new connection, as redis-py's retry would (an
    # append applied twice is stored once, by its ids).
    assert real_backend.server is not None
    writer = real_backend.sync_store()
    writer.create(Session(key="s"))
    writer.append_messages("s", [msg(f"m{i}") for i in range(30)])
    with LossyProxy(real_backend.server.port) as proxy:
        url = f"redis://127.0.0.1:{proxy.port}/0"
        store = RedisStore(sync_client(url), prefix=real_backend.prefix, read_cache_bytes=0)
        try:
            store.get("s")  # learns the element size: its next read is the plain pipeline
            proxy.drop_replies_to(lost.encode(), 1)
            with counted() as counts:
                store.append_message("s", msg("new"))
                history = store.get("s").history
            assert proxy.dropped == 1
            assert counts == {"direct": 2, "redis": 0}
        finally:
            store.close()
    assert [m.content for m in history] == [*(f"m{i}" for i in range(30)), "new"]
    assert [m.content for m in writer.get("s").history] == [m.content for m in history]


@pytest.mark.parametrize("flavour", ["sync", "async"])
async def test_a_store_over_resp2_reads_what_one_over_resp3_reads(
    real_backend: Backend, flavour: str
) -> None:
    session = Session(key="s", agent_id="a", metadata={"m": "1", "n": "2"})
    writer = real_backend.sync_store()
    writer.create(session)
    writer.append_messages("s", [msg(f"m{i}") for i in range(50)])
    got = []
    for protocol in (2, 3):
        if flavour == "sync":
            store: Any = RedisStore(
                sync_client(real_backend.url, protocol=protocol),
                prefix=real_backend.prefix, read_cache_bytes=0,
            )  # fmt: skip
            store.get("s")  # learns the element size: the next read is the plain pipeline
            with counted() as counts:
                got.append(store.get("s"))
            store.close()
        else:
            store = AsyncRedisStore(
                async_client(real_backend.url, protocol=protocol),
                prefix=real_backend.prefix, read_cache_bytes=0,
            )  # fmt: skip
            await store.get("s")
            with counted() as counts:
                got.append(await store.get("s"))
            await store.close()
        assert counts == {"direct": 1, "redis": 0}
    assert got[0] == got[1] and got[0].metadata == {"m": "1", "n": "2"}
    assert len(got[0].history) == 50


async def test_a_cancelled_read_leaves_no_reply_on_a_pooled_connection(
    real_backend: Backend,
) -> None:
    writer = real_backend.sync_store()
    for key in ("a", "b"):
        writer.create(Session(key=key, agent_id=key))
        writer.append_messages(key, [msg(f"{key}{i}" * 40) for i in range(300)])
    store = AsyncRedisStore(
        async_client(real_backend.url), prefix=real_backend.prefix, read_cache_bytes=0
    )
    try:
        await store.get("a")  # learns the element size: the next reads are the steady kind

        async def cut_after(steps: int) -> bool:
            """Start a read, let the loop turn `steps` times, cut it if it is still waiting."""
            task = asyncio.ensure_future(store.get("a"))
            for _ in range(steps):
                if task.done():
                    break
                await asyncio.sleep(0)
            cut = not task.done()
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            return cut

        # An uncut read's length in loop turns (bounded): every cut below lands at one of its
        # suspension points (before sending, waiting on the reply, between its chunks), since
        # the read's decoding runs without yielding. Deterministic in what it covers, not timed.
        whole = 0
        task = asyncio.ensure_future(store.get("a"))
        while not task.done() and whole < 20_000:
            whole += 1
            await asyncio.sleep(0)
        await task
        cancelled = 0
        for steps in range(min(whole, 400)):
            cancelled += await cut_after(steps)
            got = await asyncio.wait_for(store.get("b"), timeout=10)
            assert got.agent_id == "b" and [m.content for m in got.history][-1] == "b299" * 40
        assert whole >= 2 and cancelled >= 2, (whole, cancelled)
    finally:
        await store.close()
