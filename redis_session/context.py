"""Per-turn context on ``contextvars``: it follows each thread's and each asyncio task's context.

Each ``with_*`` function is a context manager that sets the value and restores the previous one
on exit; each ``*_from_context`` function reads it (``""`` or ``None`` when unset).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from .models import RunContext

_session_key: ContextVar[str] = ContextVar("redis_session.session_key", default="")
_turn_id: ContextVar[str] = ContextVar("redis_session.turn_id", default="")
_run_context: ContextVar[RunContext | None] = ContextVar("redis_session.run_context", default=None)


@contextmanager
def with_session_key(key: str) -> Iterator[str]:
    """Within the block, :func:`session_key_from_context` returns ``key``."""
    token = _session_key.set(key)
    try:
        yield key
    finally:
        _session_key.reset(token)


def session_key_from_context() -> str:
    """The session key set by the innermost :func:`with_session_key`, else ``""``."""
    return _session_key.get()


@contextmanager
def with_turn_id(turn_id: str) -> Iterator[str]:
    """Within the block, :func:`turn_id_from_context` returns ``turn_id``."""
    token = _turn_id.set(turn_id)
    try:
        yield turn_id
    finally:
        _turn_id.reset(token)


def turn_id_from_context() -> str:
    """The turn id set by the innermost :func:`with_turn_id`, else ``""``."""
    return _turn_id.get()


@contextmanager
def with_run_context(rc: RunContext) -> Iterator[RunContext]:
    """Within the block, :func:`run_context_from_context` returns ``rc``."""
    token = _run_context.set(rc)
    try:
        yield rc
    finally:
        _run_context.reset(token)


def run_context_from_context() -> RunContext | None:
    """The run context set by the innermost :func:`with_run_context`, else None."""
    return _run_context.get()
