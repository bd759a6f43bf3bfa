"""The framework adapters' calls make store spans under the framework's own span: an ADK
``append_event`` and an OpenAI Agents ``add_items``, on every backend."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan

from redis_session import AsyncRedisStore
from tests.contract.test_telemetry import ours, spans  # noqa: F401 - the fixture

pytest.importorskip("google.adk")
pytest.importorskip("agents")

from redis_session.integrations.adk import RedisSessionService
from redis_session.integrations.openai_agents import RedisAgentSession
from tests.integrations.test_adk import APP, USER, event


def _under(found: list[ReadableSpan], parent: Any) -> list[str]:
    context = parent.get_span_context()
    return [
        s.name for s in ours(found) if s.parent is not None and s.parent.span_id == context.span_id
    ]


async def test_an_adk_append_event_nests_under_the_runners_span(
    make_astore: Callable[..., AsyncRedisStore],
    spans: list[ReadableSpan],  # noqa: F811
) -> None:
    service = RedisSessionService(make_astore())
    session = await service.create_session(app_name=APP, user_id=USER, session_id="s")
    with trace.get_tracer("google.adk").start_as_current_span("invocation") as parent:
        await service.append_event(session, event(1))
    assert "append_event" in _under(spans, parent)


async def test_openai_add_items_nests_under_the_runners_span(
    make_astore: Callable[..., AsyncRedisStore],
    spans: list[ReadableSpan],  # noqa: F811
) -> None:
    session = RedisAgentSession("conv", make_astore())
    with trace.get_tracer("openai.agents").start_as_current_span("agent run") as parent:
        await session.add_items([{"role": "user", "content": "hi"}])
    assert "append_messages" in _under(spans, parent)
