"""An OpenAI Agents SDK ``Session`` backed by :class:`~redis_session.AsyncRedisStore`.

``RedisAgentSession(session_id, store)`` satisfies the SDK's ``Session`` protocol
(``session_id``, ``session_settings``, ``get_items``, ``add_items``, ``pop_item``,
``clear_session``), so ``Runner.run(agent, input, session=...)`` keeps its conversation in
Redis, shared by every worker that builds a session with the same ``session_id`` over the same
store prefix. ``RedisAgentSession.from_url(session_id, url=...)`` makes its own store and, like
the SDK's ``RedisSession.from_url``, closes it in :meth:`~RedisAgentSession.close`.

As the SDK's own sessions (0.24) do: ``session_settings`` is a ``SessionSettings`` or a dict
(normalized by the SDK's ``coerce_session_settings``; unknown keys raise ``TypeError``), None
meaning ``SessionSettings()``; its ``limit`` is the default of ``get_items``. ``ping()`` tells
whether Redis answers. A session made by ``from_url`` is terminal once closed: every method
then raises ``RuntimeError``; ``close()`` of a session over a caller's store does nothing (the
caller owns the store). A mutation (``add_items``, ``pop_item``, ``clear_session``) whose
caller is cancelled still waits (at most ``MUTATION_SETTLE_TIMEOUT`` seconds) for Redis's
answer before the ``CancelledError`` propagates, so a cancelled caller's write is either done
or not sent, never in flight on a connection given back to the pool.

Mapping (one store session per agent session, key ``key_prefix + session_id``):

- Each input item is one store :class:`~redis_session.Message`: ``content`` is the item's JSON
  text (``json.dumps``, ASCII-escaped, so any item round-trips exactly), ``author`` is
  ``"openai-agents"``, and ``role`` is what fits for readers of the store: ``user``,
  ``assistant``, ``system`` (``system`` and ``developer`` items), ``tool`` (``*_output``
  items, e.g. ``function_call_output``), ``assistant`` for everything else the model produced
  (function calls, reasoning). The item is read back from ``content`` alone.
- ``pop_item`` is the store's ``pop_message``: one atomic script that removes and returns the
  newest message, so two workers popping at once never get the same item, and a pop that
  redis-py retried after a lost reply returns the same item and removes nothing more (a
  per-call token). The store keeps the popped message's id recorded (appending that very
  message again stores nothing); ``add_items`` gives every item a fresh random message id per
  call, so adding an item again after popping it stores it again.
- Messages in the session that this module did not write (for instance the ``system`` summary
  of ``store.compact_messages``) are presented as ``{"role": ..., "content": ...}`` messages.
- Branches (``AdvancedSQLiteSession``'s branching and turn methods, same names, arguments and
  return shapes): branch ``"main"`` is the session above; every other branch is a store
  session of its own under ``key + "#branch:" + <id percent-encoded>``, made by the store's
  ``branch``; a registry session under ``key + "#branches"`` records the ids ever used (see
  ``_openai_branches``). Turns, tool names and open calls are read from the items themselves
  (``_openai_items``). ``cleanup_failed_turn()`` answers the function calls a failed turn left
  open with output items, in one append guarded by ``expect_last_id``.
- Usage (``AdvancedSQLiteSession``'s ``store_run_usage``, ``get_session_usage``,
  ``get_turn_usage``): a run's usage is a hidden *usage record* (a message of author
  :data:`USAGE_AUTHOR`, its ``Message.usage`` what the run adds, so ``Session.usage``, the
  store's usage budget and ``store.usage()`` count it) appended with the turn's row in the
  branch's metadata (``openai-agents:usage:<turn>``) by one script (see ``_openai_usage``).
  Records are not items: reads, pops and the turn queries pass over them.

Costs: ``add_items`` is one round trip (``append_messages``: one atomic script, all items
contiguous, idempotent by message id, cluster-safe because a session's keys share one slot);
the first ``add_items`` of a session adds a ``create``. ``pop_item`` is one round trip (one
script; one more for each usage record above the newest item). ``get_items(limit=N)`` reads
the newest N messages (``get_history(last=N)``; again, wider, when usage records were among
them); ``get_items()`` reads the whole history. ``clear_session`` adds a read of the branch registry
(the sessions of main and of every branch are then deleted together). The turn queries and
``create_branch_from_turn`` read a branch whole; ``list_branches`` reads every branch whole.

Limits: the ids of popped messages stay recorded in the session (one digest each) until
``clear_session`` or expiry. A ``pop_item`` racing an ``add_items`` removes whichever message
is newest when its script runs. Differences from the SDK's sessions: messages found corrupt
raise :class:`~redis_session.CorruptData` (they are not skipped); a negative ``limit`` means
all items (as ``SQLiteSession``; the SDK's ``RedisSession`` returns none); the store's client
may not decode responses; and compaction (``OpenAIResponsesCompactionSession``) replaces the
history with ``clear_session`` then ``add_items`` (two steps), as for any session without the
SDK's private atomic-replacement hook.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar, cast

from .._dist import install_hint

try:
    from agents.items import TResponseInputItem
    from agents.memory import Session as _SdkSession  # noqa: F401 - the SDK has sessions
except ImportError as exc:  # pragma: no cover - exercised without the extra installed
    raise ImportError(
        "redis_session.integrations.openai_agents needs the OpenAI Agents SDK: "
        f"{install_hint('openai-agents')}"
    ) from exc

if TYPE_CHECKING:
    from agents.memory.session_settings import SessionSettings

from .._core.conversation import FAILED_TURN
from ..aio import AsyncRedisStore, AsyncTurn
from ..errors import (
    ConcurrentChange,
    DuplicateSession,
    MessageNotFound,
    SessionNotFound,
    StaleExpectation,
    TurnLost,
    UsageLimitExceeded,
)
from ..models import Message, MessageRole, Session
from . import _openai_items as items_of
from . import _openai_usage as usage_of
from ._openai_branches import MAIN_BRANCH, Branches, is_branch, used_error
from ._openai_items import ITEM_AUTHOR
from ._openai_usage import USAGE_AUTHOR

__all__ = [
    "ITEM_AUTHOR", "MAIN_BRANCH", "MUTATION_SETTLE_TIMEOUT", "USAGE_AUTHOR", "RedisAgentSession",
]  # fmt: skip

MUTATION_SETTLE_TIMEOUT = 30.0
"""Seconds a cancelled mutation still waits for Redis's answer before giving up waiting."""
ATTEMPTS = 5
"""Reads a branch creation or a repair makes again when another writer came first."""
_T = TypeVar("_T")
_log = logging.getLogger(__name__)


