"""Counting round trips on the client's socket and script calls on the server, and the
requests the store's core would send (taken from it without I/O).
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterable
from typing import Any

import redis
import redis.asyncio
import redis.asyncio.connection
import redis.connection

from redis_session._core.core import Commands, Request, ScriptCall
from redis_session.scripts import script_source


class Wire:
    """How many times a counting connection wrote a request to its socket."""

    writes = 0


class CountingConnection(redis.connection.Connection):
    """A redis-py connection that counts its writes (one per command or per pipeline)."""

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        """Count the write, then send it."""
        Wire.writes += 1
        super().send_packed_command(command, check_health)  # type: ignore[no-untyped-call]


class AsyncCountingConnection(redis.asyncio.connection.Connection):
    """The asyncio flavour of :class:`CountingConnection`."""

    async def send_packed_command(
        self, command: bytes | str | Iterable[bytes], check_health: bool = True
    ) -> None:
        """Count the write, then send it."""
        Wire.writes += 1
        await super().send_packed_command(command, check_health)


def evalsha_stats(client: Any) -> tuple[int, int]:
    """``(calls, µs)`` of EVALSHA on the server so far (INFO commandstats)."""
    stats: dict[str, Any] = client.info("commandstats")
    entry = stats.get("cmdstat_evalsha", {"calls": 0, "usec": 0})
    return int(entry["calls"]), int(entry["usec"])


def first_request(op: Generator[Request, Any, Any]) -> Request:
    """The request an operation of the store's core would send first (no I/O)."""
    request = next(op)
    op.close()
    return request


def first_script(op: Generator[Request, Any, Any]) -> ScriptCall:
    """:func:`first_request` of an operation that starts with a Lua script."""
    request = first_request(op)
    assert isinstance(request, ScriptCall), request
    return request


def bare_script(client: Any, request: ScriptCall) -> Callable[[], Any]:
    """Send ``request``'s script as plain redis-py would: EVALSHA of the script as the store
    sends it, with the same KEYS and ARGV (the script is loaded first), and the commands it
    has behind it in the same pipeline.
    """
    sha = client.script_load(script_source(request.name))
    command = ("EVALSHA", sha, len(request.keys), *request.keys, *request.args)

    if request.after:  # the script and the reads behind it, in one pipeline
        after = [tuple(c) for c in request.after]

        def send_all() -> Any:
            pipe = client.pipeline(transaction=False)
            pipe.execute_command(*command)
            for c in after:
                pipe.execute_command(*c)
            return pipe.execute(raise_on_error=False)

        return send_all

    def send() -> Any:
        return client.execute_command(*command)

    return send


def bare_request(client: Any, request: Request) -> Callable[[], Any]:
    """Send ``request`` as plain redis-py would: a script call as :func:`bare_script` does,
    plain commands in one pipeline (each failed command's error in its reply's place).
    """
    if isinstance(request, ScriptCall):
        return bare_script(client, request)
    assert isinstance(request, Commands), request
    commands = [tuple(c) for c in request.commands]

    def send_all() -> Any:
        pipe = client.pipeline(transaction=False)
        for c in commands:
            pipe.execute_command(*c)
        return pipe.execute(raise_on_error=False)

    return send_all
