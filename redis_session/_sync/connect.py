# Generated from redis_session/_async/connect.py by tools/unasync.py: edit that one.
"""Clients from a URL, and what a store does to them (re-read a topology, close), written once
for asyncio in ``_async/connect.py``; ``tools/unasync.py`` generates the blocking
``_sync/connect.py`` from it. The policy (retries, pools, timeouts) is told in
``redis_session._transport.url``.

Hand-written elsewhere, because the two flavours of redis-py differ there in more than
``await``: the connected-first pools (``_transport.pools``: a queue class or an ordered list),
the client of one cluster node (``_transport.url.sync_node_client``: a blocking node carries
redis-py's client of it, an asyncio node has none) and making a client again for another event
loop (``_transport.url.async_remake``, asyncio only).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import redis
import redis.retry
import redis.sentinel
from redis.backoff import ExponentialBackoff, ExponentialWithJitterBackoff

from .._transport.endpoint import (
    DEFAULT_RETRY_ATTEMPTS,
    DEFAULT_RETRY_SECONDS,
    MEMORY_SCHEME,
    SENTINEL_RETRY_ATTEMPTS,
    SENTINEL_RETRY_SECONDS,
    SENTINEL_SCHEME,
    Outage,
    client_options,
    fakeredis_module,
    may_heal,
    may_heal_through,
    memory_server,
    parse,
    retry_cut,
    sentinel_target,
    where,
)
from .._transport.pools import ConnectedFirstPool, packed


class NoticingRetry(redis.retry.Retry):
    """redis-py's retry policy, telling an :class:`Outage` of each failure and success; what
    cannot heal (:func:`may_heal`: credentials, an unknown host, a bad certificate) is raised
    at once, not retried nor logged. The copies redis-py makes for each connection share the
    outage. Its exponential backoff
    (``base`` * 2 ** failures, at most ``cap`` seconds; jittered below that or not) is not
    slept past the deadline of :func:`retries_until`: the failure is raised instead.
    """

    def __init__(
        self,
        backoff: type[ExponentialBackoff | ExponentialWithJitterBackoff],
        retries: int,
        outage: Outage,
        *,
        base: float,
        cap: float,
        heals: Callable[[BaseException], bool] = may_heal,
    ) -> None:
        super().__init__(backoff(cap=cap, base=base), retries, is_retryable=heals)
        self.outage = outage
        self.heals = heals
        self.base, self.cap = base, cap

    def call_with_retry(self, do: Any, fail: Any, *args: Any, **kwargs: Any) -> Any:
        """As redis-py's, telling the outage of every failure and of the success."""
        outage = self.outage
        failures = 0

        def noticed(error: Exception, *count: Any) -> Any:
            nonlocal failures
            if not self.heals(error):  # raised at once, no outage to tell of
                return fail(error, *count)
            failures += 1
            outage.failed(error)
            handled = fail(error, *count)
            longest = self.cap if failures >= 32 else min(self.cap, self.base * 2**failures)
            if retry_cut(longest):
                raise error
            return handled

        result = super().call_with_retry(do, noticed, *args, **kwargs)
        outage.recovered()
        return result


class SentinelPool(redis.sentinel.SentinelConnectionPool):
    """redis-py's pool of a Sentinel-found primary, as :func:`sync_client` makes it (a class
    of its own: a store's requests go out on it directly, see :func:`sync_replies`).
    """


def _default_retry(url: str) -> NoticingRetry:
    outage = Outage(where(url), DEFAULT_RETRY_ATTEMPTS, DEFAULT_RETRY_SECONDS)
    return NoticingRetry(
        ExponentialWithJitterBackoff, DEFAULT_RETRY_ATTEMPTS, outage, base=0.01, cap=1.0
    )


def _sentinel_retry(url: str) -> NoticingRetry:
    outage = Outage(where(url), SENTINEL_RETRY_ATTEMPTS, SENTINEL_RETRY_SECONDS)
    heals = may_heal_through(sentinel_target(url)[0])
    return NoticingRetry(
        ExponentialBackoff, SENTINEL_RETRY_ATTEMPTS, outage, base=0.05, cap=1.0, heals=heals
    )


