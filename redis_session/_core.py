"""The sans-I/O core: every store operation as a generator of Redis requests.

An operation validates its arguments, yields :class:`ScriptCall` or :class:`Commands` requests,
receives each reply by ``send`` and returns its result (or raises). ``RedisStore`` and
``AsyncRedisStore`` only drive these generators, one with blocking calls and one with ``await``,
so the two cannot drift in behaviour.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

from . import codec
from .errors import InvalidArgument, ItemNotFound
from .keys import KeySchema, SessionKeys, check_key
from .models import Message, MessageRole, Session, SessionSummary
from .status import Ctx, check

T = TypeVar("T")

TIMEOUT_NOTICE = "[This response was interrupted due to a timeout]"
SECRET_PREFIX = "s:"
DEFAULT_EXPIRED_GRACE = timedelta(days=1)


@dataclass(frozen=True, slots=True)
class ScriptCall:
    """Run script ``name`` (EVALSHA, reloaded on NOSCRIPT) with these KEYS and ARGV."""

    name: str
    keys: Sequence[str]
    args: Sequence[bytes | str | int]


@dataclass(frozen=True, slots=True)
class Commands:
    """Send plain commands in one pipeline (no transaction); the reply is their replies."""

    commands: Sequence[tuple[Any, ...]]


Request = ScriptCall | Commands
Op = Generator[Request, Any, T]


def duration_ms(value: object, argument: str, *, allow_zero: bool = False) -> int:
    """Seconds (int/float) or a timedelta as whole milliseconds, validated."""
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    else:
        raise InvalidArgument(
            argument, f"must be seconds or a timedelta, not {type(value).__name__}"
        )
    ms = round(seconds * 1000)
    if ms < 0 or (ms == 0 and not allow_zero) or seconds != seconds:
        raise InvalidArgument(argument, f"must be > 0, got {value!r}")
    return ms


def _non_negative_int(value: object, argument: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidArgument(argument, f"must be an int, not {type(value).__name__}")
    if value < 0:
        raise InvalidArgument(argument, f"must be >= 0, got {value}")
    return value


def _name(value: object, argument: str = "name") -> str:
    if not isinstance(value, str) or not value:
        raise InvalidArgument(argument, "must be a non-empty str")
    return value


def _bytes(value: object, argument: str) -> bytes:
    if not isinstance(value, bytes | bytearray | memoryview):
        raise InvalidArgument(argument, f"must be bytes, not {type(value).__name__}")
    return bytes(value)


def _message(msg: object, argument: str = "msg") -> Message:
    if not isinstance(msg, Message):
        raise InvalidArgument(argument, f"must be a Message, not {type(msg).__name__}")
    return msg


def _session(session: object) -> Session:
    if not isinstance(session, Session):
        raise InvalidArgument("session", f"must be a Session, not {type(session).__name__}")
    check_key(session.key, "session.key")
    return session


class Core:
    """Options and operations shared by the sync and async stores."""

    def __init__(
        self,
        *,
        prefix: str = "rs:",
        ttl: float | timedelta | None = None,
        max_history_turns: int = 0,
        expired_grace: float | timedelta = DEFAULT_EXPIRED_GRACE,
    ) -> None:
        self.schema = KeySchema(prefix)
        self.ttl_ms = 0 if ttl is None else duration_ms(ttl, "ttl")
        self.grace_ms = duration_ms(expired_grace, "expired_grace", allow_zero=True)
        self.max_history_turns = _non_negative_int(max_history_turns, "max_history_turns")

    @property
    def ttl(self) -> timedelta | None:
        """The sliding TTL of every session, or None when sessions never expire."""
        return timedelta(milliseconds=self.ttl_ms) if self.ttl_ms else None

    def _keys(self, key: str) -> tuple[SessionKeys, list[str]]:
        sk = self.schema.session(key)
        return sk, [sk.meta, sk.msgs, sk.ids, self.schema.index_of(key)]

    def _ttl_args(self) -> list[bytes | str | int]:
        return [self.ttl_ms, self.grace_ms]

    # -- sessions ---------------------------------------------------------------------------

    def create(self, session: Session) -> Op[Session]:
        session = _session(session)
        key = session.key
        _, keys = self._keys(key)
        meta = codec.meta_args(session)
        args = [*self._ttl_args(), key, len(meta) // 2, *meta]
        args += codec.message_args(session.history, "session.history")
        reply = check((yield ScriptCall("create", keys, args)), Ctx(key, keys))
        now = codec.to_datetime(int(reply[1]))
        return session.model_copy(update={"created_at": now, "updated_at": now})

    def get(self, key: str) -> Op[Session]:
        key = check_key(key)
        _, keys = self._keys(key)
        reply = check((yield ScriptCall("get", keys[:3], ())), Ctx(key, keys))
        return codec.decode_session(key, reply[1], reply[2])

    def get_history(self, key: str, last: int | None = None) -> Op[list[Message]]:
        key = check_key(key)
        n = 0 if last is None else _non_negative_int(last, "last")
        if last is not None and n == 0:
            raise InvalidArgument("last", "must be > 0 (or None for the whole history)")
        _, keys = self._keys(key)
        reply = check((yield ScriptCall("get_history", keys[:3], (n,))), Ctx(key, keys))
        return codec.decode_messages(key, reply[1])

    def update(self, session: Session) -> Op[None]:
        session = _session(session)
        key = session.key
        _, keys = self._keys(key)
        scalars: list[str] = []
        for name in codec.SCALAR_FIELDS:
            value = getattr(session, name)
            if value:
                scalars += (name, value)
        meta = codec.metadata_args(session.metadata, "session.metadata")
        args = [*self._ttl_args(), key, len(scalars) // 2, *scalars, *meta]
        check((yield ScriptCall("update", keys, args)), Ctx(key, keys))

    def update_metadata(
        self, key: str, set: Mapping[str, str] | None = None, delete: Iterable[str] = ()
    ) -> Op[None]:
        key = check_key(key)
        if isinstance(delete, str):
            raise InvalidArgument("delete", "must be an iterable of names, not a single str")
        gone = [codec.METADATA_PREFIX + _name(n, "delete") for n in delete]
        put = codec.metadata_args(set or {}, "set")
        _, keys = self._keys(key)
        args = [*self._ttl_args(), key, len(gone), *gone, *put]
        check((yield ScriptCall("update_metadata", keys, args)), Ctx(key, keys))

    def delete(self, key: str) -> Op[bool]:
        key = check_key(key)
        _, keys = self._keys(key)
        reply = check((yield ScriptCall("delete", keys, (key,))), Ctx(key, keys))
        return bool(reply[1])

    def append_messages(self, key: str, messages: Sequence[Message]) -> Op[int]:
        key = check_key(key)
        if isinstance(messages, Message) or not isinstance(messages, Sequence):
            raise InvalidArgument("messages", "must be a sequence of Message")
        if not messages:
            return 0
        _, keys = self._keys(key)
        args = [*self._ttl_args(), self.max_history_turns, key]
        args += codec.message_args(messages, "messages")
        reply = check((yield ScriptCall("append_message", keys, args)), Ctx(key, keys))
        return int(reply[1])

    def append_message(self, key: str, msg: Message) -> Op[bool]:
        added = yield from self.append_messages(key, [_message(msg)])
        return added == 1

    def annotate_timeout(self, key: str, partial: str) -> Op[bool]:
        if not isinstance(partial, str):
            raise InvalidArgument("partial", f"must be a str, not {type(partial).__name__}")
        msg = Message(role=MessageRole.ASSISTANT, content=TIMEOUT_NOTICE)
        return (yield from self.append_message(key, msg))

    def compact_messages(
        self, key: str, up_to_index: int, summary: str, *, expect_id: str | None = None
    ) -> Op[int]:
        key = check_key(key)
        index = _non_negative_int(up_to_index, "up_to_index")
        if not isinstance(summary, str):
            raise InvalidArgument("summary", f"must be a str, not {type(summary).__name__}")
        if expect_id is not None and not isinstance(expect_id, str):
            raise InvalidArgument("expect_id", "must be a str or None")
        msg = Message(role=MessageRole.SYSTEM, content="[Compacted Summary]\n" + summary)
        expect = codec.id_prefix(expect_id) if expect_id else b""
        _, keys = self._keys(key)
        args = [*self._ttl_args(), key, index, *codec.message_args([msg], "summary"), expect]
        ctx = Ctx(key, keys, index=index, expect_id=expect_id or "")
        reply = check((yield ScriptCall("compact_messages", keys, args)), ctx)
        return int(reply[1])

    def list_sessions(self, limit: int | None = None, offset: int = 0) -> Op[list[SessionSummary]]:
        count = -1 if limit is None else _non_negative_int(limit, "limit")
        first = _non_negative_int(offset, "offset")
        rows: list[tuple[str, float]] = []
        for index in self.schema.indexes():
            reply = check(
                (yield ScriptCall("list_sessions", [index], (self.ttl_ms, first, count))),
                Ctx(name=index, keys=[index]),
            )
            flat = reply[1]
            rows += [
                (codec.decode_key(flat[i]), float(flat[i + 1])) for i in range(0, len(flat), 2)
            ]
        if not rows:
            return []
        metas = [self.schema.session(k).meta for k, _ in rows]
        found = yield Commands([("HMGET", m, "created_at", "updated_at") for m in metas])
        out = []
        for (key, _), (created, updated) in zip(rows, found, strict=True):
            if created is not None:
                out.append(codec.decode_summary(key, created, updated))
        return out

    # -- salts, checksums, secrets ---------------------------------------------------------

    def _get_item(self, hash_key: str, field: str, kind: str, name: str) -> Op[bytes]:
        (value,) = yield Commands([("HGET", hash_key, field)])
        if value is None:
            raise ItemNotFound(kind, name)
        return bytes(value)

    def get_salt(self, name: str) -> Op[bytes]:
        name = _name(name)
        return (yield from self._get_item(self.schema.salts, name, "salt", name))

    def set_salt(self, name: str, salt: bytes) -> Op[None]:
        name = _name(name)
        yield Commands([("HSET", self.schema.salts, name, _bytes(salt, "salt"))])

    def get_checksum(self, name: str) -> Op[bytes]:
        name = _name(name)
        return (yield from self._get_item(self.schema.checksums, name, "checksum", name))

    def set_checksum(self, name: str, checksum: bytes) -> Op[None]:
        name = _name(name)
        keys = [self.schema.salts, self.schema.checksums]
        args = (name, _bytes(checksum, "checksum"))
        check(
            (yield ScriptCall("set_checksum", keys, args)), Ctx(keys=keys, kind="salt", name=name)
        )

    def get_secret(self, name: str) -> Op[bytes]:
        name = _name(name)
        return (
            yield from self._get_item(self.schema.secrets, SECRET_PREFIX + name, "secret", name)
        )

    def set_secret(self, name: str, value: bytes) -> Op[None]:
        name = _name(name)
        keys = [self.schema.secrets]
        args = (SECRET_PREFIX + name, _bytes(value, "value"))
        check((yield ScriptCall("set_secret", keys, args)), Ctx(keys=keys, name=name))

    def delete_secret(self, name: str) -> Op[bool]:
        name = _name(name)
        keys = [self.schema.secrets]
        reply = check(
            (yield ScriptCall("set_secret", keys, (SECRET_PREFIX + name,))),
            Ctx(keys=keys, name=name),
        )
        return bool(reply[1])

    def list_secrets(self) -> Op[list[str]]:
        (fields,) = yield Commands([("HKEYS", self.schema.secrets)])
        names = [bytes(f).decode("utf-8", "replace") for f in fields]
        return sorted(n[len(SECRET_PREFIX) :] for n in names if n.startswith(SECRET_PREFIX))

    def migrate_secrets(
        self, reencrypt: Callable[[bytes], bytes], new_salt: bytes, new_checksum: bytes
    ) -> Op[int]:
        if not callable(reencrypt):
            raise InvalidArgument("reencrypt", "must be callable")
        salt = _bytes(new_salt, "new_salt")
        checksum = _bytes(new_checksum, "new_checksum")
        (flat,) = yield Commands([("HGETALL", self.schema.secrets)])
        version = bytes(flat.get(b"v", b""))
        pairs: list[bytes] = []
        for field, old in flat.items():
            if bytes(field).startswith(SECRET_PREFIX.encode()):
                pairs += (bytes(field), _bytes(reencrypt(bytes(old)), "reencrypt(...)"))
        keys = [self.schema.secrets, self.schema.salts, self.schema.checksums]
        reply = check(
            (yield ScriptCall("migrate_secrets", keys, (version, salt, checksum, *pairs))),
            Ctx(keys=keys, name="secrets"),
        )
        return int(reply[1])
