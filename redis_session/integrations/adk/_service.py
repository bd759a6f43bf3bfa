"""The ADK session service (see the package docstring)."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import hashlib
import json
import logging
import math
import re
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from ..._dist import install_hint

try:
    from google.adk.events.event import Event
    from google.adk.sessions.base_session_service import (
        BaseSessionService,
        GetSessionConfig,
        ListSessionsResponse,
    )
    from google.adk.sessions.session import Session as AdkSession
    from google.adk.sessions.state import State
    from google.genai.types import GenerateContentResponseUsageMetadata
except ImportError as exc:  # pragma: no cover - exercised without the extra installed
    raise ImportError(
        f"redis_session.integrations.adk needs Google ADK: {install_hint('adk')}"
    ) from exc
try:
    from google.adk.errors.already_exists_error import AlreadyExistsError
    from google.adk.errors.session_not_found_error import SessionNotFoundError
except ImportError:  # ADK releases before google.adk.errors (1.0 raised ValueError)

    class AlreadyExistsError(ValueError):  # type: ignore[no-redef]
        """A session with this id already exists (ADK releases without their own class)."""

    class SessionNotFoundError(ValueError):  # type: ignore[no-redef]
        """The session does not exist (ADK releases without their own class)."""


try:
    from google.adk.errors import StaleSessionError
except ImportError:  # ADK releases before the stale-session check (< 2.x)

    class StaleSessionError(ValueError):  # type: ignore[no-redef]
        """The session was changed in storage since the caller's copy was read."""


import redis
from pydantic import ValidationError
from pydantic_core import PydanticSerializationError, to_json

from ... import codec
from ...aio import AsyncRedisStore, AsyncTurn
from ...errors import CorruptData, DuplicateSession, SessionNotFound
from ...extension import Commands, Op, Request
from ...models import MESSAGE_ID_PATTERN, Message, MessageRole, Usage
from ...models import Session as StoreSession
from ._append import SCRIPT, SOURCE, Stale, append_event

__all__ = ["AdkKeys", "RedisSessionService"]

logger = logging.getLogger(__name__)

REFUSED = (redis.exceptions.OutOfMemoryError, redis.exceptions.ReadOnlyError)
"""What a server that takes no writes answers one (at ``maxmemory``, on a replica)."""

STATE = "state:"
"""Metadata name prefix of a state entry."""
APP_NAME = "adk:app_name"
USER_ID = "adk:user_id"
SESSION_ID = "adk:session_id"
LAST_UPDATE = "adk:last_update_time"
LAYOUT = "adk:layout"
"""Written on every session record (value ``2``), as it has been since the layout began."""
_TURNS: contextvars.ContextVar[dict[tuple[int, str], AsyncTurn] | None] = contextvars.ContextVar(
    "redis_session_adk_turns", default=None
)
"""The turns this task's appends go through, by service object and session record (see
``RedisSessionService.turn``); a new dict for each change, never changed in place."""
_FIRST_PAGE = 16
_EVENT_ID = re.compile(MESSAGE_ID_PATTERN)
_STALE = (
    "The session has been modified in storage since it was loaded. "
    "Please reload the session before appending more events."
)
"""ADK's own message (its tests match ``modified in storage``)."""
BUILT = "!"
"""The index member that says the index lists every session of its app (percent-encoded
names never hold a bare ``!``)."""
PRUNE_SAMPLE = 4
"""Index members each ``create_session`` samples (``ZRANDMEMBER``) and drops when their
session is gone: an app's index stays near its live sessions however rarely it is listed."""


def _text(value: Any) -> str:
    """A reply's member as text."""
    return value.decode() if isinstance(value, bytes) else str(value)


def _part(name: str) -> str:
    return quote(name, safe="")


