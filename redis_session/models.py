"""Pydantic v2 models: messages, sessions, child sessions, lifecycle events, run context."""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
)

from ._transport.fast import ModelMetaclass
from .errors import InvalidArgument, InvalidModel

__all__ = [
    "ChildSession",
    "ChildSessionConfig",
    "LifecycleEventType",
    "Message",
    "MessageRole",
    "RunContext",
    "Session",
    "SessionLifecycleEvent",
    "SessionSummary",
    "ToolCall",
    "Usage",
    "estimate_tokens",
    "new_message_id",
    "utcnow",
]

#: What a message id may hold: printable ASCII without space, quote or backslash, 1-128 chars,
#: so its JSON form is the id itself between quotes (the Lua scripts match on it).
MESSAGE_ID_PATTERN = r"^[!#-\[\]-~]{1,128}$"

#: The largest token count or usage figure a message may carry (2^40: a script's sums of them
#: stay exact in Lua's numbers and in a double).
MAX_TOKENS = 2**40


def utcnow() -> datetime:
    """The current time as a timezone-aware UTC datetime."""
    return datetime.now(UTC)


def new_message_id() -> str:
    """A fresh random message id (128 bits, URL-safe base64, 22 characters)."""
    return secrets.token_urlsafe(16)


def _as_utc(value: datetime) -> datetime:
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value.astimezone(UTC)


STORED_CONTEXT = {"redis_session": "stored form"}
"""The validation context of a stored message read by ``Message``'s own validation (the
public path): there, as in the stored form, a timestamp is never null."""


def _now_if_none(value: Any, info: ValidationInfo) -> Any:
    if value is None:
        if info.context is STORED_CONTEXT:
            raise ValueError("a stored message has a timestamp")
        return utcnow()
    return value


UTCDateTime = Annotated[datetime, AfterValidator(_as_utc)]
"""A datetime normalised to aware UTC; naive input is taken to be UTC."""

_STRICT = ConfigDict(extra="forbid", ser_json_bytes="base64", val_json_bytes="base64")
_FROZEN = ConfigDict(**_STRICT, frozen=True)


def invalid_field(model: str, exc: ValidationError) -> InvalidArgument:
    """A pydantic ``ValidationError`` of ``model``'s constructor as one line naming the field
    (``Session.metadata.lang: Input should be a valid string, got 1``), the count of further
    problems after it.
    """
    problems = exc.errors(include_url=False)
    first = problems[0]
    where = model
    for part in first["loc"]:
        where += f"[{part}]" if isinstance(part, int) else f".{part}"
    text = " ".join(str(first["msg"]).split())
    if first["type"] not in ("missing", "extra_forbidden"):
        text += f", got {first['input']!r:.80}"
    if len(problems) > 1:
        text += f" (and {len(problems) - 1} more)"
    return InvalidModel.of(exc, where, text)


class _OneLineErrors(ModelMetaclass):
    """The models' metaclass: pydantic's own, its constructor call reporting bad fields as
    :class:`InvalidArgument` on one line. Only a call of the class itself goes through it:
    pydantic's validation (nested models, ``model_validate``, the codec's decoding) builds
    instances without it, at pydantic-core's speed, and raises its ``ValidationError``.
    """

    def __call__(cls, /, *args: Any, **data: Any) -> Any:
        try:
            return super().__call__(*args, **data)
        except ValidationError as exc:
            raise invalid_field(cls.__name__, exc) from None


class _Model(BaseModel, metaclass=_OneLineErrors):
    """A model whose constructor reports bad fields as :class:`InvalidArgument` (a
    ``SessionError`` and a ``ValueError``) on one line naming the field, as the store's own
    argument checks do. ``model_validate`` and ``model_validate_json`` stay pydantic's (they
    raise ``pydantic.ValidationError``, also a ``ValueError``).
    """


class MessageRole(StrEnum):
    """Who said a message. ``function`` and ``model`` are legacy names kept for old data."""

    USER = "user"
    ASSISTANT = "assistant"
    TOOL = "tool"
    SYSTEM = "system"
    FUNCTION = "function"
    MODEL = "model"

    def normalize(self) -> MessageRole:
        """Map legacy roles to current ones: ``model`` → assistant, ``function`` → tool."""
        if self is MessageRole.MODEL:
            return MessageRole.ASSISTANT
        if self is MessageRole.FUNCTION:
            return MessageRole.TOOL
        return self


