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
over how long), and the first success after it at INFO (:class:`Outage`).

``memory://`` is the embedded default: an in-process fakeredis server with Lua. ``memory://``
alone gives a private server each time; ``memory://NAME`` the same server for the same NAME
within this process, so several stores (or a sync and an async one) can share it.

Connections: a plain client gets a bounded, blocking pool (``max_connections`` = 32: a caller
beyond that waits up to ``timeout`` = 10 s for a free connection, then ``ConnectionError``)
that hands out an already connected connection before one it would have to connect, so that
after a burst that hit the server's ``maxclients`` the idle connections it holds serve the next
calls at once (a plain pool picks the newest released connection, often a failed one, whose
reconnects fail as long as the pool's idle ones fill the server). Its connections pack a
command in one ``hiredis.pack_command`` call (:class:`HiredisPacker`) instead of redis-py's
encoding of each argument in Python first: 1.8 against 8.7 µs for the 14 arguments of a read
script. Sockets get ``socket_timeout`` = 10 s and ``socket_connect_timeout`` = 5 s. Every one
of these is a redis-py keyword the caller may override (``from_url(url, max_connections=100)``);
a cluster client takes the timeouts (its per-node pools are redis-py's own).
"""

from __future__ import annotations

import copy
import functools
import inspect
import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import redis
import redis.asyncio
import redis.asyncio.retry
import redis.asyncio.sentinel
import redis.sentinel
from redis._parsers.encoders import Encoder
from redis.backoff import ExponentialBackoff, ExponentialWithJitterBackoff
from redis.connection import HiredisRespSerializer, PythonRespSerializer

if TYPE_CHECKING:
    from fakeredis import FakeServer
from redis.retry import Retry

from .errors import InvalidArgument

_hiredis_pack: Any
try:
    from hiredis import pack_command as _hiredis_pack
except ImportError:  # pragma: no cover - hiredis is a dependency; redis-py works without it
    _hiredis_pack = None

log = logging.getLogger("redis_session")

MEMORY_SCHEME = "memory"
SENTINEL_SCHEME = "redis+sentinel"
SENTINEL_RETRY_ATTEMPTS = 24
DEFAULT_RETRY_ATTEMPTS = 10


DEFAULT_CLIENT_OPTIONS: dict[str, Any] = {"socket_timeout": 10.0, "socket_connect_timeout": 5.0}
"""Socket timeouts every client from a URL gets unless the caller says otherwise."""
DEFAULT_POOL_OPTIONS: dict[str, Any] = {"max_connections": 32, "timeout": 10.0}
"""The bounded pool of a plain client: its size, and how long a caller waits for a connection."""


def _is_connected(connection: Any) -> bool:
    """Whether a pooled connection holds an open socket (redis-py before 7.1 has no
    ``is_connected`` on its blocking connections: their socket is ``_sock``).
    """
    known = getattr(type(connection), "is_connected", None)
    if known is not None:
        return bool(connection.is_connected)
    return getattr(connection, "_sock", None) is not None


_PLAIN = frozenset({str, bytes, int, float})
"""The argument types (exactly these, no subclass) that hiredis packs as redis-py does: UTF-8,
as they are, decimal, ``repr``."""


class HiredisPacker:
    """A connection's command packer that hands the arguments to ``hiredis.pack_command`` as
    they are when every one is a plain ``str``, ``bytes``, ``int`` or ``float`` (not a
    subclass) and the command name a plain word, and leaves anything else to the
    connection's own packing (``own``): a ``bool``, ``None``, a subclass, a ``memoryview``
    (which redis-py sends by its Python packer), a lone surrogate, a name with whitespace
    (redis-py splits ``"SCRIPT LOAD"`` into two) get redis-py's packing and its errors. Same
    bytes on the wire, so the same commands, errors and retries. Installed only on a
    connection with redis-py's own packer and encoder, UTF-8 with strict errors.
    """

    __slots__ = ("own",)

    def __init__(self, own: Callable[..., list[bytes]]) -> None:
        self.own = own

    def pack(self, *args: Any) -> list[bytes]:
        """``args`` as one RESP command."""
        first = args[0]
        if type(first) is str and first.isalnum() and _PLAIN.issuperset(map(type, args)):
            try:
                return [_hiredis_pack(args)]
            except (TypeError, UnicodeEncodeError):
                pass
        return self.own(*args)


def pack_with_hiredis(connection: Any) -> Any:
    """``connection``, now packing through :class:`HiredisPacker` when it can: a connection
    with a UTF-8, strict encoder, not a client-side-cache proxy; its packer replaced (a
    blocking connection, an asyncio one of redis-py 8.2), or else its ``pack_command`` (an
    asyncio connection of redis-py 8.1, which has no packer object).
    """
    encoder = getattr(connection, "encoder", None)
    if (
        _hiredis_pack is None
        or type(encoder) is not Encoder
        or str(encoder.encoding).lower().replace("_", "-") not in ("utf-8", "utf8")
        or encoder.encoding_errors != "strict"
    ):
        return connection
    own = vars(connection).get("_command_packer")
    if own is not None:
        if type(own) in (HiredisRespSerializer, PythonRespSerializer):  # not a caller's own
            connection._command_packer = HiredisPacker(own.pack)
    elif (
        isinstance(connection, redis.asyncio.connection.AbstractConnection)
        and type(connection).pack_command is _ASYNC_PACK_COMMAND
        and "pack_command" not in vars(connection)
    ):
        connection.pack_command = HiredisPacker(connection.pack_command).pack  # type: ignore[method-assign]
    return connection


_ASYNC_PACK_COMMAND = redis.asyncio.connection.AbstractConnection.pack_command


class PacksWithHiredis:
    """A pool mixin: every connection it makes packs through :class:`HiredisPacker`."""

    def make_connection(self) -> Any:
        """A new connection of the pool, packing commands through hiredis."""
        return pack_with_hiredis(super().make_connection())  # type: ignore[misc]


class HiredisPool(PacksWithHiredis, redis.ConnectionPool):
    """redis-py's pool of a cluster node, its connections packing through hiredis."""


class HiredisSentinelPool(PacksWithHiredis, redis.sentinel.SentinelConnectionPool):
    """redis-py's pool of a Sentinel-found primary, its connections packing through hiredis."""


class AsyncHiredisSentinelPool(PacksWithHiredis, redis.asyncio.sentinel.SentinelConnectionPool):
    """The asyncio flavour of :class:`HiredisSentinelPool`."""


class ConnectedFirstPool(PacksWithHiredis, redis.BlockingConnectionPool):
    """A bounded blocking pool that hands out a connected connection before an unconnected one
    (see the module docstring). Not a client subclass: the client is redis-py's own.
    """

    def get_connection(self, *args: Any, **kwargs: Any) -> Any:
        """A connection from the pool, a connected one first when there is one."""
        queue: Any = getattr(self.pool, "queue", None)
        if queue is not None:
            with self.pool.mutex:
                for i in range(len(queue) - 1, -1, -1):
                    connection = queue[i]
                    if connection is not None and _is_connected(connection):
                        del queue[i]
                        queue.append(connection)  # the LIFO queue gives it out next
                        break
        return super().get_connection(*args, **kwargs)  # type: ignore[no-untyped-call]


class AsyncConnectedFirstPool(PacksWithHiredis, redis.asyncio.BlockingConnectionPool):
    """The asyncio flavour of :class:`ConnectedFirstPool`."""

    async def get_connection(self, *args: Any, **kwargs: Any) -> Any:
        """A connection from the pool, a connected one first when there is one (the pool
        takes the last of its available connections).
        """
        available: Any = getattr(self, "_available_connections", None)
        if available:
            for i in range(len(available) - 1, -1, -1):
                if _is_connected(available[i]):
                    available.append(available.pop(i))
                    break
        return await super().get_connection(*args, **kwargs)  # type: ignore[no-untyped-call]


def split_options(
    store_class: type, options: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """``options`` split into the store constructor's keywords and the client's (the rest)."""
    init: Any = vars(store_class)["__init__"]
    names = set(inspect.signature(init).parameters) - {"self", "client"}
    store = {k: v for k, v in options.items() if k in names}
    return store, {k: v for k, v in options.items() if k not in names}


def _client_options(given: dict[str, Any], *, pool: bool) -> dict[str, Any]:
    options = {**DEFAULT_CLIENT_OPTIONS, **(DEFAULT_POOL_OPTIONS if pool else {}), **given}
    if options.get("decode_responses"):
        raise InvalidArgument("decode_responses", "must be False (stored values are bytes)")
    return options


class Outage:
    """Whether the server behind a client is failing, shared by the retry policies of all of the
    client's connections: the first retried failure of an outage is logged at warning (where,
    what, how long the retries last), the first success after it at info; nothing in between.
    """

    def __init__(self, where: str, retries: int, seconds: float) -> None:
        self.where, self.retries, self.seconds = where, retries, seconds
        self.down = False
        self._lock = threading.Lock()

    def failed(self, error: Exception) -> None:
        """A call failed and will be retried (or has run out of retries)."""
        with self._lock:
            if self.down:
                return
            self.down = True
        log.warning(
            "redis_session: %s failed (%s: %s); retrying up to %d times over about %.0f s",
            self.where, type(error).__name__, error, self.retries, self.seconds,
        )  # fmt: skip

    def recovered(self) -> None:
        """A call succeeded."""
        if self.down:
            with self._lock:
                self.down = False
            log.info("redis_session: %s answers again", self.where)


def _where(url: str) -> str:
    """A URL as logs name it: scheme, host, port and path, never a password."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc.rsplit('@', 1)[-1]}{parts.path}"


class NoticingRetry(Retry):
    """redis-py's retry policy, telling an :class:`Outage` of each failure and success. The
    copies redis-py makes for each connection share the outage.
    """

    def __init__(self, backoff: Any, retries: int, outage: Outage) -> None:
        super().__init__(backoff, retries)
        self.outage = outage

    def __deepcopy__(self, memo: dict[int, Any]) -> NoticingRetry:
        twin = copy.copy(self)
        twin._backoff = copy.deepcopy(self._backoff, memo)
        return twin

    def call_with_retry(self, do: Any, fail: Any, *args: Any, **kwargs: Any) -> Any:
        """As redis-py's, telling the outage of every failure and of the success."""
        outage = self.outage

        def noticed(error: Exception, *count: Any) -> Any:
            outage.failed(error)
            return fail(error, *count)

        result = super().call_with_retry(do, noticed, *args, **kwargs)
        outage.recovered()
        return result


class AsyncNoticingRetry(redis.asyncio.retry.Retry):
    """:class:`NoticingRetry` for asyncio clients."""

    def __init__(self, backoff: Any, retries: int, outage: Outage) -> None:
        super().__init__(backoff, retries)
        self.outage = outage

    def __deepcopy__(self, memo: dict[int, Any]) -> AsyncNoticingRetry:
        twin = copy.copy(self)
        twin._backoff = copy.deepcopy(self._backoff, memo)
        return twin

    async def call_with_retry(self, do: Any, fail: Any, *args: Any, **kwargs: Any) -> Any:
        """As redis-py's, telling the outage of every failure and of the success."""
        outage = self.outage

        async def noticed(error: Exception, *count: Any) -> Any:
            outage.failed(error)
            return await fail(error, *count)

        result = await super().call_with_retry(do, noticed, *args, **kwargs)
        outage.recovered()
        return result


def _jittered() -> ExponentialWithJitterBackoff:
    return ExponentialWithJitterBackoff(base=0.01, cap=1.0)  # 10 retries: at most ~4.3 s


def _default_retry(url: str) -> Retry:
    return NoticingRetry(
        _jittered(), DEFAULT_RETRY_ATTEMPTS, Outage(_where(url), DEFAULT_RETRY_ATTEMPTS, 4.3)
    )


def _default_async_retry(url: str) -> redis.asyncio.retry.Retry:
    return AsyncNoticingRetry(
        _jittered(), DEFAULT_RETRY_ATTEMPTS, Outage(_where(url), DEFAULT_RETRY_ATTEMPTS, 4.3)
    )


def _sentinel_retry(url: str) -> Retry:
    outage = Outage(_where(url), SENTINEL_RETRY_ATTEMPTS, 12)
    return NoticingRetry(ExponentialBackoff(cap=1.0, base=0.05), SENTINEL_RETRY_ATTEMPTS, outage)


def _sentinel_async_retry(url: str) -> redis.asyncio.retry.Retry:
    outage = Outage(_where(url), SENTINEL_RETRY_ATTEMPTS, 12)
    return AsyncNoticingRetry(
        ExponentialBackoff(cap=1.0, base=0.05), SENTINEL_RETRY_ATTEMPTS, outage
    )


def _sentinel_target(url: str) -> tuple[list[tuple[str, int]], str, int]:
    """``([(host, port), …], service, db)`` of a ``redis+sentinel://`` URL."""
    parts = urlsplit(url)
    path = [p for p in parts.path.split("/") if p]
    if not parts.netloc or not path or len(path) > 2 or (len(path) == 2 and not path[1].isdigit()):
        raise InvalidArgument(
            "url", f"must be redis+sentinel://host:port[,…]/service[/db]: {url!r}"
        )
    hosts = []
    for item in parts.netloc.rsplit("@", 1)[-1].split(","):
        host, _, port = item.rpartition(":")
        if not host or not port.isdigit():
            raise InvalidArgument("url", f"sentinel address {item!r} needs host:port")
        hosts.append((host, int(port)))
    return hosts, path[0], int(path[1]) if len(path) == 2 else 0


_servers: dict[str, FakeServer] = {}
_lock = threading.Lock()


def _fakeredis() -> Any:
    """The fakeredis module (the ``memory`` extra), or an ImportError that says how to get it."""
    try:
        import fakeredis
    except ImportError as exc:
        raise ImportError(
            "memory:// needs fakeredis with Lua: pip install 'redis-session[memory]'"
        ) from exc
    return fakeredis


def _memory_server(url: str) -> FakeServer:
    fakeredis = _fakeredis()
    name = urlsplit(url).netloc + urlsplit(url).path
    if not name:
        return fakeredis.FakeServer()  # type: ignore[no-any-return]
    with _lock:
        return _servers.setdefault(name, fakeredis.FakeServer())


def _parse(url: object, cluster: bool) -> tuple[str, str, bool]:
    """``(scheme, url for redis-py, cluster)``; ``+cluster`` in the scheme means a cluster."""
    if not isinstance(url, str) or "://" not in url:
        raise InvalidArgument("url", f"must be a URL such as redis://host:6379/0, got {url!r}")
    scheme, rest = url.split("://", 1)
    scheme = scheme.lower()
    if scheme == SENTINEL_SCHEME:
        return scheme, url, False
    if scheme.endswith("+cluster"):
        scheme, cluster = scheme.removesuffix("+cluster"), True
    if scheme == MEMORY_SCHEME and cluster:
        raise InvalidArgument("url", "memory:// is a single in-process server, not a cluster")
    if scheme not in (MEMORY_SCHEME, "redis", "rediss", "unix", SENTINEL_SCHEME):
        raise InvalidArgument("url", f"unknown scheme {scheme!r} in {url!r}")
    return scheme, f"{scheme}://{rest}", cluster


def sync_client(
    url: str, *, cluster: bool = False, **kwargs: Any
) -> redis.Redis | redis.RedisCluster:
    """A blocking client for ``url``; ``kwargs`` go to redis-py (over the defaults above)."""
    scheme, url, cluster = _parse(url, cluster)
    if scheme == MEMORY_SCHEME:
        _client_options(kwargs, pool=False)
        return _fakeredis().FakeRedis(server=_memory_server(url))  # type: ignore[no-any-return]
    if scheme == SENTINEL_SCHEME:
        hosts, service, db = _sentinel_target(url)
        make_sentinel: Any = redis.sentinel.Sentinel
        sentinel = make_sentinel(hosts, sentinel_kwargs={"socket_timeout": 1.0})
        options = {
            "retry": _sentinel_retry(url),
            "connection_pool_class": HiredisSentinelPool,
            **_client_options(kwargs, pool=False),
        }
        client: redis.Redis = sentinel.master_for(service, db=db, **options)
        return client
    if cluster:
        options = {"connection_pool_class": HiredisPool, **_client_options(kwargs, pool=False)}
        return redis.RedisCluster.from_url(url, **options)
    pool = ConnectedFirstPool.from_url(
        url, **{"retry": _default_retry(url), **_client_options(kwargs, pool=True)}
    )
    return redis.Redis.from_pool(pool)


def async_client(
    url: str, *, cluster: bool = False, **kwargs: Any
) -> redis.asyncio.Redis | redis.asyncio.RedisCluster:
    """An asyncio client for ``url``; ``kwargs`` go to redis-py (over the defaults above)."""
    scheme, url, cluster = _parse(url, cluster)
    if scheme == MEMORY_SCHEME:
        _client_options(kwargs, pool=False)
        return _fakeredis().FakeAsyncRedis(server=_memory_server(url))  # type: ignore[no-any-return]
    if scheme == SENTINEL_SCHEME:
        hosts, service, db = _sentinel_target(url)
        factory: Any = redis.asyncio.sentinel.Sentinel
        sentinel = factory(hosts, sentinel_kwargs={"socket_timeout": 1.0})
        options = {
            "retry": _sentinel_async_retry(url),
            "connection_pool_class": AsyncHiredisSentinelPool,
            **_client_options(kwargs, pool=False),
        }
        aclient: redis.asyncio.Redis = sentinel.master_for(service, db=db, **options)
        return aclient
    if cluster:
        return redis.asyncio.RedisCluster.from_url(url, **_client_options(kwargs, pool=False))
    apool = AsyncConnectedFirstPool.from_url(
        url, **{"retry": _default_async_retry(url), **_client_options(kwargs, pool=True)}
    )
    return redis.asyncio.Redis.from_pool(apool)


def async_remake(url: str, *, cluster: bool = False, **kwargs: Any) -> Callable[[], Any] | None:
    """How to make another asyncio client like :func:`async_client`'s for ``url`` (for another
    event loop: see ``redis_session._loops``) where copying one cannot: a cluster client, a
    Sentinel-managed one; None for the others.
    """
    scheme, _, cluster = _parse(url, cluster)
    if scheme != SENTINEL_SCHEME and not cluster:
        return None
    return functools.partial(async_client, url, cluster=cluster, **kwargs)


def check_client(client: object) -> bool:
    """Whether ``client`` is a cluster client; refuses clients that decode replies (stored
    digests and messages are bytes) and objects that are no Redis client.
    """
    get_encoder = getattr(client, "get_encoder", None)
    if get_encoder is None or not hasattr(client, "register_script"):
        raise InvalidArgument("client", f"must be a redis-py client, not {type(client).__name__}")
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


def is_failover_error(exc: BaseException) -> bool:
    """Whether a write may succeed again once the topology settled: a ``FAILOVER_ERRORS``
    error, or WAIT refused because the connection reached a primary that was demoted to a
    replica meanwhile (its script may have answered from the stale replica: send it again).
    """
    if isinstance(exc, FAILOVER_ERRORS):
        return True
    return isinstance(exc, redis.ResponseError) and "WAIT cannot be used with replica" in str(exc)


def sync_node_client(node: Any, cache: dict[str, Any]) -> Any:
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


async def async_refresh(client: Any) -> None:
    """Re-read the topology (see :func:`sync_refresh`)."""
    if isinstance(client, redis.asyncio.RedisCluster):
        await client.nodes_manager.initialize()
    elif (pool := _sentinel_pool(client)) is not None:
        await pool.disconnect()


def sync_close(client: Any) -> None:
    """Close ``client`` and, for a Sentinel-managed client, its connections to the sentinels."""
    client.close()
    manager = getattr(getattr(client, "connection_pool", None), "sentinel_manager", None)
    for sentinel in getattr(manager, "sentinels", ()):
        sentinel.close()


async def async_close(client: Any) -> None:
    """Close ``client`` and, for a Sentinel-managed client, its connections to the sentinels."""
    await client.aclose()
    manager = getattr(getattr(client, "connection_pool", None), "sentinel_manager", None)
    for sentinel in getattr(manager, "sentinels", ()):
        await sentinel.aclose()
