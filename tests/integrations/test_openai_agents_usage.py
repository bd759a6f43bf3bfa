"""``RedisAgentSession``'s usage methods (``store_run_usage``, ``get_session_usage``,
``get_turn_usage``) as the store keeps them, on every backend: what the SDK's own
``AdvancedSQLiteSession`` tests (run by ``test_openai_agents_sdk_branching.py``) cannot see:
the store's ``Session.usage``, budget and ``store.usage()``, two workers, the hidden records."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest
from agents import Agent, Runner
from agents.testing import ScriptedModel
from agents.usage import Usage as SdkUsage
from openai.types.responses.response_usage import InputTokensDetails, OutputTokensDetails

from redis_session import AsyncRedisStore, Usage, UsageLimitExceeded
from redis_session.integrations.openai_agents import USAGE_AUTHOR, RedisAgentSession
from tests.integrations.test_openai_agents import reply, user

MakeStore = Callable[..., AsyncRedisStore]


def run_result(input_tokens: int, output_tokens: int, requests: int = 1) -> Any:
    """What ``store_run_usage`` reads of a ``RunResult``: ``context_wrapper.usage``."""
    usage = SdkUsage(
        requests=requests,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        total_tokens=input_tokens + output_tokens,
        input_tokens_details=InputTokensDetails(
            cached_tokens=input_tokens // 10, cache_write_tokens=0
        ),
        output_tokens_details=OutputTokensDetails(reasoning_tokens=output_tokens // 10),
    )
    return SimpleNamespace(context_wrapper=SimpleNamespace(usage=usage))


def turn(n: int) -> list[Any]:
    return [user(f"q{n}"), {"role": "assistant", "content": f"a{n}"}]


async def test_the_stores_usage_is_what_get_session_usage_sums(astore: AsyncRedisStore) -> None:
    session = RedisAgentSession("conv", astore)
    await session.store_run_usage(run_result(50, 30))  # no turn yet: nothing stored
    assert await session.get_session_usage() is None
    for n, (i, o) in enumerate([(50, 30), (75, 45), (10, 5)], 1):
        await session.add_items(turn(n))
        await session.store_run_usage(run_result(i, o, n))
    totals = await session.get_session_usage()
    assert totals == {
        "requests": 6, "input_tokens": 135, "output_tokens": 80, "total_tokens": 215,
        "total_turns": 3,
    }  # fmt: skip
    stored = await astore.get(session.key)
    assert stored.usage == Usage(input_tokens=135, output_tokens=80, requests=6)
    assert stored.usage.total_tokens == totals["total_tokens"]
    assert (await astore.usage()).total_tokens == 215
    second = await session.get_turn_usage(2)
    assert isinstance(second, dict)
    assert second == {
        "requests": 2, "input_tokens": 75, "output_tokens": 45, "total_tokens": 120,
        "input_tokens_details": second["input_tokens_details"],
        "output_tokens_details": {"reasoning_tokens": 4},
    }  # fmt: skip
    assert second["input_tokens_details"]["cached_tokens"] == 7  # as the SDK: the JSON of __dict__
    rows = await session.get_turn_usage()
    assert isinstance(rows, list)
    assert [(r["user_turn_number"], r["total_tokens"]) for r in rows] == [
        (1, 80),
        (2, 120),
        (3, 15),
    ]
    assert await session.get_turn_usage(4) == {}
    # the records are not items, whichever way the items are read
    assert await session.get_items() == turn(1) + turn(2) + turn(3)
    assert await session.get_items(limit=3) == [turn(2)[1], *turn(3)]
    assert await session.get_items(limit=1) == [turn(3)[1]]
    assert [m.author for m in stored.history].count(USAGE_AUTHOR) == 3
    assert len(await session.get_conversation_turns()) == 3
    assert (await session.list_branches())[0]["message_count"] == 6


async def test_storing_a_turn_again_replaces_its_row_and_adds_only_the_increase(
    astore: AsyncRedisStore,
) -> None:
    """A resumed run (``RunState``) reports its whole turn's usage again."""
    session = RedisAgentSession("conv", astore)
    await session.add_items(turn(1))
    await session.store_run_usage(run_result(100, 20))
    await session.store_run_usage(run_result(150, 30, 2))  # the same turn, resumed
    await session.store_run_usage(run_result(150, 30, 2))  # and stored once more
    assert await session.get_session_usage() == {
        "requests": 2, "input_tokens": 150, "output_tokens": 30, "total_tokens": 180,
        "total_turns": 1,
    }  # fmt: skip
    assert (await astore.get(session.key)).usage == Usage(
        input_tokens=150, output_tokens=30, requests=2
    )


