"""A live listener (pub/sub, at-most-once) on a cluster follows the topology (issue #27): the node
it listens on removed from the cluster (``redis-cli --cluster del-node``, then stopped) or
killed, it hears the other nodes' events again within a bound, and counts and logs each move.
A blocking and an asyncio listener listen side by side; a probe publishes an event every 20 ms
(``PUBLISH`` on a healthy node, or ``SPUBLISH`` on a slot's owner) so that the time a listener
is deaf is measured, not the store's own stalls. A private 3-primary cluster per test.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest
import redis
from redis.cluster import RedisCluster

from redis_session import RedisStore, Session
from redis_session.aio import AsyncRedisStore
from tests.conftest import unique_prefix
from tests.support.cluster import Cluster, _cli_for, private_cluster
from tests.support.figures import Recorder
from tests.support.servers import wait_until

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(60)]
MOVE_BOUND = 2.5
"""Seconds within which a listener hears again after its node left: its ``poll`` (1 s), one
resubscription, and room for a loaded CI machine."""
TICK = 0.02
SECOND = 100_000
"""Where the numbers of a second publisher's probes begin."""


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    """A cluster of this test alone (it removes or kills a node)."""
    yield from private_cluster()


@dataclass
class Heard:
    """What one listener heard: probe number -> when (monotonic)."""

    name: str
    at: dict[int, float] = field(default_factory=dict)
    reconnects: int = 0
    error: BaseException | None = None
    twice: int = 0
    """Probes heard more than once."""

    def hear(self, number: int) -> None:
        if number in self.at:
            self.twice += 1
        else:
            self.at[number] = time.monotonic()


def _probe_number(key: str) -> int | None:
    return int(key[6:]) if key.startswith("probe-") else None


def listen_blocking(store: RedisStore, heard: Heard, stop: threading.Event) -> threading.Thread:
    listener = store.listen()  # subscribed before the thread starts

    def run() -> None:
        try:
            while not stop.is_set():
                event = listener.get(timeout=0.2)
                number = None if event is None else _probe_number(event.key)
                if number is not None:
                    heard.hear(number)
        except BaseException as exc:  # the test fails on it
            heard.error = exc
        finally:
            heard.reconnects = listener.reconnects
            listener.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def listen_async(url: str, prefix: str, sharded: bool, heard: Heard, stop: threading.Event,
                 ready: threading.Event) -> threading.Thread:  # fmt: skip
    async def main() -> None:
        store = AsyncRedisStore.from_url(url, prefix=prefix, cluster=True, sharded_events=sharded)
        listener = await store.listen()
        ready.set()
        try:
            while not stop.is_set():
                event = await listener.get(timeout=0.2)
                number = None if event is None else _probe_number(event.key)
                if number is not None:
                    heard.hear(number)
        finally:
            heard.reconnects = listener.reconnects
            await listener.aclose()
            await store.close()

    def run() -> None:
        try:
            asyncio.run(main())
        except BaseException as exc:
            heard.error = exc
            ready.set()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


@dataclass
class Probe:
    """Publishes a probe event every :data:`TICK` through each ``publish(payload)`` until
    stopped, numbered from its offset (0, :data:`SECOND`); ``sent`` maps each probe that was
    published to when."""

    publishers: list[tuple[int, Callable[[str], None]]]
    sent: dict[int, float] = field(default_factory=dict)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        for tick in range(5000):  # bounded: 100 s of ticks
            if self.stop.is_set():
                return
            for offset, publish in self.publishers:
                number = offset + tick
                try:
                    publish(json.dumps({"type": "create", "key": f"probe-{number}"}))
                    self.sent[number] = time.monotonic()
                except (redis.RedisError, OSError):
                    pass  # not published: not counted
            time.sleep(TICK)

    def of(self, offset: int) -> dict[int, float]:
        """The probes published by the publisher numbered from ``offset``."""
        return {n: t for n, t in self.sent.items() if offset <= n < offset + SECOND}


def resumed_after(heard: Heard, sent: dict[int, float], fault: float) -> float:
    """Seconds from ``fault`` to the first probe heard that was published after it."""
    after = [heard.at[n] for n, t in sent.items() if t >= fault and n in heard.at]
    return min(after) - fault if after else float("inf")


def missed_after(heard: Heard, sent: dict[int, float], since: float, until: float) -> list[int]:
    return [n for n, t in sent.items() if since <= t <= until and n not in heard.at]


