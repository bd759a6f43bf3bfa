"""``RedisSessionService`` driven through Google ADK's public API: the session service methods
with real ``Event`` / ``EventActions`` objects, compared with ADK's own
``InMemorySessionService``, and a ``Runner`` over a scripted ``BaseLlm`` (no network), on every
backend."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, Callable
from typing import Any

import pytest
from google.adk.agents import LlmAgent
from google.adk.errors._stale_session_error import StaleSessionError
from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.errors.session_not_found_error import SessionNotFoundError
from google.adk.events.event import Event
from google.adk.events.event_actions import EventActions
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import Runner
from google.adk.sessions import BaseSessionService, InMemorySessionService
from google.adk.sessions.base_session_service import GetSessionConfig
from google.adk.sessions.session import Session as AdkSession
from google.genai import types
from pydantic import Field

from redis_session import AsyncRedisStore, Message
from redis_session import Session as StoreSession
from redis_session.integrations.adk import AdkKeys, RedisSessionService
from tests.conftest import Backend
from tests.integrations.conftest import RoundTrips

MakeStore = Callable[..., AsyncRedisStore]
APP, USER = "weather-app", "alice"
T0 = 1_700_000_000.0


def text(role: str, value: str) -> types.Content:
    return types.Content(role=role, parts=[types.Part.from_text(text=value)])


def event(n: int, *, author: str = "agent", state: dict[str, Any] | None = None) -> Event:
    return Event(
        invocation_id=f"inv-{n // 2}",
        author=author,
        content=text("user" if author == "user" else "model", f"message {n}"),
        actions=EventActions(state_delta=dict(state or {})),
        timestamp=T0 + n,
    )


def rich_event() -> Event:
    """An event using many of ADK's fields."""
    call = types.Part.from_function_call(name="weather", args={"city": "Paris", "days": [1, 2]})
    return Event(
        invocation_id="inv-rich",
        author="forecaster",
        branch="root.forecaster",
        content=types.Content(role="model", parts=[types.Part.from_text(text="é ✓"), call]),
        actions=EventActions(
            state_delta={"k": {"nested": [1, 2.5, None, True]}, "app:n": 1, "user:u": "x"},
            artifact_delta={"report.pdf": 3},
            transfer_to_agent="planner",
            escalate=True,
            skip_summarization=True,
        ),
        long_running_tool_ids={"call-2", "call-1"},
        custom_metadata={"trace": "abc"},
        turn_complete=True,
        timestamp=T0 + 0.123456,
    )


@pytest.fixture
def service(astore: AsyncRedisStore) -> RedisSessionService:
    return RedisSessionService(astore)


def test_is_a_base_session_service(service: RedisSessionService) -> None:
    assert isinstance(service, BaseSessionService)


async def test_create_and_get_merge_scoped_state(service: RedisSessionService) -> None:
    state = {"topic": "weather", "app:units": "metric", "user:lang": "en", "temp:scratch": 1}
    created = await service.create_session(app_name=APP, user_id=USER, state=state, session_id="s1")
    merged = {"topic": "weather", "app:units": "metric", "user:lang": "en"}
    assert (created.id, created.app_name, created.user_id) == ("s1", APP, USER)
    assert created.state == merged
    assert created.events == []
    got = await service.get_session(app_name=APP, user_id=USER, session_id="s1")
    assert got is not None
    assert got.state == merged
    assert got.last_update_time == created.last_update_time

    # user: state is shared by the user's sessions, app: state by the whole app
    other = await service.create_session(app_name=APP, user_id=USER)
    assert other.state == {"app:units": "metric", "user:lang": "en"}
    bob = await service.create_session(app_name=APP, user_id="bob")
    assert bob.state == {"app:units": "metric"}
    elsewhere = await service.create_session(app_name="other-app", user_id=USER)
    assert elsewhere.state == {}
    assert await service.get_user_state(app_name=APP, user_id=USER) == {"lang": "en"}
    assert await service.get_user_state(app_name=APP, user_id="nobody") == {}


