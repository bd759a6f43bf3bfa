"""A Sentinel failover (the primary killed, SIGKILL) under a log listener following from a cursor
(issue #29): every change acknowledged to the writer, before and after the promotion, has its
event delivered, none twice.

The condition: the writer uses ``wait_replicas=1``, so a change is acknowledged only once the
replica holds it (and its log entry); without WAIT an acknowledged write can be lost to
asynchronous replication when the primary goes away.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from redis_session import RedisStore, Session
from tests.cluster.test_event_log_cluster import Forker, check, follow, record
from tests.failover.test_failover import binary
from tests.support.figures import Recorder
from tests.support.sentinel import SentinelSetup, start_sentinel
from tests.support.servers import wait_until

pytestmark = [pytest.mark.sentinel, pytest.mark.slow, pytest.mark.timeout(90)]


@pytest.fixture
def sentinel_setup() -> Iterator[SentinelSetup]:
    setup = start_sentinel(binary())  # binary(): fails in CI when no server binary is there
    yield setup
    setup.stop()


def test_a_sentinel_failover_loses_no_acknowledged_event(
    sentinel_setup: SentinelSetup, figures: Recorder
) -> None:
    store = RedisStore.from_url(
        sentinel_setup.url, prefix="ev:", wait_replicas=1, wait_timeout=1, failover_window=30
    )
    store.create(Session(key="root"))
    old = sentinel_setup.primary_port
    took: list[float] = []

    def failover() -> None:  # the primary killed; it comes back empty, as a replica
        killed = time.monotonic()
        sentinel_setup.kill(old)
        assert wait_until(lambda: sentinel_setup.primary_port_now() != old, 30, interval=0.1)
        took.append(time.monotonic() - killed)
        sentinel_setup.restart_as_replica(old, sentinel_setup.primary_port_now())

    forker: Forker
    forker, got = follow(store, failover, "root")
    print(
        f"\nsentinel failover: {len(forker.acked)} forks acknowledged, {len(got)} events "
        f"delivered, {len(forker.unknown)} unknown outcomes {forker.errors[:2]}"
    )
    record(
        figures,
        "Sentinel: the primary SIGKILLed, the replica promoted, the old one back empty as a "
        "replica (tests/failover/test_event_log_failover.py)",
        "listen(since=cursor) riding through, then resumed from listener.cursor; writer "
        "wait_replicas=1 (without WAIT an acknowledged write can be lost to async replication)",
        forker,
        got,
        f"the sentinels named the replica primary {took[0]:.1f} s after the kill",
        topology="Sentinel",
    )
    assert sentinel_setup.primary_port_now() != old
    check(forker, got)
    store.close()
