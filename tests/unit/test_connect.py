"""Connection code without a server: the retry copies share one outage, the connected-first
order of the pools, and the names the rest of the package takes from ``_url``.
"""

from __future__ import annotations

import copy
from types import SimpleNamespace
from typing import Any

import pytest
import redis
import redis.asyncio

from redis_session._async import connect as _connect_async
from redis_session._sync import connect as _connect_sync
from redis_session._transport import url as _url
from redis_session._transport.pools import _connected_last


@pytest.mark.parametrize("make", [_url.sync_client, _url.async_client], ids=["sync", "async"])
async def test_every_connection_s_retry_tells_the_client_s_one_outage(make: Any) -> None:
    client = make("redis://user:secret@127.0.0.1:1/0")
    pool = client.connection_pool
    retry = pool.connection_kwargs["retry"]
    twin = copy.deepcopy(retry)
    assert twin is not retry and twin.outage is retry.outage
    assert twin.get_retries() == retry.get_retries() == 10
    assert twin._backoff is not retry._backoff  # each connection backs off on its own
    assert pool.make_connection().retry.outage is retry.outage
    assert retry.outage.where == "redis://127.0.0.1:1/0"
    if make is _url.async_client:
        assert type(retry).__module__ == _connect_async.__name__
        await _url.async_close(client)
    else:
        assert type(retry).__module__ == _connect_sync.__name__
        _url.sync_close(client)


def test_a_pool_hands_out_its_newest_connected_connection_first() -> None:
    up, down = SimpleNamespace(is_connected=True), SimpleNamespace(is_connected=False)
    older = SimpleNamespace(is_connected=True)
    idle: list[Any] = [None, older, up, down, None]
    _connected_last(idle)
    assert idle == [None, older, down, None, up]
    nothing: list[Any] = [None, down]
    _connected_last(nothing)
    assert nothing == [None, down]


def test_the_names_the_package_takes_from_url_resolve() -> None:
    for name in (
        "sync_client", "async_client", "sync_close", "async_close", "sync_refresh",
        "async_refresh", "sync_node_client", "async_node_client", "async_remake",
        "check_client", "FAILOVER_ERRORS", "is_failover_error",
    ):  # fmt: skip
        assert hasattr(_url, name), name
    assert _url.sync_client is _connect_sync.sync_client
    assert _url.async_client is _connect_async.async_client


def test_a_store_refuses_a_client_of_the_other_flavour_at_construction() -> None:
    import fakeredis

    from redis_session import AsyncRedisStore, RedisStore

    for client in (redis.asyncio.Redis(), fakeredis.FakeAsyncRedis()):
        with pytest.raises(
            TypeError, match=r"^RedisStore takes a blocking client .*AsyncRedisStore"
        ):
            RedisStore(client)  # type: ignore[arg-type]
    for sync_client in (redis.Redis(), fakeredis.FakeRedis()):
        with pytest.raises(
            TypeError, match=r"^AsyncRedisStore takes an asyncio client .*RedisStore"
        ):
            AsyncRedisStore(sync_client)  # type: ignore[arg-type]
    RedisStore(fakeredis.FakeRedis()).close()  # each its own: fine
