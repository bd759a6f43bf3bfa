"""Client construction from a URL: ``redis://``, ``rediss://``, ``unix://``, ``memory://``,
``redis+cluster://`` / ``rediss+cluster://`` for a Redis Cluster (or ``cluster=True``) and
``redis+sentinel://host:port[,host:port…]/service[/db]`` for a primary found through Sentinel.

Retry policy, chosen here explicitly: plain clients get ``DEFAULT_RETRY_ATTEMPTS`` (10)
retries of connection errors and timeouts with jittered backoff (base 10 ms, cap 1 s), the
policy redis-py's ``Redis(...)`` constructor has by default but its ``from_url`` does not give
(redis-py 8.1: no retry at all); cluster clients keep redis-py's cluster retries; a Sentinel
client gets ``SENTINEL_RETRY_ATTEMPTS`` (about 12 s of retries), enough to ride through a
failover. Every store operation is idempotent, so a retried call never applies twice. Those
retries are not silent: the first retried failure of an outage is logged at WARNING on the
``redis_session`` logger (the server's URL without its password, the error, how many retries
over how long), and the first success after it at INFO (``endpoint.Outage``).

``memory://`` is the embedded default: an in-process fakeredis server with Lua. ``memory://``
alone gives a private server each time; ``memory://NAME`` the same server for the same NAME
within this process, so several stores (or a sync and an async one) can share it.

Connections: a plain client gets a bounded, blocking pool (``max_connections`` = 32: a caller
beyond that waits up to ``timeout`` = 10 s for a free connection, then ``ConnectionError``)
that hands out an already connected connection before one it would have to connect, so that
after a burst that hit the server's ``maxclients`` the idle connections it holds serve the next
calls at once (a plain pool picks the newest released connection, often a failed one, whose
reconnects fail as long as the pool's idle ones fill the server). Sockets get
``socket_timeout`` = 10 s and ``socket_connect_timeout`` = 5 s. Every one of these is a
redis-py keyword the caller may override (``from_url(url, max_connections=100)``);
a cluster client takes the timeouts (its per-node pools are redis-py's own).

Where it is done: ``endpoint`` (what a URL names, the options, the log of an outage),
``pools`` (the pools, and the packing of a store's own requests), ``_async/connect.py`` (the
clients, written once for asyncio) and ``_sync/connect.py`` (generated from it by
``tools/unasync.py``); this module names what the stores use, and holds what has one flavour
or differs by more than ``await``.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

import redis
import redis.asyncio

from .._async.connect import async_client, async_close, async_refresh, async_replies
from .._sync.connect import sync_client, sync_close, sync_refresh, sync_replies
from ..errors import InvalidArgument
from .endpoint import SENTINEL_SCHEME, check_client_options, parse

__all__ = [
    "FAILOVER_ERRORS",
    "async_client",
    "async_close",
    "async_node_client",
    "async_refresh",
    "async_remake",
    "async_replies",
    "check_client",
    "check_client_options",
    "is_failover_error",
    "sync_client",
    "sync_close",
    "sync_node_client",
    "sync_refresh",
    "sync_replies",
]


def async_remake(url: str, *, cluster: bool = False, **kwargs: Any) -> Callable[[], Any] | None:
    """How to make another asyncio client like :func:`async_client`'s for ``url`` (for another
    event loop: see ``redis_session._transport.loops``) where copying one cannot: a cluster
    client, a Sentinel-managed one; None for the others.
    """
    scheme, _, cluster = parse(url, cluster)
    if scheme != SENTINEL_SCHEME and not cluster:
        return None
    return functools.partial(async_client, url, cluster=cluster, **kwargs)


def check_client(client: object, *, aio: bool = False) -> bool:
    """Whether ``client`` is a cluster client; refuses clients that decode replies (stored
    digests and messages are bytes), objects that are no Redis client, and a client of the
    other flavour (``aio``: the store is an ``AsyncRedisStore``) with a ``TypeError`` saying
    which store takes it.
    """
    get_encoder = getattr(client, "get_encoder", None)
    if get_encoder is None or not hasattr(client, "register_script"):
        raise InvalidArgument("client", f"must be a redis-py client, not {type(client).__name__}")
    asyncio_client = inspect.iscoroutinefunction(getattr(client, "execute_command", None))
    if asyncio_client != aio:
        kind = type(client).__module__ + "." + type(client).__qualname__
        if aio:
            raise TypeError(
                f"AsyncRedisStore takes an asyncio client (redis.asyncio.Redis, "
                f"redis.asyncio.RedisCluster), not {kind}: use RedisStore for it"
            )
        raise TypeError(
            f"RedisStore takes a blocking client (redis.Redis, redis.RedisCluster), not "
            f"{kind}: use AsyncRedisStore for it"
        )
    if get_encoder().decode_responses:
        raise InvalidArgument("client", "must be created with decode_responses=False")
    return isinstance(client, redis.RedisCluster | redis.asyncio.RedisCluster)


FAILOVER_ERRORS: tuple[type[Exception], ...] = (
    redis.ConnectionError,
    redis.TimeoutError,
    redis.exceptions.ClusterDownError,
    redis.exceptions.TryAgainError,
    redis.exceptions.MovedError,
    redis.exceptions.AskError,
    redis.exceptions.ReadOnlyError,
    redis.exceptions.MasterDownError,
)
"""Errors after which a write may succeed again once the topology settled."""


MIGRATING_ERRORS: tuple[type[Exception], ...] = (
    redis.exceptions.TryAgainError,
    redis.exceptions.AskError,
    redis.exceptions.MovedError,
    redis.exceptions.ClusterError,
)
"""The errors a cluster client raises while a slot is being moved (see :func:`is_migrating`)."""


def is_migrating(exc: BaseException) -> bool:
    """Whether ``exc`` says that a key's slot is being moved between nodes: ``TRYAGAIN`` (a
    script or command naming keys of which some moved and some not yet, or do not exist),
    a redirection that surfaced, or redis-py's ``ClusterError: TTL exhausted`` after its own
    16 quick tries of those.
    """
    if isinstance(exc, MIGRATING_ERRORS[:3]):  # TRYAGAIN, ASK, MOVED
        return True
    return type(exc) is redis.exceptions.ClusterError and "TTL exhausted" in str(exc)


def migrating_reply(reply: Any) -> BaseException | None:
    """The first error of a migrating slot among a pipeline's replies (errors as values)."""
    if type(reply) is list:
        for value in reply:
            if isinstance(value, MIGRATING_ERRORS) and is_migrating(value):
                return value
    return None