def _settings(value: SessionSettings | Mapping[str, Any] | None) -> SessionSettings | None:
    """``value`` normalized as the SDK's own sessions do (``coerce_session_settings``)."""
    try:
        from agents.memory.session_settings import SessionSettings
    except ImportError:  # an SDK from before session settings
        if value is not None:
            raise TypeError("session_settings: this SDK has no SessionSettings") from None
        return None
    if value is None:
        return SessionSettings()
    try:
        from agents.memory.session_settings import coerce_session_settings
    except ImportError:  # an SDK from before dict settings
        if isinstance(value, SessionSettings):
            return value
        if not isinstance(value, Mapping):
            raise TypeError(
                f"session_settings: must be a SessionSettings or a dict, got {type(value).__name__}"
            ) from None
        return SessionSettings(**value)
    if isinstance(value, Mapping) and not isinstance(value, dict):
        value = dict(value)
    return coerce_session_settings(value)


async def _settled(mutation: Awaitable[_T]) -> _T:
    """Await ``mutation``; when the caller is cancelled meanwhile, still wait (bounded) for
    its outcome, then re-raise the cancellation.
    """
    task = asyncio.ensure_future(mutation)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError as cancelled:
        if task.done():
            raise
        task.add_done_callback(_retrieve)  # the caller sees the cancellation, not its error
        loop = asyncio.get_running_loop()
        deadline = loop.time() + MUTATION_SETTLE_TIMEOUT
        while not task.done() and (left := deadline - loop.time()) > 0:
            try:
                await asyncio.wait({task}, timeout=left)
            except asyncio.CancelledError:  # cancelled again: keep waiting, same deadline
                continue
        raise cancelled from None


