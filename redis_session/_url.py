"""Client construction from a URL: ``redis://``, ``rediss://``, ``unix://`` and ``memory://``.

``memory://`` is the embedded default: an in-process fakeredis server with Lua. ``memory://``
alone gives a private server each time; ``memory://NAME`` the same server for the same NAME
within this process, so several stores (or a sync and an async one) can share it.
"""

from __future__ import annotations

import threading
from typing import Any
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


def _scheme(url: object) -> str:
    if not isinstance(url, str) or "://" not in url:
        raise InvalidArgument("url", f"must be a URL such as redis://host:6379/0, got {url!r}")
    return url.split("://", 1)[0].lower()


def sync_client(url: str, **kwargs: Any) -> redis.Redis:
    """A blocking client for ``url``."""
    if _scheme(url) == MEMORY_SCHEME:
        return fakeredis.FakeRedis(server=_memory_server(url), **kwargs)
    return redis.Redis.from_url(url, **kwargs)


def async_client(url: str, **kwargs: Any) -> redis.asyncio.Redis:
    """An asyncio client for ``url``."""
    if _scheme(url) == MEMORY_SCHEME:
        return fakeredis.FakeAsyncRedis(server=_memory_server(url), **kwargs)
    return redis.asyncio.Redis.from_url(url, **kwargs)


def check_client(client: object) -> None:
    """Refuse a client that decodes replies: stored digests and messages are bytes."""
    kwargs: object = getattr(client, "get_connection_kwargs", dict)()
    if isinstance(kwargs, dict) and kwargs.get("decode_responses"):
        raise InvalidArgument("client", "must be created with decode_responses=False")
