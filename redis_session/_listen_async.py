"""Listeners of lifecycle events (asyncio). The blocking ones (``_listen_sync``) are generated
from ``_listen_async`` by ``tools/unasync.py``: edit that one.

:class:`AsyncEventListener` follows pub/sub alone: at-most-once. :class:`AsyncLogListener`
reads the event log (``_eventlog``): from a cursor (``since``), or as a member of a consumer
group (``group``), so that a dropped connection, a restart or a slow consumer costs latency,
never an event. On a single server it waits on the log itself (``XREAD BLOCK``); on a cluster,
where the log is one stream per slot, pub/sub tells it which stream to read and it reads every
stream each ``poll`` seconds besides, so a lost message costs at most that long. Every
listener reaps the trees that expired (``expire`` events) each ``poll`` seconds. See
``docs/events.md``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from types import TracebackType
from typing import Any

import redis
import redis.asyncio

from . import contracts, events
from ._core import Core
from ._follow import (
    CLOCK_MARGIN_MS,
    READ_COUNT,
    START,
    Position,
    check_since,
    events_of,
    flat_entries,
    gap,
    text,
    wanted,
)
from ._requests import Op, ScriptCall
from ._telemetry import Telemetry, timed
from .errors import EventsLost
from .models import SessionLifecycleEvent
from .status import Ctx, Status, check

log = logging.getLogger("redis_session")

Runner = Callable[[Op[Any]], Awaitable[Any]]
Shards = Callable[[], Awaitable[Any]]
"""What gives a live listener the shard channels of the slots that have sessions now."""
_TRANSPORT_ERRORS = (redis.ConnectionError, redis.TimeoutError, OSError)
BACKOFF_FIRST, BACKOFF_MAX = 0.05, 2.0
WAIT_MS = 1000
"""The longest single wait on the server (XREAD BLOCK, a pub/sub read), so close() is seen."""


def read_group(call: ScriptCall) -> Op[Any]:
    """A group read as an operation of its own (its span's name)."""
    return (yield call)


class AsyncEventListener:
    """Lifecycle events from pub/sub, as an async iterator (asyncio flavour): at-most-once.

    ``await get(timeout)`` returns the next event or None after ``timeout`` seconds;
    ``async for`` yields events until :meth:`aclose`. A dropped connection is resubscribed with
    backoff (counted in :attr:`reconnects`); events published while disconnected are missed:
    for events that no listener misses, ``listen(since=...)`` or ``listen(group=...)``.

    With sharded events on a cluster it listens on the shard channel of every slot that has
    sessions, and looks for new ones (``shards``) every ``poll`` seconds: the events of a slot
    whose first session was made since it last looked are missed (at most ``poll`` seconds'
    worth per new slot).
    """

    def __init__(
        self,
        client: redis.asyncio.Redis | redis.asyncio.RedisCluster,
        channel: str,
        *,
        shard_channels: Iterable[str] | None = None,
        shards: Shards | None = None,
        poll: float = 1.0,
        types: frozenset[str] | None = None,
    ) -> None:
        self._client = client
        self.channel = channel
        """The events channel listened on (with sharded events: the first shard channel)."""
        self.shard_channels = None if shard_channels is None else sorted(shard_channels)
        """With sharded events: the shard channels listened on (``SSUBSCRIBE``)."""
        self.reconnects = 0
        """How many times a dropped connection was made again and resubscribed (by this
        listener or by redis-py underneath): each is a gap in which events were missed."""
        self.types = types
        self._closed = False
        self._pubsub: Any = None
        self._shards = shards
        self._poll = poll
        self._next_look = time.monotonic() + poll

    async def _look_for_shards(self) -> None:
        """Subscribe to the shard channels of slots that got their first session since."""
        if self._shards is None or self.shard_channels is None:
            return
        now = time.monotonic()
        if now < self._next_look:
            return
        self._next_look = now + self._poll
        known = set(self.shard_channels)
        new = [c for c in await self._shards() if c not in known]
        if new:
            await self._pubsub.ssubscribe(*new)
            self.shard_channels = sorted(known.union(new))
            self._watch(self._pubsub)

    async def _subscribe(self) -> None:
        await self._client.initialize()  # async only: a cluster client learns its slots here
        pubsub = self._client.pubsub(ignore_subscribe_messages=True)
        if self.shard_channels is None:
            await pubsub.subscribe(self.channel)
        elif self.shard_channels:
            await pubsub.ssubscribe(*self.shard_channels)
        self._pubsub = pubsub
        self._watch(pubsub)

    def _watch(self, pubsub: Any) -> None:
        """Count the reconnections redis-py makes underneath (it resubscribes a dropped pub/sub
        connection on its own): each is a gap in which events were missed.
        """
        nodes = getattr(pubsub, "node_pubsub_mapping", None) or {}
        for each in (pubsub, *nodes.values()):
            connection = getattr(each, "connection", None)
            if connection is not None:
                connection.register_connect_callback(self._connected_again)

    def _connected_again(self, connection: Any) -> None:
        if self._closed:
            return
        self.reconnects += 1
        log.warning(
            "redis_session: a live listener's connection was made again (by redis-py):"
            " events published meanwhile are missed"
        )

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
                log.warning(
                    "redis_session: a live listener resubscribed: events meanwhile are missed"
                )
                return
            except _TRANSPORT_ERRORS:
                await asyncio.sleep(delay)
                delay = min(delay * 2, BACKOFF_MAX)

    async def _message(self, timeout: float) -> Any:
        if self.shard_channels is None:
            return await self._pubsub.get_message(timeout=timeout)
        await self._look_for_shards()
        if not self.shard_channels:
            await asyncio.sleep(min(timeout, self._poll))
            return None
        pubsub = self._pubsub
        return await pubsub.get_sharded_message(ignore_subscribe_messages=True, timeout=timeout)

    async def get(self, timeout: float | None = None) -> SessionLifecycleEvent | None:
        """The next event, or None when ``timeout`` seconds pass (or the listener is closed)."""
        await self.start()
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._closed:
            left = 1.0 if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                message = await self._message(min(left, 1.0, self._poll))
            except _TRANSPORT_ERRORS:
                await self._reconnect()
                continue
            event = events.event_of(message)
            if event is not None and (self.types is None or event.type in self.types):
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


class AsyncLogListener:
    """Lifecycle events from the event log, as an async iterator (asyncio flavour): none is
    missed without :class:`~redis_session.errors.EventsLost` saying so.

    From a cursor (``group`` None): every event after ``since``, in log order per session;
    :attr:`cursor` after an event resumes right after it (``listen(since=cursor)``). In a
    consumer group: each event goes to one member, which acknowledges it with :meth:`ack`;
    one not acknowledged within ``claim_after`` seconds goes to another member (at least once;
    ``event.deliveries`` counts the deliveries); a member that starts again under its name
    gets what it held first. ``EventsLost`` is raised once per gap (events trimmed from the
    log, or a log removed, before this listener or its group got them); the next ``get`` goes
    on after the gap. Events of a type not in ``types`` are passed over (in a group:
    acknowledged).
    """

    def __init__(
        self,
        client: redis.asyncio.Redis | redis.asyncio.RedisCluster,
        core: Core,
        run: Runner,
        *,
        since: str = "latest",
        group: str | None = None,
        consumer: str | None = None,
        claim_after: float = 30.0,
        types: frozenset[str] | None = None,
        poll: float = 1.0,
        telemetry: Telemetry | None = None,
    ) -> None:
        self._client: Any = client
        self._telemetry = telemetry
        self._block_ms = _block_ms(client)  # redis-py leaves the stream commands' replies untyped
        self._core = core
        self._run = run
        self._schema = core.schema
        self._cluster = core.schema.cluster
        self._sharded = core.options.sharded_events
        self.since = check_since(since)
        self.group = group
        self.consumer = consumer or f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        """This member's name in its group."""
        self.claim_after = claim_after
        self.types = types
        self.poll = poll
        self.reconnects = 0
        """How many times the wake-up subscription (cluster) was made again."""
        self.outages = 0
        """How many times the server could not be reached while reading (each waited out: the
        listener reads on from its position once it answers, losing nothing)."""
        self._outage_delay = 0.0
        self._position = Position(core.schema)
        self._buffer: deque[tuple[str, str, SessionLifecycleEvent | None]] = deque()
        self._logs: list[str] = []
        self._grouped: set[str] = set()
        self._seen: str | None = None
        self._later = START
        self._joined_all = False
        self._next_poll = 0.0
        self._next_claim = 0.0
        self._base_due: str | None = None
        self._pubsub: Any = None
        self._started = False
        self._closed = False

    @property
    def cursor(self) -> str:
        """Where this listener is: ``listen(since=listener.cursor)`` resumes right after the
        last event it returned. Opaque; ``""`` in a consumer group (the group is the place).
        """
        return "" if self.group is not None else self._position.cursor

    # -- starting ---------------------------------------------------------------------------------

    async def start(self) -> AsyncLogListener:
        """Take up ``since``, join the group, subscribe to wake-ups (``store.listen()`` does
        this before returning the listener).
        """
        if self._started:
            return self
        self._started = True
        await self._client.initialize()  # async only: a cluster client learns its slots here
        if self._cluster:
            await self._subscribe()  # before the first read: nothing falls between
        await self._find_logs()
        if self.group is None:
            await self._take_up()
        else:
            if self._cluster and self.since == "latest":  # for logs found later (new slots)
                self._later = await self._cluster_now()
            for log_key in self._logs:
                await self._join(log_key)
            self._joined_all = True
            await self._own_pending()
        return self

    async def _take_up(self) -> None:
        if self.since == "earliest":  # from the oldest entry each log holds, trimmed or not
            for log_key in self._logs:
                before = await self._before_oldest(log_key)
                if before != START:
                    self._position.passed(log_key, before)
            return
        if self.since != "latest":
            self._position.resume(self.since)
            return
        base = await self._cluster_now() if self._cluster else START
        pipe = self._client.pipeline(transaction=False)
        for log_key in self._logs:  # after the newest entry each log holds
            pipe.xrevrange(log_key, count=1)
        for log_key, last in zip(self._logs, await pipe.execute(), strict=True):
            if last:
                self._position.passed(log_key, text(last[0][0]))
        self._position.advance(base)

    async def _before_oldest(self, log_key: str) -> str:
        """The id of the entry before the oldest one ``log_key`` holds (``START``: none), so
        that reading from there is no gap even when the log was trimmed.
        """
        oldest = await self._client.xrange(log_key, count=1)
        if not oldest:
            return START
        return text(oldest[0][1].get(b"p", START))

    async def _cluster_now(self) -> str:
        """An id below which no log of the cluster gets an entry any more: the oldest clock
        of its primaries, less a margin.
        """
        clocks = []
        for node in self._client.get_primaries():
            seconds, micros = await self._client.execute_command("TIME", target_nodes=node)
            clocks.append(int(seconds) * 1000 + int(micros) // 1000)
        return f"{max(0, min(clocks) - CLOCK_MARGIN_MS)}-0"

    async def _find_logs(self) -> None:
        if not self._cluster:
            self._logs = [self._schema.log_of("")]
            return
        indexes = await self._run(self._core.index.indexes())
        logs = sorted({self._schema.beside(i, "log") for i in indexes})
        new = [log_key for log_key in logs if log_key not in self._logs]
        self._logs = logs
        if new and self._sharded and self._pubsub is not None:
            await self._pubsub.ssubscribe(*(self._beside(log_key, "events") for log_key in new))

    def _beside(self, log_key: str, kind: str) -> str:
        return f"{self._schema.prefix}{kind}{log_key[len(self._schema.prefix) + len('log') :]}"

    async def _join(self, log_key: str) -> None:
        """Create the group on ``log_key`` as ``since`` says (an existing group is kept)."""
        if log_key in self._grouped:
            return
        if self.since == "earliest":
            start = await self._before_oldest(log_key)
        elif self.since == "latest":  # a log found after the start: from the start's time
            start = self._later if self._joined_all else "$"
        else:
            given = Position(self._schema)
            given.resume(self.since)
            start = given.of(log_key)
        try:
            await self._client.xgroup_create(log_key, self.group, id=start, mkstream=True)
        except redis.ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise
        self._grouped.add(log_key)

    async def _subscribe(self) -> None:
        pubsub = self._client.pubsub(ignore_subscribe_messages=True)
        if not self._sharded:
            await pubsub.subscribe(self._schema.events_channel)
        else:
            indexes = await self._run(self._core.index.indexes())
            channels = [self._schema.beside(i, "events") for i in indexes]
            if channels:
                await pubsub.ssubscribe(*channels)
        self._pubsub = pubsub

    async def _resubscribe(self) -> None:
        delay = BACKOFF_FIRST
        while not self._closed:
            try:
                await self._pubsub.aclose()
                await self._subscribe()
                self.reconnects += 1
                self._next_poll = 0.0  # what was published meanwhile: every log, now
                return
            except _TRANSPORT_ERRORS:
                await asyncio.sleep(delay)
                delay = min(delay * 2, BACKOFF_MAX)

    # -- reading ----------------------------------------------------------------------------------

    async def get(self, timeout: float | None = None) -> SessionLifecycleEvent | None:
        """The next event, or None when ``timeout`` seconds pass (or the listener is closed);
        ``EventsLost`` once for a gap before it.
        """
        await self.start()
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._closed:
            if self._buffer:
                log_key, entry_id, event = self._buffer.popleft()
                if self.group is None:
                    self._position.passed(log_key, entry_id)
                    if not self._buffer and self._base_due is not None:
                        self._position.advance(self._base_due)
                        self._base_due = None
                if event is not None and wanted(self.types, event):
                    if self._telemetry is not None:
                        self._measure(event)
                    return event
                if self.group is not None:  # not this member's kind (or not an event): done
                    await self._client.xack(log_key, self.group, entry_id)
                continue
            now = time.monotonic()
            try:
                if now >= self._next_poll:
                    self._next_poll = now + self.poll
                    await self._poll()
                    continue
                if deadline is not None and now >= deadline:
                    return None
                left = (
                    self._next_poll - now
                    if deadline is None
                    else min(self._next_poll, deadline) - now
                )
                await self._wait(min(left, WAIT_MS / 1000))
            except _TRANSPORT_ERRORS as exc:  # a restart, a failover: wait it out, lose nothing
                await self._wait_out(exc, deadline)
                if deadline is not None and time.monotonic() >= deadline:
                    return None
                continue
            self._outage_delay = 0.0
        return None

    async def _wait_out(self, exc: BaseException, deadline: float | None) -> None:
        """Back off after a transport error while reading (the position is kept)."""
        if not self._outage_delay:
            self.outages += 1
            log.warning(
                "redis_session: a log listener cannot reach the server (%s): it reads on from"
                " its position once it answers",
                type(exc).__name__,
            )
        self._outage_delay = min(max(self._outage_delay * 2, BACKOFF_FIRST), BACKOFF_MAX)
        pause = self._outage_delay
        if deadline is not None:
            pause = max(0.0, min(pause, deadline - time.monotonic()))
        await asyncio.sleep(pause)
        self._next_poll = 0.0  # read every log again once it answers

    async def _wait(self, seconds: float) -> None:
        """Wait up to ``seconds`` for new entries, reading the logs that got some."""
        if not self._cluster:  # one log: block on it
            log_key = self._logs[0]
            after = self._position.of(log_key) if self.group is None else self._seen or "$"
            block = min(int(seconds * 1000), self._block_ms)
            got = await self._client.xread({log_key: after}, count=1, block=max(1, block))
            if got:
                await self._read([log_key])
            return
        dirty: set[str] = set()
        try:
            message = await self._message(seconds)
            while message is not None:
                event = events.event_of(message)
                if event is not None:
                    dirty.add(self._schema.log_of(event.key))
                message = await self._message(0)
        except _TRANSPORT_ERRORS:
            await self._resubscribe()
            return
        if dirty - set(self._logs):
            await self._find_logs()
        if dirty:
            await self._read(sorted(dirty))

    async def _message(self, seconds: float) -> Any:
        if not self._sharded:
            return await self._pubsub.get_message(timeout=seconds)
        pubsub = self._pubsub
        return await pubsub.get_sharded_message(ignore_subscribe_messages=True, timeout=seconds)

    async def _poll(self) -> None:
        """Read every log to its end (moving a cluster cursor's base), take over what other
        members held too long, and reap expired trees.
        """
        if self._cluster:
            await self._find_logs()
        base = await self._cluster_now() if self._cluster and self.group is None else None
        complete = await self._read(self._logs)
        if self._telemetry is not None and self._telemetry.active():
            self._telemetry.metrics.behind.record(len(self._buffer))
        if base is not None and complete:
            if self._buffer:
                self._base_due = base  # once what was read up to it is passed on
            else:
                self._position.advance(base)
        if self.group is not None and time.monotonic() >= self._next_claim:
            self._next_claim = time.monotonic() + max(self.claim_after / 2, 0.05)
            await self._claim()
        await self._reap()

    async def _read(self, logs: list[str]) -> bool:
        """Read ``logs`` after this listener's place into the buffer; whether each was read to
        its end. A log with entries still buffered is read again once they are passed on.
        """
        logs = [log_key for log_key in logs if not any(b[0] == log_key for b in self._buffer)]
        if self.group is not None:
            complete = True
            for log_key in logs:
                complete &= await self._read_group(log_key)
            return complete
        if not logs:
            return False
        pipe = self._client.pipeline(transaction=False)
        for log_key in logs:
            pipe.xrange(log_key, min=f"({self._position.of(log_key)}", count=READ_COUNT)
        replies = await pipe.execute()
        complete = True
        lost: EventsLost | None = None
        for log_key, entries in zip(logs, replies, strict=True):
            found = gap(
                log_key, self._position.of(log_key), log_key in self._position.known, entries
            )
            lost = lost or found
            complete &= len(entries) < READ_COUNT
            for entry_id, event in events_of(entries):
                self._buffer.append((log_key, entry_id, event))
        if lost is not None:
            raise lost
        return complete

    async def _read_group(self, log_key: str) -> bool:
        await self._join(log_key)
        call = contracts.read_group(
            [log_key], group=str(self.group), consumer=self.consumer, count=READ_COUNT
        )
        reply = await self._run(read_group(call))
        if contracts.status(reply) in (Status.NOT_FOUND, Status.MISSING):
            self._grouped.discard(log_key)  # the log went (evicted, deleted), its group with it
            raise EventsLost(log_key, self._seen or "", "", "the log was removed with its group")
        read = contracts.parsed(contracts.GroupRead, check(reply, Ctx("", [log_key])))
        entries = flat_entries(read.entries)
        if entries:
            self._seen = text(entries[-1][0])
        for entry_id, event in events_of(entries):
            self._buffer.append((log_key, entry_id, event))
        lost = gap(log_key, text(read.delivered), False, entries)
        if lost is not None:
            raise lost
        return len(entries) < READ_COUNT

    async def _own_pending(self) -> None:
        """What this member was given before and did not acknowledge (it started again under
        its name): first, again.
        """
        for log_key in self._logs:
            got = await self._client.xreadgroup(
                self.group, self.consumer, {log_key: START}, count=READ_COUNT
            )
            entries = _stream_entries(got)
            counts = await self._deliveries(log_key, entries)
            for entry_id, event in events_of(entries, counts):
                self._buffer.append((log_key, entry_id, event))

    async def _deliveries(self, log_key: str, entries: list[Any]) -> dict[str, int]:
        if not entries:
            return {}
        pending = await self._client.xpending_range(
            log_key, self.group, min=entries[0][0], max=entries[-1][0], count=len(entries),
            consumername=self.consumer,
        )  # fmt: skip
        return {text(p["message_id"]): int(p["times_delivered"]) for p in pending}

    async def _claim(self) -> None:
        """Take over entries other members held unacknowledged longer than ``claim_after``."""
        idle = int(self.claim_after * 1000)
        for log_key in self._logs:
            got = await self._client.xautoclaim(
                log_key, self.group, self.consumer, idle, START, count=READ_COUNT
            )
            entries = [(e[0], e[1]) for e in got[1] if e is not None and e[1] is not None]
            counts = await self._deliveries(log_key, entries)
            for entry_id, event in events_of(entries, counts):
                self._buffer.append((log_key, entry_id, event))
            gone = [text(i) for i in (got[2] if len(got) > 2 else ())]
            if gone:  # given out, never acknowledged, then trimmed: the group lost them
                await self._client.xack(log_key, self.group, *gone)
                raise EventsLost(log_key, gone[0], "", f"{len(gone)} taken, never acknowledged")

    async def _reap(self) -> None:
        """Log the ``expire`` events of the trees whose deadline passed (one read for every
        index shard, then a script for each shard that has some).
        """
        reaper = self._core.events
        if not self._core.options.ttl_ms:
            return
        indexes = await self._run(self._core.index.indexes())
        pipe = self._client.pipeline(transaction=False)
        for index in indexes:
            pipe.execute_command(*reaper.due_query(index))
        due = await pipe.execute(raise_on_error=False)
        for index, members in zip(indexes, due, strict=True):
            if isinstance(members, list) and members:
                await self._run(reaper.reap_members(index, members))

    def _measure(self, event: SessionLifecycleEvent) -> None:
        """The listener's lag and re-deliveries, as metrics."""
        if self._telemetry is None:
            return
        metrics, kind = self._telemetry.metrics, {"event.type": event.type}
        if event.timestamp is not None:
            metrics.lag.record(max(0.0, time.time() - event.timestamp.timestamp()), kind)
        if event.deliveries > 1:
            metrics.redeliveries.add(1, kind)

    # -- groups -----------------------------------------------------------------------------------

    async def ack(self, event: SessionLifecycleEvent) -> bool:
        """Acknowledge ``event`` in this listener's group: done, no member gets it again.
        Returns whether it was pending (False outside a group).
        """
        if self.group is None or not event.id:
            return False
        end = timed(self._telemetry, "ack")
        try:
            done = await self._client.xack(self._schema.log_of(event.key), self.group, event.id)
        finally:
            end()
        return bool(done)

    # -- closing ----------------------------------------------------------------------------------

    async def __aiter__(self) -> AsyncIterator[SessionLifecycleEvent]:
        while not self._closed:
            event = await self.get(timeout=1.0)
            if event is not None:
                yield event

    async def aclose(self) -> None:
        """Stop (what a group member holds unacknowledged goes to another after claim_after)."""
        self._closed = True
        if self._pubsub is not None:
            await self._pubsub.aclose()

    async def __aenter__(self) -> AsyncLogListener:
        return await self.start()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


def _block_ms(client: Any) -> int:
    """The longest XREAD BLOCK the client's socket timeout leaves room for (half of it)."""
    kwargs = getattr(getattr(client, "connection_pool", None), "connection_kwargs", {}) or {}
    timeout = kwargs.get("socket_timeout")
    return WAIT_MS if not timeout else max(1, min(WAIT_MS, int(timeout * 500)))


def _stream_entries(reply: Any) -> list[tuple[Any, Any]]:
    """The entries of an ``XREAD``/``XREADGROUP`` reply for one stream (a list of ``[stream,
    entries]``, or a mapping with RESP3).
    """
    if not reply:
        return []
    streams = list(reply.values()) if isinstance(reply, dict) else [s[1] for s in reply]
    return [(e[0], e[1]) for e in streams[0] if e[1] is not None]