class ToolCall(_Model):
    """One tool invocation made by the model, with its result once known. Immutable (change
    one with ``model_copy(update=...)``).
    """

    model_config = _FROZEN

    id: str
    """The provider's id of the call."""
    name: str
    """The tool's name."""
    input: str
    """The arguments as the model produced them (usually JSON text)."""
    output: str = ""
    """The tool's result."""
    thought: bool = False
    """Whether this part is the model's reasoning rather than a real call."""
    thought_signature: bytes | None = None
    """An opaque provider signature of the reasoning; base64 in JSON."""


class Usage(_Model):
    """What the model call that produced a message cost. Immutable; ``a + b`` adds two.

    ``Session.usage`` sums it over every message a session was ever given (trimming, compaction
    and rewind do not lower it; a merge adds a child's to its parent's), and a session's usage
    budget (``max_usage_tokens``) counts :attr:`total_tokens`.
    """

    model_config = _FROZEN

    input_tokens: int = Field(default=0, ge=0, le=MAX_TOKENS)
    """Tokens the model read (the prompt). A message's figures are at most 2^40 each (the
    scripts' sums stay exact); a sum (``Session.usage``, ``store.usage()``) may be larger."""
    output_tokens: int = Field(default=0, ge=0, le=MAX_TOKENS)
    """Tokens the model wrote."""
    requests: int = Field(default=0, ge=0, le=MAX_TOKENS)
    """Model requests made."""

    @property
    def total_tokens(self) -> int:
        """``input_tokens + output_tokens``: what a usage budget counts."""
        return self.input_tokens + self.output_tokens

    def __add__(self, other: Usage) -> Usage:
        if not isinstance(other, Usage):
            return NotImplemented
        return Usage.total(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.requests + other.requests,
        )

    @classmethod
    def total(cls, input_tokens: int, output_tokens: int, requests: int) -> Usage:
        """A sum of usages (not held to one message's bound of 2^40 a figure)."""
        return cls.model_construct(
            input_tokens=input_tokens, output_tokens=output_tokens, requests=requests
        )


def _one_call(usage: Usage | None) -> Usage | None:
    """A message's usage, held to one call's bound (a ``Usage`` built as a sum is not)."""
    if usage is not None and not all(0 <= n <= MAX_TOKENS for n in usage.__dict__.values()):
        raise ValueError("a message's usage figures must be from 0 to 2**40")
    return usage


class Message(_Model):
    """One message of a conversation.

    ``id`` is generated when the message is built, so appending the same object twice stores
    it once: the store skips a message whose id the session already holds.

    Immutable (frozen; ``tool_calls`` a tuple): a store hands the same decoded messages to
    every read of a session it read before (only new messages are sent and decoded), so no
    caller can change what another read returns. Change one with ``model_copy(update=...)``.
    """

    model_config = _FROZEN

    id: str = Field(default_factory=new_message_id, pattern=MESSAGE_ID_PATTERN)
    """Idempotency id; printable ASCII without space, quote or backslash, at most 128 chars."""
    tokens: int | None = Field(default=None, ge=0, le=MAX_TOKENS)
    """The message's size in the model's context, as the caller's tokenizer counts it. Where
    it is None a store counts it when it stores the message (its ``count_tokens`` option:
    :func:`estimate_tokens` by default), so that every message it stores has one (None on
    a read only for a store told ``count_tokens=None``, or messages stored before)."""
    role: MessageRole
    """Who said it; plain strings such as ``"user"`` are accepted."""
    content: str = ""
    """The text."""
    timestamp: Annotated[UTCDateTime, BeforeValidator(_now_if_none)] = Field(default_factory=utcnow)
    """When it was said, aware UTC; naive input is UTC; ``None`` or absent means now."""
    tool_calls: tuple[ToolCall, ...] = ()
    """Tool invocations carried by this message (a list is accepted and stored as a tuple)."""
    author: str = ""
    """The agent that wrote it, in multi-agent routing."""
    usage: Annotated[Usage | None, AfterValidator(_one_call)] = None
    """What the model call that produced this message cost (None: nothing, or not known).
    Added to the session's :attr:`Session.usage` when the message is appended. Each figure at
    most 2^40 (a sum such as ``a + b`` past it is refused here)."""


TOKEN_CHARS = 4
"""Characters a token stands for in :func:`estimate_tokens` (OpenAI's rule of thumb for
English text)."""
MESSAGE_TOKENS = 4
"""Tokens :func:`estimate_tokens` adds for a message's framing (its role and separators)."""


