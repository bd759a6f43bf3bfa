"""The hiredis command packer of the pools ``from_url`` builds: the same bytes as redis-py's
own packer for every argument it takes, redis-py's packing (and errors) for every other one.
"""

from __future__ import annotations

import array
import enum
from typing import Any

import pytest
import redis
import redis.asyncio
from hypothesis import given
from hypothesis import strategies as st
from redis._parsers.encoders import Encoder

from redis_session import _pools, codec
from redis_session._url import HiredisPacker, async_client, pack_with_hiredis, sync_client
from tests.support.packing import packs_with_hiredis


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


def own_packer() -> Any:
    """redis-py's packer."""
    return connection()._command_packer


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


def packed_or_error(packer: Any, args: tuple[Any, ...]) -> tuple[str, Any]:
    try:
        return "bytes", wire(packer.pack(*args))
    except Exception as exc:  # the comparison is of which error, with which message
        return type(exc).__name__, str(exc)


@given(
    st.sampled_from(
        [
            "EVALSHA",
            "SET",
            b"HSET",
            "SCRIPT LOAD",
            b"CONFIG GET",
            "GET\t",
            "GET\n",
            "SCRIPT\x0bLOAD",
            "",
            "JSON.SET",
            Shouting("get"),
        ]
    ),
    st.lists(ARGUMENTS, max_size=8),
)
def test_the_same_bytes_or_the_same_error_as_redis_py(command: Any, rest: list[Any]) -> None:
    own = own_packer()
    args = (command, *rest)
    assert packed_or_error(HiredisPacker(own.pack), args) == packed_or_error(own, args)


def test_a_script_call_is_packed_by_hiredis_in_one_buffer() -> None:
    calls: list[tuple[Any, ...]] = []

    class Counting:
        def pack(self, *args: Any) -> list[bytes]:
            calls.append(args)
            return own_packer().pack(*args)  # type: ignore[no-any-return]

    packer = HiredisPacker(Counting().pack)
    sha = "a" * 40
    packed = packer.pack("EVALSHA", sha, 2, "k:{s}", "m:{s}", b"\x00\xff", 17, 2.5, "é")
    assert len(packed) == 1 and calls == []
    assert wire(packed) == wire(own_packer().pack("EVALSHA", sha, 2, "k:{s}", "m:{s}",
                                                  b"\x00\xff", 17, 2.5, "é"))  # fmt: skip
    with pytest.raises(redis.DataError):
        packer.pack("EVALSHA", sha, 0, True)  # redis-py's error, from its own packer
    packer.pack("SCRIPT LOAD", "return 1")
    packer.pack("SET", "k", memoryview(b"abcdef")[::2])
    packer.pack("SET", "k", Shouting("v"))
    assert len(calls) == 4  # the bool, the name redis-py splits, the memoryview, the subclass


def test_only_connections_with_a_utf8_strict_encoder_get_it() -> None:
    assert isinstance(pack_with_hiredis(connection())._command_packer, HiredisPacker)
    for options in ({"encoding": "latin-1"}, {"encoding_errors": "replace"}):
        latin = pack_with_hiredis(connection(**options))
        assert not isinstance(latin._command_packer, HiredisPacker)

    class OwnPacker:
        def pack(self, *args: Any) -> list[bytes]:
            return [b"mine"]

    theirs = OwnPacker()
    assert pack_with_hiredis(connection(command_packer=theirs))._command_packer is theirs

    class OwnEncoder(Encoder):
        pass

    make: Any = redis.asyncio.Connection
    assert not packs_with_hiredis(pack_with_hiredis(make(encoder_class=OwnEncoder)))
    assert packs_with_hiredis(pack_with_hiredis(make()))
    twice = pack_with_hiredis(pack_with_hiredis(connection()))
    assert not isinstance(twice._command_packer.own.__self__, HiredisPacker)


