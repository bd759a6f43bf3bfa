"""The positions a first read (and a read's steps) read again by ``HMGET``, or with the whole
hash by ``HGETALL`` (a first ``get``), come from the meta hash, which another client may have
written anything into: damaged, truncated or foreign values are refused (None: the read goes
back to the script, which names them), never taken and never raised on.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from redis_session._core.reads import Positions, _fields, _positions, _version_of

VALUE = st.one_of(
    st.none(),
    st.binary(max_size=24),
    st.integers(min_value=0, max_value=10**18).map(lambda n: b"%d" % n),
    st.sampled_from([b"", b"-1", b" 1", b"1.5", b"0x10", b"1e3", b"\xff", b"9" * 16]),
)


@given(st.lists(VALUE, min_size=0, max_size=6))
def test_any_hmget_reply_is_read_or_refused(reply: list[Any]) -> None:
    got = _positions(reply)
    if got is None:
        return
    assert isinstance(got, Positions) and len(reply) == 4
    token, g, h, n = reply
    assert got.token == token
    for read, raw in ((got.generation, g), (got.head, h)):
        assert read == (int(raw) if raw is not None else 0) and read >= 0
    assert got.tail == (None if n is None else int(n))


def test_what_a_store_does_not_write_is_refused() -> None:
    for bad in (b"", b"-1", b" 1", b"1.5", b"0x10", b"1e3", b"\xff", b"9" * 16):
        assert _positions([b"t", bad, b"0", b"1"]) is None
        assert _positions([b"t", b"0", bad, b"1"]) is None
        assert _positions([b"t", b"0", b"0", bad]) is None
    assert _positions(ConnectionError("gone")) is None
    assert _positions([b"t", b"0", b"0"]) is None  # truncated
    assert _positions(None) is None
    assert _positions([b"t", None, None, b"3"]) == (b"t", 0, 0, 3)


FIELD = st.sampled_from([b"token", b"g", b"h", b"n", b"v", b"m:x", b"created_at", b""])


@given(st.dictionaries(FIELD, VALUE.filter(lambda v: v is not None), max_size=8), st.booleans())
def test_a_first_reads_hgetall_gives_the_positions_hmget_would(
    hash_: dict[bytes, bytes], resp2: bool
) -> None:
    # A first read of a session's hash reads it whole (HGETALL: a mapping on RESP3, a flat
    # list on RESP2) and takes the positions from it as an HMGET of them would read them.
    reply: Any = [x for pair in hash_.items() for x in pair] if resp2 else dict(hash_)
    fields = _fields(reply)
    if not hash_:
        assert fields is None and _version_of(fields) is None  # the script judges
        return
    assert fields == reply
    hmget = [hash_.get(f) for f in (b"token", b"g", b"h", b"n")]
    assert _version_of(fields) == hmget
    assert _positions(_version_of(fields)) == _positions(hmget)


def test_a_failed_hgetall_is_no_fields() -> None:
    replies: list[Any] = [RuntimeError("WRONGTYPE"), None, b"x", 3, [], {}]
    for reply in replies:
        assert _fields(reply) is None
