# Generated from redis_session/_async/listen.py by tools/unasync.py: edit that one.
"""Listeners of lifecycle events, written once for asyncio: the blocking ones
(``_sync/listen.py``) are generated from the asyncio ones (``_async/listen.py``) by
``tools/unasync.py``: edit those.

:class:`EventListener` follows pub/sub alone: at-most-once. :class:`LogListener`
reads the event log (``_core.eventlog``): from a cursor (``since``), or as a member of a consumer
group (``group``), so that a dropped connection, a restart or a slow consumer costs latency,
never an event. On a single server it waits on the log itself (``XREAD BLOCK``); on a cluster,
where the log is one stream per slot, pub/sub tells it which stream to read and it reads every
stream each ``poll`` seconds besides, so a lost message costs at most that long. Every
listener reaps the trees that expired (``expire`` events) each ``poll`` seconds. See
``docs/events.md``.
"""

from __future__ import annotations

import bisect
import contextlib
import logging
import os
import socket
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from types import TracebackType
from typing import Any

import redis

from .. import _clock, contracts, events
from .._core.core import Core
from .._core.follow import (
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
from .._core.requests import Op, ScriptCall
from .._transport.endpoint import retries_until
from .._transport.telemetry import Telemetry, timed
from ..errors import EventsLost, SessionError
from ..models import SessionLifecycleEvent
from ..status import Ctx, Status, check

log = logging.getLogger("redis_session")

Runner = Callable[[Op[Any]], Any]
Shards = Callable[[], Any]
"""What gives a live listener the shard channels of the slots that have sessions now."""
_TRANSPORT_ERRORS = (redis.ConnectionError, redis.TimeoutError, OSError)
_TOPOLOGY_ERRORS = (
    *_TRANSPORT_ERRORS,
    redis.exceptions.ClusterError,
    redis.exceptions.RedisClusterException,
    redis.exceptions.AskError,
    redis.exceptions.TryAgainError,
)
"""What a live listener on a cluster takes for its node gone or its slots moved: it subscribes
again (on another node, or on the slots' new owners)."""
BACKOFF_FIRST, BACKOFF_MAX = 0.05, 2.0
WAIT_MS = 1000
GIVEN_BACK_IDLE_MS = 30 * 86_400_000
"""The idle time an entry a closing member gives back is marked with (30 days: longer than any
member's ``claim_after``, so the next member's claim takes it)."""
"""The longest single wait on the server (XREAD BLOCK, a pub/sub read), so close() is seen."""


def read_group(call: ScriptCall) -> Op[Any]:
    """A group read as an operation of its own (its span's name)."""
    return (yield call)


class EventListener:
    """Lifecycle events from pub/sub, one by one: at-most-once.

    ``get(timeout)`` returns the next event or None after ``timeout`` seconds;
    ``for`` yields events until :meth:`close`. A dropped connection is resubscribed with
    backoff (counted in :attr:`reconnects`); events published while disconnected are missed:
    for events that no listener misses, ``listen(since=...)`` or ``listen(group=...)``.

    With sharded events on a cluster it listens on the shard channel of every slot that has
    sessions, and looks for new ones (``shards``) every ``poll`` seconds: the events of a slot
    whose first session was made since it last looked are missed (at most ``poll`` seconds'
    worth per new slot).

    On a cluster it follows the topology. Without sharded events it listens on one node (every
    node hears every ``PUBLISH``): when that node fails it subscribes on another at once, and
    every ``poll`` seconds it checks that the node is still a member (one removed with
    ``redis-cli --cluster del-node`` hears nothing more), so a removed node costs at most
    ``poll`` seconds of events. With sharded events each channel is subscribed on its slot's
    owner: a failed node blinds the listener to its own slots only, until they have a new
    owner (a failover) and the next look (every ``poll`` seconds) subscribes there; a channel
    found unsubscribed (its slot moved) is subscribed on the new owner at that look. Each move
    is a gap, counted in :attr:`reconnects` and logged once (WARNING).
    """

    def __init__(
        self,
        client: redis.Redis | redis.RedisCluster,
        channel: str,
        *,
        shard_channels: Iterable[str] | None = None,
        shards: Shards | None = None,
        poll: float = 1.0,
        types: frozenset[str] | None = None,
        owner: object = None,
    ) -> None:
        self._client: Any = client
        self._keeps = owner
        """What the listener keeps alive with its client: the store that made it, whose clients
        of an event loop are closed when it is dropped (the log listener keeps it through its
        runner)."""
        self.channel = channel
        """The events channel listened on (with sharded events: the first shard channel)."""
        self.shard_channels = None if shard_channels is None else sorted(shard_channels)
        """With sharded events: the shard channels listened on (``SSUBSCRIBE``)."""
        self.reconnects = 0
        """How many times a dropped connection was made again and resubscribed (by this
        listener or by redis-py underneath), or the subscription moved to another node of a
        cluster: each is a gap in which events were missed."""
        self.types = types
        self._closed = False
        self._pubsub: Any = None
        self._subscribed = False
        """Whether a subscription was ever made (``get`` makes the first one)."""
        self._shards = shards
        self._poll = poll
        self._next_look = _clock.monotonic() + poll
        self._cluster = isinstance(client, redis.RedisCluster)
        self._node: Any = None
        """Without sharded events on a cluster: the node subscribed on."""
        self._failed: set[str] = set()
        """Cluster nodes a subscription failed on: tried last."""
        self._missing: set[str] = set()
        """Sharded events on a cluster: channels whose node could not be reached."""
        self._delay = 0.0
        self._erring_since: float | None = None
        self._where: dict[str, str] = {}
        """Sharded events on a cluster: channel -> its node, at the last look."""

    def _look(self) -> None:
        """Every ``poll`` seconds on a cluster: check that the node is still a member (without
        sharded events); look for new slots, and subscribe the channels that are not subscribed
        on their slot's owner now (sharded events).
        """
        now = _clock.monotonic()
        if not self._cluster or now < self._next_look:
            return
        self._next_look = now + self._poll
        if self.shard_channels is None:
            self._check_member(self._node)
            return
        self._look_for_shards()
        try:
            owners = _Owners(self._client.cluster_slots())
        except _TOPOLOGY_ERRORS:
            owners = None  # the node asked is away: the client's slot map says
        held = self._held()
        if any(self._where.get(c, n) != n for c, n in held.items()):  # redis-py moved them
            self._gap("was moved to its slots' new owners (by redis-py)")
        strays = self._strays(owners, held)
        if strays:
            self._refresh()
            before = len(self._missing | strays)
            self._ssubscribe(self._pubsub, sorted(strays))
            self._watch(self._pubsub)
            if len(self._missing) < before:
                self._gap("subscribed again on the slots' owners (a node failed or slots moved)")
            held = self._held()
        self._where = held

    def _look_for_shards(self) -> None:
        """Subscribe to the shard channels of slots that got their first session since."""
        if self._shards is None or self.shard_channels is None:
            return
        try:
            found = self._shards()
        except (*_TOPOLOGY_ERRORS, SessionError):  # the index unreadable now: the next look
            return
        known = set(self.shard_channels)
        new = [c for c in found if c not in known]
        if new:
            self.shard_channels = sorted(known.union(new))
            self._ssubscribe(self._pubsub, new)
            self._watch(self._pubsub)

    def _held(self) -> dict[str, str]:
        """Shard channel -> the node it is subscribed on now."""
        held: dict[str, str] = {}
        for name, each in (getattr(self._pubsub, "node_pubsub_mapping", None) or {}).items():
            for channel in list(getattr(each, "shard_channels", None) or ()):
                held[text(channel)] = name
        return held

    def _strays(self, owners: _Owners | None, held: dict[str, str]) -> set[str]:
        """Shard channels not subscribed on the node that owns their slot now (as ``owners``,
        the cluster's answer, says; else the client's slot map): the slot moved, or its node
        failed and a replica took over, or the subscription failed.
        """
        strays = set(self._missing)
        for channel in self.shard_channels or ():
            try:
                owner = self._owner(channel, owners)
            except _TOPOLOGY_ERRORS:
                strays.add(channel)
                continue
            if held.get(channel) != owner:
                strays.add(channel)
        return strays

    def _owner(self, channel: str, owners: _Owners | None) -> str:
        if owners is not None:
            found = owners.of(self._client.keyslot(channel))
            if found is not None:
                return found
        return str(self._client.get_node_from_key(channel).name)

    def _refresh(self) -> None:
        """Read the cluster's slots again (once an error said they may have changed)."""
        with contextlib.suppress(*_TOPOLOGY_ERRORS):
            self._client.nodes_manager.initialize()

    def _check_member(self, node: Any) -> None:
        """Raise :class:`LeftCluster` when ``node`` no longer belongs to the cluster: it knows
        no other node (``redis-cli --cluster del-node`` resets the node it removes, which then
        hears no other node's ``PUBLISH``).
        """
        if node is None or len(self._client.get_nodes()) < 2:
            return
        info = self._client.execute_command("CLUSTER", "INFO", target_nodes=node)
        if _known_nodes(info) == 1:
            raise LeftCluster(f"{node.name} left the cluster")

    def _subscribe(self) -> None:
        if self.shard_channels is not None:
            pubsub = self._client.pubsub(ignore_subscribe_messages=True)
            self._missing = set(self.shard_channels)
            try:
                self._ssubscribe(pubsub, self.shard_channels)
            except BaseException:
                pubsub.close()
                raise
        elif self._cluster:
            pubsub = self._on_a_node()
        else:
            pubsub = self._client.pubsub(ignore_subscribe_messages=True)
            pubsub.subscribe(self.channel)
        self._pubsub = pubsub
        self._subscribed = True
        self._where = {}
        self._watch(pubsub)

    def _on_a_node(self) -> Any:
        """A pub/sub subscribed on a member node of the cluster (any one hears every
        ``PUBLISH``): the channel's slot owner first, the nodes that failed lately last.
        """
        nodes = list(self._client.get_nodes())
        try:
            first = self._client.get_node_from_key(self.channel).name
        except _TOPOLOGY_ERRORS:
            first = ""
        nodes.sort(key=lambda n: (n.name in self._failed, n.name != first))
        error: Exception = redis.ConnectionError("no node of the cluster to subscribe on")
        for node in nodes:
            pubsub = self._client.pubsub(node=node, ignore_subscribe_messages=True)
            try:
                pubsub.subscribe(self.channel)
                self._check_member(node)
            except _TOPOLOGY_ERRORS as exc:
                self._failed.add(node.name)
                _close_quietly(pubsub)
                error = exc
                continue
            self._failed.discard(node.name)
            self._node = node
            return pubsub
        raise error

    def _ssubscribe(self, pubsub: Any, channels: Iterable[str]) -> None:
        """Subscribe ``channels`` node by node on a cluster: those of a node that cannot be
        reached are left in ``_missing`` (subscribed at a later look).
        """
        channels = list(channels)
        if not self._cluster:
            pubsub.ssubscribe(*channels)
            self._missing.difference_update(channels)
            return
        groups: dict[str, list[str]] = {}
        for channel in channels:
            try:
                groups.setdefault(self._client.get_node_from_key(channel).name, []).append(channel)
            except _TOPOLOGY_ERRORS:
                self._missing.add(channel)
        for name, group in groups.items():
            try:
                pubsub.ssubscribe(*group)
            except _TOPOLOGY_ERRORS:
                self._missing.update(group)
                _drop_node(pubsub, name)
                continue
            self._missing.difference_update(group)

    def _watch(self, pubsub: Any) -> None:
        """Count the reconnections redis-py makes underneath (it resubscribes a dropped pub/sub
        connection on its own): each is a gap in which events were missed.
        """
        for connection in _connections(pubsub):
            connection.register_connect_callback(self._connected_again)

    def _unwatch(self, pubsub: Any) -> None:
        """Stop counting for ``pubsub``'s connections (they go back to their pools)."""
        for connection in _connections(pubsub):
            connection.deregister_connect_callback(self._connected_again)

    def _connected_again(self, connection: Any) -> None:
        if self._closed:
            return
        self.reconnects += 1
        log.warning(
            "redis_session: a live listener's connection was made again (by redis-py):"
            " events published meanwhile are missed"
        )

    def _gap(self, what: str) -> None:
        self.reconnects += 1
        log.warning("redis_session: a live listener %s: events meanwhile are missed", what)

    def start(self) -> EventListener:
        """Subscribe (``store.listen()`` does this before returning the listener)."""
        if self._pubsub is None:
            self._subscribe()
        return self

    def _drop(self) -> None:
        """Leave the current subscription (after an error on it)."""
        pubsub, self._pubsub = self._pubsub, None
        if pubsub is not None:
            self._unwatch(pubsub)
            _close_quietly(pubsub)

    def _reconnect(self, deadline: float | None) -> None:
        """Subscribe again after an error (on a cluster: on another node if need be, after
        reading the slots again), backing off while nothing answers, until ``deadline``.
        """
        self._drop()
        while not self._closed:
            if self._cluster:
                self._refresh()
            try:
                self._subscribe()
            except _TOPOLOGY_ERRORS:
                self._delay = min(max(self._delay * 2, BACKOFF_FIRST), BACKOFF_MAX)
                pause = self._delay
                if deadline is not None:
                    pause = min(pause, deadline - _clock.monotonic())
                    if pause <= 0:
                        return  # still a gap: the next get goes on trying
                _clock.sleep(pause)
                continue
            self._delay = 0.0
            where = "" if self._node is None else f" (on {self._node.name})"
            self._gap(f"subscribed again{where}")
            return

    def _message(self, timeout: float) -> Any:
        if self._pubsub is None:
            return None
        self._look()
        if self.shard_channels is None:
            return self._pubsub.get_message(timeout=timeout)
        if not self.shard_channels or len(self._missing) == len(self.shard_channels):
            _clock.sleep(min(timeout, self._poll))
            return None
        pubsub = self._pubsub
        return pubsub.get_sharded_message(ignore_subscribe_messages=True, timeout=timeout)

    def _one_node_failed(self) -> bool:
        """Sharded events on a cluster: whether a read error is left to the next look (now),
        which moves a failed node's channels once their slots have a new owner. redis-py
        raises it when no node answered in one pass, while the others still deliver: only
        errors lasting ``poll`` seconds make the listener subscribe everything again.
        """
        if self.shard_channels is None or not self._cluster:
            return False
        now = _clock.monotonic()
        if self._erring_since is None:
            self._erring_since = now
        self._next_look = min(self._next_look, now)
        return now - self._erring_since < self._poll

    def get(self, timeout: float | None = None) -> SessionLifecycleEvent | None:
        """The next event, or None when ``timeout`` seconds pass (or the listener is closed)."""
        if not self._subscribed:  # never subscribed yet; later, the loop subscribes again
            self.start()
        deadline = None if timeout is None else _clock.monotonic() + timeout
        with retries_until(deadline):  # a client from a URL retries no longer than that
            return self._next(deadline)

    def _next(self, deadline: float | None) -> SessionLifecycleEvent | None:
        while not self._closed:
            left = 1.0 if deadline is None else max(0.0, deadline - _clock.monotonic())
            counted = self.reconnects
            try:
                if self._pubsub is None:
                    self._reconnect(deadline)
                message = self._message(min(left, 1.0, self._poll))
                self._erring_since = None
            except _TOPOLOGY_ERRORS as exc:
                message = None
                if self.reconnects > counted and self._pubsub is not None:
                    pass  # redis-py made the connection again (and resubscribed) before raising
                elif self._one_node_failed():
                    _clock.sleep(min(BACKOFF_FIRST, left))
                else:
                    if self._node is not None and not isinstance(exc, LeftCluster):
                        self._failed.add(self._node.name)
                    self._reconnect(deadline)
            event = events.event_of(message)
            if event is not None and (self.types is None or event.type in self.types):
                return event
            if deadline is not None and _clock.monotonic() >= deadline:
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
        if self._pubsub is not None:
            self._pubsub.close()

    def __enter__(self) -> EventListener:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class _Owners:
    """Which node owns each slot, from a ``CLUSTER SLOTS`` reply as redis-py parses it
    (``{(first, last): {"primary": (host, port), ...}}``).
    """

    def __init__(self, reply: Any) -> None:
        ranges = []
        for (first, last), nodes in dict(reply).items():
            host, port = nodes["primary"][:2]
            ranges.append((int(first), int(last), f"{text(host)}:{int(port)}"))
        self._ranges = sorted(ranges)
        self._firsts = [r[0] for r in self._ranges]

    def of(self, slot: int) -> str | None:
        """The name (``host:port``) of the node that owns ``slot``; None: no node does."""
        at = bisect.bisect_right(self._firsts, slot) - 1
        if at >= 0 and self._ranges[at][1] >= slot:
            return self._ranges[at][2]
        return None


class LeftCluster(redis.ConnectionError):
    """The node a live listener is subscribed on no longer belongs to the cluster."""


def _known_nodes(info: Any) -> int:
    """``cluster_known_nodes`` of a ``CLUSTER INFO`` reply (parsed or not); 0 if absent."""
    if isinstance(info, dict) and "cluster_known_nodes" not in info and len(info) == 1:
        info = next(iter(info.values()))  # keyed by node
    if isinstance(info, dict):
        return int(info.get("cluster_known_nodes", 0))
    for line in text(info).splitlines():
        name, _, value = line.partition(":")
        if name == "cluster_known_nodes":
            return int(value)
    return 0


def _connections(pubsub: Any) -> list[Any]:
    """The connections of a pub/sub, its per-node ones (sharded, on a cluster) too."""
    nodes = getattr(pubsub, "node_pubsub_mapping", None) or {}
    found = (getattr(each, "connection", None) for each in (pubsub, *nodes.values()))
    return [c for c in found if c is not None]


def _drop_node(pubsub: Any, name: str) -> None:
    """Forget the per-node pub/sub redis-py made for node ``name`` when it is left with no
    subscription (its node could not be reached): a read would wait on it for nothing.
    """
    nodes: Any = getattr(pubsub, "node_pubsub_mapping", None) or {}
    stale = nodes.get(name)
    if stale is not None and not stale.subscribed:
        nodes.pop(name, None)
        _close_quietly(stale)


def _close_quietly(pubsub: Any) -> None:
    with contextlib.suppress(*_TOPOLOGY_ERRORS):
        pubsub.close()


class LogListener:
    """Lifecycle events from the event log, one by one: none is missed without
    :class:`~redis_session.errors.EventsLost` saying so.

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
        client: redis.Redis | redis.RedisCluster,
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

    def start(self) -> LogListener:
        """Take up ``since``, join the group, subscribe to wake-ups (``store.listen()`` does
        this before returning the listener).
        """
        if self._started:
            return self
        self._started = True
        if self._cluster:
            self._subscribe()  # before the first read: nothing falls between
        self._find_logs()
        if self.group is None:
            self._take_up()
        else:
            if self._cluster and self.since == "latest":  # for logs found later (new slots)
                self._later = self._cluster_now()
            for log_key in self._logs:
                self._join(log_key)
            self._joined_all = True
            self._own_pending()
        return self

    def _take_up(self) -> None:
        if self.since == "earliest":  # from the oldest entry each log holds, trimmed or not
            for log_key in self._logs:
                before = self._before_oldest(log_key)
                if before != START:
                    self._position.passed(log_key, before)
            return
        if self.since != "latest":
            self._position.resume(self.since)
            return
        base = self._cluster_now() if self._cluster else START
        pipe = self._client.pipeline(transaction=False)
        for log_key in self._logs:  # after the newest entry each log holds
            pipe.xrevrange(log_key, count=1)
        for log_key, last in zip(self._logs, pipe.execute(), strict=True):
            if last:
                self._position.passed(log_key, text(last[0][0]))
        self._position.advance(base)

    def _before_oldest(self, log_key: str) -> str:
        """The id of the entry before the oldest one ``log_key`` holds (``START``: none), so
        that reading from there is no gap even when the log was trimmed.
        """
        oldest = self._client.xrange(log_key, count=1)
        if not oldest:
            return START
        return text(oldest[0][1].get(b"p", START))

    def _cluster_now(self) -> str:
        """An id below which no log of the cluster gets an entry any more: the oldest clock
        of its primaries, less a margin.
        """
        clocks = []
        for node in self._client.get_primaries():
            seconds, micros = self._client.execute_command("TIME", target_nodes=node)
            clocks.append(int(seconds) * 1000 + int(micros) // 1000)
        return f"{max(0, min(clocks) - CLOCK_MARGIN_MS)}-0"

    def _find_logs(self) -> None:
        if not self._cluster:
            self._logs = [self._schema.log_of("")]
            return
        indexes = self._run(self._core.index.indexes())
        logs = sorted({self._schema.beside(i, "log") for i in indexes})
        new = [log_key for log_key in logs if log_key not in self._logs]
        self._logs = logs
        if new and self._sharded and self._pubsub is not None:
            self._pubsub.ssubscribe(*(self._beside(log_key, "events") for log_key in new))

    def _beside(self, log_key: str, kind: str) -> str:
        return f"{self._schema.prefix}{kind}{log_key[len(self._schema.prefix) + len('log') :]}"

    def _join(self, log_key: str) -> None:
        """Create the group on ``log_key`` as ``since`` says (an existing group is kept)."""
        if log_key in self._grouped:
            return
        if self.since == "earliest":
            start = self._before_oldest(log_key)
        elif self.since == "latest":  # a log found after the start: from the start's time
            start = self._later if self._joined_all else "$"
        else:
            given = Position(self._schema)
            given.resume(self.since)
            start = given.of(log_key)
        try:
            self._client.xgroup_create(log_key, self.group, id=start, mkstream=True)
        except redis.ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise
        self._grouped.add(log_key)

    def _subscribe(self) -> None:
        pubsub = self._client.pubsub(ignore_subscribe_messages=True)
        if not self._sharded:
            pubsub.subscribe(self._schema.events_channel)
        else:
            indexes = self._run(self._core.index.indexes())
            channels = [self._schema.beside(i, "events") for i in indexes]
            if channels:
                pubsub.ssubscribe(*channels)
        self._pubsub = pubsub

    def _resubscribe(self) -> None:
        delay = BACKOFF_FIRST
        while not self._closed:
            try:
                self._pubsub.close()
                self._subscribe()
                self.reconnects += 1
                self._next_poll = 0.0  # what was published meanwhile: every log, now
                return
            except _TRANSPORT_ERRORS:
                _clock.sleep(delay)
                delay = min(delay * 2, BACKOFF_MAX)

    # -- reading ----------------------------------------------------------------------------------

    def get(self, timeout: float | None = None) -> SessionLifecycleEvent | None:
        """The next event, or None when ``timeout`` seconds pass (or the listener is closed);
        ``EventsLost`` once for a gap before it.
        """
        self.start()
        deadline = None if timeout is None else _clock.monotonic() + timeout
        with retries_until(deadline):  # a client from a URL retries no longer than that
            return self._next(deadline)

    def _next(self, deadline: float | None) -> SessionLifecycleEvent | None:
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
                    self._client.xack(log_key, self.group, entry_id)
                continue
            now = _clock.monotonic()
            try:
                if now >= self._next_poll:
                    self._next_poll = now + self.poll
                    self._poll()
                    continue
                if deadline is not None and now >= deadline:
                    return None
                left = (
                    self._next_poll - now
                    if deadline is None
                    else min(self._next_poll, deadline) - now
                )
                self._wait(min(left, WAIT_MS / 1000))
            except _TRANSPORT_ERRORS as exc:  # a restart, a failover: wait it out, lose nothing
                self._wait_out(exc, deadline)
                if deadline is not None and _clock.monotonic() >= deadline:
                    return None
                continue
            self._outage_delay = 0.0
        return None

    def _wait_out(self, exc: BaseException, deadline: float | None) -> None:
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
            pause = max(0.0, min(pause, deadline - _clock.monotonic()))
        _clock.sleep(pause)
        self._next_poll = 0.0  # read every log again once it answers

    def _wait(self, seconds: float) -> None:
        """Wait up to ``seconds`` for new entries, reading the logs that got some."""
        if not self._cluster:  # one log: block on it
            log_key = self._logs[0]
            after = self._position.of(log_key) if self.group is None else self._seen or "$"
            block = min(int(seconds * 1000), self._block_ms)
            got = self._client.xread({log_key: after}, count=1, block=max(1, block))
            if got:
                self._read([log_key])
            return
        dirty: set[str] = set()
        try:
            message = self._message(seconds)
            while message is not None:
                event = events.event_of(message)
                if event is not None:
                    dirty.add(self._schema.log_of(event.key))
                message = self._message(0)
        except _TRANSPORT_ERRORS:
            self._resubscribe()
            return
        if dirty - set(self._logs):
            self._find_logs()
        if dirty:
            self._read(sorted(dirty))

    def _message(self, seconds: float) -> Any:
        if not self._sharded:
            return self._pubsub.get_message(timeout=seconds)
        pubsub = self._pubsub
        return pubsub.get_sharded_message(ignore_subscribe_messages=True, timeout=seconds)

    def _poll(self) -> None:
        """Read every log to its end (moving a cluster cursor's base), take over what other
        members held too long, and reap expired trees.
        """
        if self._cluster:
            self._find_logs()
        base = self._cluster_now() if self._cluster and self.group is None else None
        complete = self._read(self._logs)
        if self._telemetry is not None and self._telemetry.active():
            self._telemetry.metrics.behind.record(len(self._buffer))
        if base is not None and complete:
            if self._buffer:
                self._base_due = base  # once what was read up to it is passed on
            else:
                self._position.advance(base)
        if self.group is not None and _clock.monotonic() >= self._next_claim:
            self._next_claim = _clock.monotonic() + max(self.claim_after / 2, 0.05)
            self._claim()
        self._reap()

    def _read(self, logs: list[str]) -> bool:
        """Read ``logs`` after this listener's place into the buffer; whether each was read to
        its end. A log with entries still buffered is read again once they are passed on.
        """
        logs = [log_key for log_key in logs if not any(b[0] == log_key for b in self._buffer)]
        if self.group is not None:
            complete = True
            for log_key in logs:
                complete &= self._read_group(log_key)
            return complete
        if not logs:
            return False
        pipe = self._client.pipeline(transaction=False)
        for log_key in logs:
            pipe.xrange(log_key, min=f"({self._position.of(log_key)}", count=READ_COUNT)
        replies = pipe.execute()
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

    def _read_group(self, log_key: str) -> bool:
        self._join(log_key)
        call = contracts.read_group(
            log=log_key, group=str(self.group), consumer=self.consumer, count=READ_COUNT
        )
        reply = self._run(read_group(call))
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

    def _own_pending(self) -> None:
        """What this member was given before and did not acknowledge (it started again under
        its name): first, again.
        """
        for log_key in self._logs:
            got = self._client.xreadgroup(
                self.group, self.consumer, {log_key: START}, count=READ_COUNT
            )
            entries = _stream_entries(got)
            counts = self._deliveries(log_key, entries)
            for entry_id, event in events_of(entries, counts):
                self._buffer.append((log_key, entry_id, event))

    def _deliveries(self, log_key: str, entries: list[Any]) -> dict[str, int]:
        if not entries:
            return {}
        pending = self._client.xpending_range(
            log_key, self.group, min=entries[0][0], max=entries[-1][0], count=len(entries),
            consumername=self.consumer,
        )  # fmt: skip
        return {text(p["message_id"]): int(p["times_delivered"]) for p in pending}

    def _claim(self) -> None:
        """Take over entries other members held unacknowledged longer than ``claim_after``."""
        idle = int(self.claim_after * 1000)
        for log_key in self._logs:
            got = self._client.xautoclaim(
                log_key, self.group, self.consumer, idle, START, count=READ_COUNT
            )
            entries = [(e[0], e[1]) for e in got[1] if e is not None and e[1] is not None]
            counts = self._deliveries(log_key, entries)
            for entry_id, event in events_of(entries, counts):
                self._buffer.append((log_key, entry_id, event))
            gone = [text(i) for i in (got[2] if len(got) > 2 else ())]
            if gone:  # given out, never acknowledged, then trimmed: the group lost them
                self._client.xack(log_key, self.group, *gone)
                raise EventsLost(log_key, gone[0], "", f"{len(gone)} taken, never acknowledged")

    def _reap(self) -> None:
        """Log the ``expire`` events of the trees whose deadline passed (one read for every
        index shard, then a script for each shard that has some).
        """
        reaper = self._core.events
        if not self._core.options.ttl_ms:
            return
        indexes = self._run(self._core.index.indexes())
        pipe = self._client.pipeline(transaction=False)
        for index in indexes:
            pipe.execute_command(*reaper.due_query(index))
        due = pipe.execute(raise_on_error=False)
        for index, members in zip(indexes, due, strict=True):
            if isinstance(members, list) and members:
                self._run(reaper.reap_members(index, members))

    def _measure(self, event: SessionLifecycleEvent) -> None:
        """The listener's lag and re-deliveries, as metrics."""
        if self._telemetry is None:
            return
        metrics, kind = self._telemetry.metrics, {"event.type": str(event.type)}
        if event.timestamp is not None:
            metrics.lag.record(max(0.0, _clock.time() - event.timestamp.timestamp()), kind)
        if event.deliveries > 1:
            metrics.redeliveries.add(1, kind)

    # -- groups -----------------------------------------------------------------------------------

    def ack(self, event: SessionLifecycleEvent) -> bool:
        """Acknowledge ``event`` in this listener's group: done, no member gets it again.
        Returns whether it was pending (False outside a group).
        """
        if self.group is None or not event.id:
            return False
        end = timed(self._telemetry, "ack")
        try:
            done = self._client.xack(self._schema.log_of(event.key), self.group, event.id)
        finally:
            end()
        return bool(done)

    # -- closing ----------------------------------------------------------------------------------

    def __iter__(self) -> Iterator[SessionLifecycleEvent]:
        while not self._closed:
            event = self.get(timeout=1.0)
            if event is not None:
                yield event

    def close(self) -> None:
        """Stop. In a group, what this member read ahead and did not hand out is given back
        at once (another member takes it on its next claim, its delivery count as it was);
        what it handed out and did not acknowledge goes to another after ``claim_after``.
        """
        self._closed = True
        if self.group is not None and self._buffer:
            self._give_back()
        if self._pubsub is not None:
            self._pubsub.close()

    def _give_back(self) -> None:
        """Mark the entries read ahead (in the buffer) as idle for long, so that the next
        ``XAUTOCLAIM`` of any member takes them, and their delivery count as before this
        member's read. Best effort: an entry not given back goes after ``claim_after``.
        """
        held: dict[tuple[str, int], list[str]] = {}
        while self._buffer:
            log_key, entry_id, event = self._buffer.popleft()
            before = (event.deliveries if event is not None else 1) - 1
            held.setdefault((log_key, max(before, 0)), []).append(entry_id)
        for (log_key, before), ids in held.items():
            with contextlib.suppress(*_TRANSPORT_ERRORS, redis.ResponseError):
                self._client.xclaim(
                    log_key, self.group, self.consumer, 0, ids,
                    idle=GIVEN_BACK_IDLE_MS, retrycount=before, justid=True,
                )  # fmt: skip

    def __enter__(self) -> LogListener:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


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
