"""One asyncio client per event loop, so that an :class:`~redis_session.AsyncRedisStore` works
from every loop it is used in over its life (``asyncio.run`` called again, the OpenAI Agents
SDK's ``Runner.run_sync``, threads that each run a loop of their own).

A redis.asyncio connection (and its pool's lock) belongs to the loop it was made in; used from
another one it fails ("attached to a different loop", "Event loop is closed"). The store's
client serves the first loop that uses it; every other loop gets a copy of it (same pool
class, size, timeout and connection options: the same server, database, credentials,
retries), made on first use there. A loop that has closed cannot close its connections any
more, so their sockets are closed directly the next time another loop attaches (and at
``close()``): the server sees them go at once, nothing leaks.

Clients that are not a plain ``redis.asyncio.Redis`` over a connection pool (a cluster client,
a Sentinel-managed one, fakeredis's) are used as they are, from whichever loop: the embedded
``memory://`` server works from any loop; a cluster or Sentinel store is for one loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Awaitable, Callable
from typing import Any

import redis.asyncio

_PLAIN_POOLS = (redis.asyncio.ConnectionPool,)


def _cloneable(client: Any) -> bool:
    if type(client) is not redis.asyncio.Redis:
        return False
    pool = getattr(client, "connection_pool", None)
    if not isinstance(pool, _PLAIN_POOLS):
        return False
    return type(pool).__module__.startswith(("redis.asyncio", "redis_session"))


def _clone(client: Any) -> Any:
    """A new client over a new pool like ``client``'s (nothing connected yet)."""
    pool = client.connection_pool
    options: dict[str, Any] = dict(pool.connection_kwargs)
    if isinstance(pool, redis.asyncio.BlockingConnectionPool):
        options["timeout"] = pool.timeout
    fresh = type(pool)(
        connection_class=pool.connection_class, max_connections=pool.max_connections, **options
    )
    return redis.asyncio.Redis.from_pool(fresh)


def hard_close(client: Any) -> int:
    """Close the sockets of ``client``'s pooled connections without their (closed) loop;
    returns how many. The connections then read as disconnected.
    """
    pool = getattr(client, "connection_pool", None)
    if pool is None:
        return 0
    connections = [*getattr(pool, "_available_connections", ()),
                   *getattr(pool, "_in_use_connections", ())]  # fmt: skip
    closed = 0
    for connection in connections:
        writer = getattr(connection, "_writer", None)
        transport: Any = getattr(writer, "transport", None)
        sock = getattr(transport, "_sock", None)
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.close()
            transport._sock = None  # its __del__ has nothing left to close or warn about
            transport._closing = True  # nor the stream writer's (it asks is_closing())
            closed += 1
        connection._reader = connection._writer = None
    return closed


class LoopClients:
    """The store's client for the running loop (see the module docstring)."""

    def __init__(self, home: Any) -> None:
        self.home = home
        self._cloneable = _cloneable(home)
        self._by_loop: dict[asyncio.AbstractEventLoop, Any] = {}
        self._lock = threading.Lock()
        self._home_used = False

    def current(self) -> Any:
        """The client for the running loop (the store's own outside of any loop)."""
        if not self._cloneable:
            return self.home
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return self.home
        client = self._by_loop.get(loop)
        return client if client is not None else self._attach(loop)

    def _attach(self, loop: asyncio.AbstractEventLoop) -> Any:
        with self._lock:
            client = self._by_loop.get(loop)
            if client is not None:
                return client
            self._sweep()
            if self._home_used:
                client = _clone(self.home)
            else:
                client, self._home_used = self.home, True
            self._by_loop[loop] = client
            return client

    def _sweep(self) -> None:
        """Close the connections of the clients whose loop has closed, and forget them."""
        for loop, client in list(self._by_loop.items()):
            if loop.is_closed():
                hard_close(client)
                del self._by_loop[loop]

    @property
    def loops(self) -> int:
        """How many loops hold a client now."""
        return len(self._by_loop)

    async def aclose(self, close: Callable[[Any], Awaitable[None]]) -> None:
        """Close every client: the running loop's with ``close(client)``, those of other
        loops by their sockets (their loops cannot run it).
        """
        if not self._cloneable:
            await close(self.home)
            return
        with self._lock:
            clients = list(self._by_loop.items())
            self._by_loop.clear()
            unused = not self._home_used
        running = asyncio.get_running_loop()
        for loop, client in clients:
            if loop is running:
                await close(client)
            else:
                hard_close(client)
        if unused:
            await close(self.home)
