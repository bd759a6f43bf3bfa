"""Listeners of the event log: replay from a cursor, resume, groups, ``types``, ``EventsLost``,
``end`` processed at least once, ``expire`` from the listeners' reaping."""

from __future__ import annotations

import inspect
import time
from typing import Any

import pytest

from redis_session import (
    AsyncRedisStore,
    EventsLost,
    InvalidArgument,
    LifecycleEventType,
    Message,
    RedisStore,
    Session,
    SessionLifecycleEvent,
)
from tests.conftest import Backend, StoreFactory
from tests.support.clock import FakeClock, wait_gone


async def aw(value: Any) -> Any:
    return (await value) if inspect.isawaitable(value) else value


async def take(listener: Any, count: int, timeout: float = 10.0) -> list[SessionLifecycleEvent]:
    """The next ``count`` events (fewer when ``timeout`` passes first)."""
    got: list[SessionLifecycleEvent] = []
    deadline = time.monotonic() + timeout
    while len(got) < count and time.monotonic() < deadline:
        event = await aw(listener.get(timeout=min(1.0, max(0.05, deadline - time.monotonic()))))
        if event is not None:
            got.append(event)
    return got


async def take_polling(
    listener: Any, clock: FakeClock, count: int, timeout: float = 10.0
) -> list[SessionLifecycleEvent]:
    """:func:`take`, with the listener's clock moved past its ``poll`` before each ``get``: each
    one polls at once (reads every log, claims what other members held past ``claim_after``,
    reaps), instead of once a ``poll``.
    """
    got: list[SessionLifecycleEvent] = []
    deadline = time.monotonic() + timeout
    while len(got) < count and time.monotonic() < deadline:
        clock.advance(listener.poll)
        event = await aw(listener.get(timeout=0.05))
        if event is not None:
            got.append(event)
    return got


async def close(listener: Any) -> None:
    await aw(listener.aclose() if hasattr(listener, "aclose") else listener.close())


async def busy(store: Any, n: int, prefix: str = "s") -> list[tuple[str, str]]:
    """``n`` sessions each created, forked, merged; every other one deleted: the (type, key)
    of each event in the order it happened, per session."""
    happened: list[tuple[str, str]] = []
    for i in range(n):
        key = f"{prefix}{i}"
        await store.create(Session(key=key, history=[Message(role="user", content="q")]))
        child = await store.fork_child(key, "helper")
        await store.merge_child(child.key, "done")
        happened += [("create", key), ("fork", key), ("merge", key)]
        if i % 2:
            await store.delete(key)
            happened.append(("delete", key))
    return happened


