from __future__ import annotations

import re

import pytest

from redis_session import ChildSession, ChildSessionConfig, Message, SessionLifecycleEvent
from redis_session.keys import parent_of


def test_child_session_new_key_and_trimming() -> None:
    child = ChildSession.new("parent:1", "coder", ChildSessionConfig(max_messages=2))
    assert re.fullmatch(r"parent:1:child:coder:\d{16,}", child.key)
    assert parent_of(child.key) == ("parent:1", "coder")
    assert not child.is_merged()
    for i in range(5):
        child.append_message(Message(role="user", content=str(i)))
    assert [m.content for m in child.history] == ["3", "4"]
    unlimited = ChildSession.new("p", "a")
    for i in range(5):
        unlimited.append_message(Message(role="user", content=str(i)))
    assert len(unlimited.history) == 5


def test_child_config_rejects_negatives() -> None:
    with pytest.raises(ValueError, match="max_messages"):
        ChildSessionConfig(max_messages=-1)
    with pytest.raises(ValueError, match="inherit_history"):
        ChildSessionConfig(inherit_history=-2)


def test_events_accept_unknown_types_and_fields() -> None:
    e = SessionLifecycleEvent.model_validate_json('{"type": "rename", "new_field": 1}')
    assert e.type == "rename" and e.child_key == ""


def test_message_ids_are_unique_per_message() -> None:
    assert len({Message(role="user").id for _ in range(1000)}) == 1000
