"""Property tests: whatever JSON a framework hands over comes back equal (hypothesis, on
fakeredis): OpenAI Agents items (any code point, lone surrogates included; session ids are store
keys, so valid Unicode), and for ADK (whose pydantic serializer refuses lone surrogates: any
other code point) state of every scope, event text and ids, app, user and session names."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from google.adk.events.event import Event
from google.adk.events.event_actions import EventActions
from google.genai import types
from hypothesis import given, settings
from hypothesis import strategies as st

from redis_session import AsyncRedisStore
from redis_session.integrations.adk import RedisSessionService
from redis_session.integrations.openai_agents import RedisAgentSession

FUZZ = settings(max_examples=60, deadline=None)
any_text = st.text(  # every code point, NUL and lone surrogates included
    alphabet=st.characters(min_codepoint=0, blacklist_categories=()), max_size=30
)
unicode_text = st.text(alphabet=st.characters(min_codepoint=0, codec="utf-8"), max_size=30)


def json_values(text: st.SearchStrategy[str]) -> st.SearchStrategy[Any]:
    return st.recursive(
        st.none()
        | st.booleans()
        | st.integers(min_value=-(2**63), max_value=2**63 - 1)
        | st.floats(allow_nan=False, allow_infinity=False)
        | text,
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(text, inner, max_size=4),
        max_leaves=12,
    )


def store() -> AsyncRedisStore:
    return AsyncRedisStore.from_url("memory://", prefix=f"fz{uuid.uuid4().hex[:8]}:")


@FUZZ
@given(
    items=st.lists(
        st.dictionaries(any_text, json_values(any_text), max_size=5), min_size=1, max_size=5
    ),
    session_id=unicode_text.filter(bool),
)
def test_agent_items_round_trip(items: list[dict[str, Any]], session_id: str) -> None:
    async def run() -> None:
        async with store() as s:
            session = RedisAgentSession(session_id, s)
            await session.add_items(items)  # type: ignore[arg-type]
            assert await session.get_items() == items
            assert await session.get_items(limit=1) == items[-1:]
            assert await session.pop_item() == items[-1]
            assert await session.get_items() == items[:-1]

    asyncio.run(run())


state_keys = unicode_text.filter(lambda k: not k.startswith(("app:", "user:", "temp:")))


@FUZZ
@given(
    names=st.tuples(unicode_text, unicode_text, unicode_text.map(str.strip).filter(bool)),
    state=st.dictionaries(state_keys, json_values(unicode_text), max_size=4),
    delta=st.dictionaries(
        st.sampled_from(["", "app:", "user:", "temp:"]).flatmap(
            lambda scope: unicode_text.map(lambda k: scope + k)
        ),
        json_values(unicode_text),
        max_size=6,
    ),
    words=unicode_text,
    event_id=unicode_text.filter(bool),
)
def test_adk_state_and_events_round_trip(
    names: tuple[str, str, str],
    state: dict[str, Any],
    delta: dict[str, Any],
    words: str,
    event_id: str,
) -> None:
    app, user, session_id = names

    async def run() -> None:
        async with store() as s:
            service = RedisSessionService(s)
            session = await service.create_session(
                app_name=app, user_id=user, session_id=session_id, state=state
            )
            ev = Event(
                id=event_id,
                invocation_id="inv",
                author="user",
                content=types.Content(role="user", parts=[types.Part(text=words)]),
                actions=EventActions(state_delta=dict(delta)),
            )
            await service.append_event(session, ev)
            got = await service.get_session(app_name=app, user_id=user, session_id=session_id)
            assert got is not None
            assert got.events == [ev]
            expected = {**state, **{k: v for k, v in delta.items() if not k.startswith("temp:")}}
            assert got.state == expected
            listed = await service.list_sessions(app_name=app, user_id=user)
            assert [(x.id, x.state) for x in listed.sessions] == [(session_id, expected)]

    asyncio.run(run())