@dataclass
class Setup:
    """A store with sessions, a blocking and an asyncio listener, and the node they use."""

    store: RedisStore
    admin: RedisCluster
    sync: Heard
    aio: Heard
    stop: threading.Event
    threads: list[threading.Thread]
    node_port: int
    channel: str

    def close(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=10)
        self.store.close()
        self.admin.close()
        assert not any(t.is_alive() for t in self.threads), "a listener did not stop"


@contextmanager
def probing(setup: Setup, probe: Probe) -> Iterator[None]:
    """``probe`` publishing from a thread; the block (the fault) runs once both listeners have
    heard 5 probes. Afterwards the probe stops, then the listeners (``setup.close``).
    """
    thread = threading.Thread(target=probe.run, daemon=True)
    try:
        thread.start()
        assert wait_until(lambda: len(setup.sync.at) >= 5 and len(setup.aio.at) >= 5, 10)
        yield
        probe.stop.set()
        thread.join(timeout=10)
    finally:
        probe.stop.set()
        setup.close()


def set_up(cluster: Cluster, sharded: bool) -> Setup:
    prefix = unique_prefix()
    store = RedisStore.from_url(cluster.url, prefix=prefix, cluster=True, sharded_events=sharded)
    admin: Any = cluster.client(socket_timeout=2)
    store.create(Session(key="root"))
    channel = store._core.schema.shard_channel_of("root") if sharded else store.events_channel
    node_port = int(admin.get_node_from_key(channel).port)
    stop, ready = threading.Event(), threading.Event()
    sync, aio = Heard("blocking"), Heard("asyncio")
    threads = [listen_blocking(store, sync, stop)]
    threads.append(listen_async(cluster.url, prefix, sharded, aio, stop, ready))
    assert ready.wait(15) and aio.error is None, aio.error
    return Setup(store, admin, sync, aio, stop, threads, node_port, channel)


def primaries(cluster: Cluster) -> list[int]:
    found = []
    for port in cluster.processes:
        node = redis.Redis(port=port, socket_timeout=2)
        try:
            if node.info("replication").get("role") == "master":
                found.append(port)
        finally:
            node.close()
    return found


def node_id(port: int) -> str:
    node: Any = redis.Redis(port=port, socket_timeout=2)
    try:
        return str(node.execute_command("CLUSTER MYID").decode())
    finally:
        node.close()


def publisher(cluster: Cluster, setup: Setup, sharded: bool, avoid: int) -> Callable[[str], None]:
    """Broadcast: PUBLISH on a primary other than ``avoid`` (every node hears it). Sharded:
    SPUBLISH on the owner of the root's slot, as the slot map says now."""
    if not sharded:
        port = next(p for p in primaries(cluster) if p != avoid)
        node = redis.Redis(port=port, socket_timeout=2)

        def publish(payload: str) -> None:
            node.publish(setup.channel, payload)

        return publish

    probe: Any = cluster.client(socket_timeout=2)

    def spublish(payload: str) -> None:
        owner = probe.get_node_from_key(setup.channel)
        try:
            probe.execute_command("SPUBLISH", setup.channel, payload, target_nodes=owner)
        except (redis.ResponseError, redis.ConnectionError):
            probe.nodes_manager.initialize()  # MOVED (the slot moved) or the owner died
            raise

    return spublish


def record(figures: Recorder, fault: str, probe: Probe, setup: Setup, outcome: str,
           lost: int, warnings: int) -> None:  # fmt: skip
    """One row for the blocking and the asyncio listener of a topology test."""
    figures.record(
        fault,
        client="store.listen() and asyncio store.listen() side by side, a probe event every "
        f"{TICK * 1000:.0f} ms",
        topology="cluster",
        injections=1,
        outcome=f"{outcome}; reconnects {setup.sync.reconnects} (blocking) and "
        f"{setup.aio.reconnects} (asyncio), {warnings} WARNING(s) logged; probes heard "
        f"{len(setup.sync.at):,} and {len(setup.aio.at):,} of {len(probe.sent):,} (the missed "
        "ones in the gaps: pub/sub is at-most-once, as documented); *lost*: probes missed "
        "after the bound",
        acknowledged=len(probe.sent),
        lost=lost,
        duplicated=setup.sync.twice + setup.aio.twice,
    )


def warnings_of(caplog: pytest.LogCaptureFixture) -> int:
    return sum("missed" in r.getMessage() for r in caplog.records if r.name == "redis_session")


