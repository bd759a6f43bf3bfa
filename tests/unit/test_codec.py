from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from redis_session import (
    CorruptData,
    InvalidArgument,
    Message,
    MessageRole,
    Session,
    ToolCall,
    Usage,
)
from redis_session.codec import (
    decode_messages,
    decode_session,
    encode_message,
    id_prefix,
    message_digest,
    meta_args,
    to_datetime,
    twin_of,
    twin_ready,
)
from redis_session.models import MESSAGE_ID_PATTERN


def decoded_twin(msg: Message) -> Message | None:
    """What a store takes instead of parsing its own append read back, or None."""
    return twin_of(msg) if twin_ready(msg) else None


def test_message_json_starts_with_its_id() -> None:
    m = Message(role="user", content="x")
    assert encode_message(m).startswith(id_prefix(m.id))
    assert orjson.loads(encode_message(m))["id"] == m.id


text = st.text().map(lambda s: s.encode("utf-8", "replace").decode())


@given(text, text, st.binary() | st.none(), st.datetimes(timezones=st.just(UTC)))
def test_message_round_trip(content: str, author: str, sig: bytes | None, ts: datetime) -> None:
    m = Message(
        role="tool", content=content, author=author, timestamp=ts,
        tool_calls=[ToolCall(id="1", name="n", input=content, thought_signature=sig)],
    )  # fmt: skip
    assert decode_messages("k", [encode_message(m)]) == [m]


def test_naive_timestamps_are_utc_and_aware_ones_are_converted() -> None:
    naive = Message(role="user", timestamp=datetime(2024, 1, 1, 12))
    assert naive.timestamp == datetime(2024, 1, 1, 12, tzinfo=UTC)
    paris = Message(
        role="user", timestamp=datetime(2024, 1, 1, 13, tzinfo=timezone(timedelta(hours=1)))
    )
    assert paris.timestamp.tzinfo is UTC and paris.timestamp.hour == 12
    assert Message(role="user", timestamp=None).timestamp.tzinfo is UTC


def test_roles() -> None:
    assert MessageRole("model").normalize() is MessageRole.ASSISTANT
    assert MessageRole.FUNCTION.normalize() is MessageRole.TOOL
    assert MessageRole.USER.normalize() is MessageRole.USER
    with pytest.raises(ValueError, match="role"):
        Message(role="robot")


@pytest.mark.parametrize("bad_id", ["", "has space", 'q"uote', "back\\slash", "x" * 129, "é"])
def test_message_ids_are_restricted(bad_id: str) -> None:
    with pytest.raises(ValueError, match="id"):
        Message(id=bad_id, role="user")


def test_digest_is_8_bytes_and_stable() -> None:
    assert message_digest("abc") == message_digest("abc")
    assert len(message_digest("abc")) == 8
    assert message_digest("abc") != message_digest("abd")


def test_microsecond_timestamps_are_exact() -> None:
    assert to_datetime(1796227668786764) == datetime(2026, 12, 2, 16, 7, 48, 786764, tzinfo=UTC)


def test_decode_session_reports_the_key() -> None:
    meta = meta_args(Session(key="k", metadata={"a": "b"}))
    meta += [b"v", b"1", b"created_at", b"1", b"updated_at", b"2"]  # the script writes these
    s = decode_session("k", meta, [])
    assert s.metadata == {"a": "b"} and s.created_at == to_datetime(1)
    with pytest.raises(CorruptData, match="'k'.*updated_at"):
        decode_session("k", meta[:-2], [])


def _stored_meta(**extra: bytes) -> list[bytes]:
    meta = meta_args(Session(key="k", agent_id="a", metadata={"a": "b"}))
    meta += [b"v", b"1", b"created_at", b"1", b"updated_at", b"2"]
    for name, value in extra.items():
        meta += [name.encode(), value]
    return meta


