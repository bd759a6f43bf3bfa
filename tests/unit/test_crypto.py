"""Format 2's pieces on their own: unambiguous binding, the opener's paths, the placeholder."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from redis_session import DecryptionFailed, TamperDetected, crypto
from redis_session.crypto import Opener, Sealer

PARTS = st.lists(st.binary(max_size=12), max_size=5)


@given(PARTS, PARTS)
def test_lp_encodes_different_parts_differently(a: list[bytes], b: list[bytes]) -> None:
    if a != b:
        assert crypto.lp(*a) != crypto.lp(*b)


def test_lp_tells_apart_what_nul_joining_would_merge() -> None:
    assert crypto.lp("X\0role", "tier") != crypto.lp("X", "role\0tier")


def _pair() -> tuple[Sealer, Opener]:
    kid, dek = crypto.new_session_key()
    key = crypto.session_key(kid, dek)
    sealer = Sealer(kid, "owner", prefix="p:", session_key=key, versions=lambda n: 7)
    return sealer, Opener("owner", "p:", key)


def test_a_sealed_message_opens_and_is_bound_to_its_id() -> None:
    sealer, opener = _pair()
    body = b'{"id":"m-1","role":"user","content":"hello"}'
    element = sealer.message("m-1", body)
    assert opener.message(element, "owner", 0) == body
    for bad in (element[:-1], element[: element.index(b'",') + 3], element + b"x"):
        with pytest.raises(DecryptionFailed):
            opener.message(bad, "owner", 0)
    renamed = element.replace(b"m-1", b"m-2", 1)
    with pytest.raises(DecryptionFailed):
        opener.message(renamed, "owner", 0)  # the id is bound


def test_metadata_carries_its_version_and_scalars_their_field() -> None:
    sealer, opener = _pair()
    seen: list[tuple[str, int]] = []
    opener.seen = lambda name, version: seen.append((name, version))
    value = sealer.meta("role", b"admin")
    assert value[0] == crypto.V2_META and int.from_bytes(value[1:9], "big") == 7
    assert opener.meta("role", value, "owner") == b"admin" and seen == [("role", 7)]
    bumped = value[:8] + bytes((value[8] + 1,)) + value[9:]
    with pytest.raises(DecryptionFailed):
        opener.meta("role", bumped, "owner")  # the version is bound too
    scalar = sealer.scalar("model", b"m1")
    assert opener.scalar("model", scalar, "owner") == b"m1"
    with pytest.raises(DecryptionFailed):
        opener.scalar("agent_id", scalar, "owner")
    with pytest.raises(TamperDetected, match="in cleartext"):
        opener.scalar("model", b"m1", "owner")


def test_a_sealer_that_does_not_know_the_key_yet_sends_no_content() -> None:
    placeholder = Sealer(b"?", "owner")
    assert placeholder.message("m-1", b'{"secret":1}') == b'{"id":"m-1",\x02'
    assert placeholder.meta("role", b"secret") == bytes((crypto.V2_META,))
    assert placeholder.scalar("model", b"secret") == bytes((crypto.V2,))
