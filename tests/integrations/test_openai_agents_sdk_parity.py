"""``RedisAgentSession`` behaves as the OpenAI Agents SDK's own sessions (0.24) do where a caller
can tell: ``session_settings`` given as an object or a dict, ``from_url`` / ``close`` / ``ping``,
and mutations that a cancelled caller still sees settled. On every backend."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from agents import Agent, RunConfig, Runner
from agents.items import TResponseInputItem
from agents.memory import SessionSettings

from redis_session import AsyncRedisStore, Message
from redis_session.integrations import openai_agents
from redis_session.integrations.openai_agents import RedisAgentSession
from tests.conftest import Backend
from tests.integrations.test_openai_agents import ScriptedModel, reply, user

MakeStore = Callable[..., AsyncRedisStore]


def url_of(backend: Backend) -> str:
    """A URL ``AsyncRedisStore.from_url`` reaches the test's backend with."""
    if backend.fake_server is not None:
        return f"memory://{backend.prefix}"  # a server of this test's own
    if backend.cluster is not None:
        return f"redis+cluster://127.0.0.1:{backend.cluster.ports[0]}/0"
    if backend.sentinel is not None:
        hosts = ",".join(f"127.0.0.1:{p}" for p in backend.sentinel.sentinel_ports)
        return f"redis+sentinel://{hosts}/{_service()}"
    assert backend.server is not None
    return backend.server.url


def _service() -> str:
    from tests.support.sentinel import SERVICE

    return SERVICE


# -- session_settings ------------------------------------------------------------------------


def test_settings_default_to_an_empty_session_settings(astore: AsyncRedisStore) -> None:
    session = RedisAgentSession("conv", astore)
    assert isinstance(session.session_settings, SessionSettings)
    assert session.session_settings.limit is None


def test_settings_object_is_kept(astore: AsyncRedisStore) -> None:
    settings = SessionSettings(limit=4)
    assert RedisAgentSession("conv", astore, session_settings=settings).session_settings is settings


async def test_settings_dict_becomes_a_session_settings(astore: AsyncRedisStore) -> None:
    """The SDK's sessions turn a dict into ``SessionSettings``; a stored dict made
    ``get_items()`` and ``Runner.run`` fail with ``'dict' object has no attribute 'limit'``."""
    session = RedisAgentSession("conv", astore, session_settings={"limit": 2})
    assert session.session_settings == SessionSettings(limit=2)
    await session.add_items([user(str(i)) for i in range(4)])
    assert await session.get_items() == [user("2"), user("3")]
    assert await session.get_items(limit=3) == [user("1"), user("2"), user("3")]
    empty = RedisAgentSession("other", astore, session_settings={})
    assert empty.session_settings == SessionSettings()
    zero = RedisAgentSession("conv", astore, session_settings={"limit": 0})
    assert zero.session_settings is not None and zero.session_settings.limit == 0
    assert await zero.get_items() == []


def test_settings_dict_with_an_unknown_key_is_a_type_error(astore: AsyncRedisStore) -> None:
    with pytest.raises(TypeError, match="limitt"):
        RedisAgentSession("conv", astore, session_settings={"limitt": 1})
    with pytest.raises(TypeError, match="limitt"):
        RedisAgentSession.from_url("conv", url="memory://", session_settings={"limitt": 1})


def test_settings_of_another_type_are_a_type_error(astore: AsyncRedisStore) -> None:
    with pytest.raises(TypeError, match="SessionSettings"):
        RedisAgentSession("conv", astore, session_settings=5)  # type: ignore[arg-type]


async def test_runner_reads_a_dict_settings_limit(astore: AsyncRedisStore) -> None:
    """``Runner.run`` with a session whose settings were a dict: the model gets the newest
    ``limit`` items of the history and the new input."""
    model = ScriptedModel([[reply(f"answer {n}", n)] for n in range(3)])
    agent = Agent(name="helper", model=model)
    session = RedisAgentSession("conv", astore, session_settings={"limit": 2})
    config = RunConfig(tracing_disabled=True)
    for n in range(3):
        result = await Runner.run(agent, f"question {n}", session=session, run_config=config)
        assert result.final_output == f"answer {n}"
    last_input = model.inputs[-1]
    assert len(last_input) == 3
    assert last_input[0] == user("question 1")
    assert last_input[-1] == user("question 2")
    assert len(await session.get_items(limit=-1)) == 6


# -- from_url, close, ping ---------------------------------------------------------------------


