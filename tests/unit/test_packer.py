"""The packing of a store's direct requests (``_pools.packed``): ``hiredis.pack_command``
(public) for the commands whose arguments it takes as redis-py does, the same bytes as
redis-py's own packing; redis-py's packing (and its errors) for any other request.
"""

from __future__ import annotations

import array
import contextlib
import enum
from typing import Any

import pytest
import redis
import redis.asyncio
from hypothesis import given
from hypothesis import strategies as st

from redis_session._transport import pools as _pools


class Level(enum.IntEnum):
    LOW = 1


class Colour(enum.StrEnum):
    RED = "red"


class Shouting(str):
    """A str whose encode() differs from UTF-8 (redis-py's encoder calls it)."""

    __slots__ = ()

    def encode(self, encoding: str = "utf-8", errors: str = "strict") -> bytes:
        return str.upper(self).encode(encoding, errors)


def connection(**options: Any) -> Any:
    """A redis-py connection that is never connected."""
    make: Any = redis.Connection  # untyped in redis-py
    return make(**options)


def wire(packed: list[bytes]) -> bytes:
    return b"".join(bytes(part) for part in packed)


ARGUMENTS = st.one_of(
    st.text(),
    st.binary(),
    st.integers(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False),
    st.binary().map(lambda b: memoryview(b)),
    st.binary().map(bytearray),
    st.booleans(),
    st.none(),
    st.sampled_from([Level.LOW, Colour.RED, "\udc80", 1.5e300, -0.0, 2**64, Shouting("hi")]),
    st.binary().map(lambda b: memoryview(b)[::2]),  # strided: redis-py sends it as it is
    st.builds(lambda: memoryview(array.array("i", [1, 2]))),  # items of 4 bytes
)
NAMES = st.sampled_from(
    ["EVALSHA", "SET", b"HSET", "SCRIPT LOAD", b"CONFIG GET", "GET\t", "GET\n", "é", "",
     "JSON.SET", Shouting("get"), "LRANGE", "x1"]
)  # fmt: skip


def packed_or_error(pack: Any, commands: list[tuple[Any, ...]]) -> tuple[str, Any]:
    try:
        return "bytes", wire(pack(commands))
    except Exception as exc:  # the comparison is of which error, with which message
        return type(exc).__name__, str(exc)


@given(st.lists(st.tuples(NAMES, st.lists(ARGUMENTS, max_size=8)), min_size=1, max_size=5))
def test_the_same_bytes_or_the_same_error_as_redis_py(drawn: list[tuple[Any, list[Any]]]) -> None:
    commands = [(name, *rest) for name, rest in drawn]
    for options in ({}, {"encoding": "latin-1"}, {"encoding_errors": "replace"}):
        conn = connection(**options)
        ours = packed_or_error(lambda c, conn=conn: _pools.packed(conn, c), commands)
        assert ours == packed_or_error(conn.pack_commands, commands)


def test_a_script_call_is_packed_by_hiredis_in_one_buffer() -> None:
    conn = connection()
    calls: list[Any] = []
    own = conn.pack_commands

    def counted(commands: Any) -> Any:
        calls.append(commands)
        return own(commands)

    conn.pack_commands = counted
    sha = "a" * 40
    script = ("EVALSHA", sha, 2, "k:{s}", "m:{s}", b"\x00\xff", 17, 2.5, "é")
    read = [("HMGET", "m:{s}", "v", "n"), ("LRANGE", "l:{s}", 0, -1)]
    assert _pools.packed(conn, [script]) == [wire(own([script]))]
    assert _pools.packed(conn, read) == [wire(own(read))]
    assert calls == []  # hiredis packed both
    for odd in ((True,), (None,), (memoryview(b"x"),), (Shouting("v"),), (Level.LOW,)):
        with contextlib.suppress(redis.DataError):  # bool and None: redis-py refuses them
            _pools.packed(conn, [("SET", "k", *odd)])
    _pools.packed(conn, [("SCRIPT LOAD", "return 1")])
    assert len(calls) == 6  # each odd argument and the name redis-py splits: redis-py's own
    with pytest.raises(redis.DataError):
        _pools.packed(conn, [("EVALSHA", sha, 0, True)])  # redis-py's error, from its packer


def test_an_asyncio_connection_packs_the_same() -> None:
    make: Any = redis.asyncio.Connection
    conn = make()
    commands = [("EVALSHA", "a" * 40, 1, "k:{s}", b"\x00", -3, "é"), ("LLEN", "l:{s}")]
    assert _pools.packed(conn, commands) == [wire(conn.pack_commands(commands))]
