"""Session operations (sans-I/O generators; see ``_core``): create, read, update, delete,
append, compact, pop.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from .. import codec, contracts
from .._transport.telemetry import note_spent
from ..crypto import Sealer
from ..errors import ConcurrentChange, InvalidArgument
from ..keys import KeySchema, check_key
from ..models import LifecycleEventType, Message, MessageRole, Session
from ..options import StoreOptions
from ..status import Ctx, Status, check
from .args import call_token, non_negative_int, optional_str, text, token
from .args import message as message_arg
from .args import session as session_arg
from .eventlog import Draft, EventLog, discard_event, new_event
from .index import Index
from .keyring import Keyring
from .limits import DELETE_RETRY_MS, STAGE_LEASE_MS, Limits
from .reads import Reader
from .requests import Commands, Emit, Op, ScriptCall
from .trees import Trees
from .writes import Writer, appended

TIMEOUT_NOTICE = "[This response was interrupted due to a timeout]"
DELETE_ATTEMPTS = 8
"""Delete scripts a delete sends before it gives up on children that keep changing."""
DELETE_BATCH = 100
"""The most children one script of a delete removes: a session with more loses them a batch
at a time first (``discard_children``), so that no script of a delete keeps the server
longer than 100 children's worth (each child is server time: its checks, its keys unlinked, its
``discard`` event; docs/benchmarks.md, "Figures behind the code"). A delete sends at most as many
batches as the children it first counted fill, plus ``DELETE_ATTEMPTS`` (children forked meanwhile),
then gives up with :class:`ConcurrentChange`."""


def _discards(drafts: Sequence[Draft | None], event_ids: Sequence[Any] | None) -> Op[None]:
    """The ``discard`` events a delete's script logged: one per child that was live (its id;
    0 for one that was not, None for a damaged member, which has no draft).
    """
    for each, event_id in zip(drafts, event_ids or (), strict=False):
        if each is not None and not isinstance(event_id, int):
            yield Emit(each.event(event_id))


class Fence(NamedTuple):
    """A turn a write is made through: the turn key's ``value`` and its ``token``."""

    value: str
    token: int


NO_FENCE = Fence("", 0)
"""A write made without a turn (not fenced)."""


def expect_last(expect_last_id: str | None) -> bytes:
    """An append's expectation as its script takes it (see ``contracts.append_message``)."""
    if expect_last_id is None:
        return b""
    optional_str(expect_last_id, "expect_last_id")
    return b"." if expect_last_id == "" else codec.id_prefix(expect_last_id)


class Metadata:
    """The checks of metadata a write sets (shared with integrations that write metadata)."""

    def __init__(self, options: StoreOptions) -> None:
        self.options = options

    def pairs(
        self, entries: Mapping[str, str], argument: str
    ) -> Callable[[Sealer | None], list[bytes]]:
        """Validate ``entries`` now (types, and each value against
        ``max_metadata_value_bytes``), before anything is sealed; the function returned gives
        their meta-hash pairs for a sealer (None: the cleartext pairs, built once).
        """
        plain = codec.metadata_args(entries, argument)
        limit = self.options.max_metadata_value_bytes
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

    def check_total(self, pairs: Sequence[bytes], argument: str) -> None:
        """Refuse metadata (all of a session's, as stored) over ``max_metadata_bytes``."""
        limit = self.options.max_metadata_bytes
        total = sum(map(len, pairs))
        if limit and total > limit:
            raise InvalidArgument(
                argument, f"is {total:,} bytes as stored, over max_metadata_bytes={limit:,}"
            )