def per_session(events: list[tuple[str, str]]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for kind, key in events:
        out.setdefault(key, []).append(kind)
    return out


async def test_a_late_listener_replays_everything_in_order_then_resumes_exactly(
    store: Any, clock: FakeClock
) -> None:
    happened = await busy(store, 20)
    listener = await aw(store.listen(since="earliest"))
    got = await take(listener, len(happened))
    assert per_session([(e.type, e.key) for e in got]) == per_session(happened)
    assert len({(e.key, e.id) for e in got}) == len(got)  # none twice (ids: per log)
    cursor = listener.cursor
    assert await take_polling(listener, clock, 1, timeout=0.05) == []  # a poll: nothing more
    await close(listener)
    more = await busy(store, 10, prefix="t")
    for i in range(5):
        await store.fork_child("t0", f"extra{i}")
    more += [("fork", "t0")] * 5
    assert len(more) == 40
    resumed = await aw(store.listen(since=cursor))
    again = await take(resumed, len(more))
    assert per_session([(e.type, e.key) for e in again]) == per_session(more)
    assert len(again) == len(more)
    assert await take_polling(resumed, clock, 1, timeout=0.05) == []  # exactly those
    await close(resumed)


async def test_latest_follows_what_comes_after(store: Any) -> None:
    await busy(store, 3)
    listener = await aw(store.listen(since="latest"))
    assert await aw(listener.get(timeout=0.2)) is None
    await store.create(Session(key="new"))
    got = await take(listener, 1)
    assert [(e.type, e.key) for e in got] == [("create", "new")] and got[0].id
    await close(listener)


async def test_types_filter_every_mode(store: Any) -> None:
    await busy(store, 2)
    listener = await aw(store.listen(since="earliest", types={"merge"}))
    got = await take(listener, 2)
    assert [(e.type, e.key) for e in got] == [("merge", "s0"), ("merge", "s1")]
    await close(listener)
    with pytest.raises(InvalidArgument, match="types"):
        await aw(store.listen(since="earliest", types="merge"))
    with pytest.raises(InvalidArgument, match="since"):
        await aw(store.listen(since="not-a-cursor"))


async def test_a_cursor_past_the_log_raises_events_lost_once(
    backend: Backend, make_store: StoreFactory
) -> None:
    store = make_store(event_log_max=10)
    await store.create(Session(key="p"))
    first = await aw(store.listen(since="earliest"))
    (created,) = await take(first, 1)
    cursor = first.cursor
    await close(first)
    for i in range(250):  # one tree, one log: trimmed far past the cursor (blocks of 100)
        await store.fork_child("p", f"a{i}")
    listener = await aw(store.listen(since=cursor))
    with pytest.raises(EventsLost) as lost:
        await take(listener, 1)
    assert lost.value.log == backend.schema.log_of("p") and lost.value.after == created.id
    assert lost.value.oldest  # names the oldest event the log still holds
    rest: list[SessionLifecycleEvent] = []  # then it goes on after the gap, up to the newest
    while not rest or rest[-1].child_key.split(":")[-2] != "a249":
        more = await take(listener, 1, timeout=5.0)
        assert more, [e.child_key for e in rest[-3:]]
        rest += more
    assert all(e.type == "fork" for e in rest)
    assert rest[-1].child_key.split(":")[-2] == "a249"  # up to the newest
    await close(listener)


async def test_a_group_shares_events_and_takes_over_what_a_dead_member_held(
    store: Any, clock: FakeClock
) -> None:
    a = await aw(store.listen(group="billing", consumer="a", claim_after=0.3, since="latest"))
    b = await aw(store.listen(group="billing", consumer="b", claim_after=0.3, since="latest"))
    for i in range(20):
        await store.create(Session(key=f"g{i}"))
    held = await take(a, 20, timeout=5.0)  # a takes them and dies without acknowledging
    await close(a)
    for i in range(20, 30):
        await store.create(Session(key=f"g{i}"))
    acked: dict[tuple[str, str], int] = {}  # (key, id): an id is unique in its log
    redelivered = 0
    deadline = time.monotonic() + 15
    while len(acked) < 30 and time.monotonic() < deadline:
        # b's next get polls: claims what a held once it is idle claim_after on the server
        (event,) = await take_polling(b, clock, 1, timeout=0.05) or (None,)
        if event is None:
            continue
        assert (event.key, event.id) not in acked, "an acknowledged event came again"
        redelivered += event.deliveries > 1
        assert await aw(b.ack(event)) is True
        acked[event.key, event.id] = 1
    assert len(acked) == 30 and {(e.key, e.id) for e in held} <= set(acked)
    assert redelivered == len(held)
    assert await take_polling(b, clock, 1, timeout=0.1) == []  # polls, claims: nothing more
    assert await aw(store.pending("billing")) == []
    await close(b)


async def test_end_is_processed_at_least_once(store: Any, clock: FakeClock) -> None:
    await store.create(Session(key="e"))
    worker = await aw(
        store.listen(group="end-processor", consumer="w1", types={"end"}, claim_after=0.3)
    )
    assert await store.end("e") is True and await store.end("e") is False
    (ended,) = await take(worker, 1)
    assert ended.type == "end" and ended.key == "e"
    await close(worker)  # dies before acknowledging
    (held,) = await aw(store.pending("end-processor"))
    assert held.id == ended.id and held.consumer == "w1" and held.event is not None
    assert held.event.type == "end" and held.deliveries == 1
    other = await aw(
        store.listen(group="end-processor", consumer="w2", types={"end"}, claim_after=0.3)
    )
    (again,) = await take_polling(other, clock, 1)  # claimed once idle claim_after
    assert again.id == ended.id and again.deliveries == 2
    assert await aw(other.ack(again)) is True
    assert await aw(store.pending("end-processor")) == []
    assert await take_polling(other, clock, 1, timeout=0.1) == []  # one end event, processed once
    await close(other)


async def test_a_member_that_closes_gives_back_what_it_read_ahead(store: Any) -> None:
    # It read the whole log ahead (one read), handed out 2, acknowledged them and closed: the
    # rest is given back at once, not held for claim_after (30 s by default); the next member
    # takes every event at its first read, each delivered once as far as any member saw.
    happened = await busy(store, 40)
    first = await aw(store.listen(group="g2", consumer="w1", since="earliest"))
    handed = await take(first, 2)
    for event in handed:
        assert await aw(first.ack(event))
    await close(first)
    pending = await aw(store.pending("g2", limit=1000))
    assert len(pending) == len(happened) - 2
    assert all(p.consumer == "w1" and p.idle > 86_400 for p in pending)  # marked idle: free
    second = await aw(store.listen(group="g2", consumer="w2"))
    started = time.monotonic()
    rest = await take(second, len(happened) - 2, timeout=10)
    assert time.monotonic() - started < 5  # not after claim_after
    assert len(rest) == len(happened) - 2 and all(e.deliveries == 1 for e in rest)
    seen = {(e.key, e.type, e.id) for e in (*handed, *rest)}  # ids are per log (slot)
    assert len(seen) == len(happened)
    for event in rest:
        await aw(second.ack(event))
    assert await aw(store.pending("g2")) == []
    await close(second)


async def test_a_member_started_again_under_its_name_gets_what_it_held(store: Any) -> None:
    first = await aw(store.listen(group="g", consumer="same", since="latest"))
    await store.create(Session(key="x"))
    (held,) = await take(first, 1)
    await close(first)
    again = await aw(store.listen(group="g", consumer="same"))
    (got,) = await take(again, 1)
    assert got.id == held.id and got.deliveries == 2
    await aw(again.ack(got))
    await close(again)


async def test_a_listener_reaps_expired_trees_at_its_polls(
    backend: Backend, make_store: StoreFactory, clock: FakeClock
) -> None:
    store = make_store(ttl=0.3)
    listener = await aw(store.listen(since="latest", types={"expire"}, poll=30))
    # Its first poll pays the set-up (a cluster's nodes, the log, the index) before the tree's
    # 0.3 s begin; the poll that must see the tree alive comes right after the create.
    assert await aw(listener.get(timeout=0.05)) is None
    await store.create(Session(key="warm"))
    await store.delete("warm")
    clock.advance(30)
    await store.create(Session(key="short"))
    assert await aw(listener.get(timeout=0.05)) is None  # a poll: nothing expired
    wait_gone(backend.sync_client(), backend.schema.session("short").meta)
    assert await aw(listener.get(timeout=0.05)) is None  # expired; the next poll is 30 s away
    clock.advance(30)
    (expired,) = await take(listener, 1, timeout=5.0)  # that poll reaps it
    assert expired.key == "short" and expired.type == "expire"
    await close(listener)


async def test_a_store_without_a_log_says_so_to_a_log_listener(make_store: StoreFactory) -> None:
    for options in ({"event_log_max": 0}, {"publish_events": False}):
        store = make_store(**options)
        with pytest.raises(InvalidArgument, match="since.*no event log"):
            await aw(store.listen(since="earliest"))
        with pytest.raises(InvalidArgument, match="group.*no event log"):
            await aw(store.listen(group="g"))


async def test_a_short_socket_timeout_is_no_error_while_waiting(backend: Backend) -> None:
    """A client whose socket timeout is shorter than the wait blocks for half of it at most."""
    if backend.fake_server is not None or backend.cluster is not None:
        pytest.skip("a real single server's socket timeout (the cluster waits on pub/sub)")
    store = RedisStore.from_url(backend.url, prefix=backend.prefix, socket_timeout=0.2)
    try:
        listener = store.listen(since="latest")
        assert listener.get(timeout=1.0) is None  # waited in steps of 0.1 s: no TimeoutError
        listener.close()
    finally:
        store.close()


async def test_a_live_sharded_listener_follows_slots_that_get_their_first_session(
    backend: Backend, make_store: StoreFactory, clock: FakeClock
) -> None:
    store = make_store(sharded_events=True)
    listener = await aw(store.listen(poll=0.2, types={"end"}))
    keys = [f"s{n}" for n in range(6)]  # on a cluster, slots without a session until now
    for key in keys:
        await store.create(Session(key=key))
    clock.advance(0.2)  # its next look for new slots is due
    assert await aw(listener.get(timeout=0.1)) is None  # it looks for new slots meanwhile
    for key in keys:
        assert await store.end(key) is True
    got = await take(listener, len(keys))
    assert sorted(e.key for e in got) == keys
    if backend.cluster is not None:
        assert len(listener.shard_channels) >= len({store.extension.log_of(k) for k in keys})
    await close(listener)


async def test_earliest_on_a_trimmed_log_starts_at_its_oldest_entry_without_a_gap(
    make_store: StoreFactory,
) -> None:
    store = make_store(event_log_max=10)
    for n in range(120):  # the log trimmed many times over (one tree per key: many logs too)
        await store.create(Session(key=f"k{n}"))
    newest = "k119"
    for since, group in (("earliest", None), ("earliest", "from-the-start")):
        listener = await aw(store.listen(since=since, group=group))
        got: list[SessionLifecycleEvent] = []
        while newest not in [e.key for e in got]:
            more = await take(listener, 1, timeout=5.0)  # EventsLost would raise here
            assert more, [e.key for e in got[-3:]]
            got += more
        assert all(e.type == "create" for e in got)
        await close(listener)


async def test_async_with_store_listen_needs_no_await(make_store: StoreFactory) -> None:
    store = make_store()
    if not isinstance(store, AsyncRedisStore):
        with store.sync.listen(since="latest") as listener:  # the blocking one: as it is
            store.sync.create(Session(key="s"))
            event = listener.get(timeout=5)
            assert event is not None and event.type == "create"
        return
    async with store.listen(since="latest") as listener:  # no await: entered, then closed
        await store.create(Session(key="s"))
        event = await listener.get(timeout=5)
        assert event is not None and event.type == LifecycleEventType.CREATE
        assert str(event.type) == "create"  # a StrEnum: equal to its string
    assert listener._closed
    live = await store.listen()  # awaited: the listener itself, as before
    await live.aclose()
