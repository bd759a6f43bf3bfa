"""Every message a store stores has a token count (issue #46): the caller's ``Message.tokens``
as given, else the store's ``count_tokens`` (``estimate_tokens`` by default) counts it when it
stores it: appended, created with, a child's, a summary, a repair's answers. A count that is
not an int from 0 to 2^40, or a counter that raises, refuses the call before it writes.
"""

from __future__ import annotations

from typing import Any

import pytest

from redis_session import (
    InvalidArgument,
    Message,
    Session,
    SessionNotFound,
    ToolCall,
    estimate_tokens,
)
from tests.conftest import StoreFactory


def words(msg: Message) -> int:
    return len(msg.content.split())


async def test_a_message_without_a_count_is_stored_with_the_stores(store: Any) -> None:
    given = Message(role="user", content="one two three", tokens=99)
    plain = Message(role="user", content="x" * 10)
    calling = Message(
        role="assistant",
        tool_calls=[ToolCall(id="c1", name="search", input='{"q": "redis"}', output="found")],
    )
    await store.create(Session(key="s", history=[plain]))
    await store.append_message("s", given)
    await store.append_messages("s", [calling])
    history = (await store.get("s")).history
    assert [m.tokens for m in history] == [
        estimate_tokens(plain),
        99,  # the caller's count, as given
        estimate_tokens(calling),
    ]
    assert estimate_tokens(plain) == 3 + 4 and estimate_tokens(calling) == 7 + 4  # 25 chars
    assert [m.id for m in history] == [plain.id, given.id, calling.id]
    assert plain.tokens is None  # the caller's message is not changed


async def test_a_custom_counter_counts_every_kind_of_stored_message(
    make_store: StoreFactory,
) -> None:
    store = make_store(count_tokens=words)
    made = await store.create(Session(key="p", history=[Message(role="user", content="a b c")]))
    assert made.history[0].tokens == 3  # what create returns is what it stored
    await store.append_message("p", Message(role="user", content="d e"))
    child = await store.fork_child("p", "helper")
    await store.append_child_message(child.key, Message(role="assistant", content="f g h i"))
    assert [m.tokens for m in (await store.get_child(child.key)).history] == [4]
    await store.merge_child(child.key, "one two")  # the summary is counted too
    history = (await store.get("p")).history
    assert [(m.content, m.tokens) for m in history] == [
        ("a b c", 3),
        ("d e", 2),
        ("one two", 2),
    ]
    await store.compact_messages("p", 2, "short")
    summary = (await store.get("p")).history[0]
    assert summary.content.endswith("short") and summary.tokens == words(summary)


async def test_a_repairs_answers_are_counted(store: Any) -> None:
    open_call = Message(role="assistant", tool_calls=[ToolCall(id="c1", name="slow", input="{}")])
    await store.create(Session(key="r", history=[open_call]))
    await store.cleanup_failed_turn("r")
    history = (await store.get("r")).history
    assert len(history) > 1 and all(m.tokens == estimate_tokens(m) for m in history[1:])


async def test_no_counter_stores_messages_as_given(make_store: StoreFactory) -> None:
    store = make_store(count_tokens=None)
    await store.create(Session(key="n"))
    await store.append_message("n", Message(role="user", content="hello"))
    assert [m.tokens for m in (await store.get("n")).history] == [None]


BAD_COUNTS = [-1, 2**41, 1.5, "3", True, None]


async def test_a_count_out_of_range_refuses_the_call_before_it_writes(
    make_store: StoreFactory,
) -> None:
    returned: list[object] = []
    store = make_store(count_tokens=lambda m: returned[-1])
    await store.create(Session(key="b", history=[Message(role="user", content="kept", tokens=1)]))
    for bad in BAD_COUNTS:
        returned.append(bad)
        with pytest.raises(InvalidArgument, match=r"msg: count_tokens returned"):
            await store.append_message("b", Message(role="user", content="refused"))
        with pytest.raises(InvalidArgument, match=r"messages\[1\]: count_tokens returned"):
            await store.append_messages(
                "b", [Message(role="user", content="ok", tokens=1), Message(role="user")]
            )
        with pytest.raises(InvalidArgument, match=r"session.history\[0\]"):
            await store.create(Session(key="c", history=[Message(role="user", content="x")]))
        assert [m.content for m in (await store.get("b")).history] == ["kept"], bad
        with pytest.raises(SessionNotFound):
            await store.get("c")


async def test_a_counter_that_raises_refuses_the_call_before_it_writes(
    make_store: StoreFactory,
) -> None:
    def broken(msg: Message) -> int:
        raise RuntimeError("tokenizer down")

    store = make_store(count_tokens=broken)
    await store.create(Session(key="e"))
    with pytest.raises(RuntimeError, match="tokenizer down"):
        await store.append_message("e", Message(role="user", content="lost?"))
    assert (await store.get("e")).history == []
    counted = Message(role="user", content="given", tokens=5)  # a count given: not asked
    await store.append_message("e", counted)
    assert (await store.get("e")).history == [counted]
