"""The run usage of an OpenAI Agents conversation as the store keeps it (see
``RedisAgentSession.store_run_usage``; pure: no SDK import, no I/O).

A branch's session holds, for each turn whose usage was stored:

- a *row* in its metadata, ``openai-agents:usage:<turn>`` = JSON of what
  ``AdvancedSQLiteSession`` (0.24) keeps in its ``turn_usage`` table: ``requests``,
  ``input_tokens``, ``output_tokens``, ``total_tokens`` (the SDK ``Usage``'s figures),
  ``input_tokens_details`` / ``output_tokens_details`` (``json.dumps(details.__dict__)``, as
  the SDK stores them, here as JSON values), plus ``branch`` (the branch that stored it) and
  ``anchor`` (the id of the user message that begins the turn);
- a *record*: a hidden message (``author`` :data:`USAGE_AUTHOR`, ``role`` ``assistant``, no
  content) appended with the row in one script, whose ``Message.usage`` is what the row adds
  (so that ``Session.usage``, the store's usage budget and ``store.usage()`` count the run).

A row counts only on its branch, while its anchor is still the user message of its turn: a
branch copies its parent's metadata (its rows name the parent), and a turn popped, rewound or
trimmed away (its anchor gone, or another user message in its place) has no usage, as
``AdvancedSQLiteSession`` drops the row of a turn that no longer exists.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from ..models import Message, Usage
from ._openai_items import is_user, item_of

USAGE_AUTHOR = "openai-agents:usage"
"""``Message.author`` of a usage record (hidden from the session's items)."""
ROW = "openai-agents:usage:"
"""Begins the metadata entry of a turn's usage row (then the turn number)."""
FIGURES = ("requests", "input_tokens", "output_tokens", "total_tokens")
"""The whole-number figures of a row, as ``AdvancedSQLiteSession`` names them."""
DETAILS = ("input_tokens_details", "output_tokens_details")


def is_record(msg: Message) -> bool:
    """Whether ``msg`` is a usage record (not an item)."""
    return msg.author == USAGE_AUTHOR


def visible(history: Iterable[Message]) -> list[Message]:
    """``history`` without its usage records: the messages that hold items."""
    return [m for m in history if not is_record(m)]


def anchors(history: Iterable[Message]) -> list[str]:
    """The ids of the user messages of ``history``, in order: turn ``n``'s is the n-th."""
    return [m.id for m in visible(history) if is_user(item_of(m))]


def turn_start(history: list[Message], turn: int) -> int | None:
    """The index in ``history`` (usage records included) of the user message that begins turn
    ``turn`` (1-based), else None.
    """
    seen = 0
    for i, msg in enumerate(history):
        if not is_record(msg) and is_user(item_of(msg)):
            seen += 1
            if seen == turn:
                return i
    return None


def _details(value: Any) -> Any:
    """Token details as ``AdvancedSQLiteSession`` stores them (``json.dumps`` of the object's
    ``__dict__``), read back; None when absent or not serializable.
    """
    if not value:
        return None
    try:
        return json.loads(json.dumps(value.__dict__))
    except (AttributeError, TypeError, ValueError):
        return None


def _figure(usage: Any, name: str) -> int:
    value = getattr(usage, name, 0) or 0
    return value if isinstance(value, int) and value > 0 else 0


def row_of(usage: Any, branch: str, anchor: str) -> dict[str, Any]:
    """The row of an SDK ``Usage`` for the turn that ``anchor`` begins on ``branch``."""
    row: dict[str, Any] = {"branch": branch, "anchor": anchor}
    row.update((name, _figure(usage, name)) for name in FIGURES)
    row.update((name, _details(getattr(usage, name, None))) for name in DETAILS)
    return row


def rows(metadata: dict[str, str], history: list[Message], branch: str) -> dict[int, Any]:
    """``{turn: row}`` of ``branch`` in a session's metadata and history, by turn: the rows
    that branch stored for turns that still begin with their anchor (others are left out, as
    are entries that are not rows).
    """
    users = anchors(history)
    found: dict[int, Any] = {}
    for name, value in metadata.items():
        if not name.startswith(ROW):
            continue
        try:
            turn, row = int(name[len(ROW) :]), json.loads(value)
        except ValueError:
            continue
        if not isinstance(row, dict) or row.get("branch") != branch:
            continue
        if 1 <= turn <= len(users) and users[turn - 1] == row.get("anchor"):
            found[turn] = row
    return dict(sorted(found.items()))


def spent(row: dict[str, Any], replaced: dict[str, Any] | None) -> Usage:
    """What storing ``row`` adds to the session's usage: each figure's increase over the row it
    replaces (``replaced``: the turn's row before, if any), never less than 0. A resumed run
    (``RunState``) reports the usage of the whole turn again: only its increase is new spend.
    """
    before = replaced or {}

    def more(name: str) -> int:
        return max(0, int(row.get(name, 0)) - int(before.get(name, 0)))

    return Usage(
        input_tokens=more("input_tokens"), output_tokens=more("output_tokens"),
        requests=more("requests"),
    )  # fmt: skip


def turn_usage(row: dict[str, Any], turn: int | None = None) -> dict[str, Any]:
    """``get_turn_usage``'s dict of a row (with ``user_turn_number`` first when ``turn``)."""
    found: dict[str, Any] = {} if turn is None else {"user_turn_number": turn}
    found.update((name, row.get(name, 0)) for name in FIGURES)
    found.update((name, row.get(name)) for name in DETAILS)
    return found


def session_usage(found: Iterable[dict[str, Any]]) -> dict[str, int] | None:
    """``get_session_usage``'s sums of rows and their count, None for no row."""
    totals = dict.fromkeys(FIGURES, 0)
    turns = 0
    for row in found:
        turns += 1
        for name in FIGURES:
            totals[name] += int(row.get(name, 0))
    return None if turns == 0 else {**totals, "total_turns": turns}
