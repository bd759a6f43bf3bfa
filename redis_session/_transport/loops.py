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

A cluster or Sentinel client that ``from_url`` built is made again for every other loop from
the same URL and options (a cluster client of its own, or a Sentinel manager with its sentinel
connections and a primary's pool of its own). Other clients that are not a plain
``redis.asyncio.Redis`` over a connection pool (a cluster or Sentinel client the caller made,
fakeredis's) are used as they are, from whichever loop: the embedded ``memory://`` server works
from any loop; a store over such a cluster or Sentinel client is for one loop.

A cluster store that waits for replicas (``wait_replicas``) talks to each node through a client
of its own; those are per loop as well (:meth:`LoopClients.nodes`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import threading
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Any

import redis.asyncio
import redis.asyncio.cluster

from . import fast as _fast


def _cloneable(client: Any) -> bool:
    if type(client) is not redis.asyncio.Redis:
        return False
    pool = getattr(client, "connection_pool", None)
    if not isinstance(pool, redis.asyncio.ConnectionPool) or hasattr(pool, "sentinel_manager"):
        return False  # a Sentinel pool needs its manager, whose sentinels are of one loop too
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
    """Close the sockets of ``client``'s connections without their (closed) loop; returns
    how many. The connections then read as disconnected. Through the fast path's
    ``loop-close`` piece (:mod:`redis_session._transport.fast`): without it, nothing is closed
    here and the sockets go when the connections are collected.
    """
    connections = _fast.held_connections(client)
    _fast.forget_topology(client)
    return sum(map(_fast.close_socket, connections))


def _knowing(fresh: Any, known: Any) -> Any:
    """``fresh``, a cluster client made for another loop from the URL's seed node, also seeded
    with every node ``known`` learnt (redis-py keeps them as its startup nodes): with the seed
    node down, it would refuse to start (``RedisClusterUnreachableError``) although the rest of
    the cluster serves. Each node gets the seed's connection options (credentials, TLS).
    It takes ``known``'s command table too (the fast path's ``cluster-seed`` piece): redis-py
    fetches it (``COMMAND``) from the cluster's first primary, and a new client cannot start
    while that node is down.
    """
    if not isinstance(fresh, redis.asyncio.RedisCluster) or not isinstance(
        known, redis.asyncio.RedisCluster
    ):
        return fresh
    seeds = fresh.nodes_manager.startup_nodes
    seed = next(iter(seeds.values()))
    options = {k: v for k, v in seed.connection_kwargs.items() if k not in ("host", "port")}
    for node in list(known.nodes_manager.startup_nodes.values()):
        if node.name not in seeds:
            seeds[node.name] = redis.asyncio.cluster.ClusterNode(
                node.host,
                node.port,
                max_connections=seed.max_connections,
                connection_class=seed.connection_class,
                response_callbacks=seed.response_callbacks,
                **options,
            )
    _fast.copy_command_table(fresh, known)
    return fresh


async def _aclose(client: Any) -> None:
    await client.aclose()


async def _first_step(watcher: AsyncGenerator[None, None]) -> None:
    """Start ``watcher`` in the running loop (which then closes it when it shuts down)."""
    with contextlib.suppress(StopAsyncIteration):
        await watcher.__anext__()


def _finish(watcher: AsyncGenerator[None, None] | None) -> None:
    """Close the watcher of a loop that has closed, here (it awaits nothing then): left to the
    collector, its loop would be asked to close it.
    """
    if watcher is None:
        return
    closing = watcher.aclose()
    try:
        closing.send(None)
    except StopIteration:
        pass
    else:  # pragma: no cover - it awaits nothing when its loop is closed
        closing.close()


class LoopClients:
    """The store's client for the running loop (see the module docstring); ``factory`` makes
    another one like ``home`` (by default a copy of a plain client; None: ``home`` serves every
    loop).
    """

    def __init__(
        self,
        home: Any,
        factory: Callable[[], Any] | None = None,
        close: Callable[[Any], Awaitable[None]] | None = None,
    ) -> None:
        self.home = home
        if factory is None and _cloneable(home):
            factory = functools.partial(_clone, home)
        self._factory = factory
        self._close = close or _aclose
        self._by_loop: dict[asyncio.AbstractEventLoop, Any] = {}
        self._watchers: dict[asyncio.AbstractEventLoop, AsyncGenerator[None, None]] = {}
        self._nodes: dict[asyncio.AbstractEventLoop | None, dict[str, Any]] = {}
        self._lock = threading.Lock()
        self._home_used = False

    def _running(self) -> asyncio.AbstractEventLoop | None:
        """The running loop when clients are per loop, else None (one client for all)."""
        if self._factory is None:
            return None
        try:
            return asyncio.get_running_loop()
        except RuntimeError:
            return None

    def current(self) -> Any:
        """The client for the running loop (the store's own outside of any loop)."""
        loop = self._running()
        if loop is None:
            return self.home
        client = self._by_loop.get(loop)
        return client if client is not None else self._attach(loop)

    def nodes(self) -> dict[str, Any]:
        """The clients of single cluster nodes made in the running loop, by node name (the
        caller fills it: ``url.async_node_client``).
        """
        loop = self._running()
        with self._lock:
            return self._nodes.setdefault(loop, {})

    def _attach(self, loop: asyncio.AbstractEventLoop) -> Any:
        with self._lock:
            client = self._by_loop.get(loop)
            if client is not None:
                return client
            self._sweep()
            if self._home_used:
                assert self._factory is not None
                client = _knowing(self._factory(), self.home)
            else:
                client, self._home_used = self.home, True
            self._by_loop[loop] = client
            self._watch(loop)
            return client

    def _watch(self, loop: asyncio.AbstractEventLoop) -> None:
        """Close ``loop``'s clients on ``loop`` when it shuts down: an async generator of the
        loop's, which ``asyncio.run`` and ``asyncio.Runner`` close (``shutdown_asyncgens``)
        before they close the loop. A loop closed without that (``loop.close()`` alone) leaves
        its clients to :meth:`_sweep`.
        """
        watcher = self._closing(loop)
        self._watchers[loop] = watcher
        loop.create_task(_first_step(watcher))

    async def _closing(self, loop: asyncio.AbstractEventLoop) -> AsyncGenerator[None, None]:
        try:
            yield
        finally:
            if not loop.is_closed():  # shutting its async generators down: it still runs
                with self._lock:
                    client = self._by_loop.pop(loop, None)
                    nodes = self._nodes.pop(loop, {})
                    self._watchers.pop(loop, None)
                for node_client in nodes.values():
                    await node_client.aclose()
                if client is not None:
                    await self._close(client)

    def _sweep(self) -> None:
        """Close the connections of the clients whose loop has closed without shutting its
        async generators down, and forget them.
        """
        for loop, client in list(self._by_loop.items()):
            if loop.is_closed():
                hard_close(client)
                for node_client in self._nodes.pop(loop, {}).values():
                    hard_close(node_client)
                del self._by_loop[loop]
                _finish(self._watchers.pop(loop, None))

    @property
    def loops(self) -> int:
        """How many loops hold a client now."""
        return len(self._by_loop)

    async def aclose(self, close: Callable[[Any], Awaitable[None]]) -> None:
        """Close every client: the running loop's with ``close(client)`` (node clients with
        their ``aclose``), those of other loops by their sockets (their loops cannot run it).
        """
        with self._lock:
            clients = list(self._by_loop.items())
            nodes = list(self._nodes.items())
            self._by_loop.clear()
            self._nodes.clear()
            for watched in list(self._watchers):
                if watched.is_closed():
                    _finish(self._watchers.pop(watched))
            unused = not self._home_used
            self._home_used = False
        running = asyncio.get_running_loop()
        for loop, node_clients in nodes:
            for node_client in node_clients.values():
                if loop is None or loop is running:
                    await node_client.aclose()
                else:
                    hard_close(node_client)
        for loop, client in clients:
            if loop is running:
                await close(client)
            else:
                hard_close(client)
        if unused:
            await close(self.home)
