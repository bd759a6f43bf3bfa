"""The durable event log on a real cluster (issue #29): sharded events stay off the cluster bus,
and a log listener following from a cursor loses nothing and gets nothing twice across a primary
failover and a live slot migration. One private cluster for the module (loopback ports)."""

from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pytest
import redis

from redis_session import RedisStore, Session, SessionLifecycleEvent
from redis_session.errors import SessionError
from tests.cluster.test_slot_migration import OpenSlot
from tests.conftest import unique_prefix
from tests.support.cluster import Cluster
from tests.support.figures import Recorder
from tests.support.servers import wait_until

pytestmark = [pytest.mark.cluster, pytest.mark.slow, pytest.mark.timeout(90)]
EVENTS = 60


def publish_sent(cluster: Cluster) -> int:
    """``cluster_stats_messages_publish_sent`` summed over every node."""
    total = 0
    for port in cluster.ports:
        node = redis.Redis(port=port, socket_timeout=2)
        try:
            total += int(node.cluster("INFO").get("cluster_stats_messages_publish_sent", 0))
        finally:
            node.close()
    return total


def ident(event: SessionLifecycleEvent) -> str:
    return f"{event.type}:{event.child_key or event.key}"


def drain(listener: Any, want: set[str], timeout: float) -> list[str]:
    """Events until every one of ``want`` arrived (or ``timeout``), then what is left over."""
    got: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not want <= set(got):
        event = listener.get(timeout=0.5)
        if event is not None:
            got.append(ident(event))
    while (event := listener.get(timeout=0.3)) is not None:  # anything more: a duplicate?
        got.append(ident(event))
    return got


def run_sharded(cluster: Cluster, sharded: bool) -> tuple[int, int, int]:
    """60 ends under a live and a log listener: (live delivered, log delivered, bus growth).
    The sessions exist first, so a sharded live listener knows their slots' channels."""
    store = RedisStore.from_url(
        cluster.url, prefix=unique_prefix(), cluster=True, sharded_events=sharded
    )
    keys = [f"s{i}" for i in range(EVENTS)]
    for k in keys:
        store.create(Session(key=k))
    with store.listen(since="latest", poll=0.2) as log, store.listen() as live:
        before = publish_sent(cluster)
        for k in keys:
            store.end(k)
        want = {f"end:{k}" for k in keys}
        logged = drain(log, want, 20)
        live_got = drain(live, want, 5)
        after = publish_sent(cluster)
    store.close()
    assert Counter(logged) == Counter(want), "the log listener lost or doubled an event"
    return len(set(live_got) & want), len(logged), after - before


def test_sharded_events_stay_off_the_cluster_bus(cluster: Cluster, figures: Recorder) -> None:
    live, logged, bus = run_sharded(cluster, sharded=True)
    live_b, logged_b, bus_b = run_sharded(cluster, sharded=False)
    print(
        f"\nsharded: log {logged}/{EVENTS}, live {live}/{EVENTS}, publish_sent +{bus}; "
        f"broadcast: log {logged_b}/{EVENTS}, live {live_b}/{EVENTS}, publish_sent +{bus_b}"
    )
    figures.record_resource(
        case=f"sharded_events=True on a {len(cluster.ports)}-node cluster: {EVENTS} end events "
        "(tests/cluster/test_event_log_cluster.py)",
        topology="cluster",
        outcome=f"a live listen() got {live} of {EVENTS} and a listen(since='latest') {logged} "
        f"of {EVENTS}; CLUSTER INFO cluster_stats_messages_publish_sent summed over the nodes "
        f"grew by {bus} (with sharded_events=False the same {EVENTS} events: +{bus_b}, one per "
        f"event per other node; live {live_b}, log {logged_b} of {EVENTS})",
        errors={},
        damaged=0,
        lost=2 * EVENTS - logged - logged_b,
        duplicated=0,  # run_sharded asserts the log listener got each event once
    )
    assert logged == logged_b == EVENTS
    assert live == live_b == EVENTS
    assert bus < EVENTS  # not one per event per node: SPUBLISH stays in the shard
    assert bus_b >= EVENTS * (len(cluster.ports) - 1)  # PUBLISH: every event to 5 other nodes


@dataclass
class Forker:
    """Forks children of ``root`` (its slot, its log) until stopped; sorts each outcome."""

    store: RedisStore
    root: str
    acked: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    longest: float = 0.0
    """The longest fork_child call, seconds (one that raised included)."""

    def run(self) -> None:
        for i in range(400):  # bounded
            if self.stop.is_set():
                return
            started = time.monotonic()
            try:
                child = self.store.fork_child(self.root, f"a{i}")
                self.acked.append(f"fork:{child.key}")
            except (redis.RedisError, OSError, SessionError) as exc:
                self.unknown.append(f"a{i}")
                self.errors.append(f"{type(exc).__name__}: {exc}")
            self.longest = max(self.longest, time.monotonic() - started)
            time.sleep(0.01)


