"""OpenTelemetry traces and metrics of a store's operations (optional: the ``otel`` extra).

When ``opentelemetry-api`` is importable, each public store operation makes one span named
after its method (nested under the caller's current span; kind CLIENT) and records
``db.client.operation.duration``; without it this module imports nothing of OpenTelemetry and
a store's only cost is one attribute check per call. A library never configures the SDK: with
the API alone (no SDK configured by the application) a store makes no span and records
nothing, and looks again once a second whether an SDK was configured since (measured in
docs/benchmarks.md).

Attributes follow the database semantic conventions (``db.system.name`` = ``redis``,
``db.operation.name``, ``server.address``, ``server.port``, ``db.namespace``) plus
``redis_session.*``: ``round_trips``, ``bytes_sent``, ``messages_written``, ``messages_read``,
``events`` (the types an operation logged), ``turn_id`` (from ``with_turn_id``), ``outcome`` (a
domain outcome such as ``StaleExpectation``, which is no error), on appends
``messages_trimmed`` (what ``max_messages`` dropped from the head), on reads ``cache_hit`` and
``messages_fetched`` (whether the read cache served it: only the messages added since its
entry travelled, and how many did) and ``context_tokens`` (the tokens the session holds, where
known), and the session key as the
store's ``trace_session_keys`` says: ``"hashed"`` (default: a BLAKE2b-64 hex digest, stable
across processes, so that one session's spans can be found together), ``"plain"`` or
``"off"``. See docs/observability.md.
"""

from __future__ import annotations

import hashlib
import time
import weakref
from collections.abc import Callable, Generator, Iterable, Mapping, Sequence
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from .. import _clock
from .._core.requests import Emit, Op, ScriptCall
from ..context import turn_id_from_context
from ..errors import (
    ChildAlreadyMerged,
    DuplicateSession,
    ItemNotFound,
    SessionNotFound,
    StaleExpectation,
    TurnBusy,
    UsageLimitExceeded,
)

if TYPE_CHECKING:
    from .._core.cache import ReadCache
    from ..models import Message

_trace: Any = None
_metrics: Any = None
_context: Any = None
_tried = False

DOMAIN_OUTCOMES = (
    StaleExpectation,
    TurnBusy,
    SessionNotFound,
    DuplicateSession,
    ChildAlreadyMerged,
    ItemNotFound,
    UsageLimitExceeded,
)
"""Exceptions that tell the caller how things stand rather than that something failed: a
span's attribute (``redis_session.outcome``), not its error status."""
WRITES = frozenset(
    {"append_message", "append_messages", "append_child_message", "append_child_messages"}
)
READS = frozenset({"get", "get_history", "get_child", "children_of"})
_KEY_ARGS = ("key", "child_key", "parent_key")
NAME = "redis_session"
SPAN_NAMES = {
    "claim": "turn",
    "release": "turn.release",
    "renew": "turn.renew",
    "indexes": "index_shards",
    "reap": "reap_expired",
    "reap_members": "reap_expired",
}
"""Span names of operations whose generator is named otherwise than the public method."""
_read: ContextVar[tuple[bool, int] | None] = ContextVar("redis_session_read", default=None)
_trimmed: ContextVar[int] = ContextVar("redis_session_trimmed", default=0)
_context_tokens: ContextVar[int | None] = ContextVar("redis_session_context", default=None)
_spent: ContextVar[tuple[int, int]] = ContextVar("redis_session_spent", default=(0, 0))
_caches: weakref.WeakSet[ReadCache] = weakref.WeakSet()
RECHECK = 1.0
"""Seconds between two looks at whether an SDK was configured (see :meth:`Telemetry.active`)."""


def available() -> bool:
    """Whether the OpenTelemetry API is installed (then stores trace and measure); imported
    on the first call, by the first store made, never at the package's import.
    """
    global _trace, _metrics, _context, _tried
    if not _tried:
        _tried = True
        try:  # the otel extra
            from opentelemetry import context, metrics, trace
        except ImportError:
            return False
        _trace, _metrics, _context = trace, metrics, context
    return _trace is not None


