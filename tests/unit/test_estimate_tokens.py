"""The default ``count_tokens``: :func:`redis_session.estimate_tokens`, and the option's check."""

from __future__ import annotations

import pytest

from redis_session import InvalidArgument, Message, StoreOptions, ToolCall, estimate_tokens


def test_count_tokens_must_be_callable() -> None:
    with pytest.raises(InvalidArgument, match="count_tokens"):
        StoreOptions(count_tokens=3)  # type: ignore[arg-type]
    assert StoreOptions().count_tokens is estimate_tokens


def test_the_estimate() -> None:
    assert estimate_tokens(Message(role="user")) == 4  # the framing alone
    assert estimate_tokens(Message(role="user", content="abcd")) == 1 + 4
    assert estimate_tokens(Message(role="user", content="abcde")) == 2 + 4  # rounded up
    call = ToolCall(id="id-not-counted", name="ab", input="cd", output="efgh")
    assert estimate_tokens(Message(role="assistant", tool_calls=[call])) == 2 + 4
