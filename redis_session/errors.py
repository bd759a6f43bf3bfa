"""The exception tree of redis_session.

Every error the library raises on its own account derives from :class:`SessionError`.
Subclasses also inherit the builtin a caller would reach for::

    SessionError
    ├── SessionNotFound (LookupError)        key
    │   ├── SessionExpired                   key
    │   └── ChildNotFound                    key
    ├── ItemNotFound (LookupError)           kind, name    (salts, checksums, secrets)
    ├── DuplicateSession                     key
    ├── ChildAlreadyMerged                   key
    ├── StaleCompaction                      key
    ├── MigrationConflict                    (another secret migration or write interleaved)
    ├── ConcurrentChange                     key           (gave up after repeated interference)
    ├── DurabilityNotReached                 redis_key, acked, wanted  (wait_replicas not met)
    ├── InvalidArgument (ValueError)         argument
    └── CorruptData                          key           (foreign or damaged data in Redis)

Transport errors of redis-py (``ConnectionError``, ``TimeoutError``, cluster errors) are not
wrapped: retries are configured on the client.
"""

from __future__ import annotations


class SessionError(Exception):
    """The root of every error raised by redis_session itself."""


class SessionNotFound(SessionError, LookupError):
    """No session (or child session) is stored under ``key``."""

    def __init__(self, key: str, message: str | None = None) -> None:
        self.key = key
        super().__init__(message or f"session {key!r} not found")


class SessionExpired(SessionNotFound):
    """The session under ``key`` existed but its TTL ran out; a subclass of not-found."""

    def __init__(self, key: str) -> None:
        super().__init__(key, f"session {key!r} expired")


class ChildNotFound(SessionNotFound):
    """No child session is stored under ``key`` (never forked, discarded or deleted)."""

    def __init__(self, key: str) -> None:
        super().__init__(key, f"child session {key!r} not found")


class DuplicateSession(SessionError):
    """``create`` found a live session under ``key`` already."""

    def __init__(self, key: str) -> None:
        self.key = key
        super().__init__(f"session {key!r} already exists")


class ChildAlreadyMerged(SessionError):
    """The child session under ``key`` was merged before; it can be merged only once."""

    def __init__(self, key: str) -> None:
        self.key = key
        super().__init__(f"child session {key!r} is already merged")


class StaleCompaction(SessionError):
    """``compact_messages`` was asked to cut at a message that is no longer at that index."""

    def __init__(self, key: str, index: int, expected_id: str) -> None:
        self.key = key
        self.index = index
        self.expected_id = expected_id
        super().__init__(
            f"session {key!r}: message {index} is no longer {expected_id!r}; "
            "the history changed since it was read"
        )


class ItemNotFound(SessionError, LookupError):
    """No salt, checksum or secret is stored under ``name``."""

    def __init__(self, kind: str, name: str) -> None:
        self.kind = kind
        self.name = name
        super().__init__(f"{kind} {name!r} not found")


class MigrationConflict(SessionError):
    """A secret migration could not apply: another migration or a secret write interleaved."""


class ConcurrentChange(SessionError):
    """An operation gave up after other workers kept changing what it reads (``key``)."""

    def __init__(self, key: str, problem: str) -> None:
        self.key = key
        super().__init__(f"session {key!r}: {problem}")


class DurabilityNotReached(SessionError):
    """A write was applied on the primary but fewer than ``wanted`` replicas acknowledged it
    within the timeout (``acked`` did): it may be lost if the primary fails now.
    """

    def __init__(self, redis_key: str, acked: int, wanted: int, timeout_ms: int) -> None:
        self.redis_key = redis_key
        self.acked = acked
        self.wanted = wanted
        super().__init__(
            f"write to {redis_key!r} reached {acked} of {wanted} replicas within {timeout_ms} ms;"
            " it is applied on the primary and may be lost if that fails"
        )


class InvalidArgument(SessionError, ValueError):
    """An argument is out of its domain; ``argument`` names it."""

    def __init__(self, argument: str, problem: str) -> None:
        self.argument = argument
        super().__init__(f"{argument}: {problem}")


class CorruptData(SessionError):
    """Data found in Redis under ``key`` is not what this library wrote (foreign or damaged)."""

    def __init__(self, key: str, problem: str) -> None:
        self.key = key
        super().__init__(f"corrupt data for session {key!r}: {problem}")
