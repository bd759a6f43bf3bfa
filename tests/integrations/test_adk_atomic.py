"""ADK's append_event as one script: stale writers refused, one round trip, shared state in the
same step; list_sessions through the app's index; events with tied timestamps in ADK's order.
Every backend (the fixtures of tests/conftest.py); two workers are two services, each with a
store and a client of its own.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import pytest
from google.adk.errors._stale_session_error import StaleSessionError
from google.adk.events.event import Event
from google.adk.events.event_actions import EventActions
from google.adk.sessions.base_session_service import GetSessionConfig
from google.adk.sessions.session import Session as AdkSession

from redis_session import AsyncRedisStore
from redis_session import Session as StoreSession
from redis_session.integrations.adk import RedisSessionService
from tests.conftest import Backend
from tests.integrations.conftest import RoundTrips

MakeStore = Callable[..., AsyncRedisStore]
APP, USER = "atomic-app", "alice"
T0 = 1_700_000_000.0


def event(n: float, *, state: dict[str, Any] | None = None, id: str | None = None) -> Event:
    made = Event(
        invocation_id=f"inv-{n}",
        author="user",
        actions=EventActions(state_delta=dict(state or {})),
        timestamp=T0 + n,
    )
    if id is not None:
        made.id = id
    return made


async def fresh(service: RedisSessionService, session_id: str = "s1") -> AdkSession:
    got = await service.get_session(app_name=APP, user_id=USER, session_id=session_id)
    assert got is not None
    return got


@pytest.mark.timeout(60)
async def test_two_workers_racing_on_one_session_version_one_wins(make_astore: MakeStore) -> None:
    one, two = RedisSessionService(make_astore()), RedisSessionService(make_astore())
    await one.create_session(app_name=APP, user_id=USER, session_id="s1")
    for i in range(8):
        a, b = await fresh(one), await fresh(two)  # the same version, read by each worker
        base = a.last_update_time + 10
        results = await asyncio.gather(
            one.append_event(a, event(base - T0 + 1, state={f"k{i}": "a", f"user:u{i}": "a"})),
            two.append_event(b, event(base - T0 + 2, state={f"k{i}": "b", f"app:p{i}": "b"})),
            return_exceptions=True,
        )
        errors = [r for r in results if isinstance(r, BaseException)]
        assert len(errors) == 1 and isinstance(errors[0], StaleSessionError), results
        assert "modified in storage" in str(errors[0])
        loser = "b" if results[0] is not errors[0] else "a"
        got = await fresh(one)
        # nothing of the refused event: not its event, session, user or app state
        assert got.state[f"k{i}"] != loser
        assert got.state.get(f"user:u{i}") in ({None} if loser == "a" else {"a"})
        assert got.state.get(f"app:p{i}") in ({None} if loser == "b" else {"b"})
    assert len((await fresh(two)).events) == 8


async def test_an_outdated_session_object_is_refused_and_nothing_is_stored(
    make_astore: MakeStore,
) -> None:
    service = RedisSessionService(make_astore())
    original = await service.create_session(app_name=APP, user_id=USER, session_id="s1")
    await service.append_event(original, event(1, state={"a": 1}))
    updated = await fresh(service)
    await service.append_event(updated, event(2, state={"b": 2}))
    with pytest.raises(StaleSessionError):
        await service.append_event(original, event(3, state={"c": 3, "user:c": 3, "app:c": 3}))
    got = await fresh(service)
    assert [e.invocation_id for e in got.events] == ["inv-1", "inv-2"]
    assert got.state == {"a": 1, "b": 2}
    assert original.events[-1].invocation_id == "inv-1"  # the caller's copy is left alone


async def test_a_current_session_with_a_drifted_time_is_not_stale(astore: AsyncRedisStore) -> None:
    """As ADK's database service: an older last_update_time alone is not stale when the
    caller's newest event is the stored newest one (float round trips, hand-made sessions)."""
    service = RedisSessionService(astore)
    session = await service.create_session(app_name=APP, user_id=USER, session_id="s1")
    await service.append_event(session, event(10))
    session.last_update_time -= 0.0001
    await service.append_event(session, event(20))
    assert [e.invocation_id for e in (await fresh(service)).events] == ["inv-10", "inv-20"]


