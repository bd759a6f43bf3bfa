"""``RedisAgentSession``'s branches, turn queries and repairs as the store holds them, on every
backend: what the SDK's own ``AdvancedSQLiteSession`` tests (run by
``test_openai_agents_sdk_branching.py``) cannot see, because they know one process and SQLite:
several workers, the store's keys, a failed turn's open tool calls and the SDK's next turn."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

import pytest
from agents import Agent, RunConfig, Runner
from agents.items import TResponseInputItem
from agents.models.chatcmpl_converter import Converter
from openai.types.responses.response_input_item_param import FunctionCallOutput
from pydantic import TypeAdapter

from redis_session import AsyncRedisStore, ConcurrentChange, Message, StaleExpectation, TurnLost
from redis_session._core.conversation import FAILED_TURN as REASON
from redis_session.integrations.openai_agents import MAIN_BRANCH, RedisAgentSession
from tests.conftest import Backend
from tests.integrations.test_openai_agents import ScriptedModel, reply, user
from tests.integrations.test_turns_in_adapters import lease_gone

MakeStore = Callable[..., AsyncRedisStore]
ITEMS: list[TResponseInputItem] = [
    user("q1"),
    {"role": "assistant", "content": "a1"},
    user("q2"),
    {"role": "assistant", "content": "a2"},
    user("q3"),
    {"role": "assistant", "content": "a3"},
]


def call(call_id: str, name: str = "weather") -> TResponseInputItem:
    return {
        "type": "function_call",
        "call_id": call_id,
        "name": name,
        "arguments": '{"city": "Paris"}',
        "id": f"fc_{call_id}",
        "status": "completed",
    }


def output(call_id: str, text: str = "sunny") -> TResponseInputItem:
    return {"type": "function_call_output", "call_id": call_id, "output": text}


FAILED_TURN: list[TResponseInputItem] = [
    user("weather in three cities?"),
    {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": "Checking.", "annotations": []}],
    },
    call("call_a"),
    call("call_b"),
    call("call_c"),
    output("call_a"),
]
"""A turn that failed midway: an assistant message with 3 tool calls, one answered."""


def contents(items: list[Any]) -> list[Any]:
    return [item.get("content") for item in items]


# -- cleanup_failed_turn ------------------------------------------------------------------------


async def _next_turn_input(session: RedisAgentSession) -> list[Any]:
    """What the model is given on the next ``Runner.run`` of ``session`` (the SDK prepares the
    session's history as the model's input: it drops tool calls that have no output)."""
    model = ScriptedModel([[reply("done", 9)]])
    agent = Agent(name="helper", model=model)
    await Runner.run(agent, "next", session=session, run_config=RunConfig(tracing_disabled=True))
    return model.inputs[-1]


def _unanswered_chat_tool_calls(items: list[Any]) -> list[str]:
    """The tool calls of the Chat Completions messages the SDK's converter makes of ``items``
    that no ``tool`` message answers (the Chat Completions API refuses such a request)."""
    messages: list[Any] = Converter.items_to_messages(items)
    asked = [c["id"] for m in messages if m["role"] == "assistant" for c in m.get("tool_calls", [])]
    answered = {m["tool_call_id"] for m in messages if m["role"] == "tool"}
    return [i for i in asked if i not in answered]


async def test_cleanup_closes_the_two_open_calls_and_the_next_turn_takes_the_history(
    make_astore: MakeStore,
) -> None:
    session = RedisAgentSession("conv", make_astore())
    await session.add_items(FAILED_TURN)
    # before: the SDK's preparation of the next turn drops the two open calls (the model would
    # never learn that they failed), and the chat converter leaves them unanswered
    probe = RedisAgentSession("probe", make_astore())
    await probe.add_items(FAILED_TURN)
    before = await _next_turn_input(probe)
    assert [i.get("call_id") for i in before if i.get("type") == "function_call"] == ["call_a"]
    assert _unanswered_chat_tool_calls(FAILED_TURN) == ["call_b", "call_c"]

    assert await session.cleanup_failed_turn() == 2
    items = await session.get_items()
    answers = items[len(FAILED_TURN) :]
    assert answers == [
        {"type": "function_call_output", "call_id": c, "output": json.dumps({"error": reason})}
        for c, reason in [
            ("call_b", REASON),
            ("call_c", REASON),
        ]
    ]
    adapter = TypeAdapter(FunctionCallOutput)  # the Responses API's input item type
    assert [adapter.validate_python(a) for a in answers] == answers
    assert _unanswered_chat_tool_calls(items) == []
    # after: the SDK gives the model the whole history as stored, nothing dropped
    after = await _next_turn_input(session)
    assert after == [*items, user("next")]
    assert await session.cleanup_failed_turn() == 0  # a second call closes none


async def test_cleanup_is_seen_by_every_worker_and_counts_once(make_astore: MakeStore) -> None:
    one = RedisAgentSession("conv", make_astore())
    two = RedisAgentSession("conv", make_astore())
    await one.add_items(FAILED_TURN)
    closed = await asyncio.gather(*(s.cleanup_failed_turn() for s in (one, two, one, two)))
    assert sorted(closed) == [0, 0, 0, 2]
    items = await two.get_items()
    assert [i.get("call_id") for i in items if i.get("type") == "function_call_output"] == [
        "call_a",
        "call_b",
        "call_c",
    ]


async def test_cleanup_reads_again_when_another_writer_came_first(
    astore: AsyncRedisStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The answers go in an append that expects the newest item read: another worker's answer
    landing in between makes it read again, so no call is answered twice."""
    session = RedisAgentSession("conv", astore)
    await session.add_items(FAILED_TURN)
    other = RedisAgentSession("conv", astore)
    real = astore.get_history
    reads = 0

    async def racing(key: str, last: int | None = None) -> list[Message]:
        nonlocal reads
        reads += 1
        history = await real(key, last)
        if reads == 1:  # another worker answers call_b after this read
            await other.add_items([output("call_b", "rainy")])
        return history

    monkeypatch.setattr(astore, "get_history", racing)
    assert await session.cleanup_failed_turn(reason="cut off") == 1
    assert reads == 2
    monkeypatch.undo()
    items = await session.get_items()
    assert items[len(FAILED_TURN) :] == [
        output("call_b", "rainy"),
        output("call_c", json.dumps({"error": "cut off"})),
    ]


