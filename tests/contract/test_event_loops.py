"""One AsyncRedisStore used from many event loops over its life, on every real server setup
(Redis, Valkey, a cluster, Sentinel): ``asyncio.run`` again and again (as ``Runner.run_sync``
does), threads each running a loop of their own; nothing fails and no connection is left
behind on the server.

Connections are counted by name: each store here names its connections (``CLIENT SETNAME``)
and only those count, so other clients of the server (other tests' leftovers, another test
run's) cannot change a count; and a count is awaited (bounded) rather than read once, since
a socket the client closed leaves the server's client list when the server gets to it, not
when the client returns.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
import redis

from redis_session import AsyncRedisStore, Message, Session
from redis_session._transport import fast as _fast
from tests.conftest import Backend
from tests.support.servers import wait_until
from tests.support.stepping import lrange_taken

SETTLE_S = 10.0
"""How long a count of connections may take to come down to its bound (a leak never does)."""


def _store(backend: Backend, **options: Any) -> AsyncRedisStore:
    return AsyncRedisStore.from_url(backend.url, prefix=backend.prefix, **options)


def _named() -> str:
    """A connection name of one store's own (its ``client_name``)."""
    return f"loops-{uuid.uuid4().hex[:10]}"


def _connections(admin: Any, name: str) -> int:
    """The server's connections named ``name`` (every node of a cluster)."""
    if isinstance(admin, redis.RedisCluster):
        nodes: list[Any] = admin.get_nodes()  # type: ignore[no-untyped-call]
        return sum(_connections(node.redis_connection, name) for node in nodes)
    return sum(1 for c in admin.client_list(_type="normal") if c.get("name") == name)


def _settled(admin: Any, name: str, at_most: int) -> int:
    """How many connections named ``name`` the server has once they are ``at_most`` or fewer,
    or after SETTLE_S seconds (the server drops a closed connection when it next reads it).
    """
    wait_until(lambda: _connections(admin, name) <= at_most, SETTLE_S)
    return _connections(admin, name)


def _turns(store: AsyncRedisStore, key: str) -> Callable[[int], Coroutine[Any, Any, int]]:
    """Turn ``n`` of a conversation in session ``key`` (created by turn 0): one append, then
    a read; the history's length.
    """

    async def turn(n: int) -> int:
        if n == 0:
            await store.create(Session(key=key))
        await store.append_message(key, Message(role="user", content=f"turn {n}"))
        return len(await store.get_history(key))

    return turn


def test_asyncio_run_again_and_again_with_one_store(server_backend: Backend) -> None:
    # On a cluster and with Sentinel as well: from_url makes the client again for each loop
    # (a cluster client, a Sentinel manager and its primary's pool of its own).
    name = _named()
    store = _store(server_backend, client_name=name)
    turn = _turns(store, "s")
    admin = server_backend.sync_client()
    counts = [asyncio.run(turn(n)) for n in range(100)]
    assert counts == list(range(1, 101))
    # each loop's connections closed on that loop as asyncio.run shut it down: none leaked
    assert _settled(admin, name, 0) == 0  # named: the count sees them
    assert store._clients.loops == 0
    asyncio.run(store.close())
    assert _settled(admin, name, 0) == 0


def test_threads_each_with_a_loop_share_one_store(server_backend: Backend) -> None:
    store = _store(server_backend)
    asyncio.run(store.create(Session(key="t")))
    errors: list[BaseException] = []

    def worker(w: int) -> None:
        async def appends() -> None:
            for n in range(20):
                await store.append_message("t", Message(role="user", content=f"{w}-{n}"))

        try:
            asyncio.run(appends())
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors and not any(t.is_alive() for t in threads)
    history = asyncio.run(store.get_history("t"))
    assert sorted(m.content for m in history) == sorted(
        f"{w}-{n}" for w in range(4) for n in range(20)
    )
    asyncio.run(store.close())


def test_a_listener_in_a_later_loop(server_backend: Backend) -> None:
    store = _store(server_backend)
    asyncio.run(store.create(Session(key="first loop")))

    async def later() -> list[str]:
        listener = await store.listen()
        try:
            await store.create(Session(key="second loop"))
            event = await listener.get(timeout=5)
            assert event is not None
            return [event.key]
        finally:
            await listener.aclose()

    assert asyncio.run(later()) == ["second loop"]
    asyncio.run(store.close())


