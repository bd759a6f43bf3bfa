"""The connection pools of clients from a URL (see ``redis_session._url``): connections that
pack a command in one ``hiredis.pack_command`` call, and a bounded pool that hands out a
connected connection before one it would have to connect.

Hand-written in both flavours, not generated: redis-py's blocking pool keeps its idle
connections in a LIFO queue under a mutex, its asyncio pool in a list, and only a blocking
cluster node has a pool (an asyncio one holds its connections itself).
"""

from __future__ import annotations

import asyncio
import os
import queue
import select
import socket
from collections.abc import Callable, MutableSequence, Sequence
from typing import Any

import redis
import redis.asyncio
from redis._parsers.encoders import Encoder
from redis._parsers.hiredis import _AsyncHiredisParser, _HiredisParser
from redis._parsers.socket import SERVER_CLOSED_CONNECTION_ERROR
from redis.connection import HiredisRespSerializer, PythonRespSerializer
from redis.utils import is_os_level_timeout

from . import codec
from ._requests import Decoded

_hiredis_pack: Any
try:
    from hiredis import pack_command as _hiredis_pack
except ImportError:  # pragma: no cover - hiredis is a dependency; redis-py works without it
    _hiredis_pack = None

_PLAIN = frozenset({str, bytes, int, float})
"""The argument types (exactly these, no subclass) that hiredis packs as redis-py does: UTF-8,
as they are, decimal, ``repr``."""

_ASYNC_PACK_COMMAND = redis.asyncio.connection.AbstractConnection.pack_command


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


_PACK = None if codec._C is None else codec._C.pack


def packed(connection: Any, commands: Sequence[tuple[Any, ...]]) -> list[bytes]:
    """The bytes of a request of ``commands`` for ``connection``: made in one step by the C
    packer (``_speedups.pack``) on a connection that packs through :class:`HiredisPacker`
    (UTF-8, strict: the same bytes as redis-py's), else, and for any argument the C packer
    does not take, by the connection's own ``pack_commands``.
    """
    if _PACK is not None and type(vars(connection).get("_command_packer")) is HiredisPacker:
        request = _PACK(commands)
        if request is not None:
            return [request]
    result: list[bytes] = connection.pack_commands(commands)
    return result


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


class PacksWithHiredis:
    """A pool mixin: every connection it makes packs through :class:`HiredisPacker`."""

    def make_connection(self) -> Any:
        """A new connection of the pool, packing commands through hiredis."""
        return pack_with_hiredis(super().make_connection())  # type: ignore[misc]


class HiredisPool(PacksWithHiredis, redis.ConnectionPool):
    """redis-py's pool of a cluster node, its connections packing through hiredis."""


CLUSTER_POOL: dict[str, Any] = {"connection_pool_class": HiredisPool}
"""What a blocking cluster client is given for the pools of its nodes."""
ASYNC_CLUSTER_POOL: dict[str, Any] = {}
"""The same for an asyncio cluster client: nothing (its nodes have no pool)."""


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


class ConnectedFirstPool(PacksWithHiredis, redis.BlockingConnectionPool):
    """A bounded blocking pool that hands out a connected connection before an unconnected one
    (see ``redis_session._url``). Not a client subclass: the client is redis-py's own.
    """

    def get_connection(self, *args: Any, **kwargs: Any) -> Any:
        """A connection from the pool, a connected one first when there is one."""
        queue: Any = getattr(self.pool, "queue", None)  # None: a caller's own queue_class
        if queue is not None:
            with self.pool.mutex:
                _connected_last(queue)
        return super().get_connection(*args, **kwargs)  # type: ignore[no-untyped-call]


class AsyncConnectedFirstPool(PacksWithHiredis, redis.asyncio.BlockingConnectionPool):
    """The asyncio flavour of :class:`ConnectedFirstPool`."""

    async def get_connection(self, *args: Any, **kwargs: Any) -> Any:
        """A connection from the pool, a connected one first when there is one."""
        _connected_last(self._available_connections)
        return await super().get_connection(*args, **kwargs)  # type: ignore[no-untyped-call]


