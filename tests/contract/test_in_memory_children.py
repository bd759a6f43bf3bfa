"""InMemoryChildStore behaves like the Redis stores' children on the same scenarios."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from redis_session import (
    ChildAlreadyMerged,
    ChildNotFound,
    ChildSessionConfig,
    InMemoryChildStore,
    Message,
    RedisStore,
    Session,
    SessionLifecycleEvent,
    SessionNotFound,
)
from tests.conftest import Backend


def scenario(children: Any, parent: RedisStore) -> dict[str, Any]:
    """One story of forks, appends, merges and discards; returns what can be observed."""
    parent.create(
        Session(key="p", history=[Message(role="user", content=f"p{i}") for i in range(3)])
    )
    errors: list[str] = []
    a = children.fork_child("p", "a", ChildSessionConfig(inherit_history=2, max_messages=3))
    b = children.fork_child("p", "b")
    c = children.fork_child("p", "c")
    same = Message(role="assistant", content="a-dup")
    appended = [
        children.append_child_message(a.key, same),
        children.append_child_message(a.key, same),
    ]
    for i in range(4):
        children.append_child_message(a.key, Message(role="assistant", content=f"a{i}"))
    children.append_child_message(b.key, Message(role="assistant", content="b0"))
    merged_a = children.merge_child(a.key, "")
    merged_b = children.merge_child_as_author(b.key, "b says", "router")
    children.discard_child(c.key)
    refusals: list[tuple[Callable[[], object], type[Exception]]] = [
        (lambda: children.merge_child(a.key, "x"), ChildAlreadyMerged),
        (lambda: children.discard_child(b.key), ChildAlreadyMerged),
        (lambda: children.append_child_message(a.key, Message(role="user")), ChildAlreadyMerged),
        (lambda: children.get_child(c.key), ChildNotFound),
        (lambda: children.merge_child(c.key, "x"), ChildNotFound),
        (lambda: children.fork_child("nobody", "x"), SessionNotFound),
    ]
    for call, error in refusals:
        with pytest.raises(error):
            call()
        errors.append(error.__name__)
    got_a = children.get_child(a.key)
    return {
        "inherited": [m.content for m in a.history],
        "appended": appended,
        "merged": [merged_a, merged_b],
        "parent": [(m.content, m.author) for m in parent.get_history("p")],
        "child_a": [m.content for m in got_a.history],
        "a_merged": got_a.is_merged(),
        "children": [x.agent_name for x in children.children_of("p")],
        "errors": errors,
    }


def test_in_memory_children_match_redis_children(backend: Backend) -> None:
    redis_events: list[SessionLifecycleEvent] = []
    memory_events: list[SessionLifecycleEvent] = []
    on_redis = backend.sync_store(prefix=backend.prefix + "r:", lifecycle_hook=redis_events.append)
    parent = backend.sync_store(prefix=backend.prefix + "m:")
    in_memory = InMemoryChildStore(parent)
    in_memory.set_lifecycle_hook(memory_events.append)
    expected = scenario(on_redis, on_redis)
    assert scenario(in_memory, parent) == expected
    assert expected["parent"][-1] == ("b says", "router")
    assert expected["child_a"] == ["a1", "a2", "a3"]
    child_events = [e.type for e in redis_events if e.child_key]
    assert [e.type for e in memory_events] == child_events == [
        "fork", "fork", "fork", "merge", "merge", "discard",
    ]  # fmt: skip
