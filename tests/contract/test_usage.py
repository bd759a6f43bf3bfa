"""Usage and budgets: ``Message.usage`` summed into ``Session.usage`` by the scripts that append,
never lowered, a child's added at its merge; ``max_usage_tokens`` refusing the first append
past it with nothing written. On every backend, sync and async."""

from __future__ import annotations

import threading
from typing import Any

import pytest
import redis

from redis_session import (
    CorruptData,
    InvalidArgument,
    Message,
    RedisStore,
    Session,
    Usage,
    UsageLimitExceeded,
)
from tests.conftest import Backend, StoreFactory
from tests.support.proxy import LossyProxy

PASSPHRASE, WORK = "correct horse battery staple", 10  # scrypt n = 2**10 keeps tests fast


def spent(i: int, o: int, r: int = 1) -> Message:
    return Message(
        role="assistant",
        content=f"{i}/{o}",
        usage=Usage(input_tokens=i, output_tokens=o, requests=r),
    )


async def test_usage_sums_what_every_message_cost_and_is_never_lowered(store: Any) -> None:
    first = spent(10, 2)
    await store.create(Session(key="u", history=[Message(role="user", content="q"), first]))
    assert (await store.get("u")).usage == Usage(input_tokens=10, output_tokens=2, requests=1)
    second = spent(30, 5)
    assert await store.append_message("u", second) is True
    assert await store.append_message("u", second) is False  # a retry: stored once, counted once
    await store.append_messages("u", [Message(role="tool", content="t"), spent(1, 1, 2), first])
    want = Usage(input_tokens=41, output_tokens=8, requests=4)
    assert (await store.get("u")).usage == want
    await store.pop_message("u")
    await store.compact_messages("u", 1, "summary")
    history = await store.get_history("u")
    await store.rewind("u", after=history[0].id)
    session = await store.get("u")
    assert len(session.history) == 1 and session.usage == want  # spend stays spent
    assert [m.usage for m in history[1:]] == [second.usage, None]  # each message keeps its own


async def test_a_message_keeps_its_token_count(store: Any) -> None:
    counted = Message(role="user", content="hello", tokens=2)
    await store.create(Session(key="t"))
    await store.append_message("t", counted)
    assert (await store.get_history("t")) == [counted]
    with pytest.raises(ValueError, match="tokens"):
        Message(role="user", tokens=-1)
    with pytest.raises(ValueError, match="input_tokens"):
        Usage(input_tokens=2**41)


async def test_trimming_does_not_lower_usage(make_store: StoreFactory) -> None:
    store = make_store(max_history_turns=2)
    await store.create(Session(key="trim"))
    for n in range(5):
        await store.append_message("trim", spent(n, 1))
    session = await store.get("trim")
    assert len(session.history) == 2
    assert session.usage == Usage(input_tokens=10, output_tokens=5, requests=5)


async def test_a_merge_adds_the_childs_usage_to_its_parent(store: Any) -> None:
    await store.create(Session(key="p", history=[spent(5, 5)]))
    child = await store.fork_child("p", "researcher")
    await store.append_child_messages(child.key, [spent(100, 20), spent(50, 10)])
    assert (await store.get("p")).usage.total_tokens == 10  # not its parent's until merged
    assert (await store.get_child(child.key)).usage == Usage(
        input_tokens=150, output_tokens=30, requests=2
    )
    await store.merge_child(child.key, "found it")
    assert (await store.get("p")).usage == Usage(input_tokens=155, output_tokens=35, requests=3)
    other = await store.fork_child("p", "idle")
    await store.merge_child(other.key, "")
    assert (await store.get("p")).usage.total_tokens == 190  # a child that spent nothing adds 0


async def test_a_budget_stops_the_first_append_past_it(make_store: StoreFactory) -> None:
    store = make_store(max_usage_tokens=100)
    await store.create(Session(key="loop", history=[Message(role="user", content="go")]))
    calls = 0
    with pytest.raises(UsageLimitExceeded) as raised:
        for _ in range(50):  # an agent loop: every model call costs 30 tokens
            await store.append_message("loop", spent(25, 5))
            calls += 1
    assert calls == 4  # 0, 30, 60, 90 spent before each; the fifth found 120 >= 100
    assert (raised.value.usage, raised.value.budget, raised.value.key) == (120, 100, "loop")
    session = await store.get("loop")
    assert len(session.history) == 5 and session.usage.total_tokens == 120  # nothing written
    with pytest.raises(UsageLimitExceeded):
        await store.append_messages("loop", [Message(role="user", content="more")])
    assert len(await store.get_history("loop")) == 5


