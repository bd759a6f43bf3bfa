"""The exception tree of redis_session.

Every error the library raises on its own account derives from :class:`SessionError`.
Subclasses also inherit the builtin a caller would reach for::

    SessionError
    ├── SessionNotFound (LookupError)        key
    │   ├── SessionExpired                   key
    │   └── ChildNotFound                    key
    │       └── ChildPruned                  key, merged_at  (merged, its record pruned since)
    ├── ItemNotFound (LookupError)           kind, name    (salts, checksums, secrets)
    ├── MessageNotFound (LookupError)        key, message_id  (branch at / rewind after an id)
    ├── DuplicateSession                     key
    ├── ChildAlreadyMerged                   key
    ├── StaleExpectation (StaleCompaction)   key           (an expect_id / expect_last_id guard)
    │   └── TurnLost                         key, token    (a fenced write after its turn ended)
    ├── TurnBusy                             key, waited   (the turn was not free in time)
    ├── EventsLost                           log, after, oldest  (a listener's events were trimmed)
    ├── MigrationConflict                    (another secret migration or write interleaved)
    ├── ConcurrentChange                     key           (gave up after repeated interference)
    ├── DurabilityNotReached                 redis_key, acked, wanted  (wait_replicas not met)
    ├── SlotMigrating (TimeoutError)         redis_key, waited  (a cluster slot stayed open)
    ├── InvalidArgument (ValueError)         argument
    │   ├── UnknownOption (TypeError)         argument      (a keyword no store or client takes)
    │   └── InvalidModel (pydantic's ValidationError)  argument  (a model built with a bad field)
    ├── CorruptData                          key           (foreign or damaged data in Redis)
    │   ├── ForeignKey                        key, redis_key, held  (a key this store did not write)
    │   └── TamperDetected (+EncryptionError) key          (a sealed session holds what it may not)
    │       └── DecryptionFailed              key          (tampered, moved or foreign ciphertext)
    └── EncryptionError
        ├── WrongPassphrase                                (the keyring does not open with it)
        ├── PassphraseRequired                key          (sealed data, no passphrase)
        ├── SessionNotEncrypted               key          (cleartext session, passphrase)
        └── KeyUnavailable                    kid          (a key id the keyring does not hold)

Transport errors of redis-py (``ConnectionError``, ``TimeoutError``, cluster errors) are not
wrapped: retries are configured on the client.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import ValidationError


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


class ChildPruned(ChildNotFound):
    """The child session under ``key`` was merged (at ``merged_at``) and its record has been
    pruned since: its messages are in the parent (or its summary is), the child's own history
    is gone. A subclass of :class:`ChildNotFound`.
    """

    def __init__(self, key: str, merged_at_us: int) -> None:
        self.merged_at = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=merged_at_us)
        SessionNotFound.__init__(
            self,
            key,
            f"child session {key!r} was merged at {self.merged_at.isoformat()} and its record "
            "pruned since (the newest keep_merged_children merged children are kept whole)",
        )


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


class StaleExpectation(SessionError):
    """An expectation about the history failed: ``compact_messages`` was asked to cut at a
    message that is no longer at that index (or the history is now shorter than the index),
    ``pop_message`` to pop one that is no longer the newest (index -1), or an append's
    ``expect_last_id`` is not the newest message's id (``newest_id``: what is, ``""`` for an
    empty session). The history changed since it was read; read it again. Nothing was written.
    ``StaleCompaction`` is the same class (its old name).
    """

    def __init__(
        self, key: str, index: int, expected_id: str, newest_id: str | None = None
    ) -> None:
        self.key = key
        self.index = index
        self.expected_id = expected_id
        self.newest_id = newest_id
        if newest_id is not None:
            wanted = repr(expected_id) if expected_id else "none (an empty session)"
            now = repr(newest_id) if newest_id else "none (the session is empty)"
            message = (
                f"session {key!r}: the newest message is {now}, not {wanted}; "
                "the history changed since it was read"
            )
        else:
            message = (
                f"session {key!r}: message {index} is no longer {expected_id!r}; "
                "the history changed since it was read"
            )
        super().__init__(message)


class TurnLost(StaleExpectation):
    """A write made through a turn (``store.turn``) was refused: its lease ran out, or a later
    claim of the session's turn took over. Nothing of the write was stored.
    """

    def __init__(self, key: str, token: int) -> None:
        self.token = token
        SessionError.__init__(
            self,
            f"session {key!r}: turn {token} was lost (its lease ran out, or another worker "
            "claimed the turn); nothing was written",
        )
        self.key, self.index, self.expected_id, self.newest_id = key, -1, "", None


class TurnBusy(SessionError):
    """Another worker held the session's turn for all of ``wait`` seconds."""

    def __init__(self, key: str, waited: float) -> None:
        self.key = key
        self.waited = waited
        super().__init__(
            f"session {key!r}: its turn is held by another worker (waited {waited:.3f} s)"
        )