async def test_session_ids(service: RedisSessionService) -> None:
    generated = await service.create_session(app_name=APP, user_id=USER, session_id="  ")
    assert len(generated.id) == 36  # a UUID
    padded = await service.create_session(app_name=APP, user_id=USER, session_id=" s2 ")
    assert padded.id == "s2"
    assert await service.get_session(app_name=APP, user_id=USER, session_id="s2 ") is not None
    assert await service.get_session(app_name=APP, user_id=USER, session_id="nope") is None
    assert await service.get_session(app_name=APP, user_id="bob", session_id="s2") is None


async def test_names_never_collide(service: RedisSessionService) -> None:
    """Separators and escapes in names stay inside their part of the key."""
    pairs = [("a/b", "c"), ("a", "b/c"), ("a%2Fb", "c"), ("a:child:x", "c"), ("ü{}", "")]
    for n, (app, user) in enumerate(pairs):
        await service.create_session(
            app_name=app, user_id=user, session_id="s", state={"n": n, "user:n": n}
        )
    for n, (app, user) in enumerate(pairs):
        got = await service.get_session(app_name=app, user_id=user, session_id="s")
        assert got is not None
        assert got.state == {"n": n, "user:n": n}
        listed = await service.list_sessions(app_name=app)
        assert [(s.app_name, s.user_id) for s in listed.sessions] == [(app, user)]
    keys = AdkKeys()
    assert keys.session("a/b", "c", "s") != keys.session("a", "b/c", "s")


async def test_duplicate_id_is_refused_and_one_concurrent_creator_wins(
    make_astore: MakeStore,
) -> None:
    services = [RedisSessionService(make_astore()) for _ in range(5)]
    await services[0].create_session(app_name=APP, user_id=USER, session_id="s1")
    with pytest.raises(AlreadyExistsError):
        await services[1].create_session(app_name=APP, user_id=USER, session_id="s1")

    async def create(service: RedisSessionService, n: int) -> int | None:
        try:
            await service.create_session(
                app_name=APP, user_id=USER, session_id="race", state={"winner": n}
            )
        except AlreadyExistsError:
            return None
        return n

    results = await asyncio.wait_for(
        asyncio.gather(*(create(s, n) for n, s in enumerate(services))), timeout=30
    )
    winners = [n for n in results if n is not None]
    assert len(winners) == 1
    got = await services[0].get_session(app_name=APP, user_id=USER, session_id="race")
    assert got is not None
    assert got.state == {"winner": winners[0]}


async def test_events_round_trip_losslessly(service: RedisSessionService) -> None:
    session = await service.create_session(app_name=APP, user_id=USER, session_id="s1")
    original = rich_event()
    stored = original.model_copy(deep=True)
    returned = await service.append_event(session, stored)
    assert returned is stored
    assert session.events == [stored]
    assert session.last_update_time == original.timestamp
    got = await service.get_session(app_name=APP, user_id=USER, session_id="s1")
    assert got is not None
    assert got.events == [original]
    assert got.events[0].long_running_tool_ids == {"call-1", "call-2"}
    assert got.last_update_time == original.timestamp
    assert got.state == {"k": {"nested": [1, 2.5, None, True]}, "app:n": 1, "user:u": "x"}


async def test_store_view_of_an_event(
    service: RedisSessionService, astore: AsyncRedisStore
) -> None:
    session = await service.create_session(app_name=APP, user_id=USER, session_id="s1")
    ev = rich_event()
    await service.append_event(session, ev)
    await service.append_event(session, event(1, author="user"))
    [first, second] = await astore.get_history(service.keys.session(APP, USER, "s1"))
    assert (first.id, first.author, first.role.value) == (ev.id, "forecaster", "assistant")
    assert first.timestamp.timestamp() == pytest.approx(ev.timestamp)
    assert Event.model_validate_json(first.content) == ev
    assert (second.author, second.role.value) == ("user", "user")