async def test_a_sessions_own_budget_comes_before_the_stores(make_store: StoreFactory) -> None:
    store = make_store(max_usage_tokens=10)
    await store.create(Session(key="rich", max_usage_tokens=0))  # 0: no budget
    await store.create(Session(key="tight", max_usage_tokens=5))
    for _ in range(3):
        await store.append_message("rich", spent(10, 10))
    await store.append_message("tight", spent(3, 3))
    with pytest.raises(UsageLimitExceeded, match="max_usage_tokens=5"):
        await store.append_message("tight", spent(1, 1))
    assert (await store.get("rich")).usage.total_tokens == 60
    assert (await store.get("tight")).max_usage_tokens == 5
    assert (await store.get("rich")).max_usage_tokens == 0
    with pytest.raises(InvalidArgument, match="max_usage_tokens"):
        Session(key="x", max_usage_tokens=-1)


async def test_a_child_is_held_to_the_stores_budget(make_store: StoreFactory) -> None:
    store = make_store(max_usage_tokens=50)
    await store.create(Session(key="p"))
    child = await store.fork_child("p", "runaway")
    await store.append_child_message(child.key, spent(40, 20))
    with pytest.raises(UsageLimitExceeded):
        await store.append_child_message(child.key, spent(1, 1))
    assert len((await store.get_child(child.key)).history) == 1


def test_usage_is_exact_under_concurrent_writers_with_merges(server_backend: Backend) -> None:
    """8 writers append 4,000 messages with usage across 100 sessions (and merge children into
    them): every session's usage is the sum of what was appended to it and its merged children."""
    store = server_backend.sync_store()
    sessions = [f"s{i}" for i in range(100)]
    for key in sessions:
        store.create(Session(key=key))
    expected = {key: [0, 0, 0] for key in sessions}
    lock = threading.Lock()
    failures: list[BaseException] = []

    def writer(w: int) -> None:
        own: RedisStore = server_backend.sync_store()
        try:
            for n in range(500):
                key = sessions[(w * 500 + n) % 100]
                i, o = w + 1, n % 7
                if n % 50 == 49:  # a sub-agent: its spend reaches the parent at its merge
                    child = own.fork_child(key, f"w{w}n{n}")
                    own.append_child_messages(child.key, [spent(i, o), spent(1, 0)])
                    own.merge_child(child.key, "done")
                    i, o, r = i + 1, o, 2
                else:
                    own.append_message(key, spent(i, o))
                    r = 1
                with lock:
                    e = expected[key]
                    e[0], e[1], e[2] = e[0] + i, e[1] + o, e[2] + r
        except BaseException as exc:  # reported below
            failures.append(exc)
        finally:
            own.close()

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads) and not failures, failures
    for key in sessions:
        i, o, r = expected[key]
        assert store.get(key).usage == Usage(input_tokens=i, output_tokens=o, requests=r), key
    totals = [sum(e[n] for e in expected.values()) for n in range(3)]
    assert store.usage() == Usage(
        input_tokens=totals[0], output_tokens=totals[1], requests=totals[2]
    )


async def test_the_stores_usage_is_all_that_was_spent_under_its_prefix(
    make_store: StoreFactory, backend: Backend
) -> None:
    store = make_store()
    assert await store.usage() == Usage()
    history = [Message(role="user", content="q"), spent(10, 1)]
    await store.create(Session(key="a", history=history))
    await store.create(Session(key="b"))
    await store.append_message("b", spent(5, 5))
    child = await store.fork_child("b", "helper")
    await store.append_child_message(child.key, spent(7, 0, 2))
    await store.merge_child(child.key, "")  # counted when the child spent it: not again
    await store.branch("a", "a2")  # a copy spends nothing
    await store.delete("b")  # what was spent stays spent
    assert await store.usage() == Usage(input_tokens=22, output_tokens=6, requests=4)
    other = backend.sync_store(prefix=backend.prefix + "tenant2:")
    other.create(Session(key="a", history=[spent(100, 100)]))
    assert (await store.usage()).total_tokens == 28  # another prefix: another tenant
    assert other.usage().total_tokens == 200