class UsageLimitExceeded(SessionError):
    """An append to a session whose usage has reached its budget: nothing was written.
    ``usage``: the session's usage in tokens (input + output); ``budget``: its
    ``max_usage_tokens`` (the session's own, else the store's).
    """

    def __init__(self, key: str, usage: int, budget: int) -> None:
        self.key = key
        self.usage = usage
        self.budget = budget
        super().__init__(
            f"session {key!r}: its usage, {usage:,} tokens, has reached its budget "
            f"max_usage_tokens={budget:,}: nothing was appended"
        )


class TokenCountsUnknown(SessionError):
    """A read by tokens (``get_history(max_tokens=...)``) of a session whose token sums the
    store does not know: stored before it kept them, or its list changed by another program
    (its ``context_tokens`` is None). Nothing is cut silently: read it whole and count.
    """

    def __init__(self, key: str) -> None:
        self.key = key
        super().__init__(
            f"session {key!r} has no token sums (stored before they were kept, or changed by "
            "another program): read its history whole and count"
        )


class EventsLost(SessionError):
    """Events a listener asked for are gone from the log: trimmed past its cursor (the log
    keeps ``event_log_max`` events), or the log stream was removed (evicted, deleted) after
    the listener read from it. ``log``: the stream; ``after``: the position the listener
    resumed from; ``oldest``: the oldest event id the log still holds (``""``: none).
    """

    def __init__(self, log: str, after: str, oldest: str, problem: str = "") -> None:
        self.log = log
        self.after = after
        self.oldest = oldest
        why = problem or "trimmed from the log"
        super().__init__(
            f"event log {log!r}: events after {after!r} are lost ({why}); "
            f"the oldest it holds is {oldest or 'none'!r}"
        )


StaleCompaction = StaleExpectation
"""The earlier name of :class:`StaleExpectation` (the same class)."""


class ItemNotFound(SessionError, LookupError):
    """No salt, checksum or secret is stored under ``name``."""

    def __init__(self, kind: str, name: str) -> None:
        self.kind = kind
        self.name = name
        super().__init__(f"{kind} {name!r} not found")


class MessageNotFound(SessionError, LookupError):
    """Session ``key`` holds no message with id ``message_id`` (``branch(at=...)``,
    ``rewind(after=...)``): never appended, or removed since (trimmed, compacted, rewound).
    Nothing was written.
    """

    def __init__(self, key: str, message_id: str) -> None:
        self.key = key
        self.message_id = message_id
        super().__init__(f"session {key!r} holds no message {message_id!r}")


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


class SlotMigrating(SessionError, TimeoutError):
    """On a cluster, the slot of ``redis_key`` was being moved to another node (marked
    MIGRATING/IMPORTING) for longer than the store's ``failover_window``: the operation waited
    ``waited`` seconds, retrying, and was not applied. Retry it later, or check the cluster
    (``redis-session doctor``: a reshard that was aborted leaves its slot open).
    """

    def __init__(self, redis_key: str, waited: float) -> None:
        self.redis_key = redis_key
        self.waited = waited
        super().__init__(
            f"the cluster slot of {redis_key!r} stayed open (migrating) for {waited:.1f} s:"
            " not applied; retry later"
        )


class InvalidArgument(SessionError, ValueError):
    """An argument is out of its domain; ``argument`` names it."""

    def __init__(self, argument: str, problem: str) -> None:
        self.argument = argument
        super().__init__(f"{argument}: {problem}")


class UnknownOption(InvalidArgument, TypeError):
    """A keyword that is neither a store option nor (``from_url``) a keyword of redis-py's
    client; ``argument`` names it, the message the known ones. Also a ``TypeError``, as
    Python's own unexpected keyword argument is.
    """