async def test_temp_state_is_never_stored(service: RedisSessionService) -> None:
    session = await service.create_session(app_name=APP, user_id=USER, session_id="s1")
    ev = event(1, state={"temp:step": 3, "kept": True})
    await service.append_event(session, ev)
    assert session.state["temp:step"] == 3  # later agents of this invocation see it
    assert ev.actions.state_delta == {"kept": True}
    got = await service.get_session(app_name=APP, user_id=USER, session_id="s1")
    assert got is not None
    assert got.state == {"kept": True}
    assert got.events[0].actions.state_delta == {"kept": True}


async def test_partial_events_are_not_stored(service: RedisSessionService) -> None:
    session = await service.create_session(app_name=APP, user_id=USER, session_id="s1")
    ev = event(1, state={"x": 1})
    ev.partial = True
    assert await service.append_event(session, ev) is ev
    got = await service.get_session(app_name=APP, user_id=USER, session_id="s1")
    assert got is not None
    assert (got.events, got.state) == ([], {})


async def test_append_to_a_missing_session_raises(service: RedisSessionService) -> None:
    ghost = AdkSession(id="ghost", app_name=APP, user_id=USER)
    with pytest.raises(SessionNotFoundError):
        await service.append_event(ghost, event(1, state={"x": 1}))
    assert await service.get_session(app_name=APP, user_id=USER, session_id="ghost") is None


async def test_a_retried_append_is_stored_once(service: RedisSessionService) -> None:
    session = await service.create_session(app_name=APP, user_id=USER, session_id="s1")
    ev = event(1, state={"user:visits": 1})
    await service.append_event(session, ev)
    retry = await service.get_session(app_name=APP, user_id=USER, session_id="s1")
    assert retry is not None
    await service.append_event(retry, ev.model_copy(deep=True))
    got = await service.get_session(app_name=APP, user_id=USER, session_id="s1")
    assert got is not None
    assert got.events == [ev]


async def test_matches_adk_in_memory_service(service: RedisSessionService) -> None:
    """The same calls on ADK's InMemorySessionService and on Redis give the same answers."""
    reference = InMemorySessionService()
    both: list[BaseSessionService] = [reference, service]
    initial = {"a": 0, "app:version": 1, "user:name": "Alice", "temp:x": 1}
    sessions = [
        await s.create_session(app_name=APP, user_id=USER, session_id="s1", state=initial)
        for s in both
    ]
    deltas: list[dict[str, Any]] = [
        {"a": 1},
        {"user:name": "Al", "temp:y": 2},
        {},
        {"app:version": 2, "b": [1, "two"]},
        {"a": None},
    ]
    for n in range(30):
        ev = event(n, author="user" if n % 2 == 0 else "agent", state=deltas[n % 5])
        for s, session in zip(both, sessions, strict=True):
            await s.append_event(session, ev.model_copy(deep=True))
    configs = [
        None,
        GetSessionConfig(num_recent_events=0),
        GetSessionConfig(num_recent_events=1),
        GetSessionConfig(num_recent_events=7),
        GetSessionConfig(num_recent_events=100),
        GetSessionConfig(after_timestamp=T0 + 25),
        GetSessionConfig(after_timestamp=T0 + 3.5),
        GetSessionConfig(after_timestamp=T0 - 1),
        GetSessionConfig(after_timestamp=T0 + 99),
        GetSessionConfig(num_recent_events=4, after_timestamp=T0 + 20),
        GetSessionConfig(num_recent_events=20, after_timestamp=T0 + 20),
    ]
    for config in configs:
        ref, got = [
            await s.get_session(app_name=APP, user_id=USER, session_id="s1", config=config)
            for s in both
        ]
        assert ref is not None
        assert got is not None
        assert got.events == ref.events, config
        assert got.state == ref.state
        assert got.last_update_time == ref.last_update_time == T0 + 29
    assert await service.get_user_state(
        app_name=APP, user_id=USER
    ) == await reference.get_user_state(app_name=APP, user_id=USER)


