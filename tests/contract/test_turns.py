"""Many workers, one session: conditional appends (``expect_last_id``) and fenced turns, on
every backend, sync and async."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest

from redis_session import (
    Message,
    Session,
    SessionNotFound,
    StaleExpectation,
    TurnBusy,
    TurnLost,
    turn_id_from_context,
)
from redis_session._core import turns as _turns
from tests.conftest import AwaitableStore, Backend
from tests.support.clock import wait_gone


class AwaitableTurn:
    """A blocking ``Turn`` with awaitable methods (as ``AwaitableStore`` presents a store)."""

    def __init__(self, turn: Any) -> None:
        self.sync = turn

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.sync, name)
        if not callable(attr):
            return attr

        async def call(*args: Any, **kwargs: Any) -> Any:
            return attr(*args, **kwargs)

        return call


@asynccontextmanager
async def turn(store: Any, key: str, **options: Any) -> AsyncIterator[Any]:
    """``store.turn`` of either flavour, as an async context manager."""
    if isinstance(store, AwaitableStore):
        with store.sync.turn(key, **options) as held:
            yield AwaitableTurn(held)
    else:
        async with store.turn(key, **options) as held:
            yield held


def user(text: str) -> Message:
    return Message(role="user", content=text)


async def test_two_answers_to_one_question_cannot_both_land(make_store: Any) -> None:
    a, b = make_store(), make_store()
    await a.create(Session(key="s", history=[user("question")]))
    seen_a = (await a.get_history("s"))[-1].id
    seen_b = (await b.get_history("s"))[-1].id
    assert await a.append_message("s", Message(role="assistant"), expect_last_id=seen_a)
    with pytest.raises(StaleExpectation) as info:
        await b.append_message("s", Message(role="assistant"), expect_last_id=seen_b)
    history = await a.get_history("s")
    assert [m.role.value for m in history] == ["user", "assistant"]
    assert info.value.newest_id == history[-1].id and info.value.expected_id == seen_b


async def test_an_empty_session_is_expected_with_an_empty_id(store: Any) -> None:
    await store.create(Session(key="s"))
    first = user("first")
    assert await store.append_messages("s", [first], expect_last_id="") == 1
    with pytest.raises(StaleExpectation) as info:
        await store.append_message("s", user("second"), expect_last_id="")
    assert info.value.newest_id == first.id
    # a retry of the applied append answers as a repeated one, however the history moved
    assert await store.append_message("s", first, expect_last_id="") is False
    with pytest.raises(StaleExpectation) as info:
        await store.append_message("s", user("x"), expect_last_id="gone")
    assert [m.content for m in await store.get_history("s")] == ["first"]


async def test_a_childs_newest_message_is_expected_too(store: Any) -> None:
    await store.create(Session(key="p"))
    child = await store.fork_child("p", "sub")
    one = user("one")
    assert await store.append_child_message(child.key, one, expect_last_id="")
    with pytest.raises(StaleExpectation) as info:
        await store.append_child_message(child.key, user("two"), expect_last_id="other")
    assert info.value.newest_id == one.id
    assert await store.append_child_messages(child.key, [user("two")], expect_last_id=one.id)


async def test_four_workers_take_their_turns_one_at_a_time(make_store: Any) -> None:
    """4 workers x 20 turns: a question, then 2 ms later its answer naming the history
    length read at the start of the turn; every question is followed by its own answer."""
    stores = [make_store() for _ in range(4)]
    await stores[0].create(Session(key="s"))

    async def worker(n: int) -> None:
        for t in range(20):
            async with turn(stores[n], "s", lease=10, wait=30) as held:
                count = len(await stores[n].get_history("s"))
                await held.append_message(user(f"q {n}.{t}"))
                await asyncio.sleep(0.002)
                await held.append_message(Message(role="assistant", content=f"a {n}.{t} {count}"))

    if isinstance(stores[0], AwaitableStore):  # blocking stores: a thread per worker
        threads = [threading.Thread(target=asyncio.run, args=(worker(n),)) for n in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
    else:
        await asyncio.wait_for(asyncio.gather(*(worker(n) for n in range(4))), 120)
    history = await stores[0].get_history("s")
    assert len(history) == 160
    for i in range(0, 160, 2):
        question, answer = history[i].content.split(), history[i + 1].content.split()
        assert question[0] == "q" and answer[0] == "a" and question[1] == answer[1]
        assert int(answer[2]) == i


def lease_gone(backend: Backend, key: str) -> None:
    """Wait until the turn of session ``key`` expired on the server (its lease ran out)."""
    wait_gone(backend.sync_client(), backend.schema.session(key).turn)


async def test_a_holder_paused_past_its_lease_cannot_write_after_the_next_claim(
    backend: Backend, make_store: Any
) -> None:
    slow, fast = make_store(), make_store()
    await slow.create(Session(key="s"))
    async with turn(slow, "s", lease=30) as paused:
        first = paused.token
        assert await paused.append_message(user("before the pause"))
        await paused.renew(0.05)  # then a long tool call, a GC pause: past the lease
        lease_gone(backend, "s")  # a long tool call, a GC pause: past the lease
        async with turn(fast, "s", lease=5) as taken:
            assert taken.token > first
            await taken.append_message(user("the next worker's"))
            with pytest.raises(TurnLost) as info:
                await paused.append_message(user("late"))
            assert info.value.token == first and isinstance(info.value, StaleExpectation)
            with pytest.raises(TurnLost):
                await paused.compact_messages(0, "late summary")
            with pytest.raises(TurnLost):
                await paused.renew()
    contents = [m.content for m in await fast.get_history("s")]
    assert contents == ["before the pause", "the next worker's"]


async def test_inside_a_turn_the_store_s_own_writes_are_fenced_too(
    backend: Backend, make_store: Any
) -> None:
    # store.append_message(key, ...) written out of habit inside `with store.turn(key)`: it goes
    # through the turn, so a holder paused past its lease is refused as turn.append_message is.
    slow, fast = make_store(), make_store()
    await slow.create(Session(key="s"))
    await slow.create(Session(key="other"))
    async with turn(slow, "s", lease=30) as held:
        assert await slow.append_message("s", user("through the turn"))
        await held.renew(0.05)  # the write above is not raced by the lease; now it runs out
        lease_gone(backend, "s")
        async with turn(fast, "s", lease=5):
            writes: list[Callable[[], Awaitable[Any]]] = [
                lambda: slow.append_message("s", user("late")),
                lambda: slow.append_messages("s", [user("late too")]),
                lambda: slow.compact_messages("s", 0, "late summary"),
            ]
            for write in writes:
                with pytest.raises(TurnLost):
                    await write()
            assert await slow.append_message("other", user("another session: not fenced"))
            assert await fast.append_message("s", user("the holder's store"))
    assert await slow.append_message("s", user("after the block: no turn"))
    contents = [m.content for m in await fast.get_history("s")]
    assert contents == ["through the turn", "the holder's store", "after the block: no turn"]


async def test_a_held_turn_makes_a_claim_wait_then_busy_and_a_release_frees_it(
    make_store: Any,
) -> None:
    holder, other = make_store(), make_store()
    await holder.create(Session(key="s"))
    await other.get("s")  # its set-up (connections, slots, scripts) outside the timed waits
    async with turn(holder, "s", lease=10) as held:
        assert turn_id_from_context() == held.id
        started = time.monotonic()
        with pytest.raises(TurnBusy):
            async with turn(other, "s", wait=0.3):
                pass
        assert 0.25 < time.monotonic() - started < 3
    started = time.monotonic()
    async with turn(other, "s", wait=5) as next_one:
        assert next_one.token == held.token + 1
    assert time.monotonic() - started < 3  # free at once: far from wait=5


async def test_a_waiting_claim_is_woken_by_the_release(
    backend: Backend, flavour: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A waiting claim blocks on the wake list (BLPOP) up to WAKE_STEP at a time, then claims
    # again: 5 s here, so that a claim the release did not wake comes 5 s after it, far from
    # the woken one's moment whatever the load (with 1 s, a stall of 0.5 s failed it).
    monkeypatch.setattr(_turns, "WAKE_STEP", 5.0)
    if flavour == "sync":
        holder: Any = backend.sync_store()
        waiter: Any = backend.sync_store()
    else:
        holder, waiter = backend.async_store(), backend.async_store()
    a = AwaitableStore(holder) if flavour == "sync" else holder
    b = AwaitableStore(waiter) if flavour == "sync" else waiter
    await a.create(Session(key="s"))
    released = 0.0
    holding = threading.Event()  # the waiter claims once the holder holds, whatever the load

    async def hold() -> None:
        nonlocal released
        async with turn(a, "s", lease=30):
            holding.set()
            await asyncio.sleep(0.3)
            released = time.monotonic()

    async def claim() -> float:
        assert await asyncio.to_thread(holding.wait, 30)
        async with turn(b, "s", lease=30, wait=8):
            return time.monotonic()

    if flavour == "sync":
        thread = threading.Thread(target=asyncio.run, args=(hold(),))
        thread.start()
        claimed = await claim()
        thread.join(timeout=30)
    else:
        _, claimed = await asyncio.gather(hold(), claim())
    assert 0 <= claimed - released < 2.5  # woken by the release, not after the 5 s step
    await a.close()
    await b.close()


async def test_a_crashed_holder_leaves_the_turn_to_the_next_claim_once_its_lease_ran_out(
    make_store: Any,
) -> None:
    crashed, next_worker = make_store(), make_store()
    await crashed.create(Session(key="s"))
    inner: Any = crashed.sync if isinstance(crashed, AwaitableStore) else crashed
    await next_worker.get("s")  # its set-up outside the wait
    fence = await _maybe(inner._run(inner._core.turns.claim("s", 0.2, 0)))  # never released
    async with turn(next_worker, "s", wait=10) as held:
        assert held.token == fence.token + 1


async def _maybe(value: Any) -> Any:
    return await value if asyncio.iscoroutine(value) else value


async def test_a_session_deleted_under_a_turn_refuses_its_writes_and_takes_the_turn_along(
    backend: Backend, make_store: Any
) -> None:
    store = make_store()
    await store.create(Session(key="s"))
    async with turn(store, "s", lease=30) as held:
        await store.delete("s")
        with pytest.raises(SessionNotFound):
            await held.append_message(user("after the delete"))
    raw = backend.sync_client()
    sk = backend.schema.session("s")
    assert raw.exists(sk.turn, sk.wake) == 0
    with pytest.raises(SessionNotFound):
        async with turn(store, "s"):
            pass


async def test_bad_leases_and_waits_are_named(store: Any) -> None:
    from redis_session import InvalidArgument

    await store.create(Session(key="s"))
    for options, argument in (({"lease": 0}, "lease"), ({"wait": -1}, "wait")):
        with pytest.raises(InvalidArgument) as info:
            async with turn(store, "s", **options):
                pass
        assert info.value.argument == argument