async def test_from_url_owns_its_store_and_close_ends_the_session(backend: Backend) -> None:
    session = RedisAgentSession.from_url(
        "conv", url=url_of(backend), prefix=backend.prefix, session_settings={"limit": 1}
    )
    assert session.session_settings == SessionSettings(limit=1)
    assert await session.ping() is True
    await session.add_items([user("a"), user("b")])
    assert await session.get_items() == [user("b")]
    await asyncio.gather(session.close(), session.close())
    await session.close()  # idempotent
    calls: list[Callable[[], Any]] = [
        session.get_items,
        lambda: session.add_items([user("c")]),
        lambda: session.add_items([]),  # the empty fast path is closed too
        session.pop_item,
        session.clear_session,
        session.ping,
    ]
    for call in calls:
        with pytest.raises(RuntimeError, match="RedisAgentSession is closed"):
            await call()
    # another session over the same Redis still sees what was written
    again = RedisAgentSession.from_url("conv", url=url_of(backend), prefix=backend.prefix)
    try:
        assert await again.get_items() == [user("a"), user("b")]
    finally:
        await again.close()


async def test_close_of_a_session_over_a_callers_store_changes_nothing(
    astore: AsyncRedisStore,
) -> None:
    session = RedisAgentSession("conv", astore)
    await session.add_items([user("before")])
    await session.close()
    await session.add_items([user("after")])
    assert await session.get_items() == [user("before"), user("after")]
    assert await session.ping() is True
    assert await astore.get_history(session.key) != []  # the store stays open


async def test_ping_is_false_when_redis_does_not_answer(
    astore: AsyncRedisStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = RedisAgentSession("conv", astore)

    async def down() -> bool:
        raise ConnectionError("down")

    monkeypatch.setattr(astore.client, "ping", down)
    assert await session.ping() is False


async def test_a_failed_close_is_retried_by_the_next_close(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = RedisAgentSession.from_url("conv", url=url_of(backend), prefix=backend.prefix)
    real = session.store.close
    failures = [RuntimeError("close failed")]

    async def flaky() -> None:
        if failures:
            raise failures.pop()
        await real()

    monkeypatch.setattr(session.store, "close", flaky)
    with pytest.raises(RuntimeError, match="close failed"):
        await session.close()
    with pytest.raises(RuntimeError, match="is closed"):  # terminal from the first call
        await session.get_items()
    await session.close()  # retried, now done
    assert not failures


# -- cancellation ------------------------------------------------------------------------------


@pytest.mark.timeout(30)
@pytest.mark.parametrize("operation", ["add", "pop", "clear"])
async def test_a_cancelled_mutation_waits_for_its_outcome(
    astore: AsyncRedisStore, monkeypatch: pytest.MonkeyPatch, operation: str
) -> None:
    """Cancelling (even twice) the caller of a mutation that Redis has applied lets the
    mutation finish; the caller then gets ``CancelledError`` and the write is there."""
    session = RedisAgentSession("conv", astore)
    await session.add_items([user("kept"), user("newest")])
    applied, release = asyncio.Event(), asyncio.Event()
    names = {"add": "append_messages", "pop": "pop_message", "clear": "delete"}
    real = getattr(astore, names[operation])

    async def slow(*args: Any, **kwargs: Any) -> Any:
        result = await real(*args, **kwargs)
        applied.set()
        await release.wait()
        return result

    monkeypatch.setattr(astore, names[operation], slow)
    if operation == "add":
        task: asyncio.Task[Any] = asyncio.create_task(session.add_items([user("added")]))
    elif operation == "pop":
        task = asyncio.create_task(session.pop_item())
    else:
        task = asyncio.create_task(session.clear_session())
    await asyncio.wait_for(applied.wait(), 10)
    task.cancel()
    await asyncio.sleep(0)
    task.cancel()
    await asyncio.sleep(0.05)
    assert not task.done()
    release.set()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 10)
    monkeypatch.undo()
    expected: dict[str, list[TResponseInputItem]] = {
        "add": [user("kept"), user("newest"), user("added")],
        "pop": [user("kept")],
        "clear": [],
    }
    assert await session.get_items() == expected[operation]


@pytest.mark.timeout(30)
async def test_a_cancelled_mutation_gives_up_waiting_after_the_bound(
    astore: AsyncRedisStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = RedisAgentSession("conv", astore)
    started, never = asyncio.Event(), asyncio.Event()

    async def stuck(*args: Any, **kwargs: Any) -> Message | None:
        started.set()
        await never.wait()
        return None

    monkeypatch.setattr(openai_agents, "MUTATION_SETTLE_TIMEOUT", 0.2)
    monkeypatch.setattr(astore, "pop_message", stuck)
    task = asyncio.create_task(session.pop_item())
    await asyncio.wait_for(started.wait(), 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 5)
    never.set()
