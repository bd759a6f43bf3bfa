"""What the two savers share: the store's scripts registered, the TTL options, LangGraph's
string versions, the runs registered.
"""

from __future__ import annotations

import time
from typing import Any, TypedDict

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from ...aio import AsyncRedisStore
from ...errors import InvalidArgument
from ...store import RedisStore
from ._records import (
    Put,
    next_version,
    plan_put,
)
from ._thread import SCRIPTS, SOURCES, Scripts

REGISTERED = 4096
"""(run, thread) pairs a saver remembers having registered (then it forgets them all); it
registers a pair again once half the store's TTL has passed (the registry expires at twice
the TTL after its last registration)."""


class TTLConfig(TypedDict, total=False):
    """``langgraph-checkpoint-redis``'s ``ttl_config``: ``default_ttl`` in minutes (the
    store's ``ttl``), ``refresh_on_read`` (reads refresh the thread's TTL too).
    """

    default_ttl: float
    refresh_on_read: bool


def store_ttl(ttl_config: TTLConfig | None, options: dict[str, Any]) -> None:
    if ttl_config and ttl_config.get("default_ttl") is not None:
        if "ttl" in options:
            raise InvalidArgument("ttl_config", "give the TTL once: ttl or default_ttl")
        options["ttl"] = float(ttl_config["default_ttl"]) * 60


def check_ttl(ttl_config: TTLConfig | None, store_ttl: Any) -> bool:
    if not ttl_config:
        return False
    minutes = ttl_config.get("default_ttl")
    if minutes is not None:
        have = None if store_ttl is None else store_ttl.total_seconds()
        if have is None or abs(have - float(minutes) * 60) > 0.001:
            raise InvalidArgument(
                "ttl_config", "default_ttl must be the store's ttl (a thread is a session tree)"
            )
    return bool(ttl_config.get("refresh_on_read", False))


class SaverBase(BaseCheckpointSaver[str]):
    """The store's scripts, the options and the run registrations of a saver."""

    def __init__(
        self,
        store: RedisStore | AsyncRedisStore,
        *,
        serde: SerializerProtocol | None,
        ttl_config: TTLConfig | None,
        exclusive_steps: bool,
    ) -> None:
        super().__init__(serde=serde)
        for name in SCRIPTS:
            store.register_script(name, SOURCES[name])
        self.exclusive_steps = exclusive_steps
        self.ttl_config = ttl_config
        refresh = check_ttl(ttl_config, store.ttl)
        self._scripts = Scripts(store.extension, refresh)
        self._registered: dict[tuple[str, str], float] = {}
        ttl = store.ttl
        self._register_every = None if ttl is None else ttl.total_seconds() / 2

    def get_next_version(self, current: str | None, channel: None) -> str:
        """LangGraph's string versions (a counter, then a random fraction)."""
        return next_version(current)

    def _plan(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> tuple[Put, bool]:
        plan = plan_put(
            self.serde, config, checkpoint, metadata, new_versions, self.exclusive_steps
        )
        if not plan.run_id:
            return plan, False
        at = self._registered.get((plan.run_id, plan.thread_id))
        every = self._register_every
        return plan, at is None or (every is not None and time.monotonic() - at > every)

    def _registered_now(self, plan: Put) -> None:
        if len(self._registered) >= REGISTERED:
            self._registered.clear()
        self._registered[(plan.run_id, plan.thread_id)] = time.monotonic()