@dataclass(frozen=True, slots=True)
class AdkKeys:
    """The store keys of ADK's apps, users and sessions: the one place that names them.

    Every name is percent-encoded (``urllib.parse.quote(name, safe="")``), so the ``/``
    separators are unambiguous and distinct names give distinct keys.
    """

    namespace: str = "adk"

    def app(self, app_name: str) -> str:
        """The record of ``app:`` state."""
        return f"{self.namespace}/app/{_part(app_name)}"

    def user(self, app_name: str, user_id: str) -> str:
        """The record of ``user:`` state."""
        return f"{self.namespace}/user/{_part(app_name)}/{_part(user_id)}"

    def session(self, app_name: str, user_id: str, session_id: str) -> str:
        """The session's record: identity, session state, last update time."""
        return f"{self.sessions_of(app_name, user_id)}{_part(session_id)}"

    def sessions_of(self, app_name: str, user_id: str | None = None) -> str:
        """The common beginning of the session records of an app, or of one user of it."""
        head = f"{self.namespace}/session/{_part(app_name)}/"
        return head if user_id is None else f"{head}{_part(user_id)}/"

    def member(self, user_id: str, session_id: str) -> str:
        """The session's member in its app's index: its record key after :meth:`sessions_of`."""
        return f"{_part(user_id)}/{_part(session_id)}"

    def index(self, prefix: str, app_name: str) -> str:
        """The Redis key of the app's session index (a sorted set read by lexical range)
        under the store's ``prefix``; its hash tag is the app's name, so one app's index is one
        key in one slot.
        """
        return f"{prefix}{_part(self.namespace)}-index:{{{_part(app_name)}}}"


def _dump(value: Any, key: str) -> str:
    try:
        return to_json(value).decode()
    except PydanticSerializationError:
        logger.warning("state %r is not JSON-serializable; storing its repr", key)
        return to_json(value, fallback=repr).decode()


def _state_entries(values: Mapping[str, Any]) -> dict[str, str]:
    return {STATE + k: _dump(v, k) for k, v in values.items()}


def _state_of(key: str, metadata: Mapping[str, str]) -> dict[str, Any]:
    state: dict[str, Any] = {}
    for name, text in metadata.items():
        if name.startswith(STATE):
            try:
                state[name[len(STATE) :]] = json.loads(text)
            except ValueError as exc:
                raise CorruptData(key, f"state entry {name!r} is not JSON") from exc
    return state


