"""Models ⇄ Redis values, and the single decode boundary.

Everything read back from Redis passes through the ``decode_*`` functions here, which turn
JSON, UTF-8 and validation failures into :class:`~redis_session.errors.CorruptData` naming the
session key. Nothing else in the package parses data that came from Redis.

Messages are stored as their compact JSON (``id`` first, so a script can match a message by
the prefix ``{"id":"<id>",`` without parsing JSON). Session scalars and metadata are fields of
the meta hash; timestamps are microseconds since the epoch from the Redis server's clock.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime, timedelta, tzinfo
from itertools import filterfalse
from typing import Annotated, Any, TypeVar

import orjson
from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    ConfigDict,
    TypeAdapter,
    ValidationError,
)
from pydantic_core import PydanticSerializationError

from . import crypto
from ._transport import fast as _fast
from .crypto import Opener, Sealer
from .errors import (
    CorruptData,
    InvalidArgument,
    PassphraseRequired,
    SessionNotEncrypted,
    TamperDetected,
)
from .models import (
    MAX_TOKENS,
    MESSAGE_ID_PATTERN,
    STORED_CONTEXT,
    ChildSession,
    ChildSessionConfig,
    Message,
    MessageRole,
    Session,
    SessionSummary,
    TokenCounter,
    ToolCall,
    Usage,
)

log = logging.getLogger("redis_session")

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
SCALAR_FIELDS = ("agent_id", "channel_type", "channel_id", "model")
METADATA_PREFIX = "m:"
SEALED_METADATA_PREFIX = "e:"
SCHEMA_VERSION = b"1"
INHERITED = b"\0" * 8
"""The digest a child's inherited message is stored with: never merged back."""


# Once per process: which pieces of the fast path this process runs.
_fast.probe(Message, ToolCall, MessageRole, Usage)

READ_TZ: tzinfo = _fast.read_tzinfo()
"""The tzinfo of every timestamp a read decodes (pydantic-core's UTC where the fast path
builds the models, ``datetime.UTC`` where ``Message``'s own validation does)."""


class _StoredMessage(Message):
    """Decode-only twin of :class:`Message` for what this library stored.

    Stored messages were validated when they were built; their timestamps are written aware
    (UTC). Without ``Message``'s Python validators a long history decodes at pydantic-core
    speed (docs/benchmarks.md, "Figures behind the code"). Each instance is
    re-classed to ``Message`` right after validation (the fast path's ``reclass``: same
    fields, same layout); without that piece, ``Message`` validates the stored form itself.
    """

    # Ids are unique: pydantic's default cache of short string values only costs here.
    model_config = ConfigDict(**Message.model_config, cache_strings="keys")

    id: str
    timestamp: AwareDatetime


