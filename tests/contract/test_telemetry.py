"""OpenTelemetry: one span per store operation with the database conventions' attributes and
ours, nested under the caller's span; errors and domain outcomes told apart; the session key
as the store's policy says; metrics with their names and units. With the SDK's in-memory
exporter and metric reader (set once for the process; spans are kept only while a test
captures them)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace import SpanKind, StatusCode

from redis_session import (
    ForeignKey,
    InvalidArgument,
    Message,
    Session,
    StaleExpectation,
    StoreOptions,
    Usage,
    UsageLimitExceeded,
    with_turn_id,
)
from tests.conftest import Backend, StoreFactory


class Captured(SpanExporter):
    """Keeps the spans it is given while ``capturing`` (the rest of the suite runs with a
    recording SDK too, and keeps nothing)."""

    def __init__(self) -> None:
        self.capturing = False
        self.spans: list[ReadableSpan] = []

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if self.capturing:
            self.spans.extend(spans)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        return None


_SETUP: dict[str, Any] = {}


def _sdk() -> tuple[Captured, InMemoryMetricReader]:
    if not _SETUP:
        exporter, reader = Captured(), InMemoryMetricReader()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        trace.set_tracer_provider(provider)
        metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
        _SETUP.update(exporter=exporter, reader=reader)
    return _SETUP["exporter"], _SETUP["reader"]


@pytest.fixture
def spans() -> Iterator[list[ReadableSpan]]:
    exporter, _ = _sdk()
    exporter.spans = []
    exporter.capturing = True
    yield exporter.spans
    exporter.capturing = False


@pytest.fixture
def reader() -> InMemoryMetricReader:
    return _sdk()[1]


def ours(spans: list[ReadableSpan]) -> list[ReadableSpan]:
    return [
        s
        for s in spans
        if s.instrumentation_scope and s.instrumentation_scope.name == "redis_session"
    ]


def named(spans: list[ReadableSpan], name: str) -> ReadableSpan:
    found = [s for s in ours(spans) if s.name == name]
    assert len(found) == 1, [s.name for s in ours(spans)]
    return found[0]


def digest(key: str) -> str:
    return hashlib.blake2b(key.encode(), digest_size=8).hexdigest()


async def test_one_span_per_operation_with_its_attributes(
    backend: Backend, make_store: StoreFactory, spans: list[ReadableSpan]
) -> None:
    store = make_store()
    await store.create(Session(key="k"))
    await store.append_message("k", Message(role="user", content="hello"))
    history = await store.get_history("k")
    assert [s.name for s in ours(spans)] == ["create", "append_message", "get_history"]
    create, append, read = ours(spans)
    for span in (create, append, read):
        attrs = span.attributes or {}
        assert span.kind == SpanKind.CLIENT
        assert attrs["db.system.name"] == "redis" and attrs["db.operation.name"] == span.name
        assert attrs["db.namespace"] == "0"
        assert attrs["redis_session.session_key"] == digest("k")  # hashed by default
        assert int(attrs["redis_session.round_trips"]) >= 1  # type: ignore[arg-type]
        assert span.status.status_code == StatusCode.UNSET
        if backend.server is not None:  # a real server's address
            assert attrs["server.address"] == "127.0.0.1"
            assert attrs["server.port"] == backend.server.port
    assert (create.attributes or {})["redis_session.events"] == ("create",)
    assert (append.attributes or {})["redis_session.messages_written"] == 1
    assert int((append.attributes or {})["redis_session.bytes_sent"]) > len("hello")  # type: ignore[arg-type]
    assert (read.attributes or {})["redis_session.messages_read"] == len(history) == 1
    assert (append.attributes or {})["redis_session.round_trips"] == 1  # one script call


async def test_spans_nest_under_the_callers_span_and_carry_the_turn(
    make_store: StoreFactory, spans: list[ReadableSpan]
) -> None:
    store = make_store()
    await store.create(Session(key="k"))
    tracer = trace.get_tracer("an.agent.framework")
    with tracer.start_as_current_span("agent turn") as parent, with_turn_id("turn-7"):
        await store.append_message("k", Message(role="user", content="hi"))
    append = named(spans, "append_message")
    assert append.parent is not None
    assert append.parent.span_id == parent.get_span_context().span_id
    assert append.context is not None
    assert append.context.trace_id == parent.get_span_context().trace_id
    assert (append.attributes or {})["redis_session.turn_id"] == "turn-7"


async def test_a_failure_is_an_error_a_domain_outcome_is_not(
    backend: Backend,
    make_store: StoreFactory,
    spans: list[ReadableSpan],
    reader: InMemoryMetricReader,
) -> None:
    store = make_store()
    await store.create(Session(key="k"))
    message = Message(role="user", content="once")
    await store.append_message("k", message)
    assert await store.append_message("k", message) is False  # stored before: an outcome
    with pytest.raises(StaleExpectation):
        await store.append_message("k", Message(role="user", content="x"), expect_last_id="nope")
    backend.sync_client().set(backend.schema.log_of("f"), "another program's")
    with pytest.raises(ForeignKey):
        await store.create(Session(key="f"))
    appends = [s for s in ours(spans) if s.name == "append_message"]
    retried, stale = appends[1], appends[2]
    assert (retried.attributes or {})["redis_session.outcome"] == "already_stored"
    assert (stale.attributes or {})["redis_session.outcome"] == "StaleExpectation"
    assert stale.status.status_code == StatusCode.UNSET
    failed = [s for s in ours(spans) if s.name == "create"][-1]
    assert failed.status.status_code == StatusCode.ERROR
    assert (failed.attributes or {})["error.type"] == "ForeignKey"
    assert [e.name for e in failed.events] == ["exception"]


@pytest.mark.parametrize("policy", ["off", "plain", "hashed"])
async def test_the_session_key_goes_on_spans_as_the_store_says(
    make_store: StoreFactory, spans: list[ReadableSpan], policy: str
) -> None:
    store = make_store(trace_session_keys=policy)
    await store.create(Session(key="slack:C42:alice"))
    attrs = named(spans, "create").attributes or {}
    expected = {"off": None, "plain": "slack:C42:alice", "hashed": digest("slack:C42:alice")}
    assert attrs.get("redis_session.session_key") == expected[policy]
    with pytest.raises(InvalidArgument, match="trace_session_keys"):
        StoreOptions(trace_session_keys="clear")


def _points(reader: InMemoryMetricReader) -> dict[str, tuple[str, list[Any]]]:
    data = reader.get_metrics_data()
    out: dict[str, tuple[str, list[Any]]] = {}
    assert data is not None
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                out[metric.name] = (metric.unit or "", list(metric.data.data_points))
    return out


async def test_metrics_have_their_names_and_units(
    make_store: StoreFactory, reader: InMemoryMetricReader, spans: list[ReadableSpan]
) -> None:
    store = make_store()
    await store.create(Session(key="m"))
    await store.append_message("m", Message(role="user", content="a"))
    await store.get_history("m")
    points = _points(reader)
    unit, durations = points["db.client.operation.duration"]
    assert unit == "s"
    ops = {p.attributes.get("db.operation.name") for p in durations}
    assert {"create", "append_message", "get_history"} <= ops
    assert all(p.attributes.get("db.system.name") == "redis" for p in durations)
    assert points["redis_session.messages.written"][0] == "{message}"
    assert points["redis_session.messages.read"][0] == "{message}"
    assert points["redis_session.events.published"][0] == "{event}"


async def test_an_append_that_trims_says_how_many(
    make_store: StoreFactory, reader: InMemoryMetricReader, spans: list[ReadableSpan]
) -> None:
    store = make_store(max_history_turns=2)
    await store.create(Session(key="t"))
    await store.append_messages("t", [Message(role="user", content=str(i)) for i in range(2)])
    await store.append_messages("t", [Message(role="user", content=str(i)) for i in range(3)])
    await store.append_message("t", Message(role="user", content="last"))
    writes = [s.attributes or {} for s in ours(spans) if s.name.startswith("append_message")]
    assert [a.get("redis_session.messages_trimmed") for a in writes] == [None, 3, 1]
    assert len(await store.get_history("t")) == 2
    unit, points = _points(reader)["redis_session.messages.trimmed"]
    assert unit == "{message}" and sum(p.value for p in points) >= 4


async def test_appends_count_the_usage_they_store_by_direction(
    make_store: StoreFactory, reader: InMemoryMetricReader, spans: list[ReadableSpan]
) -> None:
    store = make_store(max_usage_tokens=100)
    await store.create(Session(key="u"))
    before = _tokens_by_type(reader)
    answer = Message(role="assistant", usage=Usage(input_tokens=40, output_tokens=20, requests=1))
    await store.append_message("u", answer)
    await store.append_message("u", answer)  # stored before: counts nothing
    await store.append_messages("u", [Message(role="tool"), answer.model_copy(update={"id": "b"})])
    with pytest.raises(UsageLimitExceeded):
        await store.append_message("u", Message(role="user", content="more"))
    writes = [s.attributes or {} for s in ours(spans) if s.name.startswith("append_message")]
    assert [a.get("redis_session.usage.input_tokens") for a in writes] == [40, None, 40, None]
    assert [a.get("redis_session.usage.output_tokens") for a in writes] == [20, None, 20, None]
    assert writes[-1].get("redis_session.outcome") == "UsageLimitExceeded"  # not an error
    unit, _ = _points(reader)["redis_session.usage.tokens"]
    after = _tokens_by_type(reader)
    spent = {kind: after[kind] - before.get(kind, 0) for kind in after}
    assert unit == "{token}" and spent == {"input": 80, "output": 40}


def _tokens_by_type(reader: InMemoryMetricReader) -> dict[str, int]:
    """The usage counter's totals by token type (cumulative over the process's tests)."""
    points = _points(reader).get("redis_session.usage.tokens", ("", []))[1]
    out: dict[str, int] = {}
    for p in points:  # a point per operation (append_message, append_messages) and type
        kind = str(p.attributes["gen_ai.token.type"])
        out[kind] = out.get(kind, 0) + int(p.value)
    return out


async def test_reads_say_whether_the_read_cache_served_them(
    make_store: StoreFactory, reader: InMemoryMetricReader, spans: list[ReadableSpan]
) -> None:
    store, other = make_store(), make_store()
    await store.create(Session(key="c"))
    await store.append_messages("c", [Message(role="user", content=str(i)) for i in range(3)])
    await store.get_history("c")  # nothing held: all three travel
    await store.append_message("c", Message(role="user", content="3"))
    await store.get_history("c")  # held: only the new one travels
    await other.get_history("c")  # another store (a worker that never read it)
    reads = [s.attributes or {} for s in ours(spans) if s.name == "get_history"]
    assert [(a["redis_session.cache_hit"], a["redis_session.messages_fetched"]) for a in reads] == [
        (False, 3),
        (True, 1),
        (False, 4),
    ]
    assert [a["redis_session.messages_read"] for a in reads] == [3, 4, 4]
    points = _points(reader)
    assert points["redis_session.read_cache.hits"][0] == "{read}"
    assert points["redis_session.read_cache.misses"][0] == "{read}"
    hits = sum(
        p.value
        for p in points["redis_session.read_cache.hits"][1]
        if p.attributes.get("db.operation.name") == "get_history"
    )
    assert hits >= 1
    unit, held = points["redis_session.read_cache.size"]
    assert unit == "By" and held[0].value > 0  # this test's two stores hold "c" at least


async def test_a_listeners_ack_is_a_span_and_its_lag_a_metric(
    make_store: StoreFactory, spans: list[ReadableSpan], reader: InMemoryMetricReader
) -> None:
    store = make_store()
    listener = store.listen(group="audit", since="latest")
    listener = (await listener) if hasattr(listener, "__await__") else listener
    await store.create(Session(key="l"))
    got = listener.get(timeout=5)
    event = (await got) if hasattr(got, "__await__") else got
    assert event is not None
    done = listener.ack(event)
    assert ((await done) if hasattr(done, "__await__") else done) is True
    closing = listener.aclose() if hasattr(listener, "aclose") else listener.close()
    if hasattr(closing, "__await__"):
        await closing
    assert [s.name for s in ours(spans) if s.name == "ack"] == ["ack"]
    unit, lags = _points(reader)["redis_session.listener.lag"]
    assert unit == "s" and lags


async def test_a_log_record_made_inside_an_operation_carries_its_span(
    backend: Backend, make_store: StoreFactory, spans: list[ReadableSpan]
) -> None:
    """What OpenTelemetry's logging integration reads: the current span when the store logs."""
    import logging

    seen: list[int] = []

    class Current(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(trace.get_current_span().get_span_context().span_id)

    store = make_store()
    await store.create(Session(key="good"))
    backend.sync_client().zadd(backend.schema.index_of("good"), {b"\xff\xfe-not-utf8": 1})
    handler = Current(level=logging.WARNING)
    logger = logging.getLogger("redis_session")
    logger.addHandler(handler)
    try:
        assert [s.key for s in await store.list_sessions()] == ["good"]  # logs what it skipped
    finally:
        logger.removeHandler(handler)
    listing = named(spans, "list_sessions")
    assert listing.context is not None and seen == [listing.context.span_id]