def _split(
    delta: Mapping[str, Any] | None,
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """``(app, user, session)`` parts of a state delta, scope prefixes removed; temp dropped."""
    app: dict[str, Any] = {}
    user: dict[str, Any] = {}
    session: dict[str, Any] = {}
    for key, value in (delta or {}).items():
        if key.startswith(State.APP_PREFIX):
            app[key.removeprefix(State.APP_PREFIX)] = value
        elif key.startswith(State.USER_PREFIX):
            user[key.removeprefix(State.USER_PREFIX)] = value
        elif not key.startswith(State.TEMP_PREFIX):
            session[key] = value
    return app, user, session


def _merged(
    session: Mapping[str, Any], app: Mapping[str, Any], user: Mapping[str, Any]
) -> dict[str, Any]:
    state = dict(session)
    state.update({State.APP_PREFIX + k: v for k, v in app.items()})
    state.update({State.USER_PREFIX + k: v for k, v in user.items()})
    return state


def _message_id(event_id: str) -> str:
    if _EVENT_ID.fullmatch(event_id):
        return event_id
    digest = hashlib.sha256(event_id.encode("utf-8", "surrogatepass")).hexdigest()
    return "adk." + digest[:40]


def _to_message(event: Event) -> Message:
    if event.author == "user":
        role = MessageRole.USER
    elif event.get_function_responses():
        role = MessageRole.TOOL
    else:
        role = MessageRole.ASSISTANT
    spent = event.usage_metadata
    return Message(
        id=_message_id(event.id),
        role=role,
        content=event.model_dump_json(exclude_defaults=True),
        author=event.author,
        timestamp=datetime.fromtimestamp(event.timestamp, UTC),
        tokens=None if spent is None else spent.candidates_token_count,
        usage=None if spent is None else _usage(spent),
    )


def _usage(spent: GenerateContentResponseUsageMetadata) -> Usage:
    """An event's ``usage_metadata`` as the message's usage: the prompt's tokens (and the
    tool-use prompt's) read, the candidates' (and the thoughts') written, one request.
    """
    return Usage(
        input_tokens=(spent.prompt_token_count or 0) + (spent.tool_use_prompt_token_count or 0),
        output_tokens=(spent.candidates_token_count or 0) + (spent.thoughts_token_count or 0),
        requests=1,
    )


def _to_event(key: str, msg: Message) -> Event:
    try:
        return Event.model_validate_json(msg.content)
    except ValidationError as exc:
        raise CorruptData(key, f"message {msg.id!r} is not an ADK event") from exc


def _first_window(config: GetSessionConfig | None) -> int | None:
    """How many of the newest events the first read of a session takes (None: all): one more
    than ``num_recent_events``, so that a tie at the window's edge is seen.
    """
    recent = None if config is None else config.num_recent_events
    if recent == 0:
        return 0
    if config is None or (config.after_timestamp is None and recent is None):
        return None
    return recent + 1 if recent else _FIRST_PAGE


def _order(event: Event) -> tuple[float, str]:
    """ADK's database order of events: by timestamp, ties by event id."""
    return event.timestamp, event.id


def _one(request: Request) -> Op[Any]:
    """An operation of one request (for the store's driver)."""
    return (yield request)


class RedisSessionService(BaseSessionService):
    """ADK sessions, events and ``app:`` / ``user:`` / session state in a Redis session store.

    ``store`` is an :class:`~redis_session.AsyncRedisStore`; its prefix, ``ttl``,
    ``max_history_turns`` (which trims old events) and durability options apply. ``namespace``
    begins every key this service uses (see :class:`AdkKeys`). The service holds no state of
    its own: any number of processes may serve the same sessions at once.
    """

    def __init__(self, store: AsyncRedisStore, *, namespace: str = "adk") -> None:
        self.store = store
        self.keys = AdkKeys(namespace)
        store.register_script(SCRIPT, SOURCE)

    async def create_session(
        self,
        *,
        app_name: str,
        user_id: str,
        state: dict[str, Any] | None = None,
        session_id: str | None = None,
    ) -> AdkSession:
        """Create a session (a fresh UUID when ``session_id`` is None or blank).

        ``app:`` and ``user:`` entries of ``state`` go to the shared app and user state,
        ``temp:`` entries are dropped, the rest is the session's state. Returns the session
        with the merged state and no events.

        Raises:
            AlreadyExistsError: a session with this id exists for this app and user (two
                creators at once: exactly one wins).
        """
        session_id = (session_id or "").strip() or str(uuid.uuid4())
        app_delta, user_delta, session_state = _split(state)
        now = time.time()
        record = self.keys.session(app_name, user_id, session_id)
        metadata = {
            APP_NAME: app_name,
            USER_ID: user_id,
            SESSION_ID: session_id,
            LAST_UPDATE: repr(now),
            LAYOUT: "2",
            **_state_entries(session_state),
        }
        # Indexed first: the index may name a session that is not (yet, or any longer) there,
        # never miss one; list_sessions drops what it names in vain, and so does every create
        # for a few members it samples. Indexed again once created: a listing or a prune that
        # found it not there yet and dropped it meanwhile is undone.
        index, member = self._index(app_name), self.keys.member(user_id, session_id)
        indexing: list[tuple[Any, ...]] = [("ZADD", index, 0, member)]
        options = self.store.options
        if options.ttl_ms:  # the index of an app without creates goes (rebuilt if listed again)
            indexing.append(("PEXPIRE", index, 2 * options.ttl_ms + options.grace_ms))
        *_, sample = await self._send(Commands([*indexing, ("ZRANDMEMBER", index, PRUNE_SAMPLE)]))
        try:
            await self.store.create(StoreSession(key=record, metadata=metadata))
        except DuplicateSession:
            raise AlreadyExistsError(f"Session with id {session_id} already exists.") from None
        others = [n for n in map(_text, sample) if n != member]
        await asyncio.gather(
            asyncio.shield(self._send(Commands([("ZADD", index, 0, member)]))),
            self._prune(app_name, others),
            self._upsert(self.keys.app(app_name), _state_entries(app_delta)),
            self._upsert(self.keys.user(app_name, user_id), _state_entries(user_delta)),
        )
        app_state, user_state = await asyncio.gather(
            self._shared_state(self.keys.app(app_name)),
            self._shared_state(self.keys.user(app_name, user_id)),
        )
        return AdkSession(
            id=session_id,
            app_name=app_name,
            user_id=user_id,
            state=_merged(session_state, app_state, user_state),
            last_update_time=now,
        )

    async def get_session(
        self,
        *,
        app_name: str,
        user_id: str,
        session_id: str,
        config: GetSessionConfig | None = None,
    ) -> AdkSession | None:
        """The session with its merged state and its events (all, or as ``config`` selects:
        the newest ``num_recent_events``, those with ``timestamp >= after_timestamp``), or None.

        One concurrent batch of reads: the session with the selected events only, and the app
        and user state (see the module docstring for the cost).
        """
        session_id = session_id.strip()
        key = self.keys.session(app_name, user_id, session_id)
        window = _first_window(config)
        record, (app_state, user_state) = await asyncio.gather(
            self._record(key, window), self._shared_states(app_name, user_id)
        )
        if record is None:
            return None
        session = self._session_from(record, app_state, user_state)
        session.events = await self._events(key, record, window, config)
        return session

    async def list_sessions(
        self, *, app_name: str, user_id: str | None = None
    ) -> ListSessionsResponse:
        """The app's sessions (or one user's), without events, with merged state, ordered by
        ``last_update_time`` (oldest first), then user id and session id.

        Read through the app's index (one lexical range of one sorted set), then each listed
        session's fields and metadata without its events: the cost follows the sessions
        listed, not all sessions of the store. Entries of sessions that are gone (deleted,
        expired) are dropped from the index here.
        """
        index = self._index(app_name)
        head = self.keys.sessions_of(app_name)
        low, high = (
            ("-", "+") if user_id is None else (f"[{_part(user_id)}/", f"[{_part(user_id)}0")
        )
        # the members first: an index that expires between the two reads then reads as not
        # built (rebuilt from the sessions), never as built and empty
        members, built = await self._send(
            Commands([("ZRANGE", index, low, high, "BYLEX"),
                      ("ZRANGE", index, f"[{BUILT}", f"[{BUILT}", "BYLEX")])
        )  # fmt: skip
        if not built:  # sessions made before the index: found once by prefix, then indexed
            found = [s.key for s in await self.store.list_sessions(prefix=head)]
            names = [k[len(head) :] for k in found]
            pairs = [x for name in (BUILT, *names) for x in (0, name)]
            await self._upkeep(app_name, self._send(Commands([("ZADD", index, *pairs)])))
            members = [n for n in names if user_id is None or n.startswith(low[1:])]
        names = [n for n in map(_text, members) if n != BUILT]
        records = await asyncio.gather(*(self._record(head + n) for n in names))
        gone = [n for n, r in zip(names, records, strict=True) if r is None]
        if gone:  # found not there by their reads: removed, checked again (see _drop_gone)
            await asyncio.shield(self._remove(app_name, gone))
        found_records = [r for r in records if r is not None]
        users = sorted({r.metadata.get(USER_ID, "") for r in found_records})
        app_state, *user_states = await asyncio.gather(
            self._shared_state(self.keys.app(app_name)),
            *(self._shared_state(self.keys.user(app_name, u)) for u in users),
        )
        by_user = dict(zip(users, user_states, strict=True))
        sessions = [
            self._session_from(r, app_state, by_user[r.metadata.get(USER_ID, "")])
            for r in found_records
        ]
        sessions.sort(key=lambda s: (s.last_update_time, s.user_id, s.id))
        return ListSessionsResponse(sessions=sessions)

    async def delete_session(self, *, app_name: str, user_id: str, session_id: str) -> None:
        """Delete the session and its events; idempotent. Shared state is kept."""
        session_id = session_id.strip()
        await self.store.delete(self.keys.session(app_name, user_id, session_id))
        await self._send(
            Commands([("ZREM", self._index(app_name), self.keys.member(user_id, session_id))])
        )

    @contextlib.asynccontextmanager
    async def turn(
        self,
        *,
        app_name: str,
        user_id: str,
        session_id: str,
        lease: float = 30.0,
        wait: float = 0.0,
    ) -> AsyncIterator[AsyncTurn]:
        """Hold the session's turn for the block (the store's ``turn``): within it, this
        task's ``append_event`` calls on the session are fenced, so a runner paused past its
        lease cannot append after another worker took the session over.

        For example::

            async with service.turn(app_name="a", user_id="u", session_id=sid, wait=5):
                async for event in runner.run_async(user_id="u", session_id=sid, ...):
                    ...

        Raises:
            TurnBusy: another worker held the turn for all of ``wait`` seconds.
            SessionNotFoundError: the session does not exist.
        """
        record = self.keys.session(app_name, user_id, session_id.strip())
        try:
            async with self.store.turn(record, lease=lease, wait=wait) as held:
                token = _TURNS.set({**(_TURNS.get() or {}), (id(self), record): held})
                try:
                    yield held
                finally:
                    _TURNS.reset(token)
        except SessionNotFound:
            raise SessionNotFoundError(f"Session {session_id} not found.") from None

    async def get_user_state(self, *, app_name: str, user_id: str) -> dict[str, Any]:
        """The ``user:`` state of this app and user, keys without the prefix (``{}`` if none)."""
        return await self._shared_state(self.keys.user(app_name, user_id))

    async def append_event(self, session: AdkSession, event: Event) -> Event:
        """Store ``event`` and its state delta, then apply both to ``session`` in memory.

        Partial (streaming) events are returned untouched. ``temp:`` keys reach the in-memory
        session only. One script (one round trip) checks that ``session`` is not stale,
        stores the event, the session-state delta, ``last_update_time = event.timestamp`` and
        (on a single server) the ``app:`` / ``user:`` deltas; see the module docstring for a
        cluster and for encrypted stores. Idempotent by event id: an event already stored
        changes nothing.

        Inside ``async with service.turn(app_name, user_id, session_id)``, the append is made
        through that turn: refused (``TurnLost``) once the turn's lease ran out or another
        worker claimed it (see :meth:`turn`).

        Raises:
            StaleSessionError: the stored session was changed since ``session`` was read
                (its ``last_update_time`` is later than the caller's and its newest event is
                not the caller's newest); nothing was stored.
            SessionNotFoundError: the session does not exist (deleted, expired, never made).
            TurnLost: made through a turn that is not the caller's any more.
            UsageLimitExceeded: the session's usage (its events' ``usage_metadata``) has
                reached its budget (``max_usage_tokens``); nothing was stored.
        """
        if event.partial:
            return event
        delta = event.actions.state_delta
        temp = {k: v for k, v in delta.items() if k.startswith(State.TEMP_PREFIX)}
        if temp:  # visible to later agents of this invocation, never stored
            session.state.update(temp)
            event.actions.state_delta = {k: v for k, v in delta.items() if k not in temp}
        app_delta, user_delta, session_delta = _split(event.actions.state_delta)
        keys = self.keys
        record = keys.session(session.app_name, session.user_id, session.id)
        entries = {LAST_UPDATE: repr(event.timestamp), **_state_entries(session_delta)}
        shared = [
            (keys.app(session.app_name), _state_entries(app_delta)),
            (keys.user(session.app_name, session.user_id), _state_entries(user_delta)),
        ]
        one_script = not self.store.encrypted and not self.store.extension.schema.cluster
        held = (_TURNS.get() or {}).get((id(self), record))
        try:
            if self.store.encrypted:  # sealed values: the store's own path (module docstring)
                await self._check_fresh(record, session)
                if held is not None:
                    await held.append_message(_to_message(event), metadata=entries)
                else:
                    await self.store.append_message(record, _to_message(event), metadata=entries)
            else:
                last = _message_id(session.events[-1].id) if session.events else ""
                op = append_event(
                    self.store.extension, record, _to_message(event), entries,
                    shared if one_script else [], codec.METADATA_PREFIX + LAST_UPDATE,
                    session.last_update_time, last, held,
                )  # fmt: skip
                await self.store.run(op)
        except SessionNotFound:
            raise SessionNotFoundError(f"Session {session.id} not found.") from None
        except Stale:
            raise StaleSessionError(_STALE) from None
        if not one_script:  # other slots (a cluster), or sealed: each record in its own step
            steps: list[Awaitable[None]] = []
            for key, put in shared:
                if put:
                    steps.append(self._upsert(key, put))
                elif self.store.ttl is not None:
                    steps.append(self._touch(key))
            await asyncio.gather(*steps)
        session.state.update(event.actions.state_delta)
        session.events.append(event)
        session.last_update_time = event.timestamp
        return event

    async def _check_fresh(self, record: str, session: AdkSession) -> None:
        """The stale check of an encrypted store, made before its append (one more round trip,
        not atomic with it: the script cannot read sealed values).
        """
        stored = await self._record(record, 1)
        if stored is None:
            return  # the append says SessionNotFound
        try:
            newer = float(stored.metadata.get(LAST_UPDATE, "0")) > session.last_update_time
        except ValueError as exc:
            raise CorruptData(record, f"{LAST_UPDATE} is not a number") from exc
        if newer:
            last = session.events[-1].id if session.events else None
            held = stored.history[-1].id if stored.history else None
            if last is None or held != _message_id(last):
                raise StaleSessionError(_STALE)

    async def _send(self, request: Request) -> Any:
        """Send one request through the store (its client of the running event loop)."""
        return await self.store.run(_one(request))

    def _index(self, app_name: str) -> str:
        return self.keys.index(self.store.prefix, app_name)

    async def _upkeep(self, app_name: str, work: Awaitable[Any]) -> bool:
        """Await ``work``, one write of upkeep of the app's index that changes nothing a
        listing returns (the rebuild's ``ZADD``, a ``ZREM`` of entries found gone); False
        when the server refused it (``OutOfMemoryError`` at ``maxmemory``, ``ReadOnlyError``
        on a replica): the index stays as it was, and a later listing does the upkeep. Any
        other error is the caller's.
        """
        try:
            await work
        except REFUSED as exc:
            logger.debug("index upkeep of %s refused: %s", app_name, exc)
            return False
        return True

    async def _prune(self, app_name: str, names: Sequence[str]) -> None:
        """:meth:`_drop_gone` for a create's sample, best effort: a failure (a node of
        another slot down) is logged, never the create's.
        """
        try:
            await self._drop_gone(app_name, names)
        except Exception:  # a stale entry is allowed; the create succeeded
            logger.debug("index prune of %s failed", app_name, exc_info=True)

    async def _drop_gone(self, app_name: str, names: Sequence[str]) -> None:
        """Drop from the app's index those members of ``names`` whose session is not there,
        then put back any that is there after all. Not atomic (the index and the sessions
        are in other slots), but a session is lost from the index only if its creator dies
        between its create and its second ``ZADD``: one created between the check and the
        removal is found by the check after it, or else was created after that check, so
        after the removal, and its creator's second ``ZADD`` puts it back. The removal and
        the check after it run to the end once begun (shielded from cancellation); when that
        check fails, every member removed is put back.
        """
        names = [n for n in names if n != BUILT]
        if not names:
            return
        found = await self._there(app_name, names)
        gone = [n for n, there in zip(names, found, strict=True) if not there]
        if gone:
            await asyncio.shield(self._remove(app_name, gone))

    async def _there(self, app_name: str, names: Sequence[str]) -> list[bool]:
        """Whether the session of each index member ``names`` exists (its meta hash)."""
        head, schema = self.keys.sessions_of(app_name), self.store.extension.schema
        commands = [("EXISTS", schema.session(head + n).meta) for n in names]
        return [bool(int(r)) for r in await self._send(Commands(commands))]

    async def _remove(self, app_name: str, gone: Sequence[str]) -> None:
        """ZREM ``gone`` (found not there) from the app's index, check again, ZADD back what
        is there (all of it when the check fails); see :meth:`_drop_gone`. A refused ZREM
        removes nothing (see :meth:`_upkeep`). A refused put-back (at ``maxmemory``, where
        ZREM still runs and ZADD does not) drops the index's built marker instead, so that
        the next listing finds the app's sessions by their keys and indexes them again: a
        session created between the check and the removal is not unlisted for good.
        """
        index = self._index(app_name)
        if not await self._upkeep(app_name, self._send(Commands([("ZREM", index, *gone)]))):
            return  # refused (a replica): nothing removed, nothing to put back
        back = list(gone)  # put back unless checked gone after the removal
        try:
            found = await self._there(app_name, gone)
            back = [n for n, there in zip(gone, found, strict=True) if there]
        finally:
            if back:
                pairs = (x for n in back for x in (0, n))
                put_back = self._send(Commands([("ZADD", index, *pairs)]))
                if not await self._upkeep(app_name, put_back):
                    await self._send(Commands([("ZREM", index, BUILT)]))

    # -- helpers -----------------------------------------------------------------------------

    def _session_from(
        self, record: StoreSession, app_state: Mapping[str, Any], user_state: Mapping[str, Any]
    ) -> AdkSession:
        meta = record.metadata
        try:
            last_update = float(meta.get(LAST_UPDATE, "0"))
        except ValueError as exc:
            raise CorruptData(record.key, f"{LAST_UPDATE} is not a number") from exc
        return AdkSession(
            id=meta.get(SESSION_ID, ""),
            app_name=meta.get(APP_NAME, ""),
            user_id=meta.get(USER_ID, ""),
            state=_merged(_state_of(record.key, meta), app_state, user_state),
            last_update_time=last_update,
        )

    async def _record(self, key: str, last: int | None = 0) -> StoreSession | None:
        """Store session ``key`` with its newest ``last`` messages (None: all), or None."""
        try:
            return await self.store.get(key, last)
        except SessionNotFound:
            return None

    async def _shared_state(self, key: str) -> dict[str, Any]:
        record = await self._record(key)
        return {} if record is None else _state_of(key, record.metadata)

    async def _shared_states(
        self, app_name: str, user_id: str
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        app_state, user_state = await asyncio.gather(
            self._shared_state(self.keys.app(app_name)),
            self._shared_state(self.keys.user(app_name, user_id)),
        )
        return app_state, user_state

    async def _upsert(self, key: str, entries: dict[str, str]) -> None:
        """Set metadata entries of record ``key``, creating the record when it is missing."""
        if not entries:
            return
        try:
            await self.store.update_metadata(key, set=entries)
        except SessionNotFound:
            try:
                await self.store.create(StoreSession(key=key, metadata=entries))
            except DuplicateSession:  # created meanwhile by another worker
                await self.store.update_metadata(key, set=entries)

    async def _touch(self, key: str) -> None:
        """Refresh the TTL of record ``key`` if it exists."""
        with contextlib.suppress(SessionNotFound):
            await self.store.update_metadata(key)

    async def _events(
        self,
        key: str,
        record: StoreSession,
        window: int | None,
        config: GetSessionConfig | None,
    ) -> list[Event]:
        """The events ``config`` selects of session ``key``, whose newest ``window`` messages
        ``record`` holds.
        """

        async def newest(n: int | None) -> Sequence[Message]:
            return record.history if n == window else await self._history(key, n)

        recent = None if config is None else config.num_recent_events
        after = None if config is None else config.after_timestamp
        if recent == 0:
            return []

        def chosen(events: list[Event]) -> list[Event]:
            if after is not None:
                events = [e for e in events if e.timestamp >= after]
            return events[-recent:] if recent else events

        if window is None:
            return sorted((_to_event(key, m) for m in await newest(None)), key=_order)
        size = window
        while True:  # the newest pages until one reaches past what is selected (ties too)
            page = await newest(size)
            events = sorted((_to_event(key, m) for m in page), key=_order)
            if len(page) < size:  # all the session holds
                return chosen(events)
            picked = chosen(events)
            bound = -math.inf if after is None else after
            if recent and len(picked) >= recent:
                bound = max(bound, picked[0].timestamp)
            if events[0].timestamp < bound:
                return picked
            size *= 2

    async def _history(self, key: str, last: int | None) -> Sequence[Message]:
        try:
            return await self.store.get_history(key, last)
        except SessionNotFound:
            return []