# -- The direct path's checkout (see redis_session._url.sync_replies / async_replies) ----------
#
# redis-py's pools take 12-15 µs to hand out and take back a connection (measured, redis-py
# 8.2: the queue's condition, the pool's observability records, its maintenance and fork
# checks), against ~3 µs for what a pooled connection must pass before a request: taken under
# the pool's own lock, checked by the pool's own ensure_connection (unread data: pending push
# notifications applied, a closed socket made again) unless it is quiet (nothing in its
# parser, nothing on its socket: one poll, where ensure_connection's checks took ~10 µs more
# of a cold request's CPU in the fleet loop; an asyncio one: nothing in its parser nor its
# stream's buffer, the stream open), put back with the waiters woken. A
# checkout taken so is not counted in redis-py's pool metrics (nor is the request: see
# production.md). Only for the pools of ``from_url``'s clients, when none of what redis-py's
# full path does on top applies; else the pool's own get_connection and release.


def sync_borrow(pool: Any) -> tuple[Any, bool]:
    """A connected connection of ``pool`` and whether it was taken by the short checkout (then
    :func:`sync_give_back` puts it back the same way): the newest connected idle one (as
    :class:`ConnectedFirstPool` hands out), when the pool is one, not in maintenance and of
    this process.
    """
    if type(pool) is ConnectedFirstPool and not pool._in_maintenance and pool.pid == os.getpid():
        lifo = pool.pool
        connection = None
        with lifo.mutex:
            idle = lifo.queue
            _connected_last(idle)
            if idle and idle[-1] is not None and idle[-1].is_connected:
                connection = idle.pop()
                lifo.not_full.notify()
        if connection is not None:
            try:
                if not _quiet(connection):
                    pool.ensure_connection(connection)
            except BaseException:
                sync_give_back(pool, connection, True)
                raise
            return connection, True
    return pool.get_connection(), False


def _emptied(connection: Any, aio: bool = False) -> Any:
    """The connection's parser when it is redis-py's hiredis one (the blocking one, or with
    ``aio`` the asyncio one) and holds nothing (no reply or push read from the socket and
    not handed out yet), else None.
    """
    parser = connection._parser
    if type(parser) is not (_AsyncHiredisParser if aio else _HiredisParser):
        return None
    reader = parser._reader
    return None if reader is None or reader.has_data() else parser


def _quiet(connection: Any) -> bool:
    """Whether ``connection`` (connected, read by redis-py's hiredis parser over a plain
    socket) has nothing to read: no reply or push left in its parser, none on its socket, which
    is not closed either (a closed socket reads as ready). Then the pool's ``ensure_connection``
    would do nothing (its ``connect`` returns at once, its ``can_read`` says no); a connection
    for which this says no goes through it. The socket's poll object is kept with the
    connection, made anew for a new socket.
    """
    sock = connection._sock
    if type(sock) is not socket.socket or _emptied(connection) is None:
        return False  # not connected, TLS (bytes above the socket), another parser, data in it
    kept = connection.__dict__.get("_redis_session_poll")
    if kept is None or kept[0] is not sock:
        poller = select.poll()
        poller.register(sock, select.POLLIN)
        kept = connection._redis_session_poll = (sock, poller)
    return not kept[1].poll(0)


def sync_give_back(pool: Any, connection: Any, short: bool) -> None:
    """Put ``connection`` back into ``pool`` as :func:`sync_borrow` took it (``short``), a
    connection marked for a reconnect closed first; waiters for a connection are woken.
    """
    if not short:
        pool.release(connection)
        return
    if connection.should_reconnect():
        connection.disconnect()
    try:
        if pool._in_maintenance:
            with pool._lock:
                pool.pool.put_nowait(connection)
        else:
            pool.pool.put_nowait(connection)
    except queue.Full:  # a pool made anew meanwhile (as redis-py's release, dropped)
        pass


