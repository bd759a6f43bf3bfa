"""Session operations (sans-I/O generators; see ``_core``): create, read, update, delete,
append, compact, pop, list.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from . import codec
from ._args import message as message_arg
from ._args import non_negative_int, optional_str, text, token
from ._args import session as session_arg
from ._base import HEAD_AT, STAGE_LEASE_MS, CoreBase
from ._requests import Commands, Emit, Op, ScriptCall
from .crypto import Sealer
from .errors import (
    ConcurrentChange,
    CorruptData,
    ForeignKey,
    InvalidArgument,
    PassphraseRequired,
    SessionError,
)
from .events import new_event
from .keys import check_key
from .models import LifecycleEventType, Message, MessageRole, Session, SessionSummary
from .status import Ctx, Status, check

TIMEOUT_NOTICE = "[This response was interrupted due to a timeout]"
DELETE_ATTEMPTS = 8
SCAN_COUNT = 1000  # index entries a ZSCAN step looks at
_GLOB_SPECIAL = re.compile(r"[*?\[\]\\]")  # escaped in a MATCH pattern


def _get_token(reply: Sequence[Any]) -> Any:
    """The session's token in a ``get`` script's reply."""
    return reply[6]


class SessionOps(CoreBase):
    """The session operations of a store."""

    def _metadata_pairs(
        self, entries: Mapping[str, str], argument: str
    ) -> Callable[[Sealer | None], list[bytes]]:
        """Validate ``entries`` now (types, and each value against
        ``max_metadata_value_bytes``), before anything is sealed; the function returned gives
        their meta-hash pairs for a sealer (None: the cleartext pairs, built once).
        """
        plain = codec.metadata_args(entries, argument)
        limit = self.max_metadata_value_bytes
        if limit:
            for name, value in zip(plain[::2], plain[1::2], strict=True):
                if len(value) > limit:
                    where = f"{argument}[{name[2:].decode()!r}]"
                    raise InvalidArgument(
                        where, f"is {len(value):,} bytes, over max_metadata_value_bytes={limit:,}"
                    )
        return lambda sealer: (
            plain if sealer is None else codec.metadata_args(entries, argument, sealer)
        )

    def _check_metadata_total(self, pairs: Sequence[bytes], argument: str) -> None:
        """Refuse metadata (all of a session's, as stored) over ``max_metadata_bytes``."""
        limit = self.max_metadata_bytes
        total = sum(map(len, pairs))
        if limit and total > limit:
            raise InvalidArgument(
                argument, f"is {total:,} bytes as stored, over max_metadata_bytes={limit:,}"
            )

    def create(self, session: Session) -> Op[Session]:
        session = session_arg(session)
        key = session.key
        sk, keys = self._keys(key)
        sealer: Sealer | None = None
        kid = b""
        call = token()
        self._metadata_pairs(session.metadata, "session.metadata")
        if self.passphrase is not None:
            if self.master is None:
                yield from self.unlock()
            sealer, kid, dk = self._new_session(key)
        meta = codec.meta_args(session, sealer)
        if sealer is not None:
            meta += (b"dk", dk)
        self._check_metadata_total(codec.metadata_only(meta), "session.metadata")
        event, payload = new_event(LifecycleEventType.CREATE, key)
        args = [
            *self._head(key), key, call, self.channel, payload, codec.SCHEMA_VERSION, kid,
            len(meta) // 2, *meta,
        ]  # fmt: skip
        history = codec.message_args(session.history, "session.history", self.max_message_bytes)
        pairs = codec.seal_pairs(
            history, session.history, sealer, "session.history", self.max_message_bytes
        )
        stage = f"{sk.stage}#{call}"
        runs = self._batches(pairs[1::2])
        if len(runs) > 1:  # a long history: staged in steps, then swapped in by the create
            staged = 0
            for run in runs:
                part = yield ScriptCall("stage_push", [stage], (staged, STAGE_LEASE_MS, *run))
                staged = int(check(part, Ctx(key, [stage]))[1])
            args += [staged, *pairs[0::2][-self.window :]]
        else:
            args += [0, *pairs]
        create_keys = (*keys, stage)
        reply = yield ScriptCall("create", create_keys, args)
        if reply[0] != Status.OK:
            self._session_keys.pop(key, None)  # not this key's session: nothing was written
        check(reply, Ctx(key, create_keys))
        self._forget_tree(key)
        if self.schema.cluster and int(reply[2]):
            # Not atomic with the script (another slot): a crash right here leaves this index
            # shard unlisted until repair_index(); the session itself is whole.
            yield Commands([("SADD", self.schema.index_registry, keys[3])])
        yield Emit(event)
        now = codec.to_datetime(int(reply[1]))
        return session.model_copy(update={"created_at": now, "updated_at": now})

    def _read(
        self, key: str, last: int, with_meta: bool
    ) -> Op[tuple[Sequence[Any], list[Message]]]:
        """The ``get`` script's reply for session ``key`` (``last`` < 0: every message) and
        the messages it asked for: those the store holds from an earlier read of the session
        and the ones added since, or all of them (a long history read in steps). The reply's
        meta array is read as well with ``with_meta``.
        """
        sk = self._keys(key)[0]
        read_keys = (sk.meta, sk.msgs, sk.ids, sk.mark)

        def ctx() -> Ctx:  # built only for an exception
            return Ctx(key, read_keys)

        held = self._reads.get(key)
        if held is not None and not held.reaches(last):
            held = None  # it holds the newest messages only and this read wants more
        want_meta = "1" if with_meta else "0"
        args: tuple[Any, ...]
        try:
            if held is not None:  # the hot path: only what was added since travels
                args = (last, want_meta, held.token, held.generation, held.tail,
                        self.read_budget, held.head)  # fmt: skip
                first = ScriptCall("get", read_keys, args, write=False)
                reply = check((yield first), ctx)
                items = reply[7]
                upto, n = int(reply[8]), int(reply[4])
                if upto < n:  # more than one read's budget: in steps
                    rest = yield from self._read_rest(
                        reply[5], upto, n, read_keys[:2], ctx, _get_token(reply),
                        int(reply[HEAD_AT]),
                    )  # fmt: skip
                    if rest is None:  # changed meanwhile: from the start
                        reply, items = yield from self._read_list(
                            key, first, ctx, (5, 4, 7, 8, 2), read_keys[:2], _get_token
                        )
                    else:
                        items = [*items, *rest]
            else:
                args = (last, want_meta, "", "", "", self.read_budget, "")
                span = self._cold_span(last)
                got = None
                if span is not None:
                    got = yield from self._read_cold(args, span, read_keys, ctx)
                if got is None:
                    first = ScriptCall("get", read_keys, args, write=False)
                    got = yield from self._read_list(
                        key, first, ctx, (5, 4, 7, 8, 2), read_keys[:2], _get_token
                    )
                reply, items = got
        except SessionError:
            self._reads.discard(key)
            raise
        start, h, n = int(reply[2]), int(reply[3]), int(reply[4])
        wanted = h if last < 0 else max(h, n - last)
        if self.passphrase is None:
            new = self._decoded(key, items)
        else:
            new = yield from self._opened(
                key, reply[9], reply[10], lambda o: codec.decode_messages(key, items, o)
            )
        version = (bytes(reply[6]), b"%d" % int(reply[5]))
        return reply, self._hold(key, held, version, h, start, wanted, new, items)

    def _read_cold(
        self,
        args: tuple[Any, ...],
        span: tuple[int, int],
        read_keys: tuple[str, ...],
        ctx: Callable[[], Ctx],
    ) -> Op[tuple[Sequence[Any], list[bytes]] | None]:
        """A read of a session this store does not hold in one round trip without passing the
        elements through Lua (~1.5 us each on the server): the ``get`` script for the meta
        hash and the list's positions only (a zero byte budget), then ``LRANGE`` of list
        indexes ``span`` and the positions again (``HMGET``), pipelined, not atomic. The
        elements belong to the script's snapshot when the positions read after them are the
        same (every change to a session's list changes its token, generation, head or tail);
        the rest of a longer list is read in steps. None: the caller reads by the script
        alone (changed between, a list changed behind the store).
        """
        meta, msgs = read_keys[0], read_keys[1]
        after = (("LRANGE", msgs, *span), ("HMGET", meta, "token", "g", "h", "n"))
        replies = yield ScriptCall("get", read_keys, (*args[:5], 0, args[6]), False, after)
        if isinstance(replies[0], Exception):
            raise replies[0]
        reply, items, now = check(replies[0], ctx), replies[1], replies[2]
        if isinstance(items, Exception) or isinstance(now, Exception):
            return None
        start, n, g = int(reply[2]), int(reply[4]), reply[5]
        token = bytes(reply[6])
        version = [token, b"%d" % int(g), b"%d" % int(reply[3]), b"%d" % n]
        if not token or [now[0], now[1] or b"0", now[2] or b"0", now[3]] != version:
            return None
        count = span[1] - span[0] + 1 if span[0] >= 0 else n - start
        if len(items) != min(count, n - start):
            return None
        upto = start + len(items)
        if upto < n:
            h = int(reply[HEAD_AT])
            rest = yield from self._read_rest(g, upto, n, (meta, msgs), ctx, token, h)
            if rest is None:
                return None
            items += rest
        return reply, items

    def get(self, key: str, last: int | None = None) -> Op[Session]:
        key = check_key(key)
        n = -1 if last is None else non_negative_int(last, "last")
        # Read-only commands only: no MULTI/EXEC, which Redis refuses when it is out of
        # memory; it also runs on a read-only replica.
        reply, history = yield from self._read(key, n, True)
        meta = reply[1]
        if self.passphrase is None:
            return codec.decode_session(key, meta, (), history=history)
        session: Session = yield from self._opened(
            key, reply[9], reply[10],
            lambda o: codec.decode_session(key, meta, (), o, history=history),
        )  # fmt: skip
        return session

    def get_history(self, key: str, last: int | None = None) -> Op[list[Message]]:
        key = check_key(key)
        n = -1 if last is None else non_negative_int(last, "last")
        _, history = yield from self._read(key, n, False)
        return history

    def update(self, session: Session) -> Op[None]:
        session = session_arg(session)
        key = session.key
        _, keys = self._keys(key)
        codec.scalar_args(session, skip_empty=True)  # checked once, sealed per attempt
        metadata = self._metadata_pairs(session.metadata, "session.metadata")

        def build(sealer: Sealer | None) -> ScriptCall:
            scalars = codec.scalar_args(session, skip_empty=True, sealer=sealer)
            meta = metadata(sealer)
            self._check_metadata_total(meta, "session.metadata")
            kid = b"" if sealer is None else sealer.kid
            args = [*self._head(key), key, kid, len(scalars) // 2, *scalars, *meta]
            return ScriptCall("update", (*keys, *self._tree(key)[1]), args)

        yield from self._write(key, build, Ctx(key, keys))

    def update_metadata(
        self, key: str, set: Mapping[str, str] | None = None, delete: Iterable[str] = ()
    ) -> Op[None]:
        key = check_key(key)
        if isinstance(delete, str):
            raise InvalidArgument("delete", "must be an iterable of names, not a single str")
        gone = codec.metadata_fields(delete)
        entries = {} if set is None else set
        pairs = self._metadata_pairs(entries, "set")
        _, keys = self._keys(key)

        def build(sealer: Sealer | None) -> ScriptCall:
            put = pairs(sealer)
            kid = b"" if sealer is None else sealer.kid
            args = [
                *self._head(key), key, kid, self.max_metadata_bytes, len(gone), *gone, *put,
            ]  # fmt: skip
            return ScriptCall("update_metadata", (*keys, *self._tree(key)[1]), args)

        yield from self._write(key, build, Ctx(key, keys, argument="set"))

    def delete(self, key: str) -> Op[bool]:
        key = check_key(key)
        sk, keys = self._keys(key)
        event, payload = new_event(LifecycleEventType.DELETE, key)
        for _ in range(DELETE_ATTEMPTS):
            (members,) = yield from self._read_keys([("ZRANGE", sk.kids, 0, -1)], key)
            all_keys: list[str | bytes] = [*keys, sk.pop]
            children: list[bytes] = []
            for raw in members:
                raw = bytes(raw)
                ck = self.schema.child(codec.member_key(raw))  # a damaged member too
                all_keys += map(codec.wire, (ck.meta, ck.msgs, ck.ids, ck.stage))
                children.append(raw)
            reply = yield ScriptCall("delete", all_keys, (key, self.channel, payload, *children))
            if reply[0] != Status.CONFLICT:
                existed = bool(check(reply, Ctx(key, all_keys))[1])
                self._forget_tree(key)
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
                self._metadata_pairs(metadata, "metadata")
            return 0
        pairs = codec.message_args(messages, "messages", self.max_message_bytes)
        self._check_batch(pairs[1::2], "messages")
        return (yield from self._append(key, messages, pairs, "messages", metadata))

    def append_message(
        self, key: str, msg: Message, *, metadata: Mapping[str, str] | None = None
    ) -> Op[bool]:
        # The hot path, written out: one generator, nothing built twice.
        if type(msg) is not Message:
            msg = message_arg(msg)
        key = check_key(key)
        if self.passphrase is not None or metadata:
            pairs = codec.message_args([msg], "msg", self.max_message_bytes)
            return (yield from self._append(key, [msg], pairs, "msg", metadata)) == 1
        if metadata is not None:  # an empty mapping: nothing to set, but still a mapping
            codec.metadata_args(metadata, "metadata")
        keys = self._keys(key)[1]
        tree = self._trees.get(key)
        body, ready = codec.stored_form(msg)
        codec.check_size(body, self.max_message_bytes, "msg")
        twin = self._twin(body, msg) if ready else None
        args = (
            self.ttl_ms, self.grace_ms, "0" if tree is None else tree[0], self.window,
            self.max_history_turns, key, b"", self.max_metadata_bytes, 0,
            codec.message_digest(msg.id), body,
        )  # fmt: skip
        reply = yield ScriptCall(
            "append_message", keys if tree is None else (*keys, *tree[1]), args
        )
        if type(reply) is list and reply[0] == Status.OK:
            if twin is not None:
                self._wrote(body, twin)
            return int(reply[1]) == 1
        if type(reply) is list and reply[0] == Status.KEY_CHANGED:
            raise PassphraseRequired(key)
        if type(reply) is list and reply[0] == Status.TREE_CHANGED:
            self._learn_tree(key, reply[1], reply[2:])
            pairs = codec.message_args([msg], "msg", self.max_message_bytes)
            return (yield from self._append(key, [msg], pairs, "msg", metadata)) == 1
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
        metadata_pairs = self._metadata_pairs(entries, "metadata")

        def build(sealer: Sealer | None) -> ScriptCall:
            kid = b"" if sealer is None else sealer.kid
            put = metadata_pairs(sealer)
            args: list[bytes | str | int] = [
                *self._head(key), self.max_history_turns, key, kid, self.max_metadata_bytes,
                len(put), *put,
            ]  # fmt: skip
            args += codec.seal_pairs(pairs, messages, sealer, argument, self.max_message_bytes)
            return ScriptCall("append_message", (*keys, *self._tree(key)[1]), args)

        twins = [
            (body, self._twin(body, msg) if codec.twin_ready(msg) else None)
            for msg, body in zip(messages, pairs[1::2], strict=True)
        ] if self.passphrase is None else []  # fmt: skip
        reply = yield from self._write(key, build, lambda: Ctx(key, keys, argument="metadata"))
        for body, twin in twins:
            if twin is not None:
                self._wrote(body, twin)
        return int(reply[1])

    def annotate_timeout(self, key: str, partial: str) -> Op[bool]:
        text(partial, "partial")
        msg = Message(role=MessageRole.ASSISTANT, content=TIMEOUT_NOTICE)
        return (yield from self.append_message(key, msg))

    def compact_messages(
        self, key: str, up_to_index: int, summary: str, *, expect_id: str | None = None
    ) -> Op[int]:
        key = check_key(key)
        index = non_negative_int(up_to_index, "up_to_index")
        text(summary, "summary")
        optional_str(expect_id, "expect_id")
        msg = Message(role=MessageRole.SYSTEM, content="[Compacted Summary]\n" + summary)
        expect = codec.id_prefix(expect_id) if expect_id else b""
        _, keys = self._keys(key)
        event, payload = new_event(LifecycleEventType.COMPACT, key)
        pairs = codec.message_args([msg], "summary", self.max_message_bytes)

        def build(sealer: Sealer | None) -> ScriptCall:
            args = [
                *self._head(key),
                key,
                index,
                *codec.seal_pairs(pairs, [msg], sealer, "summary", self.max_message_bytes),
                expect,
                self.channel,
                payload,
                b"" if sealer is None else sealer.kid,
            ]
            return ScriptCall("compact_messages", (*keys, *self._tree(key)[1]), args)

        ctx = Ctx(key, keys, index=index, expect_id=expect_id or "")
        reply = yield from self._write(key, build, ctx)
        if int(reply[1]):
            yield Emit(event)
        return int(reply[1])

    def pop_message(self, key: str, *, expect_id: str | None = None) -> Op[Message | None]:
        key = check_key(key)
        optional_str(expect_id, "expect_id")
        expect = codec.id_prefix(expect_id) if expect_id else b""
        sk, keys = self._keys(key)
        call = token()
        digest = codec.message_digest("pop:" + call)

        def build(sealer: Sealer | None) -> ScriptCall:
            kid = b"" if sealer is None else sealer.kid
            args = (*self._head(key), key, call, digest, expect, kid, self.pop_keep_ms)
            return ScriptCall("pop_message", (*keys, sk.pop, *self._tree(key)[1]), args)

        ctx = Ctx(key, keys, index=-1, expect_id=expect_id or "", kind="pop", name=key)
        reply = yield from self._write(key, build, ctx)
        if len(reply) < 2:
            return None
        (msg,) = yield from self._written(
            key, lambda o: codec.decode_messages(key, [bytes(reply[1])], o)
        )
        popped: Message = msg
        return popped

    def list_sessions(
        self, limit: int | None = None, offset: int = 0, *, prefix: str | None = None
    ) -> Op[list[SessionSummary]]:
        count = -1 if limit is None else non_negative_int(limit, "limit")
        first = non_negative_int(offset, "offset")
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
        if count < 0:  # every session: each index shard in pages, no command unbounded
            rows: list[tuple[float, bytes]] = []
            for index in indexes:
                at = 0
                while True:
                    (page,) = yield from self._read_keys(
                        [("ZREVRANGE", index, at, at + SCAN_COUNT - 1, "WITHSCORES")]
                    )
                    page = codec.scored(page)
                    rows += ((float(score), member) for member, score in page)
                    at += SCAN_COUNT
                    if len(page) < SCAN_COUNT:
                        break
            rows.sort(reverse=True)
            live = yield from self._summaries([member for _, member in rows])
            return live[first:]
        want = first + count  # live rows needed
        window = want
        while True:
            # The newest `window` entries of every index shard, merged newest first; then the
            # sessions' own timestamps, which also drop entries of sessions gone meanwhile.
            pages = yield from self._read_keys(
                [("ZREVRANGE", i, 0, window - 1, "WITHSCORES") for i in indexes]
            )
            pages = [codec.scored(page) for page in pages]
            rows = sorted(
                ((float(score), member) for page in pages for member, score in page),
                reverse=True,
            )
            live = yield from self._summaries([member for _, member in rows])
            exhausted = all(len(page) < window for page in pages)
            if exhausted or len(live) >= want:
                return live[first : first + count]
            window *= 2

    def _matching(self, indexes: list[str], prefix: str) -> Op[list[bytes]]:
        """The index members that begin with ``prefix``, newest first: the server filters
        (``ZSCAN ... MATCH``), so only matching entries cross the network.
        """
        pattern = _GLOB_SPECIAL.sub(r"\\\g<0>", prefix) + "*"
        found: dict[bytes, float] = {}
        for index in indexes:
            cursor: Any = 0
            while True:  # ends: ZSCAN comes back to cursor 0 after a full iteration
                (reply,) = yield from self._read_keys(
                    [("ZSCAN", index, cursor, "MATCH", pattern, "COUNT", SCAN_COUNT)]
                )
                cursor, entries = reply
                for member, score in entries:
                    found[bytes(member)] = float(score)
                if int(cursor) == 0:
                    break
        return [key for key, _ in sorted(found.items(), key=lambda kv: kv[1], reverse=True)]

    def _indexes(self) -> Op[list[str]]:
        if not self.schema.cluster:
            return self.schema.all_indexes()
        (members,) = yield from self._read_keys([("SMEMBERS", self.schema.index_registry)])
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

    def _read_keys(self, commands: list[tuple[Any, ...]], key: str = "") -> Op[list[Any]]:
        """The replies of read ``commands`` (each on the key it names second); a key that holds
        another program's value raises :class:`ForeignKey` naming it (``key``: the session it
        belongs to, ``""`` for the store's own keys such as its index), not a bare WRONGTYPE.
        """
        replies = yield Commands(commands, errors_as_values=True)
        for command, reply in zip(commands, replies, strict=True):
            if isinstance(reply, Exception):
                if not codec.is_wrong_type(reply):
                    raise reply
                (held,) = yield Commands([("TYPE", command[1])])
                raise ForeignKey(key, str(command[1]), codec.type_name(held))
        return list(replies)

    def _summaries(self, members: list[bytes]) -> Op[list[SessionSummary]]:
        """The summaries of the sessions the index members name. A member that is not a key
        this store wrote (not UTF-8), a meta hash without timestamps and a meta key of another
        type (another program's key: :class:`ForeignKey`) are skipped and logged (see
        ``codec.log_bad_record``), not raised for everybody; a session gone since it was
        indexed (expired) is skipped silently.
        """
        keys = [k for k in map(codec.index_member, members) if k is not None]
        if not keys:
            return []
        metas = [self.schema.session(k).meta for k in keys]
        found: list[Any] = []
        for i in range(0, len(metas), SCAN_COUNT):  # pipelines of a bounded size
            found += yield Commands(
                [("HMGET", m, "created_at", "updated_at") for m in metas[i : i + SCAN_COUNT]],
                errors_as_values=True,
            )
        out = []
        odd: list[tuple[str, str]] = []  # no session read: gone, or not a session's hash
        for key, meta, got in zip(keys, metas, found, strict=True):
            if isinstance(got, Exception) and not codec.is_wrong_type(got):
                raise got
            if isinstance(got, Exception) or got[0] is None:
                odd.append((key, meta))
                continue
            try:
                out.append(codec.decode_summary(key, *got))
            except CorruptData as exc:
                codec.log_bad_record("list_sessions", exc)
        for i in range(0, len(odd), SCAN_COUNT):
            batch = odd[i : i + SCAN_COUNT]
            types = yield Commands([("TYPE", meta) for _, meta in batch])
            for (key, meta), held in zip(batch, types, strict=True):
                held = codec.type_name(held)
                if held != "none":
                    codec.log_bad_record("list_sessions", ForeignKey(key, meta, held))
        return out