def test_decode_session_equals_the_model_it_stands_for() -> None:
    # decode_session builds the model without pydantic's constructor: it must be the model
    # model_construct would build (same fields, same fields-set, dumps and copies alike).
    s = decode_session("k", _stored_meta(), [])
    same = Session.model_construct(
        key="k", agent_id="a", channel_type="", channel_id="", model="", history=[],
        metadata={"a": "b"}, created_at=to_datetime(1), updated_at=to_datetime(2),
    )  # fmt: skip
    assert s == same and s.model_fields_set == same.model_fields_set
    assert s.model_dump() == same.model_dump()
    assert s.model_copy(update={"agent_id": "b"}).agent_id == "b" and s.agent_id == "a"
    assert Session.model_validate(s.model_dump()) == s


def test_decode_session_takes_a_mapping_or_memoryviews() -> None:
    flat = _stored_meta()
    pairs = dict(zip(flat[::2], flat[1::2], strict=True))
    views: Any = [memoryview(x) for x in flat]  # what a client might hand over; not typed bytes
    assert (
        decode_session("k", pairs, [])
        == decode_session("k", views, [])
        == (decode_session("k", flat, []))
    )


@pytest.mark.parametrize(
    ("meta", "what"),
    [
        (_stored_meta()[:-1], "odd number"),
        ([*_stored_meta(), b"m:\xff", b"x"], "field name"),
        ([*_stored_meta(), b"m:x", b"\xff"], "metadata 'x'"),
        ([*_stored_meta()[:-2], b"model", b"\xff", b"updated_at", b"2"], "model"),
        ([b"v", b"2", b"created_at", b"1"], "schema version"),
    ],
)
def test_decode_session_names_what_is_corrupt(meta: list[bytes], what: str) -> None:
    with pytest.raises(CorruptData, match=f"'k'.*{what}"):
        decode_session("k", meta, [])


@pytest.mark.parametrize("raw", [b"", b"{", b"null", b"\x80", b'{"role":"user","id":"x","x":1}'])
def test_decode_messages_names_key_and_index(raw: bytes) -> None:
    good = encode_message(Message(role="user"))
    with pytest.raises(CorruptData, match="'key'.*message 1") as info:
        decode_messages("key", [good, raw])
    assert info.value.key == "key"


def test_an_element_holding_two_messages_is_corrupt() -> None:
    # An element that is itself "m1,m2" (a batch pushed as one element by something else)
    # must not pass as two messages.
    a, b, c = (encode_message(Message(role="user", content=str(i))) for i in range(3))
    with pytest.raises(CorruptData, match="'key'.*message 1"):
        decode_messages("key", [a, b + b"," + c])


def test_elements_of_other_buffer_types_decode_and_non_buffers_are_corrupt() -> None:
    good = encode_message(Message(role="user", content="hi"))
    elements: list[Any] = [memoryview(good), bytearray(good), good.decode()]
    for element in elements:
        assert [m.content for m in decode_messages("key", [good, element])] == ["hi", "hi"]
    for foreign in (None, 3):
        with pytest.raises(CorruptData, match="'key'.*message 1.*not bytes"):
            decode_messages("key", [good, foreign])  # type: ignore[list-item]


def test_elements_are_parsed_one_by_one_not_joined() -> None:
    # Two halves of one message (split at a comma) followed by an element holding two
    # messages: joined with commas they would parse as three messages, as many as elements.
    a, b, c = (encode_message(Message(role="user", content=str(i))) for i in range(3))
    head, tail = a.split(b",", 1)
    with pytest.raises(CorruptData, match="'key'.*message 0"):
        decode_messages("key", [head, tail, b + b"," + c])


def test_decoded_messages_are_plain_messages_with_utc_timestamps() -> None:
    m = Message(role="assistant", content="x", tool_calls=[ToolCall(id="1", name="n", input="{}")])
    (back,) = decode_messages("k", [encode_message(m)])
    assert type(back) is Message and type(back.tool_calls[0]) is ToolCall
    assert back == m and back.timestamp.utcoffset() == timedelta(0)
    stored = set(Message.model_fields) - {"author", "tokens", "usage"}  # not at their default
    assert back.model_fields_set == stored
    assert b'"author"' not in encode_message(m) and b'"output"' not in encode_message(m)


