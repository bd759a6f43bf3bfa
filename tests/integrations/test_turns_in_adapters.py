"""The framework adapters make a runner's turn safe: inside ``service.turn(...)`` (ADK) or
``session.turn(...)`` (OpenAI Agents), a worker paused past its lease cannot append after
another worker took the session over, on every backend."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from redis_session import AsyncRedisStore, TurnLost

pytest.importorskip("google.adk")
pytest.importorskip("agents")

from redis_session.integrations.adk import RedisSessionService
from redis_session.integrations.openai_agents import RedisAgentSession
from tests.conftest import Backend
from tests.integrations.test_adk import APP, USER, event
from tests.support.clock import wait_gone


def lease_gone(backend: Backend, key: str) -> None:
    """Wait until the turn of store session ``key`` expired on the server (its lease ran out):
    a long tool call, a GC pause.
    """
    wait_gone(backend.sync_client(), backend.schema.session(key).turn)


async def test_an_adk_append_through_a_lost_turn_is_refused(
    backend: Backend, make_astore: Callable[..., AsyncRedisStore]
) -> None:
    slow, fast = RedisSessionService(make_astore()), RedisSessionService(make_astore())
    session = await slow.create_session(app_name=APP, user_id=USER, session_id="s")
    ids: dict[str, Any] = {"app_name": APP, "user_id": USER, "session_id": "s"}
    first, second = event(1), event(2)
    async with slow.turn(**ids, lease=30) as held:
        await slow.append_event(session, first)
        await held.renew(0.05)  # the write above is not raced by the lease; now it runs out
        lease_gone(backend, slow.keys.session(APP, USER, "s"))
        async with fast.turn(**ids, lease=5):
            theirs = await fast.get_session(**ids)
            assert theirs is not None
            await fast.append_event(theirs, second)
            with pytest.raises(TurnLost):
                await slow.append_event(session, event(3))
    stored = await fast.get_session(**ids)
    assert stored is not None and [e.id for e in stored.events] == [first.id, second.id]


async def test_openai_items_added_through_a_lost_turn_are_refused(
    backend: Backend, make_astore: Callable[..., AsyncRedisStore]
) -> None:
    slow = RedisAgentSession("conv", make_astore())
    fast = RedisAgentSession("conv", make_astore())
    item: Any = {"role": "user", "content": "hi"}
    async with slow.turn(lease=30) as held:
        await slow.add_items([item])
        await held.renew(0.05)  # the write above is not raced by the lease; now it runs out
        lease_gone(backend, slow.key)
        async with fast.turn(lease=5):
            await fast.add_items([{"role": "assistant", "content": "theirs"}])
            with pytest.raises(TurnLost):
                await slow.add_items([{"role": "assistant", "content": "late"}])
    items: list[Any] = await fast.get_items()
    assert [i["content"] for i in items] == ["hi", "theirs"]