async def test_cleanup_gives_up_when_the_history_keeps_changing(
    astore: AsyncRedisStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = RedisAgentSession("conv", astore)
    await session.add_items(FAILED_TURN)

    async def stale(*args: Any, **kwargs: Any) -> int:
        raise StaleExpectation(session.key, -1, "x", "y")

    monkeypatch.setattr(astore, "append_messages", stale)
    with pytest.raises(ConcurrentChange):
        await session.cleanup_failed_turn()


async def test_cleanup_closes_custom_tool_calls_and_leaves_answered_ones(
    astore: AsyncRedisStore,
) -> None:
    session = RedisAgentSession("conv", astore)
    custom: Any = {"type": "custom_tool_call", "call_id": "cc", "name": "grep", "input": "x"}
    no_id: Any = {"type": "function_call", "name": "nameless", "arguments": "{}"}
    await session.add_items([user("go"), custom, no_id, call("f1"), output("f1")])
    assert await session.cleanup_failed_turn(reason="r") == 1  # no call_id: cannot be answered
    last = (await session.get_items())[-1]
    assert last == {"type": "custom_tool_call_output", "call_id": "cc", "output": '{"error": "r"}'}
    assert await RedisAgentSession("empty", astore).cleanup_failed_turn() == 0


async def test_cleanup_inside_a_lost_turn_is_refused(
    backend: Backend, make_astore: MakeStore
) -> None:
    slow = RedisAgentSession("conv", make_astore())
    fast = RedisAgentSession("conv", make_astore())
    await slow.add_items(FAILED_TURN)
    async with slow.turn(lease=0.5):
        lease_gone(backend, slow.key)
        async with fast.turn(lease=5):
            with pytest.raises(TurnLost):
                await slow.cleanup_failed_turn()
            assert await fast.cleanup_failed_turn() == 2


# -- branches as store sessions ----------------------------------------------------------------


async def test_a_branch_is_a_store_session_of_its_own(astore: AsyncRedisStore) -> None:
    session = RedisAgentSession("conv", astore)
    await session.add_items(ITEMS)
    main = await astore.get(session.key)
    assert await session.create_branch_from_turn(2, "alt") == "alt"
    assert session.current_branch_id == "alt"
    assert session.branch_key("alt") == "openai-agents:conv#branch:alt"
    branch = await astore.get(session.branch_key("alt"))
    assert branch.branch_of == session.key
    assert branch.branch_at == main.history[1].id  # the last item before turn 2
    assert [m.id for m in branch.history] == [m.id for m in main.history[:2]]
    assert branch.metadata["openai-agents:branch"] == "alt"
    await session.add_items([user("q2 again")])
    assert contents(await session.get_items()) == ["q1", "a1", "q2 again"]
    assert contents(await session.get_items(branch_id=MAIN_BRANCH)) == contents(ITEMS)
    registry = await astore.get(session.key + "#branches", 0)
    assert [k for k in registry.metadata if k.startswith("used:")] == ["used:alt"]


async def test_a_branch_of_turn_one_is_empty_and_of_its_source(astore: AsyncRedisStore) -> None:
    session = RedisAgentSession("conv", astore)
    await session.add_items(ITEMS)
    await astore.update_metadata(session.key, {"team": "blue"})
    await session.create_branch_from_turn(1, "fresh")
    branch = await astore.get(session.branch_key("fresh"))
    assert branch.history == [] and branch.branch_of == session.key and branch.branch_at == ""
    assert branch.metadata == {"team": "blue", "openai-agents:branch": "fresh"}
    # a branch without items is not listed, as AdvancedSQLiteSession lists none
    listed = await session.list_branches()
    assert [(b["branch_id"], b["message_count"]) for b in listed] == [(MAIN_BRANCH, 6)]
    await session.add_items([user("other start")])
    assert [b["branch_id"] for b in await session.list_branches()] == [MAIN_BRANCH, "fresh"]


async def test_a_branch_of_a_branch(astore: AsyncRedisStore) -> None:
    session = RedisAgentSession("conv", astore)
    await session.add_items(ITEMS)
    await session.create_branch_from_turn(3, "b1")
    await session.add_items([user("b1 q3")])
    await session.create_branch_from_turn(2, "b2")
    assert contents(await session.get_items()) == ["q1", "a1"]
    branch = await astore.get(session.branch_key("b2"))
    assert branch.branch_of == session.branch_key("b1")
    assert branch.metadata["openai-agents:branch"] == "b2"
    turns = await session.get_conversation_turns(branch_id="b1")
    assert [(t["turn"], t["content"]) for t in turns] == [(1, "q1"), (2, "q2"), (3, "b1 q3")]


async def test_another_worker_switches_to_a_branch_and_writes_there(
    make_astore: MakeStore,
) -> None:
    one = RedisAgentSession("conv", make_astore())
    two = RedisAgentSession("conv", make_astore())
    await one.add_items(ITEMS)
    await one.create_branch_from_turn(3, "alt")
    assert two.current_branch_id == MAIN_BRANCH  # the current branch is the object's own
    await two.switch_to_branch("alt")
    await two.add_items([user("from two")])
    assert contents(await one.get_items()) == ["q1", "a1", "q2", "a2", "from two"]
    assert await two.pop_item() == user("from two")
    assert contents(await one.get_items()) == ["q1", "a1", "q2", "a2"]
    assert [b["branch_id"] for b in await two.list_branches()] == [MAIN_BRANCH, "alt"]


async def test_two_workers_creating_one_branch_id_never_share_it(make_astore: MakeStore) -> None:
    workers = [RedisAgentSession("conv", make_astore()) for _ in range(4)]
    await workers[0].add_items(ITEMS)
    made = await asyncio.gather(
        *(w.create_branch_from_turn(2, "same") for w in workers), return_exceptions=True
    )
    assert [m for m in made if m == "same"] == ["same"]
    refused = [m for m in made if m != "same"]
    assert len(refused) == 3 and all("already been used" in str(e) for e in refused)
    assert contents(await workers[0].get_items(branch_id="same")) == ["q1", "a1"]


async def test_generated_ids_of_concurrent_workers_differ(
    make_astore: MakeStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(time, "time", lambda: 1_700_000_000.0)
    workers = [RedisAgentSession("conv", make_astore()) for _ in range(3)]
    await workers[0].add_items(ITEMS)
    made = await asyncio.gather(*(w.create_branch_from_turn(3) for w in workers))
    base = "branch_from_turn_3_1700000000"
    assert sorted(made) == [base, f"{base}_2", f"{base}_3"]
    for branch_id in made:
        assert contents(await workers[0].get_items(branch_id=branch_id)) == contents(ITEMS[:4])


async def test_branch_ids_of_any_text_get_keys_of_their_own(astore: AsyncRedisStore) -> None:
    session = RedisAgentSession("conv", astore)
    await session.add_items(ITEMS)
    names = ["a:child:b:1", "a b", " a b ", "%41", "A", "ünï/cødé", "#branches"]
    for n, name in enumerate(names):
        await session.switch_to_branch(MAIN_BRANCH)
        await session.create_branch_from_turn(2, name)
        await session.add_items([user(f"on {n}")])
    keys = {session.branch_key(name) for name in names}
    assert len(keys) == len(names) and session.key + "#branches" not in keys
    for n, name in enumerate(names):
        assert contents(await session.get_items(branch_id=name)) == ["q1", "a1", f"on {n}"]
    listed = [b["branch_id"] for b in await session.list_branches()]
    assert sorted(listed) == sorted([MAIN_BRANCH, *names])


async def test_a_session_whose_key_looks_like_a_branch_is_not_one(astore: AsyncRedisStore) -> None:
    session = RedisAgentSession("conv", astore)
    await session.add_items(ITEMS)
    lookalike = RedisAgentSession("conv#branch:x", astore)  # another conversation
    await lookalike.add_items([user("not a branch")])
    with pytest.raises(ValueError, match="Branch 'x' does not exist"):
        await session.switch_to_branch("x")
    with pytest.raises(ValueError, match="Branch 'x' does not exist"):
        await session.delete_branch("x")
    assert [b["branch_id"] for b in await session.list_branches()] == [MAIN_BRANCH]
    assert await lookalike.get_items() == [user("not a branch")]


# -- a branch gone under a worker ---------------------------------------------------------------


async def test_a_branch_deleted_by_another_worker_sends_this_one_back_to_main(
    make_astore: MakeStore,
) -> None:
    one = RedisAgentSession("conv", make_astore())
    two = RedisAgentSession("conv", make_astore())
    await one.add_items(ITEMS)
    await one.create_branch_from_turn(2, "alt")
    await one.add_items([user("alt q2")])
    await two.delete_branch("alt")
    assert await two.get_items(branch_id="alt") == []
    assert contents(await one.get_items()) == contents(ITEMS)  # read from main
    assert one.current_branch_id == MAIN_BRANCH
    with pytest.raises(ValueError, match="already been used"):  # the id stays used
        await two.create_branch_from_turn(2, "alt")


@pytest.mark.parametrize(
    "read", ["items", "turns", "search", "conversation", "tools", "branches", "add", "pop"]
)
async def test_after_a_clear_by_another_worker_a_stale_one_is_on_main(
    make_astore: MakeStore, read: str
) -> None:
    stale = RedisAgentSession("conv", make_astore())
    clearer = RedisAgentSession("conv", make_astore())
    await stale.add_items(ITEMS)
    await stale.create_branch_from_turn(2, "stale")
    await clearer.clear_session()
    fresh: list[TResponseInputItem] = [user("new question"), call("c9", "lookup"), output("c9")]
    await clearer.add_items(fresh)
    if read == "items":
        assert await stale.get_items() == fresh
    elif read == "turns":
        assert [t["full_content"] for t in await stale.get_conversation_turns()] == ["new question"]
    elif read == "search":
        found = await stale.find_turns_by_content("NEW")
        assert [t["full_content"] for t in found] == ["new question"]
    elif read == "conversation":
        assert list(await stale.get_conversation_by_turns()) == [1]
    elif read == "tools":
        assert await stale.get_tool_usage() == [("lookup", 1, 1)]
    elif read == "branches":
        listed = await stale.list_branches()
        assert [(b["branch_id"], b["is_current"]) for b in listed] == [(MAIN_BRANCH, True)]
    elif read == "add":
        await stale.add_items([user("late")])
        assert contents(await clearer.get_items()) == ["new question", None, None, "late"]
        assert await clearer.get_items(branch_id="stale") == []  # not brought back
    else:
        assert await stale.pop_item() == output("c9")
    assert stale.current_branch_id == MAIN_BRANCH


async def test_clear_session_removes_every_branch_and_keeps_the_ids_used(
    backend: Backend, astore: AsyncRedisStore
) -> None:
    session = RedisAgentSession("conv", astore)
    await session.add_items(ITEMS)
    await session.create_branch_from_turn(2, "a")
    await session.create_branch_from_turn(1, "b")
    await session.clear_session()
    assert session.current_branch_id == MAIN_BRANCH
    for branch_id in (MAIN_BRANCH, "a", "b"):
        assert await session.get_items(branch_id=branch_id) == []
    client = backend.sync_client()
    left = [k for k in backend.session_keys() if client.type(k) == b"list"]
    assert left == []  # no message list of any branch is left
    await session.add_items(ITEMS)
    with pytest.raises(ValueError, match="already been used"):
        await session.create_branch_from_turn(3, "a")
    await session.clear_session()  # idempotent
    await session.clear_session()


# -- turns -------------------------------------------------------------------------------------


async def test_a_worker_holding_a_branch_s_turn_adds_to_that_branch(
    backend: Backend, make_astore: MakeStore
) -> None:
    slow = RedisAgentSession("conv", make_astore())
    await slow.add_items(ITEMS)
    await slow.create_branch_from_turn(3, "alt")
    fast = RedisAgentSession("conv", make_astore())
    await fast.switch_to_branch("alt")
    async with slow.turn(lease=30) as held:
        assert held.key == slow.branch_key("alt")
        await slow.add_items([user("mine")])
        await held.renew(0.05)  # the write above is not raced by the lease; now it runs out
        lease_gone(backend, held.key)
        async with fast.turn(lease=5):
            await fast.add_items([{"role": "assistant", "content": "theirs"}])
            with pytest.raises(TurnLost):
                await slow.add_items([{"role": "assistant", "content": "late"}])
    assert contents(await fast.get_items())[-2:] == ["mine", "theirs"]
    assert contents(await fast.get_items(branch_id=MAIN_BRANCH)) == contents(ITEMS)


async def test_rewind_to_turn_removes_that_turn_and_what_follows(make_astore: MakeStore) -> None:
    one = RedisAgentSession("conv", make_astore())
    two = RedisAgentSession("conv", make_astore())
    await one.add_items(ITEMS)
    assert contents(await two.get_items()) == contents(ITEMS)  # a reader that holds the tail
    assert await one.rewind_to_turn(2) == 4
    assert contents(await two.get_items()) == ["q1", "a1"]
    with pytest.raises(ValueError, match="Turn 2 does not contain a user message"):
        await one.rewind_to_turn(2)
    await one.add_items([user("q2 again")])
    assert await one.rewind_to_turn(1) == 3
    assert await two.get_items() == []
