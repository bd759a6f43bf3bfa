"""Driving a store's core operation request by request, with another worker's change between
two of its requests (the reads in steps and the changes they must see).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from redis_session import RedisStore
from redis_session._requests import Commands


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


def in_steps(store: RedisStore, per_step: int, kind: str = "plain") -> RedisStore:
    """``store``, a store without a read cache that has read something (it knows the element
    size), set to read a long list in steps of about ``per_step`` messages after its first
    request: plain ones (``LRANGE`` + ``HMGET``, kind ``"plain"``) or, knowing no element size,
    ``read_range`` script calls (kind ``"script"``).
    """
    core = store._core
    assert core.element_bytes > 0 and not core._reads.max_bytes
    core.read_budget = per_step * core.element_bytes  # the first request: the script alone
    if kind == "script":
        core.element_bytes = 0
    return store
