"""``RedisSessionService`` against ADK's ``DatabaseSessionService`` rules that matter to
horizontally scaled workers: a worker appending to an outdated ``Session`` is refused with
ADK's ``StaleSessionError`` and writes nothing; events with tied timestamps come back in the
database service's order; ``list_sessions`` finds exactly the app's (or the user's) live
sessions. Two workers are two services over two stores (two clients) on the same backend."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import pytest
from google.adk.errors import StaleSessionError
from google.adk.events.event import Event
from google.adk.events.event_actions import EventActions
from google.adk.sessions import BaseSessionService, DatabaseSessionService
from google.adk.sessions.base_session_service import GetSessionConfig
from google.genai import types

from redis_session import AsyncRedisStore
from redis_session.integrations.adk import RedisSessionService

MakeStore = Callable[..., AsyncRedisStore]
APP, USER = "weather-app", "alice"
T0 = float(int(time.time()) + 100_000)
"""Event times: after every session's creation time (as a live worker's events are)."""


def event(n: float, *, event_id: str | None = None, state: dict[str, Any] | None = None) -> Event:
    extra = {} if event_id is None else {"id": event_id}
    return Event(
        invocation_id=f"inv-{n}",
        author="agent",
        content=types.Content(role="model", parts=[types.Part.from_text(text=f"message {n}")]),
        actions=EventActions(state_delta=dict(state or {})),
        timestamp=T0 + n,
        **extra,
    )


@pytest.fixture
def workers(make_astore: MakeStore) -> tuple[RedisSessionService, RedisSessionService]:
    """Two workers: each its own store and client, the same Redis and prefix."""
    return RedisSessionService(make_astore()), RedisSessionService(make_astore())


async def test_a_worker_with_an_older_session_is_refused_and_writes_nothing(
    workers: tuple[RedisSessionService, RedisSessionService],
) -> None:
    first, second = workers
    await first.create_session(app_name=APP, user_id=USER, session_id="s1", state={"k": 0})
    mine = await first.get_session(app_name=APP, user_id=USER, session_id="s1")
    theirs = await second.get_session(app_name=APP, user_id=USER, session_id="s1")
    assert mine is not None and theirs is not None
    won = event(1, state={"k": 1})
    await first.append_event(mine, won)
    assert mine.last_update_time == won.timestamp  # the caller's session follows the store

    late = event(2, state={"k": 2, "user:u": 2, "app:a": 2})
    with pytest.raises(StaleSessionError, match="modified in storage"):
        await second.append_event(theirs, late)
    stored = await first.get_session(app_name=APP, user_id=USER, session_id="s1")
    assert stored is not None
    assert stored.events == [won]
    assert stored.state == {"k": 1}  # neither session nor user: nor app: state changed
    assert await first.get_user_state(app_name=APP, user_id=USER) == {}
    assert stored.last_update_time == won.timestamp

    # The refused worker reloads and goes on; the first one is now the outdated one.
    theirs = await second.get_session(app_name=APP, user_id=USER, session_id="s1")
    assert theirs is not None
    await second.append_event(theirs, late)
    assert theirs.last_update_time == late.timestamp
    with pytest.raises(StaleSessionError):
        await first.append_event(mine, event(3))
    stored = await second.get_session(app_name=APP, user_id=USER, session_id="s1")
    assert stored is not None
    assert stored.events == [won, late]
    assert stored.state == {"k": 2, "user:u": 2, "app:a": 2}


async def test_one_session_object_keeps_appending(
    workers: tuple[RedisSessionService, RedisSessionService],
) -> None:
    first, second = workers
    session = await first.create_session(app_name=APP, user_id=USER, session_id="s1")
    for n in range(5):  # the service sets last_update_time after each append
        await (first if n % 2 else second).append_event(session, event(n))
        assert session.last_update_time == T0 + n
    stored = await first.get_session(app_name=APP, user_id=USER, session_id="s1")
    assert stored is not None
    assert [e.timestamp - T0 for e in stored.events] == [0, 1, 2, 3, 4]
    assert stored.last_update_time == session.last_update_time


async def test_two_concurrent_workers_on_one_revision_exactly_one_wins(
    workers: tuple[RedisSessionService, RedisSessionService],
) -> None:
    first, second = workers
    await first.create_session(app_name=APP, user_id=USER, session_id="s1")
    for attempt in range(10):
        copies = await asyncio.gather(
            first.get_session(app_name=APP, user_id=USER, session_id="s1"),
            second.get_session(app_name=APP, user_id=USER, session_id="s1"),
        )
        ours = [event(10 * attempt + 1, state={"w": 1}), event(10 * attempt + 2, state={"w": 2})]
        results = await asyncio.gather(
            *(
                service.append_event(copy, ev)
                for service, copy, ev in zip(workers, copies, ours, strict=True)
                if copy is not None
            ),
            return_exceptions=True,
        )
        refused = [r for r in results if isinstance(r, StaleSessionError)]
        landed = [r for r in results if isinstance(r, Event)]
        assert len(refused) == 1 and len(landed) == 1, results
        stored = await first.get_session(app_name=APP, user_id=USER, session_id="s1")
        assert stored is not None
        assert stored.events[-1] == landed[0]
        assert stored.state["w"] == landed[0].actions.state_delta["w"]
    assert stored is not None and len(stored.events) == 10


async def test_a_retried_append_is_not_taken_for_a_stale_writer(
    workers: tuple[RedisSessionService, RedisSessionService],
) -> None:
    """The reply of a stored append was lost: the caller's session object was not updated,
    and the same event sent again (by another worker) changes nothing and is not refused."""
    first, second = workers
    await first.create_session(app_name=APP, user_id=USER, session_id="s1")
    session = await first.get_session(app_name=APP, user_id=USER, session_id="s1")
    assert session is not None
    before = session.model_copy(deep=True)
    ev = event(1, state={"user:visits": 1})
    await first.append_event(session, ev)
    await second.append_event(before, ev.model_copy(deep=True))
    stored = await first.get_session(app_name=APP, user_id=USER, session_id="s1")
    assert stored is not None
    assert stored.events == [ev]


async def test_a_deleted_session_is_not_found_not_stale(
    workers: tuple[RedisSessionService, RedisSessionService],
) -> None:
    from google.adk.errors.session_not_found_error import SessionNotFoundError

    first, second = workers
    session = await first.create_session(app_name=APP, user_id=USER, session_id="s1")
    await second.delete_session(app_name=APP, user_id=USER, session_id="s1")
    with pytest.raises(SessionNotFoundError):
        await first.append_event(session, event(1))


TIED = [  # (timestamp offset, event id), in append order
    (1, "m"),
    (2, "c"),
    (2, "a"),
    (2, "b"),
    (3, "z"),
    (3, "y"),
]


async def _ties(service: BaseSessionService) -> list[tuple[str, GetSessionConfig | None, Any]]:
    session = await service.create_session(app_name=APP, user_id=USER, session_id="tie")
    for n, event_id in TIED:
        await service.append_event(session, event(n, event_id=event_id))
    configs: list[GetSessionConfig | None] = [
        None,
        *(GetSessionConfig(num_recent_events=k) for k in range(1, 7)),
        GetSessionConfig(after_timestamp=T0 + 2),
        GetSessionConfig(after_timestamp=T0 + 2, num_recent_events=2),
        GetSessionConfig(after_timestamp=T0 + 3, num_recent_events=1),
    ]
    found = []
    for config in configs:
        got = await service.get_session(app_name=APP, user_id=USER, session_id="tie", config=config)
        assert got is not None
        found.append((repr(config), config, [e.id for e in got.events]))
    return found


async def test_tied_timestamps_come_back_as_the_database_service_orders_them(
    make_astore: MakeStore,
) -> None:
    """ADK's DatabaseSessionService (SQLite, in memory) is the reference: by timestamp, ties
    by event id, ``num_recent_events`` the newest in that order, also at a tie."""
    database = DatabaseSessionService("sqlite+aiosqlite:///:memory:")
    try:
        expected = await _ties(database)
    finally:
        await database.close()
    assert expected[0][2] == ["m", "a", "b", "c", "y", "z"]
    assert expected[2][2] == ["y", "z"]  # num_recent_events=2
    assert expected[4][2] == ["b", "c", "y", "z"]  # num_recent_events=4 cuts inside the tie
    got = await _ties(RedisSessionService(make_astore()))
    assert [(name, ids) for name, _, ids in got] == [(name, ids) for name, _, ids in expected]


async def test_tied_timestamps_across_a_long_history(make_astore: MakeStore) -> None:
    """A tie wider than the first page of an ``after_timestamp`` read, and at the edge of a
    ``num_recent_events`` window."""
    service = RedisSessionService(make_astore())
    session = await service.create_session(app_name=APP, user_id=USER, session_id="s1")
    ids = [f"e{i:02d}" for i in range(40)]
    for event_id in reversed(ids):  # 40 events at one timestamp, appended in reverse id order
        await service.append_event(session, event(1, event_id=event_id))
    await service.append_event(session, event(2, event_id="last"))
    for config, want in (
        (None, [*ids, "last"]),
        (GetSessionConfig(num_recent_events=3), ["e38", "e39", "last"]),
        (GetSessionConfig(after_timestamp=T0 + 1), [*ids, "last"]),
        (GetSessionConfig(after_timestamp=T0 + 1, num_recent_events=5), [*ids[-4:], "last"]),
    ):
        got = await service.get_session(app_name=APP, user_id=USER, session_id="s1", config=config)
        assert got is not None
        assert [e.id for e in got.events] == want, config


async def test_list_sessions_filters_by_app_and_user_and_drops_deleted(
    workers: tuple[RedisSessionService, RedisSessionService],
) -> None:
    first, second = workers
    made = [  # names that share beginnings or hold separators must not leak into each other
        ("app", "alice", "s1"),
        ("app", "alice", "s2"),
        ("app", "alice2", "s1"),
        ("app", "al", "s3"),
        ("app", "a/b", "s4"),
        ("app2", "alice", "s1"),
        ("ap", "alice", "s1"),
        ("app/x", "alice", "s5"),
    ]
    for n, (app, user, sid) in enumerate(made):
        service = first if n % 2 else second
        await service.create_session(app_name=app, user_id=user, session_id=sid)

    async def ids(service: RedisSessionService, app: str, user: str | None) -> set[tuple[str, str]]:
        listed = await service.list_sessions(app_name=app, user_id=user)
        assert all(s.app_name == app and not s.events for s in listed.sessions)
        return {(s.user_id, s.id) for s in listed.sessions}

    for service in workers:
        assert await ids(service, "app", None) == {
            ("alice", "s1"),
            ("alice", "s2"),
            ("alice2", "s1"),
            ("al", "s3"),
            ("a/b", "s4"),
        }
        assert await ids(service, "app", "alice") == {("alice", "s1"), ("alice", "s2")}
        assert await ids(service, "app", "al") == {("al", "s3")}
        assert await ids(service, "app", "a") == set()
        assert await ids(service, "app2", None) == {("alice", "s1")}
        assert await ids(service, "ap", "alice") == {("alice", "s1")}
        assert await ids(service, "app/x", None) == {("alice", "s5")}
        assert await ids(service, "nobody", None) == set()

    await first.delete_session(app_name="app", user_id="alice", session_id="s1")
    await second.delete_session(app_name="app", user_id="al", session_id="s3")
    for service in workers:
        assert await ids(service, "app", None) == {("alice", "s2"), ("alice2", "s1"), ("a/b", "s4")}
        assert await ids(service, "app", "alice") == {("alice", "s2")}
        assert await ids(service, "app", "al") == set()

    # Recreated after deletion: listed again, once.
    await second.create_session(app_name="app", user_id="alice", session_id="s1")
    listed = await first.list_sessions(app_name="app", user_id="alice")
    assert sorted(s.id for s in listed.sessions) == ["s1", "s2"]
