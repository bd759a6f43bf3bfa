"""``AsyncRedisStore``: the session store (asyncio flavour) over ``redis.asyncio.Redis``."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import timedelta
from types import TracebackType
from typing import Any, TypeVar

import redis.asyncio

from . import _url
from ._core import DEFAULT_EXPIRED_GRACE, Core, Op, Request, ScriptCall
from .models import Message, Session, SessionSummary
from .protocols import AsyncStore, docs_from
from .scripts import SCRIPT_NAMES, script_source

T = TypeVar("T")


@docs_from(AsyncStore)
class AsyncRedisStore:
    """Sessions in Redis shared by many workers (asyncio flavour); one Lua script per write.

    ``client`` is a ``redis.asyncio.Redis`` created with ``decode_responses=False``; the store
    wraps it and exposes it as :attr:`client`. Options: ``prefix`` for every key name,
    ``ttl`` (seconds or timedelta; None = never expire) refreshed on every write,
    ``max_history_turns`` (0 = keep all), ``expired_grace`` (how long after expiry ``get`` still
    says ``SessionExpired`` rather than ``SessionNotFound``).
    """

    def __init__(
        self,
        client: redis.asyncio.Redis,
        *,
        prefix: str = "rs:",
        ttl: float | timedelta | None = None,
        max_history_turns: int = 0,
        expired_grace: float | timedelta = DEFAULT_EXPIRED_GRACE,
    ) -> None:
        self._core = Core(
            prefix=prefix, ttl=ttl, max_history_turns=max_history_turns, expired_grace=expired_grace
        )
        _url.check_client(client)
        self._client = client
        self._scripts = {n: client.register_script(script_source(n)) for n in SCRIPT_NAMES}

    @classmethod
    def from_url(cls, url: str, **options: Any) -> AsyncRedisStore:
        """A store over a new client for ``url`` (``redis://``, ``rediss://``, ``unix://``,
        ``memory://``); ``options`` are the constructor's keyword options.
        """
        return cls(_url.async_client(url), **options)

    @property
    def client(self) -> redis.asyncio.Redis:
        """The wrapped Redis client."""
        return self._client

    @property
    def prefix(self) -> str:
        """The prefix of every key name this store uses."""
        return self._core.schema.prefix

    @property
    def ttl(self) -> timedelta | None:
        """The sliding TTL of sessions, or None."""
        return self._core.ttl

    @property
    def max_history_turns(self) -> int:
        """How many messages a session keeps (the newest); 0 = all."""
        return self._core.max_history_turns

    async def _execute(self, request: Request) -> Any:
        if isinstance(request, ScriptCall):
            script = self._scripts[request.name]
            return await script(keys=list(request.keys), args=list(request.args))
        client: Any = self._client  # redis-py leaves execute_command untyped
        if len(request.commands) == 1:
            return [await client.execute_command(*request.commands[0])]
        pipe = client.pipeline(transaction=False)
        for command in request.commands:
            pipe.execute_command(*command)
        return await pipe.execute()

    async def _run(self, op: Op[T]) -> T:
        reply: Any = None
        try:
            while True:
                reply = await self._execute(op.send(reply))
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]

    async def create(self, session: Session) -> Session:
        return await self._run(self._core.create(session))

    async def get(self, key: str) -> Session:
        return await self._run(self._core.get(key))

    async def get_history(self, key: str, last: int | None = None) -> list[Message]:
        return await self._run(self._core.get_history(key, last))

    async def update(self, session: Session) -> None:
        return await self._run(self._core.update(session))

    async def update_metadata(
        self, key: str, set: Mapping[str, str] | None = None, delete: Iterable[str] = ()
    ) -> None:
        return await self._run(self._core.update_metadata(key, set, delete))

    async def delete(self, key: str) -> bool:
        return await self._run(self._core.delete(key))

    async def append_message(self, key: str, msg: Message) -> bool:
        return await self._run(self._core.append_message(key, msg))

    async def append_messages(self, key: str, messages: Sequence[Message]) -> int:
        return await self._run(self._core.append_messages(key, messages))

    async def annotate_timeout(self, key: str, partial: str) -> bool:
        return await self._run(self._core.annotate_timeout(key, partial))

    async def compact_messages(
        self, key: str, up_to_index: int, summary: str, *, expect_id: str | None = None
    ) -> int:
        return await self._run(
            self._core.compact_messages(key, up_to_index, summary, expect_id=expect_id)
        )

    async def list_sessions(
        self, limit: int | None = None, offset: int = 0
    ) -> list[SessionSummary]:
        return await self._run(self._core.list_sessions(limit, offset))

    async def get_salt(self, name: str) -> bytes:
        return await self._run(self._core.get_salt(name))

    async def set_salt(self, name: str, salt: bytes) -> None:
        return await self._run(self._core.set_salt(name, salt))

    async def get_checksum(self, name: str) -> bytes:
        return await self._run(self._core.get_checksum(name))

    async def set_checksum(self, name: str, checksum: bytes) -> None:
        return await self._run(self._core.set_checksum(name, checksum))

    async def set_secret(self, name: str, value: bytes) -> None:
        return await self._run(self._core.set_secret(name, value))

    async def get_secret(self, name: str) -> bytes:
        return await self._run(self._core.get_secret(name))

    async def delete_secret(self, name: str) -> bool:
        return await self._run(self._core.delete_secret(name))

    async def list_secrets(self) -> list[str]:
        return await self._run(self._core.list_secrets())

    async def migrate_secrets(
        self, reencrypt: Callable[[bytes], bytes], new_salt: bytes, new_checksum: bytes
    ) -> int:
        return await self._run(self._core.migrate_secrets(reencrypt, new_salt, new_checksum))

    async def close(self) -> None:
        await self._client.aclose()

    async def __aenter__(self) -> AsyncRedisStore:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()