async def async_borrow(pool: Any) -> tuple[Any, bool]:
    """The asyncio flavour of :func:`sync_borrow`, for :class:`AsyncConnectedFirstPool`
    (taken without awaiting: no other task runs between), when no streaming credential
    provider needs redis-py's re-authentication on release.
    """
    if (
        type(pool) is AsyncConnectedFirstPool
        and not pool._in_maintenance
        and not pool._lock.locked()
        and pool.connection_kwargs.get("credential_provider") is None
    ):
        idle = pool._available_connections
        _connected_last(idle)
        if idle and idle[-1].is_connected:
            connection = idle.pop()
            pool._in_use_connections.add(connection)
            try:
                if not _async_quiet(connection):
                    await pool.ensure_connection(connection)
            except BaseException:
                await async_give_back(pool, connection, True)
                raise
            return connection, True
    return await pool.get_connection(), False


def _async_quiet(connection: Any) -> bool:
    """Whether ``connection`` (connected, read by redis-py's asyncio hiredis parser) has
    nothing to read and its stream is open: no reply or push left in its parser, no bytes in
    its stream's buffer, no end of file nor error on it. Then the pool's ``ensure_connection``
    would do nothing (its ``connect`` returns at once, its ``can_read`` says no: the same
    checks, without its retry policy's calls); a connection for which this says no goes
    through it.
    """
    parser, stream = _emptied(connection, aio=True), connection._reader
    if parser is None or not parser._connected or parser._stream is not stream:
        return False
    buffered: Any = getattr(stream, "_buffer", None)
    return (
        buffered is not None
        and not buffered
        and not stream.at_eof()
        and stream.exception() is None
        and connection._writer is not None
    )


async def async_give_back(pool: Any, connection: Any, short: bool) -> None:
    """The asyncio flavour of :func:`sync_give_back`: put back without awaiting when no task
    waits for a connection, the pool's lock is free and the connection needs no reconnect;
    else by the pool's own release (which wakes the waiters).
    """
    if (
        short
        and connection in pool._in_use_connections
        and not pool._condition._waiters
        and not pool._lock.locked()
        and not connection.should_reconnect()
    ):
        pool._in_use_connections.remove(connection)
        pool._available_connections.append(connection)
        return
    await pool.release(connection)


# -- a first read's replies, read where they arrive ------------------------------------------
# A store's first read of a session (``_reads.Reader._snapshot``) sends five commands, one an
# LRANGE of the stored messages. On a connection of a pool above, read by redis-py's hiredis
# parser, their replies are read here instead: the bytes received are scanned for whole replies
# and handed to the C decoder, which builds the messages from those bytes (no bytes object per
# element, no redis-py call per reply: 40-60 µs of a 300-message read, measured in the fleet
# loop). A reply of a type redis-py must see (a push, an attribute, ...) hands everything
# received to the connection's own parser, which then reads every reply as it always does.
# Every other request of the direct path (an append's script, ...) has its replies read the
# same way, without a reply decoded as messages (``at`` -1): ~7 µs of a fleet turn's CPU.

_FIRST_READ = 1 << 18
"""Bytes a connection's read buffer holds at first (it doubles while the replies are longer).
A buffer of this size is kept by the connection for its next first read (not made anew each
time: a fresh one costs its page faults on every read): at most 8 MiB for a pool of 32."""


