"""redis_session: LLM-agent sessions in Redis, shared safely by many workers.

Every change is one atomic Lua script; appends are one round trip and idempotent; all keys of a
session (and of its child sessions) live in one cluster slot. Start with :class:`RedisStore`
(or :class:`AsyncRedisStore`) and ``RedisStore.from_url("memory://")`` for an embedded store.
"""

from ._listen_async import AsyncEventListener, AsyncLogListener
from ._listen_sync import EventListener, LogListener
from ._rekey import RekeyProgress, RekeyReport
from .aio import AsyncRedisStore, AsyncTurn
from .children import InMemoryChildStore
from .context import (
    run_context_from_context,
    session_key_from_context,
    turn_id_from_context,
    with_run_context,
    with_session_key,
    with_turn_id,
)
from .errors import (
    ChildAlreadyMerged,
    ChildNotFound,
    ChildPruned,
    ConcurrentChange,
    CorruptData,
    DecryptionFailed,
    DuplicateSession,
    DurabilityNotReached,
    EncryptionError,
    EventsLost,
    ForeignKey,
    InvalidArgument,
    ItemNotFound,
    KeyUnavailable,
    MigrationConflict,
    PassphraseRequired,
    SessionError,
    SessionExpired,
    SessionNotEncrypted,
    SessionNotFound,
    SlotMigrating,
    StaleCompaction,
    StaleExpectation,
    TamperDetected,
    TurnBusy,
    TurnLost,
    UnknownOption,
    WrongPassphrase,
)
from .events import LifecycleHook
from .models import (
    ChildSession,
    ChildSessionConfig,
    LifecycleEventType,
    Message,
    MessageRole,
    PendingEvent,
    RunContext,
    Session,
    SessionLifecycleEvent,
    SessionSummary,
    ToolCall,
)
from .options import StoreOptions
from .protocols import AsyncChildSessionStore, AsyncStore, ChildSessionStore, Store
from .store import RedisStore, Turn

__all__ = [
    "AsyncChildSessionStore",
    "AsyncEventListener",
    "AsyncLogListener",
    "AsyncRedisStore",
    "AsyncStore",
    "AsyncTurn",
    "ChildAlreadyMerged",
    "ChildNotFound",
    "ChildPruned",
    "ChildSession",
    "ChildSessionConfig",
    "ChildSessionStore",
    "ConcurrentChange",
    "CorruptData",
    "DecryptionFailed",
    "DuplicateSession",
    "DurabilityNotReached",
    "EncryptionError",
    "EventListener",
    "EventsLost",
    "ForeignKey",
    "InMemoryChildStore",
    "InvalidArgument",
    "ItemNotFound",
    "KeyUnavailable",
    "LifecycleEventType",
    "LifecycleHook",
    "LogListener",
    "Message",
    "MessageRole",
    "MigrationConflict",
    "PassphraseRequired",
    "PendingEvent",
    "RedisStore",
    "RekeyProgress",
    "RekeyReport",
    "RunContext",
    "Session",
    "SessionError",
    "SessionExpired",
    "SessionLifecycleEvent",
    "SessionNotEncrypted",
    "SessionNotFound",
    "SessionSummary",
    "SlotMigrating",
    "StaleCompaction",
    "StaleExpectation",
    "Store",
    "StoreOptions",
    "TamperDetected",
    "ToolCall",
    "Turn",
    "TurnBusy",
    "TurnLost",
    "UnknownOption",
    "WrongPassphrase",
    "run_context_from_context",
    "session_key_from_context",
    "turn_id_from_context",
    "with_run_context",
    "with_session_key",
    "with_turn_id",
]
__version__ = "0.1.0"
