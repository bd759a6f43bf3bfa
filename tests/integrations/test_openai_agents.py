"""``RedisAgentSession`` driven through the OpenAI Agents SDK: its ``Session`` protocol and
``Runner.run`` with a fake ``Model`` (no network, no model calls), on every backend."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from agents import Agent, RunConfig, Runner, function_tool
from agents.items import ModelResponse, TResponseInputItem, TResponseStreamEvent
from agents.memory import Session as SdkSession
from agents.memory import SessionSettings
from agents.models.interface import Model
from agents.usage import Usage
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputItem,
    ResponseOutputMessage,
    ResponseOutputText,
)

from redis_session import AsyncRedisStore, Message, MessageRole
from redis_session._core.requests import ScriptCall
from redis_session.integrations.openai_agents import ITEM_AUTHOR, RedisAgentSession
from tests.conftest import Backend
from tests.integrations.conftest import RoundTrips
from tests.support.servers import Server

MakeStore = Callable[..., AsyncRedisStore]


def user(text: str) -> TResponseInputItem:
    return {"role": "user", "content": text}


def assistant(text: str, n: int = 0) -> TResponseInputItem:
    return {
        "id": f"msg_{n}",
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


RICH_ITEMS: list[TResponseInputItem] = [
    {"role": "system", "content": "be terse"},
    {"role": "developer", "content": "no emojis"},
    user("héllo ✓ \x00 \ud800 lone surrogate and NUL"),
    assistant("hi", 1),
    {
        "type": "function_call",
        "call_id": "call_1",
        "name": "weather",
        "arguments": '{"city": "Paris"}',
        "id": "fc_1",
        "status": "completed",
    },
    {"type": "function_call_output", "call_id": "call_1", "output": '{"temp": 21.5}'},
    {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "hm"}]},
]


def test_satisfies_the_sdk_session_protocol(astore: AsyncRedisStore) -> None:
    session: SdkSession = RedisAgentSession("conv", astore)  # mypy checks the structure
    assert isinstance(session, SdkSession)  # runtime_checkable protocol
    assert session.session_id == "conv"


async def test_items_round_trip_exactly_and_in_order(astore: AsyncRedisStore) -> None:
    session = RedisAgentSession("conv", astore)
    assert await session.get_items() == []
    await session.add_items(RICH_ITEMS[:3])
    await session.add_items(RICH_ITEMS[3:])
    assert await session.get_items() == RICH_ITEMS
    assert await session.get_items(limit=2) == RICH_ITEMS[-2:]
    assert await session.get_items(limit=100) == RICH_ITEMS
    assert await session.get_items(limit=0) == []
    assert await session.get_items(limit=-1) == RICH_ITEMS  # as SQLiteSession: unlimited


async def test_store_view_of_the_items(astore: AsyncRedisStore) -> None:
    """Each item is one store message: its JSON as content, a role that fits."""
    session = RedisAgentSession("conv", astore, key_prefix="agents/")
    await session.add_items(RICH_ITEMS)
    history = await astore.get_history("agents/conv")
    assert [json.loads(m.content) for m in history] == RICH_ITEMS
    assert {m.author for m in history} == {ITEM_AUTHOR}
    assert [m.role for m in history] == [
        MessageRole.SYSTEM,
        MessageRole.SYSTEM,
        MessageRole.USER,
        MessageRole.ASSISTANT,
        MessageRole.ASSISTANT,
        MessageRole.TOOL,
        MessageRole.ASSISTANT,
    ]


async def test_session_settings_limit_is_the_default(astore: AsyncRedisStore) -> None:
    session = RedisAgentSession("conv", astore, session_settings=SessionSettings(limit=2))
    await session.add_items([user(str(i)) for i in range(5)])
    assert await session.get_items() == [user("3"), user("4")]
    assert await session.get_items(limit=3) == [user("2"), user("3"), user("4")]


async def test_pop_item_removes_the_newest(astore: AsyncRedisStore) -> None:
    session = RedisAgentSession("conv", astore)
    assert await session.pop_item() is None  # never written
    await session.add_items([user("a"), assistant("b"), user("c")])
    assert await session.pop_item() == user("c")
    assert await session.get_items() == [user("a"), assistant("b")]
    await session.add_items([user("d")])
    assert await session.get_items(limit=2) == [assistant("b"), user("d")]
    assert await session.pop_item() == user("d")
    assert await session.pop_item() == assistant("b")
    assert await session.pop_item() == user("a")
    assert await session.pop_item() is None
    assert await session.get_items() == []
    assert await session.get_items(limit=3) == []


async def test_pop_removes_the_message_from_the_store(astore: AsyncRedisStore) -> None:
    """A pop leaves nothing behind in the history: limits count items only."""
    session = RedisAgentSession("conv", astore)
    await session.add_items([user(str(i)) for i in range(40)])
    for i in reversed(range(20, 40)):
        assert await session.pop_item() == user(str(i))
    assert await session.get_items(limit=3) == [user("17"), user("18"), user("19")]
    history = await astore.get_history(session.key)
    assert [json.loads(m.content) for m in history] == [user(str(i)) for i in range(20)]


async def test_an_item_popped_then_added_again_is_stored(astore: AsyncRedisStore) -> None:
    """The store keeps a popped message's id; each add_items gives fresh message ids, so the
    same item (even one with its own item ``id``) added again after a pop is stored again."""
    session = RedisAgentSession("conv", astore)
    await session.add_items([user("a"), assistant("b", 7)])
    assert await session.pop_item() == assistant("b", 7)
    await session.add_items([assistant("b", 7)])
    assert await session.get_items() == [user("a"), assistant("b", 7)]
    assert await session.pop_item() == assistant("b", 7)
    assert await session.pop_item() == user("a")
    await session.add_items([user("a")])
    assert await session.get_items() == [user("a")]


async def test_a_pop_retried_after_a_lost_reply_pops_once(
    astore: AsyncRedisStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """redis-py resends a script whose reply was lost, with the same arguments (the same call
    token). The resent pop returns the same item and removes nothing else."""
    session = RedisAgentSession("conv", astore)
    await session.add_items([user("a"), user("b"), user("c")])
    real = astore._execute
    resent: list[str] = []

    async def reply_lost_then_retried(request: Any) -> Any:
        if isinstance(request, ScriptCall) and request.name == "pop_message":
            await real(request)  # applied, reply lost
            resent.append(request.name)
        return await real(request)  # the retry

    monkeypatch.setattr(astore, "_execute", reply_lost_then_retried)
    assert await session.pop_item() == user("c")
    assert resent == ["pop_message"]
    assert await session.get_items() == [user("a"), user("b")]
    assert await session.pop_item() == user("b")  # a new call pops the next one
    assert await session.get_items() == [user("a")]


async def test_clear_session(astore: AsyncRedisStore) -> None:
    session = RedisAgentSession("conv", astore)
    await session.add_items([user("a"), user("b")])
    await session.pop_item()
    await session.clear_session()
    await session.clear_session()  # idempotent
    assert await session.get_items() == []
    assert await session.pop_item() is None
    await session.add_items([user("c")])
    assert await session.get_items() == [user("c")]


async def test_sessions_are_separate(astore: AsyncRedisStore) -> None:
    one, two = RedisAgentSession("one", astore), RedisAgentSession("two", astore)
    await one.add_items([user("1")])
    await two.add_items([user("2")])
    await one.clear_session()
    assert await one.get_items() == []
    assert await two.get_items() == [user("2")]


async def test_two_workers_share_a_session(make_astore: MakeStore) -> None:
    first = RedisAgentSession("conv", make_astore())
    second = RedisAgentSession("conv", make_astore())
    await first.add_items([user("from worker 1")])
    await second.add_items([assistant("from worker 2")])
    assert await first.get_items() == [user("from worker 1"), assistant("from worker 2")]
    assert await second.pop_item() == assistant("from worker 2")
    assert await first.get_items() == [user("from worker 1")]


async def test_foreign_messages_read_as_plain_messages(astore: AsyncRedisStore) -> None:
    """A store-level compaction of the session shows as a system message the model can read."""
    session = RedisAgentSession("conv", astore)
    await session.add_items([user("a"), assistant("b"), user("c")])
    await astore.compact_messages(session.key, 1, "a greeting")
    assert await session.get_items() == [
        {"role": "system", "content": "[Compacted Summary]\na greeting"},
        user("c"),
    ]
    await astore.append_message(session.key, Message(role="assistant", content="plain"))
    assert await session.pop_item() == {"role": "assistant", "content": "plain"}


@pytest.mark.timeout(60)
async def test_concurrent_add_items_lose_and_duplicate_nothing(make_astore: MakeStore) -> None:
    """8 workers (own clients) x 20 batches of 3 items into one fresh session at once."""
    workers, batches, size = 8, 20, 3
    sessions = [RedisAgentSession("conv", make_astore()) for _ in range(workers)]

    async def work(w: int) -> None:
        for b in range(batches):
            await sessions[w].add_items([user(f"{w}:{b}:{i}") for i in range(size)])

    await asyncio.wait_for(asyncio.gather(*(work(w) for w in range(workers))), timeout=50)
    items = await sessions[0].get_items()
    texts = [str(item["content"]) for item in items]  # type: ignore[typeddict-item]
    assert len(texts) == workers * batches * size
    assert len(set(texts)) == len(texts)
    for start in range(0, len(texts), size):  # each batch stored contiguously, in order
        batch = texts[start].rsplit(":", 1)[0]
        assert texts[start : start + size] == [f"{batch}:{i}" for i in range(size)]
    for w in range(workers):  # each worker's batches in its own order
        mine = [t for t in texts if t.startswith(f"{w}:")]
        assert mine == [f"{w}:{b}:{i}" for b in range(batches) for i in range(size)]


@pytest.mark.timeout(60)
async def test_concurrent_pops_return_each_item_once(make_astore: MakeStore) -> None:
    count, workers = 40, 6
    sessions = [RedisAgentSession("conv", make_astore()) for _ in range(workers)]
    await sessions[0].add_items([user(str(i)) for i in range(count)])

    async def drain(session: RedisAgentSession) -> list[TResponseInputItem]:
        popped = []
        while (item := await session.pop_item()) is not None:
            popped.append(item)
        return popped

    results = await asyncio.wait_for(asyncio.gather(*(drain(s) for s in sessions)), timeout=50)
    popped = [str(item["content"]) for r in results for item in r]  # type: ignore[typeddict-item]
    assert sorted(popped, key=int) == [str(i) for i in range(count)]
    for r in results:  # each worker saw newest-first order
        mine = [int(str(item["content"])) for item in r]  # type: ignore[typeddict-item]
        assert mine == sorted(mine, reverse=True)
    assert await sessions[0].get_items() == []


async def test_one_round_trip_per_add_items_and_pop_item(
    astore: AsyncRedisStore, round_trips: RoundTrips
) -> None:
    session = RedisAgentSession("conv", astore)
    await session.add_items([user("warm-up")])  # creates the session, loads the script
    await session.add_items([user("warm-up 2")])  # the cluster client learns its topology
    counts = []
    for n in (1, 5, 50):
        round_trips.reset()
        await session.add_items([user(f"{n}:{i}") for i in range(n)])
        counts.append(round_trips.count)
    await session.get_items(limit=1)  # loads the read script
    round_trips.reset()
    await session.get_items(limit=10)
    reads = round_trips.count
    await session.pop_item()  # loads the pop script
    pops = []
    for _ in range(3):
        round_trips.reset()
        await session.pop_item()
        pops.append(round_trips.count)
    print(
        f"\nround trips per add_items of 1, 5, 50 items: {counts}; "
        f"get_items(limit=10): {reads}; pop_item: {pops}"
    )
    assert counts == [1, 1, 1]
    assert reads == 1
    assert pops == [1, 1, 1]


class ScriptedModel(Model):
    """A fake ``Model``: answers from a script, records each input it was given."""

    def __init__(self, outputs: list[list[ResponseOutputItem]]) -> None:
        self.outputs = outputs
        self.inputs: list[list[TResponseInputItem]] = []

    async def get_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: Any,
        tools: list[Any],
        output_schema: Any,
        handoffs: list[Any],
        tracing: Any,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: Any,
    ) -> ModelResponse:
        self.inputs.append([user(input)] if isinstance(input, str) else list(input))
        return ModelResponse(output=self.outputs.pop(0), usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[TResponseStreamEvent]:
        raise NotImplementedError("the tests do not stream")


def reply(text: str, n: int) -> ResponseOutputMessage:
    content = [ResponseOutputText(text=text, type="output_text", annotations=[])]
    return ResponseOutputMessage(
        id=f"msg_{n}", content=content, role="assistant", status="completed", type="message"
    )


@function_tool
def weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


async def test_runner_keeps_the_conversation_in_redis(make_astore: MakeStore) -> None:
    call = ResponseFunctionToolCall(
        arguments='{"city": "Paris"}', call_id="call_1", name="weather", type="function_call"
    )
    model = ScriptedModel([[call], [reply("It is sunny.", 1)], [reply("You asked twice.", 2)]])
    agent = Agent(name="forecaster", instructions="be brief", model=model, tools=[weather])
    config = RunConfig(tracing_disabled=True)

    first = await Runner.run(
        agent,
        "Weather in Paris?",
        session=RedisAgentSession("c1", make_astore()),
        run_config=config,
    )
    assert first.final_output == "It is sunny."
    # A second worker continues the conversation from Redis alone.
    session = RedisAgentSession("c1", make_astore())
    second = await Runner.run(agent, "Again?", session=session, run_config=config)
    assert second.final_output == "You asked twice."

    seen_by_model = model.inputs[-1]
    kinds = [item.get("type", item.get("role")) for item in seen_by_model]
    assert kinds == ["user", "function_call", "function_call_output", "message", "user"]
    assert seen_by_model[0] == user("Weather in Paris?")
    stored = await session.get_items()
    assert stored[: len(seen_by_model)] == seen_by_model
    assert stored[-1]["id"] == "msg_2"  # type: ignore[typeddict-item]
    output = stored[2]
    assert output["output"] == "sunny in Paris"  # type: ignore[typeddict-item]


def _script_calls(server: Server) -> int:
    """How many scripts clients ran (EVALSHA and EVAL: top-level commands only, a script
    cannot call them; the commands scripts run are counted elsewhere)."""
    client = server.client()
    try:
        stats: dict[str, Any] = client.info("commandstats")
    finally:
        client.close()
    return sum(int(stats.get(f"cmdstat_{c}", {}).get("calls", 0)) for c in ("evalsha", "eval"))


@pytest.mark.valkey
async def test_server_runs_one_script_per_add_items(
    valkey_server: Server, round_trips: RoundTrips
) -> None:
    """Cross-check on the private Valkey server (nothing else talks to it during the test):
    10 add_items are 10 requests written by the client and 10 scripts run by the server."""
    backend = Backend("valkey", valkey_server)
    store = backend.async_store()
    try:
        session = RedisAgentSession("conv", store)
        await session.add_items([user("warm-up")])
        before = _script_calls(valkey_server)
        round_trips.reset()
        for n in range(10):
            await session.add_items([user(f"{n}:{i}") for i in range(5)])
        written = round_trips.count
        scripts = _script_calls(valkey_server) - before
        print(f"\n10 add_items of 5 items: {written} requests written, {scripts} scripts run")
        assert (written, scripts) == (10, 10)
        assert len(await session.get_items()) == 51
    finally:
        await store.close()
        backend.close()