def _as_read_utc(value: datetime) -> datetime:
    """A timestamp the slow path read, in :data:`READ_TZ` (naive: taken as UTC)."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(READ_TZ)


class _LenientStoredMessage(Message):
    """The slow path's twin: ``id`` and ``timestamp`` required as in :class:`_StoredMessage`,
    but a naive timestamp (written by another writer, or by a version before
    :func:`encode_message` validated changed messages) is read as UTC, as ``Message`` reads it,
    and every timestamp comes back in :data:`READ_TZ`: a history read partly by each path
    holds one kind of datetime.
    """

    id: str
    timestamp: Annotated[datetime, AfterValidator(_as_read_utc)]


#: The validators' ``validate_json``, called directly (``TypeAdapter.validator``):
#: ``TypeAdapter.validate_json`` adds a Python frame per call, that is per message.
_STORED = TypeAdapter(_StoredMessage).validator.validate_json
_MESSAGE = functools.partial(TypeAdapter(Message).validator.validate_json, context=STORED_CONTEXT)
_REQUIRED = frozenset({"id", "timestamp"})
"""What every stored message holds (``Message`` itself would fill them in)."""
_LENIENT = TypeAdapter(_LenientStoredMessage)
M = TypeVar("M", bound=BaseModel)


def message_digest(message_id: str) -> bytes:
    """The 8-byte digest a script uses to tell whether a message id was appended before."""
    return hashlib.blake2b(message_id.encode(), digest_size=8).digest()


_MESSAGE_SERIALIZER = Message.__pydantic_serializer__
_MESSAGE_FIELDS = tuple(Message.model_fields)
_MESSAGE_SHAPES = frozenset(
    (str, tokens, MessageRole, str, datetime, tuple, str, usage)
    for tokens in (int, type(None))
    for usage in (Usage, type(None))
)
_UTC_Z = orjson.OPT_UTC_Z
_ZERO = timedelta(0)
_ID = re.compile(MESSAGE_ID_PATTERN)


def encode_message(msg: Message, argument: str = "msg") -> bytes:
    """The stored form of ``msg``: its compact JSON without the fields that hold their
    default (empty ``content``, ``tool_calls`` and ``author``; a tool call's empty ``output``,
    false ``thought``, absent ``thought_signature``), exactly
    ``msg.model_dump_json(exclude_defaults=True)``; ``id`` first. Elements written with every
    field (earlier versions) read the same.

    A message whose fields were changed after it was built (past its frozen guard, with
    ``object.__setattr__``) is validated again first, so that what is stored always reads
    back: a naive timestamp is stored as UTC, an aware one converted to UTC, and a value that
    is no valid message field is refused as ``InvalidArgument``. A plain ``Message`` whose
    tool calls carry no thought signature (the common append) is written by ``orjson`` from
    its fields: the same bytes, faster (a property test holds the two equal); anything
    else goes through the model's own serializer. Text that UTF-8 cannot encode (lone
    surrogates) is refused as ``InvalidArgument``.
    """
    return stored_form(msg, argument)[0]


def stored_form(
    msg: Message, argument: str = "msg", count: TokenCounter | None = None
) -> tuple[bytes, bool, int | None]:
    """:func:`encode_message` of ``msg``, whether ``msg`` is stored as it is with its
    timestamp in ``datetime.UTC`` (:func:`twin_ready`: a read of these bytes may take
    :func:`twin_of` ``msg`` instead of parsing them), and the token count ``count`` gave it
    (:func:`counted`; None: it had one, or no ``count``), stored as its ``tokens`` without
    a copy of the message being made.
    """
    ready = _stored_as_is(msg)
    valid = msg if ready else _revalidated(msg, argument)
    tokens = None
    if count is not None and valid.__dict__["tokens"] is None:
        tokens = counted(valid, count, argument)
    body = _encoded(valid, argument, tokens)
    return body, ready and msg.__dict__["timestamp"].tzinfo is UTC, tokens


def counted(msg: Message, count: TokenCounter, argument: str) -> int:
    """``count(msg)`` (``msg`` a valid message without ``tokens``), held to what
    :attr:`Message.tokens` takes: an int from 0 to 2^40 (else ``InvalidArgument`` naming
    ``argument``); what ``count`` raises goes to the caller. The one place a store's
    ``count_tokens`` is called, before anything is sent.
    """
    n = count(msg)
    if type(n) is not int or not 0 <= n <= MAX_TOKENS:
        raise InvalidArgument(
            argument, f"count_tokens returned {n!r} for it: must be an int from 0 to 2**40"
        )
    return n


def with_tokens(msg: Message, tokens: int | None) -> Message:
    """``msg`` with the count :func:`stored_form` gave it (itself for None)."""
    return msg if tokens is None else msg.model_copy(update={"tokens": tokens})


def _encoded(msg: Message, argument: str, count: int | None = None) -> bytes:
    """``msg``'s stored JSON, with ``count`` as its ``tokens`` where given."""
    fields = msg.__dict__
    calls = fields["tool_calls"]
    tokens = fields["tokens"] if count is None else count
    if not calls or all(map(_unsigned, calls)):
        out = {"id": fields["id"]}
        if tokens is not None:
            out["tokens"] = tokens
        out["role"] = fields["role"]
        if fields["content"]:
            out["content"] = fields["content"]
        out["timestamp"] = fields["timestamp"]
        if calls:  # checked above: plain ToolCalls whose fields orjson writes as pydantic does
            out["tool_calls"] = [_call_fields(call.__dict__) for call in calls]
        if fields["author"]:
            out["author"] = fields["author"]
        usage = fields["usage"]
        if usage is not None:
            out["usage"] = {name: n for name, n in usage.__dict__.items() if n}
        try:
            return orjson.dumps(out, option=_UTC_Z)
        except orjson.JSONEncodeError:
            pass  # the model's serializer below says what is wrong
    try:
        return _MESSAGE_SERIALIZER.to_json(with_tokens(msg, count), exclude_defaults=True)
    except PydanticSerializationError as exc:
        raise InvalidArgument(argument, f"cannot be stored as UTF-8 JSON: {exc}") from None


def _stored_as_is(msg: Message) -> bool:
    """Whether ``msg`` is stored as it is: a plain ``Message`` whose fields hold what
    validation gives them (anything else is validated again before it is stored).
    """
    fields = msg.__dict__
    return not (
        type(msg) is not Message  # a subclass: its Message fields, validated, are stored
        or tuple(map(type, fields.values())) not in _MESSAGE_SHAPES
        or tuple(fields) != _MESSAGE_FIELDS
        or fields["timestamp"].utcoffset() != _ZERO  # naive, or not UTC: normalise
        or not _ID.fullmatch(fields["id"])
        or not _counted(fields["tokens"], fields["usage"])
        or (fields["tool_calls"] and not all(map(_plain_tool_call, fields["tool_calls"])))
    )


def _counted(tokens: int | None, usage: Usage | None) -> bool:
    """Whether a message's token count and usage are within their bounds (a message changed
    past its frozen guard is validated again: :func:`_revalidated` refuses them).
    """
    if tokens is not None and not 0 <= tokens <= MAX_TOKENS:
        return False
    return usage is None or all(0 <= n <= MAX_TOKENS for n in usage.__dict__.values())


def twin_ready(msg: Message) -> bool:
    """Whether :func:`twin_of` ``msg`` is what its stored form decodes to: ``msg`` is stored
    as it is, its timestamp in ``datetime.UTC``.
    """
    return _stored_as_is(msg) and msg.__dict__["timestamp"].tzinfo is UTC


