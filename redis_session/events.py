"""Lifecycle events: their wire form, the in-process hook, and the listeners.

An event is logged and published by the same Lua script that makes the change (so there is
none for a change that did not happen): appended to the tree's event log (a Redis stream, see
``_core.eventlog``) and published on ``store.events_channel`` (or, with sharded events, its slot's
shard channel) as a JSON object with ``type``, ``id`` (its place in the log), ``key``,
``child_key``, ``parent_key``, ``agent_name`` and ``timestamp``. Pub/sub is at-most-once; the
log is what a listener resumes from (``store.listen(since=...)``, ``group=...``). The
listeners live in ``_async/listen.py`` (and its generated blocking twin ``_sync/listen.py``).
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from pydantic import TypeAdapter, ValidationError

from .models import SessionLifecycleEvent

log = logging.getLogger("redis_session")

LifecycleHook = Callable[[SessionLifecycleEvent], Awaitable[None] | None]
"""Called with each event after the change; the async store awaits a coroutine function."""

_EVENT = TypeAdapter(SessionLifecycleEvent)


def decode_event(data: object) -> SessionLifecycleEvent | None:
    """An event from a pub/sub payload; None (logged) for a payload that is not one."""
    try:
        if not isinstance(data, bytes | str):
            raise ValueError(f"payload of type {type(data).__name__}")
        return _EVENT.validate_json(data)
    except (ValidationError, ValueError) as exc:
        log.warning("redis_session: ignored a malformed lifecycle event: %s", exc)
        return None


def event_of(message: Any) -> SessionLifecycleEvent | None:
    """The event a pub/sub message carries (``message``, or ``smessage`` of a shard channel),
    if it is one that parses.
    """
    if message is None or message.get("type") not in ("message", "smessage"):
        return None
    return decode_event(message.get("data"))


def call_hook(hook: LifecycleHook | None, event: SessionLifecycleEvent) -> Awaitable[None] | None:
    """Run ``hook(event)``; errors are logged, never raised (the change already happened)."""
    if hook is None:
        return None
    try:
        result = hook(event)
    except Exception:
        log.exception("redis_session: lifecycle hook failed for %s", event.type)
        return None
    return result if inspect.isawaitable(result) else None


async def finish_hook(pending: Awaitable[None] | None, event: SessionLifecycleEvent) -> None:
    """Await what an async hook returned, logging its errors."""
    if pending is None:
        return
    try:
        await pending
    except Exception:
        log.exception("redis_session: lifecycle hook failed for %s", event.type)


def finish_hook_sync(pending: Awaitable[None] | None, event: SessionLifecycleEvent) -> None:
    """The blocking store cannot await: a hook that returned an awaitable is a mistake."""
    if pending is None:
        return
    close = getattr(pending, "close", None)
    if close is not None:
        close()
    log.error(
        "redis_session: the lifecycle hook of a RedisStore must not be async (%s)", event.type
    )