TokenCounter = Callable[[Message], int]
"""A store's ``count_tokens``: a message's token count (:func:`estimate_tokens` by default)."""


def estimate_tokens(msg: Message) -> int:
    """A store's default ``count_tokens``: an estimate of ``msg``'s size in a model's context
    without a tokenizer: its text (``content``, and each tool call's ``name``, ``input`` and
    ``output``) at one token per :data:`TOKEN_CHARS` characters, rounded up, plus
    :data:`MESSAGE_TOKENS` for the message's framing. Close to a GPT-style tokenizer's count
    for English prose and JSON, low for text of many tokens per character (CJK, emoji) and
    for images; give :attr:`Message.tokens` from the model's own tokenizer, or the store a
    ``count_tokens`` of your own, where the count must be exact.
    """
    chars = len(msg.content)
    for call in msg.tool_calls:
        chars += len(call.name) + len(call.input) + len(call.output)
    return -(-chars // TOKEN_CHARS) + MESSAGE_TOKENS


class Session(_Model):
    """A conversation: scalar fields, string metadata and the message history."""

    model_config = _STRICT

    key: str
    """The session's identity: any non-empty string."""
    agent_id: str = ""
    channel_type: str = ""
    channel_id: str = ""
    model: str = ""
    history: list[Message] = Field(default_factory=list)
    """Messages in append order."""
    metadata: dict[str, str] = Field(default_factory=dict)
    created_at: UTCDateTime = Field(default_factory=utcnow)
    """Set by the store on ``create`` (the Redis server's clock)."""
    updated_at: UTCDateTime = Field(default_factory=utcnow)
    """Set by the store on every write (the Redis server's clock)."""
    ended_at: UTCDateTime | None = None
    """Set by ``store.end(key)`` (the Redis server's clock); None while the session has not
    been ended. ``create`` and ``update`` ignore it."""
    branch_of: str = ""
    """The session this one was branched from (``store.branch``, ``rewind(keep_as=...)``);
    ``""`` for a session that is not a branch. Stored in cleartext (as the key is); ``update``
    leaves it as it is."""
    branch_at: str = ""
    """The id of the last message the branch took from ``branch_of`` (``""``: it took none)."""
    usage: Usage = Field(default_factory=Usage)
    """The sum of the usage of every message the session was ever given (kept by the store in
    the script of each append: trimming, compaction, pop and rewind do not lower it; a merged
    child's is added to its parent's; a branch starts from that of the messages it holds).
    ``create`` sums its history's; ``update`` ignores it."""
    max_usage_tokens: int | None = Field(default=None, ge=0, le=MAX_TOKENS)
    """The session's usage budget in tokens (:attr:`Usage.total_tokens`): an append to a session
    whose usage has reached it raises ``UsageLimitExceeded``. None: the store's
    ``max_usage_tokens``; 0: no budget. Set by ``create`` (``update`` leaves it as it is)."""
    context_tokens: int | None = Field(default=None, ge=0)
    """The tokens of the messages the session holds now: the sum of their
    :attr:`Message.tokens` (a message without a count counts 0), kept exact by the store in
    the script of every write (an append and its trim, a compaction with its summary's count,
    a pop, a merge, a rewind, a branch). Set by the store when it reads the session; None:
    unknown (a session stored before the store kept token sums, or whose list another program
    changed). ``create`` and ``update`` ignore it."""


class SessionSummary(_Model):
    """One row of ``list_sessions``."""

    model_config = _STRICT

    key: str
    created_at: UTCDateTime
    updated_at: UTCDateTime


class ChildSessionConfig(_Model):
    """How a child session behaves."""

    model_config = _STRICT

    max_messages: int = Field(default=0, ge=0)
    """Keep only the newest N messages in the child; 0 = unlimited."""
    inherit_history: int = Field(default=0, ge=0)
    """Copy the parent's last N messages into the child at fork; 0 = none."""
    summarize_on_merge: bool = False
    """A hint for the caller that the merge should carry a summary, not the full history."""


class ChildSession(_Model):
    """A sub-agent's session: it reads its parent and writes only itself until merged."""

    model_config = _STRICT

    key: str
    parent_key: str
    agent_name: str
    history: list[Message] = Field(default_factory=list)
    config: ChildSessionConfig = Field(default_factory=ChildSessionConfig)
    created_at: UTCDateTime = Field(default_factory=utcnow)
    merged_at: UTCDateTime | None = None
    forked_after: str = ""
    """The id of the parent's newest message when the child was forked (``""``: the parent
    had none, or the child was forked by a version that did not record it). A rewind of the
    parent to before that message discards the child."""
    usage: Usage = Field(default_factory=Usage)
    """The sum of the usage of the messages the child was given (added to its parent's when it
    is merged); held to the store's ``max_usage_tokens``."""
    context_tokens: int | None = Field(default=None, ge=0)
    """The tokens of the messages the child holds now (as :attr:`Session.context_tokens`), set
    by ``get_child``; None: unknown (a child forked in steps, or read from a store that did
    not keep token sums)."""

    @classmethod
    def new(
        cls, parent_key: str, agent_name: str, config: ChildSessionConfig | None = None
    ) -> ChildSession:
        """A new child with key ``"<parent_key>:child:<agent_name>:<unix nanoseconds>"``."""
        return cls(
            key=f"{parent_key}:child:{agent_name}:{time.time_ns()}",
            parent_key=parent_key,
            agent_name=agent_name,
            config=config or ChildSessionConfig(),
        )

    def append_message(self, msg: Message) -> None:
        """Append in memory, keeping only the newest ``config.max_messages`` when that is > 0."""
        self.history.append(msg)
        limit = self.config.max_messages
        if limit > 0 and len(self.history) > limit:
            del self.history[: len(self.history) - limit]

    def is_merged(self) -> bool:
        """Whether the child was merged into its parent."""
        return self.merged_at is not None


class LifecycleEventType(StrEnum):
    """The event types this version emits; listeners must ignore types they do not know."""

    FORK = "fork"
    MERGE = "merge"
    DISCARD = "discard"
    CREATE = "create"
    DELETE = "delete"
    COMPACT = "compact"
    EXPIRE = "expire"
    """A session tree's deadline passed (logged once per tree by the store's reaper)."""
    END = "end"
    """``store.end(key)`` marked the session ended (once per session)."""
    BRANCH = "branch"
    """``store.branch`` made session ``key`` from ``branch_of`` (up to message ``message_id``)."""
    REWIND = "rewind"
    """``store.rewind`` removed ``count`` messages after message ``message_id`` of ``key``."""


def _event_type(value: Any) -> Any:
    """A known event type as its :class:`LifecycleEventType` member, any other as it is."""
    if type(value) is str:
        try:
            return LifecycleEventType(value)
        except ValueError:
            return value
    return value


class SessionLifecycleEvent(_Model):
    """Something that happened to a session or child session.

    ``type`` is a :class:`LifecycleEventType` for the types this version knows (a ``StrEnum``:
    equal to its string, ``event.type == "merge"``) and a plain ``str`` for a type a later
    version adds, so that such events still parse (listeners ignore types they do not know).
    """

    model_config = ConfigDict(extra="ignore")

    type: Annotated[LifecycleEventType | str, BeforeValidator(_event_type)]
    child_key: str = ""
    parent_key: str = ""
    agent_name: str = ""
    key: str = ""
    """The session the event is about (the parent for child events)."""
    timestamp: UTCDateTime | None = None
    id: str = ""
    """The event's position in its event log (a Redis stream id); ``""`` where there is no
    log (``event_log_max=0``, events off) or for a call retried after its event was logged."""
    branch_of: str = ""
    """For ``branch``: the session branched from."""
    message_id: str = ""
    """For ``branch``: the last message taken; for ``rewind``: the message kept last (``""``:
    none)."""
    count: int = 0
    """For ``rewind``: how many messages it removed."""
    summary_tokens: int | None = None
    """For ``compact``: the summary's token count."""
    reclaimed_tokens: int | None = None
    """For ``compact``: the tokens the removed messages held (None: the session's token sums
    are unknown, see :attr:`Session.context_tokens`)."""
    deliveries: int = 1
    """How many times a consumer group handed this event out (more than 1: re-delivered after
    a member did not acknowledge it in time); 1 outside groups."""


class PendingEvent(_Model):
    """An event a consumer group gave a member that has not acknowledged it (``store.pending``)."""

    model_config = _STRICT

    id: str
    """The event's id in its log."""
    event: SessionLifecycleEvent | None
    """The event; None when the log no longer holds it (trimmed)."""
    consumer: str
    """The member holding it."""
    deliveries: int
    """How many times the group gave it out."""
    idle: float
    """Seconds since it was last given out."""


class RunContext(_Model):
    """Identifies the workflow run a turn belongs to."""

    model_config = _STRICT

    session_type: str = ""
    workflow_id: str = ""
    run_id: str = ""