def twin_of(msg: Message, tokens: int | None = None) -> Message:
    """What a read of ``msg``'s stored form (:func:`encode_message`) decodes to, built from
    ``msg`` without parsing it (a store's own append read back), for a message
    :func:`twin_ready` holds ready (not checked again). Equal to the decoded message field by
    field and type by type (the timestamp's UTC tzinfo is the decoder's), with the fields set
    that the stored JSON names (``model_fields_set``, the tool calls' too).
    """
    values = dict(msg.__dict__)
    if tokens is not None:  # the count stored_form gave it
        values["tokens"] = tokens
    values["timestamp"] = values["timestamp"].astimezone(READ_TZ).replace(fold=0)  # as decoded
    named = {"id", "role", "timestamp"}
    if values["tokens"] is not None:
        named.add("tokens")
    if values["usage"] is not None:
        named.add("usage")
        values["usage"] = _constructed(
            Usage, dict(values["usage"].__dict__), _named(values["usage"])
        )
    if values["content"]:
        named.add("content")
    if values["author"]:
        named.add("author")
    if values["tool_calls"]:
        named.add("tool_calls")
        values["tool_calls"] = tuple(map(_call_twin, values["tool_calls"]))
    return _constructed(Message, values, named)


def _named(usage: Usage) -> set[str]:
    """The fields a stored usage names: those not 0."""
    return {name for name, n in usage.__dict__.items() if n}


def _call_twin(call: ToolCall) -> ToolCall:
    values = dict(call.__dict__)
    named = {"id", "name", "input"}
    if values["output"]:
        named.add("output")
    if values["thought"]:
        named.add("thought")
    if values["thought_signature"] is not None:
        named.add("thought_signature")
    return _constructed(ToolCall, values, named)


def _constructed(cls: type[M], values: dict[str, Any], named: set[str]) -> M:
    """An instance of model ``cls`` holding ``values`` as they are (no validation), with
    ``named`` as its fields set.
    """
    return cls.model_construct(named, **values)


def _call_fields(call: dict[str, object]) -> dict[str, object]:
    """A plain, unsigned tool call's fields without those at their default."""
    out = {"id": call["id"], "name": call["name"], "input": call["input"]}
    if call["output"]:
        out["output"] = call["output"]
    if call["thought"]:
        out["thought"] = True
    return out


_TOOL_CALL_FIELDS = tuple(ToolCall.model_fields)
_TOOL_CALL_SHAPES = frozenset(
    {(str, str, str, str, bool, type(None)), (str, str, str, str, bool, bytes)}
)


def _plain_tool_call(call: object) -> bool:
    return (
        type(call) is ToolCall
        and tuple(map(type, call.__dict__.values())) in _TOOL_CALL_SHAPES
        and tuple(call.__dict__) == _TOOL_CALL_FIELDS
    )


def _unsigned(call: ToolCall) -> bool:
    """No thought signature: bytes are base64 in the model's JSON, which orjson cannot write."""
    return call.thought_signature is None


def _revalidated(msg: Message, argument: str) -> Message:
    data = {name: value for name, value in msg.__dict__.items() if name in _MESSAGE_FIELDS}
    calls = data.get("tool_calls")
    if isinstance(calls, list | tuple):  # instances would pass unchecked: validate them
        data["tool_calls"] = [dict(c.__dict__) if isinstance(c, ToolCall) else c for c in calls]
    try:
        return Message.model_validate(data)
    except ValidationError as exc:
        raise InvalidArgument(argument, f"is not a valid message: {_brief(exc)}") from None


def text_arg(value: object, argument: str) -> bytes:
    """A str as the UTF-8 bytes a script receives; ``InvalidArgument`` for anything else."""
    if not isinstance(value, str):
        raise InvalidArgument(argument, f"must be a str, not {type(value).__name__}")
    try:
        return value.encode()
    except UnicodeEncodeError:
        raise InvalidArgument(argument, "must be encodable as UTF-8 (no lone surrogates)") from None


def id_prefix(message_id: str) -> bytes:
    """What the stored form of the message with this id starts with."""
    return b'{"id":' + orjson.dumps(message_id) + b","


def check_size(body: bytes, limit: int, argument: str) -> bytes:
    """``body`` if ``limit`` is 0 or it is no longer than ``limit`` bytes."""
    if limit and len(body) > limit:
        raise InvalidArgument(
            argument, f"is {len(body):,} bytes as stored, over max_message_bytes={limit:,}"
        )
    return body


def usage_tag(usage: Usage | None) -> bytes:
    """What follows a message's token count in its :func:`message_tag`: ``/`` and its usage as
    ``input:output:requests`` (ASCII), or nothing (no usage). The scripts that append add it
    to the session's.
    """
    if usage is None:
        return b""
    return b"/%d:%d:%d" % (usage.input_tokens, usage.output_tokens, usage.requests)


def message_tag(msg: Message, tokens: int | None = None) -> bytes:
    """What a script takes for ``msg`` beside its stored form: its id digest, then its token
    count as stored (its own, else ``tokens``, the count :func:`stored_form` gave it; none:
    0), then its :func:`usage_tag`. The scripts keep the sums of the counts (``lua/_prelude.lua``,
    Token sums).
    """
    count = msg.tokens
    if count is None:
        count = tokens or 0
    tag = message_digest(msg.id) + b"%d" % count
    usage = msg.usage
    return tag if usage is None else tag + usage_tag(usage)


