"""ADK events' ``usage_metadata`` become the stored messages' usage (and the model's candidates
their token count): ``Session.usage``, ``store.usage()`` and the budgets hold for ADK sessions,
on every backend, in the adapter's own script and in the store's path of an encrypted store."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from google.adk.events.event import Event
from google.genai import types

from redis_session import AsyncRedisStore, Usage, UsageLimitExceeded, estimate_tokens
from redis_session.integrations.adk import RedisSessionService

MakeStore = Callable[..., AsyncRedisStore]
APP, USER = "usage-app", "bob"
T0 = 1_700_000_000.0


def reply(n: int, prompt: int, written: int, thoughts: int = 0) -> Event:
    return Event(
        invocation_id=f"inv-{n}",
        author="agent",
        content=types.Content(role="model", parts=[types.Part.from_text(text=f"answer {n}")]),
        usage_metadata=types.GenerateContentResponseUsageMetadata(
            prompt_token_count=prompt,
            candidates_token_count=written,
            thoughts_token_count=thoughts or None,
            total_token_count=prompt + written + thoughts,
        ),
        timestamp=T0 + n,
    )


def question(n: int) -> Event:
    return Event(
        invocation_id=f"inv-{n}",
        author="user",
        content=types.Content(role="user", parts=[types.Part.from_text(text=f"question {n}")]),
        timestamp=T0 + n,
    )


@pytest.mark.parametrize("sealed", [False, True], ids=["plain", "sealed"])
async def test_usage_metadata_is_the_sessions_usage(make_astore: MakeStore, sealed: bool) -> None:
    options = {"passphrase": "pw", "kdf_work": 10} if sealed else {}
    store = make_astore(**options)
    service = RedisSessionService(store)
    session = await service.create_session(app_name=APP, user_id=USER, session_id="s")
    await service.append_event(session, question(0))
    await service.append_event(session, reply(1, 120, 30, thoughts=8))
    await service.append_event(session, question(2))
    await service.append_event(session, reply(3, 180, 40))
    record = service.keys.session(APP, USER, "s")
    stored = await store.get(record)
    assert stored.usage == Usage(input_tokens=300, output_tokens=78, requests=2)
    assert [m.tokens for m in stored.history][1::2] == [30, 40]  # candidates_token_count
    for asked in stored.history[0::2]:  # no usage_metadata: the store's count_tokens
        assert asked.tokens == estimate_tokens(asked.model_copy(update={"tokens": None}))
    assert await store.usage() == stored.usage
    again = await service.get_session(app_name=APP, user_id=USER, session_id="s")
    assert (
        again is not None and again.events[1].usage_metadata == reply(1, 120, 30, 8).usage_metadata
    )


@pytest.mark.parametrize("sealed", [False, True], ids=["plain", "sealed"])
async def test_a_budget_stops_an_adk_agent(make_astore: MakeStore, sealed: bool) -> None:
    options = {"passphrase": "pw", "kdf_work": 10} if sealed else {}
    service = RedisSessionService(make_astore(max_usage_tokens=500, **options))
    session = await service.create_session(app_name=APP, user_id=USER, session_id="b")
    n = 0
    with pytest.raises(UsageLimitExceeded) as raised:
        for n in range(20):  # bounded: every model call spends 200 tokens
            await service.append_event(session, reply(n, 150, 50))
    assert n == 3 and raised.value.usage == 600  # the fourth call found 600 >= 500
    stored = await service.get_session(app_name=APP, user_id=USER, session_id="b")
    assert stored is not None and len(stored.events) == 3  # nothing written by the refused one