def note_read(hit: bool, fetched: int) -> None:
    """What the read cache did for the read in progress (the reader calls it for every read;
    a traced read's span and metrics take it at its end): ``hit`` when an entry was continued,
    so that only the ``fetched`` messages added since travelled.
    """
    if _trace is not None:  # nothing to note for when OpenTelemetry is not installed
        _read.set((hit, fetched))


def note_context(tokens: int | None) -> None:
    """The tokens the session read in progress holds (its ``context_tokens``; None: unknown
    or not read).
    """
    if _trace is not None:
        _context_tokens.set(tokens)


def note_trimmed(count: int) -> None:
    """Messages the append in progress trimmed from its session's head (``max_messages``)."""
    if _trace is not None:
        _trimmed.set(count)


def note_spent(messages: Sequence[Message], written: int) -> None:
    """The usage of the messages the append in progress stored: all of theirs when it stored
    them all (a batch stored in part, a retry of a batch partly new, notes none: which of them
    the script skipped is not known here).
    """
    if _trace is None or written == 0 or written != len(messages):
        return
    read = wrote = 0
    for msg in messages:
        usage = msg.usage
        if usage is not None:
            read += usage.input_tokens
            wrote += usage.output_tokens
    if read or wrote:
        _spent.set((read, wrote))


def key_label(key: str, policy: str) -> str | None:
    """How a session key goes on a span under ``policy`` (None: not at all)."""
    if policy == "plain":
        return key
    if policy == "hashed":
        return hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()
    return None


class Instruments:
    """The metric instruments of the package (one set per process)."""

    def __init__(self) -> None:
        meter = _metrics.get_meter(NAME)
        self.duration = meter.create_histogram(
            "db.client.operation.duration", unit="s", description="Duration of store operations"
        )
        self.errors = meter.create_counter(
            "redis_session.errors", unit="{error}", description="Operations that failed, by type"
        )
        self.outcomes = meter.create_counter(
            "redis_session.outcomes",
            unit="{outcome}",
            description="Domain outcomes (StaleExpectation, TurnBusy, ...), by type",
        )
        self.written = meter.create_counter(
            "redis_session.messages.written", unit="{message}", description="Messages appended"
        )
        self.read = meter.create_counter(
            "redis_session.messages.read", unit="{message}", description="Messages returned"
        )
        self.usage = meter.create_counter(
            "redis_session.usage.tokens",
            unit="{token}",
            description="Tokens the appended messages' usage says were spent, by gen_ai.token.type "
            "(input, output)",
        )
        self.trimmed = meter.create_counter(
            "redis_session.messages.trimmed",
            unit="{message}",
            description="Messages appends trimmed from their sessions' heads (max_messages)",
        )
        self.events = meter.create_counter(
            "redis_session.events.published", unit="{event}", description="Events logged, by type"
        )
        self.lag = meter.create_histogram(
            "redis_session.listener.lag",
            unit="s",
            description="How long after its change a listener returned an event",
        )
        self.behind = meter.create_histogram(
            "redis_session.listener.behind",
            unit="{event}",
            description="Events a log listener had read and not yet returned, at each poll",
        )
        self.redeliveries = meter.create_counter(
            "redis_session.listener.redeliveries",
            unit="{event}",
            description="Events a consumer group gave out again",
        )
        self.turn_wait = meter.create_histogram(
            "redis_session.turn.wait", unit="s", description="Time a turn's claim took"
        )
        self.cache_hits = meter.create_counter(
            "redis_session.read_cache.hits",
            unit="{read}",
            description="Reads the read cache served (only what was added since travelled)",
        )
        self.cache_misses = meter.create_counter(
            "redis_session.read_cache.misses",
            unit="{read}",
            description="Reads of sessions the read cache did not hold (or no longer could use)",
        )
        meter.create_observable_up_down_counter(
            "redis_session.read_cache.size",
            callbacks=[_held_bytes],
            unit="By",
            description="Bytes (as stored) of the messages the process's stores hold",
        )


def _held_bytes(options: Any) -> Iterable[Any]:
    yield _metrics.Observation(sum(cache.size for cache in list(_caches)))


_instruments: Instruments | None = None