def request_key(request: Any) -> str:
    """The Redis key a request is about (its first), for an error's message."""
    keys = getattr(request, "keys", None)
    if keys:
        first = keys[0]
    else:
        commands = getattr(request, "commands", None) or [()]
        first = commands[0][1] if len(commands[0]) > 1 else ""
    return first.decode("utf-8", "replace") if isinstance(first, bytes) else str(first)


def is_failover_error(exc: BaseException) -> bool:
    """Whether a write may succeed again once the topology settled: a ``FAILOVER_ERRORS``
    error, or WAIT refused because the connection reached a primary that was demoted to a
    replica meanwhile (its script may have answered from the stale replica: send it again).
    """
    if isinstance(exc, FAILOVER_ERRORS):
        return True
    return isinstance(exc, redis.ResponseError) and "WAIT cannot be used with replica" in str(exc)


def sync_node_client(node: Any) -> Any:
    """The blocking client of a cluster node (redis-py keeps one per node)."""
    return node.redis_connection


def async_node_client(node: Any, cache: dict[str, Any]) -> Any:
    """An asyncio client of its own for a cluster node, made once per store and node."""
    client = cache.get(node.name)
    if client is None:
        pool = redis.asyncio.ConnectionPool(
            connection_class=node.connection_class, **node.connection_kwargs
        )
        client = cache[node.name] = redis.asyncio.Redis.from_pool(pool)
    return client