SUM_SPAN = 16
"""Entries per token-sums field of a list's ids hash (``lua/_prelude.lua``, Token sums)."""
SUM_LIMIT = 999_999_999_999_999
"""The largest token sum the scripts keep (exact in Lua's numbers): past it a list's sums
are unknown."""


def token_sums(counts: Sequence[int]) -> tuple[list[bytes], int] | None:
    """The token sums of a new list whose messages have ``counts``, as the scripts write them
    (``lua/_prelude.lua``, Token sums; offset 0): field/value pairs for its ids hash (entry i:
    the counts through message i), and the counts' total; None when the total is past
    :data:`SUM_LIMIT` (the sums unknown).
    """
    pairs: list[bytes] = []
    total = 0
    for start in range(0, len(counts), SUM_SPAN):
        entries = []
        for count in counts[start : start + SUM_SPAN]:
            total += count
            entries.append(b"%16d" % total)
        pairs += (b"s%d" % (start // SUM_SPAN), b"".join(entries))
    return None if total > SUM_LIMIT else (pairs, total)


def message_args(
    messages: Sequence[Message],
    argument: str,
    limit: int = 0,
    count: TokenCounter | None = None,
    counts: list[int | None] | None = None,
) -> list[bytes]:
    """Tag/JSON pairs for a script's ARGV (a :func:`message_tag` each); duplicate ids in one
    call are refused, and so is a message longer than ``limit`` bytes as stored (0 = no
    limit). A message without ``tokens`` is stored with ``count``'s (:func:`stored_form`),
    which ``counts`` (a list) is given in order (None for one not counted). See
    :func:`seal_pairs`.
    """
    out: list[bytes] = []
    seen: set[str] = set()
    for i, msg in enumerate(messages):
        if not isinstance(msg, Message):
            raise InvalidArgument(
                f"{argument}[{i}]", f"must be a Message, not {type(msg).__name__}"
            )
        if msg.id in seen:
            raise InvalidArgument(f"{argument}[{i}]", f"message id {msg.id!r} appears twice")
        seen.add(msg.id)
        where = f"{argument}[{i}]"
        body, _, tokens = stored_form(msg, where, count)
        out += (message_tag(msg, tokens), check_size(body, limit, where))
        if counts is not None:
            counts.append(tokens)
    return out


def seal_pairs(
    pairs: list[bytes],
    messages: Sequence[Message],
    sealer: Sealer | None,
    argument: str,
    limit: int = 0,
) -> list[bytes]:
    """``pairs`` (from :func:`message_args`) with each JSON sealed by ``sealer``; ``pairs``
    itself without one. The sealed form is held to ``limit`` too.
    """
    if sealer is None:
        return pairs
    out = list(pairs)
    for i, msg in enumerate(messages):
        sealed = sealer.message(msg.id, pairs[2 * i + 1])
        out[2 * i + 1] = check_size(sealed, limit, f"{argument}[{i}]")
    return out


def decode_messages(
    key: str, items: Sequence[bytes], opener: Opener | None = None, *, first: int = 0
) -> list[Message]:
    """Stored messages back into models, in order; :class:`CorruptData` on anything foreign
    (naming it by its place in the read, the first of ``items`` at ``first``).

    With ``opener`` (a store with a passphrase), every element must be one the session's key
    sealed (:class:`TamperDetected` otherwise, :class:`SessionNotEncrypted` for a session in
    cleartext), and an element whose id came before is dropped and logged (a sealed element
    copied within its session); without, a sealed element raises :class:`PassphraseRequired`.
    """
    if opener is not None:
        if not opener.sealed:
            raise SessionNotEncrypted(key)
        if not items:
            return []
        items = [opener.message(m, key, i) for i, m in enumerate(items, first)]
        return _distinct(key, _decode_plain(key, items, first))
    if not items:
        return []
    return _decode_plain(key, items, first)


def distinct_from(key: str, held: Callable[[str], bool], messages: list[Message]) -> list[Message]:
    """``messages`` without those whose id ``held`` says is there already (each logged; see
    :func:`_distinct`).
    """
    out = []
    for msg in messages:
        if held(msg.id):
            log_bad_record(
                "a sealed session", TamperDetected(key, f"a message repeats id {msg.id!r}")
            )
            continue
        out.append(msg)
    return out


def _distinct(key: str, messages: list[Message]) -> list[Message]:
    """``messages`` without the repeats of an id (each logged): in a sealed session an id
    twice is a sealed element copied by a writer without the key; the first one stays.
    """
    seen: set[str] = set()
    out: list[Message] = []
    for i, msg in enumerate(messages):
        if msg.id in seen:
            log_bad_record(
                "a sealed session", TamperDetected(key, f"message {i} repeats id {msg.id!r}")
            )
            continue
        seen.add(msg.id)
        out.append(msg)
    return out


def decode_sized(key: str, items: Sequence[bytes], first: int = 0) -> tuple[list[Message], int]:
    """:func:`decode_messages` of cleartext ``items`` (no opener), and their size in bytes."""
    if not items:
        return [], 0
    decode = _fast.DECODE
    if decode is not None:
        try:
            decoded, left, size = decode(items)
        except (ValueError, TypeError):
            pass
        else:
            if not left:
                return decoded, size
    return _decode_plain(key, items, first), sum(map(len, items))


def _decode_plain(key: str, items: Sequence[bytes], first: int = 0) -> list[Message]:
    decode = _fast.DECODE
    try:
        if decode is not None:
            # The C decoder builds the models of the elements in the encoder's own form; an
            # element of any other form (None) is validated here, the whole read by the slow
            # path below when one is not a message.
            decoded, left, _ = decode(items)
            if left:
                others = _validated([items[i] for i in left])
                for i, other in zip(left, others, strict=True):
                    decoded[i] = other
            return decoded
        # Each element parsed on its own (an element is exactly one message) by the validator
        # itself: C calls only. Joining the elements into one JSON array parsed once costs more
        # (a fresh buffer of the whole history).
        return _validated(items)
    except (ValidationError, ValueError, TypeError):
        pass
    # The slow path, element by element: it names the element that is not a message, and it
    # still reads one whose timestamp is naive (taken as UTC).
    messages: list[Message] = []
    for i, raw in enumerate(items, first):
        if isinstance(raw, memoryview):
            raw = raw.tobytes()
        if not isinstance(raw, bytes | bytearray | str):
            what = f"a {type(raw).__name__}, not bytes"
            raise CorruptData(key, f"message {i} is not a stored message: {what}")
        if crypto.split_element(raw) is not None:
            raise PassphraseRequired(key)
        try:
            lenient = _LENIENT.validate_json(raw)
        except (ValidationError, ValueError, TypeError) as exc:
            raise CorruptData(key, f"message {i} is not a stored message: {_brief(exc)}") from None
        messages.append(_as_message(lenient))
    return messages


def _validated(items: Sequence[bytes]) -> list[Message]:
    """Stored elements validated: as the decode-only twin re-classed to ``Message`` (the fast
    path's ``reclass``), else as ``Message`` itself.
    """
    if _fast.RECLASS:
        stored: list[Any] = list(map(_STORED, items))
        _fast.reclass(stored, Message)
        return stored
    messages = list(map(_MESSAGE, items))
    for message in messages:
        if not _REQUIRED <= message.model_fields_set:
            raise ValueError("a stored message lacks its id or timestamp")
    return messages


def _as_message(lenient: _LenientStoredMessage) -> Message:
    """The slow path's twin as a ``Message`` (re-classed, or built from its fields)."""
    if _fast.RECLASS:
        _fast.reclass([lenient], Message)
        return lenient
    return Message.model_construct(lenient.model_fields_set, **vars(lenient))


def _brief(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        err = exc.errors(include_url=False)[0]
        where = ".".join(str(p) for p in err["loc"]) or "value"
        return f"{where}: {err['msg']}"
    return str(exc).splitlines()[0]


def to_datetime(us: int) -> datetime:
    """Microseconds since the epoch as an aware UTC datetime (exact)."""
    return EPOCH + timedelta(microseconds=us)


def _text(key: str, raw: bytes, what: str, name: bytes | str | None = None) -> str:
    """``raw`` as UTF-8, else CorruptData naming ``what`` (and ``name``: formatted only then)."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        if name is not None:
            what = f"{what} {name!r}"
        raise CorruptData(key, f"{what} is not UTF-8") from None


_STAMPS: dict[bytes, datetime] = {}
"""Timestamps as read lately (raw -> datetime; datetimes are immutable): a hot session's
``created_at`` is read on every read of it. Cleared when it holds 4,096."""


def _stamp(key: str, raw: bytes | None, what: str) -> datetime:
    """A meta field of microseconds since the epoch as an aware UTC datetime."""
    stamp = _STAMPS.get(raw)  # type: ignore[arg-type]
    if stamp is None:
        stamp = to_datetime(_micros(key, raw, what))
        if len(_STAMPS) >= 4096:
            _STAMPS.clear()
        _STAMPS[raw] = stamp  # type: ignore[index]
    return stamp


def _micros(key: str, raw: bytes | None, what: str) -> int:
    try:
        return int(raw)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise CorruptData(key, f"{what} is missing or not a timestamp") from None


def meta_args(session: Session, sealer: Sealer | None = None) -> list[bytes]:
    """Field/value pairs of the meta hash for a new session, but for what the script writes
    itself (timestamps, list positions, the schema version :data:`SCHEMA_VERSION` and the key
    id ``k`` of a sealed session).
    """
    out = [b"key", text_arg(session.key, "session.key")]
    if session.branch_of:  # cleartext, as the key is (a sealed session's ids are too)
        out += (b"bo", text_arg(session.branch_of, "session.branch_of"))
        out += (b"ba", text_arg(session.branch_at, "session.branch_at"))
    usage = history_usage(session.history)
    if usage.input_tokens or usage.output_tokens or usage.requests:  # what its history cost
        out += usage_fields(usage)
    if session.max_usage_tokens is not None:
        out += (b"ub", b"%d" % session.max_usage_tokens)
    return (
        out
        + scalar_args(session, skip_empty=False, sealer=sealer)
        + metadata_args(session.metadata, sealer=sealer)
    )


USAGE_FIELDS = (b"ui", b"uo", b"ur")
"""The hash fields of a usage's figures (a session's or a child's meta hash, a prefix's
totals): input tokens, output tokens, requests."""


def history_usage(history: Iterable[Message]) -> Usage:
    """The sum of the messages' usage: what a session made with them has spent."""
    return sum((m.usage for m in history if m.usage is not None), Usage())


def usage_fields(usage: Usage) -> list[bytes]:
    """The meta hash's usage fields (``ui``, ``uo``, ``ur``: the sums a session's scripts keep)
    holding ``usage``.
    """
    figures = (usage.input_tokens, usage.output_tokens, usage.requests)
    return [x for name, n in zip(USAGE_FIELDS, figures, strict=True) for x in (name, b"%d" % n)]


_NONE3 = [None, None, None]
_NO_USAGE = Usage()
"""The usage of a hash without usage fields (most sessions' when nothing was spent): one
immutable instance for every read, not a model built per read."""


def decode_usage(key: str, get: Callable[[bytes], bytes | None]) -> Usage:
    """A usage from a hash's :data:`USAGE_FIELDS` (absent: 0)."""
    raw = [get(f) for f in USAGE_FIELDS]
    if raw == _NONE3:
        return _NO_USAGE
    try:
        values = [int(v or b"0") for v in raw]
    except ValueError:
        raise CorruptData(key, "its usage fields are not whole numbers") from None
    if min(values) < 0:
        raise CorruptData(key, "its usage fields are negative")
    return Usage.total(*values)


def scalar_args(session: Session, *, skip_empty: bool, sealer: Sealer | None = None) -> list[bytes]:
    """Field/value pairs of the session's scalar fields (the empty ones too, or not), sealed
    by ``sealer`` when it is given (an empty value stays empty).
    """
    out: list[bytes] = []
    for name in SCALAR_FIELDS:
        value = getattr(session, name)
        if value or not skip_empty:
            raw = text_arg(value, f"session.{name}")
            out += (name.encode(), raw if sealer is None else sealer.scalar(name, raw))
    return out


def metadata_args(
    metadata: Mapping[str, str], argument: str = "session.metadata", sealer: Sealer | None = None
) -> list[bytes]:
    """Field/value pairs of the meta hash for metadata entries: ``m:<name>`` in cleartext,
    ``e:<name>`` sealed when ``sealer`` is given.
    """
    if not isinstance(metadata, Mapping):
        raise InvalidArgument(argument, f"must be a mapping, not {type(metadata).__name__}")
    out: list[bytes] = []
    for name, value in metadata.items():
        where = f"{argument}[{name!r}]"
        field, text = text_arg(name, where), text_arg(value, where)
        if sealer is None:
            out += (METADATA_PREFIX.encode() + field, text)
        else:
            out += (SEALED_METADATA_PREFIX.encode() + field, sealer.meta(name, text))
    return out


def metadata_fields(names: Iterable[str], argument: str = "delete") -> list[bytes]:
    """The meta-hash fields that may hold each named entry (cleartext and sealed)."""
    out: list[bytes] = []
    for name in names:
        field = text_arg(name, argument)
        out += (METADATA_PREFIX.encode() + field, SEALED_METADATA_PREFIX.encode() + field)
    return out


def _fields(key: str, meta: Mapping[bytes, bytes] | Sequence[bytes]) -> dict[str, bytes]:
    """A hash's fields by name, from HGETALL's mapping or a script's flat field/value list."""
    pairs = meta.items() if isinstance(meta, Mapping) else zip(meta[::2], meta[1::2], strict=True)
    return {_text(key, bytes(f), "a field name"): bytes(v) for f, v in pairs}


_SCALAR_NAMES = tuple(n.encode() for n in SCALAR_FIELDS)
_M, _E = METADATA_PREFIX.encode(), SEALED_METADATA_PREFIX.encode()
_SESSION_FIELDS = frozenset(Session.model_fields)
_BRANCH_FIELDS = frozenset({"branch_of", "branch_at"})


def raw_fields(key: str, meta: Mapping[bytes, bytes] | Sequence[bytes]) -> dict[bytes, bytes]:
    """A hash's fields by name (bytes), from HGETALL's mapping or a script's flat list."""
    if (
        type(meta) is dict
        and _BYTES_ONLY.issuperset(map(type, meta))
        and _BYTES_ONLY.issuperset(map(type, meta.values()))
    ):
        return meta  # HGETALL's reply as RESP3 brings it: read, never changed here
    if type(meta) is not list and isinstance(meta, Mapping):
        return {bytes(f): bytes(v) for f, v in meta.items()}
    if len(meta) % 2:
        raise CorruptData(key, "its meta hash reply has an odd number of elements")
    if not _BYTES_ONLY.issuperset(map(type, meta)):  # C calls only: no Python frame per field
        meta = [bytes(x) for x in meta]
    it = iter(meta)
    return dict(zip(it, it))  # noqa: B905  pairs of one iterator; length checked above


_BYTES_ONLY = frozenset({bytes})
_NOT_METADATA = frozenset(
    (*_SCALAR_NAMES, b"v", b"key", b"created_at", b"updated_at", b"token", b"g", b"h", b"n",
     b"x", b"tg", b"mb", b"k", b"dk", b"kc", b"ended_at", b"ct", b"bo", b"ba", b"ui", b"uo",
     b"ur", b"ub")
)  # fmt: skip
"""Fields of a session's meta hash that are not metadata entries (``m:`` / ``e:`` fields; any
other field is looked at for its prefix as well)."""


def decode_session(
    key: str,
    meta: Mapping[bytes, bytes] | Sequence[bytes],
    items: Sequence[bytes],
    opener: Opener | None = None,
    *,
    history: list[Message] | None = None,
    context_tokens: int | None = None,
) -> Session:
    """A session from its meta hash and its stored messages (or its ``history`` decoded
    already); with ``opener`` (a store with a passphrase) everything a sealed session holds
    must open (see :func:`decode_messages`), without, sealed parts raise
    :class:`PassphraseRequired`. ``context_tokens``: the tokens the session holds, as its
    read script found them (None: unknown).
    """
    # Every read of a session decodes its meta hash (the read cache holds messages, not the
    # hash, which every write changes): fields are looked up as bytes and only the ones used
    # are decoded, and the model is built as model_construct builds it, without its per-call
    # walk over the fields, which costs more than the decoding of the fields used.
    fields = raw_fields(key, meta)
    get = fields.get
    version = get(b"v")
    if version != SCHEMA_VERSION:
        raise CorruptData(key, f"unknown meta schema version {version!r}")
    if opener is not None and not opener.sealed:
        raise SessionNotEncrypted(key)
    scalars = [get(n, b"") for n in _SCALAR_NAMES]
    if opener is not None:
        scalars = [opener.scalar(n, v, key) for n, v in zip(SCALAR_FIELDS, scalars, strict=True)]
    elif get(b"k") and any(map(crypto.is_sealed_scalar, scalars)):  # sealed scalars, no passphrase
        raise PassphraseRequired(key)
    try:
        texts = [v.decode("utf-8") for v in scalars]
    except UnicodeDecodeError:  # name the field
        texts = [_text(key, v, n) for n, v in zip(SCALAR_FIELDS, scalars, strict=True)]
    metadata: dict[str, str] = {}
    for f in filterfalse(_NOT_METADATA.__contains__, fields):  # in the hash's order
        if f[:2] == _M:
            name = _text(key, f[2:], "a field name")
            if opener is not None:
                opener.cleartext_meta(name, key)
            metadata[name] = _text(key, fields[f], "metadata", name)
        elif f[:2] == _E:
            if opener is None:
                raise PassphraseRequired(key)
            name = _text(key, f[2:], "a field name")
            metadata[name] = _text(key, opener.meta(name, fields[f], key), "metadata", name)
    values = {
        "key": key,
        "agent_id": texts[0],
        "channel_type": texts[1],
        "channel_id": texts[2],
        "model": texts[3],
        "history": decode_messages(key, items, opener) if history is None else history,
        "metadata": metadata,
        "created_at": _stamp(key, get(b"created_at"), "created_at"),
        "updated_at": _stamp(key, get(b"updated_at"), "updated_at"),
        "branch_of": "",
        "branch_at": "",
        "usage": decode_usage(key, get),
        "max_usage_tokens": None,
        "context_tokens": context_tokens,
    }
    fields_set = set(_SESSION_FIELDS)  # as a model built without what it lacks
    if values["usage"] is _NO_USAGE:
        fields_set.discard("usage")  # nothing spent: the default
    if values["context_tokens"] is None:
        fields_set.discard("context_tokens")
    budget = get(b"ub")
    if budget is None:
        fields_set.discard("max_usage_tokens")
    else:
        try:
            values["max_usage_tokens"] = int(budget)
        except ValueError:
            raise CorruptData(key, "its max_usage_tokens is not a whole number") from None
    branch_of = get(b"bo")
    if branch_of is None:
        fields_set -= _BRANCH_FIELDS
    else:
        values["branch_of"] = _text(key, branch_of, "branch_of")
        values["branch_at"] = _text(key, get(b"ba", b""), "branch_at")
    ended = get(b"ended_at")
    if ended is None:
        values["ended_at"] = None
        fields_set.discard("ended_at")
    else:
        values["ended_at"] = _stamp(key, ended, "ended_at")
    return _constructed(Session, values, fields_set)


def scored(reply: Sequence[Any]) -> list[tuple[Any, Any]]:
    """A ``ZREVRANGE … WITHSCORES`` reply as (member, score) pairs, whether redis-py paired
    it (its callback for the command, 7.1 and later) or left it flat (earlier releases).
    """
    if reply and not isinstance(reply[0], list | tuple):
        return list(zip(reply[::2], reply[1::2], strict=True))
    return [(pair[0], pair[1]) for pair in reply]


def decode_summary(key: str, created: bytes | None, updated: bytes | None) -> SessionSummary:
    """A ``list_sessions`` row from the meta hash's two timestamps."""
    return SessionSummary(
        key=key,
        created_at=to_datetime(_micros(key, created, "created_at")),
        updated_at=to_datetime(_micros(key, updated, "updated_at")),
    )


def decode_key(raw: bytes) -> str:
    """An index member back into the session key it is."""
    return _text(raw.decode("utf-8", "replace"), raw, "an index member")


_skipped: ContextVar[list[CorruptData] | None] = ContextVar("redis_session_skipped", default=None)


def log_bad_record(where: str, exc: CorruptData) -> None:
    """Note a damaged or foreign record that an operation skipped (one bad record is one bad
    record): logged at warning, or, inside a :func:`skipped_records` block (whose owner
    reports them), handed to that block and logged at debug.
    """
    collected = _skipped.get()
    if collected is None:
        log.warning("redis_session: %s skipped a damaged record: %s", where, exc)
    else:
        log.debug("redis_session: %s skipped a damaged record: %s", where, exc)
        collected.append(exc)


@contextmanager
def skipped_records() -> Iterator[list[CorruptData]]:
    """A block that collects the records the operations inside it skipped (see
    :func:`log_bad_record`), in order: what an operator command reports by name.
    """
    collected: list[CorruptData] = []
    token = _skipped.set(collected)
    try:
        yield collected
    finally:
        _skipped.reset(token)


def is_wrong_type(exc: Exception) -> bool:
    """Whether a command failed because its key holds another type (redis-py has no class for
    it: Redis says so in the error's first word).
    """
    return str(exc).startswith("WRONGTYPE")


def type_name(reply: Any) -> str:
    """A ``TYPE`` reply as text (redis-py may decode it to a str, or not)."""
    return reply.decode() if isinstance(reply, bytes) else str(reply)


def index_member(raw: bytes) -> str | None:
    """The session key an index member names, or None (logged) for one that is not UTF-8."""
    try:
        return bytes(raw).decode("utf-8")
    except UnicodeDecodeError:
        log_bad_record("list_sessions", CorruptData(repr(bytes(raw)), "index member is not UTF-8"))
        return None


def member_key(raw: bytes) -> str:
    """A ``kids`` member as the child key it names; one that is not UTF-8 (damaged) keeps its
    bytes as surrogate escapes, so that its key names can still be sent (:func:`wire`).
    """
    return bytes(raw).decode("utf-8", "surrogateescape")


def wire(name: str) -> str | bytes:
    """A key name as sent to Redis: itself, or its bytes when it holds surrogate escapes."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return name.encode("utf-8", "surrogateescape")
    return name


def is_damaged(child_key: str) -> bool:
    """Whether a child key read from ``kids`` was not UTF-8 (see :func:`member_key`)."""
    return isinstance(wire(child_key), bytes)


def metadata_only(pairs: Sequence[bytes]) -> list[bytes]:
    """The metadata entries (``m:`` / ``e:`` fields and their values) among meta-hash pairs."""
    out: list[bytes] = []
    for field, value in zip(pairs[::2], pairs[1::2], strict=True):
        if field[:2] in (b"m:", b"e:"):
            out += (field, value)
    return out


_CONFIG = TypeAdapter(ChildSessionConfig)


def encode_config(config: ChildSessionConfig) -> bytes:
    """A child's config as stored in its hash."""
    return _CONFIG.dump_json(config)


def child_elements(pairs: list[bytes]) -> list[bytes]:
    """Tag/element pairs for a child script: a child's list element is digest + element (the
    tag's first 8 bytes).
    """
    out = list(pairs)
    for i in range(0, len(out), 2):
        out[i + 1] = out[i][:8] + out[i + 1]
    return out


def decode_child(
    key: str,
    meta: Mapping[bytes, bytes] | Sequence[bytes],
    items: Sequence[bytes],
    opener: Opener | None = None,
    *,
    history: list[Message] | None = None,
    context_tokens: int | None = None,
) -> ChildSession:
    """A child session from its hash and its stored elements (digest + element); sealed
    elements are bound to the parent session, whose ``opener`` opens them.
    """
    fields = _fields(key, meta)
    if fields.get("v") != SCHEMA_VERSION:
        raise CorruptData(key, f"unknown child schema version {fields.get('v')!r}")
    try:
        config = _CONFIG.validate_json(fields.get("config", b""))
    except ValidationError as exc:
        raise CorruptData(key, f"child config: {_brief(exc)}") from None
    merged = fields.get("merged_at")
    parent = _text(key, fields.get("parent", b""), "parent")
    return ChildSession.model_construct(
        key=key,
        parent_key=parent,
        agent_name=_text(key, fields.get("agent", b""), "agent"),
        history=(
            decode_messages(key, [bytes(item[8:]) for item in items], opener)
            if history is None
            else history
        ),
        config=config,
        created_at=to_datetime(_micros(key, fields.get("created_at"), "created_at")),
        merged_at=None if merged is None else to_datetime(_micros(key, merged, "merged_at")),
        forked_after=fork_point(key, fields.get("fp", b"")),
        usage=decode_usage(key, lambda name: fields.get(name.decode())),
        context_tokens=context_tokens,
    )


def fork_point(key: str, prefix: bytes) -> str:
    """The message id in a child's ``fp`` field (``{"id":"<id>",``), ``""`` for none."""
    if not prefix:
        return ""
    if not (prefix.startswith(b'{"id":"') and prefix.endswith(b'",')):
        raise CorruptData(key, "its fork point is not a message id")
    return _text(key, prefix[7:-2], "its fork point")