class InvalidModel(InvalidArgument, ValidationError):
    """A model (``Message``, ``Session``…) built with a bad field: one line naming the field
    (``Session.metadata.lang: Input should be a valid string, got 1``), ``argument`` the field's
    path; and pydantic's ``ValidationError`` of the same fields (``errors()``,
    ``error_count()``), so that ``except pydantic.ValidationError`` catches it too.
    """

    _line = ""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        """Made by :meth:`of` (pydantic-core makes the instance)."""

    @classmethod
    def of(cls, exc: ValidationError, argument: str, text: str) -> InvalidArgument:
        """``exc`` as an :class:`InvalidModel` saying ``argument: text``; a plain
        :class:`InvalidArgument` when pydantic cannot make one from its errors.
        """
        try:
            made = cls.from_exception_data(exc.title, exc.errors(include_url=False))  # type: ignore[arg-type]
        except (TypeError, ValueError, KeyError):
            return InvalidArgument(argument, text)
        made.argument, made._line = argument, f"{argument}: {text}"
        return made

    def __str__(self) -> str:
        return self._line


class CorruptData(SessionError):
    """Data found in Redis under ``key`` is not what this library wrote (foreign or damaged)."""

    def __init__(self, key: str, problem: str) -> None:
        self.key = key
        super().__init__(f"corrupt data for session {key!r}: {problem}")


class ForeignKey(CorruptData):
    """Redis key ``redis_key``, one of session ``key``'s names (``key`` is ``""`` for a key of
    the store's own, such as its index), holds ``held`` (a Redis type name) that this store
    did not write: another program's key under the store's prefix. The store neither reads it
    as the session nor removes it. Every call words it the same way.
    """

    def __init__(self, key: str, redis_key: str, held: str) -> None:
        self.key, self.redis_key, self.held = key, redis_key, held
        what = f"Redis key {redis_key!r} holds a {held} this store did not write"
        SessionError.__init__(self, f"corrupt data for session {key!r}: {what}" if key else what)


class EncryptionError(SessionError):
    """Encrypted data and the store's passphrase do not fit together. Messages never contain
    a passphrase or key material.
    """


class WrongPassphrase(EncryptionError):
    """The store's passphrase does not open the keyring stored under its prefix."""

    def __init__(self, problem: str = "") -> None:
        super().__init__(
            problem
            or "wrong passphrase: it does not open the keyring of the data under this prefix"
        )


class PassphraseRequired(EncryptionError):
    """Session ``key`` holds encrypted data and the store has no passphrase."""

    def __init__(self, key: str) -> None:
        self.key = key
        super().__init__(f"session {key!r} is encrypted; open the store with its passphrase")


class SessionNotEncrypted(EncryptionError):
    """Session ``key`` is stored in cleartext (or its key record was removed); a store with a
    passphrase neither reads nor writes it, since a sealed session stripped of its key record
    looks the same. ``rekey`` seals cleartext sessions.
    """

    def __init__(self, key: str) -> None:
        self.key = key
        super().__init__(
            f"session {key!r} is stored in cleartext (or its key record was removed); a store "
            "with a passphrase neither reads nor writes it: rekey seals cleartext sessions"
        )


class KeyUnavailable(EncryptionError):
    """Data is sealed with key id ``kid``, which the keyring the passphrase opens lacks."""

    def __init__(self, kid: str) -> None:
        self.kid = kid
        super().__init__(f"data key {kid} is not in the keyring this passphrase opens")


class TamperDetected(EncryptionError, CorruptData):
    """Session ``key`` holds what a sealed session may not: cleartext data, a sealed value in
    a session without a key id, a value of another format, a metadata value older than one
    already read. Someone who can write to Redis changed it; nothing of it is returned.
    """

    def __init__(self, key: str, problem: str) -> None:
        CorruptData.__init__(self, key, f"tampering detected: {problem}")


class DecryptionFailed(TamperDetected):
    """A ciphertext of session ``key`` failed authentication: altered, moved from another
    session or field, or sealed by another keyring.
    """

    def __init__(self, key: str, problem: str) -> None:
        CorruptData.__init__(self, key, f"decryption failed: {problem}")