def follow(store: RedisStore, work: Any, root: str) -> tuple[Forker, list[str]]:
    """A log listener from a cursor taken after the root's create, while a forker runs and
    ``work()`` disturbs the cluster; the listener is closed and resumed from its cursor
    halfway through the events. Returns the forker and every event the listeners delivered."""
    with store.listen(since="earliest", poll=0.2) as first:
        event = first.get(timeout=10)
        assert event is not None and ident(event) == f"create:{root}"
        cursor = first.cursor
    forker = Forker(store, root)
    thread = threading.Thread(target=forker.run, daemon=True)
    got: list[str] = []
    with store.listen(since=cursor, poll=0.2) as listener:
        thread.start()
        assert wait_until(lambda: len(forker.acked) >= 20, 20)
        work()
        assert wait_until(lambda: len(forker.acked) >= 60 or not thread.is_alive(), 30), (
            f"{len(forker.acked)} acknowledged, {len(forker.unknown)} unknown: "
            f"{forker.errors[:1]} {forker.errors[-1:]}"
        )
        forker.stop.set()
        thread.join(timeout=30)
        assert not thread.is_alive()
        for _ in range(len(forker.acked) // 2):  # half, then resume from the cursor
            event = listener.get(timeout=5)
            if event is not None:
                got.append(ident(event))
        cursor = listener.cursor
    with store.listen(since=cursor, poll=0.2) as resumed:
        got += drain(resumed, set(forker.acked) - set(got), 20)
    return forker, got


def tally(forker: Forker, got: list[str]) -> tuple[list[str], list[str]]:
    """The acknowledged forks whose event no listener delivered, and the events delivered
    more than once."""
    counts = Counter(got)
    return [e for e in forker.acked if e not in counts], [e for e, n in counts.items() if n > 1]


def record(figures: Recorder, fault: str, client: str, forker: Forker, got: list[str],
           outcome: str, topology: str = "cluster") -> None:  # fmt: skip
    """The row of a fork writer followed by listeners through ``fault``."""
    lost, doubled = tally(forker, got)
    errors = Counter(e.split(":", 1)[0] for e in forker.errors)
    seen = ", ".join(f"{name} x{n}" for name, n in errors.items()) or "no error"
    figures.record(
        fault,
        client=client,
        topology=topology,
        injections=1,
        outcome=f"a writer forking children of one root every 10 ms: {seen} "
        f"({len(forker.unknown)} unknown outcomes), longest fork_child call "
        f"{forker.longest:.2f} s; {outcome}; {len(forker.acked)} forks acknowledged, "
        f"{len(got)} fork events delivered, each acknowledged fork's "
        f"{'once' if not lost and not doubled else 'NOT once'}",
        acknowledged=len(forker.acked),
        lost=len(lost),
        duplicated=sum(Counter(got)[e] - 1 for e in doubled),
        unknown_outcome=len(forker.unknown),
    )


def check(forker: Forker, got: list[str]) -> None:
    lost, doubled = tally(forker, got)
    assert not doubled, f"delivered twice: {doubled[:5]}"
    assert not lost, f"{len(lost)} acknowledged forks without their event: {lost[:5]}"
    assert len(forker.acked) >= 60, forker.errors[:3]


def test_a_live_slot_migration_loses_no_event(cluster: Cluster, figures: Recorder) -> None:
    store = RedisStore.from_url(cluster.url, prefix=unique_prefix(), cluster=True)
    store.create(Session(key="root"))
    log = store._core.schema.log_of("root")
    opened: list[OpenSlot] = []

    open_for: list[float] = []

    def migrate() -> None:
        started = time.monotonic()
        slot = OpenSlot(cluster, log)
        opened.append(slot)
        slot.finish_after(0.5).join(timeout=30)
        open_for.append(time.monotonic() - started)

    try:
        forker, got = follow(store, migrate, "root")
    finally:
        for slot in opened:
            slot.close()
    print(
        f"\nslot migration: {len(forker.acked)} forks acknowledged, {len(got)} events "
        f"delivered, {opened[0].moved} keys moved, {len(forker.unknown)} unknown outcomes"
    )
    record(
        figures,
        f"live slot migration (MIGRATING/IMPORTING + MIGRATE, {opened[0].moved} keys) of the "
        f"slot of a session tree and its event log, on a {len(cluster.ports)}-node cluster "
        "(tests/cluster/test_event_log_cluster.py)",
        "listen(since=cursor), closed halfway and resumed from listener.cursor",
        forker,
        got,
        f"the slot open {open_for[0]:.2f} s (the log moved to its new node)",
    )
    assert opened[0].moved > 0
    check(forker, got)
    store.close()


def test_a_primary_failover_loses_no_acknowledged_event(
    cluster: Cluster, figures: Recorder
) -> None:
    # wait_replicas=1: a change is acknowledged once its replica has it, so the promoted
    # replica holds its log entry (without WAIT an async-replicated write can be lost).
    store = RedisStore.from_url(
        cluster.url, prefix=unique_prefix(), cluster=True, wait_replicas=1, failover_window=30
    )
    store.create(Session(key="root"))
    log = store._core.schema.log_of("root")
    moved: list[int] = []
    took: list[float] = []

    def failover() -> None:
        started = time.monotonic()
        client: Any = cluster.client()
        primary = client.get_node_from_key(log)
        client.close()
        for port in cluster.ports:
            node = redis.Redis(port=port, socket_timeout=2)
            info = node.info("replication")
            if info.get("role") == "slave" and int(info["master_port"]) == primary.port:
                node.cluster("FAILOVER")
                moved.append(port)
            node.close()

        def promoted() -> bool:
            node = redis.Redis(port=moved[0], socket_timeout=1)
            try:
                return node.info("replication").get("role") == "master"
            finally:
                node.close()

        assert moved and wait_until(promoted, 20, interval=0.1)
        took.append(time.monotonic() - started)

    forker, got = follow(store, failover, "root")
    print(
        f"\ncluster failover: {len(forker.acked)} forks acknowledged, {len(got)} events "
        f"delivered, {len(forker.unknown)} unknown outcomes {forker.errors[:2]}"
    )
    record(
        figures,
        "cluster primary failover: CLUSTER FAILOVER on the replica of the node holding the "
        "tree and its log (tests/cluster/test_event_log_cluster.py)",
        "listen(since=cursor) riding through, then resumed from listener.cursor; writer "
        "wait_replicas=1",
        forker,
        got,
        f"the replica promoted {took[0]:.2f} s after CLUSTER FAILOVER",
    )
    check(forker, got)
    store.close()
