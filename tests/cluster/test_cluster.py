"""Cluster-only behaviour: events on every node, index shards per slot, no hot key."""

from __future__ import annotations

import json
from typing import Any

import pytest
import redis
from redis.crc import key_slot

from redis_session import RedisStore, Session
from tests.conftest import unique_prefix
from tests.support.cluster import Cluster

pytestmark = pytest.mark.cluster


def test_events_reach_subscribers_on_every_node(cluster_server: Cluster) -> None:
    store = RedisStore(cluster_server.client(), prefix=unique_prefix())
    subscribers: list[Any] = []
    # The node clients live as long as their subscribers: from redis 8.2 a dropped client closes
    # its pool, and with it the subscriber's connection. Any: pubsub() is typed from 8.2 only.
    nodes: list[Any] = [redis.Redis(port=port) for port in cluster_server.ports]
    for node in nodes:
        pubsub = node.pubsub(ignore_subscribe_messages=True)
        pubsub.subscribe(store.events_channel)
        subscribers.append(pubsub)
    try:
        store.create(Session(key="anywhere"))
        for pubsub in subscribers:
            got = None
            for _ in range(100):
                got = pubsub.get_message(timeout=0.05)
                if got is not None:
                    break
            assert got is not None, "a node's subscriber heard nothing"
            assert json.loads(got["data"])["type"] == "create"
    finally:
        for pubsub in subscribers:
            pubsub.close()
        for node in nodes:
            node.close()
        store.delete("anywhere")
        store.close()


def test_index_is_sharded_by_slot(cluster_server: Cluster) -> None:
    prefix = unique_prefix()
    store = RedisStore(cluster_server.client(), prefix=prefix)
    keys = [f"user-{i}" for i in range(40)]
    try:
        for key in keys:
            store.create(Session(key=key))
        schema = store._core.schema
        shards = {schema.index_of(k) for k in keys}
        assert len(shards) > 10  # spread over slots, not one hot key
        for key in keys:
            assert key_slot(schema.index_of(key).encode()) == key_slot(
                schema.session(key).meta.encode()
            )
        listed = [s.key for s in store.list_sessions()]
        assert sorted(listed) == sorted(keys)
        assert [s.key for s in store.list_sessions(limit=5, offset=3)] == listed[3:8]
    finally:
        for key in keys:
            store.delete(key)
        store.close()
