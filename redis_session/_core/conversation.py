"""Branch, rewind and repair a conversation (sans-I/O generators; see ``_core``).

A branch is a read of the session (one snapshot) and a ``create`` of the new one under its own
key, through create's path: one script, or a long history staged in bounded steps and swapped
in by the script, so that a crash midway leaves nothing visible; messages are sealed again
under the new key (a sealed message is bound to its session). A rewind finds the kept message
in a read, discards the live children forked from the tail it takes away, and removes the
tail in one script that checks the history is still what was read.
A repair (``cleanup_failed_turn``) discards the live children, then answers the open tool calls
in one append that expects the newest message the repair read.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import orjson

from .. import codec, contracts
from ..errors import (
    ChildNotFound,
    ConcurrentChange,
    InvalidArgument,
    MessageNotFound,
    StaleExpectation,
)
from ..keys import check_key
from ..models import LifecycleEventType, Message, MessageRole, Session, ToolCall
from ..status import Ctx, Status, check
from .args import call_token, optional_str, text
from .children import Children
from .eventlog import new_event
from .limits import WRITE_ATTEMPTS
from .requests import Emit, Op, ScriptCall
from .sessions import NO_FENCE, TIMEOUT_NOTICE, Fence, Sessions

FAILED_TURN = "tool call was interrupted and did not complete"
"""The default reason ``cleanup_failed_turn`` gives the tool calls it closes."""


def position_of(key: str, history: Sequence[Message], message_id: str) -> int:
    """The index of message ``message_id`` in ``history`` (the newest such), else
    :class:`MessageNotFound`.
    """
    for i in range(len(history) - 1, -1, -1):
        if history[i].id == message_id:
            return i
    raise MessageNotFound(key, message_id)


def open_tool_calls(history: Sequence[Message]) -> list[ToolCall]:
    """The tool calls of ``history`` left without an answer, in order: a call is answered when
    its ``output`` is set, or a later message carries a call of the same id with an output or
    is a ``tool`` message carrying it (a tool may answer ``""``). Reasoning parts
    (``thought``) are not calls.
    """
    answered: set[str] = set()
    found: list[ToolCall] = []
    for msg in reversed(history):
        answers = msg.role.normalize() is MessageRole.TOOL
        for call in reversed(msg.tool_calls):
            if call.thought:
                continue
            if call.output or answers:
                answered.add(call.id)
            elif call.id not in answered:
                answered.add(call.id)  # one answer per id
                found.append(call)
    found.reverse()
    return found


def closing_message(calls: Sequence[ToolCall], reason: str) -> Message:
    """One ``tool`` message answering each of ``calls`` with ``{"error": reason}`` (JSON)."""
    output = orjson.dumps({"error": reason}).decode()
    return Message(
        role=MessageRole.TOOL,
        tool_calls=tuple(c.model_copy(update={"output": output}) for c in calls),
    )


class Conversation:
    """Branch, rewind and repair (see the module docstring)."""

    def __init__(self, sessions: Sessions, children: Children) -> None:
        self.sessions = sessions
        self.children = children

    def branch(
        self,
        key: str,
        new_key: str,
        at: str | None = None,
        metadata: Mapping[str, str] | None = None,
        given_token: str | None = None,
    ) -> Op[Session]:
        key, new_key = check_key(key), check_key(new_key)
        if new_key == key:
            raise InvalidArgument("new_key", "is the key of the session branched")
        optional_str(at, "at")
        extra = {} if metadata is None else metadata
        self.sessions.metadata.pairs(extra, "metadata")  # checked before anything is read
        source, _ = yield from self.sessions.read(key)
        return (yield from self._branch(source, new_key, at, extra, given_token))

    def _branch(
        self,
        source: Session,
        new_key: str,
        at: str | None,
        metadata: Mapping[str, str],
        given_token: str | None,
    ) -> Op[Session]:
        history = source.history
        if at is not None:
            history = history[: position_of(source.key, history, at) + 1]
        last = history[-1].id if history else ""
        branch = source.model_copy(
            update={
                "key": new_key,
                "history": history,
                "metadata": {**source.metadata, **metadata},
                "branch_of": source.key,
                "branch_at": last,
                "ended_at": None,
            }
        )
        draft = new_event(LifecycleEventType.BRANCH, new_key, branch_of=source.key, message_id=last)
        # In steps of a merge's (2,000 messages): a branch is a copy, and no script of it may
        # hold the server as a 10,000-message create does (docs/benchmarks.md).
        step = self.sessions.limits.step_messages
        created: Session = yield from self.sessions.create(branch, given_token, draft, step)
        return created

    def rewind(
        self,
        key: str,
        after: str,
        keep_as: str | None = None,
        expect_last_id: str | None = None,
        given_token: str | None = None,
        fence: Fence = NO_FENCE,
    ) -> Op[int]:
        key = check_key(key)
        if not isinstance(after, str):
            raise InvalidArgument(
                "after", f"must be a message id or '', not {type(after).__name__}"
            )
        optional_str(expect_last_id, "expect_last_id")
        if keep_as is not None and check_key(keep_as) == key:
            raise InvalidArgument("keep_as", "is the key of the session rewound")
        call = call_token(given_token)
        sessions = self.sessions
        sk, root = sessions.trees.keys(key)
        log = sessions.events.log_of(key)
        keys = (*root, sk.turn, log)
        for _ in range(WRITE_ATTEMPTS):
            session, read = yield from sessions.read(key)
            history = session.history
            newest = history[-1].id if history else ""
            if expect_last_id is not None and expect_last_id != newest:
                raise StaleExpectation(key, -1, expect_last_id, newest)
            kept = 0 if after == "" else position_of(key, history, after) + 1
            if keep_as is not None:  # the session as it is now, first; a retry finds it made
                yield from self._branch(session, keep_as, None, {}, f"{call}:keep")
            yield from self._discard_forked_in({m.id for m in history[kept:]}, key)
            removed = len(history) - kept
            draft = new_event(LifecycleEventType.REWIND, key, message_id=after, count=removed)
            keep = read.head + kept

            def build(
                _sealer: object,
                keep: int = keep,
                read: contracts.Read = read,
                fields: bytes = draft.fields,
            ) -> ScriptCall:
                return contracts.rewind(
                    root=root,
                    turn=sk.turn,
                    log=log,
                    members=sessions.trees.members(key),
                    head=sessions.trees.head(key),
                    session_key=key,
                    call_token=call,
                    generation=read.generation,
                    keep=keep,
                    tail=read.tail,
                    last=codec.id_prefix(after) if after else b"",
                    events=sessions.events.events_of(key),
                    event=fields,
                    fence=fence.value,
                )

            ctx = Ctx(key, keys, index=-1, token=fence.token)
            reply = yield from sessions.writer.write(key, build, ctx, (Status.STALE,))
            if contracts.status(reply) == Status.STALE:
                if keep_as is not None:  # the branch holds what was read: no other may land
                    raise ConcurrentChange(
                        key, f"it changed after {keep_as!r} was branched from it; not rewound"
                    )
                continue
            rewound = contracts.parsed(contracts.Rewound, check(reply, ctx))
            if rewound.removed:
                yield Emit(draft.event(rewound.event_id))
            return rewound.removed
        raise ConcurrentChange(key, "its history kept changing while it was rewound")

    def _discard_forked_in(self, removed: set[str], key: str) -> Op[None]:
        """Discard the live children of session ``key`` forked after one of the ``removed``
        messages (each with its ``discard`` event): they were forked from a tail a rewind
        takes away.
        """
        if not removed:
            return
        for child in (yield from self.children.children_of(key)):
            if child.merged_at is None and child.forked_after in removed:
                try:
                    yield from self.children.discard_child(child.key)
                except ChildNotFound:  # another worker discarded or merged it meanwhile
                    continue

    def cleanup_failed_turn(
        self, key: str, reason: str = FAILED_TURN, *, notice: Message | None = None
    ) -> Op[int]:
        key = check_key(key)
        text(reason, "reason")
        sessions = self.sessions
        for child in (yield from self.children.children_of(key)):
            if child.merged_at is None:
                yield from self.children.discard_child(child.key)
        for _ in range(WRITE_ATTEMPTS):
            history = yield from sessions.get_history(key)
            calls = open_tool_calls(history)
            added = [] if notice is None else [notice]
            if calls:
                added.insert(0, closing_message(calls, reason))
            if not added:
                return 0
            newest = history[-1].id if history else ""
            try:
                yield from sessions.append_messages(key, added, expect_last_id=newest)
            except StaleExpectation:
                continue  # another writer came first: read again
            return len(calls)
        raise ConcurrentChange(key, "its history kept changing while its tool calls were closed")

    def annotated(self, key: str, partial: str) -> Op[bool]:
        """``annotate_timeout(close_tool_calls=True)``: the repair, the notice in its append."""
        text(partial, "partial")
        notice = Message(role=MessageRole.ASSISTANT, content=TIMEOUT_NOTICE)
        yield from self.cleanup_failed_turn(key, notice=notice)
        return True
