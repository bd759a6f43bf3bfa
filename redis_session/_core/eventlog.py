"""Lifecycle events on the write side: the event a script logs and publishes, the events
arguments of a script, and the reaper that logs ``expire`` events.

A script that makes a change logs its event in the same step (``log_event`` in
``lua/_prelude.lua``): it appends it to the tree's event log, a Redis stream (one per prefix,
or one per slot on a cluster, beside the slot's index shard), and publishes it live. Python
sends the event's fields (``key``, ``child_key``, ``parent_key``, ``agent_name``,
``timestamp``) as JSON members; the script adds its ``type`` and its ``id`` (its position in
the log). An entry of the log holds ``t`` (the type), ``p`` (the id of the entry before it)
and ``e`` (the fields); :func:`entry_event` reads one back.

Expiry. A tree that expires is seen by no script: the reaper (``reap_expired.lua``) logs its
``expire`` event once, for index entries whose score (the tree's last write) is older than
``ttl + ttl/16`` (so that the tree's deadline has passed) and whose meta hash is gone, and
takes them off the index in the same step. A create that finds such entries in its index
shard reaps them (at most once a second per shard and store); so do the listeners.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, NamedTuple

import orjson
from pydantic import TypeAdapter, ValidationError

from .. import _clock, codec, contracts
from ..contracts import Events
from ..errors import CorruptData
from ..keys import KeySchema, parent_of
from ..models import LifecycleEventType, SessionLifecycleEvent, utcnow
from ..options import StoreOptions
from ..status import Ctx, check
from .index import Index
from .requests import Emit, Op

log = logging.getLogger("redis_session")

_EVENT = TypeAdapter(SessionLifecycleEvent)
REAP_PAGE = 100
"""Candidates one reaper call looks at (the script's work is linear in them)."""
REAP_EVERY = 1.0
"""Seconds between two reaps of one index shard by one store after its creates."""


class Draft(NamedTuple):
    """An event before its script ran: its fields as sent, and the event once its id is known."""

    type: str
    key: str
    child_key: str
    agent_name: str
    timestamp: datetime
    fields: bytes
    """The event's JSON members but ``type`` and ``id`` (no braces), as the script takes them."""
    extra: tuple[tuple[str, Any], ...] = ()
    """Fields of one event type (``branch_of``, ``message_id``, ``count``), in ``fields`` too."""

    def event(self, event_id: Any = b"") -> SessionLifecycleEvent:
        """The event, with the id its script logged it under (``b''``/None: none)."""
        return SessionLifecycleEvent(
            type=self.type,
            key=self.key,
            child_key=self.child_key,
            parent_key=self.key if self.child_key else "",
            agent_name=self.agent_name,
            timestamp=self.timestamp,
            id=_text(event_id),
            **dict(self.extra),
        )


def new_event(
    type: LifecycleEventType,
    key: str,
    *,
    child_key: str = "",
    agent_name: str = "",
    **extra: str | int,
) -> Draft:
    """An event about session ``key`` (the parent, for child events), stamped now; ``extra``:
    the fields of its type (:class:`SessionLifecycleEvent`'s ``branch_of``, ``message_id``,
    ``count``).
    """
    stamp = utcnow()
    fields: dict[str, Any] = {
        "key": key,
        "child_key": child_key,
        "parent_key": key if child_key else "",
        "agent_name": agent_name,
        "timestamp": stamp,
        **extra,
    }
    body = orjson.dumps(fields, option=orjson.OPT_UTC_Z)
    return Draft(type.value, key, child_key, agent_name, stamp, body[1:-1], tuple(extra.items()))


def discard_event(parent_key: str, child_key: str) -> Draft:
    """The ``discard`` event of child ``child_key`` of session ``parent_key``, stamped now."""
    agent = (parent_of(child_key) or ("", ""))[1]
    return new_event(LifecycleEventType.DISCARD, parent_key, child_key=child_key, agent_name=agent)


def entry_event(entry_id: Any, fields: Mapping[Any, Any]) -> SessionLifecycleEvent | None:
    """The event a log entry holds (``XRANGE``'s id and field mapping), or None (logged) for an
    entry that is not one.
    """
    try:
        kind = _text(fields[b"t"])
        body = b'{"type":' + orjson.dumps(kind) + b',"id":"' + _text(entry_id).encode() + b'",'
        return _EVENT.validate_json(body + bytes(fields[b"e"]) + b"}")
    except (KeyError, TypeError, ValidationError, ValueError) as exc:
        log.warning("redis_session: ignored a malformed event log entry %r: %s", entry_id, exc)
        return None


def _text(value: Any) -> str:
    if value is None:
        return ""
    return value.decode() if isinstance(value, bytes | bytearray) else str(value)


class EventLog:
    """The events arguments of a store's scripts, and its reaper."""

    def __init__(self, schema: KeySchema, options: StoreOptions, index: Index) -> None:
        self.schema = schema
        self.options = options
        self.index = index
        on = options.publish_events
        self.publish = "" if not on else "SPUBLISH" if options.sharded_events else "PUBLISH"
        self.log_max = options.event_log_max if on else 0
        self._plain = Events(schema.events_channel, self.publish, self.log_max, self._age_ms())
        self._reaped: dict[str, float] = {}
        self._scan_from: dict[str, str] = {}
        """Index shard -> the score after which the next reaper page starts: a page full of
        trees kept alive by a store with a longer ttl moves it on, so they cannot starve the
        trees behind them (back to the start once a page comes back short)."""

    def _age_ms(self) -> int:
        return self.options.event_log_age_ms if self.log_max else 0

    def events_of(self, key: str) -> Events:
        """The events arguments of a script that logs an event of session ``key``'s tree."""
        if not self.options.sharded_events:
            return self._plain
        return self._plain._replace(channel=self.schema.shard_channel_of(key))

    def events_beside(self, index: str) -> Events:
        """The events arguments of a script working on index shard ``index``."""
        if not self.options.sharded_events:
            return self._plain
        return self._plain._replace(channel=self.schema.beside(index, "events"))

    def log_of(self, key: str) -> str:
        """The event log of session ``key``'s tree."""
        return self.schema.log_of(key)

    def reap_due(self, index: str) -> Op[list[SessionLifecycleEvent]]:
        """:meth:`reap` ``index`` unless this store reaped it less than a second ago."""
        now = _clock.monotonic()
        if now - self._reaped.get(index, -REAP_EVERY) < REAP_EVERY:
            return []
        if len(self._reaped) >= 4096:
            self._reaped.clear()
        self._reaped[index] = now
        return (yield from self.reap(index))

    def due_query(self, index: str) -> tuple[Any, ...]:
        """The read of index shard ``index``'s entries whose tree may be due to be reaped (a
        page; the script checks each with the server's clock).
        """
        ttl = self.options.ttl_ms
        cutoff = int(_clock.time() * 1000) - ttl - ttl // 16
        start = self._scan_from.get(index, "-inf")
        return ("ZRANGEBYSCORE", index, start, f"({cutoff}", "WITHSCORES", "LIMIT", 0, REAP_PAGE)

    def reap(self, index: str) -> Op[list[SessionLifecycleEvent]]:
        """Log an ``expire`` event for up to a page of the trees of index shard ``index``
        whose deadline passed (each exactly once, whoever reaps), take them off the index,
        and hand the events to the hook; returns them.
        """
        if not self.options.ttl_ms:
            return []
        (members,) = yield from self.index.reads([self.due_query(index)])
        return (yield from self.reap_members(index, members))

    def reap_members(self, index: str, page: Sequence[Any]) -> Op[list[SessionLifecycleEvent]]:
        """:meth:`reap` of the candidates ``page`` read from ``index`` (:meth:`due_query`)."""
        pairs = codec.scored(page)
        if len(self._scan_from) >= 4096:
            self._scan_from.clear()
        if len(pairs) >= REAP_PAGE:  # a full page: the next one starts after it
            self._scan_from[index] = f"{float(pairs[-1][1]):.0f}"  # inclusive: ties seen
        else:
            self._scan_from.pop(index, None)
        members = [member for member, _ in pairs]
        ttl = self.options.ttl_ms
        metas: list[str] = []
        candidates: list[bytes | str] = []
        drafts: dict[str, Draft] = {}
        for raw in members:
            try:
                key = codec.decode_key(bytes(raw))
            except CorruptData as exc:
                codec.log_bad_record("the reaper", exc)
                continue
            draft = drafts[key] = new_event(LifecycleEventType.EXPIRE, key)
            metas.append(self.schema.session(key).meta)
            candidates += (key, draft.fields)
        if not ttl or not candidates:
            return []
        call = contracts.reap_expired(
            index=index,
            log=self.schema.beside(index, "log"),
            metas=metas,
            events=self.events_beside(index),
            ttl_ms=ttl,
            candidates=candidates,
        )
        reply = yield call
        reaped = contracts.parsed(contracts.Reaped, check(reply, Ctx("", call.keys))).reaped
        events = [
            drafts[_text(key)].event(event_id)
            for key, event_id in zip(reaped[::2], reaped[1::2], strict=True)
        ]
        for event in events:
            yield Emit(event)
        return events
