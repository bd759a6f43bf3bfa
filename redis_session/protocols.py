"""The store contracts as ``typing.Protocol`` classes; their docstrings are the contract.

``RedisStore`` satisfies :class:`Store` and ``AsyncRedisStore`` :class:`AsyncStore`; the stores
take their method docstrings from here (:func:`docs_from`), so the text exists once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol, TypeVar, runtime_checkable

from .models import ChildSession, ChildSessionConfig, Message, Session, SessionSummary

C = TypeVar("C", bound=type)


def docs_from(*sources: type) -> Callable[[C], C]:
    """Class decorator: give every undocumented method the docstring of the same method in the
    first of ``sources`` that has one.
    """

    def apply(cls: C) -> C:
        for name, member in vars(cls).items():
            func: Any = getattr(member, "__func__", member)
            if not callable(func) or func.__doc__:
                continue
            for source in sources:
                doc = getattr(getattr(source, name, None), "__doc__", None)
                if doc:
                    func.__doc__ = doc
                    break
        return cls

    return apply


@runtime_checkable
class Store(Protocol):
    """A session store (the blocking flavour). Every write is one atomic Lua script."""

    def create(self, session: Session, *, idempotency_key: str | None = None) -> Session:
        """Store a new session, history included, in one atomic step.

        Sets ``created_at`` = ``updated_at`` = now (the Redis server's clock) and returns the
        stored copy; the argument is not changed. With a TTL, the session's keys expire after
        ``ttl`` without writes. Messages with the same id in ``session.history`` are refused.

        ``idempotency_key``: the caller's name for this call (any str up to 128 characters):
        the caller's own retry of the call with the same key, after a lost reply or a crash,
        returns the first call's result instead of ``DuplicateSession`` (the key is kept as
        long as the session).

        Raises:
            DuplicateSession: a live session has this key (two creators: exactly one wins).
            InvalidArgument: the key is empty or not a str, or the history repeats an id.
        """
        ...

    def get(self, key: str, last: int | None = None) -> Session:
        """The whole session, history in append order, read in one consistent snapshot.

        With ``last=N`` the history holds only the newest N messages (``last=0``: none, the
        session's fields and metadata only), at a cost that does not grow with the history's
        length; ``ValueError`` for a negative or non-int ``last``.

        Incremental: a store that read the session before sends what it holds with the read
        (one round trip either way) and gets only the messages added since, unless anything
        else changed (compaction, pop, delete and re-create, expiry, a rewrite by another
        writer), when everything wanted comes again. The result always equals a fresh store's
        read; the messages are frozen and shared with later reads, the list is the caller's.
        The store holds up to ``read_cache_bytes`` of messages (least recently read go first).

        Raises:
            SessionExpired: the session existed but its TTL ran out (within ``expired_grace``).
            SessionNotFound: no such session (``SessionExpired`` is a subclass).
            CorruptData: what Redis holds under the key is not a stored session.
        """
        ...

    def get_history(
        self, key: str, last: int | None = None, *, max_tokens: int | None = None
    ) -> list[Message]:
        """The messages only; with ``last=N`` the newest N, with ``max_tokens=T`` the longest
        run of newest messages whose :attr:`Message.tokens` sum to at most T (a message
        without a count counts 0; none when the newest alone is over T); with both, the
        fewer. One round trip, at a cost that does not grow with the history's length (the
        store keeps running sums of the counts beside each session's list).

        Raises:
            SessionNotFound, SessionExpired, CorruptData: as :meth:`get`.
            TokenCountsUnknown: ``max_tokens`` given, and the session has no token sums (see
                :attr:`Session.context_tokens`): read it whole.
            InvalidArgument: ``last`` or ``max_tokens`` is not a non-negative int.
        """
        ...

    def update(self, session: Session) -> None:
        """Write ``agent_id``, ``channel_type``, ``channel_id`` and ``model`` where non-empty and
        replace the metadata, atomically; never touches the history. Refreshes the TTL and
        ``updated_at``.

        Raises:
            SessionNotFound, SessionExpired: no live session under ``session.key``.
        """
        ...

    def update_metadata(
        self, key: str, set: Mapping[str, str] | None = None, delete: Iterable[str] = ()
    ) -> None:
        """Set some metadata entries and delete others in one atomic step, leaving the rest as
        they are, so workers changing different entries never lose each other's writes.
        Refreshes the TTL and ``updated_at``.

        Raises:
            SessionNotFound, SessionExpired: no live session under ``key``.
        """
        ...

    def delete(self, key: str, *, idempotency_key: str | None = None) -> bool:
        """Remove the session, its messages, its expiry marker and its index entry.

        Idempotent: deleting twice, or deleting an expired session, is fine. Returns whether a
        live session was removed. Logs ``delete`` (or, for a tree that expired before any
        reaper logged it, ``expire``) in the same script. With ``idempotency_key``, a delete
        that removed the session keeps the key for ``expired_grace`` (a small string in the
        session's slot), so that the same call again (the caller's retry after a lost reply)
        returns True, the first call's result, with no second event, instead of False.
        """
        ...

    def end(self, key: str) -> bool:
        """Mark the session ended (``Session.ended_at``, the server's clock) and log its
        ``end`` event, in one script. Idempotent: True when this call ended it, False when it
        was ended before (no second event). Moves no deadline and no index score; the session
        stays readable and writable. ``SessionNotFound`` / ``SessionExpired`` when it is not
        live. An end processor is a consumer group on ``end`` events (see ``listen``).
        """
        ...

    def append_message(
        self,
        key: str,
        msg: Message,
        *,
        expect_last_id: str | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> bool:
        """Append one message in one round trip: one script that also trims to the newest
        ``max_history_turns`` (when > 0), refreshes the TTL of every key of the session and
        sets ``updated_at``.

        Idempotent by ``msg.id``: a message whose id the session already holds (for instance
        one redis-py retried after a lost reply) is not stored again. Returns True when the
        message was stored, False when its id was already there.

        ``expect_last_id``: the message is stored only if the session's newest message has
        that id (``""``: the session must be empty), checked in the same script (one round
        trip, nothing written on refusal): two workers that read the same history and answer
        it cannot both append. A retried call whose first attempt was stored still answers as
        a repeated append does (the id is looked at first).

        ``metadata`` entries are set in the same atomic step, and only when the message is
        stored: a repeated or retried append sets nothing, so it cannot undo entries another
        writer set meanwhile (entries not named are left alone, as in :meth:`update_metadata`).

        Raises:
            SessionNotFound, SessionExpired: no live session under ``key``.
            StaleExpectation: the newest message is not ``expect_last_id`` (its
                ``newest_id`` says which is).
            InvalidArgument: ``metadata`` is not a mapping of str to str.
        """
        ...

    def append_messages(
        self,
        key: str,
        messages: Sequence[Message],
        *,
        expect_last_id: str | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> int:
        """Append several messages in one round trip and one atomic step, as
        :meth:`append_message` does one. Returns how many were new; ``metadata`` is set with
        them when at least one is; ``expect_last_id`` as for :meth:`append_message`.

        Raises:
            SessionNotFound, SessionExpired: no live session under ``key``.
            StaleExpectation: the newest message is not ``expect_last_id``.
            InvalidArgument: the list repeats an id; ``metadata`` is not a mapping of str to
                str.
        """
        ...

    def annotate_timeout(self, key: str, partial: str) -> bool:
        """Append an ``assistant`` message whose content is exactly
        ``[This response was interrupted due to a timeout]``; ``partial`` is not stored.

        Raises:
            SessionNotFound, SessionExpired: no live session under ``key``.
        """
        ...

    def compact_messages(
        self, key: str, up_to_index: int, summary: str, *, expect_id: str | None = None
    ) -> int:
        """Replace messages ``0..up_to_index`` (inclusive) with one ``system`` message,
        ``"[Compacted Summary]\\n" + summary``, placed first, in one atomic step.

        Messages appended meanwhile by other workers stay after the summary. With
        ``expect_id``, the message at ``up_to_index`` must still have that id (else
        ``StaleExpectation`` and nothing changes), which guards against a history that was
        trimmed since it was read. Returns the number of messages removed.

        Raises:
            InvalidArgument: ``up_to_index`` is past the end of the history (no ``expect_id``).
            StaleExpectation: ``expect_id`` no longer sits at ``up_to_index``, or the history
                is now shorter than that (``StaleCompaction`` is its old name).
            SessionNotFound, SessionExpired: no live session under ``key``.
        """
        ...

    def list_sessions(
        self, limit: int | None = None, offset: int = 0, *, prefix: str | None = None
    ) -> list[SessionSummary]:
        """Summaries of live sessions, most recently updated first; ``limit`` and ``offset``
        page through that order. Expired sessions are never listed.

        With ``prefix``, only sessions whose key begins with it: the server filters the index
        (``ZSCAN`` with a ``MATCH`` pattern, glob characters in ``prefix`` escaped), so the
        cost grows with the index but only matching sessions are read.
        """
        ...

    def get_salt(self, name: str) -> bytes:
        """Salt ``name``. Raises ``ItemNotFound`` when there is none."""
        ...

    def set_salt(self, name: str, salt: bytes) -> None:
        """Store salt ``name`` (replacing any)."""
        ...

    def get_checksum(self, name: str) -> bytes:
        """Checksum ``name``. Raises ``ItemNotFound`` when there is none."""
        ...

    def set_checksum(self, name: str, checksum: bytes) -> None:
        """Store checksum ``name``; salt ``name`` must exist (else ``ItemNotFound``)."""
        ...

    def set_secret(self, name: str, value: bytes) -> None:
        """Store secret ``name``: opaque bytes, already encrypted by the caller."""
        ...

    def get_secret(self, name: str) -> bytes:
        """Secret ``name``. Raises ``ItemNotFound`` when there is none."""
        ...

    def delete_secret(self, name: str) -> bool:
        """Remove secret ``name``; returns whether it existed."""
        ...

    def list_secrets(self) -> list[str]:
        """The names of all secrets, sorted."""
        ...

    def migrate_secrets(
        self, reencrypt: Callable[[bytes], bytes], new_salt: bytes, new_checksum: bytes
    ) -> int:
        """Re-encrypt every secret with ``reencrypt(old) -> new`` and set salt and checksum
        ``"default"``, all or nothing.

        If ``reencrypt`` raises for any secret, nothing changes and the exception propagates.
        The new values are applied by one script only if no secret was written, and no other
        migration applied, since they were read; otherwise nothing changes and
        ``MigrationConflict`` is raised. Returns the number of secrets migrated.
        """
        ...

    def close(self) -> None:
        """Close the Redis client (the store is unusable afterwards)."""
        ...


@runtime_checkable
class AsyncStore(Protocol):
    """A session store (the asyncio flavour): :class:`Store` with awaitable methods."""

    async def create(self, session: Session, *, idempotency_key: str | None = None) -> Session: ...
    async def get(self, key: str, last: int | None = None) -> Session: ...
    async def get_history(
        self, key: str, last: int | None = None, *, max_tokens: int | None = None
    ) -> list[Message]: ...
    async def update(self, session: Session) -> None: ...
    async def update_metadata(
        self, key: str, set: Mapping[str, str] | None = None, delete: Iterable[str] = ()
    ) -> None: ...
    async def delete(self, key: str, *, idempotency_key: str | None = None) -> bool: ...
    async def end(self, key: str) -> bool: ...
    async def append_message(
        self,
        key: str,
        msg: Message,
        *,
        expect_last_id: str | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> bool: ...
    async def append_messages(
        self,
        key: str,
        messages: Sequence[Message],
        *,
        expect_last_id: str | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> int: ...
    async def annotate_timeout(self, key: str, partial: str) -> bool: ...
    async def compact_messages(
        self, key: str, up_to_index: int, summary: str, *, expect_id: str | None = None
    ) -> int: ...
    async def list_sessions(
        self, limit: int | None = None, offset: int = 0, *, prefix: str | None = None
    ) -> list[SessionSummary]: ...
    async def get_salt(self, name: str) -> bytes: ...
    async def set_salt(self, name: str, salt: bytes) -> None: ...
    async def get_checksum(self, name: str) -> bytes: ...
    async def set_checksum(self, name: str, checksum: bytes) -> None: ...
    async def set_secret(self, name: str, value: bytes) -> None: ...
    async def get_secret(self, name: str) -> bytes: ...
    async def delete_secret(self, name: str) -> bool: ...
    async def list_secrets(self) -> list[str]: ...
    async def migrate_secrets(
        self, reencrypt: Callable[[bytes], bytes], new_salt: bytes, new_checksum: bytes
    ) -> int: ...
    async def close(self) -> None: ...


@runtime_checkable
class ChildSessionStore(Protocol):
    """Child sessions ("read parent, write child"), blocking flavour.

    A sub-agent works in a child whose history does not touch the parent until it is merged.
    On the Redis stores children are persisted (any worker can continue them), live in their
    parent's cluster slot, share its TTL and go away with ``delete(parent)``.
    """

    def fork_child(
        self,
        parent_key: str,
        agent_name: str,
        config: ChildSessionConfig | None = None,
        *,
        idempotency_key: str | None = None,
    ) -> ChildSession:
        """Create a child of ``parent_key`` for ``agent_name`` (non-empty, no ``:``), copying
        the parent's last ``config.inherit_history`` messages, in one atomic step. Its key is
        ``"<parent_key>:child:<agent_name>:<unix ns>"`` (with an ``idempotency_key``, a number
        derived from it instead of the clock). Emits ``fork``.

        ``idempotency_key``: the caller's name for this call (any str up to 128 characters):
        the caller's own retry of the call with the same key, after a lost reply or a crash,
        returns the first call's result instead of a second child (the key is kept as long as
        the child).

        Raises:
            SessionNotFound, SessionExpired: the parent is not a live session.
        """
        ...

    def append_child_message(
        self, child_key: str, msg: Message, *, expect_last_id: str | None = None
    ) -> bool:
        """Append to the child only, keeping its newest ``config.max_messages`` (when > 0).

        Idempotent by ``msg.id`` like ``append_message``; returns False when the id was there.
        ``expect_last_id``: as ``append_message``'s, about the child's newest message.

        Raises:
            ChildNotFound: no such child (never forked, discarded, expired).
            ChildAlreadyMerged: the child was merged; it takes no more messages.
            StaleExpectation: the child's newest message is not ``expect_last_id``.
        """
        ...

    def merge_child(
        self, child_key: str, summary: str, *, idempotency_key: str | None = None
    ) -> int:
        """Fold the child into its parent in one atomic step and mark it merged.

        A non-empty ``summary`` becomes one ``assistant`` message authored by the child's agent;
        an empty one appends the child's own messages in order (not those it inherited at fork,
        nor any the parent already holds). The parent shows all or nothing. Two workers merging
        one child: exactly one succeeds; a call retried by redis-py after a lost reply finds its
        own merge and succeeds once. Emits ``merge``. Returns the messages added to the parent.

        ``idempotency_key``: the caller's name for this call (any str up to 128 characters):
        the caller's own retry of the call with the same key, after a lost reply or a crash,
        returns the first call's result instead of ``ChildAlreadyMerged`` (the key is kept
        among the parent's newest message ids: ``id_window``).

        Raises:
            ChildNotFound: no such child (also when it was discarded).
            ChildAlreadyMerged: another call merged it first.
            SessionNotFound, SessionExpired: the parent is gone.
        """
        ...

    def merge_child_as_author(
        self, child_key: str, summary: str, author: str, *, idempotency_key: str | None = None
    ) -> int:
        """As :meth:`merge_child`, the summary message authored by ``author``."""
        ...

    def discard_child(self, child_key: str, *, idempotency_key: str | None = None) -> None:
        """Remove the child without touching the parent. Emits ``discard``.

        ``idempotency_key``: the caller's name for this call (any str up to 128 characters):
        the caller's own retry of the call with the same key, after a lost reply or a crash,
        returns the first call's result instead of ``ChildNotFound``.

        Raises:
            ChildNotFound: no such child.
            ChildAlreadyMerged: it was merged (a merge racing a discard: one wins).
        """
        ...

    def get_child(self, child_key: str) -> ChildSession:
        """The child with its history; merged children too, with ``merged_at``.

        Raises:
            ChildNotFound: never forked, discarded, expired or deleted with its parent.
        """
        ...

    def children_of(self, parent_key: str) -> list[ChildSession]:
        """The parent's children in fork order, merged ones included, discarded ones absent."""
        ...


@runtime_checkable
class AsyncChildSessionStore(Protocol):
    """:class:`ChildSessionStore` with awaitable methods (asyncio flavour)."""

    async def fork_child(
        self,
        parent_key: str,
        agent_name: str,
        config: ChildSessionConfig | None = None,
        *,
        idempotency_key: str | None = None,
    ) -> ChildSession: ...
    async def append_child_message(
        self, child_key: str, msg: Message, *, expect_last_id: str | None = None
    ) -> bool: ...
    async def merge_child(
        self, child_key: str, summary: str, *, idempotency_key: str | None = None
    ) -> int: ...
    async def merge_child_as_author(
        self, child_key: str, summary: str, author: str, *, idempotency_key: str | None = None
    ) -> int: ...
    async def discard_child(
        self, child_key: str, *, idempotency_key: str | None = None
    ) -> None: ...
    async def get_child(self, child_key: str) -> ChildSession: ...
    async def children_of(self, parent_key: str) -> list[ChildSession]: ...


docs_from(Store)(AsyncStore)
docs_from(ChildSessionStore)(AsyncChildSessionStore)