ids = st.from_regex(MESSAGE_ID_PATTERN, fullmatch=True)
any_time = st.datetimes(timezones=st.just(UTC)) | st.datetimes()


tool_calls = st.lists(
    st.builds(
        ToolCall,
        id=st.text(),
        name=st.text(),
        input=st.text(),
        output=st.text(),
        thought=st.booleans(),
    ),
    max_size=2,
)


counts = st.none() | st.integers(0, 2**40)
usages = st.none() | st.builds(
    Usage, input_tokens=st.integers(0, 2**40), requests=st.integers(0, 9)
)


@given(
    ids, st.sampled_from(list(MessageRole)), st.text(), st.text(), any_time, tool_calls, counts,
    usages,
)  # fmt: skip
def test_the_fast_encoder_writes_what_the_model_serializer_writes(
    message_id: str,
    role: MessageRole,
    content: str,
    author: str,
    ts: datetime,
    calls: list[ToolCall],
    tokens: int | None,
    usage: Usage | None,
) -> None:
    # encode_message writes plain messages (tool calls without thought signatures too) with
    # orjson; the bytes must be the model's own JSON (ids first for the scripts, identical
    # escapes and timestamps), and text that cannot be UTF-8 must be refused the same way.
    m = Message(
        id=message_id, role=role, content=content, author=author, timestamp=ts, tool_calls=calls,
        tokens=tokens, usage=usage,
    )  # fmt: skip
    try:
        expected = Message.__pydantic_serializer__.to_json(m, exclude_defaults=True)
    except ValueError:
        with pytest.raises(InvalidArgument, match="msg"):
            encode_message(m)
        return
    assert encode_message(m) == expected
    assert decode_messages("k", [expected]) == [m]


def test_messages_the_fast_encoder_leaves_to_the_model_serializer() -> None:
    class Tagged(Message):
        tag: str = "x"

    sig = ToolCall(id="1", name="n", input="{}", thought_signature=b"\0")
    constructed = Message.model_construct(
        content="c", id="i", role=MessageRole.USER, timestamp=datetime.now(UTC), author=""
    )
    for m in (
        Message(role="user", content="c", tool_calls=[sig]),
        Message(role="user", timestamp=datetime(5, 1, 2, 3, 4, 5, tzinfo=UTC)),
        constructed,
    ):
        assert encode_message(m) == m.model_dump_json(exclude_defaults=True).encode()
        assert encode_message(m).startswith(id_prefix(m.id))
    tagged = Tagged(role="user", content="c")
    assert encode_message(tagged) == Message.__pydantic_serializer__.to_json(
        tagged, exclude_defaults=True
    )
    assert b"tag" not in encode_message(tagged)


def test_subclasses_and_changed_ids_are_validated_before_encoding() -> None:
    class Tagged(Message):
        tag: str = "x"

    tagged = Tagged(role="user", content="c")
    object.__setattr__(
        tagged, "timestamp", datetime(2024, 1, 1, 12)
    )  # naive, assigned after the build
    (back,) = decode_messages("k", [encode_message(tagged)])
    assert type(back) is Message and back.timestamp == datetime(2024, 1, 1, 12, tzinfo=UTC)
    assert back.id == tagged.id and back.content == "c"
    renamed = Message(role="user")
    object.__setattr__(renamed, "id", 'has "quotes"')
    with pytest.raises(InvalidArgument, match=r"msg.*id"):
        encode_message(renamed)