async def test_a_turns_usage_goes_with_the_turn_and_spend_stays_spent(
    astore: AsyncRedisStore,
) -> None:
    session = RedisAgentSession("conv", astore)
    await session.add_items(turn(1))
    await session.store_run_usage(run_result(50, 30))
    assert await session.pop_item() == turn(1)[1]  # the record after it is passed over
    assert await session.get_turn_usage(1) != {}  # the turn still has its user message
    assert await session.pop_item() == turn(1)[0]
    assert await session.get_turn_usage(1) == {}  # the turn is gone, and its usage
    assert await session.get_session_usage() is None
    await session.add_items([user("again")])  # a new turn 1: not the old one's usage
    assert await session.get_turn_usage() == []
    assert (await astore.get(session.key)).usage.total_tokens == 80  # spent all the same
    await session.add_items(turn(2))
    await session.store_run_usage(run_result(10, 10))
    assert await session.rewind_to_turn(2) == 3  # the record goes too
    assert await session.get_turn_usage() == []
    await session.clear_session()
    assert await session.get_session_usage() is None


async def test_usage_by_branch(astore: AsyncRedisStore) -> None:
    session = RedisAgentSession("conv", astore)
    await session.add_items(turn(1))
    await session.store_run_usage(run_result(50, 30))
    await session.add_items(turn(2))
    await session.store_run_usage(run_result(60, 40))
    await session.create_branch_from_turn(2, "side")  # holds turn 1 and its record
    await session.add_items(turn(3))
    await session.store_run_usage(run_result(5, 5))
    side = await session.get_turn_usage()
    assert isinstance(side, list)
    assert [(r["user_turn_number"], r["total_tokens"]) for r in side] == [(2, 10)]
    assert (await session.get_session_usage("side"))["total_tokens"] == 10  # type: ignore[index]
    assert (await session.get_session_usage("main"))["total_tokens"] == 180  # type: ignore[index]
    assert (await session.get_session_usage())["total_turns"] == 3  # type: ignore[index]
    # the store counts what the branch's session holds: turn 1's record was copied
    branch = await astore.get(session.branch_key("side"))
    assert branch.usage.total_tokens == 90
    assert (await astore.usage()).total_tokens == 190  # a branch adds nothing to the prefix's
    await session.delete_branch("side", force=True)
    assert (await session.get_session_usage())["total_turns"] == 2  # type: ignore[index]
    assert await session.get_turn_usage(branch_id="side") == []


async def test_usage_two_workers_store_adds_up_exactly(make_astore: MakeStore) -> None:
    """Two workers (two stores, two session objects) run turns on one conversation, each turn
    held with ``turn()``: every run's usage is counted once, on its own turn."""
    workers = [RedisAgentSession("shared", make_astore()) for _ in range(2)]
    runs = 12

    async def work(session: RedisAgentSession, w: int) -> None:
        for n in range(runs):
            async with session.turn(lease=30, wait=30):
                await session.add_items([user(f"w{w}-{n}"), {"role": "assistant", "content": "a"}])
                await asyncio.sleep(0)
                await session.store_run_usage(run_result(10 + w, 1 + n))

    await asyncio.gather(*(work(s, w) for w, s in enumerate(workers)))
    want_in = sum(10 + w for w in range(2) for _ in range(runs))
    want_out = 2 * sum(1 + n for n in range(runs))
    totals = await workers[0].get_session_usage()
    assert totals == {
        "requests": 2 * runs, "input_tokens": want_in, "output_tokens": want_out,
        "total_tokens": want_in + want_out, "total_turns": 2 * runs,
    }  # fmt: skip
    stored = await workers[1].store.get(workers[1].key)
    assert stored.usage == Usage(input_tokens=want_in, output_tokens=want_out, requests=2 * runs)
    rows = await workers[1].get_turn_usage()
    assert isinstance(rows, list)
    items = await workers[1].get_items()
    for row in rows:  # each run's usage on the turn its worker began
        worker = int(str(items[2 * row["user_turn_number"] - 2]["content"])[1])
        assert row["input_tokens"] == 10 + worker