class Sessions:
    """The session operations of a store."""

    def __init__(
        self,
        schema: KeySchema,
        options: StoreOptions,
        limits: Limits,
        trees: Trees,
        keyring: Keyring,
        reader: Reader,
        writer: Writer,
        index: Index,
        events: EventLog,
    ) -> None:
        self.schema = schema
        self.options = options
        self.limits = limits
        self.trees = trees
        self.keyring = keyring
        self.reader = reader
        self.writer = writer
        self.index = index
        self.events = events
        self.metadata = Metadata(options)

    def create(self, session: Session, given_token: str | None = None) -> Op[Session]:
        made, _ = yield from self.made(session, given_token)
        return made

    def made(
        self,
        session: Session,
        given_token: str | None = None,
        draft: Draft | None = None,
        step: tuple[int, int] | None = None,
    ) -> Op[tuple[Session, bool]]:
        """Create ``session`` (its event: ``draft``, a ``create`` event by default); a history
        over ``step`` (messages, bytes; default: one append's batch) is staged in steps of it.
        Also whether the call was a retry of one that created it (then nothing was written).
        """
        session = session_arg(session)
        key = session.key
        o = self.options
        sk, keys = self.trees.keys(key)
        sealer: Sealer | None = None
        kid = b""
        call = call_token(given_token)
        self.metadata.pairs(session.metadata, "session.metadata")
        if self.keyring.passphrase is not None:
            if self.keyring.master is None:
                yield from self.keyring.unlock()
            sealer, kid, dk = self.keyring.new_session(key)
        meta = codec.meta_args(session, sealer)
        if sealer is not None:
            meta += (b"dk", dk)
        self.metadata.check_total(codec.metadata_only(meta), "session.metadata")
        if draft is None:
            draft = new_event(LifecycleEventType.CREATE, key)
        counts: list[int | None] = []
        history = codec.message_args(
            session.history, "session.history", o.max_message_bytes, o.count_tokens, counts
        )
        if any(n is not None for n in counts):  # what it returns is what it stores
            counted = map(codec.with_tokens, session.history, counts)
            session = session.model_copy(update={"history": list(counted)})
        pairs = codec.seal_pairs(
            history, session.history, sealer, "session.history", o.max_message_bytes
        )
        stage = f"{sk.stage}#{call}"
        runs = self.limits.batches(pairs[1::2], *(step or ()))
        staged, messages = 0, pairs
        if len(runs) > 1:  # a long history: staged in steps, then swapped in by the create
            if given_token is not None:  # what a call of this key that died midway staged
                yield Commands([("DEL", stage)])
            for run in runs:
                reply = yield contracts.stage_push(
                    stage=stage, length=staged, ttl_ms=STAGE_LEASE_MS, elements=run
                )
                staged = contracts.parsed(contracts.Staged, check(reply, Ctx(key, [stage]))).length
            messages = pairs[0::2][-o.window :]
        sums = codec.token_sums([m.tokens or 0 for m in session.history])
        request = contracts.create(
            root=keys,
            stage=stage,
            log=self.events.log_of(key),
            usage=self.schema.usage_of(key),
            head=self.trees.head(key),
            session_key=key,
            call_token=call,
            events=self.events.events_of(key),
            event=draft.fields,
            event_type=draft.type,
            schema_version=codec.SCHEMA_VERSION,
            kid=kid,
            meta=meta,
            tokens="" if sums is None else sums[1],
            sums=() if sums is None else sums[0],
            staged=staged,
            messages=messages,
        )
        reply = yield request
        if contracts.status(reply) != Status.OK:
            self.keyring.session_keys.pop(key, None)  # not this key's: nothing was written
        created = contracts.parsed(contracts.Created, check(reply, Ctx(key, request.keys)))
        self.trees.forget(key)
        if self.schema.cluster and created.index_created:
            # Not atomic with the script (other slots): a crash right here leaves this index
            # shard unlisted until repair_index(); the session itself is whole.
            yield from self.index.register(keys[3])
        if created.expired is not None:  # an earlier tree under the key had expired unseen
            expired = draft._replace(type=LifecycleEventType.EXPIRE.value, extra=())
            yield Emit(expired.event(created.expired))
        yield Emit(draft.event(created.event_id))
        if created.due:  # trees of this index shard expired unseen
            yield from self.events.reap_due(keys[3])
        now = codec.to_datetime(created.created_at)
        spent = codec.history_usage(session.history)
        update: dict[str, Any] = {"created_at": now, "updated_at": now, "usage": spent}
        if sums is not None:
            update["context_tokens"] = sums[1]
        return session.model_copy(update=update), created.again

    def get(self, key: str, last: int | None = None) -> Op[Session]:
        key = check_key(key)
        n = -1 if last is None else non_negative_int(last, "last")
        session, _ = yield from self.read(key, n)
        return session

    def read(self, key: str, last: int = -1) -> Op[tuple[Session, contracts.Read]]:
        """Session ``key`` (checked) with its newest ``last`` messages (< 0: all), and the read
        script's reply: the generation and positions the history was read at.
        """
        # Read-only commands only: no MULTI/EXEC, which Redis refuses when it is out of
        # memory; it also runs on a read-only replica.
        read, history = yield from self.reader.session(key, last, True)
        meta = read.meta
        held = read.context_tokens
        if self.keyring.passphrase is None:
            return codec.decode_session(key, meta, (), history=history, context_tokens=held), read
        session: Session = yield from self.keyring.opened(
            key,
            read.kid,
            read.dk,
            lambda o: codec.decode_session(key, meta, (), o, history=history, context_tokens=held),
        )
        return session, read

    def get_history(
        self, key: str, last: int | None = None, max_tokens: int | None = None
    ) -> Op[list[Message]]:
        key = check_key(key)
        n = -1 if last is None else non_negative_int(last, "last")
        if max_tokens is not None:
            non_negative_int(max_tokens, "max_tokens")
        _, history = yield from self.reader.session(key, n, False, max_tokens)
        return history

    def update(self, session: Session) -> Op[None]:
        session = session_arg(session)
        key = session.key
        _, keys = self.trees.keys(key)
        codec.scalar_args(session, skip_empty=True)  # checked once, sealed per attempt
        metadata = self.metadata.pairs(session.metadata, "session.metadata")

        def build(sealer: Sealer | None) -> ScriptCall:
            scalars = codec.scalar_args(session, skip_empty=True, sealer=sealer)
            meta = metadata(sealer)
            self.metadata.check_total(meta, "session.metadata")
            return contracts.update(
                root=keys,
                members=self.trees.members(key),
                head=self.trees.head(key),
                session_key=key,
                kid=b"" if sealer is None else sealer.kid,
                scalars=scalars,
                metadata=meta,
            )

        yield from self.writer.write(key, build, Ctx(key, keys))

    def update_metadata(
        self, key: str, set: Mapping[str, str] | None = None, delete: Iterable[str] = ()
    ) -> Op[None]:
        key = check_key(key)
        if isinstance(delete, str):
            raise InvalidArgument("delete", "must be an iterable of names, not a single str")
        gone = codec.metadata_fields(delete)
        pairs = self.metadata.pairs({} if set is None else set, "set")
        _, keys = self.trees.keys(key)

        def build(sealer: Sealer | None) -> ScriptCall:
            return contracts.update_metadata(
                root=keys,
                members=self.trees.members(key),
                head=self.trees.head(key),
                session_key=key,
                kid=b"" if sealer is None else sealer.kid,
                max_metadata_bytes=self.options.max_metadata_bytes,
                delete=gone,
                set=pairs(sealer),
            )

        yield from self.writer.write(key, build, Ctx(key, keys, argument="set"))

    def delete(self, key: str, given_token: str | None = None) -> Op[bool]:
        key = check_key(key)
        # A fresh token without an idempotency key: kept only as long as redis-py's retry of
        # this very call may come (its reply lost), which then answers True as the first did.
        call = call_token(given_token)
        kept = self.options.grace_ms
        if given_token is None:
            kept = min(kept, DELETE_RETRY_MS)
        sk, keys = self.trees.keys(key)
        draft = new_event(LifecycleEventType.DELETE, key)
        log_key = self.events.log_of(key)
        events = self.events.events_of(key)
        attempts, batches = 0, None
        while attempts < DELETE_ATTEMPTS:
            # One more than a batch: a session with more children than a script should take
            # at once loses them a batch at a time first (see discard_children.lua).
            (members,) = yield from self.index.reads([("ZRANGE", sk.kids, 0, DELETE_BATCH)], key)
            if len(members) > DELETE_BATCH:
                if batches is None:  # the bound: as many as the children counted now fill
                    (count,) = yield from self.index.reads([("ZCARD", sk.kids)], key)
                    batches = int(count) // DELETE_BATCH + DELETE_ATTEMPTS
                batches -= 1
                if batches < 0:
                    break
                child_keys, children, drafts = self._children_args(key, members[:DELETE_BATCH])
                discard = contracts.discard_children(
                    root=keys,
                    log=log_key,
                    gone=sk.gone,
                    child_records=child_keys,
                    call_token=call,
                    events=events,
                    children=children,
                )
                reply = yield discard
                batch = contracts.parsed(
                    contracts.DiscardedBatch, check(reply, Ctx(key, discard.keys))
                )
                self.trees.forget(key)
                if batch.done:  # this call's delete was done before (as delete.lua answers it)
                    yield Emit(draft.event(b""))
                    return True
                yield from _discards(drafts, batch.event_ids)
                continue
            attempts += 1
            child_keys, children, drafts = self._children_args(key, members)
            request = contracts.delete(
                root=keys,
                pop=sk.pop,
                turn=sk.turn,
                wake=sk.wake,
                log=log_key,
                gone=sk.gone,
                child_records=child_keys,
                session_key=key,
                call_token=call,
                gone_ms=kept,
                events=events,
                event=draft.fields,
                children=children,
            )
            reply = yield request
            if contracts.status(reply) != Status.CONFLICT:
                deleted = contracts.parsed(contracts.Deleted, check(reply, Ctx(key, request.keys)))
                existed = bool(deleted.existed)
                self.trees.forget(key)
                if existed:
                    yield from _discards(drafts, deleted.event_ids)
                    yield Emit(draft.event(deleted.event_id))
                elif deleted.event_id:  # it had expired unseen: its expire event, logged now
                    expired = draft._replace(type=LifecycleEventType.EXPIRE.value)
                    yield Emit(expired.event(deleted.event_id))
                return existed
        raise ConcurrentChange(key, "children kept changing while the session was deleted")

    def _children_args(
        self, key: str, members: Sequence[bytes]
    ) -> tuple[list[str | bytes], list[bytes], list[Draft | None]]:
        """For children ``members`` (as read from session ``key``'s ``kids``) of a delete:
        their keys (meta, msgs, ids, staging list each), their arguments (the member and the
        fields of its ``discard`` event, ``b""`` for a damaged member) and their drafts (None:
        a damaged member, which has no event).
        """
        child_keys: list[str | bytes] = []
        children: list[bytes] = []
        drafts: list[Draft | None] = []
        for raw in members:
            raw = bytes(raw)
            child_key = codec.member_key(raw)
            ck = self.schema.child(child_key)  # a damaged member too
            child_keys += map(codec.wire, (ck.meta, ck.msgs, ck.ids, ck.stage))
            if codec.is_damaged(child_key):  # not a key a child could have: no event
                drafts.append(None)
                children += (raw, b"")
                continue
            child = discard_event(key, child_key)
            drafts.append(child)
            children += (raw, child.fields)
        return child_keys, children, drafts

    def append_messages(
        self,
        key: str,
        messages: Sequence[Message],
        *,
        expect_last_id: str | None = None,
        metadata: Mapping[str, str] | None = None,
        fence: Fence = NO_FENCE,
    ) -> Op[int]:
        if isinstance(messages, Message) or not isinstance(messages, Sequence):
            raise InvalidArgument("messages", "must be a sequence of Message")
        expect = expect_last(expect_last_id)
        if not messages:
            check_key(key)
            if metadata is not None:
                self.metadata.pairs(metadata, "metadata")
            return 0
        key = check_key(key)
        o = self.options
        counts: list[int | None] = []
        pairs = codec.message_args(
            messages, "messages", o.max_message_bytes, o.count_tokens, counts
        )
        self.limits.check_batch(pairs[1::2], "messages")
        twins = self._twins(key, messages, pairs, counts)
        build, ctx = self._append(
            key, messages, pairs, "messages", metadata, expect, expect_last_id, fence
        )
        reply = yield from self.writer.write(key, build, ctx)
        for body, twin in twins:
            self.reader.wrote(body, twin)
        written = appended(reply)
        note_spent(messages, written)
        return written

    def append_message(
        self,
        key: str,
        msg: Message,
        *,
        expect_last_id: str | None = None,
        metadata: Mapping[str, str] | None = None,
        fence: Fence = NO_FENCE,
    ) -> Op[bool]:
        if type(msg) is not Message:
            msg = message_arg(msg)
        key = check_key(key)
        expect = b"" if expect_last_id is None else expect_last(expect_last_id)
        body, ready, tokens = codec.stored_form(msg, "msg", self.options.count_tokens)
        limit = self.options.max_message_bytes
        pair = [codec.message_tag(msg, tokens), codec.check_size(body, limit, "msg")]
        twin = None  # the hot path's one message: _twins's work, without its loop
        if ready and self.keyring.passphrase is None:
            twin = self.reader.twin(key, body, msg, tokens)
        build, ctx = self._append(key, (msg,), pair, "msg", metadata, expect, expect_last_id, fence)
        reply = yield from self.writer.write(key, build, ctx)
        if twin is not None:
            self.reader.wrote(body, twin)
        written = appended(reply)
        if msg.usage is not None:
            note_spent((msg,), written)
        return written == 1

    def _ctx(
        self,
        key: str,
        keys: Sequence[str],
        expect_last_id: str | None,
        fence: Fence,
        argument: str = "",
    ) -> Ctx:
        return Ctx(
            key,
            keys,
            index=-1,
            expect_id=expect_last_id or "",
            token=fence.token,
            argument=argument,
        )

    def _append(
        self,
        key: str,
        messages: Sequence[Message],
        pairs: list[bytes],
        argument: str,
        metadata: Mapping[str, str] | None,
        expect: bytes,
        expect_last_id: str | None,
        fence: Fence,
    ) -> tuple[Callable[[Sealer | None], ScriptCall], Callable[[], Ctx]]:
        """What the write loop (:meth:`Writer.write`) takes to append ``messages`` to session
        ``key`` (checked; ``pairs``: their digest/stored-form pairs, checked): the script call
        for a sealer, and the context of its errors.
        """
        o = self.options
        sk, root = self.trees.keys(key)
        # None and {} both set nothing; {} is still checked to be a mapping.
        meta = None if metadata is None else self.metadata.pairs(metadata, "metadata")
        trees = self.trees
        usage = self.schema.usage_of(key)

        def build(sealer: Sealer | None) -> ScriptCall:
            return contracts.append_message(
                root=root,
                turn=sk.turn,
                usage=usage,
                members=trees.members(key),
                head=trees.head(key),
                max_messages=o.max_history_turns,
                session_key=key,
                kid=b"" if sealer is None else sealer.kid,
                max_metadata_bytes=o.max_metadata_bytes,
                fence=fence.value,
                expect_last=expect,
                budget=o.max_usage_tokens,
                max_tokens=o.max_history_tokens,
                metadata=() if meta is None else meta(sealer),
                messages=pairs
                if sealer is None
                else codec.seal_pairs(pairs, messages, sealer, argument, o.max_message_bytes),
            )

        def ctx() -> Ctx:
            return self._ctx(key, (*root, sk.turn, usage), expect_last_id, fence, "metadata")

        return build, ctx

    def _twins(
        self,
        key: str,
        messages: Sequence[Message],
        pairs: list[bytes],
        counts: list[int | None],
    ) -> list[tuple[bytes, Message]]:
        """Each stored form of ``messages`` (in ``pairs``, with the token ``counts`` the store
        gave them) with its decoded twin, for those a read may take it for
        (:meth:`Reader.twin`; none in a sealed store), taken before the write is sent.
        """
        reader = self.reader
        found: list[tuple[bytes, Message]] = []
        if self.keyring.passphrase is not None:
            return found
        for msg, body, tokens in zip(messages, pairs[1::2], counts, strict=True):
            twin = reader.twin(key, body, msg, tokens) if codec.twin_ready(msg) else None
            if twin is not None:
                found.append((body, twin))
        return found

    def annotate_timeout(self, key: str, partial: str) -> Op[bool]:
        text(partial, "partial")
        msg = Message(role=MessageRole.ASSISTANT, content=TIMEOUT_NOTICE)
        return (yield from self.append_message(key, msg))

    def compact_messages(
        self,
        key: str,
        up_to_index: int,
        summary: str,
        *,
        expect_id: str | None = None,
        fence: Fence = NO_FENCE,
    ) -> Op[int]:
        key = check_key(key)
        index = non_negative_int(up_to_index, "up_to_index")
        text(summary, "summary")
        optional_str(expect_id, "expect_id")
        limit = self.options.max_message_bytes
        msg = Message(role=MessageRole.SYSTEM, content="[Compacted Summary]\n" + summary)
        expect = codec.id_prefix(expect_id) if expect_id else b""
        sk, root = self.trees.keys(key)
        log = self.events.log_of(key)
        counts: list[int | None] = []
        pairs = codec.message_args([msg], "summary", limit, self.options.count_tokens, counts)
        summary_tokens = counts[0] or 0
        draft = new_event(LifecycleEventType.COMPACT, key, summary_tokens=summary_tokens)

        def build(sealer: Sealer | None) -> ScriptCall:
            tag, element = codec.seal_pairs(pairs, [msg], sealer, "summary", limit)
            return contracts.compact_messages(
                root=root,
                turn=sk.turn,
                log=log,
                members=self.trees.members(key),
                head=self.trees.head(key),
                session_key=key,
                up_to=index,
                tag=tag,
                element=element,
                expect=expect,
                events=self.events.events_of(key),
                event=draft.fields,
                kid=b"" if sealer is None else sealer.kid,
                fence=fence.value,
            )

        keys = (*root, sk.turn, log)
        ctx = Ctx(key, keys, index=index, expect_id=expect_id or "", token=fence.token)
        reply = yield from self.writer.write(key, build, ctx)
        compacted = contracts.parsed(contracts.Compacted, reply)
        if compacted.removed:
            if compacted.reclaimed_tokens is not None:
                reclaimed = (("reclaimed_tokens", compacted.reclaimed_tokens),)
                draft = draft._replace(extra=draft.extra + reclaimed)
            yield Emit(draft.event(compacted.event_id))
        return compacted.removed

    def end(self, key: str) -> Op[bool]:
        key = check_key(key)
        _, root = self.trees.keys(key)
        draft = new_event(LifecycleEventType.END, key)
        call = contracts.end_session(
            root=root,
            log=self.events.log_of(key),
            events=self.events.events_of(key),
            event=draft.fields,
        )
        reply = yield call
        ended = contracts.parsed(contracts.Ended, check(reply, Ctx(key, call.keys)))
        if ended.event_id is None:  # ended before
            return False
        yield Emit(draft.event(ended.event_id))
        return True

    def pop_message(self, key: str, *, expect_id: str | None = None) -> Op[Message | None]:
        key = check_key(key)
        optional_str(expect_id, "expect_id")
        expect = codec.id_prefix(expect_id) if expect_id else b""
        sk, keys = self.trees.keys(key)
        call = token()
        digest = codec.message_digest("pop:" + call)

        def build(sealer: Sealer | None) -> ScriptCall:
            return contracts.pop_message(
                root=keys,
                pop=sk.pop,
                members=self.trees.members(key),
                head=self.trees.head(key),
                session_key=key,
                call_token=call,
                digest=digest,
                expect=expect,
                kid=b"" if sealer is None else sealer.kid,
                keep_ms=self.options.pop_keep_ms,
            )

        ctx = Ctx(key, keys, index=-1, expect_id=expect_id or "", kind="pop", name=key)
        popped = contracts.parsed(contracts.Popped, (yield from self.writer.write(key, build, ctx)))
        if popped.element is None:
            return None
        element = popped.element
        (msg,) = yield from self.keyring.written(
            key, lambda o: codec.decode_messages(key, [element], o)
        )
        found: Message = msg
        return found