async def test_recent_events_are_read_without_the_whole_history(
    service: RedisSessionService, astore: AsyncRedisStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = await service.create_session(app_name=APP, user_id=USER, session_id="s1")
    events = [event(n) for n in range(300)]
    await astore.append_messages(
        service.keys.session(APP, USER, "s1"),
        [Message(role="assistant", content=e.model_dump_json(), id=e.id) for e in events],
    )
    session.events = []
    reads: list[tuple[str, int | None]] = []
    real_get, real_history = astore.get, astore.get_history

    async def get_spy(key: str, last: int | None = None) -> StoreSession:
        if key == service.keys.session(APP, USER, "s1"):
            reads.append(("get", last))
        return await real_get(key, last)

    async def history_spy(key: str, last: int | None = None) -> list[Message]:
        reads.append(("history", last))
        return await real_history(key, last)

    monkeypatch.setattr(astore, "get", get_spy)
    monkeypatch.setattr(astore, "get_history", history_spy)

    async def get(config: GetSessionConfig) -> list[Event]:
        reads.clear()
        got = await service.get_session(app_name=APP, user_id=USER, session_id="s1", config=config)
        assert got is not None
        return got.events

    assert await get(GetSessionConfig(num_recent_events=3)) == events[-3:]
    # the session and its 3 newest events, and one more to see a tie at the edge: one snapshot
    assert reads == [("get", 4)]
    assert await get(GetSessionConfig(after_timestamp=T0 + 295)) == events[295:]
    assert reads == [("get", 16)]
    assert await get(GetSessionConfig(after_timestamp=T0 + 250)) == events[250:]
    # newest-first pages, doubling: at most twice what is needed
    assert reads == [("get", 16), ("history", 32), ("history", 64)]
    both = GetSessionConfig(num_recent_events=5, after_timestamp=T0 + 10)
    assert await get(both) == events[-5:]
    assert reads == [("get", 6)]
    assert await get(GetSessionConfig(num_recent_events=0)) == []
    assert reads == [("get", 0)]


async def test_list_sessions(service: RedisSessionService) -> None:
    made = {}
    for user, sid in [("alice", "a1"), ("bob", "b1"), ("alice", "a2")]:
        made[sid] = await service.create_session(
            app_name=APP, user_id=user, session_id=sid, state={"sid": sid, f"user:{user}": 1}
        )
    await service.create_session(app_name="other-app", user_id="alice", session_id="x")
    for n, sid in enumerate(["a2", "b1", "a1"]):  # a1 becomes the most recently updated
        await service.append_event(made[sid], event(n, state={"app:last": sid}))

    everyone = (await service.list_sessions(app_name=APP)).sessions
    assert [s.id for s in everyone] == ["a2", "b1", "a1"]  # oldest update first
    assert all(s.events == [] for s in everyone)
    assert [s.last_update_time for s in everyone] == [T0, T0 + 1, T0 + 2]
    assert everyone[0].state == {"sid": "a2", "user:alice": 1, "app:last": "a1"}
    assert everyone[1].state == {"sid": "b1", "user:bob": 1, "app:last": "a1"}
    alice = (await service.list_sessions(app_name=APP, user_id="alice")).sessions
    assert [s.id for s in alice] == ["a2", "a1"]
    assert (await service.list_sessions(app_name=APP, user_id="carol")).sessions == []
    assert (await service.list_sessions(app_name="nothing")).sessions == []

    await service.delete_session(app_name=APP, user_id="bob", session_id="b1")
    assert [s.id for s in (await service.list_sessions(app_name=APP)).sessions] == ["a2", "a1"]


async def test_delete_session(service: RedisSessionService, astore: AsyncRedisStore) -> None:
    session = await service.create_session(
        app_name=APP, user_id=USER, session_id="s1", state={"k": 1, "user:kept": True}
    )
    await service.append_event(session, event(1))
    await service.delete_session(app_name=APP, user_id=USER, session_id="s1")
    await service.delete_session(app_name=APP, user_id=USER, session_id="s1")  # idempotent
    assert await service.get_session(app_name=APP, user_id=USER, session_id="s1") is None
    assert await astore.list_sessions() != []  # the user's shared state stays
    fresh = await service.create_session(app_name=APP, user_id=USER, session_id="s1")
    assert fresh.state == {"user:kept": True}
    got = await service.get_session(app_name=APP, user_id=USER, session_id="s1")
    assert got is not None
    assert got.events == []


async def test_a_recreated_session_starts_without_events(
    service: RedisSessionService, astore: AsyncRedisStore
) -> None:
    session = await service.create_session(app_name=APP, user_id=USER, session_id="s1")
    await service.append_event(session, event(1))
    await astore.delete(service.keys.session(APP, USER, "s1"))
    await service.create_session(app_name=APP, user_id=USER, session_id="s1")
    got = await service.get_session(app_name=APP, user_id=USER, session_id="s1")
    assert got is not None
    assert got.events == []


async def test_any_event_id_is_kept(service: RedisSessionService) -> None:
    """Ids a store message id cannot hold (spaces, quotes, 200 chars) map to a stable one."""
    session = await service.create_session(app_name=APP, user_id=USER, session_id="s1")
    odd = [event(n) for n in range(3)]
    for ev, new_id in zip(odd, ['with space "quoted"', "x" * 200, "ünïcode"], strict=True):
        ev.id = new_id
        await service.append_event(session, ev)
        await service.append_event(session, ev.model_copy(deep=True))  # a retry: stored once
    got = await service.get_session(app_name=APP, user_id=USER, session_id="s1")
    assert got is not None
    assert got.events == odd


async def test_state_values_are_stored_as_json(
    service: RedisSessionService, caplog: pytest.LogCaptureFixture
) -> None:
    """JSON values round-trip; others are stored as their repr, with a warning (as ADK's own
    persistent services do)."""
    values = {"int": 1, "float": 2.5, "list": [1, "a", None], "dict": {"k": {"n": True}}}
    unserializable = object()
    session = await service.create_session(
        app_name=APP, user_id=USER, session_id="s1", state=values
    )
    with caplog.at_level("WARNING"):
        await service.append_event(session, event(1, state={"odd": unserializable}))
    assert "odd" in caplog.text
    got = await service.get_session(app_name=APP, user_id=USER, session_id="s1")
    assert got is not None
    assert got.state == {**values, "odd": repr(unserializable)}


@pytest.mark.timeout(60)
async def test_concurrent_appends_keep_every_event_and_state_key(make_astore: MakeStore) -> None:
    services = [RedisSessionService(make_astore()) for _ in range(6)]
    await services[0].create_session(app_name=APP, user_id=USER, session_id="s1")

    refused = 0

    async def work(w: int) -> None:
        nonlocal refused
        service = services[w]
        for n in range(10):
            state = {f"w{w}": n, f"user:w{w}": n, f"app:w{w}": n}
            while True:  # what an ADK worker does on StaleSessionError: reload, try again
                session = await service.get_session(app_name=APP, user_id=USER, session_id="s1")
                assert session is not None
                try:
                    await service.append_event(session, event(100 * w + n, state=state))
                    break
                except StaleSessionError:
                    refused += 1

    await asyncio.wait_for(asyncio.gather(*(work(w) for w in range(6))), timeout=50)
    got = await services[0].get_session(app_name=APP, user_id=USER, session_id="s1")
    assert got is not None
    assert sorted(e.timestamp - T0 for e in got.events) == [
        100 * w + n for w in range(6) for n in range(10)
    ]
    assert len({e.id for e in got.events}) == 60
    for w in range(6):
        assert got.state[f"w{w}"] == got.state[f"user:w{w}"] == got.state[f"app:w{w}"] == 9
    print(f"\nstale refusals: {refused}")


async def _near_expiry(client: Any, meta: str, *others: str) -> None:
    """Bring a record's tree to 5 s before its deadline (its meta field x and the TTLs)."""
    await client.hset(meta, "x", int(time.time() * 1000) + 5_000)
    for name in (meta, *others):
        assert await client.pexpire(name, 5_000)


async def test_append_event_refreshes_shared_state_ttl(
    backend: Backend, make_astore: MakeStore
) -> None:
    store = make_astore(ttl=300)
    service = RedisSessionService(store)
    session = await service.create_session(
        app_name=APP, user_id=USER, session_id="s1", state={"user:a": 1, "app:b": 2}
    )
    shared = [backend.schema.session(k).meta for k in (service.keys.user(APP, USER),)]
    shared.append(backend.schema.session(service.keys.app(APP)).meta)
    client: Any = store.client
    for name in shared:
        await _near_expiry(client, name)
    await service.append_event(session, event(1))  # no app: or user: delta
    for name in shared:
        assert await client.pttl(name) > 200_000


async def test_round_trips_per_call(
    backend: Backend, service: RedisSessionService, round_trips: RoundTrips
) -> None:
    """Printed with -s; the assertions pin the counts the module docstring states."""
    session = await service.create_session(app_name=APP, user_id=USER, session_id="s1")
    # Warm-up: scripts loaded, connections opened (the pool opens one per concurrent call).
    await service.append_event(session, event(0, state={"user:a": 1, "app:b": 1, "s": 0}))
    await service.get_session(app_name=APP, user_id=USER, session_id="s1")
    counts = {}
    round_trips.reset()
    await service.append_event(session, event(1))
    counts["append_event"] = round_trips.count
    round_trips.reset()
    await service.append_event(session, event(2, state={"s": 1, "user:a": 2, "app:b": 2}))
    counts["append_event with app/user/session deltas"] = round_trips.count
    round_trips.reset()
    await service.get_session(
        app_name=APP, user_id=USER, session_id="s1", config=GetSessionConfig(num_recent_events=2)
    )
    counts["get_session(num_recent_events=2)"] = round_trips.count
    print(f"\nround trips: {counts}")
    assert counts["append_event"] == 1  # event, state and last_update_time: one script
    # one script on a server; on a cluster (app and user state in other slots) then 2 at once
    shared = 3 if backend.name == "cluster" else 1
    assert counts["append_event with app/user/session deltas"] == shared
    assert counts["get_session(num_recent_events=2)"] == 3  # 3 reads, one concurrent batch


class ScriptedLlm(BaseLlm):
    """A fake model: answers from a script, records every request (no network)."""

    model: str = "scripted"
    replies: list[types.Content] = Field(default_factory=list)
    requests: list[LlmRequest] = Field(default_factory=list)

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        self.requests.append(llm_request)
        yield LlmResponse(content=self.replies.pop(0))


def weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


async def test_runner_keeps_sessions_in_redis(make_astore: MakeStore) -> None:
    call = types.Part.from_function_call(name="weather", args={"city": "Paris"})
    llm = ScriptedLlm(
        replies=[
            types.Content(role="model", parts=[call]),
            text("model", "It is sunny."),
            text("model", "Still sunny."),
        ]
    )
    agent = LlmAgent(
        name="forecaster", model=llm, instruction="be brief", tools=[weather], output_key="last"
    )
    first = RedisSessionService(make_astore())
    session = await first.create_session(app_name=APP, user_id=USER, state={"user:lang": "en"})
    runner = Runner(app_name=APP, agent=agent, session_service=first)
    replies = [
        e.content.parts[0].text
        async for e in runner.run_async(
            user_id=USER, session_id=session.id, new_message=text("user", "Weather in Paris?")
        )
        if e.content and e.content.parts and e.content.parts[0].text
    ]
    assert replies == ["It is sunny."]

    # A second worker, with its own client, continues the conversation from Redis alone.
    second = RedisSessionService(make_astore())
    runner = Runner(app_name=APP, agent=agent, session_service=second)
    async for _ in runner.run_async(
        user_id=USER, session_id=session.id, new_message=text("user", "And now?")
    ):
        pass
    contents = llm.requests[-1].contents
    assert [c.role for c in contents] == ["user", "model", "user", "model", "user"]
    assert contents[0].parts is not None
    assert contents[0].parts[0].text == "Weather in Paris?"

    got = await first.get_session(app_name=APP, user_id=USER, session_id=session.id)
    assert got is not None
    assert got.state == {"last": "Still sunny.", "user:lang": "en"}
    assert [e.author for e in got.events] == ["user", *["forecaster"] * 3, "user", "forecaster"]
    response = got.events[2].get_function_responses()[0]
    assert response.response == {"result": "sunny in Paris"}
    assert got.last_update_time == got.events[-1].timestamp
    assert time.time() - got.last_update_time < 60
