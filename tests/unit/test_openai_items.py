"""The pure item logic under ``RedisAgentSession``'s turn queries and ``cleanup_failed_turn``
(``redis_session.integrations._openai_items``: no SDK, no Redis)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from redis_session import Message, MessageRole
from redis_session.integrations import _openai_items as items_of


def fc(call_id: Any, kind: str = "function_call") -> dict[str, Any]:
    return {"type": kind, "call_id": call_id, "name": "f", "arguments": "{}"}


def out(call_id: str, kind: str = "function_call_output") -> dict[str, Any]:
    return {"type": kind, "call_id": call_id, "output": "ok"}


def test_open_calls_are_the_unanswered_ones_in_order_each_once() -> None:
    items = [
        {"role": "user", "content": "go"},
        fc("a"),
        fc("b"),
        fc("c", "custom_tool_call"),
        out("b"),
        fc("a"),  # the same call again
        fc(None),  # no call_id: cannot be answered
        out("c"),  # a function output does not answer a custom call
        {"type": "shell_call", "call_id": "s"},  # outputs of other kinds cannot be made up
    ]
    assert items_of.open_calls(items) == [("function_call", "a"), ("custom_tool_call", "c")]
    closing = items_of.closing_items(items_of.open_calls(items), "lost")
    assert closing == [
        {"type": "function_call_output", "call_id": "a", "output": '{"error": "lost"}'},
        {"type": "custom_tool_call_output", "call_id": "c", "output": '{"error": "lost"}'},
    ]
    assert items_of.open_calls([*items, *closing]) == []


def test_turns_begin_at_user_messages() -> None:
    items: list[Any] = [{"role": "system", "content": "s"}, {"role": "user", "content": "1"}]
    items.append(fc("x"))
    items += [{"type": "message", "role": "user", "content": "2"}, "not a dict"]
    assert items_of.turn_numbers(items) == [0, 1, 1, 2, 2]
    assert items_of.turn_start(items, 2) == 3
    assert items_of.turn_start(items, 3) is None
    assert items_of.by_turn(items) == {
        0: [{"type": "other", "tool_name": None}],
        1: [{"type": "user", "tool_name": None}, {"type": "function_call", "tool_name": "f"}],
        2: [{"type": "user", "tool_name": None}, {"type": "other", "tool_name": None}],
    }


def test_tool_names_follow_advanced_sqlite_session() -> None:
    assert items_of.tool_name({"type": "function_call", "name": "f", "namespace": "crm"}) == "crm.f"
    assert items_of.tool_name({"type": "function_call", "name": "f", "namespace": "f"}) == "f"
    assert items_of.tool_name({"type": "mcp_call", "server_label": "fs", "name": "r"}) == "fs.r"
    assert items_of.tool_name({"type": "mcp_call", "server_label": "fs"}) == "fs"
    assert items_of.tool_name({"type": "web_search_call"}) == "web_search_call"
    assert items_of.tool_name({"type": "tool_search_output"}) == "tool_search"
    assert items_of.tool_name({"type": "function_call", "name": None}) is None
    assert items_of.tool_name({"role": "user", "content": "x"}) is None


def test_tool_usage_counts_calls_by_turn_and_name() -> None:
    items = [
        {"role": "user", "content": "1"},
        fc("a"),
        out("a"),
        fc("b"),
        {"type": "shell_call", "call_id": "s"},
        {"role": "user", "content": "2"},
        {"type": "tool_search_output"},  # no tool search call in this turn: counted
        {"role": "user", "content": "3"},
        {"type": "tool_search_call"},
        {"type": "tool_search_output"},  # its call is counted, not it
    ]
    assert items_of.tool_usage(items) == [
        ("f", 2, 1),
        ("shell_call", 1, 1),
        ("tool_search", 1, 2),
        ("tool_search", 1, 3),
    ]


@given(st.text(max_size=30), st.text(max_size=8))
def test_contains_is_a_literal_ascii_case_insensitive_search(text: str, term: str) -> None:
    expected = term.lower() in text.lower() if text.isascii() and term.isascii() else None
    found = items_of.contains(text, term)
    assert found == items_of.contains([{"type": "input_text", "text": text}], term)
    if expected is not None:
        assert found == expected
    assert items_of.contains(None, term) is False
    assert items_of.contains(["not a part"], term) is False


def test_previews_and_times() -> None:
    assert items_of.preview("abc", 2) == "ab..."
    assert items_of.preview([{"text": "é"}]) == json.dumps([{"text": "é"}], ensure_ascii=False)
    moment = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone(timedelta(hours=2)))
    assert items_of.sql_time(moment) == "2026-01-02 01:04:05"
    assert items_of.sql_time(moment.astimezone(UTC)) == "2026-01-02 01:04:05"


def test_items_round_trip_through_messages() -> None:
    items = [{"role": "developer", "content": "d"}, out("x"), fc("y"), {"role": "user"}]
    messages = items_of.messages_of(items)
    assert [m.role for m in messages] == [
        MessageRole.SYSTEM,
        MessageRole.TOOL,
        MessageRole.ASSISTANT,
        MessageRole.USER,
    ]
    assert [items_of.item_of(m) for m in messages] == items
    foreign = Message(role=MessageRole.TOOL, content="plain")
    assert items_of.item_of(foreign) == {"role": "assistant", "content": "plain"}
