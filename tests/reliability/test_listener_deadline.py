"""A listener's ``get(timeout)`` returns within its timeout while the server is away: the
retries of a client from a URL stop where the wait ends (before, redis-py's 10 retries of a
refused connection held one ``get(timeout=0.3)`` for 3-5 s), and nothing is lost once the
server answers again; the live pub/sub listener's too, which then subscribes again."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest

from redis_session import AsyncRedisStore, RedisStore, Session
from tests.support.faults import OwnServer

pytestmark = pytest.mark.redis

SLACK = 0.25
"""What a get may take past its timeout: the last command's own time on a loaded machine."""
LIMITS = (0.3, 0.3, 1.0)
"""The timeouts of the gets made while the server is away."""


def timed_gets(get: Callable[[float], object]) -> list[float]:
    """Run ``get`` with each of :data:`LIMITS`; each must return None; their durations."""
    took = []
    for timeout in LIMITS:
        started = time.monotonic()
        assert get(timeout) is None
        took.append(time.monotonic() - started)
    return took


@pytest.mark.parametrize("since", ["earliest", None])
def test_a_listener_waits_no_longer_than_its_timeout_while_the_server_is_away(
    own_server: Callable[..., OwnServer], since: str | None
) -> None:
    """The log listener (``since``: its log outlives the restart, nothing lost, nothing twice)
    and the live one (None, pub/sub: before, one get(timeout=0.5) lasted the whole outage; once
    the server answers it subscribes again, the gap counted, and hears what comes after)."""
    server = own_server(persistent=since is not None)
    store = RedisStore.from_url(server.url, prefix="dl:")
    listener = store.listen(since=since) if since else store.listen()
    try:
        store.create(Session(key="before"))
        got = listener.get(timeout=5)
        assert got is not None and got.key == "before"
        server.kill(server.port)
        took = timed_gets(listener.get)
        assert all(t < limit + SLACK for t, limit in zip(took, LIMITS, strict=True)), took
        server.restart(server.port)
        server.wait_ready()
        heard = None
        for n in range(40):  # bounded: each round publishes one event and waits 0.25 s
            store.create(Session(key=f"after-{n}"))
            if (heard := listener.get(timeout=0.25)) is not None:
                break
        assert heard is not None
        assert heard.key == "after-0" if since else heard.key.startswith("after-")
        assert since or listener.reconnects >= 1  # the live listener's gap is counted
    finally:
        listener.close()
        store.close()


@pytest.mark.parametrize("since", ["earliest", None])
def test_asyncio_listeners_too(own_server: Callable[..., OwnServer], since: str | None) -> None:
    """The log listener (``since``; its log outlives the restart: nothing lost, nothing twice)
    and the live one (None; heard again once subscribed)."""
    server = own_server(persistent=since is not None)

    async def main() -> list[float]:
        async with AsyncRedisStore.from_url(server.url, prefix="dl:") as store:
            listener = await (store.listen(since=since) if since else store.listen())
            try:
                await store.create(Session(key="before"))
                got = await listener.get(timeout=5)
                assert got is not None and got.key == "before"
                server.kill(server.port)
                took = []
                for timeout in LIMITS:
                    started = time.monotonic()
                    assert await listener.get(timeout=timeout) is None
                    took.append(time.monotonic() - started)
                server.restart(server.port)
                server.wait_ready()
                heard = None
                for n in range(40):  # bounded: each round publishes one event, waits 0.25 s
                    await store.create(Session(key=f"after-{n}"))
                    if (heard := await listener.get(timeout=0.25)) is not None:
                        break
                assert heard is not None
                assert heard.key == "after-0" if since else heard.key.startswith("after-")
                return took
            finally:
                await listener.aclose()

    took = asyncio.run(main())
    assert all(t < limit + SLACK for t, limit in zip(took, LIMITS, strict=True)), took


def test_a_connection_made_again_by_redis_py_is_one_gap_even_when_the_deadline_cuts_in(
    own_server: Callable[..., OwnServer],
) -> None:
    """redis-py makes a killed pub/sub connection again (and resubscribes) in its retry's
    failure handler; when the deadline then cuts the retry, the listener does not subscribe a
    second time: one gap, counted once (it was counted twice with waits under ~20 ms)."""
    server = own_server()
    store = RedisStore.from_url(server.url, prefix="dl:")
    admin = server.client(socket_timeout=5)
    listener = store.listen()
    try:
        store.create(Session(key="before"))
        assert listener.get(timeout=5) is not None
        before = listener.reconnects
        admin.client_kill_filter(_type="pubsub")
        for _ in range(50):  # bounded: 50 waits of 5 ms
            listener.get(timeout=0.005)
        assert listener.reconnects - before == 1
        store.create(Session(key="after"))
        got = listener.get(timeout=5)
        assert got is not None and got.key == "after"
    finally:
        listener.close()
        admin.close()
        store.close()
