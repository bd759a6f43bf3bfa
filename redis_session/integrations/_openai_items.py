"""OpenAI Agents SDK input items as store messages, and what is read from them: turns, tools,
open calls (pure: no SDK import, no I/O).

Each item is one :class:`~redis_session.Message` (``content``: the item's JSON, ``author``:
:data:`ITEM_AUTHOR`, a ``role`` that fits for other readers of the store). What
:class:`~redis_session.integrations.openai_agents.RedisAgentSession` reads from a branch's
items is computed as the SDK's ``AdvancedSQLiteSession`` (0.24) records it in its
``message_structure`` table, but from the items themselves:

- a *turn* is a user message (an item whose ``role`` is ``"user"``) and the items after it;
  items before the first user message are in turn 0;
- an item's *type* is ``"user"`` / ``"assistant"`` by role, else its ``type``, else ``"other"``;
- an item's *tool name* is its ``name`` (``namespace.name`` for a namespaced call, the bare name
  when the namespace repeats it), ``server_label.name`` for MCP items, the item type for the
  built-in tools without a name, ``"tool_search"`` for tool search items;
- a tool call is *open* when no output item of its kind carries its ``call_id``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any, cast

from ..models import Message, MessageRole

ITEM_AUTHOR = "openai-agents"
"""``Message.author`` of a message holding one input item."""
CLOSABLE_CALLS = {
    "function_call": "function_call_output",
    "custom_tool_call": "custom_tool_call_output",
}
"""The call item types ``cleanup_failed_turn`` answers, and the type of their output item
(both take a string ``output``)."""
TOOL_CALL_TYPES = frozenset(
    {
        "tool_call", "function_call", "computer_call", "file_search_call", "web_search_call",
        "code_interpreter_call", "tool_search_call", "custom_tool_call", "mcp_call",
        "mcp_approval_request", "shell_call", "apply_patch_call",
    }
)  # fmt: skip
"""The item types ``get_tool_usage`` counts (AdvancedSQLiteSession's list)."""
_UNNAMED_TOOLS = frozenset(
    {
        "computer_call", "file_search_call", "web_search_call", "code_interpreter_call",
        "shell_call", "apply_patch_call",
    }
)  # fmt: skip
_TOOL_SEARCH = frozenset({"tool_search_call", "tool_search_output"})
_ROLES = {
    "user": MessageRole.USER,
    "assistant": MessageRole.ASSISTANT,
    "system": MessageRole.SYSTEM,
    "developer": MessageRole.SYSTEM,
}


def role_of(item: Any) -> MessageRole:
    """The store role of ``item``: its own role (``developer`` as ``system``), ``tool`` for
    ``*_output`` items, ``assistant`` for the rest of what the model produced.
    """
    role = item.get("role") if isinstance(item, dict) else None
    if isinstance(role, str) and role in _ROLES:
        return _ROLES[role]
    kind = _kind(item)
    if kind is not None and kind.endswith("_output"):
        return MessageRole.TOOL
    return MessageRole.ASSISTANT


def messages_of(items: Iterable[Any]) -> list[Message]:
    """One message per item (a fresh message id each)."""
    return [
        Message(role=role_of(item), content=json.dumps(item), author=ITEM_AUTHOR) for item in items
    ]


def item_of(msg: Message) -> Any:
    """The item ``msg`` holds; a message this module did not write reads as a
    ``{"role": ..., "content": ...}`` message (``user``, ``system`` or ``assistant``).
    """
    if msg.author == ITEM_AUTHOR:
        return json.loads(msg.content)
    role = msg.role.normalize()
    shown = role.value if role in (MessageRole.USER, MessageRole.SYSTEM) else "assistant"
    return {"role": shown, "content": msg.content}


def is_user(item: Any) -> bool:
    """Whether ``item`` begins a turn: a user message."""
    return isinstance(item, dict) and item.get("role") == "user"


def turn_numbers(items: Iterable[Any]) -> list[int]:
    """The turn of each item, in order (0 before the first user message)."""
    turn = 0
    numbers = []
    for item in items:
        turn += is_user(item)
        numbers.append(turn)
    return numbers


def turn_start(items: Sequence[Any], turn: int) -> int | None:
    """The index of the user message that begins turn ``turn`` (1-based), else None."""
    seen = 0
    for i, item in enumerate(items):
        if is_user(item):
            seen += 1
            if seen == turn:
                return i
    return None


def turn_rows(history: Iterable[Message], cut: int | None) -> list[dict[str, Any]]:
    """``get_conversation_turns``' rows: per user message its ``turn``, ``content`` (a
    :func:`preview` cut at ``cut``), ``full_content``, ``timestamp`` (:func:`sql_time`) and
    ``can_branch`` (True).
    """
    rows: list[dict[str, Any]] = []
    for msg in history:
        item = item_of(msg)
        if is_user(item):
            content = item.get("content", "")
            rows.append(
                {
                    "turn": len(rows) + 1,
                    "content": preview(content, cut),
                    "full_content": content,
                    "timestamp": sql_time(msg.timestamp),
                    "can_branch": True,
                }
            )
    return rows


def by_turn(items: Sequence[Any]) -> dict[int, list[dict[str, str | None]]]:
    """``get_conversation_by_turns``: each item's ``type`` and ``tool_name``, by turn."""
    grouped: dict[int, list[dict[str, str | None]]] = {}
    for item, turn in zip(items, turn_numbers(items), strict=True):
        grouped.setdefault(turn, []).append({"type": item_type(item), "tool_name": tool_name(item)})
    return grouped


def preview(content: Any, max_length: int | None = None) -> str:
    """``content`` as a string (a list of parts as its JSON), cut at ``max_length`` + "..."."""
    text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
    if max_length is not None and len(text) > max_length:
        return text[:max_length] + "..."
    return text


def contains(content: Any, term: str) -> bool:
    """Whether the text of ``content`` (a string, or the ``text`` of each part) holds ``term``,
    ASCII letters matched without regard to case (as SQLite's ``LIKE``); False for content of
    another shape.
    """
    pattern = re.compile(re.escape(term), re.IGNORECASE | re.ASCII)
    try:
        texts = [content] if isinstance(content, str) else [p.get("text", "") for p in content]
        return any(pattern.search(text) for text in texts)
    except (AttributeError, TypeError):  # parts that are not dicts, text that is not a str
        return False


def item_type(item: Any) -> str:
    """``"user"`` / ``"assistant"`` by role, else the item's ``type``, else ``"other"``."""
    if isinstance(item, dict):
        if item.get("role") in ("user", "assistant"):
            return str(item["role"])
        if item.get("type"):
            return str(item["type"])
    return "other"


def tool_name(item: Any) -> str | None:
    """The tool an item calls or answers (see the module docstring), else None."""
    if not isinstance(item, dict):
        return None
    kind = item.get("type")
    if kind in ("mcp_call", "mcp_approval_request") and "server_label" in item:
        label, name = item.get("server_label"), item.get("name")
        if name and label:
            return f"{label}.{name}"
        return str(label) if label else str(name) if name else None
    if kind in _TOOL_SEARCH:
        return "tool_search"
    if kind in _UNNAMED_TOOLS:
        return str(kind)
    if "name" not in item or item.get("name") is None:
        return None
    name, namespace = str(item["name"]), item.get("namespace")
    space = str(namespace) if namespace is not None else None
    if not name or not space or space == name:  # a deferred top-level call repeats its name
        return name
    return f"{space}.{name}"


def tool_usage(items: Sequence[Any]) -> list[tuple[str, int, int]]:
    """``(tool name, calls, turn)`` per tool and turn, by turn then name: each call item of
    :data:`TOOL_CALL_TYPES` once (shell and apply-patch calls named by their type), and a tool
    search output of a turn that has no tool search call.
    """
    turns = turn_numbers(items)
    searched = {
        t for item, t in zip(items, turns, strict=True) if _kind(item) == "tool_search_call"
    }
    counts: dict[tuple[int, str | None], int] = {}
    for item, turn in zip(items, turns, strict=True):
        kind = _kind(item)
        if kind in TOOL_CALL_TYPES or (kind == "tool_search_output" and turn not in searched):
            name = tool_name(item) or (kind if kind in ("shell_call", "apply_patch_call") else None)
            counts[turn, name] = counts.get((turn, name), 0) + 1
    ordered = sorted(counts.items(), key=lambda kv: (kv[0][0], kv[0][1] or ""))
    # typed as AdvancedSQLiteSession declares it; the name is None for a call without one
    return [(cast(str, name), n, turn) for (turn, name), n in ordered]


def open_calls(items: Iterable[Any]) -> list[tuple[str, str]]:
    """``(call type, call_id)`` of each function or custom tool call left without an output
    item of its kind, in order; a call without a string ``call_id`` cannot be answered and is
    not listed. Each id once.
    """
    items = list(items)
    answered = {
        (_kind(item), item.get("call_id"))
        for item in items
        if _kind(item) in CLOSABLE_CALLS.values()
    }
    found: list[tuple[str, str]] = []
    for item in items:
        kind = _kind(item)
        call_id = item.get("call_id") if isinstance(item, dict) else None
        if kind not in CLOSABLE_CALLS or not isinstance(call_id, str):
            continue
        if (CLOSABLE_CALLS[kind], call_id) not in answered and (kind, call_id) not in found:
            found.append((kind, call_id))
    return found


def closing_items(calls: Iterable[tuple[str, str]], reason: str) -> list[dict[str, str]]:
    """One output item per call: ``{"type": <call type>_output, "call_id", "output"}``, the
    output being ``{"error": reason}`` as JSON.
    """
    output = json.dumps({"error": reason})
    return [
        {"type": CLOSABLE_CALLS[kind], "call_id": call_id, "output": output}
        for kind, call_id in calls
    ]


def sql_time(moment: datetime) -> str:
    """``moment`` in UTC as SQLite's ``CURRENT_TIMESTAMP`` writes it: ``YYYY-MM-DD HH:MM:SS``."""
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


def _kind(item: Any) -> str | None:
    kind = item.get("type") if isinstance(item, dict) else None
    return kind if isinstance(kind, str) else None