def test_the_pools_from_url_builds_pack_with_hiredis() -> None:
    client: Any = sync_client("redis://127.0.0.1:1/0")  # never connected
    made = client.connection_pool.make_connection()
    assert isinstance(made._command_packer, HiredisPacker)
    latin: Any = sync_client("redis://127.0.0.1:1/0", encoding="latin-1")
    assert not isinstance(latin.connection_pool.make_connection()._command_packer, HiredisPacker)
    aclient: Any = async_client("unix:///nonexistent.sock")
    aconnection = aclient.connection_pool.make_connection()
    assert packs_with_hiredis(aconnection)
    assert wire(aconnection.pack_command("GET", "k")) == b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n"
    plain: Any = redis.asyncio.Redis()  # a client of the caller's keeps redis-py's packer
    assert not packs_with_hiredis(plain.connection_pool.make_connection())


# -- the C packer of the direct path (``_speedups.pack``, ``_pools.packed``) ------------------

needs_c = pytest.mark.skipif(
    codec._C is None, reason="the C decoder was not built (no C compiler at install)"
)
ODD_NAMES = ["GET\t", "SCRIPT LOAD", "é", "", "JSON.SET"]
NAMES = st.sampled_from(["EVALSHA", "SET", "GET", "LRANGE", "HMGET", "x1", *ODD_NAMES])


def c_pack(commands: Any) -> bytes | None:
    assert codec._C is not None
    request: bytes | None = codec._C.pack(commands)
    return request


@needs_c
@given(st.lists(st.tuples(NAMES, st.lists(ARGUMENTS, max_size=8)), max_size=6))
def test_the_c_packer_makes_redis_py_s_bytes_or_hands_the_request_back(
    drawn: list[tuple[Any, list[Any]]],
) -> None:
    commands = [(name, *rest) for name, rest in drawn]
    own = own_packer()
    got = c_pack(commands)
    if got is None:  # only for what it does not take: redis-py's packing is the one used
        plain = {str, bytes}
        assert not commands or any(
            type(c[0]) is not str
            or not (c[0].isascii() and c[0].isalnum())
            or any(
                not (type(a) in plain or (type(a) is int and -(2**63) <= a < 2**63))
                or (type(a) is str and not _encodes(a))
                for a in c
            )
            for c in commands
        )
    else:
        assert got == b"".join(wire(own.pack(*c)) for c in commands)


def _encodes(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


@needs_c
def test_the_c_packer_takes_plain_arguments_only() -> None:
    assert c_pack([("EVALSHA", "a" * 40, 2, "k:{s}", b"\x00\xff", -17, "é")]) == wire(
        own_packer().pack("EVALSHA", "a" * 40, 2, "k:{s}", b"\x00\xff", -17, "é")
    )
    for odd in (2.5, True, None, 2**63, memoryview(b"x"), bytearray(b"x"), Level.LOW, "\udc80"):
        assert c_pack([("SET", "k", odd)]) is None, odd
    for name in ("SCRIPT LOAD", "GET\n", "é", "", b"GET", Shouting("get")):
        assert c_pack([(name, "k")]) is None, name
    assert c_pack([]) is None and c_pack([["GET", "k"]]) is None
    assert c_pack([()]) is None
    with pytest.raises(TypeError):
        c_pack(None)


@needs_c
def test_a_direct_request_is_packed_in_one_buffer_or_by_the_connection() -> None:
    conn = pack_with_hiredis(connection())
    commands = [("HMGET", "m:{s}", "v", "n"), ("LRANGE", "l:{s}", 0, -1)]
    assert _pools.packed(conn, commands) == [wire(conn.pack_commands(commands))]
    odd = [("SET", "k", 2.5)]  # a float: the connection's own packing
    assert wire(_pools.packed(conn, odd)) == wire(conn.pack_commands(odd))
    latin = pack_with_hiredis(connection(encoding="latin-1"))  # not hiredis's packer: its own
    assert _pools.packed(latin, [("SET", "k", "é")]) == latin.pack_commands([("SET", "k", "é")])
