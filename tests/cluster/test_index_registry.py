"""The registry of index shards on a cluster is kept in three copies on three nodes: with one
primary (and its replica) down, creates on the other nodes succeed at once and are listed; a
copy lost with its node repairs itself at the next listing; ``doctor`` checks the copies
against the shards that exist. On a private cluster (it loses a node on purpose).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
import redis

from redis_session import RedisStore, Session
from redis_session.aio import AsyncRedisStore
from redis_session.doctor import OK, PROBLEM, WARN, diagnose
from redis_session.keys import KeySchema
from tests.conftest import unique_prefix
from tests.support.cluster import Cluster
from tests.support.figures import Recorder
from tests.support.servers import wait_until

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module", autouse=True)
def _degradable(cluster: Cluster) -> None:
    """The healthy nodes keep serving while one is down."""
    for port in cluster.ports:
        redis.Redis(port=port).config_set("cluster-require-full-coverage", "no")


def _registry(cluster: Cluster, prefix: str) -> list[set[bytes]]:
    client: Any = cluster.client()
    try:
        return [client.smembers(c) for c in KeySchema(prefix, cluster=True).index_registries]
    finally:
        client.close()


def _check(cluster: Cluster, prefix: str) -> Any:
    client = cluster.client()
    try:
        return next(c for c in diagnose(client, prefix).checks if c.name == "index registry")
    finally:
        client.close()


def test_the_copies_sit_on_three_nodes_and_doctor_checks_them(cluster: Cluster) -> None:
    prefix = unique_prefix()
    store = RedisStore.from_url(cluster.url, prefix=prefix, cluster=True)
    keys = [f"s{i}" for i in range(12)]
    for key in keys:
        store.create(Session(key=key))
    copies = _registry(cluster, prefix)
    assert len(copies[0]) >= 10 and copies[0] == copies[1] == copies[2]
    found = _check(cluster, prefix)
    assert found.status == OK and "3 copies on 3 nodes" in found.detail, found
    raw: Any = cluster.client()
    schema = KeySchema(prefix, cluster=True)
    # A copy that lost members: named, and the next listing gives them back.
    raw.srem(schema.index_registries[2], *list(copies[0])[:3])
    found = _check(cluster, prefix)
    assert found.status == WARN and "lacks 3" in found.detail, found
    assert sorted(s.key for s in store.list_sessions()) == sorted(keys)
    assert _registry(cluster, prefix)[2] == copies[0]
    # A shard no copy names hides its sessions: a problem, fixed by repair_index.
    shard = schema.index_of("s0")
    for copy in schema.index_registries:
        raw.srem(copy, shard)
    found = _check(cluster, prefix)
    assert found.status == PROBLEM and shard in found.detail and "repair_index" in found.advice
    assert store.repair_index() == 1
    assert _check(cluster, prefix).status == OK
    for key in keys:
        store.delete(key)
    raw.delete(*schema.index_registries)
    raw.close()
    store.close()


def _victim(cluster: Cluster, prefix: str) -> tuple[int, list[int]]:
    """The primary holding the first registry copy, and its replicas."""
    client: Any = cluster.client()
    node = client.get_node_from_key(KeySchema(prefix, cluster=True).index_registries[0])
    client.close()
    replicas = [
        port
        for port in cluster.ports
        if redis.Redis(port=port).info("replication").get("master_port") == node.port
    ]
    return node.port, replicas


def _keys(cluster: Cluster, prefix: str, port: int, count: int, on: bool = False) -> list[str]:
    """``count`` session keys whose slots are (``on``) or are not served by node ``port``, each
    in a slot of its own (so that each create makes an index shard and registers it)."""
    client: Any = cluster.client()
    schema = KeySchema(prefix, cluster=True)
    keys: list[str] = []
    shards: set[str] = set()
    i = 0
    while len(keys) < count:
        key, i = f"{'on' if on else 'off'}{i}", i + 1
        shard = schema.index_of(key)
        if shard not in shards and (client.get_node_from_key(shard).port == port) == on:
            keys.append(key)
            shards.add(shard)
    client.close()
    return keys


def test_a_node_down_gates_no_create_and_listing_repairs_its_copy(
    cluster: Cluster, figures: Recorder
) -> None:
    # The node to lose holds the first registry copy and is the clients' seed (the URL's
    # node): an async store's client for each new event loop must start without it.
    for _ in range(200):
        prefix = unique_prefix()
        primary, replicas = _victim(cluster, prefix)
        if primary == cluster.ports[0]:
            break
    assert primary == cluster.ports[0]
    keys = _keys(cluster, prefix, primary, 16)
    (lost,) = _keys(cluster, prefix, primary, 1, on=True)
    store = RedisStore.from_url(cluster.url, prefix=prefix, cluster=True, socket_timeout=2)
    astore = AsyncRedisStore.from_url(cluster.url, prefix=prefix, cluster=True, socket_timeout=2)
    store.create(Session(key=lost))
    asyncio.run(astore.end(lost))  # the async store has met the cluster
    for port in (primary, *replicas):
        cluster.kill(port)
    killed = time.monotonic()
    took: list[float] = []
    try:

        async def create_async(key: str) -> None:
            await astore.create(Session(key=key))

        for n, key in enumerate(keys):
            started = time.monotonic()
            if n % 2:
                asyncio.run(create_async(key))
            else:
                store.create(Session(key=key))
            took.append(time.monotonic() - started)
        # Listing while a node is down cannot list that node's sessions: it raises, it does
        # not hide them.
        started = time.monotonic()
        with pytest.raises(redis.ConnectionError):
            store.list_sessions()
        raised_after = time.monotonic() - started
        print(f"creates {max(took):.3f} s at most; listing raised after {raised_after:.2f} s")
        # Every new shard is in the two copies that answered.
        held = _registry_cluster_up(cluster, prefix)
        schema = KeySchema(prefix, cluster=True)
        assert len(held) == 2, held
        assert all({schema.index_of(k).encode() for k in keys} <= copy for copy in held), held
    finally:
        for port in (primary, *replicas):  # back, empty (no persistence)
            cluster.restart(port)
    assert wait_until(lambda: _all_ok(cluster), 20, 0.1)
    down_for = time.monotonic() - killed
    client: Any = cluster.client()
    wait_until(lambda: store.list_sessions() is not None, 20, 0.2)
    listing = [s.key for s in store.list_sessions()]
    listed = set(listing)
    copies = _registry(cluster, prefix)
    doctor = _check(cluster, prefix).status
    figures.record(
        f"a cluster primary and its replica ({1 + len(replicas)} nodes) SIGKILLed: the node "
        "holding an index-registry copy and the clients' seed; restarted empty "
        "(tests/cluster/test_index_registry.py)",
        client="RedisStore and AsyncRedisStore (socket_timeout=2), creates alternating",
        topology="cluster",
        injections=1,
        outcome=f"{len(keys)} creates on the other nodes during the outage, none raised, the "
        f"slowest {max(took):.3f} s; list_sessions() raised ConnectionError after "
        f"{raised_after:.2f} s (it does not hide the dead node's sessions); after "
        f"{down_for:.1f} s down (cluster_state ok again) the next listing listed "
        f"{len(listed & set(keys))} of {len(keys)} with no repair_index, the copy lost with "
        "the node given back ("
        + ("3 copies equal" if copies[0] == copies[1] == copies[2] else "copies DIFFER")
        + f", doctor {doctor}); the 1 session on the dead node went with it (no persistence, "
        "not counted)",
        acknowledged=len(keys),
        lost=len(set(keys) - listed),
        duplicated=len(listing) - len(listed),
    )
    # Every session on the healthy nodes is listed, no repair_index needed (the one on the
    # node that came back empty is gone with it).
    assert listed == set(keys), sorted(set(keys) ^ listed)
    assert copies[0] == copies[1] == copies[2]  # the lost copy was given back
    assert doctor == OK
    assert max(took) < 2.0, took  # the dead copy answers at once: no 4 s of cluster retries
    for key in listed:
        store.delete(key)
    client.delete(*KeySchema(prefix, cluster=True).index_registries)
    client.close()
    store.close()
    asyncio.run(astore.close())


def _registry_cluster_up(cluster: Cluster, prefix: str) -> list[set[bytes]]:
    """The members of the registry copies whose node is up (plain clients per node)."""
    schema = KeySchema(prefix, cluster=True)
    out: list[set[bytes]] = []
    for copy in schema.index_registries:
        for port in cluster.processes:
            node: Any = redis.Redis(port=port, socket_timeout=1)
            try:
                out.append(node.smembers(copy))
                break
            except redis.ResponseError:  # MOVED: another node serves it
                continue
            except redis.ConnectionError:
                continue
            finally:
                node.close()
    return out


def _all_ok(cluster: Cluster) -> bool:
    for port in cluster.ports:
        node = redis.Redis(port=port, socket_timeout=1)
        try:
            if node.cluster("INFO")["cluster_state"] != "ok":
                return False
        finally:
            node.close()
    return True