def sync_client(
    url: str, *, cluster: bool = False, **kwargs: Any
) -> redis.Redis | redis.RedisCluster:
    """A client for ``url``; ``kwargs`` go to redis-py (over the defaults of ``_transport.url``)."""
    scheme, url, cluster = parse(url, cluster)
    if scheme == MEMORY_SCHEME:
        client_options(kwargs, pool=False)
        return fakeredis_module().FakeRedis(server=memory_server(url))  # type: ignore[no-any-return]
    if scheme == SENTINEL_SCHEME:
        hosts, service, db = sentinel_target(url)
        factory: Any = redis.sentinel.Sentinel
        sentinel = factory(hosts, sentinel_kwargs={"socket_timeout": 1.0})
        options = {
            "retry": _sentinel_retry(url),
            "connection_pool_class": SentinelPool,
            **client_options(kwargs, pool=False),
        }
        client: redis.Redis = sentinel.master_for(service, db=db, **options)
        return client
    if cluster:
        return redis.RedisCluster.from_url(url, **client_options(kwargs, pool=False))
    pool = ConnectedFirstPool.from_url(
        url, **{"retry": _default_retry(url), **client_options(kwargs, pool=True)}
    )
    return redis.Redis.from_pool(pool)


_OWN_POOLS = (ConnectedFirstPool, SentinelPool)
"""The pools of the clients :func:`sync_client` makes (not a cluster's, not fakeredis's)."""


def sync_replies(client: Any, commands: Sequence[tuple[Any, ...]]) -> list[Any] | None:
    """The replies of ``commands`` (each safe to send twice: reads, and the store's scripts,
    idempotent by ids and tokens), sent in one write on a connection of the pool of ``client``
    (one :func:`sync_client` made) and read as they come, each error reply as its exception
    in its place: what redis-py's pipeline answers for them, without its per-command Python
    (see docs/benchmarks.md), through redis-py's public connection methods
    (``get_connection``, ``send_packed_command``, ``read_response``, ``release``). A connection
    that fails is closed and the commands sent again under the connection's own retry policy,
    as redis-py sends a command (the same attempts, backoff and outage notices).

    None: a client of another kind, whose commands go through redis-py: a caller's own (so
    that redis-py's metrics and instrumentation see every command), a cluster, fakeredis, a
    client of one connection.
    """
    pool: Any = getattr(client, "connection_pool", None)
    if type(client) is not redis.Redis or type(pool) not in _OWN_POOLS:
        return None
    if client.connection is not None:
        return None
    connection = pool.get_connection()

    def exchange() -> list[Any]:
        connection.send_packed_command(packed(connection, commands))
        replies: list[Any] = []
        for _ in commands:
            try:
                replies.append(connection.read_response())
            except redis.exceptions.ResponseError as exc:
                replies.append(exc)
        return replies

    def failed(error: Exception, *count: Any) -> None:
        connection.disconnect()

    try:
        got: list[Any] = connection.retry.call_with_retry(exchange, failed)
        return got
    except BaseException:  # out of retries, cancelled, interrupted: replies may be unread
        connection.disconnect()
        raise
    finally:
        pool.release(connection)


def _sentinel_pool(client: Any) -> Any:
    pool = getattr(client, "connection_pool", None)
    return pool if hasattr(pool, "sentinel_manager") else None


def sync_refresh(client: Any) -> None:
    """Re-read the topology: a cluster's slots, or (Sentinel) drop the pooled connections so
    the next one asks the sentinels for the primary again; a no-op for other clients.
    """
    if isinstance(client, redis.RedisCluster):
        client.nodes_manager.initialize()
    elif (pool := _sentinel_pool(client)) is not None:
        pool.disconnect()


def sync_close(client: Any) -> None:
    """Close ``client`` and, for a Sentinel-managed client, its connections to the sentinels."""
    client.close()
    manager = getattr(getattr(client, "connection_pool", None), "sentinel_manager", None)
    for sentinel in getattr(manager, "sentinels", ()):
        sentinel.close()