async def test_a_retried_append_is_a_no_op_not_a_stale_write(astore: AsyncRedisStore) -> None:
    service = RedisSessionService(astore)
    session = await service.create_session(app_name=APP, user_id=USER, session_id="s1")
    first = event(1, state={"n": 1})
    stale_copy = session.model_copy(deep=True)
    await service.append_event(session, first)
    # the same event again from the copy taken before (a retry after a lost reply): stored once
    await service.append_event(stale_copy, first.model_copy(deep=True))
    assert len((await fresh(service)).events) == 1


async def test_append_event_is_one_round_trip(
    backend: Backend, astore: AsyncRedisStore, round_trips: RoundTrips
) -> None:
    service = RedisSessionService(astore)
    session = await service.create_session(app_name=APP, user_id=USER, session_id="s1")
    await service.append_event(session, event(0))  # warm-up: the script loaded
    counts: dict[str, int] = {}
    for name, state in [
        ("no delta", {}),
        ("first app:/user: entries (their records made)", {"app:a": 1, "user:u": 1}),
        ("session, app:, user: and temp: deltas", {"s": 1, "app:a": 2, "user:u": 2, "temp:t": 0}),
    ]:
        round_trips.reset()
        await service.append_event(session, event(len(counts) + 1, state=state))
        counts[name] = round_trips.count
    print(f"\nappend_event round trips ({backend.name}): {counts}")
    if backend.name == "cluster":  # app/user records in other slots: their own steps after
        assert counts["no delta"] == 1
        assert counts["session, app:, user: and temp: deltas"] == 3
    else:
        assert set(counts.values()) == {1}
    got = await fresh(service)
    assert got.state == {"s": 1, "app:a": 2, "user:u": 2}
    other = await service.create_session(app_name=APP, user_id=USER, session_id="s2")
    assert other.state == {"app:a": 2, "user:u": 2}


async def test_the_shared_records_made_by_the_script_are_whole_store_sessions(
    backend: Backend, make_astore: MakeStore
) -> None:
    events: list[Any] = []
    store = make_astore(ttl=300, lifecycle_hook=events.append)
    service = RedisSessionService(store)
    session = await service.create_session(app_name=APP, user_id=USER, session_id="s1")
    events.clear()
    await service.append_event(session, event(1, state={"app:a": 1, "user:u": 2}))
    for key in (service.keys.app(APP), service.keys.user(APP, USER)):
        record = await store.get(key)
        assert record.history == []
        assert await store.client.pttl(backend.schema.session(key).meta) > 200_000
    assert {e.type for e in events} <= {"create"}
    assert await service.get_user_state(app_name=APP, user_id=USER) == {"u": 2}


