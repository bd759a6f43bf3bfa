"""Fixtures of the integration tests: an asyncio store per backend, a round-trip counter."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
import redis.asyncio.connection

from redis_session import AsyncRedisStore
from tests.conftest import Backend


@pytest.fixture
async def make_astore(backend: Backend) -> AsyncIterator[Callable[..., AsyncRedisStore]]:
    """``make_astore(**options)``: an ``AsyncRedisStore`` of the test's backend and prefix, with
    its own client (two of them act as two workers)."""
    made: list[AsyncRedisStore] = []

    def factory(**options: Any) -> AsyncRedisStore:
        store = backend.async_store(**options)
        made.append(store)
        return store

    yield factory
    for store in made:
        await store.close()


@pytest.fixture
async def astore(make_astore: Callable[..., AsyncRedisStore]) -> AsyncRedisStore:
    """The default asyncio store of the test's backend."""
    return make_astore()


class RoundTrips:
    """Counts requests written to Redis by every redis-py asyncio connection in this process
    (fakeredis's included): one write of one command or of one pipeline is one round trip."""

    def __init__(self) -> None:
        self.count = 0

    def reset(self) -> None:
        self.count = 0


@pytest.fixture
def round_trips(monkeypatch: pytest.MonkeyPatch) -> Iterator[RoundTrips]:
    counter = RoundTrips()
    original = redis.asyncio.connection.AbstractConnection.send_packed_command

    async def counting(self: Any, *args: Any, **kwargs: Any) -> None:
        counter.count += 1
        await original(self, *args, **kwargs)

    monkeypatch.setattr(
        redis.asyncio.connection.AbstractConnection, "send_packed_command", counting
    )
    yield counter
