"""Concurrency and lost replies, on real servers (fakeredis has no network to lose)."""

from __future__ import annotations

import asyncio
import threading

import pytest
import redis
import redis.asyncio

from redis_session import AsyncRedisStore, DuplicateSession, Message, RedisStore, Session
from tests.conftest import Backend
from tests.support.proxy import LossyProxy
from tests.support.tokens import counted

pytestmark = pytest.mark.slow
THREADS, PER_THREAD = 8, 150


def _append_all(store: RedisStore, key: str, worker: int, barrier: threading.Barrier) -> None:
    barrier.wait(timeout=10)
    for i in range(PER_THREAD):
        store.append_message(key, Message(role="user", content=f"{worker}:{i}"))


def _run_threads(store: RedisStore, key: str) -> None:
    barrier = threading.Barrier(THREADS)
    threads = [
        threading.Thread(target=_append_all, args=(store, key, w, barrier)) for w in range(THREADS)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads)


def _per_writer(history: list[Message]) -> dict[int, list[int]]:
    seen: dict[int, list[int]] = {}
    for m in history:
        worker, i = m.content.split(":")
        seen.setdefault(int(worker), []).append(int(i))
    return seen


def test_eight_threads_append_1200_in_per_thread_order(real_backend: Backend) -> None:
    store = real_backend.sync_store()
    store.create(Session(key="busy"))
    _run_threads(store, "busy")
    history = store.get_history("busy")
    assert len(history) == THREADS * PER_THREAD
    assert len({m.id for m in history}) == len(history)
    assert _per_writer(history) == {w: list(range(PER_THREAD)) for w in range(THREADS)}


def test_concurrent_appends_with_trimming_keep_the_newest_50(real_backend: Backend) -> None:
    store = real_backend.sync_store(max_history_turns=50)
    store.create(Session(key="trim"))
    _run_threads(store, "trim")
    history = store.get_history("trim")
    assert len(history) == 50
    # The newest 50 overall: every writer's last message is among them, each writer's
    # messages are a contiguous tail of its own sequence, in order.
    for worker, seq in _per_writer(history).items():
        assert seq == list(range(PER_THREAD - len(seq), PER_THREAD)), worker
    assert sum(len(s) for s in _per_writer(history).values()) == 50


async def test_async_tasks_append_concurrently(real_backend: Backend) -> None:
    store = real_backend.async_store()
    await store.create(Session(key="tasks"))

    async def worker(w: int) -> None:
        for i in range(PER_THREAD):
            await store.append_message("tasks", Message(role="user", content=f"{w}:{i}"))

    await asyncio.wait_for(asyncio.gather(*(worker(w) for w in range(THREADS))), timeout=60)
    history = await store.get_history("tasks")
    assert _per_writer(history) == {w: list(range(PER_THREAD)) for w in range(THREADS)}
    await store.close()


def _create(
    store: RedisStore, key: str, agent: str, barrier: threading.Barrier, outcomes: list[str]
) -> None:
    barrier.wait(timeout=10)
    try:
        store.create(Session(key=key, agent_id=agent))
        outcomes.append("created")
    except DuplicateSession:
        outcomes.append("duplicate")


def test_two_workers_creating_one_key_exactly_one_wins(real_backend: Backend) -> None:
    for round_ in range(20):
        key = f"race-{round_}"
        stores = [real_backend.sync_store() for _ in range(2)]
        barrier = threading.Barrier(2)
        outcomes: list[str] = []

        threads = [
            threading.Thread(target=_create, args=(s, key, f"w{i}", barrier, outcomes))
            for i, s in enumerate(stores)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=10)
        assert sorted(outcomes) == ["created", "duplicate"]


def test_append_retried_after_a_lost_reply_is_stored_once(real_backend: Backend) -> None:
    assert real_backend.server is not None
    setup = real_backend.sync_store()
    setup.create(Session(key="lossy"))
    with LossyProxy(real_backend.server.port) as proxy:
        client = redis.Redis(port=proxy.port, socket_timeout=5)
        store = RedisStore(client, prefix=real_backend.prefix)
        store.get("lossy")  # connect and load the scripts before arming the fault
        proxy.drop_replies_to(b"EVALSHA", 1)
        store.append_message("lossy", Message(role="user", content="exactly once"))
        assert proxy.dropped == 1
        client.close()
    history = setup.get_history("lossy")
    assert [m.content for m in history] == ["exactly once"]


async def test_async_append_retried_after_a_lost_reply_is_stored_once(
    real_backend: Backend,
) -> None:
    assert real_backend.server is not None
    setup = real_backend.sync_store()
    setup.create(Session(key="lossy"))
    with LossyProxy(real_backend.server.port) as proxy:
        client = redis.asyncio.Redis(port=proxy.port, socket_timeout=5)
        store = AsyncRedisStore(client, prefix=real_backend.prefix)
        await store.get("lossy")
        proxy.drop_replies_to(b"EVALSHA", 2)
        for text in ("one", "two"):
            await store.append_message("lossy", Message(role="user", content=text))
        assert proxy.dropped == 2
        await client.aclose()
    assert [m.content for m in setup.get_history("lossy")] == ["one", "two"]


def test_without_the_id_check_the_retry_would_have_duplicated(real_backend: Backend) -> None:
    """The control experiment: a plain RPUSH through the same fault is applied twice."""
    assert real_backend.server is not None
    raw = real_backend.sync_client()
    key = real_backend.prefix + "control"
    with LossyProxy(real_backend.server.port) as proxy:
        client = redis.Redis(port=proxy.port, socket_timeout=5)
        client.ping()
        proxy.drop_replies_to(b"RPUSH", 1)
        client.rpush(key, b"x")
        client.close()
    assert raw.llen(key) == 2


def test_a_store_from_a_url_sends_large_and_odd_arguments_intact(server_backend: Backend) -> None:
    real_backend = server_backend
    store = RedisStore.from_url(real_backend.url, prefix=real_backend.prefix)
    try:
        odd = counted(Message(role="user", content="é \x00 " + "x" * 7000))  # > 6000 B chunk
        store.create(Session(key="packed", metadata={"n": "1"}))
        store.append_message("packed", odd)
        assert [m.content for m in store.get_history("packed")] == [odd.content]
        assert RedisStore(real_backend.sync_client(), prefix=real_backend.prefix).get(
            "packed"
        ).history == [odd]
    finally:
        store.close()


async def test_an_async_store_from_a_url_sends_large_arguments_intact(
    server_backend: Backend,
) -> None:
    real_backend = server_backend
    store = AsyncRedisStore.from_url(real_backend.url, prefix=real_backend.prefix)
    try:
        await store.create(Session(key="apacked"))
        await store.append_message("apacked", Message(role="user", content="é" * 9000))
        assert [m.content for m in await store.get_history("apacked")] == ["é" * 9000]
    finally:
        await store.close()