def test_the_openai_agents_session_over_many_loops(server_backend: Backend) -> None:
    pytest.importorskip("agents")  # the openai-agents extra
    from redis_session.integrations.openai_agents import RedisAgentSession

    store = _store(server_backend)
    agent_session = RedisAgentSession("chat", store, key_prefix="oa:")
    for n in range(5):  # what Runner.run_sync does with one session object
        asyncio.run(agent_session.add_items([{"role": "user", "content": f"item {n}"}]))
    items = asyncio.run(agent_session.get_items())
    assert [dict(i).get("content") for i in items] == [f"item {n}" for n in range(5)]
    asyncio.run(store.close())


@pytest.mark.fake
def test_memory_stores_work_from_any_loop() -> None:
    store = AsyncRedisStore.from_url("memory://")
    asyncio.run(store.create(Session(key="m")))
    for n in range(3):
        asyncio.run(store.append_message("m", Message(role="user", content=str(n))))
    assert len(asyncio.run(store.get_history("m"))) == 3
    assert store._clients.loops == 0  # memory:// is used as it is
    asyncio.run(store.close())


def test_first_reads_by_lrange_from_loop_after_loop(
    server_backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Without a read cache every get is a first read: the get script with LRANGE and HGETALL
    # pipelined behind it, through the client of the running loop; and a store with a cache
    # reads incrementally on in each new loop.
    cold, hot = _store(server_backend, read_cache_bytes=0), _store(server_backend)
    taken = lrange_taken(monkeypatch)

    async def turn(n: int) -> tuple[int, int]:
        if n == 0:
            await hot.create(Session(key="c"))
            await hot.append_messages(
                "c", [Message(role="user", content=str(i)) for i in range(40)]
            )
        await hot.append_message("c", Message(role="assistant", content=f"turn {n}"))
        a, b = await cold.get("c"), await hot.get("c")
        assert a.history == b.history
        return len(a.history), len(b.history)

    counts = [asyncio.run(turn(n)) for n in range(12)]
    assert counts == [(41 + n, 41 + n) for n in range(12)]
    assert taken == [True] * 11  # not the first: the store knew no element size yet
    assert cold._clients.loops == 0 and hot._clients.loops == 0  # closed with their loops
    asyncio.run(cold.close())
    asyncio.run(hot.close())


def test_durable_writes_from_loop_after_loop(server_backend: Backend) -> None:
    # WAIT goes on the connection that wrote: on a cluster, a client of the node itself, made
    # per loop as the store's client is (LoopClients.nodes).
    replicas = 0 if server_backend.name in ("redis", "valkey") else 1
    name = _named()
    store = _store(server_backend, wait_replicas=replicas, wait_timeout=5, client_name=name)
    admin = server_backend.sync_client()
    turn = _turns(store, "d")
    assert [asyncio.run(turn(n)) for n in range(6)] == list(range(1, 7))
    assert store._clients._nodes == {}  # every loop's node clients closed with it
    assert _settled(admin, name, 0) == 0  # and every loop's own connections
    asyncio.run(store.close())
    assert _settled(admin, name, 0) == 0


@pytest.mark.skipif(
    not _fast.STATUS.pieces["loop-close"].on,
    reason="the fast path's loop-close is off: such a loop's sockets close when collected",
)
def test_a_loop_closed_without_shutting_down_leaves_nothing_behind(
    server_backend: Backend,
) -> None:
    # loop.close() alone (no shutdown_asyncgens, as asyncio.run does): the store closes that
    # loop's sockets directly when another loop next attaches, or at close().
    name = _named()
    store = _store(server_backend, client_name=name)
    admin = server_backend.sync_client()
    turn = _turns(store, "m")
    for n in range(3):
        loop = asyncio.new_event_loop()
        assert loop.run_until_complete(turn(n)) == n + 1
        loop.close()
    assert store._clients.loops == 1  # the last closed loop's client: not swept yet
    assert asyncio.run(turn(3)) == 4  # sweeps it
    assert _settled(admin, name, 0) == 0
    asyncio.run(store.close())
