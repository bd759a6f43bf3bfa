"""Child-session operations (sans-I/O generators; see ``_core``): fork, append, merge,
discard, read.

Children live in their parent's tree: they expire with it (see ``trees``), and the newest
``keep_merged_children`` merged children stay whole (record and history) while older ones
leave only a tombstone in the parent's ``done`` zset (the newest 100 are kept), so a tree
does not grow with the number of sub-agents that ever ran in it.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Callable, Sequence
from typing import Any

from .. import codec, contracts
from .._transport.telemetry import note_spent
from ..crypto import Opener, Sealer
from ..errors import (
    ChildNotFound,
    ConcurrentChange,
    CorruptData,
    EncryptionError,
    InvalidArgument,
    SessionError,
)
from ..keys import CHILD_MARKER, ChildKeys, KeySchema, check_key, parent_of
from ..models import ChildSession, ChildSessionConfig, LifecycleEventType, Message, MessageRole
from ..options import StoreOptions
from ..status import Ctx, Status, check
from .args import call_token, message, text
from .eventlog import EventLog, new_event
from .index import Index
from .keyring import Keyring
from .limits import READ_ATTEMPTS, STAGE_LEASE_MS, Limits
from .reads import Reader
from .requests import Commands, Emit, Op, ScriptCall
from .sessions import NO_FENCE, Fence, expect_last
from .trees import Trees
from .writes import Writer, appended

CHILDREN_READ_ATTEMPTS = 8


def _child_token(read: contracts.ChildRead) -> bytes:
    """The child's fork token, from the meta array of a ``get_child`` reply."""
    meta = read.meta
    if isinstance(meta, dict):
        return bytes(meta.get(b"token", b""))
    for i in range(0, len(meta) - 1, 2):
        if bytes(meta[i]) == b"token":
            return bytes(meta[i + 1])
    return b""


def token_child_key(parent_key: str, agent_name: str, call: str) -> str:
    """The key of the child that the fork with the caller's token ``call`` makes: the
    ``ChildSession.new`` form, its number a digest of the call instead of the clock, so a
    retry of the call names the same child.
    """
    name = f"{parent_key}\0{agent_name}\0{call}".encode("utf-8", "surrogatepass")
    number = int.from_bytes(hashlib.blake2b(name, digest_size=8).digest(), "big")
    return f"{parent_key}{CHILD_MARKER}{agent_name}:{number}"


