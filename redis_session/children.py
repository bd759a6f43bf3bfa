"""``InMemoryChildStore``: child sessions kept in process memory over any blocking store.

Parity with the original ``InMemoryChildStore``: one process, nothing persisted. For children
that any worker can continue, use the child methods of ``RedisStore`` / ``AsyncRedisStore``.
"""

from __future__ import annotations

import threading

from ._core.eventlog import new_event
from .errors import ChildAlreadyMerged, ChildNotFound, InvalidArgument, StaleExpectation
from .events import LifecycleHook, call_hook, finish_hook_sync
from .keys import check_key
from .models import (
    ChildSession,
    ChildSessionConfig,
    LifecycleEventType,
    Message,
    MessageRole,
    utcnow,
)
from .protocols import ChildSessionStore, Store, docs_from


@docs_from(ChildSessionStore)
class InMemoryChildStore:
    """Child sessions in this process's memory; merges go to ``parent_store``.

    Thread-safe. ``lifecycle_hook`` is called with ``fork``, ``merge`` and ``discard`` events
    after each change (nothing is published on pub/sub).
    """

    def __init__(self, parent_store: Store, lifecycle_hook: LifecycleHook | None = None) -> None:
        self._parent = parent_store
        self._hook = lifecycle_hook
        self._lock = threading.Lock()
        self._children: dict[str, ChildSession] = {}
        self._inherited: dict[str, set[str]] = {}

    def set_lifecycle_hook(self, hook: LifecycleHook | None) -> None:
        """Replace the lifecycle hook (None: no hook)."""
        self._hook = hook

    def _emit(self, kind: LifecycleEventType, child: ChildSession) -> None:
        event = new_event(
            kind, child.parent_key, child_key=child.key, agent_name=child.agent_name
        ).event()
        finish_hook_sync(call_hook(self._hook, event), event)

    def _live(self, child_key: str) -> ChildSession:
        child = self._children.get(child_key)
        if child is None:
            raise ChildNotFound(child_key)
        return child

    def fork_child(
        self, parent_key: str, agent_name: str, config: ChildSessionConfig | None = None
    ) -> ChildSession:
        parent_key = check_key(parent_key, "parent_key")
        if not isinstance(agent_name, str) or not agent_name or ":" in agent_name:
            raise InvalidArgument("agent_name", "must be a non-empty str without ':'")
        child = ChildSession.new(parent_key, agent_name, config)
        n = child.config.inherit_history
        inherited = self._parent.get_history(parent_key, last=n or 1)
        child.history = inherited[-n:] if n else []
        with self._lock:
            self._children[child.key] = child
            self._inherited[child.key] = {m.id for m in child.history}
        self._emit(LifecycleEventType.FORK, child)
        return child.model_copy(deep=True)

    def append_child_message(
        self, child_key: str, msg: Message, *, expect_last_id: str | None = None
    ) -> bool:
        if not isinstance(msg, Message):
            raise InvalidArgument("msg", f"must be a Message, not {type(msg).__name__}")
        if expect_last_id is not None and not isinstance(expect_last_id, str):
            raise InvalidArgument("expect_last_id", "must be a str or None")
        with self._lock:
            child = self._live(child_key)
            if child.is_merged():
                raise ChildAlreadyMerged(child_key)
            if any(m.id == msg.id for m in child.history):
                return False
            newest = child.history[-1].id if child.history else ""
            if expect_last_id is not None and newest != expect_last_id:
                raise StaleExpectation(child_key, -1, expect_last_id, newest)
            child.append_message(msg.model_copy(deep=True))
            return True

    def merge_child(self, child_key: str, summary: str) -> int:
        return self._merge(child_key, summary, None)

    def merge_child_as_author(self, child_key: str, summary: str, author: str) -> int:
        return self._merge(child_key, summary, author)

    def _merge(self, child_key: str, summary: str, author: str | None) -> int:
        with self._lock:
            child = self._live(child_key)
            if child.is_merged():
                raise ChildAlreadyMerged(child_key)
            child.merged_at = utcnow()  # claimed: a concurrent merge now fails
            if summary:
                author_name = author or child.agent_name
                to_parent = [
                    Message(role=MessageRole.ASSISTANT, content=summary, author=author_name)
                ]
            else:
                skip = self._inherited.get(child_key, set())
                to_parent = [m for m in child.history if m.id not in skip]
        try:
            added = self._parent.append_messages(child.parent_key, to_parent) if to_parent else 0
        except BaseException:
            with self._lock:
                child.merged_at = None
            raise
        self._emit(LifecycleEventType.MERGE, child)
        return added

    def discard_child(self, child_key: str) -> None:
        with self._lock:
            child = self._live(child_key)
            if child.is_merged():
                raise ChildAlreadyMerged(child_key)
            del self._children[child_key]
            self._inherited.pop(child_key, None)
        self._emit(LifecycleEventType.DISCARD, child)

    def get_child(self, child_key: str) -> ChildSession:
        with self._lock:
            return self._live(child_key).model_copy(deep=True)

    def children_of(self, parent_key: str) -> list[ChildSession]:
        with self._lock:  # dicts keep insertion order: fork order
            found = [c for c in self._children.values() if c.parent_key == parent_key]
            return [c.model_copy(deep=True) for c in found]
