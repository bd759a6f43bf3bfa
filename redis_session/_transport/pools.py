"""The connection pools of clients from a URL (see ``redis_session._transport.url``), and the
packing of a direct request: public APIs of redis-py and hiredis only (the one private piece,
the order of an asyncio pool's idle connections, is
:func:`redis_session._transport.fast.idle_connections`).

A pool hands out a connected idle connection before one it would have to connect: after a
burst that hit the server's ``maxclients``, its idle connections serve the next calls at once
(a plain pool hands out the one released last, often a failed one, whose reconnects fail as
long as the pool's idle ones fill the server). The blocking pool does it with a queue class of
its own (redis-py's ``queue_class``), the asyncio one by ordering its idle list before it takes
one.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import MutableSequence, Sequence
from typing import Any

import redis
import redis.asyncio
from hiredis import pack_command

from .. import _clock
from . import fast as _fast

_PLAIN = frozenset({str, bytes, int, float})
"""The argument types (exactly these, no subclass) that ``hiredis.pack_command`` packs as
redis-py does for a UTF-8, strict encoder: UTF-8, as they are, decimal, ``repr``."""


def packed(connection: Any, commands: Sequence[tuple[Any, ...]]) -> list[bytes]:
    """The bytes of a request of ``commands`` for ``connection``: each command packed in one
    ``hiredis.pack_command`` call when its arguments are plain ``str``, ``bytes``, ``int`` or
    ``float`` (no subclass), its name a plain word and the connection's encoder UTF-8 and
    strict (the bytes redis-py's own packing makes: a test compares them); else, for the whole
    request, the connection's own ``pack_commands`` (its encoding and its errors).
    """
    encoder = connection.encoder
    if encoder.encoding_errors == "strict" and encoder.encoding.lower() in ("utf-8", "utf8"):
        out = []
        for command in commands:
            first = command[0]
            if type(first) is not str or not first.isalnum():
                break
            if not _PLAIN.issuperset(map(type, command)):
                break
            try:
                out.append(pack_command(command))
            except (TypeError, UnicodeEncodeError):
                break
        else:
            return [b"".join(out)] if len(out) > 1 else out
    result: list[bytes] = connection.pack_commands(commands)
    return result


def _connected_last(connections: MutableSequence[Any]) -> None:
    """Move the newest connected one of a pool's idle ``connections`` to their end, where the
    pool takes its next one (``None``: a place for a connection not made yet).
    """
    for i in range(len(connections) - 1, -1, -1):
        connection = connections[i]
        if connection is not None and connection.is_connected:
            del connections[i]
            connections.append(connection)
            return


class ConnectedFirstQueue:
    """A bounded LIFO queue of a blocking pool's idle connections (redis-py's ``queue_class``)
    whose ``get`` hands out the newest connected one first, then the newest of the others.
    Implements what redis-py's ``BlockingConnectionPool`` uses of a queue: ``put_nowait``,
    ``get``, ``get_nowait``, ``qsize``, ``empty``, ``full`` and the ``queue`` it reads its free
    connections from.
    """

    def __init__(self, maxsize: int = 0) -> None:
        self.maxsize = maxsize
        self.queue: list[Any] = []
        self._lock = threading.Lock()
        self._ready = threading.Condition(self._lock)

    def qsize(self) -> int:
        """How many places it holds."""
        with self._lock:
            return len(self.queue)

    def empty(self) -> bool:
        """Whether it holds none."""
        return self.qsize() == 0

    def full(self) -> bool:
        """Whether it holds ``maxsize``."""
        return 0 < self.maxsize <= self.qsize()

    def put_nowait(self, item: Any) -> None:
        """Add ``item``; ``queue.Full`` when it holds ``maxsize`` already."""
        with self._lock:
            if 0 < self.maxsize <= len(self.queue):
                raise queue.Full
            self.queue.append(item)
            self._ready.notify()

    def put(self, item: Any, block: bool = True, timeout: float | None = None) -> None:
        """Add ``item`` (never waits: redis-py puts back only what it took)."""
        self.put_nowait(item)

    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        """The newest connected idle connection, else the newest place; waits up to
        ``timeout`` seconds (for ever with None) with ``block``, else ``queue.Empty``.
        """
        with self._lock:
            if block:
                deadline = None if timeout is None else _clock.monotonic() + timeout
                while not self.queue:
                    left = None if deadline is None else deadline - _clock.monotonic()
                    if left is not None and left <= 0:
                        raise queue.Empty
                    self._ready.wait(left)
            elif not self.queue:
                raise queue.Empty
            _connected_last(self.queue)
            return self.queue.pop()

    def get_nowait(self) -> Any:
        """:meth:`get` without waiting."""
        return self.get(False)


class ConnectedFirstPool(redis.BlockingConnectionPool):
    """A bounded blocking pool that hands out a connected connection before an unconnected one
    (its idle connections in a :class:`ConnectedFirstQueue`). Not a client subclass: the
    client is redis-py's own.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("queue_class", ConnectedFirstQueue)
        super().__init__(*args, **kwargs)  # type: ignore[no-untyped-call]


class AsyncConnectedFirstPool(redis.asyncio.BlockingConnectionPool):
    """The asyncio flavour of :class:`ConnectedFirstPool`: its idle list ordered before each
    checkout (:func:`redis_session._transport.fast.idle_connections`; redis-py's order when
    that piece is off).
    """

    async def get_connection(self, *args: Any, **kwargs: Any) -> Any:
        """A connection from the pool, a connected one first when there is one."""
        idle = _fast.idle_connections(self)
        if idle:
            _connected_last(idle)
        return await super().get_connection(*args, **kwargs)  # type: ignore[no-untyped-call]
