"""The two ways a stored message is decoded give the same message.

A read parses each element with the fast validator (pydantic-core, without ``Message``'s
Python validators: it trusts that what the store wrote was validated when it was built) and
falls back, for the whole read, to the slow path (validation that reads a naive timestamp as
UTC and names the element that is not a message). Whatever the encoder can write, the fast
path must accept it and return exactly what validation returns.
"""

from __future__ import annotations

import copy
import gc
import os
import pickle
import sys
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from redis_session import CorruptData, Message, MessageRole, ToolCall, codec
from redis_session._transport import fast as _fast
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
    return codec._as_message(codec._LENIENT.validate_json(body))


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


def _inside(stamp: datetime) -> bool:
    return datetime(1, 1, 2) <= stamp.replace(tzinfo=None) <= datetime(9999, 12, 30)


messages = st.builds(
    Message,
    id=st.from_regex(MESSAGE_ID_PATTERN, fullmatch=True),
    role=st.sampled_from(list(MessageRole)) | st.sampled_from([r.value for r in MessageRole]),
    content=st.text(),
    # a day inside datetime's range: an offset moves a time near its ends out of it
    timestamp=st.datetimes(timezones=zones).filter(_inside) | st.none(),
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


# -- the C decoder (_speedups.c) ----------------------------------------------------------------

needs_c = pytest.mark.skipif(
    _fast.DECODE is None, reason="the C decoder is off (not built, or REDIS_SESSION_PURE_PYTHON)"
)


def test_the_c_decoder_is_built_where_ci_runs() -> None:
    # CI installs from a checkout on a machine with a C compiler: a build that silently fell
    # back to pure Python would leave every read at pydantic's speed unnoticed.
    if os.environ.get("CI") == "true" and not os.environ.get("REDIS_SESSION_PURE_PYTHON"):
        assert _fast.DECODE is not None


def _c(bodies: list[bytes]) -> list[Message | None]:
    assert _fast.DECODE is not None
    got, left, size = _fast.DECODE(bodies)
    assert left == [i for i, m in enumerate(got) if m is None]
    assert size == sum(len(b) for b in bodies if type(b) is bytes)
    return got


def _signed(m: Message) -> bool:
    return any(c.thought_signature is not None for c in m.tool_calls)


@needs_c
@given(st.lists(messages, min_size=1, max_size=6))
def test_the_c_decoder_returns_what_validation_returns(batch: list[Message]) -> None:
    kept = []
    for m in batch:
        try:
            kept.append((m, encode_message(m)))
        except InvalidArgument:
            continue
    bodies = [body for _, body in kept]
    got = _c(bodies)
    for (m, body), msg in zip(kept, got, strict=True):
        if _signed(m):  # base64 in the stored form: left to validation, by design
            assert msg is None
            continue
        assert msg is not None, body  # the encoder's every other shape: no fallback
        assert _seen(msg) == _seen(_validated(body))


def _mutations(body: bytes) -> st.SearchStrategy[bytes]:
    tokens = [b'"', b"\\", b"}", b"{", b",", b":", b"]", b"[", b"0", b"9", b"Z", b"T", b" "]
    tokens += [b"\x00", b"\x1f", b"\xff", b"\xc3", b"\\u", b"\\ud800", b"\\udc00", b"null", b"1"]
    pieces = st.sampled_from(tokens) | st.binary(max_size=3)

    def apply(edits: list[tuple[int, int, bytes]]) -> bytes:
        out = body
        for at, cut, piece in edits:
            at %= len(out) + 1
            out = out[:at] + piece + out[at + cut :]
        return out

    edit = st.tuples(st.integers(0, 10_000), st.integers(0, 3), pieces)
    return st.lists(edit, min_size=1, max_size=3).map(apply)


def _either(raw: bytes) -> Message | None:
    """The pydantic path's message for ``raw``, None when validation rejects it."""
    try:
        return codec._validated([raw])[0]
    except (ValueError, TypeError):
        return None


@needs_c
@given(st.data())
def test_the_c_decoder_accepts_nothing_validation_rejects(data: st.DataObject) -> None:
    # A damaged or foreign element is either left to validation (None) or read exactly as
    # validation reads it: never a message validation would refuse or read otherwise.
    m = data.draw(messages.filter(lambda m: not _signed(m)))
    try:
        body = encode_message(m)
    except InvalidArgument:
        return
    raw = data.draw(_mutations(body))
    (got,) = _c([raw])
    if got is not None:
        expected = _either(raw)
        assert expected is not None, raw
        assert _seen(got) == _seen(expected)


ESCAPES = [
    (b'"caf\\u00e9 \\/ \\"q\\" \\\\ \\b\\f\\n\\r\\t"', 'café / "q" \\ \b\f\n\r\t'),
    (b'"\\ud83d\\ude00 \\u0000 \\u20AC"', "\U0001f600 \x00 €"),
    (b'"\xe6\x9d\xb1\xe4\xba\xac \xf0\x9f\x98\x80"', "東京 😀"),
]


@needs_c
@pytest.mark.parametrize(("json_text", "text"), ESCAPES)
def test_the_c_decoder_reads_every_json_escape(json_text: bytes, text: str) -> None:
    stamp = b'"2024-02-29T23:59:59.000001Z"'
    raw = b'{"id":"e","role":"user","content":' + json_text + b',"timestamp":' + stamp + b"}"
    (got,) = _c([raw])
    assert got is not None and got.content == text
    assert _seen(got) == _seen(_validated(raw))


LEFT_TO_VALIDATION = [
    b'{"id":"e","role":"user","content":"\\ud800","timestamp":"2024-01-01T00:00:00Z"}',
    b'{"id":"e","role":"user","content":"\\udc00\\ud800","timestamp":"2024-01-01T00:00:00Z"}',
    b'{"id":"e","role":"user","timestamp":"2023-02-29T00:00:00Z"}',
    b'{"id":"e","role":"user","timestamp":"2024-01-01T24:00:00Z"}',
    b'{"id":"e","role":"user","timestamp":"2024-01-01T00:00:00+00:00"}',
    b'{"id":"e","role":"user","timestamp":"2024-01-01T00:00:00.5Z"}',
    b'{"id":"e","role":"user","timestamp":"2024-W01-1T00:00:00.000000Z"}',
    b'{"id":"e","role":"user","timestamp":"2024-01-01T00:00:00Z","content":"x"}',
    b'{"id":"e", "role":"user","timestamp":"2024-01-01T00:00:00Z"}',
    b'{"id":"e","role":"user","timestamp":"2024-01-01T00:00:00Z","tool_calls":[{"id":"c","name":"n","input":"i","thought_signature":"AA=="}]}',
    b'{"id":"e","role":"user","timestamp":"2024-01-01T00:00:00Z","author":null}',
]


@needs_c
@pytest.mark.parametrize("raw", LEFT_TO_VALIDATION)
def test_the_c_decoder_leaves_other_forms_to_validation(raw: bytes) -> None:
    (got,) = _c([raw])
    assert got is None
    # and the read still gives what validation gives (or CorruptData naming the element)
    try:
        expected = [_validated(raw)]
    except ValueError:
        with pytest.raises(CorruptData, match="message 1 is not a stored message"):
            decode_messages("k", [encode_message(Message(role="user")), raw])
        return
    assert [_seen(m) for m in decode_messages("k", [raw])] == [_seen(m) for m in expected]


@pytest.mark.parametrize("path", ["c", "reclass", "public"])
def test_every_decoder_reads_a_history_alike(path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    batch = [
        Message(role="user", content='héllo\n"q"'),
        Message(
            role="assistant", tool_calls=[ToolCall(id="c", name="n", input="{}", thought=True)]
        ),
        Message(role="tool", content="r", author="agent-b"),
    ]
    bodies = [encode_message(m) for m in batch]
    if path == "c" and _fast.DECODE is None:
        pytest.skip("the C decoder is off")
    if path == "reclass" and not _fast.RECLASS:
        pytest.skip("the fast path's reclass is off")
    if path != "c":
        monkeypatch.setattr(_fast, "DECODE", None)
    if path == "public":  # as in a process where the fast path is off: datetime.UTC
        monkeypatch.setattr(_fast, "RECLASS", False)
        monkeypatch.setattr(codec, "READ_TZ", UTC)
    got = decode_messages("k", bodies)
    assert got == batch and all(type(m) is Message for m in got)
    assert [m.model_fields_set for m in got] == [
        Message.model_validate_json(b).model_fields_set for b in bodies
    ]
    assert [_seen(m) for m in got] == [_seen(_validated(b)) for b in bodies]


@needs_c
@pytest.mark.skipif(sys.version_info >= (3, 14), reason="nothing is untracked from 3.14 on")
def test_the_c_decoders_models_are_out_of_the_collector_and_freed_by_refcount() -> None:
    # A worker's read cache holds many thousands of decoded models: each one the collector
    # tracked would be walked by every full collection (a 60 MB cache: 122 ms pauses).
    call = ToolCall(id="c", name="n", input="{}", output="o")
    m = Message(role=MessageRole.ASSISTANT, content="x", tool_calls=[call])
    (got,) = _c([encode_message(m)])
    assert got is not None and got == m
    assert not gc.is_tracked(got) and not gc.is_tracked(got.tool_calls[0])
    assert not gc.is_tracked(got.tool_calls)
    assert not gc.is_tracked(got.__dict__) and not gc.is_tracked(got.model_fields_set)
    copied = got.model_copy(update={"content": "y"})  # a model made from it: as any other
    assert gc.is_tracked(copied) and copied.content == "y" and got.content == "x"
    assert Message.model_validate(got.model_dump()) == got
    # Nothing else holds it (the name and the call's argument): freed with its last reference.
    assert sys.getrefcount(got) == 2


@needs_c
def test_the_c_decoders_fields_sets_are_shared_and_refuse_changes() -> None:
    # One fields set per combination of fields, shared by the models decoded with it (a set of
    # their own took ~10% of decoding): equal to validation's, unchangeable in place (a change
    # would reach every other message), and a copy of it is a plain set of its own.
    call = ToolCall(id="c", name="n", input="{}")
    bodies = [
        encode_message(Message(role=MessageRole.ASSISTANT, content="x", tool_calls=[call])),
        encode_message(Message(role=MessageRole.USER, content="y")),
        encode_message(Message(role=MessageRole.USER, content="z")),
    ]
    first, second, third = _c(bodies)
    assert first is not None and second is not None and third is not None
    assert second.model_fields_set is third.model_fields_set
    assert first.model_fields_set is not second.model_fields_set
    for got, body in zip((first, second, third), bodies, strict=True):
        fields = got.model_fields_set
        assert isinstance(fields, set) and fields == _validated(body).model_fields_set
        assert repr(fields) == repr(set(fields))
    shared = second.model_fields_set
    for change in (
        lambda: shared.add("author"),
        lambda: shared.discard("content"),
        lambda: shared.remove("content"),
        lambda: shared.pop(),
        lambda: shared.clear(),
        lambda: shared.update({"author"}),
        lambda: shared.difference_update({"content"}),
        lambda: shared.intersection_update({"content"}),
        lambda: shared.symmetric_difference_update({"author"}),
    ):
        with pytest.raises(TypeError, match="shared with other messages"):
            change()
    with pytest.raises(TypeError, match="shared with other messages"):
        shared |= {"author"}
    assert shared == {"id", "role", "content", "timestamp"} and third.model_fields_set == shared
    assert type(shared | {"author"}) is set and type(copy.copy(shared)) is set
    # pydantic's own operations copy it first: they work as on any model
    changed = second.model_copy(update={"author": "a"})
    assert type(changed.model_fields_set) is set and "author" in changed.model_fields_set
    assert "author" not in third.model_fields_set
    assert second.model_dump(exclude_unset=True).keys() == shared
    assert copy.deepcopy(second) == second and pickle.loads(pickle.dumps(second)) == second
    assert "author" not in _c(bodies[1:2])[0].model_fields_set  # type: ignore[union-attr]


@needs_c
def test_a_decoded_message_pickles_as_one_pydantic_built() -> None:
    # Its shared fields set pickles as a plain set: the copy can change its own.
    m = Message(role=MessageRole.USER, content="x")
    (got,) = _c([encode_message(m)])
    assert got is not None
    back = pickle.loads(pickle.dumps(got))
    assert back == m and type(back.model_fields_set) is set
    back.model_fields_set.add("author")  # its own set, not the decoder's
    assert "author" not in got.model_fields_set
    built = pickle.loads(pickle.dumps(Message.model_validate_json(encode_message(m))))
    assert back == built and back.model_fields_set - {"author"} == built.model_fields_set
