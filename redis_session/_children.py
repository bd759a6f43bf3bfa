"""Child-session operations (sans-I/O generators; see ``_core``): fork, append, merge,
discard, read.

Children live in their parent's tree: they expire with it (see ``_base``), and the newest
``keep_merged_children`` merged children stay whole (record and history) while older ones
leave only a tombstone in the parent's ``done`` zset (the newest 100 are kept), so a tree
does not grow with the number of sub-agents that ever ran in it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any

from . import codec
from ._args import message, text, token
from ._base import READ_ATTEMPTS, STAGE_LEASE_MS, CoreBase
from ._requests import Commands, Emit, Op, ScriptCall
from .crypto import Opener, Sealer
from .errors import (
    ChildNotFound,
    ConcurrentChange,
    CorruptData,
    EncryptionError,
    InvalidArgument,
    SessionError,
)
from .events import new_event
from .keys import ChildKeys, check_key, parent_of
from .models import (
    ChildSession,
    ChildSessionConfig,
    LifecycleEventType,
    Message,
    MessageRole,
)
from .status import Ctx, Status, check

CHILDREN_READ_ATTEMPTS = 8


def _child_token(reply: Sequence[Any]) -> Any:
    """The child's fork token, from the meta array of a ``get_child`` script's reply."""
    meta = reply[1]
    for i in range(0, len(meta) - 1, 2):
        if bytes(meta[i]) == b"token":
            return meta[i + 1]
    return b""


class ChildOps(CoreBase):
    """The child-session operations of a store."""

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

    def _learn_from(self, root: str, reply: Sequence[Any], at: int) -> None:
        """Learn ``root``'s tree from a reply whose tg is at ``at``, its members after it."""
        self._learn_tree(root, reply[at], reply[at + 1 :])

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
        ck = self.schema.child(child.key)
        _, root = self._keys(parent_key)
        event, payload = new_event(
            LifecycleEventType.FORK, parent_key, child_key=child.key, agent_name=agent_name
        )
        call = token()

        def build(staged: int, generation: Any) -> Callable[[Sealer | None], ScriptCall]:
            def make(sealer: Sealer | None) -> ScriptCall:
                args = [
                    *self._head(parent_key), parent_key, child.key, agent_name,
                    codec.encode_config(config), config.max_messages, config.inherit_history,
                    call, self.channel, payload, b"" if sealer is None else sealer.kid,
                    staged, generation, self.step_messages,
                ]  # fmt: skip
                keys = (*root, ck.meta, ck.msgs, ck.ids, *self._tree(parent_key)[1])
                return ScriptCall("fork_child", keys, args)

            return make

        keys = (*root, ck.meta, ck.msgs, ck.ids)
        ctx = Ctx(child.key, keys, child=True, parent=parent_key)
        passthrough = (Status.STAGE, Status.STALE)
        for _ in range(READ_ATTEMPTS):
            reply = yield from self._write(parent_key, build(0, ""), ctx, passthrough)
            if reply[0] == Status.STAGE:  # many to inherit: copy them in steps first
                g, h, n = reply[1], int(reply[2]), int(reply[3])
                copied = yield from self._copy_inherited(
                    root, ck.msgs, g, max(h, n - config.inherit_history), n
                )
                if copied < 0:
                    continue
                reply = yield from self._write(parent_key, build(copied, g), ctx, passthrough)
            if reply[0] != Status.STALE:
                break
        else:
            raise ConcurrentChange(parent_key, "its history kept changing during a fork")
        self._learn_tree(parent_key, reply[2], reply[4:])
        yield Emit(event)
        if reply[3] is None:  # a long inheritance: read in steps, as get_child reads
            history = (yield from self.get_child(child.key)).history
        else:
            items = [bytes(item[8:]) for item in reply[3]]
            history = yield from self._written(
                parent_key, lambda o: codec.decode_messages(child.key, items, o)
            )
        created = codec.to_datetime(int(reply[1]))
        return child.model_copy(update={"created_at": created, "history": history})

    def _copy_inherited(
        self, root: tuple[str, ...], target: str, generation: Any, first: int, last: int
    ) -> Op[int]:
        """Copy the parent's messages ``first .. last - 1`` (in ``generation``) to a new
        child's list in steps, each marked inherited; how many, or -1 when the parent's list
        began a new generation meanwhile.
        """
        at, copied = first, 0
        keys = (root[0], root[1], target)
        while at < last:
            args = (
                generation, at, last, copied, codec.INHERITED, STAGE_LEASE_MS, self.read_budget,
            )  # fmt: skip
            part = yield ScriptCall("copy_range", keys, args)
            if part[0] == Status.STALE:
                yield Commands([("DEL", target)])
                return -1
            at, copied = int(check(part, Ctx(keys=keys))[1]), int(part[2])
        return copied

    def append_child_messages(self, child_key: str, messages: Sequence[Message]) -> Op[int]:
        child_key, parent, _, ck = self._child_keys(child_key)
        if isinstance(messages, Message) or not isinstance(messages, Sequence):
            raise InvalidArgument("messages", "must be a sequence of Message")
        if not messages:
            return 0
        pairs = codec.message_args(messages, "messages", self.max_message_bytes)
        self._check_batch(pairs[1::2], "messages")
        _, root = self._keys(parent)

        def build(sealer: Sealer | None) -> ScriptCall:
            args = [
                *self._head(parent),
                parent,
                child_key,
                b"" if sealer is None else sealer.kid,
                *codec.child_elements(
                    codec.seal_pairs(pairs, messages, sealer, "messages", self.max_message_bytes)
                ),
            ]
            keys = (*root, ck.meta, ck.msgs, ck.ids, *self._tree(parent)[1])
            return ScriptCall("append_child_message", keys, args)

        keys = (*root, ck.meta, ck.msgs, ck.ids)
        ctx = Ctx(child_key, keys, child=True, parent=parent)
        reply = yield from self._write(parent, build, ctx)
        return int(reply[1])

    def append_child_message(self, child_key: str, msg: Message) -> Op[bool]:
        added = yield from self.append_child_messages(child_key, [message(msg)])
        return added == 1

    def merge_child(self, child_key: str, summary: str, author: str | None = None) -> Op[int]:
        child_key, parent, agent, ck = self._child_keys(child_key)
        text(summary, "summary")
        if author is not None:
            text(author, "author")
        msg = Message(role=MessageRole.ASSISTANT, content=summary, author=author or agent)
        pairs = codec.message_args([msg], "summary", self.max_message_bytes)
        event, payload = new_event(
            LifecycleEventType.MERGE, parent, child_key=child_key, agent_name=agent
        )
        call = token()
        digest = codec.message_digest("merge:" + call)
        _, root = self._keys(parent)

        def build(staged: tuple[Any, ...] | None) -> Callable[[Sealer | None], ScriptCall]:
            def make(sealer: Sealer | None) -> ScriptCall:
                summary_digest, body = codec.seal_pairs(
                    pairs, [msg], sealer, "summary", self.max_message_bytes
                )
                mode = "staged" if staged else ("summary" if summary else "history")
                args = [
                    *self._head(parent), self.max_history_turns, parent, child_key, call,
                    digest, mode, summary_digest, body, self.channel, payload,
                    b"" if sealer is None else sealer.kid, self.keep_merged_children,
                    *(staged or ("", 0, self.step_messages, 0)),
                ]  # fmt: skip
                keys = (*root, ck.meta, ck.msgs, ck.ids, ck.stage, *self._tree(parent)[1])
                return ScriptCall("merge_child", keys, args)

            return make

        keys = (*root, ck.meta, ck.msgs, ck.ids, ck.stage)
        ctx = Ctx(child_key, keys, child=True, parent=parent)
        reply = yield from self._write(parent, build(None), ctx, (Status.STAGE,))
        if reply[0] == Status.STAGE:
            reply = yield from self._merge_in_steps(child_key, parent, call, keys, build, ctx)
        self._learn_from(parent, reply, 3)
        yield Emit(event)
        return int(reply[2])

    def _merge_in_steps(
        self,
        child_key: str,
        parent: str,
        call: str,
        keys: tuple[str, ...],
        build: Callable[[tuple[Any, ...] | None], Callable[[Sealer | None], ScriptCall]],
        ctx: Ctx,
    ) -> Op[Any]:
        """A merge of a child too large for one script call: under the child's merge lease,
        copy the parent's messages, then the child's, into a staging list in steps of a
        bounded size, then swap it in with ``merge_child`` (staged); a parent whose list began
        a new generation meanwhile (compaction, pop) makes it begin again.
        """
        for _ in range(READ_ATTEMPTS):

            def stage(step: str, *args: Any) -> Callable[[Sealer | None], ScriptCall]:
                def make(sealer: Sealer | None) -> ScriptCall:
                    kid = b"" if sealer is None else sealer.kid
                    argv = (
                        *self._head(parent), parent, child_key, call, step, *args,
                        STAGE_LEASE_MS, kid, self.read_budget,
                    )  # fmt: skip
                    return ScriptCall("merge_stage", keys, argv)

                return make

            passthrough = (Status.STALE,)
            begin = yield from self._write(parent, stage("begin", 0, 0, 0, ""), ctx, passthrough)
            if begin[0] == Status.STALE:
                continue
            g, h, n, ch, cn = (int(v) for v in begin[1:6])
            staged = pushed = 0
            stale = False
            for step, first, last in (("parent", h, n), ("child", ch, cn)):
                at = first
                while at < last and not stale:
                    args = (at, last, staged, g)
                    part = yield from self._write(parent, stage(step, *args), ctx, passthrough)
                    stale = part[0] == Status.STALE
                    if not stale:
                        at, staged = int(part[1]), int(part[2])
                        pushed += int(part[3])
            if stale:
                continue
            final = build((g, n, pushed, staged))
            reply = yield from self._write(parent, final, ctx, passthrough)
            if reply[0] != Status.STALE:
                return reply
        raise ConcurrentChange(child_key, "its parent's history kept changing during a merge")

    def discard_child(self, child_key: str) -> Op[None]:
        child_key, parent, agent, ck = self._child_keys(child_key)
        event, payload = new_event(
            LifecycleEventType.DISCARD, parent, child_key=child_key, agent_name=agent
        )
        digest = codec.message_digest("discard:" + token())
        _, root = self._keys(parent)

        def build(sealer: Sealer | None) -> ScriptCall:
            args = (*self._head(parent), parent, child_key, digest, self.channel, payload)
            return ScriptCall("discard_child", (*root, ck.meta, ck.msgs, ck.ids), args)

        keys = (*root, ck.meta, ck.msgs, ck.ids)
        reply = yield from self._write(parent, build, Ctx(child_key, keys, child=True))
        self._learn_from(parent, reply, 1)
        yield Emit(event)

    def get_child(self, child_key: str) -> Op[ChildSession]:
        child_key, parent, _, ck = self._child_keys(child_key)
        parent_keys = self.schema.session(parent)
        keys = (ck.meta, ck.msgs, parent_keys.done, parent_keys.meta)
        held = self._reads.get(child_key)
        known: tuple[Any, ...] = ("", "", "", "")
        if held is not None:
            known = (held.generation, held.tail, held.head, held.token)
        args = (child_key, known[0], known[1], self.read_budget, known[2], known[3])
        first = ScriptCall("get_child", keys, args, write=False)
        ctx = Ctx(child_key, keys, child=True)
        try:
            reply, items = yield from self._read_list(
                child_key, first, ctx, (5, 4, 6, 7, 2), (ck.meta, ck.msgs), _child_token
            )
        except SessionError:
            self._reads.discard(child_key)
            raise
        bodies = [bytes(item[8:]) for item in items]
        if self.passphrase is None:
            new = codec.decode_messages(child_key, bodies)
        else:
            new = yield from self._opened(
                parent, reply[8], reply[9], lambda o: codec.decode_messages(child_key, bodies, o)
            )
        meta = reply[1]
        fields = dict(zip(meta[::2], meta[1::2], strict=True))
        version = (bytes(fields.get(b"token", b"")), b"%d" % int(reply[5]))
        start, h = int(reply[2]), int(reply[3])
        history = self._hold(child_key, held, version, h, start, h, new, bodies)
        child: ChildSession = yield from self._opened(
            parent, reply[8], reply[9],
            lambda o: codec.decode_child(child_key, meta, (), o, history=history),
        )  # fmt: skip
        return child

    def children_of(self, parent_key: str) -> Op[list[ChildSession]]:
        parent_key = check_key(parent_key, "parent_key")
        sk = self.schema.session(parent_key)
        kids = sk.kids
        for _ in range(CHILDREN_READ_ATTEMPTS):
            (members,) = yield Commands([("ZRANGE", kids, 0, -1)])
            raw = [bytes(m) for m in members]
            keys: list[str | bytes] = [kids, sk.meta]
            for m in raw:
                ck = self.schema.child(codec.member_key(m))
                keys += (codec.wire(ck.meta), codec.wire(ck.msgs))
            reply = yield ScriptCall("children_of", keys, (self.read_budget, *raw), write=False)
            if reply[0] != Status.CONFLICT:
                check(reply, Ctx(parent_key, keys))
                break
        else:
            raise ConcurrentChange(parent_key, "its children kept changing while read")
        entries: list[tuple[str, Any, list[bytes]] | ChildSession] = []
        kid, dk = reply[1]
        for m, (meta, items, upto, n) in zip(raw, reply[2:], strict=True):
            child = codec.member_key(m)
            if int(upto) < int(n) and meta:
                with contextlib.suppress(ChildNotFound):  # a long child: read on its own, in
                    entries.append((yield from self.get_child(child)))  # steps (gone: skip)
                continue
            entries.append((child, meta, list(items)))

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

        found: list[ChildSession] = yield from self._opened(parent_key, kid, dk, decode)
        return found
