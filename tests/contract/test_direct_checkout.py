"""The pools of a ``from_url`` client hand out a connected idle connection first: the blocking
one through its own queue class (``_pools.ConnectedFirstQueue``, redis-py's public
``queue_class``), the asyncio one by ordering its idle list (the fast path's ``idle-order``;
redis-py's order when that piece is off). Each on every single real server.
"""

from __future__ import annotations

import asyncio
import queue
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from redis_session._transport import fast as _fast
from redis_session._transport import pools as _pools
from redis_session._transport.url import async_client, sync_client
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


def test_the_blocking_pool_takes_a_connected_one_before_a_newer_unconnected_one(
    own: Callable[..., Any],
) -> None:
    client = own(max_connections=4)
    pool = client.connection_pool
    assert isinstance(pool.pool, _pools.ConnectedFirstQueue)
    first, second = pool.get_connection(), pool.get_connection()
    second.disconnect()  # a failed one, given back last: a plain LIFO pool takes it next
    pool.release(first)
    pool.release(second)
    taken = pool.get_connection()
    assert taken is first and taken.is_connected
    pool.release(taken)
    assert client.ping() is True
    assert pool._get_free_connections() == {first, second}  # redis-py reads the queue too


def test_a_thread_waiting_for_a_connection_is_woken_by_a_release(
    own: Callable[..., Any],
) -> None:
    client = own(max_connections=1, timeout=5)
    pool = client.connection_pool
    held = pool.get_connection()
    got: list[Any] = []
    waiter = threading.Thread(target=lambda: got.append(pool.get_connection()))
    waiter.start()
    time.sleep(0.05)  # it waits: the pool's only connection is out
    assert got == []
    pool.release(held)
    waiter.join(timeout=5)
    assert got == [held]
    pool.release(held)


def test_an_exhausted_pool_times_out_as_redis_py_s_does(own: Callable[..., Any]) -> None:
    import redis

    client = own(max_connections=1, timeout=0.05)
    pool = client.connection_pool
    held = pool.get_connection()
    started = time.monotonic()
    with pytest.raises(redis.ConnectionError, match="No connection available"):
        pool.get_connection()
    assert 0.04 <= time.monotonic() - started < 2
    pool.release(held)


def test_the_queue_alone() -> None:
    q = _pools.ConnectedFirstQueue(2)
    q.put_nowait(None)
    q.put_nowait(None)
    with pytest.raises(queue.Full):
        q.put_nowait(None)
    assert q.full() and q.qsize() == 2 and not q.empty()
    assert q.get() is None and q.get_nowait() is None
    with pytest.raises(queue.Empty):
        q.get_nowait()
    with pytest.raises(queue.Empty):
        q.get(timeout=0.01)


async def test_the_asyncio_pool_takes_a_connected_one_first(real_backend: Backend) -> None:
    client: Any = async_client(real_backend.url, max_connections=4)
    pool = client.connection_pool
    try:
        first, second = await pool.get_connection(), await pool.get_connection()
        await second.disconnect()
        await pool.release(first)
        await pool.release(second)
        taken = await pool.get_connection()
        ordered = _fast.idle_connections(pool) is not None
        assert (taken is first) == ordered  # redis-py's order without the fast path's piece
        assert taken.is_connected or not ordered
        await pool.release(taken)
        assert await asyncio.wait_for(client.ping(), 5) is True
    finally:
        await client.aclose()