def test_the_slow_path_reads_naive_timestamps_and_refuses_missing_ids() -> None:
    good = encode_message(Message(role="user", content="a"))
    naive = b'{"id":"n1","role":"user","content":"b","timestamp":"2024-01-01T12:00:00"}'
    first, second = decode_messages("k", [good, naive])
    assert type(second) is Message and second.timestamp == datetime(2024, 1, 1, 12, tzinfo=UTC)
    assert (first.content, second.content, second.tool_calls, second.author) == ("a", "b", (), "")
    for foreign in (b'{"role":"user","content":"no id"}', b'{"id":"x","role":"user"}'):
        with pytest.raises(CorruptData, match="message 1"):
            decode_messages("k", [good, foreign])


def _seen(m: Message) -> object:
    """What a caller can see of a message: every field's value and type (the timestamp's
    tzinfo type and offset too), the fields set, the tool calls' alike.
    """
    stamp = m.timestamp
    calls = [
        (type(c), [(k, type(v), v) for k, v in c.__dict__.items()], c.model_fields_set,
         c.__pydantic_extra__, c.__pydantic_private__)
        for c in m.tool_calls
    ]  # fmt: skip
    plain = [(k, type(v), v) for k, v in m.__dict__.items() if k != "tool_calls"]
    return (
        type(m), plain, type(stamp.tzinfo), stamp.utcoffset(), type(m.tool_calls), calls,
        m.model_fields_set, m.__pydantic_extra__, m.__pydantic_private__,
    )  # fmt: skip


signed_calls = st.lists(
    st.builds(
        ToolCall,
        id=st.text(),
        name=st.text(),
        input=st.text(),
        output=st.text(),
        thought=st.booleans(),
        thought_signature=st.binary() | st.none(),
    ),
    max_size=2,
)


@given(ids, st.sampled_from(list(MessageRole)), st.text(), st.text(), any_time, signed_calls)
def test_the_decoded_twin_of_a_message_is_what_its_stored_form_decodes_to(
    message_id: str,
    role: MessageRole,
    content: str,
    author: str,
    ts: datetime,
    calls: list[ToolCall],
) -> None:
    # A store reads its own appends back from decoded_twin instead of parsing them: the twin
    # must be what a fresh store's read decodes, down to types and model_fields_set.
    m = Message(
        id=message_id, role=role, content=content, author=author, timestamp=ts, tool_calls=calls
    )
    try:
        body = encode_message(m)
    except InvalidArgument:
        return
    twin = decoded_twin(m)
    assert twin is not None
    (decoded,) = decode_messages("k", [body])
    assert twin == decoded == m
    assert _seen(twin) == _seen(decoded)
    assert twin.timestamp.fold == decoded.timestamp.fold == 0
    assert twin.model_dump(exclude_unset=True) == decoded.model_dump(exclude_unset=True)


def test_the_decoded_twin_of_a_folded_timestamp_is_unfolded_as_decoded() -> None:
    # fold=1 (the second of a repeated wall-clock hour) means nothing in UTC, and the stored
    # form does not keep it: the twin drops it as the decoder does.
    m = Message(role="user", timestamp=datetime(2026, 1, 1, 1, 30, tzinfo=UTC, fold=1))
    assert m.timestamp.fold == 1
    twin = decoded_twin(m)
    (decoded,) = decode_messages("k", [encode_message(m)])
    assert twin is not None and twin.timestamp.fold == decoded.timestamp.fold == 0
    assert twin.model_dump() == decoded.model_dump()


def test_no_decoded_twin_for_a_message_stored_otherwise() -> None:
    # Stored only after it is validated again (or its UTC is another tzinfo): parse it.
    m = Message(role="user", content="c")
    changed = m.model_copy(update={"content": 5})
    other_utc = Message.model_construct(
        id="i", role=MessageRole.USER, content="c",
        timestamp=datetime.now(timezone(timedelta(0), "GMT")), tool_calls=(), author="",
    )  # fmt: skip

    class Tagged(Message):
        tag: str = "x"

    for odd in (changed, other_utc, Tagged(role="user")):
        assert decoded_twin(odd) is None
    assert decoded_twin(m) is not None