async def test_usage_a_budget_stops_the_runs(make_astore: MakeStore) -> None:
    """Every model call costs 40 tokens; the budget is 100: the third run's usage crosses it
    (stored), the fourth run is refused before its model call, nothing written."""
    store = make_astore(max_usage_tokens=100)
    session = RedisAgentSession("budget", store)
    model = ScriptedModel(
        default_usage=SdkUsage(requests=1, input_tokens=30, output_tokens=10, total_tokens=40)
    )
    agent = Agent(name="a", model=model)
    for n in range(3):
        model.enqueue([reply(f"answer {n}", n)])
        result = await Runner.run(agent, f"question {n}", session=session)
        await session.store_run_usage(result)
    assert (await store.get(session.key)).usage.total_tokens == 120
    model.enqueue([reply("never", 9)])
    with pytest.raises(UsageLimitExceeded) as raised:
        await Runner.run(agent, "one more", session=session)
    assert (raised.value.usage, raised.value.budget) == (120, 100)
    assert model.remaining_steps == 1  # refused before the model was called
    assert len(await session.get_items()) == 6
    assert (await session.get_session_usage())["total_tokens"] == 120  # type: ignore[index]
    with pytest.raises(UsageLimitExceeded):  # the adapter does not swallow the budget
        await session.store_run_usage(run_result(1, 1))


async def test_usage_of_runs_through_the_runner(astore: AsyncRedisStore) -> None:
    session = RedisAgentSession("runner", astore)
    model = ScriptedModel(
        default_usage=SdkUsage(requests=1, input_tokens=12, output_tokens=3, total_tokens=15)
    )
    agent = Agent(name="a", model=model)
    for n in range(2):
        model.enqueue([reply(f"answer {n}", n)])
        await session.store_run_usage(await Runner.run(agent, f"q{n}", session=session))
    totals = await session.get_session_usage()
    assert totals is not None and totals["total_turns"] == 2 and totals["total_tokens"] == 30
    usage = (await astore.get(session.key)).usage
    assert (usage.input_tokens, usage.output_tokens, usage.requests) == (
        totals["input_tokens"], totals["output_tokens"], totals["requests"],
    )  # fmt: skip
    assert len(model.calls) == 2 and len(model.calls[1].input) == 3  # no record in the input


async def test_usage_store_errors_are_logged_not_raised(
    astore: AsyncRedisStore, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    session = RedisAgentSession("conv", astore)
    await session.add_items(turn(1))

    async def broken(*args: Any, **kwargs: Any) -> int:
        raise ConnectionError("down")

    monkeypatch.setattr(astore, "append_messages", broken)
    await session.store_run_usage(run_result(1, 1))
    assert "Failed to store session usage" in caplog.text
    await session.store_run_usage(SimpleNamespace(context_wrapper=SimpleNamespace(usage=None)))
    assert await session.get_session_usage() is None


@pytest.mark.parametrize("between", ["a new turn", "the turn popped"])
async def test_usage_goes_to_the_turn_it_read_or_nowhere(
    make_astore: MakeStore, monkeypatch: pytest.MonkeyPatch, between: str
) -> None:
    """Another worker writes between ``store_run_usage``'s read and its append: the guarded
    append is refused, read again, and the usage goes to the turn first read, or, when that
    turn is gone, nowhere (as ``AdvancedSQLiteSession`` skips a write for a removed turn)."""
    mine, other = (RedisAgentSession("conv", make_astore()) for _ in range(2))
    await mine.add_items(turn(1))
    read = mine._current_session
    reads = 0

    async def read_then_the_other_writes() -> Any:
        nonlocal reads
        found = await read()
        reads += 1
        if reads == 1:
            if between == "a new turn":
                await other.add_items(turn(2))
            else:
                assert await other.pop_item() is not None
                assert await other.pop_item() is not None
        return found

    monkeypatch.setattr(mine, "_current_session", read_then_the_other_writes)
    await mine.store_run_usage(run_result(5, 5))
    assert reads == 2
    rows = await other.get_turn_usage()
    spent = (await other.store.get(other.key)).usage.total_tokens
    if between == "a new turn":
        assert isinstance(rows, list) and [r["user_turn_number"] for r in rows] == [1]
        assert spent == 10
    else:
        assert rows == [] and spent == 0
