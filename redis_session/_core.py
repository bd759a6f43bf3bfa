"""The sans-I/O core: every store operation as a generator of Redis requests.

An operation validates its arguments, yields :class:`ScriptCall` or :class:`Commands` requests,
receives each reply by ``send`` and returns its result (or raises). ``RedisStore`` and
``AsyncRedisStore`` only drive these generators, one with blocking calls and one with ``await``,
so the two cannot drift in behaviour.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import timedelta
from typing import Any, TypeVar

from . import codec
from ._keyring import KeyringOps, RekeyProgress, RekeyReport
from ._requests import Commands, Compute, Emit, Op, Request, ScriptCall
from .crypto import DEFAULT_WORK, Keyring, Sealer
from .errors import (
    ChildNotFound,
    ConcurrentChange,
    CorruptData,
    InvalidArgument,
    ItemNotFound,
    PassphraseRequired,
    SessionExpired,
    SessionNotFound,
)
from .events import new_event
from .keys import ChildKeys, KeySchema, SessionKeys, check_key, parent_of
from .models import (
    ChildSession,
    ChildSessionConfig,
    LifecycleEventType,
    Message,
    MessageRole,
    Session,
    SessionSummary,
)
from .status import Ctx, Status, check

__all__ = [
    "Commands",
    "Compute",
    "Core",
    "Emit",
    "Op",
    "RekeyProgress",
    "RekeyReport",
    "Request",
    "ScriptCall",
]

T = TypeVar("T")

TIMEOUT_NOTICE = "[This response was interrupted due to a timeout]"
SECRET_PREFIX = "s:"
DEFAULT_EXPIRED_GRACE = timedelta(days=1)
DELETE_ATTEMPTS = 8
DEFAULT_MAX_MESSAGE_BYTES = 4 * 1024 * 1024
MAX_INT = 2**63 - 1  # Redis integers are signed 64-bit
KEY_CACHE = 4096  # sessions whose key names a store keeps at hand
SCAN_COUNT = 1000  # index entries a ZSCAN step looks at
_GLOB_SPECIAL = re.compile(r"[*?\[\]\\]")  # escaped in a MATCH pattern


def _token() -> str:
    return secrets.token_hex(8)


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
    if not 0 <= value <= MAX_INT:
        raise InvalidArgument(argument, f"must be >= 0 and < 2**63, got {value}")
    return value


def _name(value: object, argument: str = "name") -> str:
    if not isinstance(value, str) or not value:
        raise InvalidArgument(argument, "must be a non-empty str")
    codec.text_arg(value, argument)
    return value


def _bytes(value: object, argument: str) -> bytes:
    if not isinstance(value, bytes | bytearray | memoryview):
        raise InvalidArgument(argument, f"must be bytes, not {type(value).__name__}")
    return bytes(value)


def _message(msg: object, argument: str = "msg") -> Message:
    if not isinstance(msg, Message):
        raise InvalidArgument(argument, f"must be a Message, not {type(msg).__name__}")
    return msg


def _metadata_pairs(
    entries: Mapping[str, str], argument: str
) -> Callable[[Sealer | None], list[bytes]]:
    """Validate ``entries`` now, before anything is sealed; the function returned gives their
    meta-hash pairs for a sealer (None: the cleartext pairs, built once).
    """
    plain = codec.metadata_args(entries, argument)
    return lambda sealer: (
        plain if sealer is None else codec.metadata_args(entries, argument, sealer)
    )


def _no_foreign_types(key: str, *replies: tuple[str, object]) -> None:
    """Raise ``CorruptData`` for the first ``(redis key, reply)`` whose reply is an error.

    A command on a key that holds another type fails alone inside MULTI/EXEC or a pipeline.
    """
    for name, reply in replies:
        if isinstance(reply, Exception):
            raise CorruptData(key, f"Redis key {name!r} holds a foreign type")


def _session(session: object) -> Session:
    if not isinstance(session, Session):
        raise InvalidArgument("session", f"must be a Session, not {type(session).__name__}")
    check_key(session.key, "session.key")
    return session


class Core(KeyringOps):
    """Options and operations shared by the sync and async stores."""

    def __init__(
        self,
        *,
        prefix: str = "rs:",
        ttl: float | timedelta | None = None,
        max_history_turns: int = 0,
        expired_grace: float | timedelta = DEFAULT_EXPIRED_GRACE,
        publish_events: bool = True,
        cluster: bool = False,
        wait_replicas: int = 0,
        wait_timeout: float | timedelta = 1.0,
        failover_window: float | timedelta = 15.0,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        passphrase: str | bytes | None = None,
        kdf_work: int = DEFAULT_WORK,
    ) -> None:
        self.schema = KeySchema(prefix, cluster=cluster)
        self._key_cache: dict[str, tuple[SessionKeys, tuple[str, ...]]] = {}
        self._init_crypto(passphrase, kdf_work)
        self.channel = self.schema.events_channel if publish_events else ""
        self.ttl_ms = 0 if ttl is None else duration_ms(ttl, "ttl")
        self.grace_ms = duration_ms(expired_grace, "expired_grace", allow_zero=True)
        self.max_history_turns = _non_negative_int(max_history_turns, "max_history_turns")
        self.wait_replicas = _non_negative_int(wait_replicas, "wait_replicas")
        self.max_message_bytes = _non_negative_int(max_message_bytes, "max_message_bytes")
        self.wait_timeout_ms = duration_ms(wait_timeout, "wait_timeout")
        self.failover_window_ms = duration_ms(failover_window, "failover_window", allow_zero=True)

    @property
    def ttl(self) -> timedelta | None:
        """The sliding TTL of every session, or None when sessions never expire."""
        return timedelta(milliseconds=self.ttl_ms) if self.ttl_ms else None

    def _keys(self, key: str) -> tuple[SessionKeys, tuple[str, ...]]:
        """The key names of session ``key`` and the KEYS of its scripts (cached: hot path)."""
        known = self._key_cache.get(key)
        if known is None:
            sk = self.schema.session(key)
            known = sk, (sk.meta, sk.msgs, sk.ids, self.schema.index_of(key))
            if len(self._key_cache) >= KEY_CACHE:
                self._key_cache.clear()
            self._key_cache[key] = known
        return known

    def _ttl_args(self) -> list[bytes | str | int]:
        return [self.ttl_ms, self.grace_ms]

    # -- sessions ---------------------------------------------------------------------------

    def create(self, session: Session) -> Op[Session]:
        session = _session(session)
        key = session.key
        _, keys = self._keys(key)
        sealer = self._sealer(key)
        meta = codec.meta_args(session, sealer)
        event, payload = new_event(LifecycleEventType.CREATE, key)
        args = [*self._ttl_args(), key, _token(), self.channel, payload, len(meta) // 2, *meta]
        history = codec.message_args(session.history, "session.history", self.max_message_bytes)
        args += codec.seal_pairs(
            history, session.history, sealer, "session.history", self.max_message_bytes
        )
        reply = check((yield ScriptCall("create", keys, args)), Ctx(key, keys))
        if self.schema.cluster and int(reply[2]):
            # Not atomic with the script (another slot): a crash right here leaves this index
            # shard unlisted until repair_index(); the session itself is whole.
            yield Commands([("SADD", self.schema.index_registry, keys[3])])
        yield Emit(event)
        now = codec.to_datetime(int(reply[1]))
        return session.model_copy(update={"created_at": now, "updated_at": now})

    def get(self, key: str, last: int | None = None) -> Op[Session]:
        key = check_key(key)
        n = -1 if last is None else _non_negative_int(last, "last")
        sk = self._keys(key)[0]
        # A read needs no script: MULTI/EXEC gives one consistent snapshot without copying the
        # history through Lua. last=0 reads no message at all.
        first = 0 if n < 0 else -n
        meta, items, marker = yield Commands(
            [
                ("HGETALL", sk.meta),
                ("LRANGE", sk.msgs, first, -1) if n else ("LRANGE", sk.msgs, 1, 0),
                ("HEXISTS", sk.ids, "c"),
            ],
            transaction=True,
            errors_as_values=True,
        )
        _no_foreign_types(key, (sk.meta, meta), (sk.msgs, items), (sk.ids, marker))
        if not meta:
            raise SessionExpired(key) if marker else SessionNotFound(key)
        if self.keyring is None:
            return codec.decode_session(key, meta, items)
        session: Session = yield from self._opened(
            lambda ring: codec.decode_session(key, meta, items, ring)
        )
        return session

    def get_history(self, key: str, last: int | None = None) -> Op[list[Message]]:
        key = check_key(key)
        n = 0 if last is None else _non_negative_int(last, "last")
        if last is not None and n == 0:
            raise InvalidArgument("last", "must be > 0 (or None for the whole history)")
        sk = self._keys(key)[0]
        # A read needs no script. One LRANGE answers a session with messages; only an empty
        # answer needs the meta hash and the expiry marker to tell empty from missing/expired.
        (items,) = yield Commands([("LRANGE", sk.msgs, -n if n else 0, -1)], errors_as_values=True)
        _no_foreign_types(key, (sk.msgs, items))
        if not items:
            yield from self._require(key, sk)
        if self.keyring is None:  # no passphrase: the read path stays as lean as before
            return codec.decode_messages(key, items)
        history: list[Message] = yield from self._opened(
            lambda ring: codec.decode_messages(key, items, ring)
        )
        return history

    def _require(self, key: str, sk: SessionKeys) -> Op[None]:
        """Raise unless session ``key`` exists (expired and foreign data told apart)."""
        meta, marker = yield Commands(
            [("HGET", sk.meta, "v"), ("HEXISTS", sk.ids, "c")],
            transaction=True,
            errors_as_values=True,
        )
        _no_foreign_types(key, (sk.meta, meta), (sk.ids, marker))
        if meta is None:
            raise SessionExpired(key) if marker else SessionNotFound(key)

    def update(self, session: Session) -> Op[None]:
        session = _session(session)
        key = session.key
        _, keys = self._keys(key)
        scalars = codec.scalar_args(session, skip_empty=True)
        metadata = _metadata_pairs(session.metadata, "session.metadata")

        def build(sealer: Sealer | None) -> ScriptCall:
            meta = metadata(sealer)
            kid = b"" if sealer is None else sealer.kid
            args = [*self._ttl_args(), key, kid, len(scalars) // 2, *scalars, *meta]
            return ScriptCall("update", keys, args)

        yield from self._sealed_write(key, build, Ctx(key, keys))

    def update_metadata(
        self, key: str, set: Mapping[str, str] | None = None, delete: Iterable[str] = ()
    ) -> Op[None]:
        key = check_key(key)
        if isinstance(delete, str):
            raise InvalidArgument("delete", "must be an iterable of names, not a single str")
        gone = codec.metadata_fields(delete)
        entries = {} if set is None else set
        pairs = _metadata_pairs(entries, "set")
        _, keys = self._keys(key)

        def build(sealer: Sealer | None) -> ScriptCall:
            put = pairs(sealer)
            kid = b"" if sealer is None else sealer.kid
            args = [*self._ttl_args(), key, kid, len(gone), *gone, *put]
            return ScriptCall("update_metadata", keys, args)

        yield from self._sealed_write(key, build, Ctx(key, keys))

    def delete(self, key: str) -> Op[bool]:
        key = check_key(key)
        sk, keys = self._keys(key)
        event, payload = new_event(LifecycleEventType.DELETE, key)
        for _ in range(DELETE_ATTEMPTS):
            (members,) = yield Commands([("ZRANGE", sk.kids, 0, -1)])
            children = [codec.decode_key(m) for m in members]
            all_keys = [*keys, sk.kids]
            for child in children:
                ck = self.schema.child(child)
                all_keys += (ck.meta, ck.msgs, ck.ids)
            reply = yield ScriptCall("delete", all_keys, (key, self.channel, payload, *children))
            if reply[0] != Status.CONFLICT:
                existed = bool(check(reply, Ctx(key, all_keys))[1])
                if existed:
                    yield Emit(event)
                return existed
        raise ConcurrentChange(key, "children kept changing while the session was deleted")

    def append_messages(
        self,
        key: str,
        messages: Sequence[Message],
        *,
        metadata: Mapping[str, str] | None = None,
    ) -> Op[int]:
        if isinstance(messages, Message) or not isinstance(messages, Sequence):
            raise InvalidArgument("messages", "must be a sequence of Message")
        if not messages:
            check_key(key)
            if metadata is not None:
                codec.metadata_args(metadata, "metadata")
            return 0
        pairs = codec.message_args(messages, "messages", self.max_message_bytes)
        return (yield from self._append(key, messages, pairs, "messages", metadata))

    def append_message(
        self, key: str, msg: Message, *, metadata: Mapping[str, str] | None = None
    ) -> Op[bool]:
        # The hot path, written out: one generator, nothing built twice.
        if type(msg) is not Message:
            msg = _message(msg)
        key = check_key(key)
        if self.passphrase is not None or metadata:
            pairs = codec.message_args([msg], "msg", self.max_message_bytes)
            return (yield from self._append(key, [msg], pairs, "msg", metadata)) == 1
        if metadata is not None:  # an empty mapping: nothing to set, but still a mapping
            codec.metadata_args(metadata, "metadata")
        keys = self._keys(key)[1]
        args = (
            self.ttl_ms, self.grace_ms, self.max_history_turns, key, b"", 0,
            codec.message_digest(msg.id),
            codec.check_size(codec.encode_message(msg), self.max_message_bytes, "msg"),
        )  # fmt: skip
        reply = yield ScriptCall("append_message", keys, args)
        if type(reply) is list and reply[0] == Status.KEY_CHANGED:
            raise PassphraseRequired(key)
        return int(check(reply, lambda: Ctx(key, keys))[1]) == 1

    def _append(
        self,
        key: str,
        messages: Sequence[Message],
        pairs: list[bytes],
        argument: str,
        metadata: Mapping[str, str] | None = None,
    ) -> Op[int]:
        key = check_key(key)
        keys = self._keys(key)[1]
        entries = {} if metadata is None else metadata
        metadata_pairs = _metadata_pairs(entries, "metadata")

        def build(sealer: Sealer | None) -> ScriptCall:
            kid = b"" if sealer is None else sealer.kid
            put = metadata_pairs(sealer)
            args: list[bytes | str | int] = [
                self.ttl_ms, self.grace_ms, self.max_history_turns, key, kid, len(put), *put,
            ]  # fmt: skip
            args += codec.seal_pairs(pairs, messages, sealer, argument, self.max_message_bytes)
            return ScriptCall("append_message", keys, args)

        reply = yield from self._sealed_write(key, build, lambda: Ctx(key, keys))
        return int(reply[1])

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
        event, payload = new_event(LifecycleEventType.COMPACT, key)
        pairs = codec.message_args([msg], "summary", self.max_message_bytes)

        def build(sealer: Sealer | None) -> ScriptCall:
            args = [
                *self._ttl_args(),
                key,
                index,
                *codec.seal_pairs(pairs, [msg], sealer, "summary", self.max_message_bytes),
                expect,
                self.channel,
                payload,
                b"" if sealer is None else sealer.kid,
            ]
            return ScriptCall("compact_messages", keys, args)

        ctx = Ctx(key, keys, index=index, expect_id=expect_id or "")
        reply = yield from self._sealed_write(key, build, ctx)
        if int(reply[1]):
            yield Emit(event)
        return int(reply[1])

    def pop_message(self, key: str, *, expect_id: str | None = None) -> Op[Message | None]:
        key = check_key(key)
        if expect_id is not None and not isinstance(expect_id, str):
            raise InvalidArgument("expect_id", "must be a str or None")
        expect = codec.id_prefix(expect_id) if expect_id else b""
        _, keys = self._keys(key)
        token = _token()

        def build(sealer: Sealer | None) -> ScriptCall:
            kid = b"" if sealer is None else sealer.kid
            return ScriptCall("pop_message", keys, (*self._ttl_args(), key, token, expect, kid))

        ctx = Ctx(key, keys, index=-1, expect_id=expect_id or "")
        reply = yield from self._sealed_write(key, build, ctx)
        if len(reply) < 2:
            return None
        (msg,) = yield from self._opened(
            lambda ring: codec.decode_messages(key, [bytes(reply[1])], ring)
        )
        popped: Message = msg
        return popped

    def list_sessions(
        self, limit: int | None = None, offset: int = 0, *, prefix: str | None = None
    ) -> Op[list[SessionSummary]]:
        count = -1 if limit is None else _non_negative_int(limit, "limit")
        first = _non_negative_int(offset, "offset")
        if prefix is not None:
            codec.text_arg(prefix, "prefix")
        if count == 0:
            return []
        indexes = yield from self._indexes()
        if not indexes:
            return []
        if prefix:
            live = yield from self._summaries((yield from self._matching(indexes, prefix)))
            return live[first:] if count < 0 else live[first : first + count]
        want = -1 if count < 0 else first + count  # live rows needed, -1 = all
        window = want
        while True:
            # The newest `window` entries of every index shard, merged newest first; then the
            # sessions' own timestamps, which also drop entries of sessions gone meanwhile.
            last = -1 if window < 0 else window - 1
            pages = yield Commands([("ZREVRANGE", i, 0, last, "WITHSCORES") for i in indexes])
            rows = sorted(
                (
                    (float(score), codec.decode_key(member))
                    for page in pages
                    for member, score in page
                ),
                reverse=True,
            )
            live = yield from self._summaries([key for _, key in rows])
            exhausted = window < 0 or all(len(page) < window for page in pages)
            if exhausted or len(live) >= want:
                return live[first:] if count < 0 else live[first : first + count]
            window *= 2

    def _matching(self, indexes: list[str], prefix: str) -> Op[list[str]]:
        """Keys of the index entries that begin with ``prefix``, newest first: the server
        filters (``ZSCAN ... MATCH``), so only matching entries cross the network.
        """
        pattern = _GLOB_SPECIAL.sub(r"\\\g<0>", prefix) + "*"
        found: dict[str, float] = {}
        for index in indexes:
            cursor: Any = 0
            while True:  # ends: ZSCAN comes back to cursor 0 after a full iteration
                (reply,) = yield Commands(
                    [("ZSCAN", index, cursor, "MATCH", pattern, "COUNT", SCAN_COUNT)]
                )
                cursor, entries = reply
                for member, score in entries:
                    found[codec.decode_key(member)] = float(score)
                if int(cursor) == 0:
                    break
        return [key for key, _ in sorted(found.items(), key=lambda kv: kv[1], reverse=True)]

    def _indexes(self) -> Op[list[str]]:
        if not self.schema.cluster:
            return self.schema.all_indexes()
        (members,) = yield Commands([("SMEMBERS", self.schema.index_registry)])
        return sorted(codec.decode_key(m) for m in members)

    def repair_index(self) -> Op[int]:
        """Register every existing index shard (cluster); returns how many were missing."""
        if not self.schema.cluster:
            return 0
        shards = self.schema.all_indexes()
        exists = yield Commands([("EXISTS", s) for s in shards])
        found = [s for s, n in zip(shards, exists, strict=True) if n]
        known = set((yield from self._indexes()))
        missing = [s for s in found if s not in known]
        if missing:
            yield Commands([("SADD", self.schema.index_registry, *missing)])
        return len(missing)

    def _summaries(self, keys: list[str]) -> Op[list[SessionSummary]]:
        if not keys:
            return []
        metas = [self.schema.session(k).meta for k in keys]
        found = yield Commands([("HMGET", m, "created_at", "updated_at") for m in metas])
        return [
            codec.decode_summary(key, created, updated)
            for key, (created, updated) in zip(keys, found, strict=True)
            if created is not None
        ]

    # -- child sessions --------------------------------------------------------------------

    def _child_keys(self, child_key: object) -> tuple[str, str, str, list[str]]:
        """``(child_key, parent_key, agent, KEYS)`` for a child script; not-found if the key
        is not one ``fork_child`` makes.
        """
        child_key = check_key(child_key, "child_key")
        parsed = parent_of(child_key)
        if parsed is None:
            raise ChildNotFound(child_key)
        parent, agent = parsed
        ck, sk = self.schema.child(child_key), self.schema.session(parent)
        keys = [ck.meta, ck.msgs, ck.ids, sk.meta, sk.msgs, sk.ids, sk.kids]
        return child_key, parent, agent, [*keys, self.schema.index_of(parent)]

    def fork_child(
        self, parent_key: str, agent_name: str, config: ChildSessionConfig | None = None
    ) -> Op[ChildSession]:
        parent_key = check_key(parent_key, "parent_key")
        if not isinstance(agent_name, str) or not agent_name or ":" in agent_name:
            raise InvalidArgument("agent_name", "must be a non-empty str without ':'")
        codec.text_arg(agent_name, "agent_name")
        config = ChildSessionConfig() if config is None else config
        if not isinstance(config, ChildSessionConfig):
            raise InvalidArgument("config", "must be a ChildSessionConfig or None")
        child = ChildSession.new(parent_key, agent_name, config)
        _, _, _, keys = self._child_keys(child.key)
        event, payload = new_event(
            LifecycleEventType.FORK, parent_key, child_key=child.key, agent_name=agent_name
        )
        args = [
            *self._ttl_args(), parent_key, child.key, agent_name, codec.encode_config(config),
            config.max_messages, config.inherit_history, _token(), self.channel, payload,
        ]  # fmt: skip

        def build(sealer: Sealer | None) -> ScriptCall:
            return ScriptCall("fork_child", keys, [*args, b"" if sealer is None else sealer.kid])

        ctx = Ctx(child.key, keys, child=True, parent=parent_key)
        reply = yield from self._sealed_write(parent_key, build, ctx)
        yield Emit(event)
        items = [bytes(item[8:]) for item in reply[2]]
        history: list[Message] = yield from self._opened(
            lambda ring: codec.decode_messages(child.key, items, ring, parent_key)
        )
        created = codec.to_datetime(int(reply[1]))
        return child.model_copy(update={"created_at": created, "history": history})

    def append_child_messages(self, child_key: str, messages: Sequence[Message]) -> Op[int]:
        child_key, parent, _, keys = self._child_keys(child_key)
        if isinstance(messages, Message) or not isinstance(messages, Sequence):
            raise InvalidArgument("messages", "must be a sequence of Message")
        if not messages:
            return 0
        pairs = codec.message_args(messages, "messages", self.max_message_bytes)

        def build(sealer: Sealer | None) -> ScriptCall:
            args = [
                *self._ttl_args(),
                parent,
                b"" if sealer is None else sealer.kid,
                *codec.child_elements(
                    codec.seal_pairs(pairs, messages, sealer, "messages", self.max_message_bytes)
                ),
            ]
            return ScriptCall("append_child_message", keys, args)

        ctx = Ctx(child_key, keys, child=True, parent=parent)
        reply = yield from self._sealed_write(parent, build, ctx)
        return int(reply[1])

    def append_child_message(self, child_key: str, msg: Message) -> Op[bool]:
        added = yield from self.append_child_messages(child_key, [_message(msg)])
        return added == 1

    def merge_child(self, child_key: str, summary: str, author: str | None = None) -> Op[int]:
        child_key, parent, agent, keys = self._child_keys(child_key)
        if not isinstance(summary, str):
            raise InvalidArgument("summary", f"must be a str, not {type(summary).__name__}")
        if author is not None and not isinstance(author, str):
            raise InvalidArgument("author", f"must be a str, not {type(author).__name__}")
        msg = Message(role=MessageRole.ASSISTANT, content=summary, author=author or agent)
        pairs = codec.message_args([msg], "summary", self.max_message_bytes)
        event, payload = new_event(
            LifecycleEventType.MERGE, parent, child_key=child_key, agent_name=agent
        )
        token = _token()

        def build(sealer: Sealer | None) -> ScriptCall:
            digest, body = codec.seal_pairs(pairs, [msg], sealer, "summary", self.max_message_bytes)
            args = [
                *self._ttl_args(), self.max_history_turns, parent, token,
                "summary" if summary else "history", digest, body, self.channel, payload,
                b"" if sealer is None else sealer.kid,
            ]  # fmt: skip
            return ScriptCall("merge_child", keys, args)

        ctx = Ctx(child_key, keys, child=True, parent=parent)
        reply = yield from self._sealed_write(parent, build, ctx)
        yield Emit(event)
        return int(reply[2])

    def discard_child(self, child_key: str) -> Op[None]:
        child_key, parent, agent, keys = self._child_keys(child_key)
        event, payload = new_event(
            LifecycleEventType.DISCARD, parent, child_key=child_key, agent_name=agent
        )
        keys = [keys[0], keys[1], keys[2], keys[6]]
        args = (parent, child_key, _token(), max(self.grace_ms, 60_000), self.channel, payload)
        check((yield ScriptCall("discard_child", keys, args)), Ctx(child_key, keys, child=True))
        yield Emit(event)

    def get_child(self, child_key: str) -> Op[ChildSession]:
        child_key, _, _, keys = self._child_keys(child_key)
        keys = keys[:2]
        reply = yield ScriptCall("get_child", keys, (), write=False)
        check(reply, Ctx(child_key, keys, child=True))
        child: ChildSession = yield from self._opened(
            lambda ring: codec.decode_child(child_key, reply[1], reply[2], ring)
        )
        return child

    def children_of(self, parent_key: str) -> Op[list[ChildSession]]:
        parent_key = check_key(parent_key, "parent_key")
        kids = self.schema.session(parent_key).kids
        (members,) = yield Commands([("ZRANGE", kids, 0, -1)])
        children = [codec.decode_key(m) for m in members]
        if not children:
            return []
        names: list[ChildKeys] = [self.schema.child(c) for c in children]
        commands: list[tuple[Any, ...]] = []
        for ck in names:
            commands += (("HGETALL", ck.meta), ("LRANGE", ck.msgs, 0, -1))
        replies = yield Commands(commands, transaction=True)

        def decode(ring: Keyring | None) -> list[ChildSession]:
            out = []
            for i, child in enumerate(children):
                meta, items = replies[2 * i], replies[2 * i + 1]
                if meta and b"discarded" not in meta:
                    out.append(codec.decode_child(child, meta, items, ring))
            return out

        found: list[ChildSession] = yield from self._opened(decode)
        return found

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
