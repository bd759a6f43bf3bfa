"""The replies of a first read read where they arrive (``_speedups.resp_scan`` /
``resp_replies``, ``_pools.sync_read_decoded``): every reply what hiredis reads from the same
bytes, the LRANGE's elements the messages :func:`codec.decode_messages` returns (or the
elements as bytes when one is not in the encoder's form), whole replies found however the
bytes are split, a reply of a type redis-py must read handed to its parser, and a closed or
silent socket raised as redis-py raises it.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Iterator
from typing import Any

import hiredis
import pytest
import redis
import redis.asyncio
from hypothesis import given
from hypothesis import strategies as st
from redis._parsers.resp3 import _RESP3Parser

from redis_session import Message, ToolCall, _pools, codec
from redis_session._requests import Decoded
from redis_session.codec import decode_messages, encode_message
from redis_session.errors import InvalidArgument
from tests.unit.test_decode_paths import _seen, messages

pytestmark = pytest.mark.skipif(
    codec.RESP is None, reason="the C decoder was not built (no C compiler at install)"
)

REPLIES = [
    b"+hash\r\n",
    b"-WRONGTYPE Operation against a key holding the wrong kind of value\r\n",
    b":301\r\n",
    b":-7\r\n",
    b"$-1\r\n",
    b"_\r\n",
    b"*-1\r\n",
    b"*0\r\n",
    b"$0\r\n\r\n",
    b"$4\r\na\r\nb\r\n",
    b"*3\r\n$1\r\nv\r\n_\r\n*2\r\n:1\r\n$-1\r\n",
    b"%2\r\n$1\r\nv\r\n$1\r\n1\r\n$5\r\ntoken\r\n$3\r\nabc\r\n",
]
"""RESP2 and RESP3 replies of every type a first read's commands get back."""


def _error(message: str) -> Exception:
    return redis.ResponseError(message)


def _hiredis(data: bytes, count: int) -> list[Any]:
    reader = hiredis.Reader(replyError=_error)
    reader.feed(data)
    return [reader.gets() for _ in range(count)]


def _same(got: Any, expected: Any) -> bool:
    if isinstance(expected, Exception):
        return type(got) is type(expected) and got.args == expected.args
    if isinstance(expected, list):
        return (
            isinstance(got, list)
            and len(got) == len(expected)
            and all(_same(g, e) for g, e in zip(got, expected, strict=True))
        )
    if isinstance(expected, dict):
        return (
            isinstance(got, dict)
            and list(got) == list(expected)
            and all(_same(got[k], v) for k, v in expected.items())
        )
    return type(got) is type(expected) and got == expected


def _scan(data: bytes | bytearray | memoryview, start: int, count: int) -> tuple[int, int]:
    assert codec.RESP is not None
    return codec.RESP[0](data, start, count)


def _parse(data: bytes, count: int, at: int = -1) -> list[Any]:
    assert codec.RESP is not None
    return codec.RESP[1](data, count, at, _error)


def _array(items: list[bytes]) -> bytes:
    return b"*%d\r\n" % len(items) + b"".join(b"$%d\r\n%s\r\n" % (len(i), i) for i in items)


@pytest.mark.parametrize("reply", REPLIES)
def test_each_reply_reads_as_hiredis_reads_it(reply: bytes) -> None:
    assert _scan(reply, 0, 1) == (1, len(reply))
    (got,) = _parse(reply, 1)
    (expected,) = _hiredis(reply, 1)
    assert _same(got, expected), (got, expected)


def test_whole_replies_are_found_wherever_the_bytes_end() -> None:
    data = b"".join(REPLIES)
    ends = [sum(map(len, REPLIES[: i + 1])) for i in range(len(REPLIES))]
    for cut in range(len(data) + 1):
        complete, end = _scan(memoryview(data)[:cut], 0, len(REPLIES))
        whole = [e for e in ends if e <= cut]
        assert complete == len(whole) and end == (whole[-1] if whole else 0), cut
        # and from where the last scan stopped, as a reader goes on
        more, last = _scan(data, end, len(REPLIES) - complete)
        assert complete + more == len(REPLIES) and last == len(data)
    assert _same(_parse(data, len(REPLIES)), _hiredis(data, len(REPLIES)))


