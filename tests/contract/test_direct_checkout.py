"""The direct path's short checkout (``_pools.sync_borrow`` / ``async_borrow``): a connected
idle connection of a ``from_url`` client's pool taken under the pool's own lock and put back
with the waiters woken, checked by the pool's own ``ensure_connection`` unless nothing waits
to be read on it (``_pools._quiet``, ``_pools._async_quiet``); redis-py's full checkout
whenever anything it does on top applies (a fork, maintenance, a streaming credential
provider, a task waiting on release). Each on every single real server.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from redis_session import _pools
from redis_session._url import async_client, sync_client
from tests.conftest import Backend


@pytest.fixture
def own(real_backend: Backend) -> Iterator[Callable[..., Any]]:
    """Makes clients as ``from_url`` does (``sync_client``) for the backend; closed after."""
    made: list[Any] = []

    def make(**options: Any) -> Any:
        made.append(sync_client(real_backend.url, **options))
        return made[-1]

    yield make
    for client in made:
        client.close()


def _idle(pool: Any) -> list[Any]:
    return [c for c in pool.pool.queue if c is not None]


def test_the_short_checkout_takes_the_newest_connected_one_and_puts_it_back(
    own: Callable[..., Any],
) -> None:
    client = own()
    pool = client.connection_pool
    client.ping()  # one connected connection, idle
    (first,) = _idle(pool)
    connection, short = _pools.sync_borrow(pool)
    assert short and connection is first and _idle(pool) == []
    connection.send_command("PING")
    assert connection.read_response() in (b"PONG", "PONG", True)
    _pools.sync_give_back(pool, connection, short)
    assert _idle(pool) == [first] and pool.pool.queue[-1] is first
    assert client.ping() is True  # redis-py's own checkout finds it as it left it


def test_an_unconnected_pool_a_fork_or_maintenance_take_redis_py_s_checkout(
    own: Callable[..., Any],
) -> None:
    client = own()
    pool = client.connection_pool
    connection, short = _pools.sync_borrow(pool)  # nothing connected yet: redis-py's
    assert not short and connection.is_connected
    _pools.sync_give_back(pool, connection, short)
    pool._in_maintenance = True
    connection, short = _pools.sync_borrow(pool)
    assert not short
    _pools.sync_give_back(pool, connection, short)
    pool._in_maintenance = False
    pool.pid = -1  # as after a fork: redis-py's checkout makes the pool anew
    connection, short = _pools.sync_borrow(pool)
    assert not short and pool.pid == os.getpid()
    _pools.sync_give_back(pool, connection, short)
    assert _pools.sync_borrow(pool)[1] is True


def test_a_thread_waiting_for_a_connection_is_woken_by_a_short_give_back(
    own: Callable[..., Any],
) -> None:
    client = own(max_connections=1)
    pool = client.connection_pool
    got: list[Any] = []
    client.ping()
    connection, short = _pools.sync_borrow(pool)
    assert short
    waiter = threading.Thread(target=lambda: got.append(client.get("{x}")))
    waiter.start()
    time.sleep(0.2)
    assert waiter.is_alive() and got == []  # the only connection is out: it waits
    _pools.sync_give_back(pool, connection, short)
    waiter.join(timeout=5)
    assert not waiter.is_alive() and got == [None]


def test_unread_data_or_a_server_closed_socket_is_made_again_before_a_request(
    real_backend: Backend, own: Callable[..., Any]
) -> None:
    client = own()
    admin = own()
    pool = client.connection_pool
    key = f"{real_backend.prefix}{{x}}:k"
    client.set(key, "v")
    connection, short = _pools.sync_borrow(pool)
    connection.send_command("GET", key)  # its reply left unread on the connection
    time.sleep(0.05)
    _pools.sync_give_back(pool, connection, short)
    assert client.get("{nothing}") is None  # not the stale b"v"
    assert len(_idle(pool)) == 1
    idle_id = client.client_id()
    admin.client_kill_filter(_id=idle_id)
    time.sleep(0.05)
    connection, short = _pools.sync_borrow(pool)  # its socket closed: made again
    assert short
    connection.send_command("CLIENT", "ID")
    assert connection.read_response() != idle_id
    _pools.sync_give_back(pool, connection, short)
    client.delete(key)


def test_a_quiet_connection_skips_ensure_connection_any_other_goes_through_it(
    real_backend: Backend, own: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    client = own()
    pool = client.connection_pool
    key = f"{real_backend.prefix}{{x}}:k"
    client.set(key, "stale")
    checked: list[Any] = []
    ensure = pool.ensure_connection

    def counted(connection: Any) -> None:
        checked.append(connection)
        ensure(connection)

    monkeypatch.setattr(pool, "ensure_connection", counted)

    def request(*command: Any) -> tuple[Any, bool]:
        """The reply of a request through the short checkout, and whether it was checked."""
        before = len(checked)
        connection, short = _pools.sync_borrow(pool)
        assert short
        try:
            connection.send_command(*command)
            return connection.read_response(), len(checked) > before
        finally:
            _pools.sync_give_back(pool, connection, short)

    assert request("GET", "{nothing}") == (None, False)  # quiet: taken as it is
    (connection,) = _idle(pool)
    sock, _ = connection._redis_session_poll
    assert sock is connection._sock  # the poll object kept is the socket's
    # a reply left unread on the socket: checked, made again, the next reply is its own
    connection.send_command("GET", key)
    time.sleep(0.05)
    assert request("GET", "{nothing}") == (None, True)
    assert request("GET", "{nothing}") == (None, False)  # quiet again
    assert connection._redis_session_poll[0] is connection._sock is not sock  # a new socket's
    # a reply left in the parser (read from the socket, not handed out): the same
    connection._parser._reader.feed(b"$5\r\nstale\r\n")
    assert request("GET", "{nothing}") == (None, True)
    # closed by the server: made again before the request
    idle_id = client.client_id()
    own().client_kill_filter(_id=idle_id)
    time.sleep(0.05)
    new_id, was_checked = request("CLIENT", "ID")
    assert new_id != idle_id and was_checked
    # not a plain socket (TLS keeps bytes above it) or not hiredis's parser: always checked
    for name in ("socket.socket", "_HiredisParser"):
        with monkeypatch.context() as patched:
            patched.setattr(f"redis_session._pools.{name}", type("Other", (), {}))
            assert request("GET", "{nothing}") == (None, True)
    assert request("GET", "{nothing}") == (None, False)
    client.delete(key)


def test_a_connection_marked_for_a_reconnect_is_closed_when_given_back(
    own: Callable[..., Any],
) -> None:
    client = own()
    pool = client.connection_pool
    client.ping()
    connection, short = _pools.sync_borrow(pool)
    assert short
    connection.should_reconnect = lambda: True
    _pools.sync_give_back(pool, connection, short)
    assert not connection.is_connected and _idle(pool) == [connection]


async def test_the_asyncio_short_checkout_and_its_waiters(real_backend: Backend) -> None:
    client: Any = async_client(real_backend.url, max_connections=1)
    pool = client.connection_pool
    try:
        await client.ping()
        (first,) = pool._available_connections
        connection, short = await _pools.async_borrow(pool)
        assert short and connection is first and pool._available_connections == []
        assert pool._in_use_connections == {first}

        async def get() -> Any:
            return await client.get("{x}")

        waiter = asyncio.create_task(get())
        await asyncio.sleep(0.2)
        assert not waiter.done()  # the only connection is out: it waits on the condition
        assert pool._condition._waiters
        await _pools.async_give_back(pool, connection, short)  # by release: it wakes
        assert await asyncio.wait_for(waiter, 5) is None
        connection, short = await _pools.async_borrow(pool)
        assert short
        await _pools.async_give_back(pool, connection, short)  # nobody waits: put back
        assert pool._available_connections == [first] and not pool._in_use_connections
    finally:
        await client.aclose()


async def test_asyncio_unread_data_and_redis_py_s_checkout_where_it_applies(
    real_backend: Backend,
) -> None:
    client: Any = async_client(real_backend.url)
    pool = client.connection_pool
    key = f"{real_backend.prefix}{{x}}:a"
    try:
        await client.set(key, "v")
        connection, short = await _pools.async_borrow(pool)
        assert short
        await connection.send_command("GET", key)  # its reply left unread
        await asyncio.sleep(0.05)
        await _pools.async_give_back(pool, connection, short)
        assert await client.get("{nothing}") is None
        pool._in_maintenance = True
        connection, short = await _pools.async_borrow(pool)
        assert not short
        await _pools.async_give_back(pool, connection, short)
        pool._in_maintenance = False
        pool.connection_kwargs["credential_provider"] = object()  # re-auth on release
        connection, short = await _pools.async_borrow(pool)
        assert not short
        await _pools.async_give_back(pool, connection, short)
        del pool.connection_kwargs["credential_provider"]
        await client.delete(key)
    finally:
        await client.aclose()


async def test_a_quiet_asyncio_connection_skips_ensure_connection_any_other_goes_through_it(
    real_backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    client: Any = async_client(real_backend.url)
    admin: Any = async_client(real_backend.url)
    pool = client.connection_pool
    key = f"{real_backend.prefix}{{x}}:k"
    checked: list[Any] = []
    ensure = pool.ensure_connection

    async def counted(connection: Any) -> None:
        checked.append(connection)
        await ensure(connection)

    monkeypatch.setattr(pool, "ensure_connection", counted)

    async def request(*command: Any) -> tuple[Any, bool]:
        """The reply of a request through the short checkout, and whether it was checked."""
        before = len(checked)
        connection, short = await _pools.async_borrow(pool)
        assert short
        try:
            await connection.send_command(*command)
            return await connection.read_response(), len(checked) > before
        finally:
            await _pools.async_give_back(pool, connection, short)

    try:
        await client.set(key, "stale")
        assert await request("GET", "{nothing}") == (None, False)  # quiet: taken as it is
        (connection,) = pool._available_connections
        # a reply left unread (in the stream's buffer once the loop ran): checked, made again
        await connection.send_command("GET", key)
        await asyncio.sleep(0.05)
        assert connection._reader._buffer
        assert await request("GET", "{nothing}") == (None, True)
        assert await request("GET", "{nothing}") == (None, False)  # quiet again
        # a reply left in the parser (read from the stream, not handed out): the same
        connection._parser._reader.feed(b"$5\r\nstale\r\n")
        assert await request("GET", "{nothing}") == (None, True)
        # closed by the server (the stream at its end): made again before the request
        idle_id = await client.client_id()
        await admin.client_kill_filter(_id=idle_id)
        await asyncio.sleep(0.05)
        new_id, was_checked = await request("CLIENT", "ID")
        assert new_id != idle_id and was_checked
        # not redis-py's asyncio hiredis parser: always checked
        with monkeypatch.context() as patched:
            patched.setattr("redis_session._pools._AsyncHiredisParser", type("Other", (), {}))
            assert await request("GET", "{nothing}") == (None, True)
        assert await request("GET", "{nothing}") == (None, False)
        await client.delete(key)
    finally:
        await client.aclose()
        await admin.aclose()


@pytest.mark.parametrize("flavour", ["sync", "async"])
async def test_a_store_s_requests_take_the_short_checkout(
    real_backend: Backend, flavour: str
) -> None:
    from redis_session import AsyncRedisStore, Message, RedisStore, Session

    counts = {True: 0, False: 0}
    borrow: Any = _pools.sync_borrow if flavour == "sync" else _pools.async_borrow
    name = f"{flavour}_borrow"

    def counted(result: tuple[Any, bool]) -> tuple[Any, bool]:
        counts[result[1]] += 1
        return result

    import redis_session._connect_async as connect_async
    import redis_session._connect_sync as connect_sync

    module: Any = connect_sync if flavour == "sync" else connect_async
    if flavour == "sync":
        setattr(module, name, lambda pool: counted(borrow(pool)))
    else:

        async def async_counted(pool: Any) -> tuple[Any, bool]:
            return counted(await borrow(pool))

        setattr(module, name, async_counted)
    try:
        if flavour == "sync":
            store: Any = RedisStore.from_url(real_backend.url, prefix=real_backend.prefix)
            store.create(Session(key="s"))
            for i in range(5):
                store.append_message("s", Message(role="user", content=str(i)))
            assert len(store.get("s").history) == 5
            store.delete("s")
            store.close()
        else:
            astore = AsyncRedisStore.from_url(real_backend.url, prefix=real_backend.prefix)
            await astore.create(Session(key="s"))
            for i in range(5):
                await astore.append_message("s", Message(role="user", content=str(i)))
            assert len((await astore.get("s")).history) == 5
            await astore.delete("s")
            await astore.close()
    finally:
        setattr(module, name, borrow)
    assert counts[True] >= 6 and counts[False] <= 1, counts  # redis-py's: the first only
