"""The positions a first read (and a read's steps) read again by ``HMGET`` come from the meta
hash, which another client may have written anything into: damaged, truncated or foreign
values are refused (None: the read goes back to the script, which names them), never taken
and never raised on.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from redis_session._core.reads import Positions, _positions

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