def move_slots_away_and_delete(cluster: Cluster, port: int) -> float:
    """``rebalance`` every slot of node ``port`` to the others, then ``del-node`` (which
    resets the node: it stays up, alone). Returns when del-node returned."""
    cli, seed = _cli_for(cluster.binary), next(p for p in primaries(cluster) if p != port)
    node = node_id(port)
    subprocess.run(
        [cli, "--cluster", "rebalance", f"127.0.0.1:{seed}", "--cluster-weight", f"{node}=0",
         "--cluster-yes"], check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    subprocess.run(
        [cli, "--cluster", "del-node", f"127.0.0.1:{seed}", node],
        check=True, capture_output=True, timeout=30,
    )  # fmt: skip
    return time.monotonic()


@pytest.mark.parametrize("sharded", [False, True], ids=["broadcast", "sharded"])
def test_a_listener_whose_node_is_removed_hears_again_within_its_poll(
    cluster: Cluster, sharded: bool, caplog: pytest.LogCaptureFixture, figures: Recorder
) -> None:
    caplog.set_level(logging.WARNING, logger="redis_session")
    setup = set_up(cluster, sharded)
    probe = Probe([(0, publisher(cluster, setup, sharded, avoid=setup.node_port))])
    with probing(setup, probe):
        removed = move_slots_away_and_delete(cluster, setup.node_port)
        time.sleep(MOVE_BOUND + 1.0)
        cluster.kill(setup.node_port)  # then stopped, as an operator would
        stopped = time.monotonic()
        time.sleep(1.5)
    last = max(probe.sent.values())
    resumes = [resumed_after(h, probe.sent, removed) for h in (setup.sync, setup.aio)]
    record(
        figures,
        f"a live listener's node removed from the cluster ({'sharded' if sharded else 'broadcast'}"
        " events): its slots rebalanced away, redis-cli --cluster del-node, then the node "
        "stopped (tests/cluster/test_live_listener_topology.py)",
        probe,
        setup,
        f"heard again {resumes[0]:.2f} s (blocking) and {resumes[1]:.2f} s (asyncio) after "
        f"del-node (bound {MOVE_BOUND} s)",
        sum(len(missed_after(h, probe.sent, removed + MOVE_BOUND, last))
            for h in (setup.sync, setup.aio)),
        warnings_of(caplog),
    )  # fmt: skip
    for heard in (setup.sync, setup.aio):
        assert heard.error is None, f"{heard.name}: {heard.error!r}"
        resumed = resumed_after(heard, probe.sent, removed)
        lost = missed_after(heard, probe.sent, removed + MOVE_BOUND, last)
        print(
            f"\n{'sharded' if sharded else 'broadcast'} {heard.name}: heard again "
            f"{resumed:.2f}s after del-node; {len(heard.at)}/{len(probe.sent)} probes heard; "
            f"after the bound {len(lost)} missed; reconnects {heard.reconnects}"
        )
        assert resumed <= MOVE_BOUND, f"{heard.name} deaf {resumed:.2f}s after del-node"
        assert not lost, f"{heard.name} missed {len(lost)} probes after the bound"
        assert resumed_after(heard, probe.sent, stopped) <= MOVE_BOUND
        if not sharded:  # it moved off the removed node: a gap, counted
            assert heard.reconnects >= 1, heard.name
    assert warnings_of(caplog) == setup.sync.reconnects + setup.aio.reconnects


def test_a_listener_whose_node_dies_moves_to_a_live_node(
    cluster: Cluster, caplog: pytest.LogCaptureFixture, figures: Recorder
) -> None:
    caplog.set_level(logging.WARNING, logger="redis_session")
    setup = set_up(cluster, sharded=False)
    probe = Probe([(0, publisher(cluster, setup, False, avoid=setup.node_port))])
    with probing(setup, probe):
        cluster.kill(setup.node_port)
        killed = time.monotonic()
        time.sleep(3.0)  # well before the failover (node timeout 2 s, ~4 s): PUBLISH flows
    last = max(probe.sent.values())
    resumes = [resumed_after(h, probe.sent, killed) for h in (setup.sync, setup.aio)]
    record(
        figures,
        "a live listener's node SIGKILLed (broadcast events), before any failover "
        "(tests/cluster/test_live_listener_topology.py)",
        probe,
        setup,
        f"heard again {resumes[0]:.2f} s (blocking) and {resumes[1]:.2f} s (asyncio) after "
        "the kill (bound 1 s)",
        sum(len(missed_after(h, probe.sent, killed + 1.0, last)) for h in (setup.sync, setup.aio)),
        warnings_of(caplog),
    )
    for heard in (setup.sync, setup.aio):
        assert heard.error is None, f"{heard.name}: {heard.error!r}"
        resumed = resumed_after(heard, probe.sent, killed)
        lost = missed_after(heard, probe.sent, killed + 1.0, last)
        print(
            f"\nbroadcast {heard.name}: heard again {resumed:.2f}s after the kill; "
            f"{len(heard.at)}/{len(probe.sent)} probes heard; after 1 s {len(lost)} missed; "
            f"reconnects {heard.reconnects}"
        )
        assert resumed <= 1.0, f"{heard.name} deaf {resumed:.2f}s after its node died"
        assert not lost
        assert heard.reconnects == 1, heard.name
    assert warnings_of(caplog) == 2


def test_a_sharded_listener_is_deaf_to_a_dead_nodes_slots_only(
    cluster: Cluster, caplog: pytest.LogCaptureFixture, figures: Recorder
) -> None:
    caplog.set_level(logging.WARNING, logger="redis_session")
    setup = set_up(cluster, sharded=True)
    admin: Any = setup.admin
    victim = setup.node_port  # the root's slot owner: killed
    healthy = next(f"h{i}" for i in range(1000) if admin.get_node_from_key(
        setup.store._core.schema.shard_channel_of(f"h{i}")).port != victim)  # fmt: skip
    setup.store.create(Session(key=healthy))  # its slot's channel: the next look subscribes
    healthy_channel = setup.store._core.schema.shard_channel_of(healthy)
    node = admin.get_node_from_key(healthy_channel)
    healthy_node: Any = redis.Redis(host=node.host, port=node.port, socket_timeout=2)

    def on_healthy(payload: str) -> None:
        healthy_node.execute_command("SPUBLISH", healthy_channel, payload)

    probe = Probe([(0, on_healthy), (SECOND, publisher(cluster, setup, True, avoid=victim))])
    try:
        with probing(setup, probe):
            cluster.kill(victim)
            killed = time.monotonic()
            promoted = wait_until(lambda: victim not in _owner_ports(admin, setup.channel), 15, 0.1)
            failed_over = time.monotonic()
            assert promoted, "no failover within 15 s"
            time.sleep(MOVE_BOUND + 1.0)
    finally:
        healthy_node.close()
    healthy_sent, victim_sent = probe.of(0), probe.of(SECOND)
    last = max(probe.sent.values())
    both = (setup.sync, setup.aio)
    deafs = [_longest_silence(h, healthy_sent, killed, failed_over) for h in both]
    backs = [resumed_after(h, victim_sent, failed_over) for h in both]
    record(
        figures,
        "a sharded live listener: the owner of one of its slots SIGKILLed, its replica "
        "promoted (tests/cluster/test_live_listener_topology.py)",
        probe,
        setup,
        f"failover {failed_over - killed:.1f} s after the kill; meanwhile a healthy node's "
        f"slot: longest silence {deafs[0]:.2f} s (blocking), {deafs[1]:.2f} s (asyncio) "
        f"(bound 0.5 s); the dead node's slot heard again {backs[0]:.2f} s and "
        f"{backs[1]:.2f} s after the failover (bound {MOVE_BOUND} s)",
        sum(len(missed_after(h, victim_sent, failed_over + MOVE_BOUND, last)) for h in both),
        warnings_of(caplog),
    )
    for heard in (setup.sync, setup.aio):
        assert heard.error is None, f"{heard.name}: {heard.error!r}"
        deaf = _longest_silence(heard, healthy_sent, killed, failed_over)
        back = resumed_after(heard, victim_sent, failed_over)
        lost = missed_after(heard, victim_sent, failed_over + MOVE_BOUND, last)
        print(
            f"\nsharded {heard.name}: the healthy slot's probes while its node was dead "
            f"({failed_over - killed:.1f}s until the failover): longest silence {deaf:.2f}s; "
            f"the dead node's slot heard again {back:.2f}s after the failover; reconnects "
            f"{heard.reconnects}"
        )
        assert deaf <= 0.5, f"{heard.name}: deaf {deaf:.2f}s to a healthy node"
        assert back <= MOVE_BOUND, f"{heard.name}: the failed-over slot deaf {back:.2f}s"
        assert not lost
        assert heard.reconnects >= 1, heard.name  # the dead node's channels moved: a gap
    assert warnings_of(caplog) == setup.sync.reconnects + setup.aio.reconnects


def _owner_ports(admin: Any, channel: str) -> set[int]:
    admin.nodes_manager.initialize()
    return {int(admin.get_node_from_key(channel).port)}


def _longest_silence(heard: Heard, sent: dict[int, float], since: float, until: float) -> float:
    """The longest time between probes heard that were published in [since, until]."""
    times = sorted(heard.at[n] for n, t in sent.items() if since <= t <= until and n in heard.at)
    if not times:
        return float("inf")
    edges = [since, *times, until]
    return max(b - a for a, b in itertools.pairwise(edges))
