"""The two ways a stored message is decoded give the same message.

A read parses each element with the fast validator (pydantic-core, without ``Message``'s
Python validators: it trusts that what the store wrote was validated when it was built) and
falls back, for the whole read, to the slow path (validation that reads a naive timestamp as
UTC and names the element that is not a message). Whatever the encoder can write, the fast
path must accept it and return exactly what validation returns.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from redis_session import CorruptData, Message, MessageRole, ToolCall, codec
from redis_session.codec import decode_messages, encode_message
from redis_session.errors import InvalidArgument
from redis_session.models import MESSAGE_ID_PATTERN


def _seen(m: Message) -> object:
    """Every field's value and type (the timestamp's tzinfo type and offset too), the fields
    set, the tool calls' alike.
    """
    calls = [
        (type(c), [(k, type(v), v) for k, v in c.__dict__.items()], c.model_fields_set,
         c.__pydantic_extra__, c.__pydantic_private__)
        for c in m.tool_calls
    ]  # fmt: skip
    plain = [(k, type(v), v) for k, v in m.__dict__.items() if k != "tool_calls"]
    stamp = m.timestamp
    return (
        type(m), plain, type(stamp.tzinfo), stamp.utcoffset(), stamp.fold, type(m.tool_calls),
        calls, m.model_fields_set, m.__pydantic_extra__, m.__pydantic_private__,
    )  # fmt: skip


def _validated(body: bytes) -> Message:
    """The slow path's validation of one element, as the decoder hands it out."""
    msg = codec._LENIENT.validate_json(body)
    object.__setattr__(msg, "__class__", Message)
    return msg


zones = (
    st.none()
    | st.just(UTC)
    | st.builds(timezone, st.integers(-23 * 60, 23 * 60).map(lambda m: timedelta(minutes=m)))
)
calls = st.lists(
    st.builds(
        ToolCall,
        id=st.text(),
        name=st.text(),
        input=st.text(),
        output=st.text(),
        thought=st.booleans(),
        thought_signature=st.binary(max_size=40) | st.none(),
    ),
    max_size=3,
)
messages = st.builds(
    Message,
    id=st.from_regex(MESSAGE_ID_PATTERN, fullmatch=True),
    role=st.sampled_from(list(MessageRole)) | st.sampled_from([r.value for r in MessageRole]),
    content=st.text(),
    timestamp=st.datetimes(timezones=zones) | st.none(),
    tool_calls=calls,
    author=st.text(),
)


@given(st.lists(messages, min_size=1, max_size=6))
def test_the_fast_path_returns_what_validation_returns(batch: list[Message]) -> None:
    bodies = []
    for m in batch:
        try:
            bodies.append(encode_message(m))
        except InvalidArgument:  # text UTF-8 cannot hold (lone surrogates): never stored
            continue
    for body in bodies:
        codec._STORED(body)  # the encoder's every shape passes the fast path: no fallback
    fast = decode_messages("k", bodies)
    slow = [_validated(b) for b in bodies]
    assert fast == slow
    assert [_seen(m) for m in fast] == [_seen(m) for m in slow]
    for got, body in zip(fast, bodies, strict=True):
        full = Message.model_validate_json(body)  # Message's own validators, all of them
        assert got == full and got.timestamp.utcoffset() == timedelta(0)
        assert encode_message(got) == body  # read back, stored again: the same bytes


@given(messages, st.integers(0, 3))
def test_a_history_read_by_the_slow_path_holds_the_same_messages(m: Message, at: int) -> None:
    # One naive timestamp (another writer's) sends the whole read down the slow path; the
    # store's own elements must come back exactly as the fast path gives them.
    try:
        body = encode_message(m)
    except InvalidArgument:
        return
    naive = b'{"id":"naive","role":"user","timestamp":"2024-01-01T12:00:00"}'
    items = [body] * 3
    items.insert(at, naive)
    mixed = decode_messages("k", items)
    (alone,) = decode_messages("k", [body])
    assert [_seen(x) for i, x in enumerate(mixed) if i != at] == [_seen(alone)] * 3
    other = mixed[at]
    assert other.timestamp == datetime(2024, 1, 1, 12, tzinfo=UTC)
    assert type(other.timestamp.tzinfo) is type(alone.timestamp.tzinfo)


FOREIGN = [
    b"not json",
    b"[1, 2]",
    b'"a string"',
    b'{"id":"x","role":"user","timestamp":"2024-01-01T12:00:00Z","extra":1}',
    b'{"id":"x","role":"robot","timestamp":"2024-01-01T12:00:00Z"}',
    b'{"id":"x","role":"user"}',
    b'{"role":"user","timestamp":"2024-01-01T12:00:00Z"}',
    b'{"id":7,"role":"user","timestamp":"2024-01-01T12:00:00Z"}',
    b'{"id":"x","role":"user","timestamp":"yesterday"}',
    b'{"id":"x","role":"user","timestamp":"2024-01-01T12:00:00Z","tool_calls":[{"id":"c"}]}',
    b'{"id":"x","role":"user","timestamp":"2024-01-01T12:00:00Z","content":"\xff"}',
    b'{"id":"x","role":"user","timestamp":"2024-01-01T12:00:00Z"} trailing',
]


@pytest.mark.parametrize("foreign", FOREIGN)
@given(at=st.integers(0, 4))
def test_a_foreign_element_is_corrupt_data_naming_it(foreign: bytes, at: int) -> None:
    good = encode_message(Message(role="user", content="fine"))
    items = [good] * 4
    items.insert(at, foreign)
    with pytest.raises(CorruptData, match=rf"'chat'.*message {at} is not a stored message"):
        decode_messages("chat", items)
