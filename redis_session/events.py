"""Lifecycle events: their wire form, the in-process hook, and pub/sub listeners.

An event is published by the same Lua script that makes the change (so none is published for a
change that did not happen) on ``store.events_channel``, as a JSON object with ``type``,
``key``, ``child_key``, ``parent_key``, ``agent_name`` and ``timestamp``. Pub/sub is
at-most-once: a listener that is disconnected resubscribes, and events published during the gap
are missed.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from types import TracebackType
from typing import Any

import redis
import redis.asyncio
from pydantic import TypeAdapter, ValidationError

from .models import SessionLifecycleEvent

log = logging.getLogger("redis_session")

LifecycleHook = Callable[[SessionLifecycleEvent], Awaitable[None] | None]
"""Called with each event after the change; the async store awaits a coroutine function."""

_EVENT = TypeAdapter(SessionLifecycleEvent)
_TRANSPORT_ERRORS = (redis.ConnectionError, redis.TimeoutError, OSError)
BACKOFF_FIRST, BACKOFF_MAX = 0.05, 2.0


def decode_event(data: object) -> SessionLifecycleEvent | None:
    """An event from a pub/sub payload; None (logged) for a payload that is not one."""
    try:
        if not isinstance(data, bytes | str):
            raise ValueError(f"payload of type {type(data).__name__}")
        return _EVENT.validate_json(data)
    except (ValidationError, ValueError) as exc:
        log.warning("redis_session: ignored a malformed lifecycle event: %s", exc)
        return None


def _event_of(message: Any) -> SessionLifecycleEvent | None:
    """The event a pub/sub message carries, if it is a published message that parses."""
    if message is None or message.get("type") != "message":
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


class EventListener:
    """Lifecycle events from pub/sub, as an iterator (blocking flavour).

    ``get(timeout)`` returns the next event or None after ``timeout`` seconds; iterating yields
    events until :meth:`close`. A dropped connection is resubscribed with backoff (counted in
    :attr:`reconnects`); events published while disconnected are missed.
    """

    def __init__(self, client: redis.Redis | redis.RedisCluster, channel: str) -> None:
        self._client = client
        self.channel = channel
        """The events channel listened on."""
        self.reconnects = 0
        """How many times a dropped connection was resubscribed."""
        self._closed = False
        self._pubsub = self._subscribe()

    def start(self) -> EventListener:
        """Return self: the blocking listener subscribes when it is made."""
        return self

    def _subscribe(self) -> Any:
        client: Any = self._client  # redis-py leaves Redis.pubsub untyped
        pubsub = client.pubsub(ignore_subscribe_messages=True)
        pubsub.subscribe(self.channel)
        return pubsub

    def _reconnect(self) -> None:
        delay = BACKOFF_FIRST
        while not self._closed:
            try:
                self._pubsub.close()
                self._pubsub = self._subscribe()
                self.reconnects += 1
                return
            except _TRANSPORT_ERRORS:
                time.sleep(delay)
                delay = min(delay * 2, BACKOFF_MAX)

    def get(self, timeout: float | None = None) -> SessionLifecycleEvent | None:
        """The next event, or None when ``timeout`` seconds pass (or the listener is closed)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._closed:
            left = 1.0 if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                message = self._pubsub.get_message(timeout=min(left, 1.0))
            except _TRANSPORT_ERRORS:
                self._reconnect()
                continue
            event = _event_of(message)
            if event is not None:
                return event
            if deadline is not None and time.monotonic() >= deadline:
                return None
        return None

    def __iter__(self) -> Iterator[SessionLifecycleEvent]:
        while not self._closed:
            event = self.get(timeout=1.0)
            if event is not None:
                yield event

    def close(self) -> None:
        """Unsubscribe and stop iterating."""
        self._closed = True
        self._pubsub.close()

    def __enter__(self) -> EventListener:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class AsyncEventListener:
    """Lifecycle events from pub/sub, as an async iterator (asyncio flavour).

    The same contract as :class:`EventListener`: ``await get(timeout)``, ``async for``,
    :meth:`aclose`, resubscription with backoff, at-most-once delivery.
    """

    def __init__(
        self, client: redis.asyncio.Redis | redis.asyncio.RedisCluster, channel: str
    ) -> None:
        self._client = client
        self.channel = channel
        """The events channel listened on."""
        self.reconnects = 0
        """How many times a dropped connection was resubscribed."""
        self._closed = False
        self._pubsub: Any = None

    async def _subscribe(self) -> None:
        await self._client.initialize()  # a cluster client learns its slots here
        pubsub = self._client.pubsub(ignore_subscribe_messages=True)
        await pubsub.subscribe(self.channel)
        self._pubsub = pubsub

    async def start(self) -> AsyncEventListener:
        """Subscribe (``store.listen()`` does this before returning the listener)."""
        if self._pubsub is None:
            await self._subscribe()
        return self

    async def _reconnect(self) -> None:
        delay = BACKOFF_FIRST
        while not self._closed:
            try:
                await self._pubsub.aclose()
                await self._subscribe()
                self.reconnects += 1
                return
            except _TRANSPORT_ERRORS:
                await asyncio.sleep(delay)
                delay = min(delay * 2, BACKOFF_MAX)

    async def get(self, timeout: float | None = None) -> SessionLifecycleEvent | None:
        """The next event, or None when ``timeout`` seconds pass (or the listener is closed)."""
        await self.start()
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._closed:
            left = 1.0 if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                message = await self._pubsub.get_message(timeout=min(left, 1.0))
            except _TRANSPORT_ERRORS:
                await self._reconnect()
                continue
            event = _event_of(message)
            if event is not None:
                return event
            if deadline is not None and time.monotonic() >= deadline:
                return None
        return None

    async def __aiter__(self) -> AsyncIterator[SessionLifecycleEvent]:
        while not self._closed:
            event = await self.get(timeout=1.0)
            if event is not None:
                yield event

    async def aclose(self) -> None:
        """Unsubscribe and stop iterating."""
        self._closed = True
        if self._pubsub is not None:
            await self._pubsub.aclose()

    async def __aenter__(self) -> AsyncEventListener:
        return await self.start()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
