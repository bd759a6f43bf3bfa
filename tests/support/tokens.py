"""Messages as a store with the default ``count_tokens`` stores them: each without a token
count given one by :func:`redis_session.estimate_tokens` (what a read returns for them)."""

from __future__ import annotations

from collections.abc import Iterable

from redis_session import Message, estimate_tokens


def as_stored(messages: Iterable[Message]) -> list[Message]:
    """``messages`` with the token count a store gives those that have none."""
    return [m if m.tokens is not None else counted(m) for m in messages]


def counted(msg: Message) -> Message:
    """``msg`` with its default token count."""
    return msg.model_copy(update={"tokens": estimate_tokens(msg)})
