"""The options of a store, validated once: :class:`StoreOptions`.

``RedisStore(client, ttl=60, ...)`` and ``RedisStore(client, options=StoreOptions(ttl=60))``
are the same store; ``from_url(url, **options)`` takes these names for the store and passes
every other keyword to redis-py's client. A new option is one field here (with its check in
:meth:`StoreOptions.__post_init__`) and its use.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from ._core.args import duration_ms, non_negative_int
from ._core.cache import DEFAULT_READ_CACHE_BYTES
from .crypto import DEFAULT_WORK, Passphrase, check_work
from .errors import InvalidArgument, UnknownOption
from .keys import KeySchema
from .models import MAX_TOKENS, TokenCounter, estimate_tokens

DEFAULT_EXPIRED_GRACE = timedelta(days=1)
DEFAULT_MAX_MESSAGE_BYTES = 4 * 1024 * 1024
DEFAULT_MAX_METADATA_BYTES = 4 * 1024 * 1024
DEFAULT_MAX_METADATA_VALUE_BYTES = 1024 * 1024
DEFAULT_DEDUP_WINDOW = 1000
MIN_DEDUP_WINDOW = 64
DEFAULT_KEEP_MERGED_CHILDREN = 4
DEFAULT_EVENT_LOG_MAX = 100_000
DEFAULT_EVENT_LOG_AGE = timedelta(days=7)
"""How long the event log keeps an event."""


@dataclass(frozen=True, slots=True, kw_only=True)
class StoreOptions:
    """Everything a store can be told, each checked once (``InvalidArgument`` naming it)."""

    prefix: str = "rs:"
    """The prefix of every key name (no braces: they pick the cluster slot)."""
    ttl: float | timedelta | None = None
    """The sliding TTL of every session tree (seconds or a timedelta; None: never expire),
    refreshed by every write."""
    max_history_turns: int = 0
    """How many messages a session keeps, the newest (0: all)."""
    max_history_tokens: int = 0
    """How many tokens a session's messages may hold (their counts' sum, its
    ``context_tokens``; 0: no cap): an append trims the oldest messages, in the same script,
    until the rest fit; the newest message always stays. Held where the session's token sums
    are known (``context_tokens`` is not None)."""
    expired_grace: float | timedelta = DEFAULT_EXPIRED_GRACE
    """How long after expiry ``get`` still says ``SessionExpired`` rather than
    ``SessionNotFound``."""
    publish_events: bool = True
    """False: no lifecycle events at all, neither published nor logged (the in-process hook
    still runs, with events whose ``id`` is ``""``)."""
    event_log_max: int = DEFAULT_EVENT_LOG_MAX
    """How many events each event log stream keeps (Redis trims whole blocks: a little more;
    0: no log, pub/sub alone). See docs/events.md."""
    event_log_age: float | timedelta | None = DEFAULT_EVENT_LOG_AGE
    """The log's retention: each event trims the events older than this (7 days; None: by
    count alone). The log has no TTL (see docs/events.md)."""
    sharded_events: bool = False
    """Publish with ``SPUBLISH`` on each slot's shard channel (``<prefix>events:{tag}`` on a
    cluster) instead of ``PUBLISH`` on ``<prefix>events``, which a cluster broadcasts to every
    node; the store's listeners follow either."""
    wait_replicas: int = 0
    """Follow every write with ``WAIT N wait_timeout`` on its connection (``DurabilityNotReached``
    when fewer acknowledge); 0: no WAIT."""
    wait_timeout: float | timedelta = 1.0
    """How long a WAIT waits."""
    failover_window: float | timedelta = 15.0
    """How long writes with ``wait_replicas`` are retried through failovers and slot moves."""
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    """The longest message as stored (0: no limit); longer is refused before anything is sent."""
    max_metadata_bytes: int = DEFAULT_MAX_METADATA_BYTES
    """The most bytes all of a session's metadata takes as stored (0: no limit)."""
    max_metadata_value_bytes: int = DEFAULT_MAX_METADATA_VALUE_BYTES
    """The longest metadata value (0: no limit)."""
    dedup_window: int = DEFAULT_DEDUP_WINDOW
    """How many of a session's newest message ids its id window holds at least (>= 64)."""
    keep_merged_children: int = DEFAULT_KEEP_MERGED_CHILDREN
    """How many merged children per session stay whole (record and history)."""
    passphrase: str | bytes | None = field(default=None, repr=False)
    """Seal session content at rest with keys this passphrase opens (see docs/encryption.md)."""
    kdf_work: int = DEFAULT_WORK
    """log2 of scrypt's n for the passphrase's key."""
    read_cache_bytes: int = DEFAULT_READ_CACHE_BYTES
    """The bound of the read cache, in bytes of messages as stored (0: off)."""
    max_usage_tokens: int = 0
    """Every session's usage budget in tokens, where its own ``Session.max_usage_tokens`` is
    None (0: no budget): an append to a session whose usage (input + output tokens) has
    reached it raises ``UsageLimitExceeded``, nothing written."""
    count_tokens: TokenCounter | None = estimate_tokens
    """How a message without :attr:`Message.tokens` is counted when it is stored (appended,
    created with, a summary): a callable taking the message and returning its token count
    (an int from 0 to 2^40; anything else, or what it raises, refuses the call before it
    sends anything). Default: :func:`estimate_tokens`; None: such messages are stored
    without a count."""
    trace_session_keys: str = "hashed"
    """How a session key goes on OpenTelemetry spans: ``"hashed"`` (a BLAKE2b-64 digest),
    ``"plain"`` or ``"off"`` (see docs/observability.md)."""

    ttl_ms: int = field(init=False, repr=False)
    grace_ms: int = field(init=False, repr=False)
    wait_timeout_ms: int = field(init=False, repr=False)
    failover_window_ms: int = field(init=False, repr=False)
    window: int = field(init=False, repr=False)
    """Digests a session's id window keeps at least: ``max(dedup_window, max_history_turns)``."""
    pop_keep_ms: int = field(init=False, repr=False)
    """How long a popped element is kept for a retry of its pop (redis-py's retries and a
    failover ride-through fit in it)."""
    secret: Passphrase | None = field(init=False, repr=False)
    """The passphrase, as a value that never shows itself."""
    event_log_age_ms: int = field(init=False, repr=False)

    def __post_init__(self) -> None:
        KeySchema(self.prefix)  # checks it
        set_ = object.__setattr__
        set_(self, "ttl_ms", 0 if self.ttl is None else duration_ms(self.ttl, "ttl"))
        set_(self, "grace_ms", duration_ms(self.expired_grace, "expired_grace", allow_zero=True))
        for name in (
            "max_history_turns",
            "wait_replicas",
            "max_message_bytes",
            "max_metadata_bytes",
            "max_metadata_value_bytes",
            "dedup_window",
            "keep_merged_children",
            "read_cache_bytes",
            "event_log_max",
        ):
            non_negative_int(getattr(self, name), name)
        if self.count_tokens is not None and not callable(self.count_tokens):
            raise InvalidArgument("count_tokens", "must be a callable or None")
        for name in ("max_usage_tokens", "max_history_tokens"):
            non_negative_int(getattr(self, name), name)
            if getattr(self, name) > MAX_TOKENS:
                raise InvalidArgument(name, "must be at most 2**40")
        if self.dedup_window < MIN_DEDUP_WINDOW:
            raise InvalidArgument(
                "dedup_window", f"must be >= {MIN_DEDUP_WINDOW}, got {self.dedup_window}"
            )
        for flag in ("publish_events", "sharded_events"):
            if not isinstance(getattr(self, flag), bool):
                raise InvalidArgument(flag, "must be a bool")
        if self.trace_session_keys not in ("off", "hashed", "plain"):
            raise InvalidArgument(
                "trace_session_keys",
                f"must be 'off', 'hashed' or 'plain', got {self.trace_session_keys!r}",
            )
        age = self.event_log_age
        set_(self, "event_log_age_ms", 0 if age is None else duration_ms(age, "event_log_age"))
        set_(self, "wait_timeout_ms", duration_ms(self.wait_timeout, "wait_timeout"))
        failover = duration_ms(self.failover_window, "failover_window", allow_zero=True)
        set_(self, "failover_window_ms", failover)
        set_(self, "window", max(self.dedup_window, self.max_history_turns))
        set_(self, "pop_keep_ms", max(failover, 60_000))
        check_work(self.kdf_work)
        set_(self, "secret", None if self.passphrase is None else Passphrase(self.passphrase))

    @classmethod
    def names(cls) -> frozenset[str]:
        """The options a store takes (the fields given to the constructor)."""
        return frozenset(f.name for f in dataclasses.fields(cls) if f.init)

    @classmethod
    def of(cls, options: StoreOptions | None, given: dict[str, Any]) -> StoreOptions:
        """``options`` (default: the defaults) with the keyword options ``given`` over it;
        ``TypeError`` naming a keyword that is no option.
        """
        unknown = sorted(set(given) - cls.names())
        if unknown:
            known = ", ".join(sorted(cls.names()))
            raise UnknownOption(unknown[0], f"no store option has this name (the options: {known})")
        if options is None:
            return cls(**given)
        if not isinstance(options, StoreOptions):
            kind = type(options).__name__
            raise InvalidArgument("options", f"must be a StoreOptions, not {kind}")
        return dataclasses.replace(options, **given) if given else options

    @property
    def ttl_delta(self) -> timedelta | None:
        """The sliding TTL as a timedelta, or None."""
        return timedelta(milliseconds=self.ttl_ms) if self.ttl_ms else None


STORE_KEYWORDS = frozenset({"lifecycle_hook", "options"})
"""A store constructor's keywords besides the options."""


def split_store_options(options: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``from_url``'s keywords split into the store's (its options, ``lifecycle_hook``,
    ``options``) and the client's (the rest: redis-py's).
    """
    mine = StoreOptions.names() | STORE_KEYWORDS
    store = {k: v for k, v in options.items() if k in mine}
    return store, {k: v for k, v in options.items() if k not in mine}
