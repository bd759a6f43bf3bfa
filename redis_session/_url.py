"""Client construction from a URL: ``redis://``, ``rediss://``, ``unix://``, ``memory://``, and
``redis+cluster://`` / ``rediss+cluster://`` for a Redis Cluster (or ``cluster=True``).

``memory://`` is the embedded default: an in-process fakeredis server with Lua. ``memory://``
alone gives a private server each time; ``memory://NAME`` the same server for the same NAME
within this process, so several stores (or a sync and an async one) can share it.
"""

from __future__ import annotations

import threading
from urllib.parse import urlsplit

import fakeredis
import redis
import redis.asyncio

from .errors import InvalidArgument

MEMORY_SCHEME = "memory"
_servers: dict[str, fakeredis.FakeServer] = {}
_lock = threading.Lock()


def _memory_server(url: str) -> fakeredis.FakeServer:
    name = urlsplit(url).netloc + urlsplit(url).path
    if not name:
        return fakeredis.FakeServer()
    with _lock:
        return _servers.setdefault(name, fakeredis.FakeServer())


def _parse(url: object, cluster: bool) -> tuple[str, str, bool]:
    """``(scheme, url for redis-py, cluster)``; ``+cluster`` in the scheme means a cluster."""
    if not isinstance(url, str) or "://" not in url:
        raise InvalidArgument("url", f"must be a URL such as redis://host:6379/0, got {url!r}")
    scheme, rest = url.split("://", 1)
    scheme = scheme.lower()
    if scheme.endswith("+cluster"):
        scheme, cluster = scheme.removesuffix("+cluster"), True
    if scheme == MEMORY_SCHEME and cluster:
        raise InvalidArgument("url", "memory:// is a single in-process server, not a cluster")
    if scheme not in (MEMORY_SCHEME, "redis", "rediss", "unix"):
        raise InvalidArgument("url", f"unknown scheme {scheme!r} in {url!r}")
    return scheme, f"{scheme}://{rest}", cluster


def sync_client(url: str, *, cluster: bool = False) -> redis.Redis | redis.RedisCluster:
    """A blocking client for ``url``."""
    scheme, url, cluster = _parse(url, cluster)
    if scheme == MEMORY_SCHEME:
        return fakeredis.FakeRedis(server=_memory_server(url))
    if cluster:
        return redis.RedisCluster.from_url(url)
    return redis.Redis.from_url(url)


def async_client(
    url: str, *, cluster: bool = False
) -> redis.asyncio.Redis | redis.asyncio.RedisCluster:
    """An asyncio client for ``url``."""
    scheme, url, cluster = _parse(url, cluster)
    if scheme == MEMORY_SCHEME:
        return fakeredis.FakeAsyncRedis(server=_memory_server(url))
    if cluster:
        return redis.asyncio.RedisCluster.from_url(url)
    return redis.asyncio.Redis.from_url(url)


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