class Children:
    """The child-session operations of a store."""

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

    def _child_keys(self, child_key: object) -> tuple[str, str, str, ChildKeys]:
        """``(child_key, parent_key, agent, child key names)``; not-found if the key is not one
        ``fork_child`` makes.
        """
        child_key = check_key(child_key, "child_key")
        parsed = parent_of(child_key)
        if parsed is None:
            raise ChildNotFound(child_key)
        parent, agent = parsed
        return child_key, parent, agent, self.schema.child(child_key)

    def _kid(self, sealer: Sealer | None) -> bytes:
        return b"" if sealer is None else sealer.kid

    def fork_child(
        self,
        parent_key: str,
        agent_name: str,
        config: ChildSessionConfig | None = None,
        given_token: str | None = None,
    ) -> Op[ChildSession]:
        parent_key = check_key(parent_key, "parent_key")
        if not isinstance(agent_name, str) or not agent_name or ":" in agent_name:
            raise InvalidArgument("agent_name", "must be a non-empty str without ':'")
        codec.text_arg(agent_name, "agent_name")
        config = ChildSessionConfig() if config is None else config
        if not isinstance(config, ChildSessionConfig):
            raise InvalidArgument("config", "must be a ChildSessionConfig or None")
        call = call_token(given_token)
        child = ChildSession.new(parent_key, agent_name, config)
        if given_token is not None:  # the caller's retry names the same child
            child = child.model_copy(update={"key": token_child_key(parent_key, agent_name, call)})
        ck = self.schema.child(child.key)
        _, root = self.trees.keys(parent_key)
        draft = new_event(
            LifecycleEventType.FORK, parent_key, child_key=child.key, agent_name=agent_name
        )
        log = self.events.log_of(parent_key)

        def build(staged: int, generation: Any) -> Callable[[Sealer | None], ScriptCall]:
            def make(sealer: Sealer | None) -> ScriptCall:
                return contracts.fork_child(
                    root=root,
                    child_meta=ck.meta,
                    child_msgs=ck.msgs,
                    child_ids=ck.ids,
                    log=log,
                    members=self.trees.members(parent_key),
                    head=self.trees.head(parent_key),
                    parent_key=parent_key,
                    child_key=child.key,
                    agent=agent_name,
                    config=codec.encode_config(config),
                    max_messages=config.max_messages,
                    inherit=config.inherit_history,
                    call_token=call,
                    events=self.events.events_of(parent_key),
                    event=draft.fields,
                    kid=self._kid(sealer),
                    staged=staged,
                    staged_generation=generation,
                    step=self.limits.step_messages,
                )

            return make

        keys = (*root, ck.meta, ck.msgs, ck.ids, log)
        ctx = Ctx(child.key, keys, child=True, parent=parent_key)
        passthrough = (Status.STAGE, Status.STALE)
        write = self.writer.write
        for _ in range(READ_ATTEMPTS):
            reply = yield from write(parent_key, build(0, ""), ctx, passthrough)
            if contracts.status(reply) == Status.STAGE:  # many to inherit: in steps first
                stage = contracts.parsed(contracts.ForkStage, reply)
                first = max(stage.head, stage.tail - config.inherit_history)
                copied = yield from self._copy_inherited(
                    root, ck.msgs, stage.generation, first, stage.tail
                )
                if copied < 0:
                    continue
                reply = yield from write(
                    parent_key, build(copied, stage.generation), ctx, passthrough
                )
            if contracts.status(reply) != Status.STALE:
                break
        else:
            raise ConcurrentChange(parent_key, "its history kept changing during a fork")
        forked = contracts.parsed(contracts.Forked, reply)
        self.trees.learn(parent_key, forked.tree_generation, forked.members)
        yield Emit(draft.event(forked.event_id))
        if forked.elements is None:  # inherited in steps: read so
            history = (yield from self.get_child(child.key)).history
        else:
            items = [item[8:] for item in forked.elements]
            history = yield from self.keyring.written(
                parent_key, lambda o: codec.decode_messages(child.key, items, o)
            )
        created = codec.to_datetime(forked.created_at)
        forked_after = codec.fork_point(child.key, forked.fork_point)
        return child.model_copy(
            update={
                "created_at": created,
                "history": history,
                "forked_after": forked_after,
                "context_tokens": forked.context_tokens,
            }
        )

    def _copy_inherited(
        self, root: tuple[str, ...], target: str, generation: int, first: int, last: int
    ) -> Op[int]:
        """Copy the parent's messages ``first .. last - 1`` (in ``generation``) to a new
        child's list in steps, each marked inherited; how many, or -1 when the parent's list
        began a new generation meanwhile.
        """
        at, copied = first, 0
        while at < last:
            call = contracts.copy_range(
                source_meta=root[0],
                source_msgs=root[1],
                target=target,
                generation=generation,
                from_=at,
                to=last,
                copied=copied,
                prefix=codec.INHERITED,
                ttl_ms=STAGE_LEASE_MS,
                budget=self.limits.read_budget,
            )
            reply = yield call
            if contracts.status(reply) == Status.STALE:
                yield Commands([("DEL", target)])
                return -1
            step = contracts.parsed(contracts.Copied, check(reply, Ctx(keys=call.keys)))
            at, copied = step.upto, step.length
        return copied

    def append_child_messages(
        self,
        child_key: str,
        messages: Sequence[Message],
        *,
        expect_last_id: str | None = None,
        fence: Fence = NO_FENCE,
    ) -> Op[int]:
        child_key, parent, _, ck = self._child_keys(child_key)
        if isinstance(messages, Message) or not isinstance(messages, Sequence):
            raise InvalidArgument("messages", "must be a sequence of Message")
        expect = expect_last(expect_last_id)
        if not messages:
            return 0
        limit = self.options.max_message_bytes
        pairs = codec.message_args(messages, "messages", limit, self.options.count_tokens)
        self.limits.check_batch(pairs[1::2], "messages")
        sk, root = self.trees.keys(parent)
        usage = self.schema.usage_of(parent)
        keys = (*root, ck.meta, ck.msgs, ck.ids, sk.turn, usage)

        def build(sealer: Sealer | None) -> ScriptCall:
            sealed = codec.seal_pairs(pairs, messages, sealer, "messages", limit)
            return contracts.append_child_message(
                root=root,
                child_meta=ck.meta,
                child_msgs=ck.msgs,
                child_ids=ck.ids,
                turn=sk.turn,
                usage=usage,
                members=self.trees.members(parent),
                head=self.trees.head(parent),
                parent_key=parent,
                child_key=child_key,
                kid=self._kid(sealer),
                fence=fence.value,
                expect_last=expect,
                budget=self.options.max_usage_tokens,
                messages=codec.child_elements(sealed),
            )

        ctx = Ctx(
            child_key, keys, child=True, parent=parent, index=-1,
            expect_id=expect_last_id or "", token=fence.token,
        )  # fmt: skip
        reply = yield from self.writer.write(parent, build, ctx)
        written = appended(reply)
        note_spent(messages, written)
        return written

    def append_child_message(
        self,
        child_key: str,
        msg: Message,
        *,
        expect_last_id: str | None = None,
        fence: Fence = NO_FENCE,
    ) -> Op[bool]:
        added = yield from self.append_child_messages(
            child_key, [message(msg)], expect_last_id=expect_last_id, fence=fence
        )
        return added == 1

    def merge_child(
        self,
        child_key: str,
        summary: str,
        author: str | None = None,
        given_token: str | None = None,
    ) -> Op[int]:
        child_key, parent, agent, ck = self._child_keys(child_key)
        text(summary, "summary")
        if author is not None:
            text(author, "author")
        limit = self.options.max_message_bytes
        msg = Message(role=MessageRole.ASSISTANT, content=summary, author=author or agent)
        pairs = codec.message_args([msg], "summary", limit, self.options.count_tokens)
        draft = new_event(LifecycleEventType.MERGE, parent, child_key=child_key, agent_name=agent)
        log = self.events.log_of(parent)
        call = call_token(given_token)
        digest = codec.message_digest("merge:" + call)
        _, root = self.trees.keys(parent)

        def build(staged: Sequence[Any] | None) -> Callable[[Sealer | None], ScriptCall]:
            generation, tail, child, length = staged or ("", 0, self.limits.step_messages, 0)

            def make(sealer: Sealer | None) -> ScriptCall:
                summary_tag, element = codec.seal_pairs(pairs, [msg], sealer, "summary", limit)
                mode = "staged" if staged else ("summary" if summary else "history")
                return contracts.merge_child(
                    root=root,
                    child_meta=ck.meta,
                    child_msgs=ck.msgs,
                    child_ids=ck.ids,
                    stage=ck.stage,
                    log=log,
                    members=self.trees.members(parent),
                    head=self.trees.head(parent),
                    max_messages=self.options.max_history_turns,
                    parent_key=parent,
                    child_key=child_key,
                    call_token=call,
                    call_digest=digest,
                    mode=mode,
                    summary_tag=summary_tag,
                    summary=element,
                    events=self.events.events_of(parent),
                    event=draft.fields,
                    kid=self._kid(sealer),
                    keep_merged=self.options.keep_merged_children,
                    staged_generation=generation,
                    staged_tail=tail,
                    staged_child=child,
                    staged_length=length,
                    max_tokens=self.options.max_history_tokens,
                )

            return make

        ctx = Ctx(
            child_key, (*root, ck.meta, ck.msgs, ck.ids, ck.stage, log), child=True, parent=parent
        )
        reply = yield from self.writer.write(parent, build(None), ctx, (Status.STAGE,))
        if contracts.status(reply) == Status.STAGE:
            reply = yield from self._merge_in_steps(child_key, parent, call, root, ck, build, ctx)
        merged = contracts.parsed(contracts.Merged, reply)
        self.trees.learn(parent, merged.tree_generation, merged.members)
        yield Emit(draft.event(merged.event_id))
        return merged.appended

    def _merge_in_steps(
        self,
        child_key: str,
        parent: str,
        call: str,
        root: tuple[str, ...],
        ck: ChildKeys,
        build: Callable[[Sequence[Any] | None], Callable[[Sealer | None], ScriptCall]],
        ctx: Ctx,
    ) -> Op[Sequence[Any]]:
        """A merge of a child too large for one script call: under the child's merge lease,
        copy the parent's messages, then the child's, into a staging list in steps of a
        bounded size, then swap it in with ``merge_child`` (staged); a parent whose list began
        a new generation meanwhile (compaction, pop) makes it begin again.
        """
        write = self.writer.write
        for _ in range(READ_ATTEMPTS):

            def stage(
                step: str, from_: int = 0, to: int = 0, staged: int = 0, generation: Any = ""
            ) -> Callable[[Sealer | None], ScriptCall]:
                def make(sealer: Sealer | None) -> ScriptCall:
                    return contracts.merge_stage(
                        root=root,
                        child_meta=ck.meta,
                        child_msgs=ck.msgs,
                        child_ids=ck.ids,
                        stage=ck.stage,
                        head=self.trees.head(parent),
                        parent_key=parent,
                        child_key=child_key,
                        call_token=call,
                        step=step,
                        from_=from_,
                        to=to,
                        staged=staged,
                        generation=generation,
                        lease_ms=STAGE_LEASE_MS,
                        kid=self._kid(sealer),
                        budget=self.limits.read_budget,
                    )

                return make

            passthrough = (Status.STALE,)
            reply = yield from write(parent, stage("begin"), ctx, passthrough)
            if contracts.status(reply) == Status.STALE:
                continue
            begun = contracts.parsed(contracts.MergeBegun, reply)
            g = begun.generation
            staged = pushed = 0
            stale = False
            for step, first, last in (
                ("parent", begun.head, begun.tail),
                ("child", begun.child_head, begun.child_tail),
            ):
                at = first
                while at < last and not stale:
                    reply = yield from write(
                        parent, stage(step, at, last, staged, g), ctx, passthrough
                    )
                    stale = contracts.status(reply) == Status.STALE
                    if not stale:
                        part = contracts.parsed(contracts.MergeStep, reply)
                        at, staged = part.upto, part.length
                        pushed += part.child_staged
            if stale:
                continue
            final = build((g, begun.tail, pushed, staged))
            reply = yield from write(parent, final, ctx, passthrough)
            if contracts.status(reply) != Status.STALE:
                return reply
        raise ConcurrentChange(child_key, "its parent's history kept changing during a merge")

    def discard_child(self, child_key: str, given_token: str | None = None) -> Op[None]:
        child_key, parent, agent, ck = self._child_keys(child_key)
        draft = new_event(LifecycleEventType.DISCARD, parent, child_key=child_key, agent_name=agent)
        digest = codec.message_digest("discard:" + call_token(given_token))
        _, root = self.trees.keys(parent)
        log = self.events.log_of(parent)
        keys = (*root, ck.meta, ck.msgs, ck.ids, log)

        def build(sealer: Sealer | None) -> ScriptCall:
            return contracts.discard_child(
                root=root,
                child_meta=ck.meta,
                child_msgs=ck.msgs,
                child_ids=ck.ids,
                log=log,
                head=self.trees.head(parent),
                parent_key=parent,
                child_key=child_key,
                call_digest=digest,
                events=self.events.events_of(parent),
                event=draft.fields,
            )

        reply = yield from self.writer.write(parent, build, Ctx(child_key, keys, child=True))
        discarded = contracts.parsed(contracts.Discarded, reply)
        self.trees.learn(parent, discarded.tree_generation, discarded.members)
        yield Emit(draft.event(discarded.event_id))

    def get_child(self, child_key: str) -> Op[ChildSession]:
        child_key, parent, _, ck = self._child_keys(child_key)
        parent_keys = self.schema.session(parent)
        keys = (ck.meta, ck.msgs, parent_keys.done, parent_keys.meta, ck.ids)
        reader = self.reader
        held = reader.cache.get(child_key)

        def call(budget: int, after: Sequence[tuple[Any, ...]], meta: bool) -> ScriptCall:
            return contracts.get_child(
                child_meta=ck.meta,
                child_msgs=ck.msgs,
                done=parent_keys.done,
                parent_meta=parent_keys.meta,
                child_ids=ck.ids,
                child_key=child_key,
                generation="" if held is None else held.generation,
                tail="" if held is None else held.tail,
                budget=budget,
                held_head="" if held is None else held.head,
                token="" if held is None else held.token,
            )

        def ctx() -> Ctx:
            return Ctx(child_key, keys, child=True)

        try:
            read, items = yield from reader.listed(
                child_key, call, contracts.ChildRead, ctx, (ck.meta, ck.msgs), _child_token
            )
        except SessionError:
            reader.cache.discard(child_key)
            raise
        bodies = [item[8:] for item in items]
        if self.keyring.passphrase is None:
            new = codec.decode_messages(child_key, bodies)
        else:
            new = yield from self.keyring.opened(
                parent, read.kid, read.dk, lambda o: codec.decode_messages(child_key, bodies, o)
            )
        meta = read.meta
        version = (_child_token(read), b"%d" % read.generation)
        start, h = read.from_, read.head
        size = sum(map(len, bodies))
        history = reader.hold(child_key, held, version, h, start, h, new, size, len(bodies))
        tokens = read.context_tokens
        child: ChildSession = yield from self.keyring.opened(
            parent,
            read.kid,
            read.dk,
            lambda o: codec.decode_child(
                child_key, meta, (), o, history=history, context_tokens=tokens
            ),
        )
        return child

    def children_of(self, parent_key: str) -> Op[list[ChildSession]]:
        parent_key = check_key(parent_key, "parent_key")
        sk = self.schema.session(parent_key)
        kids = sk.kids
        for _ in range(CHILDREN_READ_ATTEMPTS):
            (members,) = yield from self.index.reads([("ZRANGE", kids, 0, -1)], parent_key)
            raw = [bytes(m) for m in members]
            records: list[str | bytes] = []
            for m in raw:
                ck = self.schema.child(codec.member_key(m))
                records += (codec.wire(ck.meta), codec.wire(ck.msgs))
            call = contracts.children_of(
                kids=kids,
                parent_meta=sk.meta,
                children=records,
                budget=self.limits.read_budget,
                child_keys=raw,
            )
            reply = yield call
            if contracts.status(reply) != Status.CONFLICT:
                check(reply, Ctx(parent_key, call.keys))
                break
        else:
            raise ConcurrentChange(parent_key, "its children kept changing while read")
        found = contracts.parsed(contracts.Children, reply)
        entries: list[tuple[str, Any, list[bytes]] | ChildSession] = []
        kid, dk = found.key_record
        for m, values in zip(raw, found.children, strict=True):
            child = codec.member_key(m)
            part = contracts.typed(contracts.ChildPart, values)
            if part.upto < part.tail and part.meta:
                with contextlib.suppress(ChildNotFound):  # a long child: read on its own, in
                    entries.append((yield from self.get_child(child)))  # steps (gone: skip)
                continue
            entries.append((child, part.meta, list(part.elements)))

        def decode(opener: Opener | None) -> list[ChildSession]:
            out = []
            for entry in entries:
                if isinstance(entry, ChildSession):
                    out.append(entry)
                    continue
                child, meta, items = entry
                try:
                    if codec.is_damaged(child):
                        raise CorruptData(parent_key, f"child key {child!r} is not UTF-8")
                    if not meta:
                        raise CorruptData(child, "the child's record is missing (evicted?)")
                    out.append(codec.decode_child(child, meta, items, opener))
                except EncryptionError:
                    raise  # tampering is never skipped quietly
                except CorruptData as exc:
                    codec.log_bad_record("children_of", exc)
            return out

        result: list[ChildSession] = yield from self.keyring.opened(parent_key, kid, dk, decode)
        return result