def instruments() -> Instruments:
    global _instruments
    if _instruments is None:
        _instruments = Instruments()
    return _instruments


class Telemetry:
    """A store's spans and metrics; None stands for "OpenTelemetry is not installed"."""

    def __init__(self, policy: str, base: Mapping[str, Any]) -> None:
        self.policy = policy
        self.base = dict(base)
        self.tracer = _trace.get_tracer(NAME)
        self.metrics = instruments()
        self._labels: dict[str, dict[str, str]] = {}
        self._on = False
        self._recheck = 0.0

    def active(self) -> bool:
        """Whether an application configured an SDK (a tracer or a meter provider): looked at
        once a second, so that with the API alone a call costs a clock read and a compare.
        """
        now = _clock.monotonic()
        if now >= self._recheck:
            self._recheck = now + RECHECK
            tracing = not isinstance(_trace.get_tracer_provider(), _trace.ProxyTracerProvider)
            measuring = type(_metrics.get_meter_provider()).__name__ != "_ProxyMeterProvider"
            self._on = tracing or measuring
        return self._on

    def labels(self, name: str) -> dict[str, str]:
        """The metric attributes of operation ``name`` (one dict per name, reused)."""
        found = self._labels.get(name)
        if found is None:
            found = self._labels[name] = {"db.system.name": "redis", "db.operation.name": name}
        return found

    @classmethod
    def of(cls, policy: str, client: Any, cache: ReadCache | None = None) -> Telemetry | None:
        """A store's telemetry over ``client`` (None when the API is not installed); the
        store's read ``cache`` counts in ``redis_session.read_cache.size`` while it lives.
        """
        if not available():
            return None
        if cache is not None:
            _caches.add(cache)
        return cls(policy, _server_attributes(client))

    def start(self, name: str, op: Any = None) -> Call:
        """A call of operation ``name`` (the generator ``op``, whose arguments name the key)."""
        return Call(self, SPAN_NAMES.get(name, name), op)


class Call:
    """One operation being traced: its span, its clock and what it did."""

    __slots__ = ("counts", "events", "name", "recording", "span", "started", "telemetry", "token")

    def __init__(self, telemetry: Telemetry, name: str, op: Any) -> None:
        self.telemetry = telemetry
        self.name = name
        self.started = time.perf_counter()
        self.token: Any = None
        self.counts = [0, 0]  # round trips, bytes sent
        self.events: list[str] = []
        if name in READS:
            _read.set(None)  # what the reader notes of this read, not of an earlier one
            _context_tokens.set(None)
        elif name in WRITES:
            if _trimmed.get():
                _trimmed.set(0)
            if _spent.get() != (0, 0):
                _spent.set((0, 0))
        tracer = telemetry.tracer
        span = tracer.start_span(name, kind=_trace.SpanKind.CLIENT)
        self.span = span
        self.recording = span.is_recording()
        if self.recording:  # everything known now, in one call (each is a lock in the SDK)
            attributes = {**telemetry.base, "db.operation.name": name}
            key = _key_of(op)
            label = None if key is None else key_label(key, telemetry.policy)
            if label is not None:
                attributes["redis_session.session_key"] = label
            turn = turn_id_from_context()
            if turn:
                attributes["redis_session.turn_id"] = turn
            span.set_attributes(attributes)
            self.token = _context.attach(_trace.set_span_in_context(span))  # logs carry its ids

    def watch(self, op: Op[Any]) -> Op[Any]:
        """``op``, counting what it sends (a recording span only)."""
        return _watched(op, self)

    def end(self, result: Any = None, error: BaseException | None = None) -> None:
        metrics, name, span = self.telemetry.metrics, self.name, self.span
        labels = self.telemetry.labels(name)
        found: dict[str, Any] = {}
        if error is not None:
            kind = type(error).__name__
            if isinstance(error, DOMAIN_OUTCOMES):
                labels = {**labels, "redis_session.outcome": kind}
                metrics.outcomes.add(1, labels)
                found["redis_session.outcome"] = kind
            else:
                labels = {**labels, "error.type": kind}
                metrics.errors.add(1, labels)
                found["error.type"] = kind
                if self.recording:
                    span.set_status(_trace.Status(_trace.StatusCode.ERROR, str(error)[:200]))
                    span.record_exception(error)
        elif name in WRITES:
            written = int(result)
            metrics.written.add(written, labels)
            found["redis_session.messages_written"] = written
            if written == 0:  # an idempotent retry: nothing new, and no error
                found["redis_session.outcome"] = "already_stored"
            trimmed = _trimmed.get()
            if trimmed:
                _trimmed.set(0)
                metrics.trimmed.add(trimmed, labels)
                found["redis_session.messages_trimmed"] = trimmed
            read, wrote = _spent.get()
            if read or wrote:
                _spent.set((0, 0))
                metrics.usage.add(read, {**labels, "gen_ai.token.type": "input"})
                metrics.usage.add(wrote, {**labels, "gen_ai.token.type": "output"})
                found["redis_session.usage.input_tokens"] = read
                found["redis_session.usage.output_tokens"] = wrote
        elif name in READS:
            history = result if isinstance(result, list) else getattr(result, "history", ())
            metrics.read.add(len(history), labels)
            found["redis_session.messages_read"] = len(history)
            note = _read.get()
            if note is not None:
                _read.set(None)
                hit, fetched = note
                (metrics.cache_hits if hit else metrics.cache_misses).add(1, labels)
                found["redis_session.cache_hit"] = hit
                found["redis_session.messages_fetched"] = fetched
            held = getattr(result, "context_tokens", None)
            if held is None:
                held = _context_tokens.get()
            if held is not None:
                _context_tokens.set(None)
                found["redis_session.context_tokens"] = held
        metrics.duration.record(time.perf_counter() - self.started, labels)
        if self.recording:
            found["redis_session.round_trips"] = self.counts[0]
            found["redis_session.bytes_sent"] = self.counts[1]
            if self.events:
                found["redis_session.events"] = self.events
            span.set_attributes(found)
            if self.token is not None:
                _context.detach(self.token)
        span.end()