def _read_replies(
    buffer: bytearray, have: int, start: int, done: int, count: int, at: int, parser: Any
) -> tuple[list[Any] | None, int, int]:
    """Scan ``buffer[:have]`` from ``start`` for the replies after the ``done`` whole ones;
    ``(replies, start, done)``: the ``count`` replies once every one is whole (reply ``at``
    decoded), else None with where to go on from; ``([], ...)`` when one is of a type left to
    redis-py or not RESP (everything received was then fed to ``parser``'s reader, which
    reads it or raises what redis-py raises).
    """
    assert codec.RESP is not None
    scan, replies = codec.RESP
    with memoryview(buffer) as view, view[:have] as part:
        try:
            complete, start = scan(part, start, count - done)
        except ValueError:  # not RESP as hiredis reads it: redis-py says what it is
            complete = -1
        if complete < 0:
            parser._reader.feed(part)
            return [], start, done
        done += complete
        if done < count:
            return None, start, done
        got = replies(part[:start], count, at, parser.parse_error)
        if start < have:  # pushes behind the replies: redis-py's, read when it reads next
            parser._reader.feed(part[start:])
    for reply in got:
        if isinstance(reply, redis.exceptions.ConnectionError):
            raise reply  # as redis-py raises it (a server loading its data: retried)
    if 0 <= at < count and type(got[at]) is tuple:
        messages = got[at]
        got[at] = Decoded(messages[0], messages[1]) if messages[2] else messages[0]
    return got, start, done


def sync_read_decoded(connection: Any, count: int, at: int) -> list[Any] | None:
    """The replies of the ``count`` commands just sent on ``connection``, read from its socket
    here, reply ``at`` (an LRANGE of stored messages; -1: none) a :class:`Decoded` when every
    element is a message in the encoder's form; each error reply as its exception in its
    place. None when
    redis-py reads them: no C decoder, a parser other than redis-py's hiredis one, data already
    buffered, or a reply of a type redis-py must see (then what was received is its parser's).
    A socket error or timeout raises as redis-py raises it (the caller's retry policy closes
    the connection and sends the commands again).
    """
    parser = _emptied(connection)
    sock = None if parser is None else parser._sock
    if codec.RESP is None or sock is None:
        return None
    buffer = connection.__dict__.pop("_redis_session_buffer", None) or bytearray(_FIRST_READ)
    have = start = done = 0
    while True:
        if have == len(buffer):
            buffer += bytes(len(buffer))
        try:
            with memoryview(buffer) as view, view[have:] as free:
                got = sock.recv_into(free)
        except OSError as exc:  # a timeout too
            raise _read_error(exc) from exc
        if not got:
            raise redis.ConnectionError(SERVER_CLOSED_CONNECTION_ERROR)
        have += got
        replies, start, done = _read_replies(buffer, have, start, done, count, at, parser)
        if replies is not None:
            if len(buffer) == _FIRST_READ:  # nothing refers to it: the replies are copies
                connection._redis_session_buffer = buffer
            return replies or None


async def async_read_decoded(connection: Any, count: int, at: int) -> list[Any] | None:
    """The asyncio flavour of :func:`sync_read_decoded` (the connection's stream read under its
    ``socket_timeout``, as redis-py reads a reply).
    """
    parser = connection._parser
    if codec.RESP is None or type(parser) is not _AsyncHiredisParser:
        return None
    stream, reader = getattr(parser, "_stream", None), parser._reader
    if stream is None or reader is None or reader.has_data():
        return None
    buffer = bytearray()
    start = done = 0
    try:
        async with asyncio.timeout(connection.socket_timeout):
            while True:
                chunk = await stream.read(_FIRST_READ)
                if not chunk:
                    raise redis.ConnectionError(SERVER_CLOSED_CONNECTION_ERROR)
                buffer += chunk
                replies, start, done = _read_replies(
                    buffer, len(buffer), start, done, count, at, parser
                )
                if replies is not None:
                    return replies or None
    except OSError as exc:  # asyncio's timeout too
        raise _read_error(exc) from exc


def _read_error(exc: OSError) -> redis.RedisError:
    """What redis-py raises for a socket's ``exc`` while it reads a reply: a timeout (not the
    OS's, which means the connection is dead) as ``TimeoutError``, else ``ConnectionError``.
    """
    if isinstance(exc, TimeoutError) and not is_os_level_timeout(exc):
        return redis.TimeoutError("Timeout reading from socket")
    return redis.ConnectionError(f"Error while reading from socket: {exc.args}")
