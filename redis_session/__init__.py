"""redis_session: LLM-agent sessions in Redis, shared safely by many workers.

Every change is one atomic Lua script; appends are one round trip and idempotent; all keys of a
session (and of its child sessions) live in one cluster slot. Start with :class:`RedisStore`
(or :class:`AsyncRedisStore`) and ``RedisStore.from_url("memory://")`` for an embedded store.
"""

from .aio import AsyncRedisStore
from .errors import (
    ChildAlreadyMerged,
    ChildNotFound,
    CorruptData,
    DuplicateSession,
    InvalidArgument,
    ItemNotFound,
    MigrationConflict,
    SessionError,
    SessionExpired,
    SessionNotFound,
    StaleCompaction,
)
from .models import (
    ChildSession,
    ChildSessionConfig,
    LifecycleEventType,
    Message,
    MessageRole,
    RunContext,
    Session,
    SessionLifecycleEvent,
    SessionSummary,
    ToolCall,
)
from .protocols import AsyncStore, Store
from .store import RedisStore

__all__ = [
    "AsyncRedisStore",
    "AsyncStore",
    "ChildAlreadyMerged",
    "ChildNotFound",
    "ChildSession",
    "ChildSessionConfig",
    "CorruptData",
    "DuplicateSession",
    "InvalidArgument",
    "ItemNotFound",
    "LifecycleEventType",
    "Message",
    "MessageRole",
    "MigrationConflict",
    "RedisStore",
    "RunContext",
    "Session",
    "SessionError",
    "SessionExpired",
    "SessionLifecycleEvent",
    "SessionNotFound",
    "SessionSummary",
    "StaleCompaction",
    "Store",
    "ToolCall",
]
__version__ = "0.1.0"
