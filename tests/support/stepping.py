"""Driving a store's core operation request by request, with another worker's change between
two of its requests (the reads in steps and the changes they must see).
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from redis_session import RedisStore
from redis_session._core import reads as _reads
from redis_session._core.requests import Commands, ScriptCall


def run_op(op: Any, execute: Callable[[Any], Any], requests: list[Any]) -> Any:
    """Run a core operation, each request by ``execute`` and appended to ``requests``; its
    value.
    """
    reply: Any = None
    try:
        while True:
            request = op.send(reply)
            requests.append(request)
            reply = execute(request)
    except StopIteration as done:
        return done.value


def steps(store: RedisStore, op: Any, between: Callable[[], object]) -> tuple[Any, list[Any]]:
    """Run ``op`` on ``store``, with ``between`` (another worker) after its first request;
    the outcome (a value, or the name of the exception raised) and the requests sent.
    """
    requests: list[Any] = []

    def execute(request: Any) -> Any:
        reply = store._execute(request)
        if len(requests) == 1:
            between()
        return reply

    try:
        return run_op(op, execute, requests), requests
    except Exception as exc:  # the read may see the session gone, as a fresh read does
        return type(exc).__name__, requests


def step_names(requests: list[Any]) -> list[str]:
    """The command names of the plain requests among ``requests``, in order."""
    return [c[0] for r in requests if isinstance(r, Commands) for c in r.commands]


def in_steps(store: RedisStore, per_step: int, kind: str = "plain", size: int = 0) -> RedisStore:
    """``store``, a store without a read cache, set to read a long list in steps of about
    ``per_step`` messages of ``size`` bytes (default: the element size it learned from a read)
    after its first request: plain ones (``LRANGE`` + ``HMGET``, kind ``"plain"``) or, knowing
    no element size, ``read_range`` script calls (kind ``"script"``; a read teaches the size
    again: set it before each read).
    """
    core = store._core
    size = size or core.reader.element_bytes
    assert size > 0 and not core.reader.cache.max_bytes
    core.limits.read_budget = per_step * size  # the first request: the script alone
    core.reader.element_bytes = 0 if kind == "script" else size
    return store


@contextlib.contextmanager
def recording(store: RedisStore) -> Iterator[Counter[str]]:
    """Counts of what ``store`` sends meanwhile: each script call by its name, each plain
    command by its name (those pipelined behind a script as ``name+after``).
    """
    seen: Counter[str] = Counter()
    execute = store._execute

    def counted(request: Any) -> Any:
        if isinstance(request, ScriptCall):
            seen[request.name] += 1
            seen.update(f"{c[0]}+after" for c in request.after)
        elif isinstance(request, Commands):
            seen.update(c[0] for c in request.commands)
        return execute(request)

    store._execute = counted  # type: ignore[method-assign]
    try:
        yield seen
    finally:
        store._execute = execute  # type: ignore[method-assign]


def lrange_taken(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """For each first read from now on, whether it took the elements of its ``LRANGE`` sent
    behind the ``get`` script (False: it read again by the script alone), in order.
    """
    taken: list[bool] = []
    unchanged = _reads._unchanged

    def spied(*args: Any) -> Any:
        got = unchanged(*args)
        taken.append(got is not None)
        return got

    monkeypatch.setattr(_reads, "_unchanged", spied)
    return taken