def _watched(op: Op[Any], call: Call) -> Generator[Any, Any, Any]:
    counts, events, metrics = call.counts, call.events, call.telemetry.metrics
    reply: Any = None
    while True:
        try:
            request = op.send(reply)
        except StopIteration as done:
            return done.value
        if isinstance(request, Emit):
            kind = str(request.event.type)  # a str for OpenTelemetry, not the StrEnum
            events.append(kind)
            metrics.events.add(1, {"event.type": kind})
        else:
            counts[0] += 1
            if isinstance(request, ScriptCall):
                counts[1] += sum(len(a) if isinstance(a, bytes | str) else 8 for a in request.args)
        reply = yield request


def _key_of(op: Any) -> str | None:
    frame = getattr(op, "gi_frame", None)
    if frame is None:
        return None
    found = frame.f_locals
    for name in _KEY_ARGS:
        value = found.get(name)
        if isinstance(value, str):
            return value
    session = found.get("session")
    return getattr(session, "key", None) if session is not None else None


def _server_attributes(client: Any) -> dict[str, Any]:
    """``server.address``, ``server.port`` and ``db.namespace`` of a redis-py client."""
    out: dict[str, Any] = {"db.system.name": "redis"}
    pool = getattr(client, "connection_pool", None)
    kwargs: Mapping[str, Any] = getattr(pool, "connection_kwargs", {}) or {}
    if "host" in kwargs:
        out["server.address"] = str(kwargs["host"])
        out["server.port"] = int(kwargs.get("port", 6379))
    elif "path" in kwargs:
        out["server.address"] = str(kwargs["path"])
    else:
        nodes = getattr(client, "get_default_node", None)
        node = nodes() if callable(nodes) else None
        if node is not None:
            out["server.address"] = str(node.host)
            out["server.port"] = int(node.port)
    out["db.namespace"] = str(kwargs.get("db", 0))
    return out


def timed(telemetry: Telemetry | None, name: str) -> Callable[[], None]:
    """Start a span ``name`` for a step outside the store's driver (a listener's read or ack);
    returns what ends it.
    """
    if telemetry is None:
        return _nothing
    call = telemetry.start(name)
    return call.end


def _nothing() -> None:
    return None