@pytest.mark.parametrize(
    "reply", [b">2\r\n$10\r\ninvalidate\r\n*0\r\n", b"~1\r\n:1\r\n", b",1.5\r\n", b"#t\r\n"]
)
def test_a_type_left_to_redis_py_is_said(reply: bytes) -> None:
    assert _scan(b"+OK\r\n" + reply, 0, 2) == (-1, 5)


@pytest.mark.parametrize(
    "bad",
    [
        *(b"?x\r\n", b":1x\r\n", b"+O\rK\r\n", b"+O\nK\r\n", b"-E\nR\r\n", b"_x\r\n"),
        *(b":00\r\n", b":-0\r\n", b":+1\r\n", b"$01\r\na\r\n", b"$-2\r\n", b"*-2\r\n"),
        b":9223372036854775808\r\n",
    ],
)
def test_what_hiredis_refuses_is_refused(bad: bytes) -> None:
    with pytest.raises(ValueError, match="not a RESP reply"):
        _scan(bad, 0, 1)
    with pytest.raises(hiredis.ProtocolError):
        _hiredis(bad, 1)


def test_a_bulk_string_without_its_crlf_is_refused() -> None:
    # hiredis reads past it (b"abc", then "d" where the next reply begins): refused here, the
    # bytes go to redis-py's parser, whose reading is then redis-py's as it always was
    with pytest.raises(ValueError, match="not a RESP reply"):
        _scan(b"$3\r\nabcd\r\n", 0, 1)


def test_integers_of_every_size_hiredis_reads_are_read() -> None:
    for value in (0, -1, 10, 2**63 - 1, -(2**63), 999_999_999_999_999_999):
        reply = b":%d\r\n" % value
        assert _scan(reply, 0, 1) == (1, len(reply)) and _parse(reply, 1) == [value]


def test_replies_not_all_there_are_refused() -> None:
    with pytest.raises(ValueError, match="not that many whole replies"):
        _parse(b"+OK\r\n:1", 2)


def _bodies(batch: list[Message]) -> list[bytes]:
    out = []
    for m in batch:
        try:
            out.append(encode_message(m))
        except InvalidArgument:
            continue
    return out


@given(st.lists(messages, max_size=6))
def test_the_elements_are_the_messages_decoding_returns(batch: list[Message]) -> None:
    bodies = _bodies(batch)
    data = b"+hash\r\n" + _array(bodies) + b":3\r\n"
    kind, got, length = _parse(data, 3, 1)
    assert (kind, length) == (b"hash", 3)
    items, size, decoded = got
    assert size == sum(map(len, bodies))
    expected = decode_messages("k", bodies)
    if decoded:
        assert [_seen(m) for m in items] == [_seen(m) for m in expected]
    else:  # an element left to validation (a signed tool call's base64): all as bytes
        assert items == bodies


def test_a_foreign_element_leaves_every_element_as_bytes() -> None:
    good = encode_message(Message(role="user", content="fine"))
    bodies = [good, b'{"role": "user", "content": "by hand"}', good]
    items, size, decoded = _parse(_array(bodies), 1, 0)[0]
    assert (items, size, decoded) == (bodies, sum(map(len, bodies)), False)


def test_a_reply_that_is_not_an_array_of_strings_is_read_as_it_is() -> None:
    for reply in (b"-WRONGTYPE x\r\n", b"*2\r\n:1\r\n$1\r\na\r\n", b"*-1\r\n", b"_\r\n"):
        assert _same(_parse(reply, 1, 0), _hiredis(reply, 1))


# -- the reader on a connection -------------------------------------------------------------------


