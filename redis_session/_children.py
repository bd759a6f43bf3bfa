"""Child-session operations (sans-I/O generators; see ``_core``): fork, append, merge,
discard, read.

Children live in their parent's tree: they expire with it (see ``_base``), and the newest
``keep_merged_children`` merged children stay whole (record and history) while older ones
leave only a tombstone in the parent's ``done`` zset (the newest 100 are kept), so a tree
does not grow with the number of sub-agents that ever ran in it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from . import codec
from ._args import message, text, token
from ._base import CoreBase
from ._requests import Commands, Emit, Op, ScriptCall
from .crypto import Keyring, Sealer
from .errors import (
    ChildNotFound,
    ConcurrentChange,
    CorruptData,
    EncryptionError,
    InvalidArgument,
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

READ_ATTEMPTS = 8


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

        def build(sealer: Sealer | None) -> ScriptCall:
            args = [
                *self._head(parent_key), parent_key, child.key, agent_name,
                codec.encode_config(config), config.max_messages, config.inherit_history, call,
                self.channel, payload, b"" if sealer is None else sealer.kid, 0, "",
            ]  # fmt: skip
            keys = (*root, ck.meta, ck.msgs, ck.ids, *self._tree(parent_key)[1])
            return ScriptCall("fork_child", keys, args)

        keys = (*root, ck.meta, ck.msgs, ck.ids)
        ctx = Ctx(child.key, keys, child=True, parent=parent_key)
        reply = yield from self._write(parent_key, build, ctx)
        self._learn_tree(parent_key, reply[2], reply[4:])
        yield Emit(event)
        items = [bytes(item[8:]) for item in reply[3]]
        history: list[Message] = yield from self._opened(
            lambda ring: codec.decode_messages(child.key, items, ring, parent_key)
        )
        created = codec.to_datetime(int(reply[1]))
        return child.model_copy(update={"created_at": created, "history": history})

    def append_child_messages(self, child_key: str, messages: Sequence[Message]) -> Op[int]:
        child_key, parent, _, ck = self._child_keys(child_key)
        if isinstance(messages, Message) or not isinstance(messages, Sequence):
            raise InvalidArgument("messages", "must be a sequence of Message")
        if not messages:
            return 0
        pairs = codec.message_args(messages, "messages", self.max_message_bytes)
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

        def build(sealer: Sealer | None) -> ScriptCall:
            summary_digest, body = codec.seal_pairs(
                pairs, [msg], sealer, "summary", self.max_message_bytes
            )
            args = [
                *self._head(parent), self.max_history_turns, parent, child_key, call, digest,
                "summary" if summary else "history", summary_digest, body, self.channel,
                payload, b"" if sealer is None else sealer.kid, self.keep_merged_children,
                "", 0, 0,
            ]  # fmt: skip
            keys = (*root, ck.meta, ck.msgs, ck.ids, ck.stage, *self._tree(parent)[1])
            return ScriptCall("merge_child", keys, args)

        keys = (*root, ck.meta, ck.msgs, ck.ids, ck.stage)
        ctx = Ctx(child_key, keys, child=True, parent=parent)
        reply = yield from self._write(parent, build, ctx)
        self._learn_from(parent, reply, 3)
        yield Emit(event)
        return int(reply[2])

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
        keys = (ck.meta, ck.msgs, self.schema.session(parent).done)
        reply = yield ScriptCall("get_child", keys, (child_key, "", ""), write=False)
        check(reply, Ctx(child_key, keys, child=True))
        child: ChildSession = yield from self._opened(
            lambda ring: codec.decode_child(child_key, reply[1], reply[6], ring)
        )
        return child

    def children_of(self, parent_key: str) -> Op[list[ChildSession]]:
        parent_key = check_key(parent_key, "parent_key")
        kids = self.schema.session(parent_key).kids
        for _ in range(READ_ATTEMPTS):
            (members,) = yield Commands([("ZRANGE", kids, 0, -1)])
            if not members:
                return []
            raw = [bytes(m) for m in members]
            keys: list[str | bytes] = [kids]
            for m in raw:
                ck = self.schema.child(codec.member_key(m))
                keys += (codec.wire(ck.meta), codec.wire(ck.msgs))
            reply = yield ScriptCall("children_of", keys, raw, write=False)
            if reply[0] != Status.CONFLICT:
                check(reply, Ctx(parent_key, keys))
                break
        else:
            raise ConcurrentChange(parent_key, "its children kept changing while read")

        def decode(ring: Keyring | None) -> list[ChildSession]:
            out = []
            for m, (meta, items) in zip(raw, reply[1:], strict=True):
                child = codec.member_key(m)
                try:
                    if codec.is_damaged(child):
                        raise CorruptData(parent_key, f"child key {m!r} is not UTF-8")
                    if not meta:
                        raise CorruptData(child, "the child's record is missing (evicted?)")
                    if b"discarded" in meta[::2]:
                        continue  # a tombstone of the first layout
                    out.append(codec.decode_child(child, meta, items, ring))
                except EncryptionError:
                    raise  # tampering is never skipped quietly
                except CorruptData as exc:
                    codec.log_bad_record("children_of", exc)
            return out

        found: list[ChildSession] = yield from self._opened(decode)
        return found
