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

Costs: ``add_items`` is one round trip (``append_messages``: one atomic script, all items
contiguous, idempotent by message id, cluster-safe because a session's keys share one slot);
the first ``add_items`` of a session adds a ``create``. ``pop_item`` is one round trip (one
script). ``get_items(limit=N)`` reads the newest N messages (``get_history(last=N)``);
``get_items()`` reads the whole history.

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
from collections.abc import AsyncIterator, Awaitable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

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

from ..aio import AsyncRedisStore, AsyncTurn
from ..errors import DuplicateSession, SessionNotFound
from ..models import Message, MessageRole, Session

__all__ = ["ITEM_AUTHOR", "MUTATION_SETTLE_TIMEOUT", "RedisAgentSession"]

ITEM_AUTHOR = "openai-agents"
"""``Message.author`` of a message holding one input item."""
MUTATION_SETTLE_TIMEOUT = 30.0
"""Seconds a cancelled mutation still waits for Redis's answer before giving up waiting."""
_T = TypeVar("_T")
_ROLES = {
    "user": MessageRole.USER,
    "assistant": MessageRole.ASSISTANT,
    "system": MessageRole.SYSTEM,
    "developer": MessageRole.SYSTEM,
}


def _role_of(item: Any) -> MessageRole:
    role = item.get("role") if isinstance(item, dict) else None
    if isinstance(role, str) and role in _ROLES:
        return _ROLES[role]
    kind = item.get("type") if isinstance(item, dict) else None
    if isinstance(kind, str) and kind.endswith("_output"):
        return MessageRole.TOOL
    return MessageRole.ASSISTANT


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


def _item(msg: Message) -> TResponseInputItem:
    if msg.author == ITEM_AUTHOR:
        item: TResponseInputItem = json.loads(msg.content)
        return item
    role = msg.role.normalize()
    shown = role.value if role in (MessageRole.USER, MessageRole.SYSTEM) else "assistant"
    foreign: Any = {"role": shown, "content": msg.content}
    return foreign  # type: ignore[no-any-return]


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
        """The store key of this session: ``key_prefix + session_id``."""
        return self._key

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The conversation's items in order; with ``limit=N`` (or ``session_settings.limit``)
        the newest N, read with ``get_history(last=...)`` so the cost follows N, not the
        history's length. ``limit=0`` gives ``[]``, a negative limit everything (as the SDK's
        SQLite session). A session never written, cleared or expired has no items.
        """
        self._check_open()
        settings = self.session_settings
        resolved = limit if limit is not None or settings is None else settings.limit
        if resolved == 0:
            return []
        last = None if resolved is None or resolved < 0 else resolved
        return [_item(m) for m in await self._history(last)]

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Append ``items`` in order in one round trip: one atomic script (all or nothing,
        contiguous even when other workers append at the same time), refreshing the session's
        TTL. A retried call (redis-py after a lost reply) stores them once. The first call on a
        session that does not exist (or expired, or was cleared) creates it with the items.
        """
        self._check_open()
        if not items:
            return
        await _settled(self._add(items))

    async def _add(self, items: list[TResponseInputItem]) -> None:
        messages = [
            Message(role=_role_of(item), content=json.dumps(item), author=ITEM_AUTHOR)
            for item in items
        ]
        held = (_TURNS.get() or {}).get(id(self))
        if held is not None:  # fenced: the session exists
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
        """Hold the session's turn for the block (the store's ``turn``; the session is created
        empty first if it does not exist): within it, this task's :meth:`add_items` are fenced,
        so a worker paused past its lease cannot add items after another one took over; run
        the ``Runner`` inside the block.

        Raises:
            TurnBusy: another worker held the turn for all of ``wait`` seconds.
        """
        self._check_open()
        with contextlib.suppress(DuplicateSession):
            await self.store.create(Session(key=self._key))
        async with self.store.turn(self._key, lease=lease, wait=wait) as held:
            token = _TURNS.set({**(_TURNS.get() or {}), id(self): held})
            try:
                yield held
            finally:
                _TURNS.reset(token)

    async def pop_item(self) -> TResponseInputItem | None:
        """Remove and return the newest item, or None when there is none (also when the
        session was never written, was cleared or expired).

        One round trip: the store's ``pop_message``, one atomic script. Two workers popping at
        once never get the same item; a call that redis-py retried after a lost reply returns
        the same item and removes nothing more.
        """
        self._check_open()
        try:
            msg = await _settled(self.store.pop_message(self._key))
        except SessionNotFound:  # never written, cleared or expired
            return None
        return None if msg is None else _item(msg)

    async def clear_session(self) -> None:
        """Remove every item (the whole store session); idempotent."""
        self._check_open()
        await _settled(self.store.delete(self._key))

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

    async def _history(self, last: int | None) -> list[Message]:
        try:
            return await self.store.get_history(self._key, last)
        except SessionNotFound:
            return []
