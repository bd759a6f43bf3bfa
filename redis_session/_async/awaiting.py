"""What ``AsyncRedisStore.listen`` returns: both awaitable and an async context manager, as
redis-py's asyncio pipelines are, so that ``listener = await store.listen()`` and
``async with store.listen() as listener`` both work (asyncio only: the blocking store returns
the listener itself, a context manager too).
"""

from __future__ import annotations

from collections.abc import Coroutine, Generator
from types import TracebackType
from typing import Any, Generic, Protocol, TypeVar


class Closing(Protocol):
    """A listener: something closed with ``aclose()``."""

    async def aclose(self) -> None: ...


L = TypeVar("L", bound=Closing, covariant=True)


class Listening(Generic[L]):
    """A listener being started: ``await`` it for the listener, or enter it with ``async
    with`` (started on entry, closed on exit). Awaited or entered once.
    """

    __slots__ = ("_listener", "_opening")

    def __init__(self, opening: Coroutine[Any, Any, L]) -> None:
        self._opening = opening
        self._listener: L | None = None

    def __await__(self) -> Generator[Any, None, L]:
        return self._opening.__await__()

    async def __aenter__(self) -> L:
        self._listener = await self._opening
        return self._listener

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._listener is not None:
            await self._listener.aclose()