async def test_a_branch_starts_from_the_usage_of_what_it_holds(store: Any) -> None:
    history = [Message(role="user", content="q"), spent(10, 1), spent(20, 2)]
    await store.create(Session(key="s", history=history))
    await store.branch("s", "b", at=history[1].id)
    assert (await store.get("b")).usage == Usage(input_tokens=10, output_tokens=1, requests=1)
    assert (await store.get("s")).usage.total_tokens == 33


async def test_a_sealed_sessions_usage_and_budget(make_store: StoreFactory) -> None:
    store = make_store(passphrase=PASSPHRASE, kdf_work=WORK, max_usage_tokens=40)
    await store.create(Session(key="sealed"))
    await store.append_messages("sealed", [spent(20, 5), spent(10, 5)])
    with pytest.raises(UsageLimitExceeded):
        await store.append_message("sealed", spent(1, 1))
    session = await store.get("sealed")
    assert session.usage == Usage(input_tokens=30, output_tokens=10, requests=2)
    assert [m.usage for m in session.history] == [
        Usage(input_tokens=20, output_tokens=5, requests=1),
        Usage(input_tokens=10, output_tokens=5, requests=1),
    ]


async def test_create_answers_with_the_usage_of_its_history(store: Any) -> None:
    made = await store.create(Session(key="c", history=[spent(7, 1), spent(3, 0, 2)]))
    assert made.usage == Usage(input_tokens=10, output_tokens=1, requests=3)


def test_a_message_holds_one_calls_figures() -> None:
    big = Usage(input_tokens=2**40) + Usage(input_tokens=1)  # a sum may pass the bound
    assert big.input_tokens == 2**40 + 1
    with pytest.raises(InvalidArgument, match="usage"):
        Message(role="assistant", usage=big)


async def test_a_changed_message_with_figures_out_of_range_is_refused(store: Any) -> None:
    await store.create(Session(key="r"))
    for bad in (
        {"tokens": -1},
        {"tokens": 2**41},
        {"usage": Usage.total(10**20, 0, 1)},
    ):
        changed = Message(role="user", content="x").model_copy(update=bad)  # past validation
        with pytest.raises(InvalidArgument):
            await store.append_message("r", changed)
    assert await store.get_history("r") == []


def test_usage_figures_another_writer_broke_stop_the_write_before_it_writes(
    server_backend: Backend,
) -> None:
    store = server_backend.sync_store()
    raw = server_backend.sync_client()
    store.create(Session(key="s"))
    meta = server_backend.schema.session("s").meta
    raw.hset(meta, "uo", "zz")
    with pytest.raises(CorruptData, match="usage figures"):
        store.append_message("s", spent(1, 1))
    assert raw.llen(server_backend.schema.session("s").msgs) == 0  # nothing written
    raw.hdel(meta, "uo")
    raw.hset(server_backend.schema.usage_of("s"), "ui", "not a number")
    with pytest.raises(CorruptData, match="usage figures"):
        store.append_message("s", spent(1, 1))
    assert raw.llen(server_backend.schema.session("s").msgs) == 0
    store.append_message("s", Message(role="user", content="no usage: the totals untouched"))
    assert len(store.get_history("s")) == 1


def test_a_usage_append_retried_after_a_lost_reply_counts_once(real_backend: Backend) -> None:
    """redis-py's retry applies a script twice after a lost reply (a failover, a cut
    connection): the second run finds the message's id and adds no usage, to the session or to
    the prefix's totals; a merge retried the same way adds the child's usage once."""
    assert real_backend.server is not None
    store = real_backend.sync_store()
    store.create(Session(key="p"))
    child = store.fork_child("p", "sub")
    store.append_child_message(child.key, spent(7, 3))
    with LossyProxy(real_backend.server.port) as proxy:
        client = redis.Redis(port=proxy.port, socket_timeout=5)
        lossy = RedisStore(client, prefix=real_backend.prefix)
        lossy.get("p")  # the tree as it is: each write below is one script call
        proxy.drop_replies_to(b"EVALSHA", 1)
        lossy.append_message("p", spent(100, 20))  # its retry finds the message stored
        proxy.drop_replies_to(b"EVALSHA", 1)
        lossy.merge_child(child.key, "")
        assert proxy.dropped == 2
        client.close()
    assert store.get("p").usage == Usage(input_tokens=107, output_tokens=23, requests=2)
    assert store.usage() == Usage(input_tokens=107, output_tokens=23, requests=2)