async def test_list_sessions_reads_the_index_not_a_scan(
    astore: AsyncRedisStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    service = RedisSessionService(astore)
    for user, sid in [("alice", "a1"), ("bob", "b1"), ("alice", "a2"), ("al", "x")]:
        await service.create_session(app_name=APP, user_id=user, session_id=sid)
    await service.create_session(app_name="other-app", user_id="alice", session_id="o1")
    await service.list_sessions(app_name=APP)  # builds the index once (see the next test)

    async def no_scan(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("list_sessions scanned the store's index")

    monkeypatch.setattr(astore, "list_sessions", no_scan)

    async def ids(user: str | None) -> list[str]:
        return sorted(
            s.id for s in (await service.list_sessions(app_name=APP, user_id=user)).sessions
        )

    assert await ids("alice") == ["a1", "a2"]  # not "al"'s, though its name begins alike
    assert await ids("al") == ["x"]
    assert await ids(None) == ["a1", "a2", "b1", "x"]
    await service.delete_session(app_name=APP, user_id="alice", session_id="a1")
    assert await ids("alice") == ["a2"]
    # gone behind the service's back (expiry, another tool): dropped from the list and index
    await astore.delete(service.keys.session(APP, "bob", "b1"))
    assert await ids(None) == ["a2", "x"]
    index = service.keys.index(astore.prefix, APP)
    client: Any = astore.client
    members = {bytes(m) for m in await client.zrange(index, 0, -1)}
    assert members == {b"!", b"alice/a2", b"al/x"}


async def test_sessions_made_before_the_index_are_indexed_on_first_listing(
    astore: AsyncRedisStore,
) -> None:
    service = RedisSessionService(astore)
    await service.create_session(app_name=APP, user_id="u", session_id="old1")
    await service.create_session(app_name=APP, user_id="u", session_id="old2")
    index = service.keys.index(astore.prefix, APP)
    await astore.client.delete(index)  # as an earlier version left them: no index
    await service.create_session(app_name=APP, user_id="u", session_id="new")
    listed = await service.list_sessions(app_name=APP, user_id="u")
    assert sorted(s.id for s in listed.sessions) == ["new", "old1", "old2"]
    assert await astore.client.zscore(index, "!") is not None


async def test_an_expired_session_is_not_listed(make_astore: MakeStore) -> None:
    store = make_astore(ttl=0.4)
    service = RedisSessionService(store)
    await service.create_session(app_name=APP, user_id=USER, session_id="short")
    await service.list_sessions(app_name=APP)
    deadline = time.monotonic() + 5
    while await service.get_session(app_name=APP, user_id=USER, session_id="short") is not None:
        assert time.monotonic() < deadline
        await asyncio.sleep(0.1)
    assert (await service.list_sessions(app_name=APP)).sessions == []
    index = service.keys.index(store.prefix, APP)
    client: Any = store.client
    assert [bytes(m) for m in await client.zrange(index, 0, -1)] == [b"!"]


async def test_tied_timestamps_come_back_ordered_by_id(astore: AsyncRedisStore) -> None:
    """As ADK's DatabaseSessionService reads them: by timestamp, then by event id."""
    service = RedisSessionService(astore)
    session = await service.create_session(app_name=APP, user_id=USER, session_id="s1")
    for n, id in [(1, "e-c"), (1, "e-a"), (1, "e-b"), (2, "e-z"), (2, "e-y")]:
        await service.append_event(session, event(n, id=id))
    got = await fresh(service)
    assert [e.id for e in got.events] == ["e-a", "e-b", "e-c", "e-y", "e-z"]

    async def recent(n: int, after: float | None = None) -> list[str]:
        config = GetSessionConfig(num_recent_events=n, after_timestamp=after)
        got = await service.get_session(app_name=APP, user_id=USER, session_id="s1", config=config)
        assert got is not None
        return [e.id for e in got.events]

    assert await recent(1) == ["e-z"]
    assert await recent(3) == ["e-c", "e-y", "e-z"]  # the tie at the edge cut by id
    assert await recent(4, after=T0 + 1) == ["e-b", "e-c", "e-y", "e-z"]


async def test_encrypted_store_keeps_its_path_and_refuses_stale_sessions(
    make_astore: MakeStore,
) -> None:
    store = make_astore(passphrase="adk secret", kdf_work=10)
    service = RedisSessionService(store)
    original = await service.create_session(
        app_name=APP, user_id=USER, session_id="s1", state={"app:a": 0}
    )
    await service.append_event(original, event(1, state={"s": 1, "user:u": 1, "app:a": 1}))
    updated = await fresh(service)
    await service.append_event(updated, event(2))
    with pytest.raises(StaleSessionError):
        await service.append_event(original, event(3))
    got = await fresh(service)
    assert [e.invocation_id for e in got.events] == ["inv-1", "inv-2"]
    assert got.state == {"s": 1, "user:u": 1, "app:a": 1}


async def test_an_app_never_listed_keeps_an_index_near_its_live_sessions(
    make_astore: MakeStore,
) -> None:
    # A TTL the 40 creates take well within, also on a slow machine and a cluster (with 0.5 s,
    # a CI run saw the first two expire and leave the index before the count: 38 == 40).
    short = RedisSessionService(make_astore(ttl=2))
    # its set-up (connections, a cluster's slots, the scripts' loads) paid before the 2 s
    await short.create_session(app_name="warm-up", user_id="u", session_id="w")
    for i in range(40):
        await short.create_session(app_name=APP, user_id="u", session_id=f"old{i}")
    index = short.keys.index(short.store.prefix, APP)
    client: Any = short.store.client
    assert await client.zcard(index) == 40
    assert 0 < await client.pttl(index) <= 2 * 2000 + short.store._core.options.grace_ms
    last = short.store._core.schema.session(short.keys.session(APP, "u", "old39")).meta
    deadline = time.monotonic() + 10
    while await client.exists(last):
        assert time.monotonic() < deadline
        await asyncio.sleep(0.1)
    service = RedisSessionService(make_astore())
    for i in range(40):
        await service.create_session(app_name=APP, user_id="u", session_id=f"new{i}")
    members = {bytes(m).decode() for m in await client.zrange(index, 0, -1)}
    assert {f"u/new{i}" for i in range(40)} <= members  # every live session stays indexed
    stale = members - {f"u/new{i}" for i in range(40)}
    assert len(stale) <= 10, stale  # a simulation of 2,000 such runs left at most 2
    listed = await service.list_sessions(app_name=APP)
    assert sorted(s.id for s in listed.sessions) == sorted(f"new{i}" for i in range(40))


async def test_a_listing_while_a_create_is_under_way_does_not_unlist_it(
    make_astore: MakeStore,
) -> None:
    creator, lister = RedisSessionService(make_astore()), RedisSessionService(make_astore())
    await lister.list_sessions(app_name=APP)  # the index is complete (its "!" member)
    real_create = creator.store.create
    seen: list[list[str]] = []

    async def create_after_a_listing(session: Any) -> Any:
        # between the creator's ZADD and its create: the listing finds the entry's session
        # missing and drops the entry
        seen.append([s.id for s in (await lister.list_sessions(app_name=APP)).sessions])
        return await real_create(session)

    creator.store.create = create_after_a_listing  # type: ignore[method-assign,assignment]
    await creator.create_session(app_name=APP, user_id=USER, session_id="racing")
    assert seen == [[]]
    listed = await lister.list_sessions(app_name=APP)
    assert [s.id for s in listed.sessions] == ["racing"]


async def test_a_prune_that_races_a_create_puts_the_entry_back(make_astore: MakeStore) -> None:
    service = RedisSessionService(make_astore())
    await service.list_sessions(app_name=APP)
    index = service.keys.index(service.store.prefix, APP)
    member = service.keys.member(USER, "late")
    client: Any = service.store.client
    await client.zadd(index, {member: 0})  # a creator's first ZADD; its create comes later
    real_send = service._send
    created = False

    async def create_between(request: Any) -> Any:
        nonlocal created
        reply = await real_send(request)
        if not created and any(c[0] == "ZREM" for c in request.commands):
            created = True  # the session appears between the removal and the check after it
            await service.store.create(StoreSession(key=service.keys.session(APP, USER, "late")))
        return reply

    service._send = create_between  # type: ignore[method-assign]
    await service._drop_gone(APP, [member])
    assert created and await client.zscore(index, member) is not None


async def test_the_index_of_an_app_without_creates_expires_and_is_rebuilt(
    make_astore: MakeStore,
) -> None:
    # Each append keeps the session alive for a TTL; a loop turn that stalls longer than one
    # (a loaded CI machine: 0.4 s was seen to, and a cluster run lost 1.2 s once) would let it
    # expire, so the TTL is 3 s.
    store = make_astore(ttl=3.0, expired_grace=0)
    service = RedisSessionService(store)
    # its set-up (connections, a cluster's slots, the scripts' loads) paid on another app, not
    # within the 1.2 s the first append must follow the create in
    warm = await service.create_session(app_name="warm-up", user_id=USER, session_id="w")
    await service.list_sessions(app_name="warm-up")
    await service.append_event(warm, event(1))
    session = await service.create_session(app_name=APP, user_id=USER, session_id="busy")
    await service.list_sessions(app_name=APP)  # complete: "!"
    index = service.keys.index(store.prefix, APP)
    client: Any = store.client
    deadline = time.monotonic() + 10
    n = 0
    while await client.exists(index):  # kept alive by its appends, not its index
        assert time.monotonic() < deadline
        n += 1
        await service.append_event(session, event(n))
        await asyncio.sleep(0.05)
    listed = await service.list_sessions(app_name=APP)
    assert [s.id for s in listed.sessions] == ["busy"]
    assert await client.zscore(index, "!") is not None
