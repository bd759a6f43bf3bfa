"""A pytest plugin for tests of code that uses redis_session: stores on the embedded
``memory://`` server (no Redis needed), the lifecycle events they emitted, and a count of
the round trips a block of code made.

Installed with the package (entry point ``pytest11``), it only adds fixtures, all named
``rs_*``; a test that names none of them is untouched, and nothing of redis_session is
imported until one is used. The stores need the ``memory`` extra (fakeredis).

Fixtures:

- ``rs_store``: a :class:`~redis_session.RedisStore` on a ``memory://`` server of the test's
  own (empty, shared with nothing), closed afterwards.
- ``rs_async_store``: the same as an :class:`~redis_session.AsyncRedisStore` (an async
  fixture: it needs pytest-asyncio, as async tests do). It is a pytest-asyncio fixture, so it
  works in pytest-asyncio's default strict mode (where async tests are marked
  ``@pytest.mark.asyncio``) as in its auto mode.
- ``rs_events``: the lifecycle events ``rs_store`` and ``rs_async_store`` emitted so far,
  in order (a list the store's hook appends to), each with its ``id`` in the store's event
  log: a listener of the store (``listen(since=...)``, ``listen(group=...)``) gets the same
  events with the same ids.

And :func:`round_trips`: ``with round_trips(store) as count: ...``, then ``count.value`` is
how many requests the store sent to Redis inside the block (a script call or a pipeline is
one round trip).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from .aio import AsyncRedisStore
    from .models import SessionLifecycleEvent
    from .store import RedisStore


@dataclass
class RoundTrips:
    """How many requests a store sent inside a :func:`round_trips` block."""

    value: int = 0


@contextmanager
def round_trips(store: RedisStore | AsyncRedisStore) -> Iterator[RoundTrips]:
    """Count the requests ``store`` sends to Redis inside the block (sync or async store)."""
    from ._core.requests import Commands, ScriptCall

    count = RoundTrips()
    real = store._execute

    def counting(request: Any) -> Any:
        if isinstance(request, ScriptCall | Commands):
            count.value += 1
        return real(request)

    store._execute = counting  # type: ignore[method-assign]
    try:
        yield count
    finally:
        del store._execute  # the class's method again


@pytest.fixture
def rs_events() -> list[SessionLifecycleEvent]:
    """The lifecycle events ``rs_store`` / ``rs_async_store`` emitted, in order."""
    return []


@pytest.fixture
def rs_store(rs_events: list[SessionLifecycleEvent]) -> Iterator[RedisStore]:
    """A blocking store on a ``memory://`` server of this test's own."""
    from .store import RedisStore

    store = RedisStore.from_url("memory://", lifecycle_hook=rs_events.append)  # its own server
    try:
        yield store
    finally:
        store.close()


def _async_fixture(fn: Callable[..., Any]) -> Any:
    """``fn`` as pytest-asyncio's fixture when pytest-asyncio is installed (strict mode runs
    only those), else as a plain pytest fixture (which nothing could await anyway).
    """
    try:
        import pytest_asyncio
    except ImportError:
        return pytest.fixture(fn)
    return pytest_asyncio.fixture(fn)


@_async_fixture
async def rs_async_store(rs_events: list[SessionLifecycleEvent]) -> AsyncIterator[AsyncRedisStore]:
    """An asyncio store on a ``memory://`` server of this test's own."""
    from .aio import AsyncRedisStore

    store = AsyncRedisStore.from_url("memory://", lifecycle_hook=rs_events.append)
    try:
        yield store
    finally:
        await store.close()
