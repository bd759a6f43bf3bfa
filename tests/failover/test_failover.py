"""Kill a primary (SIGKILL) while workers append with wait_replicas=1: after the promotion the
workers go on, every acknowledged append is there, nothing is duplicated. Cluster and Sentinel.

Each test prints the measured unavailability window (run with ``-s`` to see it).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import redis

from redis_session import DurabilityNotReached, Message, RedisStore, Session
from tests.conftest import IN_CI
from tests.support.cluster import Cluster, start_cluster
from tests.support.sentinel import SentinelSetup, start_sentinel
from tests.support.servers import redis_binary, valkey_binary, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]
WRITERS, APPENDS = 4, 200


@dataclass
class Writer:
    key: str
    acked: list[str] = field(default_factory=list)
    unconfirmed: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    successes: list[float] = field(default_factory=list)


def run_writers(store: RedisStore, keys: list[str], stop_early: threading.Event) -> list[Writer]:
    writers = [Writer(k) for k in keys]

    def work(w: Writer) -> None:
        for i in range(APPENDS):
            if stop_early.is_set():
                return
            msg = Message(role="user", content=f"{w.key}:{i}")
            try:
                store.append_message(w.key, msg)
                w.acked.append(msg.id)
                w.successes.append(time.monotonic())
            except DurabilityNotReached:
                w.unconfirmed.append(msg.id)
            except (redis.RedisError, OSError) as exc:
                w.failed.append(msg.id)
                w.errors.append(f"{time.monotonic():.2f} {type(exc).__name__}: {exc}")
            time.sleep(0.005)

    threads = [threading.Thread(target=work, args=(w,), daemon=True) for w in writers]
    for t in threads:
        t.start()
    run_writers.threads = threads  # type: ignore[attr-defined]
    return writers


def wait_writers(timeout: float) -> None:
    for t in run_writers.threads:  # type: ignore[attr-defined]
        t.join(timeout=timeout)


def check(store: RedisStore, writers: list[Writer], killed_at: float) -> float:
    window = 0.0
    for w in writers:
        history = store.get_history(w.key)
        ids = [m.id for m in history]
        assert len(ids) == len(set(ids)), f"{w.key}: duplicated messages"
        held = set(ids)
        missing = [i for i in w.acked if i not in held]
        assert not missing, f"{w.key}: {len(missing)} acknowledged appends lost"
        numbers = [int(m.content.rsplit(":", 1)[1]) for m in history]
        assert numbers == sorted(numbers), f"{w.key}: out of order"
        before = [t for t in w.successes if t <= killed_at]
        after = [t for t in w.successes if t > killed_at]
        if before and after:
            window = max(window, after[0] - before[-1])
        assert len(w.acked) > APPENDS // 2, (
            f"{w.key}: only {len(w.acked)} acknowledged, {len(w.unconfirmed)} unconfirmed, "
            f"{len(w.failed)} failed (killed at {killed_at:.2f}): {w.errors[:3]}"
        )
    return window


def binary() -> str:
    found = redis_binary() or valkey_binary()
    if found is None:
        if IN_CI:
            pytest.fail("no server binary for the failover tests")
        pytest.skip("no server binary for the failover tests")
    return found


@pytest.fixture
def sentinel_setup() -> Iterator[SentinelSetup]:
    setup = start_sentinel(binary())
    yield setup
    setup.stop()


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    c = start_cluster(binary())
    yield c
    c.stop()


def kill_when_busy(writers: list[Writer], kill: Callable[[], None]) -> float:
    assert wait_until(lambda: all(len(w.acked) >= 30 for w in writers), 30)
    killed_at = time.monotonic()
    kill()
    return killed_at


def test_sentinel_failover_loses_no_acknowledged_append(sentinel_setup: SentinelSetup) -> None:
    store = RedisStore.from_url(
        sentinel_setup.url, prefix="fo:", wait_replicas=1, wait_timeout=1, failover_window=30
    )
    keys = [f"s{i}" for i in range(WRITERS)]
    for k in keys:
        store.create(Session(key=k))
    stop = threading.Event()
    writers = run_writers(store, keys, stop)
    old = sentinel_setup.primary_port
    killed_at = kill_when_busy(writers, lambda: sentinel_setup.kill(old))
    assert wait_until(lambda: sentinel_setup.primary_port_now() != old, 30, interval=0.1)
    promoted_after = time.monotonic() - killed_at
    # The old primary comes back empty, as the new primary's replica (as an operator would
    # bring it back); until then no write can be acknowledged by a replica.
    sentinel_setup.restart_as_replica(old, sentinel_setup.primary_port_now())
    wait_writers(90)
    window = check(store, writers, killed_at)
    acked = sum(len(w.acked) for w in writers)
    unconfirmed = sum(len(w.unconfirmed) for w in writers)
    print(
        f"\nsentinel failover: promoted after {promoted_after:.2f}s, writers blocked "
        f"{window:.2f}s at most; {acked} acknowledged (all present), {unconfirmed} unconfirmed"
    )
    store.close()


def test_cluster_failover_loses_no_acknowledged_append(cluster: Cluster) -> None:
    store = RedisStore(
        cluster.client(), prefix="fo:", wait_replicas=1, wait_timeout=1, failover_window=30
    )
    keys = [f"c{i}" for i in range(WRITERS * 2)]
    for k in keys:
        store.create(Session(key=k))
    raw: Any = store.client
    slots = {k: raw.keyslot(store._core.schema.session(k).meta) for k in keys}
    stop = threading.Event()
    writers = run_writers(store, keys, stop)
    client: Any = cluster.client()
    victim = client.get_node_from_key(store._core.schema.session(keys[0]).meta).port
    client.close()
    killed_at = kill_when_busy(writers, lambda: cluster.kill(victim))

    def promoted() -> bool:
        try:  # while the victim's slots have no primary, a new client refuses to start
            probe = cluster.client(socket_timeout=1)
        except redis.exceptions.RedisClusterException:
            return False
        try:
            node = probe.nodes_manager.get_node_from_slot(slots[keys[0]])
            return node is not None and node.port != victim and probe.ping() is True
        finally:
            probe.close()

    assert wait_until(promoted, 30, interval=0.2)
    promoted_after = time.monotonic() - killed_at
    cluster.restart(victim)  # rejoins from its nodes.conf as a replica of the new primary
    wait_writers(90)
    window = check(store, writers, killed_at)
    acked = sum(len(w.acked) for w in writers)
    unconfirmed = sum(len(w.unconfirmed) for w in writers)
    print(
        f"\ncluster failover: promoted after {promoted_after:.2f}s, writers blocked "
        f"{window:.2f}s at most; {acked} acknowledged (all present), {unconfirmed} unconfirmed"
    )
    store.close()