@pytest.fixture
def pair() -> Iterator[tuple[Any, socket.socket]]:
    """A redis-py connection (RESP3, hiredis) whose socket is one end of a pair; the other end
    plays the server.
    """
    ours, server = socket.socketpair()
    connection: Any = redis.Connection(socket_timeout=2)  # type: ignore[no-untyped-call]
    connection._sock = ours
    connection._parser.on_connect(connection)
    try:
        yield connection, server
    finally:
        connection.disconnect()
        server.close()


def _sent_slowly(server: socket.socket, data: bytes, step: int) -> threading.Thread:
    def send() -> None:
        for i in range(0, len(data), step):
            server.sendall(data[i : i + step])

    thread = threading.Thread(target=send, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize("step", [1, 7, 4096, 1 << 20])
def test_replies_arriving_in_pieces_are_read_whole(
    pair: tuple[Any, socket.socket], step: int
) -> None:
    connection, server = pair
    history = [Message(role="user", content="x" * 300 + str(i)) for i in range(40)]
    if step == 1:
        history = history[:3]  # a byte at a time: kept short
    elif step == 1 << 20:  # a reply longer than the first buffer
        history = [Message(role="user", content="y" * 10_000) for _ in range(40)]
    bodies = [encode_message(m) for m in history]
    data = b"+hash\r\n%1\r\n$1\r\nv\r\n$1\r\n1\r\n" + _array(bodies) + b":%d\r\n" % len(bodies)
    sender = _sent_slowly(server, data, step)
    kind, meta, got, length = _pools.sync_read_decoded(connection, 4, 2) or []
    sender.join(5)
    assert (kind, meta, length) == (b"hash", {b"v": b"1"}, len(bodies))
    assert got == Decoded(history, sum(map(len, bodies)))
    assert not connection._parser._reader.has_data()
    kept = connection.__dict__.get("_redis_session_buffer")  # for the next read: 256 KiB only
    assert (kept is None) if len(data) > _pools._FIRST_READ else len(kept) == _pools._FIRST_READ


def test_a_reply_left_to_redis_py_hands_everything_to_its_parser(
    pair: tuple[Any, socket.socket],
) -> None:
    connection, server = pair
    call = ToolCall(id="c", name="n", input="{}")
    body = encode_message(Message(role="assistant", tool_calls=[call]))
    server.sendall(b"+hash\r\n~2\r\n:1\r\n:2\r\n" + _array([body]))
    assert _pools.sync_read_decoded(connection, 3, 2) is None
    assert connection.read_response() == b"hash"
    assert connection.read_response() in ([1, 2], {1, 2})
    assert connection.read_response() == [body]


def test_bytes_that_are_not_resp_are_left_to_redis_py_which_raises(
    pair: tuple[Any, socket.socket],
) -> None:
    connection, server = pair
    server.sendall(b":1\r\n:01\r\n")
    assert _pools.sync_read_decoded(connection, 2, 1) is None
    assert connection.read_response() == 1
    with pytest.raises(redis.exceptions.InvalidResponse):
        connection.read_response()


def test_bytes_behind_the_replies_are_left_to_redis_py(
    pair: tuple[Any, socket.socket],
) -> None:
    connection, server = pair
    server.sendall(b":1\r\n*0\r\n+after\r\n")
    assert _pools.sync_read_decoded(connection, 2, 1) == [1, Decoded([], 0)]
    assert connection.read_response() == b"after"


def test_an_error_reply_is_its_exception_and_a_loading_server_raises(
    pair: tuple[Any, socket.socket],
) -> None:
    connection, server = pair
    server.sendall(b"-WRONGTYPE wrong kind\r\n*0\r\n")
    wrong, empty = _pools.sync_read_decoded(connection, 2, 1) or []
    assert type(wrong) is redis.ResponseError and empty == Decoded([], 0)
    server.sendall(b"-LOADING Redis is loading the dataset in memory\r\n*0\r\n")
    with pytest.raises(redis.exceptions.BusyLoadingError):
        _pools.sync_read_decoded(connection, 2, 1)


def test_a_closed_or_silent_socket_raises_as_redis_py_raises(
    pair: tuple[Any, socket.socket],
) -> None:
    connection, server = pair
    connection._sock.settimeout(0.2)
    server.sendall(b":1\r\n*2\r\n$1\r\n")
    with pytest.raises(redis.TimeoutError, match="Timeout reading"):
        _pools.sync_read_decoded(connection, 2, 1)
    server.close()
    with pytest.raises(redis.ConnectionError, match="Connection closed by server"):
        _pools.sync_read_decoded(connection, 1, 0)


def test_a_parser_other_than_hiredis_or_data_held_by_it_is_left_to_redis_py(
    pair: tuple[Any, socket.socket],
) -> None:
    connection, server = pair
    server.sendall(b":1\r\n:2\r\n")
    assert connection.read_response() == 1  # hiredis now holds the second reply
    assert _pools.sync_read_decoded(connection, 1, 0) is None
    assert connection.read_response() == 2
    python = redis.Connection(parser_class=_RESP3Parser)  # type: ignore[no-untyped-call]
    assert _pools.sync_read_decoded(python, 1, 0) is None


# -- the asyncio flavour --------------------------------------------------------------------------


async def _async_pair(timeout: float = 2) -> tuple[Any, socket.socket]:
    ours, server = socket.socketpair()
    reader, writer = await asyncio.open_connection(sock=ours)
    connection: Any = redis.asyncio.Connection(socket_timeout=timeout)
    connection._reader, connection._writer = reader, writer
    connection._parser.on_connect(connection)
    return connection, server


async def _closed(connection: Any, server: socket.socket) -> None:
    await connection.disconnect()
    server.close()


def test_the_asyncio_reader_reads_pieces_whole_and_hands_other_types_to_redis_py() -> None:
    history = [Message(role="user", content="z" * 5_000 + str(i)) for i in range(100)]
    bodies = [encode_message(m) for m in history]
    data = b"+hash\r\n" + _array(bodies) + b":100\r\n"

    async def run() -> None:
        connection, server = await _async_pair()
        try:
            sender = _sent_slowly(server, data, 3001)  # a reply longer than one read
            got = await _pools.async_read_decoded(connection, 3, 1)
            sender.join(5)
            assert got == [b"hash", Decoded(history, sum(map(len, bodies))), 100]
            server.sendall(b"~1\r\n:1\r\n*0\r\n")
            assert await _pools.async_read_decoded(connection, 2, 1) is None
            assert await connection.read_response() in ([1], {1})
            assert await connection.read_response() == []
        finally:
            await _closed(connection, server)

    asyncio.run(run())


def test_the_asyncio_reader_raises_on_a_silent_or_closed_socket() -> None:
    async def run() -> None:
        connection, server = await _async_pair(timeout=0.2)
        try:
            server.sendall(b":1\r\n*2\r\n")
            with pytest.raises(redis.TimeoutError, match="Timeout reading"):
                await _pools.async_read_decoded(connection, 2, 1)
            server.close()
            with pytest.raises(redis.ConnectionError, match="Connection closed by server"):
                await _pools.async_read_decoded(connection, 1, 0)
        finally:
            await _closed(connection, server)

    asyncio.run(run())


@given(
    st.lists(st.sampled_from(REPLIES), min_size=1, max_size=5),
    st.lists(st.tuples(st.integers(0, 400), st.binary(max_size=3)), max_size=4),
)
def test_damaged_streams_are_found_out_or_read_as_hiredis_reads_them(
    replies: list[bytes], edits: list[tuple[int, bytes]]
) -> None:
    # Bytes changed anywhere in a stream of replies: the scan says whole, not yet whole,
    # left to redis-py or not RESP, never more than is there; what it finds whole reads as
    # hiredis reads it.
    data = bytearray(b"".join(replies))
    for at, new in edits:
        at %= len(data) + 1
        data[at : at + len(new)] = new
    try:
        complete, end = _scan(bytes(data), 0, len(replies))
    except ValueError:
        return
    assert end <= len(data)
    if complete > 0:
        whole = bytes(data[:end])
        assert _same(_parse(whole, complete), _hiredis(whole, complete))
