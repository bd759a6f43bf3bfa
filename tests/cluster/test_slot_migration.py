"""A slot being moved between nodes (marked MIGRATING/IMPORTING until the move ends): every
operation on its sessions waits it out, for up to ``failover_window``, then raises
``SlotMigrating``; nothing is applied twice or lost. On a private cluster: a slot is held open
on purpose.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest
import redis

from redis_session import ChildSessionConfig, Message, RedisStore, Session, SlotMigrating
from redis_session.aio import AsyncRedisStore
from redis_session.doctor import OK, PROBLEM, diagnose
from tests.conftest import unique_prefix
from tests.support.cluster import Cluster

pytestmark = pytest.mark.cluster


def _node(node: Any) -> Any:
    """A plain client of one node (Any: redis-py's execute_command is untyped)."""
    return redis.Redis(host=node.host, port=node.port)


class OpenSlot:
    """Holds the slot of ``redis_key`` open (MIGRATING on its node, IMPORTING on another)
    until :meth:`finish` moves its keys and gives the slot to the other node.
    """

    def __init__(self, cluster: Cluster, redis_key: str) -> None:
        client: Any = cluster.client()  # redis-py's cluster methods are untyped
        self.slot = client.keyslot(redis_key)
        source = client.nodes_manager.get_node_from_slot(self.slot)
        target = next(n for n in client.get_primaries() if n.name != source.name)
        self.primaries = [_node(n) for n in client.get_primaries()]
        self.source = _node(source)
        self.target = _node(target)
        self.target_address = (target.host, target.port)
        self.source_id = self.source.execute_command("CLUSTER MYID").decode()
        self.target_id = self.target.execute_command("CLUSTER MYID").decode()
        client.close()
        self.target.execute_command("CLUSTER SETSLOT", self.slot, "IMPORTING", self.source_id)
        self.source.execute_command("CLUSTER SETSLOT", self.slot, "MIGRATING", self.target_id)
        self.moved = 0

    def finish(self) -> None:
        host, port = self.target_address
        for _ in range(100):  # bounded: a slot of a test holds a few keys
            keys = self.source.execute_command("CLUSTER GETKEYSINSLOT", self.slot, 100)
            if not keys:
                break
            self.source.execute_command("MIGRATE", host, port, "", 0, 5000, "KEYS", *keys)
            self.moved += len(keys)
        for node in self.primaries:
            node.execute_command("CLUSTER SETSLOT", self.slot, "NODE", self.target_id)

    def finish_after(self, seconds: float) -> threading.Thread:
        def later() -> None:
            time.sleep(seconds)
            self.finish()

        thread = threading.Thread(target=later, daemon=True)
        thread.start()
        return thread

    def close(self) -> None:
        for node in [*self.primaries, self.source, self.target]:
            node.close()


def test_operations_wait_out_a_slot_held_open_for_two_seconds(cluster: Cluster) -> None:
    store = RedisStore.from_url(cluster.url, prefix=unique_prefix(), cluster=True)
    store.create(Session(key="k", history=[Message(role="user", content="first")]))
    opened = OpenSlot(cluster, store._core.schema.session("k").meta)
    errors: list[BaseException] = []
    appended: list[str] = []

    def writer(n: int) -> None:
        for i in range(5):
            msg = Message(role="user", content=f"w{n}-{i}")
            try:
                store.append_message("k", msg)
                appended.append(msg.id)
            except BaseException as exc:  # every error is a failure here
                errors.append(exc)

    try:
        started = time.monotonic()
        mover = opened.finish_after(2.0)
        writers = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
        for thread in writers:
            thread.start()
        child = store.fork_child("k", "helper", ChildSessionConfig(inherit_history=1))
        history = store.get_history("k")
        for thread in writers:
            thread.join(timeout=30)
        mover.join(timeout=30)
        waited = time.monotonic() - started
    finally:
        opened.close()
    assert not errors, errors
    assert opened.moved > 0 and 1.9 <= waited < 15
    assert history and history[0].content == "first"
    final = store.get_history("k")
    ids = [m.id for m in final]
    assert len(ids) == len(set(ids)) == 1 + 20  # every append once
    assert set(appended) <= set(ids)
    assert store.merge_child(child.key, "") == 0
    assert store.delete("k") is True
    store.close()


def test_a_slot_open_past_the_failover_window_raises_slot_migrating(cluster: Cluster) -> None:
    store = RedisStore.from_url(
        cluster.url, prefix=unique_prefix(), cluster=True, failover_window=0.5
    )
    store.create(Session(key="k"))
    opened = OpenSlot(cluster, store._core.schema.session("k").meta)
    try:
        started = time.monotonic()
        with pytest.raises(SlotMigrating) as raised:
            store.append_message("k", Message(role="user", content="not applied"))
        waited = time.monotonic() - started
        assert 0.45 <= raised.value.waited <= waited < 3.0
        assert "migrating" in str(raised.value) and isinstance(raised.value, TimeoutError)
        opened.finish()
    finally:
        opened.close()
    assert store.get_history("k") == []  # refused, so not applied
    assert store.delete("k") is True
    store.close()


def test_the_asyncio_store_waits_out_an_open_slot(cluster: Cluster) -> None:
    async def main() -> tuple[int, float]:
        store = AsyncRedisStore.from_url(cluster.url, prefix=unique_prefix(), cluster=True)
        await store.create(Session(key="k"))
        opened = OpenSlot(cluster, store._core.schema.session("k").meta)
        try:
            started = time.monotonic()
            mover = opened.finish_after(1.0)
            await asyncio.gather(
                *(store.append_message("k", Message(role="user", content=str(n))) for n in range(8))
            )
            waited = time.monotonic() - started
            mover.join(timeout=30)
        finally:
            opened.close()
        count = len(await store.get_history("k"))
        await store.delete("k")
        await store.close()
        return count, waited

    count, waited = asyncio.run(main())
    assert count == 8 and 0.9 <= waited < 15


def test_doctor_names_an_open_slot_and_the_fix(cluster: Cluster) -> None:
    prefix = unique_prefix()
    store = RedisStore.from_url(cluster.url, prefix=prefix, cluster=True)
    store.create(Session(key="k"))
    client = cluster.client()
    found = next(c for c in diagnose(client, prefix).checks if c.name == "cluster")
    assert found.status == OK and "no slot open" in found.detail
    opened = OpenSlot(cluster, store._core.schema.session("k").meta)
    try:
        found = next(c for c in diagnose(client, prefix).checks if c.name == "cluster")
        assert found.status == PROBLEM
        assert f"{opened.slot} migrating on" in found.detail
        assert f"{opened.slot} importing on" in found.detail
        assert "redis-cli --cluster fix" in found.advice
        opened.finish()
    finally:
        opened.close()
    found = next(c for c in diagnose(client, prefix).checks if c.name == "cluster")
    assert found.status == OK, found
    assert store.delete("k") is True
    store.close()
    client.close()
