# Generated from redis_session/_async/store.py by tools/unasync.py: edit that one.
"""``RedisStore``: the session store over ``redis.Redis``."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import timedelta
from types import TracebackType
from typing import Any, TypeVar, overload

import redis

from .. import _clock, events
from .._core import follow as _follow
from .._core.args import duration_ms, non_negative_int, text
from .._core.conversation import FAILED_TURN
from .._core.core import Compute, Core, Emit, Op, RekeyProgress, RekeyReport, Request, ScriptCall
from .._core.eventlog import entry_event
from .._core.follow import check_types
from .._core.sessions import Fence
from .._transport import url as _url
from .._transport.telemetry import Telemetry
from ..context import with_turn_id
from ..errors import DurabilityNotReached, InvalidArgument, SlotMigrating
from ..events import LifecycleHook
from ..extension import Extension
from ..models import (
    ChildSession,
    ChildSessionConfig,
    Message,
    PendingEvent,
    Session,
    SessionLifecycleEvent,
    SessionSummary,
    Usage,
)
from ..options import StoreOptions, split_store_options
from ..protocols import ChildSessionStore, Store, docs_from
from ..scripts import SCRIPT_NAMES, script_source, with_prelude
from .listen import EventListener, LogListener

T = TypeVar("T")


@docs_from(Store, ChildSessionStore)
class RedisStore:
    """Sessions in Redis shared by many workers; one Lua script per write.

    ``client`` is a ``redis.Redis`` created with ``decode_responses=False``; the store
    wraps it and exposes it as :attr:`client`. ``lifecycle_hook`` is called with each
    lifecycle event after the change (a plain function; the asyncio store also awaits a
    coroutine function, which the blocking one logs and never runs). The options are
    :class:`~redis_session.StoreOptions`, given as keywords (``prefix`` for every key name,
    ``ttl`` in seconds or a timedelta, refreshed on every write, ``max_history_turns``, ...)
    or as ``options=StoreOptions(...)`` (keywords given too override its fields); an unknown
    keyword raises ``TypeError``.

    Durability: with ``wait_replicas=N`` every write is followed, on the same connection, by
    ``WAIT N wait_timeout``; fewer acknowledgements raise ``DurabilityNotReached`` (the write
    is applied on the primary). Such writes are retried through connection errors, failovers
    and slot moves for up to ``failover_window`` (they are idempotent).

    A message longer than ``max_message_bytes`` as stored (default 4 MiB; 0 = no limit) is
    refused with ``InvalidArgument`` before anything is sent.

    Encryption at rest: with ``passphrase``, message content, tool calls, metadata values,
    child histories, summaries and the scalar fields are sealed with AES-256-GCM, each session
    under a data key of its own, wrapped under the prefix's master key, which a scrypt key
    (``kdf_work``: log2 of scrypt's n, default 15) of the passphrase wraps. The first operation
    opens the keyring under the prefix (creating it on first use) and raises
    ``WrongPassphrase`` before anything else when the passphrase does not fit; scrypt runs once
    per store (the asyncio store runs it in a worker thread) and callers arriving meanwhile
    wait for it. Reading sealed data without a passphrase raises ``PassphraseRequired``;
    anything a sealed session may not hold (cleartext, a value moved from elsewhere, an older
    metadata value than one read) raises ``TamperDetected`` (``DecryptionFailed`` when a
    ciphertext fails authentication); a cleartext session raises ``SessionNotEncrypted``.
    See :meth:`rekey` for rotation.
    """

    def __init__(
        self,
        client: redis.Redis | redis.RedisCluster,
        *,
        lifecycle_hook: LifecycleHook | None = None,
        options: StoreOptions | None = None,
        **kwargs: Any,
    ) -> None:
        chosen = StoreOptions.of(options, kwargs)
        self._core = Core(chosen, cluster=_url.check_client(client))
        self._unlocking = threading.Lock()  # one scrypt per store, however many callers wait
        self.set_lifecycle_hook(lifecycle_hook)
        self._client = client
        self._telemetry = Telemetry.of(chosen.trace_session_keys, client, self._core.reader.cache)
        self._scripts = {n: client.register_script(script_source(n)) for n in SCRIPT_NAMES}

    @classmethod
    def from_url(cls, url: str, *, cluster: bool = False, **given: Any) -> RedisStore:
        """A store over a new client for ``url``: ``redis://``, ``rediss://``, ``unix://``,
        ``memory://`` (in-process, ``memory://NAME`` shared by name), ``redis+sentinel://``,
        and a Redis Cluster with ``redis+cluster://`` / ``rediss+cluster://`` or
        ``cluster=True``. Keywords that are this constructor's (the store's options,
        ``lifecycle_hook``, ``options``) go to the store, all others to redis-py's client, as
        its own ``from_url`` takes them (``socket_timeout``, ``max_connections``,
        ``password``...); a keyword that is neither raises ``UnknownOption`` (an
        ``InvalidArgument`` and a ``TypeError``) at once, on every scheme. The client has a
        bounded pool and socket timeouts by default (see ``redis_session._transport.url``).
        """
        store_options, client_options = split_store_options(given)
        _url.check_client_options(url, cluster, client_options)
        store = cls(_url.sync_client(url, cluster=cluster, **client_options), **store_options)
        return store

    @property
    def client(self) -> redis.Redis | redis.RedisCluster:
        """The wrapped Redis client."""
        return self._client

    @property
    def options(self) -> StoreOptions:
        """The store's options (validated, immutable)."""
        return self._core.options

    @property
    def prefix(self) -> str:
        """The prefix of every key name this store uses."""
        return self._core.options.prefix

    @property
    def ttl(self) -> timedelta | None:
        """The sliding TTL of sessions, or None."""
        return self._core.options.ttl_delta

    @property
    def max_history_turns(self) -> int:
        """How many messages a session keeps (the newest); 0 = all."""
        return self._core.options.max_history_turns

    @property
    def dedup_window(self) -> int:
        """How many of a session's newest message ids (and call tokens) its id window holds at
        least: a retried or repeated append of one of them stores nothing. It is
        ``max(dedup_window, max_history_turns)``.
        """
        return self._core.options.window

    @property
    def read_cache_bytes(self) -> int:
        """The bound of the store's read cache (bytes of messages as stored; 0 = off): a read
        of a session the store read before sends and decodes only the messages added since.
        """
        return self._core.reader.cache.max_bytes

    @property
    def keep_merged_children(self) -> int:
        """How many merged children per session stay whole (record and history)."""
        return self._core.options.keep_merged_children

    @property
    def encrypted(self) -> bool:
        """Whether the store seals what it writes (it was given a passphrase)."""
        return self._core.keyring.passphrase is not None

    @property
    def events_channel(self) -> str:
        """The pub/sub channel lifecycle events are published on."""
        return self._core.schema.events_channel

    @property
    def extension(self) -> Extension:
        """What integrations may use of this store besides its methods (see
        :mod:`redis_session.extension`).
        """
        return Extension(self._core)

    def register_script(self, name: str, source: str) -> None:
        """Register Lua script ``source`` under ``name`` for the requests of :meth:`run` (it is
        sent with the parts of ``lua/_prelude.lua`` it uses, by EVALSHA, reloaded on
        NOSCRIPT). Registering a name again with the same source changes nothing; a store's
        own script names and another source under a taken name raise ``InvalidArgument``.
        """
        full = with_prelude(source)
        known = self._scripts.get(name)
        if known is not None and known.script == full:
            return
        if known is not None or name in SCRIPT_NAMES:
            raise InvalidArgument("name", f"script {name!r} is registered already")
        self._scripts[name] = self._client.register_script(full)

    def run(self, op: Op[T]) -> T:
        """Run operation ``op``, a generator of requests (see :mod:`redis_session.extension`),
        as this store runs its own: on its client, opening its keyring first if it has one.
        """
        return self._run(op)

    def set_lifecycle_hook(self, hook: LifecycleHook | None) -> None:
        """Replace the in-process lifecycle hook (None: no hook)."""
        if hook is not None and not callable(hook):
            raise ValueError("lifecycle_hook: must be callable or None")
        self._hook = hook

    @overload
    def listen(
        self, since: None = None, *, group: None = None, types: Iterable[str] | None = None
    ) -> EventListener: ...

    @overload
    def listen(
        self,
        since: str,
        *,
        group: str | None = None,
        consumer: str | None = None,
        claim_after: float = 30.0,
        types: Iterable[str] | None = None,
        poll: float = 1.0,
    ) -> LogListener: ...

    @overload
    def listen(
        self,
        since: str | None = None,
        *,
        group: str,
        consumer: str | None = None,
        claim_after: float = 30.0,
        types: Iterable[str] | None = None,
        poll: float = 1.0,
    ) -> LogListener: ...

    def listen(
        self,
        since: str | None = None,
        *,
        group: str | None = None,
        consumer: str | None = None,
        claim_after: float = 30.0,
        types: Iterable[str] | None = None,
        poll: float = 1.0,
    ) -> EventListener | LogListener:
        """A listener of this store's lifecycle events, ready when it is returned. Iterate it
        (``for``) or ``listener.get(timeout)``; close it with ``close()``, or use
        it as a context manager (``with store.listen() as listener``).

        - ``listen()``: live, from pub/sub: at-most-once (a dropped connection, a restart or a
          slow consumer cut off by Redis loses what was published meanwhile).
        - ``listen(since="earliest" | "latest" | cursor)``: the event log from there, then live;
          ``listener.cursor`` after an event resumes right after it. ``EventsLost`` when the
          log no longer holds what follows a cursor (trimmed past it: ``event_log_max``).
        - ``listen(group=G, consumer=C, claim_after=s)``: a member of consumer group ``G``
          (created on first use, from ``since``, default ``"latest"``): each event goes to one
          member, acknowledged with ``listener.ack(event)``; one not acknowledged in
          ``claim_after`` seconds goes to another member (``event.deliveries`` counts).

        ``types``: only events of these types (in a group, the others are acknowledged).
        ``poll``: how often a log listener reads every log and reaps expired trees (their
        ``expire`` events) besides waiting for news. See docs/events.md.
        """
        return self._listen(since, group, consumer, claim_after, types, poll)

    def _listen(
        self,
        since: str | None,
        group: str | None,
        consumer: str | None,
        claim_after: float,
        types: Iterable[str] | None,
        poll: float,
    ) -> EventListener | LogListener:
        kinds = check_types(types)
        if since is None and group is None:
            if self._core.options.sharded_events:
                cluster = self._core.schema.cluster  # a channel per slot, new slots looked for
                channels = self._shard_channels() if cluster else [self.events_channel]
                return EventListener(
                    self._client, self.events_channel, shard_channels=channels,
                    shards=self._shard_channels if cluster else None,
                    poll=duration_ms(poll, "poll") / 1000, types=kinds, owner=self,
                ).start()  # fmt: skip
            client = self._client
            listening = EventListener(client, self.events_channel, types=kinds, owner=self)
            return listening.start()
        if group is not None:
            text(group, "group")
        if not self._core.events.log_max:
            argument = "since" if group is None else "group"
            raise InvalidArgument(
                argument, "this store keeps no event log (event_log_max=0 or publish_events=False)"
            )
        claim_ms, poll_ms = duration_ms(claim_after, "claim_after"), duration_ms(poll, "poll")
        listener = LogListener(
            self._client,
            self._core,
            self._run,
            since=since or "latest",
            group=group,
            consumer=consumer,
            claim_after=claim_ms / 1000,
            types=kinds,
            poll=poll_ms / 1000,
            telemetry=self._telemetry,
        )
        return listener.start()

    def _execute(self, request: Request) -> Any:
        if isinstance(request, ScriptCall):
            if request.write and self._core.options.wait_replicas:
                return self._durable(request)
            replies = self._script(self._client, request, *request.after)
            if request.after:
                return replies
            if isinstance(replies[0], Exception):
                raise replies[0]
            return replies[0]
        if isinstance(request, Emit):
            pending = events.call_hook(self._hook, request.event)
            return events.finish_hook_sync(pending, request.event)
        if isinstance(request, Compute):
            return request.fn()
        if request.direct:
            return [self._direct(command) for command in request.commands]
        replies = self._sent(self._client, request.commands, direct=request.read_only)
        if not request.errors_as_values:
            for reply in replies:
                if isinstance(reply, Exception):
                    raise reply
        return replies

    def _script(self, client: Any, request: ScriptCall, *after: tuple[Any, ...]) -> list[Any]:
        """The replies of ``request``'s script (``EVALSHA``) and of the commands ``after`` it,
        sent together on ``client``, each error as its exception in its place. The one place a
        script is loaded: on ``NOSCRIPT`` (a restarted server, a failover, ``SCRIPT FLUSH``)
        it is loaded and everything sent again, once. Every script is safe to send twice
        (idempotent by ids and tokens), so it goes out directly (:meth:`_sent`).
        """
        script = self._scripts[request.name]
        run = ("EVALSHA", script.sha, len(request.keys), *request.keys, *request.args)
        commands = (run, *after)
        replies = self._sent(client, commands, direct=True)
        if isinstance(replies[0], redis.exceptions.NoScriptError):
            client.script_load(script.script)
            replies = self._sent(client, commands, direct=True)
        return replies

    def _sent(self, client: Any, commands: Sequence[tuple[Any, ...]], *, direct: bool) -> list[Any]:
        """The replies of ``commands``, sent together on ``client`` (never a transaction), each
        error reply as its exception in its place. ``direct`` (commands safe to send twice):
        on a pooled connection of a client the store made, without redis-py's per-command
        Python (``sync_replies``, the append hot path); otherwise, and for a client of
        another kind, through redis-py (``execute_command`` for one, a pipeline for more).
        """
        if direct:
            replies = _url.sync_replies(client, commands)
            if replies is not None:
                return replies
        if len(commands) == 1:
            try:
                return [client.execute_command(*commands[0])]
            except redis.ResponseError as exc:
                return [exc]
        pipe = client.pipeline(transaction=False)
        for command in commands:
            pipe.execute_command(*command)
        got: list[Any] = pipe.execute(raise_on_error=False)
        return got

    def _direct(self, command: tuple[Any, ...]) -> Any:
        """``command``'s reply from the node serving its key (see ``Commands.direct``), or
        its error: an unreachable node's at once, without the cluster client's retries.
        """
        try:
            node = self._writer_for(command[1])
            return node.execute_command(*command)
        except (redis.exceptions.MovedError, redis.exceptions.AskError):
            pass  # the slot moved: the cluster client follows it and refreshes its map
        except (redis.ConnectionError, redis.TimeoutError, redis.ResponseError) as exc:
            return exc
        client: Any = self._client
        try:
            return client.execute_command(*command)
        except redis.RedisError as exc:
            return exc

    def _writer_for(self, key: str | bytes) -> Any:
        """The client whose connection runs a write to ``key``: on a cluster, the own client of
        the node serving its slot, so that WAIT asks about that very write.
        """
        client: Any = self._client
        if not self._core.schema.cluster:
            return client
        return _url.sync_node_client(client.get_node_from_key(key))

    def _durable(self, request: ScriptCall) -> Any:
        """Run a write script and WAIT on the same connection, riding through a failover.

        Every write script is idempotent (ids, tokens), so sending it again after a lost
        reply, a failover or a slot move is safe.
        """
        core = self._core.options
        deadline = _clock.monotonic() + core.failover_window_ms / 1000
        delay = 0.05
        while True:
            writer = self._writer_for(request.keys[0])
            wait = ("WAIT", core.wait_replicas, core.wait_timeout_ms)
            try:
                reply, acked = self._script(writer, request, wait)
            except _url.FAILOVER_ERRORS as exc:
                reply, acked = exc, 0
            error = next((r for r in (reply, acked) if isinstance(r, Exception)), None)
            if error is None:
                if acked < core.wait_replicas:
                    raise DurabilityNotReached(
                        str(request.keys[0]), acked, core.wait_replicas, core.wait_timeout_ms
                    )
                return reply
            if not _url.is_failover_error(error) or _clock.monotonic() > deadline:
                raise error
            _clock.sleep(delay)
            delay = min(delay * 2, 1.0)
            _url.sync_refresh(self._client)

    def _run(self, op: Op[T]) -> T:
        telemetry = self._telemetry
        if telemetry is None or not telemetry.active():  # not installed, or no SDK configured
            return self._run_op(op)
        call = telemetry.start(getattr(op, "__name__", "operation"), op)
        try:
            result: T = self._run_op(call.watch(op) if call.recording else op)
        except BaseException as exc:
            call.end(error=exc)
            raise
        call.end(result)
        return result

    def _run_op(self, op: Op[T]) -> T:
        keyring = self._core.keyring
        if keyring.locked:
            with self._unlocking:
                if keyring.locked:  # not opened meanwhile by the caller we waited for
                    self._drive(keyring.unlock())
        return self._drive(op)

    def _drive(self, op: Op[T]) -> T:
        reply: Any = None
        try:
            while True:
                request = op.send(reply)
                try:
                    reply = self._execute(request)
                except _url.MIGRATING_ERRORS as exc:
                    if not _url.is_migrating(exc):
                        raise
                    reply = self._wait_out_migration(request)
                else:  # errors as values (a pipeline's) can say so too, on a cluster only
                    if self._core.schema.cluster and _url.migrating_reply(reply) is not None:
                        reply = self._wait_out_migration(request)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]

    def _wait_out_migration(self, request: Request) -> Any:
        """Send ``request`` again, with backoff, while its slot is being moved between nodes
        (each request is safe to send again: reads, and writes made idempotent by ids and
        tokens), for up to ``failover_window``; then :class:`SlotMigrating`.
        """
        started = _clock.monotonic()
        deadline = started + self._core.options.failover_window_ms / 1000
        delay = 0.02
        while True:
            now = _clock.monotonic()
            if now >= deadline:
                raise SlotMigrating(_url.request_key(request), now - started)
            _clock.sleep(min(delay, deadline - now))
            delay = min(delay * 2, 0.5)
            try:
                reply = self._execute(request)
            except _url.MIGRATING_ERRORS as exc:
                if not _url.is_migrating(exc):
                    raise
                continue
            if _url.migrating_reply(reply) is None:
                return reply

    def create(self, session: Session, *, idempotency_key: str | None = None) -> Session:
        return self._run(self._core.sessions.create(session, idempotency_key))

    def get(self, key: str, last: int | None = None) -> Session:
        return self._run(self._core.sessions.get(key, last))

    def get_history(
        self, key: str, last: int | None = None, *, max_tokens: int | None = None
    ) -> list[Message]:
        return self._run(self._core.sessions.get_history(key, last, max_tokens))

    def update(self, session: Session) -> None:
        return self._run(self._core.sessions.update(session))

    def update_metadata(
        self, key: str, set: Mapping[str, str] | None = None, delete: Iterable[str] = ()
    ) -> None:
        return self._run(self._core.sessions.update_metadata(key, set, delete))

    def delete(self, key: str, *, idempotency_key: str | None = None) -> bool:
        return self._run(self._core.sessions.delete(key, idempotency_key))

    def end(self, key: str) -> bool:
        return self._run(self._core.sessions.end(key))

    def append_message(
        self,
        key: str,
        msg: Message,
        *,
        expect_last_id: str | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> bool:
        op = self._core.sessions.append_message(
            key, msg, expect_last_id=expect_last_id, metadata=metadata,
            fence=self._core.turns.held(key),
        )  # fmt: skip
        return self._run(op)

    def append_messages(
        self,
        key: str,
        messages: Sequence[Message],
        *,
        expect_last_id: str | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> int:
        op = self._core.sessions.append_messages(
            key, messages, expect_last_id=expect_last_id, metadata=metadata,
            fence=self._core.turns.held(key),
        )  # fmt: skip
        return self._run(op)

    @contextlib.contextmanager
    def turn(self, key: str, *, lease: float = 30.0, wait: float = 0.0) -> Iterator[Turn]:
        """Hold session ``key``'s turn for the block (``with store.turn(key) as turn``):
        one worker at a time writes through it, with a fencing token.

        The claim is one script: it takes the turn when nobody holds it, for ``lease``
        seconds, with a token that grows with every claim of the session. When another worker
        holds it, the claim waits up to ``wait`` seconds, woken as soon as the holder releases
        it (not by a poll; each wait is bounded and never past the holder's lease), then
        raises ``TurnBusy``. Writes made through the :class:`Turn` carry its token and are
        refused inside their script with ``TurnLost`` (a ``StaleExpectation``; nothing is
        written) once the lease ran out or a later claim exists: a worker paused past its lease
        cannot write after the next one took over (``turn.renew`` extends the lease). Inside
        the block, this store's own ``append_message``, ``append_messages`` and
        ``compact_messages`` of ``key`` go through the turn too (in the same thread or task, and
        the tasks it starts): ``store.`` written out of habit is fenced as ``turn.`` is. Writes
        made without a turn, by other stores, are not affected. Inside the block
        ``with_turn_id`` is the turn's id. The turn is released on exit (a released turn wakes
        one waiting claimer); it lives in the session's slot, expires with its lease and goes
        with the session.

        Raises:
            TurnBusy: the turn was held for all of ``wait`` seconds.
            SessionNotFound, SessionExpired: no live session under ``key``.
            InvalidArgument: ``lease`` <= 0 or ``wait`` < 0.
        """
        started = time.perf_counter()
        try:
            fence = self._run(self._core.turns.claim(key, lease, wait))
        finally:
            if self._telemetry is not None:
                self._telemetry.metrics.turn_wait.record(time.perf_counter() - started)
        held = Turn(self, key, fence, lease)
        try:
            with with_turn_id(held.id), self._core.turns.holding(key, fence):
                yield held
        except BaseException:
            with contextlib.suppress(Exception):  # the block's error, not the release's
                self._run(self._core.turns.release(key, fence))
            raise
        self._run(self._core.turns.release(key, fence))

    def pop_message(self, key: str, *, expect_id: str | None = None) -> Message | None:
        """Remove and return the newest message of session ``key`` in one atomic script (None
        when the history is empty), refreshing the TTL and ``updated_at``.

        With ``expect_id``, only if the newest message has that id, else ``StaleExpectation``
        (index -1). A call that redis-py retries after a lost reply returns the same message
        and pops nothing more (a per-call token). The popped id stays recorded, so appending
        that message again stores nothing. ``SessionNotFound`` / ``SessionExpired``.
        """
        return self._run(self._core.sessions.pop_message(key, expect_id=expect_id))

    def annotate_timeout(self, key: str, partial: str, *, close_tool_calls: bool = False) -> bool:
        """Append the assistant's timeout notice to session ``key`` (``partial``: what the
        model said before it was cut off, checked to be a str; the notice is what is stored).

        With ``close_tool_calls``, as :meth:`cleanup_failed_turn` in the same step: the live
        children are discarded and one ``tool`` message answering every open tool call goes
        in the same append as the notice (which comes after it). Returns True when the notice
        was stored.
        """
        if close_tool_calls:
            op = self._core.conversation.annotated(key, partial, self._core.turns.held(key))
            return self._run(op)
        return self._run(self._core.sessions.annotate_timeout(key, partial))

    def branch(
        self,
        key: str,
        new_key: str,
        *,
        at: str | None = None,
        metadata: Mapping[str, str] | None = None,
        idempotency_key: str | None = None,
    ) -> Session:
        """A new, independent session ``new_key`` holding session ``key``'s fields, metadata
        (``metadata``'s entries override) and history up to and including message ``at``
        (``None``: all of it), message ids kept, with its own TTL; its ``branch_of`` and
        ``branch_at`` say where it came from. Children are not copied.

        Atomic at any size: ``key`` is read in one snapshot and ``new_key`` is created as
        ``create`` creates a session, by one script, or, for a history over 2,000 messages or
        1 MiB, staged in steps of that size and published by one script: a crash midway leaves
        nothing visible under ``new_key``, and a retry with the same ``idempotency_key``
        completes it (and, once done, answers the branch as stored). On a cluster the two
        keys may lie in different slots. A sealed session's messages are sealed again under
        ``new_key``'s own key (a sealed message is bound to its session). Logs a ``branch``
        event (``branch_of``, ``message_id``: the last message taken) instead of ``create``.

        Raises:
            SessionNotFound, SessionExpired: no live session under ``key``.
            DuplicateSession: ``new_key`` holds a session.
            MessageNotFound: ``key`` holds no message ``at``.
            InvalidArgument: ``new_key`` is ``key``, or bad ``metadata``.
        """
        op = self._core.conversation.branch(key, new_key, at, metadata, idempotency_key)
        return self._run(op)

    def rewind(
        self,
        key: str,
        *,
        after: str,
        keep_as: str | None = None,
        expect_last_id: str | None = None,
        idempotency_key: str | None = None,
    ) -> int:
        """Remove every message of session ``key`` after message ``after`` (``""``: all of
        them), atomically, and return how many.

        The tail goes in one script that checks the history is still the one read (else it
        reads again, a few times at most, then ``ConcurrentChange``). The list begins a new
        generation, so every worker's next read shows the rewound history (no read cache serves
        the old tail). The removed ids stay recorded, as a pop's do: appending one of those
        messages again stores nothing. Live children forked after one of the removed messages
        (``ChildSession.forked_after``) are discarded first, each with its ``discard`` event
        (one another worker discards or is merging meanwhile is left to it; a child forked
        while the rewind runs may stay). With ``keep_as``, the session as read is first
        branched to ``keep_as`` (:meth:`branch`), so nothing is lost: should the session differ
        from that branch when the rewind comes (another worker wrote between, or a retry finds
        it changed), ``ConcurrentChange``, nothing rewound. With ``expect_last_id``, only if
        the newest message is that one (``StaleExpectation``). A retry of a call (redis-py's
        after a lost reply, or the caller's with the same ``idempotency_key``) answers the
        count the call removed and removes nothing more, as long as it is one of the session's
        last 8 rewinds. Inside ``store.turn(key)`` it is fenced by the turn: a turn no longer
        the caller's is refused (``TurnLost``) before any step (branch, discards). Refreshes
        the TTL and ``updated_at``, and logs a ``rewind`` event (``message_id``: ``after``;
        ``count``), when it removed messages; a rewind that removes nothing writes nothing.

        Raises:
            SessionNotFound, SessionExpired: no live session under ``key``.
            MessageNotFound: ``key`` holds no message ``after``.
            StaleExpectation: ``expect_last_id`` is not the newest message.
            DuplicateSession: ``keep_as`` holds a session.
            ConcurrentChange: see above.
            TurnLost: through a turn that is no longer the caller's.
        """
        op = self._core.conversation.rewind(
            key, after, keep_as, expect_last_id, idempotency_key,
            fence=self._core.turns.held(key),
        )  # fmt: skip
        return self._run(op)

    def cleanup_failed_turn(self, key: str, reason: str = FAILED_TURN) -> int:
        """Repair session ``key`` after a failed turn, so that the next model call gets a
        valid history: discard its live children (each with its ``discard`` event) and
        append one ``tool``
        message answering every tool call left without an answer (a call is answered when its
        ``output`` is set, or a later message carries a call of the same id with an output or
        is a ``tool`` message carrying it), each with the output ``{"error": reason}`` (JSON;
        the answer names the call's id and tool, not its arguments). Returns the number of
        calls closed; a second call closes none.

        One atomic script does both, if the newest message is still the one the repair read
        (else it reads again, a few times at most): no worker ever sees the children gone and
        the calls open, and no call is answered twice. A child under another worker's merge
        lease (a merge under way) is left to it. With no open call, only the live children are
        discarded (each atomically). A call retried after a lost reply finds its answers
        stored and appends nothing more. Inside ``store.turn(key)`` it is fenced by the turn
        (``TurnLost``, nothing written). Refreshes the TTL and ``updated_at``.

        Raises:
            SessionNotFound, SessionExpired: no live session under ``key``.
            TurnLost: through a turn that is no longer the caller's.
        """
        op = self._core.conversation.cleanup_failed_turn(
            key, reason, fence=self._core.turns.held(key)
        )
        return self._run(op)

    def compact_messages(
        self, key: str, up_to_index: int, summary: str, *, expect_id: str | None = None
    ) -> int:
        op = self._core.sessions.compact_messages(
            key, up_to_index, summary, expect_id=expect_id, fence=self._core.turns.held(key)
        )
        return self._run(op)

    def list_sessions(
        self, limit: int | None = None, offset: int = 0, *, prefix: str | None = None
    ) -> list[SessionSummary]:
        return self._run(self._core.index.list_sessions(limit, offset, prefix=prefix))

    def fork_child(
        self,
        parent_key: str,
        agent_name: str,
        config: ChildSessionConfig | None = None,
        *,
        idempotency_key: str | None = None,
    ) -> ChildSession:
        return self._run(
            self._core.children.fork_child(parent_key, agent_name, config, idempotency_key)
        )

    def append_child_message(
        self, child_key: str, msg: Message, *, expect_last_id: str | None = None
    ) -> bool:
        op = self._core.children.append_child_message(child_key, msg, expect_last_id=expect_last_id)
        return self._run(op)

    def append_child_messages(
        self, child_key: str, messages: Sequence[Message], *, expect_last_id: str | None = None
    ) -> int:
        """Append several messages to the child in one round trip and one atomic step, as
        ``append_child_message`` does one. Returns how many were new. ``expect_last_id``: as
        ``append_message``'s, about the child's newest message.
        """
        op = self._core.children.append_child_messages(
            child_key, messages, expect_last_id=expect_last_id
        )
        return self._run(op)

    def merge_child(
        self, child_key: str, summary: str, *, idempotency_key: str | None = None
    ) -> int:
        return self._run(self._core.children.merge_child(child_key, summary, None, idempotency_key))

    def merge_child_as_author(
        self, child_key: str, summary: str, author: str, *, idempotency_key: str | None = None
    ) -> int:
        return self._run(
            self._core.children.merge_child(child_key, summary, author, idempotency_key)
        )

    def discard_child(self, child_key: str, *, idempotency_key: str | None = None) -> None:
        return self._run(self._core.children.discard_child(child_key, idempotency_key))

    def get_child(self, child_key: str) -> ChildSession:
        return self._run(self._core.children.get_child(child_key))

    def children_of(self, parent_key: str) -> list[ChildSession]:
        return self._run(self._core.children.children_of(parent_key))

    def usage(self) -> Usage:
        """The usage totals under the store's prefix: every message ever appended under it
        (``create``'s history, appends, child appends), added in the append's own script to a
        counter beside the session index (one per slot on a cluster, summed here), so exact
        under concurrent writers. Deletes, trims, compactions and rewinds do not lower it; a
        merge or a branch does not add to it (their messages were counted when appended).
        """
        return self._run(self._core.index.usage())

    def repair_index(self) -> int:
        """On a Redis Cluster, find index shards that ``list_sessions`` does not know of (a
        worker died between creating a session and registering its slot's shard) and register
        them; returns how many. Probes all 16384 slots; a no-op on a single server.
        """
        return self._run(self._core.index.repair_index())

    def _shard_channels(self) -> list[str]:
        """The shard channels of the slots that have sessions (sharded events, a cluster)."""
        indexes = self._run(self._core.index.indexes())
        return [self._core.schema.beside(i, "events") for i in indexes]

    def pending(self, group: str, *, limit: int = 100) -> list[PendingEvent]:
        """What consumer group ``group`` gave out and no member acknowledged yet (at most
        ``limit`` per log, oldest first): the sweep of an end processor. A member that starts
        again under its name gets its own first; others take over each after the listener's
        ``claim_after``. Empty for a group that does not exist.
        """
        text(group, "group")
        count = non_negative_int(limit, "limit")
        client: Any = self._client
        out: list[PendingEvent] = []
        for index in self._run(self._core.index.indexes()):
            log_key = self._core.schema.beside(index, "log")
            try:
                held = client.xpending_range(log_key, group, "-", "+", count)
            except redis.ResponseError as exc:
                if "NOGROUP" in str(exc):
                    continue
                raise
            for entry in held:
                entry_id = _follow.text(entry["message_id"])
                found = client.xrange(log_key, entry_id, entry_id)
                event = entry_event(entry_id, found[0][1]) if found else None
                out.append(
                    PendingEvent(
                        id=entry_id,
                        event=event,
                        consumer=_follow.text(entry["consumer"]),
                        deliveries=int(entry["times_delivered"]),
                        idle=int(entry["time_since_delivered"]) / 1000,
                    )
                )
        return out

    def reap_expired(self) -> list[SessionLifecycleEvent]:
        """Log one ``expire`` event for each session tree whose deadline passed (up to a page
        of 100 per index shard) and take it off the index, in one script per shard; returns
        the events (the hook gets them too). Exactly once per tree across every store and
        listener: creates and listeners reap on their own (see docs/events.md), so call this
        only to reap without them. A no-op without a ttl.
        """
        reaped: list[SessionLifecycleEvent] = []
        for index in self._run(self._core.index.indexes()):
            reaped += self._run(self._core.events.reap(index))
        return reaped

    def rekey(
        self,
        new_passphrase: str | bytes,
        *,
        batch_size: int = 100,
        progress: Callable[[RekeyProgress], object] | None = None,
    ) -> RekeyReport:
        """Rotate to ``new_passphrase`` online, resumably.

        Other workers keep reading and writing meanwhile: during the rotation the prefix's
        master key opens with the old and with the new passphrase. Each sealed session keeps
        its data key and gets its copy of the master key's wrap under the new passphrase (one
        small script each, in batches of ``batch_size`` sessions); a session in cleartext gets
        a data key of its own and its values sealed in bounded steps, each swapped only if
        unchanged since read (``TamperDetected`` for cleartext planted in a sealed session: it
        is never sealed). ``progress`` is called after each batch with a
        :class:`RekeyProgress`. A crash leaves everything readable; calling ``rekey`` again
        with the same new passphrase resumes (``WrongPassphrase`` if a rotation to another one
        is under way). When it returns, the old passphrase opens nothing and this store uses
        the new one.
        """
        return self._run(self._core.rotation.rekey(new_passphrase, batch_size, progress))

    def get_salt(self, name: str) -> bytes:
        return self._run(self._core.secrets.get_salt(name))

    def set_salt(self, name: str, salt: bytes) -> None:
        return self._run(self._core.secrets.set_salt(name, salt))

    def get_checksum(self, name: str) -> bytes:
        return self._run(self._core.secrets.get_checksum(name))

    def set_checksum(self, name: str, checksum: bytes) -> None:
        return self._run(self._core.secrets.set_checksum(name, checksum))

    def set_secret(self, name: str, value: bytes) -> None:
        return self._run(self._core.secrets.set_secret(name, value))

    def get_secret(self, name: str) -> bytes:
        return self._run(self._core.secrets.get_secret(name))

    def delete_secret(self, name: str) -> bool:
        return self._run(self._core.secrets.delete_secret(name))

    def list_secrets(self) -> list[str]:
        return self._run(self._core.secrets.list_secrets())

    def migrate_secrets(
        self, reencrypt: Callable[[bytes], bytes], new_salt: bytes, new_checksum: bytes
    ) -> int:
        return self._run(self._core.secrets.migrate_secrets(reencrypt, new_salt, new_checksum))

    def close(self) -> None:
        _url.sync_close(self._client)

    def __enter__(self) -> RedisStore:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class Turn:
    """A session's turn while a worker holds it (see :meth:`RedisStore.turn`): its writes
    are fenced with the turn's token, refused with ``TurnLost`` once the turn is not theirs.
    """

    def __init__(self, store: RedisStore, key: str, fence: Fence, lease: float) -> None:
        self._store = store
        self._lease = lease
        self._core = store._core
        self._fence = fence
        self.key = key
        """The session."""

    @property
    def token(self) -> int:
        """The fencing token: it grows with every claim of the session."""
        return self._fence.token

    @property
    def id(self) -> str:
        """The turn's id (what ``with_turn_id`` is set to inside the block)."""
        return self._fence.value

    def append_message(
        self,
        msg: Message,
        *,
        expect_last_id: str | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> bool:
        """``store.append_message`` fenced by this turn (``TurnLost`` once it is not ours)."""
        op = self._core.sessions.append_message(
            self.key, msg, expect_last_id=expect_last_id, metadata=metadata, fence=self._fence
        )
        return self._store._run(op)

    def append_messages(
        self,
        messages: Sequence[Message],
        *,
        expect_last_id: str | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> int:
        """``store.append_messages`` fenced by this turn (``TurnLost`` once it is not ours)."""
        op = self._core.sessions.append_messages(
            self.key, messages, expect_last_id=expect_last_id, metadata=metadata,
            fence=self._fence,
        )  # fmt: skip
        return self._store._run(op)

    def compact_messages(
        self, up_to_index: int, summary: str, *, expect_id: str | None = None
    ) -> int:
        """``store.compact_messages`` fenced by this turn: a background compactor holds the
        turn while it summarises, so the next worker's ``turn(key, wait=...)`` waits for the
        compaction instead of reading a history about to change.
        """
        op = self._core.sessions.compact_messages(
            self.key, up_to_index, summary, expect_id=expect_id, fence=self._fence
        )
        return self._store._run(op)

    def append_child_message(
        self, child_key: str, msg: Message, *, expect_last_id: str | None = None
    ) -> bool:
        """``store.append_child_message`` to a child of this session, fenced by this turn."""
        op = self._core.children.append_child_message(
            child_key, msg, expect_last_id=expect_last_id, fence=self._fence
        )
        return self._store._run(op)

    def rewind(
        self,
        *,
        after: str,
        keep_as: str | None = None,
        expect_last_id: str | None = None,
        idempotency_key: str | None = None,
    ) -> int:
        """``store.rewind`` fenced by this turn (``TurnLost`` once it is not ours)."""
        op = self._core.conversation.rewind(
            self.key, after, keep_as, expect_last_id, idempotency_key, fence=self._fence
        )
        return self._store._run(op)

    def renew(self, lease: float | None = None) -> None:
        """Extend the lease to ``lease`` seconds from now (default: the lease it was claimed
        with); ``TurnLost`` when the turn is not this one's any more.
        """
        seconds = self._lease if lease is None else lease
        self._store._run(self._core.turns.renew(self.key, self._fence, seconds))
