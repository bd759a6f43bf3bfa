"""Branch, rewind and repair a conversation (sans-I/O generators; see ``_core``).

A branch is a read of the session (one snapshot) and a ``create`` of the new one under its own
key, through create's path: one script, or a long history staged in bounded steps and swapped
in by the script, so that a crash midway leaves nothing visible; messages are sealed again
under the new key (a sealed message is bound to its session). A rewind finds the kept message
in a read, discards the live children forked from the tail it takes away, and removes the
tail in one script that checks the history is still what was read.
A repair (``cleanup_failed_turn``) discards the live children and answers the open tool calls in
one script, which expects the newest message the repair read.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence

import orjson

from .. import codec, contracts
from ..crypto import Sealer
from ..errors import (
    ChildAlreadyMerged,
    ChildNotFound,
    ConcurrentChange,
    InvalidArgument,
    MessageNotFound,
    StaleExpectation,
    TurnLost,
)
from ..keys import check_key
from ..models import ChildSession, LifecycleEventType, Message, MessageRole, Session, ToolCall
from ..status import Ctx, Status, check
from .args import MAX_TOKEN, call_token, optional_str, text
from .children import Children
from .eventlog import Draft, discard_event, new_event
from .limits import STEP_BYTES, WRITE_ATTEMPTS
from .requests import Commands, Emit, Op, ScriptCall
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
    return Message(  # each answer names its call, not its arguments (they may be large)
        role=MessageRole.TOOL,
        tool_calls=tuple(c.model_copy(update={"output": output, "input": ""}) for c in calls),
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
        key, new_key = check_key(key), check_key(new_key, "new_key")
        if new_key == key:
            raise InvalidArgument("new_key", "is the key of the session branched")
        optional_str(at, "at")
        extra = {} if metadata is None else metadata
        self.sessions.metadata.pairs(extra, "metadata")  # checked before anything is read
        if given_token is not None:
            call_token(given_token)  # checked before anything is read
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
        """Create ``new_key`` from ``source`` as read; a retry of the call that created it
        answers the branch as stored (what that call made), not one from this read.
        """
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
        # In steps of a merge's (2,000 messages, 1 MiB): a branch is a copy, and no script of
        # it may hold the server as a 10,000-message create does (docs/benchmarks.md).
        step = (self.sessions.limits.step_messages, STEP_BYTES)
        made, again = yield from self.sessions.made(branch, given_token, draft, step)
        if again:
            made, _ = yield from self.sessions.read(new_key)
        return made

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
        if keep_as is not None and check_key(keep_as, "keep_as") == key:
            raise InvalidArgument("keep_as", "is the key of the session rewound")
        call = call_token(given_token)
        digest = codec.message_digest("rewind:" + call)
        sessions = self.sessions
        sk, root = sessions.trees.keys(key)
        log = sessions.events.log_of(key)
        keys = (*root, sk.turn, log)
        ctx = Ctx(key, keys, index=-1, token=fence.token)
        for _ in range(WRITE_ATTEMPTS):
            session, read = yield from sessions.read(key)
            history = session.history
            newest = history[-1].id if history else ""
            stale = expect_last_id is not None and expect_last_id != newest
            missing = None  # `after` is not there (a retry's rewind may be done: it answers)
            try:
                kept = 0 if after == "" else position_of(key, history, after) + 1
            except MessageNotFound as exc:
                kept, missing = len(history), exc
            yield from self._fenced(key, fence)  # before the branch and the discards
            probe = stale or missing is not None  # only the answer of a call made before
            if keep_as is not None and not probe:  # the session as it is, first (a retry: made)
                copy = yield from self._branch(session, keep_as, None, {}, _derived(call, "keep"))
                probe = [m.id for m in copy.history] != [m.id for m in history]
            if not probe:
                yield from self._discard_forked_in({m.id for m in history[kept:]}, key)
            removed = len(history) - kept
            draft = new_event(LifecycleEventType.REWIND, key, message_id=after, count=removed)
            keep = -1 if probe else read.head + kept

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
                    call_digest=digest,
                    generation=read.generation,
                    keep=keep,
                    tail=read.tail,
                    last=codec.id_prefix(after) if after else b"",
                    events=sessions.events.events_of(key),
                    event=fields,
                    fence=fence.value,
                )

            reply = yield from sessions.writer.write(key, build, ctx, (Status.STALE,))
            if contracts.status(reply) == Status.STALE:
                if missing is not None:
                    raise missing
                if stale:
                    raise StaleExpectation(key, -1, expect_last_id or "", newest)
                if keep_as is not None:  # the branch holds what was read: no other may land
                    raise ConcurrentChange(
                        key, f"it changed after {keep_as!r} was branched from it; not rewound"
                    )
                continue
            rewound = contracts.parsed(contracts.Rewound, check(reply, ctx))
            if rewound.removed and not rewound.again:
                yield Emit(draft.event(rewound.event_id))
            return rewound.removed
        raise ConcurrentChange(key, "its history kept changing while it was rewound")

    def _fenced(self, key: str, fence: Fence) -> Op[None]:
        """Refuse (``TurnLost``) a write through a turn that is no longer the caller's, before
        the steps that precede its script (a branch, discards): the script checks again.
        """
        if fence.value:
            sk, _ = self.sessions.trees.keys(key)
            (held,) = yield Commands([("GET", sk.turn)])
            if held is None or bytes(held).decode("utf-8", "replace") != fence.value:
                raise TurnLost(key, fence.token)

    def _discard_forked_in(self, removed: set[str], key: str) -> Op[None]:
        """Discard the live children of session ``key`` forked after one of the ``removed``
        messages (each with its ``discard`` event): they were forked from a tail a rewind
        takes away.
        """
        if not removed:
            return
        yield from self._discard_live(key, lambda child: child.forked_after in removed)

    def _discard_live(self, key: str, which: Callable[[ChildSession], bool]) -> Op[None]:
        """Discard the live children of ``key`` that ``which`` picks; one another worker
        discards, merges or is merging meanwhile is left to it.
        """
        for child in (yield from self.children.children_of(key)):
            if child.merged_at is None and which(child):
                try:
                    yield from self.children.discard_child(child.key)
                except (ChildNotFound, ChildAlreadyMerged):
                    continue

    def cleanup_failed_turn(
        self,
        key: str,
        reason: str = FAILED_TURN,
        *,
        notice: Message | None = None,
        fence: Fence = NO_FENCE,
    ) -> Op[int]:
        key = check_key(key)
        text(reason, "reason")
        sessions = self.sessions
        for _ in range(WRITE_ATTEMPTS):
            history = yield from sessions.get_history(key)
            calls = open_tool_calls(history)
            if not calls and notice is None:  # nothing to answer: the live children only
                yield from self._fenced(key, fence)
                yield from self._discard_live(key, lambda child: True)
                return 0
            newest = history[-1].id if history else ""
            answers = closing_message(calls, reason) if calls else None
            reply = yield from self._cleanup(key, answers, notice, newest, fence)
            if reply is not None:
                return len(calls)
        raise ConcurrentChange(key, "its history kept changing while its tool calls were closed")

    def _cleanup(
        self,
        key: str,
        answers: Message | None,
        notice: Message | None,
        newest: str,
        fence: Fence,
    ) -> Op[contracts.Cleaned | None]:
        """The cleanup script: the live children discarded and ``answers`` and ``notice``
        appended in one step, if the newest message is still ``newest`` (else None).
        """
        sessions = self.sessions
        o = sessions.options
        trees = sessions.trees
        sk, root = trees.keys(key)
        log = sessions.events.log_of(key)
        added = [m for m in (answers, notice) if m is not None]
        pairs = codec.message_args(added, "messages", o.max_message_bytes, o.count_tokens)
        drafts: list[Draft] = []

        def build(sealer: Sealer | None) -> ScriptCall:
            sealed = codec.seal_pairs(pairs, added, sealer, "messages", o.max_message_bytes)
            first = sealed[:2] if answers is not None else [b"", b""]
            second = sealed[-2:] if notice is not None else [b"", b""]
            drafts.clear()
            children: list[bytes | str] = []
            for child in trees.tree(key)[2]:
                draft = discard_event(key, child)
                drafts.append(draft)
                children += (codec.wire(child), draft.fields)
            return contracts.cleanup_failed_turn(
                root=root,
                turn=sk.turn,
                log=log,
                members=trees.members(key),
                head=trees.head(key),
                session_key=key,
                kid=b"" if sealer is None else sealer.kid,
                max_messages=o.max_history_turns,
                fence=fence.value,
                expect_last=b"." if not newest else codec.id_prefix(newest),
                events=sessions.events.events_of(key),
                tag=first[0],
                element=first[1],
                notice_tag=second[0],
                notice=second[1],
                max_tokens=o.max_history_tokens,
                children=children,
            )

        ctx = Ctx(key, (*root, sk.turn, log), index=-1, expect_id=newest, token=fence.token)
        reply = yield from sessions.writer.write(key, build, ctx, (Status.STALE,))
        if contracts.status(reply) == Status.STALE:
            return None  # another writer came first: read again
        cleaned = contracts.parsed(contracts.Cleaned, reply)
        tree = trees.tree(key)
        kept = [c for c, e in zip(tree[2], cleaned.event_ids, strict=False) if e == 0]
        trees.learn(
            key, cleaned.tree_generation, [c.encode("utf-8", "surrogateescape") for c in kept]
        )
        for draft, event_id in zip(drafts, cleaned.event_ids, strict=False):
            if event_id != 0:
                yield Emit(draft.event(event_id))
        return cleaned

    def annotated(self, key: str, partial: str, fence: Fence = NO_FENCE) -> Op[bool]:
        """``annotate_timeout(close_tool_calls=True)``: the repair, the notice in its append."""
        text(partial, "partial")
        notice = Message(role=MessageRole.ASSISTANT, content=TIMEOUT_NOTICE)
        yield from self.cleanup_failed_turn(key, notice=notice, fence=fence)
        return True


def _derived(call: str, part: str) -> str:
    """A call token for one part of a call (``call``: its own token), within a token's length."""
    token = f"{call}:{part}"
    if len(token) <= MAX_TOKEN:
        return token
    return hashlib.sha256(call.encode()).hexdigest()[:40] + ":" + part