def _retrieve(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()


def _items(history: list[Message]) -> list[TResponseInputItem]:
    """The items ``history`` holds (its usage records are not items)."""
    return [cast("TResponseInputItem", items_of.item_of(m)) for m in usage_of.visible(history)]


def _messages(items: list[Any]) -> list[Message]:
    return items_of.messages_of(items)


_TURNS: contextvars.ContextVar[dict[int, AsyncTurn] | None] = contextvars.ContextVar(
    "redis_session_openai_turns", default=None
)
"""The turns this task's ``add_items`` go through, by session object (see
``RedisAgentSession.turn``); a new dict for each change, never changed in place."""


class RedisAgentSession:
    """An OpenAI Agents SDK session kept in a Redis session store.

    ``session_id`` names the conversation; its store key is ``key_prefix + session_id``
    (:attr:`key`). ``store`` is an :class:`~redis_session.AsyncRedisStore` (its ``ttl``,
    ``max_history_turns`` and durability options apply); the caller owns it.
    ``session_settings`` is the SDK's ``SessionSettings`` or a dict of its fields (normalized
    as the SDK does; ``TypeError`` for unknown keys); its ``limit`` is the default of
    :meth:`get_items`. Any number of workers may use the same session at once; no method holds
    a lock.

    It also has the branching and turn methods of the SDK's ``AdvancedSQLiteSession`` (same
    names, arguments and return shapes): the session starts on branch ``"main"``;
    :meth:`create_branch_from_turn` makes another branch (a store session of its own,
    :meth:`branch_key`) and moves this object onto it, as :meth:`switch_to_branch` does. The
    current branch belongs to this object, as ``AdvancedSQLiteSession``'s does: another object
    on the same ``session_id`` starts on ``"main"``.
    """

    session_settings: SessionSettings | None

    def __init__(
        self,
        session_id: str,
        store: AsyncRedisStore,
        *,
        key_prefix: str = "openai-agents:",
        session_settings: SessionSettings | Mapping[str, Any] | None = None,
    ) -> None:
        if not isinstance(session_id, str) or not session_id:
            raise ValueError("session_id: must be a non-empty str")
        self.session_settings = _settings(session_settings)
        self.session_id = session_id
        self.store = store
        self._key = key_prefix + session_id
        self._branches = Branches(store, self._key)
        self._current = (MAIN_BRANCH, self._key)  # published whole: (branch id, store key)
        self._clears = 0  # a branch made while clear_session ran does not become current
        self._owns_client = False  # from_url: this session made the store and closes it
        self._closed = False
        self._released = False

    @classmethod
    def from_url(
        cls,
        session_id: str,
        *,
        url: str,
        key_prefix: str = "openai-agents:",
        session_settings: SessionSettings | Mapping[str, Any] | None = None,
        **store_options: Any,
    ) -> RedisAgentSession:
        """A session over a new store for ``url`` (``redis://``, ``memory://``, … as
        :meth:`AsyncRedisStore.from_url <redis_session.AsyncRedisStore.from_url>`;
        ``store_options`` are the store's, e.g. ``prefix``, ``ttl``). The session owns that
        store: :meth:`close` closes it, and the session is closed for good then.
        """
        store = AsyncRedisStore.from_url(url, **store_options)  # connects on first use
        session = cls(session_id, store, key_prefix=key_prefix, session_settings=session_settings)
        session._owns_client = True
        return session

    @property
    def key(self) -> str:
        """The store key of this session (its ``"main"`` branch): ``key_prefix + session_id``."""
        return self._key

    @property
    def current_branch_id(self) -> str:
        """The branch this object reads and writes: ``"main"`` until a branch is created or
        switched to; ``"main"`` again after :meth:`clear_session`, and once the current branch
        is found gone (deleted or cleared by another worker, or expired).
        """
        return self._current[0]

    def branch_key(self, branch_id: str) -> str:
        """The store key of branch ``branch_id``: :attr:`key` for ``"main"``, else
        ``key + "#branch:" + branch_id`` percent-encoded (any string is a branch id).
        """
        return self._branches.key(branch_id)

    async def get_items(
        self, limit: int | None = None, branch_id: str | None = None
    ) -> list[TResponseInputItem]:
        """The current branch's items in order (``branch_id``: that branch's; none for a
        branch that does not exist); with ``limit=N`` (or ``session_settings.limit``) the
        newest N, read with ``get_history(last=...)`` so the cost follows N, not the history's
        length. ``limit=0`` gives ``[]``, a negative limit everything (as the SDK's SQLite
        session). A session never written, cleared or expired has no items.
        """
        self._check_open()
        settings = self.session_settings
        resolved = limit if limit is not None or settings is None else settings.limit
        if resolved == 0:
            return []
        if resolved is None or resolved < 0:
            return _items(await self._read(branch_id))
        want = resolved
        while True:  # read again when usage records took places among the newest
            history = await self._read(branch_id, want)
            shown = usage_of.visible(history)
            if len(shown) >= resolved or len(history) < want:
                return _items(shown[-resolved:])
            want += resolved - len(shown)

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Append ``items`` to the current branch in order, in one round trip: one atomic
        script (all or nothing, contiguous even when other workers append at the same time),
        refreshing the session's TTL. A retried call (redis-py after a lost reply) stores them
        once. The first call on a session that does not exist (or expired, or was cleared)
        creates it with the items.
        """
        self._check_open()
        if not items:
            return
        await _settled(self._add(items))

    async def _add(self, items: list[TResponseInputItem]) -> None:
        messages = _messages(items)
        current = self._current
        held = (_TURNS.get() or {}).get(id(self))
        if held is not None and held.key == current[1]:  # fenced: the session exists
            await held.append_messages(messages)
            return
        if current[0] != MAIN_BRANCH:
            try:
                await self.store.append_messages(current[1], messages)
                return
            except SessionNotFound:  # the branch is gone: back on main
                self._leave(current)
        if held is not None and held.key == self._key:
            await held.append_messages(messages)
            return
        try:
            await self.store.append_messages(self._key, messages)
        except SessionNotFound:
            session = Session(key=self._key, history=messages)
            try:
                await self.store.create(session)
            except DuplicateSession:  # another worker created it first
                await self.store.append_messages(self._key, messages)

    @contextlib.asynccontextmanager
    async def turn(self, *, lease: float = 30.0, wait: float = 0.0) -> AsyncIterator[AsyncTurn]:
        """Hold the current branch's turn for the block (the store's ``turn``; ``"main"`` is
        created empty first if it does not exist): within it, this task's :meth:`add_items` on
        that branch are fenced, so a worker paused past its lease cannot add items after
        another one took over; run the ``Runner`` inside the block.

        Raises:
            TurnBusy: another worker held the turn for all of ``wait`` seconds.
        """
        self._check_open()
        current = self._current
        async with contextlib.AsyncExitStack() as stack:
            held = None
            if current[0] != MAIN_BRANCH:
                try:
                    claim = self.store.turn(current[1], lease=lease, wait=wait)
                    held = await stack.enter_async_context(claim)
                except SessionNotFound:  # the branch is gone: back on main
                    self._leave(current)
            if held is None:
                with contextlib.suppress(DuplicateSession):
                    await self.store.create(Session(key=self._key))
                claim = self.store.turn(self._key, lease=lease, wait=wait)
                held = await stack.enter_async_context(claim)
            token = _TURNS.set({**(_TURNS.get() or {}), id(self): held})
            try:
                yield held
            finally:
                _TURNS.reset(token)

    async def pop_item(self) -> TResponseInputItem | None:
        """Remove and return the newest item of the current branch, or None when there is none
        (also when the session was never written, was cleared or expired).

        One round trip: the store's ``pop_message``, one atomic script. Two workers popping at
        once never get the same item; a call that redis-py retried after a lost reply returns
        the same item and removes nothing more.
        """
        self._check_open()
        current = self._current
        msg = None
        try:
            msg = await _settled(self._pop(current[1]))
        except SessionNotFound:  # never written, cleared or expired
            if current[0] == MAIN_BRANCH:
                return None
            self._leave(current)
            with contextlib.suppress(SessionNotFound):
                msg = await _settled(self._pop(self._key))
        return None if msg is None else _items([msg])[0]

    async def _pop(self, key: str) -> Message | None:
        """Pop the newest item's message of ``key``, and the usage records after it first
        (each one pop; their usage stays counted, their turns' rows stay in the metadata).
        """
        while True:
            msg = await self.store.pop_message(key)
            if msg is None or not usage_of.is_record(msg):
                return msg

    async def clear_session(self) -> None:
        """Remove every item of every branch (the store sessions of ``"main"`` and of each
        branch) and go back to ``"main"``; branch ids stay used (see
        :meth:`create_branch_from_turn`). Idempotent.

        One read of the branch registry, then the deletes together (not one atomic step: a
        branch another worker creates meanwhile may stay).
        """
        self._check_open()
        self._clears += 1
        await _settled(self._branches.delete_all())
        self._current = (MAIN_BRANCH, self._key)

    # -- branches (AdvancedSQLiteSession's names, arguments and return shapes) ----------------

    async def create_branch_from_turn(
        self, turn_number: int, branch_name: str | None = None
    ) -> str:
        """Create a branch holding the current branch's items before turn ``turn_number`` (its
        ``turn_number``-th user message and all after it are left out), make it the current
        branch, and return its id.

        ``branch_name`` is the new branch's id (None: ``branch_from_turn_<n>_<unix time>``,
        with ``_2``, ``_3``… when taken). A branch id is used once per session: ``"main"`` and
        every id created before (deleted or cleared since, too) are refused.

        The copy is the store's ``branch`` (with nothing to copy, a ``create``): one atomic
        step under the branch's own key, refused when that key holds a session, so two workers
        creating one id never share it. The id is recorded first in the session's branch
        registry (a store session of its own, ``key + "#branches"``, kept by
        :meth:`clear_session`). Reads the current branch whole (and the registry).

        Raises:
            ValueError: ``branch_name`` is blank or used already, or the current branch has no
                turn ``turn_number``.
        """
        self._check_open()
        if branch_name is not None and not branch_name.strip():
            raise ValueError("Branch name cannot be empty")
        return await _settled(self._create_branch(turn_number, branch_name))

    async def _create_branch(self, turn_number: int, branch_name: str | None) -> str:
        clears = self._clears
        for _ in range(ATTEMPTS):
            current = self._current
            source = await self._branches.session(current[1])
            if source is None and current[0] != MAIN_BRANCH:  # gone: back on main
                self._leave(current)
                continue
            history = [] if source is None else source.history
            start = usage_of.turn_start(history, turn_number)
            if source is None or start is None:
                raise ValueError(
                    f"Turn {turn_number} does not contain a user message in branch '{current[0]}'"
                )
            branch_id = await self._branches.reserve(branch_name, turn_number)
            try:
                at = history[start - 1].id if start else None
                key = await self._branches.make(branch_id, source, at)
            except DuplicateSession:  # a session under that key: the id is taken
                if branch_name is not None:
                    raise used_error(branch_name) from None
                continue  # a generated id: the next one
            except (MessageNotFound, SessionNotFound):  # the source changed since it was read
                await self._branches.forget(branch_id)
                continue
            if self._clears == clears and self._current == current:
                self._current = (branch_id, key)
            return branch_id
        raise ConcurrentChange(self._key, "its branches kept changing while one was created")

    async def create_branch_from_content(
        self, search_term: str, branch_name: str | None = None
    ) -> str:
        """:meth:`create_branch_from_turn` at the first user turn whose text holds
        ``search_term`` (as :meth:`find_turns_by_content` finds it).

        Raises:
            ValueError: no user turn holds ``search_term``; or as ``create_branch_from_turn``.
        """
        matching = await self.find_turns_by_content(search_term)
        if not matching:
            raise ValueError(f"No user turns found containing '{search_term}'")
        return await self.create_branch_from_turn(matching[0]["turn"], branch_name)

    async def switch_to_branch(self, branch_id: str) -> None:
        """Make ``branch_id`` the current branch (one read: it must hold items).

        Raises:
            ValueError: the branch does not exist or holds no item.
        """
        self._check_open()
        if not await self._branches.exists(branch_id):
            raise ValueError(f"Branch '{branch_id}' does not exist")
        self._current = (branch_id, self._branches.key(branch_id))

    async def delete_branch(self, branch_id: str, force: bool = False) -> None:
        """Delete branch ``branch_id`` (its store session); its id stays used. The current
        branch only with ``force``, which first switches to ``"main"``.

        Raises:
            ValueError: ``branch_id`` is blank or ``"main"``, the branch does not exist or holds
                no item, or it is the current branch and ``force`` is False.
        """
        self._check_open()
        if not branch_id or not branch_id.strip():
            raise ValueError("Branch ID cannot be empty")
        if branch_id == MAIN_BRANCH:
            raise ValueError(f"Cannot delete the '{MAIN_BRANCH}' branch")
        current = branch_id == self.current_branch_id
        if current and not force:
            raise ValueError(
                f"Cannot delete current branch '{branch_id}'. "
                "Use force=True or switch branches first"
            )
        if not await self._branches.exists(branch_id):
            raise ValueError(f"Branch '{branch_id}' does not exist")
        if current:
            await self.switch_to_branch(MAIN_BRANCH)
        await _settled(self.store.delete(self._branches.key(branch_id)))

    async def list_branches(self) -> list[dict[str, Any]]:
        """The branches that hold items, oldest first: ``branch_id``, ``message_count``,
        ``user_turns``, ``is_current``, ``created_at`` (UTC, ``YYYY-MM-DD HH:MM:SS``).

        Reads the registry, then every branch's whole history (together).
        """
        self._check_open()
        current = self._current
        if current[0] != MAIN_BRANCH and await self._branches.session(current[1], 0) is None:
            self._leave(current)
        return await self._branches.rows(self.current_branch_id)

    # -- turns -----------------------------------------------------------------------------------

    async def get_conversation_turns(self, branch_id: str | None = None) -> list[dict[str, Any]]:
        """The user turns of a branch (None: the current one), in order: ``turn``,
        ``content`` (its first 100 characters, ``...`` after a cut), ``full_content``,
        ``timestamp`` (the message's, UTC, ``YYYY-MM-DD HH:MM:SS``), ``can_branch`` (True).
        """
        self._check_open()
        return items_of.turn_rows(usage_of.visible(await self._read(branch_id)), 100)

    async def find_turns_by_content(
        self, search_term: str, branch_id: str | None = None
    ) -> list[dict[str, Any]]:
        """The user turns of a branch whose text (a string content, or the ``text`` of each
        part) holds ``search_term``, ASCII letters matched regardless of case; rows as
        :meth:`get_conversation_turns`', ``content`` uncut.
        """
        self._check_open()
        rows = items_of.turn_rows(usage_of.visible(await self._read(branch_id)), None)
        return [row for row in rows if items_of.contains(row["full_content"], search_term)]

    async def get_conversation_by_turns(
        self, branch_id: str | None = None
    ) -> dict[int, list[dict[str, str | None]]]:
        """A branch's items grouped by turn (0: before the first user message): per item its
        ``type`` (``user``, ``assistant``, the item's type, or ``other``) and ``tool_name``.
        """
        self._check_open()
        return items_of.by_turn(_items(await self._read(branch_id)))

    async def get_tool_usage(self, branch_id: str | None = None) -> list[tuple[str, int, int]]:
        """``(tool_name, calls, turn)`` per tool and turn of a branch, by turn: each tool call
        item once (outputs are not counted).
        """
        self._check_open()
        return items_of.tool_usage(_items(await self._read(branch_id)))

    # -- usage (AdvancedSQLiteSession's names, arguments and return shapes) -------------------

    async def store_run_usage(self, result: Any) -> None:
        """Store the usage of a run (``result.context_wrapper.usage``, the SDK ``Usage`` of
        a ``RunResult``) as the usage of the current branch's current turn (its last user
        message), as ``AdvancedSQLiteSession`` does: call it after ``Runner.run``. Storing a
        turn's usage again replaces its row (a resumed run reports its whole turn's usage
        again). Nothing is stored when the result has no usage or the branch has no user
        message.

        One read of the current branch, then one append guarded by ``expect_last_id`` (read
        again, a few times at most, when another writer came first; skipped, as the SDK skips
        it, when the turn it read is gone meanwhile): a hidden usage record (a message of
        author :data:`USAGE_AUTHOR`, not an item: ``get_items``, ``pop_item`` and the turn
        queries pass over it) whose ``Message.usage`` is what the run adds, and in the same
        script the turn's row in the branch's metadata (``openai-agents:usage:<turn>``, JSON:
        the SDK's figures and token details, see ``_openai_usage``). So the store's
        ``Session.usage`` of the branch, its usage budget and ``store.usage()`` count each
        run's spend once, atomically, whichever worker stores it, and the row is read back by
        :meth:`get_turn_usage` / :meth:`get_session_usage`. A row that replaces another adds
        each figure's increase only, so ``Session.usage`` is the sum of the rows as long as no
        turn was popped, rewound or trimmed away, nor stored lower than before (spend stays
        spent in ``Session.usage``; the rows follow the turns).

        Errors are logged and not raised, as the SDK's (``Failed to store session usage``),
        except :class:`~redis_session.UsageLimitExceeded`: the branch's usage had reached its
        budget (``max_usage_tokens``) before this call, so the run's usage could not be
        stored, and every next append (the next run's ``add_items``) is refused the same way;
        and ``TurnLost``: inside :meth:`turn`, the append is fenced by the turn, and a turn
        no longer this worker's stops it.
        """
        self._check_open()
        context = getattr(result, "context_wrapper", None)
        usage = getattr(context, "usage", None)
        if usage is None:
            return
        try:
            await _settled(self._store_usage(usage))
        except (UsageLimitExceeded, TurnLost):
            raise
        except Exception:
            _log.exception("Failed to store session usage")

    async def _store_usage(self, usage: Any) -> None:
        captured: tuple[str, str, int, str] | None = None  # branch, key, turn, its anchor
        for _ in range(ATTEMPTS):
            branch, key, session = await self._current_session()
            users = [] if session is None else usage_of.anchors(session.history)
            if captured is None:
                if not users:
                    return  # no turn to give the usage to
                captured = (branch, key, len(users), users[-1])
            elif (branch, key) != captured[:2] or users[captured[2] - 1 : captured[2]] != [
                captured[3]
            ]:
                return  # the turn read first is gone
            assert session is not None
            turn, anchor = captured[2], captured[3]
            row = usage_of.row_of(usage, branch, anchor)
            before = usage_of.rows(session.metadata, session.history, branch).get(turn)
            record = Message(
                role=MessageRole.ASSISTANT,
                author=USAGE_AUTHOR,
                usage=usage_of.spent(row, before),
            )
            entry = {usage_of.ROW + str(turn): json.dumps(row)}
            try:
                await self.store.append_messages(
                    key, [record], expect_last_id=session.history[-1].id, metadata=entry
                )
            except TurnLost:
                raise
            except StaleExpectation:
                continue  # another writer came first: read again
            except SessionNotFound:
                return  # deleted meanwhile: the turn is gone
            return
        raise ConcurrentChange(self._key, "its items kept changing while a run's usage was stored")

    async def get_session_usage(self, branch_id: str | None = None) -> dict[str, int] | None:
        """The sums of the stored turn usage of every branch (``branch_id``: of that branch
        only): ``requests``, ``input_tokens``, ``output_tokens``, ``total_tokens``,
        ``total_turns`` (how many turns have usage); None when no turn has.

        A branch: one read. Every branch: the registry read, then every branch whole,
        together. The store's own count of a branch's spend is its ``Session.usage``
        (``store.get(session.branch_key(branch_id)).usage``).
        """
        self._check_open()
        if branch_id:
            found = await self._branch_session(branch_id)
            branches = [] if found is None else [(branch_id, found)]
        else:
            branches = await self._branches.sessions()
        rows = [
            row
            for branch, session in branches
            for row in usage_of.rows(session.metadata, session.history, branch).values()
        ]
        return usage_of.session_usage(rows)

    async def get_turn_usage(
        self, user_turn_number: int | None = None, branch_id: str | None = None
    ) -> list[dict[str, Any]] | dict[str, Any]:
        """The stored usage of a branch's turns (None: the current branch's), by turn: each a
        dict of ``user_turn_number``, ``requests``, ``input_tokens``, ``output_tokens``,
        ``total_tokens``, ``input_tokens_details``, ``output_tokens_details`` (the SDK's token
        details as dicts, or None); with ``user_turn_number``, that turn's dict without
        ``user_turn_number``, ``{}`` when it has no usage. One read.
        """
        self._check_open()
        if branch_id is None:
            branch, _, session = await self._current_session()
        else:
            branch, session = branch_id, await self._branch_session(branch_id)
        found = {} if session is None else usage_of.rows(session.metadata, session.history, branch)
        if user_turn_number is not None:
            row = found.get(user_turn_number)
            return {} if row is None else usage_of.turn_usage(row)
        return [usage_of.turn_usage(row, turn) for turn, row in found.items()]

    # -- repairs ---------------------------------------------------------------------------------

    async def cleanup_failed_turn(self, reason: str = FAILED_TURN) -> int:
        """Answer every ``function_call`` and ``custom_tool_call`` item of the current branch
        that has no output item (a turn that failed midway), so that the history is valid
        input for the next run: one ``function_call_output`` / ``custom_tool_call_output``
        item per call, its ``output`` ``{"error": reason}`` as JSON. Returns the number of
        calls answered; a second call answers none.

        The outputs go in one append that expects the newest item this call read (read again,
        a few times at most, when another writer came first), so no call is answered twice.
        Inside :meth:`turn` the append is fenced by the turn.

        Raises:
            ConcurrentChange: the branch kept changing while it was repaired.
        """
        self._check_open()
        return await _settled(self._cleanup(reason))

    async def _cleanup(self, reason: str) -> int:
        for _ in range(ATTEMPTS):
            key, history = await self._read_current()
            calls = items_of.open_calls(_items(history))
            if not calls:
                return 0
            answers = _messages(items_of.closing_items(calls, reason))
            try:
                await self.store.append_messages(key, answers, expect_last_id=history[-1].id)
            except TurnLost:
                raise
            except StaleExpectation:
                continue  # another writer came first: read again
            return len(calls)
        raise ConcurrentChange(self._key, "its items kept changing while its calls were closed")

    async def rewind_to_turn(self, turn_number: int) -> int:
        """Remove turn ``turn_number`` and every item after it from the current branch, and
        return how many items went (not in ``AdvancedSQLiteSession``). The store's ``rewind``:
        one atomic script that checks the history is still the one read; fenced inside
        :meth:`turn`.

        Raises:
            ValueError: the current branch has no turn ``turn_number``.
        """
        self._check_open()
        return await _settled(self._rewind(turn_number))

    async def _rewind(self, turn_number: int) -> int:
        key, history = await self._read_current()
        start = usage_of.turn_start(history, turn_number)
        if start is None:
            raise ValueError(
                f"Turn {turn_number} does not contain a user message in branch "
                f"'{self.current_branch_id}'"
            )
        return await self.store.rewind(key, after=history[start - 1].id if start else "")

    # -- the rest --------------------------------------------------------------------------------

    async def ping(self) -> bool:
        """Whether Redis answers a PING (False on any error).

        Raises:
            RuntimeError: the session made its store (``from_url``) and was closed.
        """
        self._check_open()
        try:
            return bool(await self.store.client.ping())
        except Exception:
            return False

    async def close(self) -> None:
        """Close the store if this session made it (``from_url``); the session is closed for
        good from the first call (every method then raises ``RuntimeError``), and a call
        after a failed or cancelled close retries it. A session over a caller's store: nothing
        happens, the session stays usable. Idempotent.
        """
        if not self._owns_client:
            return
        self._closed = True
        if self._released:
            return
        self._released = True
        try:
            await self.store.close()
        except BaseException:
            self._released = False
            raise

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"{type(self).__name__} is closed")

    def _leave(self, current: tuple[str, str]) -> None:
        """Branch ``current`` was found gone: back on main, unless another branch became
        current meanwhile.
        """
        if self._current == current:
            self._current = (MAIN_BRANCH, self._key)

    async def _read(self, branch_id: str | None, last: int | None = None) -> list[Message]:
        """The newest ``last`` messages (None: all) of branch ``branch_id`` (None: the current
        branch, back on main when it is gone).
        """
        if branch_id is None:
            return (await self._read_current(last))[1]
        try:
            return await self.store.get_history(self._branches.key(branch_id), last)
        except SessionNotFound:
            return []

    async def _branch_session(self, branch_id: str) -> Session | None:
        """Branch ``branch_id``'s session read whole, or None (one read)."""
        session = await self._branches.session(self._branches.key(branch_id))
        return session if session is not None and is_branch(branch_id, session) else None

    async def _current_session(self) -> tuple[str, str, Session | None]:
        """The current branch's id, key and session read whole (back on main, whose session
        is read then, when the branch is gone).
        """
        current = self._current
        session = await self._branches.session(current[1])
        if session is not None or current[0] == MAIN_BRANCH:
            return current[0], current[1], session
        self._leave(current)
        return MAIN_BRANCH, self._key, await self._branches.session(self._key)

    async def _read_current(self, last: int | None = None) -> tuple[str, list[Message]]:
        """The current branch's key and newest ``last`` messages (back on main, whose history
        is read then, when the branch is gone).
        """
        current = self._current
        try:
            return current[1], await self.store.get_history(current[1], last)
        except SessionNotFound:
            if current[0] == MAIN_BRANCH:
                return current[1], []
        self._leave(current)
        try:
            return self._key, await self.store.get_history(self._key, last)
        except SessionNotFound:
            return self._key, []
